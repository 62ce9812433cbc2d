# Source this on the GPU machine, from the repository root, before the grading scripts of tests/gpu/:
#
#   . tests/gpu/device_setup.sh || exit; python tests/gpu/gpu_trusted_grading.py 03_vector_add --copies 1
#
# That machine has torch and triton but no Jupyter stack, no bubblewrap and no package index. Build what
# it lacks here first, in two folders that git ignores, and carry both with the call (.whl and .deb):
#
#   ../shared/device/wheels.sh .whl                                   # nbgrader, nbval, Jupyter's kernels
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .whl babel liger-kernel
#                                     # Babel: the grader's translations; Liger-Kernel: a peer of 06 and 10
#   mkdir -p .deb && (cd .deb && apt-get download bubblewrap) && echo /.deb/ >> .git/info/exclude
#
# bubblewrap is unpacked into /opt/bwrap, never into /: Debian's packages put libraries under /lib, and
# unpacking one there replaces Ubuntu's /lib symbolic link with a folder, after which nothing links or
# starts (in the sandbox, not even setpriv). The course helpers are copied to /opt/course-site as the
# package triton_course with course.toml beside them, because the sandbox binds only folders outside the
# checkout and reads the course's configuration next to the package.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "device_setup: the wheels in .whl did not install" >&2; return 1; }
rm -rf /opt/course-site /opt/bwrap && mkdir -p /opt/course-site /opt/bwrap
cp -r utils /opt/course-site/triton_course && cp course.toml /opt/course-site/triton_course/
for deb in .deb/bubblewrap_*.deb; do dpkg -x "$deb" /opt/bwrap; done
export PATH=/opt/bwrap/usr/bin:/tmp/site/bin:$PATH PYTHONPATH=/tmp/site:/opt/course-site:$PWD \
  JUPYTER_PATH=/tmp/site/share/jupyter PYTHONUNBUFFERED=1
command -v bwrap >/dev/null && bwrap --ro-bind / / --dev /dev --proc /proc --unshare-pid true \
  || { echo "device_setup: bubblewrap does not start here" >&2; return 1; }
python3 -c "import triton_course, grader.autograde, nbgrader, nbval" \
  || { echo "device_setup: the course or its grading stack does not import" >&2; return 1; }
echo "device_setup: $(python3 -c 'import torch; print(torch.cuda.get_device_name(0))'), bwrap $(bwrap --version)"
