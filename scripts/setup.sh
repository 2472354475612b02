#!/usr/bin/env bash
# Fresh machine -> ready: a virtual environment in .venv with the package, the CUDA 13 compiler
# wheels and the CUTLASS headers, then every kernel built for every architecture (cached: a second
# run compiles nothing). Needs python3 >= 3.10 and a host g++ (nvcc's host compiler).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[build,test]"
.venv/bin/python build_kernels.py "$@"
