"""Feedback for students: nbgrader's ``generate_feedback`` without the hidden tests.

nbgrader's feedback HTML shows the autograded notebook, whose test cells hold the hidden tests (restored
from the source) and whose error tracebacks quote the test's lines. :class:`HideTestSource` runs before
the HTML is written: it replaces each ``### BEGIN HIDDEN TESTS`` region with one comment line and
reduces every traceback of a test cell to its last line (the message the test raised, which explains
the failure without quoting the test's inputs). :func:`leaks` is what the grader checks afterwards.
"""

from __future__ import annotations

import re
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

BEGIN, END = "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS"
PLACEHOLDER = "# (hidden test: its code is not shown in feedback)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def hide_hidden_regions(source: str) -> str:
    out, hiding = [], False
    for line in source.splitlines():
        if BEGIN in line:
            hiding = True
            out.append(PLACEHOLDER)
        elif END in line:
            hiding = False
        elif not hiding:
            out.append(line)
    return "\n".join(out)


class HideTestSource(NbGraderPreprocessor):
    """Remove hidden test code (and tracebacks that quote it) from graded test cells."""

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution") and BEGIN in cell.source:
            cell.source = hide_hidden_regions(cell.source)
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


#: Output types a student's cell may show in feedback: text (escaped by nbconvert) and raster images.
SAFE_MIME = ("text/plain", "image/png", "image/jpeg")


class SafeOutputs(NbGraderPreprocessor):
    """Keep only plain text and raster images of every output, so that a notebook cannot put HTML or
    script into the feedback page an instructor or student opens (text is escaped by nbconvert)."""

    def preprocess_cell(self, cell, resources, index):
        for out in cell.get("outputs", []):
            data = out.get("data")
            if isinstance(data, dict):
                kept = {k: v for k, v in data.items() if k in SAFE_MIME}
                if not kept and data:
                    kept = {"text/plain": "(an output of type " + ", ".join(sorted(data))[:200] +
                            " is not shown in feedback)"}
                out["data"] = kept
        cell.get("attachments", {}).clear() if isinstance(cell.get("attachments"), dict) else None
        return cell, resources


def hidden_lines(source_notebook) -> list[str]:
    """The lines of the hidden test regions of a source notebook that appear nowhere else in it."""
    visible = "\n".join(hide_hidden_regions(cell.source) for cell in source_notebook.cells)
    lines = []
    for cell in source_notebook.cells:
        inside = False
        for line in cell.source.splitlines():
            if BEGIN in line:
                inside = True
            elif END in line:
                inside = False
            elif inside and len(line.strip()) > 12 and not line.strip().startswith("#") \
                    and line.strip() not in visible:
                lines.append(line.strip())
    return lines


def leaks(html_file: Path, source_notebook) -> list[str]:
    """Hidden test lines that appear in a feedback file (an empty list is what we want)."""
    import html

    text = _ANSI.sub("", html.unescape(re.sub(r"<[^>]+>", "", html_file.read_text(errors="replace"))))
    return [ln for ln in hidden_lines(source_notebook) if ln in text]
