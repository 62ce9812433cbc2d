"""Vector add on the GPU: the reference `add` against the copy bandwidth and torch, across sizes."""

import torch

from triton_course.bench import copy_bandwidth, measure_gbps


def measure(ns):
    add, traffic_bytes = ns["add"], ns["traffic_bytes"]
    ceiling = copy_bandwidth()
    rows = []
    for k in (20, 22, 24, 26, 28):
        n = 2**k
        make = lambda: (torch.randn(n, device="cuda"), torch.randn(n, device="cuda"))  # noqa: E731
        triton_gbps = measure_gbps(add, make, traffic_bytes(n, 4))
        torch_gbps = measure_gbps(torch.add, make, traffic_bytes(n, 4))
        rows.append({"n": n, "triton_gbps": round(triton_gbps, 1), "torch_gbps": round(torch_gbps, 1),
                     "triton_fraction_of_copy": round(triton_gbps / ceiling, 3)})
    target_row = next(r for r in rows if r["n"] == 2**26)
    return {
        "sizes": rows,
        "bandwidth_check": {"n": 2**26, "achieved_gbps": target_row["triton_gbps"],
                            "fraction_of_copy": target_row["triton_fraction_of_copy"], "target_fraction": 0.75,
                            "passes": target_row["triton_fraction_of_copy"] >= 0.75},
    }
