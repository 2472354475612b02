"""The SASS of every built kernel holds the instructions its name promises (declared as `sass` in
its cu/*.toml): HMMA for mma.sync/WMMA, HGMMA for wgmma, LDGSTS for cp.async, 128-bit loads, ..., and a
`dependent_launch` kernel's Hopper build the wait for the kernel before it (ACQBULK)."""
from __future__ import annotations

import functools

import pytest

from hgemm_build.toolchain import find_tool, sass_by_function
from kernel_cases import load_manifest_or_none

CUOBJDUMP = find_tool("cuobjdump")
_M = load_manifest_or_none()


def _cases():
    for spec in (_M.kernels.values() if _M else []):
        for arch in ("90a", "90", "80"):  # the Hopper build where there is one, else Ampere
            if arch in spec.builds and (spec.sass or spec.dependent_launch):
                yield pytest.param(spec.name, arch, id=f"{spec.name}-sm_{arch}")
                break


def _promised(spec, arch: str) -> list[str]:
    """The opcodes a kernel's SASS must hold: its declared `sass`, and on Hopper, for a kernel the launcher starts
    as a programmatic dependent, the wait before its first global access (griddepcontrol.wait: ACQBULK)."""
    return list(spec.sass) + (["ACQBULK"] if spec.dependent_launch and arch.startswith("90") else [])


@functools.lru_cache(maxsize=None)
def _sass(path: str) -> dict:
    return sass_by_function(_M.root / path, CUOBJDUMP)


@pytest.mark.skipif(CUOBJDUMP is None, reason="cuobjdump not installed (pip install nvidia-cuda-cuobjdump)")
@pytest.mark.parametrize("name,arch", list(_cases()))
def test_sass_has_the_promised_instructions(name, arch):
    spec = _M.kernels[name]
    funcs = _sass(spec.builds[arch].cubin)
    for symbol in spec.symbols():
        assert symbol in funcs, f"{symbol} not in the cubin's SASS"
        text = funcs[symbol]
        for want in _promised(spec, arch):
            assert any(alt in text for alt in want.split("|")), f"{symbol} (sm_{arch}): no {want} in SASS"
