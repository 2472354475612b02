"""The shape of the runtime's roles (CPU only): every kernel role (declaration.ROLES) has one handler in
hgemm_rt/roles/, and its name is compared nowhere else; no hgemm_rt module over 600 lines, no function over 80
lines unless its docstring says why it stays whole; no import circle through the roles package."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hgemm_rt
from hgemm_rt.declaration import ROLES
from hgemm_rt.roles import HANDLERS
from graphs import assert_acyclic

PKG = Path(hgemm_rt.__file__).resolve().parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# the declaration (hgemm_rt/declaration.py) lists the roles (ROLES) and says which is the catalogue's ("gemm": the
# catalogue ABI, the default role of a toml entry, from which KernelSpec.catalogue derives)
DECLARATION = "declaration.py"
CATALOGUE_ROLE = "gemm"


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
        if rel.startswith("roles/") or rel == DECLARATION:
            continue
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in ROLES and id(node) not in docs:
                bad.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not bad, bad


def test_the_declaration_names_the_roles_only_in_their_list_and_the_catalogue_rule():
    tree = ast.parse((PKG / DECLARATION).read_text())
    lists = [n.value for n in ast.walk(tree) if isinstance(n, ast.Assign) and  # (the roles, the rated roles)
             any(isinstance(t, ast.Name) and t.id in ("ROLES", "RATED_ROLES") for t in n.targets)]
    assert len(lists) == 2
    inside = {id(n) for declared in lists for n in ast.walk(declared)}
    others = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in ROLES
              and id(n) not in inside and n.value != CATALOGUE_ROLE]
    assert not others, others


def test_no_module_is_over_600_lines():
    long = {_rel(p): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_no_function_is_over_80_lines_unless_its_docstring_says_why():
    bad = []
    for path in _modules():
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
    assert_acyclic(_package_imports())


def test_a_grouped_problem_is_planned_as_one_launch_of_the_first_grouped_kernel(manifest):
    """grouped_matmul's problem (Problem.group, the batch its experts) through the planner: the build's first grouped
    gemm_fused_wgmma kernel of B's layout, one Gemm step with the group table's mode and count, the whole epilogue."""
    from hgemm_rt import planner
    from hgemm_rt.epilogue import Epilogue
    from hgemm_rt.problem import Problem, Route, View
    from hgemm_rt.roles.gemm_fused_wgmma import GROUP_MODES, grouped_kernel

    E, M, N, K = 8, 256, 1024, 512
    b_tn = View.make("B", N, K, K, 1, 256, (K * N,))  # an (E, N, K) weight, seen as K x N per expert
    planned = 0
    for mode, b, layout in (("contiguous", View.make("B", K, N, N, 1, 256, (K * N,)), "NN"),
                            ("masked", b_tn.T, "TN")):
        spec = grouped_kernel(manifest, "f16", layout)
        if spec is None:
            continue  # (a build without the grouped kernels)
        bs = (0,) if mode == "contiguous" else (M * K,)
        a = View.make("A", M, K, K, 1, 256, bs)
        c = View.make("C", M, N, N, 1, 256, (0,) if mode == "contiguous" else (M * N,))
        prob = Problem("f16", "f32", a, b, c, plain=True, beta_zero=True, batch=(E,), epi=Epilogue(None, "silu"),
                       group=mode)
        recipe = planner.grouped_recipe(prob, manifest)
        (g,) = recipe.steps
        assert recipe.route == Route(spec.name) and not recipe.temps and g.kernel == spec.name
        assert (g.group, g.groups, g.applies_alpha_beta, g.epi, g.batch) == (GROUP_MODES[mode], E, True, prob.epi, (E,))
        assert g.b == (b if layout == "NN" else b_tn) and (g.M, g.N, g.K) == (M, N, K)
        assert planner.recipe_for(Route(spec.name, True), prob, manifest) is None  # (no transposed grouped route)
        planned += 1
    if not planned:
        pytest.skip("no grouped kernels in this build")
