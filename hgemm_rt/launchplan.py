"""The launch plan of one Execution on one stream: everything a call launches with, owned in one place.

- a launch config per launch, built once for the stream (KernelLaunch.config);
- the parameter sets packed for keeps, one per (A, B, C, bias addresses, alpha, beta) seen twice in a row
  (a repeat call's, or Execution.run's), each with its bound launches and, once the call has repeated
  enough, its CUDA graph;
- each thread's reusable parameter arrays, rewritten in place for calls on new addresses (transient()).

The caches here follow cache.py's one rule (CACHE_LIMIT entries each).
"""
from __future__ import annotations

import ctypes
import threading
from typing import Any

from .cache import Cache
from .launcher import ArrayRef, LaunchGraph, PackedParams


class PackedSet:
    """One parameter set of a launch plan: its key ((A, B, C, bias addresses, stream): Bound.run's), the
    execution, the parameter arrays (kept alive for the bound launches; None for a transient launch, whose
    arrays the next call may rewrite), (bound launch, KernelLaunch) per launch, and once the same call has
    repeated GRAPH_AFTER_REPEATS times where a graph pays (bound.Bound.graph_worth_it), the CUDA graph of
    those launches and its bound launch."""

    __slots__ = ("key", "execution", "packed", "launches", "repeats", "graph", "graph_launch", "plan")

    def __init__(self, key: tuple, execution: Any, packed: list[PackedParams] | None, launches: tuple,
                 plan: "LaunchPlan | None" = None):
        self.key, self.execution, self.packed, self.launches = key, execution, packed, launches
        self.plan = plan  # (its launch configs stay alive as long as the bound launches)
        self.repeats = 0
        self.graph: LaunchGraph | None = None
        self.graph_launch: Any = None

    def build_graph(self, stream: int) -> None:
        """The CUDA graph of these launches, built once under the plan's lock (a graph in use is never
        replaced)."""
        with self.plan.lock:
            if self.graph is None:
                ex = self.execution
                graph = LaunchGraph(list(zip(ex.launches, self.packed)), ex.dependencies())
                self.graph_launch, self.graph = graph.bind(stream), graph


class LaunchPlan:
    """Launching one Execution on one stream (see the module docstring)."""

    def __init__(self, execution: Any, stream: int):
        self.execution, self.stream = execution, stream
        self.lock = threading.Lock()
        kernels = execution.launches
        configs: dict[int, Any] = {}  # (a step's kernel repeats per loop index: one config each)
        for kl in kernels:
            if id(kl) not in configs:
                configs[id(kl)] = kl.config(stream)
        self.configs = [configs[id(kl)] for kl in kernels]
        self.sets = Cache(None)  # (addresses, alpha, beta) -> PackedSet
        self._reused = threading.local()  # this thread's reusable parameter arrays (transient())
        self.closed = False

    def bind(self, packed: list[PackedParams]) -> tuple:
        """(bound launch, its KernelLaunch) per launch for these parameters: `packed` must stay alive as long as
        the bound launches are used."""
        return tuple((kl.bind(params, config), kl)
                     for kl, params, config in zip(self.execution.launches, packed, self.configs))

    def launch(self, packed: list[PackedParams]) -> None:
        """Launch every step with these parameters, in order, each launch checked."""
        for kl, params, config in zip(self.execution.launches, packed, self.configs):
            code = kl.bind(params, config)()
            if code:
                kl.check_launch(code)

    def packed_set(self, ptrs: tuple[int, ...], alpha: float, beta: float) -> PackedSet:
        """The parameter set for these addresses and scalars, packed once and kept (a repeat call's). Its key is
        (*ptrs, stream): for matmul's (A, B, C, bias) addresses, the key Bound.run recognises a repeat by."""
        cache_key = (*ptrs, alpha, beta)
        entry = self.sets.entries.get(cache_key)
        if entry is None:
            packed = self.execution.pack(ptrs, alpha, beta)
            entry = self.sets.put(cache_key, PackedSet((*ptrs, self.stream), self.execution, packed,
                                                       self.bind(packed), self))
        return entry

    def transient(self, ptrs: tuple[int, ...], alpha: float, beta: float) -> tuple:
        """bind()'s (bound launch, KernelLaunch) per launch for these A, B, C (and bias) addresses, from parameter
        arrays this thread rewrites in place: valid until this thread's next transient() on this plan. For
        one-off addresses (a model's fresh activations): no parameter arrays built and no cache entry, only the
        pointers set and the tensor maps copied in (host time)."""
        sets = getattr(self._reused, "sets", None)
        if sets is None:
            sets = self._reused.sets = Cache(None)
        entry = sets.entries.get((alpha, beta))
        if entry is None:
            entry = sets.put((alpha, beta), self._reusable(alpha, beta))
        launches, slots, _packed = entry
        base = self.execution.base
        for encode, value, where, offset in slots:
            address = base(ptrs, where) + offset
            if encode is None:
                value.value = address
            else:
                ctypes.memmove(value, encode(address), ctypes.sizeof(value))
        return launches

    def _reusable(self, alpha: float, beta: float) -> tuple:
        """(bound launches on reusable parameter arrays, (the tensor map's encoder by address or None for a
        pointer, the value to set, operand slot, byte offset) per operand parameter) for transient()."""
        ex = self.execution
        packed, slots = [], []
        packers = ex.packers_for(alpha, beta)
        for part in range(ex.parts):
            for st, packer in zip(ex.steps, packers):
                params, operands = packer.reusable()
                packed.append(params)
                for is_map, value, name in operands:
                    where, shape, strides, offsets = st.refs[name]
                    encode = packer.map_encoder(name, ArrayRef(0, shape, strides, ex.dtype)) if is_map else None
                    slots.append((encode, value, where, offsets[part]))
        return self.bind(packed), slots, packed  # (`packed` kept alive: the bound launches hold its addresses only)

    def close(self) -> None:
        """Nothing launches through this plan again (Bound.run checks `closed`): its parameter sets are dropped,
        each graph destroyed when the last set holding it goes (a graph another thread may be launching is
        never destroyed under it; an in-flight graph is freed by the driver on completion)."""
        self.closed = True
        with self.sets.lock:
            self.sets.entries.clear()
