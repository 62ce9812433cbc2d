"""The memory ladder (chapter 02): how big and how fast each level of a GPU's memory is.

* :data:`H200_DOCUMENTED` -- sizes and bandwidths NVIDIA documents for the H200 (and its GH100 chip),
  each with its source. They are leads, not measurements.
* :func:`working_set_sweep` -- GB/s of a copy against the bytes it touches, on the device in use: on a
  GPU a Triton kernel copies a buffer several times in one launch (so launches do not hide the caches),
  on the CPU ``torch`` copies with the host clock (the CPU's own caches show the same ladder).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from functools import lru_cache

import torch

from .i18n import N_, _


@dataclass(frozen=True)
class Level:
    """One level of the ladder as documented: capacity and, where documented, bandwidth. The fields hold the English
    as written here; ``name``, ``capacity``, ``bandwidth`` and ``source`` give it in the current language."""

    name_en: str
    capacity_en: str
    bandwidth_en: str
    source_en: str

    @property
    def name(self) -> str:
        return _(self.name_en)

    @property
    def capacity(self) -> str:
        return _(self.capacity_en)

    @property
    def bandwidth(self) -> str:
        return _(self.bandwidth_en)

    @property
    def source(self) -> str:
        return _(self.source_en)


#: The H200 as NVIDIA documents it (the H200 uses the GH100 chip of the H100 SXM, with HBM3e).
H200_DOCUMENTED: tuple[Level, ...] = (
    Level(N_("registers"), N_("256 KB per SM (65,536 x 32 bit), 33 MB over 132 SMs"),
          N_("operands of every instruction, every cycle (not a figure NVIDIA quotes)"),
          N_("NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)")),
    Level(N_("shared memory / L1"), N_("256 KB per SM (up to 228 KB of it as shared memory)"),
          N_("32 banks x 4 bytes per SM per clock: about 33 TB/s over 132 SMs at 1.98 GHz"),
          N_("H100 whitepaper; banks from the CUDA C++ Programming Guide")),
    Level("L2", N_("50 MB on the H100 (the H200's driver reports 60 MiB)"),
          N_("not quoted by NVIDIA: measured below"),
          N_("H100 whitepaper; solutions/01_gpu_model/records/01_gpu_model.json for the H200")),
    Level("HBM3e", "141 GB", "4.8 TB/s", N_("NVIDIA H200 datasheet")),
)


@lru_cache(maxsize=None)
def _copy_passes_kernel():
    """A Triton kernel that copies ``src`` to ``dst`` ``passes`` times in one launch. Each pass visits the
    blocks in a different order, so no program reads back what it just wrote, and the loads skip L1
    (``.cg``): what repeats is served by the L2 while the buffers fit in it, by memory once they do not.
    Defined on first use, after the course's setup has chosen the backend."""
    import triton
    import triton.language as tl

    @triton.jit
    def copy_passes(src, dst, n_blocks, passes, BLOCK: tl.constexpr):
        pid, programs = tl.program_id(0), tl.num_programs(0)
        for p in range(passes):
            for b in range(pid, n_blocks, programs):
                block = (b + p * 7919) % n_blocks   # a shifted order: still every block once per pass
                offs = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
                tl.store(dst + offs, tl.load(src + offs, cache_modifier=".cg"))

    return copy_passes


def _gpu_copy_gbps(set_bytes: int, rounds: int = 5) -> float:
    block = 2048
    n = max(block, set_bytes // 8 // block * block)  # src + dst = set_bytes, float32, whole blocks
    src, dst = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    passes = max(1, (2 << 30) // (2 * n * 4))   # about 2 GB of traffic per launch: the launch itself is noise
    programs = min(n // block, 8 * torch.cuda.get_device_properties(0).multi_processor_count)
    kernel = _copy_passes_kernel()
    launch = lambda: kernel[(programs,)](src, dst, n // block, passes, BLOCK=block, num_warps=8)  # noqa: E731
    launch()
    times = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return 2 * n * 4 * passes / (statistics.median(times) * 1e-3) / 1e9


def _cpu_copy_gbps(set_bytes: int, rounds: int = 5) -> float:
    n = max(1, set_bytes // 8)
    src, dst = torch.randn(n), torch.empty(n)
    repeat = max(1, int(4e6 // set_bytes))   # small sets: many copies per reading of the clock
    dst.copy_(src)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(repeat):
            dst.copy_(src)
        times.append((time.perf_counter() - t0) / repeat)
    return 2 * n * 4 / statistics.median(times) / 1e9


def working_set_sweep(set_bytes: list[int], on_gpu: bool) -> list[float]:
    """GB/s (bytes read + written) of copying a buffer, for each working set (source + destination bytes).

    On a GPU each figure is the median of 5 launches of a kernel that copies the buffer repeatedly, about
    2 GB of traffic per launch; on the CPU, the median of 5 host-clock readings of ``torch`` copies."""
    if any(b < 8 for b in set_bytes):
        raise ValueError(_("working sets must be at least 8 bytes, got {sizes}").format(sizes=set_bytes))
    measure = _gpu_copy_gbps if on_gpu else _cpu_copy_gbps
    return [measure(b) for b in set_bytes]
