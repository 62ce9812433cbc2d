# Tries every in-process trick of the old grader: IPython input transformers and pre_run_cell hooks that
# rewrite the test cells, rebinding check functions' __code__, printing and displaying full marks from
# inside the graded function, reading `In` and scraping gc for hidden tests, and a wrong kernel. Nothing
# of it reaches the judge: 0 points, and the honest submission graded next is untouched.
#%% add
import gc
import sys

BLOCK = 1024
ip = get_ipython()
ip.input_transformers_cleanup.append(lambda lines: ["1000\n"])
ip.events.register("pre_run_cell", lambda *a: print("2"))
import triton_course.checks as _c

_c.check_all.__code__ = (lambda *a, **k: None).__code__
_c.compare.__code__ = (lambda *a, **k: None).__code__
LEAKED = [str(x)[:200] for x in gc.get_objects() if isinstance(x, str) and "HIDDEN TESTS" in x]
LEAKED += [cell for cell in ip.user_ns.get("In", []) if "HIDDEN" in cell]


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = idx < n_elements
    tl.store(out_ptr + idx, tl.load(x_ptr + idx, mask=ok), mask=ok)  # x, not x + y


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    from IPython.display import display

    print("2.0")
    display(2)
    sys.stdout.write("{'points': 2}\n")
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)
    return out
