"""Reading what a student handed in, without following it anywhere else.

A submitted notebook is the student's file, but the path to it is not proof of that: the notebook, the
student's folder or the assignment folder can be a symbolic link to a file or folder of the host (a link
to ``/etc/passwd``, to the solution notebook, to a classmate's folder), a hard link, a FIFO (which blocks
whoever opens it), a device, a folder, or a file far too large to be a notebook. :func:`read_regular_file`
walks from a trusted folder one name at a time, each opened relative to its parent's file descriptor
with ``O_NOFOLLOW`` after an ``lstat`` of it, and compares the opened file with what ``lstat`` saw, so a
link swapped in between the check and the open is refused too. It reads only a regular file with one
link and at most :data:`MAX_NOTEBOOK_BYTES` bytes; anything else raises :class:`Refused`.

:func:`parse_notebook` turns bytes into a notebook or raises :class:`Refused` saying what is wrong (not
UTF-8, not JSON, JSON but not a notebook, a cell the grader cannot work with). No message made here
quotes a byte of the file: a file that is not a notebook may be anyone's.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

import nbformat

#: The largest notebook the grader reads. The course's notebooks are well under 1 MB without outputs and
#: a few MB with their plots; a file beyond this is not a notebook worth grading (and is never read).
MAX_NOTEBOOK_BYTES = 64 << 20

#: What a student's part of ``SUBMITTED/<student>/<assignment>/<file>`` is called in messages.
SUBMISSION_ROLES = ("the student's folder", "the assignment's folder", "the submitted notebook")

_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link",
          stat.S_IFREG: "a regular file"}


class Refused(ValueError):
    """A submitted file the grader does not read or cannot use; the message says why and quotes none of it."""


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, in words ("a symbolic link", "a FIFO (named pipe)", ...)."""
    return _KINDS.get(stat.S_IFMT(mode), "a special file")


def _mode_problem(mode: int, want_dir: bool, role: str) -> str:
    """Why a file of this mode cannot stand where ``role`` should be ("" if it can)."""
    if stat.S_ISLNK(mode):
        return f"{role} is a symbolic link: the grader follows no links; hand in the files themselves"
    if want_dir and not stat.S_ISDIR(mode):
        return f"{role} is {kind_of(mode)}, not a folder: nothing under it was read"
    if not want_dir and not stat.S_ISREG(mode):
        return f"{role} is {kind_of(mode)}, not a regular file: it was not read"
    return ""


def _open_checked(dir_fd: int, name: str, want_dir: bool, role: str) -> int:
    """Open ``name`` in the folder ``dir_fd`` without following a link, as the kind ``lstat`` saw; its fd.

    Raises FileNotFoundError when it is not there and :class:`Refused` when it is not what it should be."""
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise Refused(f"{role} has a name that does not stay in its folder")
    seen = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    problem = _mode_problem(seen.st_mode, want_dir, role)
    if problem:
        raise Refused(problem)
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(name, flags | (os.O_DIRECTORY if want_dir else 0), dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.ENOENT):
            raise Refused(f"{role} changed while the grader opened it (now {exc.strerror.lower()}): "
                          "it was not read") from None
        raise
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) or _mode_problem(opened.st_mode, want_dir, role):
        os.close(fd)
        raise Refused(f"{role} changed while the grader opened it (another file was put in its place): "
                      "it was not read")
    return fd


def _read_open_file(fd: int, limit: int, role: str) -> bytes:
    """All of an opened regular file, refused when it has other hard links or holds more than ``limit`` bytes."""
    st = os.fstat(fd)
    if st.st_nlink > 1:
        raise Refused(f"{role} is a hard link ({st.st_nlink} names for one file): the grader reads only a file "
                      "of its own; hand in a copy of the notebook")
    if st.st_size > limit:
        raise Refused(f"{role} is {st.st_size} bytes, more than the {limit} bytes a notebook may have: it was "
                      "not read (clear its outputs and hand it in again)")
    chunks, total = [], 0
    while True:
        chunk = os.read(fd, min(1 << 20, limit + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise Refused(f"{role} grew past the {limit} bytes a notebook may have while it was read: it was "
                          "not read")


def read_regular_file(base: Path, parts: Sequence[str], roles: Sequence[str] | None = None,
                      limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of ``base/parts[0]/.../parts[-1]``, where ``base`` is trusted (it may itself be a link) and
    every part under it must be what it seems: folders that are not links, then a regular file with one link
    and at most ``limit`` bytes. ``roles`` names each part in messages (default: "the file" for all).

    Raises FileNotFoundError when a part is missing, :class:`Refused` when a part is not what it should be
    (nothing behind a refused part is opened), and OSError for any other failure to read."""
    if not parts:
        raise ValueError("read_regular_file needs at least one name under the trusted folder")
    roles = list(roles) if roles is not None else ["the file"] * len(parts)
    if len(roles) != len(parts):
        raise ValueError(f"{len(parts)} names but {len(roles)} roles")
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, role in zip(parts[:-1], roles[:-1]):
            inner = _open_checked(fd, name, True, role)
            os.close(fd)
            fd = inner
        file_fd = _open_checked(fd, parts[-1], False, roles[-1])
        try:
            return _read_open_file(file_fd, limit, roles[-1])
        finally:
            os.close(file_fd)
    finally:
        os.close(fd)


def read_submission(notebook: Path, limit: int = MAX_NOTEBOOK_BYTES) -> bytes:
    """The bytes of a submitted notebook ``SUBMITTED/<student>/<assignment>/<file>``: ``SUBMITTED`` is the
    instructor's and trusted; the student's folder, the assignment's folder and the file are checked
    (:func:`read_regular_file`). A shorter path trusts its parent folder and checks the rest."""
    depth = min(3, len(notebook.parts) - 1) if notebook.is_absolute() else min(3, len(notebook.parts))
    if depth < 1:
        raise ValueError(f"{notebook} is not a path to a file")
    base = notebook.parents[depth - 1]
    return read_regular_file(base, notebook.parts[-depth:], SUBMISSION_ROLES[-depth:], limit)


def parse_notebook(data: bytes) -> nbformat.NotebookNode:
    """The notebook (nbformat 4) in ``data``, or :class:`Refused` saying what it is instead, quoting none of it."""
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise Refused(f"it is {len(data)} bytes, more than the {MAX_NOTEBOOK_BYTES} bytes a notebook may have")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Refused("it is not UTF-8 text, so not a notebook (a notebook is a JSON text file)") from None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        raise Refused("it is not JSON, so not a notebook (was another file handed in?)") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nbformat"), int) or \
            ("cells" not in doc and "worksheets" not in doc):
        raise Refused("it is JSON but not a Jupyter notebook (it has no nbformat version or no cells)")
    problem = notebook_problem(doc) if doc["nbformat"] == 4 else ""  # before nbformat trips over it
    if not problem:
        try:
            nb = nbformat.reads(text, as_version=4)
        except Exception as exc:  # nbformat raises many kinds; their text may quote the file, the kind does not
            raise Refused(f"it is JSON but not a notebook nbformat can read ({type(exc).__name__})") from None
        problem = notebook_problem(nb)
    if problem:
        raise Refused(f"it is not a valid notebook: {problem}")
    return nb


def notebook_problem(nb) -> str:
    """What in a notebook (nbformat 4, parsed or its raw JSON) the grader cannot work with ("" if nothing): the
    parts of nbformat's schema that the repair and grading steps rely on, named by cell index (never by content)."""
    if not isinstance(nb.get("metadata"), dict):
        return "its metadata is not a JSON object"
    cells = nb.get("cells")
    if not isinstance(cells, list):
        return "its cells are not a list"
    for i, cell in enumerate(cells):
        problem = _cell_problem(cell)
        if problem:
            return f"cell {i} {problem}"
    return ""


def _cell_problem(cell) -> str:
    if not isinstance(cell, dict):
        return "is not a JSON object"
    if cell.get("cell_type") not in ("code", "markdown", "raw"):
        return "has no cell_type of code, markdown or raw"
    source = cell.get("source")
    if not isinstance(source, str) and not (isinstance(source, list) and all(isinstance(s, str) for s in source)):
        return "has no source text"
    if not isinstance(cell.get("metadata"), dict):
        return "has no metadata object"
    if "id" in cell and not isinstance(cell["id"], str):
        return "has an id that is not text"
    nbgrader = cell["metadata"].get("nbgrader", {})
    if not isinstance(nbgrader, dict):
        return "has nbgrader metadata that is not a JSON object"
    if not isinstance(nbgrader.get("grade_id", ""), str):
        return "has an nbgrader grade_id that is not text"
    outputs = cell.get("outputs", [])
    if not isinstance(outputs, list) or not all(isinstance(o, dict) for o in outputs):
        return "has outputs that are not a list of JSON objects"
    return ""
