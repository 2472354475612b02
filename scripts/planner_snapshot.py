"""A snapshot of what the planner decides, to prove that a refactor of the planner, the cost model, the recipe steps
or the executor's launch preparation changes no behaviour (CPU only; no GPU is touched).

    python scripts/planner_snapshot.py write OUT.json      # every corpus problem on every device
    python scripts/planner_snapshot.py compare OLD.json    # the same now, compared with OLD.json

For each problem of a broad corpus (dtypes and accumulate values, layouts, strided, unaligned and transposed views,
decode and long-K shapes, batches with broadcast and loop levels, fused epilogues, alpha/beta modes, grouped
problems) and each device (cc, SM count), the snapshot holds the full ranked list of `planner.ranked_recipes`: each
route, its estimate, `planner.describe`, the temporaries, every step's fields, and the launch each step becomes
(executor._Step with `prepare` stubbed: grid, cluster, block, scalars, operand references).

Comparison normalises step fields so that renamed or regrouped fields compare equal (see `normalise`):
- a field holding a dataclass of options (a role's options object) is flattened into its step;
- field names are mapped through RENAMED (old name -> the name now used);
- fields at their neutral value (NEUTRAL: splits 1, ctas 0, None, False, ...) are dropped, so that a field that a
  step type no longer carries compares equal to the old default;
- a step's type name is mapped through STEP_TYPES (a split step used to be a Copy with `split` set);
- kernel names are mapped through KERNEL_PREFIXES (the helper kernels were util_*, now matmul_*).
Estimates compare to a relative 1e-9; everything else exactly.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hgemm_rt import executor, planner  # noqa: E402
from hgemm_rt.epilogue import Epilogue  # noqa: E402
from hgemm_rt.launcher import LaunchConfig  # noqa: E402
from hgemm_rt.manifest import Manifest  # noqa: E402
from hgemm_rt.problem import Problem, View, batch_align, ptr_alignment  # noqa: E402

DEVICES = (((9, 0), 132), ((8, 9), 128), ((8, 0), 108))
RENAMED = {"epilogue": "applies_alpha_beta", "format": "split"}  # old field name -> new (a Split's format: its role)
STEP_TYPES = {"Copy+split": "Split"}  # old step type (a Copy with `split` set) -> new
KERNEL_PREFIXES = {"util_": "matmul_"}  # an old snapshot's kernel-name prefix -> the one used now
NEUTRAL = {"splits": 1, "k_groups": 1, "ctas": 0, "sk_tiles": 0, "group": 0, "groups": 0, "k_deferred": False,
           "c_unmapped": False, "swizzle": False, "swizzle_stride": None, "work": None, "a_shift": None,
           "b_shift": None, "shift": None, "split": "", "epi": None, "bias": None, "variant": (), "batch": (),
           "applies_alpha_beta": False, "scalars": "ab", "options": None}
ESTIMATE_RTOL = 1e-9


def dense(base: str, rows: int, cols: int, align: int = 256, bs: tuple = ()) -> View:
    return View.make(base, rows, cols, cols, 1, align, bs)


def problem(dtype: str, M: int, N: int, K: int, *, acc: str | None = None, a: View | None = None,
            b: View | None = None, c: View | None = None, mode: str = "plain", batch: tuple = (),
            epi: Epilogue | None = None, bias: View | None = None, group: str = "") -> Problem:
    acc = acc or {"f16": "f32", "bf16": "f32", "f32": "f32"}[dtype]
    a = a or dense("A", M, K)
    b = b or dense("B", K, N)
    c = c or dense("C", M, N // 2 if epi is not None and epi.swiglu else N)
    return Problem(dtype, acc, a, b, c, plain=mode == "plain", beta_zero=mode != "axpby", batch=batch, epi=epi,
                   bias=bias, group=group)


def batched(dtype: str, batch: tuple, M: int, N: int, K: int, broadcast: str = "", **kw) -> Problem:
    """A batch of dense matrices back to back; operands named in `broadcast` shared by every matrix."""
    def bs(base: str, rows: int, cols: int) -> tuple:
        if base in broadcast:
            return (0,) * len(batch)
        out, step = [], rows * cols
        for n in reversed(batch):
            out.append(step)
            step *= n
        return tuple(reversed(out))
    return problem(dtype, M, N, K, a=dense("A", M, K, bs=bs("A", M, K)), b=dense("B", K, N, bs=bs("B", K, N)),
                   c=dense("C", M, N, bs=bs("C", M, N)), batch=batch, **kw)


def corpus() -> dict[str, Problem]:
    probs: list[Problem] = []
    shapes = [(1, 4096, 4096), (2, 4096, 4096), (7, 14336, 4096), (16, 4096, 4096), (16, 512, 4096),
              (64, 14336, 4096), (128, 128, 131072), (256, 256, 65536), (64, 64, 65536), (128, 1024, 4096),
              (256, 6144, 4096), (512, 512, 512), (1024, 1024, 1000), (4095, 4095, 4095), (4096, 4097, 4096),
              (8192, 8192, 16), (8192, 8192, 8192), (97, 141, 33), (3, 5, 7), (1, 1, 1), (33, 4096, 11008),
              (16384, 64, 4096), (1024, 6144, 4096), (2048, 2048, 128), (512, 4096, 3584)]
    for dtype, accs in (("f16", ("f32", "f16")), ("bf16", ("f32",)), ("f32", ("f32", "tf32"))):
        for acc in accs:
            for M, N, K in shapes:
                probs.append(problem(dtype, M, N, K, acc=acc))
            for M, N, K in ((256, 4096, 4096), (1, 4096, 4096), (1000, 1000, 1000), (64, 1024, 4096)):
                probs.append(problem(dtype, M, N, K, acc=acc, b=dense("B", N, K).T))  # B column-major
                probs.append(problem(dtype, M, N, K, acc=acc, a=dense("A", K, M).T))  # A column-major
                probs.append(problem(dtype, M, N, K, acc=acc, c=dense("C", N, M).T))  # C column-major
                probs.append(problem(dtype, M, N, K, acc=acc, mode="alpha"))
                probs.append(problem(dtype, M, N, K, acc=acc, mode="axpby"))
    for dtype in ("f16", "bf16", "f32"):
        for M, N, K in ((512, 512, 512), (4096, 4096, 4096), (16, 4096, 4096), (100, 200, 300)):
            probs.append(problem(dtype, M, N, K, a=View.make("A", M, K, K + 8, 1, 16)))  # padded rows
            probs.append(problem(dtype, M, N, K, a=View.make("A", M, K, K + 3, 1, 2)))  # unaligned
            probs.append(problem(dtype, M, N, K, b=View.make("B", K, N, N + 1, 1, 2)))
            probs.append(problem(dtype, M, N, K, c=View.make("C", M, N, N + 5, 1, 2)))
            probs.append(problem(dtype, M, N, K, a=View.make("A", M, K, 2 * K, 2, 256)))  # strided columns
            probs.append(problem(dtype, M, N, K, b=View.make("B", K, N, N, 1, 8)))  # 8-byte aligned B
        for act in (None, "relu", "gelu", "gelu_tanh", "silu"):
            for M, N, K in ((512, 1024, 4096), (16, 4096, 4096), (4096, 4096, 1024), (97, 141, 64)):
                for bias_axis in (None, "col", "row"):
                    epi = Epilogue(bias_axis, act, 1.0)
                    if epi == Epilogue():
                        continue
                    length = N if bias_axis == "col" else M
                    bias = dense("bias", 1, length) if bias_axis else None
                    probs.append(problem(dtype, M, N, K, epi=epi, bias=bias))
                    probs.append(problem(dtype, M, N, K, epi=epi, bias=bias, mode="axpby"))
            probs.append(problem(dtype, 512, 1024, 4096, epi=Epilogue(None, act, 0.5)))
        for M, N, K in ((512, 2048, 4096), (16, 28672, 4096), (100, 302, 64)):  # SwiGLU: N = 2F
            probs.append(problem(dtype, M, N, K, epi=Epilogue(None, "swiglu", 1.0)))
            probs.append(problem(dtype, M, N, K, epi=Epilogue("col", "swiglu", 2.0), bias=dense("bias", 1, N),
                                 mode="axpby"))
        for batch, (M, N, K), bc in (((8,), (512, 512, 64), ""), ((64,), (512, 64, 512), ""),
                                     ((256,), (2048, 128, 2048), ""), ((4, 12), (128, 128, 64), ""),
                                     ((2, 3, 4), (64, 64, 64), ""),
                                     ((2, 3, 4), (64, 64, 64), "B"), ((16,), (128, 4096, 4096), "B"),
                                     ((8,), (1, 4096, 4096), "A"), ((1024,), (128, 128, 64), ""),
                                     ((3, 5), (33, 17, 9), "A"), ((70000,), (8, 8, 8), "")):
            probs.append(batched(dtype, batch, M, N, K, bc))
            probs.append(batched(dtype, batch, M, N, K, bc, mode="axpby"))
            probs.append(batched(dtype, batch, M, N, K, bc, epi=Epilogue("col", "relu", 1.0), bias=dense("bias", 1, N)))
    for dtype in ("f16", "bf16"):
        probs.extend(grouped_problem(dtype, *args) for args in (
            ("contiguous", 8, 4096, 1024, 512, "NN", None), ("contiguous", 8, 4096, 1024, 512, "TN", "silu"),
            ("masked", 16, 128, 2048, 1024, "NN", None), ("masked", 4, 64, 512, 256, "TN", "swiglu"),
            ("contiguous", 3, 100, 302, 64, "NN", None)))
    out = {}
    for p in probs:
        out.setdefault(p.key(), p)
    return out


def grouped_problem(dtype: str, mode: str, E: int, M: int, N: int, K: int, layout: str, act: str | None) -> Problem:
    """A Problem as grouped.grouped_matmul builds it (dense A, B, C; B as (E, K, N) or its transpose)."""
    n_out = N // 2 if act == "swiglu" else N
    if layout == "NN":
        bview = View.make("B", K, N, N, 1, 256, (K * N,))
    else:
        bview = View.make("B", N, K, K, 1, 256, (K * N,))
    a_bs = (0,) if mode == "contiguous" else (M * K,)
    c_bs = (0,) if mode == "contiguous" else (M * n_out,)
    av = View.make("A", M, K, K, 1, batch_align(256, a_bs, 2), a_bs)
    cv = View.make("C", M, n_out, n_out, 1, batch_align(256, c_bs, 2), c_bs)
    epi = Epilogue(None, act, 1.0) if act else None
    return Problem(dtype, "f32", av, bview if layout == "NN" else bview.T, cv, plain=True, beta_zero=True,
                   batch=(E,), epi=epi, group=mode)


def grouped_ranked(prob: Problem, manifest: Manifest, cc: tuple, sm_count: int) -> list:
    """The recipe of a grouped problem: the planner's where it plans them, else the one grouped.py builds."""
    if hasattr(planner, "grouped_recipe"):
        recipe = planner.grouped_recipe(prob, manifest)
    else:  # grouped.py as of the branch point
        from hgemm_rt.problem import Gemm, Recipe, Route
        from hgemm_rt.grouped import GROUP_MODES, ROLE
        layout = "NN" if prob.b.cs == 1 else "TN"
        bview = prob.b if layout == "NN" else prob.b.T
        kernel = next((s.name for s in manifest.kernels.values() if s.role == ROLE and s.dtype == prob.dtype and
                       s.layout == layout and "ptr:group" in s.params), None)
        if kernel is None:
            return []
        g = Gemm(kernel, ROLE, prob.a, bview, prob.c, prob.M, prob.c.cols, prob.K, epilogue=True, batch=prob.batch,
                 epi=prob.epi, group=GROUP_MODES[prob.group], groups=prob.batch[0],
                 c_unmapped=planner.c_by_pointer(prob.c, 2))
        recipe = Recipe(Route(kernel), (), (g,))
    if recipe is None or cc < (9, 0):
        return []
    return [(planner.estimate_us(recipe, prob, manifest, cc, sm_count), recipe)]


# ------------------------------------------------------------------------------------------------------------------
# the launches, with the GPU parts stubbed
# ------------------------------------------------------------------------------------------------------------------

class _Info:
    def __init__(self, cc: tuple, sm_count: int):
        self.cc, self.sm_count, self.max_smem_optin, self.name = cc, sm_count, 232448, f"sm_{cc[0]}{cc[1]}"


class _Dev:
    def __init__(self, cc: tuple, sm_count: int):
        self.info = _Info(cc, sm_count)


RESIDENT_BLOCKS = 1  # the stub's occupancy answer for persistent catalogue kernels


def _fake_prepare(manifest, spec, dev, p, variant, swizzle, swizzle_stride):
    from hgemm_rt import launcher
    symbol = launcher.variant_symbol(spec.name, variant)
    dsmem = spec.dsmem_bytes(variant)
    if spec.grid == "persistent":
        grid = launcher.persistent_grid(spec, p, RESIDENT_BLOCKS)
    else:
        stride = None
        if swizzle and spec.grid == "tiles+swizzle":
            stride = swizzle_stride or launcher.default_swizzle_stride(p.N)
        grid = launcher.tile_grid(spec, p, stride)
    return None, LaunchConfig(symbol, grid, spec.block, dsmem, spec.cluster, False)


class _FakeLaunch:
    def __init__(self, fn, cfg):
        self.fn, self.cfg = fn, cfg


def _stub_gpu() -> None:
    """Every hgemm_rt module's `prepare` and `KernelLaunch` replaced by the stubs (wherever the refactor put them)."""
    from hgemm_rt import launcher
    prepare, kernel_launch = launcher.prepare, launcher.KernelLaunch
    for name, mod in list(sys.modules.items()):
        if name.startswith("hgemm_rt") and name != "hgemm_rt.launcher" and mod is not None:
            if getattr(mod, "prepare", None) is prepare:
                mod.prepare = _fake_prepare
            if getattr(mod, "KernelLaunch", None) is kernel_launch:
                mod.KernelLaunch = _FakeLaunch


def launches(recipe: Any, manifest: Manifest, cc: tuple, sm_count: int) -> list:
    dev = _Dev(cc, sm_count)
    out = []
    for step in recipe.steps:
        try:
            st = executor._Step(manifest, step, dev, recipe)
        except Exception as e:  # (an error is behaviour too)
            out.append({"error": f"{type(e).__name__}: {e}"})
            continue
        cfg = st.launch.cfg
        out.append({"symbol": cfg.symbol, "grid": list(cfg.grid), "block": list(cfg.block), "dsmem": cfg.dsmem,
                    "cluster": list(cfg.cluster), "scalars": dict(sorted(st.scalars.items())),
                    "refs": {k: repr(v) for k, v in sorted(st.refs.items())},
                    "alpha_beta": executor.alpha_beta_bits(step, 2.0, 3.0),
                    "operands": sorted(executor.step_operands(step)), "writes": sorted(executor.step_writes(step))})
    return out


# ------------------------------------------------------------------------------------------------------------------
# steps as plain data, normalised
# ------------------------------------------------------------------------------------------------------------------

def _value(v: Any) -> Any:
    if type(v).__name__ == "SplitFormat":  # (a Split step's format, compared as the role of its kernel)
        return v.role
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return repr(v)
    if isinstance(v, tuple):
        return repr(v)
    return v


def step_fields(step: Any) -> dict:
    """A step's fields as written now (options objects flattened into the step)."""
    kind = type(step).__name__
    if kind == "Copy" and getattr(step, "split", ""):
        kind = "Copy+split"
    fields: dict = {}
    for f in dataclasses.fields(step):
        v = getattr(step, f.name)
        if dataclasses.is_dataclass(v) and not isinstance(v, type) and getattr(v, "IS_OPTIONS", False):
            for g in dataclasses.fields(v):
                fields[g.name] = _value(getattr(v, g.name))
        else:
            fields[f.name] = _value(v)
    return {"type": kind, "fields": fields}


def normalise(step: dict) -> dict:
    kind = STEP_TYPES.get(step["type"], step["type"])
    fields = {}
    for k, v in step["fields"].items():
        k = RENAMED.get(k, k)
        if k in NEUTRAL and v == _value(NEUTRAL[k]):
            continue
        fields[k] = v
    return {"type": kind, "fields": fields}


def snapshot(manifest: Manifest) -> dict:
    _stub_gpu()
    out = {}
    for key, prob in corpus().items():
        for cc, sms in DEVICES:
            if prob.group:
                ranked = grouped_ranked(prob, manifest, cc, sms)
            else:
                ranked = planner.ranked_recipes(prob, manifest, cc, sms)
            out[f"{key}@{cc[0]}{cc[1]}/{sms}"] = [{
                "route": str(r.route), "route_json": r.route.to_json(), "estimate": est,
                "describe": planner.describe(r), "temps": [repr(t) for t in r.temps], "loop": list(r.loop),
                "copy_bytes": r.copy_bytes, "steps": [step_fields(s) for s in r.steps],
                "launches": launches(r, manifest, cc, sms)} for est, r in ranked]
    return out


def compare(old: dict, new: dict) -> list[str]:
    diffs = []
    for key in sorted(set(old) | set(new)):
        if key not in old or key not in new:
            diffs.append(f"{key}: only in {'new' if key in new else 'old'}")
            continue
        a, b = old[key], new[key]
        if [x["route"] for x in a] != [x["route"] for x in b]:
            diffs.append(f"{key}: ranking {[x['route'] for x in a][:5]} -> {[x['route'] for x in b][:5]}")
            continue
        for x, y in zip(a, b):
            if abs(x["estimate"] - y["estimate"]) > ESTIMATE_RTOL * max(abs(x["estimate"]), 1e-30):
                diffs.append(f"{key} {x['route']}: estimate {x['estimate']} -> {y['estimate']}")
            for field in ("route_json", "describe", "temps", "loop", "copy_bytes", "launches"):
                if x[field] != y[field]:
                    diffs.append(f"{key} {x['route']}: {field} {x[field]!r} -> {y[field]!r}")
            xs, ys = [normalise(s) for s in x["steps"]], [normalise(s) for s in y["steps"]]
            if xs != ys:
                diffs.append(f"{key} {x['route']}: steps {xs!r} -> {ys!r}")
    return diffs


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("write", "compare"):
        print(__doc__)
        return 2
    manifest = Manifest.load(os.environ.get("HGEMM_ARTIFACTS") or None)
    snap = snapshot(manifest)
    if argv[0] == "write":
        Path(argv[1]).write_text(json.dumps(snap, sort_keys=True))
        print(f"{len(snap)} (problem, device) entries, {sum(map(len, snap.values()))} recipes -> {argv[1]}")
        return 0
    old_text = Path(argv[1]).read_text()
    for before, now in KERNEL_PREFIXES.items():
        old_text = re.sub(rf"\b{before}", now, old_text)
    diffs = compare(json.loads(old_text), json.loads(json.dumps(snap, sort_keys=True)))
    for d in diffs[:50]:
        print(d)
    print(f"{len(snap)} (problem, device) entries, {sum(map(len, snap.values()))} recipes: "
          f"{len(diffs)} differences")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
