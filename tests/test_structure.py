"""The runtime's module structure: no import circle (lazy imports inside functions included), no
module importing another's private names, no module named like a function the package exports (the
function would shadow the module as a package attribute)."""
from __future__ import annotations

import ast
from pathlib import Path

import hgemm_rt

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
    graph = {m: {dst for dst, _ in edges if dst != m} for m, edges in _imports().items()}
    graph["__init__"] = set()  # the package re-exports: not part of a circle

    def visit(node, stack):
        for nxt in graph.get(node, ()):
            assert nxt not in stack, f"import circle: {' -> '.join(stack[stack.index(nxt):] + [nxt])}"
            visit(nxt, stack + [nxt])

    for m in graph:
        visit(m, [m])


def test_no_module_imports_another_modules_private_names():
    bad = [f"{m} imports {name} from {dst}" for m, edges in _imports().items() for dst, name in edges
           if name.startswith("_") and not name.startswith("__") and dst != m]
    assert not bad, bad


def test_no_module_is_named_like_an_exported_function():
    modules = {p.stem for p in PKG.glob("*.py")}
    functions = {n for n in hgemm_rt.__all__ if callable(getattr(hgemm_rt, n)) and not isinstance(getattr(hgemm_rt, n), type)}
    assert not modules & functions, modules & functions
