#!/usr/bin/env bash
# On the lent GPU machine: every GPU test over the whole manifest, then compute-sanitizer over every
# kernel (tools from $1, default memcheck), a 4096^3 benchmark of the default set. Logs under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/hgemm_out}"; mkdir -p "$out"
tools="${1:-memcheck}"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2>&1 | tail -2
  export PYTHONPATH="$PWD/.site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pytest -q -m gpu -p no:cacheprovider --no-header -rf tests 2>&1 | tee "$out/pytest_gpu.log" | tail -15
timeout 300 python3 scripts/sanitize.py --tools "$tools" --log-dir "$out" 2>&1 | tee "$out/sanitize.log"
