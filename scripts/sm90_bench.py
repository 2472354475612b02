#!/usr/bin/env python3
"""The sm_90a tuning rounds: every Hopper kernel variant against the best cuBLAS variant under
bench.py's steady-state protocol (warm-up to the power-capped clock, interleaved rounds, SM clock and
board power beside each figure; see `python bench.py --help`). Any bench.py flag may follow:

    python scripts/sm90_bench.py --MNK 8192
    python scripts/sm90_bench.py --kernels 'persistent_tn' --MNK 16384 --steady 7 --json sm90.json
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hgemm_bench.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["--hopper", "--no-default", "--steady", *sys.argv[1:]]))
