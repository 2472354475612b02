"""The fused epilogue of `matmul`: what happens to the fp32 accumulator before the final rounding.

    y = scale * act(alpha * A.B + bias) + beta * C          (activation= relu | gelu | gelu_tanh | silu)
    SwiGLU (activation="swiglu"): B's N = 2F columns are [gate | up], the result is M x F:
    y = scale * silu(alpha * (A.B)[:, :F] + bias[:F]) * (alpha * (A.B)[:, F:] + bias[F:]) + beta * C

`bias` is per output column (shape (N,) or (1, N), as nn.Linear's) or per output row ((M, 1)); for SwiGLU a
column bias has the GEMM's 2F entries. The kernels take the epilogue as integers: the bit layout below is
cu/common/epilogue.cuh's (one truth each side, checked against each other by a CPU test of the header).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

BIAS_BITS = {None: 0, "col": 1, "row": 2}  # i32:epi bits 0-1
ACT_SHIFT = 4  # bits 4-7: the activation
ACTIVATIONS = {"relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}  # gelu: the erf form (torch's default)
SWIGLU_BIT = 1 << 8
SWIGLU = "swiglu"

__all__ = ["ACTIVATIONS", "Epilogue", "SWIGLU", "reference"]


@dataclass(frozen=True)
class Epilogue:
    """What a call asks of the epilogue beyond alpha/beta (None of these: the plain BLAS epilogue)."""

    bias: str | None = None  # "col" | "row" | None
    activation: str | None = None  # a key of ACTIVATIONS, "swiglu" or None
    scale: float = 1.0

    @property
    def swiglu(self) -> bool:
        return self.activation == SWIGLU

    @property
    def flags(self) -> int:
        """The kernels' i32:epi."""
        bits = BIAS_BITS[self.bias]
        if self.swiglu:
            bits |= SWIGLU_BIT
        elif self.activation:
            bits |= ACTIVATIONS[self.activation] << ACT_SHIFT
        return bits

    def transposed(self) -> "Epilogue":
        """The same epilogue on C^T (a row bias becomes a column bias and back)."""
        flip = {"col": "row", "row": "col", None: None}
        return Epilogue(flip[self.bias], self.activation, self.scale)

    def __str__(self) -> str:
        parts = [f"bias per {self.bias}"] if self.bias else []
        if self.activation:
            parts.append(self.activation)
        if self.scale != 1.0:
            parts.append(f"scale {self.scale:g}")
        return ", ".join(parts)


def _act(name: str | None, x):  # numpy float64 arrays
    import numpy as np

    if name is None:
        return x
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":
        erf = np.vectorize(math.erf)
        return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    if name == "silu":
        return x / (1.0 + np.exp(-x))
    raise ValueError(name)


def reference(acc, epi: Epilogue, alpha: float = 1.0, beta: float = 0.0, c=None, bias=None):
    """The epilogue in float64 on the exact product `acc` (..., M, N_gemm): the tests' reference."""
    import numpy as np

    acc = np.asarray(acc, dtype=np.float64)
    b = 0.0 if bias is None else np.asarray(bias, dtype=np.float64)
    if epi.bias == "col" and bias is not None:
        b = b.reshape(-1)  # (N,) broadcasts along the rows
    if epi.swiglu:
        f = acc.shape[-1] // 2
        bg = b[..., :f] if np.ndim(b) and epi.bias == "col" else b
        bu = b[..., f:] if np.ndim(b) and epi.bias == "col" else b
        y = _act("silu", alpha * acc[..., :f] + bg) * (alpha * acc[..., f:] + bu)
    else:
        y = _act(epi.activation, alpha * acc + b)
    y = epi.scale * y
    if beta != 0.0:
        y = y + beta * np.asarray(c, dtype=np.float64)
    return y
