"""The matmul bench's sections as data (`python bench.py --matmul`): each section's rows (shapes, the
host section's calls), the baseline they are measured against, its target; and the wall-time
protocol. No GPU, no runtime import: cli reads the section names here, matmul_section measures them.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """C (M x N) = A (M x K) . B (K x N); an operand's order is how it is stored (row- or column-major)."""
    M: int
    N: int
    K: int
    dtype: str = "f16"
    a_order: str = "row"
    b_order: str = "row"
    batch: int = 1  # matrices of this shape, (batch, M, K) @ (batch, K, N) (the torch-tensor sections only)
    # the eager section's workload: "bias_gelu" (gelu(x @ W^T + b), W: N x K) or "mlp" (a SwiGLU MLP with
    # the residual: x + (silu(g) * u) @ W2^T with [g | u] = x @ W1^T; M tokens, hidden size K, N = 2F)
    epilogue: str = ""
    routing: str = ""  # the moe section: "uniform" or "skewed" tokens per expert (batch = experts, M = tokens)
    # the decode_graph section: (name, N, K) of each linear layer one step runs, in order, M token rows through
    # each; N x K is then their weights' total (decode_step), so the step's flops and weight bytes are one GEMM's
    layers: tuple[tuple[str, int, int], ...] = ()

    @property
    def cell(self) -> str:
        """The shape as the section tables print it (shape_text), which --only matches."""
        return shape_text(self.M, self.N, self.K, self.dtype, self.a_order, self.b_order, self.batch, self.epilogue,
                          self.routing, self.layers)

    @property
    def label(self) -> str:
        if self.layers:
            return f"decode step M={self.M}: {layers_text(self.layers)}"
        mnk = f"{self.M}x{self.N}x{self.K}"
        mnk = mnk if self.batch == 1 else f"{self.batch}x({mnk})"
        if self.routing:
            return f"{self.batch} experts {self.routing}, {self.M} tokens x {self.N} x {self.K}"
        return f"{self.epilogue} {mnk}" if self.epilogue else mnk


def shape_text(M: int, N: int, K: int, dtype: str, a_order: str, b_order: str, batch: int = 1, epilogue: str = "",
               routing: str = "", layers: tuple = ()) -> str:
    """A row's shape as the section tables print it: "MxNxK dtype A order B order" (a batch as "Bx(MxNxK)", the
    eager section's workload first; the moe section: experts, routing, M tokens x N x K; a decode step: M and
    each layer's name and N x K)."""
    if layers:
        return f"decode step M={M}: {layers_text(layers)}, {dtype} A {a_order} B {b_order}"
    mnk = f"{M}x{N}x{K}"
    if routing:
        return f"{batch} experts {routing}, {mnk} {dtype}"
    what = f"{epilogue} " if epilogue else ""
    return f"{what}{mnk if batch == 1 else f'{batch}x({mnk})'} {dtype} A {a_order} B {b_order}"


def layers_text(layers: tuple) -> str:
    """A decode step's layers as "qkv 6144x4096, o 4096x4096, ..." (name, then N x K of its weight)."""
    return ", ".join(f"{name} {n}x{k}" for name, n, k in layers)


def selected_shapes(section: "Section", only: str | None) -> tuple[Shape, ...]:
    """The section's shapes whose table text (Shape.cell) matches the regular expression `only` (re.search);
    every shape where it is None."""
    if only is None:
        return section.shapes
    pattern = re.compile(only)
    return tuple(s for s in section.shapes if pattern.search(s.cell))


def cube(s: int, dtype: str = "f16", a_order: str = "row", b_order: str = "row") -> Shape:
    return Shape(s, s, s, dtype, a_order, b_order)


@dataclass(frozen=True)
class HostCall:
    """One row of the host section: hg.matmul called in one form on one input kind, and beside it the
    kind's own matmul called in the reference form, measured the same way."""
    label: str
    kind: str  # "DeviceArray", "torch" or "cupy"
    form: str  # "out": matmul(a, b, c); "new": matmul(a, b); "plan": a Matmul(a, b, c) called; "graph": replayed
    reference: str | None = None  # "out": kind.matmul(a, b, out=c); "new": kind.matmul(a, b); None: no reference


# What a section's rows are measured against (the keys of matmul_section.KINDS, which measures each).
BASELINES = {
    "cublas": "the fastest cuBLAS call on the same buffers in the same layout: GemmEx at each accumulation "
              "(hgemm_rt.cublas.matmul) and the cuBLASLt heuristic's top LT_ALGOS candidates at each "
              "(hgemm_rt.cublaslt.matmul), every one checked against float64 before it is timed",
    "torch": "torch.matmul on the same torch tensors",
    "batched": "the faster of cublasGemmStridedBatchedEx called directly through nvmath on the same torch tensors "
               "(hgemm_rt.cublas.gemm_strided_batched at each accumulation; a transposed view is a transpose flag) "
               "and torch.matmul on them, GPU time, every call checked against float64 before it is timed",
    "grouped": "a loop of cuBLAS GEMMs, one torch.mm per expert into its rows of the output (GPU time: the "
               "launches queued ahead); torch._grouped_mm beside it where the installed torch has it",
    "eager": "the same work in torch eager mode: F.gelu(F.linear(x, W, b)); the SwiGLU MLP as "
             "g, u = (x @ W1^T).chunk(2); x + (F.silu(g) * u) @ W2^T",
    "graph": "the same decode step's linear layers captured in one CUDA graph with torch.matmul(x, w.t(), out=y) "
             "on the same tensors (what F.linear runs), replayed; GPU time per step",
    "host": "each input kind's own matmul (HostCall.reference), and torch's own call beside each LayerCall, "
            "wall time per call",
}


@dataclass(frozen=True)
class Section:
    """A table of the matmul bench: its rows (shapes, and for the host section the call forms at each
    shape) and the baseline every row is measured against."""
    title: str
    baseline: str  # a key of BASELINES
    shapes: tuple[Shape, ...]
    calls: tuple[HostCall, ...] = ()  # the host section's call forms, each measured at every shape
    target: float | None = None  # ratio to the baseline to reach, None: informative
    judge: str = "each"  # the target holds for "each" row, or for the "geomean" of the rows
    floor: float | None = None  # with judge "geomean": no row may fall below this ratio either
    bandwidth: bool = False  # memory-bound rows: show GB/s and the share of the measured HBM bandwidth


LINEAR = 4096  # N = K of the small-M and nn.Linear rows

# (N, K) of the linear layers of a Llama-3 8B decoder: attention projection, MLP up/gate, MLP down, and
# the vocabulary projection (a 1 GB weight: its inputs take seconds of host time to make, so one
# layout only). Decoding multiplies a few token rows by each of them.
DECODE_LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336))
VOCAB = (128256, 4096)

# One Llama-3 8B decoder layer's linear layers as serving engines run them, (name, N, K) with the weight N x K as
# nn.Linear holds it: q, k and v fused (32 + 2 x 8 heads of 128), the attention output, gate and up fused, down
DECODE_STEP = (("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096), ("down", 4096, 14336))
DECODE_GRAPH_TOKENS = (1, 8, 32, 64)  # token rows of a decode step: one sequence, and batches of them


def decode_step(M: int, layers: tuple[tuple[str, int, int], ...] = DECODE_STEP, dtype: str = "bf16") -> Shape:
    """One decode step of M token rows through `layers`, B as nn.Linear holds it: N x K is the layers' weights
    in total, K the first layer's (so tflops and the weight bytes of the row are the step's)."""
    K = layers[0][2]
    total = sum(n * k for _name, n, k in layers)
    if total % K:
        raise ValueError(f"decode_step: the weights of {layers_text(layers)} ({total} elements) are no multiple "
                         f"of the first layer's K = {K}")
    return Shape(M, total // K, K, dtype, b_order="col", layers=tuple(layers))


# The public sweep (issue: every shape class at or above cuBLAS), as data: squares, token counts against the
# (N, K) of real transformer layers, small K, small N, K much larger than M*N, and unaligned neighbours; fp16
# and bf16, B as nn.Linear presents it (W.t(): column-major) and a row-major subset.
PUBLIC_SQUARES = (256, 512, 1024, 2048, 4096, 8192, 16384)
PUBLIC_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
# Llama-3 8B attention out / MLP up / MLP down / fused QKV / the k and v projections of its grouped-query attention
# (8 KV heads of 128), Llama-3 70B attention
PUBLIC_LAYERS = ((4096, 4096), (14336, 4096), (4096, 14336), (6144, 4096), (1024, 4096), (8192, 8192))
PUBLIC_SMALL_K = (16, 32, 64, 128, 256)
PUBLIC_SMALL_N = (16, 64, 128, 256)
PUBLIC_DEEP_K = ((64, 64, 65536), (128, 128, 131072), (256, 256, 65536))
PUBLIC_UNALIGNED = ((1023, 1023, 1023), (2049, 2049, 2049), (4095, 4096, 4096), (4097, 4097, 4097))


def public_sweep() -> tuple["Shape", ...]:
    shapes = [cube(s, dt, b_order="col") for dt in ("f16", "bf16") for s in PUBLIC_SQUARES]
    shapes += [Shape(m, n, k, dt, b_order="col") for dt in ("f16", "bf16") for n, k in PUBLIC_LAYERS
               for m in PUBLIC_TOKENS]
    shapes += [Shape(m, 4096, 4096, "f16") for m in (16, 1024, 16384)]  # B row-major
    shapes += [Shape(8192, 8192, k, dt, b_order="col") for dt in ("f16", "bf16") for k in PUBLIC_SMALL_K]
    shapes += [Shape(16384, n, 4096, dt, b_order="col") for dt in ("f16", "bf16") for n in PUBLIC_SMALL_N]
    shapes += [Shape(m, n, k, "f16", b_order="col") for m, n, k in PUBLIC_DEEP_K]
    shapes += [Shape(m, n, k, "f16") for m, n, k in PUBLIC_UNALIGNED]
    return tuple(shapes)


# The linear layers of open models, (N, K) each: attention q/o, the k/v projections of grouped-query attention, MLP
# up/gate, MLP down (Phi-3-mini's fused qkv and gate/up); at the token counts of a short prefill, a prompt and a long one
MODEL_LAYERS = (
    ("Llama-3 8B", ((4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336))),
    ("Llama-3 70B", ((8192, 8192), (1024, 8192), (28672, 8192), (8192, 28672))),
    ("Qwen2 7B", ((3584, 3584), (512, 3584), (18944, 3584), (3584, 18944))),
    ("Phi-3 mini", ((9216, 3072), (3072, 3072), (16384, 3072), (3072, 8192))),
    ("Gemma-2 9B", ((4096, 3584), (2048, 3584), (3584, 4096), (14336, 3584), (3584, 14336))),
)
MODEL_TOKENS = (128, 512, 2048)


def model_layers() -> tuple["Shape", ...]:
    layers = dict.fromkeys(nk for _model, nks in MODEL_LAYERS for nk in nks)
    return tuple(Shape(m, n, k, "f16", b_order="col") for (n, k) in layers for m in MODEL_TOKENS)


# (experts, tokens, N, K): Mixtral-like 8 x 4096, Qwen-MoE-like 64 small experts, DeepSeek-V3-like 256 experts
# of hidden size 7168, and a small-batch decode-like step (tokens per expert ~ 32)
MOE_SHAPES = ((8, 16384, 4096, 4096), (64, 32768, 1408, 2048), (256, 65536, 2048, 7168), (128, 4096, 768, 2048))


@dataclass(frozen=True)
class LayerCall:
    """A host row called as a model calls a layer: x (M, K) a new activation every call (the next of LAYER_POOL
    tensors at distinct addresses), w (N, K) as nn.Linear holds it, bias (N,). `ours` against `theirs`, each
    a Python expression in x, w and bias over ht (hgemm_rt.torch), hg (hgemm_rt), torch and F
    (torch.nn.functional): the label is the code that is timed."""
    ours: str
    theirs: str
    weight_grad: bool = False  # w requires grad (grad mode on): both build their autograd graph every call


LAYER_CALLS = (
    LayerCall("ht.linear(x, w)", "F.linear(x, w)"),
    LayerCall("ht.linear(x, w, bias)", "F.linear(x, w, bias)"),
    LayerCall("ht.linear(x, w)", "F.linear(x, w)", weight_grad=True),
    LayerCall("ht.mm(x, w.t())", "torch.mm(x, w.t())"),
    LayerCall("hg.matmul(x, w.t())", "torch.matmul(x, w.t())"),
)
LAYER_POOL = 16  # distinct activations cycled through: no call sees the address of the call before

HOST_CALLS = (
    HostCall("DeviceArray, out given", "DeviceArray", "out"),
    HostCall("torch, out given", "torch", "out", "out"),
    HostCall("torch, out=None", "torch", "new", "new"),
    HostCall("CuPy, out given", "cupy", "out", "out"),
    HostCall("Matmul(a, b, c) object, mm(a, b, c), torch", "torch", "plan", "out"),
    HostCall("CUDA graph replay, torch (per call)", "torch", "graph"),
)

SECTIONS: dict[str, Section] = {
    "ragged": Section("sizes no tile divides, fp16 NN", "cublas",
                      (cube(4095), cube(4100)), target=2.0),
    "sweep": Section("squares, fp16 NN", "cublas", tuple(cube(s) for s in (1024, 2048, 4096, 8192)),
                     target=0.9, judge="geomean"),
    "public": Section("the public shape sweep: squares 256-16384, token counts 1-16384 against transformer layers, "
                      "small K, small N, deep K, unaligned neighbours; fp16 and bf16 (target: geomean >= 1.05x, "
                      "no shape below 0.95x)", "cublas", public_sweep(), target=1.05, judge="geomean", floor=0.95),
    "models": Section("the linear layers of open models (" + ", ".join(m for m, _ in MODEL_LAYERS) + ") at "
                      + ", ".join(map(str, MODEL_TOKENS)) + " tokens, fp16, B as nn.Linear holds it (informative)",
                      "cublas", model_layers()),
    "strides": Section("operand rows off 32-byte boundaries (fp16 K = 1000 and 3000: 2000- and 6000-byte rows, which TMA "
                       "reads 1.4-1.7x slower unless matmul packs them), B as nn.Linear holds it (informative)", "cublas",
                       tuple(Shape(m, n, k, "f16", b_order="col") for m, n, k in
                             ((1024, 1024, 1000), (2048, 2048, 1000), (8192, 8192, 1000), (1024, 1024, 3000),
                              (4096, 4096, 3000)))),
    "smallm": Section(f"small M, N = K = {LINEAR}, B row-major (NN) and column-major (TN)", "cublas",
                      tuple(Shape(m, LINEAR, LINEAR, b_order=b) for m in (16, 128) for b in ("row", "col")),
                      target=0.9),
    "layouts": Section("column-major A and/or B; bf16 and fp32 (informative)", "cublas",
                       (cube(4096, a_order="col"), cube(4096, a_order="col", b_order="col"),
                        cube(4096, b_order="col"), cube(2048, "bf16"), cube(2048, "f32"))),
    "squares": Section("large squares, fp16, B as nn.Linear holds it (column-major), for the steady-state protocol "
                       "(bench.py --matmul squares --steady): target every row >= 1.0x", "cublas",
                       tuple(cube(s, b_order="col") for s in (2048, 4096, 8192, 16384)), target=1.0),
    "fp32": Section("fp32 inputs at fp32 accuracy (accumulate='f32': 3xFP16, rows scaled into fp16 heads and residuals "
                    "on the fp16 tensor cores) against cuBLAS's "
                    "fp32 SGEMM (GemmEx and cuBLASLt at COMPUTE_32F, no TF32); target: every row >= 2x, and the error "
                    "against float64 (rel_error) within 2x of cuBLAS's (cublas_rel_error)", "cublas",
                    tuple(cube(s, "f32") for s in (2048, 4096, 8192)) + (cube(4096, "f32", b_order="col"),),
                    target=2.0),
    "fp32small": Section("fp32 inputs at fp32 accuracy below 2048^3 (accumulate='f32': 3xTF32 whose split happens in the "
                         "GEMM's shared memory, one launch), B row-major and as nn.Linear holds it, against cuBLAS's fp32 "
                         "SGEMM as in fp32; target: every row >= 1.0x", "cublas",
                         tuple(cube(s, "f32", b_order=b) for s in (256, 512, 1024) for b in ("row", "col")),
                         target=1.0),
    "torch": Section("hg.matmul(x, w.t()) vs torch.matmul(x, w.t()), w an (N, K) weight as nn.Linear holds it; "
                     "target on the wall-time ratio",
                     "torch", target=0.95, shapes=tuple(Shape(m, n, k, dt, b_order="col") for dt in ("f16", "bf16")
                                    for m, n, k in ((1024,) * 3, (2048,) * 3, (4096,) * 3, (1, LINEAR, LINEAR),
                                                    (16, LINEAR, LINEAR), (128, LINEAR, LINEAR)))),
    "decode": Section("decoding: M = 1 and 16 token rows against Llama-3 8B linear layers, B as nn.Linear "
                      "holds it (column-major), fp16 and bf16, and row-major fp16", "cublas",
                      tuple(Shape(m, n, k, dt, b_order=b) for dt, b in (("f16", "col"), ("bf16", "col"), ("f16", "row"))
                            for n, k in DECODE_LAYERS + ((VOCAB,) if (dt, b) == ("f16", "col") else ())
                            for m in (1, 16)), bandwidth=True),
    "decode_graph": Section("decode steps as serving engines run them: the linear layers of one Llama-3 8B decoder "
                            "layer (" + layers_text(DECODE_STEP) + "; bf16, weights N x K as nn.Linear holds them) at M = "
                            + ", ".join(map(str, DECODE_GRAPH_TOKENS)) + " token rows, the step's GEMMs captured in one "
                            "CUDA graph and replayed back to back, hg.matmul against torch.matmul captured the same way "
                            "(GPU time per step, the weights read from HBM); target: geomean >= 1.05x, every row >= 1.0x",
                            "graph", tuple(decode_step(m) for m in DECODE_GRAPH_TOKENS), target=1.05, judge="geomean",
                            floor=1.0, bandwidth=True),
    "batched": Section("batched: attention (batch x heads = 64 and 256: Q.K^T with K^T a transposed view, then P.V) "
                       "and 32 mid-size GEMMs, fp32 batches, hg.matmul vs cuBLAS strided-batched (cublasGemmStridedBatchedEx "
                       "through nvmath) and torch.matmul on the same 3-D torch tensors; target: every row >= 1.0x "
                       "the faster of the two (GPU time)", "batched",
                       tuple(Shape(s, s, d, "f16", b_order="col", batch=bh) for bh in (64, 256) for s, d in ((512, 64), (2048, 128)))
                       + tuple(Shape(s, d, s, "f16", batch=bh) for bh in (64, 256) for s, d in ((512, 64), (2048, 128)))
                       + (Shape(1024, 1024, 1024, "f16", batch=32), Shape(1024, 1024, 1024, "bf16", batch=32))
                       # fp32 at fp32 accuracy (3xFP16 or 3xTF32 split in shared memory, batched)
                       + tuple(Shape(s, s, s, "f32", batch=b) for s, b in ((1024, 16), (512, 8), (256, 64))),
                       target=1.0),
    "fused": Section("fused epilogue: GEMM + bias + gelu, hg.matmul(x, W.T, bias=b, activation='gelu') against torch "
                     "eager F.gelu(F.linear(x, W, b)), M tokens x N features x K", "eager",
                     tuple(Shape(m, n, k, dt, b_order="col", epilogue="bias_gelu") for dt in ("f16", "bf16")
                           for m, n, k in ((1024, 8192, 2048), (4096, 8192, 2048), (16384, 4096, 4096))),
                     target=1.1),
    "mlp": Section("a SwiGLU MLP with the residual: the gate/up GEMM with the SwiGLU epilogue, then the down GEMM adding "
                   "x as beta*C, against the same in torch eager; M tokens, N = 2 x the MLP width, K the hidden size",
                   "eager", tuple(Shape(m, 2 * f, h, dt, b_order="col", epilogue="mlp") for dt in ("f16", "bf16")
                                  for m, f, h in ((1024, 8192, 2048), (4096, 8192, 2048), (16384, 8192, 2048),
                                                  (4096, 14336, 4096))),
                   target=1.15),
    "moe": Section("grouped GEMM (mixture of experts, contiguous rows, weights as (E, N, K) nn.Linear stacks): "
                   "hg.grouped_matmul against a loop of cuBLAS GEMMs (torch.mm per expert) and torch._grouped_mm "
                   "where torch has it; uniform and skewed (Dirichlet 0.3) routing", "grouped",
                   tuple(Shape(t, n, k, "bf16", b_order="col", batch=e, routing=r) for e, t, n, k in MOE_SHAPES
                         for r in ("uniform", "skewed")), target=1.2),
    "host": Section("host cost per call of an fp16 matmul, back to back: per input kind, and the torch ops and "
                    "hg.matmul as a model calls them (LAYER_CALLS: a new activation every call), at 64^3 and at a "
                    "decode step's 16 x 4096 x 4096", "host", (cube(64), Shape(16, 4096, 4096, "f16")),
                    calls=HOST_CALLS),
}

LT_ALGOS = 8  # cuBLASLt heuristic candidates timed per accumulation in the sections against cuBLAS

GRAPH_CALLS = 100  # hg.matmul calls captured in the graph; its replay time is divided by this

# The decode_graph section: graph replays timed back to back between two events (per round and contender), after
# one untimed replay of each graph queued ahead; DECODE_GRAPH_COPIES layers of distinct weights, one graph each,
# cycled (as a model's layers follow one another: no replay finds its weights in L2, whatever its size)
DECODE_GRAPH_REPLAYS = 20
DECODE_GRAPH_COPIES = 2

WALL_REPEAT_S = 0.2  # one repetition of back-to-back calls lasts about this long ...
WALL_MIN_CALLS = 20  # ... and has at least this many calls
WALL_REPEATS = 3  # the best repetition is kept
