#!/usr/bin/env python3
"""Launch one kernel variant a few times at one square shape, for Nsight Compute to profile
(`ncu --launch-skip 2 --launch-count 1 ...`). Random N(0,1) operands.

    PYTHONPATH=. python3 scripts/ncu_launch.py NAME --MNK 4096 --acc f32 --stages 4
"""
import argparse
import sys

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--MNK", type=int, default=4096)
    ap.add_argument("--acc")
    ap.add_argument("--stages", type=int)
    ap.add_argument("--launches", type=int, default=3)
    args = ap.parse_args(argv)
    import hgemm_rt as hg
    from hgemm_rt.launcher import default_swizzle_stride

    e = hg.get_kernel(args.name)
    n = args.MNK
    rng = np.random.default_rng()
    a = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(np.float16)
    opts = {k: v for k, v in (("acc", args.acc), ("stages", args.stages)) if v is not None}
    if e.spec.grid == "tiles+swizzle" and default_swizzle_stride(n):
        opts.update(swizzle=True, swizzle_stride=default_swizzle_stride(n))
    with hg.to_device(a) as A, hg.to_device(b) as B, hg.empty((n, n), "f16") as C:
        for _ in range(args.launches):
            e(A, B, C, **opts)
        hg.get_device().synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(main())
