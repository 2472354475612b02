"""Running a Recipe: its temporaries allocated once, each step's launch prepared once, the kernel
parameters packed once per set of operand addresses and scalars. A call then costs a dictionary
lookup and one driver call per step.

Each step's parameters are the kernel's declared `params` (cu/*.toml), filled by name: the operand
views of the step (`ptr:`/`tmap:` A, B, C, src, dst) and the integers derived from them (M, N, K,
leading dimensions and strides in elements, alpha/beta as fp32 bit patterns).
"""
from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any

from .device import get_device
from .dtypes import ITEMSIZE
from .launcher import ArrayRef, KernelLaunch, PackedParams, ParamPacker, prepare
from .manifest import Manifest
from .memory import DeviceArray
from .problem import Copy, Recipe, View
from .validate import GemmShape

PACKED_PER_EXECUTION = 32  # parameter sets kept per execution (one per distinct A, B, C addresses and scalars)


def f32_bits(x: float) -> int:
    """The bit pattern of x as an fp32, as the i32 alpha_bits/beta_bits parameters carry it."""
    return struct.unpack("<i", struct.pack("<f", x))[0]


def step_operands(step: Any) -> dict[str, View]:
    """The views a step's pointer and tensor-map parameters name."""
    if isinstance(step, Copy):
        return {"src": step.src, "dst": step.dst}
    return {"A": step.a, "B": step.b, "C": step.c}


def step_scalars(step: Any) -> dict[str, int]:
    """Every integer a step's kernel may declare, by its parameter name (alpha/beta excluded)."""
    if isinstance(step, Copy):
        s, d = step.src, step.dst
        return {"M": d.rows, "N": d.cols, "src_rows": step.src_rows, "src_cols": step.src_cols,
                "srs": s.rs, "scs": s.cs, "drs": d.rs, "dcs": d.cs}
    a, b, c = step.a, step.b, step.c
    b_row = dict(step.variant).get("b", "row") == "row"
    return {"M": step.M, "N": step.N, "K": step.K, "lda": a.rs, "ldb": b.rs if b_row else b.cs,
            "ldc_r": c.rs, "ldc_c": c.cs, "ars": a.rs, "acs": a.cs, "brs": b.rs, "bcs": b.cs, "crs": c.rs, "ccs": c.cs}


class _Step:
    """One prepared launch of an Execution."""

    __slots__ = ("spec", "launch", "refs", "scalars", "epilogue")

    def __init__(self, manifest: Manifest, step: Any, dev: Any):
        self.spec = spec = manifest.kernels[step.kernel]
        if isinstance(step, Copy):
            variant, grid = {}, GemmShape(step.dst.rows, step.dst.cols, 1)
            fn, cfg = prepare(manifest, spec, dev, grid, variant, False, None)
        else:
            variant = spec.resolve_variant(dict(step.variant))  # declared axis order: the symbol name
            fn, cfg = prepare(manifest, spec, dev, GemmShape(step.M, step.N, step.K), variant, step.swizzle,
                              step.swizzle_stride)
            if step.splits > 1:  # split-K: one CTA per split of a tile, the splits of a tile in one cluster
                cfg = replace(cfg, grid=(cfg.grid[0], cfg.grid[1], step.splits), cluster=(1, 1, step.splits))
        self.launch = KernelLaunch(fn, cfg)
        # operand name -> (which of A, B, C as 0-2, or a temporary's name; shape; byte strides)
        isz = ITEMSIZE[spec.dtype]
        self.refs = {name: ("ABC".index(v.base) if v.base in ("A", "B", "C") else v.base, (v.rows, v.cols),
                            (v.rs * isz, v.cs * isz)) for name, v in step_operands(step).items()}
        self.scalars = step_scalars(step)
        self.epilogue = step.epilogue  # applies the caller's alpha/beta (else alpha 1, beta 0)


class Execution:
    """A Recipe made runnable on one device: temporaries allocated, cubins loaded, launches prepared."""

    def __init__(self, recipe: Recipe, dtype: str, device: int, manifest: Manifest):
        self.recipe, self.dtype, self.device = recipe, dtype, device
        dev = get_device(device)
        # whole rows of the pitch (the recipe's views carry the strides)
        self.temps = {t.name: DeviceArray.empty((t.rows, t.row_stride), dtype, device) for t in recipe.temps}
        # Zero them once, and wait: compute-sanitizer's initcheck does not see bytes written by a TMA
        # store, so a copy-out reading a result the persistent kernels stored would be reported as an
        # uninitialised read. Executions are cached, so this costs one memset per recipe, not per call.
        for t in self.temps.values():
            t.fill_bytes(0)
        if self.temps:
            dev.synchronize()
        self.steps = [_Step(manifest, step, dev) for step in recipe.steps]
        self._packed: OrderedDict = OrderedDict()
        self._packers_by_scalars: dict = {}
        self._lock = threading.Lock()
        self.closed = False

    def _packers(self, alpha: float, beta: float) -> list[ParamPacker]:
        packers = self._packers_by_scalars.get((alpha, beta))
        if packers is None:
            ab, bb = f32_bits(alpha), f32_bits(beta)
            packers = [ParamPacker(st.spec, dict(st.scalars, alpha_bits=ab if st.epilogue else f32_bits(1.0),
                                                 beta_bits=bb if st.epilogue else 0)) for st in self.steps]
            with self._lock:
                self._packers_by_scalars[(alpha, beta)] = packers
                if len(self._packers_by_scalars) > PACKED_PER_EXECUTION:
                    del self._packers_by_scalars[next(iter(self._packers_by_scalars))]
        return packers

    def pack(self, ptrs: tuple[int, int, int], alpha: float, beta: float) -> list[PackedParams]:
        """The parameter arrays of every step for these A, B, C addresses and scalars (cached)."""
        key = (*ptrs, alpha, beta)
        packed = self._packed.get(key)
        if packed is not None:
            return packed
        packed = []
        for st, packer in zip(self.steps, self._packers(alpha, beta)):
            packed.append(packer.pack({name: ArrayRef(ptrs[where] if isinstance(where, int) else self.temps[where].ptr,
                                                       shape, strides, self.dtype)
                                       for name, (where, shape, strides) in st.refs.items()}))
        with self._lock:
            self._packed[key] = packed
            while len(self._packed) > PACKED_PER_EXECUTION:
                self._packed.popitem(last=False)
        return packed

    def bind(self, packed: list[PackedParams], stream: int) -> tuple:
        """(bound launch, its KernelLaunch) per step, for these parameters on `stream` (see
        KernelLaunch.bind); `packed` must stay alive as long as the bound launches are used."""
        return tuple((st.launch.bind(params, stream), st.launch) for st, params in zip(self.steps, packed))

    def launch(self, packed: list[PackedParams], stream: int) -> None:
        """Launch every step with parameters from pack(), in order, on `stream`."""
        steps = self.steps
        if len(steps) == 1:
            steps[0].launch(packed[0], stream)
            return
        for st, params in zip(steps, packed):
            st.launch(params, stream)

    def run(self, ptrs: tuple[int, int, int], alpha: float, beta: float, stream: int) -> None:
        self.launch(self.pack(ptrs, alpha, beta), stream)

    def close(self) -> None:
        self.closed = True
        for t in self.temps.values():
            t.close()
