# Returns the median of per-call times in seconds, not milliseconds; counts one read per operation.
#%% benchmark
def benchmark(fn, warmup: int = 1, trials: int = 3, return_mode: str = "median") -> float:
    """The median (or mean, or min) milliseconds of `trials` calls of fn(), each timed alone, after `warmup` calls."""
    if warmup < 0 or trials < 1:
        raise ValueError(f"need warmup >= 0 and trials >= 1, got warmup={warmup}, trials={trials}")
    if return_mode not in ("median", "mean", "min"):
        raise ValueError(f"return_mode must be 'median', 'mean' or 'min', got {return_mode!r}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float({"median": statistics.median, "mean": statistics.mean, "min": min}[return_mode](times))
#%% gelu_traffic
def eager_gelu_traffic(n: int, element_size: int = 4) -> tuple[int, int]:
    """(kernels launched, bytes moved) by gelu_eager on n elements of element_size bytes."""
    return 8, 16 * n * element_size
