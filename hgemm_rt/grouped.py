"""Grouped GEMM for mixture-of-experts: one persistent launch over every expert's rows, with the group
sizes read on the GPU only (nothing waits for them on the host, so a CUDA graph can replay the call while
the routing changes).

    out = hg.grouped_matmul(x, w, offsets=offs)   # contiguous: x (T, K) rows grouped by expert,
                                                  #   offs (E,) int32 cumulative row ends (torch._grouped_mm's
                                                  #   convention: expert e owns rows [offs[e-1], offs[e]), offs[-1] = 0)
                                                  #   w (E, K, N), any per-expert M including 0; out (T, N)
    out = hg.grouped_matmul(x, w, counts=cnt)     # masked: x (E, max_M, K), cnt (E,) int32 valid rows per
                                                  #   expert; out (E, max_M, N)

`w` is (E, K, N): row-major per expert, or column-major (the transposed view of an (E, N, K) weight,
as `w.transpose(-1, -2)`). The epilogue options of matmul apply (alpha, beta, activation incl. SwiGLU,
scale; no bias). Rows of `out` outside every group (past offs[-1], or past an expert's count) are not
written. Host (numpy) offsets and counts are checked before the launch (offsets non-decreasing within
the T rows, counts 0 .. max_M); device ones are clamped on the GPU to the rows that exist (a count above
max_M, offsets past T or decreasing), so a bad routing table cannot make the kernel read or write outside
the arrays.

Repeat calls: a call is kept (plans.calls, under repeat_key) by the cheap identities of its operands (torch, CuPy,
JAX arrays and DeviceArrays for A, B and out; torch or CuPy offsets/counts), the low bits of their addresses and the
options. A call that matches skips validation and planning (GroupedCall.run): it checks only what new addresses can
change (out overlapping A or B), makes the waits the full path makes, and launches. Numpy offsets/counts (uploaded
every call) and other array kinds take the full path every time.

Hopper (sm_90a) only: the kernels are the persistent `gemm_fused_wgmma` ones (cu/matmul_sm90_fused.cu).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import operands as ops
from .device import get_device, stream_handle
from .epilogue import SWIGLU, Epilogue
from .errors import ArgumentTypeError, NotBuiltForDeviceError, ValidationError
from .launcher import check_or_relaunch
from .launchplan import PackedSet
from .memory import DeviceArray, byte_extent, note_write
from .planner import grouped_recipe
from .plans import plans
from .problem import ACCUMULATE, Problem, View, batch_align, ptr_alignment
from .registry import get_registry
from .roles.gemm_fused_wgmma import GROUP_MODES, grouped_kernel
from .streams import cai_stream, wait_for
from .validate import I32_MAX, accumulate_code, check_activation, check_group_index, fp32_scalar, one_device, \
    out_overlaps, positional_out, validate_out

__all__ = ["grouped_matmul", "GROUP_MODES"]

MAX_GROUPS = 492  # the kernels' shared-memory table of per-group tile prefix sums (cu/matmul_sm90_fused.cu)


class GroupIndex:
    """The device int32 vector of group ends or counts: pointer, length, device, its owner."""

    def __init__(self, ptr: int, length: int, device: int | None, owner: Any, framework: str | None,
                 producer_stream: int | None = None, host: np.ndarray | None = None):
        self.ptr, self.length, self.device, self.owner = ptr, length, device, owner
        self.framework, self.producer_stream, self.host = framework, producer_stream, host

    def upload(self, device: int) -> None:
        """A numpy vector's bytes on the GPU (once every argument has been checked)."""
        if self.host is not None:
            self.owner = DeviceArray.from_numpy(np.ascontiguousarray(self.host).view(np.float32), device)
            get_device(device).synchronize()  # (a pageable upload)
            self.ptr, self.host = self.owner.ptr, None


def _index(x: Any, what: str) -> GroupIndex:
    """An int32 vector on the GPU (torch, CuPy, anything with __cuda_array_interface__) or numpy (uploaded)."""
    if isinstance(x, np.ndarray):
        if x.dtype != np.int32 or x.ndim != 1:
            raise ValidationError(f"grouped_matmul: {what} must be a 1-D int32 array, got {x.dtype} {x.shape}")
        return GroupIndex(0, x.shape[0], None, None, None, host=x)  # uploaded by upload()
    mod = type(x).__module__.split(".")[0]
    if mod == "torch":
        if str(x.dtype) != "torch.int32" or x.dim() != 1 or not x.is_cuda:
            raise ValidationError(f"grouped_matmul: {what} must be a 1-D int32 CUDA tensor, got {x.dtype} "
                                  f"{tuple(x.shape)} on {x.device}")
        if x.shape[0] > 1 and x.stride(0) != 1:
            raise ValidationError(f"grouped_matmul: {what} must be contiguous")
        return GroupIndex(x.data_ptr(), x.shape[0], x.get_device(), x, "torch")
    cai = getattr(x, "__cuda_array_interface__", None)
    if cai is None:
        raise ArgumentTypeError(f"grouped_matmul: {what} of type {type(x).__name__} is not an int32 GPU or numpy "
                                "array")
    if cai.get("typestr") != "<i4" or len(cai["shape"]) != 1:
        raise ValidationError(f"grouped_matmul: {what} must be a 1-D int32 array, got {cai.get('typestr')} "
                              f"{tuple(cai['shape'])}")
    if cai.get("strides") not in (None, (4,)) and cai["shape"][0] > 1:
        raise ValidationError(f"grouped_matmul: {what} must be contiguous")
    device = x.device.id if mod == "cupy" else None  # (CAI does not say: the call's device is assumed)
    return GroupIndex(cai["data"][0], cai["shape"][0], device, x, "cupy" if mod == "cupy" else None,
                      cai_stream(cai, f"grouped_matmul: {what}"))


def _kernel(manifest: Any, dtype: str, layout: str) -> str:
    spec = grouped_kernel(manifest, dtype, layout)
    if spec is None:
        raise NotBuiltForDeviceError(f"grouped_matmul: this build has no grouped kernel for {dtype} {layout} "
                                     "(Hopper sm_90a only; rebuild with build_kernels.py)")
    return spec.name


def grouped_matmul(a: Any, b: Any, *args: Any, out: Any = None, offsets: Any = None, counts: Any = None,
                   alpha: float = 1.0, beta: float = 0.0, activation: str | None = None, scale: float = 1.0,
                   accumulate: str | None = None, stream: Any = None) -> Any:
    """Every expert's GEMM in one launch (see the module docstring). Returns `out`, or the new result."""
    if args:
        out = positional_out(args, out, "grouped_matmul")
    options = (alpha, beta, activation, scale, accumulate, stream)
    index = offsets if offsets is not None else counts
    try:  # a repeat call: the operands' identities and the options find the validated call
        ptrs, key = _identity(a, b, out, offsets, counts, options)
        kept = plans.calls[key]
    except (KeyError, TypeError):  # new, uncacheable or unhashable: validate in full
        kept = None
    if kept is not None:
        result = kept.run(ptrs, out, index)
        if result is not None:  # (None: a new result at an address of another alignment, planned in full)
            return result
    acc_code = accumulate_code(accumulate, "grouped_matmul")
    if (offsets is None) == (counts is None):
        raise ValidationError("grouped_matmul: pass exactly one of offsets= (contiguous rows) or counts= (masked)")
    mode = "contiguous" if offsets is not None else "masked"
    explicit = stream is not None
    given = stream_handle(stream) if explicit else ops.implied_stream((a, b, out))
    A, B = ops.describe(a, "A", given), ops.describe(b, "B", given)
    C = ops.describe(out, "out", given) if out is not None else None
    G = _index(index, "offsets" if offsets is not None else "counts")
    check_activation(activation, "grouped_matmul")
    E, M, N, K, n_out, dtype, acc = _sizes(A, B, G, mode, activation, acc_code)
    shape_c = (M, n_out) if mode == "contiguous" else (E, M, n_out)
    if C is not None:
        if C.shape != shape_c or C.dtype != dtype:
            raise ValidationError(f"grouped_matmul: out is {C.dtype} {C.shape}, the result is {dtype} {shape_c}")
        validate_out(C, (A, B), "grouped_matmul")
    if min(M, N, K, E) < 1 or max(M, N, K, E) > I32_MAX:
        raise ValidationError(f"grouped_matmul: sizes must be 1 .. 2^31-1, got experts={E}, M={M}, N={N}, K={K}")
    if any(op.host is not None for op in (A, B)) or (C is not None and C.host is not None):
        raise ValidationError("grouped_matmul: A, B and out must be GPU arrays")
    if G.host is not None:
        check_group_index(G.host, "offsets" if mode == "contiguous" else "counts", M)
    device = one_device((A, B, C, G), "grouped_matmul")
    alpha_f, beta_f, scale_f = (fp32_scalar(n, x, "grouped_matmul") for n, x in (("alpha", alpha), ("beta", beta),
                                                                                ("scale", scale)))
    if beta_f != 0.0 and C is None:
        raise ValidationError("grouped_matmul: beta != 0 needs out= (its values take part)")
    epi = Epilogue(None, activation, scale_f)
    key = _cache_key(a, b, out, offsets, counts, options)
    result, call = _plan_and_run(A, B, C, G, mode, (E, M, N, K, n_out, dtype, acc), None if epi == Epilogue() else epi,
                                 (alpha_f, beta_f), device, given if explicit else None, key is not None)
    if call is not None:
        plans.remember(key, call)
    return result


def _plan_and_run(A: Any, B: Any, C: Any, G: GroupIndex, mode: str, sizes: tuple, epi: Epilogue | None,
                  scalars: tuple[float, float], device: int, stream: int | None, keep: bool
                  ) -> tuple[Any, "GroupedCall | None"]:
    """The validated call planned and launched (`stream`: the explicit one, None: the operands' framework's):
    (the result, the GroupedCall a repeat call runs where `keep` and it can be kept, else None)."""
    E, M, N, K, n_out, dtype, acc = sizes
    alpha_f, beta_f = scalars
    isz = A.itemsize
    layout, bview = _b_view(B, K, N, isz)
    manifest = get_registry().manifest
    dev = get_device(device)
    if dev.info.cc < (9, 0):
        raise NotBuiltForDeviceError(f"grouped_matmul runs on Hopper (sm_90a) GPUs; {dev.info.name} is "
                                     f"sm_{dev.info.cc[0]}{dev.info.cc[1]}")
    _kernel(manifest, dtype, layout)  # (a clear error where the build has none, before anything runs)
    av = _view(A, "A", M, K, isz)
    for v, name in ((av, "A"), (bview, "B")):
        _tma_ready(v, name, isz)

    explicit = stream is not None
    s = stream if explicit else ops.framework_stream(tuple(f for f in (A.framework, B.framework) if f), device)
    given_c = C
    framework_obj = next((op for op in (A, B) if op.framework), None)
    if C is None:
        shape_c = (M, n_out) if mode == "contiguous" else (E, M, n_out)
        result = ops.new_result(framework_obj, shape_c, device, s, explicit) if framework_obj else None
        result = result if result is not None else DeviceArray.empty(shape_c, dtype, device)
        C = ops.describe(result, "out", s)
    else:
        result = C.obj
    cv = _view(C, "C", M, n_out, isz)  # (any alignment and width: a C that TMA cannot store goes through its pointer)
    prob = Problem(dtype, acc, av, bview if layout == "NN" else bview.T, cv, plain=alpha_f == 1.0 and beta_f == 0.0,
                   beta_zero=beta_f == 0.0, batch=(E,), epi=epi, group=mode)
    recipe = grouped_recipe(prob, manifest)  # (the planner's grouped role)
    ex = plans.execution(recipe, prob, device, s)
    G.upload(device)
    ops.order_after_producers((A, B, C), s, device, explicit)
    wait_for(s, G.producer_stream, device)
    note_write(result, s)
    ex.run((A.ptr, B.ptr, C.ptr, 0, G.ptr), alpha_f, beta_f, s)
    if not keep or any(op.producer_stream is not None for op in (A, B, C)):  # (a CAI producer: waited for in full)
        return result, None
    return result, GroupedCall(recipe, prob, (A, B, given_c, C), G, s, explicit, scalars, ex.plan(s))


# the first item of a grouped call's key in plans.calls (a matmul call's key starts with an operand's description)
GROUPED = "grouped_matmul"


def _identity(a: Any, b: Any, out: Any, offsets: Any, counts: Any, options: tuple) -> tuple:
    """((A, B, out, index addresses), the key a validated call is filed under in plans.calls): each operand's
    description (operands.KEYERS) and, for A, B and out, the low 8 address bits (all the planner and the TMA checks
    read of an address), the index's kind, then the options and the scalars' and stream's types (alpha=True is
    refused where alpha=1 is not). Raises KeyError for an operand without a cheap identity or both indexes; the key
    may be unhashable."""
    keys = ops.KEYERS
    if counts is None:
        mode, index = "contiguous", offsets
    elif offsets is None:
        mode, index = "masked", counts
    else:
        raise KeyError("offsets and counts")  # (refused by the full path)
    pa, da = keys[type(a)](a)
    pb, db = keys[type(b)](b)
    pc, dc = keys[type(out)](out)
    pg, dg = keys[type(index)](index)
    alpha, beta, _, scale, _, stream = options
    return (pa, pb, pc, pg), (GROUPED, mode, da, pa & 255, db, pb & 255, dc, pc & 255, dg, *options, type(alpha),
                              type(beta), type(scale), type(stream))


def _cache_key(a: Any, b: Any, out: Any, offsets: Any, counts: Any, options: tuple) -> tuple | None:
    """_identity's key, or None where the call has none (an operand without a cheap identity, such as numpy
    offsets, which are uploaded each call; an unhashable option)."""
    index = offsets if counts is None else counts
    if any(ops.call_key(x) is None for x in (a, b, out, index)):  # (call_key learns the operands' types)
        return None
    key = _identity(a, b, out, offsets, counts, options)[1]
    try:
        hash(key)
    except TypeError:  # an unhashable stream object or scalar: every call takes the full path
        return None
    return key


def repeat_key(a: Any, b: Any, out: Any = None, *, offsets: Any = None, counts: Any = None, alpha: float = 1.0,
               beta: float = 0.0, activation: str | None = None, scale: float = 1.0, accumulate: str | None = None,
               stream: Any = None) -> tuple | None:
    """The key `grouped_matmul` files a call with these arguments under in plans.calls (None: it is not kept)."""
    return _cache_key(a, b, out, offsets, counts, (alpha, beta, activation, scale, accumulate, stream))


class GroupedCall:
    """A validated grouped_matmul call, ready to run again on operands of the same identities: the per-call work is
    the stream, the result (if new), the overlap check of new addresses against the kept byte extents, the producer
    waits the full path makes, and one launch from the launch plan of its execution on the call's stream. It keeps
    descriptions only, never the caller's arrays."""

    __slots__ = ("recipe", "problem", "device", "fixed_stream", "stream_fn", "explicit", "alpha", "beta", "waits",
                 "index_what", "extents", "result_like", "result_shape", "result_low", "plan", "last")

    def __init__(self, recipe: Any, prob: Problem, operands: tuple, G: GroupIndex, stream: int, explicit: bool,
                 scalars: tuple[float, float], plan: Any):
        A, B, given_c, C = operands  # (C: given_c, or the first call's new result)
        self.recipe, self.problem, self.device, self.plan = recipe, prob, plan.execution.device, plan
        self.fixed_stream, self.explicit, (self.alpha, self.beta) = stream, explicit, scalars
        # without stream=, the framework's current stream is read on every call (it can change)
        fw = next((f for f in (A.framework, B.framework) if f in ops.FRAMEWORK_STREAM), None)
        self.stream_fn = None if explicit else fw
        # stream= on framework operands: their framework's current stream is a producer to wait for
        framed = [ops.Operand(op.what, 0, (), (), op.dtype, op.device, framework=op.framework) for op in (A, B, C)
                  if op.framework in ops.FRAMEWORK_STREAM]
        self.waits = tuple(framed) if explicit and framed else None
        # an index whose __cuda_array_interface__ names a stream (CuPy's: its current one) is waited for each call
        what = "offsets" if prob.group == "contiguous" else "counts"
        self.index_what = f"grouped_matmul: {what}" if G.framework == "cupy" or G.producer_stream is not None else None
        self.extents = None if given_c is None else \
            tuple(byte_extent(0, op.shape, op.strides, op.itemsize) for op in (A, B, given_c))
        like = next((op for op in (A, B) if op.framework), None)
        self.result_like = ops.described(like) if given_c is None and like is not None else None
        self.result_shape, self.result_low = C.shape, C.ptr & 255
        self.last: PackedSet | None = None  # the parameter set the last call launched

    def plan_for(self, stream: int) -> Any:
        """The launch plan of this call's execution on `stream` (plans.execution's, kept for the next call)."""
        plan = self.plan
        if plan.stream != stream or plan.closed:
            plan = self.plan = plans.execution(self.recipe, self.problem, self.device, stream).plan(stream)
        return plan

    def new_result(self, stream: int) -> Any:
        like = self.result_like
        if like is None:
            return DeviceArray.empty(self.result_shape, self.problem.dtype, self.device)
        return ops.new_result(like, self.result_shape, self.device, stream, self.explicit)

    def run(self, ptrs: tuple[int, int, int, int], out: Any, index: Any) -> Any:
        """Launch on A, B, out and the index at `ptrs` (out None: a new result). Returns the result; None where a
        new result's low address bits are not the first call's (the caller plans that call in full)."""
        pa, pb, pc, pg = ptrs
        fw = self.stream_fn
        s = self.fixed_stream if fw is None else ops.FRAMEWORK_STREAM[fw](self.device)
        if out is None:
            out = self.new_result(s)
            pc = ops.result_ptr(out)
            if pc & 255 != self.result_low:
                return None
        else:  # (the one check that reads addresses: validate_out's overlap)
            (alo, ahi), (blo, bhi), (clo, chi) = self.extents
            if pc + clo < pa + ahi and pa + alo < pc + chi:
                raise out_overlaps("grouped_matmul", "A")
            if pc + clo < pb + bhi and pb + blo < pc + chi:
                raise out_overlaps("grouped_matmul", "B")
        if self.waits is not None:
            ops.order_after_producers(self.waits, s, self.device, True)
        if self.index_what is not None:
            wait_for(s, cai_stream(index.__cuda_array_interface__, self.index_what), self.device)
        kept = self.last
        if kept is None or kept.key != (pa, pb, pc, 0, pg, s) or kept.plan.closed:
            kept = self.last = self.plan_for(s).packed_set((pa, pb, pc, 0, pg), self.alpha, self.beta)
        note_write(out, s)
        for launch, kernel in kept.launches:
            code = launch()
            if code:
                check_or_relaunch(code, kernel, launch, get_device(self.device))
        return out


def _sizes(A: Any, B: Any, G: GroupIndex, mode: str, activation: str | None, accumulate: str | None) -> tuple:
    """(experts, M, N, K, the result's columns, dtype, accumulation) of a grouped call, its shapes checked."""
    if len(B.shape) != 3:
        raise ValidationError(f"grouped_matmul: B must be (experts, K, N), got shape {B.shape}")
    E, K, N = B.shape
    want_a = 2 if mode == "contiguous" else 3
    if len(A.shape) != want_a:
        raise ValidationError(f"grouped_matmul: {mode} A must be {'(rows, K)' if want_a == 2 else '(experts, max_M, K)'}, "
                              f"got shape {A.shape}")
    if A.shape[-1] != K:
        raise ValidationError(f"grouped_matmul: A has K = {A.shape[-1]}, B is (experts, K, N) = {B.shape}")
    if mode == "masked" and A.shape[0] != E:
        raise ValidationError(f"grouped_matmul: masked A has {A.shape[0]} experts, B has {E}")
    if E > MAX_GROUPS:
        raise ValidationError(f"grouped_matmul: {E} experts; the grouped kernels take at most {MAX_GROUPS} per launch")
    if G.length != E:
        raise ValidationError(f"grouped_matmul: {'offsets' if mode == 'contiguous' else 'counts'} has {G.length} "
                              f"entries for {E} experts")
    if A.dtype != B.dtype or A.dtype not in ("f16", "bf16"):
        raise ValidationError(f"grouped_matmul: A and B must both be fp16 or bf16, got {A.dtype} and {B.dtype}")
    dtype = A.dtype
    acc = ACCUMULATE[dtype][0] if accumulate is None else accumulate
    if acc != "f32":
        raise ValidationError(f"grouped_matmul: accumulate={accumulate!r}: the grouped kernels accumulate in fp32")
    if activation == SWIGLU and N % 2:
        raise ValidationError(f"grouped_matmul: activation='swiglu' needs an even N, got {N}")
    n_out = N // 2 if activation == SWIGLU else N
    M = A.shape[-2]
    return E, M, N, K, n_out, dtype, acc


def _b_view(B: Any, K: int, N: int, isz: int) -> tuple[str, View]:
    """(the kernels' layout, B's view): a row-major (E, K, N) B is NN, the transposed view of an (E, N, K)
    weight TN."""
    b_strides = tuple(s // isz for s in B.strides)
    if b_strides[2] == 1:
        layout, bview = "NN", View.make("B", K, N, b_strides[1], 1, 0, (b_strides[0],))
    elif b_strides[1] == 1:
        layout, bview = "TN", View.make("B", N, K, b_strides[2], 1, 0, (b_strides[0],))  # the (E, N, K) weight
    else:
        raise ValidationError(f"grouped_matmul: B's matrices must be row- or column-major, got strides {B.strides}")
    return layout, View.make("B", bview.rows, bview.cols, bview.rs, 1,
                             batch_align(ptr_alignment(B.ptr), bview.bs, isz), bview.bs)


def _view(op: Any, base: str, rows: int, cols: int, isz: int) -> View:
    st = tuple(x // isz for x in op.strides)
    bs = (st[0],) if len(op.shape) == 3 else (0,)
    if st[-1] != 1:
        raise ValidationError(f"grouped_matmul: {op.what} must have contiguous rows (strides {op.strides})")
    return View.make(base, rows, cols, st[-2], 1, batch_align(ptr_alignment(op.ptr), bs, isz), bs)


def _tma_ready(v: View, name: str, isz: int) -> None:
    if v.align < 16 or (v.rows > 1 and v.rs * isz % 16) or any(x * isz % 16 for x in v.bs):
        raise ValidationError(f"grouped_matmul: {name} must be 16-byte aligned with 16-byte-multiple row and "
                              "expert strides (the kernels read and write it through TMA)")
