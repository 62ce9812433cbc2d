"""Clear errors for bad inputs, raised by launchers before any kernel sees them.

A wrong dtype, a tensor on the wrong device or a shape mismatch would otherwise surface as a stack of
Triton internals (or, worse, as silently wrong numbers). Launchers call :func:`expect` first.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .device import current
from .i18n import _

FLOAT_DTYPES = (torch.float32, torch.float16)


class BadInputError(ValueError):
    """An input a launcher cannot accept; the message says which and why."""


def _dtype_names(dtypes: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d).replace("torch.", "") for d in dtypes)


def expect(name: str, t: object, *, dtypes: Iterable[torch.dtype] | None = FLOAT_DTYPES,
           ndim: int | Iterable[int] | None = None, like: torch.Tensor | None = None,
           contiguous_last_dim: bool = False) -> torch.Tensor:
    """Check one launcher argument and return it.

    ``like``: another tensor this one must match in shape and dtype. ``contiguous_last_dim``: the last
    dimension must have stride 1 (rows may still be strided).
    """
    __tracebackhide__ = True
    if not isinstance(t, torch.Tensor):
        raise BadInputError(_("{name} must be a torch.Tensor, got {type}").format(name=name, type=type(t).__name__))
    want = current().torch_device.type
    if t.device.type != want:
        where = _("the GPU (x.cuda())") if want == "cuda" else _("the CPU (Triton's interpreter runs there)")
        # TRANSLATORS: {device} is a torch device such as "cpu" or "cuda:0"; {where} is "the GPU (x.cuda())" or
        # "the CPU (Triton's interpreter runs there)".
        raise BadInputError(_("{name} is on {device}; kernels in this session run on {where}").format(
            name=name, device=t.device, where=where))
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise BadInputError(_("{name} has dtype {dtype}; supported: {supported}").format(
                name=name, dtype=str(t.dtype).replace("torch.", ""), supported=_dtype_names(dtypes)))
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            # TRANSLATORS: {dimensions} is a number of dimensions, or several joined by the next message ("2 or 3").
            raise BadInputError(_("{name} must have {dimensions} dimensions, got shape {shape}").format(
                name=name, dimensions=_(" or ").join(map(str, allowed)), shape=tuple(t.shape)))
    if like is not None:
        if t.shape != like.shape:
            raise BadInputError(_("{name} has shape {shape} but must match {expected}").format(
                name=name, shape=tuple(t.shape), expected=tuple(like.shape)))
        if t.dtype != like.dtype:
            raise BadInputError(_("{name} has dtype {dtype} but must match {expected}").format(
                name=name, dtype=t.dtype, expected=like.dtype))
    if contiguous_last_dim and t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise BadInputError(_("{name} must have stride 1 in its last dimension (got strides {strides}); call "
                              ".contiguous() first").format(name=name, strides=t.stride()))
    return t
