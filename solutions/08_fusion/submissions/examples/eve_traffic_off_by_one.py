# Traffic counts one tensor short: the eager chains forget that each kernel's output is read again, the fused
# norm forgets to write h, and recomputing h forgets one of its two inputs.
#%% traffic
def softmax_bytes(M: int, N: int, elem_bytes: int, fused: bool) -> int:
    if fused:
        return 2 * M * N * elem_bytes
    return (7 * M * N + 4 * M) * elem_bytes


def norm_bytes(M: int, N: int, elem_bytes: int, *, norm: str, residual: bool, fused: bool) -> int:
    params = {"layernorm": 2 * N, "rmsnorm": N}[norm]
    if not residual:
        return (2 * M * N + params) * elem_bytes
    return ((3 if fused else 5) * M * N + params) * elem_bytes


def gemm_act_bytes(M: int, N: int, K: int, elem_bytes: int, fused: bool) -> int:
    return (M * K + K * N + (1 if fused else 2) * M * N) * elem_bytes


def gemm_act_intensity(M: int, N: int, K: int, elem_bytes: int, fused: bool) -> float:
    return 2 * M * N * K / gemm_act_bytes(M, N, K, elem_bytes, fused)


def reuse_bytes(M: int, N: int, elem_bytes: int, consumers: int, store: bool) -> int:
    if store:
        return (4 * M * N + N + consumers * M * N) * elem_bytes
    return (3 * M * N + N + consumers * M * N) * elem_bytes
#%% roofline from-solution
#%% fused from-solution
