"""Clear errors for bad inputs, raised by launchers before any kernel sees them.

A wrong dtype, a tensor on the wrong device or a shape mismatch would otherwise surface as a stack of
Triton internals (or, worse, as silently wrong numbers). Launchers call :func:`expect` first.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .device import current

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
        raise BadInputError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    want = current().torch_device.type
    if t.device.type != want:
        where = "the GPU (x.cuda())" if want == "cuda" else "the CPU (Triton's interpreter runs there)"
        raise BadInputError(f"{name} is on {t.device}; kernels in this session run on {where}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        if t.dtype not in dtypes:
            raise BadInputError(f"{name} has dtype {str(t.dtype).replace('torch.', '')}; "
                                f"supported: {_dtype_names(dtypes)}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if t.dim() not in allowed:
            raise BadInputError(f"{name} must have {' or '.join(map(str, allowed))} dimensions, "
                                f"got shape {tuple(t.shape)}")
    if like is not None:
        if t.shape != like.shape:
            raise BadInputError(f"{name} has shape {tuple(t.shape)} but must match {tuple(like.shape)}")
        if t.dtype != like.dtype:
            raise BadInputError(f"{name} has dtype {t.dtype} but must match {like.dtype}")
    if contiguous_last_dim and t.dim() > 0 and t.shape[-1] > 1 and t.stride(-1) != 1:
        raise BadInputError(f"{name} must have stride 1 in its last dimension (got strides "
                            f"{t.stride()}); call .contiguous() first")
    return t
