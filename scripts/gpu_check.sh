#!/usr/bin/env bash
# On the lent GPU machine: install the carried wheels, run the GPU tests and a benchmark for the
# kernels matching PATTERN (default: all). Logs go to $OUT when set.
#   bash scripts/gpu_check.sh 'hgemm_wmma*' [--MNK 4096]
set -uo pipefail
pattern="${1:-}"; shift || true
bench_args=("$@"); [ ${#bench_args[@]} -eq 0 ] && bench_args=(--MNK 4096)
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/hgemm_out}"; mkdir -p "$out"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2>&1 | tail -2
  export PYTHONPATH="$PWD/.site:${PYTHONPATH:-}"
fi
export PYTHONPATH="$PWD:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
k=(); [ -n "$pattern" ] && k=(-k "${pattern//\*/}")
python3 -m pytest -q --maxfail=30 --no-header -p no:cacheprovider tests "${k[@]}" -m gpu 2>&1 | tee "$out/pytest.log" | tail -25
python3 bench.py ${pattern:+--kernels "$pattern"} "${bench_args[@]}" 2>&1 | tee "$out/bench.log"
