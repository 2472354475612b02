"""Text tables: one per shape and class, the summary across the sweep, the top-k."""
from __future__ import annotations

import importlib.util
from typing import Any

from . import analysis as an

SHAPE_HEADERS = ["", "kernel", "variant", "in", "ms", "TFLOPS", "%peak", "x cuBLAS", "rel err", "gain"]
BENCH_EXTRA = "the benchmark's tables need tabulate: `pip install hgemm[bench]`"
STEADY_HEADERS = ["x cuBLAS per round", "SM MHz", "board W"]  # --steady: the rounds' spread, clock and power


def have_tabulate() -> bool:
    """Whether the tables can be written (found, not imported)."""
    try:
        return importlib.util.find_spec("tabulate") is not None
    except ImportError:  # (an import hook that refuses it)
        return False


def tabulate(rows: Any, *args: Any, **kwargs: Any) -> str:
    """tabulate.tabulate, imported on first use: the runtime and `hgemm-bench --list` run without it."""
    try:
        from tabulate import tabulate as format_table
    except ImportError:
        raise SystemExit(f"hgemm-bench: {BENCH_EXTRA}") from None
    return format_table(rows, *args, **kwargs)


def shape_title(M: int, N: int, K: int) -> str:
    return f"M=N=K={M}" if M == N == K else f"M={M} N={N} K={K}"


def fmt_err(r: dict[str, Any]) -> str:
    if r["rel_error"] is None:
        return "inf (NaN/Inf in C)"
    text = f"{r['rel_error']:.1e}"
    return text if r.get("ok") else f"{text} > {r['error_bound']:.1e} FAIL"


def steady_cells(r: dict[str, Any]) -> list[str]:
    """A steady-protocol row's range of per-round ratios, median SM clock and board power."""
    st = r.get("steady") or {}
    ratios = [x for x in st.get("ratio", []) if x]
    return [f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else "-",
            *(f"{st[k]:.0f}" if st.get(k) is not None else "-" for k in ("sm_mhz", "board_w"))]


def shape_table(rows: list[dict[str, Any]], peak: float | None) -> str:
    """One shape, one class: mark `*` on the best correct row, `!` on a row over its error bound."""
    steady = any(r.get("steady") for r in rows)
    body = []
    for v in an.shape_view(rows):
        r = v["row"]
        mark = "*" if v["best"] else ("!" if not r.get("ok") else "")
        pct = f"{100 * r['tflops'] / peak:.1f}" if peak and an.klass(r["dtype"]) == "hgemm" else "-"
        body.append([
            mark, r["name"], r["label"] or "-", f"{r['layout']} {r['dtype']}", f"{r['ms']:.4f}", f"{r['tflops']:.1f}", pct,
            f"{r['ratio']:.2f}x" if r.get("ratio") else "-", fmt_err(r),
            f"+{v['gain']:.1f}%" if v["gain"] is not None else "",
        ] + (steady_cells(r) if steady else []))
    return tabulate(body, headers=SHAPE_HEADERS + (STEADY_HEADERS if steady else []), disable_numparse=True)


def shape_header(rows: list[dict[str, Any]], cls: str, peak: float | None) -> str:
    M, N, K = an.shape_of(rows[0])
    ok = [r for r in rows if r.get("ok")]
    head = f"== {shape_title(M, N, K)} · {an.CLASS_TITLES[cls]} · {len(rows)} rows"
    if ok:
        b = max(ok, key=lambda r: r["tflops"])
        head += f" · best {b['name']}{' (' + b['label'] + ')' if b['label'] else ''} {b['tflops']:.1f} TFLOPS"
        if peak and cls == "hgemm":
            head += f" = {100 * b['tflops'] / peak:.1f}% of the {peak:.0f} TFLOPS fp16 dense peak"
        if b.get("ratio"):
            head += f", {b['ratio']:.2f}x cuBLAS"
    return head + " =="


def shape_report(rows: list[dict[str, Any]], skipped: list[dict[str, Any]], peak: float | None) -> str:
    """Everything printed for one shape: a header and a table per class, then what was skipped."""
    parts = []
    for cls in an.classes_present(rows):
        sub = [r for r in rows if an.klass(r["dtype"]) == cls]
        parts += ["", shape_header(sub, cls, peak), shape_table(sub, peak)]
    throttle = sorted({t for r in rows for t in (r.get("steady") or {}).get("throttle", ())})
    if throttle:
        parts.append("clock throttle reasons seen: " + ", ".join(throttle))
    if skipped:
        reasons: dict[str, list[str]] = {}
        for s in skipped:
            reasons.setdefault(s["reason"], []).append(s["name"] + (f" ({s['label']})" if s["label"] else ""))
        parts.append(f"skipped {len(skipped)}:")
        for reason, names in reasons.items():
            shown = ", ".join(sorted(set(names))[:6]) + (", ..." if len(set(names)) > 6 else "")
            parts.append(f"  {reason}: {shown}")
    return "\n".join(parts)


def summary_table(summary: list[dict[str, Any]], cls: str, nshapes: int) -> str:
    body = []
    for s in (x for x in summary if x["class"] == cls):
        body.append([
            s["name"], s["label"] or "-", f"{s['layout']} {s['dtype']}", f"{s['shapes']}/{nshapes}" + (f" ({s['failed']} failed)" if s["failed"] else ""),
            f"{s['geomean_tflops']:.1f}" if s["shapes"] else "-",
            f"{s['geomean_ratio']:.2f}x" if s["geomean_ratio"] else "-",
            f"{s['min_tflops']:.1f}" if s["shapes"] else "-", f"{s['max_tflops']:.1f}" if s["shapes"] else "-",
            f"{s['total_ms']:.2f}",
        ])
    return tabulate(body, headers=["kernel", "variant", "in", "shapes ok", "geomean TFLOPS", "geomean x cuBLAS",
                                   "min", "max", "total ms"], disable_numparse=True)


def topk_lines(summary: list[dict[str, Any]], cls: str, k: int, nshapes: int) -> list[str]:
    best = an.topk(summary, k, cls)
    if not best:
        return [f"top {k}: none (no kernel of this class besides cuBLAS was measured correct at every shape)"]
    lines = [f"top {len(best)} kernels (best variant each) by geomean TFLOPS over {nshapes} shape(s):"]
    for i, s in enumerate(best, 1):
        ratio = f", {s['geomean_ratio']:.2f}x cuBLAS" if s["geomean_ratio"] else ""
        lines.append(f"  {i}. {s['name']}{' (' + s['label'] + ')' if s['label'] else ''}, {s['layout']} {s['dtype']}: "
                     f"{s['geomean_tflops']:.1f} TFLOPS{ratio}")
    return lines


def final_report(records: list[dict[str, Any]], k: int) -> str:
    shapes = an.shapes_in_order(records)
    summary = an.summarize(records, shapes)
    parts = []
    for cls in an.classes_present(records):
        parts += ["", f"== Summary · {an.CLASS_TITLES[cls]} · {len(shapes)} shape(s) ==",
                  summary_table(summary, cls, len(shapes)), *topk_lines(summary, cls, k, len(shapes))]
    return "\n".join(parts)
