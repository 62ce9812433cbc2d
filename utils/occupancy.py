"""Per-SM limits that decide occupancy, by compute capability (chapter 01).

The table holds the figures of NVIDIA's CUDA occupancy calculator (``cuda_occupancy.h``) and the CUDA
C++ Programming Guide's table of technical specifications. It holds *limits only*: the rules that turn
them into an occupancy are the chapter's exercise. :func:`compiled_kernel_stats` and
:func:`driver_active_blocks` read the same quantities from a compiled Triton kernel and from the CUDA
driver, so that a notebook on a GPU can compare the student's rules with the hardware's answer.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from .gpus import GPU_SPECS
from .i18n import _


@dataclass(frozen=True)
class SMLimits:
    """What one streaming multiprocessor (SM) of a compute capability can hold at once."""

    compute_capability: tuple[int, int]
    max_warps_per_sm: int          # resident warps (threads per SM / 32)
    max_blocks_per_sm: int         # resident thread blocks
    registers_per_sm: int          # 32-bit registers in the register file
    register_partitions: int       # the file is split evenly among this many warp schedulers
    register_unit: int             # registers are given to a warp in multiples of this many
    max_registers_per_thread: int
    shared_per_sm: int             # bytes of shared memory per SM, largest carve-out of L1
    max_shared_per_block: int      # bytes a block may ask for (opt-in maximum)
    shared_reserved_per_block: int  # bytes the system keeps for itself in every block
    shared_unit: int               # shared memory is given to a block in multiples of this many bytes
    max_threads_per_block: int = 1024
    warp_size: int = 32


#: Limits per compute capability (the GPUs students and graders meet).
LIMITS: dict[tuple[int, int], SMLimits] = {
    (7, 5): SMLimits((7, 5), 32, 16, 65536, 4, 256, 255, 65536, 65536, 0, 256),
    (8, 0): SMLimits((8, 0), 64, 32, 65536, 4, 256, 255, 167936, 166912, 1024, 128),
    (8, 6): SMLimits((8, 6), 48, 16, 65536, 4, 256, 255, 102400, 101376, 1024, 128),
    (8, 9): SMLimits((8, 9), 48, 24, 65536, 4, 256, 255, 102400, 101376, 1024, 128),
    (9, 0): SMLimits((9, 0), 64, 32, 65536, 4, 256, 255, 233472, 232448, 1024, 128),
    (10, 0): SMLimits((10, 0), 64, 32, 65536, 4, 256, 255, 233472, 232448, 1024, 128),
}


def sm_limits(gpu: str | tuple[int, int]) -> SMLimits:
    """The SM limits of a GPU named in :data:`triton_course.gpus.GPU_SPECS` ("A100", "H100", "H200", "B200",
    "T4", "A10", "L4"; case-insensitive) or of a compute capability given as a tuple such as ``(9, 0)``."""
    if isinstance(gpu, tuple):
        cc = gpu
    else:
        key = str(gpu).upper().replace("NVIDIA", "").strip()
        if key not in GPU_SPECS:
            raise ValueError(_("unknown GPU {gpu}; known: {known} (or pass a compute capability such as "
                               "(9, 0))").format(gpu=repr(gpu), known=", ".join(GPU_SPECS)))
        cc = GPU_SPECS[key].compute_capability
    if cc not in LIMITS:
        raise ValueError(_("no occupancy limits recorded for compute capability {capability}; known: "
                           "{known}").format(capability=f"{cc[0]}.{cc[1]}",
                                             known=", ".join("%d.%d" % k for k in LIMITS)))
    return LIMITS[cc]


def nearest_known(cc: tuple[int, int]) -> tuple[int, int]:
    """The compute capability of :data:`LIMITS` nearest ``cc``: the newest one not newer than ``cc``, or the
    oldest in the table for a GPU older than all of them."""
    older = [known for known in LIMITS if known <= cc]
    return max(older) if older else min(LIMITS)


def device_limits(props) -> tuple[SMLimits, str]:
    """``(limits, note)`` for a GPU's device properties (``torch.cuda.get_device_properties``: ``name``,
    ``major``, ``minor``). ``note`` is empty when the table holds the GPU's compute capability; otherwise it
    names the capability, the nearest one whose limits stand in for it, and what that costs. Never raises for
    an unknown capability, so a notebook's GPU cells run on any GPU."""
    cc = (int(props.major), int(props.minor))
    if cc in LIMITS:
        return LIMITS[cc], ""
    near = nearest_known(cc)
    # TRANSLATORS: {older} in the next message is nothing, or this remark.
    older = _(" (older than any GPU in the table; current Triton compiles for 7.5 and newer)") if cc < near else ""
    gpu = props.name if hasattr(props, "name") else _("this GPU")
    note = _("{gpu}: compute capability {capability} is not in the table of SM limits{older}; assuming the limits "
             "of {nearest}, the nearest known. Occupancies computed from the table are estimates here; the CUDA "
             "driver's figure is the GPU's own.").format(gpu=gpu, capability=f"{cc[0]}.{cc[1]}", older=older,
                                                         nearest=f"{near[0]}.{near[1]}")
    return LIMITS[near], note


@dataclass(frozen=True)
class KernelStats:
    """What the compiler decided for one compiled Triton kernel."""

    name: str
    num_warps: int
    registers_per_thread: int
    spilled_registers: int
    shared_bytes: int

    @property
    def threads_per_block(self) -> int:
        return 32 * self.num_warps


def compiled_kernel_stats(compiled) -> KernelStats:
    """Registers, spills and shared memory of a compiled kernel (what ``kernel[grid](...)`` returns on a
    GPU). Under the interpreter a launch returns None and there is nothing to read."""
    if compiled is None:
        raise ValueError(_("no compiled kernel: under Triton's interpreter a launch returns None"))
    init = getattr(compiled, "_init_handles", None)
    if init is not None:
        init()  # loads the binary, which is when the driver reports registers and spills
    meta = compiled.metadata
    return KernelStats(compiled.name, int(meta.num_warps), int(compiled.n_regs), int(compiled.n_spills),
                       int(meta.shared))


def driver_active_blocks(compiled) -> int | None:
    """Blocks of ``compiled`` that fit on one SM, as the CUDA driver computes it
    (``cuOccupancyMaxActiveBlocksPerMultiprocessor``); None where the driver cannot be asked."""
    try:
        stats = compiled_kernel_stats(compiled)
        libcuda = ctypes.CDLL("libcuda.so.1")
        blocks = ctypes.c_int(0)
        err = libcuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
            ctypes.byref(blocks), ctypes.c_void_p(compiled.function), ctypes.c_int(stats.threads_per_block),
            ctypes.c_size_t(stats.shared_bytes))
        return int(blocks.value) if err == 0 else None
    except Exception:
        return None
