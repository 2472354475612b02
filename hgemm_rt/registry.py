"""Every runnable GEMM (cubin kernels from the manifest and the cuBLAS baselines) behind one small
interface, so that bench.py, the tests and users treat them alike; and, for launching a kernel outside
this runtime (CuPy's RawModule, ...), what its compiled form needs: `get_kernel(name).binary(...)`."""
from __future__ import annotations

import difflib
import functools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import cublas
from .declaration import variant_symbol
from .device import get_device, require_driver_for, stream_handle
from .errors import NotBuiltForDeviceError, UnknownKernelError, ValidationError
from .launcher import STATIC_SMEM_LIMIT, LaunchConfig, launch_spec, persistent_grid, tile_grid
from .manifest import KernelSpec, Manifest, Selection
from .memory import note_write
from .operands import describe_device, order_after_producers
from .streams import LEGACY_STREAM
from .validate import GemmShape, unsupported_reason, validate_operands


@dataclass(frozen=True)
class KernelBinary:
    """One compiled variant of a kernel, as another launcher needs it (see the README's CuPy example).

    The function `symbol` in the module at `path` takes `params` in order: `ptr:X` the address of operand
    X (row-major; B is K x N for NN kernels, N x K for TN), `i32:X` a 32-bit integer, `i64:X` a 64-bit
    integer (the matmul kernels' batch strides), `tmap:X` a 128-byte
    CUtensorMap of operand X (hgemm_rt/tma.py builds them). Launch `block` threads per block, a grid from
    `grid_for(M, N, K)`, `dsmem` bytes of dynamic shared memory (above 48 KiB only once the function's
    max-dynamic-shared-size attribute allows it) and, where `cluster` is not (1, 1, 1), that cluster shape.
    """

    name: str
    symbol: str
    path: Path  # a cubin, or PTX (is_ptx) that the driver JIT-compiles for a GPU newer than every cubin
    sha256: str
    arch: str  # the cubin's architecture: "90a", "89", ...
    is_ptx: bool
    params: tuple[str, ...]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    dsmem: int
    static_smem: int  # ptxas's figure for this symbol (0 for PTX)
    grid: str  # the grid rule: "tiles", "tiles+swizzle" or "persistent" (see grid_for)
    tile: tuple[int, int, int]  # (BM, BN, BK): one block's (persistent: one step's) output tile and K step
    layout: str
    dtype: str
    require: Mapping[str, int]  # M, N, K divisibility
    spec: KernelSpec = field(repr=False)
    manifest: Manifest = field(repr=False)

    @property
    def needs_smem_attribute(self) -> bool:
        """True where `dsmem` exceeds the 48 KiB a block gets without opting in."""
        return self.dsmem > STATIC_SMEM_LIMIT

    def read(self) -> bytes:
        """The file's bytes, refused (ManifestError) unless they match the manifest's sha256."""
        return self.manifest.read_verified(self.spec, Selection(self.path, self.sha256, self.arch, self.is_ptx))

    def grid_for(self, M: int, N: int, K: int, *, swizzle_stride: int | None = None,
                 resident_blocks: int | None = None) -> tuple[int, int, int]:
        """The launch grid for C = A.B of M x N x K: one block per BM x BN tile ("tiles"; with
        `swizzle_stride` the "tiles+swizzle" kernels take z = ceil(N / stride) column bands), or, for
        "persistent" kernels, as many blocks as fit on the GPU at once: pass `resident_blocks` (blocks per
        SM from the occupancy calculator times the SM count)."""
        p = GemmShape(M, N, K)
        if self.grid != "persistent":
            if swizzle_stride is not None and self.grid != "tiles+swizzle":
                raise ValidationError(f"{self.name}: this kernel has no thread-block swizzle (grid {self.grid!r})")
            return tile_grid(self.spec, p, swizzle_stride)
        if resident_blocks is None or resident_blocks < 1:
            raise ValidationError(f"{self.name} is persistent: pass resident_blocks=<blocks per SM x SM count> "
                                  f"(cuOccupancyMaxActiveBlocksPerMultiprocessor with {self.block[0]} threads and "
                                  f"{self.dsmem} bytes of dynamic shared memory), got {resident_blocks!r}")
        return persistent_grid(self.spec, p, resident_blocks)


class CubinKernel:
    """A kernel from the manifest."""

    is_baseline = False

    def __init__(self, manifest: Manifest, spec: KernelSpec):
        self.manifest = manifest
        self.spec = spec

    name = property(lambda self: self.spec.name)
    ladder = property(lambda self: self.spec.ladder)
    catalogue = property(lambda self: self.spec.catalogue)  # a GEMM of the catalogue, not a matmul helper
    step = property(lambda self: self.spec.step)
    layout = property(lambda self: self.spec.layout)
    dtype = property(lambda self: self.spec.dtype)
    out = property(lambda self: self.spec.out)
    variants = property(lambda self: self.spec.variants)
    a_order = property(lambda self: self.spec.a_order)
    technique = property(lambda self: self.spec.technique)

    def acc_for(self, choice: Mapping[str, Any]) -> str:
        return self.spec.acc_for(choice)

    def supports(self, M: int, N: int, K: int, cc: tuple[int, int] | None = None) -> str | None:
        """None if this kernel takes the shape (and runs on compute capability `cc`), else why not."""
        reason = unsupported_reason(self.spec, M, N, K)
        if reason is None and cc is not None:
            try:
                self.manifest.select(self.spec, cc)
            except NotBuiltForDeviceError as exc:
                reason = str(exc)
        return reason

    def __call__(self, a: Any, b: Any, c: Any, *, stream: Any = None, swizzle: bool = False,
                 swizzle_stride: int | None = None, **variant: Any) -> LaunchConfig:
        return launch_spec(self.manifest, self.spec, a, b, c, stream=stream, swizzle=swizzle,
                           swizzle_stride=swizzle_stride, **variant)

    def binary(self, *, cc: tuple[int, int] | None = None, **variant: Any) -> KernelBinary:
        """The compiled variant (variant axes as keywords, e.g. stages=3, acc="f16"; defaults as for a
        launch) for compute capability `cc` (default: this machine's GPU 0, whose driver is checked)."""
        choice = self.spec.resolve_variant(variant)
        here = cc is None
        sel = self.manifest.select(self.spec, get_device().info.cc if here else cc)
        if here:
            require_driver_for(self.manifest.nvcc, jit=sel.is_ptx)
        symbol = variant_symbol(self.spec.name, choice)
        info = None if sel.is_ptx else self.spec.builds[sel.arch].symbols.get(symbol)
        if info is None and not sel.is_ptx:
            raise NotBuiltForDeviceError(f"{self.name}: the sm_{sel.arch} cubin {sel.path.name} has no function "
                                         f"{symbol}; rebuild with `python build_kernels.py`")
        return KernelBinary(
            name=self.name, symbol=symbol, path=sel.path, sha256=sel.sha256, arch=sel.arch, is_ptx=sel.is_ptx,
            params=self.spec.params, block=self.spec.block, cluster=self.spec.cluster,
            dsmem=self.spec.dsmem_bytes(choice), static_smem=info.static_smem if info else 0, grid=self.spec.grid,
            tile=self.spec.tile, layout=self.spec.layout, dtype=self.spec.dtype, require=self.spec.require,
            spec=self.spec, manifest=self.manifest,
        )

    def __repr__(self) -> str:
        return f"<CubinKernel {self.name} ({self.layout}, {self.dtype})>"


@dataclass(frozen=True)
class _BaselineSpec:
    """The slice of KernelSpec that validation reads, for a cuBLAS entry."""

    name: str
    layout: str
    dtype: str
    out: str
    align: int = 2
    require: Mapping[str, int] = field(default_factory=dict)
    a_order: str = "row"


class CublasKernel:
    """cuBLAS as a catalogue entry: cublasGemmEx with the default tensor-op algorithm."""

    is_baseline = True
    ladder = "cublas"
    catalogue = True
    step = 0
    a_order = "row"

    def __init__(self, name: str, layout: str, dtype: str, accs: tuple[str, ...], technique: str):
        self.name, self.layout, self.dtype, self.out = name, layout, dtype, dtype
        self.variants = {"acc": accs}
        self.technique = technique
        self._spec = _BaselineSpec(name, layout, dtype, dtype, align=2 if dtype != "f32" else 4)

    def acc_for(self, choice: Mapping[str, Any]) -> str:
        return str(choice.get("acc", self.variants["acc"][0]))

    def supports(self, M: int, N: int, K: int, cc: tuple[int, int] | None = None) -> str | None:
        return None

    def __call__(self, a: Any, b: Any, c: Any, *, stream: Any = None, acc: str | None = None, **opts: Any) -> None:
        unknown = {k for k, v in opts.items() if v not in (None, False)}
        if unknown:
            raise ValidationError(f"{self.name}: unknown option(s) {sorted(unknown)}; only acc={self.variants['acc']}")
        acc = acc or self.variants["acc"][0]
        if acc not in self.variants["acc"]:
            raise ValidationError(f"{self.name}: acc={acc!r} is not one of {list(self.variants['acc'])}")
        consumer = stream_handle(stream) or LEGACY_STREAM
        A, B, C = (describe_device(x, what, consumer) for x, what in ((a, "A"), (b, "B"), (c, "C")))
        p = validate_operands(self._spec, A, B, C)  # type: ignore[arg-type]
        get_device(C.device)
        order_after_producers((A, B, C), stream_handle(stream), C.device, True)  # (as launch_spec)
        note_write(c, stream_handle(stream))
        cublas.gemm(A.ptr, B.ptr, C.ptr, p.M, p.N, p.K, layout=self.layout, dtype=self.dtype, acc=acc,
                    stream=stream, device=C.device)

    def __repr__(self) -> str:
        return f"<CublasKernel {self.name} ({self.layout}, {self.dtype})>"


BASELINES = (
    CublasKernel("hgemm_cublas_tensor_op_nn", "NN", "f16", ("f32", "f16"), "cublasGemmEx, NN, default tensor-op algo"),
    CublasKernel("hgemm_cublas_tensor_op_tn", "TN", "f16", ("f32", "f16"), "cublasGemmEx, TN, default tensor-op algo"),
    CublasKernel("hgemm_cublas_tensor_op_nn_bf16", "NN", "bf16", ("f32",), "cublasGemmEx, bf16 NN, default tensor-op algo"),
    CublasKernel("hgemm_cublas_tensor_op_tn_bf16", "TN", "bf16", ("f32",), "cublasGemmEx, bf16 TN, default tensor-op algo"),
    CublasKernel("sgemm_cublas", "NN", "f32", ("f32", "tf32"), "cublasGemmEx fp32 (f32) or TF32 tensor ops (tf32)"),
)


class Registry:
    def __init__(self, manifest: Manifest):
        self.manifest = manifest
        self._entries: dict[str, Any] = {b.name: b for b in BASELINES}
        for spec in sorted(manifest.kernels.values(), key=lambda s: (s.ladder, s.step, s.name)):
            self._entries[spec.name] = CubinKernel(manifest, spec)

    def names(self) -> list[str]:
        """Every GEMM: cuBLAS baselines and the catalogue's cubin kernels (not matmul's helper kernels)."""
        return [e.name for e in self.kernels()]

    def kernels(self) -> list[Any]:
        return [e for e in self._entries.values() if e.catalogue]

    def get(self, name: str) -> Any:
        canonical = self.manifest.canonical(name) or name
        entry = self._entries.get(canonical)
        if entry is None:
            known = self.names() + list(self.manifest.aliases)
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownKernelError(f"no kernel named {name!r} in the build ({len(self._entries)} known){hint}")
        return entry


_lock = threading.Lock()


@functools.lru_cache(maxsize=None)
def _registry(root: str | None) -> Registry:
    return Registry(Manifest.load(root))


def get_registry(root: str | None = None) -> Registry:
    with _lock:
        return _registry(root)
