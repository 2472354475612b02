"""The user docs on the CPU: README.md and docs/*.md link only to files that exist, the generated ladder
doc says what the profile records and never prints a placeholder where a value is missing, and the
figures' provenance stated in docs/matmul.md is the one its results files record."""
from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hgemm_bench import ladder_doc as ld  # noqa: E402
from hgemm_bench import profile as pf  # noqa: E402

DOCS = ROOT / "docs"
USER_DOCS = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# a lone "?" (not part of a word, a code span or a sentence's end): what a missing value used to render as
PLACEHOLDER = re.compile(r"(?:^|[\s(;:,])\?(?=$|[\s);:,.])", re.M)


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # relative ones only


def heading_anchor(title: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {heading_anchor(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_an_existing_file_and_heading(doc):
    broken = []
    for target in links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert broken == [], f"{doc.name}: links to nothing: {broken}"


def test_the_link_check_sees_the_links_it_checks():
    assert "docs/ladder.md" in links(ROOT / "README.md") and "docs/matmul.md" in links(ROOT / "README.md")
    assert heading_anchor("Any shape: `matmul`") == "any-shape-matmul"


def test_docs_ladder_md_has_no_placeholder():
    text = (DOCS / "ladder.md").read_text()
    assert PLACEHOLDER.findall(text) == [], [ln for ln in text.splitlines() if PLACEHOLDER.search(ln)][:3]
    assert "the pass counts are not recorded" in text  # the recorded profile has none: said, not a "?"


def test_the_placeholder_pattern_finds_what_the_old_generator_wrote():
    for old in ("replayed each kernel ? times", "Default variant: acc=f16; ? ncu passes.", "driver ?, CUDA 13.0"):
        assert PLACEHOLDER.search(old), old
    for fine in ("`--only '^(8192|16384)x'`", "Why? Because", "a?b"):
        assert not PLACEHOLDER.search(fine), fine


def test_a_profile_missing_its_optional_fields_renders_without_a_placeholder():
    doc = pf.load(ROOT / "tests" / "data" / "ladder_profile_sample.json")
    bare = copy.deepcopy(doc)
    bare["device"] = {"name": bare["device"]["name"]}
    bare["build"] = {}
    for key in ("created", "command"):
        bare.pop(key, None)
    bare["ncu"].pop("version", None)
    for k in bare["kernels"]:
        k.pop("passes", None)
        k.pop("reason", None)
    md = ld.render(bare, ld.load_notes())
    assert PLACEHOLDER.findall(md) == [] and "ncu passes" not in md and "the pass counts are not recorded" in md


def test_recorded_pass_counts_are_shown():
    doc = pf.load(ROOT / "tests" / "data" / "ladder_profile_sample.json")
    for i, k in enumerate(doc["kernels"]):
        k["passes"] = 11 + (i == 0)
    md = ld.render(doc, ld.load_notes())
    assert "replayed each kernel 11–12 times (`--replay-mode" in md and "; 12 ncu passes." in md


def test_the_results_files_docs_matmul_md_names_are_described_as_they_record():
    text = (DOCS / "matmul.md").read_text()
    rows = re.findall(r"^\| \[(matmul_\w+\.json)\]\(\1\) \| ([^|]+) \| `(\w+)` \| `(\w+)` \| ([\d-]+) \|", text, re.M)
    files = sorted(p.name for p in DOCS.glob("matmul_*_h100.json"))
    assert sorted(r[0] for r in rows) == files
    for name, card, build, git, date in rows:
        doc = json.loads((DOCS / name).read_text())
        assert (card.strip(), build, git, date) == (doc["device"]["name"], doc["build"]["hash"], doc["build"]["git"],
                                                    doc["created"][:10]), name


# -- the README ------------------------------------------------------------------------------------

README = ROOT / "README.md"
FIRST_SCREEN = 45  # lines
FIGURE = re.compile(r"\d(?:\.\d+)?\s*(?:us|µs|ms|TFLOPS|TB/s|GB/s|MHz)\b|\d\.\d+x\b|\d+%")


def test_the_readme_first_screen_runs_matmul_and_the_torch_path():
    head = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    for shown in ('pip install -e ".[build,torch]"', "python build_kernels.py", "hg.matmul(a, b)", "out=c",
                  'activation="gelu"', "hg.explain(", "import hgemm_rt.torch as ht", "ht.linear(",
                  "ht.replace_linear(model)", "torch.compile(", "](#results)", "](#the-ladder)"):
        assert shown in head, shown


def test_the_first_screen_calls_only_what_the_runtime_exports():
    import hgemm_rt as hg

    head = "\n".join(README.read_text().splitlines()[:FIRST_SCREEN])
    assert {f for f in re.findall(r"\bhg\.(\w+)\(", head)} <= set(hg.__all__)
    source = (ROOT / "hgemm_rt" / "torch.py").read_text()
    exported = set(re.search(r"__all__ = \[([^\]]*)\]", source).group(1).replace('"', "").replace(" ", "").split(","))
    assert set(re.findall(r"\bht\.(\w+)\(", README.read_text())) <= exported


def test_every_figure_in_the_readme_is_in_the_generated_results_section():
    from hgemm_bench import readme

    text = README.read_text()
    outside = text[:text.index(readme.START)] + text[text.index(readme.END):]
    found = [(ln, m.group(0)) for ln in outside.splitlines() for m in FIGURE.finditer(ln)]
    assert found == [], "a measured figure outside the generated results: move it to docs/matmul.md"


def test_a_results_file_named_with_its_build_and_date_is_named_as_it_records():
    said = re.compile(r"docs/(\w+\.json)\W[^`]{0,60}?build `([0-9a-f]+)`, (\d{4}-\d\d-\d\d)")
    hits = [m.groups() for doc in USER_DOCS for m in said.finditer(doc.read_text().replace("\n", " "))]
    assert hits  # the README's --matmul figures
    for name, build, date in hits:
        doc = json.loads((DOCS / name).read_text())
        assert (build, date) == (doc["build"]["hash"], doc["created"][:10]), name


def quick_start_code() -> str:
    """The Python blocks of the README's Quick start, in order, as one program."""
    text = README.read_text()
    start = text.index("## Quick start")
    section = text[start:text.index("\n## ", start + 1)]
    return "\n".join(re.findall(r"^```python\n(.*?)^```", section, re.S | re.M))


def test_the_quick_start_has_the_two_programs_it_shows():
    code = quick_start_code()
    compile(code, "README.md", "exec")  # valid Python as written
    assert "hg.matmul(a, b, out=c" in code and "ht.replace_linear(model)" in code


@pytest.mark.gpu
def test_the_readme_quick_start_runs_as_written():
    """The first screen's code, verbatim, on the GPU: the in-place call, the fused epilogue, numpy in and
    out, F.linear and a compiled model on hgemm, each against torch's own result in float64."""
    torch = pytest.importorskip("torch")
    scope: dict = {}
    exec(compile(quick_start_code(), "README.md (Quick start)", "exec"), scope)  # noqa: S102
    a, b, w, bias = (scope[k].double() for k in ("a", "b", "w", "bias"))

    def close(got, want):
        got = torch.as_tensor(got).double().to(want.device)
        assert (torch.linalg.norm(got - want) / torch.linalg.norm(want)).item() < 1e-2

    close(scope["c"], 1.5 * (a @ b))  # c = a @ b, then c = 0.5 * a @ b + c
    close(scope["y"], torch.nn.functional.gelu(a @ w.T + bias))
    assert isinstance(scope["z"], scope["np"].ndarray)  # numpy out
    close(scope["z"], torch.full((64, 32), 128.0, dtype=torch.float64))
    close(scope["lin"], a @ w.T + bias)
    first = scope["model"]._orig_mod[0]  # the compiled module's Linear, now hgemm's
    assert type(first).__module__ == "hgemm_rt.torch"
    close(scope["h"], torch.nn.functional.gelu(a @ first.weight.double().T + first.bias.double()))
