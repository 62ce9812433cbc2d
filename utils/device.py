"""Where kernels run: a CUDA GPU, or Triton's interpreter on the CPU.

Importing :mod:`triton_course` calls :func:`choose_backend`, which sets ``TRITON_INTERPRET=1`` when there is no
CUDA GPU. It has to happen before the first ``@triton.jit`` decorates a kernel, which is why the setup
cell of every notebook imports ``triton_course`` before defining any kernel.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass, field

import torch

from .columns import ljust, width as columns
from .gpus import GpuSpec, spec_for
from .i18n import _, set_language
from .versions import VersionVerdict, check_versions


class NoGPUError(RuntimeError):
    """Raised by code that can only run on a CUDA GPU (timing, compiled-kernel statistics)."""


def _interpreter_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def choose_backend() -> bool:
    """Turn Triton's interpreter on when there is no usable CUDA GPU; return True if it is on.

    Setting ``TRITON_INTERPRET=1`` yourself forces the interpreter even on a GPU machine.
    """
    if not _interpreter_requested() and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
    if _interpreter_requested():
        from .versions import (repair_interpreter_scalars, skip_discarded_overflow_checks,
                               skip_repeated_interpreter_patching)

        repair_interpreter_scalars()  # Triton 3.5/3.6 with NumPy >= 2.4 (see there); a no-op elsewhere
        skip_repeated_interpreter_patching()  # speed only: the same interpreted builtins, bound once a launch
        skip_discarded_overflow_checks()  # speed only: checks whose device_assert does nothing without debug
    return _interpreter_requested()


@dataclass(frozen=True)
class Device:
    """The device this notebook runs its kernels on, and what is known about it."""

    interpreted: bool
    torch_device: torch.device
    name: str
    compute_capability: tuple[int, int] | None
    sms: int | None
    peak_gbps: float | None
    spec: GpuSpec | None
    versions: list[VersionVerdict] = field(default_factory=list)

    @property
    def is_gpu(self) -> bool:
        return not self.interpreted

    def pick(self, *, gpu, cpu):
        """``gpu`` on a GPU, ``cpu`` under the interpreter: problem sizes shrink by ~1000x on the CPU."""
        return cpu if self.interpreted else gpu

    @property
    def bf16(self) -> bool:
        """Whether bfloat16 kernels run here: a GPU of compute capability 8.0 or newer (Ampere on).

        Triton's interpreter stores bfloat16 as raw 16-bit integers and computes wrong values with them, and
        a T4 (sm_75) has no bfloat16 arithmetic, so both answer False; :meth:`bf16_skipped` says why."""
        return self.is_gpu and self.compute_capability is not None and self.compute_capability >= (8, 0)

    def bf16_skipped(self) -> str | None:
        """Why bfloat16 is skipped on this device (one sentence for a notebook to print), or None if it runs."""
        if self.bf16:
            return None
        if self.interpreted:
            return _("bfloat16 skipped: Triton's interpreter keeps bfloat16 as raw 16-bit integers and computes wrong "
                     "values with them, so bfloat16 runs only on a GPU (compute capability 8.0 or newer).")
        # TRANSLATORS: {gpu} is the GPU's name ("Tesla T4"), {arch} its architecture ("sm_75").
        return _("bfloat16 skipped: the {gpu} ({arch}) has no bfloat16 arithmetic; it needs compute capability 8.0 "
                 "or newer (an A10, A100, H100, ...).").format(
            gpu=self.name, arch=f"sm_{self.compute_capability[0]}{self.compute_capability[1]}")

    def dtypes(self, *wanted: torch.dtype) -> list[torch.dtype]:
        """``wanted`` without bfloat16 where it cannot run (a chapter's sweep over dtypes)."""
        return [d for d in wanted if d is not torch.bfloat16 or self.bf16]

    def notices(self) -> list[str]:
        """Known limits of this device that change what a chapter can show."""
        out = [v.describe() for v in self.versions if not v.tested]
        if self.interpreted and torch.cuda.is_available():
            out.append(_("TRITON_INTERPRET=1 is set, so kernels run in Triton's interpreter on the CPU although "
                         "a CUDA GPU is present: problem sizes are scaled down, timings are skipped and "
                         "bandwidth checks are not graded. Unset it and restart the kernel to use the GPU."))
        elif self.interpreted:
            out.append(_("No CUDA GPU: kernels run in Triton's interpreter on the CPU. Problem sizes are "
                         "scaled down, timings are skipped, and bandwidth checks are not graded here."))
        elif self.compute_capability is not None and self.compute_capability < (8, 0):
            # TRANSLATORS: {gpu} is the GPU's name ("Tesla T4"), {arch} its architecture ("sm_75").
            out.append(_("{gpu} ({arch}): tl.dot runs on FMA units without tensor cores, and bfloat16 is not "
                         "available. Triton supports compute capability 8.0 and later; here every chapter runs, but "
                         "without cp.async pipelining chapters 07, 09 and 11 reach a fraction of the speeds they "
                         "quote.").format(gpu=self.name,
                                          arch=f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"))
        return out

    def summary(self) -> str:
        """A few lines describing the environment, for the top of every notebook."""
        # TRANSLATORS: the labels of the environment summary the setup cell prints.
        rows = [(_("device"), self.name)]
        if self.compute_capability is not None:
            rows.append((_("compute capability"), "%d.%d" % self.compute_capability))
        if self.sms is not None:
            rows.append((_("SMs"), str(self.sms)))
        if self.peak_gbps is not None:
            rows.append((_("peak memory bandwidth"),
                         _("{gbps} GB/s (datasheet)").format(gbps=f"{self.peak_gbps:,.0f}")))
        rows += [("python", platform.python_version()), ("torch", torch.__version__),
                 ("triton", _triton_version()),
                 (_("mode"), _("Triton interpreter (CPU)") if self.interpreted else _("compiled (CUDA)"))]
        width = max(columns(k) for k, _v in rows)
        lines = [f"{ljust(k, width)}  {v}" for k, v in rows]
        lines += [_("NOTE: {note}").format(note=n) for n in self.notices()]
        return "\n".join(lines)


def _triton_version() -> str:
    import triton
    return triton.__version__


def _peak_gbps_from_driver() -> float | None:
    """Peak DRAM bandwidth from the memory clock and bus width the driver reports."""
    try:
        import triton
        props = triton.runtime.driver.active.utils.get_device_properties(torch.cuda.current_device())
        return props["mem_clock_rate"] * 1e3 * 2 * props["mem_bus_width"] / 8 / 1e9
    except Exception:  # older drivers or Triton versions: fall back on the datasheet
        return None


def detect() -> Device:
    """Describe the device kernels will run on (call after :func:`choose_backend`)."""
    interpreted = choose_backend()
    versions = check_versions({"torch": torch.__version__, "triton": _triton_version()})
    if interpreted:
        return Device(True, torch.device("cpu"), f"CPU ({platform.processor() or platform.machine()})",
                      None, None, None, None, versions)
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    spec = spec_for(props.name)
    peak = _peak_gbps_from_driver() or (spec.peak_gbps if spec else None)
    return Device(False, torch.device("cuda"), props.name, (props.major, props.minor),
                  props.multi_processor_count, peak, spec, versions)


_CURRENT: Device | None = None


def current() -> Device:
    """The device of this process (detected once)."""
    global _CURRENT
    if _CURRENT is None:
        _CURRENT = detect()
    return _CURRENT


def setup(seed: int = 0, quiet: bool = False, language: str | None = None) -> Device:
    """What the first cell of every notebook calls: pick the backend, seed, the language of the helpers'
    messages (the notebook's edition, :mod:`triton_course.i18n`), print a summary."""
    if language is not None:
        set_language(language)
    device = current()
    torch.manual_seed(seed)
    if not quiet:
        print(device.summary())
    return device


def require_gpu(what: str) -> None:
    """Raise :class:`NoGPUError` naming ``what`` when kernels run in the interpreter."""
    if current().interpreted:
        # TRANSLATORS: {what} names the task, such as "Timing a kernel" (translated where it is passed). The menu
        # path is Colab's: give its Chinese labels in parentheses.
        raise NoGPUError(_("{what} needs a CUDA GPU; this session runs Triton's interpreter on the CPU. "
                           "In Colab: Runtime > Change runtime type > T4 GPU.").format(what=what))
