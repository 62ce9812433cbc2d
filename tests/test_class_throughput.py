"""A class's throughput counts every submission: tests/gpu/gpu_class_throughput.py builds a real class (honest
copies and the corpus: a hang, a crash, cheats, mistakes), its one headline rate is over all of them, only that
rate meets the target, and it says where the time went (grader.phases, the grader's per-cell clock).

The dry run grades a small part of chapter 03's class for real (nbgrader, bubblewrap, the judge) under the
interpreter: about 80 s on two shared cores."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from grader.judge import InProcessTransport, JudgeSession, StudentFunction
from grader.judge_timing import TIME_ON_CPU_ENV, timed_round
from grader.phases import PhaseClock, phase
from tests.conftest import ROOT
from tests.test_judge import add   # the judge tests' plain masked add (a kernel and its launcher)

sys.path.insert(0, str(ROOT / "tests" / "gpu"))
import gpu_class_throughput as throughput  # noqa: E402

SCRIPT = ROOT / "tests" / "gpu" / "gpu_class_throughput.py"


#: The tests of the dry run share one real class graded in sandboxes: one worker, once per run (and not in
#: `make test-fast`).
def DRY_RUN(test):  # noqa: N802 -- reads as a mark
    return pytest.mark.notebook(pytest.mark.xdist_group("class_dry_run")(test))


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path_factory.mktemp("dry")
    proc = subprocess.run([sys.executable, str(SCRIPT), "03", "--dry-run", "--out", str(out)],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    files = list(out.glob("gpu_class_throughput_*.json"))
    assert len(files) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(files[0].read_text())


@DRY_RUN
def test_the_dry_run_builds_the_issues_class_and_grades_its_hang_and_crash(dry_run):
    proc, r = dry_run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    built = r["class"]["built"]
    assert built["honest"] >= 20 and built["corpus"] >= 5 and built["size"] == built["honest"] + built["corpus"]
    kinds = {c["kind"]: key for key, c in r["corpus_outcomes"].items()}
    assert set(kinds) == {"hang", "crash"} and all(c["as_labelled"] for c in r["corpus_outcomes"].values())
    hang, crash = r["corpus_outcomes"][kinds["hang"]], r["corpus_outcomes"][kinds["crash"]]
    assert hang["source"] == "solutions/03_vector_add/submissions/attacks/ivy_infinite_loop.py" and "timeout" in hang["statuses"]
    assert crash["source"] == "solutions/03_vector_add/submissions/attacks/lea_crash_in_test.py" and "error" in crash["statuses"]
    assert r["every_honest_copy_full_marks"] and r["graded"] == r["class_size"] == 4
    assert r["device"].startswith("none (dry run") and r["cell_timeout_s"] == throughput.DRY_RUN_CELL_TIMEOUT_S
    assert not (ROOT / "tests" / "gpu" / "records" / "gpu_class_throughput_03_dry_run.json").exists(), "a dry run is no GPU result"


@DRY_RUN
def test_the_dry_runs_headline_rate_counts_every_submission(dry_run):
    _, r = dry_run
    rate, finished = r["rate"], r["finished_at_s"]
    assert len(finished) == r["class_size"] and set(finished) >= set(r["corpus_outcomes"])
    n = len(finished)
    everyone = (max(finished.values()) - min(finished.values())) / n
    # finished_at_s is kept to 0.1 s and the rate to 0.01 s: they agree within those roundings
    assert abs(rate["s_per_submission"] - everyone) <= 0.1 / n + 0.01
    assert r["steady_s_per_submission"] == rate["s_per_submission"]
    assert rate["counts"] == "every submission of the class: 2 honest, 2 from the corpus"
    assert rate["meets_target"] is None and "dry run" in rate["no_verdict_because"]
    assert "steady_s_per_honest_submission" not in r and "never compared" in rate["honest_only_breakdown"]["note"]
    assert "no verdict" in dry_run[0].stdout and "over every submission graded" in dry_run[0].stdout


@DRY_RUN
def test_the_dry_run_says_where_each_submissions_time_went(dry_run):
    _, r = dry_run
    per, seconds = r["phases_per_submission"], r["seconds_per_submission"]
    assert set(per) == set(seconds) and not r["phases"]["not_broken_down"]
    for key, phases in per.items():
        assert list(phases) == list(throughput.PHASES), key
        assert abs(sum(phases.values()) - seconds[key]) < 0.1, (key, phases, seconds[key])
        assert phases["sandbox_start"] > 0 and phases["student_cells"] > 0 and phases["nbgrader"] > 0, key
        assert phases["timing"] == 0, "no timed round under the interpreter"
    honest = [per[k] for k in per if "ada_correct" in k]
    assert all(p["judge_calls"] > 0 and p["reruns"] > 0 for p in honest)
    hang = per["03_vector_add/ivy_infinite_loop"]
    assert hang["judge_calls"] >= r["cell_timeout_s"], "the hung call's time is the judge's calls'"
    longest = r["longest_call_s"]
    assert longest["03_vector_add/ivy_infinite_loop"] >= r["cell_timeout_s"], "the hung call is the longest one"
    assert all(0 < longest[k] < r["cell_timeout_s"] for k in per if "ada_correct" in k), longest
    crash = per["03_vector_add/lea_crash_in_test"]
    assert crash["sandbox_start"] > min(p["sandbox_start"] for p in honest), "the restart is a second start"
    total = r["phases"]["total_s"]
    assert abs(sum(total.values()) - r["phases"]["graded_seconds"]) < 0.5
    assert set(r["phases"]["what"]) == set(throughput.PHASES)


# -- the rule, on made-up finishing times ------------------------------------------------------------

def _plan(honest: int, corpus: list[str]) -> throughput.ClassPlan:
    keys = [f"03_vector_add/ada_correct_{i:02d}" for i in range(honest)]
    cases = {f"03_vector_add/c{i}_{kind}": throughput.Case("03_vector_add", f"c{i}_{kind}", kind, "attacks")
             for i, kind in enumerate(corpus)}
    subs = [SimpleNamespace(assignment="03_vector_add", student=k.split("/")[1]) for k in keys + list(cases)]
    return throughput.ClassPlan(subs, keys, cases, ["03_vector_add"])


ISSUE_CORPUS = ["hang", "crash", "cheat", "mistake", "untouched"]


def test_a_slow_corpus_case_sets_the_class_rate_and_misses_the_target():
    """The honest copies finish at one a second; the hang finishes 200 s later. The rate is over the whole class,
    over the target; the honest copies' 1 s stays a labelled breakdown."""
    plan = _plan(20, ISSUE_CORPUS)
    finished = {k: 40.0 + i for i, k in enumerate(plan.honest)}
    finished.update({k: 60.0 for k in plan.corpus})
    finished["03_vector_add/c0_hang"] = 260.0
    rate = throughput.class_rate("03", plan, finished, dry_run=False)
    assert rate["class_complete"] and rate["s_per_submission"] == round(220 / 25, 2)
    assert rate["meets_target"] is False and rate["no_verdict_because"] is None
    assert rate["honest_only_breakdown"]["s_per_honest_submission"] == round(19 / 20, 2)
    finished["03_vector_add/c0_hang"] = 60.0
    assert throughput.class_rate("03", plan, finished, dry_run=False)["meets_target"] is True
    cheap = throughput.class_rate("03", plan, finished, dry_run=False, cell_timeout_s=20)   # a hang made cheap
    assert cheap["meets_target"] is None and "makes a hang cheap" in cheap["no_verdict_because"]
    assert throughput.class_rate("03", plan, finished, dry_run=False, cell_timeout_s=300)["meets_target"] is True


@pytest.mark.parametrize("honest, corpus", [(20, ["crash", "cheat", "mistake", "untouched", "cheat"]),  # no hang
                                            (20, ["hang", "cheat", "mistake", "untouched", "cheat"]),   # no crash
                                            (19, ISSUE_CORPUS), (20, ISSUE_CORPUS[:4]), (24, [])])
def test_a_class_without_the_issues_corpus_gets_no_verdict(honest, corpus):
    """Leaving out the slow or the broken (or grading too few) makes a fast class, never one that meets the target."""
    plan = _plan(honest, corpus)
    rate = throughput.class_rate("03", plan, {f"{s.assignment}/{s.student}": 50.0 + i
                                              for i, s in enumerate(plan.subs)}, dry_run=False)
    assert rate["s_per_submission"] is not None and rate["meets_target"] is None
    assert "not the issue's" in rate["no_verdict_because"]


def test_a_run_cut_short_has_no_rate():
    plan = _plan(20, ISSUE_CORPUS)
    finished = {f"{s.assignment}/{s.student}": 50.0 for s in plan.subs[:-1]}
    rate = throughput.class_rate("03", plan, finished, dry_run=False)
    assert rate["s_per_submission"] is None and rate["meets_target"] is None and rate["no_verdict_because"]


def test_the_course_rate_is_per_student_over_every_submission():
    """Two chapters, 10 students and 5 corpus cases: 25 submissions, 12.5 student-courses."""
    plan = _plan(20, ISSUE_CORPUS)
    plan.chapters = ["03_vector_add", "09_attention"]
    finished = {f"{s.assignment}/{s.student}": 10.0 + i for i, s in enumerate(plan.subs)}
    rate = throughput.class_rate("course", plan, finished, dry_run=False)
    assert rate["s_per_student"] == round(24 / 25 * 2, 1) and rate["target_per"] == "student's whole course"


def test_the_issues_classes_are_built_with_their_corpus(tmp_path):
    """The default classes: 24 copies of 03, 20 of 09, three students' whole course, each with its corpus."""
    for part, copies in (("03", 24), ("09", 20), ("course", 0)):
        plan = throughput.build_class(part, tmp_path / part, copies, 3)
        assert throughput.class_complete(plan), part
        assert {"hang", "crash"} <= {c.kind for c in plan.corpus.values()} and len(plan.corpus) >= 5, part
        assert all((ROOT / c.source).is_file() for c in plan.corpus.values())
        assert all(s.notebook.is_file() for s in plan.subs)
    none = throughput.build_class("03", tmp_path / "none", 20, 3, None, "none")
    assert not none.corpus and not throughput.class_complete(none)
    with pytest.raises(SystemExit, match="no such corpus case"):
        throughput.build_class("03", tmp_path / "bad", 20, 3, None, "nobody")


def test_phases_of_a_submission_add_up_to_its_seconds():
    meta = {"seconds": [[0, "kernel start", 1.0], [1, "student", 4.0], [5, "judge", 10.0], [6, "kernel start", 1.5],
                        [2, "replay", 2.0]],
            "phases": {"seconds": {"calls": 3.0, "reruns": 2.0, "timing": 4.0}}, "execute_s": 20.0}
    got = throughput.phases_of(meta, 26.0)
    assert got == {"sandbox_start": 2.5, "student_cells": 6.0, "judge_calls": 3.0, "reruns": 2.0, "timing": 4.0,
                   "judge_checks": 1.0, "judge_setup": 1.5, "nbgrader": 6.0}
    assert throughput.phases_of({"seconds": meta["seconds"]}, 26.0) is None, "graded before the judge kept phases"
    assert throughput.phases_of(meta, None) is None


# -- the judge's phase clock ------------------------------------------------------------------------------

def test_each_second_goes_to_the_innermost_phase():
    clock = PhaseClock()
    with clock.timed("timing"):
        time.sleep(0.05)
        with clock.timed("calls"):
            time.sleep(0.1)
        with clock.timed("timing"):   # a yardstick inside a timed round: the same entry
            time.sleep(0.05)
    assert clock.counts == {"timing": 1, "calls": 1}
    assert 0.1 <= clock.seconds["calls"] < 0.15 and 0.1 <= clock.seconds["timing"] < 0.15
    assert clock.summary()["seconds"]["calls"] == round(clock.seconds["calls"], 3)


def test_the_decorator_finds_the_sessions_clock_or_times_nothing():
    @phase("reruns")
    def work(first, value):
        return value + 1

    owner = SimpleNamespace(phases=PhaseClock())
    function = SimpleNamespace(session=SimpleNamespace(phases=PhaseClock()))
    assert work(owner, 1) == 2 and owner.phases.counts == {"reruns": 1}
    assert work(function, 2) == 3 and function.session.phases.counts == {"reruns": 1}
    assert work(SimpleNamespace(), 3) == 4 and work.__name__ == "work"   # no clock (a test's fake session)


def test_the_judge_times_its_calls_re_runs_and_timed_rounds(tmp_path, monkeypatch):
    """Through the judge in this process: a graded call counts as a call and a re-run, a timed round as timing
    (its own requests are not calls), and the three never exceed the time they took."""
    monkeypatch.setenv(TIME_ON_CPU_ENV, "1")
    s = JudgeSession(InProcessTransport({"add": add}, tmp_path))
    s.build_namespace([], ["add"])
    start = time.perf_counter()
    s.base["add"](torch.randn(1000), torch.randn(1000))
    assert s.phases.counts == {"calls": 1, "reruns": 1}
    timed_round(StudentFunction(s, "add"), [torch.randn(5000), torch.randn(5000)], lambda x, y: x + y,
                lambda dtype: (1e-6, 1e-5), what="add on 5000 elements")
    wall = time.perf_counter() - start
    assert s.phases.counts == {"calls": 1, "reruns": 1, "timing": 1}
    assert all(v > 0 for v in s.phases.seconds.values()) and sum(s.phases.seconds.values()) <= wall


def test_a_sandbox_killed_while_a_judge_drained_the_gpu_is_named_with_its_submission():
    """On an H100, two timed holds of the course's class waited the 60 s drain limit and the GPU lock killed a busy
    sandbox (tests/gpu/records/gpu_class_throughput_course_twice.json), and the record could not say whose it was:
    each kill is now listed with the submission that sandbox belonged to."""
    metas = {"09/a": {"quiet_while_judge_times": ["course-sandbox-1-0", "course-sandbox-1-0-relaunch"]},
             "10/b": {"quiet_while_judge_times": ["course-sandbox-7-5", "course-sandbox-7-5-relaunch"]}}
    history = {"09/a": [{"drain_ms": 60400.0, "frozen": ["course-sandbox-7-5:cgroup2"], "killed": ["course-sandbox-7-5"]},
                        {"drain_ms": 3.0, "frozen": []}],
               "10/b": [], "03/gone": [{"killed": ["course-sandbox-9-1"]}]}
    assert throughput.killed_while_draining(metas, history) == [
        {"hold_of": "03/gone", "sandbox": "course-sandbox-9-1", "submission": None},
        {"hold_of": "09/a", "sandbox": "course-sandbox-7-5", "submission": "10/b"}]
