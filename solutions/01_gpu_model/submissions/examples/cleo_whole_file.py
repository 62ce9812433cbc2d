# Registers counted over the whole register file, not per quarter: 544 threads x 40 registers comes out wrong.
#%% occupancy
def occupancy(threads_per_block: int, registers_per_thread: int, shared_mem_per_block: int = 0,
              gpu: str = "A100") -> float:
    """Fraction of the SM's warp slots in use for this block size, register and shared-memory use."""
    lim = sm_limits(gpu)
    if not 1 <= threads_per_block <= lim.max_threads_per_block:
        raise ValueError(f"threads_per_block must be 1..{lim.max_threads_per_block}, got {threads_per_block}")
    if not 0 <= registers_per_thread <= lim.max_registers_per_thread:
        raise ValueError(f"registers_per_thread must be 0..{lim.max_registers_per_thread}, got {registers_per_thread}")
    if shared_mem_per_block < 0:
        raise ValueError(f"shared_mem_per_block must be >= 0, got {shared_mem_per_block}")
    warps = -(-threads_per_block // 32)
    limits = [lim.max_blocks_per_sm, lim.max_warps_per_sm // warps]
    if registers_per_thread:
        per_warp = -(-registers_per_thread * 32 // 256) * 256
        limits.append(lim.registers_per_sm // per_warp // warps)
    if shared_mem_per_block > lim.max_shared_per_block:
        return 0.0
    smem = -(-shared_mem_per_block // lim.shared_unit) * lim.shared_unit + lim.shared_reserved_per_block
    if smem:
        limits.append(lim.shared_per_sm // smem)
    return min(limits) * warps / lim.max_warps_per_sm
#%% waves from-solution
#%% access_patterns from-solution
