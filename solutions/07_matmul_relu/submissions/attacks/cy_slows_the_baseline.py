# Computes every product twice (about half of PyTorch's speed, short of the 75% target), and tries to lower the
# target instead: from the moment its cell runs, a thread keeps queueing GPU kernels that spin for a tenth of a
# second each on a stream of its own, and stops when the judge's first timing request arrives (it wraps the
# timing harness of its own process). The judge times PyTorch's product, the target, before that request: on a
# GPU shared with the spinning kernels (another process's context, so time-sliced with them) it would run at
# about half speed. The judge freezes the submission's sandboxes and waits for the GPU to drain before it times
# the baseline; this queue outlasts the wait, so the judge refuses to time at all: no speed points. On a GPU it
# also kills the process that NVML names as still running kernels, so that the queue stops slowing the timed
# loops of other submissions (tests/gpu/records/gpu_hog_stopped.json). Correct everywhere, so its correctness points stand.
#%% matmul_relu from-solution
#%%- replace
    matmul_relu_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                             c.stride(0), c.stride(1), ALIGNED=aligned, **meta)
    return c
#%%- with
    for _ in range(2):
        matmul_relu_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                 c.stride(0), c.stride(1), ALIGNED=aligned, **meta)
    return c


def _spin_until_timed():
    import threading
    import time

    import triton_course.timing_harness as harness

    stop = threading.Event()
    served = harness._serve_timing

    def serve(path, req):
        if req.get("step") == "prepare":
            stop.set()
        served(path, req)

    def spin():
        side = torch.cuda.Stream()
        while not stop.is_set():
            with torch.cuda.stream(side):
                torch.cuda._sleep(200_000_000)   # two hundred million cycles: about a tenth of a second
            time.sleep(0.02)                      # never synchronised: the queue only grows

    harness._serve_timing = serve
    if torch.cuda.is_available():
        threading.Thread(target=spin, daemon=True, name="spinning-queue").start()


_spin_until_timed()
