# Returns the median of per-call times in seconds: wrong units, and the median is not the mean asked for.
#%% benchmark
def benchmark(fn, warmup: int = 1, trials: int = 3) -> float:
    """Mean milliseconds per call of fn() over `trials` timed calls, after `warmup` untimed calls."""
    if warmup < 0 or trials < 1:
        raise ValueError(f"need warmup >= 0 and trials >= 1, got warmup={warmup}, trials={trials}")
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
#%% gelu_traffic
def eager_gelu_traffic(n: int, element_size: int = 4) -> tuple[int, int]:
    """(kernels launched, bytes moved) by gelu_eager on n elements of element_size bytes."""
    return 8, 16 * n * element_size
