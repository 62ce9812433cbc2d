# Starts the clock before the warm-up calls: the warm-up's cost lands in the result.
#%% benchmark
def benchmark(fn, warmup: int = 1, trials: int = 3) -> float:
    """Mean milliseconds per call of fn() over `trials` timed calls, after `warmup` untimed calls."""
    if warmup < 0 or trials < 1:
        raise ValueError(f"need warmup >= 0 and trials >= 1, got warmup={warmup}, trials={trials}")
    t0 = time.perf_counter()
    for _ in range(warmup + trials):
        fn()
    if device.is_gpu:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / trials
#%% gelu_traffic from-solution
