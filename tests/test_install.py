"""The install on the CPU: the core dependencies are the runtime's own (the driver bindings and numpy), every
other package is an extra that is imported only where it is used, and a missing one names its extra."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OPTIONAL = ("ml_dtypes", "nvmath", "tabulate", "torch", "cupy", "matplotlib")

# A child interpreter where the optional packages cannot be imported (as in a venv holding only the core
# dependencies); it prints what it was asked to report as JSON.
WITHOUT_OPTIONAL = """
import importlib.abc, json, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"No module named {{name!r}} (blocked by the test)")
sys.meta_path.insert(0, Block())
{body}
"""


def run_without_optional(body: str, blocked: tuple[str, ...] = OPTIONAL) -> dict:
    code = WITHOUT_OPTIONAL.format(blocked=set(blocked), body=body)
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HGEMM_ARTIFACTS": str(ROOT / "none")})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0].strip().lower() for r in reqs}


def test_core_dependencies_are_the_driver_bindings_and_numpy():
    core = requirement_names(PYPROJECT["project"]["dependencies"])
    assert core == {"cuda-bindings", "numpy", "tomli"}  # (tomli: Python 3.10 only, for the kernel declarations)
    assert "cuda-python" not in core  # the metapackage: the runtime imports cuda.bindings.driver only


def test_extras_hold_the_optional_packages_and_the_test_extra_all_the_cpu_suite_imports():
    extras = {name: requirement_names(reqs) for name, reqs in PYPROJECT["project"]["optional-dependencies"].items()}
    assert {"nvmath-python", "nvidia-cublas"} <= extras["cublas"]
    assert "tabulate" in extras["bench"] and "ml_dtypes" in extras["bf16"]
    assert {"pytest", "hypothesis", "tabulate", "ml_dtypes", "nvmath-python"} <= extras["test"]
    assert "torch" in extras["torch"]


def test_runtime_imports_without_the_optional_packages_and_imports_none_of_them():
    got = run_without_optional("""
import hgemm_rt as hg
from hgemm_rt.dtypes import dtype_code
a = hg.DeviceArray.__name__, hg.matmul.__name__  # (the public names resolve)
print(json.dumps({"loaded": sorted(m for m in BLOCKED if m in sys.modules), "bf16": dtype_code("bfloat16")}))
""")
    assert got == {"loaded": [], "bf16": "bf16"}


def test_import_loads_no_optional_package_even_where_they_are_installed():
    run = subprocess.run([sys.executable, "-c", "import sys, hgemm_rt; print(sorted(sys.modules))"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr
    loaded = {m.split(".")[0] for m in eval(run.stdout)}
    assert not loaded & set(OPTIONAL)


def test_a_missing_extra_is_named_where_it_is_needed():
    got = run_without_optional("""
import hgemm_rt as hg
from hgemm_rt import cublas, cublaslt, dtypes
from hgemm_bench import main, tables  # the bench imports (and lists) without tabulate
messages = {}
for name, fn in (("bf16", lambda: dtypes.numpy_dtype("bf16")), ("cublas", cublas._cublas), ("lt", cublaslt._lt),
                 ("bench", lambda: tables.tabulate([[1]]))):
    try:
        fn()
    except (hg.HgemmError, SystemExit) as exc:
        messages[name] = [type(exc).__name__, str(exc)]
print(json.dumps(messages))
""")
    assert got["bf16"][0] == "ValidationError" and "hgemm[bf16]" in got["bf16"][1] and "ml_dtypes" in got["bf16"][1]
    for name in ("cublas", "lt"):
        assert got[name][0] == "NoGpuError" and "hgemm[cublas]" in got[name][1]
    assert got["bench"][0] == "SystemExit" and "hgemm[bench]" in got["bench"][1] and "tabulate" in got["bench"][1]


def test_bf16_numpy_dtype_comes_from_ml_dtypes_on_first_use():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from hgemm_rt.dtypes import dtype_code, numpy_dtype

    assert numpy_dtype("bf16") == ml_dtypes.bfloat16
    assert dtype_code(ml_dtypes.bfloat16) == dtype_code("bfloat16") == "bf16"


def test_version_has_one_source_that_pyproject_reads_and_the_changelog_follows():
    import importlib.metadata as md

    import hgemm_rt

    assert PYPROJECT["project"]["dynamic"] == ["version"] and "version" not in PYPROJECT["project"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "hgemm_rt._version.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", hgemm_rt.__version__)
    try:  # an install of this checkout (editable or the wheel) carries the same version
        assert md.version("hgemm") == hgemm_rt.__version__
    except md.PackageNotFoundError:
        pass
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog and f"## [{hgemm_rt.__version__}]" in changelog
    assert "keepachangelog.com" in changelog


def test_one_distribution_name_and_no_build_command_in_the_wheel():
    project = PYPROJECT["project"]
    assert project["name"] == "hgemm"
    assert project["scripts"] == {"hgemm-bench": "hgemm_bench.main:main",  # the build runs in a checkout only
                                  "hgemm-tune": "hgemm_bench.tune:main"}
    assert any(c.startswith("Programming Language :: Python :: 3") for c in project["classifiers"])
    assert "License ::" not in " ".join(project["classifiers"])  # (PEP 639: the SPDX `license` says it)


def test_the_bench_without_tabulate_names_the_bench_extra_before_it_measures():
    got = run_without_optional("""
import contextlib, io
from hgemm_bench import main
stderr = io.StringIO()
with contextlib.redirect_stderr(stderr):
    status = main.main(["--no-progress"])
print(json.dumps({"status": status, "stderr": stderr.getvalue()}))
""")
    assert got["status"] == 2 and "hgemm[bench]" in got["stderr"] and "tabulate" in got["stderr"]


def test_the_wheel_lists_every_package_of_the_checkout():
    """setuptools takes the listed packages only: a subpackage left out (hgemm_rt.roles) is missing from the wheel
    and the installed runtime fails at import."""
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("hgemm_rt", "hgemm_build", "hgemm_bench")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found == listed, f"pyproject's packages: add {sorted(found - listed)}, drop {sorted(listed - found)}"
