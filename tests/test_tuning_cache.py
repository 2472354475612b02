"""The tuning cache's file on the CPU, as concurrent and careless users treat it: processes recording at
once keep every winner, a cache that cannot be written still applies the winner in the process, a bad
entry is left out with a warning instead of failing every kernel="auto" call, a build hash never
reaches the file name unsanitised, a read-only file is left as it is, new files follow the umask and the folder
$XDG_CACHE_HOME."""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import stat
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from hgemm_rt import tuning
from hgemm_rt.problem import Route

HASH = "0123456789abcdef"
INFO = SimpleNamespace(name="NVIDIA H100 80GB HBM3")
MANIFEST = SimpleNamespace(build_hash=HASH, kernels={"matmul_k": SimpleNamespace(variants={"stages": (3, 4)})})
ROUTE = Route("matmul_k", False, (("splits", 2),))


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HGEMM_CACHE_DIR", str(tmp_path / "cache"))
    tuning.forget()
    yield tmp_path / "cache"
    tuning.forget()


def results(route: Route = ROUTE, us: float = 10.0) -> list[dict]:
    return [{"route": route, "us": us}]


def write_file(entries: dict) -> None:
    """A cache file with these raw entries and a valid checksum (the format tuning.save writes)."""
    path = tuning.cache_path(INFO.name, HASH)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()
    path.write_text(json.dumps({"schema": tuning.SCHEMA, "device": INFO.name, "build_hash": HASH,
                                "entries": entries, "sha256": digest}))


def _record_one(i: int, barrier) -> None:
    tuning.forget()
    barrier.wait()  # all at once
    tuning.record(INFO, MANIFEST, f"key{i}", results(us=1.0 + i))


def test_processes_recording_at_once_keep_every_entry():
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(8)
    procs = [ctx.Process(target=_record_one, args=(i, barrier)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 8
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = tuning.load(INFO.name, HASH, MANIFEST)
    assert sorted(got) == [f"key{i}" for i in range(8)]
    assert got["key3"]["us"] == 4.0


def test_an_unwritable_cache_folder_warns_and_keeps_the_winner_in_the_process(tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("HGEMM_CACHE_DIR", str(blocker / "cache"))  # a folder that cannot be made
    tuning.forget()
    with pytest.warns(RuntimeWarning, match="not saved.*applies in this process only"):
        assert tuning.record(INFO, MANIFEST, "k", results()) is None
    assert tuning.lookup(INFO, MANIFEST, "k") == ROUTE


def test_a_read_only_cache_file_is_left_as_it_is(cache_dir):
    tuning.record(INFO, MANIFEST, "old", results())
    path = tuning.cache_path(INFO.name, HASH)
    before = path.read_text()
    path.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    other = Route("matmul_k", False, (("stages", 4),))
    with pytest.warns(RuntimeWarning, match="read-only"):
        assert tuning.record(INFO, MANIFEST, "new", results(other)) is None
    assert path.read_text() == before
    assert tuning.lookup(INFO, MANIFEST, "new") == other  # (in this process)


@pytest.mark.parametrize("bad", [
    [1, 2],                                                         # a route that is not an object
    "matmul_k",
    {"kernel": 5, "transpose": False, "options": {}},               # wrong types
    {"kernel": "matmul_k", "transpose": "no", "options": {}},
    {"kernel": "matmul_k", "transpose": False, "options": [["splits", 2]]},
    {"kernel": "matmul_k", "transpose": False, "options": {"splits": [2]}},
    {"kernel": "no_such_kernel", "transpose": False, "options": {}},  # not runnable on this build
])
def test_a_malformed_entry_is_left_out_with_a_warning_and_the_others_are_used(bad):
    good = {"route": ROUTE.to_json(), "us": 5.0, "tried": []}
    write_file({"bad": {"route": bad, "us": 1.0}, "good": good})
    with pytest.warns(RuntimeWarning, match="1 entry not trusted"):
        assert tuning.lookup(INFO, MANIFEST, "good") == ROUTE
    assert tuning.lookup(INFO, MANIFEST, "bad") is None  # and no exception at any later call


@pytest.mark.parametrize("entry", [5, {"us": 1.0}, {"route": ROUTE.to_json(), "us": "fast"},
                                   {"route": ROUTE.to_json(), "us": float("nan")}, {"route": ROUTE.to_json()}])
def test_an_entry_that_is_no_entry_is_left_out(entry):
    write_file({"bad": entry, "good": {"route": ROUTE.to_json(), "us": 5.0}})
    with pytest.warns(RuntimeWarning, match="not trusted"):
        assert set(tuning.load(INFO.name, HASH, MANIFEST)) == {"good"}


def test_a_record_rewrites_the_file_without_the_entries_it_cannot_trust():
    write_file({"bad": {"route": [1], "us": 1.0}})
    with pytest.warns(RuntimeWarning):
        tuning.record(INFO, MANIFEST, "k", results())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(tuning.load(INFO.name, HASH, MANIFEST)) == {"k"}


@pytest.mark.parametrize("build_hash", ["../../etc/passwd", "/abs/path", "ab/../cd", "", "xyz", "a" * 40])
def test_a_build_hash_reaches_the_file_name_as_hex_digits_only(build_hash, cache_dir):
    path = tuning.cache_path("GPU", build_hash)
    assert path.parent == cache_dir
    digest = path.name[len("autotune-GPU-"):-len(".json")]
    assert digest == "nohash" or (set(digest) <= set("0123456789abcdefABCDEF") and len(digest) <= 16)


@pytest.mark.parametrize("damage", ["a folder", "binary", "deep"])
def test_a_cache_file_that_cannot_be_read_as_one_warns_and_starts_empty(damage):
    path = tuning.cache_path(INFO.name, HASH)
    path.parent.mkdir(parents=True, exist_ok=True)
    if damage == "a folder":
        path.mkdir()
    else:
        path.write_bytes(b"\xff\xfe\x00garbage" if damage == "binary" else b"[" * 100000)
    with pytest.warns(RuntimeWarning, match="not trusted"):
        assert tuning.lookup(INFO, MANIFEST, "k") is None


def test_a_new_cache_file_follows_the_umask_and_a_replaced_one_keeps_its_mode(cache_dir):
    import os

    old = os.umask(0o027)
    try:
        path = tuning.record(INFO, MANIFEST, "k", results())
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # (mkstemp's 0600 would not follow it)
    path.chmod(0o644)
    tuning.record(INFO, MANIFEST, "k2", results())
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_the_cache_folder_honours_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.delenv("HGEMM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert tuning.cache_dir() == tmp_path / "xdg" / "hgemm"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/dir")  # (the spec: a relative path is ignored)
    assert tuning.cache_dir() == Path.home() / ".cache" / "hgemm"
    monkeypatch.setenv("HGEMM_CACHE_DIR", str(tmp_path / "mine"))
    assert tuning.cache_dir() == tmp_path / "mine"
