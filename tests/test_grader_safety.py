"""The autograder against a corpus of cheating, broken, hostile and noisy submissions (chapter 03, real
nbgrader, every submission in its bubblewrap sandbox, the hidden tests in the judge).

One class is graded once (module fixture, 2 workers): the example answer files of
``solutions/03_vector_add/submissions/examples``, the slow ones of ``solutions/03_vector_add/submissions/attacks`` (an infinite loop,
a process that kills itself) and notebook transformations from ``tests/safety/transforms.py`` (stripped
metadata, deleted and edited test cells). Every test below reads that one result.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest

from grader.autograde import find_submissions, grade_all, graded_cells
from grader.course import example_submissions, solution_notebook
from grader.examples import apply_answers, build_submissions, parse_answers
from grader.feedback import leaks
from tests.safety.links import HONEST_AFTER, LINKED, plant_linked_submissions, target_texts
from tests.safety.transforms import TRANSFORMS

pytestmark = [pytest.mark.notebook, pytest.mark.xdist_group("grader_safety")]  # one fixture, one worker

A = "03_vector_add"
HONEST = ["ada_correct", "mia_noisy", "jay_huge_output", "vic_harm_others", "xan_display_flood", HONEST_AFTER]
CHEATS = ["fay_torch_result", "gus_monkeypatch", "hal_hardcoded", "kim_tamper", "rex_token_launch",
          "uma_hooks_and_outputs", "abe_patched_launcher", "sly_right_only_off_the_record",
          "lan_chinese_messages_and_torch_result"]
#: Loads whose mask is no mask (None, by keyword or position; True; always true), or an unmasked load in a second
#: kernel the call launches: only the masked-load test is lost (utils/static.py).
MASK_DODGES = ["nia_mask_none", "otto_positional_none", "ravi_mask_true", "tom_always_true_mask",
               "hugo_unmasked_second_kernel"]
#: Answers smuggled past the re-run through a launch's non-tensor values, and PyTorch reached from a kernel's
#: source: each refused by its rule (grader.relauncher.record_problems), with the words of that rule.
SMUGGLERS = {"ned_answer_in_a_string": "string Triton has no use for",
             "ola_answer_in_one_integer": "hold at most 64",
             "pat_answer_in_short_names": "bits of numbers and strings",
             "quo_torch_through_the_course": "reaches the module torch"}
CORRECTNESS = ["test_add_ragged", "test_add_fp16", "test_add_2d", "test_add_writes_exactly_n"]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    submitted = root / "submitted"
    students = build_submissions(A, submitted)
    students += build_submissions(A, submitted, kind="attacks")
    ada = apply_answers(A, parse_answers((example_submissions(A) / "ada_correct.py").read_text()))
    for name, transform in TRANSFORMS.items():
        dest = submitted / name / A / f"{A}.ipynb"
        dest.parent.mkdir(parents=True)
        nbformat.write(transform(nbformat.from_dict(json.loads(json.dumps(ada)))), dest)
        students.append(name)
    linked = plant_linked_submissions(submitted, A, submitted / "ada_correct" / A / f"{A}.ipynb")
    keep = set(HONEST + CHEATS + list(SMUGGLERS) + MASK_DODGES + ["cleo_no_mask", "ivy_infinite_loop", "lea_crash_in_test",
                                                    "wes_kills_and_fakes"] + list(TRANSFORMS) + linked)
    subs = [s for s in find_submissions(submitted, A) if s.student in keep]
    before = {s.student: s.notebook.read_bytes() for s in subs if s.student not in LINKED}   # a FIFO would block
    os.environ["COURSE_TEST_ATTACK_ROOT"] = str(root)
    try:
        # 3 at once on 2 cores: the hangs and crashes of the class wait on time limits and restarts, not on a CPU
        records = grade_all(subs, root / "out", workers=3, cell_timeout_s=20)
    finally:
        del os.environ["COURSE_TEST_ATTACK_ROOT"]
    by = {}
    for r in records:
        by.setdefault(r.student, {})[r.grade_id] = r
    return {"root": root, "out": root / "out", "subs": subs, "before": before, "by": by, "students": keep,
            "records": records}


def test_every_student_is_reported_with_every_test(graded):
    cells = {c.grade_id for c in graded_cells(A)}
    assert set(graded["by"]) == graded["students"]
    for student, recs in graded["by"].items():
        assert set(recs) == cells, student


@pytest.mark.parametrize("student", HONEST)
def test_honest_submissions_keep_every_point(graded, student):
    """Warnings and stderr from the student's code, or 40 MB of prints, cost nothing."""
    for gid in CORRECTNESS:
        r = graded["by"][student][gid]
        assert r.status == "passed" and r.points == r.max_points, r
    assert graded["by"][student]["test_add_bandwidth"].status == "not_graded"


def test_huge_output_is_cut(graded):
    nb = graded["out"] / "work" / A / "jay_huge_output" / f"{A}.ipynb"
    assert nb.stat().st_size < 3_000_000


@pytest.mark.parametrize("student", CHEATS)
def test_cheats_earn_nothing(graded, student):
    for gid in CORRECTNESS:
        r = graded["by"][student][gid]
        assert r.points == 0 and r.status == "failed", r
    assert graded["by"][student]["test_add_bandwidth"].points == 0


def test_a_submission_that_switches_the_language_changes_no_verdict(graded):
    """The student's own process speaks Chinese (set_language, TRITON_COURSE_LANGUAGE) and returns PyTorch's sum: the
    judge's verdicts, decided and worded in its own process, stay English and give nothing; the honest students graded
    in the same class keep every point (test_honest_submissions_keep_every_point)."""
    import re

    cjk = re.compile("[\u4e00-\u9fff]")
    for gid in CORRECTNESS:
        r = graded["by"]["lan_chinese_messages_and_torch_result"][gid]
        assert r.points == 0 and r.status == "failed" and r.message and not cjk.search(r.message), r


@pytest.mark.parametrize("student", SMUGGLERS)
def test_answers_smuggled_past_the_re_run_earn_nothing(graded, student):
    """A string, an integer of any length, a tuple of short names, or PyTorch reached through an allowed module:
    every correctness test 0 with the rule's words, in the real sandboxes (the re-run process holds the source
    rule by itself too); the honest students graded in the same class keep every point
    (test_honest_submissions_keep_every_point)."""
    for gid in CORRECTNESS:
        r = graded["by"][student][gid]
        assert r.points == 0 and r.status == "failed" and SMUGGLERS[student] in r.message, r
    assert graded["by"][student]["test_add_bandwidth"].points == 0


@pytest.mark.parametrize("student", MASK_DODGES)
def test_a_mask_that_is_no_mask_loses_the_masked_load_point(graded, student):
    """mask=None, a positional None, mask=True, a mask always true, or an unmasked load in a helper kernel that the
    call launches: the masked-load test is 0 and names the load; the other correctness tests are unaffected."""
    by = graded["by"][student]
    r = by["test_add_writes_exactly_n"]
    assert r.points == 0 and r.status == "failed" and "tl.load(" in r.message, r
    for gid in ("test_add_ragged", "test_add_fp16", "test_add_2d"):
        assert by[gid].status == "passed" and by[gid].points == by[gid].max_points, by[gid]
    assert by["test_add_gpu_sizes"].status == by["test_add_bandwidth"].status == "not_graded"


@pytest.mark.parametrize("student", LINKED)
def test_links_and_files_that_are_not_notebooks_earn_nothing_and_quote_nothing(graded, student):
    """A notebook (or a student's or assignment folder) that is a symbolic link, a hard link, a FIFO, a folder
    or no notebook at all: refused unread, 0 points, and no message quotes the file it points to
    (tests/safety/links.py plants them); the honest student graded after them keeps every point."""
    for r in graded["by"][student].values():
        assert r.points == 0 and r.status in ("failed", "error"), r
        assert not any(t in r.message for t in target_texts()), r


def test_pytorch_result_is_caught_by_the_launch_check(graded):
    r = graded["by"]["fay_torch_result"]["test_add_ragged"]
    assert "without launching a Triton kernel" in r.message


def test_work_hidden_from_the_evidence_is_not_in_the_relaunch(graded):
    """PyTorch inside a patched Triton launcher leaves the student's own evidence clean (no operator outside a
    launch); the launches re-run alone in the second sandbox, by Triton's own launcher, compute what the kernel
    computes, and that is what is graded. (PyTorch in another thread: tests/test_relaunch.py.)"""
    by = graded["by"]["abe_patched_launcher"]
    assert all(by[gid].points == 0 for gid in CORRECTNESS), by
    # Each test's first call is caught by the comparison of the returned result with the re-run's, unless
    # its random inputs make x + y and x agree within that comparison's tolerance (|y| <= 1.1% of |x| for
    # the one element of test_add_ragged's first call: about 1 draw in 140). Then the re-run's x is graded,
    # and is wrong. Four tests all drawing such inputs: about 1 in 10^8.
    caught = [gid for gid in CORRECTNESS if "do not compute" in by[gid].message and "re-ran them alone" in by[gid].message]
    assert caught, {gid: by[gid].message for gid in CORRECTNESS}


def test_knowing_that_the_call_is_recorded_earns_nothing(graded):
    """A notebook can tell a recorded graded call from others (triton_course.integrity.recording_launches, as it
    could from COURSE_REQUIRE_KERNEL): one that computes with PyTorch only off the record is graded on what its
    recorded launches compute, which is nothing."""
    r = graded["by"]["sly_right_only_off_the_record"]["test_add_ragged"]
    assert r.points == 0 and "never written" in r.message, r


def test_monkeypatching_is_undone(graded):
    r = graded["by"]["gus_monkeypatch"]["test_add_ragged"]
    assert "never written" in r.message


def test_gradebook_and_file_tampering_changes_nothing(graded):
    kim = graded["by"]["kim_tamper"]["test_add_ragged"]
    assert kim.points == 0 and "wrong" in kim.message  # the sandbox never sees the gradebook
    for s in graded["subs"]:  # every submitted notebook is back as it was handed in
        if s.student in graded["before"]:
            assert s.notebook.read_bytes() == graded["before"][s.student], s.student
    for f in (graded["out"] / "records" / A).glob("*.json"):
        assert json.loads(f.read_text())["records"], f


def test_a_kernel_crash_is_reported_and_grading_goes_on(graded):
    lea = graded["by"]["lea_crash_in_test"]
    assert lea["test_add_fp16"].status == "error" and "crashed" in lea["test_add_fp16"].message
    for gid in ("test_add_ragged", "test_add_2d", "test_add_writes_exactly_n"):
        assert lea[gid].status == "passed", lea[gid]
    cleo = graded["by"]["cleo_no_mask"]
    assert "Out-of-bounds stores" in cleo["test_add_ragged"].message
    assert "no mask" in cleo["test_add_writes_exactly_n"].message


def test_an_infinite_loop_times_out_one_test_only(graded):
    ivy = graded["by"]["ivy_infinite_loop"]
    assert ivy["test_add_ragged"].status == "timeout" and ivy["test_add_ragged"].points == 0
    for gid in ("test_add_fp16", "test_add_2d", "test_add_writes_exactly_n"):
        assert ivy[gid].status == "passed", ivy[gid]


@pytest.mark.parametrize("student,note", [("nora_stripped_metadata", "metadata was stripped"),
                                          ("omar_deleted_tests", "was deleted"),
                                          ("pia_edited_tests", "was edited")])
def test_tampered_notebooks_are_graded_and_reported(graded, student, note):
    for gid in CORRECTNESS:
        r = graded["by"][student][gid]
        assert r.status == "passed" and r.points == r.max_points, r
        assert note in r.message, r


def test_feedback_hides_the_hidden_tests(graded):
    source = nbformat.read(solution_notebook(A), as_version=4)
    for student in ("ada_correct", "cleo_no_mask", "fay_torch_result"):
        html = graded["out"] / "feedback" / student / f"{A}.html"
        assert html.exists(), student
        assert leaks(html, source) == [], student
        assert "hidden test" in html.read_text()


def test_resume_skips_graded_submissions(graded, monkeypatch):
    import grader.autograde as ag

    def boom(job):
        raise AssertionError("re-graded a submission that was already graded")

    monkeypatch.setattr(ag, "run_job", boom)
    subs = [s for s in graded["subs"] if s.student in ("ada_correct", "fay_torch_result")]
    again = grade_all(subs, graded["out"], workers=2)
    assert [r.points for r in again] == [graded["by"][r.student][r.grade_id].points for r in again]


def test_nothing_outside_a_sandbox_was_written(graded):
    """vic_harm_others tried HOME startup files, the course checkout and the class folder: none exist."""
    from grader.course import REPO_ROOT, example_submissions

    assert not (graded["root"] / "planted.py").exists()
    assert not (Path.home() / ".ipython/profile_default/startup/00-own.py").exists()
    assert "OWNED" not in (REPO_ROOT / "utils" / "checks.py").read_text()
    for f in (graded["out"] / "records" / A).glob("*.json"):  # its leftover process is gone with its sandbox
        assert json.loads(f.read_text())["signature"], f


def test_a_process_that_kills_everything_it_sees_costs_only_that_call(graded):
    wes = graded["by"]["wes_kills_and_fakes"]
    assert wes["test_add_ragged"].status == "error" and "crashed" in wes["test_add_ragged"].message
    for gid in ("test_add_fp16", "test_add_2d", "test_add_writes_exactly_n"):
        assert wes[gid].status == "passed", wes[gid]
    assert "failed to start" not in wes["test_add_ragged"].message  # its printed failure text is not evidence


def test_display_updates_cannot_bloat_the_stored_notebook(graded):
    nb = graded["out"] / "work" / A / "xan_display_flood" / f"{A}.ipynb"
    assert nb.stat().st_size < 10_000_000


def test_records_name_their_provenance(graded):
    rec = json.loads((graded["out"] / "records" / A / "ada_correct.json").read_text())
    run = rec["run"]
    assert run["sandbox"].startswith("bubblewrap") and len(run["seed_sha"]) == 16
    assert run["relaunch"]["where"].startswith("bubblewrap") and run["relaunch"]["calls"] >= 20, run["relaunch"]
    # both of its sandboxes are frozen while the judge times its own yardstick (grader.gpu_lock.GpuLock.quieted)
    quiet = run["quiet_while_judge_times"]
    assert len(quiet) == 2 and quiet[1] == quiet[0] + "-relaunch" and quiet[0].startswith("course-sandbox-"), quiet
    assert run["course_commit"] and run["torch"] and run["gpu"]
    # what the GPU lock took back from others when a test ran out of memory: nothing here (no GPU, no NVML)
    assert run["gpu_memory"] == {"reclaims": [], "peak_gpu_bytes": None, "killed_for_memory": 0}, run["gpu_memory"]


def test_a_planted_resume_record_is_not_trusted(graded, monkeypatch):
    """A record that the grader did not sign (written by anyone else) is graded again, not believed."""
    import grader.autograde as ag
    from grader.records import sha256

    sub = next(s for s in graded["subs"] if s.student == "rex_token_launch")
    path = graded["out"] / "records" / A / f"{sub.student}.json"
    saved = path.read_bytes()
    forged = json.loads(saved)
    for r in forged["records"]:
        r["points"], r["status"] = r["max_points"], "passed"
    forged["sha256"] = sha256(sub.notebook.read_bytes())
    path.write_text(json.dumps(forged))
    regraded = []
    monkeypatch.setattr(ag, "run_job", lambda job: regraded.append(job.student) or ag.JobResult(
        ag.all_cells(job, "error", "regraded").records, []))
    try:
        again = grade_all([sub], graded["out"], workers=1, feedback=False)
    finally:
        path.write_bytes(saved)
    assert regraded == [sub.student]
    assert all(r.points == 0 for r in again)


def test_the_next_class_in_this_process_gets_a_clean_template(graded, tmp_path, monkeypatch):
    """This process keeps the template it made for the class above (packed before any submission ran), in
    which kim_tamper wrote full marks into its gradebook and overwrote files: a class graded next in the same
    process takes that template without generating it again, and its honest student keeps every point, its
    gradebook as the template made it."""
    import grader.autograde as ag
    import grader.jobs as jobs

    generated = []
    real = ag.run_nbgrader
    record = lambda root, *args, **kw: generated.append(args) or real(root, *args, **kw)  # noqa: E731
    monkeypatch.setattr(ag, "run_nbgrader", record)     # the template (generate_assignment)
    monkeypatch.setattr(jobs, "run_nbgrader", record)   # the job (autograde)
    sub = next(s for s in graded["subs"] if s.student == "ada_correct")
    records = grade_all([sub], tmp_path / "out", workers=1, feedback=False)
    assert [args[0] for args in generated] == ["autograde"], generated   # no generate_assignment: the cache
    by = {r.grade_id: r for r in records}
    for gid in CORRECTNESS:
        assert by[gid].status == "passed" and by[gid].points == by[gid].max_points, by[gid]
