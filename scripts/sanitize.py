#!/usr/bin/env python3
"""compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over every kernel of the build, on a
GPU machine; the driver is hgemm_bench/sanitize.py (`--help` lists the flags).

    python scripts/sanitize.py --tools memcheck,racecheck,synccheck,initcheck --timeout 250
    python scripts/sanitize.py --kernels 'matmul_*'
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hgemm_bench.sanitize import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
