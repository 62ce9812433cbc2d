"""Plots students look at: bandwidth (or TFLOP/s) against size next to PyTorch.

A figure's words are in the language of the helpers' messages (:mod:`triton_course.i18n`) where matplotlib has a
font with that language's characters, and in English where it has none: matplotlib's own fonts have no Chinese
characters and would draw each one as an empty box (Colab has none until ``apt install fonts-noto-cjk``).
"""

from __future__ import annotations

from functools import lru_cache

from .bench import Sweep
from .i18n import N_, SOURCE_LANGUAGE, _, current_language

#: Fonts with Chinese characters, in the order they are looked for (Linux, then macOS, then Windows).
CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei",
             "WenQuanYi Micro Hei", "Droid Sans Fallback", "PingFang SC", "Hiragino Sans GB", "Heiti SC",
             "Microsoft YaHei", "SimHei")


@lru_cache(maxsize=None)
def cjk_font() -> str | None:
    """The first of :data:`CJK_FONTS` that matplotlib finds on this machine, or None."""
    try:
        from matplotlib import font_manager
    except ImportError:
        return None
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in installed), None)


def drawable(text: str) -> bool:
    """Whether matplotlib can draw ``text``: ASCII, or a font with Chinese characters is installed (it is then added
    to the end of matplotlib's sans-serif fonts, where each character its first font lacks is looked for)."""
    if text.isascii():
        return True
    font = cjk_font()
    if font is None:
        return False
    import matplotlib

    families = list(matplotlib.rcParams["font.sans-serif"])
    if font not in families:
        matplotlib.rcParams["font.sans-serif"] = [*families, font]
    return True


def figure_text(message: str) -> str:
    """``message`` (English, marked with ``N_``) for a figure's title, axis or legend: translated where the
    translation can be drawn (:func:`drawable`), the English where no font has its characters."""
    if current_language() == SOURCE_LANGUAGE or not message:
        return message
    translated = _(message)
    return translated if drawable(translated) else message


def plot_sweep(sweep: Sweep, title: str, ax=None, peak_gbps: float | None = None,
               peak_tflops: float | None = None):
    """Draw GB/s (or TFLOP/s) against size for each implementation, with the measured copy bandwidth
    and the datasheet peak as ceilings.

    Under the interpreter the y-axis is host-clock throughput and the title says so: the shape of
    the code path is real, the numbers are not GPU performance.
    """
    import matplotlib.pyplot as plt

    if ax is None:
        _figure, ax = plt.subplots(figsize=(7, 4))
    for name, values in sweep.series.items():
        ax.plot(sweep.sizes, values, marker="o", label=name)
    if sweep.copy_gbps:
        # TRANSLATORS: a figure's legend.
        ax.axhline(sweep.copy_gbps, color="gray", linestyle="--",
                   label=figure_text(N_("copy bandwidth, measured ({gbps} GB/s)")).format(
                       gbps=f"{sweep.copy_gbps:,.0f}"))
    peak = peak_gbps if sweep.unit == "GB/s" else peak_tflops
    if peak and not sweep.interpreted:
        # TRANSLATORS: a figure's legend; {unit} is "GB/s" or "TFLOP/s".
        ax.axhline(peak, color="black", linestyle=":", label=figure_text(N_("datasheet peak ({peak} {unit})")).format(
            peak=f"{peak:,.0f}", unit=sweep.unit))
    ax.set_xscale("log", base=2)
    ax.set_xlabel(sweep.xlabel)
    what = figure_text(N_("bytes that must move")) if sweep.unit == "GB/s" else \
        figure_text(N_("FLOPs that must be done"))
    if sweep.interpreted:
        # TRANSLATORS: a figure's axis label; {unit} is "GB/s" or "TFLOP/s".
        ax.set_ylabel(figure_text(N_("{unit} by host clock")).format(unit=sweep.unit))
        title += "\n" + figure_text(N_("(Triton interpreter on the CPU: not GPU performance)"))
    else:
        # TRANSLATORS: a figure's axis label; {unit} is "GB/s" or "TFLOP/s", {what} "bytes that must move" or
        # "FLOPs that must be done".
        ax.set_ylabel(figure_text(N_("{unit} ({what} / median time)")).format(unit=sweep.unit, what=what))
        ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax
