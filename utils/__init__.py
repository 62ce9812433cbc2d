"""Helpers imported by every chapter notebook of the Triton course.

Importing this package chooses the backend first (Triton's interpreter when there is no CUDA GPU), so
that ``TRITON_INTERPRET`` is set before any kernel is defined. Then:

* :mod:`utils.device`  -- the device, problem sizes, the environment summary;
* :mod:`utils.inputs`  -- clear errors for wrong dtype, device, shape or strides in launchers;
* :mod:`utils.checks`  -- compare with a float64 reference, poisoned outputs and guard regions;
* :mod:`utils.bench`   -- median timings with the L2 flushed, GB/s, copy-bandwidth calibration;
* :mod:`utils.plots`   -- bandwidth-against-size plots;
* :mod:`utils.grading` -- what hidden tests call (quiet stderr, the bandwidth check).
"""

from utils.device import choose_backend

choose_backend()

from utils.device import Device, NoGPUError, current, require_gpu, setup  # noqa: E402

#: Marks this package as the course's own (a notebook checks it before trusting ``import utils``).
COURSE = "triton-kernels-course"

__all__ = ["COURSE", "Device", "NoGPUError", "current", "require_gpu", "setup"]
