# The two commands of the README, and the steps they are made of.
#   make demo   install everything, then run the instructor's job end to end on the example submissions
#   make test   install everything (and Chromium for the browser test), then run the full test suite
#               and the range check (make test-range) (what .ci/run and GitHub Actions run)
#   make test-fast  the unit tests alone (CONTRIBUTING.md says when to run which)
#   make test-lab   the lab's own tests (lab/: dry runs of the design probes, their records); never part of make test
# On a machine with an NVIDIA GPU the install takes requirements/gpu.txt (CUDA torch), otherwise
# requirements/cpu.txt with its lock (CPU torch; kernels run in Triton's interpreter).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HAS_GPU := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
PINS := $(if $(HAS_GPU),-r requirements/gpu.txt,-r requirements/cpu.txt -c requirements/cpu.lock)
DEMO_OUT ?= demo-output
PYTEST_ARGS ?=
# The browser test (tests/test_browser.py) drives this Chromium through Playwright. It is never a browser
# downloaded by `playwright install`: Debian's package, installed below when missing (GitHub's Ubuntu
# runners already have /usr/bin/chromium).
CHROMIUM ?= $(or $(COURSE_CHROMIUM),/usr/bin/chromium)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: install browser sandbox demo test test-fast test-range test-gpu-limits test-lab release check-release clean

$(VENV)/.installed: pyproject.toml requirements/cpu.txt requirements/gpu.txt requirements/cpu.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check $(PINS)
	@# the checkout's editable install was once named like the student wheel: pip would take it for the wheel
	-$(PY) -m pip uninstall --quiet --yes triton-kernels-course >/dev/null 2>&1
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -e .
	touch $@

install: $(VENV)/.installed

browser:
	@test -x $(CHROMIUM) || { echo "Installing Debian's chromium for the browser test ..."; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	@test -x $(CHROMIUM) || { echo "no Chromium at $(CHROMIUM): the browser test will fail"; exit 1; }
	@# the Chinese edition's browser test checks that Chinese renders: a CJK font (Debian's Noto CJK)
	@test -n "$$(fc-list :lang=zh 2>/dev/null)" || { echo "Installing Debian's Noto CJK fonts for the Chinese notebooks ..."; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-noto-cjk >/dev/null; }

# The grader runs every submission inside bubblewrap (Debian's package): installed here when missing.
sandbox:
	@command -v bwrap >/dev/null || { echo "Installing Debian's bubblewrap for the grading sandbox ..."; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; }

demo: install sandbox
	$(PY) -m grader demo --out $(DEMO_OUT)

# The fast tier, for the edit-test loop: every module's unit tests and the chapters' in-process checks; no
# Jupyter kernel, sandbox, browser or Ray cluster (the tests marked `notebook` or `browser`). `make test` runs
# these too, and everything else.
test-fast: install
	$(PY) -m pytest -n 2 --dist loadgroup -m "not notebook and not browser and not gpu_limits" --timeout 600 $(PYTEST_ARGS)

# The range check runs beside the suite, one worker, its output held back until the suite ends: the suite's
# two workers leave part of two cores idle (waiting on kernels, sandboxes and nbgrader to start), which the
# range check's interpreter work fills, at a lower priority (nice) so that it takes only what the suite leaves.
# `make test` fails if either fails.
test: install browser sandbox
	@nice -n 15 $(MAKE) --no-print-directory test-range RANGE_PYTEST_ARGS="-p no:xdist --timeout 900" >$(VENV)/test-range.log 2>&1 & \
	  range=$$!; \
	  COURSE_CHROMIUM=$(CHROMIUM) $(PY) -m pytest -n 2 --dist loadgroup -m "not gpu_limits" --timeout 1800 $(PYTEST_ARGS); suite=$$?; \
	  wait $$range; ranged=$$?; \
	  echo "== make test-range (run beside the suite) =="; cat $(VENV)/test-range.log; \
	  test $$suite -eq 0 && test $$ranged -eq 0

# The ends of the tested range: the chapters' hidden tests (pytest -k range_check) with the oldest Triton and
# with requirements/gpu.txt's pairing, each with its NumPy, in venvs under $(VENV)/range (the suite above
# runs the newest). TRITON:NUMPY pairs; tests/test_packaging.py checks they cover the pins and the range.
RANGE_PAIRS ?= 3.5.1:2.4.6 3.6.0:2.2.6
RANGE_PYTEST_ARGS ?= -n 2 --timeout 900
test-range: install
	$(PY) packaging/check_range.py $(RANGE_PAIRS) --venvs $(VENV)/range --pytest-args "$(RANGE_PYTEST_ARGS)"

# Every kernel of every chapter compiled for a T4, an A10, an L4 and an H100 (tests/test_gpu_limits.py, marker
# gpu_limits): about 17 minutes on 2 cores from a cold Triton cache; CI runs it as a job beside `make test`.
test-gpu-limits: install
	$(PY) -m pytest tests/test_gpu_limits.py -n 2 --dist loadgroup -m gpu_limits --timeout 1800 $(PYTEST_ARGS)

# The lab (lab/README.md): the probes' dry runs on the CPU and the records only they make. Outside `make test` and
# CI's run: nothing in the course imports the lab, and a probe that stops running fails here, not there.
LAB_PYTEST_ARGS ?= --timeout 1800
test-lab: install
	$(PY) -m pytest lab $(LAB_PYTEST_ARGS)

release: install
	$(PY) -m grader release

check-release: install
	$(PY) -m grader release --check

clean:
	rm -rf $(VENV) $(DEMO_OUT)
