"""Operands for the GPU tests: strided (and batched) views inside NaN-filled device buffers, and every
route the planner ranks for a problem forced once on them."""
from __future__ import annotations

import numpy as np

from hgemm_bench.matmul_checks import download, stored_and_exact
from hgemm_rt.dtypes import ITEMSIZE, STORAGE, storage_to_f64


class GuardedArray:
    """values (..., rows, cols) placed in a NaN-filled device buffer at `offset` elements: each matrix
    with the strides of `order` (row / col / gen: neither stride 1) and `pad` extra elements per leading
    dimension, the batch dimensions stepping in the order `perm` (innermost first; default the last batch
    dimension innermost) with `gap` elements between matrices; dimensions in `expand` get stride 0 (their
    values are those of index 0, as torch's expand() makes them)."""

    def __init__(self, values, dtype, order="row", offset=0, pad=0, perm=None, gap=0, expand=()):
        *bshape, rows, cols = values.shape
        nb = len(bshape)
        values = np.array(values)
        for d in expand:  # one value along an expanded dimension
            values = np.broadcast_to(np.take(values, [0], axis=d), values.shape)
        rs, cs = {"row": (cols + pad, 1), "col": (1, rows + pad), "gen": (2 * cols + pad, 2)}[order]
        extent = (rows - 1) * rs + (cols - 1) * cs + 1
        bstr, step = [0] * nb, extent + gap
        for d in (perm if perm is not None else reversed(range(nb))):
            if d in expand:
                continue
            bstr[d] = step
            step *= bshape[d]
        self.dtype, self.shape, self.rs, self.cs = dtype, values.shape, rs, cs
        store, self.exact = stored_and_exact(values, dtype)
        grids = np.meshgrid(*[np.arange(n) for n in values.shape], indexing="ij")
        idx = offset + sum(g * s for g, s in zip(grids, bstr + [rs, cs]))
        n = int(idx.max()) + 1 + 8 if idx.size else offset + 8
        self.host = np.full(n, np.nan, np.float32).astype(STORAGE[dtype]) if dtype != "bf16" \
            else np.full(n, 0x7FC1, np.uint16)  # NaN bit patterns around (and under) the view
        self.host[idx] = store
        from hgemm_rt.memory import DeviceArray

        self.buf = DeviceArray.empty((n,), dtype)
        self.buf.copy_from_host(self.host)
        isz = ITEMSIZE[dtype]
        self.view = DeviceArray(self.buf.ptr + offset * isz, values.shape, dtype,
                                tuple(s * isz for s in bstr + [rs, cs]), owner=self.buf)
        self._idx = idx

    def read(self):
        return storage_to_f64(download(self.buf, self.host)[self._idx], self.dtype)

    def outside_untouched(self):
        now = download(self.buf, self.host)
        mask = np.ones(now.shape, bool)
        mask[self._idx] = False
        return np.array_equal(now[mask].view(np.uint8), self.host[mask].view(np.uint8))


def each_route(prob, dtype: str, a: GuardedArray, b: GuardedArray, c: GuardedArray, alpha: float, beta: float,
               bias: GuardedArray | None = None, plans=None):
    """Every recipe the planner ranks for `prob` (or the recipes `plans`), forced once on a, b, c (and the bias
    of a fused epilogue; C set back to its initial values before each): yields (recipe, C's view as float64)
    with the GPU idle, C's surroundings as left."""
    from hgemm_rt import planner
    from hgemm_rt.device import get_device
    from hgemm_rt.executor import Execution
    from hgemm_rt.registry import get_registry

    dev = get_device()
    manifest = get_registry().manifest
    if plans is None:
        plans = [plan for _est, plan in planner.ranked_recipes(prob, manifest, dev.info.cc, dev.info.sm_count)]
    for plan in plans:
        c.buf.copy_from_host(c.host)
        ex = Execution(plan, dtype, 0, manifest)
        try:
            ex.run((a.view.ptr, b.view.ptr, c.view.ptr, bias.view.ptr if bias is not None else 0), alpha, beta, 0)
            dev.synchronize()
        finally:
            ex.close()
        yield plan, c.read()
