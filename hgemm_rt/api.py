"""The public matmul API: `Matmul`, a plan object described once and run many times, and the one-shot
`matmul` on top of it.

    import hgemm_rt as hg
    c = hg.matmul(a, b)                          # a: M x K, b: K x N; fp16, bf16 or fp32
    mm = hg.Matmul(a, b.T, out=c, alpha=2.0, beta=1.0)
    print(mm.explain()); mm.autotune()           # optional: measure the candidates, keep the fastest
    mm(a2, b2.T, out=c2)                         # new buffers of the same description

Operands: PyTorch tensors, CuPy and JAX arrays, our DeviceArrays, anything with
`__cuda_array_interface__` or DLPack (zero copy), or numpy arrays (copied to the GPU). Any row- or
column-major or otherwise strided 2-D view, any pointer alignment, any M, N, K >= 1.

Batched: (..., M, K) @ (..., K, N) by torch.matmul's rules: the batch dimensions (all but the last two)
broadcast (a missing or size-1 dimension is repeated, as a stride-0 view is), any batch strides, and
the result has the broadcast batch shape. Where B has no batch and A's batch folds into its rows (and
out's too), the product is one 2-D GEMM of prod(...) * M rows. Otherwise every matrix of the batch is
computed in one launch (grid.z; two levels of batch dimensions that do not merge, up to 65535 matrices
per launch: more, or more levels, run as a loop of such launches).

Result: `out` when given (written in place; a numpy `out` is filled from the GPU result). Without
`out`, a new C-contiguous array of shape (*batch, M, N) of the inputs' kind: a torch tensor for torch
inputs, a CuPy array for CuPy inputs, numpy when both inputs are numpy, else a DeviceArray.

Stream: stream= (any handle, our Stream, torch/CuPy streams, `__cuda_stream__` objects); without it a
call on torch tensors runs on torch's current stream and one on CuPy arrays on CuPy's, as their own
operations do, anything else on the legacy default stream. Work a producer has pending on another
stream (a CAI `stream`, DLPack, the torch/CuPy current stream when stream= names another) is ordered
before the call, as the protocols require.

accumulate: "f32" (default) or, for fp16 inputs, "f16" (also allows kernels that accumulate in fp16,
the cuBLAS COMPUTE_16F error class); "tf32" for fp32 inputs allows TF32 tensor cores (one pass, ~1e-3 error);
fp32 inputs with "f32" keep fp32 accuracy (on Hopper: three tensor-core products of split operands, 3xFP16 on
power-of-two-scaled fp16 heads and residuals for large products, 3xTF32 split in the GEMM's shared memory for small
ones and their batches; the cost model chooses). bf16 takes "f32".
kernel: "auto" (tuning cache, else the cost model's choice) or a kernel name, which forces that kernel
(with whatever copies it needs around it).

Every argument is checked before anything runs on the GPU. A repeat call on operands of the same
identity (address, shape, strides, dtype, device: `operands.call_key`) and the same options skips
validation and planning: it costs the key, a dictionary lookup and one driver launch per step. The direct
entries (`direct_first` / `direct_repeat`: the products hgemm_rt.torch's mm and linear make) keep their calls the
same way, under keys of their own.
"""
from __future__ import annotations

import warnings
from typing import Any, Protocol, Union

import numpy as np

from . import operands as ops
from . import planner, tuning
from .bound import GRAPH_AFTER_REPEATS, GRAPH_BELOW_US, Bound
from .cache import Cache
from .call import Call, problem_of, validate_call
from ._driver import gpu_available
from .device import Stream, device_kind, get_device
from .errors import ValidationError
from .launcher import ArrayRef
from .memory import DeviceArray
from .plans import PlanCache, plans
from .registry import get_registry
from .validate import fp32_scalar, positional_out, validate_out

__all__ = ["ArrayLike", "DTypeLike", "Matmul", "PlanCache", "StreamLike", "autotune", "explain", "matmul", "plans"]
# (also here for their users: Bound, Call, GRAPH_AFTER_REPEATS, GRAPH_BELOW_US, fp32_scalar, problem_of,
# validate_call, validate_out)


class CudaArrayInterface(Protocol):
    """An array exporting `__cuda_array_interface__` (CuPy, Numba, PyTorch, our DeviceArray)."""

    @property
    def __cuda_array_interface__(self) -> dict: ...


class DLPackArray(Protocol):
    """An array exporting DLPack (`__dlpack__` and `__dlpack_device__`: PyTorch, JAX, CuPy, cuda.core)."""

    def __dlpack__(self, *, stream: Any = None) -> Any: ...

    def __dlpack_device__(self) -> tuple[int, int]: ...


class CudaStreamProtocol(Protocol):
    """A stream exporting `__cuda_stream__` (our Stream, cuda.core's)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...


class TorchStream(Protocol):
    """A torch.cuda.Stream (its handle: `cuda_stream`)."""

    @property
    def cuda_stream(self) -> int: ...


class CuPyStream(Protocol):
    """A cupy.cuda.Stream (its handle: `ptr`)."""

    @property
    def ptr(self) -> int: ...


# what the front doors take as an operand, as stream= (device.stream_handle's cases) and as a dtype (numpy's
# or torch's dtype objects: Any, so that torch is not needed to name it)
ArrayLike = Union[np.ndarray, DeviceArray, CudaArrayInterface, DLPackArray]
StreamLike = Union[int, Stream, CudaStreamProtocol, TorchStream, CuPyStream, None]
DTypeLike = Any


class Matmul:
    """C = scale * activation(alpha * A.B + bias) + beta * C, described once (validated, planned), run any
    number of times.

    Parameters
    ----------
    a, b : ArrayLike
        A (..., M, K) and B (..., K, N), fp16, bf16 or fp32, one dtype; any strides (see the module docstring).
    out : ArrayLike, optional
        The result (written in place), of shape (*batch, M, N); None: a new array per call. By keyword (a
        positional out is deprecated).
    alpha, beta, scale : float
        The scalars of the product (beta reads `out`; fp32 values).
    bias : ArrayLike, optional
        A vector of N (or M, as (M, 1)) added before the activation.
    activation : str, optional
        An epilogue activation (epilogue.ACTIVATIONS), or "swiglu" over [gate | up] halves of B's columns.
    accumulate : str or dtype, optional
        "f32" (default), "f16" (fp16 inputs) or "tf32" (fp32 inputs); also "fp32", "float16", np/torch dtypes.
    kernel : str
        "auto" (the tuning cache, else the cost model) or a kernel name to force.
    stream : StreamLike, optional
        The stream a call without stream= runs on (None: the operands' framework stream, else the default).

    Use `mm()` (the operands it was made with) or `mm(a2, b2, out2, bias=..., stream=...)` on new buffers of
    the same description; `mm.explain()`, `mm.autotune()`. `close()` (or a `with` block) releases the launch
    plans and GPU temporaries of its calls; the Matmul cannot run after it.
    """

    def __init__(self, a: ArrayLike, b: ArrayLike, *args: Any, out: ArrayLike | None = None, alpha: float = 1.0,
                 beta: float = 0.0, bias: ArrayLike | None = None, activation: str | None = None, scale: float = 1.0,
                 accumulate: str | DTypeLike | None = None, kernel: str = "auto", stream: StreamLike = None):
        if args:
            out = positional_out(args, out, "Matmul")
        self.closed = False
        self._args = (a, b, out, bias)
        self._stream = stream  # the stream a call without stream= runs on
        self._options = dict(alpha=alpha, beta=beta, accumulate=accumulate, kernel=kernel, activation=activation,
                             scale=scale)
        self.call = validate_call(a, b, out, alpha, beta, accumulate, kernel, stream, bias, activation, scale)
        self.problem = problem_of(self.call)
        self.recipe = plans.recipe(self.problem, self.call.device, self.call.kernel)
        self._calls = Cache(None)  # the runnable call per operand identity and stream
        self._bound = self._calls.entries  # (its dict: the repeat call's one lookup)

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.call.M, self.call.N, self.call.K

    def close(self) -> None:
        """Release what this Matmul's calls hold: their launch plans (parameter sets, CUDA graphs) and the
        executions they ran (GPU temporaries freed), as the plan cache does when it evicts one; a later call of
        the same problem through matmul() makes them again. Safe twice; the Matmul refuses to run after it."""
        self.closed = True
        self._args = (None, None, None, None)
        bounds = list(self._bound.values())
        self._calls.close()
        executions = {id(b.plan.execution): b.plan.execution for b in bounds if b.plan is not None}
        for ex in executions.values():
            ex.close()

    def __enter__(self) -> "Matmul":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise ValidationError("matmul: this Matmul is closed; make a new one")

    def explain(self) -> str:
        """What runs, in one line: the kernel and the glue around it."""
        return planner.describe(self.recipe)

    def bind(self, call: Call) -> Bound:
        """A runnable Bound for a call of this description (raises if it is another problem)."""
        prob = problem_of(call)
        if prob.key_str != self.problem.key_str or call.kernel != self.call.kernel:
            raise ValidationError(f"matmul: these operands describe {prob.key()}, this Matmul was planned for "
                                  f"{self.problem.key()}: make a new Matmul for them")
        return Bound(call, self.problem, self.recipe)

    def __call__(self, a: ArrayLike | None = None, b: ArrayLike | None = None, *args: Any, out: ArrayLike | None = None,
                 bias: ArrayLike | None = None, stream: StreamLike = None) -> Any:
        """Run on new buffers of the same description (no arguments: the ones it was made with), on
        `stream`, else the stream it was made with. Returns `out`, or the new result."""
        if args:
            out = positional_out(args, out, "Matmul.__call__")
        if a is None and b is None and out is None and bias is None:
            a, b, out, bias = self._args
        if stream is None:
            stream = self._stream
        try:
            pa, pb, pc, key = call_identity(a, b, out, (stream,))
            pbias, key = with_bias(key, bias)
            bound = self._bound[key]
        except (KeyError, TypeError):
            bound = None
        if bound is not None:
            return bound.run(pa, pb, out, pc, pbias)
        self._check_open()  # (a closed Matmul has no remembered calls: only this path needs the check)
        o = self._options
        bound = self.bind(validate_call(a, b, out, o["alpha"], o["beta"], o["accumulate"], o["kernel"], stream, bias,
                                        o["activation"], o["scale"]))
        result = bound.run_full()
        key = call_cache_key(a, b, out, stream, bias=bias)
        if key is not None:
            bound.forget_arrays()
            self._calls.put(key, bound)
        return result

    def autotune(self, *, candidates: int = 8, iters: int = 10, warmup: int = 2, save: bool = True) -> list[dict]:
        """Time the candidate recipes on this call's operands, keep the fastest correct one.

        Parameters
        ----------
        candidates : int
            At most this many recipes: the cost model's best, up to three of every kernel kind.
        iters, warmup : int
            Timed and untimed runs of each.
        save : bool
            Keep the winner in the tuning cache (every later call of this problem on this device and build
            runs it); False: only this Matmul uses it.

        Returns
        -------
        list of dict
            {"route", "recipe", "us", "error", "estimate_us"} per candidate, fastest first; each is verified
            on sampled rows. `out` is never written.
        """
        self._check_open()
        c = self.call
        if self.problem.epi is not None:  # (the timing runs pass no bias: the kernels would read a null one)
            raise ValidationError("matmul: autotune does not take a call with bias=, activation= or scale= yet; "
                                  "its plan is the cost model's choice")
        dev = get_device(c.device)
        manifest = get_registry().manifest
        keep = []
        refs = []
        for op in c.operands:  # (a host operand or a missing out: a dense device copy, as the call's own plan has it)
            if op is None or op.host is not None:
                shape = op.shape if op is not None else (c.result_shape if c.batch else (c.M, c.N))
                arr = DeviceArray.empty(shape, c.dtype, c.device)
                if op is not None and op.what != "out":
                    arr.copy_from_numpy(np.asarray(op.host).reshape(shape))
                elif op is None or op.what == "out":
                    arr.fill_bytes(0)
                keep.append(arr)
                refs.append(ArrayRef(arr.ptr, shape, arr.strides, c.dtype))
            else:
                refs.append(ArrayRef(op.ptr, op.shape, op.strides, c.dtype))
        try:
            ranked = planner.ranked_recipes(self.problem, manifest, dev.info.cc, dev.info.sm_count)
            chosen = tuning.choose_candidates(ranked, manifest, candidates)
            results = tuning.time_routes(chosen, tuple(refs), c.dtype, c.acc, c.alpha, c.beta, c.device, c.stream,
                                         manifest, iters=iters, warmup=warmup,
                                         c_is_scratch=c.c is None or c.c.host is not None,
                                         batch=(c.batch, c.bstrides))
        finally:
            dev.synchronize()
            for arr in keep:
                arr.close()
        if results and np.isfinite(results[0]["us"]):
            if save:
                tuning.record(dev.info, manifest, self.problem.key_str, results)
                plans.clear()  # every later call sees the new winner
            self.recipe = results[0]["recipe"]
            self._bound.clear()
        return results


def call_identity(a: Any, b: Any, out: Any, options: tuple) -> tuple:
    """(A, B, out addresses, the key a validated call is filed under): each operand's description and
    address alignment (the low 8 bits: all the planner reads of an address), then the options. Raises
    KeyError for an operand without a cheap identity (operands.KEYERS); the key may be unhashable."""
    keys = ops.KEYERS
    pa, da = keys[type(a)](a)
    pb, db = keys[type(b)](b)
    pc, dc = keys[type(out)](out) if out is not None else ops.NO_OPERAND
    return pa, pb, pc, (da, pa & 255, db, pb & 255, dc, pc & 255, *options)


def matmul(a: ArrayLike, b: ArrayLike, *args: Any, out: ArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
           bias: ArrayLike | None = None, activation: str | None = None, scale: float = 1.0,
           accumulate: str | DTypeLike | None = None, kernel: str = "auto", stream: StreamLike = None) -> Any:
    """C = scale * activation(alpha * a.b + bias) + beta * C (see the module docstring and epilogue.py).

    Parameters
    ----------
    a, b : ArrayLike
        A (..., M, K) and B (..., K, N): torch/CuPy/JAX arrays, DeviceArrays, any CAI or DLPack array, or numpy
        (copied); fp16, bf16 or fp32, one dtype, any strides; batch dimensions broadcast as torch.matmul's.
    out : ArrayLike, optional
        Written in place, shape (*batch, M, N), the inputs' dtype; None: a new array of the inputs' kind. By
        keyword (a positional out is deprecated: it warns, and will be refused).
    alpha, beta, scale : float
        fp32 scalars; beta reads `out`.
    bias : ArrayLike, optional
        A vector of N (or M, as (M, 1)), added before the activation.
    activation : str, optional
        One of epilogue.ACTIVATIONS, or "swiglu" (B's columns are [gate | up]: the result has N / 2).
    accumulate : str or dtype, optional
        "f32" (default), "f16" (fp16 inputs: allows fp16-accumulating kernels) or "tf32" (fp32 inputs); the
        names "fp32"/"float32"/"fp16"/"float16" and numpy/torch dtypes are the same requests.
    kernel : str
        "auto" or the name of a kernel to force.
    stream : StreamLike, optional
        Where to run; None: the torch/CuPy operands' current stream, else the legacy default stream.

    Returns
    -------
    `out`, or the new result.
    """
    if args:
        out = positional_out(args, out, "matmul")
    try:  # a repeat call: the operands' descriptions and the options find the validated call
        pa, pb, pc, key = call_identity(a, b, out, (alpha, beta, activation, scale, accumulate, kernel, stream))
        pbias, key = with_bias(key, bias) if bias is not None else (0, key)
        bound = plans.calls[key]
    except (KeyError, TypeError):  # new, uncacheable or unhashable: validate in full
        return _first_call(a, b, out, alpha, beta, accumulate, kernel, stream, bias, activation, scale)
    return bound.run(pa, pb, out, pc, pbias)


def with_bias(key: tuple, bias: Any) -> tuple[int, tuple]:
    """(the bias's address, the repeat-call key extended by its description and alignment); (0, key) without
    a bias. Raises KeyError for a bias without a cheap identity (operands.KEYERS)."""
    if bias is None:
        return 0, key
    pbias, dbias = ops.KEYERS[type(bias)](bias)
    return pbias, (key, dbias, pbias & 255)


def call_cache_key(a: Any, b: Any, out: Any, *options: Any, bias: Any = None) -> tuple | None:
    """The key a call with these operands and options is remembered by (call_identity, then the bias's
    description and alignment where there is one), or None if it has none (an operand without a cheap
    identity, an unhashable option)."""
    if any(ops.call_key(x) is None for x in (a, b, out, bias)):  # (call_key learns the operands' types)
        return None
    key = with_bias(call_identity(a, b, out, options)[3], bias)[1]
    try:
        hash(key)
    except TypeError:  # an unhashable stream object or scalar: every call takes the full path
        return None
    return key


def repeat_key(a: Any, b: Any, out: Any = None, *, alpha: float = 1.0, beta: float = 0.0, bias: Any = None,
               activation: str | None = None, scale: float = 1.0, accumulate: str | None = None, kernel: str = "auto",
               stream: Any = None) -> tuple | None:
    """The key `matmul` files a call with these arguments under in plans.calls (None: it is not kept)."""
    return call_cache_key(a, b, out, alpha, beta, activation, scale, accumulate, kernel, stream, bias=bias)


def _first_call(a: Any, b: Any, out: Any, alpha: Any, beta: Any, accumulate: str | None, kernel: str,
                stream: Any, bias: Any = None, activation: str | None = None, scale: Any = 1.0) -> Any:
    mm = Matmul(a, b, out=out, alpha=alpha, beta=beta, bias=bias, activation=activation, scale=scale,
                accumulate=accumulate, kernel=kernel, stream=stream)
    return _run_first(mm, lambda: repeat_key(a, b, out, alpha=alpha, beta=beta, bias=bias, activation=activation,
                                             scale=scale, accumulate=accumulate, kernel=kernel, stream=stream))


def _run_first(mm: Matmul, key_of: Any) -> Any:
    """The first run of a validated call, then remembered in plans.calls under key_of() (None: not kept)."""
    bound = Bound(mm.call, mm.problem, mm.recipe)
    result = bound.run_full()
    key = key_of()
    if key is not None:
        bound.forget_arrays()
        plans.remember(key, bound)
    return result


# The direct entries: products with matmul's defaults (no out, no options) whose repeat calls are kept under keys of
# their own, which begin with the entry's name (a matmul call's key begins with A's description), so that a hit
# proves a first call of that entry, with its own checks, on operands of this identity.
#   "mm":     a @ b of 2-D a (M, K) and b (K, N);
#   "linear": x @ weight.T + bias as torch.nn.functional.linear: x (..., K), weight (N, K) keyed as it is (no
#             transposed view is made on a repeat call), bias (N,) or None.
DIRECT_ENTRIES = ("mm", "linear")


def direct_identity(entry: str, a: Any, b: Any, bias: Any = None) -> tuple:
    """(A, B, bias addresses, the key a direct entry's validated call is filed under): the entry, then each
    operand's description and address alignment (as call_identity). Raises KeyError for an operand without a
    cheap identity (operands.KEYERS); the key may be unhashable."""
    keys = ops.KEYERS
    pa, da = keys[type(a)](a)
    pb, db = keys[type(b)](b)
    pbias, dbias = keys[type(bias)](bias) if bias is not None else ops.NO_OPERAND
    return pa, pb, pbias, (entry, da, pa & 255, db, pb & 255, dbias, pbias & 255)


def direct_repeat(entry: str, a: Any, b: Any, bias: Any = None) -> Any:
    """The result of a repeat of direct_first(entry, a, b, bias) on operands of the same identities (launched
    at their addresses now), or None where there was no such first call (nothing is checked or launched then)."""
    try:
        pa, pb, pbias, key = direct_identity(entry, a, b, bias)
        bound = plans.calls[key]
    except (KeyError, TypeError):  # never seen, no cheap identity, or unhashable
        return None
    return bound.run(pa, pb, None, 0, pbias)


def direct_first(entry: str, a: Any, b: Any, bias: Any = None) -> Any:
    """A direct entry's call (DIRECT_ENTRIES) validated in full, as matmul(a, b) ("mm") or matmul(a, b.T,
    bias=bias) ("linear": b is the (N, K) weight; b.T: a torch, CuPy, JAX or numpy array or a DeviceArray), and
    kept for direct_repeat. Raises ValidationError for operands the entry does not take."""
    shapes = [getattr(x, "shape", None) for x in (a, b, bias)]
    if entry == "mm":
        if shapes[0] is None or len(shapes[0]) != 2 or shapes[1] is None or len(shapes[1]) != 2 or bias is not None:
            raise ValidationError(f"matmul: the direct mm takes 2-D a and b and no bias, got shapes {shapes}")
        mm = Matmul(a, b)
    elif entry == "linear":
        if shapes[1] is None or len(shapes[1]) != 2 or bias is not None and tuple(shapes[2] or ()) != shapes[1][:1]:
            raise ValidationError(f"matmul: the direct linear takes a 2-D weight (N, K) and a bias of (N,) or None, "
                                  f"got shapes {shapes[1:]}")
        mm = Matmul(a, b.T, bias=bias)
    else:
        raise ValidationError(f"matmul: no direct entry {entry!r}; the entries are {DIRECT_ENTRIES}")
    return _run_first(mm, lambda: _direct_key(entry, a, b, bias))


def _direct_key(entry: str, a: Any, b: Any, bias: Any) -> tuple | None:
    """The key direct_repeat looks `entry`'s call up by, or None where it has none (as call_cache_key)."""
    if any(ops.call_key(x) is None for x in (a, b, bias)):  # (call_key learns the operands' types)
        return None
    key = direct_identity(entry, a, b, bias)[3]
    try:
        hash(key)
    except TypeError:
        return None
    return key


def explain(a: ArrayLike, b: ArrayLike, *args: Any, out: ArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
            bias: ArrayLike | None = None, activation: str | None = None, scale: float = 1.0,
            accumulate: str | DTypeLike | None = None, kernel: str = "auto", device: str | None = None,
            cc: tuple[int, int] | None = None, sm_count: int | None = None) -> str:
    """What matmul would run for these arguments, in one line (nothing is launched).

    Parameters
    ----------
    a, b, out, alpha, beta, bias, activation, scale, accumulate, kernel
        As for `matmul`. Without a GPU, pass numpy arrays (only their shapes, strides and dtype are read).
    device : str, optional
        Plan for this kind of GPU instead of the one the operands are on: a name of device.DEVICE_KINDS
        ("H100", "H200", "A100", "L4", ...). The plan is the cost model's (the tuning cache is per GPU).
    cc, sm_count : optional
        Plan for a GPU of this compute capability, e.g. (9, 0), and SM count (given together).

    Without any of them, the plan is the one matmul would run on the operands' GPU; on a machine without a
    GPU, the one for device.DEFAULT_DEVICE_KIND (an H100). A stated GPU is named at the end of the line.

    Returns
    -------
    str
        The kernel and the glue around it, e.g. "hgemm_sm90_... 4096x4096x4096".
    """
    if args:
        out = positional_out(args, out, "explain")
    if device is None and cc is None and sm_count is None and gpu_available():
        return Matmul(a, b, out=out, alpha=alpha, beta=beta, bias=bias, activation=activation, scale=scale,
                      accumulate=accumulate, kernel=kernel).explain()
    name, kind_cc, kind_sms = device_kind(device, cc, sm_count)
    call = validate_call(a, b, out, alpha, beta, accumulate, kernel, None, bias, activation, scale)
    prob = problem_of(call)
    recipe = planner.heuristic_recipe(prob, get_registry().manifest, kind_cc, kind_sms, call.kernel)
    if recipe is None:
        what = f"kernel {call.kernel}" if call.kernel else "any kernel of this build"
        raise ValidationError(f"matmul: {what} cannot run {prob.key()} on {name} (sm_{kind_cc[0]}{kind_cc[1]}, "
                              f"{kind_sms} SMs)")
    arch = f"sm_{kind_cc[0]}{kind_cc[1]}"
    return f"{planner.describe(recipe)}  [planned for {name if name == arch else f'{name}: {arch}'}, {kind_sms} SMs]"


def autotune(a: ArrayLike, b: ArrayLike, *args: Any, out: ArrayLike | None = None, alpha: float = 1.0, beta: float = 0.0,
             accumulate: str | DTypeLike | None = None, stream: StreamLike = None, candidates: int = 8, iters: int = 10,
             warmup: int = 2, save: bool = True, save_result: bool | None = None) -> list[dict]:
    """Matmul(a, b, out=out, ...).autotune(...): time the candidate recipes, keep the fastest correct one.

    Parameters
    ----------
    a, b, out, alpha, beta, accumulate, stream
        As for `matmul`.
    candidates, iters, warmup, save
        As for `Matmul.autotune` (save=True: the winner goes to the tuning cache).
    save_result : bool, optional
        Deprecated spelling of `save`.

    Returns
    -------
    list of dict
        The candidates' timings, fastest first (Matmul.autotune).
    """
    if args:
        out = positional_out(args, out, "autotune")
    if save_result is not None:
        warnings.warn("autotune(save_result=) is deprecated: use save=", DeprecationWarning, stacklevel=2)
        save = save_result
    mm = Matmul(a, b, out=out, alpha=alpha, beta=beta, accumulate=accumulate, stream=stream)
    return mm.autotune(candidates=candidates, iters=iters, warmup=warmup, save=save)
