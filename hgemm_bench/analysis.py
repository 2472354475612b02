"""Pure functions over measurement records (plain dicts, as stored in the results JSON): error
bounds, ratios to cuBLAS, the best row, the "+x%" gains, geomeans across a sweep and the top-k.

A record has: name, ladder, step, layout, dtype, acc, out, baseline, label, M, N, K, ms, tflops,
rel_error (None when C held NaN/Inf), and after `judge`: error_bound, ok, ratio.
"""
from __future__ import annotations

import math
from typing import Any, Iterable

from hgemm_rt.numerics import error_bound

from .kernel_checks import baseline_acc, baseline_for

from .selection import ladder_rank

Record = dict[str, Any]

CLASSES = ("hgemm", "sgemm")
CLASS_TITLES = {"hgemm": "HGEMM (fp16/bf16 in)", "sgemm": "SGEMM (fp32 in)"}


def klass(dtype: str) -> str:
    """Rows are compared within a class: 16-bit inputs (tensor-core rate) or fp32 inputs."""
    return "sgemm" if dtype == "f32" else "hgemm"


def shape_of(r: Record) -> tuple[int, int, int]:
    return (r["M"], r["N"], r["K"])


def key_of(r: Record) -> tuple[str, str]:
    return (r["name"], r["label"])


def judge(rows: list[Record]) -> None:
    """Set error_bound and ok on the rows of one shape. The bound is numerics.error_bound: never looser
    than a small factor over cuBLAS with the same layout, dtype and accumulation in this run where
    that ran, the static floor otherwise. A row that is not ok never counts as best."""
    cublas_err: dict[tuple, float] = {}
    for r in rows:
        if r["baseline"] and r["rel_error"] is not None:
            cublas_err[(r["name"], r["acc"])] = r["rel_error"]
    for r in rows:
        ref = None
        if not r["baseline"]:
            base = baseline_for(r["layout"], r["dtype"])
            if base is not None:
                ref = cublas_err.get((base, baseline_acc(r["dtype"], r["acc"])))
        r["error_bound"] = error_bound(r["dtype"], r["acc"], r["out"], r["K"], ref)
        r["ok"] = r["rel_error"] is not None and r["rel_error"] <= r["error_bound"]


def best_cublas(rows: Iterable[Record]) -> dict[str, float]:
    """The best cuBLAS TFLOPS among correct rows, per input dtype (fp16 kernels against fp16 cuBLAS,
    bf16 against bf16, fp32 against the better of fp32 and TF32) and per class (the fallback for a
    results file recorded before bf16 cuBLAS was measured)."""
    best: dict[str, float] = {}
    for r in rows:
        if r["baseline"] and r.get("ok"):
            for key in (r["dtype"], klass(r["dtype"])):
                best[key] = max(best.get(key, 0.0), r["tflops"])
    return best


def set_ratios(rows: list[Record]) -> None:
    """ratio = TFLOPS / the best cuBLAS of the same input dtype at the same shape (of the same class
    where that dtype has no cuBLAS row; None without cuBLAS)."""
    best = best_cublas(rows)
    for r in rows:
        b = best.get(r["dtype"]) or best.get(klass(r["dtype"]))
        r["ratio"] = r["tflops"] / b if b else None


def set_round_ratios(rows: list[Record]) -> None:
    """Steady protocol: each round's ratio to the best cuBLAS of that round (set_ratios' rule), since
    a drift of the clock between rounds falls on both. Rows without rounds are left alone."""
    steady = [r for r in rows if r.get("steady")]
    rounds = min((len(r["steady"]["ms"]) for r in steady), default=0)
    ratios: list[list[float | None]] = [[] for _ in steady]
    for i in range(rounds):
        shadow = [{**r, "tflops": 2.0 * r["M"] * r["N"] * r["K"] / (r["steady"]["ms"][i] * 1e-3) / 1e12} for r in steady]
        set_ratios(shadow)
        for got, s in zip(ratios, shadow):
            got.append(s["ratio"])
    for r, got in zip(steady, ratios):
        r["steady"]["ratio"] = got


def rejudge(records: list[Record]) -> None:
    """Bounds, verdicts and ratios again from the raw measurements, with the current rules."""
    for shape in shapes_in_order(records):
        finish_shape([r for r in records if shape_of(r) == shape])


def finish_shape(rows: list[Record]) -> None:
    judge(rows)
    set_ratios(rows)
    set_round_ratios(rows)


def shape_view(rows: list[Record]) -> list[dict[str, Any]]:
    """Rows of one shape and class in run order, each with `gain` (percent over the best correct row
    before it, only where it sets a new best: the table's "+x%") and `best` (the fastest correct row of
    the table)."""
    view, running = [], 0.0
    ok = [r for r in rows if r.get("ok")]
    top = max(ok, key=lambda r: r["tflops"]) if ok else None
    for r in rows:
        gain = None
        if r.get("ok") and r["tflops"] > running:
            gain = (r["tflops"] / running - 1.0) * 100.0 if running > 0 else None
            running = r["tflops"]
        view.append({"row": r, "gain": gain, "best": r is top})
    return view


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summarize(records: list[Record], shapes: list[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Per kernel + variant across the sweep: shapes measured correctly, geomean TFLOPS, geomean ratio
    to cuBLAS, min/max TFLOPS, total ms. Sorted: complete rows (every shape) first, then by geomean."""
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        groups.setdefault(key_of(r), []).append(r)
    out = []
    for (name, label), rs in groups.items():
        good = [r for r in rs if r.get("ok")]
        ratios = [r["ratio"] for r in good if r.get("ratio")]
        tf = [r["tflops"] for r in good]
        first = rs[0]
        out.append({
            "name": name, "label": label, "ladder": first["ladder"], "step": first["step"],
            "layout": first["layout"], "dtype": first["dtype"], "class": klass(first["dtype"]),
            "baseline": first["baseline"], "shapes": len(good), "failed": len(rs) - len(good),
            "complete": len(good) == len(shapes),
            "geomean_tflops": geomean(tf), "geomean_ratio": geomean(ratios) if ratios else None,
            "min_tflops": min(tf) if tf else None, "max_tflops": max(tf) if tf else None,
            "total_ms": sum(r["ms"] for r in good),
        })
    out.sort(key=lambda s: (not s["complete"], -(s["geomean_tflops"] if s["shapes"] else -1.0)))
    return out


def topk(summary: list[dict[str, Any]], k: int, cls: str, include_baselines: bool = False,
         distinct: bool = True) -> list[dict[str, Any]]:
    """The k best kernels of a class by geomean TFLOPS, among those correct at every shape; with
    `distinct`, each kernel once (its best variant), so that one kernel's stage counts do not fill it."""
    pool = [s for s in summary if s["class"] == cls and s["complete"] and s["shapes"]
            and (include_baselines or not s["baseline"])]
    out, seen = [], set()
    for s in sorted(pool, key=lambda s: -s["geomean_tflops"]):
        if distinct and s["name"] in seen:
            continue
        seen.add(s["name"])
        out.append(s)
    return out[:k]


def classes_present(records: list[Record]) -> list[str]:
    present = {klass(r["dtype"]) for r in records}
    return [c for c in CLASSES if c in present]


def shapes_in_order(records: list[Record]) -> list[tuple[int, int, int]]:
    seen: dict[tuple[int, int, int], None] = {}
    for r in records:
        seen.setdefault(shape_of(r), None)
    return list(seen)


def pick_shape(records: list[dict[str, Any]], size: int) -> tuple[int, int, int]:
    """size^3 if it was measured, else the measured square closest to it."""
    squares = [s for s in shapes_in_order(records) if s[0] == s[1] == s[2]]
    if not squares:
        raise ValueError("the results hold no square shape")
    return min(squares, key=lambda s: (abs(s[0] - size), -s[0]))


def ladder_rows(records: list[dict[str, Any]], shape: tuple[int, int, int]) -> list[dict[str, Any]]:
    """Per ladder and step, the fastest correct variant at `shape`; gain is over the previous step of
    the same ladder that ran; cuBLAS rows (best variant per class) close the table."""
    at = [r for r in records if shape_of(r) == shape and r.get("ok")]
    best: dict[tuple[str, int], dict] = {}
    for r in at:
        if r["baseline"]:
            continue
        k = (r["ladder"], r["step"])
        if k not in best or r["tflops"] > best[k]["tflops"]:
            best[k] = r
    rows, prev = [], {}
    for (ladder, step) in sorted(best, key=lambda k: (ladder_rank(k[0]), k[0], k[1])):
        r = best[(ladder, step)]
        p = prev.get(ladder)
        rows.append({"ladder": ladder, "step": step, "name": r["name"], "label": r["label"], "layout": r["layout"],
                     "dtype": r["dtype"], "tflops": r["tflops"], "ratio": r.get("ratio"),
                     "gain": (r["tflops"] / p - 1.0) * 100.0 if p else None})
        prev[ladder] = r["tflops"]
    for dtype in ("f16", "bf16", "f32"):  # the best cuBLAS row per input dtype: each ratio's denominator
        base = [r for r in at if r["baseline"] and r["dtype"] == dtype and r.get("ok")]
        if base:
            b = max(base, key=lambda r: r["tflops"])
            rows.append({"ladder": "cublas", "step": 0, "name": b["name"], "label": b["label"], "layout": b["layout"],
                         "dtype": b["dtype"], "tflops": b["tflops"], "ratio": 1.0, "gain": None})
    return rows
