# Times every call, the warm-up calls too, and takes the median of them all: slow warm-up calls land in the result.
#%% benchmark
def benchmark(fn, warmup: int = 1, trials: int = 3, return_mode: str = "median") -> float:
    """The median (or mean, or min) milliseconds of `trials` calls of fn(), each timed alone, after `warmup` calls."""
    if warmup < 0 or trials < 1:
        raise ValueError(f"need warmup >= 0 and trials >= 1, got warmup={warmup}, trials={trials}")
    if return_mode not in ("median", "mean", "min"):
        raise ValueError(f"return_mode must be 'median', 'mean' or 'min', got {return_mode!r}")
    times = []
    for _ in range(warmup + trials):
        t0 = time.perf_counter()
        fn()
        if device.is_gpu:
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return float({"median": statistics.median, "mean": statistics.mean, "min": min}[return_mode](times))
#%% gelu_traffic from-solution
