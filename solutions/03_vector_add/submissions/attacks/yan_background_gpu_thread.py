# A correct kernel, and a thread left running after its cell returned that keeps launching that kernel on
# large tensors (on a GPU: 64 Mi float32 elements a launch, never synchronised, so hundreds of launches queue
# up). With several submissions per GPU, the grader freezes this submission whenever another one's kernel is
# timed and waits for its queued work to drain: the others' bandwidth verdicts are those of a GPU of their
# own. Its own correctness points are earned as usual; its own timed loops share the GPU with its thread,
# which is its own doing. Under Triton's interpreter, whose launches are not thread-safe, the thread keeps a
# CPU core busy with PyTorch instead (a kernel launched from two threads at once would break its own calls).
#%% add
BLOCK = 1024


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_elements
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok) + tl.load(y_ptr + idx, mask=ok), mask=ok)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y elementwise for two tensors of one shape and dtype (float32 or float16), by add_kernel."""
    expect("x", x)
    expect("y", y, like=x)
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out


import threading as _threading
import time as _time


def _keep_the_gpu_busy():
    on_gpu = torch.cuda.is_available()
    big = torch.randn(1 << 26 if on_gpu else 1 << 16, device="cuda" if on_gpu else "cpu")
    while True:
        try:
            if on_gpu:
                add_kernel[(triton.cdiv(big.numel(), BLOCK),)](big, big, big, big.numel(), BLOCK=BLOCK)
            else:
                big.mul_(0.5).add_(1.0)
                _time.sleep(0.001)
        except Exception:  # e.g. while the grader captures a CUDA graph on this GPU: try again
            pass


_threading.Thread(target=_keep_the_gpu_busy, daemon=True, name="background-gpu-work").start()
