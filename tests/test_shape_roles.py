"""The shape of the runtime's roles (CPU only): every kernel role (manifest.ROLES) has one handler in
hgemm_rt/roles/, and its name is compared nowhere else; no hgemm_rt module over 600 lines, no function over 80
lines unless its docstring says why it stays whole; no import circle through the roles package."""
from __future__ import annotations

import ast
from pathlib import Path

import hgemm_rt
from hgemm_rt.manifest import ROLES
from hgemm_rt.roles import HANDLERS

PKG = Path(hgemm_rt.__file__).resolve().parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# modules other helpers own that still name a role; the integrator removes each entry as it switches the module to
# the handlers (grouped.py: planner.grouped_recipe; testing.py and tuning.py: the handler's attributes)
PENDING = {"grouped.py", "testing.py", "tuning.py"}


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(PKG).as_posix()


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def test_the_registry_has_one_handler_per_declared_role():
    assert sorted(HANDLERS) == sorted(ROLES)
    assert all(h.name == role for role, h in HANDLERS.items())


def test_role_names_are_compared_only_in_their_handlers():
    bad = []
    for path in _modules():
        rel = _rel(path)
        if rel.startswith("roles/") or rel == "manifest.py" or rel in PENDING:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in ROLES and id(node) not in docs:
                bad.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not bad, bad


def test_manifest_names_the_roles_only_in_their_declaration():
    tree = ast.parse((PKG / "manifest.py").read_text())
    declared = next(n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and
                    any(isinstance(t, ast.Name) and t.id == "ROLES" for t in n.targets))
    inside = {id(n) for n in ast.walk(declared)}
    others = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ROLES
              and id(n) not in inside and n.value != "gemm"]  # ("gemm": the declared default role, pending)
    assert not others, others


def test_no_module_is_over_600_lines():
    long = {_rel(p): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    # the pending ones: api.py (another helper's rework of the front door)
    assert set(long) <= {"api.py"}, long


def test_no_function_is_over_80_lines_unless_its_docstring_says_why():
    bad = []
    for path in _modules():
        if _rel(path) in ("api.py", "testing.py", "launcher.py", "tuning.py", "grouped.py", "manifest.py",
                          "cublaslt.py", "cublas.py", "memory.py", "operands.py", "device.py", "torch.py"):
            continue  # (other helpers' modules; this test covers the planner, the cost model, the steps, the roles)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                doc = ast.get_docstring(node) or ""
                if length > MAX_FUNCTION_LINES and "stays whole" not in doc:
                    bad.append(f"{_rel(path)}:{node.lineno} {node.name}: {length} lines")
    assert not bad, bad


def _package_imports() -> dict[str, set[str]]:
    """module (dotted, relative to hgemm_rt) -> the package modules it imports (lazily or not)."""
    names = {_rel(p)[:-3].replace("/", ".").removesuffix(".__init__") for p in _modules()}
    out = {}
    for path in _modules():
        mod = _rel(path)[:-3].replace("/", ".")
        pkg = mod.rsplit(".", 1)[0] if "." in mod else ""
        if mod.endswith("__init__"):
            mod = mod.removesuffix(".__init__") if "." in mod else "__init__"
            pkg = mod if mod != "__init__" else ""
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = pkg.split(".") if pkg else []
                base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
                target = ".".join(base + ([node.module] if node.module else []))
                for a in node.names:
                    full = f"{target}.{a.name}" if target else a.name
                    edges.add(full if full in names else target)
        out[mod] = {e for e in edges if e and e in names and e != mod}
    return out


def test_no_import_circle_through_the_roles_package():
    graph = _package_imports()
    graph["__init__"] = set()  # the package re-exports: not part of a circle

    def visit(node, stack):
        for nxt in graph.get(node, ()):
            assert nxt not in stack, f"import circle: {' -> '.join(stack[stack.index(nxt):] + [nxt])}"
            visit(nxt, stack + [nxt])

    for m in graph:
        visit(m, [m])
