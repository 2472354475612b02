"""CPU checks of the sanitizer run (hgemm_bench/sanitize.py, behind scripts/sanitize.py): which matmul
plans the harness (hgemm_bench.matmul_checks) runs for the matmul kernels (every kernel at an aligned and a
ragged shape), and how the driver reads compute-sanitizer's output."""
from __future__ import annotations

import subprocess
import sys

import pytest
from kernel_cases import ROOT, load_manifest_or_none

from hgemm_bench import sanitize as S
from hgemm_rt import planner
from hgemm_rt.roles import handler
from hgemm_rt.roles.splitk import SplitKRole
from hgemm_bench import matmul_checks as T
from hgemm_bench.kernel_checks import selected_specs

MANIFEST = load_manifest_or_none()

needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no build manifest (run build_kernels.py)")


@needs_manifest
@pytest.mark.parametrize("cc", [(9, 0), (8, 0)])
def test_every_matmul_kernel_is_scheduled_at_an_aligned_and_a_ragged_shape(cc):
    names, unbuilt = T.matmul_kernel_names(MANIFEST, None, cc)
    if not names:
        pytest.skip(f"no matmul kernel built for sm_{cc[0]}{cc[1]}")
    assert set(unbuilt) | names == {s.name for s in selected_specs(MANIFEST, None, helpers=True)}
    sched, covered = T.matmul_schedule(MANIFEST, cc, 132, names)
    assert T.missing(names, covered) == []
    feats = {(k, f) for k, f, _c in covered}
    for n in names:
        spec = MANIFEST.kernels[n]
        for axis, values in spec.variants.items():  # every variant (b = row | col) is launched
            assert all((n, f"{axis}={v}") in feats for v in values), n
        role = handler(spec.role)
        if cc >= (9, 0) and n.startswith(("matmul_gemm_mma_", "matmul_gemm_wgmma_")) and \
                isinstance(role, SplitKRole) and role.splits_k(spec):  # (what matmul may split: not the fused kernel)
            assert (n, "split-K") in feats, n  # a cluster of CTAs along K
        if n.startswith("matmul_gemm_"):
            assert (n, "alpha/beta") in feats, n
    for dt in {MANIFEST.kernels[n].dtype for n in names}:
        # (an alpha/beta copy-out follows a catalogue kernel: sm_80 has none for bf16)
        for f in ("transposing", "misaligned source") + (("alpha/beta",) if cc >= (9, 0) else ()):
            assert (f"matmul_copy2d_{dt}", f) in feats
    for case, plan in sched:  # each is the plan matmul builds for that route and problem
        assert planner.recipe_for(plan.route, case.problem(), MANIFEST) == plan
    assert len(sched) < 6 * len(names)  # a few shapes per kernel: racecheck must end inside one GPU call


@needs_manifest
def test_a_pattern_selects_only_matching_kernels():
    names, _ = T.matmul_kernel_names(MANIFEST, "matmul_copy2d_*", (9, 0))
    assert names == {"matmul_copy2d_f16", "matmul_copy2d_bf16", "matmul_copy2d_f32"}
    _sched, covered = T.matmul_schedule(MANIFEST, (9, 0), 132, names)
    assert {k for k, _f, _c in covered} == names and T.missing(names, covered) == []
    assert all(s.catalogue for s in selected_specs(MANIFEST, "hgemm_mma*", helpers=False))
    assert selected_specs(MANIFEST, "matmul_copy2d_*", helpers=False) == []
    both = {s.name for s in selected_specs(MANIFEST, "matmul_copy2d_f16,matmul_gemm_wgmma_fused_*", helpers=True)}
    assert "matmul_copy2d_f16" in both and "matmul_gemm_wgmma_fused_f16_tn" in both and "matmul_copy2d_bf16" not in both


@needs_manifest
def test_a_pattern_that_matches_no_kernel_is_an_error_not_a_clean_run():
    out = run_script("--kernels", "no_such_kernel_*,nor_this", "--sanitizer", sys.executable)
    assert out.returncode == 2 and "no kernel of this build matches" in out.stderr, out


def test_views_sit_where_the_case_says():
    case = T.MatmulCase("f16", "ragged", "x", T.Operand("row", 1, 3), T.Operand("col", 3, 5), T.Operand(), 0.5, 0.0)
    a, b, c = case.views()
    M, N, K = T.CHECK_SHAPES["ragged"]
    assert (a.rows, a.cols, a.rs, a.cs, a.align) == (M, K, K + 3, 1, 2)  # offset 1 fp16: 2-byte aligned
    assert (b.rows, b.cols, b.rs, b.cs, b.align) == (K, N, 1, K + 5, 2)
    assert (c.rs, c.cs, c.align) == (N, 1, 256)
    assert not case.problem().plain and case.problem().beta_zero


RACE_LOG = """========= COMPUTE-SANITIZER
ok  matmul_gemm_simt_f16 | f16 aligned
LAUNCHED kernels=26 launches=220
========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)
"""

INIT_LOG = """========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 16 bytes
=========     at __ldg(const uint4 *)+0x770 in sm_32_intrinsics.hpp:131
=========         Device Frame: hgu::load16_any(const void *)+0x770 in matmul_util.cuh:115
=========         Device Frame: matmul_copy2d_f16+0x10 in matmul.cu:409
========= 
========= Uninitialized __global__ memory read of size 16 bytes
=========         Device Frame: matmul_copy2d_f16+0x10 in matmul.cu:409
========= 
BAD copy A->tA | f16 ragged
LAUNCHED kernels=3 launches=9
========= ERROR SUMMARY: 2 errors
"""


def test_summaries_count_errors_launches_and_wrong_results():
    r = S.summarize("racecheck/matmul", RACE_LOG, 0, 12.0)
    assert r.clean and (r.errors, r.kernels, r.launches) == (0, 26, 220)
    r = S.summarize("initcheck/matmul", INIT_LOG, 1, 3.0)
    assert not r.clean and r.errors == 2 and "wrong=1" in r.line and "matmul_copy2d_f16: 2" in r.line
    assert S.errors_by_kernel(INIT_LOG) == {"matmul_copy2d_f16": 2}
    r = S.summarize("memcheck/gemm", "========= COMPUTE-SANITIZER\nok  x\n", None, 400.0)
    assert not r.clean and "TIMEOUT" in r.line and r.errors == -1 and r.launches == 1


def run_script(*args: str, cwd=ROOT, module: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, *(("-m", module) if module else (str(ROOT / "scripts" / "sanitize.py"),)), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_script_keeps_its_command_line_and_its_children_find_the_driver():
    out = run_script("--tools", "memcheck,racecheck,synccheck,initcheck", "--timeout", "250", "--sanitizer", "")
    assert out.returncode == 2 and "compute-sanitizer not found" in out.stderr  # the flags parsed
    out = run_script("--tools", "memcheck,bogus")
    assert out.returncode == 2 and "unknown tool" in out.stderr
    # the parent starts each child as `python -m hgemm_bench.sanitize --child PART` in PACKAGE_DIR
    out = run_script("--help", cwd=S.PACKAGE_DIR, module="hgemm_bench.sanitize")
    assert out.returncode == 0 and "--tools" in out.stdout
