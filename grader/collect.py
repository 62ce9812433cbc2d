"""Collect submissions from an LMS download (a zip of notebooks) into nbgrader's ``submitted/`` layout,
keeping each student's id in the LMS.

``python -m grader collect ZIP --assignment ID --out SUBMITTED`` (ZIP may also be a folder, e.g. the
notebooks saved from e-mail) writes ``SUBMITTED/<student>/<ID>/<ID>.ipynb`` for every student it finds,
and ``SUBMITTED/collect_report.json``: what became of every file, and for every student folder the LMS,
the LMS's own id, the name and the archive entries it came from (what ``python -m grader export`` needs
to write the LMS's id columns).

Names the LMSs give the files of a download (checked against their source code, cited below):

* **Canvas** ("Download Submissions", ``lib/content_zipper.rb`` of instructure/canvas-lms): one flat
  file per uploaded file, ``<name>_<user id>_<file id>_<file name>``; ``<name>_LATE_<user id>_...``
  for a late submission; ``anon_<anonymous id>_<file id>_<file name>`` (``LATE_anon_...``) when the
  assignment is graded anonymously. ``<name>`` is the sortable name ("Doe, Jane"), lower-cased, with
  everything but letters, digits and ``_`` removed: ``doejane``. The user id is what Canvas's
  gradebook import matches in its ``ID`` column.
* **Moodle** ("Download all submissions", ``mod/assign/classes/downloader.php`` of moodle/moodle; older
  versions in ``mod/assign/locallib.php``): with "Download submissions in folders" (the default since
  3.1) a folder per student, ``<Full Name>_<participant id>_assignsubmission_file/`` (Moodle 4.1 and
  later) or ``..._assignsubmission_file_/`` (3.1 to 4.0), holding the files as uploaded; without
  folders, flat files ``<Full Name>_<participant id>_assignsubmission_file_<file name>``. Underscores in
  the name become spaces. The participant id is the assignment's own id for the student (its
  ``assign_user_mapping``; "Participant <id>" in the grading worksheet, whose upload matches on it);
  it is the same under blind marking, where the name is "Participant".
* anything else: a file ``<student>_<anything>.ipynb`` or ``<student>.ipynb``, or a file under a folder
  ``<student>/`` or ``<student>_<anything>/`` (notebooks saved from e-mail). There is no LMS id: the
  student is the first part of the name, and two files of the same first part are one student.

A student's folder in ``SUBMITTED`` is ``<name>_<lms><id>`` (``doejane_canvas12345``,
``janedoe_moodle678``, ``anon_canvasanonXy12Z``): the LMS id is part of it, so two students who share a
name are two folders, whatever else happens to the files, and every later step (autograde, report,
export) can read the id back (:func:`identity_of`). Names are reduced to ``[a-z0-9.-]`` and, next to an
id, to :data:`NAME_PART_MAX` characters (the full name is in the report).

Each notebook is validated against the released notebook of the assignment: it must parse as a
notebook and contain cells of this assignment (by nbgrader grade id, cell id or the source of locked
cells). Stripped metadata and deleted or edited test cells are reported; when one student has several
notebooks, the one that validates is kept (the last one in the archive if several do) and the others
are reported.

Nothing is followed out of the archive or folder: an entry that is a symbolic link (in a zip, by the Unix
mode in its ``external_attr``), a FIFO, a device or any other non-regular file, a file in a folder that
is a hard link or sits under a linked folder, an entry whose name leaves the folder (``../``, an absolute
path) and a file larger than :data:`grader.submitted_files.MAX_NOTEBOOK_BYTES` are refused unread and
reported, and no report quotes a byte of a file that is not a notebook.
"""

from __future__ import annotations

import json
import os
import re
import stat
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import nbformat

from grader.course import student_notebook
from grader.repair import repair_notebook
from grader.submitted_files import MAX_NOTEBOOK_BYTES, Refused, kind_of, parse_notebook, read_regular_file

_UNSAFE = re.compile(r"[^a-z0-9.-]")

# Canvas: "<name>[_LATE]_<user id>_<file id>_<file>" and "[LATE_]anon_<anonymous id>_<file id>_<file>".
_CANVAS_ANON = re.compile(r"^(?:(?P<late>LATE)_)?anon_(?P<id>[A-Za-z0-9]+)_(?P<file_id>\d+)_(?P<file>.+)$")
_CANVAS = re.compile(r"^(?P<name>[^/]*?)_(?:(?P<late>LATE)_)?(?P<id>\d+)_(?P<file_id>\d+)_(?P<file>.+)$")
# Moodle: a folder "<Full Name>_<participant id>_assignsubmission_<plugin>[_]" or a flat file
# "<Full Name>_<participant id>_assignsubmission_<plugin>_<file>".
_MOODLE_FOLDER = re.compile(r"^(?P<name>[^_/]*)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_?$")
_MOODLE_FLAT = re.compile(r"^(?P<name>[^_/]*)_(?P<id>\d+)_assignsubmission_(?P<plugin>[a-z]+)_(?P<file>.+)$")
# A student folder made by collect: "<name>_canvas<digits>", "<name>_canvasanon<alnum>", "<name>_moodle<digits>".
_FOLDER = re.compile(r"^(?P<slug>[a-z0-9.-]*)_(?:(?P<canvas>canvas)(?P<cid>\d+)|canvasanon(?P<aid>[A-Za-z0-9]+)"
                     r"|(?P<moodle>moodle)(?P<mid>\d+))$")

#: What an LMS id is, by kind.
ID_KINDS = {
    "canvas_user_id": "Canvas user id (the gradebook's ID column)",
    "canvas_anonymous_id": "Canvas anonymous id (anonymous grading: not a user id)",
    "moodle_participant_id": "Moodle participant id of this assignment (the grading worksheet's Identifier)",
}


@dataclass(frozen=True)
class Identity:
    """Who an archive entry belongs to: the student's folder, and the LMS's id for them (if any)."""

    folder: str                 # the student id in SUBMITTED (nbgrader's student id)
    lms: str = ""               # "canvas", "moodle" or "" (no LMS: e-mail folders, plain names)
    lms_id: str = ""            # the LMS's own id, as the LMS writes it
    id_kind: str = ""           # a key of ID_KINDS, or ""
    name: str = ""              # the name as the LMS wrote it into the file name
    late: bool = False          # Canvas marked the submission late


@dataclass
class Collected:
    student: str
    source: str                 # the entry in the zip
    accepted: bool
    problems: list[str] = field(default_factory=list)


#: Longest name part of a student folder that holds an LMS id. The folder ends up in paths the grader
#: makes (the sandbox's Unix sockets among them, whose paths are limited to 107 bytes), so it stays short;
#: the id, not the name, tells students apart.
NAME_PART_MAX = 12


def _slug(name: str) -> str:
    return _UNSAFE.sub("", name.lower()).strip(".")


def identify(entry: str) -> Identity | None:
    """The student an archive entry belongs to, or None if it is not a notebook or follows no naming rule."""
    path = PurePosixPath(entry)
    parts = path.parts
    if not parts or any(p.startswith((".", "__MACOSX")) or p == ".." for p in parts) or not entry.endswith(".ipynb"):
        return None
    first = parts[0]
    if len(parts) > 1:
        m = _MOODLE_FOLDER.match(first)
        if m:
            return _moodle(m)
    else:
        m = _MOODLE_FLAT.match(first)
        if m:
            return _moodle(m)
        m = _CANVAS_ANON.match(first)
        if m:
            return Identity(f"anon_canvasanon{m['id']}", "canvas", m["id"], "canvas_anonymous_id", "", bool(m["late"]))
        m = _CANVAS.match(first)
        if m:
            slug = _slug(m["name"])[:NAME_PART_MAX] or "student"
            return Identity(f"{slug}_canvas{m['id']}", "canvas", m["id"], "canvas_user_id", m["name"], bool(m["late"]))
    stem = first if len(parts) > 1 else path.stem
    sid = _slug(stem.split("_")[0])
    return Identity(sid, name=stem.split("_")[0]) if sid else None


def _moodle(m: re.Match) -> Identity:
    name = m["name"].strip()
    slug = _slug(name)[:NAME_PART_MAX] or "participant"
    return Identity(f"{slug}_moodle{m['id']}", "moodle", m["id"], "moodle_participant_id", name)


def student_of(entry: str) -> str | None:
    """The student folder an archive entry goes to, or None if the name follows none of the rules."""
    ident = identify(entry)
    return ident.folder if ident else None


def identity_of(folder: str, mapping: dict[str, dict] | None = None) -> Identity:
    """The identity of a student folder: from a collect report's mapping if it has the folder, else read
    back from the folder's name (``doejane_canvas12345``), else a student with no LMS id."""
    if mapping and folder in mapping:
        m = mapping[folder]
        return Identity(folder, m.get("lms", ""), str(m.get("lms_id", "")), m.get("id_kind", ""),
                        m.get("name", ""), bool(m.get("late", False)))
    f = _FOLDER.match(folder)
    if not f:
        return Identity(folder, name=folder)
    if f["canvas"]:
        return Identity(folder, "canvas", f["cid"], "canvas_user_id", f["slug"])
    if f["aid"]:
        return Identity(folder, "canvas", f["aid"], "canvas_anonymous_id", "")
    return Identity(folder, "moodle", f["mid"], "moodle_participant_id", f["slug"])


def validate(data: bytes, assignment: str) -> tuple[bool, list[str]]:
    """(is a notebook of this assignment, problems found); no problem quotes the file."""
    try:
        nb = parse_notebook(data)
    except Refused as exc:
        return False, [f"not a readable notebook: {exc}"]
    release = nbformat.read(student_notebook(assignment), as_version=4)
    notes, looks_right = repair_notebook(nb, release)
    if not looks_right:
        return False, [f"not a notebook of {assignment}: none of its cells are in the release"]
    return True, notes


@dataclass(frozen=True)
class Entry:
    """A file of the download: its name in it, how to read it (raises :class:`Refused`), and why it is refused
    when that is known without reading it (a link, a special file)."""

    name: str
    read: Callable[[], bytes]
    refused: str = ""


def _refuse(reason: str) -> Callable[[], bytes]:
    def read() -> bytes:
        raise Refused(reason)
    return read


def _entries(source: Path) -> Iterator[Entry]:
    """Every file of a zip, or of a folder (notebooks saved from e-mail), links and special files included."""
    if source.is_dir():
        yield from _folder_entries(source)
        return
    with zipfile.ZipFile(source) as z:
        for info in z.infolist():
            if not info.is_dir():
                yield _zip_entry(z, info)


def _folder_entries(source: Path) -> Iterator[Entry]:
    """The files under ``source``, never through a link: a link or special file is an entry refused unread."""
    found: list[Entry] = []
    for folder, dirs, files in os.walk(source):  # os.walk does not descend into linked folders
        for name in dirs + files:
            path = Path(folder, name)
            rel = path.relative_to(source)
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                continue
            if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
                reason = f"{kind_of(mode)}, not a regular file: not followed or read"
                found.append(Entry(rel.as_posix(), _refuse(reason), reason))
            else:
                roles = ["a folder above the file"] * (len(rel.parts) - 1) + ["the file"]
                read = (lambda rel=rel, roles=roles: read_regular_file(source, rel.parts, roles))
                found.append(Entry(rel.as_posix(), read))
    return iter(sorted(found, key=lambda e: e.name))


def _zip_entry(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> Entry:
    """An entry of a zip; one whose Unix mode (the high 16 bits of ``external_attr``) is a link or any other
    non-regular file is refused unread."""
    mode = info.external_attr >> 16
    if stat.S_IFMT(mode) and not stat.S_ISREG(mode):
        reason = f"{kind_of(mode)} in the archive, not a regular file: not unpacked"
        return Entry(info.filename, _refuse(reason), reason)
    return Entry(info.filename, lambda: _read_zip_member(z, info))


def _read_zip_member(z: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A zip entry's bytes, refused unread when it claims more than a notebook may have (and cut off there
    when it holds more than it claims)."""
    limit = MAX_NOTEBOOK_BYTES
    if info.file_size > limit:
        raise Refused(f"it is {info.file_size} bytes, more than the {limit} bytes a notebook may have: not unpacked")
    try:
        with z.open(info) as f:
            data = f.read(limit + 1)
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError) as exc:
        raise Refused(f"it could not be unpacked ({type(exc).__name__})") from None
    if len(data) > limit:
        raise Refused(f"it holds more than the {limit} bytes a notebook may have: not unpacked")
    return data


def escapes(entry: str) -> bool:
    """Whether an archive entry's name would leave the folder it is unpacked into: an absolute path (also a
    Windows drive or a backslash one), or a ``..`` part."""
    name = entry.replace("\\", "/")
    return name.startswith("/") or bool(re.match(r"^[A-Za-z]:", name)) or ".." in name.split("/")


def _hidden(entry: str) -> bool:
    return any(p.startswith((".", "__MACOSX")) for p in PurePosixPath(entry).parts)


def read_report(submitted: Path) -> dict:
    """``SUBMITTED/collect_report.json`` as a dict (``{}`` if there is none)."""
    path = submitted / "collect_report.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {"files": data}


def same_name_groups(idents: list[Identity]) -> list[list[Identity]]:
    """Students of one LMS whose names are equal but whose ids differ (kept apart, and reported)."""
    by_name: dict[tuple[str, str], dict[str, Identity]] = defaultdict(dict)
    for ident in idents:
        if ident.lms and ident.name:
            by_name[(ident.lms, " ".join(ident.name.lower().split()))][ident.folder] = ident
    return [sorted(g.values(), key=lambda i: i.folder) for g in by_name.values() if len(g) > 1]


def _unpack(source: Path, report: list[Collected]) -> tuple[dict[str, list[tuple[str, bytes | None, str]]],
                                                             dict[str, Identity]]:
    """Every student's entries as (name, bytes or None, why not read), and their identities; entries that
    belong to no student but should be said something about go to ``report``."""
    found: dict[str, list[tuple[str, bytes | None, str]]] = {}
    idents: dict[str, Identity] = {}
    for entry in _entries(source):
        if escapes(entry.name):
            report.append(Collected("", entry.name, False, ["its name leaves the folder it would be unpacked "
                                                            "into (an absolute path or ../): not unpacked"]))
            continue
        if _hidden(entry.name):
            continue
        ident = identify(entry.name)
        if ident is None:
            if entry.refused or entry.name.endswith(".ipynb"):
                report.append(Collected("", entry.name, False,
                                        [entry.refused or "file name follows none of the naming rules"]))
            continue
        idents.setdefault(ident.folder, ident)
        if ident.late:
            idents[ident.folder] = ident
        try:
            data, why = entry.read(), ""
        except Refused as exc:
            data, why = None, str(exc)
        found.setdefault(ident.folder, []).append((entry.name, data, why))
    return found, idents


def collect(zip_path: Path, assignment: str, out: Path) -> list[Collected]:
    """Unpack the notebooks of ``zip_path`` into ``out/<student>/<assignment>/<assignment>.ipynb``."""
    report: list[Collected] = []
    found, idents = _unpack(zip_path, report)
    twins = same_name_groups(list(idents.values()))
    twin_note: dict[str, str] = {}
    for group in twins:
        for ident in group:
            others = ", ".join(f"{o.folder} ({o.lms} id {o.lms_id})" for o in group if o is not ident)
            twin_note[ident.folder] = (f"another student has the same name {ident.name!r}: {others}; "
                                       f"kept apart by their {ident.lms} ids")
    for sid, entries in sorted(found.items()):
        checked = [(name, data, *validate(data, assignment)) if data is not None else (name, data, False, [why])
                   for name, data, why in entries]
        good = [c for c in checked if c[2]]
        keep = good[-1] if good else None
        for name, data, ok, problems in checked:
            extra = [] if keep is None or name == keep[0] or not ok else \
                ["another notebook of this student was kept: " + keep[0]]
            if sid in twin_note:
                extra.append(twin_note[sid])
            report.append(Collected(sid, name, keep is not None and name == keep[0], problems + extra))
        if keep is not None:
            dest = out / sid / assignment / f"{assignment}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(keep[1])
    students = {}
    for sid, ident in sorted(idents.items()):
        kept = next((c.source for c in report if c.student == sid and c.accepted), None)
        students[sid] = {"lms": ident.lms, "lms_id": ident.lms_id, "id_kind": ident.id_kind, "name": ident.name,
                         "late": ident.late, "accepted": kept is not None, "source": kept,
                         "sources": [name for name, _, _ in found[sid]],
                         "problems": [p for c in report if c.student == sid and not c.accepted for p in c.problems]}
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "assignment": assignment,
        "archive": str(zip_path),
        "students": students,
        "same_name": [[i.folder for i in g] for g in twins],
        "files": [asdict(c) for c in report],
    }
    (out / "collect_report.json").write_text(json.dumps(document, indent=2) + "\n")
    return report
