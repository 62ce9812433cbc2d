"""Scratch (removed after the device runs): time candidate configs of the chapter's kernel, fixed one at a time."""
import sys, os, time
sys.path.insert(0, os.getcwd())
import torch, triton, triton.language as tl
from grader.course import solution_notebook
from grader.notebook_code import load_namespace
from utils.bench import time_ms
T0 = time.time()
ns = load_namespace(solution_notebook("07_matmul_relu"))
kern = ns["matmul_relu_kernel"].fn

@triton.jit
def wrap_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M); tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_row = (pid // per_group) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_row, GROUP_M)
    within = pid % per_group
    tile_m = first_row + within % rows_here; tile_n = within // rows_here
    rm = tile_m * BLOCK_M + tl.arange(0, BLOCK_M); rn = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ra = rm % M; rb = rn % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + ra[:, None] * stride_am + rk[None, :] * stride_ak
    b_ptrs = b_ptr + rk[:, None] * stride_bk + rb[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(a_ptrs, mask=rk[None, :] < K - k0, other=0.0)
        b = tl.load(b_ptrs, mask=rk[:, None] < K - k0, other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak; b_ptrs += BLOCK_K * stride_bk
    acc = tl.maximum(acc, 0.0)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))

CANDIDATES = [
    (128, 256, 64, 8, 3, 8), (256, 128, 64, 8, 3, 8), (128, 256, 64, 8, 4, 8), (128, 128, 64, 8, 3, 4),
    (128, 128, 64, 8, 4, 4), (128, 128, 64, 8, 4, 8), (128, 128, 64, 8, 5, 4), (128, 128, 32, 8, 4, 4),
    (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4), (128, 64, 64, 8, 5, 4), (64, 128, 64, 8, 3, 4),
    (64, 64, 64, 8, 4, 4), (64, 64, 32, 8, 3, 4), (128, 128, 128, 8, 3, 8), (128, 64, 128, 8, 3, 4),
    (64, 256, 64, 8, 4, 4), (128, 256, 64, 16, 3, 8), (128, 256, 64, 4, 3, 8), (128, 128, 64, 1, 4, 4),
    (128, 128, 32, 1, 3, 4),
]
sizes = [1024, 2048, 4096]
inputs = {n: (torch.randn(n, n, device="cuda", dtype=torch.float16), torch.randn(n, n, device="cuda", dtype=torch.float16)) for n in sizes}
torch_t = {n: time_ms(lambda: torch.relu(inputs[n][0] @ inputs[n][1])) for n in sizes}
print("torch TFLOP/s", {n: round(2 * n**3 / torch_t[n] / 1e9, 1) for n in sizes}, flush=True)
LIMIT = float(sys.argv[1]) if len(sys.argv) > 1 else 150
for variant, fn in (("masked", kern), ("wrap", wrap_kernel)):
    for bm, bn, bk, g, s, w in CANDIDATES:
        if time.time() - T0 > LIMIT:
            print("time limit"); sys.exit(0)
        res = []
        for n in sizes:
            a, b = inputs[n]
            c = torch.empty(n, n, device="cuda", dtype=torch.float16)
            grid = (triton.cdiv(n, bm) * triton.cdiv(n, bn),)
            call = lambda: fn[grid](a, b, c, n, n, n, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=g, num_stages=s, num_warps=w)
            try:
                call(); ms = time_ms(call, warmup_ms=10, rep_ms=40)
                res.append(f"{n}: {2 * n**3 / ms / 1e9:6.1f} ({torch_t[n] / ms:4.2f})")
            except Exception as e:
                res.append(f"{n}: {type(e).__name__}")
        print(variant, (bm, bn, bk, g, s, w), " | ".join(res), f"[{time.time() - T0:.0f}s]", flush=True)
