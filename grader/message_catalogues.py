"""The helpers' message catalogues: every string of ``utils/`` marked with ``_``, ``N_`` or ``ngettext``,
extracted by Babel into ``utils/locale/<language>/LC_MESSAGES/triton_course.po`` and compiled to the ``.mo``
that :mod:`triton_course.i18n` reads with Python's own :mod:`gettext`; every string literal marked with ``_`` or
``N_`` in the code cells of the solution notebooks, whose own checks (chapters 01, 02 and 08 check their first
answers with code of the notebook) mark their messages as the helpers do (:func:`notebook_messages`); and the
message of every ``Hint(applies, message)`` written as a string literal, in ``utils/`` and in the code cells of the
solution notebooks (their ``judge_defs`` cells define the chapters' hints): :func:`triton_course.checks.check`
translates a hint's message where it reports it, so a hint needs no marking where it is defined
(:func:`hint_messages`). The student notebooks, in every edition, share these code cells.

:func:`update_catalogues` extracts, merges (a changed message keeps its old translation marked fuzzy) and
compiles; :func:`catalogue_problems` lists what keeps a catalogue from being complete and current: a
message not in it, one untranslated or fuzzy, one whose ``{placeholders}`` differ from the English, a
translation of a message the code no longer has, and a ``.mo`` that is not the compiled ``.po``.
"""

from __future__ import annotations

import ast
import datetime
import io
import re
import string
from collections.abc import Iterator
from pathlib import Path

import nbformat

from babel.messages.catalog import Catalog
from babel.messages.extract import extract_from_dir
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po, write_po

from grader.course import REPO_ROOT, SOLUTIONS
from triton_course.i18n import DOMAIN, EDITIONS, SOURCE_LANGUAGE
from triton_course.links import CONFIG

HELPERS = REPO_ROOT / "utils"
LOCALE = HELPERS / "locale"
KEYWORDS = {"_": None, "N_": None, "ngettext": (1, 2)}
TRANSLATOR_COMMENT = "TRANSLATORS:"
#: The extracted comment every hint's message carries in the catalogue.
HINT_COMMENT = "A self-check hint, shown after \"Hint: \" when the output shows its symptom."


def po_path(language: str) -> Path:
    return LOCALE / language / "LC_MESSAGES" / f"{DOMAIN}.po"


def mo_path(language: str) -> Path:
    return po_path(language).with_suffix(".mo")


def extract(helpers: Path = HELPERS, solutions: Path = SOLUTIONS) -> Catalog:
    """Every marked message of the helpers and of the solution notebooks' code cells, and every literal hint
    message, with the files it comes from (no line numbers: moving code changes no catalogue)."""
    catalog = Catalog(project=DOMAIN, fuzzy=False)
    for filename, _lineno, message, comments, context in extract_from_dir(
            helpers, method_map=[("locale/**", "ignore"), ("**.py", "python")], keywords=KEYWORDS,
            comment_tags=(TRANSLATOR_COMMENT,), strip_comment_tags=True):
        catalog.add(message, None, [(f"utils/{filename}", 0)], auto_comments=comments, context=context)
    for location, message in notebook_messages(solutions):
        known = catalog.get(message)
        if known is not None:      # the same words marked in utils/, or in two cells or notebooks: one message
            known.locations = sorted(set(known.locations) | {(location, 0)})
        else:
            catalog.add(message, None, [(location, 0)])
    for location, message in hint_messages(helpers, solutions):
        known = catalog.get(message)
        if known is not None:      # the same words marked elsewhere, or a hint defined twice: one message
            known.locations = sorted(set(known.locations) | {(location, 0)})
            if HINT_COMMENT not in known.auto_comments:
                known.auto_comments.append(HINT_COMMENT)
        else:
            catalog.add(message, None, [(location, 0)], auto_comments=[HINT_COMMENT])
    return catalog


def hint_messages(helpers: Path = HELPERS, solutions: Path = SOLUTIONS) -> list[tuple[str, str]]:
    """``(location, message)`` of every ``Hint(...)`` whose message (its second positional argument, or
    ``message=``) is a string literal: in ``helpers/*.py`` (location ``utils/<file>``) and in the code cells of
    each chapter's solution notebook ``solutions/<id>/<id>.ipynb`` (location that path). A cell that does not parse
    once its IPython lines (``%magic``, ``!shell``) are blanked is skipped; so is a message built at run time (an
    f-string, a name), which no catalogue can hold."""
    found = []
    for path in sorted(helpers.glob("*.py")):
        found += [(f"utils/{path.name}", m) for m in _hints_in(path.read_text(encoding="utf-8"))]
    for where, source in _solution_code(solutions):
        found += [(where, m) for m in _hints_in(source)]
    return found


def notebook_messages(solutions: Path = SOLUTIONS) -> list[tuple[str, str]]:
    """``(location, message)`` of every ``_("...")`` and ``N_("...")`` whose argument is a string literal
    (implicit concatenation included) in the code cells of each chapter's solution notebook
    ``solutions/<id>/<id>.ipynb`` (location that path), where a chapter's own checks mark their messages as the
    helpers do. Skipped, as in :func:`hint_messages`: a cell that does not parse once its IPython lines are
    blanked, and a message built at run time (``_(why)``, an f-string), which is marked where it is written."""
    return [(where, m) for where, source in _solution_code(solutions) for m in _marked_in(source)]


def _solution_code(solutions: Path = SOLUTIONS) -> Iterator[tuple[str, str]]:
    """``(location, Python source)`` of every code cell of each chapter's solution notebook, in order, its IPython
    lines blanked (:func:`_python_of`)."""
    for folder in sorted(p for p in solutions.iterdir() if p.is_dir()) if solutions.is_dir() else []:
        notebook = folder / f"{folder.name}.ipynb"
        if not notebook.is_file():
            continue
        where = f"solutions/{folder.name}/{notebook.name}"
        for cell in nbformat.read(notebook, as_version=4).cells:
            if cell.cell_type == "code":
                yield where, _python_of(cell.source)


def _python_of(cell: str) -> str:
    """A code cell's source with its IPython-only lines (``%magic``, ``!shell``) blanked."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in cell.splitlines())


def _calls_in(source: str, *names: str) -> Iterator[ast.Call]:
    """The calls of a function of one of ``names`` (``f(...)`` or ``x.f(...)``) in ``source``, in the order
    :func:`ast.walk` meets them (nothing if it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in names:
                yield node


def _literal(node: ast.expr | None) -> str | None:
    """The text of a non-empty string literal, else None."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value else None


def _hints_in(source: str) -> Iterator[str]:
    """The string-literal messages of the ``Hint(...)`` calls in ``source`` (nothing if it does not parse)."""
    for node in _calls_in(source, "Hint"):
        message = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "message"), None)
        if (text := _literal(message)) is not None:
            yield text


def _marked_in(source: str) -> Iterator[str]:
    """The string literals marked for translation in ``source``: the argument of each ``_("...")`` and
    ``N_("...")`` (nothing if it does not parse)."""
    for node in _calls_in(source, "_", "N_"):
        if len(node.args) == 1 and not node.keywords and (text := _literal(node.args[0])) is not None:
            yield text


HELPERS_HEADER = ("# The helpers' messages (utils/, marked with _, N_ or ngettext) in one language.\n"
                  "# Update with: python -m grader translations update (extracts, merges, compiles .mo)")


def po_bytes(catalog: Catalog, header_comment: str, *, sort_output: bool = True,
             include_lineno: bool = False) -> bytes:
    """``catalog`` in Babel's PO form as the course keeps its catalogues: its header comment, the course's
    addresses, unwrapped lines and no dates (so that a git diff shows only text)."""
    catalog.header_comment = header_comment
    catalog.msgid_bugs_address = f"{CONFIG.repo_url}/issues"
    catalog.last_translator = "the course's translators"
    catalog.language_team = f"{catalog.locale} <{CONFIG.repo_url}/issues>"
    catalog.creation_date = catalog.revision_date = None  # type: ignore[assignment]
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0, include_lineno=include_lineno, ignore_obsolete=True, include_previous=False,
             sort_output=sort_output)
    return re.sub(rb'^"(POT-Creation-Date|PO-Revision-Date|Generated-By): [^"]*\\n"\n', b"", buffer.getvalue(),
                  flags=re.M)


def _po_bytes(catalog: Catalog) -> bytes:
    return po_bytes(catalog, HELPERS_HEADER)


#: The creation date every compiled catalogue states: the ``.po`` keeps none (:func:`_po_bytes`), and Babel gives a
#: catalogue read without one the time it was read, so that a ``.mo`` compiled a minute earlier would differ.
COMPILED_CREATION_DATE = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)


def compiled(catalog: Catalog) -> bytes:
    """The ``.mo`` of ``catalog`` (fuzzy translations left out, as gettext does): the same bytes whenever the
    same ``.po`` is compiled (its header's creation date is :data:`COMPILED_CREATION_DATE`)."""
    buffer = io.BytesIO()
    created = catalog.creation_date
    catalog.creation_date = COMPILED_CREATION_DATE
    try:
        write_mo(buffer, catalog, use_fuzzy=False)
    finally:
        catalog.creation_date = created
    return buffer.getvalue()


def read_catalogue(path: Path) -> Catalog:
    with path.open("rb") as f:
        return read_po(f, abort_invalid=True)


def update_catalogues() -> list[Path]:
    """Extract, merge into each language's ``.po``, compile its ``.mo``; return the files written."""
    template = extract()
    written = []
    for language in (lang for lang in EDITIONS if lang != SOURCE_LANGUAGE):
        po = po_path(language)
        if po.exists():
            catalog = read_catalogue(po)
            catalog.update(template, update_creation_date=False)
        else:
            catalog = Catalog(locale=language, project=DOMAIN, fuzzy=False)
            catalog.update(template, update_creation_date=False)
        po.parent.mkdir(parents=True, exist_ok=True)
        po.write_bytes(_po_bytes(catalog))
        mo_path(language).write_bytes(compiled(read_catalogue(po)))
        written += [po, mo_path(language)]
    return written


def fields(text: str) -> list[str]:
    """The ``{placeholders}`` of a ``str.format`` message, sorted (``{{`` and ``}}`` are not placeholders)."""
    try:
        return sorted(name for _, name, _, _ in string.Formatter().parse(text) if name is not None)
    except ValueError:
        return ["<unbalanced braces>"]


def catalogue_problems() -> list[str]:
    """Why a language's catalogue is not complete and current (empty when every one is)."""
    template = extract()
    wanted = {(m.id if isinstance(m.id, str) else m.id[0], m.context) for m in template if m.id}
    found = []
    for language in (lang for lang in EDITIONS if lang != SOURCE_LANGUAGE):
        po = po_path(language)
        where = po.relative_to(REPO_ROOT)
        if not po.exists():
            found.append(f"{where}: missing (run `python -m grader translations update`)")
            continue
        catalog = read_catalogue(po)
        have = {}
        for m in catalog:
            if m.id:
                have[(m.id if isinstance(m.id, str) else m.id[0], m.context)] = m
        for key in sorted(wanted - have.keys(), key=str):
            found.append(f"{where}: message not in the catalogue: {key[0][:70]!r}")
        for key in sorted(have.keys() - wanted, key=str):
            found.append(f"{where}: the helpers no longer have this message: {key[0][:70]!r}")
        for key, m in sorted(have.items(), key=lambda kv: str(kv[0])):
            if key not in wanted:
                continue
            strings = [m.string] if isinstance(m.string, str) else list(m.string)
            ids = [m.id] if isinstance(m.id, str) else list(m.id)
            if m.fuzzy:
                found.append(f"{where}: fuzzy (the English changed): {key[0][:70]!r}")
            elif not all(strings):
                found.append(f"{where}: not translated: {key[0][:70]!r}")
            elif any(fields(s) != fields(ids[0]) for s in strings):
                found.append(f"{where}: the placeholders differ from the English: {key[0][:70]!r}")
        if not mo_path(language).exists() or mo_path(language).read_bytes() != compiled(catalog):
            found.append(f"{mo_path(language).relative_to(REPO_ROOT)}: not the compiled {po.name} "
                         "(run `python -m grader translations update`)")
    return found
