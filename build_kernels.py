#!/usr/bin/env python3
"""Compile every kernel family in cu/ into per-architecture cubins and write artifacts/manifest.json.

The build itself is hgemm_build.cli (`python -m hgemm_build.cli` from a checkout); this script runs it
on the checkout it sits in. `python build_kernels.py --help` lists the options.
"""
import sys

from hgemm_build.cli import main

if __name__ == "__main__":
    sys.exit(main(prog="build_kernels.py"))
