"""Loading cubins and launching kernels: grid policies, the shared-memory attribute, parameters.

    launch("hgemm_cute_tn", a, b, c, stages=3, swizzle=True)

validates the operands (validate.py) before any driver call, then selects the cubin for this GPU,
loads it once (checking its sha256 against the manifest), sets the dynamic shared-memory attribute
once per function, computes the grid and launches with cuLaunchKernel (cuLaunchKernelEx for clusters).
"""
from __future__ import annotations

import ctypes
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from ._driver import check, driver
from .device import Device, get_device, stream_handle
from .errors import ManifestError, ValidationError
from .manifest import KernelSpec, Manifest, Selection, variant_symbol
from .memory import as_device_array
from .validate import Problem, validate_operands

STATIC_SMEM_LIMIT = 48 * 1024  # above this a block needs the opt-in attribute


def default_swizzle_stride(N: int) -> int | None:
    """About N/4 rounded down to a multiple of 256 (the original library's choice); None (off) for
    N < 2048, where the grid has too few column tiles for swizzling to help L2 reuse."""
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


def tile_grid(spec: KernelSpec, p: Problem, swizzle_stride: int | None) -> tuple[int, int, int]:
    BM, BN, _ = spec.tile
    tiles_n, tiles_m = math.ceil(p.N / BN), math.ceil(p.M / BM)
    if spec.grid == "tiles" or not swizzle_stride:
        return tiles_n, tiles_m, 1
    nz = math.ceil(p.N / swizzle_stride)
    return math.ceil(tiles_n / nz), tiles_m, nz


def persistent_grid(spec: KernelSpec, p: Problem, resident_blocks: int) -> tuple[int, int, int]:
    """One CTA per resident slot (never more than there are tiles), in whole clusters."""
    BM, BN, _ = spec.tile
    tiles = math.ceil(p.M / BM) * math.ceil(p.N / BN)
    csize = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    n = min(math.ceil(tiles / csize) * csize, max(resident_blocks, csize))
    return n // csize * csize, 1, 1


# -- parameters -------------------------------------------------------------------------------------

ParamBuilder = Callable[[KernelSpec, str, dict], Any]


def _ptr_param(spec: KernelSpec, what: str, ctx: dict) -> Any:
    return ctypes.c_void_p(ctx["arrays"][what].ptr)


def _i32_param(spec: KernelSpec, what: str, ctx: dict) -> Any:
    value = getattr(ctx["problem"], what, None)
    if value is None:
        raise ManifestError(f"{spec.name}: unknown integer parameter {what!r}")
    return ctypes.c_int32(value)


def _tmap_param(spec: KernelSpec, what: str, ctx: dict) -> Any:
    from . import tma  # Hopper only: imported on first use

    array = ctx["arrays"][what]
    if what == "A" and spec.a_order == "col":
        array = array.T  # the map describes A^T: K x M, row-major
    return tma.build_param(spec, what, array, spec.name)


PARAM_BUILDERS: dict[str, ParamBuilder] = {"ptr": _ptr_param, "i32": _i32_param, "tmap": _tmap_param}


def pack_params(spec: KernelSpec, ctx: dict) -> tuple[Any, list[Any]]:
    """A `void*[]` of addresses of the parameter values; the values list must outlive the launch."""
    values = []
    for p in spec.params:
        kind, _, what = p.partition(":")
        values.append(PARAM_BUILDERS[kind](spec, what, ctx))
    array = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    return array, values


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


def prepare(manifest: Manifest, spec: KernelSpec, dev: Device, p: Problem, variant: dict,
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
    return fn, LaunchConfig(symbol, grid, spec.block, dsmem, spec.cluster)


def _launch_struct(cfg: LaunchConfig, stream: int) -> Any:
    """A CUlaunchConfig with the cluster-dimension attribute."""
    drv = driver()
    lc = drv.CUlaunchConfig()
    lc.gridDimX, lc.gridDimY, lc.gridDimZ = cfg.grid
    lc.blockDimX, lc.blockDimY, lc.blockDimZ = cfg.block
    lc.sharedMemBytes = cfg.dsmem
    lc.hStream = drv.CUstream(stream)
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cfg.cluster
    lc.attrs = [attr]
    lc.numAttrs = 1
    return lc


def launch_config(fn: LoadedFunction, cfg: LaunchConfig, params: Any, stream: int) -> None:
    drv = driver()
    if cfg.cluster == (1, 1, 1):
        check(drv.cuLaunchKernel(fn.handle, *cfg.grid, *cfg.block, cfg.dsmem, stream, ctypes.addressof(params), 0),
              "cuLaunchKernel", cfg.symbol)
    else:
        check(drv.cuLaunchKernelEx(_launch_struct(cfg, stream), fn.handle, ctypes.addressof(params), 0),
              "cuLaunchKernelEx", cfg.symbol)


def launch_spec(manifest: Manifest, spec: KernelSpec, a: Any, b: Any, c: Any, *, stream: Any = None,
                swizzle: bool = False, swizzle_stride: int | None = None, **variant: Any) -> LaunchConfig:
    arrays = {"A": as_device_array(a, "A"), "B": as_device_array(b, "B"), "C": as_device_array(c, "C")}
    choice = spec.resolve_variant(variant)
    p = validate_operands(spec, arrays["A"], arrays["B"], arrays["C"])
    dev = get_device(arrays["C"].device)
    fn, cfg = prepare(manifest, spec, dev, p, choice, swizzle, swizzle_stride)
    params, _keep = pack_params(spec, {"arrays": arrays, "problem": p})
    launch_config(fn, cfg, params, stream_handle(stream))
    return cfg
