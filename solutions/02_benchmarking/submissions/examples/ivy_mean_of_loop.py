# Times the whole loop with one pair of events (one clock reading on the CPU) and divides by trials: the mean,
# whatever return_mode asks for. Warm-up and units are right; the median is not.
#%% benchmark
def benchmark(fn, warmup: int = 1, trials: int = 3, return_mode: str = "median") -> float:
    """The median (or mean, or min) milliseconds of `trials` calls of fn(), each timed alone, after `warmup` calls."""
    if warmup < 0 or trials < 1:
        raise ValueError(f"need warmup >= 0 and trials >= 1, got warmup={warmup}, trials={trials}")
    if return_mode not in ("median", "mean", "min"):
        raise ValueError(f"return_mode must be 'median', 'mean' or 'min', got {return_mode!r}")
    for _ in range(warmup):
        fn()
    if device.is_gpu:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(trials):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / trials
    t0 = time.perf_counter()
    for _ in range(trials):
        fn()
    return (time.perf_counter() - t0) * 1e3 / trials
#%% gelu_traffic from-solution
