"""The roofline model: where a kernel sits between the memory roof and the compute roof.

A kernel that performs ``flops`` operations while moving ``nbytes`` bytes has an *arithmetic intensity*
of ``flops / nbytes`` FLOP per byte. On a GPU that copies ``bandwidth_gbps`` GB/s and multiplies at
``peak_tflops`` TFLOP/s it can reach at best ``min(peak, intensity * bandwidth)``: the sloped part of the
roof is memory bound, the flat part compute bound, and they meet at the *ridge point*
``peak / bandwidth`` FLOP per byte.

* :func:`matmul_tflops` -- the matmul rate measured on this GPU (torch.matmul; fp16 by default);
* :func:`device_roof` -- the roof of this GPU from measurements, or, without a GPU, from the H200's
  datasheet (and it says so);
* :data:`COMPUTE_UNITS` -- which units set the flat roof: the ``compute=`` argument of
  :func:`device_roof` and :func:`datasheet_roof`. Only a kernel built on ``tl.dot`` (a matmul, attention)
  runs on the fp16 tensor cores (``"fp16_tensor"``, the default); softmax, norms and other element-wise
  or row kernels do their arithmetic on the FP32 units (``"fp32"``, counted in FLOPs), and their ``exp``,
  ``sqrt`` and divisions on the special-function units (``"sfu"``, counted in operations), a roof about
  16 times lower than FP32 on an H100/H200 and 8 times on a T4 or A100;
* :func:`plot_roofline` -- the roof and the kernels placed on it (matplotlib).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import torch

from .bench import copy_bandwidth, time_ms
from .device import current, require_gpu
from .gpus import GPU_SPECS
from .i18n import N_, _
from .plots import drawable, figure_text


@dataclass(frozen=True)
class Roof:
    """A GPU's two ceilings and where the numbers came from."""

    bandwidth_gbps: float   # GB/s, 1e9 bytes per second
    peak_tflops: float      # TFLOP/s, 1e12 operations per second
    source: str             # e.g. "measured on NVIDIA H200" or "datasheet of the H200 (no GPU here)"
    compute: str = "fp16_tensor"  # which units set peak_tflops: a key of COMPUTE_UNITS
    #: ``source`` in English, for a figure where the translation cannot be drawn (None: ``source`` is English)
    source_en: str | None = field(default=None, compare=False, repr=False)

    @property
    def units(self) -> str:
        """What the flat roof counts, in words (e.g. "fp32 FLOP" or "special-function op")."""
        return COMPUTE_UNITS[self.compute][1]

    @property
    def ridge(self) -> float:
        """FLOP per byte at which the memory roof meets the compute roof."""
        return self.peak_tflops * 1e12 / (self.bandwidth_gbps * 1e9)

    def attainable_tflops(self, intensity: float) -> float:
        """The best TFLOP/s a kernel of this arithmetic intensity (FLOP/byte) can reach."""
        return min(self.peak_tflops, intensity * self.bandwidth_gbps / 1e3)

    def bound(self, intensity: float) -> str:
        """"memory" left of the ridge point, "compute" at or right of it."""
        return "memory" if intensity < self.ridge else "compute"


@dataclass(frozen=True)
class KernelPoint:
    """One kernel on the roofline: its FLOPs and bytes, and optionally its measured time."""

    name: str
    flops: float
    nbytes: float
    measured_ms: float | None = None

    @property
    def intensity(self) -> float:
        return self.flops / self.nbytes

    @property
    def measured_tflops(self) -> float | None:
        return None if self.measured_ms is None else self.flops / (self.measured_ms * 1e-3) / 1e12


#: compute= key -> (the units, what the flat roof counts). See the module's docstring. The units are in English as
#: written here (``_(...)`` gives them in the current language); what the roof counts stays English.
COMPUTE_UNITS: dict[str, tuple[str, str]] = {
    "fp16_tensor": (N_("fp16 tensor cores (dense)"), "FLOP"),
    "fp32": (N_("FP32 units (FMA = 2 FLOP)"), "fp32 FLOP"),
    "sfu": (N_("special-function units (exp, rsqrt, 1/x)"), "special-function op"),
}

#: FP32 lanes per SM by compute capability; every architecture here has 16 special-function lanes per SM.
_FP32_LANES_PER_SM = {(7, 5): 64, (8, 0): 64, (8, 6): 128, (8, 9): 128, (9, 0): 128, (10, 0): 128}
_SFU_LANES_PER_SM = 16


def _check_compute(compute: str) -> None:
    if compute not in COMPUTE_UNITS:
        raise ValueError(_("compute={compute}: choose one of {known}").format(
            compute=repr(compute), known=", ".join(map(repr, COMPUTE_UNITS))))


def sfu_tops(fp32_tflops: float, compute_capability: tuple[int, int]) -> float:
    """Special-function ops per second (x 1e12) implied by an FP32 rate: 16 SFU lanes against the FP32
    lanes of an SM, each FP32 lane doing one FMA (2 FLOP) per clock."""
    lanes = _FP32_LANES_PER_SM.get(compute_capability, 128)
    return fp32_tflops / 2 * _SFU_LANES_PER_SM / lanes


@lru_cache(maxsize=None)
def matmul_tflops(n: int = 8192, dtype: torch.dtype = torch.float16) -> float:
    """TFLOP/s of ``torch.matmul`` on two n x n matrices of ``dtype`` on this GPU (2 n^3 FLOPs).

    For float32 TF32 is switched off while timing, so the figure is the FP32 units' rate (SGEMM)."""
    require_gpu(_("Measuring the matmul rate"))
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ms = time_ms(lambda: torch.matmul(a, b), rep_ms=200)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    del a, b
    torch.cuda.empty_cache()
    return 2 * n**3 / (ms * 1e-3) / 1e12


def datasheet_roof(model: str = "H200", compute: str = "fp16_tensor") -> Roof:
    """The roof of a GPU model from :data:`triton_course.gpus.GPU_SPECS`: dense fp16 tensor-core peak by default,
    ``compute="fp32"`` the FP32 units, ``compute="sfu"`` the special-function units."""
    _check_compute(compute)
    spec = GPU_SPECS[model]
    peak = {"fp16_tensor": spec.fp16_tensor_tflops, "fp32": spec.fp32_tflops,
            "sfu": sfu_tops(spec.fp32_tflops, spec.compute_capability)}[compute]
    return Roof(spec.peak_gbps, peak, **sources(N_("datasheet of the {gpu} (no measurement)"), gpu=model),
                compute=compute)


def sources(message: str, **fields: object) -> dict[str, str]:
    """``source`` and ``source_en`` of a :class:`Roof`: ``message`` (marked with ``N_``) with ``fields`` filled in,
    in the current language and in English."""
    return {"source": _(message).format(**fields), "source_en": message.format(**fields)}


def device_roof(compute: str = "fp16_tensor") -> Roof:
    """This GPU's roof: measured copy bandwidth, and a measured fp16 matmul rate (the default), a measured
    fp32 SGEMM rate (``compute="fp32"``), or the SFU rate implied by that fp32 rate (``compute="sfu"``).
    Without a GPU, the H200's datasheet, and the source says so."""
    _check_compute(compute)
    dev = current()
    if dev.interpreted:
        roof = datasheet_roof("H200", compute)
        return Roof(roof.bandwidth_gbps, roof.peak_tflops,
                    **sources(N_("datasheet of the H200: this session has no GPU, so nothing was measured")),
                    compute=compute)
    if compute == "fp16_tensor":
        return Roof(copy_bandwidth(), matmul_tflops(),
                    **sources(N_("measured on {gpu} (copy bandwidth, fp16 matmul)"), gpu=dev.name))
    fp32 = matmul_tflops(dtype=torch.float32)
    if compute == "fp32":
        return Roof(copy_bandwidth(), fp32, **sources(N_("measured on {gpu} (copy bandwidth, fp32 matmul)"),
                                                     gpu=dev.name), compute=compute)
    capability = torch.cuda.get_device_capability()
    return Roof(copy_bandwidth(), sfu_tops(fp32, capability),
                **sources(N_("measured on {gpu} (copy bandwidth; SFU rate = fp32 matmul x 16 / 2 / FP32 lanes per "
                            "SM)"), gpu=dev.name), compute=compute)


def plot_roofline(roof: Roof, points: Sequence[KernelPoint], title: str = "Roofline", ax=None):
    """Draw the roof (log-log) and each kernel at its intensity.

    For a roof of ``compute="sfu"`` each point's ``flops`` counts special-function operations (one
    ``exp`` per element for softmax, one ``rsqrt`` per row for RMSNorm), not FLOPs.
    An open marker sits on the roof (the best the kernel could do); where ``measured_ms`` is given a
    filled marker of the same colour shows what it reached, straight below.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _figure, ax = plt.subplots(figsize=(8, 5))
    unit = roof.units
    rate = "TFLOP/s" if unit == "FLOP" else f"T {unit}/s"   # T = 1e12
    xs = [p.intensity for p in points] + [roof.ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    # TRANSLATORS: a figure's legend; {rate} is a unit such as "TFLOP/s", {units} the units of the next messages.
    ax.plot(grid, [roof.attainable_tflops(x) for x in grid], color="black", linewidth=2,
            label=figure_text(N_("roof: {bandwidth} GB/s, {peak} {rate} ({units})")).format(
                bandwidth=f"{roof.bandwidth_gbps:,.0f}", peak=f"{roof.peak_tflops:,.3g}", rate=rate,
                units=figure_text(COMPUTE_UNITS[roof.compute][0])))
    # TRANSLATORS: a figure's legend; {unit} is "FLOP", "fp32 FLOP" or "special-function op" (kept in English).
    ax.axvline(roof.ridge, color="gray", linestyle=":", label=figure_text(N_("ridge point {ridge} {unit}/B")).format(
        ridge=f"{roof.ridge:,.3g}", unit=unit))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, p in enumerate(points):
        c = colours[i % len(colours)]
        ax.scatter([p.intensity], [roof.attainable_tflops(p.intensity)], facecolors="none", edgecolors=c,
                   s=70, linewidths=2, label=f"{p.name} ({p.intensity:.3g} {unit}/B)")
        if p.measured_tflops is not None:
            ax.scatter([p.intensity], [p.measured_tflops], color=c, s=40, marker="s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    # TRANSLATORS: a figure's axis label; {unit} is "FLOP", "fp32 FLOP" or "special-function op" (kept in English).
    ax.set_xlabel(figure_text(N_("arithmetic intensity ({unit} per byte of HBM traffic)")).format(unit=unit))
    ax.set_ylabel(rate)
    source = roof.source if drawable(roof.source) else (roof.source_en or roof.source)
    ax.set_title(f"{title}\n{source}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return ax
