"""What matmul says when no route runs a problem (CPU only): the reason and the fix that helps, not a rebuild
where a rebuild cannot help (a helper kernel named, an accumulation the kernel cannot honour, an architecture the
kernel does not support)."""
from __future__ import annotations

import pytest

from hgemm_rt import planner
from hgemm_rt.problem import Problem, View
from hgemm_rt.roles import GemmRole, handler
from hgemm_rt.roles.glue import acc_variant
from kernel_cases import load_manifest_or_none

MANIFEST = load_manifest_or_none()
needs_manifest = pytest.mark.skipif(MANIFEST is None, reason="no kernel build (python build_kernels.py)")
HOPPER, ADA = (9, 0), (8, 9)


def _problem(dtype="f16", acc="f32", M=256, N=256, K=256):
    return Problem(dtype, acc, View.make("A", M, K, K, 1, 256), View.make("B", K, N, N, 1, 256),
                   View.make("C", M, N, N, 1, 256), plain=True, beta_zero=True)


def _first(pred):
    return next(s for s in MANIFEST.kernels.values() if pred(s))


@needs_manifest
def test_a_helper_kernel_named_is_called_a_helper_not_a_missing_build():
    copier = _first(lambda s: not isinstance(handler(s.role), GemmRole) and s.dtype == "f16")
    prob = _problem()
    assert planner.ranked_recipes(prob, MANIFEST, HOPPER, 132, copier.name) == []
    why = planner.why_no_recipe(prob, MANIFEST, HOPPER, copier.name)
    assert "helper kernel" in why and copier.role in why and "rebuild" not in why


@needs_manifest
def test_an_accumulation_the_kernel_cannot_honour_names_the_request():
    f16_only = _first(lambda s: isinstance(handler(s.role), GemmRole) and s.dtype == "f16" and
                      acc_variant(s, "f16", "f32") is False)
    prob = _problem(acc="f32")
    assert planner.ranked_recipes(prob, MANIFEST, HOPPER, 132, f16_only.name) == []
    why = planner.why_no_recipe(prob, MANIFEST, HOPPER, f16_only.name)
    assert "accumulate='f32'" in why and "rebuild" not in why


@needs_manifest
def test_a_kernel_for_another_architecture_says_which_it_supports():
    hopper_only = _first(lambda s: isinstance(handler(s.role), GemmRole) and s.archs == ("90a",) and s.dtype == "f16")
    prob = _problem()
    assert planner.ranked_recipes(prob, MANIFEST, ADA, 128, hopper_only.name) == []
    why = planner.why_no_recipe(prob, MANIFEST, ADA, hopper_only.name)
    assert "supports only sm_90a" in why and "build_kernels.py" not in why


@needs_manifest
def test_with_no_kernel_named_a_rebuild_is_the_fix_it_names():
    assert "rebuild with build_kernels.py" in planner.why_no_recipe(_problem(), MANIFEST, ADA)
