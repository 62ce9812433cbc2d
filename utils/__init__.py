"""Helpers imported by every chapter notebook of the Triton course.

Importing this package chooses the backend first (Triton's interpreter when there is no CUDA GPU), so
that ``TRITON_INTERPRET`` is set before any kernel is defined. Then:

* :mod:`triton_course.device`  -- the device, problem sizes, the environment summary;
* :mod:`triton_course.links`   -- where the course lives, its names and version, the Colab and ModelScope links;
* :mod:`triton_course.bootstrap` -- the setup cell that opens every chapter notebook;
* :mod:`triton_course.versions` -- the tested torch, Triton and NumPy versions, and repairs of the interpreter;
* :mod:`triton_course.inputs`  -- clear errors for wrong dtype, device, shape or strides in launchers;
* :mod:`triton_course.checks`  -- compare with a float64 reference, poisoned outputs and guard regions;
* :mod:`triton_course.integrity` -- evidence of whose work a result is: launches, operators, launched kernels;
* :mod:`triton_course.static`  -- what a kernel's source shows without running it: loads whose mask does not mask;
* :mod:`triton_course.i18n`    -- the language of every message above (English, or the notebook's edition);
  :mod:`triton_course.columns` lines a table's headers up with its numbers in any language;
* :mod:`triton_course.bench`   -- median timings with the L2 flushed, GB/s, copy-bandwidth calibration;
* :mod:`triton_course.plots`   -- bandwidth-against-size plots;
* :mod:`triton_course.grading` -- what hidden tests call (quiet stderr, the speed checks and how they time);
* :mod:`triton_course.gpus`, :mod:`triton_course.occupancy`, :mod:`triton_course.ladder`,
  :mod:`triton_course.roofline` -- datasheet figures, per-SM limits, the memory ladder, the roofline model;
* :mod:`triton_course.softmax`, :mod:`triton_course.matmul`, :mod:`triton_course.attention`,
  :mod:`triton_course.rowwise_backward`, :mod:`triton_course.attention_backward` -- what chapters 05, 07, 09, 10 and
  11 share with their hidden tests and measurements; :mod:`triton_course.matmul_fast` and
  :mod:`triton_course.attention_fast` -- the course's fastest kernels of chapters 07 and 09, beyond the exercise.

The grader's side of a graded call runs inside the student's sandboxed kernel and never imports the grader:

* :mod:`triton_course.exchange` -- the messages between the judge and the sandbox, defined once;
* :mod:`triton_course.harness` -- serves the judge's calls: the output, the inputs after the call, the evidence;
* :mod:`triton_course.timing_harness` -- the student's end of a timed loop;
* :mod:`triton_course.relaunch` -- re-runs a call's Triton launches alone in a clean process;
* :mod:`triton_course.fixtures` -- objects a hidden test hands over that are not data, rebuilt on the student's side.
"""

from .device import choose_backend

choose_backend()

from .device import Device, NoGPUError, current, require_gpu, setup  # noqa: E402
from .links import VERSION as __version__  # noqa: E402

#: Marks this package as the course's own (a notebook checks it before trusting ``import triton_course``).
COURSE = "triton-kernels-course"

__all__ = ["COURSE", "Device", "NoGPUError", "current", "require_gpu", "setup"]
