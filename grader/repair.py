"""Checking a submitted notebook against the released one, before nbgrader grades it.

Students strip nbgrader's metadata (by copying cells into a new notebook), delete test cells or edit
them. :func:`repair_notebook` re-attaches the metadata from the release and puts deleted test cells
back, and reports each repair, so that such a notebook is graded (and flagged) instead of scoring a
silent zero.
"""

from __future__ import annotations

import copy

from grader.execute import is_test
from grader.submitted_files import notebook_problem


# ---------------------------------------------------------------------------------------------------

def meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def repair_notebook(nb, release) -> tuple[list[str], bool]:
    """Compare ``nb`` (a submission, changed in place) with the release; return (notes, looks_like_it).

    Cells that lost their nbgrader metadata get it back from the release cell with the same cell id or,
    for locked cells, the same source. Deleted or edited test cells are reported (nbgrader restores
    them from the source). ``looks_like_it`` is False when no cell of the release can be found at all, and
    when ``nb`` lacks the structure relied on here (read a submission with
    :func:`grader.submitted_files.parse_notebook`, which refuses such a notebook with a clearer message).
    """
    problem = notebook_problem(nb)
    if problem:
        return [f"not a valid notebook: {problem}"], False
    notes: list[str] = []
    rel_cells = [c for c in release.cells if meta(c).get("grade_id")]
    have = {meta(c).get("grade_id"): c for c in nb.cells if meta(c).get("grade_id")}
    by_id = {c.get("id"): c for c in nb.cells if c.get("id")}
    by_source: dict[str, list] = {}
    for c in nb.cells:
        by_source.setdefault(c.source.strip(), []).append(c)
    reattached, found = [], 0
    for rc in rel_cells:
        gid = meta(rc)["grade_id"]
        if gid in have:
            found += 1
            continue
        cand = by_id.get(rc.get("id"))
        if cand is None or meta(cand) or cand.cell_type != rc.cell_type:
            cand = next((c for c in by_source.get(rc.source.strip(), []) if not meta(c)), None) \
                if meta(rc).get("locked") and rc.source.strip() else None
        if cand is not None and not meta(cand):
            cand.metadata["nbgrader"] = dict(meta(rc))
            have[gid] = cand
            reattached.append(gid)
            found += 1
    if reattached:
        notes.append(f"nbgrader metadata was stripped from this notebook: re-attached it from the release "
                     f"to {len(reattached)} cell(s) ({', '.join(reattached[:8])}{' ...' if len(reattached) > 8 else ''}).")
    for rc in rel_cells:
        gid = meta(rc)["grade_id"]
        if is_test(rc):
            if gid not in have:
                notes.append(f"test cell {gid} was deleted from the notebook; the grader put it back.")
                have[gid] = _put_back(nb, release, rc)
            elif have[gid].source.strip() != rc.source.strip():
                notes.append(f"test cell {gid} was edited; the grader restored it from the release.")
    return notes, found > 0


def _put_back(nb, release, missing):
    """Insert a copy of the release cell ``missing`` after the nearest earlier release cell still in ``nb``.

    (nbgrader's own ``add_missing_cells`` fails when the cell before a test is a locked cell that is not
    graded, as the self-check cells of this course are.)
    """
    def key(c):
        return meta(c).get("grade_id") or c.get("id")

    where = {key(c): i for i, c in enumerate(nb.cells) if key(c)}
    at = len(nb.cells)
    idx = release.cells.index(missing)
    for prev in reversed(release.cells[:idx]):
        if key(prev) in where:
            at = where[key(prev)] + 1
            break
    cell = copy.deepcopy(missing)
    if cell.get("id") in {c.get("id") for c in nb.cells}:
        cell["id"] = f"restored-{meta(missing)['grade_id']}"[:64]
    nb.cells.insert(at, cell)
    return cell
