"""A kernel's declaration: the fields a cu/*.toml entry or a manifest entry may hold, their validation, and the
frozen KernelSpec they make (its symbols, variants and dynamic shared memory). hgemm_rt.manifest reads whole
manifests and selects cubins over these; nothing here touches the GPU or the file system.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Mapping

from .errors import ManifestError
from .expr import eval_int_expr

LAYOUTS = ("NN", "TN")  # B as K x N or as N x K (row-major)
A_ORDERS = ("row", "col")  # A row-major (M x K) or column-major (stored K x M)
DTYPES = ("f16", "bf16", "f32")
ACCS = ("f16", "f32", "tf32")
GRID_POLICIES = ("tiles", "tiles+swizzle", "persistent")
LADDERS = ("cuda", "wmma", "mma", "cute", "hopper", "sgemm", "matmul")  # matmul: every helper role's kernels
HELPER_LADDER = "matmul"  # the ladder of every kernel whose role is not "gemm" (KernelSpec.catalogue)
# What a kernel does in matmul's recipes (hgemm_rt/planner.py):
#   gemm                the catalogue ABI: dense operands (or TMA maps) in the kernel's layout, C = A.B
#   copy                matmul_copy2d: strided/transposing copy with zero padding and an alpha/beta epilogue
#   gemm_strided_mma    mma.sync GEMM on strided A/B/C (lda, ldb, ldc_r, ldc_c), alpha/beta, split-K clusters
#   gemm_strided_wgmma  wgmma GEMM on TMA maps of A/B, strided C, alpha/beta, split-K clusters (sm_90a)
#   gemm_strided_simt   CUDA-core GEMM on any strides, alpha/beta: the fallback for every shape
#   gemm_strided_stream the gemm_strided_mma ABI for a short A (decoding): B streamed once from HBM, priced by its bytes
#   gemm_fused_wgmma    the persistent wgmma GEMM with the fused epilogue, batches and grouped GEMM (sm_90a)
#   gemm_tf32x3         fp32 at fp32 accuracy on TF32 wgmma: the product of split_tf32's planes of A and B^T (sm_90a)
#   split_tf32          matmul_split_tf32: an fp32 operand as TF32 head and residual planes, for gemm_tf32x3
#   gemm_f16x3          fp32 at fp32 accuracy on fp16 wgmma: the product of split_f16x3's scaled planes of A and B^T,
#                       their rows' exponents taken back off (sm_90a)
#   split_f16x3         matmul_split_f16x3: an fp32 operand's lines scaled by powers of two into fp16 head and residual
#                       planes, the exponents beside them, for gemm_f16x3
#   kgroups_sum         matmul_kgroups_sum: a deferred K-groups GEMM's fp32 planes added, through the epilogue (sm_90a)
ROLES = ("gemm", "copy", "gemm_strided_mma", "gemm_strided_wgmma", "gemm_strided_simt", "gemm_strided_stream",
         "gemm_fused_wgmma", "gemm_tf32x3", "split_tf32", "gemm_f16x3", "split_f16x3", "kgroups_sum")
ARCHS = ("80", "86", "89", "90", "90a")
# roles whose planner needs the kernel's sustained rate (KernelSpec.rate_tflops) from its declaration
RATED_ROLES = ("gemm_strided_wgmma",)
DEFAULT_PARAMS = ("ptr:A", "ptr:B", "ptr:C", "i32:M", "i32:N", "i32:K")
PTX_ARCH = "90"  # the build keeps the PTX of its sm_90 cubin: the newest non-"a" target, JIT-able by newer GPUs
PARAM_KINDS = ("ptr", "i32", "i64", "tmap")  # i64: a 64-bit integer (batch strides in elements)


def variant_symbol(name: str, choice: Mapping[str, Any]) -> str:
    """`name` + `__<axis><value>` per variant axis, in declared order (see cu/CONTRACT.md)."""
    return name + "".join(f"__{axis}{value}" for axis, value in choice.items())


@dataclass(frozen=True)
class SymbolInfo:
    """ptxas figures for one compiled function."""

    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    static_smem: int
    dynamic_smem: int = 0  # what the kernel exports (hg_dsmem__<symbol>); the build checks it against dsmem


@dataclass(frozen=True)
class PtxBuild:
    """The PTX of the sm_90 build, which the driver JIT-compiles for a GPU newer than every cubin."""

    arch: str  # its virtual architecture ("90")
    path: str  # relative to the artifacts directory
    sha256: str


@dataclass(frozen=True)
class ArchBuild:
    arch: str  # "80", "90a", ...
    cubin: str  # path relative to the artifacts directory
    sha256: str
    symbols: Mapping[str, SymbolInfo]
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelSpec:
    name: str
    family: str
    ladder: str
    step: "int | None"  # the position in a catalogue ladder (the README's order); None for a helper kernel
    layout: str
    dtype: str
    acc: str
    out: str
    block: tuple[int, int, int]
    tile: tuple[int, int, int]
    grid: str
    dsmem: "int | str"
    require: Mapping[str, int]
    align: int
    variants: Mapping[str, tuple]
    aliases: tuple[str, ...]
    archs: tuple[str, ...]
    params: tuple[str, ...]
    cluster: tuple[int, int, int]
    technique: str
    sass: tuple[str, ...]
    tma: Mapping[str, Any] | None
    default: Mapping[str, Any] = field(default_factory=dict)  # launch default per variant axis
    a_order: str = "row"  # "col": A is taken column-major (a transposed view), read through tmap:A
    role: str = "gemm"  # one of ROLES
    swiglu: bool = False  # the kernel pairs gate/up columns itself (cu/common/epilogue.cuh, kSwiGLU)
    # every CTA calls griddepcontrol.wait before it touches global memory (sm_90+), so that the launcher may start
    # it as the programmatic dependent of the kernel before it (launcher.prepare)
    dependent_launch: bool = False
    # a last column tile of at most BN/2 columns computes BN/2 (cu/CONTRACT.md); SwiGLU tiles always compute BN
    half_tiles: bool = False
    # named build-time constants (stage counts, ...): usable in `dsmem` and in the build's generated instantiation
    # line; a variant axis of the same name takes precedence for the symbols it makes
    knobs: Mapping[str, Any] = field(default_factory=dict)
    # the kernel's sustained rate, where the planner prices it from its declaration (RATED_ROLES), and where
    # that figure was measured (a docs/ pointer)
    rate_tflops: "float | None" = None
    rate_source: "str | None" = None
    builds: Mapping[str, ArchBuild] = field(default_factory=dict)
    ptx: PtxBuild | None = None

    @property
    def catalogue(self) -> bool:
        """A GEMM of the catalogue (role "gemm": benchmarked, listed, tested one by one), not a helper of matmul."""
        return self.role == "gemm"

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    def variant_choices(self) -> list[dict[str, Any]]:
        """Every combination of variant values, in declared order (one symbol each)."""
        axes = list(self.variants)
        return [dict(zip(axes, values)) for values in itertools.product(*(self.variants[a] for a in axes))]

    def symbols(self) -> list[str]:
        return [variant_symbol(self.name, c) for c in self.variant_choices()]

    def output_tiles(self, M: int, N: int, swiglu: bool = False) -> int:
        """Tiles of one M x N output (C's width N): BM x BN each, BM x BN/2 for a SwiGLU kernel pairing gate and up
        columns (its B stage holds BN/2 of each)."""
        BM, BN, _ = self.tile
        return -(-M // BM) * -(-N // (BN // 2 if swiglu else BN))

    def computed_cols(self, N: int, swiglu: bool = False) -> int:
        """Columns of an N-wide output that the tiles compute, wasted or not: whole BN tiles, but for a
        half_tiles kernel's last tile of at most BN/2 columns, which computes BN/2 (SwiGLU tiles always compute
        BN)."""
        BN = self.tile[1]
        cols = -(-N // BN) * BN
        if self.half_tiles and not swiglu and 0 < N % BN <= BN // 2:
            cols -= BN // 2
        return cols

    def resolve_variant(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Fill defaults (`default`, else the first value of each axis) and check the given values."""
        from .errors import ValidationError

        unknown = set(given) - set(self.variants)
        if unknown:
            raise ValidationError(
                f"{self.name}: unknown option(s) {sorted(unknown)}; this kernel's variant axes are "
                f"{dict(self.variants) or 'none'}"
            )
        choice = {}
        for axis, values in self.variants.items():
            value = given.get(axis)
            if value is None:
                value = self.default.get(axis, values[0])
            if value not in values:
                raise ValidationError(
                    f"{self.name}: {axis}={value!r} is not built; available: {list(values)}"
                )
            choice[axis] = value
        return choice

    def acc_for(self, choice: Mapping[str, Any]) -> str:
        return str(choice.get("acc", self.acc))

    def expr_names(self, choice: Mapping[str, Any]) -> dict[str, Any]:
        """The names a `dsmem` expression (and an instantiation line) may use for the symbol of `choice`: the tile,
        the block size, the knobs, then the variant values (which override a knob of their name)."""
        names: dict[str, Any] = {"BM": self.tile[0], "BN": self.tile[1], "BK": self.tile[2], "threads": self.threads}
        names.update(self.knobs)
        names.update(choice)
        return names

    def dsmem_bytes(self, choice: Mapping[str, Any]) -> int:
        names = self.expr_names(choice)
        return eval_int_expr(self.dsmem, {k: v for k, v in names.items() if _is_int(v)})


def _show(v: Any) -> str:
    """repr(v), shortened: a message names the bad value without pasting a whole table."""
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


def _tuple3(v: Any, what: str, name: str) -> tuple[int, int, int]:
    if not (isinstance(v, (list, tuple)) and 1 <= len(v) <= 3 and all(_is_int(x) and x > 0 for x in v)):
        raise ManifestError(f"{name}: {what} must be 1 to 3 positive integers, got {_show(v)}")
    return tuple(list(v) + [1] * (3 - len(v)))  # type: ignore[return-value]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # JSON/TOML true is no number


def _choice(v: Any, allowed: tuple, what: str, name: str) -> str:
    if not isinstance(v, str) or v not in allowed:
        raise ManifestError(f"{name}: {what}={_show(v)} is not one of {list(allowed)}")
    return v


# every field a kernel declaration may have (cu/*.toml), and what the manifest adds to it
DECLARED_FIELDS = ("name", "family", "ladder", "step", "layout", "dtype", "acc", "out", "block", "tile", "grid",
                   "dsmem", "require", "align", "variants", "aliases", "archs", "params", "cluster", "technique",
                   "sass", "tma", "default", "a_order", "role", "swiglu", "dependent_launch", "half_tiles",
                   "knobs", "rate_tflops", "rate_source")
MANIFEST_FIELDS = ("builds", "ptx")
TOP_FIELDS = ("schema", "nvcc", "build_hash", "created", "kernels")  # a manifest's top-level table
SYMBOL_FIELDS = tuple(f.name for f in fields(SymbolInfo))
SYMBOL_FIELDS_REQUIRED = tuple(f.name for f in fields(SymbolInfo) if f.default is MISSING)  # older entries
TMA_SWIZZLES = (0, 32, 64, 128)  # bytes; CU_TENSOR_MAP_SWIZZLE_NONE/32B/64B/128B
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _typed(d: Mapping[str, Any], field: str, types: tuple, what: str, name: str, default: Any = None) -> Any:
    """d[field] if it has one of `types` (never a bool for a number), else a ManifestError naming it."""
    value = d.get(field, default)
    if isinstance(value, bool) and bool not in types or not isinstance(value, types):
        raise ManifestError(f"{name}: {field} must be {what}, got {_show(value)}")
    return value


def _str_list(d: Mapping[str, Any], field: str, name: str, default: tuple = ()) -> tuple:
    value = _typed(d, field, (list, tuple), "a list of strings", name, default)
    if not all(isinstance(x, str) for x in value):
        raise ManifestError(f"{name}: {field} must be a list of strings, got {_show(value)}")
    return tuple(value)


def _table(d: Any, where: str, required: tuple, optional: tuple = ()) -> Mapping[str, Any]:
    """`d` as a table holding every `required` key and nothing unknown, else a ManifestError."""
    if not isinstance(d, Mapping):
        raise ManifestError(f"{where} must be a table, got {_show(d)}")
    missing = [k for k in required if k not in d]
    unknown = sorted(str(k) for k in set(d) - set(required) - set(optional))
    if missing or unknown:
        problems = ([f"missing {missing}"] if missing else []) + ([f"unknown {unknown}"] if unknown else [])
        expected = list(dict.fromkeys(required + optional))
        raise ManifestError(f"{where}: {', '.join(problems)} key(s); expected {expected}")
    return d


def _tables(complete: bool) -> tuple:
    # a toml may leave a table out (or null); a manifest entry writes it, {} when empty, so that a null
    # there is damage rather than "no requirement"
    return (Mapping,) if complete else (Mapping, type(None))


def _variants(d: Mapping[str, Any], name: str, complete: bool) -> dict[str, tuple]:
    """axis -> non-empty list of values, all integers (>= 0) or all strings, each making an identifier
    suffix (`name__<axis><value>`): a value whose type changed would keep its symbol and change its meaning."""
    variants = _typed(d, "variants", _tables(complete), "a table of axis -> list of values", name, {}) or {}
    out = {}
    for axis, values in variants.items():
        ok = isinstance(axis, str) and isinstance(values, (list, tuple)) and len(values) > 0 and (
            all(_is_int(v) and v >= 0 for v in values) or all(isinstance(v, str) for v in values))
        if not ok or not all(f"{axis}{v}".isidentifier() for v in values):
            raise ManifestError(f"{name}: variants must map axis -> non-empty list of integers or of strings "
                                f"(one type per axis), got {axis!r} = {_show(values)}")
        out[axis] = tuple(values)
    return out


def _tma(d: Mapping[str, Any], params: tuple, name: str, complete: bool) -> dict[str, Any] | None:
    """operand -> { box = [inner, outer], swizzle = bytes } for tmap:<operand> parameters, swizzle
    written out (a manifest the build wrote describes every tmap operand, and only those)."""
    tma = _typed(d, "tma", (Mapping, type(None)), "a table of operand -> { box, swizzle }", name)
    operands = [p.partition(":")[2] for p in params if p.startswith("tmap:")]
    if tma is None and not (complete and operands):
        return None
    if not set(tma or {}) <= set(operands) or complete and (set(tma or {}) != set(operands) or tma == {}):
        raise ManifestError(f"{name}: tma describes {sorted(tma or {})}, its tmap parameters are {operands}"
                            + ("" if operands else " (a kernel without them has tma = null)"))
    if not tma:
        return None
    out = {}
    for op, entry in tma.items():
        entry = _table(entry, f"{name}: tma.{op}", ("box", "swizzle") if complete else ("box",), ("swizzle",))
        box, swizzle = entry["box"], entry.get("swizzle", 0)
        if not (isinstance(box, (list, tuple)) and len(box) == 2 and all(_is_int(x) and 1 <= x <= 256 for x in box)):
            raise ManifestError(f"{name}: tma.{op}.box must be [inner, outer] with 1..256 each, got {_show(box)}")
        if not _is_int(swizzle) or swizzle not in TMA_SWIZZLES:
            raise ManifestError(f"{name}: tma.{op}.swizzle must be one of {list(TMA_SWIZZLES)} bytes, "
                                f"got {_show(swizzle)}")
        out[op] = {"box": list(box), "swizzle": swizzle}
    return out


def _knobs(d: Mapping[str, Any], name: str, complete: bool) -> dict[str, Any]:
    """knob -> an integer or a string (an identifier-like C++ token), each knob an identifier."""
    knobs = _typed(d, "knobs", _tables(complete), "a table of knob -> integer or string", name, {}) or {}
    for knob, value in knobs.items():
        if not (isinstance(knob, str) and knob.isidentifier()) or not (_is_int(value) or isinstance(value, str)):
            raise ManifestError(f"{name}: knobs must map identifiers to integers or strings, got {knob!r} = "
                                f"{_show(value)}")
    return dict(knobs)


def _role_ladder_step(d: Mapping[str, Any], name: str, complete: bool) -> tuple[str, str, "int | None"]:
    """The role, and what follows from it: a catalogue kernel names its ladder and orders by its step; a helper's
    ladder is "matmul" and it has no step (a manifest writes null; a toml may still give one)."""
    role = _choice(d.get("role", "gemm"), ROLES, "role", name)
    if role == "gemm" and "ladder" not in d:
        raise ManifestError(f"{name}: missing field(s) ['ladder'] (a catalogue kernel names its ladder)")
    ladder = _choice(d.get("ladder", HELPER_LADDER), LADDERS, "ladder", name)
    types = (int,) if role == "gemm" else (type(None),) if complete else (int, type(None))
    step = _typed(d, "step", types, "a non-negative integer" if role == "gemm" else "null (a helper has no step)",
                  name, 0 if role == "gemm" else None)
    if step is not None and step < 0:
        raise ManifestError(f"{name}: step must be a non-negative integer, got {step!r}")
    return role, ladder, step


def _rate(d: Mapping[str, Any], role: str, name: str) -> tuple["float | None", "str | None"]:
    """(rate_tflops, rate_source): required for RATED_ROLES, refused elsewhere; a family-wide rate_source
    ([defaults]) names the measurement of the kernels that have a rate only."""
    rate = _typed(d, "rate_tflops", (int, float, type(None)), "a positive number of TFLOPS", name)
    source = _typed(d, "rate_source", (str, type(None)), "a pointer to the measurement (docs/...)", name)
    if rate is None and role in RATED_ROLES:
        raise ManifestError(f"{name}: role {role} is priced from its declaration: declare rate_tflops (the sustained "
                            f"TFLOPS) and rate_source (where it was measured)")
    if rate is not None and role not in RATED_ROLES:
        raise ManifestError(f"{name}: rate_tflops is declared for the roles {list(RATED_ROLES)} only, not {role}")
    if rate is not None and not 0 < rate < 1e6:
        raise ManifestError(f"{name}: rate_tflops must be a positive number of TFLOPS, got {_show(rate)}")
    if rate is not None and not source:
        raise ManifestError(f"{name}: rate_tflops {rate} needs a rate_source (where it was measured)")
    return rate, source if rate is not None else None


def _fields(d: Mapping[str, Any], name: str, complete: bool) -> dict[str, Any]:
    """Every declared field of `d` checked for its type and range, defaults filled in."""
    role, ladder, step = _role_ladder_step(d, name, complete)
    align = _typed(d, "align", (int,), "a power of two from 1 to 256 (bytes)", name, 16)
    if not (1 <= align <= 256 and align & (align - 1) == 0):
        raise ManifestError(f"{name}: align must be a power of two from 1 to 256 (bytes), got {align!r}")
    aliases = _str_list(d, "aliases", name)
    if not all(a.isidentifier() for a in aliases):
        raise ManifestError(f"{name}: aliases must be identifiers, got {list(aliases)}")
    variants = _variants(d, name, complete)
    require = dict(_typed(d, "require", _tables(complete), "a table of M/N/K -> multiple", name, {}) or {})
    for dim, mult in require.items():
        if dim not in ("M", "N", "K") or not _is_int(mult) or mult < 1:
            raise ManifestError(f"{name}: require must map M/N/K to positive integers, got {_show(require)}")
    params = _str_list(d, "params", name, DEFAULT_PARAMS)
    for p in params:
        kind, _, what = p.partition(":")
        if kind not in PARAM_KINDS or not what:
            raise ManifestError(f"{name}: parameter {p!r} is not <{'|'.join(PARAM_KINDS)}>:<name>")
    archs = _str_list(d, "archs", name, ("80", "86", "89", "90"))
    for a in archs:
        _choice(a, ARCHS, "arch", name)
    for a in variants.get("acc", ()):
        _choice(a, ACCS, "acc variant", name)
    rate, source = _rate(d, role, name)
    flag = lambda f: _typed(d, f, (bool,), "true or false", name, False)  # noqa: E731
    return dict(
        name=name, family=_typed(d, "family", (str,), "the family (file stem) name", name), ladder=ladder, step=step,
        layout=_choice(d["layout"], LAYOUTS, "layout", name), dtype=_choice(d["dtype"], DTYPES, "dtype", name),
        acc=_choice(d.get("acc", "f32"), ACCS, "acc", name), out=_choice(d["out"], DTYPES, "out", name),
        block=_tuple3(d["block"], "block", name), tile=_tuple3(d["tile"], "tile", name),
        grid=_choice(d["grid"], GRID_POLICIES, "grid", name),
        dsmem=_typed(d, "dsmem", (int, str), "bytes or an expression", name, 0), require=require, align=align,
        variants=variants, aliases=aliases, archs=archs, params=params,
        cluster=_tuple3(d.get("cluster", [1, 1, 1]), "cluster", name),
        technique=_typed(d, "technique", (str,), "a string", name, ""), sass=_str_list(d, "sass", name),
        tma=_tma(d, params, name, complete),
        default=dict(_typed(d, "default", _tables(complete), "a table of axis -> value", name, {}) or {}),
        a_order=_choice(d.get("a_order", "row"), A_ORDERS, "a_order", name), role=role, swiglu=flag("swiglu"),
        dependent_launch=flag("dependent_launch"), half_tiles=flag("half_tiles"), knobs=_knobs(d, name, complete),
        rate_tflops=rate, rate_source=source)


def _check_spec(spec: KernelSpec) -> None:
    """What holds between the fields of a declaration."""
    name = spec.name
    if (spec.ladder == HELPER_LADDER) == spec.catalogue:
        raise ManifestError(f"{name}: a {HELPER_LADDER} kernel declares one of the helper roles {list(ROLES[1:])}, a "
                            f"catalogue kernel the role \"gemm\"; got ladder {spec.ladder!r} with role {spec.role!r}")
    if spec.a_order == "col" and "tmap:A" not in spec.params:
        raise ManifestError(f"{name}: a_order = \"col\" needs a tmap:A parameter (the tensor map reads A^T)")
    for axis, value in spec.default.items():
        if value not in spec.variants.get(axis, ()):
            raise ManifestError(f"{name}: default {axis}={_show(value)} is not among its variants "
                                f"{dict(spec.variants)}")
    if spec.threads > 1024:
        raise ManifestError(f"{name}: block {spec.block} has {spec.threads} threads (> 1024)")
    for choice in spec.variant_choices():  # every variant's smem expression must evaluate
        try:
            if spec.dsmem_bytes(choice) < 0:
                raise ValueError("negative")
        except ValueError as exc:
            raise ManifestError(f"{name}: dsmem {spec.dsmem!r} for {choice}: {exc}") from None


def kernel_spec_from_dict(d: Mapping[str, Any], with_builds: bool = True, complete: bool = False) -> KernelSpec:
    """Validate one kernel declaration (from a cu/*.toml entry or a manifest entry): unknown fields,
    wrong types and out-of-range values are ManifestErrors naming the kernel, the field and the value.
    `complete` (a manifest entry as the build writes it): every field is present, builds carry every
    figure and exactly the kernel's symbols, so a deleted or retyped entry never loads as a default."""
    if not isinstance(d, Mapping):
        raise ManifestError(f"a kernel declaration must be a table, got {_show(d)}")
    name = d.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise ManifestError(f"kernel name must be an identifier, got {_show(name)}")
    unknown = sorted(set(d) - set(DECLARED_FIELDS) - (set(MANIFEST_FIELDS) if with_builds else set()))
    if unknown:
        raise ManifestError(f"{name}: unknown field(s) {unknown}; a declaration has {list(DECLARED_FIELDS)}")
    needed = DECLARED_FIELDS + MANIFEST_FIELDS if complete else ("family", "layout", "dtype", "out", "block", "tile",
                                                                 "grid")
    missing = [k for k in needed if k not in d]
    if missing:
        raise ManifestError(f"{name}: missing field(s) {missing}")
    spec = KernelSpec(**_fields(d, name, complete))
    _check_spec(spec)
    if not with_builds:
        return spec
    # (a complete manifest always writes the table, {} where nothing is built: a null is damage)
    builds_in = _typed(d, "builds", (Mapping,) if complete else (Mapping, type(None)), "a table of arch -> build",
                       name) or {}
    builds = {arch: _arch_build(spec, arch, b, complete) for arch, b in builds_in.items()}
    ptx = _typed(d, "ptx", (Mapping, type(None)), "a table { arch, path, sha256 } or null", name)
    if complete and (ptx is None) != (PTX_ARCH not in builds):  # the PTX comes with the sm_90 cubin
        raise ManifestError(f"{name}: ptx must be the PTX of its sm_{PTX_ARCH} build, and null without one; got "
                            f"{_show(ptx)} with builds for {sorted(builds)}")
    if ptx is not None:
        ptx = _table(ptx, f"{name}: ptx", ("arch", "path", "sha256"))
        _choice(ptx["arch"], (PTX_ARCH,) if complete else ARCHS, "ptx arch", name)
        _file_ref(ptx, "path", f"{name}: ptx", complete)
        ptx = PtxBuild(**ptx)
    return KernelSpec(**{**spec.__dict__, "builds": builds, "ptx": ptx})


def _file_ref(d: Mapping[str, Any], key: str, where: str, complete: bool) -> None:
    """d[key] a relative path, d["sha256"] its digest (64 lowercase hex digits where the build wrote it)."""
    rel = d[key]
    if not isinstance(rel, str) or rel.startswith(("/", "\\")) or ".." in rel.replace("\\", "/").split("/"):
        raise ManifestError(f"{where}: {key} must be a path inside the artifacts directory, got {_show(rel)}")
    sha = d["sha256"]
    if not isinstance(sha, str) or complete and not _SHA256.fullmatch(sha):
        raise ManifestError(f"{where}: sha256 must be 64 hex digits, got {_show(sha)}")


def _arch_build(spec: KernelSpec, arch: Any, b: Any, complete: bool) -> ArchBuild:
    where = f"{spec.name}: sm_{arch} build"
    if arch not in spec.archs:
        raise ManifestError(f"{spec.name}: has a build for {_show(arch)}, but declares only {list(spec.archs)}")
    b = _table(b, where, ("cubin", "sha256", "symbols") + (("warnings",) if complete else ()), ("warnings",))
    _file_ref(b, "cubin", where, complete)
    warnings = _str_list(b, "warnings", where)
    symbols_in = b["symbols"]
    if not isinstance(symbols_in, Mapping):
        raise ManifestError(f"{where}: symbols must be a table of symbol -> ptxas figures, got {_show(symbols_in)}")
    wanted = dict(zip(spec.symbols(), spec.variant_choices()))
    absent = sorted(set(wanted) - set(symbols_in))
    if absent:
        raise ManifestError(f"{spec.name}: sm_{arch} cubin lacks symbol(s) {absent}")
    if complete and set(symbols_in) != set(wanted):
        raise ManifestError(f"{where}: symbols {sorted(set(symbols_in) - set(wanted))} are not among the kernel's "
                            f"variants {dict(spec.variants)}")
    symbols = {}
    for sym, info in symbols_in.items():
        info = _table(info, f"{where}: symbol {sym}", SYMBOL_FIELDS if complete else SYMBOL_FIELDS_REQUIRED,
                      SYMBOL_FIELDS)
        for k, v in info.items():
            if not _is_int(v) or v < 0:
                raise ManifestError(f"{where}: symbol {sym} {k} must be a non-negative integer, got {_show(v)}")
        symbols[sym] = SymbolInfo(**info)
        if complete and sym in wanted and info["dynamic_smem"] != spec.dsmem_bytes(wanted[sym]):
            raise ManifestError(f"{where}: symbol {sym} exports {info['dynamic_smem']} bytes of dynamic smem, its "
                                f"dsmem {spec.dsmem!r} gives {spec.dsmem_bytes(wanted[sym])}")
    return ArchBuild(arch=arch, cubin=b["cubin"], sha256=b["sha256"], symbols=symbols, warnings=warnings)


def _jsonable(v: Any) -> Any:
    if isinstance(v, Mapping):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def declaration_dict(spec: KernelSpec) -> dict[str, Any]:
    """Every declared field of `spec` written out in JSON types: a manifest entry before its builds
    (a default the toml left implicit is explicit here, so no field of a manifest entry is optional)."""
    return {f: _jsonable(getattr(spec, f)) for f in DECLARED_FIELDS}


# the checks hgemm_rt.manifest applies to a manifest's top-level table, by the same rules
check_table, typed_field, shown = _table, _typed, _show
