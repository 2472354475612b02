#!/usr/bin/env bash
# Fresh machine -> ready: a virtual environment in .venv with the package, the CUDA 13 compiler
# wheels and the CUTLASS headers, then every kernel built for every architecture (cached: a second
# run compiles nothing). Needs python3 >= 3.10 and a host g++ (nvcc's host compiler).
# Then the wheel (build/dist/, the runtime with the built kernels as package data) and a second
# environment, build/wheel-env, holding that wheel without the build extra: no compiler, no checkout;
# tests/test_packaging.py checks the kernels there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
# setuptools 77+: pyproject's SPDX license (the wheel is built without build isolation, with this one)
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=77"
.venv/bin/python -m pip install -q -e ".[build,test,bench]"
.venv/bin/python build_kernels.py "$@"

rm -rf build/setuptools build/dist  # setuptools keeps deleted modules in its staging tree
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w build/dist .
wheel=$(ls build/dist/hgemm-*.whl)
[ -x build/wheel-env/bin/python ] || python3 -m venv build/wheel-env
build/wheel-env/bin/python -m pip install -q "$wheel"  # the runtime's dependencies (a no-op once there)
build/wheel-env/bin/python -m pip install -q --force-reinstall --no-deps "$wheel"  # this build's kernels
