"""The build manifest the tests derive their cases from (hgemm_bench.kernel_checks decides the shapes
each kernel is checked at, so adding a kernel needs no test edits; None where nothing is built), and
the shapes each kernel must refuse."""
from __future__ import annotations

import os
from pathlib import Path

from hgemm_bench.kernel_checks import round_up, tile_dims
from hgemm_rt.manifest import Manifest

ROOT = Path(__file__).resolve().parent.parent


def load_manifest_or_none() -> Manifest | None:
    try:
        return Manifest.load(os.environ.get("HGEMM_ARTIFACTS") or ROOT / "artifacts")
    except Exception:
        return None


def refusal_shapes(spec) -> list[tuple[str, int, int, int]]:
    """For each dimension with a requirement, a shape that breaks only it."""
    d = tile_dims(spec)
    base = {k: round_up(2 * t, r) for k, (t, r) in d.items()}
    out = []
    for k, (_, r) in d.items():
        if r > 1:
            bad = dict(base)
            bad[k] = base[k] + r // 2 if r // 2 else base[k] + 1
            out.append((f"bad_{k}", bad["M"], bad["N"], bad["K"]))
    return out
