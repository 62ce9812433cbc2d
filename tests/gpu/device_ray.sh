# Source this on the GPU machine, from the repository root, after tests/gpu/device_setup.sh, before the Ray runs of
# tests/gpu/gpu_class_throughput.py (--ray):
#
#   . tests/gpu/device_setup.sh >/dev/null || exit 1; . tests/gpu/device_ray.sh || exit 1
#   CUDA_VISIBLE_DEVICES=0 taskset -c 0-15 python3 tests/gpu/gpu_class_throughput.py 03 --ray --honest-only ...
#
# requirements/gpu.txt pins ray, which a GPU box installs with `make install`. The device machine has no package
# index, and Ray 2.60's wheel (79 MB) does not fit beside .whl in what one call may carry (64 MiB). What the
# grader runs of Ray fits in 20 MB: the wheel without its Java jars (31 MB compressed), the dashboard's web
# client and the libraries the grader never imports (rllib, data, serve, tune, train, llm), packed with xz.
# Build it here once, into a folder that git ignores, and carry it with the call (.ray, beside .whl and .deb):
#
#   mkdir -p .ray /tmp/ray && echo /.ray/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d /tmp/ray ray==2.60.0
#   unzip -q /tmp/ray/ray-2.60.0-*.whl -d /tmp/ray/site && (cd /tmp/ray/site && rm -rf ray/jars \
#       ray/dashboard/client ray/rllib ray/data ray/serve ray/tune ray/train ray/llm)
#   tar -C /tmp/ray/site -cf - . | xz -9 -T0 > .ray/ray-stripped.tar.xz
#
# Its other needs (aiohttp, msgpack, protobuf, ...) are in the machine's image, jsonschema in .whl.
python3 -c "import tarfile; tarfile.open('.ray/ray-stripped.tar.xz').extractall('/tmp/site', filter='fully_trusted')" \
  || { echo "device_ray: .ray/ray-stripped.tar.xz did not unpack" >&2; return 1; }
mkdir -p /tmp/site/bin   # the `ray` command that pip would have written from the wheel's entry point
printf '#!/usr/bin/env python3\nimport sys\nfrom ray.scripts.scripts import main\nsys.exit(main())\n' > /tmp/site/bin/ray
chmod +x /tmp/site/bin/ray
export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0   # Ray 2.60 keeps a head on 127.0.0.1 only with this (docs/scale.md)
python3 -c "import ray; print('device_ray: ray', ray.__version__)" || { echo "device_ray: ray does not import" >&2; return 1; }
