"""Plots students look at: bandwidth (or TFLOP/s) against size next to PyTorch."""

from __future__ import annotations

from .bench import Sweep


def plot_sweep(sweep: Sweep, title: str, ax=None, peak_gbps: float | None = None,
               peak_tflops: float | None = None):
    """Draw GB/s (or TFLOP/s) against size for each implementation, with the measured copy bandwidth
    and the datasheet peak as ceilings.

    Under the interpreter the y-axis is host-clock throughput and the title says so: the shape of
    the code path is real, the numbers are not GPU performance.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    for name, values in sweep.series.items():
        ax.plot(sweep.sizes, values, marker="o", label=name)
    if sweep.copy_gbps:
        ax.axhline(sweep.copy_gbps, color="gray", linestyle="--",
                   label=f"copy bandwidth, measured ({sweep.copy_gbps:,.0f} GB/s)")
    peak = peak_gbps if sweep.unit == "GB/s" else peak_tflops
    if peak and not sweep.interpreted:
        ax.axhline(peak, color="black", linestyle=":", label=f"datasheet peak ({peak:,.0f} {sweep.unit})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel(sweep.xlabel)
    what = "bytes that must move" if sweep.unit == "GB/s" else "FLOPs that must be done"
    if sweep.interpreted:
        ax.set_ylabel(f"{sweep.unit} by host clock")
        title += "\n(Triton interpreter on the CPU: not GPU performance)"
    else:
        ax.set_ylabel(f"{sweep.unit} ({what} / median time)")
        ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax
