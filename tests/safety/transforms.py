"""Submissions that answer files cannot express: notebook transformations of a correct submission.

Each function takes a notebook (changed in place) and returns it. The answer files of the trust corpus (the
format of ``grader/examples.py``) are in each chapter's ``solutions/<id>/submissions/attacks/``.
"""

from __future__ import annotations


def _is_test(cell) -> bool:
    m = cell.metadata.get("nbgrader", {})
    return bool(m.get("grade")) and not m.get("solution")


def strip_metadata(nb):
    """What 'clear metadata' tools do: every cell's metadata gone (cell ids kept)."""
    for cell in nb.cells:
        cell.metadata = {}
    return nb


def delete_tests(nb):
    """The student deleted every test cell."""
    nb.cells = [c for c in nb.cells if not _is_test(c)]
    return nb


def edit_tests(nb):
    """The student replaced every test cell's code with a score of full marks."""
    for cell in nb.cells:
        if _is_test(cell):
            cell.source = "1000  # full marks, please"
    return nb


TRANSFORMS = {"nora_stripped_metadata": strip_metadata, "omar_deleted_tests": delete_tests,
              "pia_edited_tests": edit_tests}
