"""TFLOPS against the shape: the top-k kernels, the best cuBLAS variant and the per-shape best."""
from __future__ import annotations

from typing import Any

from . import analysis as an

MISSING_MATPLOTLIB = ("--plot needs matplotlib, which is not installed: `pip install -e .[plot]` "
                      "(or `pip install matplotlib`)")


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


def render(data: dict[str, Any], device_name: str, path: str, peak: float | None = None) -> str:
    """Write the PNG (headless Agg backend) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
