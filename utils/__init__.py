"""Helpers imported by every chapter notebook of the Triton course.

Importing this package chooses the backend first (Triton's interpreter when there is no CUDA GPU), so
that ``TRITON_INTERPRET`` is set before any kernel is defined. Then:

* :mod:`triton_course.device`  -- the device, problem sizes, the environment summary;
* :mod:`triton_course.inputs`  -- clear errors for wrong dtype, device, shape or strides in launchers;
* :mod:`triton_course.checks`  -- compare with a float64 reference, poisoned outputs and guard regions;
* :mod:`triton_course.bench`   -- median timings with the L2 flushed, GB/s, copy-bandwidth calibration;
* :mod:`triton_course.plots`   -- bandwidth-against-size plots;
* :mod:`triton_course.grading` -- what hidden tests call (quiet stderr, the bandwidth check).
"""

from .device import choose_backend

choose_backend()

from .device import Device, NoGPUError, current, require_gpu, setup  # noqa: E402
from .links import VERSION as __version__  # noqa: E402

#: Marks this package as the course's own (a notebook checks it before trusting ``import triton_course``).
COURSE = "triton-kernels-course"

__all__ = ["COURSE", "Device", "NoGPUError", "current", "require_gpu", "setup"]
