"""kgroups_sum: after a deferred K-groups GEMM, C = epilogue(the sum of the groups' fp32 planes), a CTA per tile
of C, the GEMM's programmatic dependent."""
from __future__ import annotations

from typing import Any

from ..launcher import LaunchConfig, prepare
from ..manifest import KernelSpec, Manifest
from ..validate import GemmShape
from .base import RoleHandler


class GroupSumRole(RoleHandler):
    name = "kgroups_sum"

    def launch(self, manifest: Manifest, spec: KernelSpec, dev: Any, step: Any) -> tuple[Any, LaunchConfig]:
        return prepare(manifest, spec, dev, GemmShape(step.M, step.N, 1), {}, False, None)
