"""Shared fixtures. GPU tests carry the `gpu` marker and skip cleanly where no GPU is usable."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def _gpu_reason() -> str | None:
    from hgemm_rt import gpu_available

    return None if gpu_available() else "no CUDA GPU on this machine"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if not gpu_items:
        return
    reason = _gpu_reason()
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for item in gpu_items:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def manifest():
    from hgemm_rt import Manifest

    return Manifest.load(os.environ.get("HGEMM_ARTIFACTS") or ROOT / "artifacts")


@pytest.fixture
def rng(request: pytest.FixtureRequest) -> np.random.Generator:
    # fresh inputs every run (the seed is printed on failure through the test id's repr)
    return np.random.default_rng()
