"""What chapter 05 (softmax) shares between its notebook, its hidden tests and its GPU measurements.

* :func:`reference` -- row softmax in float64, exactly torch's semantics (a row that is ``-inf``
  everywhere gives NaN, as ``torch.softmax`` does);
* :func:`tolerance` -- (atol, rtol) for a kernel that computes in float32 and rounds once;
* :func:`tolerance_rounded_once` -- the tight float16 tolerance that tells "computed in float32, rounded
  once" (half a unit in the last place) from "computed in float16" (three roundings: exp, sum, quotient);
* :data:`HINTS` -- the chapter's known traps, each named when a check sees its symptom;
* input makers for the traps: :func:`strided_rows`, :func:`with_neg_inf`;
* :func:`warps_per_sm` -- how many warps one SM of this GPU holds, for sizing persistent grids;
* :func:`recorded_launch_gbps` -- the GB/s an H200 recorded for each launch shape of a row kernel
  (solutions/05_softmax/records/05_softmax_launch_sweep.json, solutions/06_rmsnorm/records/06_rmsnorm_launch_sweep.json), to print beside the
  launch sweep a student runs (chapters 05 and 06);
* :func:`rule_against_sweeps` -- for a launch rule (``softmax_config``), at every shape both softmax sweeps
  measured: the launch it picks, what that launch recorded, the fastest launch and the best peer;
* the constants of the reference launch rules of chapters 05 (``softmax_config``) and 06 (``launch_config``),
  fitted on one H200: the rules themselves are in the chapters, these numbers are one GPU's answer to them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from .checks import Comparison, Hint, tolerance_for
from .gpus import record_path
from .i18n import _


def reference(x: torch.Tensor) -> torch.Tensor:
    """softmax over the last dimension (what the checks compare with, evaluated in float64)."""
    return torch.softmax(x, dim=-1)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol): the elementwise tolerances; a softmax rounds once to the output dtype too."""
    return tolerance_for(dtype)


#: One rounding to float16 is off by at most half a unit in the last place: 2^-11 of the value. 5% more
#: for float32's own error (exp, sum, division); 1e-7 for float16's subnormals (spacing 6e-8).
ROUNDED_ONCE_FP16 = (1e-7, 1.05 * 2.0**-11)


def tolerance_rounded_once(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) for float16 outputs computed in float32 and rounded once: a kernel whose exp, sum or
    division runs in float16 rounds three times, and about one element in ten lands outside. Other dtypes:
    :func:`tolerance`."""
    return ROUNDED_ONCE_FP16 if dtype == torch.float16 else tolerance(dtype)


def strided_rows(m: int, n: int, *, pad: int = 37, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """An (m, n) view whose rows lie ``n + pad`` elements apart: ``x.stride() == (n + pad, 1)``."""
    return torch.randn(m, n + pad, dtype=dtype, device=device)[:, :n]


def with_neg_inf(m: int, n: int, *, dtype: torch.dtype = torch.float32,
                 device: torch.device | str = "cpu") -> torch.Tensor:
    """Random rows with ``-inf`` in them, the way attention masks make them.

    Row 0: every other entry -inf. Row 1: -inf everywhere but the last entry (a causal mask's first
    row). Row 2 (if m > 2): -inf everywhere (torch gives NaN). Row 3: the first 90% -inf. The rest: a
    random 30% of entries -inf.
    """
    x = torch.randn(m, n, dtype=dtype, device=device)
    ninf = float("-inf")
    x[0, ::2] = ninf
    if n > 1:
        x[0, 1] = 0.5                        # keep one finite entry in row 0 even when n == 2
    if m > 1:
        x[1, :-1] = ninf
    if m > 2:
        x[2, :] = ninf
    if m > 3:
        x[3, : (9 * n) // 10] = ninf
    if m > 4:
        drop = torch.rand(m - 4, n, device=device) < 0.3
        drop[:, -1] = False
        x[4:][drop] = ninf
    return x


# ---------------------------------------------------------------------------------------------------
# Hints: the traps of this chapter, recognised from their symptoms
# ---------------------------------------------------------------------------------------------------

def _grid(c: Comparison, flat: torch.Tensor) -> torch.Tensor:
    n = c.shape[-1] if c.shape else 1
    return flat.reshape(-1, max(n, 1))


def _new_nonfinite(c: Comparison) -> torch.Tensor:
    """Elements that are inf/NaN where the reference is finite (written ones only)."""
    return ~torch.isfinite(c.got) & torch.isfinite(c.expected) & ~c.unwritten


def _large_inputs(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    x = inputs[0].detach().to(torch.float64)
    finite = x[torch.isfinite(x)]
    return bool(_new_nonfinite(c).any()) and finite.numel() > 0 and float(finite.abs().max()) > 80


def _nan_in_neg_inf_rows(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    x = inputs[0].detach()
    has_ninf = torch.isneginf(x).reshape(-1, max(x.shape[-1], 1)).any(dim=1).cpu()
    bad_rows = (_grid(c, torch.isnan(c.got)) & _grid(c, ~torch.isnan(c.expected))).any(dim=1)
    return bool((bad_rows & has_ninf).any())


def _finite_where_all_neg_inf(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    expected_nan_rows = _grid(c, torch.isnan(c.expected)).all(dim=1)
    got_finite = _grid(c, torch.isfinite(c.got) & ~c.unwritten).any(dim=1)
    return bool((expected_nan_rows & got_finite).any())


#: The chunks an online softmax may loop over: tl.arange needs a power of two, and rows of up to 2^17 lanes.
_CHUNKS = tuple(2**p for p in range(4, 18))
#: Rows (with something wrong in them) that the online-rescale hint looks at: enough to tell, few enough to be quick.
_RESCALE_ROWS = 8


def _sums_without_rescale(x: torch.Tensor, chunk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The denominators, against each row's max, of an online softmax over chunks of ``chunk`` that never
    multiplies its running sum by exp(m - m_new): one for a running max and sum per lane (vectors of
    ``chunk``, combined at the end with exp(m_lane - row max)), one for a running max and sum per row.
    ``x``: float64 rows with a finite max."""
    rows, n = x.shape
    steps = -(-n // chunk)
    lanes = torch.full((rows, steps * chunk), float("-inf"), dtype=torch.float64)
    lanes[:, :n] = x
    lanes = lanes.reshape(rows, steps, chunk)
    row_max = x.max(dim=1).values

    def pivot(m: torch.Tensor) -> torch.Tensor:   # the -inf guard of the chapter: a max of -inf counts as 0
        return torch.where(torch.isneginf(m), torch.zeros_like(m), m)

    lane_max = torch.cummax(lanes, dim=1).values                         # each lane's running max
    lane_sum = torch.exp(lanes - pivot(lane_max)).sum(dim=1)              # no rescale in the loop
    per_lane = (lane_sum * torch.exp(lane_max[:, -1] - row_max[:, None])).sum(dim=1)
    step_max = torch.cummax(lanes.max(dim=2).values, dim=1).values        # the row's running max
    per_row = torch.exp(lanes - pivot(step_max)[:, :, None]).sum(dim=(1, 2))
    return per_lane, per_row


def _online_sum_not_rescaled(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    """Outputs too small on rows longer than one chunk, by exactly what an online softmax gives that adds each
    chunk's exp(x - m_new) to a running sum it never multiplies by exp(m - m_new) (running max and sum per lane
    or per row, for some power-of-two chunk shorter than the row). A row that fits in one chunk is right then."""
    x = inputs[0]
    if x.dim() != 2 or tuple(x.shape) != tuple(c.shape) or x.shape[1] <= _CHUNKS[0]:
        return False
    got, expected, wrong = _grid(c, c.got), _grid(c, c.expected), _grid(c, c.wrong & ~c.unwritten)
    xs = x.detach().to(torch.float64).cpu()
    finite_max = torch.isfinite(xs.max(dim=1).values)
    usable = finite_max & torch.isfinite(got).all(dim=1) & torch.isfinite(expected).all(dim=1)
    rows = torch.nonzero(usable & wrong.any(dim=1)).flatten()[:_RESCALE_ROWS]
    if rows.numel() == 0:
        return False
    xs, got = xs[rows], got[rows]
    if float((got[wrong[rows]] < expected[rows][wrong[rows]]).double().mean()) <= 0.9:
        return False                                        # the symptom: outputs too small
    # What the outputs of a row add up to (1 when right; S / D when the denominator is D, not S), and how
    # closely that sum is known: the rounding of every output to its dtype, and float32's own error.
    row_max = xs.max(dim=1, keepdim=True).values
    s = torch.exp(xs - row_max).sum(dim=1)
    total = got.sum(dim=1)
    info = torch.finfo(x.dtype)
    ulp = torch.clamp(got.abs(), min=info.tiny) * info.eps          # spacing of the dtype at each output
    slack = 1e-5 + 6 * (ulp.square().sum(dim=1) / 12).sqrt()
    for chunk in (k for k in _CHUNKS if k < x.shape[1]):
        for d in _sums_without_rescale(xs, chunk):
            predicted = s / d
            off = 1 - predicted                             # how far the mistake takes the sum from 1
            if bool((off > 2 * slack).all()) and bool(((total - predicted).abs() <= 1e-3 * off + slack).all()):
                return True
    return False


def _padding_in_sum(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    n = c.shape[-1] if c.shape else 1
    if n & (n - 1) == 0 or _online_sum_not_rescaled(c, inputs):
        return False
    wrong = c.wrong & ~c.unwritten & torch.isfinite(c.got) & torch.isfinite(c.expected) & (c.expected > 0)
    if not bool(wrong.any()):
        return False
    return float((c.got[wrong] < c.expected[wrong]).double().mean()) > 0.9


def _row_stride(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    x = inputs[0]
    if x.dim() != 2 or x.shape[0] < 2 or x.stride(0) == x.shape[1]:
        return False
    rows_wrong = _grid(c, c.wrong).any(dim=1)
    return not bool(rows_wrong[0]) and bool(rows_wrong[1:].any())


def _float16_math(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    """float16 output, every wrong element written, finite and within a few roundings of the reference."""
    x = inputs[0]
    wrong = c.wrong
    if x.dtype != torch.float16 or not bool(wrong.any()) or bool((wrong & c.unwritten).any()):
        return False
    got, expected = c.got[wrong], c.expected[wrong]
    if not bool(torch.isfinite(got).all() & torch.isfinite(expected).all()):
        return False
    return bool(((got - expected).abs() <= 1e-7 + 8 * 2.0**-11 * expected.abs()).all())


def _input_modified(c: Comparison, inputs: Sequence[torch.Tensor]) -> bool:
    # A comparison's notes are the sentences naming the inputs the call changed (triton_course.checks.check puts them
    # on the first output), in whatever language the messages are in: any note means an input was modified.
    return bool(c.notes)


HINTS: list[Hint] = [
    Hint(_large_inputs, "inf or NaN for large inputs: did you subtract the row max? exp(x) overflows "
         "float32 for x > 88.7, and inf / inf is NaN. softmax(x) equals softmax(x - max(x)), whose "
         "exponents are all <= 0."),
    Hint(_nan_in_neg_inf_rows, "NaN in rows containing -inf: exp(a - b) is NaN when a and b are both "
         "-inf. That happens when a max is taken over lanes that are all -inf (a block or chunk of -inf "
         "entries, or padding) and then subtracted, e.g. the rescale factor exp(m_old - m_new) of an "
         "online softmax. Only a row that is -inf everywhere should come out NaN."),
    Hint(_finite_where_all_neg_inf, "A row that is -inf everywhere should give NaN (0/0), as "
         "torch.softmax does and as this course's reference does; yours gave finite numbers. Do padding "
         "lanes loaded as 0 take part in the max and the sum?"),
    Hint(_padding_in_sum, "Values too small on rows whose length is not a power of two: the padding "
         "lanes of the block take part in the sum. Load them with other=float('-inf') (so exp gives 0 "
         "there), not 0: a mask filled with 0 adds exp(0 - max) per padding lane to the denominator."),
    Hint(_online_sum_not_rescaled, "Values too small on rows longer than one chunk, by what a running sum that "
         "is never rescaled gives: when a chunk raises the running max from m to m_new, the sum so far must be "
         "multiplied by exp(m - m_new) before the chunk's exp(x - m_new) are added. Without it the sum keeps "
         "terms taken against older, smaller maxima and comes out too large (rows that fit in one chunk are "
         "right)."),
    Hint(_row_stride, "Row 0 is right but later rows are wrong, and this input's rows are x.stride(0) "
         "elements apart, not N: step between rows with the row stride of each tensor (x.stride(0) for "
         "the input, out.stride(0) for the output)."),
    Hint(_float16_math, "float16 results a few roundings away from the exact softmax: were the max, exp, "
         "sum or division computed in float16? Convert x with .to(tl.float32) right after loading, compute "
         "in float32 and round once, when storing: then every element is within half a unit in the last "
         "place of float16."),
    Hint(_input_modified, "Your softmax wrote into its input: keep the intermediate values (x - max, "
         "exp) in registers and write only the output, which also saves the extra traffic."),
]


# ---------------------------------------------------------------------------------------------------
# The launch rules' constants, fitted on one H200 (the chapters' appendices say how; another GPU may prefer others)
# ---------------------------------------------------------------------------------------------------

#: Chapter 05 (softmax_config). A row's bytes are BLOCK_N times the element size. Rows shorter than this are stacked
#: until a program holds this many bytes, over 4 warps (solutions/05_softmax/records/05_softmax_launch_sweep.json).
SHORT_ROW_BYTES = 2048
#: Chapter 05: inputs of up to this many bytes run rows of 4 KB two per program (05_softmax_gaps_sweep.json).
SMALL_INPUT_BYTES = 32 << 20
#: Chapter 05: inputs of up to this many bytes get cache hints, STREAM (05_softmax_small_graphs.json, CUDA graphs).
STREAM_INPUT_BYTES = 16 << 20

#: Chapter 06 (launch_config), fitted by lab/sweeps/norms_gaps.py over 13 shapes timed from CUDA graphs
#: (solutions/06_rmsnorm/records/06_rmsnorm_gaps_sweep.json). What one warp moves with one 16-byte load per thread:
#: a fact of the hardware, not a fitted value.
WARP_BYTES = 32 * 16
#: Chapter 06: rows of WARP_BYTES or more are stacked until a program loads this many bytes of x.
TILE_BYTES = 4096
#: Chapter 06: narrower rows, to this many (at 4 warps, one 16-byte load per thread).
SHORT_TILE_BYTES = 2048
#: Chapter 06: bytes of x a thread loads (four 16-byte loads in flight): sets num_warps.
BYTES_PER_THREAD = 64
#: Chapter 06: the fewest warps (Triton's default) and the most.
MIN_WARPS, MAX_WARPS = 4, 16
#: Chapter 06: rows of up to this many bytes (BLOCK_N x element size) get cache hints; 0: none did better.
STREAM_ROW_BYTES = 0


@lru_cache(maxsize=None)
def warps_per_sm(default: int = 64) -> int:
    """How many warps one SM of the current CUDA GPU can hold (64 on A100/H100/H200, 32 on a T4)."""
    if not torch.cuda.is_available():
        return default
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "max_threads_per_multi_processor", 32 * default)) // 32


def recorded_launch_gbps(chapter: str, width: int) -> tuple[dict[tuple[int, int], float], str]:
    """GB/s recorded for the plain tile kernel of ``chapter`` ("05_softmax" or "06_rmsnorm") at rows of
    ``width`` elements, by (rows per program, num_warps), first round of the launch sweep; and a line
    saying where and how they were recorded. Empty when the results file is not there."""
    path = record_path(chapter, f"{chapter}_launch_sweep")
    if not path.exists():
        return {}, _("{file} not found: no recorded figures to compare with").format(file=path.name)
    data = json.loads(path.read_text())
    if str(width) not in data["widths"]:
        raise ValueError(_("{file} has rows of {widths} elements, not {width}").format(
            file=path.name, widths=", ".join(data["widths"]), width=width))
    figures = {}
    for name, gbps in data["widths"][str(width)]["round1_gbps"].items():
        if name.startswith("tile rows"):
            rows, warps = name.removeprefix("tile rows").split("/w")
            figures[int(rows), int(warps)] = gbps
    # TRANSLATORS: {gpu} is a GPU model such as "NVIDIA H200", {file} a path, {command} the shell command that made it.
    source = _("recorded on an {gpu} ({rows} rows, copy bandwidth {copy} GB/s; {file}, made by `{command}`)").format(
        gpu=data["device"], rows=data["rows"], copy=f"{data['copy_gbps']:,.0f}",
        file=f"solutions/{chapter}/records/{path.name}", command=data["command"])
    return figures, source


#: The peers the gaps sweep times beside the launch shapes (lab/sweeps/launch_sweep.py softmax-gaps).
PEERS = ("torch.softmax", "torch.compile", "Liger LigerSoftmax")


@dataclass(frozen=True)
class RulePick:
    """One shape a softmax sweep measured, and what a launch rule picks there (GB/s as recorded)."""

    shape: str                          # "32768x1000 float32"
    launch: tuple[int, int, bool]       # (rows per program, num_warps, cache hints) the rule picks
    gbps: float | None                  # what that launch recorded (None: the sweep did not time it)
    fastest: tuple[tuple[int, int, bool], float]   # the fastest launch the sweep timed, and its GB/s
    best_peer: tuple[str, float] | None            # the best of torch, torch.compile and Liger (gaps sweep)
    source: str                                    # which results file

    @property
    def of_fastest(self) -> float:
        return 0.0 if self.gbps is None else self.gbps / self.fastest[1]

    @property
    def of_best_peer(self) -> float | None:
        return None if self.best_peer is None or self.gbps is None else self.gbps / self.best_peer[1]

    @property
    def peer_reachable(self) -> bool:
        """Some launch the sweep timed reached 98% of the best peer (so a launch rule could)."""
        return self.best_peer is not None and self.fastest[1] >= 0.98 * self.best_peer[1]


def _launch_figures(shape: dict) -> dict[tuple[int, int, bool], float]:
    """(rows, warps, hints) -> GB/s of one shape of a sweep file: the final rounds' median where a launch reached
    them, else its first-round figure."""
    figures = {}
    for key in ("round1_gbps", "round2_median_gbps"):
        for name, gbps in shape.get(key, {}).items():
            m = re.fullmatch(r"(?:(tile|cache hints) )?rows(\d+)/w(\d+)( hints)?", name)
            if m:
                figures[int(m[2]), int(m[3]), m[1] == "cache hints" or bool(m[4])] = gbps
    return figures


#: Sweeps timed from CUDA graphs (lab/sweeps/graph_timing.py: one launch within 0.6% of itself, where the
#: back-to-back sweeps put it up to 6% apart); at a shape they measured, they replace the back-to-back figures.
GRAPH_SWEEPS = ("05_softmax_small_graphs.json", "05_softmax_gaps_graphs.json")


def rule_against_sweeps(config: Callable[[int, int, int], tuple[int, int, int, bool]]) -> list[RulePick]:
    """``config(n_rows, n_cols, element_size) -> (BLOCK_N, ROWS, num_warps, STREAM)`` at every shape of
    solutions/05_softmax/records/05_softmax_launch_sweep.json (float32, 4096 rows), solutions/05_softmax/records/05_softmax_gaps_sweep.json and the sweeps of
    :data:`GRAPH_SWEEPS` (which replace the others at the shapes they timed); empty when none is in this copy."""
    picks: dict[str, RulePick] = {}
    launch = record_path("05_softmax", "05_softmax_launch_sweep")
    if launch.exists():
        data = json.loads(launch.read_text())
        for width, shape in data["widths"].items():
            figures = _launch_figures(shape)
            _, rows, warps, stream = config(data["rows"], int(width), 4)
            key = f"{data['rows']}x{width} float32"
            picks[key] = RulePick(key, (rows, warps, stream), figures.get((rows, warps, stream)),
                                  max(figures.items(), key=lambda kv: kv[1]), None, launch.name)
    for name in ("05_softmax_gaps_sweep.json", *GRAPH_SWEEPS):
        path = record_path("05_softmax", name.removesuffix(".json"))
        if not path.exists():
            continue
        for key, shape in json.loads(path.read_text())["shapes"].items():
            m, n, dtype = re.fullmatch(r"(\d+)x(\d+) (\w+)", key).groups()
            element = 4 if dtype == "float32" else 2
            figures = _launch_figures(shape)
            _, rows, warps, stream = config(int(m), int(n), element)
            peers = {k: v for k, v in shape["round2_median_gbps"].items() if k in PEERS}
            picks[key] = RulePick(key, (rows, warps, stream), figures.get((rows, warps, stream)),
                                  max(figures.items(), key=lambda kv: kv[1]),
                                  max(peers.items(), key=lambda kv: kv[1]) if peers else None, path.name)
    return list(picks.values())


def describe_launch(launch: tuple[int, int, bool]) -> str:
    rows, warps, stream = launch
    return f"rows {rows}, {warps} warp{'s' if warps > 1 else ''}{', hints' if stream else ''}"
