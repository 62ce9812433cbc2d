"""Datasheet figures for the GPUs students and graders meet.

These are *leads*, not measurements: every performance target in the course is set against the
copy bandwidth measured on the device in use (``triton_course.bench.copy_bandwidth``). Figures measured on a
GPU are in each chapter's ``solutions/<chapter>/records/``; :func:`recorded` reads one chapter's file for a notebook to show beside the
student's own run.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

from .i18n import _

#: The course's chapter folders, when this package is a checkout's ``utils/`` (a wheel has none).
SOLUTIONS = pathlib.Path(__file__).resolve().parent.parent / "solutions"


def record_path(chapter: str, name: str | None = None) -> pathlib.Path:
    """``solutions/<chapter>/records/<name>.json`` (``name`` defaults to the chapter id): a chapter's GPU record."""
    return SOLUTIONS / chapter / "records" / f"{name or chapter}.json"


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as its datasheet describes it."""

    name: str
    compute_capability: tuple[int, int]
    sms: int
    peak_gbps: float          # HBM/GDDR bandwidth, GB/s (1e9 bytes per second)
    fp16_tensor_tflops: float  # dense, no sparsity
    fp32_tflops: float
    l2_mb: float
    memory_gb: float


GPU_SPECS: dict[str, GpuSpec] = {
    "T4": GpuSpec("T4", (7, 5), 40, 320, 65, 8.1, 4, 16),
    "A10": GpuSpec("A10", (8, 6), 72, 600, 125, 31.2, 6, 24),
    "L4": GpuSpec("L4", (8, 9), 58, 300, 121, 30.3, 48, 24),
    "A100": GpuSpec("A100", (8, 0), 108, 2039, 312, 19.5, 40, 80),
    "H100": GpuSpec("H100", (9, 0), 132, 3350, 989, 67, 50, 80),
    "H200": GpuSpec("H200", (9, 0), 132, 4800, 989, 67, 60, 141),
    "B200": GpuSpec("B200", (10, 0), 148, 8000, 2250, 80, 126, 180),
}


#: The rows of GPU_SPECS that describe one form factor (SXM) of a model sold in others whose SMs, clocks or memory
#: differ (an H100 PCIe has 114 SMs and 756 dense fp16 TFLOP/s, an H100 NVL 835): such names get no datasheet row.
SXM_ONLY, OTHER_FORMS = frozenset({"A100", "H100", "H200", "B200"}), frozenset({"PCIE", "NVL"})


def spec_for(device_name: str) -> GpuSpec | None:
    """The datasheet entry whose model name appears in ``device_name`` (e.g. "NVIDIA H200"), if any; none for a
    PCIe or NVL form of a model whose row is the SXM part's."""
    words = device_name.upper().replace("-", " ").split()
    other_form = bool(OTHER_FORMS & set(words))
    return next((GPU_SPECS[key] for key in GPU_SPECS if key in words and not (other_form and key in SXM_ONLY)), None)


def chapter_of(name: str) -> str:
    """The chapter a record's name belongs to: the chapter folder whose id is the name or starts it
    (``06_rmsnorm_gaps_sweep`` -> ``06_rmsnorm``); the name itself when no folder matches."""
    ids = [p.name for p in SOLUTIONS.glob("*") if p.is_dir()] if SOLUTIONS.is_dir() else []
    return next((c for c in ids if name == c or name.startswith(c + "_")), name)


def recorded(name: str, made_by: str | None = None) -> tuple[dict | None, str]:
    """``(solutions/<chapter>/records/<name>.json as a dict, "recorded on an H200 (<that path>, made by `...`)")``
    for a chapter's record (``name`` is the chapter id, or starts with it), or ``(None, why)`` when this copy of
    the course has no such file (``why`` names ``made_by``, the command that makes it on a GPU, when given)."""
    chapter = chapter_of(name)
    path = record_path(chapter, name)
    shown = f"solutions/{chapter}/records/{path.name}"
    if not path.exists():
        if made_by:
            return None, _("no recorded figures: {file} is not in this copy of the course; it is made on a GPU by "
                           "`{command}`").format(file=shown, command=made_by)
        return None, _("no recorded figures: {file} is not in this copy of the course").format(file=shown)
    data = json.loads(path.read_text())
    where = data.get("device", "GPU").replace("NVIDIA ", "")
    return data, recorded_on(where, shown, data.get("command", "?"))


def recorded_on(gpu: str, file: str, command: str) -> str:
    """The line that says where a chapter's figures come from: ``recorded on an H200 (<file>, made by `...`)``."""
    # TRANSLATORS: {gpu} is a GPU model such as "H200", {file} a path, {command} the shell command that made it.
    return _("recorded on an {gpu} ({file}, made by `{command}`)").format(gpu=gpu, file=file, command=command)
