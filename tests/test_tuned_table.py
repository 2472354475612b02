"""The shipped tuning tables on the CPU (hgemm_rt/tuned/): every shipped entry names a route this build runs; matmul
takes a table's route for the problems of its buckets (the nearest along M), and the cost model's choice for the
rest, for a route that cannot run the problem, with HGEMM_TUNED=0, on a GPU without a table; a malformed table
warns once and is never an error inside matmul. hgemm-tune's pure parts: what it keeps, its flags, its file."""
from __future__ import annotations

import importlib
import json
import logging
import math
import tomllib
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest

from hgemm_bench import tune
from hgemm_rt import planner, tuned, tuning
from hgemm_rt.problem import Problem, Route, View
from hgemm_rt.tuned import table
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
ROOT = Path(__file__).resolve().parent.parent
plans_mod = importlib.import_module("hgemm_rt.plans")  # (the package's `plans` is the cache object)
INFO = SimpleNamespace(name="NVIDIA H200", cc=(9, 0), sm_count=132)
needs_build = pytest.mark.skipif(MANIFEST is None, reason="no kernel build (python build_kernels.py)")


def linear(M: int, N: int = 4096, K: int = 4096, dtype: str = "f16") -> Problem:
    """x (M x K) @ W^T with W (N x K) as nn.Linear holds it: B column-major."""
    return Problem(dtype, "f32", View.make("A", M, K, K, 1, 256), View.make("B", K, N, 1, K, 256),
                   View.make("C", M, N, N, 1, 256), plain=True, beta_zero=True)


@pytest.fixture(autouse=True)
def table_dir(tmp_path, monkeypatch):
    """Tables read from an empty folder of the test's own, and none remembered across tests."""
    monkeypatch.setattr(table, "TABLE_DIR", tmp_path)
    monkeypatch.delenv(table.ENV, raising=False)
    tuned.forget()
    yield tmp_path
    tuned.forget()


def ranked(prob: Problem) -> list:
    return [r for _us, r in planner.ranked_recipes(prob, MANIFEST, INFO.cc, INFO.sm_count)]


def ship(entries: list[tuple[Problem, Route]], info=INFO, **doc) -> Path:
    """A table of `info`'s GPU in the test's folder, one entry per (problem, route), written as hgemm-tune does."""
    rows = dict(table.entry_of(p, r, 10.0, Route("model"), 11.0) for p, r in entries)
    path = table.table_path(info.name)
    tune.write_table(path, {**table.table_doc(rows, info.name, info.cc, info.sm_count, "abc", ["models"], 0.02),
                            **doc})
    tuned.forget()
    return path


def planned(monkeypatch, prob: Problem, info=INFO):
    """(the recipe matmul plans for `prob` on `info`'s GPU, the route log's line): plans.PlanCache.recipe with the
    device and build patched in and an empty user cache."""
    monkeypatch.setattr(plans_mod, "get_device", lambda device: SimpleNamespace(info=info))
    monkeypatch.setattr(plans_mod, "get_registry", lambda: SimpleNamespace(manifest=MANIFEST))
    monkeypatch.setattr(plans_mod.tuning, "lookup", lambda info, manifest, key: None)
    logger = logging.getLogger("hgemm_rt.route")
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        recipe = plans_mod.PlanCache().recipe(prob, 0, None)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    return recipe, lines[-1]


def assert_cost_models_choice(monkeypatch, prob: Problem, info=INFO) -> None:
    recipe, line = planned(monkeypatch, prob, info)
    assert recipe.route == ranked(prob)[0].route and line.endswith("(the cost model)")


# -- the tables in the package ---------------------------------------------------------------------------------

SHIPPED = sorted(Path(table.__file__).resolve().parent.glob("*.json"))


@needs_build
@pytest.mark.skipif(not SHIPPED, reason="no tuning table is shipped yet (hgemm-tune writes one on its GPU)")
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_entry_of_a_shipped_table_names_a_kernel_and_options_this_build_has(path):
    t = table.read_table(path)
    assert path.name == f"{tuning.device_key(t.device)}.json"
    bad = [f"{key}: {e['route']}" for key, e in t.entries.items() if not tuning.route_runs(e["route"], MANIFEST)]
    assert not bad, bad


def test_the_wheel_ships_the_tables_folder_and_the_tune_command():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = project["tool"]["setuptools"]
    assert "hgemm_rt.tuned" in setuptools["packages"]
    assert "*.json" in setuptools["package-data"]["hgemm_rt.tuned"]
    module, func = project["project"]["scripts"]["hgemm-tune"].split(":")
    assert getattr(importlib.import_module(module), func) is tune.main


# -- the lookup ------------------------------------------------------------------------------------------------

@needs_build
def test_a_problem_of_an_entrys_bucket_runs_its_route_and_the_log_names_the_table(monkeypatch):
    prob = linear(512)
    route = ranked(prob)[-1].route  # (the cost model's last choice: never its pick)
    assert route != ranked(prob)[0].route
    ship([(prob, route)])
    assert tuned.lookup(INFO, MANIFEST, prob) == route
    recipe, line = planned(monkeypatch, linear(600))  # (the same bucket: 512)
    assert recipe.route == route and line.endswith("(the shipped table)")


@needs_build
def test_the_users_tuning_cache_comes_before_the_table(monkeypatch):
    prob = linear(512)
    shipped, mine = ranked(prob)[-1].route, ranked(prob)[1].route
    ship([(prob, shipped)])
    monkeypatch.setattr(plans_mod, "get_device", lambda device: SimpleNamespace(info=INFO))
    monkeypatch.setattr(plans_mod, "get_registry", lambda: SimpleNamespace(manifest=MANIFEST))
    monkeypatch.setattr(plans_mod.tuning, "lookup", lambda info, manifest, key: mine)
    assert plans_mod.PlanCache().recipe(prob, 0, None).route == mine


@needs_build
@pytest.mark.parametrize("other", [linear(512, N=4096 + 64), linear(512, dtype="bf16"), linear(8192)],
                         ids=["another N", "another dtype", "M four buckets away"])
def test_a_problem_without_a_near_bucket_gets_the_cost_models_choice(monkeypatch, other):
    prob = linear(512)
    ship([(prob, ranked(prob)[-1].route)])
    assert tuned.lookup(INFO, MANIFEST, other) is None
    assert_cost_models_choice(monkeypatch, other)


@needs_build
def test_a_route_that_cannot_run_the_problem_is_passed_over_silently(monkeypatch):
    prob = linear(512)
    bf16 = ranked(linear(512, dtype="bf16"))[0].route  # (a kernel this build has, of another dtype)
    ship([(prob, bf16)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_cost_models_choice(monkeypatch, prob)


@needs_build
def test_a_route_this_build_lacks_is_not_offered():
    prob = linear(512)
    ship([(prob, Route("no_such_kernel"))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuned.lookup(INFO, MANIFEST, prob) is None


@needs_build
def test_the_nearest_bucket_along_m():
    routes = [r.route for r in ranked(linear(512))[:3]]
    ship([(linear(512), routes[0]), (linear(2048), routes[1]), (linear(16), routes[2])])
    got = {M: tuned.lookup(INFO, MANIFEST, linear(M)) for M in (512, 700, 1000, 1100, 3000, 4096, 8192, 8, 32, 64)}
    assert got[512] == got[700] == routes[0]  # (700: bucket 512)
    assert got[1000] == routes[0] and got[1100] == routes[1]  # (bucket 1024, one step from both: the nearer M)
    assert got[3000] == got[4096] == routes[1]  # (buckets 2048 and 4096)
    assert got[8192] is None  # (two steps from 2048)
    assert got[8] == got[32] == routes[2] and got[64] is None


def test_buckets_are_powers_of_two_in_m_and_exact_in_n_and_k():
    assert [table.power_bucket(n) for n in (1, 2, 3, 5, 6, 11, 12, 1000, 1500)] == [1, 2, 4, 4, 8, 8, 16, 1024, 2048]
    b = table.bucket_of(linear(700, 4097, 3000))
    assert (b.m, b.N, b.K, b.layout, b.epilogue, b.batch) == (512, 4097, 3000, "ArBcCr", "plain", 1)
    scaled = Problem("f16", "f32", linear(8).a, linear(8).b, linear(8).c, plain=False, beta_zero=False)
    assert table.bucket_of(scaled).epilogue == "axpby"
    broadcast = Problem("f16", "f32", View.make("A", 8, 64, 64, 1, 256, (512,)), View.make("B", 64, 32, 32, 1, 256, (0,)),
                        View.make("C", 8, 32, 32, 1, 256, (256,)), plain=True, beta_zero=True, batch=(6,))
    assert table.bucket_of(broadcast).layout == "ArBr0Cr" and table.bucket_of(broadcast).batch == 8


@needs_build
def test_hgemm_tuned_0_turns_the_table_off(monkeypatch):
    prob = linear(512)
    ship([(prob, ranked(prob)[-1].route)])
    monkeypatch.setenv(table.ENV, "0")
    assert tuned.lookup(INFO, MANIFEST, prob) is None
    assert_cost_models_choice(monkeypatch, prob)
    monkeypatch.setenv(table.ENV, "yes")
    with pytest.warns(RuntimeWarning, match="HGEMM_TUNED='yes'"):
        assert tuned.lookup(INFO, MANIFEST, prob) == ranked(prob)[-1].route


@needs_build
@pytest.mark.parametrize("damage", ["not json", "schema", "entry key", "route", "time", "shape", "device"])
def test_a_malformed_table_warns_once_and_matmul_plans_with_the_cost_model(monkeypatch, damage):
    prob = linear(512)
    path = ship([(prob, ranked(prob)[-1].route)])
    doc = json.loads(path.read_text())
    (key, entry), = doc["entries"].items()
    if damage == "not json":
        path.write_text(path.read_text()[:-20])
    else:
        if damage == "schema":
            doc["schema"] = 99
        elif damage == "entry key":
            doc["entries"] = {key.replace("m512", "m1024"): entry}
        elif damage == "route":
            entry["route"] = {"kernel": 3}
        elif damage == "time":
            entry["us"] = -1
        elif damage == "shape":
            entry["M"] = 0
        else:
            doc["device"] = "NVIDIA H100 80GB HBM3"
        path.write_text(json.dumps(doc))
    with pytest.warns(RuntimeWarning, match="tuning table .* is not used"):
        assert tuned.lookup(INFO, MANIFEST, prob) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (once)
        assert tuned.lookup(INFO, MANIFEST, prob) is None
        assert_cost_models_choice(monkeypatch, prob)


@needs_build
def test_a_gpu_without_a_table_and_a_table_of_another_form_of_the_gpu_fall_back(monkeypatch):
    prob = linear(512)
    ship([(prob, ranked(prob)[-1].route)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuned.lookup(SimpleNamespace(name="NVIDIA H100 80GB HBM3", cc=(9, 0), sm_count=132), MANIFEST,
                            prob) is None
        assert tuned.lookup(SimpleNamespace(name=INFO.name, cc=(9, 0), sm_count=114), MANIFEST, prob) is None
        assert_cost_models_choice(monkeypatch, prob, SimpleNamespace(name="NVIDIA A100-SXM4-80GB", cc=(9, 0),
                                                                     sm_count=132))


# -- hgemm-tune ------------------------------------------------------------------------------------------------

def test_the_writers_table_reads_back_whole(tmp_path):
    prob = linear(1000, 14336)
    route = Route("k", True, (("splits", 2), ("stages", 4)))
    key, entry = table.entry_of(prob, route, 12.34567, Route("m"), float("inf"))
    assert key == table.bucket_of(prob).key and entry["model_us"] is None
    doc = table.table_doc({key: entry}, INFO.name, INFO.cc, INFO.sm_count, "abc", ["public", "models"], 0.02,
                          date="2026-12-02")
    path = tmp_path / "t.json"
    tune.write_table(path, doc)
    assert json.loads(path.read_text()) == doc
    t = table.read_table(path)
    assert (t.device, t.cc, t.sm_count) == (INFO.name, INFO.cc, INFO.sm_count)
    assert t.entries[key]["route"] == route and t.entries[key]["us"] == 12.346
    assert table.nearest(t, table.bucket_of(prob), prob.M)["route"] == route
    assert tune.existing_entries(path, INFO.name, "abc") == (doc["entries"], ["models", "public"], "")
    assert tune.existing_entries(path, INFO.name, "def")[0] == {}
    assert tune.existing_entries(tmp_path / "none.json", INFO.name, "abc") == ({}, [], "")


def test_the_writer_refuses_a_document_that_is_no_table(tmp_path):
    with pytest.raises(ValueError, match="entries"):
        tune.write_table(tmp_path / "t.json", {**table.table_doc({}, "g", (9, 0), 1, "h", [], 0.02), "entries": []})
    assert not (tmp_path / "t.json").exists()


def result(route: str, us: float) -> dict:
    return {"route": Route(route), "us": us}


@pytest.mark.parametrize("results, kept, model_us", [
    ([result("w", 9.7), result("m", 10.0)], "w", 10.0),  # 3% faster
    ([result("w", 9.9), result("m", 10.0)], None, 10.0),  # 1%: noise
    ([result("m", 10.0), result("w", 10.1)], None, 10.0),  # the pick is the fastest
    ([result("w", 9.9), result("m", math.inf)], "w", None),  # the pick failed its check
    ([result("w", math.inf), result("m", math.inf)], None, None),
])
def test_a_winner_is_kept_only_beyond_the_noise_margin(results, kept, model_us):
    best, got_us = tune.winner(results, Route("m"), tune.NOISE_MARGIN)
    assert (best["route"].kernel if best else None, got_us) == (kept, model_us)


def test_the_shape_set_is_the_sections_gemms_each_once():
    shapes = tune.shape_set(["decode_graph", "decode_graph"], None)
    assert len(shapes) == len(set(shapes)) == 16 and not any(s.layers for s in shapes)
    assert set(tune.DEFAULT_SECTIONS) <= set(tune.TUNABLE) and "fused" not in tune.TUNABLE
    assert [s.cell for s in tune.shape_set(["models"], "^512x4096x4096 ")] == ["512x4096x4096 f16 A row B col"]


@pytest.mark.parametrize("argv, message", [
    (["--sections", "fused"], "not a section it can measure"),
    (["--sections", ","], "not a section it can measure"),
    (["--margin", "1.5"], "--margin"),
    (["--margin", "nan"], "--margin"),
    (["--candidates", "0"], "--candidates"),
    (["--iters", "0"], "--iters"),
    (["--seed", "-1"], "--seed"),
    (["--only", "("], "not a regular expression"),
    (["--only", "zzz"], "matches no shape"),
])
def test_bad_flags_are_refused_before_any_gpu_work(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        tune.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_list_prints_the_shapes_without_a_gpu(capsys):
    assert tune.main(["--list", "--sections", "decode"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [s.cell for s in tune.shape_set(["decode"], None)] and "1x4096x4096 f16 A row B col" in out


def test_a_run_writes_after_every_shape_keeps_the_winners_and_adds_to_its_own_table(monkeypatch, tmp_path, capsys):
    """main's loop with the GPU part (measure) replaced: M = 16 loses to the cost model, M = 1 wins by 10%."""
    import hgemm_rt.device
    import hgemm_rt.registry

    def measure(shape, settings, rng):
        prob = linear(shape.M, shape.N, shape.K)
        assert not out.exists() or json.loads(out.read_text())["entries"] is not None  # (whole after each shape)
        return prob, [result("w", 9.0 if shape.M == 1 else 10.0), result("m", 10.0)], Route("m")

    out = tmp_path / "t.json"
    monkeypatch.setattr(tune, "measure", measure)
    monkeypatch.setattr(hgemm_rt.device, "get_device", lambda: SimpleNamespace(info=INFO))
    monkeypatch.setattr(hgemm_rt.registry, "get_registry", lambda: SimpleNamespace(manifest=SimpleNamespace(
        build_hash="abc")))
    argv = ["--sections", "decode", "--only", "^(1|16)x4096x4096 f16 A row B col", "--no-progress", "--out", str(out)]
    assert tune.main(argv) == 0
    assert "1 of 2 shapes beat the cost model" in capsys.readouterr().out
    t = table.read_table(out)
    assert [(e["M"], e["route"], e["us"], e["model_us"]) for e in t.entries.values()] == [(1, Route("w"), 9.0, 10.0)]
    assert tune.main(["--sections", "models", "--only", "^128x4096x4096 ", "--no-progress", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["entries"]) == 1 and doc["sections"] == ["decode", "models"]  # (kept; 128 did not win)


# -- on the GPU ------------------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_gpu_matmul_runs_a_shipped_route_and_computes_the_product(fresh_plans, rng):
    import numpy as np

    import hgemm_rt as hg
    from hgemm_rt.registry import get_registry

    a = rng.standard_normal((512, 4096)).astype(np.float16)
    w = rng.standard_normal((4096, 4096)).astype(np.float16)  # (N x K, as nn.Linear holds it)
    A, W, C = hg.to_device(a), hg.to_device(w), hg.empty((512, 4096), "f16")
    info = hg.get_device().info
    prob = hg.Matmul(A, W.T, out=C).problem
    manifest = get_registry().manifest
    route = planner.ranked_recipes(prob, manifest, info.cc, info.sm_count)[-1][1].route
    ship([(prob, route)], info=info)
    hg.plans.clear()
    hg.matmul(A, W.T, out=C)
    assert route.kernel in hg.explain(A, W.T, out=C)
    ref = a.astype(np.float64) @ w.astype(np.float64).T
    assert np.linalg.norm(C.to_numpy() - ref) / np.linalg.norm(ref) < 5e-3


@pytest.mark.gpu
def test_gpu_hgemm_tune_writes_a_table_that_reads_back(tmp_path, capsys):
    from hgemm_rt.device import get_device
    from hgemm_rt.registry import get_registry

    out = tmp_path / "table.json"
    shape = "16x4096x4096 f16 A row B col"
    assert tune.main(["--sections", "decode", "--only", f"^{shape}", "--iters", "5", "--no-progress", "--margin", "0",
                      "--out", str(out)]) == 0
    assert shape in capsys.readouterr().out
    t = table.read_table(out)
    info = get_device().info
    assert (t.device, t.cc, t.sm_count) == (info.name, info.cc, info.sm_count) and len(t.entries) <= 1
    for e in t.entries.values():
        assert tuning.route_runs(e["route"], get_registry().manifest)
        assert e["model_us"] is None or e["us"] < e["model_us"]
