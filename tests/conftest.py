"""Shared fixtures. GPU tests carry the `gpu` marker and skip where the machine has no NVIDIA GPU; on a
machine that has one but cannot use it (a broken or too-old driver) the run stops with the reason."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def _gpu_present() -> bool:
    """An NVIDIA GPU is installed, whether or not the CUDA driver can use it."""
    return Path("/dev/nvidia0").exists() or any(Path("/proc/driver/nvidia/gpus").glob("*"))


def _gpu_reason() -> str | None:
    """None where the CUDA driver can use a GPU, else why not."""
    from hgemm_rt._driver import init
    from hgemm_rt.errors import NoGpuError

    try:
        init()
    except NoGpuError as exc:
        return str(exc)
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    reason = _gpu_reason()
    if reason and _gpu_present():  # a green run here would hide a broken driver
        raise pytest.UsageError(f"this machine has an NVIDIA GPU but CUDA cannot use it: {reason}")
    if reason:
        skip = pytest.mark.skip(reason=f"no CUDA GPU on this machine ({reason})")
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def manifest():
    from hgemm_rt import Manifest

    return Manifest.load(os.environ.get("HGEMM_ARTIFACTS") or ROOT / "artifacts")


@pytest.fixture
def fresh_plans():
    """matmul's plan cache empty before the test and after it: for a test that changes what the planner picks
    (a patched cost-model constant, an autotune cache), so that no plan crosses into or out of it."""
    import hgemm_rt as hg

    hg.plans.clear()
    yield
    hg.plans.clear()


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    """Fresh inputs every run; HGEMM_TEST_SEED replays one. The seed is printed when the test fails."""
    seed = int(os.environ.get("HGEMM_TEST_SEED") or np.random.SeedSequence().entropy % 2**63)
    request.node.rng_seed = seed
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    seed = getattr(item, "rng_seed", None)
    if seed is not None and report.failed:
        report.sections.append(("rng", f"random inputs from seed {seed}: rerun with HGEMM_TEST_SEED={seed}"))
