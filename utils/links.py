"""Where the course lives, its package names and version, and the links that open a chapter in Colab or
ModelScope: all read from ``course.toml``, the one file a fork edits.

``course.toml`` sits at the root of a checkout, and inside the package folder of an installed wheel.
``python -m grader config --apply`` rewrites every notebook's links and setup cell from it, and
``python -m grader config --check`` (run by ``tests/test_notebooks.py``) fails while any disagree.
"""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from .i18n import EDITIONS, SOURCE_LANGUAGE, normalise

CONFIG_NAME = "course.toml"

class ConfigError(ValueError):
    """``course.toml`` is missing, unreadable or lacks a setting; the message names the file and the key."""


@dataclass(frozen=True)
class CourseConfig:
    """The settings of ``course.toml``."""

    version: str
    repo_url: str        # https://github.com/<owner>/<name>
    branch: str
    student_package: str     # the pip name of the student wheel
    import_name: str         # what notebooks import
    instructor_package: str  # the pip name of the instructor wheel
    mirror: str              # a package-index mirror to suggest when the default index is unreachable
    modelscope_edition: str = SOURCE_LANGUAGE  # the edition ModelScope's setup line opens ([editions])
    chapters: dict[str, str] = field(default_factory=dict)   # assignment id -> title, in course order

    @property
    def github_repo(self) -> str:
        """``owner/name`` of a GitHub URL (Colab's links need it)."""
        prefix = "https://github.com/"
        if not self.repo_url.startswith(prefix):
            raise ConfigError(f"[repository] url must start with {prefix} (Colab opens notebooks from GitHub), "
                              f"not {self.repo_url!r}")
        return self.repo_url[len(prefix):].rstrip("/").removesuffix(".git")

    @property
    def clone_folder(self) -> str:
        """The folder name a clone of the repository gets."""
        return self.repo_url.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1]


def config_path() -> Path:
    """``course.toml`` next to this package (an installed wheel) or one level up (a checkout)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / CONFIG_NAME, here.parent / CONFIG_NAME):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"no {CONFIG_NAME} in {here} or {here.parent}: the course helpers need it")


def _chapters(path: Path, data: dict) -> dict[str, str]:
    """The ``[chapters]`` table: id -> title, in the file's order; an id must be a folder-safe name that
    starts with its two-digit number (``03_vector_add``)."""
    table = data.get("chapters")
    if not isinstance(table, dict) or not table:
        raise ConfigError(f"{path}: [chapters] must list the chapters, one `id = \"title\"` line each")
    for chapter, title in table.items():
        if not (len(chapter) > 3 and chapter[:2].isdigit() and chapter[2] == "_" and chapter[3:].isidentifier()):
            raise ConfigError(f"{path}: [chapters] id {chapter!r} must look like 03_vector_add")
        if not isinstance(title, str) or not title.strip():
            raise ConfigError(f"{path}: [chapters] {chapter} needs a title")
    return {chapter: title.strip() for chapter, title in table.items()}


def _edition(path: Path, data: dict, platform: str) -> str:
    """The edition ``[editions] <platform>`` names (English when the table or key is absent)."""
    value = data.get("editions", {}).get(platform, SOURCE_LANGUAGE)
    try:
        return normalise(value)
    except ValueError as exc:
        raise ConfigError(f"{path}: [editions] {platform}: {exc}") from None


def read_config(path: Path | None = None) -> CourseConfig:
    """Parse ``course.toml`` (by default the one :func:`config_path` finds); a clear error names what is wrong."""
    path = path or config_path()
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from None

    def setting(table: str, key: str) -> str:
        value = data.get(table, {}).get(key)
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{path}: [{table}] {key} must be a non-empty string")
        return value.strip()

    config = CourseConfig(version=setting("course", "version"), repo_url=setting("repository", "url"),
                          branch=setting("repository", "branch"),
                          student_package=setting("packages", "student"),
                          import_name=setting("packages", "import_name"),
                          instructor_package=setting("packages", "instructor"),
                          mirror=setting("install", "mirror"), chapters=_chapters(path, data),
                          modelscope_edition=_edition(path, data, "modelscope"))
    if not config.import_name.isidentifier():
        raise ConfigError(f"{path}: [packages] import_name must be a Python identifier, not {config.import_name!r}")
    config.github_repo  # noqa: B018 -- validates the URL
    return config


CONFIG = read_config()
#: The nbgrader assignment ids, in course order, and their titles (``course.toml``'s ``[chapters]``); each id is
#: also the chapter's folder and notebook name.
CHAPTERS: dict[str, str] = CONFIG.chapters
VERSION = CONFIG.version
GITHUB_REPO = CONFIG.github_repo
BRANCH = CONFIG.branch


def notebook_path(assignment: str, language: str = SOURCE_LANGUAGE) -> str:
    """The student notebook of a chapter in the edition of ``language``, relative to the repository root:
    ``notebooks/<id>/<id>.ipynb``, the Chinese edition ``notebooks/zh/<id>/<id>.ipynb``."""
    folder = EDITIONS[normalise(language)]
    return f"notebooks/{folder + '/' if folder else ''}{assignment}/{assignment}.ipynb"


def colab_url(assignment: str, config: CourseConfig = CONFIG, language: str = SOURCE_LANGUAGE) -> str:
    return (f"https://colab.research.google.com/github/{config.github_repo}/blob/{config.branch}/"
            f"{notebook_path(assignment, language)}")


def modelscope_url(assignment: str, language: str = SOURCE_LANGUAGE) -> str:
    """ModelScope opens notebooks from its own instances: the link starts one (CPU or A10), the notebook's
    setup cell installs the helpers into it; the fragment names the notebook to open."""
    return f"https://modelscope.cn/my/mynotebook/preset#{notebook_path(assignment, language)}"


def badges(assignment: str, config: CourseConfig = CONFIG, language: str = SOURCE_LANGUAGE) -> str:
    """The markdown line of badges that heads a chapter notebook (of the edition of ``language``) and its
    README row."""
    return (f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"({colab_url(assignment, config, language)}) "
            f"[![Open in ModelScope](https://img.shields.io/badge/Open%20in-ModelScope-624aff)]"
            f"({modelscope_url(assignment, language)})")


def copy_helpers(dest: Path) -> Path:
    """Copy this package, under the name it is imported by, and its ``course.toml`` into ``dest``, so that
    ``dest`` on ``sys.path`` imports the same helpers (the grading sandbox does this); return the copy."""
    package = Path(__file__).resolve().parent
    copy = dest / __package__.split(".")[0]
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "notebooks"))
    if not (copy / CONFIG_NAME).exists():
        shutil.copy2(config_path(), copy / CONFIG_NAME)
    return copy


def notebooks_command(config: CourseConfig = CONFIG) -> str:
    """The console command of the student wheel that copies its notebooks out (named after the package)."""
    return f"{config.student_package}-notebooks"


NOTEBOOKS_FOLDER = "course-notebooks"


def copy_notebooks(dest: Path) -> list[Path]:
    """Copy the student notebooks that come with these helpers (inside the package of a wheel, or a
    checkout's ``notebooks/``) into ``dest/<chapter>/``, and each other edition into ``dest/<edition>/<chapter>/``
    (the Chinese one into ``dest/zh/``); return the files written. A file that is already
    there is kept: a student's work is never overwritten."""
    here = Path(__file__).resolve().parent
    source = next((f for f in (here / "notebooks", here.parent / "notebooks") if f.is_dir()), None)
    if source is None:
        raise FileNotFoundError(f"no notebooks next to {here}: install the student package with pip")
    written = []
    for notebook in sorted(p for p in source.rglob("*.ipynb") if p.stem == p.parent.name):   # every edition
        target = dest / notebook.relative_to(source)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(notebook, target)
            written.append(target)
    return written


def notebooks_main(argv: list[str] | None = None) -> int:
    """``<student package>-notebooks [FOLDER]``: copy the chapters into FOLDER (default ./course-notebooks)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(f"usage: {notebooks_command()} [FOLDER]   (copies the chapter notebooks into FOLDER, "
              f"default ./{NOTEBOOKS_FOLDER})", file=sys.stderr)
        return 2
    dest = Path(args[0] if args else NOTEBOOKS_FOLDER).resolve()
    try:
        written = copy_notebooks(dest)
    except OSError as exc:
        print(f"could not copy the notebooks: {exc}", file=sys.stderr)
        return 1
    print(f"{len(written)} notebook(s) copied into {dest}" + ("" if written else " (all were there already)"))
    print(f"open one with Jupyter (for example {dest / '03_vector_add' / '03_vector_add.ipynb'}, or its Chinese "
          f"edition {dest / 'zh' / '03_vector_add' / '03_vector_add.ipynb'}) and run its first cell")
    return 0
