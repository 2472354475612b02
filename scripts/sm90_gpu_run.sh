#!/usr/bin/env bash
# On the GPU machine: generic GPU tests + bench.py (default sweep) + scripts/sm90_check.py for the Hopper
# kernels, each under its own time limit so one hang cannot eat the whole call. Logs in $OUT.
#   bash scripts/sm90_gpu_run.sh [sizes]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/hgemm_out}"; mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --target .site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH="$PWD/scripts:$PWD:$PWD/.site:${PYTHONPATH:-}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv,noheader
timeout 50 python3 -m pytest -q --no-header -p no:cacheprovider -p sm90_check tests -k hgemm_sm90 -m gpu \
  > "$out/pytest.log" 2>&1; echo "pytest rc=$?"; grep -E "^FAILED|passed|failed" "$out/pytest.log" | tail -25
timeout 80 python3 -c "
import sys, runpy, sm90_check
sm90_check.patch_cluster_launch()
sys.argv = ['bench.py', '--kernels', 'hgemm_sm90*', '--no-progress']
runpy.run_path('bench.py', run_name='__main__')" > "$out/bench.log" 2>&1; echo "bench rc=$?"; tail -40 "$out/bench.log"
timeout 100 python3 scripts/sm90_check.py --sizes "${1:-2048,4096,8192,16384}" > "$out/sm90.log" 2>&1
echo "sm90_check rc=$?"; grep -v "PASS$" "$out/sm90.log" | tail -60
