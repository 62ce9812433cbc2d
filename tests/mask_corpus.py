"""The corpus of loads whose mask does not mask (solutions/03_vector_add/submissions/attacks and solutions/04_gelu/submissions/attacks): one answer
file per class, each graded 0 on the chapter's mask test and nothing else, and what the notebook's own
self-check says of each (solutions/03_vector_add/test_03_vector_add.py, solutions/04_gelu/test_04_gelu.py)."""

from __future__ import annotations

import contextlib
import io

#: student -> what the message says of the load: the five classes, in both chapters.
DODGES = {"nia_mask_none": "mask=None is no mask", "otto_positional_none": "mask=None is no mask",
          "ravi_mask_true": "is a constant", "tom_always_true_mask": "is always true",
          "hugo_unmasked_second_kernel": "has no mask"}


def self_check(chapter: str, student: str, kind: str = "attacks") -> str:
    """Run the student notebook with ``student``'s answers up to its self-check cell, in this process: "passed",
    or the self-check's CheckFailed message."""
    from grader.course import answers_folder
    from grader.examples import apply_answers, parse_answers
    from grader.notebook_code import exec_cell
    from triton_course.checks import CheckFailed

    nb = apply_answers(chapter, parse_answers((answers_folder(chapter, kind) / f"{student}.py").read_text()))
    ns: dict[str, object] = {"__name__": "__main__"}
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        last = cell.metadata.get("nbgrader", {}).get("grade_id") == "self_check"
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec_cell(cell.source, f"<{chapter} {student} cell {i}>", ns)
        except CheckFailed as exc:
            if last:
                return str(exc)
            raise
        if last:
            return "passed"
    raise AssertionError(f"{chapter} has no self-check cell")
