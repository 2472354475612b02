"""A validated matmul call made runnable again and again: `Bound` (the per-call work: the stream, the
result if new, the overlap check, the launches) over the launch plan of its execution on the call's stream."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import operands as ops
from . import planner
from ._driver import check, driver
from .call import Call
from .device import get_device
from .errors import ValidationError
from .launcher import check_or_relaunch
from .launchplan import LaunchPlan, PackedSet
from .memory import DeviceArray, byte_extent, note_write
from .plans import plans
from .problem import Problem, Recipe
from .registry import get_registry
from .streams import is_capturing, may_capture

# a call repeated this many times on the same buffers and stream launches through a CUDA graph from then on: one
# cuGraphLaunch instead of a cuLaunchKernelEx per kernel (built once: ~100 us on an H100 host)
GRAPH_AFTER_REPEATS = 4
# ... unless it is one kernel the cost model gives this many microseconds or more: there the GPU paces back-to-back
# calls, and behind another kernel a graph launch costs GPU time a plain (programmatic dependent) launch does not
# (H100, fp16, plain against graph launches: docs/dev/code_measurements.md, "Repeat calls through a CUDA graph")
GRAPH_BELOW_US = 12.0


class Bound:
    """A validated call, ready to run again on operands of the same identity: the per-call work is
    the stream, the result (if new), the parameter lookup and the launches."""

    __slots__ = ("call", "problem", "recipe", "dev", "device", "fixed_stream", "stream_fn", "plan",
                 "result_like", "torch_template", "result_shape", "alpha", "beta", "waits", "extents", "last",
                 "graph_pays")

    def __init__(self, call: Call, problem: Problem, recipe: Recipe):
        self.call, self.problem, self.recipe = call, problem, recipe
        self.dev = get_device(call.device)
        self.device = call.device
        self.alpha, self.beta = call.alpha, call.beta
        self.fixed_stream = call.stream
        # without stream=, the framework's current stream is read on every call (it can change)
        fw = next((f for f in call.frameworks if f in ops.FRAMEWORK_STREAM), None)
        self.stream_fn = None if call.explicit_stream or fw is None else fw
        self.plan: LaunchPlan | None = None  # the launch plan of the last stream this call ran on
        self._describe(call)
        # stream= given on framework operands: the framework's current stream is a producer to wait for
        self.waits = bool(call.explicit_stream and call.frameworks)
        # byte ranges of A, B and out around their addresses: a repeat call with an out checks that
        # the new addresses do not make out overlap an input (the one check that reads addresses)
        self.extents = tuple(byte_extent(0, op.shape, op.strides, op.itemsize) if op is not None else None
                             for op in (*call.operands, call.bias))
        # a loop on the same buffers launches without looking anything up, and after GRAPH_AFTER_REPEATS
        # repeats through one CUDA graph where that pays (graph_worth_it)
        self.last = PackedSet((None,), None, None, ())  # (the parameter set the last run launched)
        self.graph_pays: bool | None = None  # decided at the first repeat past GRAPH_AFTER_REPEATS

    def _describe(self, call: Call) -> None:
        self.call = call
        like = self.result_like = next((op for op in (call.a, call.b) if op.framework), None)
        # a torch result on torch's current stream is its template's new_empty (ops.new_result's case without
        # stream bookkeeping), which run() makes itself
        torch_result = like is not None and like.framework == "torch" and not call.explicit_stream
        self.torch_template = like.obj if torch_result else None
        self.result_shape = call.result_shape

    def forget_arrays(self) -> None:
        """Drop the first call's arrays (after run_full): a remembered call keeps descriptions only."""
        self._describe(self.call.described())

    def stream(self) -> int:
        fw = self.stream_fn
        return self.fixed_stream if fw is None else ops.FRAMEWORK_STREAM[fw](self.device)

    def plan_for(self, stream: int) -> LaunchPlan:
        """The launch plan of this call's execution on `stream` (plans.execution's, kept for the next call)."""
        plan = self.plan
        if plan is None or plan.stream != stream or plan.closed:
            plan = self.plan = plans.execution(self.recipe, self.problem, self.device, stream).plan(stream)
        return plan

    def new_result(self, stream: int) -> Any:
        c = self.call
        if self.result_like is not None:
            return ops.new_result(self.result_like, c.result_shape, c.device, stream, c.explicit_stream)
        if stream and is_capturing(stream):
            raise ValidationError("matmul: pass out= when capturing a CUDA graph (the result cannot be allocated "
                                  "inside the capture)")
        return DeviceArray.empty(c.result_shape, c.dtype, c.device)

    def run(self, pa: int, pb: int, out: Any, pc: int, pbias: int = 0) -> Any:
        """Launch on A, B (and the bias) at pa, pb (pbias) into `out` at pc (None: a new result). Returns
        the result."""
        fw = self.stream_fn
        s = self.fixed_stream if fw is None else ops.FRAMEWORK_STREAM[fw](self.device)
        if self.waits:
            ops.order_after_producers(self.call.operands, s, self.device, True)
        if out is None:
            template = self.torch_template
            if template is not None:
                out = template.new_empty(self.result_shape)
                pc = out.data_ptr()
            else:
                out = self.new_result(s)
                pc = out.data_ptr() if self.result_like is not None and self.result_like.framework == "torch" \
                    else ops.result_ptr(out)
        else:
            (alo, ahi), (blo, bhi), (clo, chi), bias_ext = self.extents
            if pc + clo < pa + ahi and pa + alo < pc + chi or pc + clo < pb + bhi and pb + blo < pc + chi or \
                    bias_ext is not None and pc + clo < pbias + bias_ext[1] and pbias + bias_ext[0] < pc + chi:
                raise ValidationError("matmul: out overlaps an input in memory; it must not alias an input")
        note_write(out, s)
        last = self.last
        key = (pa, pb, pc, pbias, s)
        if last.key == key and last.packed is not None and not last.plan.closed:
            last.repeats += 1
            if not may_capture(s):  # (a graph launch may not be captured)
                if last.graph is None and last.repeats >= GRAPH_AFTER_REPEATS and self.graph_worth_it(last):
                    last.build_graph(s)
                if last.graph is not None:  # the same buffers again: one graph launch
                    code = last.graph_launch()
                    if code:
                        check_or_relaunch(code, last.graph, last.graph_launch, self.dev)
                    return out
            launches = last.launches
        else:
            plan = self.plan_for(s)
            # new addresses: parameter arrays set in place; the same ones twice in a row: packed for keeps (the
            # repeat path above, then a graph)
            if last.key != key:
                launches = plan.transient((pa, pb, pc, pbias), self.alpha, self.beta)
                if last.packed is None:  # (this Bound's own record of a transient launch: rewritten, not remade)
                    last.key, last.execution, last.plan, last.repeats = key, plan.execution, plan, 0
                else:
                    self.last = PackedSet(key, plan.execution, None, (), plan)
            else:
                self.last = plan.packed_set((pa, pb, pc, pbias), self.alpha, self.beta)  # (its key: `key`)
                self.last.repeats = 1  # (a repeat of the transient launch: it counts toward the graph)
                launches = self.last.launches
        for launch, kernel in launches:
            code = launch()
            if code:
                check_or_relaunch(code, kernel, launch, self.dev)
        return out

    def graph_worth_it(self, last: PackedSet) -> bool:
        """Whether repeats of this call launch through a CUDA graph: always for a route of several launches, for
        one kernel where the cost model puts it under GRAPH_BELOW_US (decided once)."""
        pays = self.graph_pays
        if pays is None:
            pays = len(last.launches) > 1 or planner.estimate_us(
                self.recipe, self.problem, get_registry().manifest, self.dev.info.cc,
                self.dev.info.sm_count) < GRAPH_BELOW_US
            self.graph_pays = pays
        return pays

    def run_full(self) -> Any:
        """The first run of a call: host operands uploaded, producers' streams waited for, numpy results
        copied back."""
        c = self.call
        s = self.stream()
        plan = self.plan_for(s)
        ops.order_after_producers(c.operands, s, c.device, c.explicit_stream)
        dev = self.dev
        dev.make_current()
        # host operands (numpy) are uploaded dense; a bias of shape (N,), (1, N) or (M, 1) as its vector
        arrays = [DeviceArray.from_numpy(np.asarray(op.host).reshape(op.shape), c.device) if op.host is not None
                  else None for op in c.inputs]
        if any(x is not None for x in arrays):  # the pageable upload may still be in flight for another stream
            dev.synchronize()
        pa, pb, pbias = [x.ptr if x is not None else op.ptr for x, op in zip(arrays, c.inputs)] + [0] * (3 - len(arrays))
        host_out = c.c is not None and c.c.host is not None
        if c.c is not None and not host_out:
            result, pc = c.c.obj, c.c.ptr
        elif host_out:
            result = DeviceArray.empty(c.result_shape, c.dtype, c.device)
            if c.beta != 0.0:  # numpy out with beta: its values take part
                result.copy_from_numpy(c.c.host)
            pc = result.ptr
        else:
            result = self.new_result(s)
            pc = ops.result_ptr(result)
        note_write(result, s)
        plan.launch(plan.packed_set((pa, pb, pc, pbias), c.alpha, c.beta).packed)
        if host_out or (c.c is None and c.a.host is not None and c.b.host is not None):
            check(driver().cuStreamSynchronize(driver().CUstream(s)), "cuStreamSynchronize")
            host = result.to_numpy()
            result.close()
            if host_out:
                np.copyto(c.c.host, host)
                return c.c.obj
            return host
        return result

