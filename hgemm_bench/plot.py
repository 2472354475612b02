"""The bench's images, drawn from results files (no GPU): TFLOPS against the shape (the top-k kernels,
the best cuBLAS variant and the per-shape best); the roofline of every measured kernel and shape
against the device's roofs (devinfo's datasheet figures); a bar chart per ladder; and the x-cuBLAS
heatmap of hg.matmul over each section's shapes. Each image is data first (a plain dict, tested),
then a render into a PNG."""
from __future__ import annotations

import math
import os
from typing import Any

from hgemm_rt.dtypes import ITEMSIZE

from . import analysis as an
from .devinfo import Roofs, roofs
from .matmul_table import SECTIONS
from .results import MATMUL_SCHEMA, SCHEMA

MISSING_MATPLOTLIB = ("plotting needs matplotlib, which is not installed: `pip install -e .[plot]` "
                      "(or `pip install matplotlib`)")
# what write_plots draws from each kind of results file, and the file names (the README links them)
BENCH_IMAGES = {"tflops": "bench_tflops.png", "roofline": "bench_roofline.png", "ladders": "bench_ladders.png"}
MATMUL_IMAGES = {"roofline": "matmul_roofline.png", "heatmap": "matmul_heatmap.png"}


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def shape_label(shape: tuple[int, int, int], square: bool) -> str:
    return str(shape[0]) if square else "x".join(map(str, shape))


def plot_series(records: list[dict[str, Any]], k: int, cls: str | None = None) -> dict[str, Any]:
    """The plot as data: x labels and named series (None where a kernel has no correct measurement).
    The class defaults to HGEMM when present (the library's subject), SGEMM otherwise."""
    classes = an.classes_present(records)
    if cls is None:
        cls = classes[0] if classes else "hgemm"
    rows = [r for r in records if an.klass(r["dtype"]) == cls]
    shapes = an.shapes_in_order(rows)
    square = all(M == N == K for M, N, K in shapes)
    summary = an.summarize(rows, shapes)
    top = an.topk(summary, k, cls)
    at: dict[tuple, dict[tuple, dict]] = {}
    for r in rows:
        if r.get("ok"):
            at.setdefault(an.key_of(r), {})[an.shape_of(r)] = r

    def y(key: tuple[str, str]) -> list[float | None]:
        return [at.get(key, {}).get(s, {}).get("tflops") for s in shapes]

    series = []
    for s in top:
        label = s["name"] + (f" ({s['label']})" if s["label"] else "")
        series.append({"label": label, "kind": "kernel", "y": y((s["name"], s["label"]))})
    cublas = []
    for s in shapes:
        vals = [r for r in rows if r["baseline"] and r.get("ok") and an.shape_of(r) == s]
        cublas.append(max((r["tflops"] for r in vals), default=None))
    if any(v is not None for v in cublas):
        series.append({"label": "cuBLAS (best variant)", "kind": "cublas", "y": cublas})
    best, best_names = [], []
    for s in shapes:
        vals = [r for r in rows if not r["baseline"] and r.get("ok") and an.shape_of(r) == s]
        b = max(vals, key=lambda r: r["tflops"], default=None)
        best.append(b["tflops"] if b else None)
        best_names.append(b["name"] if b else None)
    series.append({"label": "best kernel per shape", "kind": "best", "y": best, "names": best_names})
    return {
        "class": cls, "square": square, "x": [shape_label(s, square) for s in shapes],
        "shapes": [list(s) for s in shapes], "series": series,
    }


def pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render(data: dict[str, Any], device_name: str, path: str, peak: float | None = None) -> str:
    """Write the PNG and return its path."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=110)
    xs = list(range(len(data["x"])))
    styles = {"cublas": dict(color="black", linewidth=2.5, marker="s"),
              "best": dict(color="tab:red", linewidth=2, linestyle="--", marker="*", markersize=10)}
    for s in data["series"]:
        pts = [(x, v) for x, v in zip(xs, s["y"]) if v is not None]
        if not pts:
            continue
        kw = styles.get(s["kind"], dict(linewidth=1.4, marker="o", markersize=4))
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=s["label"], **kw)
    if peak and data["class"] == "hgemm":
        ax.axhline(peak, color="grey", linestyle=":", linewidth=1)
        ax.text(xs[0] if xs else 0, peak, f" fp16 dense peak {peak:.0f}", va="bottom", color="grey", fontsize=8)
    ax.set_xticks(xs)
    ax.set_xticklabels(data["x"], rotation=0 if data["square"] else 30)
    ax.set_xlabel("M = N = K" if data["square"] else "M x N x K")
    ax.set_ylabel("TFLOPS")
    top = max([v for s in data["series"] for v in s["y"] if v is not None] + [peak or 0.0, 1.0])
    ax.set_ylim(0, top * 1.08)
    ax.grid(True, alpha=0.3)
    what = an.CLASS_TITLES[data["class"]]
    ax.set_title(f"{device_name}: {what}, top {sum(s['kind'] == 'kernel' for s in data['series'])} kernels "
                 "vs cuBLAS")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# -- roofline ----------------------------------------------------------------------------------------

def traffic_bytes(M: int, N: int, K: int, dtype: str, out: str) -> int:
    """The least HBM traffic of C = A.B: A and B read once, C written once."""
    return ITEMSIZE[dtype] * (M * K + K * N) + ITEMSIZE[out] * M * N


def point(series: str, r: dict[str, Any], tflops: float, out: str | None = None) -> dict[str, Any]:
    M, N, K = r["M"], r["N"], r["K"]
    return {"series": series, "M": M, "N": N, "K": K, "dtype": r["dtype"], "tflops": tflops,
            "intensity": 2.0 * M * N * K / traffic_bytes(M, N, K, r["dtype"], out or r["dtype"])}


def roofline_points(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every measured (thing, shape) as arithmetic intensity (FLOP per byte of least traffic) and
    TFLOPS. A kernel bench file: each kernel at each shape in its fastest correct variant, series =
    its ladder; cuBLAS's best variant per input dtype, series "cuBLAS". A matmul file: hg.matmul and
    its baseline (cuBLAS or torch.matmul) at each row timed on the GPU."""
    if doc["schema"] == MATMUL_SCHEMA:
        pts = []
        for r in doc["rows"]:
            for key, series in (("hg_tflops", "hg.matmul"), ("cublas_tflops", "cuBLAS"), ("torch_tflops", "torch.matmul")):
                if r.get(key) and r.get("ok", True):
                    pts.append(point(series, r, r[key]))
        return pts
    best: dict[tuple, dict[str, Any]] = {}
    for r in doc["measurements"]:
        if not r.get("ok"):
            continue
        key = ("cuBLAS", r["dtype"]) if r["baseline"] else (r["ladder"], r["name"])
        key += an.shape_of(r)
        if key not in best or r["tflops"] > best[key]["tflops"]:
            best[key] = point(key[0], r, r["tflops"], r["out"])
    return list(best.values())


def roof_lines(r: Roofs, x: list[float]) -> list[tuple[str, list[float]]]:
    """(label, attainable TFLOPS at each intensity in x) for each compute roof under the HBM roof."""
    lines = []
    for label, peak in (("fp16 tensor cores", r.fp16_tensor_tflops), ("fp32 CUDA cores", r.fp32_tflops)):
        if peak:
            lines.append((f"{label} {peak:g} TFLOPS", [min(peak, xi * r.hbm_tbps) if r.hbm_tbps else peak for xi in x]))
    return lines


def render_roofline(points: list[dict[str, Any]], r: Roofs, title: str, path: str) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 6.5), dpi=110)
    ridges = [peak / r.hbm_tbps for peak in (r.fp16_tensor_tflops, r.fp32_tflops) if peak and r.hbm_tbps]
    xs = [p["intensity"] for p in points] or [1.0]
    lo, hi = min(xs + ridges) / 4, max(xs + ridges) * 2  # every ridge point in view
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    for (label, ys), style in zip(roof_lines(r, grid), ("-", "--")):
        ax.plot(grid, ys, color="grey", linestyle=style, linewidth=1.5, label=label)
    if r.hbm_tbps:
        ax.plot([], [], color="none", label=f"HBM {r.hbm_tbps:g} TB/s (the slope)")
    series = list(dict.fromkeys(p["series"] for p in points))
    for i, name in enumerate(series):
        pts = [p for p in points if p["series"] == name]
        style = (dict(color="black", marker="x", s=40) if name == "cuBLAS" else
                 dict(color=f"C{i % 10}", marker="o", s=16, alpha=0.75))
        ax.scatter([p["intensity"] for p in pts], [p["tflops"] for p in pts], label=f"{name} ({len(pts)})", **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte: A and B read once, C written once)")
    ax.set_ylabel("TFLOPS")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# -- a bar chart per ladder ---------------------------------------------------------------------------

def ladder_bars(records: list[dict[str, Any]], size: int) -> dict[str, Any]:
    """Per ladder, TFLOPS of each step at the square closest to size^3 (its fastest correct variant,
    as the README table), its input dtype and its ratio to cuBLAS; beside them the best cuBLAS of each
    input dtype the ladder has."""
    shape = an.pick_shape(records, size)
    rows = an.ladder_rows(records, shape)
    cublas = {r["dtype"]: r["tflops"] for r in rows if r["ladder"] == "cublas"}
    panels: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["ladder"] == "cublas":
            continue
        p = panels.setdefault(r["ladder"], {"ladder": r["ladder"], "steps": [], "tflops": [], "ratio": [],
                                            "names": [], "dtypes": []})
        for k, v in (("steps", r["step"]), ("tflops", r["tflops"]), ("ratio", r["ratio"]), ("names", r["name"]),
                     ("dtypes", r["dtype"])):
            p[k].append(v)
    for p in panels.values():
        p["cublas"] = {d: cublas[d] for d in dict.fromkeys(p["dtypes"]) if d in cublas}
    return {"shape": list(shape), "panels": list(panels.values())}


def render_ladders(data: dict[str, Any], device_name: str, path: str) -> str:
    plt = pyplot()
    panels = data["panels"]
    cols = 2
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.3 * rows), dpi=110, squeeze=False)
    for ax, p in zip(axes.flat, panels):
        xs = list(range(len(p["steps"])))
        color = {d: f"C{i}" for i, d in enumerate(dict.fromkeys(p["dtypes"]))}
        ax.bar(xs, p["tflops"], color=[color[d] for d in p["dtypes"]])
        for x, y, ratio in zip(xs, p["tflops"], p["ratio"]):
            if ratio:
                ax.text(x, y, f"{ratio:.2f}x", ha="center", va="bottom", fontsize=6.5)
        for d, tf in p["cublas"].items():
            ax.axhline(tf, color=color[d], linestyle="--", linewidth=1, label=f"cuBLAS {d}: {tf:.0f}")
        ax.set_xticks(xs)
        ax.set_xticklabels([str(s) for s in p["steps"]])
        ax.set_xlim(-0.6, max(len(xs), 4) - 0.4)  # a one-step ladder keeps a bar's width
        ax.set_ylim(0, max(p["tflops"] + list(p["cublas"].values())) * 1.25)
        ax.set_title(f"{p['ladder']} ({'/'.join(color)})", fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylabel("TFLOPS", fontsize=8)
        if p["cublas"]:
            ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    n = data["shape"][0]
    fig.suptitle(f"{device_name}: each ladder at M=N=K={n}, the fastest variant of each step; x cuBLAS (same input "
                 "type) above each bar", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# -- x cuBLAS heatmap of hg.matmul -----------------------------------------------------------------------

VARYING = (("dtype", ""), ("a_order", "A "), ("b_order", "B "))  # a row's other coordinates, as labelled
HEATMAP_RANGE = (0.5, 2.0)  # x cuBLAS from red to green, the same in every panel (beyond: the end colours)


def heatmap_panel(name: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One section's x cuBLAS on a grid: M down, (N, K) across (with the dtype and operand orders where
    they vary in the section); None where a cell was not measured or has no baseline."""
    varying = [(f, prefix) for f, prefix in VARYING if len({r[f] for r in rows}) > 1]

    def col(r: dict[str, Any]) -> tuple:
        return (r["N"], r["K"], *(r[f] for f, _ in varying))

    cols = sorted({col(r) for r in rows})
    ms = sorted({r["M"] for r in rows})
    grid: list[list[float | None]] = [[None] * len(cols) for _ in ms]
    for r in rows:
        grid[ms.index(r["M"])][cols.index(col(r))] = r.get("ratio")
    labels = [f"{c[0]}x{c[1]}" + "".join(f" {prefix}{v}" for (_, prefix), v in zip(varying, c[2:])) for c in cols]
    title = f"{name}: {SECTIONS[name].title}" if name in SECTIONS else name
    return {"section": name, "title": title, "M": ms, "columns": labels, "ratio": grid}


def heatmap(doc: dict[str, Any]) -> dict[str, Any]:
    """A panel per section of a matmul results file measured against cuBLAS, in the run's order."""
    by_section: dict[str, list[dict[str, Any]]] = {}
    for r in doc["rows"]:
        # a known section by its declared baseline (batched rows time cuBLAS too, beside torch), else by the row
        if SECTIONS[r["section"]].baseline == "cublas" if r["section"] in SECTIONS else "cublas_us" in r:
            by_section.setdefault(r["section"], []).append(r)
    return {"panels": [heatmap_panel(name, rows) for name, rows in by_section.items()]}


def render_heatmap(data: dict[str, Any], device_name: str, path: str) -> str:
    from matplotlib.colors import TwoSlopeNorm

    plt = pyplot()
    panels = data["panels"]
    heights = [len(p["M"]) + 2.2 for p in panels]
    width = max([len(p["columns"]) for p in panels] + [4])
    fig, axes = plt.subplots(len(panels), 1, figsize=(min(4 + 1.6 * width, 20), 0.55 * sum(heights) + 1),
                             dpi=110, squeeze=False, gridspec_kw={"height_ratios": heights})
    for ax, p in zip(axes[:, 0], panels):
        norm = TwoSlopeNorm(vcenter=1.0, vmin=HEATMAP_RANGE[0], vmax=HEATMAP_RANGE[1])
        cells = [[math.nan if v is None else v for v in row] for row in p["ratio"]]
        im = ax.imshow(cells, cmap="RdYlGn", norm=norm, aspect="auto")
        for i, row in enumerate(p["ratio"]):
            for j, v in enumerate(row):
                ax.text(j, i, "-" if v is None else f"{v:.2f}x", ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(p["columns"])))
        ax.set_xticklabels(p["columns"], fontsize=8)
        ax.set_yticks(range(len(p["M"])))
        ax.set_yticklabels([str(m) for m in p["M"]], fontsize=8)
        ax.set_ylabel("M")
        ax.set_xlabel("N x K", fontsize=8)
        ax.set_title(p["title"], fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01)
    fig.suptitle(f"{device_name}: hg.matmul x cuBLAS (>1: hg.matmul faster; best cuBLAS variant, same buffers)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# -- every image of a results file ----------------------------------------------------------------------

def write_plots(doc: dict[str, Any], out_dir: str, *, size: int = 4096, topk: int = 5) -> list[str]:
    """The images of a kernel bench file (BENCH_IMAGES) or a matmul file (MATMUL_IMAGES) into out_dir;
    returns their paths. `size`: the square of the ladder bars; `topk`: kernels in the TFLOPS plot."""
    os.makedirs(out_dir, exist_ok=True)
    dev = doc["device"]
    name = dev["name"]
    points = roofline_points(doc)
    if doc["schema"] == MATMUL_SCHEMA:
        files = {k: os.path.join(out_dir, v) for k, v in MATMUL_IMAGES.items()}
        render_roofline(points, roofs(dev), f"{name}: roofline of hg.matmul, cuBLAS and torch.matmul, every row "
                                            "of bench.py --matmul", files["roofline"])
        render_heatmap(heatmap(doc), name, files["heatmap"])
        return list(files.values())
    if doc["schema"] != SCHEMA:
        raise ValueError(f"no images for a results file of schema {doc['schema']!r}")
    files = {k: os.path.join(out_dir, v) for k, v in BENCH_IMAGES.items()}
    records = doc["measurements"]
    render(plot_series(records, topk), name, files["tflops"], dev.get("fp16_dense_peak_tflops"))
    shapes = len(an.shapes_in_order(records))
    render_roofline(points, roofs(dev), f"{name}: roofline, every kernel (its fastest variant) at {shapes} shapes",
                    files["roofline"])
    render_ladders(ladder_bars(records, size), name, files["ladders"])
    return list(files.values())
