"""Chapter 10 (the backward of a row-wise operation): references, tolerances, hints and byte counts.

The notebook's kernels compute the input gradient of softmax and of RMSNorm, and RMSNorm's weight gradient, which
is a sum over every row and so over every program. What they are checked against lives here, shared by the
self-checks and by the grader's hidden tests:

* :func:`softmax_grad_reference`, :func:`rmsnorm_grads_reference`, :func:`rmsnorm_backward_reference` -- float64
  autograd of the formulas, nothing hand-derived, so that the references cannot share a mistake with the kernels;
* :func:`softmax_tolerances`, :func:`rmsnorm_tolerances` -- (atol, rtol) per dtype, per output;
* :data:`SOFTMAX_HINTS`, :data:`RMSNORM_HINTS` -- the chapter's known mistakes, each named when its symptom shows;
* :func:`softmax_bytes`, :func:`rmsnorm_bytes` -- what forward and backward must move, counted as every chapter
  counts: each input read once, each output written once;
* :func:`check_gradcheck`, :func:`check_autograd` -- ``torch.autograd.gradcheck`` in float64 and ``loss.backward()``
  against float64 autograd, through the student's ``torch.autograd.Function``;
* :func:`peer_functions` -- PyTorch autograd, ``torch.compile`` and Liger-Kernel (if importable), for measure.py.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from .checks import CheckFailed, Hint, compare, describe, describe_inputs, explain_exception
from .i18n import _

#: What a graded RMSNorm backward returns: the input's gradient, then the weight's.
RMSNORM_OUTPUTS = ("dx", "dw")
#: dw is returned in float32 whatever x is: the sum over M rows stays in the precision it was accumulated in
#: (autograd casts it to the weight's dtype when the weight is float16).
RMSNORM_OUT_DTYPES = (None, torch.float32)


# ---------------------------------------------------------------------------------------------------
# References: float64 autograd of the forward formulas
# ---------------------------------------------------------------------------------------------------

def softmax_forward_reference(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dimension, in the precision of x."""
    return torch.softmax(x, dim=-1)


def softmax_grad_reference(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dL/dx of softmax over the last dimension for the upstream gradient dy, by autograd in float64."""
    with torch.enable_grad():
        leaf = x.detach().to(torch.float64).requires_grad_()
        (dx,) = torch.autograd.grad(torch.softmax(leaf, dim=-1), leaf, dy.to(torch.float64))
    return dx


def rmsnorm_forward_reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension, x / sqrt(mean(x^2) + eps) * weight, in the precision of the inputs."""
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight


def rmsnorm_grads_reference(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor,
                            eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(dL/dx, dL/dw) of RMSNorm for the upstream gradient dy, by autograd in float64."""
    with torch.enable_grad():
        xl = x.detach().to(torch.float64).requires_grad_()
        wl = weight.detach().to(torch.float64).requires_grad_()
        dx, dw = torch.autograd.grad(rmsnorm_forward_reference(xl, wl, eps), (xl, wl), dy.to(torch.float64))
    return dx, dw


def rmsnorm_backward_reference(x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor,
                               dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(dL/dx, dL/dw) from a stored rstd, as the backward kernel computes them: rstd is the forward's (float32)
    value, taken as given, so eps does not appear."""
    with torch.enable_grad():
        xl = x.detach().to(torch.float64).requires_grad_()
        wl = weight.detach().to(torch.float64).requires_grad_()
        r = rstd.detach().to(torch.float64)
        ms = (xl * xl).mean(-1, keepdim=True)
        # the eps that makes 1/sqrt(ms + eps) equal the stored rstd, held constant: d rstd / d x is the formula's
        eps = (1.0 / (r[..., None] ** 2) - ms).detach()
        y = xl * torch.rsqrt(ms + eps) * wl
        dx, dw = torch.autograd.grad(y, (xl, wl), dy.to(torch.float64))
    return dx, dw


def rstd_of(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """The float32 rstd of every row, as the forward stores it (for inputs made outside the notebook)."""
    return torch.rsqrt(x.float().pow(2).mean(-1) + eps)


# ---------------------------------------------------------------------------------------------------
# Tolerances
# ---------------------------------------------------------------------------------------------------

def softmax_tolerances(dtype: torch.dtype) -> tuple[float, float]:
    """(atol, rtol) of softmax's dx. The kernels compute in float32 whatever the input (float64 too); in float16 the
    forward's y is rounded once before the backward reads it, and dx once more on its store. In float32, dy - Σ dy·y
    cancels where dy is close to the sum, so dx carries the sum's absolute error (a few float32 roundings of values
    near 1) times y: an atol of 1e-7 failed one element in 231 of the model answer now and then (7 x 33 rows scaled
    by 4); 2e-6 is twenty float32 roundings there, and every mistake of the chapter misses by 1e-2 and more. In
    float16 the rounded y carries its error into the sum and into y·(dy - Σ): (1e-4, 4e-3) failed one element in
    5,661 of the model answer on an H100 (tests/gpu/records/gpu_class_throughput_course_twice.json), and one test in
    a hundred when the kernel's arithmetic is replayed on the CPU (worst element 2.8 times over, at 7 shapes of
    2,000 draws); (1e-3, 1e-2) leaves that worst element 2.4 times inside."""
    return {torch.float16: (1e-3, 1e-2), torch.bfloat16: (1e-3, 3e-2)}.get(dtype, (2e-6, 2e-4))


def rmsnorm_tolerances(dtype: torch.dtype) -> list[tuple[float, float]]:
    """[(atol, rtol) of dx, (atol, rtol) of dw]. dx is rounded once to the input's dtype; dw is float32, a sum over
    rows whose rounding a float32 accumulator keeps far below 1e-5 of its value at these sizes (float16 partial sums
    miss by about 1e-3)."""
    dx = {torch.float16: (2e-3, 4e-3), torch.bfloat16: (2e-2, 3e-2)}.get(dtype, (1e-5, 1e-4))
    return [dx, (1e-4, 2e-5)]


# ---------------------------------------------------------------------------------------------------
# Hints: the chapter's known mistakes, recognised from their symptoms
# ---------------------------------------------------------------------------------------------------

def _matches(c, alternative: torch.Tensor) -> bool:
    """Every wrong element of the comparison equals ``alternative`` (what the mistake computes) within tolerance."""
    if not bool(c.wrong.any()) or bool(c.unwritten.any()):
        return False
    alt = alternative.detach().to(torch.float64).reshape(-1).cpu()
    if alt.numel() != c.got.numel():
        return False
    close = (c.got - alt).abs() <= 2 * (c.atol + c.rtol * alt.abs())
    return bool(close[c.wrong].all())


def _softmax_parts(args):
    x, dy = args[0].detach().double().cpu(), args[1].detach().double().cpu()
    return torch.softmax(x, dim=-1), dy


def _rms_parts(args):
    x, w, dy = (a.detach().double().cpu() for a in args[:3])
    eps = float(args[3]) if len(args) > 3 else 1e-6
    rstd = torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
    return x, w, dy, rstd


def _relative_error(c) -> float:
    wrong = c.wrong & ~c.unwritten
    if not bool(wrong.any()):
        return 0.0
    scale = c.expected.abs().max().clamp_min(1e-30)
    return float((c.got[wrong] - c.expected[wrong]).abs().max() / scale)


SOFTMAX_HINTS = [
    Hint(lambda c, args: _matches(c, (lambda y, dy: y * dy)(*_softmax_parts(args))),
         "the Σ term is missing: dx = y·dy keeps only the diag(y) part of softmax's Jacobian diag(y) − y·yᵀ. Every output of a row depends "
         "on every input through the row's sum, so dx = y ⊙ (dy − Σ_k dy_k·y_k): reduce dy·y over the row first "
         "(tl.sum(dy * y, axis=...)), then subtract it."),
    Hint(lambda c, args: _matches(c, (lambda y, dy: y * (dy - dy.sum(-1, keepdim=True)))(*_softmax_parts(args))),
         "the row's sum is Σ dy, not Σ dy·y: the term to subtract is the dot product of the row's dy with its y."),
    Hint(lambda c, args: bool(c.unwritten.any()),
         "some rows of dx were never written: does the grid cover every row?"),
]


RMSNORM_HINTS = [
    Hint(lambda c, args: _matches(c, (lambda x, w, dy, r: r * w * dy)(*_rms_parts(args))),
         "dx: the Σ term is missing. rstd depends on the whole row, so dx = rstd·(w⊙dy − x·rstd²·(1/N)Σ_k w_k·dy_k·x_k); "
         "rstd·w·dy alone treats rstd as a constant.", output="dx"),
    Hint(lambda c, args: _matches(c, (lambda x, w, dy, r: r * (w * dy - x * r * r * (w * dy * x).sum(-1, keepdim=True)))(
        *_rms_parts(args))),
         "dx: the row's sum is not divided by N. rstd comes from the *mean* of squares, so its derivative carries 1/N: "
         "c = Σ_k w_k·dy_k·x_k / N.", output="dx"),
    Hint(lambda c, args: bool(c.unwritten.any()), "some rows of dx were never written: does every row belong to a "
         "program (programs × rows per program ≥ M)?", output="dx"),
    Hint(lambda c, args: args[0].dtype == torch.float16 and not bool(c.unwritten.any()) and 0 < _relative_error(c) < 2e-2,
         "dw is off by float16 rounding: the weight's gradient was accumulated in float16 (a float16 buffer of "
         "partial sums, a float16 accumulator, or atomics on a float16 dw). Sum in float32 from the first product to "
         "the last: a float32 partials buffer, a float32 accumulator, float32 atomics.", output="dw"),
    Hint(lambda c, args: not bool(c.unwritten.any()) and _relative_error(c) >= 2e-2,
         "dw is far from the sum over all rows: a race on dw, or a missing reduction. Each program holds the sum over "
         "its own rows only; with a plain tl.store into the same dw every program overwrites the others (the last "
         "one wins; on a GPU, whichever lands last). Either tl.atomic_add into a zeroed float32 dw, or store one "
         "partial row per program and sum those rows in a second kernel.", output="dw"),
    Hint(lambda c, args: bool(c.unwritten.any()),
         "some elements of dw were never written: does the reduction of the partial sums cover every column?",
         output="dw"),
]


# ---------------------------------------------------------------------------------------------------
# Bytes: each input read once, each output written once
# ---------------------------------------------------------------------------------------------------

def softmax_bytes(m: int, n: int, element_size: int) -> dict[str, int]:
    """Forward: read x, write y. Backward: read y and dy, write dx (the forward stored y, so nothing is recomputed)."""
    return {"forward": 2 * m * n * element_size, "backward": 3 * m * n * element_size}


def rmsnorm_bytes(m: int, n: int, element_size: int, programs: int = 0) -> dict[str, int]:
    """Forward: read x and w, write y and a float32 rstd per row. Backward: read x, dy, w and rstd, write dx and a
    float32 dw. ``partials``: what per-program partial sums add for ``programs`` programs (a float32 row each,
    written once and read once by the second reduction); atomics add no DRAM traffic of that size, they add
    read-modify-writes at the L2."""
    s = element_size
    return {"forward": 2 * m * n * s + n * s + 4 * m,
            "backward": 3 * m * n * s + n * s + 4 * m + 4 * n,
            "partials": 2 * 4 * programs * n}


# ---------------------------------------------------------------------------------------------------
# Autograd: gradcheck and loss.backward() through the student's Function
# ---------------------------------------------------------------------------------------------------

def check_gradcheck(fn: Callable[..., torch.Tensor], inputs: Sequence[object], what: str) -> None:
    """``torch.autograd.gradcheck`` of ``fn`` (the student's Function applied) on float64 ``inputs``: the gradients
    its backward returns against finite differences of its forward. The kernels compute in float32 whatever they
    read, so the step is 1e-3 (float32 rounding over a step of 1e-6 would be noise) and the tolerances fit float32."""
    __tracebackhide__ = True
    leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a
              for a in inputs]
    # TRANSLATORS: {call} is a call such as "rmsnorm(float64[4, 8], ...)".
    label = _("gradcheck of {call}").format(call=f"{what}({describe_inputs(inputs)})")
    from torch.autograd.gradcheck import GradcheckError, gradcheck

    try:
        gradcheck(fn, tuple(leaves), eps=1e-3, atol=2e-3, rtol=2e-2)
    except GradcheckError as exc:
        first = str(exc).strip().splitlines()[0]
        # TRANSLATORS: {error} is gradcheck's own message, in English. "the Background" is the notebook's section of
        # that name.
        raise CheckFailed(_("{check}: the gradient your backward returns is not the derivative of your forward "
                            "({error}). Compare backward's formula with the Background's.").format(
            check=label, error=first)) from None
    except Exception as exc:
        raise CheckFailed(explain_exception(exc, label)) from None
    print(f"ok  {label}")


def check_autograd(fn: Callable[..., torch.Tensor], cases: Sequence[Sequence[object]],
                   reference: Callable[..., torch.Tensor], *, tolerances: Callable[[torch.dtype], object],
                   what: str) -> None:
    """``loss = (fn(*case) * dy).sum(); loss.backward()`` against float64 autograd of ``reference``: the gradient of
    every floating-point input (the first of each case is dy, the upstream gradient)."""
    __tracebackhide__ = True
    for dy, *args in cases:
        leaves = [a.detach().clone().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
        label = f"({what}({describe_inputs(args)}) * dy).sum().backward()"
        try:
            (fn(*leaves) * dy).sum().backward()
        except Exception as exc:
            raise CheckFailed(explain_exception(exc, label)) from None
        with torch.enable_grad():
            wide = [a.detach().double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
            tensors = [a for a in wide if isinstance(a, torch.Tensor)]
            want = torch.autograd.grad(reference(*wide), tensors, dy.double())
        tol = tolerances(args[0].dtype)
        tols = tol if isinstance(tol[0], (tuple, list)) else [tol] * len(want)
        mine = [a for a in leaves if isinstance(a, torch.Tensor)]
        for i, (leaf, w, (atol, rtol)) in enumerate(zip(mine, want, tols)):
            if leaf.grad is None:
                raise CheckFailed(_("{call}: input {index}'s .grad is None. Does backward return one gradient per "
                                    "argument of forward, in order (None for eps)?").format(call=label, index=i))
            c = compare(leaf.grad, w, atol=atol, rtol=rtol)
            if not c.ok:
                # TRANSLATORS: {report} is the explanation of the wrong values, several lines.
                raise CheckFailed(_("{call}: the gradient of input {index} is wrong.\n{report}").format(
                    call=label, index=i, report=describe(c)))
        print(f"ok  {label}")


# ---------------------------------------------------------------------------------------------------
# Peers, for measure.py and the benchmark
# ---------------------------------------------------------------------------------------------------

def torch_rmsnorm_grads(x: torch.Tensor, weight: torch.Tensor, dy: torch.Tensor, eps: float = 1e-6):
    """(dx, dw) by PyTorch: F.rms_norm forward, autograd backward."""
    import torch.nn.functional as F

    with torch.enable_grad():
        xl, wl = x.detach().requires_grad_(), weight.detach().requires_grad_()
        return torch.autograd.grad(F.rms_norm(xl, (x.shape[-1],), wl, eps), (xl, wl), dy)


def torch_softmax_grad(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """dx by PyTorch: torch.softmax forward, autograd backward."""
    with torch.enable_grad():
        xl = x.detach().requires_grad_()
        return torch.autograd.grad(torch.softmax(xl, dim=-1), xl, dy)[0]


def softmax_peer_functions() -> tuple[dict[str, Callable], dict[str, str]]:
    """({name: (x, dy) -> dx}, {name: why it is skipped}) for softmax forward plus backward: PyTorch autograd,
    torch.compile of ``torch.softmax`` with autograd, Liger-Kernel's softmax where it imports."""
    peers: dict[str, Callable] = {"torch autograd": torch_softmax_grad}
    skipped: dict[str, str] = {}
    compiled = torch.compile(lambda x: torch.softmax(x, dim=-1))

    def compiled_grad(x, dy):
        with torch.enable_grad():
            xl = x.detach().requires_grad_()
            return torch.autograd.grad(compiled(xl), xl, dy)[0]

    peers["torch.compile"] = compiled_grad
    try:
        from liger_kernel.ops.softmax import LigerSoftmaxFunction
    except Exception as exc:  # not installed, too old to have softmax, or built for another Triton
        skipped["Liger-Kernel"] = _("liger_kernel does not import here ({error_type}: {error})").format(
            error_type=type(exc).__name__, error=exc)
    else:
        def liger_grad(x, dy):
            with torch.enable_grad():
                xl = x.detach().requires_grad_()
                return torch.autograd.grad(LigerSoftmaxFunction.apply(xl), xl, dy)[0]

        peers["Liger-Kernel"] = liger_grad
    return peers, skipped


def peer_functions() -> tuple[dict[str, Callable], dict[str, str]]:
    """({name: (x, weight, dy) -> (dx, dw)}, {name: why it is skipped}) for RMSNorm forward plus backward: PyTorch
    autograd, torch.compile of the eager formula with autograd, Liger-Kernel's RMSNorm where it imports."""
    peers: dict[str, Callable] = {"torch autograd": torch_rmsnorm_grads}
    skipped: dict[str, str] = {}

    def eager(x, w, eps=1e-6):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w

    compiled = torch.compile(eager)

    def compiled_grads(x, weight, dy):
        with torch.enable_grad():
            xl, wl = x.detach().requires_grad_(), weight.detach().requires_grad_()
            return torch.autograd.grad(compiled(xl, wl), (xl, wl), dy)

    peers["torch.compile"] = compiled_grads
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
    except Exception as exc:  # not installed, or built for another Triton
        skipped["Liger-Kernel"] = _("liger_kernel does not import here ({error_type}: {error})").format(
            error_type=type(exc).__name__, error=exc)
    else:
        def liger_grads(x, weight, dy):
            with torch.enable_grad():
                xl, wl = x.detach().requires_grad_(), weight.detach().requires_grad_()
                return torch.autograd.grad(LigerRMSNormFunction.apply(xl, wl, 1e-6, 0.0, "llama", False), (xl, wl), dy)

        peers["Liger-Kernel"] = liger_grads
    return peers, skipped
