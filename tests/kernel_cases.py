"""Test cases derived from the build manifest: one place decides which shapes each kernel is
checked at, so adding a kernel needs no test edits."""
from __future__ import annotations

import os
from pathlib import Path

from hgemm_rt.manifest import KernelSpec, Manifest

ROOT = Path(__file__).resolve().parent.parent


def load_manifest_or_none() -> Manifest | None:
    try:
        return Manifest.load(os.environ.get("HGEMM_ARTIFACTS") or ROOT / "artifacts")
    except Exception:
        return None


def _dims(spec: KernelSpec) -> dict[str, tuple[int, int]]:
    """(tile size, required multiple) per dimension."""
    BM, BN, BK = spec.tile
    return {d: (t, spec.require.get(d, 1)) for d, t in (("M", BM), ("N", BN), ("K", max(BK, 16)))}


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def shapes_for(spec: KernelSpec) -> list[tuple[str, int, int, int]]:
    """Named (label, M, N, K): aligned, one step above and one below a tile multiple (a step is the
    kernel's required multiple, or 1 where it has none), K below one K tile, and M=1 / N=1 where the kernel accepts them."""
    d = _dims(spec)
    aligned = {k: _round_up(2 * t, r) for k, (t, r) in d.items()}
    ragged = {k: (aligned[k] + r if r > 1 else aligned[k] + 1) for k, (t, r) in d.items()}
    below = {k: aligned[k] - r for k, (t, r) in d.items()}  # one step below a tile multiple
    cases = [("aligned", aligned["M"], aligned["N"], aligned["K"]),
             ("ragged", ragged["M"], ragged["N"], ragged["K"]),
             ("below", below["M"], below["N"], below["K"])]
    k_small = d["K"][1] if d["K"][1] > 1 else 7
    if k_small < d["K"][0]:
        cases.append(("k_small", aligned["M"], aligned["N"], k_small))
    if d["M"][1] == 1:
        cases.append(("m1", 1, ragged["N"], ragged["K"]))
    if d["N"][1] == 1:
        cases.append(("n1", ragged["M"], 1, ragged["K"]))
    if spec.grid == "persistent":  # many more tiles than SMs: each CTA loops over several, ragged edges
        cases.append(("many_tiles", _round_up(15 * d["M"][0] + 7, d["M"][1]),
                      _round_up(12 * d["N"][0] + 3, d["N"][1]), _round_up(3 * d["K"][0] + 5, d["K"][1])))
    return cases


def refusal_shapes(spec: KernelSpec) -> list[tuple[str, int, int, int]]:
    """For each dimension with a requirement, a shape that breaks only it."""
    d = _dims(spec)
    base = {k: _round_up(2 * t, r) for k, (t, r) in d.items()}
    out = []
    for k, (_, r) in d.items():
        if r > 1:
            bad = dict(base)
            bad[k] = base[k] + r // 2 if r // 2 else base[k] + 1
            out.append((f"bad_{k}", bad["M"], bad["N"], bad["K"]))
    return out
