"""Loading cubins and launching kernels: grid policies, the shared-memory attribute, parameters, and
the one launch path every caller (launch(), matmul's executor, bench, tests) goes through.

    launch("hgemm_cute_tn", a, b, c, stages=3, swizzle=True)

validates the operands (validate.py) before any driver call, then selects the cubin for this GPU,
loads it once (checking its sha256 against the manifest), sets the dynamic shared-memory attribute
once per function, computes the grid, packs the kernel's declared parameters by name and launches
through a `KernelLaunch`: the native launch arguments (the CUlaunchConfig struct for clusters) built
once, so a call costs one driver call.
"""
from __future__ import annotations

import ctypes
import functools
import math
import operator
import os
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple

from ._driver import check, check_code, driver, native
from .declaration import variant_symbol
from .device import Device, get_device, require_driver_for, stream_handle
from .errors import ArgumentTypeError, DriverError, ManifestError, ValidationError
from .manifest import KernelSpec, Manifest, Selection
from .memory import note_write
from . import operands as ops
from .streams import LEGACY_STREAM
from .validate import GemmShape, check_flag, validate_operands

STATIC_SMEM_LIMIT = 48 * 1024  # above this a block needs the opt-in attribute


def dependent_launch_setting() -> bool:
    """HGEMM_DEPENDENT_LAUNCH: 1 (the default) or 0; anything else is warned about and left on."""
    value = os.environ.get("HGEMM_DEPENDENT_LAUNCH", "1").strip()
    if value not in ("0", "1", ""):
        warnings.warn(f"HGEMM_DEPENDENT_LAUNCH={value!r} is neither 0 nor 1: dependent launches stay on",
                      RuntimeWarning, stacklevel=2)
    return value != "0"


# Kernels declared `dependent_launch` start as the programmatic dependent of the kernel before them on sm_90+
# (their CTAs wait in griddepcontrol.wait instead of behind the launch). HGEMM_DEPENDENT_LAUNCH=0 turns it off.
DEPENDENT_LAUNCH = dependent_launch_setting()


def default_swizzle_stride(N: int) -> int | None:
    """About N/4 rounded down to a multiple of 256: the grid's column tiles fall into about four strips
    (gridDim.z) run one after the other, so the blocks in flight share one strip of B in L2. None (off)
    for N < 2048, where the grid has too few column tiles for swizzling to help L2 reuse."""
    if N < 2048:
        return None
    return max(256, (N // 4) // 256 * 256)


@dataclass(frozen=True)
class LaunchConfig:
    symbol: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dsmem: int
    cluster: tuple[int, int, int]
    # launched as the programmatic dependent of the kernel before it (its griddepcontrol.wait orders the reads):
    # its CTAs may start while that kernel's last ones finish (stream launches; LaunchGraph keeps full edges)
    pdl: bool = False


def tile_grid(spec: KernelSpec, p: GemmShape, swizzle_stride: int | None) -> tuple[int, int, int]:
    BM, BN, _ = spec.tile
    tiles_n, tiles_m = math.ceil(p.N / BN), math.ceil(p.M / BM)
    if spec.grid == "tiles" or not swizzle_stride:
        return tiles_n, tiles_m, 1
    nz = math.ceil(p.N / swizzle_stride)
    return math.ceil(tiles_n / nz), tiles_m, nz


def persistent_grid(spec: KernelSpec, p: GemmShape, resident_blocks: int) -> tuple[int, int, int]:
    """One CTA per resident slot (never more than there are tiles), in whole clusters."""
    BM, BN, _ = spec.tile
    tiles = math.ceil(p.M / BM) * math.ceil(p.N / BN)
    csize = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    n = min(math.ceil(tiles / csize) * csize, max(resident_blocks, csize))
    return n // csize * csize, 1, 1


# -- parameters -------------------------------------------------------------------------------------

class ArrayRef(NamedTuple):
    """What a parameter needs of an operand: its address and, for a TMA map, its 2-D geometry."""

    ptr: int
    shape: tuple[int, ...]  # 2-D for a kernel parameter (autotune's timing runs also take a batched call's N-D views)
    strides: tuple[int, ...]  # bytes
    dtype: str

    @property
    def T(self) -> "ArrayRef":
        return ArrayRef(self.ptr, self.shape[::-1], self.strides[::-1], self.dtype)


class PackedParams:
    """A `void*[]` of the addresses of a launch's parameter values, and the values it points into."""

    __slots__ = ("array", "address", "pointer", "values")

    def __init__(self, values: list[Any]):
        self.values = values  # kept alive while the array may be launched
        self.array = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
        self.address = ctypes.addressof(self.array)
        self.pointer = ctypes.c_void_p(self.address)  # (pre-converted for the native launch)


# integer parameter kinds: their ctypes type and bit width (ctypes would wrap an out-of-range value silently)
INT_KINDS = {"i32": (ctypes.c_int32, 32), "i64": (ctypes.c_int64, 64)}


class ParamPacker:
    """A kernel's declared `params` with the integers fixed: pack(arrays) builds only what depends on
    the operands' addresses (`ptr:X` the address of arrays[X], `tmap:X` a TMA map of arrays[X], A^T for
    a kernel that reads A column-major); `i32:X` / `i64:X` is scalars[X], converted once (a 32- or
    64-bit signed integer: batch strides in elements may pass 2^31). `unmapped` names operands the launch
    tells the kernel it has no map for (a gemm_fused_wgmma C off TMA's rules): their `tmap:X` is zero bytes."""

    def __init__(self, spec: KernelSpec, scalars: Mapping[str, int], unmapped: frozenset[str] = frozenset()):
        self.spec = spec
        self.unmapped = unmapped
        self.slots: list[tuple[str, Any]] = []  # ("i32" | "i64", its ctypes value) | ("ptr" | "tmap", operand)
        for p in spec.params:
            kind, _, what = p.partition(":")
            if kind in INT_KINDS:
                ctype, bits = INT_KINDS[kind]
                if what not in scalars:
                    raise ManifestError(f"{spec.name}: no value for its integer parameter {what!r}")
                value = scalars[what]
                try:
                    if isinstance(value, bool):
                        raise TypeError
                    value = operator.index(value)
                except TypeError:
                    raise ValidationError(f"{spec.name}: parameter {what}={value!r} is not an integer") from None
                if not -2**(bits - 1) <= value < 2**(bits - 1):
                    raise ValidationError(f"{spec.name}: parameter {what}={value} does not fit its int{bits}")
                self.slots.append((kind, ctype(value)))
            else:
                self.slots.append((kind, what))

    def pack(self, arrays: Mapping[str, Any]) -> PackedParams:
        spec, values = self.spec, []
        for kind, x in self.slots:
            if kind in INT_KINDS:
                values.append(x)  # (shared by every packing: the launch only reads it)
            elif x not in arrays:
                raise ManifestError(f"{spec.name}: no operand for its parameter {kind}:{x}")
            elif kind == "ptr":
                values.append(ctypes.c_void_p(arrays[x].ptr))
            elif x in self.unmapped:
                from . import tma  # Hopper only: imported on first use

                values.append(tma.aligned_buffer())  # (zeros: never read)
            else:
                values.append(self.tensor_map(x, arrays[x]))
        return PackedParams(values)

    def tensor_map(self, operand: str, array: Any) -> ctypes.Array:
        """The `tmap:<operand>` value for `array` (an ArrayRef): a shared, read-only map (tma caches them by
        address and geometry)."""
        return self.map_encoder(operand, array)(int(array.ptr))

    def map_encoder(self, operand: str, array: Any) -> Callable[[int], ctypes.Array]:
        """tensor_map for an array of `array`'s geometry at any address (A^T's map for a kernel that reads A
        column-major): the checks made once."""
        from . import tma  # Hopper only: imported on first use

        spec = self.spec
        return tma.param_encoder(spec, operand, array.T if operand == "A" and spec.a_order == "col" else array,
                                 spec.name)

    def reusable(self) -> tuple[PackedParams, list[tuple[bool, Any, str]]]:
        """A parameter array rewritten in place before each launch (a launch copies its parameters when it is
        made, so one array serves launch after launch), and its operand slots: (is a tensor map, the value to
        set: a c_void_p, or a 128-byte buffer to copy tensor_map()'s bytes into, operand name)."""
        values, slots = [], []
        for kind, x in self.slots:
            if kind in INT_KINDS:
                values.append(x)
            elif kind == "ptr":
                values.append(ctypes.c_void_p(0))
                slots.append((False, values[-1], x))
            else:
                from . import tma  # Hopper only: imported on first use

                values.append(tma.aligned_buffer())  # (an unmapped operand's stays zero: never read)
                if x not in self.unmapped:
                    slots.append((True, values[-1], x))
        return PackedParams(values), slots


def pack_params(spec: KernelSpec, arrays: Mapping[str, Any], scalars: Mapping[str, int]) -> PackedParams:
    """The kernel's declared `params`, in order, for these operands and integers (see ParamPacker)."""
    return ParamPacker(spec, scalars).pack(arrays)


# -- modules and functions --------------------------------------------------------------------------

@dataclass
class LoadedFunction:
    handle: Any
    dsmem_set: int  # the max-dynamic-shared-size attribute currently set


class ModuleCache:
    """Loaded modules and functions per device; loading is thread-safe and happens once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modules: dict[tuple[int, str], Any] = {}
        self._functions: dict[tuple[int, str], LoadedFunction] = {}

    def function(self, manifest: Manifest, dev: Device, spec: KernelSpec, sel: Selection, symbol: str
                 ) -> LoadedFunction:
        key = (dev.info.ordinal, symbol)
        with self._lock:
            fn = self._functions.get(key)
            if fn is None:
                module = self._module(manifest, dev, spec, sel)
                handle = check(driver().cuModuleGetFunction(module, symbol.encode()),
                               "cuModuleGetFunction", symbol)
                fn = self._functions[key] = LoadedFunction(handle, 0)
            return fn

    def _module(self, manifest: Manifest, dev: Device, spec: KernelSpec, sel: Selection) -> Any:
        key = (dev.info.ordinal, str(sel.path))
        if key not in self._modules:
            require_driver_for(manifest.nvcc, jit=sel.is_ptx)  # before the driver gives a raw load error
            data = manifest.read_verified(spec, sel)
            if sel.is_ptx:
                warnings.warn(
                    f"{spec.name}: no cubin for sm_{dev.info.cc[0]}{dev.info.cc[1]}; the driver JIT-compiles "
                    f"the compute_{sel.arch} PTX (slower first launch, maybe slower code)",
                    RuntimeWarning, stacklevel=4,
                )
                data += b"\0"
            self._modules[key] = check(driver().cuModuleLoadData(data), f"cuModuleLoadData({sel.path.name})",
                                       spec.name)
        return self._modules[key]


_modules = ModuleCache()


def _resident_blocks(fn: LoadedFunction, spec: KernelSpec, dsmem: int, symbol: str, dev: Device) -> int:
    """How many CTAs of this function fit on the whole GPU at once (clusters counted as a unit)."""
    drv = driver()
    if spec.cluster == (1, 1, 1):
        per_sm = check(drv.cuOccupancyMaxActiveBlocksPerMultiprocessor(fn.handle, spec.threads, dsmem),
                       "cuOccupancyMaxActiveBlocksPerMultiprocessor", symbol)
        return int(per_sm) * dev.info.sm_count
    csize = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    probe = LaunchConfig(symbol, (csize, 1, 1), spec.block, dsmem, spec.cluster)
    clusters = check(drv.cuOccupancyMaxActiveClusters(fn.handle, _launch_struct(probe, 0)),
                     "cuOccupancyMaxActiveClusters", symbol)
    return int(clusters) * csize


def prepare(manifest: Manifest, spec: KernelSpec, dev: Device, p: GemmShape, variant: dict,
            swizzle: bool, swizzle_stride: int | None) -> tuple[LoadedFunction, LaunchConfig]:
    symbol = variant_symbol(spec.name, variant)
    sel = manifest.select(spec, dev.info.cc)
    info = spec.builds[sel.arch].symbols.get(symbol) if not sel.is_ptx else None
    dsmem = spec.dsmem_bytes(variant)
    static = info.static_smem if info else 0
    if dsmem + static > dev.info.max_smem_optin:
        raise ValidationError(
            f"{spec.name} {variant}: needs {dsmem + static} bytes of shared memory per block "
            f"({dsmem} dynamic + {static} static) but {dev.info.name} allows {dev.info.max_smem_optin}; "
            "pick fewer stages"
        )
    fn = _modules.function(manifest, dev, spec, sel, symbol)
    if dsmem > STATIC_SMEM_LIMIT and fn.dsmem_set < dsmem:
        attr = driver().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        check(driver().cuFuncSetAttribute(fn.handle, attr, dsmem), "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE)",
              symbol)
        fn.dsmem_set = dsmem
    if spec.grid == "persistent":
        grid = persistent_grid(spec, p, _resident_blocks(fn, spec, dsmem, symbol, dev))
    else:
        stride = None
        if swizzle and spec.grid == "tiles+swizzle":
            stride = swizzle_stride or default_swizzle_stride(p.N)
            if stride is not None and (stride <= 0 or stride % spec.tile[1]):
                raise ValidationError(
                    f"{spec.name}: swizzle_stride={stride} must be a positive multiple of BN={spec.tile[1]}"
                )
        elif swizzle and spec.grid != "tiles+swizzle":
            raise ValidationError(f"{spec.name}: this kernel has no thread-block swizzle (grid {spec.grid!r})")
        grid = tile_grid(spec, p, stride)
    pdl = DEPENDENT_LAUNCH and spec.dependent_launch and dev.info.cc >= (9, 0)
    return fn, LaunchConfig(symbol, grid, spec.block, dsmem, spec.cluster, pdl)


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_LaunchAttribute)), ("numAttrs", ctypes.c_uint)]


def _launch_struct(cfg: LaunchConfig, stream: int) -> Any:
    """cuda-python's CUlaunchConfig with the cluster-dimension attribute (the occupancy query)."""
    drv = driver()
    lc = drv.CUlaunchConfig()
    lc.gridDimX, lc.gridDimY, lc.gridDimZ = cfg.grid
    lc.blockDimX, lc.blockDimY, lc.blockDimZ = cfg.block
    lc.sharedMemBytes = cfg.dsmem
    lc.hStream = drv.CUstream(stream)
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cfg.cluster
    attrs = [attr]
    if cfg.pdl:
        pdl = drv.CUlaunchAttribute()
        pdl.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        pdl.value.programmaticStreamSerializationAllowed = 1
        attrs.append(pdl)
    lc.attrs = attrs
    lc.numAttrs = len(attrs)
    return lc


# a launch with another context current (a thread that never made ours current, another device's
# context left by a framework) fails with one of these; the caller makes the context current and retries
CONTEXT_ERRORS = ("CUDA_ERROR_INVALID_CONTEXT", "CUDA_ERROR_INVALID_HANDLE", "CUDA_ERROR_CONTEXT_IS_DESTROYED")


def check_or_relaunch(code: int, kernel: Any, launch: Callable[[], int], dev: Device) -> None:
    """A bound launch (or graph launch) that returned `code`: where another context was current on this thread
    (CONTEXT_ERRORS), make `dev`'s current and launch it again, checked; any other failure raises its DriverError
    (`kernel.check_launch`)."""
    try:
        kernel.check_launch(code)
    except DriverError as exc:
        if exc.result_name not in CONTEXT_ERRORS:
            raise
        dev.make_current()
        kernel.check_launch(launch())


class KernelLaunch:
    """One function with its launch geometry fixed. Calling it launches with a packed parameter array
    on a stream: one cuLaunchKernelEx (through ctypes: four pre-converted arguments cost less host time
    than cuLaunchKernel's eleven) with a launch-config struct, the cluster and programmatic-dependence
    attributes where the kernel has them. A launch plan (launchplan.LaunchPlan) builds the struct once
    per stream (config()); a call without one builds it for that launch."""

    __slots__ = ("fn", "cfg", "_handle")

    def __init__(self, fn: LoadedFunction, cfg: LaunchConfig):
        self.fn, self.cfg = fn, cfg
        self._handle = ctypes.c_void_p(int(fn.handle))

    def config(self, stream: int) -> tuple[Any, ctypes.c_void_p]:
        """(the CUlaunchConfig struct for `stream`, its address): the struct must outlive launches bound to it."""
        cfg = self.cfg
        lc = _LaunchConfig(*cfg.grid, *cfg.block, cfg.dsmem, stream or None)
        ids = driver().CUlaunchAttributeID
        attrs = []
        if cfg.cluster != (1, 1, 1):
            attrs.append((ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, cfg.cluster))
        if cfg.pdl:  # programmaticStreamSerializationAllowed = 1
            attrs.append((ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (1,)))
        if attrs:
            array = (_LaunchAttribute * len(attrs))()
            for slot, (attr_id, values) in zip(array, attrs):
                slot.id = int(attr_id)
                for i, v in enumerate(values):
                    slot.value[i] = v
            lc.attrs, lc.numAttrs = ctypes.cast(array, ctypes.POINTER(_LaunchAttribute)), len(attrs)
            lc._keep = array  # (the array lives as long as the config)
        return lc, ctypes.c_void_p(ctypes.addressof(lc))

    def bind(self, params: PackedParams, config: tuple[Any, ctypes.c_void_p]) -> Callable[[], int]:
        """This launch with its parameters and a config() fixed: a call of the result launches and returns
        the CUresult (0 on success; pass anything else to check_launch). `params` and `config` must stay
        alive as long as the result is used."""
        return functools.partial(native().cuLaunchKernelEx, config[1], self._handle, params.pointer, None)

    def check_launch(self, code: Any) -> None:
        """Raise DriverError for a failed launch (the result of a bound launch)."""
        check_code(code, "cuLaunchKernelEx", self.cfg.symbol)

    def __call__(self, params: PackedParams, stream: int) -> None:
        config = self.config(stream)
        code = native().cuLaunchKernelEx(config[1], self._handle, params.pointer, None)
        if code:
            self.check_launch(code)


class LaunchGraph:
    """Launches with their parameters fixed as one executable CUDA graph: a call costs one cuGraphLaunch (H100:
    ~3 us of host time) instead of one cuLaunchKernelEx per kernel (~4-6 us each). `after[i]` lists the earlier
    launches launch i follows (executor.launch_dependencies). Built for a repeat call on the same buffers; `close()`
    (or collection) destroys it."""

    def __init__(self, launches: list[tuple[KernelLaunch, PackedParams]], after: list[tuple[int, ...]]):
        drv = driver()
        graph = check(drv.cuGraphCreate(0), "cuGraphCreate")
        self._finalizer = weakref.finalize(self, _destroy_graph, graph, None)
        nodes: list = []
        for i, (kernel, params) in enumerate(launches):
            previous = [nodes[j] for j in after[i]]
            # (the driver copies the parameter values into each node)
            cfg, node_params = kernel.cfg, drv.CUDA_KERNEL_NODE_PARAMS()
            node_params.func = kernel.fn.handle
            node_params.gridDimX, node_params.gridDimY, node_params.gridDimZ = cfg.grid
            node_params.blockDimX, node_params.blockDimY, node_params.blockDimZ = cfg.block
            node_params.sharedMemBytes = cfg.dsmem
            node_params.kernelParams = params.address
            # (a `pdl` launch keeps a full edge here: in a graph a programmatic edge measured slower, docs/dev/tuning_log.md)
            node = check(drv.cuGraphAddKernelNode(graph, previous, len(previous), node_params),
                         "cuGraphAddKernelNode", cfg.symbol)
            if cfg.cluster != (1, 1, 1):
                value = drv.CUkernelNodeAttrValue()
                value.clusterDim.x, value.clusterDim.y, value.clusterDim.z = cfg.cluster
                check(drv.cuGraphKernelNodeSetAttribute(
                    node, drv.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, value),
                    "cuGraphKernelNodeSetAttribute(CLUSTER_DIMENSION)", cfg.symbol)
            nodes.append(node)
        executable = check(drv.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _destroy_graph, graph, executable)
        self.executable = executable
        self._handle = ctypes.c_void_p(int(executable))

    def bind(self, stream: int) -> Callable[[], int]:
        """A call of the result launches the graph on `stream` and returns the CUresult (the graph must stay
        alive, not closed, as long as the result is used)."""
        return functools.partial(native().cuGraphLaunch, self._handle, ctypes.c_void_p(stream or None))

    def check_launch(self, code: Any) -> None:
        check_code(code, "cuGraphLaunch")

    def close(self) -> None:
        self._finalizer()


def _destroy_graph(graph: Any, executable: Any) -> None:
    try:
        if executable is not None:
            driver().cuGraphExecDestroy(executable)
        driver().cuGraphDestroy(graph)
    except Exception:  # interpreter shutdown
        pass


def launch_spec(manifest: Manifest, spec: KernelSpec, a: Any, b: Any, c: Any, *, stream: Any = None,
                swizzle: bool = False, swizzle_stride: int | None = None, **variant: Any) -> LaunchConfig:
    """launch(): the operands described (operands.describe) and validated (validate.py) as matmul's are, the
    work their producers have pending on other streams ordered before `stream`, then one launch."""
    check_flag("swizzle", swizzle, spec.name)
    if swizzle_stride is not None and (isinstance(swizzle_stride, bool) or not isinstance(swizzle_stride, int)):
        raise ArgumentTypeError(f"{spec.name}: swizzle_stride must be an integer or None, got {swizzle_stride!r}")
    s = stream_handle(stream)
    consumer = s or LEGACY_STREAM
    arrays = {x: ops.describe_device(arr, x, consumer) for x, arr in (("A", a), ("B", b), ("C", c))}
    choice = spec.resolve_variant(variant)
    p = validate_operands(spec, arrays["A"], arrays["B"], arrays["C"])
    dev = get_device(arrays["C"].device)
    fn, cfg = prepare(manifest, spec, dev, p, choice, swizzle, swizzle_stride)
    params = pack_params(spec, arrays, {"M": p.M, "N": p.N, "K": p.K})
    # (a launch runs on its own stream, never the framework's: a torch/CuPy operand's current stream is a producer)
    ops.order_after_producers(tuple(arrays.values()), s, arrays["C"].device, True)
    note_write(c, s)
    KernelLaunch(fn, cfg)(params, s)
    return cfg
