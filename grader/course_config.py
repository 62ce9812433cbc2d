"""``python -m grader config``: make every notebook, the README and the student guide agree with ``course.toml``.

    python -m grader config --check    # list every place that disagrees with course.toml; exit 1 if any
    python -m grader config --apply    # rewrite them

What it keeps in agreement, in ``solutions/`` and ``notebooks/``: each chapter's header links (Colab,
ModelScope) and its setup cell (:func:`triton_course.bootstrap.setup_cell`, which names the package and the
version it serves); in ``README.md``: each chapter's links; in ``README.md`` and ``docs/students.md``: the
block between ``<!-- course-setup:begin -->`` and ``<!-- course-setup:end -->`` (how a student gets set
up) and every GitHub repository URL; and ``pyproject.toml``'s version. After ``--apply`` changed ``solutions/``, run
``python -m grader release`` so that the student notebooks' checksums follow.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.course import CHAPTERS, REPO_ROOT
from triton_course.bootstrap import setup_cell
from triton_course.i18n import EDITIONS, SOURCE_LANGUAGE, normalise
from triton_course.links import (NOTEBOOKS_FOLDER, ConfigError, CourseConfig, badges, notebook_path,
                                 notebooks_command, read_config)

BADGES = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\((?P<colab>[^)]*)\)\s*"
                    r"\[!\[Open in ModelScope\]\([^)]*\)\]\((?P<modelscope>[^)]*)\)")
BLOCK = re.compile(r"(<!-- course-setup:begin[^>]*-->\n)(.*?)(<!-- course-setup:end -->)", re.S)
PROJECT_VERSION = re.compile(r'^(version\s*=\s*")([^"]*)(")', re.M)
#: The documents holding a setup block, and the language each is written in.
SETUP_DOCS = {"README.md": "en", "docs/students.md": "en", "docs/zh/README.md": "zh_CN", "docs/zh/students.md": "zh_CN"}
GITHUB_URL = re.compile(r"https://github\.com/[\w.-]+/[\w.-]+")


@dataclass(frozen=True)
class Disagreement:
    """One place that disagrees with ``course.toml``."""

    path: Path
    what: str


def setup_block(config: CourseConfig, language: str = SOURCE_LANGUAGE) -> str:
    """How a student gets set up on each platform (the generated block of the README and student guide, in
    the language of the document that holds it). ModelScope's line opens the edition ``[editions]`` names."""
    pin = f"{config.student_package}=={config.version}"
    copy = f"{notebooks_command(config)}"
    chapter = f"{NOTEBOOKS_FOLDER}/<id>/<id>.ipynb"
    zh_chapter = f"{NOTEBOOKS_FOLDER}/zh/<id>/<id>.ipynb"
    modelscope = zh_chapter if config.modelscope_edition == "zh_CN" else chapter
    if normalise(language) == "zh_CN":
        return (f"* **Colab：** 点击章节表中任一章的 *Open in Colab* 链接，运行第一个单元格：它会安装课程助手"
                f"（`pip install {pin}`），并选用 T4 或 CPU。\n"
                f"* **ModelScope（魔搭）**（在 GitHub 可能无法访问的中国大陆也可用）：在实例的终端中运行 "
                f"`pip install {pin} && {copy}`（pip 会使用实例配置的镜像；若未配置，加上 `-i {config.mirror}`），"
                f"然后打开 `{modelscope}` 并运行第一个单元格。\n"
                f"* **本地电脑**（Linux 或 WSL2，Python 3.11+，GPU 可有可无）：`pip install {pin} jupyterlab && "
                f"{copy}`，然后运行 `jupyter lab`，打开中文版 `{zh_chapter}`（英文版为 `{chapter}`）。\n")
    return (f"* **Colab:** click a chapter's *Open in Colab* link and run its first cell: it installs the course "
            f"(`pip install {pin}`) and picks the T4 or the CPU.\n"
            f"* **ModelScope** (also in mainland China, where GitHub may be out of reach): in a terminal of your "
            f"instance run `pip install {pin} && {copy}` (pip uses the instance's mirror; add "
            f"`-i {config.mirror}` where none is set), then open `{modelscope}` and run its first cell"
            + (f" (the Chinese edition; the English one is `{chapter}`).\n" if modelscope == zh_chapter else ".\n") +
            f"* **A laptop** (Linux or WSL2, Python 3.11+, a GPU is optional): `pip install {pin} jupyterlab && "
            f"{copy}`, then `jupyter lab` and open `{chapter}` (the Chinese edition: `{zh_chapter}`).\n")


def _chapter_of(path: Path) -> str | None:
    return path.stem if path.stem in CHAPTERS and path.parent.name == path.stem else None


def _fixed_notebook(path: Path, config: CourseConfig) -> tuple[nbformat.NotebookNode, list[str]]:
    """The notebook as ``config`` wants it, and what differed."""
    nb = nbformat.read(path, as_version=4)
    chapter = _chapter_of(path)
    problems = []
    header = nb.cells[0] if nb.cells and nb.cells[0].cell_type == "markdown" else None
    if chapter and header is not None:
        found = BADGES.search(header.source)
        want = badges(chapter, config)
        if found is None:
            problems.append("the header has no Colab/ModelScope links")
        elif found.group(0) != want:
            problems.append("the header's Colab/ModelScope links")
            header.source = header.source[:found.start()] + want + header.source[found.end():]
    first_code = next((c for c in nb.cells if c.cell_type == "code"), None)
    if first_code is None:
        problems.append("no setup cell (no code cell at all)")
    elif first_code.source != setup_cell(config):
        problems.append("the setup cell")
        first_code.source = setup_cell(config)
    return nb, problems


#: A row of the README's table of chapters: ``| 03 | [Title](notebooks/03_x/03_x.ipynb) | links | [中文版](...) links |``.
CHAPTER_ROW = re.compile(r"^\| \d\d \| \[[^\]]*\]\(notebooks/[^)]*\.ipynb\) \|.*\|$", re.M)


def _readme_row(chapter: str, config: CourseConfig) -> str:
    """The README's row of ``chapter``: its English notebook and links, then the Chinese edition's."""
    return (f"| {chapter[:2]} | [{CHAPTERS[chapter]}]({notebook_path(chapter)}) | {badges(chapter, config)} | "
            f"[中文版]({notebook_path(chapter, 'zh_CN')}) {badges(chapter, config, 'zh_CN')} |")


#: A row of the Chinese README's table (docs/zh/README.md): ``| 03 | [标题](../../notebooks/zh/...) | links | [English](...) |``.
ZH_CHAPTER_ROW = re.compile(r"^\| \d\d \| \[[^\]]*\]\(\.\./\.\./notebooks/zh/[^)]*\.ipynb\) \|.*\|$", re.M)


def _zh_readme_row(chapter: str, config: CourseConfig) -> str:
    """The Chinese README's row of ``chapter`` (its title in English until a translator writes the Chinese)."""
    return (f"| {chapter[:2]} | [{CHAPTERS[chapter]}](../../{notebook_path(chapter, 'zh_CN')}) | "
            f"{badges(chapter, config, 'zh_CN')} | [English](../../{notebook_path(chapter)}) |")


def _with_chapter_row(text: str, chapter: str, config: CourseConfig, language: str = SOURCE_LANGUAGE) -> str:
    """``text`` with a row for ``chapter`` after the last row of its table of chapters (unchanged without one)."""
    pattern, row = (CHAPTER_ROW, _readme_row) if language == SOURCE_LANGUAGE else (ZH_CHAPTER_ROW, _zh_readme_row)
    rows = list(pattern.finditer(text))
    if not rows:
        return text
    return text[:rows[-1].end()] + "\n" + row(chapter, config) + text[rows[-1].end():]


def _badges_of(chapter: str, language: str) -> re.Pattern:
    """The badges of one edition of ``chapter``, whatever their repository and branch."""
    path = re.escape(notebook_path(chapter, language))
    return re.compile(BADGES.pattern.replace(r"(?P<colab>[^)]*)", rf"(?P<colab>[^)]*/blob/[^/)]*/{path})")
                      .replace(r"(?P<modelscope>[^)]*)", rf"(?P<modelscope>[^)#]*#{path})"))


def _fixed_links(text: str, config: CourseConfig, languages: tuple[str, ...]) -> tuple[str, list[str]]:
    """Each chapter's badges of each of ``languages`` as ``config`` makes them; a missing English row is added."""
    problems = []
    for chapter in CHAPTERS:
        for language in languages:
            found = _badges_of(chapter, language).search(text)
            if found is None and language == languages[0]:
                added = _with_chapter_row(text, chapter, config, language)  # a chapter added since: its row joins
                if added != text:
                    problems.append(f"no row for {chapter}")
                    text = added
                    continue
            if found is None:
                problems.append(f"no {language} links of {chapter}")
                continue
            want = badges(chapter, config, language)
            if found.group(0) != want:
                problems.append(f"the links of {chapter}" + ("" if language == SOURCE_LANGUAGE else f" ({language})"))
                text = text[:found.start()] + want + text[found.end():]
    return text, problems


def _fixed_readme_links(text: str, config: CourseConfig) -> tuple[str, list[str]]:
    return _fixed_links(text, config, tuple(EDITIONS))


def _fixed_zh_readme_links(text: str, config: CourseConfig) -> tuple[str, list[str]]:
    return _fixed_links(text, config, ("zh_CN",))


def _fixed_setup_block(text: str, config: CourseConfig, language: str = SOURCE_LANGUAGE) -> tuple[str, list[str]]:
    found = BLOCK.search(text)
    if found is None:
        return text, ["no <!-- course-setup:begin --> ... <!-- course-setup:end --> block"]
    want = setup_block(config, language)
    if found.group(2) == want:
        return text, []
    return text[:found.start(2)] + want + text[found.end(2):], ["the setup block"]


def _fixed_repository_urls(text: str, config: CourseConfig) -> tuple[str, list[str]]:
    """Every GitHub repository URL of a doc is the course's (the docs name no other repository)."""
    stale = sorted({u for u in GITHUB_URL.findall(text) if u.rstrip("/").removesuffix(".git") != config.repo_url})
    return GITHUB_URL.sub(config.repo_url, text) if stale else text, [f"the repository URL {u}" for u in stale]


def _fixed_doc(text: str, config: CourseConfig, language: str = SOURCE_LANGUAGE) -> tuple[str, list[str]]:
    text, block = _fixed_setup_block(text, config, language)
    text, urls = _fixed_repository_urls(text, config)
    return text, block + urls


def _fixed_pyproject(text: str, config: CourseConfig) -> tuple[str, list[str]]:
    found = PROJECT_VERSION.search(text)
    if found is None:
        return text, ["no version line"]
    if found.group(2) == config.version:
        return text, []
    return text[:found.start(2)] + config.version + text[found.end(2):], [f"version {found.group(2)}"]


def reconcile(root: Path = REPO_ROOT, *, write: bool) -> list[Disagreement]:
    """Every place under ``root`` that disagrees with ``root/course.toml``; with ``write``, fix each."""
    config = read_config(root / "course.toml")
    found: list[Disagreement] = []
    for folder in ("solutions", "notebooks"):
        for path in sorted((root / folder).glob("*/*.ipynb")):
            if _chapter_of(path) is None:
                continue
            nb, problems = _fixed_notebook(path, config)
            found += [Disagreement(path, p) for p in problems]
            if write and problems:
                nbformat.write(nb, path)
    text_fixers = [("README.md", _fixed_readme_links), ("docs/zh/README.md", _fixed_zh_readme_links),
                   *((doc, lambda text, config, lang=lang: _fixed_doc(text, config, lang))
                     for doc, lang in SETUP_DOCS.items()),
                   ("pyproject.toml", _fixed_pyproject)]
    for name, fixer in text_fixers:
        path = root / name
        if not path.exists():
            found.append(Disagreement(path, "missing"))
            continue
        text, problems = fixer(path.read_text(), config)
        found += [Disagreement(path, p) for p in problems]
        if write and problems and text != path.read_text():
            path.write_text(text)
    return found


def cmd_config(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve() if args.root else REPO_ROOT
    try:
        found = reconcile(root, write=args.apply)
    except ConfigError as exc:
        print(exc)
        return 2
    for d in found:
        verb = "rewrote" if args.apply else "disagrees with course.toml:"
        print(f"{verb} {d.path.relative_to(root)}: {d.what}")
    if args.apply:
        unfixable = [d for d in reconcile(root, write=False)]
        for d in unfixable:
            print(f"cannot fix {d.path.relative_to(root)}: {d.what}")
        if any(d.path.is_relative_to(root / "solutions") for d in found):
            print("solutions/ changed: run `python -m grader release` to regenerate the student notebooks")
        return 1 if unfixable else 0
    if found:
        print("run `python -m grader config --apply`")
    else:
        print("everything agrees with course.toml")
    return 1 if found else 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``config`` on the grader's command line."""
    p = subparsers.add_parser("config", help="make notebooks, README and docs agree with course.toml")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="list what disagrees; exit 1 if anything does")
    mode.add_argument("--apply", action="store_true", help="rewrite what disagrees")
    p.add_argument("--root", help="the checkout (default: the one the grader runs from)")
    p.set_defaults(fn=cmd_config)
