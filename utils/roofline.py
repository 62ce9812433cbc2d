"""The roofline model: where a kernel sits between the memory roof and the compute roof.

A kernel that performs ``flops`` operations while moving ``nbytes`` bytes has an *arithmetic intensity*
of ``flops / nbytes`` FLOP per byte. On a GPU that copies ``bandwidth_gbps`` GB/s and multiplies at
``peak_tflops`` TFLOP/s it can reach at best ``min(peak, intensity * bandwidth)``: the sloped part of the
roof is memory bound, the flat part compute bound, and they meet at the *ridge point*
``peak / bandwidth`` FLOP per byte.

* :func:`matmul_tflops` -- the fp16 matmul rate measured on this GPU (torch.matmul, L2 flushed);
* :func:`device_roof` -- the roof of this GPU from measurements, or, without a GPU, from the H200's
  datasheet (and it says so);
* :func:`plot_roofline` -- the roof and the kernels placed on it (matplotlib).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import torch

from utils.bench import copy_bandwidth, time_ms
from utils.device import current, require_gpu
from utils.gpus import GPU_SPECS


@dataclass(frozen=True)
class Roof:
    """A GPU's two ceilings and where the numbers came from."""

    bandwidth_gbps: float   # GB/s, 1e9 bytes per second
    peak_tflops: float      # TFLOP/s, 1e12 operations per second
    source: str             # e.g. "measured on NVIDIA H200" or "datasheet of the H200 (no GPU here)"

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


@lru_cache(maxsize=None)
def matmul_tflops(n: int = 8192, dtype: torch.dtype = torch.float16) -> float:
    """TFLOP/s of ``torch.matmul`` on two n x n matrices of ``dtype`` on this GPU (2 n^3 FLOPs)."""
    require_gpu("Measuring the matmul rate")
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    ms = time_ms(lambda: torch.matmul(a, b), rep_ms=200)
    del a, b
    torch.cuda.empty_cache()
    return 2 * n**3 / (ms * 1e-3) / 1e12


def datasheet_roof(model: str = "H200") -> Roof:
    """The roof of a GPU model from :data:`utils.gpus.GPU_SPECS` (dense fp16 tensor-core peak)."""
    spec = GPU_SPECS[model]
    return Roof(spec.peak_gbps, spec.fp16_tensor_tflops, f"datasheet of the {model} (no measurement)")


def device_roof() -> Roof:
    """This GPU's roof from measured copy bandwidth and fp16 matmul rate; the H200 datasheet without a GPU."""
    dev = current()
    if dev.interpreted:
        roof = datasheet_roof("H200")
        return Roof(roof.bandwidth_gbps, roof.peak_tflops,
                    "datasheet of the H200: this session has no GPU, so nothing was measured")
    return Roof(copy_bandwidth(), matmul_tflops(), f"measured on {dev.name} (copy bandwidth, fp16 matmul)")


def plot_roofline(roof: Roof, points: Sequence[KernelPoint], title: str = "Roofline", ax=None):
    """Draw the roof (log-log) and each kernel at its intensity.

    An open marker sits on the roof (the best the kernel could do); where ``measured_ms`` is given a
    filled marker of the same colour shows what it reached, straight below.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 5))
    xs = [p.intensity for p in points] + [roof.ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [roof.attainable_tflops(x) for x in grid], color="black", linewidth=2,
            label=f"roof: {roof.bandwidth_gbps:,.0f} GB/s, {roof.peak_tflops:,.0f} TFLOP/s")
    ax.axvline(roof.ridge, color="gray", linestyle=":", label=f"ridge point {roof.ridge:,.0f} FLOP/B")
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, p in enumerate(points):
        c = colours[i % len(colours)]
        ax.scatter([p.intensity], [roof.attainable_tflops(p.intensity)], facecolors="none", edgecolors=c,
                   s=70, linewidths=2, label=f"{p.name} ({p.intensity:.3g} FLOP/B)")
        if p.measured_tflops is not None:
            ax.scatter([p.intensity], [p.measured_tflops], color=c, s=40, marker="s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{title}\n{roof.source}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return ax
