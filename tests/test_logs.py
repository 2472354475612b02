"""hgemm_rt's loggers (hgemm_rt/logs.py): silent by default, HGEMM_LOG=route prints each newly planned problem's
route once (a repeat finds the plan without planning), an unknown topic warns. CPU only: the device is faked."""
from __future__ import annotations

import importlib
import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hgemm_rt import logs
from hgemm_rt.problem import Problem, View
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
ROOT = Path(__file__).resolve().parent.parent
plans_mod = importlib.import_module("hgemm_rt.plans")  # (the package's `plans` is the cache object)


def test_the_library_logger_is_silent_until_configured():
    root = logging.getLogger("hgemm_rt")
    assert any(isinstance(h, logging.NullHandler) for h in root.handlers)


def test_configure_enables_a_topic_once_and_warns_for_an_unknown_one():
    route = logging.getLogger("hgemm_rt.route")
    before = list(route.handlers)
    try:
        assert logs.configure("route") == ["route"] and logs.configure(" route ,") == ["route"]
        assert len(route.handlers) == len(before) + 1 and route.level == logging.INFO
        with pytest.warns(UserWarning, match=r"unknown topic\(s\) \['routes'\]"):
            assert logs.configure("routes") == []
    finally:
        route.handlers[:] = before
        route.setLevel(logging.NOTSET)


def test_hgemm_log_route_is_read_at_import():
    out = subprocess.run([sys.executable, "-c", "import logging, hgemm_rt; "
                          "print(logging.getLogger('hgemm_rt.route').level)"], cwd=ROOT, capture_output=True,
                         text=True, env={"HGEMM_LOG": "route", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(logging.INFO)


@pytest.mark.skipif(MANIFEST is None, reason="no kernel build (python build_kernels.py)")
def test_a_new_problem_logs_its_route_once(monkeypatch, caplog):
    dev = SimpleNamespace(info=SimpleNamespace(cc=(9, 0), sm_count=132, name="NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(plans_mod, "get_device", lambda device: dev)
    monkeypatch.setattr(plans_mod, "get_registry", lambda: SimpleNamespace(manifest=MANIFEST))
    monkeypatch.setattr(plans_mod.tuning, "lookup", lambda info, manifest, key: None)
    cache = plans_mod.PlanCache()
    prob = Problem("f16", "f32", View.make("A", 512, 512, 512, 1, 256), View.make("B", 512, 512, 512, 1, 256),
                   View.make("C", 512, 512, 512, 1, 256), plain=True, beta_zero=True)
    with caplog.at_level(logging.INFO, logger="hgemm_rt.route"):
        recipe = cache.recipe(prob, 0, None)
        assert cache.recipe(prob, 0, None) is recipe  # (a hit: not planned, not logged)
    lines = [r.getMessage() for r in caplog.records if r.name == "hgemm_rt.route"]
    assert len(lines) == 1 and "NVIDIA H100" in lines[0] and recipe.route.kernel in lines[0]
    assert lines[0].endswith("(the cost model)")
