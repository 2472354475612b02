"""The runtime free of its test harness: no hgemm_rt module imports the test catalogues (tests/, the
bench's checks in hgemm_bench), the old mixed harness module is gone, and the code's comments state
rules and reasons, not history ("session N", "issue N") or timing logs ("X -> Y us")."""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import hgemm_rt

PKG = Path(hgemm_rt.__file__).resolve().parent
REPO = PKG.parent
TEST_MODULES = {p.stem for p in (REPO / "tests").glob("*.py")}


def _imported(path: Path, package: str = "hgemm_rt") -> set[str]:
    """Every module a file of `package` imports, lazily or not (relative ones named under the package)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package + (f".{node.module}" if node.module else "")
                out |= {base} | ({f"{package}.{a.name}" for a in node.names} if node.module is None else set())
            elif node.module:
                out.add(node.module)
    return out


def test_no_runtime_module_imports_the_test_harness():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        for mod in _imported(path):
            top = mod.split(".")[0]
            if top in ("tests", "hgemm_bench", "pytest") or top in TEST_MODULES or mod == "hgemm_rt.testing":
                bad.append(f"{path.relative_to(REPO)} imports {mod}")
    assert not bad, bad


def test_the_bench_shares_its_checks_with_the_tests_without_importing_them():
    """tests/ import the bench's checks (hgemm_bench.kernel_checks, matmul_checks), never the other way round:
    the bench ships in the wheel, tests/ does not."""
    bad = [f"{path.relative_to(REPO)} imports {mod}" for path in sorted((REPO / "hgemm_bench").rglob("*.py"))
           for mod in _imported(path, "hgemm_bench") if mod.split(".")[0] in TEST_MODULES | {"tests"}]
    assert not bad, bad


def test_the_mixed_harness_module_is_gone():
    assert not (PKG / "testing.py").exists(), "hgemm_rt/testing.py: numerics live in hgemm_rt/numerics.py"


# a comment narrating history ("session 14", "issue 20") or logging a timing change ("890 -> 911 us",
# "22.9-23.2 -> 23.6-24.0"): the figures belong in docs/dev/, the story in commit messages
NARRATION = re.compile(r"\b(session|issue)\s+[0-9]+", re.I)
NUMBER = r"\d+(?:\.\d+)?(?:-\d+(?:\.\d+)?)?"  # 23.6 or a range 23.6-24.0
TIMING_LOG = re.compile(rf"(?<![\w.]){NUMBER}\s*->\s*{NUMBER}")


def _comments(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment: `#` in Python (docstrings included: they are prose too), `//` and
    `/* */` in C++/CUDA."""
    text = path.read_text(errors="replace")
    out = []
    if path.suffix == ".py":
        out += [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(text).readline)
                if tok.type == tokenize.COMMENT]
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc:
                    out.append((getattr(node, "lineno", 1), doc))
        return out
    for i, line in enumerate(text.splitlines(), 1):
        if "//" in line:
            out.append((i, line[line.index("//"):]))
    for m in re.finditer(r"/\*.*?\*/", text, re.S):
        out.append((text.count("\n", 0, m.start()) + 1, m.group()))
    return out


def _narration(folder: str) -> list[str]:
    bad = []
    for path in sorted((REPO / folder).rglob("*")):
        if path.suffix not in (".py", ".cu", ".cuh") or not path.is_file():
            continue
        for line, text in _comments(path):
            bad += [f"{path.relative_to(REPO)}:{line}: {m.group()!r}" for rx in (NARRATION, TIMING_LOG)
                    for m in [rx.search(text)] if m]
    return bad


@pytest.mark.parametrize("folder", ["cu", "hgemm_bench", "hgemm_build", "hgemm_rt"])
def test_no_history_or_timing_log_in_comments(folder):
    bad = _narration(folder)
    assert not bad, bad
