"""Chapter 01: the occupancy rules of the reference solution, its spec table, the self-check's hints (each
fires on its own mistake and on no other), and the example corpus."""

from __future__ import annotations

import pytest

from grader.autograde import find_submissions, grade_all
from grader.course import solution_notebook
from grader.examples import build_submissions
from grader.notebook_code import exec_cell, load_namespace
from tests.conftest import run_with_answers, solution_cell
from triton_course.checks import CheckFailed
from triton_course.gpus import GPU_SPECS, recorded
from triton_course.occupancy import LIMITS, sm_limits

CHAPTER = "01_gpu_model"


@pytest.fixture(scope="module")
def ns():
    return load_namespace(solution_notebook(CHAPTER))


def test_every_named_gpu_has_limits():
    for name, spec in GPU_SPECS.items():
        assert sm_limits(name).compute_capability == spec.compute_capability
        assert sm_limits(name.lower()) is sm_limits(name)
    with pytest.raises(ValueError):
        sm_limits("Z9")
    for lim in LIMITS.values():
        assert lim.max_shared_per_block + lim.shared_reserved_per_block <= lim.shared_per_sm


@pytest.mark.parametrize("args, gpu, want", [
    ((128, 160), "A100", 0.1875),        # the worked example (registers)
    ((256, 32), "A100", 1.0),
    ((1024, 64), "A100", 0.5),
    ((544, 40), "A100", 0.53125),        # register partitions decide
    ((640, 16), "H100", 0.9375),         # warps decide
    ((32, 16), "H200", 0.5),             # blocks decide
    ((256, 16, 41 * 1024), "A100", 0.375),  # the 1 KB reservation decides
    ((128, 32, 32329), "H100", 0.375),   # the 128-byte granularity decides
    ((1024, 65), "B200", 0.0),           # a block's registers do not fit
])
def test_reference_occupancy(ns, args, gpu, want):
    assert ns["occupancy"](*args, gpu=gpu) == pytest.approx(want)


def test_occupancy_is_monotone_and_bounded(ns):
    occ = ns["occupancy"]
    for gpu in ("A100", "H100", "T4", "A10"):
        for threads in (32, 96, 128, 256, 512, 1024):
            by_regs = [occ(threads, r, gpu=gpu) for r in range(0, 256, 7)]
            assert all(0 <= v <= 1 for v in by_regs)
            assert by_regs == sorted(by_regs, reverse=True), (gpu, threads)
            by_smem = [occ(threads, 32, s, gpu=gpu) for s in range(0, 64 * 1024, 3000)]
            assert by_smem == sorted(by_smem, reverse=True), (gpu, threads)


def _cell(grade_id: str) -> str:
    return solution_cell(CHAPTER, grade_id)


def _mistaken_occupancy(*, whole_file=False, no_rounding=False, floor_warps=False, no_block_limit=False,
                        no_reservation=False):
    """The reference rules with one typical mistake (rebuilt here, so that the mistake is exactly one rule)."""
    def occupancy(threads, regs, smem=0, gpu="A100"):
        lim = sm_limits(gpu)
        warps = threads // 32 if floor_warps else -(-threads // 32)
        limits = [lim.max_warps_per_sm // warps] + ([] if no_block_limit else [lim.max_blocks_per_sm])
        if regs:
            per_warp = regs * 32 if no_rounding else -(-regs * 32 // 256) * 256
            by_regs = lim.registers_per_sm // per_warp if whole_file else 4 * (lim.registers_per_sm // 4 // per_warp)
            limits.append(by_regs // warps)
        if smem > lim.max_shared_per_block:
            return 0.0
        need = -(-smem // 128) * 128 + (0 if no_reservation else lim.shared_reserved_per_block)
        if need:
            limits.append(lim.shared_per_sm // need)
        return min(limits) * warps / lim.max_warps_per_sm
    return occupancy


def test_the_rebuilt_rules_without_a_mistake_are_the_reference(ns):
    rebuilt = _mistaken_occupancy()
    for gpu in ("A100", "H100", "T4", "A10"):
        for threads in (32, 48, 96, 128, 256, 544, 1024):
            for regs in (0, 16, 33, 40, 48, 64, 128, 200):
                for smem in (0, 100, 20_000, 41 * 1024):
                    assert rebuilt(threads, regs, smem, gpu) == ns["occupancy"](threads, regs, smem, gpu=gpu)


_OCCUPANCY_HINTS = {"whole_file": "HINT_PARTITION", "no_rounding": "HINT_ROUNDING", "floor_warps": "HINT_PARTIAL_WARP",
                    "no_block_limit": "HINT_BLOCK_LIMIT", "no_reservation": "HINT_RESERVATION"}


@pytest.mark.parametrize("mistake", [None, *_OCCUPANCY_HINTS])
def test_each_self_check_hint_fires_on_its_mistake_and_on_no_other(ns, mistake):
    """The occupancy self-check with one mistaken rule: it fails naming that rule's hint and no other hint;
    the correct rules pass it."""
    scope = dict(ns)
    scope["occupancy"] = _mistaken_occupancy(**{mistake: True}) if mistake else ns["occupancy"]
    if mistake is None:
        exec_cell(_cell("self_check_occupancy"), "<self_check_occupancy>", scope)
        return
    with pytest.raises(CheckFailed) as info:
        exec_cell(_cell("self_check_occupancy"), "<self_check_occupancy>", scope)
    hints = {name: scope[name] for name in _OCCUPANCY_HINTS.values()}
    fired = {name for name, text in hints.items() if text in str(info.value)}
    assert fired == {_OCCUPANCY_HINTS[mistake]}, str(info.value)


def test_the_recorded_kernels_agree_with_the_reference_rules(ns):
    """The experiment prints the student's occupancy beside the driver's for the kernels recorded on a GPU:
    with the reference rules every row agrees, so a row marked 'differs' points at the student's rules."""
    record, source = recorded(CHAPTER)
    assert record is not None and "solutions/01_gpu_model/records/01_gpu_model.json" in source
    rows = [k for k in record["kernels"] if "error" not in k]
    assert len(rows) >= 10
    for k in rows:
        ours = ns["occupancy"](32 * k["num_warps"], k["n_regs"], k["shared_bytes"], gpu=tuple(record["compute_capability"]))
        assert ours == pytest.approx(k["driver_occupancy"]), k


def test_waves_and_access_patterns(ns):
    assert [ns["waves"](b, 132) for b in (1, 132, 133, 264, 265)] == [1, 1, 2, 2, 3]
    assert ns["last_wave_utilization"](133, 132) == pytest.approx(1 / 132)
    lanes = range(32)
    assert ns["sectors_touched"]([4 * i for i in lanes]) == 4
    assert ns["sectors_touched"]([128 * i for i in lanes]) == 32
    assert ns["bank_conflict_ways"]([128 * i for i in lanes]) == 32
    assert ns["bank_conflict_ways"]([132 * i for i in lanes]) == 1


def test_sectors_follow_alignment(ns):
    """One aligned access never straddles two sectors, so a warp costs the distinct sectors of its addresses; a
    misaligned address (which faults on a GPU) is refused by the given lines."""
    lanes = range(32)
    st = ns["sectors_touched"]
    assert st([16 + 64 * i for i in lanes], access_bytes=16) == 32      # the hidden test's sparse float4 case
    assert st([4 + 4 * i for i in lanes]) == 5                          # a warp's span may straddle
    for size in (1, 2, 4, 8, 16):
        assert st([size * i for i in lanes], access_bytes=size) == -(-32 * size // 32)
    for bad in (([30 + 64 * i for i in lanes],), ([2], 4), ([0], 3), ([0], 32)):
        with pytest.raises(ValueError):
            st(*bad)


def test_examples_fail_for_the_right_reason():
    """Each answer file against the hidden tests, run by the judge (proxies; ValueErrors reach it as words)."""
    assert all(v == "passed" for v in run_with_answers(CHAPTER, "ada_correct").values())
    cleo = run_with_answers(CHAPTER, "cleo_whole_file")
    assert "occupancy(544, 40)" in cleo["test_occupancy_registers"]
    assert "one scheduler's quarter of the register file" in cleo["test_occupancy_registers"]
    assert "units of 256" not in cleo["test_occupancy_registers"]
    assert cleo["test_occupancy_shared"] == "passed"
    dev = run_with_answers(CHAPTER, "dev_no_reservation")
    assert "1 KB reservation" in dev["test_occupancy_shared"]
    assert "every block also takes the 1 KB the system reserves" in dev["test_occupancy_shared"]
    assert dev["test_occupancy_registers"] == "passed"
    eve = run_with_answers(CHAPTER, "eve_floor_waves")
    assert all(eve[g] != "passed" for g in ("test_waves", "test_sectors", "test_bank_conflicts"))
    assert "sectors_touched([16, 80" in eve["test_sectors"], eve["test_sectors"]   # the span is not the sectors
    assert eve["test_occupancy_shared"] == "passed"


def test_a_table_of_the_self_check_cases_earns_nothing_for_occupancy():
    fay = run_with_answers(CHAPTER, "fay_self_check_table")
    for gid in ("test_occupancy_registers", "test_occupancy_warps_blocks", "test_occupancy_shared"):
        assert fay[gid].startswith("CheckFailed: occupancy("), (gid, fay[gid])
    assert fay["test_waves"] == "passed"


@pytest.mark.notebook
def test_examples_by_real_autograde(tmp_path):
    """A mistake graded by nbgrader in the sandbox (the solution and the untouched notebook are graded so by
    tests/test_autograde.py)."""
    students = build_submissions(CHAPTER, tmp_path / "submitted")
    assert {"ada_correct", "ben_untouched", "cleo_whole_file", "dev_no_reservation", "eve_floor_waves",
            "fay_self_check_table"} <= set(students)
    subs = [s for s in find_submissions(tmp_path / "submitted", CHAPTER) if s.student == "dev_no_reservation"]
    records = {(r.student, r.grade_id): r for r in grade_all(subs, tmp_path / "out", workers=1, feedback=False)}
    dev = records[("dev_no_reservation", "test_occupancy_shared")]
    assert dev.status == "failed" and "1 KB reservation" in dev.message
    assert records[("dev_no_reservation", "test_occupancy_registers")].status == "passed"


# ---------------------------------------------------------------------------------------------------
# The GPU cells on every compute capability a student's GPU may have
# ---------------------------------------------------------------------------------------------------

#: (compute capability, a GPU of it, SMs, threads per SM): older than the table, in it, and newer than it.
CAPABILITIES = [((3, 5), "Tesla K80", 13, 2048), ((7, 0), "Tesla V100-SXM2-16GB", 80, 2048),
                ((7, 5), "Tesla T4", 40, 1024), ((8, 0), "NVIDIA A100-SXM4-80GB", 108, 2048), ((8, 6), "NVIDIA A10", 72, 1536),
                ((8, 9), "NVIDIA L4", 58, 1536), ((9, 0), "NVIDIA H200", 132, 2048),
                ((10, 0), "NVIDIA B200", 148, 2048), ((12, 0), "NVIDIA GeForce RTX 5090", 170, 1536)]


def _props(cc, name, sms, threads):
    """A stand-in for ``torch.cuda.get_device_properties`` of a GPU that is not here."""
    import types

    return types.SimpleNamespace(name=name, major=cc[0], minor=cc[1], multi_processor_count=sms,
                                 max_threads_per_multi_processor=threads, regs_per_multiprocessor=65536,
                                 shared_memory_per_multiprocessor=102400, L2_cache_size=4 << 20, total_memory=16e9)


@pytest.mark.parametrize("cc, name, sms, threads", CAPABILITIES)
def test_device_limits_name_a_capability_the_table_lacks_and_never_raise(cc, name, sms, threads):
    """A capability in the table gets its own limits and no note; any other gets the nearest known one's (the
    newest not newer, else the oldest), and a note naming the GPU, its capability and the assumption."""
    from triton_course.occupancy import device_limits

    lim, note = device_limits(_props(cc, name, sms, threads))
    if cc in LIMITS:
        assert lim is LIMITS[cc] and note == ""
        return
    assumed = {(3, 5): (7, 5), (7, 0): (7, 5), (12, 0): (10, 0)}[cc]
    assert lim is LIMITS[assumed]
    assert name in note and f"compute capability {cc[0]}.{cc[1]} is not in the table" in note
    assert f"assuming the limits of {assumed[0]}.{assumed[1]}" in note
    with pytest.raises(ValueError, match=f"compute capability {cc[0]}.{cc[1]}"):
        sm_limits(cc)                     # the student's sm_limits stays strict; the cells use device_limits


def _gpu_cell_namespace(ns, props, driver_blocks=2):
    """The solution's namespace with the GPU parts of cells 6 and 22 replaced by stand-ins for ``props``: a
    device that is a GPU, torch.cuda's properties, a @triton.jit whose launch returns a compiled kernel, the
    kernel's statistics and the driver's block count. The cells' own code and the reference ``occupancy`` run."""
    import types

    from triton_course.gpus import spec_for
    from triton_course.occupancy import KernelStats

    def launch(*args, num_warps, **kwargs):
        return KernelStats("row_sum_kernel", num_warps, 32, 0, 0)
    fake = dict(ns)
    fake["device"] = types.SimpleNamespace(is_gpu=True, peak_gbps=300.0, spec=spec_for(props.name))
    fake["torch"] = types.SimpleNamespace(
        randn=lambda *a, **k: None, empty=lambda *a, **k: None,
        cuda=types.SimpleNamespace(get_device_properties=lambda index: props))
    kernel = type("Kernel", (), {"__getitem__": lambda self, grid: launch})   # kernel[grid](...) -> stats
    fake["triton"] = types.SimpleNamespace(jit=lambda fn: kernel())
    fake["tl"] = types.SimpleNamespace(constexpr=int)
    fake["compiled_kernel_stats"] = lambda compiled: compiled
    fake["driver_active_blocks"] = lambda compiled: driver_blocks
    return fake


def _code_cell_starting(text: str) -> str:
    import nbformat

    nb = nbformat.read(solution_notebook(CHAPTER), as_version=4)
    return next(c.source for c in nb.cells if c.cell_type == "code" and c.source.lstrip().startswith(text))


@pytest.mark.parametrize("cc, name, sms, threads", CAPABILITIES)
def test_the_gpu_cells_run_on_every_compute_capability(ns, capsys, cc, name, sms, threads):
    """Chapter 01's two GPU cells (the own-GPU row of the table and the compiled reduction's occupancy) on a GPU
    of each capability: no ValueError, an unknown capability named with the limits assumed, and the driver's
    occupancy taken from the GPU's own warp slots, not from the table."""
    fake = _gpu_cell_namespace(ns, _props(cc, name, sms, threads))
    exec_cell(_code_cell_starting("if device.is_gpu:\n    props = torch.cuda.get_device_properties(0)"),
              "<01 own gpu>", fake)
    exec_cell(_code_cell_starting("@triton.jit\ndef row_sum_kernel"), "<01 row sum>", fake)
    out = capsys.readouterr().out
    assert f"{cc[0]}.{cc[1]}" in out and str(sms) in out
    if cc in LIMITS:
        assert "not in the table" not in out
    else:
        assert out.count(f"compute capability {cc[0]}.{cc[1]} is not in the table") == 2, out
    rows = [line.split() for line in out.splitlines() if line.split() and line.split()[0] in ("1", "4", "8", "16")]
    assert len(rows) == 4
    for row in rows:                                            # 2 blocks of num_warps warps over the SM's slots
        assert float(row[-1]) == pytest.approx(2 * int(row[0]) * 32 / threads, abs=1e-4)
        assert int(row[4]) == 2 * sms, row                      # a wave: the GPU's own SMs x the driver's blocks
