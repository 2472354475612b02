"""Running a Recipe: its temporaries allocated once, each step's launch prepared once, the kernel
parameters packed once per set of operand addresses and scalars. A call then costs a dictionary
lookup and one driver call per step.

Each step's parameters are the kernel's declared `params` (cu/*.toml), filled by name: the operand
views of the step (`ptr:`/`tmap:` A, B, C, src, dst) and the integers derived from them (M, N, K,
leading dimensions and strides in elements, alpha/beta as fp32 bit patterns, and the batch: the inner
level's count, each operand's 64-bit batch strides along the kernel's two levels, which levels a TMA
map carries).

A batched step launches once with grid.z = splits x its matrices (cu/CONTRACT.md); a recipe with loop
levels (Recipe.loop) runs every step once per loop index, each view's pointer moved by its batch strides.
"""
from __future__ import annotations

import itertools
import math
import struct
import threading
from typing import Any

from .cache import Cache
from .device import get_device
from .dtypes import ITEMSIZE
from .launcher import ArrayRef, KernelLaunch, PackedParams, ParamPacker
from .launchplan import LaunchPlan
from .manifest import Manifest
from .memory import DeviceArray
from .problem import Copy, GroupSum, Recipe, Split, View, kernel_batch
from .roles import gemm_handler, handler
from .roles.copy import copy_scalars
from .roles.glue import batch_strides


def f32_bits(x: float) -> int:
    """The bit pattern of x as an fp32, as the i32 alpha_bits/beta_bits parameters carry it."""
    return struct.unpack("<i", struct.pack("<f", x))[0]


# tma_levels bits (cu/matmul_sm90.cu): which kernel batch levels A's and B's maps carry; rank-4 maps
TMA_LEVEL_BITS = {("A", 0): 2, ("A", 1): 1, ("B", 0): 8, ("B", 1): 4, ("C", 0): 64, ("C", 1): 32}  # (operand, outer 0
# | inner 1) -> bit; C's map: the gemm_fused_wgmma kernels' TMA store
TMA_RANK4 = 16
TMA_C_NO_MAP = 128  # the gemm_fused_wgmma kernels' C without a map: stored and read through ptr:C (kCNoMap)


def step_operands(step: Any) -> dict[str, View]:
    """The views a step's pointer and tensor-map parameters name (`bias` where the step applies one)."""
    if isinstance(step, Copy):
        views = {"src": step.src, "dst": step.dst}
    elif isinstance(step, Split):
        views = {"src": step.src, "dst": step.dst}
        if step.shift is not None:  # a scaled split's exponents
            views["shift"] = step.shift
    elif isinstance(step, GroupSum):
        views = {"C": step.c}
    else:
        views = {"A": step.a, "B": step.b, "C": step.c}
        if step.a_shift is not None:  # a scaled split product: the exponents of A's and B^T's rows
            views.update(a_shift=step.a_shift, b_shift=step.b_shift)
    if step.applies_alpha_beta and step.bias is not None:
        views["bias"] = step.bias
    if getattr(step, "work", None) is not None:  # a stream-K or K-groups GEMM's workspace (a K-groups sum's input)
        views["work"] = step.work
    return views


def step_writes(step: Any) -> set[str]:
    """The buffers (a view's base: A, B, C or a temporary) a step writes: a copy its destination, a GEMM or a sum C
    and its workspace (flags and counters it leaves zero, partials)."""
    if isinstance(step, Copy):
        return {step.dst.base}
    if isinstance(step, Split):
        return {step.dst.base} | ({step.shift.base} if step.shift is not None else set())
    work = getattr(step, "work", None)
    return {step.c.base} | ({work.base} if work is not None and not isinstance(step, GroupSum) else set())


def launch_dependencies(steps: list[Any], parts: int) -> list[tuple[int, ...]]:
    """For each launch of `parts` rounds of `steps` (Execution.launches' order), the earlier launches it must follow:
    those that write a buffer it reads or writes, or read one it writes (a loop round's copy into a temporary after
    the previous round's GEMM read it). Copies of different operands then run side by side in a graph."""
    touched = [{v.base for v in step_operands(s).values()} | step_writes(s) for s in steps]
    writes = [step_writes(s) for s in steps]
    order = [i % len(steps) for i in range(len(steps) * parts)]
    return [tuple(j for j in range(i) if writes[order[j]] & touched[order[i]] or writes[order[i]] & touched[order[j]])
            for i in range(len(order))]


# the user's operands: their index in Execution.pack's ptrs (group: grouped_matmul's int32 ends or counts)
OPERAND_SLOTS = {"A": 0, "B": 1, "C": 2, "bias": 3, "group": 4}
OPTIONAL_POINTERS = ("bias", "group", "work")  # such a kernel parameter gets a null pointer where the step lacks it


def epilogue_scalars(step: Any) -> dict[str, int]:
    """The fused-epilogue integers (cu/common/epilogue.cuh): what the step applies beyond alpha/beta."""
    epi = step.epi if step.applies_alpha_beta else None
    return {"epi": epi.flags if epi else 0, "scale_bits": f32_bits(epi.scale if epi else 1.0),
            "bias_stride": step.bias.cs if step.applies_alpha_beta and step.bias is not None else 0}


def alpha_beta_bits(step: Any, alpha: float, beta: float) -> dict[str, int]:
    """The i32:alpha_bits / i32:beta_bits a step's kernel gets: the caller's alpha and beta where the step applies
    them (its `scalars`), else alpha 1 and beta 0."""
    return {"alpha_bits": f32_bits(alpha if step.applies_alpha_beta and "a" in step.scalars else 1.0),
            "beta_bits": f32_bits(beta) if step.applies_alpha_beta and "b" in step.scalars else 0}


def batched_launch(step: Any) -> bool:
    return kernel_batch(step.batch) != (1, 1)


def step_scalars(step: Any) -> dict[str, int]:
    """Every integer a step's kernel may declare, by its parameter name (alpha/beta excluded)."""
    if isinstance(step, GroupSum):
        return {"M": step.M, "N": step.N, "ldc_r": step.c.rs, "ldc_c": step.c.cs, "k_groups": step.groups,
                **epilogue_scalars(step)}
    if isinstance(step, (Copy, Split)):
        return copy_scalars(step, epilogue_scalars(step))
    outer, inner = kernel_batch(step.batch)
    a, b, c = step.a, step.b, step.c
    b_row = dict(step.variant).get("b", "row") == "row"
    out = {"M": step.M, "N": step.N, "K": step.K, "lda": a.rs, "ldb": b.rs if b_row else b.cs,
           "ldc_r": c.rs, "ldc_c": c.cs, "ars": a.rs, "acs": a.cs, "brs": b.rs, "bcs": b.cs, "crs": c.rs,
           "ccs": c.cs, "batch_inner": inner, "batch_count": outer * inner, **epilogue_scalars(step),
           **gemm_handler(step.role).option_scalars(step)}
    levels = 0
    for name, v in (("A", a), ("B", b), ("C", c)):
        so, si = batch_strides(v, step.batch)
        out[f"bs{name.lower()}_o"], out[f"bs{name.lower()}_i"] = so, si
        if batched_launch(step):
            levels |= TMA_RANK4 | (TMA_LEVEL_BITS[name, 0] if so else 0) | (TMA_LEVEL_BITS[name, 1] if si else 0)
    out["tma_levels"] = levels | (TMA_C_NO_MAP if step.c_unmapped else 0)
    return out


def tma_shape(view: View, batch: tuple[int, ...], isz: int) -> tuple[tuple, tuple]:
    """(shape, byte strides) of a batched operand's rank-4 TMA map: (outer, inner, rows, cols), a level
    the operand broadcasts (stride 0) with size 1 and the dense stride (a map takes no zero stride)."""
    n_outer, n_inner = kernel_batch(batch)
    so, si = batch_strides(view, batch)
    dense = -(-view.rows * view.rs * isz // 16) * 16
    inner = (n_inner, si * isz) if si else (1, dense)
    outer = (n_outer, so * isz) if so else (1, inner[0] * inner[1])
    return (outer[0], inner[0], view.rows, view.cols), (outer[1], inner[1], view.rs * isz, view.cs * isz)


def loop_offsets(recipe: Recipe, view: View) -> list[int]:
    """`view`'s element offset for each index of the recipe's loop levels, in launch order."""
    if not recipe.loop:
        return [0]
    strides = [view.bstride(level) for level in range(len(recipe.loop))]
    return [sum(i * s for i, s in zip(index, strides)) for index in itertools.product(*map(range, recipe.loop))]


class _Step:
    """One prepared launch of an Execution."""

    __slots__ = ("spec", "launch", "refs", "scalars", "step")

    def __init__(self, manifest: Manifest, step: Any, dev: Any, recipe: Recipe):
        self.spec = spec = manifest.kernels[step.kernel]
        role = handler(spec.role)
        fn, cfg = role.launch(manifest, spec, dev, step)  # its grid, cluster and batch on grid.z
        self.launch = KernelLaunch(fn, cfg)
        # operand name -> (which of A, B, C as 0-2, or a temporary's name; shape; byte strides; the byte
        # offset per loop index). A batched launch's TMA operand is described rank-4 (tma_shape).
        isz = ITEMSIZE[spec.dtype]
        tmaps = {p.partition(":")[2] for p in spec.params if p.startswith("tmap:")}
        self.refs = {}
        for name, v in step_operands(step).items():
            where = OPERAND_SLOTS.get(v.base, v.base)
            own = role.operand_map(name, v, step, isz) if name in tmaps else None
            if own is not None:  # (a split product's planes)
                shape, strides = own
            elif name in tmaps and batched_launch(step):
                shape, strides = tma_shape(v, step.batch, isz)
            else:
                shape, strides = (v.rows, v.cols), (v.rs * isz, v.cs * isz)
            self.refs[name] = (where, shape, strides, [o * isz for o in loop_offsets(recipe, v)])
        if getattr(step, "group", 0):  # the int32 vector: only its address is passed
            self.refs["group"] = (OPERAND_SLOTS["group"], (1, 1), (4, 4), [0] * max(1, math.prod(recipe.loop)))
        for name in OPTIONAL_POINTERS:  # absent: a null pointer the kernel never reads
            if f"ptr:{name}" in spec.params and name not in self.refs:
                self.refs[name] = (None, (1, 1), (isz, isz), [0] * max(1, math.prod(recipe.loop)))
        self.scalars = step_scalars(step)
        self.step = step


class Execution:
    """A Recipe made runnable on one device: temporaries allocated, cubins loaded, launches prepared. What a
    launch on a stream needs beyond that (configs, packed parameters, graphs) is that stream's launch plan
    (plan(); launchplan.LaunchPlan)."""

    def __init__(self, recipe: Recipe, dtype: str, device: int, manifest: Manifest):
        self.recipe, self.dtype, self.device = recipe, dtype, device
        dev = get_device(device)
        # whole rows of the pitch (the recipe's views carry the strides), `count` matrices back to back
        self.temps = {t.name: DeviceArray.empty((t.count * t.rows, t.row_stride), dtype, device)
                      for t in recipe.temps}
        # Zero them once, and wait: compute-sanitizer's initcheck does not see bytes written by a TMA
        # store, so a copy-out reading a result the persistent kernels stored would be reported as an
        # uninitialised read. Executions are cached, so this costs one memset per recipe, not per call.
        for t in self.temps.values():
            t.fill_bytes(0)
        if self.temps:
            dev.synchronize()
        self.steps = [_Step(manifest, step, dev, recipe) for step in recipe.steps]
        self.parts = math.prod(recipe.loop)  # launches of every step: one per index of the loop levels
        self.launches = [st.launch for st in self.steps] * self.parts  # the KernelLaunch of each packed array
        self.packers = Cache(None)  # (alpha, beta) -> each step's ParamPacker
        self.plans = Cache()  # stream -> LaunchPlan (evicted: closed)
        self._plan_lock = threading.Lock()  # (one plan per stream: a second one would escape close())
        self.closed = False

    def packers_for(self, alpha: float, beta: float) -> list[ParamPacker]:
        """Each step's ParamPacker for these scalars (the integers converted once)."""
        packers = self.packers.entries.get((alpha, beta))
        if packers is None:
            packers = self.packers.put((alpha, beta), [
                ParamPacker(st.spec, dict(st.scalars, **alpha_beta_bits(st.step, alpha, beta)),
                            frozenset({"C"}) if getattr(st.step, "c_unmapped", False) else frozenset())
                for st in self.steps])
        return packers

    def base(self, ptrs: tuple[int, ...], where: Any) -> int:
        """The address an operand slot names: one of the call's (ptrs), a temporary's, or null."""
        if isinstance(where, int):
            return ptrs[where] if where < len(ptrs) else 0
        return 0 if where is None else self.temps[where].ptr

    def pack(self, ptrs: tuple[int, ...], alpha: float, beta: float) -> list[PackedParams]:
        """The parameter arrays of every launch for these A, B, C (and bias) addresses and scalars: one per
        step, repeated per index of the recipe's loop levels (`launches` says which step each is). Not kept
        here: a launch plan keeps the sets it launches again (LaunchPlan.packed_set)."""
        packed = []
        packers = self.packers_for(alpha, beta)
        for part in range(self.parts):
            for st, packer in zip(self.steps, packers):
                packed.append(packer.pack({
                    name: ArrayRef(self.base(ptrs, where) + offsets[part], shape, strides, self.dtype)
                    for name, (where, shape, strides, offsets) in st.refs.items()}))
        return packed

    def plan(self, stream: int) -> LaunchPlan:
        """This execution's launch plan on `stream` (made on first use)."""
        plan = self.plans.entries.get(stream)
        if plan is None:
            with self._plan_lock:  # (two threads' first calls: both must get the plan close() will close)
                plan = self.plans.entries.get(stream)
                if plan is None:
                    plan = self.plans.put(stream, LaunchPlan(self, stream))
        return plan

    def transient(self, ptrs: tuple[int, ...], alpha: float, beta: float, stream: int) -> tuple:
        """LaunchPlan.transient on `stream`: bound launches on this thread's parameter arrays, set in place."""
        return self.plan(stream).transient(ptrs, alpha, beta)

    def dependencies(self) -> list[tuple[int, ...]]:
        """launch_dependencies of this execution's launches (a graph's edges)."""
        return launch_dependencies([st.step for st in self.steps], self.parts)

    def launch(self, packed: list[PackedParams], stream: int) -> None:
        """Launch every step with parameters from pack(), in order, on `stream`."""
        self.plan(stream).launch(packed)

    def run(self, ptrs: tuple[int, ...], alpha: float, beta: float, stream: int) -> None:
        """Launch every step on these addresses (their parameter set packed once, kept by the stream's plan)."""
        plan = self.plan(stream)
        plan.launch(plan.packed_set(ptrs, alpha, beta).packed)

    def close(self) -> None:
        """Free the temporaries and close the launch plans (safe twice)."""
        self.closed = True
        self.plans.close()
        for t in self.temps.values():
            t.close()
