"""The results file: every measurement with the device, driver, build hash and settings. JSON (strict:
no NaN/Infinity; a NaN-poisoned output is rel_error null) and CSV (one line per measurement)."""
from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from . import analysis as an
from .outputs import write_atomically

SCHEMA = "hgemm-bench/1"
MATMUL_SCHEMA = "hgemm-bench-matmul/1"  # `bench.py --matmul`'s file (matmul_section.make_doc)

# field -> allowed types, for every measurement record
MEASUREMENT_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "ladder": (str,), "step": (int,), "layout": (str,), "dtype": (str,), "acc": (str,),
    "out": (str,), "baseline": (bool,), "variant": (dict,), "swizzle": (str,), "label": (str,),
    "swizzle_stride": (int, type(None)), "M": (int,), "N": (int,), "K": (int,),
    "ms": (float,), "ms_min": (float,), "ms_max": (float,), "first_ms": (float,), "iters": (int,),
    "warmup": (int,), "tflops": (float,), "rel_error": (float, type(None)), "checked_rows": (int,),
    "error_bound": (float,), "ok": (bool,), "ratio": (float, type(None)),
}
SKIP_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "label": (str,), "M": (int,), "N": (int,), "K": (int,), "reason": (str,),
}
TOP_FIELDS: dict[str, tuple[type, ...]] = {
    "schema": (str,), "created": (str,), "command": (str,), "complete": (bool,), "device": (dict,),
    "build": (dict,), "settings": (dict,), "measurements": (list,), "skipped": (list,), "summary": (list,),
    "elapsed_s": (float,),
}
DEVICE_FIELDS: dict[str, tuple[type, ...]] = {
    "name": (str,), "cc": (str,), "sm_count": (int,), "l2_bytes": (int,), "max_clock_mhz": (float,),
    "clocks_at_start": (dict,), "fp16_dense_peak_tflops": (float, type(None)), "driver": (dict,),
}
CSV_FIELDS = ["name", "label", "ladder", "step", "layout", "dtype", "acc", "out", "baseline", "M", "N", "K",
              "swizzle_stride", "ms", "ms_min", "ms_max", "iters", "warmup", "tflops", "ratio", "rel_error",
              "error_bound", "ok", "checked_rows"]


def _check(obj: Any, fields: dict[str, tuple[type, ...]], where: str, problems: list[str]) -> None:
    if not isinstance(obj, dict):
        problems.append(f"{where}: not an object")
        return
    for f, types in fields.items():
        if f not in obj:
            problems.append(f"{where}: missing {f!r}")
        elif isinstance(obj[f], bool) and bool not in types:
            problems.append(f"{where}: {f!r} is a bool, wants {[t.__name__ for t in types]}")
        elif not isinstance(obj[f], types):
            problems.append(f"{where}: {f!r}={obj[f]!r} is not {'/'.join(t.__name__ for t in types)}")


def validate(doc: Any) -> list[str]:
    """Problems with a results document ([] when it matches the schema and is self-consistent)."""
    problems: list[str] = []
    _check(doc, TOP_FIELDS, "results", problems)
    if problems:
        return problems
    if doc["schema"] != SCHEMA:
        problems.append(f"schema {doc['schema']!r} is not {SCHEMA!r}")
    _check(doc["device"], DEVICE_FIELDS, "device", problems)
    if not isinstance(doc["build"].get("hash"), str):
        problems.append("build: missing 'hash'")
    for i, m in enumerate(doc["measurements"]):
        mine: list[str] = []
        _check(m, MEASUREMENT_FIELDS, f"measurements[{i}]", mine)
        problems += mine
        if not mine:  # the fields are there and typed: check that they agree with each other
            flops = 2.0 * m["M"] * m["N"] * m["K"]
            if not (m["ms"] > 0 and math.isclose(m["tflops"], flops / (m["ms"] * 1e-3) / 1e12, rel_tol=1e-6)):
                problems.append(f"measurements[{i}]: tflops {m['tflops']} does not follow from ms {m['ms']}")
            if not m["ms_min"] <= m["ms"] <= m["ms_max"]:
                problems.append(f"measurements[{i}]: median {m['ms']} outside [{m['ms_min']}, {m['ms_max']}]")
            if m["ok"] and (m["rel_error"] is None or m["rel_error"] > m["error_bound"]):
                problems.append(f"measurements[{i}]: ok but rel_error {m['rel_error']} > bound {m['error_bound']}")
        if len(problems) > 20:
            break
    for i, s in enumerate(doc["skipped"]):
        _check(s, SKIP_FIELDS, f"skipped[{i}]", problems)
    shapes = doc["settings"].get("shapes")
    if not isinstance(shapes, list) or not all(isinstance(s, list) and len(s) == 3 for s in shapes):
        problems.append("settings: 'shapes' must be a list of [M, N, K]")
    return problems


def make_doc(*, device: dict, build: dict, settings: dict, command: str, created: str,
             records: list[dict], skipped: list[dict], complete: bool, elapsed_s: float) -> dict:
    shapes = an.shapes_in_order(records)
    return {
        "schema": SCHEMA, "created": created, "command": command, "complete": complete,
        "elapsed_s": float(elapsed_s), "device": device, "build": build, "settings": settings,
        "measurements": records, "skipped": skipped, "summary": _finite(an.summarize(records, shapes)),
    }


def _finite(x: Any) -> Any:
    """NaN/inf -> None, so that the file is strict JSON."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


RECORD_LISTS = ("measurements", "skipped", "summary")


def dumps(doc: dict, rows: tuple[str, ...] = RECORD_LISTS) -> str:
    """Strict JSON, one record of each list in `rows` per line (compact, and diffs read well)."""
    doc = _finite(doc)
    head = {k: v for k, v in doc.items() if k not in rows}
    parts = [json.dumps(head, indent=1, allow_nan=False)[:-2]]
    for k in rows:
        if k not in doc:
            continue
        items = ",\n".join("  " + json.dumps(x, allow_nan=False) for x in doc[k])
        parts.append(f',\n "{k}": [\n{items}\n ]' if items else f',\n "{k}": []')
    return "".join(parts) + "\n}\n"


def write_json(doc: dict, path: str, rows: tuple[str, ...] = RECORD_LISTS) -> None:
    """The whole file at once (outputs.write_atomically): a run rewrites it as it goes."""
    write_atomically(path, dumps(doc, rows))


def write_csv(doc: dict, path: str) -> None:
    dev = doc["device"]
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["device", "driver", "build_hash"] + CSV_FIELDS)
    for m in doc["measurements"]:
        w.writerow([dev["name"], dev["driver"].get("nvidia") or dev["driver"].get("cuda"), doc["build"]["hash"]]
                   + ["" if m.get(k) is None else m[k] for k in CSV_FIELDS])
    write_atomically(path, f.getvalue(), newline="")


def load(path: str) -> dict:
    with open(path) as f:
        doc = json.load(f)
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path} is not a bench results file: " + "; ".join(problems[:5]))
    return doc


def load_any(path: str) -> dict:
    """A kernel bench results file (checked as load does) or a matmul results file."""
    with open(path) as f:
        doc = json.load(f)
    if isinstance(doc, dict) and doc.get("schema") == MATMUL_SCHEMA:
        if not isinstance(doc.get("rows"), list) or not isinstance(doc.get("device"), dict):
            raise ValueError(f"{path}: a matmul results file needs its 'device' and 'rows'")
        return doc
    return load(path)
