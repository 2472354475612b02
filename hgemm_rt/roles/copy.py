"""copy: dst = alpha * src (zero outside src_rows x src_cols) + beta * dst with the fused epilogue (a SwiGLU pass
where src has 2 * dst.cols columns): the padded operands and the copy-out of other roles' recipes."""
from __future__ import annotations

from typing import Any

from ..launcher import LaunchConfig, prepare
from ..manifest import KernelSpec, Manifest
from ..problem import kernel_batch
from ..validate import GemmShape
from .base import RoleHandler, on_grid_z
from .glue import batch_strides


def copy_scalars(step: Any, epilogue: dict) -> dict[str, int]:
    """The copy ABI's integers (the split kernels share it): sizes, strides, the batch's per-level strides."""
    outer, inner = kernel_batch(step.batch)
    s, d = step.src, step.dst
    (sso, ssi), (sdo, sdi) = batch_strides(s, step.batch), batch_strides(d, step.batch)
    shift = getattr(step, "shift", None)
    (seo, sei) = batch_strides(shift, step.batch) if shift is not None else (0, 0)
    return {"M": d.rows, "N": d.cols, "src_rows": step.src_rows, "src_cols": step.src_cols,
            "srs": s.rs, "scs": s.cs, "drs": d.rs, "dcs": d.cs, **epilogue,
            "batch_inner": inner, "bss_o": sso, "bss_i": ssi, "bsd_o": sdo, "bsd_i": sdi, "bse_o": seo, "bse_i": sei}


class CopyRole(RoleHandler):
    name = "copy"

    def launch_shape(self, step: Any) -> GemmShape:
        return GemmShape(step.dst.rows, step.dst.cols, 1)

    def launch(self, manifest: Manifest, spec: KernelSpec, dev: Any, step: Any) -> tuple[Any, LaunchConfig]:
        fn, cfg = prepare(manifest, spec, dev, self.launch_shape(step), {}, False, None)
        outer, inner = kernel_batch(step.batch)
        return fn, on_grid_z(cfg, spec, 1, outer * inner)
