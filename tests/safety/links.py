"""Submissions that are not a notebook file of the student's own: links, special files, files too large or not
notebooks at all. Each must be graded 0 without reading what a link points to, and no message may quote any of
it; an honest student planted after them (:data:`HONEST_AFTER`) keeps full marks.

:func:`plant_linked_submissions` writes them into a ``SUBMITTED`` folder (tests/test_grader_safety.py's class and
tests/test_submitted_files.py). The files they point to live next to ``SUBMITTED``, in ``host_files/``: a
"host" file whose first line is :data:`SECRET` and a valid, honest notebook (so that a grader which followed a
link would earn full marks there, not merely fail to parse). Some of these are not safe to read with a plain
``Path.read_bytes`` (a FIFO blocks, a folder raises): a test that snapshots every submission itself must skip
the students in :data:`LINKED`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from grader.submitted_files import MAX_NOTEBOOK_BYTES

#: The first line of the planted host file; a message that holds it has quoted a file it must not read.
SECRET = "hostsecret-5d1e0c: a line of a file outside the submissions"
#: An honest copy planted after the refused ones: it must keep full marks.
HONEST_AFTER = "zoe_after_links"
#: Every student :func:`plant_linked_submissions` plants (and refuses), in the order a class is graded.
LINKED = (
    "lnk_assignment_folder",      # SUBMITTED/<student>/<chapter> is a link to a folder elsewhere
    "lnk_broken_cells",           # nbformat 4 JSON whose cells the grader cannot work with
    "lnk_fifo_notebook",          # a FIFO where the notebook should be (opening it for reading would block)
    "lnk_folder_as_notebook",     # a folder named like the notebook
    "lnk_hard_link_to_honest",    # a hard link to a notebook outside the submissions
    "lnk_huge_notebook",          # a notebook padded past MAX_NOTEBOOK_BYTES (sparse: no disk used)
    "lnk_json_not_notebook",      # JSON that is not a notebook, holding the secret
    "lnk_notebook_to_etc_passwd",  # the case
    "lnk_notebook_to_honest",     # a link to a valid notebook outside the submissions
    "lnk_notebook_to_host_file",  # a relative link to the host file
    "lnk_student_folder",         # SUBMITTED/<student> is a link to a folder elsewhere
    "lnk_text_not_notebook",      # a regular file, not a notebook, holding the secret
)


def target_texts() -> list[str]:
    """Fragments that no grade message may contain: the host file's first line and the start of /etc/passwd."""
    texts = [SECRET.split(":")[0]]
    try:
        with open("/etc/passwd", encoding="utf-8", errors="replace") as f:
            first = f.readline().strip()
        if first:
            texts.append(first[:9])  # "root:x:0:" on most systems: short, so a truncated quote is found too
    except OSError:
        pass
    return texts


def _host_files(submitted: Path, chapter: str, honest_notebook: Path) -> tuple[Path, Path, Path]:
    """(the secret host file, a folder elsewhere holding ``<chapter>/<chapter>.ipynb``, that notebook)."""
    host = submitted.parent / "host_files"
    host.mkdir(parents=True, exist_ok=True)
    secret = host / "secret.txt"
    secret.write_text(SECRET + "\nsecond line of the host file\n")
    elsewhere = host / "elsewhere"
    honest = elsewhere / chapter / f"{chapter}.ipynb"
    honest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(honest_notebook, honest)
    return secret, elsewhere, honest


def _notebook_path(submitted: Path, student: str, chapter: str) -> Path:
    path = submitted / student / chapter / f"{chapter}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def plant_linked_submissions(submitted: Path, chapter: str, honest_notebook: Path) -> list[str]:
    """Plant every student of :data:`LINKED` and then :data:`HONEST_AFTER` (a copy of ``honest_notebook``) under
    ``submitted``; return the names of :data:`LINKED` (each must be graded 0, status failed or error, with no
    message holding any of :func:`target_texts`)."""
    secret, elsewhere, honest = _host_files(submitted, chapter, honest_notebook)
    nb = {s: _notebook_path(submitted, s, chapter) for s in LINKED if s not in
          ("lnk_student_folder", "lnk_assignment_folder")}
    nb["lnk_notebook_to_etc_passwd"].symlink_to("/etc/passwd")
    nb["lnk_notebook_to_host_file"].symlink_to(os.path.relpath(secret, nb["lnk_notebook_to_host_file"].parent))
    nb["lnk_notebook_to_honest"].symlink_to(honest)
    (submitted / "lnk_student_folder").symlink_to(elsewhere, target_is_directory=True)
    (submitted / "lnk_assignment_folder").mkdir(parents=True, exist_ok=True)
    (submitted / "lnk_assignment_folder" / chapter).symlink_to(elsewhere / chapter, target_is_directory=True)
    os.link(honest, nb["lnk_hard_link_to_honest"])
    os.mkfifo(nb["lnk_fifo_notebook"])
    nb["lnk_folder_as_notebook"].mkdir()
    shutil.copyfile(honest, nb["lnk_folder_as_notebook"] / f"{chapter}.ipynb")
    shutil.copyfile(honest, nb["lnk_huge_notebook"])
    os.truncate(nb["lnk_huge_notebook"], MAX_NOTEBOOK_BYTES + 1)
    nb["lnk_text_not_notebook"].write_text(secret.read_text())
    nb["lnk_json_not_notebook"].write_text(json.dumps({SECRET: SECRET, "nbformat": SECRET}))
    nb["lnk_broken_cells"].write_text(json.dumps({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "id": "a", "source": "x = 1", "metadata": {}, "outputs": [],
                   "execution_count": None},
                  {"cell_type": "code", "id": "b", "source": SECRET, "metadata": [SECRET], "outputs": [],
                   "execution_count": None}]}))
    shutil.copyfile(honest_notebook, _notebook_path(submitted, HONEST_AFTER, chapter))
    return list(LINKED)
