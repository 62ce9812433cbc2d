"""Datasheet figures for the GPUs students and graders meet.

These are *leads*, not measurements: every performance target in the course is set against the
copy bandwidth measured on the device in use (``triton_course.bench.copy_bandwidth``). Figures measured on a
GPU are in ``results/``; :func:`recorded` reads one chapter's file for a notebook to show beside the
student's own run.
"""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "results"


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


def spec_for(device_name: str) -> GpuSpec | None:
    """The datasheet entry whose model name appears in ``device_name`` (e.g. "NVIDIA H200"), if any."""
    words = device_name.upper().replace("-", " ").split()
    return next((GPU_SPECS[key] for key in GPU_SPECS if key in words), None)


def recorded(chapter: str, made_by: str | None = None) -> tuple[dict | None, str]:
    """``(results/<chapter>.json as a dict, "recorded on an H200 (results/<chapter>.json, made by `...`)")``,
    or ``(None, why)`` when this copy of the course has no such file (``why`` names ``made_by``, the command
    that makes it on a GPU, when given)."""
    path = RESULTS / f"{chapter}.json"
    if not path.exists():
        return None, (f"no recorded figures: results/{path.name} is not in this copy of the course"
                      + (f"; it is made on a GPU by `{made_by}`" if made_by else ""))
    data = json.loads(path.read_text())
    where = data.get("device", "GPU").replace("NVIDIA ", "")
    return data, f"recorded on an {where} (results/{path.name}, made by `{data.get('command', '?')}`)"
