"""The course's other editions: each chapter's prose translated, its code shared, nothing able to go stale.

A chapter's translation is a gettext catalogue beside it, ``solutions/<id>/translations/<language>.po``,
read and written with Babel. One message per markdown cell of the English *student* notebook (what
``python -m grader release`` makes of the solution notebook): its context (``msgctxt``) is the cell id, its
``msgid`` the English text, its ``msgstr`` the translation, and an extracted comment records the SHA-256 of
the English it translates. Code cells are never translated: the other edition's notebook is the English
student notebook with its markdown replaced, its setup cell generated for the language
(:func:`triton_course.bootstrap.setup_cell`), its header links pointing at that edition, and the chapter's
glossary (``translations/glossary.<language>.md``) as a last cell. Grade ids, hidden tests, locked code
cells and their checksums are the English ones.

When an English cell changes, its message no longer matches it: :func:`problems` names it (stale), and
``python -m grader translations update`` merges the new English in (Babel marks the old translation
*fuzzy*, kept for the translator to revise). The test suite fails on a missing, fuzzy or stale message, on
a fenced code block the translation changed, and on a lost ``[[badges]]`` token.

    python -m grader translations update [ID ...]   add new cells' English, mark changed ones fuzzy; compile
                                                    the helpers' catalogues
    python -m grader translations check [ID ...]    list every missing, fuzzy or stale message; exit 1 if any
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
from babel.messages.catalog import Catalog
from babel.messages.pofile import read_po

from grader.course import CHAPTERS, NOTEBOOKS, REPO_ROOT, assignments, chapter_folder
from grader.message_catalogues import catalogue_problems, po_bytes
from triton_course.bootstrap import setup_cell
from triton_course.i18n import EDITIONS, SOURCE_LANGUAGE
from triton_course.links import CONFIG, CourseConfig, badges

#: The editions translated from English: gettext language -> folder of ``notebooks/``.
TRANSLATED = {language: folder for language, folder in EDITIONS.items() if language != SOURCE_LANGUAGE}
#: Stands for the header's Colab/ModelScope links in a message: each edition gets links to its own notebook.
BADGES_TOKEN = "[[badges]]"
BADGES = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)\s*\[!\[Open in ModelScope\]\([^)]*\)\]\([^)]*\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
HASH_PREFIX = "en-sha256: "
GLOSSARY_HEADING = {"zh_CN": "## 本章术语表"}
GLOSSARY_INTRO = {"zh_CN": "本章用到的术语，中英对照（全课程的术语表见 `docs/zh/glossary.md`）。"}
#: The cell id of the glossary cell appended to a translated notebook.
GLOSSARY_CELL_ID = "glossary"


@dataclass(frozen=True)
class Problem:
    """One message of one chapter's catalogue that is not ready."""

    chapter: str
    cell: str
    what: str

    def __str__(self) -> str:
        return f"{self.chapter} cell {self.cell}: {self.what}"


def catalogue_path(chapter: str, language: str) -> Path:
    return chapter_folder(chapter) / "translations" / f"{language}.po"


def glossary_path(chapter: str, language: str) -> Path:
    return chapter_folder(chapter) / "translations" / f"glossary.{language}.md"


def digest(text: str) -> str:
    """The SHA-256 (hex) of an English text, recorded beside its translation."""
    return hashlib.sha256(text.encode()).hexdigest()


def english_cells(chapter: str, notebooks: Path = NOTEBOOKS) -> list[tuple[str, str]]:
    """(cell id, English text) of every markdown cell of the chapter's English student notebook, the header's
    links replaced by :data:`BADGES_TOKEN`."""
    nb = nbformat.read(notebooks / chapter / f"{chapter}.ipynb", as_version=4)
    return [(cell.id, BADGES.sub(BADGES_TOKEN, cell.source, count=1))
            for cell in nb.cells if cell.cell_type == "markdown" and cell.source.strip()]


def template(chapter: str, language: str, notebooks: Path = NOTEBOOKS) -> Catalog:
    """A catalogue of the chapter's English cells with no translations."""
    catalog = Catalog(locale=language, project=f"{chapter} ({CHAPTERS.get(chapter, chapter)})",
                      version=CONFIG.version, fuzzy=False)
    for cell_id, text in english_cells(chapter, notebooks):
        catalog.add(text, context=cell_id, auto_comments=[HASH_PREFIX + digest(text)])
    return catalog


def read_catalogue(path: Path) -> Catalog:
    with path.open("rb") as f:
        return read_po(f, abort_invalid=True)


HEADER = ("# The {language} translation of chapter {chapter}'s prose, one message per markdown cell of its English\n"
          "# student notebook: msgctxt is the cell id, msgid the English, the en-sha256 comment its hash.\n"
          "# Code cells are never translated. After the English changes: python -m grader translations update {chapter}")


def write_catalogue(catalog: Catalog, path: Path) -> None:
    """Write ``catalog`` in the course's PO form (:func:`grader.message_catalogues.po_bytes`), in cell order."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = HEADER.format(language=path.stem, chapter=path.parent.parent.name)
    path.write_bytes(po_bytes(catalog, header, sort_output=False, include_lineno=True))


def update(chapter: str, language: str, notebooks: Path = NOTEBOOKS, catalogue: Path | None = None) -> Catalog:
    """Merge the chapter's current English into its catalogue (new cells empty, changed ones fuzzy, removed
    ones dropped); write and return it."""
    path = catalogue or catalogue_path(chapter, language)
    fresh = template(chapter, language, notebooks)
    if path.exists():
        catalog = read_catalogue(path)
        catalog.update(fresh, update_creation_date=False)
    else:
        catalog = fresh
    write_catalogue(catalog, path)
    return catalog


def fences(text: str) -> list[str]:
    """The fenced code blocks of a markdown text: a translation keeps them byte for byte."""
    return FENCE.findall(text)


def problems(chapter: str, language: str, notebooks: Path = NOTEBOOKS, catalogue: Path | None = None) -> list[Problem]:
    """Every cell whose translation is missing, fuzzy, stale (translates other English), or damaged."""
    path = catalogue or catalogue_path(chapter, language)
    if not path.exists():
        return [Problem(chapter, "*", f"no catalogue {path}: run "
                                      f"`python -m grader translations update {chapter}`")]
    catalog = read_catalogue(path)
    by_cell = {m.context: m for m in catalog if m.id and m.context}
    found = []
    for cell_id, english in english_cells(chapter, notebooks):
        message = by_cell.get(cell_id)
        if message is None:
            found.append(Problem(chapter, cell_id, "not in the catalogue (a new cell)"))
        elif message.id != english or HASH_PREFIX + digest(english) not in message.auto_comments:
            found.append(Problem(chapter, cell_id, "stale: the English cell changed since it was translated"))
        elif message.fuzzy:
            found.append(Problem(chapter, cell_id, "fuzzy: the English changed; revise the translation and "
                                                   "remove the fuzzy flag"))
        elif not message.string:
            found.append(Problem(chapter, cell_id, "not translated"))
        else:
            if (BADGES_TOKEN in english) != (BADGES_TOKEN in message.string):
                found.append(Problem(chapter, cell_id, f"the translation must keep {BADGES_TOKEN} where the "
                                                       "English has it"))
            if fences(english) != fences(message.string):
                found.append(Problem(chapter, cell_id, "a fenced code block differs from the English one (code "
                                                       "is never translated)"))
    known = {cell_id for cell_id, _ in english_cells(chapter, notebooks)}
    found += [Problem(chapter, cell, "no such markdown cell in the English notebook") for cell in by_cell
              if cell not in known]
    if not path.with_name(f"glossary.{language}.md").exists():
        found.append(Problem(chapter, "*", f"no glossary {path.with_name(f'glossary.{language}.md')}"))
    return found


#: Whole documents translated: translation -> the English it translates (the students' part of the README).
DOCUMENTS = {"docs/zh/students.md": "docs/students.md", "docs/zh/README.md": "README.md"}
DOC_HEADER = re.compile(r"^<!-- translated from (?P<source>\S+) en-sha256: (?P<hash>[0-9a-f]{64}) -->\n")
#: What ``python -m grader config`` generates in a document (setup block, chapter links): left out of its hash,
#: so that a new version or repository URL does not make every translation stale.
GENERATED = re.compile(r"(<!-- course-setup:begin[^>]*-->\n).*?(<!-- course-setup:end -->)", re.S)
LINKS = re.compile(r"\[!\[Open [^\]]*\]\([^)]*\)\]\([^)]*\)|https://github\.com/[\w.-]+/[\w.-]+")


#: The sections of an English document that its translation covers (the students' part of the README); a
#: document not listed is translated whole.
TRANSLATED_SECTIONS = {"README.md": ("", "Chapters", "Which GPU", "Credits")}


def students_part(source: str, text: str) -> str:
    """What of the English document ``source`` its translation translates: the sections
    :data:`TRANSLATED_SECTIONS` names ("" is the text before the first ``## `` heading), or all of it."""
    wanted = TRANSLATED_SECTIONS.get(source)
    if wanted is None:
        return text
    sections = re.split(r"(?m)^(?=## )", text)
    return "".join(part for part in sections
                   if (part[3:].split("\n", 1)[0].strip() if part.startswith("## ") else "") in wanted)


def document_digest(text: str, source: str = "") -> str:
    """The SHA-256 of (the translated part of) an English document, without what ``grader config`` generates."""
    return digest(LINKS.sub("", GENERATED.sub(r"\1\2", students_part(source, text))))


def document_header(source: str, root: Path = REPO_ROOT) -> str:
    """The first line of a translated document: which English file, and the hash of what it says."""
    return f"<!-- translated from {source} en-sha256: {document_digest((root / source).read_text(), source)} -->\n"


def document_problems(root: Path = REPO_ROOT) -> list[str]:
    """Every translated document that is missing, or translates other English than its source says now."""
    found = []
    for translation, source in DOCUMENTS.items():
        path = root / translation
        if not path.exists():
            found.append(f"{translation}: missing (the translation of {source})")
            continue
        head = DOC_HEADER.match(path.read_text())
        if head is None or head["source"] != source:
            found.append(f"{translation}: its first line must be {document_header(source, root).strip()}")
        elif head["hash"] != document_digest((root / source).read_text(), source):
            found.append(f"{translation}: stale: {source} changed since it was translated (revise it, then set "
                         f"its first line to {document_header(source, root).strip()})")
    return found


def glossary_rows(path: Path) -> list[tuple[str, str, str]]:
    """(English, translation, note) of each row of a glossary's markdown table."""
    rows = []
    for line in path.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.lstrip().startswith("|") and len(cells) >= 2 and not set(cells[0]) <= set("-: "):
            rows.append((cells[0], cells[1], cells[2] if len(cells) > 2 else ""))
    return rows[1:]   # the first row is the table's heading


def translated_notebook(chapter: str, language: str, english: nbformat.NotebookNode,
                        config: CourseConfig = CONFIG) -> nbformat.NotebookNode:
    """The edition of ``language`` of the English student notebook ``english`` (which is left unchanged)."""
    from nbgrader.utils import compute_checksum

    catalog = read_catalogue(catalogue_path(chapter, language))
    by_cell = {m.context: m for m in catalog if m.id and m.context}
    nb = copy.deepcopy(english)
    links = badges(chapter, config, language)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.id in by_cell and by_cell[cell.id].string:
            cell.source = by_cell[cell.id].string.replace(BADGES_TOKEN, links)
        elif cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("grade_id") == "setup":
            cell.source = setup_cell(config, language)
        if "checksum" in cell.metadata.get("nbgrader", {}):
            cell.metadata.nbgrader["checksum"] = compute_checksum(cell)
    glossary = glossary_path(chapter, language)
    if glossary.exists():
        table = glossary.read_text().strip()
        nb.cells.append(nbformat.v4.new_markdown_cell(
            f"{GLOSSARY_HEADING[language]}\n\n{GLOSSARY_INTRO[language]}\n\n{table}", id=GLOSSARY_CELL_ID))
    nb.metadata["course"] = {"language": language}
    return nb


def cmd_translations(args: argparse.Namespace) -> int:
    ids = args.id or assignments()
    unknown = [i for i in ids if i not in CHAPTERS]
    if unknown:
        print(f"no such chapter: {', '.join(unknown)} (course.toml lists {', '.join(CHAPTERS)})")
        return 2
    if args.action == "update":
        for language in TRANSLATED:
            for chapter in ids:
                catalog = update(chapter, language)
                done = sum(1 for m in catalog if m.id and m.string and not m.fuzzy)
                print(f"{catalogue_path(chapter, language).relative_to(REPO_ROOT)}: {done}/{len(catalog)} translated")
        from grader.message_catalogues import update_catalogues
        for path in update_catalogues():
            print(f"{path.relative_to(REPO_ROOT)}: updated")
        return 0
    found = [p for language in TRANSLATED for chapter in ids for p in problems(chapter, language)]
    found_messages = catalogue_problems() + (document_problems() if not args.id else [])
    for p in found:
        print(p)
    for line in found_messages:
        print(line)
    if found or found_messages:
        print("run `python -m grader translations update`, translate what it lists, run it again")
        return 1
    print("every translation is complete and current")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``translations`` on the grader's command line."""
    p = subparsers.add_parser("translations", help="keep the other editions' catalogues in step with the English")
    p.add_argument("action", choices=["update", "check"])
    p.add_argument("id", nargs="*", help="chapters (default: all)")
    p.set_defaults(fn=cmd_translations)
