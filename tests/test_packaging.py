"""The wheel: setup.py packages the kernel build, and the wheel installed without the build extra
(build/wheel-env, made by scripts/setup.sh) lists and verifies every kernel from its own copy."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hgemm_rt.manifest import default_artifacts_dir

ROOT = Path(__file__).resolve().parent.parent
WHEEL_ENV = ROOT / "build" / "wheel-env"
SETUP_HINT = "run `bash scripts/setup.sh` (it builds the wheel and installs it into build/wheel-env)"


def _setup_module():
    spec = importlib.util.spec_from_file_location("hgemm_setup", ROOT / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # (setup() itself runs only as __main__)
    return module


def _fake_build(root: Path) -> dict:
    (root / "sm_80").mkdir(parents=True)
    cubin = b"\x7fELF not really a cubin"
    (root / "sm_80" / "fam.cubin").write_bytes(cubin)
    (root / "sm_80" / "stale.cubin").write_bytes(b"from an older build")
    manifest = {"schema": 1, "kernels": [{"name": "k", "builds": {"80": {
        "cubin": "sm_80/fam.cubin", "sha256": hashlib.sha256(cubin).hexdigest(), "symbols": {}}}}]}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_wheel_build_copies_the_manifest_and_the_files_it_names(tmp_path):
    setup = _setup_module()
    _fake_build(tmp_path / "artifacts")
    out = tmp_path / "pkg" / "artifacts"
    assert setup.copy_build(tmp_path / "artifacts", out) == 1
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "manifest.json", "sm_80/fam.cubin"]  # the stale cubin stays behind


def test_wheel_build_without_a_kernel_build_says_what_to_run(tmp_path):
    setup = _setup_module()
    with pytest.raises(setup.SetupError, match=r"manifest\.json does not exist; run `python build_kernels.py`"):
        setup.copy_build(tmp_path / "artifacts", tmp_path / "out")


def test_wheel_build_refuses_an_altered_cubin(tmp_path):
    setup = _setup_module()
    _fake_build(tmp_path / "artifacts")
    (tmp_path / "artifacts" / "sm_80" / "fam.cubin").write_bytes(b"truncated")
    with pytest.raises(setup.SetupError, match="fam.cubin does not match its sha256"):
        setup.copy_build(tmp_path / "artifacts", tmp_path / "out")
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_artifacts_dir_order(monkeypatch, tmp_path):
    monkeypatch.setenv("HGEMM_ARTIFACTS", str(tmp_path))
    assert default_artifacts_dir() == tmp_path
    monkeypatch.delenv("HGEMM_ARTIFACTS")
    # a checkout has no hgemm_rt/artifacts/: its own artifacts/ (the installed case: test below)
    assert default_artifacts_dir() == ROOT / "artifacts"


# Runs in build/wheel-env from a folder outside the checkout, so only the installed package is importable.
CHECK = r"""
import hashlib, importlib.metadata as md, json, os, sys
import hgemm_rt as hg
from hgemm_rt.manifest import default_artifacts_dir
m = hg.get_registry().manifest
verified = set()
for spec in m.kernels.values():
    files = [(b.cubin, b.sha256) for b in spec.builds.values()] + ([(spec.ptx.path, spec.ptx.sha256)] if spec.ptx else [])
    for rel, sha in files:
        if hashlib.sha256((m.root / rel).read_bytes()).hexdigest() != sha:
            sys.exit(f"{spec.name}: {rel} does not match the manifest's sha256")
        verified.add(rel)
def installed(dist):
    try:
        md.distribution(dist)
        return True
    except md.PackageNotFoundError:
        return False
print(json.dumps({
    "package": hg.__file__, "root": str(m.root), "default": str(default_artifacts_dir()),
    "build_hash": m.build_hash, "kernels": sorted(m.kernels), "listed": hg.kernels(), "verified": sorted(verified),
    "compilers": [d for d in ("nvidia-cuda-nvcc", "nvidia-nvvm", "nvidia-cutlass") if installed(d)],
    "scripts": {ep.name: ep.value for ep in md.entry_points(group="console_scripts") if ep.name.startswith("hgemm")},
}))
"""


def _unusable(message: str) -> None:
    if os.environ.get("CI"):  # CI runs setup.sh right before the tests: this is a broken setup, not a skip
        pytest.fail(f"{message} although CI is set")
    pytest.skip(message)


def _stale_files(site: Path) -> list[str]:
    """Files of the installed copy that differ from the checkout (the manifest and the packages' modules)."""
    pairs = [(site / "hgemm_rt" / "artifacts" / "manifest.json", ROOT / "artifacts" / "manifest.json")]
    for package in ("hgemm_rt", "hgemm_build", "hgemm_bench"):
        names = {p.name for p in (ROOT / package).glob("*.py")} | {p.name for p in (site / package).glob("*.py")}
        pairs += [(site / package / n, ROOT / package / n) for n in sorted(names)]
    return [str(ours.relative_to(ROOT)) for theirs, ours in pairs
            if not (theirs.is_file() and ours.is_file() and theirs.read_bytes() == ours.read_bytes())]


def _wheel_env() -> Path:
    """build/wheel-env's python, where its copy of hgemm is this checkout's current one."""
    python = WHEEL_ENV / "bin" / "python"
    if not python.exists():
        _unusable(f"no wheel environment at {WHEEL_ENV}: {SETUP_HINT}")
    sites = sorted(WHEEL_ENV.glob("lib/python3*/site-packages"))
    stale = _stale_files(sites[0]) if sites else ["hgemm_rt"]
    if stale:
        _unusable(f"the wheel in {WHEEL_ENV} is older than the checkout ({', '.join(stale[:4])} changed): "
                  f"{SETUP_HINT}")
    return python


def _clean_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HGEMM_ARTIFACTS", "VIRTUAL_ENV")}
    env["PATH"] = f"{WHEEL_ENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_installed_wheel_loads_and_verifies_every_kernel_from_its_own_copy(tmp_path):
    python = _wheel_env()
    run = subprocess.run([str(python), "-c", CHECK], cwd=tmp_path, env=_clean_env(), capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    got = json.loads(run.stdout)
    checkout = json.loads((ROOT / "artifacts" / "manifest.json").read_text())
    site = WHEEL_ENV.resolve()
    assert Path(got["package"]).resolve().is_relative_to(site), "imported the checkout, not the installed wheel"
    packaged = Path(got["package"]).resolve().parent / "artifacts"
    assert Path(got["root"]).resolve() == Path(got["default"]).resolve() == packaged
    assert got["kernels"] == sorted(k["name"] for k in checkout["kernels"])
    files = {b["cubin"] for k in checkout["kernels"] for b in k["builds"].values()}
    files |= {k["ptx"]["path"] for k in checkout["kernels"] if k.get("ptx")}
    assert files and got["verified"] == sorted(files)
    gemms = {k["name"] for k in checkout["kernels"] if k["ladder"] != "matmul"}
    assert gemms and gemms <= set(got["listed"])
    assert got["compilers"] == [], "the wheel environment must not hold the build extra"
    # (the build needs a checkout: no command for it)
    assert got["scripts"] == {"hgemm-bench": "hgemm_bench.main:main", "hgemm-tune": "hgemm_bench.tune:main"}


def test_installed_console_script_lists_the_kernels(tmp_path):
    _wheel_env()
    script = shutil.which("hgemm-bench", path=str(WHEEL_ENV / "bin"))
    assert script, f"no hgemm-bench in {WHEEL_ENV / 'bin'}"
    run = subprocess.run([script, "--list"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "hgemm_sm90_wgmma_tma_ws_tn" in run.stdout and "hgemm_cublas_tensor_op_tn" in run.stdout
    tune = shutil.which("hgemm-tune", path=str(WHEEL_ENV / "bin"))
    assert tune, f"no hgemm-tune in {WHEEL_ENV / 'bin'}"
    run = subprocess.run([tune, "--list"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0 and "512x4096x4096 f16" in run.stdout, run.stderr  # its shape sets, no GPU needed


# -- a wheel on a machine whose driver is older than the compiler that built it ----------------------

def test_driver_older_than_the_build_names_the_driver_and_the_rebuild(monkeypatch):
    from hgemm_rt import NotBuiltForDeviceError, device

    monkeypatch.setattr(device, "driver_version", lambda: 12080)  # an R570 driver: CUDA 12.8
    with pytest.raises(NotBuiltForDeviceError) as info:
        device.require_driver_for("13.0.88")
    message = str(info.value)
    assert "nvcc 13.0.88" in message and "CUDA 13.0 or newer" in message and "580.65.06" in message
    assert "supports CUDA 12.8" in message
    assert "HGEMM_NVCC=/usr/local/cuda/bin/nvcc python build_kernels.py" in message and "12.8+" in message


@pytest.mark.parametrize("compiler,driver,jit,ok", [
    ("13.0.88", 13000, False, True),
    ("13.0.88", 13020, False, True),
    ("13.2.51", 13000, False, True),   # minor-version compatibility: a 13.2 cubin loads on any 13.x driver
    ("13.2.51", 13000, True, False),   # ... but its PTX needs a 13.2 driver to JIT-compile
    ("12.8.93", 12040, False, True),
    ("13.0.88", 12090, False, False),
    ("", 11000, False, True),          # no compiler version recorded: nothing to compare
])
def test_driver_rule(compiler, driver, jit, ok):
    from hgemm_rt.device import driver_problem

    assert (driver_problem(compiler, driver, jit) is None) == ok


def test_a_driver_older_than_cuda_12_gets_no_rebuild_hint():
    from hgemm_rt.device import driver_problem

    message = driver_problem("12.8.93", 11080)
    assert "525.60.13" in message and "HGEMM_NVCC" not in message


def test_loading_a_kernel_on_an_old_driver_reports_the_driver(monkeypatch):
    """Every launch path (launch, matmul, the bench) loads its cubins through ModuleCache, which checks
    the driver first: a too-old driver is named instead of a raw cuModuleLoadData error."""
    from types import SimpleNamespace

    import hgemm_rt as hg
    from hgemm_rt import NotBuiltForDeviceError, device, launcher

    kernel = hg.get_kernel("hgemm_naive_f16")
    manifest, spec = kernel.manifest, kernel.spec
    sel = manifest.select(spec, (9, 0))
    major = int(manifest.nvcc.split(".")[0])
    monkeypatch.setattr(device, "driver_version", lambda: (major - 1) * 1000 + 90)  # the last driver before it
    fake_gpu = SimpleNamespace(info=SimpleNamespace(ordinal=0))
    with pytest.raises(NotBuiltForDeviceError, match=f"need a driver for CUDA {major}.0"):
        launcher.ModuleCache().function(manifest, fake_gpu, spec, sel, spec.symbols()[0])


def test_every_environment_variable_is_in_the_readme_table():
    import re

    sources = [p for d in ("hgemm_rt", "hgemm_build", "hgemm_bench", "scripts", "tests") for p in (ROOT / d).rglob("*")
               if p.suffix in (".py", ".sh")] + [ROOT / "build_kernels.py", ROOT / "bench.py"]
    used = {v for p in sources if p.is_file() for v in re.findall(r"\bHGEMM_[A-Z0-9_]+\b", p.read_text())}
    table = set(re.findall(r"^\| `(HGEMM_[A-Z0-9_]+)` \|", (ROOT / "README.md").read_text(), re.M))
    assert used and not used - table, f"HGEMM_ variables missing from the README's table: {sorted(used - table)}"


@pytest.mark.parametrize("path", ["../outside.cubin", "/etc/passwd", "sm_80/../../x.cubin"])
def test_wheel_build_refuses_a_manifest_path_outside_the_artifacts(tmp_path, path):
    setup = _setup_module()
    manifest = _fake_build(tmp_path / "artifacts")
    manifest["kernels"][0]["builds"]["80"]["cubin"] = path
    (tmp_path / "artifacts" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(setup.SetupError, match="not a path inside the artifacts directory"):
        setup.copy_build(tmp_path / "artifacts", tmp_path / "out")
