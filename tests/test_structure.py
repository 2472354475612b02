"""The runtime's module structure: no import circle (lazy imports inside functions included), no
module importing another's private names, no module named like a function the package exports (the
function would shadow the module as a package attribute)."""
from __future__ import annotations

import ast
from pathlib import Path

import hgemm_rt
from graphs import assert_acyclic

PKG = Path(hgemm_rt.__file__).resolve().parent


def _imports() -> dict[str, list[tuple[str, str]]]:
    """module -> [(imported module, imported name)] for the package's own modules."""
    mods = {p.stem for p in PKG.glob("*.py")}
    out: dict[str, list[tuple[str, str]]] = {}
    for path in PKG.glob("*.py"):
        edges = []
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module is None:  # from . import x
                    edges += [(a.name, "") for a in node.names if a.name in mods]
                elif node.module in mods:
                    edges += [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hgemm_rt."):
                edges += [(node.module.split(".", 1)[1], a.name) for a in node.names]
        out[path.stem] = edges
    return out


def test_no_import_circle():
    assert_acyclic({m: {dst for dst, _ in edges if dst != m} for m, edges in _imports().items()})


def test_no_module_imports_another_modules_private_names():
    bad = [f"{m} imports {name} from {dst}" for m, edges in _imports().items() for dst, name in edges
           if name.startswith("_") and not name.startswith("__") and dst != m]
    assert not bad, bad


def test_no_module_is_named_like_an_exported_function():
    modules = {p.stem for p in PKG.glob("*.py")}
    functions = {n for n in hgemm_rt.__all__ if callable(getattr(hgemm_rt, n)) and not isinstance(getattr(hgemm_rt, n), type)}
    assert not modules & functions, modules & functions


# -- scripts/ and tests/: thin GPU-machine wrappers and tests, neither importing the other ------------

REPO = PKG.parent


def _imported_modules(path: Path) -> set[str]:
    """Top-level names of every module a file imports, lazily or not, and the files it loads by path
    (importlib's spec_from_file_location, runpy's run_path) as "path:<argument text>"."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "spec_from_file_location", "run_path", "import_module", "__import__"):
            out.add("path:" + ast.unparse(node))
    return out


def test_scripts_and_tests_do_not_import_each_other():
    scripts = sorted((REPO / "scripts").glob("*.py"))
    tests = sorted((REPO / "tests").glob("*.py"))
    script_mods, test_mods = {p.stem for p in scripts}, {p.stem for p in tests}
    bad = []
    for p in scripts:
        got = _imported_modules(p)
        bad += [f"scripts/{p.name} imports tests' {m}" for m in got & test_mods]
        bad += [f"scripts/{p.name} loads {m}" for m in got if m.startswith("path:") and "tests" in m]
        bad += [f"scripts/{p.name} names tests/" for node in ast.walk(ast.parse(p.read_text()))
                if isinstance(node, ast.Constant) and node.value == "tests"]  # sys.path += ROOT / "tests"
    for p in tests:
        got = _imported_modules(p)
        bad += [f"tests/{p.name} imports scripts' {m}" for m in got & script_mods]
        bad += [f"tests/{p.name} loads {m}" for m in got if m.startswith("path:") and "scripts" in m]
        # a test shares helpers through modules that are no tests (kernel_cases, interop, guarded)
        bad += [f"tests/{p.name} imports the test module {m}" for m in got & test_mods if m.startswith("test_")]
    assert not bad, bad
