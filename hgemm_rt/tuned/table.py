"""A shipped tuning table: the measured best route per problem bucket on one kind of GPU, and the lookup matmul makes.

    HGEMM_TUNED=0 python app.py        # the cost model's choices, table or not (for A/B runs)

A table is written by `hgemm-tune` (hgemm_bench/tune.py) on the GPU it describes, and shipped in the wheel as
hgemm_rt/tuned/<device key>.json, the key being tuning.device_key of the GPU's name (the one naming of the
tuning cache's files: NVIDIA_H200.json for "NVIDIA H200"). No table is shipped yet: the H200's is produced by
`hgemm-tune` on an H200 and committed as data, reviewed in diffs.

The file (SCHEMA 1), JSON:
    schema, device (DeviceInfo.name), cc [major, minor], sm_count, build_hash (the manifest's, of the build it was
    measured with), date (UTC, YYYY-MM-DD), version (hgemm_rt's), margin (the noise margin a winner had to beat the
    cost model's pick by), sections (the bench sections measured), entries {bucket key: entry}
    entry: dtype, acc (the accumulate= request), layout, epilogue, batch, M, N, K (the measured shape: M, N, K
    exact, batch the matrices), route (Route.to_json), us (the winner's GPU microseconds), model_route (str of
    the cost model's pick), model_us (its microseconds; null where it did not pass its check)

The bucket of a problem: its class (dtype, acc, layout, epilogue) exactly; N and K exactly (a layer's weights);
M and the batch count each in power-of-two buckets, the power of two nearest in log2 (M = 3 and 5 in bucket 4, 6 in 8,
1000 in 1024; an unbatched problem: batch 1). layout: per operand A, B, C its order, "r" (row-major: unit column
stride), "c" (column-major: unit row stride) or "s" (neither), followed by "0" where a batched problem broadcasts
it ("ArBcCr", "ArBc0Cr"). epilogue: the Problem key's mode ("plain": alpha 1, beta 0; "alpha"; "axpby": beta
reads C), with "+epi<flags>" where a bias or activation is fused (epilogue.Epilogue.flags).

The lookup: the entry of the problem's bucket, else the nearest bucket of its class, N, K and batch bucket
along M, at most NEAREST_STEPS powers of two away (ties: the entry whose measured M is nearer in log2, then the
smaller). Its route is matmul's where this build runs it (tuning.route_runs) and planner.recipe_for accepts it
for the exact problem; otherwise the cost model chooses, silently (a build without the kernel, a shape the route
cannot take). A table for another GPU (its cc or SM count not this one's) is not used. A file that is no table
(bad JSON, schema, a malformed entry, written for another device) warns once and is not used.
"""
from __future__ import annotations

import datetime
import json
import math
import os
import threading
import warnings
from pathlib import Path
from typing import Any, NamedTuple

from .. import tuning
from .._version import __version__
from ..manifest import Manifest
from ..problem import Problem, Route

SCHEMA = 1
ENV = "HGEMM_TUNED"  # "0": the table is not consulted
NEAREST_STEPS = 1  # the farthest M bucket (in powers of two) a problem takes an entry's route from
TABLE_DIR = Path(__file__).resolve().parent

_lock = threading.Lock()
_loaded: dict[str, "Table | None"] = {}  # path -> the validated table (None: missing or not trusted)
_warned_env: set[str] = set()


class Bucket(NamedTuple):
    dtype: str
    acc: str
    layout: str
    epilogue: str
    batch: int  # power-of-two bucket of the batch count
    m: int  # power-of-two bucket of M
    N: int
    K: int

    @property
    def key(self) -> str:
        return f"{self.dtype}/{self.acc}/{self.layout}/{self.epilogue}/b{self.batch}/m{self.m}/n{self.N}/k{self.K}"

    @property
    def row(self) -> tuple:
        """Everything but M: the entries a problem's nearest bucket is chosen among."""
        return self.dtype, self.acc, self.layout, self.epilogue, self.batch, self.N, self.K


class Table(NamedTuple):
    device: str
    cc: tuple[int, int]
    sm_count: int
    entries: dict[str, dict]  # bucket key -> entry (route: a Route)
    rows: dict[tuple, list[tuple[int, int, str]]]  # Bucket.row -> [(m bucket, measured M, key)]


def power_bucket(n: int) -> int:
    """The power of two nearest to n in log2 (1 for n <= 1)."""
    return 1 << round(math.log2(n)) if n > 1 else 1


def layout_of(prob: Problem) -> str:
    def order(v: Any) -> str:
        o = "r" if v.cs == 1 else "c" if v.rs == 1 else "s"
        return o + ("0" if prob.batched and not v.batched else "")
    return f"A{order(prob.a)}B{order(prob.b)}C{order(prob.c)}"


def epilogue_of(prob: Problem) -> str:
    mode = "plain" if prob.plain else ("alpha" if prob.beta_zero else "axpby")
    return mode + (f"+epi{prob.epi.flags}" if prob.epi is not None else "")


def bucket_of(prob: Problem) -> Bucket:
    return Bucket(prob.dtype, prob.acc, layout_of(prob), epilogue_of(prob), power_bucket(prob.batch_count),
                  power_bucket(prob.M), prob.N, prob.K)


def table_path(device_name: str, folder: Path | None = None) -> Path:
    """Where the table of the GPU named `device_name` is (TABLE_DIR: the package's folder)."""
    return (folder or TABLE_DIR) / f"{tuning.device_key(device_name)}.json"


# ---------------------------------------------------------------------------------------------------
# the document (hgemm-tune writes it) and its checks
# ---------------------------------------------------------------------------------------------------

def entry_of(prob: Problem, route: Route, us: float, model_route: Route, model_us: float | None) -> tuple[str, dict]:
    """(bucket key, entry) for the winner `route` measured on `prob`, against the cost model's pick."""
    b = bucket_of(prob)
    return b.key, {"dtype": b.dtype, "acc": b.acc, "layout": b.layout, "epilogue": b.epilogue,
                   "batch": prob.batch_count, "M": prob.M, "N": prob.N, "K": prob.K, "route": route.to_json(),
                   "us": round(us, 3), "model_route": str(model_route),
                   "model_us": None if model_us is None or not math.isfinite(model_us) else round(model_us, 3)}


def table_doc(entries: dict[str, dict], device: str, cc: tuple[int, int], sm_count: int, build_hash: str,
              sections: list[str], margin: float, date: str | None = None) -> dict:
    """The file's document (entries as entry_of makes them); `date` defaults to today (UTC)."""
    return {"schema": SCHEMA, "device": device, "cc": list(cc), "sm_count": sm_count, "build_hash": build_hash,
            "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
            "version": __version__, "margin": margin, "sections": sorted(set(sections)), "entries": entries}


def _count(x: Any, what: str) -> int:
    if type(x) is not int or x < 1:
        raise ValueError(f"{what} {x!r} is not a positive integer")
    return x


def parse_entry(key: Any, e: Any) -> tuple[Bucket, dict]:
    """One entry checked: its fields' types, its key the bucket of its own shape; ValueError saying what is wrong."""
    if not isinstance(e, dict):
        raise ValueError(f"entry {key!r} is not an object")
    if not all(isinstance(e.get(f), str) for f in ("dtype", "acc", "layout", "epilogue")):
        raise ValueError(f"entry {key!r}: dtype, acc, layout and epilogue must be strings")
    M, N, K, batch = (_count(e.get(f), f"entry {key!r}: {f}") for f in ("M", "N", "K", "batch"))
    b = Bucket(e["dtype"], e["acc"], e["layout"], e["epilogue"], power_bucket(batch), power_bucket(M), N, K)
    if key != b.key:
        raise ValueError(f"entry {key!r} is filed under another key than its shape's bucket {b.key!r}")
    if not isinstance(e.get("route"), dict):
        raise ValueError(f"entry {key!r} has no route object")
    route = Route.from_json(e["route"])
    us = tuning.positive_us(e.get("us"), f"entry {key!r}: us")
    if e.get("model_us") is not None:
        tuning.positive_us(e["model_us"], f"entry {key!r}: model_us")
    return b, {**e, "route": route, "us": us}


def parse_table(doc: Any) -> Table:
    """A table document checked whole; ValueError saying what is wrong."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"schema {doc.get('schema') if isinstance(doc, dict) else None!r} != {SCHEMA}")
    cc = doc.get("cc")
    if not isinstance(doc.get("device"), str) or not (isinstance(cc, list) and len(cc) == 2 and
                                                      all(type(x) is int for x in cc)):
        raise ValueError(f"device {doc.get('device')!r} / cc {cc!r} is not a GPU name and a [major, minor] pair")
    sm_count = _count(doc.get("sm_count"), "sm_count")
    if not isinstance(doc.get("build_hash"), str) or not isinstance(doc.get("date"), str):
        raise ValueError("build_hash and date must be strings")
    raw = doc.get("entries")
    if not isinstance(raw, dict):
        raise ValueError("entries is not an object")
    entries: dict[str, dict] = {}
    rows: dict[tuple, list[tuple[int, int, str]]] = {}
    for key, e in raw.items():
        b, entry = parse_entry(key, e)
        entries[key] = entry
        rows.setdefault(b.row, []).append((b.m, entry["M"], key))
    return Table(doc["device"], (cc[0], cc[1]), sm_count, entries, rows)


def read_table(path: Path) -> Table:
    """The table in `path`, checked; OSError where it cannot be read, ValueError where it is no table."""
    try:
        return parse_table(json.loads(path.read_text()))
    except RecursionError as exc:
        raise ValueError("nested too deeply") from exc


# ---------------------------------------------------------------------------------------------------
# the lookup
# ---------------------------------------------------------------------------------------------------

def enabled() -> bool:
    """HGEMM_TUNED: "0" turns the table off, unset, "" or "1" on; another value warns once and leaves it on."""
    value = os.environ.get(ENV, "").strip()
    if value not in ("", "0", "1") and value not in _warned_env:
        _warned_env.add(value)
        warnings.warn(f"{ENV}={value!r}: use 0 (the cost model's choices) or 1 (the shipped table, the default); "
                      "the table stays on", RuntimeWarning, stacklevel=4)
    return value != "0"


def _table(device_name: str) -> Table | None:
    path = table_path(device_name)
    with _lock:
        if str(path) in _loaded:
            return _loaded[str(path)]
        table = None
        try:
            table = read_table(path)
            if table.device != device_name:
                raise ValueError(f"written for {table.device!r}")
        except (FileNotFoundError, NotADirectoryError):
            pass  # (no table for this GPU: the cost model chooses)
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:  # (json's errors are ValueErrors)
            table = None
            warnings.warn(f"hgemm shipped tuning table {path} is not used ({exc}); matmul's choices are the cost "
                          "model's", RuntimeWarning, stacklevel=4)
        _loaded[str(path)] = table
        return table


def nearest(table: Table, b: Bucket, M: int) -> dict | None:
    """The entry of bucket `b` (a problem's, M its rows), else the nearest along M (the module docstring); None
    beyond NEAREST_STEPS."""
    hit = table.entries.get(b.key)
    if hit is not None:
        return hit
    steps = lambda m: abs(round(math.log2(m)) - round(math.log2(b.m)))  # noqa: E731
    near = [(steps(m), abs(math.log2(measured) - math.log2(M)), measured, key)
            for m, measured, key in table.rows.get(b.row, ())
            if steps(m) <= NEAREST_STEPS]
    return table.entries[min(near)[3]] if near else None


def lookup(info: Any, manifest: Manifest, prob: Problem) -> Route | None:
    """The shipped table's route for `prob` on the GPU `info` (DeviceInfo: name, cc, sm_count) where this build can
    run it; None where HGEMM_TUNED=0, there is no table, no bucket near enough, or the build lacks the route."""
    if prob.group or prob.M < 1 or not enabled():
        return None  # (grouped_matmul's problems are not tuned; nor are empty ones)
    table = _table(info.name)
    if table is None or table.cc != tuple(info.cc) or table.sm_count != info.sm_count:
        return None
    entry = nearest(table, bucket_of(prob), prob.M)
    if entry is None or not tuning.route_runs(entry["route"], manifest):
        return None
    return entry["route"]


def forget() -> None:
    """Drop the tables read so far (the next lookup reads and checks the files again)."""
    with _lock:
        _loaded.clear()
        _warned_env.clear()
