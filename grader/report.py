"""The page an instructor reads after grading: ``python -m grader report DIR [DIR ...] --html FILE``.

One self-contained HTML file (no script, no external file; plots are PNGs made with matplotlib and
embedded as ``data:`` URIs) with, for the autograde output folders given:

* **hidden tests**: the pass rate of every hidden test, per assignment (a table and a bar chart), and
  why tests were not passed (the first line of each message, with the students);
* **points**: the distribution of each assignment's total points (a histogram), with the points that
  could not be graded on the grading machine said separately;
* **speed**: every performance check's measured figure (GB/s, or TFLOP/s for the matmul chapter)
  against its target, per chapter (a plot and a table), or how many were not graded (no GPU);
* **flagged for review**: every submission the grader had something to say about, with the evidence it
  recorded: its ``NOTE`` lines (tampering put back, stripped metadata, edited tests, crashes, grading
  unsandboxed), timeouts, errors, PyTorch or Python behind a launch, timings that disagree;
* **totals**: the text totals of :mod:`grader.results`.

Everything that comes from a submission (student ids, messages, printed text) is HTML-escaped, and the
page's Content-Security-Policy allows no script at all.

Where the figures come from: a performance check prints its verdict in the test cell's output
(``<what>: 3,712 GB/s; target 75% of this GPU's copy bandwidth (4,267 GB/s) = 3,200 GB/s: passed``, or
raises it as the error below target), and the grader keeps every timed round in the autograded
notebook's metadata (``course_grader.timing``). :func:`performance_of` reads both from the autograded
notebook; ``grader.autograde`` stores its result in each record file (``performance``) as the record is
saved, so this page needs only ``DIR``. For records made before that, the autograded notebook under
``DIR/work/`` is read instead, and failing checks' figures are also read from their messages.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.results import GradeRecord, read_json, totals

# ---------------------------------------------------------------------------------------------------
# Measured performance, from an autograded notebook
# ---------------------------------------------------------------------------------------------------

_NUMBER = r"[\d,]+(?:\.\d+)?"
_BANDWIDTH = re.compile(
    rf"(?P<what>[^\n]+?): (?P<achieved>{_NUMBER}) GB/s; target (?P<percent>{_NUMBER})% of this GPU's copy "
    rf"bandwidth \((?P<ceiling>{_NUMBER}) GB/s\) = (?P<target>{_NUMBER}) GB/s(?P<passed>: passed)?")
_TFLOPS = re.compile(
    rf"(?P<what>[^\n]+?): (?P<achieved>{_NUMBER}) TFLOP/s = (?P<ratio>{_NUMBER})% of (?P<baseline>[^\n]+?) "
    rf"\((?P<baseline_tflops>{_NUMBER}) TFLOP/s\); target (?P<percent>{_NUMBER})%(?P<passed>: passed)?")
_PERF_CALLS = ("bandwidth_points(", "tflops_points(")
_NOT_GRADED = "NOT GRADED"


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def parse_verdict(text: str) -> dict[str, Any] | None:
    """The figures of a performance verdict line (printed when it passed, raised below target)."""
    for line in text.splitlines():
        line = re.sub(r"^\s*(CheckFailed|AssertionError): ", "", line)
        m = _BANDWIDTH.search(line)
        if m:
            return {"what": m["what"].strip(), "unit": "GB/s", "achieved": _num(m["achieved"]),
                    "target": _num(m["target"]), "ceiling": _num(m["ceiling"]), "fraction": _num(m["percent"]) / 100,
                    "passed": bool(m["passed"])}
        m = _TFLOPS.search(line)
        if m:
            theirs = _num(m["baseline_tflops"])
            fraction = _num(m["percent"]) / 100
            return {"what": m["what"].strip(), "unit": "TFLOP/s", "achieved": _num(m["achieved"]),
                    "target": round(fraction * theirs, 3), "ceiling": theirs, "fraction": fraction,
                    "baseline": m["baseline"].strip(), "passed": bool(m["passed"])}
    return None


def _cell_text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename', '')}: {out.get('evalue', '')}")
    return "\n".join(parts)


def performance_of(notebook: bytes | None) -> list[dict[str, Any]]:
    """Every performance check of an autograded notebook: its figure against its target, or why there is none.

    One entry per test cell that calls ``bandwidth_points`` or ``tflops_points``: ``grade_id``, ``state``
    (``"measured"``, ``"not_graded"`` or ``"no_figure"``: the check stopped before timing), the figures of
    its verdict (``what``, ``unit``, ``achieved``, ``target``, ``ceiling``, ``fraction``, ``passed``), the
    first line of its output, and the timed rounds the grader kept for it (``course_grader.timing``) with
    the best verified time per call. Never raises: an unreadable notebook gives []."""
    try:  # called as each record is saved: whatever is in the notebook, grading goes on
        return _performance_of(notebook)
    except Exception:
        return []


def _performance_of(notebook: bytes | None) -> list[dict[str, Any]]:
    if not notebook:
        return []
    import nbformat

    nb = nbformat.reads(notebook.decode("utf-8"), as_version=4)
    rounds = [r for r in nb.metadata.get("course_grader", {}).get("timing", []) or [] if isinstance(r, dict)]
    entries = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        if not any(call in cell.get("source", "") for call in _PERF_CALLS):
            continue
        text = _cell_text(cell)
        verdict = parse_verdict(text)
        entry: dict[str, Any] = {"grade_id": meta.get("grade_id", "")}
        if verdict:
            entry.update(state="measured", **verdict)
            mine = [r for r in rounds if r.get("what") == verdict["what"]]
            entry["rounds"] = mine
            per_call = [float(r["reported_ms"]) / int(r["calls"]) for r in mine
                        if r.get("reported_ms") and r.get("calls")]
            if per_call:
                entry["best_ms_per_call"] = round(min(per_call), 6)
        elif text.lstrip().startswith(_NOT_GRADED):
            entry["state"] = "not_graded"
        else:
            entry["state"] = "no_figure"
        entry["output"] = text.strip().splitlines()[0][:500] if text.strip() else ""
        entries.append(entry)
    return entries


# ---------------------------------------------------------------------------------------------------
# A graded class, as the report sees it
# ---------------------------------------------------------------------------------------------------

@dataclass
class GradedSubmission:
    """One student's graded submission of one assignment, from ``DIR``."""

    student: str
    assignment: str
    records: list[GradeRecord]                        # messages without the NOTE lines where the record file has them
    notes: list[str] = field(default_factory=list)
    run: dict[str, Any] = field(default_factory=dict)
    performance: list[dict[str, Any]] = field(default_factory=list)
    seconds: float | None = None
    folder: str = ""

    @property
    def points(self) -> float:
        return sum(r.points for r in self.records)

    @property
    def max_points(self) -> float:
        return sum(r.max_points for r in self.records)

    @property
    def not_graded_points(self) -> float:
        return sum(r.max_points for r in self.records if r.status == "not_graded")


def load_class(dirs: list[Path]) -> list[GradedSubmission]:
    """The submissions graded in autograde output folders (``grades.json`` and ``records/``)."""
    subs: dict[tuple[str, str], GradedSubmission] = {}
    for d in dirs:
        records = read_json(d / "grades.json") if (d / "grades.json").is_file() else []
        by_key: dict[tuple[str, str], list[GradeRecord]] = defaultdict(list)
        for r in records:
            by_key[(r.student, r.assignment)].append(r)
        for path in sorted((d / "records").glob("*/*.json")):  # graded, even if grades.json was not written
            by_key.setdefault((path.stem, path.parent.name), [])
        for (student, assignment), recs in by_key.items():
            sub = GradedSubmission(student, assignment, recs, folder=str(d))
            path = d / "records" / assignment / f"{student}.json"
            saved: dict[str, Any] = {}
            try:
                saved = json.loads(path.read_text())
            except (OSError, ValueError):
                pass
            if saved:
                try:
                    sub.records = [GradeRecord(**r) for r in saved["records"]]
                except (KeyError, TypeError):
                    pass
                sub.notes = [str(n) for n in saved.get("notes", [])]
                sub.run = dict(saved.get("run", {}))
                sub.seconds = saved.get("seconds")
                sub.performance = list(saved.get("performance") or [])
            else:  # only grades.json: the notes are the NOTE lines appended to every message
                note = next((r.message.split("NOTE: ", 1)[1] for r in recs if "NOTE: " in r.message), "")
                sub.notes = [n for n in note.split(" | ") if n]
            if not sub.records:
                continue
            if not sub.performance:
                graded = d / "work" / assignment / student / f"{assignment}.ipynb"
                if graded.is_file():
                    sub.performance = performance_of(graded.read_bytes())
            if not sub.performance:
                sub.performance = _performance_from_messages(sub.records)
            subs[(student, assignment)] = sub
    return [subs[k] for k in sorted(subs, key=lambda k: (k[1], k[0]))]


def _performance_from_messages(records: list[GradeRecord]) -> list[dict[str, Any]]:
    """Figures of the checks that failed below target (their verdict is the message), without a notebook."""
    out = []
    for r in records:
        verdict = parse_verdict(r.message)
        if verdict:
            out.append({"grade_id": r.grade_id, "state": "measured", **verdict})
        elif r.status == "not_graded" and r.message.startswith(_NOT_GRADED):
            out.append({"grade_id": r.grade_id, "state": "not_graded", "output": r.message.splitlines()[0]})
    return out


# ---------------------------------------------------------------------------------------------------
# Flags: what an instructor should look at, with the grader's evidence
# ---------------------------------------------------------------------------------------------------

#: (kind, phrase) pairs: a phrase found in a note or a message puts the submission under that kind.
_NOTE_KINDS = [
    ("tampering", "changed files outside its workspace"),
    ("tampering", "gradebook was changed"),
    ("graded unsandboxed", "UNSANDBOXED"),
    ("crash", "crashed in"),
    ("notebook edited", "metadata was stripped"),
    ("notebook edited", "was edited"),
    ("notebook edited", "was deleted"),
    ("feedback withheld", "feedback withheld"),
    ("course bug", "judge cells failed"),
    ("machine retry", "failed to start"),
]
_MESSAGE_KINDS = [
    ("work not done by the kernel", "computed with PyTorch"),
    ("work not done by the kernel", "without launching a Triton kernel"),
    ("work not done by the kernel", "no Triton kernel launch received"),
    ("work not done by the kernel", "no Triton launch received"),
    ("work not done by the kernel", "launched a Triton kernel only"),
    ("work not done by the kernel", "tensor values into Python"),
    ("work not done by the kernel", "copied data into a tensor"),
    ("work not done by the kernel", "returned one of its inputs"),
    ("work not done by the kernel", "same output tensor for different timed calls"),
    ("work not done by the kernel", "that its Triton launches do not compute"),
    ("work not done by the kernel", "that the notebook does not define"),
    ("work not done by the kernel", "bits of numbers and strings to its launches"),
    ("work not done by the kernel", "string Triton has no use for"),
    ("work not done by the kernel", "which is not an attribute of Triton's tensors"),
    ("work not done by the kernel", "which reaches"),
    ("tampering", "record of its launches"),
    ("timing disagreement", "Timings that disagree"),
    ("implausible speed", "faster than this GPU can move those bytes"),
    ("near miss", "Near miss: "),
    ("crash", "KernelDied"),
    ("crash", "NotRun"),
]


@dataclass
class Flag:
    student: str
    assignment: str
    kinds: list[str]
    evidence: list[str]


def flags(subs: list[GradedSubmission]) -> list[Flag]:
    """The submissions to review, each with the kinds of finding and the grader's own words for them."""
    out = []
    for s in subs:
        kinds: list[str] = []
        evidence: list[str] = []
        for note in s.notes:
            kind = next((k for k, phrase in _NOTE_KINDS if phrase in note), "grader note")
            kinds.append(kind)
            evidence.append(f"NOTE: {note}")
        if s.run.get("sandboxed") == "False" and "graded unsandboxed" not in kinds:
            kinds.append("graded unsandboxed")
            evidence.append("record: graded without the sandbox (run.sandboxed = False)")
        for r in s.records:
            message = r.message.split("\nNOTE: ", 1)[0]
            found = [k for k, phrase in _MESSAGE_KINDS if phrase in message]
            if r.status == "timeout":
                found.append("timeout")
            elif r.status == "error" and not found:
                found.append("error")
            if found:
                kinds.extend(found)
                evidence.append(f"{r.grade_id} ({r.status}): {message}")
        if kinds:
            out.append(Flag(s.student, s.assignment, sorted(set(kinds)), evidence))
    return out


# ---------------------------------------------------------------------------------------------------
# Plots (matplotlib, no pyplot: safe in threads and without a display)
# ---------------------------------------------------------------------------------------------------

def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def pass_rate_plot(rows: list[dict[str, Any]], assignment: str) -> str:
    fig = _figure(7, 0.45 * len(rows) + 1.2)
    ax = fig.add_subplot()
    names = [r["grade_id"] for r in rows]
    rates = [100 * r["rate"] if r["rate"] is not None else 0 for r in rows]
    ax.barh(range(len(rows)), rates, color=["#4c72b0" if r["rate"] is not None else "#cccccc" for r in rows])
    ax.set_yticks(range(len(rows)), names)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("passed (% of the submissions graded on this test)")
    ax.set_title(f"{assignment}: hidden tests")
    return _png(fig)


def points_plot(subs: list[GradedSubmission], assignment: str) -> str:
    fig = _figure(7, 3)
    ax = fig.add_subplot()
    pts = [s.points for s in subs]
    top = max(s.max_points for s in subs)
    ax.hist(pts, bins=max(1, int(top) + 1), range=(-0.5, int(top) + 0.5), color="#55a868", edgecolor="white")
    ax.set_xlabel(f"points (of {top:g})")
    ax.set_ylabel("submissions")
    ax.set_title(f"{assignment}: distribution of points")
    return _png(fig)


def performance_plot(entries: list[tuple[str, dict[str, Any]]], assignment: str) -> str:
    """One dot per measured submission, the target as a line (per check)."""
    fig = _figure(7, 3.2)
    ax = fig.add_subplot()
    checks = sorted({e["grade_id"] for _, e in entries})
    unit = entries[0][1]["unit"]
    for i, gid in enumerate(checks):
        mine = [e for _, e in entries if e["grade_id"] == gid]
        ys = [e["achieved"] for e in mine]
        xs = [i + (j - (len(ys) - 1) / 2) * 0.08 for j in range(len(ys))]
        ax.scatter(xs, ys, c=["#55a868" if e.get("passed") else "#c44e52" for e in mine], zorder=3)
        target = max(e["target"] for e in mine)
        ax.hlines(target, i - 0.4, i + 0.4, colors="black", linestyles="--", zorder=2,
                  label="target" if i == 0 else None)
    ax.set_xticks(range(len(checks)), checks)
    ax.set_xlim(-0.6, len(checks) - 0.4)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(unit)
    ax.set_title(f"{assignment}: measured speed against target (green: passed, red: below)")
    ax.legend(loc="lower right")
    return _png(fig)


# ---------------------------------------------------------------------------------------------------
# The page
# ---------------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .5em 0 1em; } th, td { border: 1px solid #ddd; padding: .25em .6em; }
th { background: #f4f4f4; text-align: left; } td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { white-space: pre-wrap; word-break: break-word; background: #f8f8f8; padding: .5em; margin: .2em 0; }
.flag { border-left: 4px solid #c44e52; padding-left: .8em; margin: 1em 0; }
.kind { display: inline-block; background: #fbe3e4; border-radius: 3px; padding: 0 .4em; margin-right: .3em; }
.muted { color: #666; } img { max-width: 100%; }
"""


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def test_pass_rates(subs: list[GradedSubmission]) -> list[dict[str, Any]]:
    """Per hidden test: counts of every status and the pass rate among submissions graded on it."""
    order: dict[str, int] = {}
    counts: dict[str, Counter] = defaultdict(Counter)
    max_points: dict[str, float] = {}
    for s in subs:
        for r in s.records:
            order.setdefault(r.grade_id, len(order))
            counts[r.grade_id][r.status] += 1
            max_points[r.grade_id] = r.max_points
    rows = []
    for gid in sorted(order, key=order.get):
        c = counts[gid]
        graded = sum(n for st, n in c.items() if st not in ("not_graded", "missing"))
        rows.append({"grade_id": gid, "points": max_points[gid], "counts": dict(c), "graded": graded,
                     "rate": (c["passed"] / graded) if graded else None})
    return rows


def failure_reasons(subs: list[GradedSubmission]) -> list[tuple[tuple[str, str], list[str]]]:
    """(test, first line of its message) -> students, for every test not passed, most frequent first."""
    reasons: dict[tuple[str, str], list[str]] = defaultdict(list)
    for s in subs:
        for r in s.records:
            if r.status in ("failed", "partial", "error", "timeout"):
                text = r.message.split("\nNOTE: ", 1)[0].strip()
                line = text.splitlines()[0] if text else "(no message)"
                line = line if len(line) <= 240 else line[:240].rsplit(" ", 1)[0] + " …"
                reasons[(r.grade_id, line)].append(s.student)
    return sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))


def render(subs: list[GradedSubmission], dirs: list[Path]) -> str:
    """The HTML page for these graded submissions."""
    by_assignment: dict[str, list[GradedSubmission]] = defaultdict(list)
    for s in subs:
        by_assignment[s.assignment].append(s)
    out = (_header(subs, dirs) + _tests_section(by_assignment) + _points_section(by_assignment)
           + _speed_section(by_assignment) + _flagged_section(subs) + _totals_section(subs))
    return "\n".join(out)


def _header(subs: list[GradedSubmission], dirs: list[Path]) -> list[str]:
    """The page's head, what it was made from, the machines and commits that graded, the navigation."""
    out: list[str] = []
    w = out.append
    w("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>")
    w("<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; img-src data:; "
      "style-src 'unsafe-inline'\">")
    w("<title>Grading report</title>")
    w(f"<style>{_CSS}</style></head><body>")
    w("<h1>Grading report</h1>")
    when = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    w(f"<p class='muted'>Made {_e(when)} from {', '.join(f'<code>{_e(d)}</code>' for d in dirs)}: "
      f"{len(subs)} graded submission(s) of {len({s.student for s in subs})} student(s).</p>")
    runs = sorted({(s.run.get("gpu", "unknown"), s.run.get("course_commit", "unknown"), s.run.get("sandboxed", "?"))
                   for s in subs if s.run})
    if runs:
        w("<table><tr><th>graded on</th><th>course commit</th><th>sandboxed</th></tr>")
        for gpu, commit, sandboxed in runs:
            w(f"<tr><td>{_e(gpu)}</td><td><code>{_e(commit)}</code></td><td>{_e(sandboxed)}</td></tr>")
        w("</table>")
    w("<nav><a href='#tests'>Hidden tests</a> · <a href='#points'>Points</a> · <a href='#speed'>Speed</a> · "
      "<a href='#flagged'>Flagged for review</a> · <a href='#totals'>Totals</a></nav>")
    return out


def _tests_section(by_assignment: dict[str, list[GradedSubmission]]) -> list[str]:
    """Per assignment: the pass rate of every hidden test, and why tests were not passed."""
    out: list[str] = []
    w = out.append
    w("<section id='tests'><h2>Hidden tests: pass rate</h2>")
    w("<p>Pass rate: submissions that earned every point of the test, of those graded on it (a performance "
      "check that could not be graded on this machine, or a missing notebook, is not counted).</p>")
    for a, group in sorted(by_assignment.items()):
        rows = test_pass_rates(group)
        w(f"<h3>{_e(a)}</h3><img class='plot' alt='pass rate of every hidden test of {_e(a)}' "
          f"src='{pass_rate_plot(rows, a)}'>")
        w("<table><tr><th>test</th><th>points</th><th>pass rate</th><th>passed</th><th>partial</th><th>failed</th>"
          "<th>error</th><th>timeout</th><th>not graded</th><th>missing</th></tr>")
        for r in rows:
            c = r["counts"]
            rate = f"{100 * r['rate']:.0f}% of {r['graded']}" if r["rate"] is not None else "not graded here"
            w(f"<tr><td><code>{_e(r['grade_id'])}</code></td><td class='num'>{r['points']:g}</td>"
              f"<td class='num'>{_e(rate)}</td>" + "".join(
                  f"<td class='num'>{c.get(st, 0)}</td>"
                  for st in ("passed", "partial", "failed", "error", "timeout", "not_graded", "missing")) + "</tr>")
        w("</table>")
        reasons = failure_reasons(group)
        if reasons:
            w("<h4>Why tests were not passed</h4><table><tr><th>test</th><th>message (first line)</th>"
              "<th>submissions</th><th>students</th></tr>")
            for (gid, line), students in reasons:
                shown = ", ".join(students[:5]) + (f" and {len(students) - 5} more" if len(students) > 5 else "")
                w(f"<tr><td><code>{_e(gid)}</code></td><td><pre>{_e(line)}</pre></td>"
                  f"<td class='num'>{len(students)}</td><td>{_e(shown)}</td></tr>")
            w("</table>")
    w("</section>")
    return out


def _points_section(by_assignment: dict[str, list[GradedSubmission]]) -> list[str]:
    """Per assignment: the distribution of points, and the points not graded on this machine."""
    out: list[str] = []
    w = out.append
    w("<section id='points'><h2>Distribution of points</h2>")
    for a, group in sorted(by_assignment.items()):
        ng = max(s.not_graded_points for s in group)
        pts = sorted(s.points for s in group)
        median = pts[len(pts) // 2]
        w(f"<h3>{_e(a)}</h3><img class='plot' alt='distribution of the points of {_e(a)}' "
          f"src='{points_plot(group, a)}'>")
        w(f"<p>{len(group)} submission(s); median {median:g} of {max(s.max_points for s in group):g} points.")
        if ng:
            w(f" <strong>Not graded here:</strong> up to {ng:g} point(s) of performance checks per submission "
              "need a GPU; they are 0 in these totals until the class is graded on one.")
        w("</p>")
    w("</section>")
    return out


def _speed_section(by_assignment: dict[str, list[GradedSubmission]]) -> list[str]:
    """Per assignment: each performance check's figure against its target."""
    out: list[str] = []
    w = out.append
    w("<section id='speed'><h2>Speed against target</h2>")
    w("<p>Each performance check's figure as the grader measured it (best verified timed round; GB/s counts "
      "each input read once and each output written once; the matmul chapter is in TFLOP/s against PyTorch "
      "timed in the same rounds), and its target.</p>")
    any_perf = False
    for a, group in sorted(by_assignment.items()):
        measured = [(s.student, e) for s in group for e in s.performance if e.get("state") == "measured"]
        not_graded = [(s.student, e) for s in group for e in s.performance if e.get("state") == "not_graded"]
        stopped = [(s.student, e) for s in group for e in s.performance if e.get("state") == "no_figure"]
        if not (measured or not_graded or stopped):
            continue
        any_perf = True
        w(f"<h3>{_e(a)}</h3>")
        if measured and any(str(s.run.get("gpu", "")).startswith("none") for s in group):
            w("<p><strong>Measured under Triton's interpreter</strong> (the course's own tests time the protocol "
              "on the CPU): these figures say nothing about speed.</p>")
        if measured:
            out += _measured_table(measured, a)
        if not_graded:
            w(f"<p><strong>Not graded on this machine:</strong> {len(not_graded)} check(s) of "
              f"{len({s for s, _ in not_graded})} submission(s) need a CUDA GPU (the grading machine ran "
              "Triton's interpreter). Grade the class on a GPU to measure them.</p>")
        if stopped:
            w(f"<p>{len(stopped)} check(s) stopped before any timing (a wrong kernel, or work not done by the "
              "kernel): see their messages under <a href='#flagged'>flagged for review</a> or in "
              "<code>grades.json</code>.</p>")
    if not any_perf:
        w("<p>No performance checks in these assignments.</p>")
    w("</section>")
    return out


def _measured_table(measured: list[tuple[str, dict[str, Any]]], assignment: str) -> list[str]:
    """The plot and the table of the measured performance checks of one assignment."""
    out = [f"<img class='plot' alt='measured speed of {_e(assignment)} against its target' "
           f"src='{performance_plot(measured, assignment)}'>",
           "<table><tr><th>student</th><th>check</th><th>measured</th><th>target</th><th>verdict</th>"
           "<th>best time per call</th></tr>"]
    for student, e in sorted(measured, key=lambda x: (x[1]["grade_id"], -x[1]["achieved"])):
        per_call = f"{e['best_ms_per_call']:.4g} ms" if e.get("best_ms_per_call") else ""
        out.append(f"<tr><td>{_e(student)}</td><td><code>{_e(e['grade_id'])}</code></td>"
                   f"<td class='num'>{e['achieved']:,.4g} {_e(e['unit'])}</td>"
                   f"<td class='num'>{e['target']:,.4g} {_e(e['unit'])}</td>"
                   f"<td>{'passed' if e.get('passed') else 'below target'}</td>"
                   f"<td class='num'>{_e(per_call)}</td></tr>")
    out.append("</table>")
    return out


def _flagged_section(subs: list[GradedSubmission]) -> list[str]:
    """The submissions flagged for review (:func:`flags`), each with its evidence."""
    out: list[str] = []
    w = out.append
    w("<section id='flagged'><h2>Flagged for review</h2>")
    found = flags(subs)
    if not found:
        w("<p>Nothing to review: no notes, errors, timeouts or work done outside the kernel.</p>")
    else:
        w(f"<p>{len(found)} submission(s). The evidence is the grader's own record: its notes and the "
          "messages of the tests concerned.</p>")
    for f in found:
        w("<div class='flag'>")
        w(f"<h3>{_e(f.student)} <span class='muted'>({_e(f.assignment)})</span></h3>")
        w("<p>" + "".join(f"<span class='kind'>{_e(k)}</span>" for k in f.kinds) + "</p>")
        for ev in f.evidence:
            w(f"<pre>{_e(ev)}</pre>")
        w("</div>")
    w("</section>")
    return out


def _totals_section(subs: list[GradedSubmission]) -> list[str]:
    """Every student's points per assignment, and the end of the page."""
    out = ["<section id='totals'><h2>Totals</h2><table><tr><th>student</th><th>assignment</th><th>points</th>"
           "<th>of</th><th>not graded</th><th>tests</th></tr>"]
    for row in totals([r for s in subs for r in s.records]):
        st = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(row["statuses"].items()))
        out.append(f"<tr><td>{_e(row['student'])}</td><td>{_e(row['assignment'])}</td>"
                   f"<td class='num'>{row['points']:g}</td><td class='num'>{row['max_points']:g}</td>"
                   f"<td class='num'>{row['not_graded_points']:g}</td><td>{_e(st)}</td></tr>")
    out.append("</table></section></body></html>\n")
    return out


def write_html(dirs: list[Path], path: Path) -> list[GradedSubmission]:
    """Render the page for the autograde output folders ``dirs`` into ``path``."""
    subs = load_class(dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render(subs, dirs), encoding="utf-8")
    return subs
