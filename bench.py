#!/usr/bin/env python3
"""Benchmark every kernel in the build against cuBLAS (see `python bench.py --help`).

    python bench.py                                   # default set, squares 1024..8192
    python bench.py --all --MMNK 8192 --SEP 1024 --plot --json out.json
    python bench.py --mma-all --MNK 4096
    python bench.py --readme out.json                 # regenerate the README results section
    python bench.py --matmul host,torch --json mm.json  # hgemm_rt.matmul vs cuBLAS/torch (default: all sections)

The code lives in hgemm_bench/ (flags, selection, measurement, tables, plot, JSON/CSV, README).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hgemm_bench.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
