"""What `python tests/gpu/measure.py 11_attention_backward` records on a GPU: the chapter's relu beside torch.relu."""

from __future__ import annotations

import torch

from triton_course.bench import copy_bandwidth, measure_gbps


def measure(ns: dict) -> dict:
    """GB/s of the notebook's ``relu`` and of ``torch.relu`` at 2^26 float32 elements, and the copy's."""
    n = 2**26
    inputs = lambda: (torch.randn(n, device="cuda"),)  # noqa: E731
    return {"n": n, "relu_gbps": round(measure_gbps(ns["relu"], inputs, 8 * n), 1),
            "torch_gbps": round(measure_gbps(torch.relu, inputs, 8 * n), 1), "copy_gbps": round(copy_bandwidth(), 1)}
