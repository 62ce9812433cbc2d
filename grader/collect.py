"""Collect submissions from an LMS download (a zip of notebooks) into nbgrader's ``submitted/`` layout.

``python -m grader collect ZIP --assignment ID --out SUBMITTED`` (ZIP may also be a folder, e.g. the
notebooks saved from e-mail) writes
``SUBMITTED/<student>/<ID>/<ID>.ipynb`` for every student it finds, and ``collect_report.json`` next to
them. Naming rules (what Canvas, Moodle, Blackboard and e-mail folders produce):

* a file ``<student>_<anything>.ipynb`` (Canvas: ``doejane_12345_678_vector_add.ipynb``), or
  ``<student>.ipynb``;
* a file anywhere under a folder ``<student>/`` or ``<student>_<anything>/`` (Moodle:
  ``Jane Doe_12345_assignsubmission_file_/03_vector_add.ipynb``);
* the student id is that first part, with spaces and other characters outside ``[A-Za-z0-9.-]``
  removed and lower-cased (``Jane Doe`` -> ``janedoe``); ``__MACOSX/`` and hidden files are ignored.

Each notebook is validated against the released notebook of the assignment: it must parse as a
notebook and contain cells of this assignment (by nbgrader grade id, cell id or the source of locked
cells). Stripped metadata and deleted or edited test cells are reported; when one student has several
notebooks, the one that validates is kept (the last one in the zip if several do) and the others are
reported.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

import nbformat

from grader.repair import repair_notebook
from grader.course import student_notebook

_UNSAFE = re.compile(r"[^A-Za-z0-9.-]")


@dataclass
class Collected:
    student: str
    source: str                 # the entry in the zip
    accepted: bool
    problems: list[str] = field(default_factory=list)


def student_of(entry: str) -> str | None:
    """The student id an archive entry belongs to, or None if the name follows none of the rules."""
    parts = PurePosixPath(entry).parts
    if not parts or any(p.startswith((".", "__MACOSX")) for p in parts) or not entry.endswith(".ipynb"):
        return None
    first = parts[0] if len(parts) > 1 else PurePosixPath(parts[0]).stem
    sid = _UNSAFE.sub("", first.split("_")[0]).lower().strip(".")
    return sid or None


def validate(data: bytes, assignment: str) -> tuple[bool, list[str]]:
    """(is a notebook of this assignment, problems found)."""
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    except Exception as exc:
        return False, [f"not a readable notebook ({type(exc).__name__})"]
    release = nbformat.read(student_notebook(assignment), as_version=4)
    notes, looks_right = repair_notebook(nb, release)
    if not looks_right:
        return False, [f"not a notebook of {assignment}: none of its cells are in the release"] + notes
    return True, notes


def _entries(source: Path):
    """(name, read) for every file of a zip, or of a folder (notebooks saved from e-mail)."""
    if source.is_dir():
        for f in sorted(p for p in source.rglob("*") if p.is_file()):
            yield f.relative_to(source).as_posix(), f.read_bytes
        return
    with zipfile.ZipFile(source) as z:
        for info in z.infolist():
            if not info.is_dir():
                yield info.filename, (lambda info=info: z.read(info))


def collect(zip_path: Path, assignment: str, out: Path) -> list[Collected]:
    """Unpack the notebooks of ``zip_path`` into ``out/<student>/<assignment>/<assignment>.ipynb``."""
    found: dict[str, list[tuple[str, bytes]]] = {}
    report: list[Collected] = []
    for name, read in _entries(zip_path):
        sid = student_of(name)
        if sid is None:
            if name.endswith(".ipynb"):
                report.append(Collected("", name, False, ["file name follows none of the naming rules"]))
            continue
        found.setdefault(sid, []).append((name, read()))
    for sid, entries in sorted(found.items()):
        checked = [(name, data, *validate(data, assignment)) for name, data in entries]
        good = [c for c in checked if c[2]]
        keep = good[-1] if good else None
        for name, data, ok, problems in checked:
            extra = [] if keep is None or name == keep[0] or not ok else \
                ["another notebook of this student was kept: " + keep[0]]
            report.append(Collected(sid, name, keep is not None and name == keep[0], problems + extra))
        if keep is not None:
            dest = out / sid / assignment / f"{assignment}.ipynb"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(keep[1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "collect_report.json").write_text(json.dumps([asdict(c) for c in report], indent=2) + "\n")
    return report
