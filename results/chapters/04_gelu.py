"""GELU (tanh approximation) on the GPU: the reference `gelu` against F.gelu, the eager formula,
torch.compile and a kernel that moves twice the bytes, across sizes."""

import math

import torch
import torch.nn.functional as F
import triton

from triton_course.bench import copy_bandwidth, measure_gbps

SIZES = tuple(2**k for k in range(20, 29, 2))
TARGET_FRACTION = 0.75  # the notebook's bandwidth check
C = math.sqrt(2 / math.pi)


def eager(x):
    return 0.5 * x * (1 + torch.tanh(C * (x + 0.044715 * x**3)))


def builtin(x):
    return F.gelu(x, approximate="tanh")


def measure(ns):
    gelu, gelu_kernel, block, traffic_bytes = ns["gelu"], ns["gelu_kernel"], ns["BLOCK"], ns["traffic_bytes"]

    def twice_the_bytes(x):
        """A typical mistake: copy x into the output, then apply GELU in place (4 n s bytes, not 2 n s)."""
        out = x.clone()
        gelu_kernel[(triton.cdiv(out.numel(), block),)](out, out, out.numel(), BLOCK=block)
        return out

    ceiling = copy_bandwidth()
    impls = {"reference": gelu, "F.gelu": builtin, "eager_formula": eager, "torch_compile": torch.compile(eager),
             "twice_the_bytes": twice_the_bytes}
    rows = []
    for dtype, sizes in ((torch.float32, SIZES), (torch.float16, (2**26,))):
        esize = torch.finfo(dtype).bits // 8
        for n in sizes:
            make = lambda: (torch.randn(n, device="cuda", dtype=dtype),)  # noqa: E731
            (x,) = make()
            for name in ("F.gelu", "twice_the_bytes", "torch_compile"):
                torch.testing.assert_close(impls[name](x), gelu(x), atol=2e-3, rtol=2e-3)
            assert torch.isfinite(gelu(torch.full((4,), 30.0, device="cuda", dtype=dtype))).all()
            row = {"n": n, "dtype": str(dtype).replace("torch.", "")}
            for name, fn in impls.items():
                row[f"{name}_gbps"] = round(measure_gbps(fn, make, traffic_bytes(n, esize)), 1)
            row["reference_fraction_of_copy"] = round(row["reference_gbps"] / ceiling, 3)
            rows.append(row)
    main = next(r for r in rows if r["n"] == 2**26 and r["dtype"] == "float32")
    check = {"n": 2**26, "dtype": "float32", "target_fraction": TARGET_FRACTION,
             "note": "the straightforward kernel (one block of BLOCK elements per program) is the reference"}
    for name in ("reference", "twice_the_bytes"):
        fraction = main[f"{name}_gbps"] / ceiling
        check[name] = {"gbps": main[f"{name}_gbps"], "fraction_of_copy": round(fraction, 3),
                       "passes": fraction >= TARGET_FRACTION}
    return {"sizes": rows, "bandwidth_check": check,
            "bytes": "2 n s: x read once, out written once"}
