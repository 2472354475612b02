"""The one operand type of every front door (`launch`, `matmul`, `grouped_matmul`), as cuda.core's
StridedMemoryView is: pointer, shape, byte strides, dtype, device, the producer's stream (work there is
ordered before the call) and the owner. No copies, and no per-call dictionaries for the common kinds.

Recognised by type, read through their own cheap accessors:
- our DeviceArray;
- PyTorch tensors (any subclass, `nn.Parameter` and tensors that require grad included: matmul only
  reads its inputs);
- CuPy arrays;
- JAX arrays (read-only: never an `out`);
- numpy arrays (copied to the GPU; a numpy `out` is filled from the GPU result).
Anything else is read through `__cuda_array_interface__` (v3, its `stream` key honoured) or DLPack
(`__dlpack__(stream=consumer)`, so the producer orders its pending work before our stream).

Streams (`framework_stream`): an explicit stream= wins. Otherwise a call with PyTorch operands runs on
torch's current stream of their device and one with CuPy operands on CuPy's current stream, as those
libraries' own operations do; anything else on the legacy default stream. When the stream that runs
the call is not the one a torch/CuPy producer is current on, or not the CAI `stream` of an operand,
the call's stream first waits for that producer stream (an event), as both protocols require.

`call_key(x)` is the cheap identity a repeat call is recognised by: everything validation depends
on, read without building any object (None for kinds that have no cheap identity: those are read
and validated in full on every call).
"""
from __future__ import annotations

import math
import sys
from typing import Any, Callable

import numpy as np

from .dtypes import ITEMSIZE, dtype_code
from .errors import ArgumentTypeError, ValidationError
from .memory import DeviceArray, c_strides, from_cai, from_dlpack
from .streams import LEGACY_STREAM, cai_stream, wait_for


class Operand:
    """One array argument, described: `obj` is the caller's object (the owner), `keep` what else must stay
    alive while the call runs, `host` the numpy array of a host operand (matmul copies it to the GPU)."""

    __slots__ = ("what", "ptr", "shape", "strides", "dtype", "device", "readonly", "host", "obj", "framework",
                 "producer_stream", "keep")

    def __init__(self, what: str, ptr: int, shape: tuple, strides: tuple, dtype: str, device: int | None,
                 readonly: bool = False, host: np.ndarray | None = None, obj: Any = None, framework: str | None = None,
                 producer_stream: int | None = None, keep: Any = None):
        self.what, self.ptr, self.shape, self.strides, self.dtype = what, ptr, shape, strides, dtype
        self.device, self.readonly, self.host, self.obj, self.framework = device, readonly, host, obj, framework
        self.producer_stream = producer_stream  # CAI `stream`: work there must precede ours
        self.keep = keep  # what must stay alive while the call runs (a DLPack capsule's owner)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @property
    def is_c_contiguous(self) -> bool:
        return math.prod(self.shape) <= 1 or self.strides == c_strides(self.shape, self.itemsize)

    @property
    def T(self) -> "Operand":
        """The transposed view (reversed shape and strides) of the same memory."""
        return Operand(self.what, self.ptr, self.shape[::-1], self.strides[::-1], self.dtype, self.device,
                       self.readonly, self.host, self.obj, self.framework, self.producer_stream, self.keep)


# ---------------------------------------------------------------------------------------------------
# the frameworks, found lazily (none of them is a dependency)
# ---------------------------------------------------------------------------------------------------

def _torch() -> Any:
    return sys.modules.get("torch")


def _cupy() -> Any:
    return sys.modules.get("cupy")


def _is_torch(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_cupy(x: Any) -> bool:
    cupy = _cupy()
    return cupy is not None and isinstance(x, cupy.ndarray)


def _is_jax(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def torch_dtype_code(dtype: Any) -> str | None:
    """Our code ("f16", "bf16", "f32") for a torch dtype the kernels take, else None (torch imported)."""
    torch = _torch()
    return {torch.float16: "f16", torch.bfloat16: "bf16", torch.float32: "f32"}.get(dtype)


_TORCH_DTYPES: dict[Any, str] = {}


def _torch_dtype(t: Any) -> str:
    code = _TORCH_DTYPES.get(t.dtype)
    if code is None:
        code = torch_dtype_code(t.dtype)
        if code is None:
            raise ValidationError(f"unsupported dtype {t.dtype}: use float16, bfloat16 or float32")
        _TORCH_DTYPES[t.dtype] = code
    return code


def torch_current_stream(device: int) -> int:
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own ops read: no Stream object
    return int(raw(device)) if raw is not None else int(torch.cuda.current_stream(device).cuda_stream)


def cupy_current_stream(device: int) -> int:
    cupy = _cupy()
    with cupy.cuda.Device(device):
        return int(cupy.cuda.get_current_stream().ptr)


# framework -> its current stream on a device, as an integer handle
FRAMEWORK_STREAM: dict[str, Callable[[int], int]] = {"torch": torch_current_stream, "cupy": cupy_current_stream}


def _seen_torch() -> None:
    """On the first torch operand: read torch's current stream through its raw accessor from now on
    (unless a caller has put its own function in FRAMEWORK_STREAM)."""
    raw = getattr(_torch()._C, "_cuda_getCurrentRawStream", None)
    if raw is not None and FRAMEWORK_STREAM.get("torch") is torch_current_stream:
        FRAMEWORK_STREAM["torch"] = raw


# ---------------------------------------------------------------------------------------------------
# describing an argument (the full path: every check, on first sight of a call)
# ---------------------------------------------------------------------------------------------------

def describe(x: Any, what: str, consumer_stream: int | None) -> Operand:
    """The Operand for argument `x`. `consumer_stream` is the call's stream where the caller chose one
    (a DLPack producer is asked to order its work before it)."""
    if isinstance(x, DeviceArray):
        x.check_open()
        return Operand(what, x.ptr, x.shape, x.strides, x.dtype, x.device, x.readonly, obj=x)
    if isinstance(x, np.ndarray):
        return Operand(what, x.ctypes.data, tuple(x.shape), tuple(x.strides), dtype_code(x.dtype), None,
                       not x.flags.writeable, host=x, obj=x)
    if _is_torch(x):
        if not x.is_cuda:
            raise ValidationError(f"{what} is a torch tensor on {x.device}, not a CUDA GPU: move it with .cuda()")
        isz = x.element_size()
        return Operand(what, x.data_ptr(), tuple(x.shape), tuple(s * isz for s in x.stride()), _torch_dtype(x),
                       x.get_device(), obj=x, framework="torch")
    if _is_cupy(x):
        return Operand(what, x.data.ptr, tuple(x.shape), tuple(x.strides), dtype_code(x.dtype), x.device.id,
                       obj=x, framework="cupy")
    if _is_jax(x):
        x.block_until_ready()  # JAX runs its work on its own streams: the buffer must be complete
        arr = from_dlpack(x, None) if dtype_code(x.dtype) == "bf16" else from_cai(x, None)
        return Operand(what, arr.ptr, arr.shape, arr.strides, arr.dtype, arr.device, readonly=True, obj=x,
                       keep=arr)
    try:
        has_cai = hasattr(x, "__cuda_array_interface__")
    except TypeError:  # (torch raises TypeError, not AttributeError, for bf16 tensors)
        has_cai = False
    if has_cai:
        producer = cai_stream(x.__cuda_array_interface__, what)
        arr = from_cai(x, None)  # (the producer is waited for on the call's stream: order_after_producers)
        return Operand(what, arr.ptr, arr.shape, arr.strides, arr.dtype, arr.device, arr.readonly, obj=x,
                       producer_stream=producer, keep=arr)
    if hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__"):
        stream = consumer_stream if consumer_stream else LEGACY_STREAM  # DLPack: 0 is ambiguous, 1 = legacy
        arr = from_dlpack(x, stream)
        return Operand(what, arr.ptr, arr.shape, arr.strides, arr.dtype, arr.device, arr.readonly, obj=x, keep=arr)
    raise ArgumentTypeError(f"{what} of type {type(x).__name__} is not a GPU array (no __cuda_array_interface__ "
                            "or DLPack) nor a numpy array")


def describe_device(x: Any, what: str, consumer_stream: int | None) -> Operand:
    """describe() for a caller that takes GPU arrays only (a kernel launch): a host array is refused."""
    if isinstance(x, np.ndarray):
        raise ValidationError(f"{what} is a numpy array in host memory: copy it first with hgemm_rt.to_device()")
    return describe(x, what, consumer_stream)


# ---------------------------------------------------------------------------------------------------
# the cheap identity of a repeat call
# ---------------------------------------------------------------------------------------------------

def _key_device_array(x: DeviceArray) -> tuple:
    if not x.memory_live[0]:
        x.check_open()  # raises
    return x.identity


def _key_torch(x: Any) -> tuple:
    return x.data_ptr(), (x.shape, x.stride(), x.dtype, x.get_device(), x.requires_grad)


def _key_jax(x: Any) -> tuple:
    x.block_until_ready()  # JAX's pending work is on its own streams: the buffer must be complete
    device = x.device if not callable(getattr(x, "device", None)) else next(iter(x.devices()))
    return x.unsafe_buffer_pointer(), ("jax", x.shape, x.dtype, device.id)


def _key_cupy(x: Any) -> tuple:
    return x.data.ptr, (x.shape, x.strides, x.dtype, x.device.id)


def _no_key(x: Any) -> tuple:
    raise KeyError(type(x))  # numpy (copied every call), CAI/DLPack objects: the full path


# type -> its key function, for the types seen so far (call_key() adds new ones). A key is
# (address, description): the description is everything validation reads of the array except its
# address (shape, strides, dtype, device, flags). A key function raises KeyError for a kind without a
# cheap identity. A repeat call reads KEYERS[type(x)](x) directly.
NO_OPERAND = (0, ())  # the key of an absent operand (out or bias None): no address, no description
KEYERS: dict[type, Callable[[Any], tuple]] = {type(None): lambda x: NO_OPERAND}


KEYERS[DeviceArray] = _key_device_array


def call_key(x: Any) -> tuple | None:
    """(address, description) of `x` (see KEYERS); None where there is no cheap identity. Raises
    ValidationError for a closed DeviceArray."""
    tp = type(x)
    k = KEYERS.get(tp)
    if k is None:
        if issubclass(tp, DeviceArray):
            k = _key_device_array
        elif _is_torch(x):
            _seen_torch()
            k = _key_torch
        elif _is_cupy(x):
            k = _key_cupy
        elif _is_jax(x):
            k = _key_jax
        else:
            k = _no_key
        KEYERS[tp] = k
    try:
        return k(x)
    except KeyError:
        return None


# ---------------------------------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------------------------------

def framework_stream(frameworks: tuple, device: int) -> int:
    """The stream a call without stream= runs on: the current stream of the operands' framework (torch
    first), else the legacy default stream."""
    for fw in frameworks:
        if fw in FRAMEWORK_STREAM:
            return FRAMEWORK_STREAM[fw](device)
    return 0


def implied_stream(args: tuple) -> int | None:
    """The current stream of the first torch/CuPy argument's framework (None if there is none): where a
    call without stream= will run, and so what DLPack producers among the arguments are told."""
    for x in args:
        if _is_torch(x) and x.is_cuda:
            return FRAMEWORK_STREAM["torch"](x.get_device())
        if _is_cupy(x):
            return FRAMEWORK_STREAM["cupy"](x.device.id)
    return None


def order_after_producers(ops: tuple, stream: int, device: int, explicit: bool) -> None:
    """Make `stream` wait for the work the operands' producers have pending elsewhere: a CAI `stream`,
    or (with an explicit stream=) the current stream of a torch/CuPy operand's framework. A repeat call
    does this too: the frameworks' current streams can change between calls."""
    seen = set()
    for op in ops:
        if op is None:
            continue
        producer = op.producer_stream
        if producer is None and explicit and op.framework in FRAMEWORK_STREAM:
            producer = FRAMEWORK_STREAM[op.framework](device)
        if producer is not None and producer not in seen:
            seen.add(producer)
            wait_for(stream, producer, device)


# ---------------------------------------------------------------------------------------------------
# results
# ---------------------------------------------------------------------------------------------------

def result_ptr(x: Any) -> int:
    """The address of a result made by new_result() or DeviceArray.empty()."""
    if isinstance(x, DeviceArray):
        return x.ptr
    if _is_torch(x):
        return x.data_ptr()
    return x.data.ptr  # CuPy


def described(op: Operand | None) -> Operand | None:
    """`op` without the array it came from: what a remembered call keeps. A cache must not keep the
    caller's arrays alive (their memory would stay allocated, and a torch CUDA-graph capture checks
    that every tensor of its pool is freed); torch and CuPy operands keep a zero-size array of their
    dtype and device for new_result."""
    if op is None:
        return None
    template = None
    if op.framework == "torch":
        template = op.obj.new_empty((0,))
    elif op.framework == "cupy":
        cupy = _cupy()
        with cupy.cuda.Device(op.device):
            template = cupy.empty(0, dtype=op.obj.dtype)
    return Operand(op.what, op.ptr, op.shape, op.strides, op.dtype, op.device, op.readonly, obj=template,
                   framework=op.framework, producer_stream=op.producer_stream)


def new_result(like: Operand, shape: tuple, device: int, stream: int, foreign_stream: bool) -> Any:
    """A new C-contiguous result of `shape` in the framework of `like` (torch or CuPy), or None.
    `foreign_stream`: the call runs on a stream that may not be the framework's current one."""
    if like.framework == "torch":
        out = like.obj.new_empty(shape)  # like's dtype and device; cheaper than torch.empty's keywords
        if foreign_stream and stream != FRAMEWORK_STREAM["torch"](device):  # the allocator must know who writes it
            out.record_stream(_torch().cuda.ExternalStream(stream or LEGACY_STREAM, device=like.obj.device))
        return out
    if like.framework == "cupy":
        cupy = _cupy()
        with cupy.cuda.Device(device):
            return cupy.empty(shape, dtype=like.obj.dtype)
    return None
