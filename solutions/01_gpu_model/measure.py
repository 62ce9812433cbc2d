"""GPU model on the GPU: this device's properties, and the occupancy of compiled Triton kernels as the
chapter's `occupancy` computes it from n_regs/shared, against the CUDA driver's own count."""

import torch
import triton
import triton.language as tl

from triton_course.occupancy import compiled_kernel_stats, driver_active_blocks, sm_limits


@triton.jit
def _tile_matmul(a_ptr, b_ptr, c_ptr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # one BM x BN tile of C = A @ B for square row-major matrices of size K (shared memory for tl.dot)
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        b = tl.load(b_ptr + (k + rk)[:, None] * K + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * K + rn[None, :], acc.to(tl.float16))


def _row(compiled, occupancy, cc, label):
    s = compiled_kernel_stats(compiled)
    lim = sm_limits(cc)
    ours = occupancy(s.threads_per_block, s.registers_per_thread, s.shared_bytes, gpu=cc)
    blocks = driver_active_blocks(compiled)
    driver = None if blocks is None else blocks * s.num_warps / lim.max_warps_per_sm
    return {"kernel": label, "num_warps": s.num_warps, "n_regs": s.registers_per_thread,
            "n_spills": s.spilled_registers, "shared_bytes": s.shared_bytes, "occupancy": round(ours, 4),
            "driver_active_blocks": blocks, "driver_occupancy": None if driver is None else round(driver, 4),
            "agree": driver is not None and abs(driver - ours) < 1e-9}


def measure(ns):
    occupancy, row_sum_kernel = ns["occupancy"], ns["row_sum_kernel"]
    props = torch.cuda.get_device_properties(0)
    cc = (props.major, props.minor)
    own = {"name": props.name, "compute_capability": list(cc), "sms": props.multi_processor_count,
           "max_threads_per_sm": props.max_threads_per_multi_processor,
           "registers_per_sm": getattr(props, "regs_per_multiprocessor", None),
           "shared_per_sm": getattr(props, "shared_memory_per_multiprocessor", None),
           "shared_per_block_optin": getattr(props, "shared_memory_per_block_optin", None),
           "l2_bytes": props.L2_cache_size, "memory_bytes": props.total_memory}
    lim = sm_limits(cc)
    table_matches_device = {
        "max_warps_per_sm": own["max_threads_per_sm"] // 32 == lim.max_warps_per_sm,
        "registers_per_sm": own["registers_per_sm"] in (None, lim.registers_per_sm),
        "shared_per_sm": own["shared_per_sm"] in (None, lim.shared_per_sm),
        "shared_per_block_optin": own["shared_per_block_optin"] in (None, lim.max_shared_per_block),
    }
    rows = []
    x = torch.randn(64, 4096, device="cuda")
    out = torch.empty(64, device="cuda")
    for block in (1024, 4096):
        for num_warps in (1, 2, 4, 8, 16):
            label = f"row_sum_kernel BLOCK={block}"
            try:
                compiled = row_sum_kernel[(64,)](x, out, 4096, BLOCK=block, num_warps=num_warps)
                rows.append(_row(compiled, occupancy, cc, label))
            except Exception as exc:
                rows.append({"kernel": label, "num_warps": num_warps, "error": repr(exc)[:300]})
    K = 1024
    a = torch.randn(K, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, K, device="cuda", dtype=torch.float16)
    c = torch.empty(K, K, device="cuda", dtype=torch.float16)
    for bm, bn, bk, warps, stages in ((64, 64, 32, 4, 2), (128, 128, 32, 4, 3), (128, 128, 64, 8, 3),
                                      (128, 256, 64, 8, 3), (256, 128, 64, 8, 4)):
        try:
            compiled = _tile_matmul[(K // bm, K // bn)](a, b, c, K, BM=bm, BN=bn, BK=bk, num_warps=warps,
                                                        num_stages=stages)
        except Exception as exc:  # e.g. out of shared memory
            rows.append({"kernel": f"tile_matmul {bm}x{bn}x{bk} stages={stages}", "error": repr(exc)[:200]})
            continue
        try:
            rows.append(_row(compiled, occupancy, cc, f"tile_matmul {bm}x{bn}x{bk} stages={stages}"))
        except Exception as exc:
            rows.append({"kernel": f"tile_matmul {bm}x{bn}x{bk} stages={stages}", "error": repr(exc)[:300]})
    worked = {"example": "occupancy(128, 160, gpu='A100')", "value": occupancy(128, 160, gpu="A100")}
    return {"own_gpu": own, "sm_limits_table_matches_device": table_matches_device, "kernels": rows,
            "all_agree_with_driver": all(r.get("agree", False) for r in rows if "error" not in r),
            "worked_example": worked}
