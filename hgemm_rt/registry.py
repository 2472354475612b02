"""Every runnable GEMM (cubin kernels from the manifest and the cuBLAS baselines) behind one small
interface, so that bench.py, the tests and users treat them alike."""
from __future__ import annotations

import difflib
import functools
import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import cublas
from .device import get_device
from .errors import NotBuiltForDeviceError, UnknownKernelError, ValidationError
from .launcher import LaunchConfig, launch_spec
from .manifest import KernelSpec, Manifest
from .memory import as_device_array
from .validate import unsupported_reason, validate_operands


class CubinKernel:
    """A kernel from the manifest."""

    is_baseline = False

    def __init__(self, manifest: Manifest, spec: KernelSpec):
        self.manifest = manifest
        self.spec = spec

    name = property(lambda self: self.spec.name)
    ladder = property(lambda self: self.spec.ladder)
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
        A, B, C = as_device_array(a, "A"), as_device_array(b, "B"), as_device_array(c, "C")
        p = validate_operands(self._spec, A, B, C)  # type: ignore[arg-type]
        get_device(C.device)
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
        """Every GEMM: cuBLAS baselines and cubin kernels (not the "util" helper kernels)."""
        return [e.name for e in self.kernels()]

    def kernels(self) -> list[Any]:
        return [e for e in self._entries.values() if e.ladder != "util"]

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
