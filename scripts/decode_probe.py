"""On the GPU machine: the decode (M <= 16) probes behind the section "Decode with B as K x N" of docs/dev/tuning_log.md. A probe for tuning,
not the product bench (`bench.py --matmul decode` is).

    reads   pure-read rates of a K x N fp16 matrix in the access patterns a decode kernel can take (CuPy kernels of
            16-byte loads into registers, best of four grids), beside a linear read of the same bytes and its share
            of the bandwidth a 1 GiB fill reaches (the bench's HBM figure): the ceiling of a kernel that reads B once
    routes  every ranked decode route of each shape, back to back over 8 weights in turn (no L2 flush: as a
            model's layers), device launches only, beside torch.matmul on the same buffers

    PYTHONPATH=.:$PYTHONPATH python3 scripts/decode_probe.py reads 4096x4096 4096x14336
    PYTHONPATH=.:$PYTHONPATH python3 scripts/decode_probe.py routes 1x4096x4096 16x4096x14336 [--b col] [--dtype bf16]
"""
from __future__ import annotations

import argparse

import torch
from triton.testing import do_bench

import hgemm_rt as hg
from hgemm_rt import planner
from hgemm_rt.device import get_device
from hgemm_rt.executor import Execution

# A warp instruction covers 32 / LPR rows of LPR x 16 bytes; WN warps side by side along N, WK along K; U loads a
# thread in flight (U x 32 / LPR rows a warp chunk); grid.x the column tiles, grid.y the K slices.
READ_SRC = r"""
template <int LPR, int WN, int WK, int U>
__global__ void __launch_bounds__(WN * WK * 32) read_pattern(const uint4* __restrict__ B, int K, int N, int slices,
                                                             unsigned* out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wn = warp % WN, wk = warp / WN;
  constexpr int kRows = 32 / LPR * U;
  const int col = blockIdx.x * WN * LPR * 8 + wn * LPR * 8 + (lane % LPR) * 8;
  const int chunks = (K + kRows - 1) / kRows, per = (chunks + slices - 1) / slices;
  const int cb = blockIdx.y * per, ce = min(chunks, cb + per);
  unsigned acc = 0;
  for (int c = cb + wk; c < ce; c += WK) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const uint4* p = B + (long long)(c * kRows + u * (32 / LPR) + lane / LPR) * (N / 8) + col / 8;
      asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z),
                   "=r"(v[u].w) : "l"(p));
    }
#pragma unroll
    for (int u = 0; u < U; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // (keeps the loads)
}
__global__ void read_linear(const uint4* __restrict__ B, long long n, unsigned* out) {
  unsigned acc = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint4 v;
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(B + i));
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[0] = acc;
}
"""
PATTERNS = [(8, 1, 4, 8), (8, 2, 2, 8), (8, 4, 1, 8), (32, 1, 8, 8), (32, 2, 4, 8), (32, 8, 1, 8), (32, 1, 8, 16)]


def reads(shapes: list[str]) -> None:
    import cupy as cp

    names = [f"read_pattern<{a},{b},{c},{d}>" for a, b, c, d in PATTERNS]
    mod = cp.RawModule(code=READ_SRC, options=("-std=c++17",), name_expressions=names + ["read_linear"])
    out = cp.zeros(4, cp.uint32)
    fill = cp.empty(1 << 30, cp.uint8)  # the bench's HBM figure: a 1 GiB fill (cuMemsetD8 there)
    fill_ms = do_bench(lambda: cp.cuda.runtime.memsetAsync(fill.data.ptr, 0, fill.nbytes, 0), warmup=5, rep=100)
    hbm = fill.nbytes / (fill_ms * 1e-3)
    del fill
    print(f"HBM: a 1 GiB fill, {hbm / 1e9:.0f} GB/s", flush=True)
    for shape in shapes:
        K, N = map(int, shape.lower().split("x"))
        B = cp.zeros((K, N), cp.float16)
        nbytes = K * N * 2
        lin = mod.get_function("read_linear")
        best = min(do_bench(lambda: lin((g,), (256,), (B, cp.int64(nbytes // 16), out)), warmup=5, rep=30)
                   for g in (264, 528, 1056, 2112))
        print(f"K x N = {K} x {N} ({nbytes / 1e6:.1f} MB): linear read {best * 1e3:.1f} us = "
              f"{nbytes / (best * 1e-3) / hbm:.2f} of the fill's bandwidth", flush=True)
        for (lpr, wn, wk, u), name in zip(PATTERNS, names):
            f, gx = mod.get_function(name), N // (wn * lpr * 8)
            runs = []
            for ctas in (132, 264, 528, 1056):
                s = max(1, ctas // gx)
                t = do_bench(lambda: f((gx, s), (wn * wk * 32,), (B, cp.int32(K), cp.int32(N), cp.int32(s), out)),
                             warmup=5, rep=30)
                runs.append((t * 1e3, s))
            t, s = min(runs)
            print(f"  {wn * lpr * 16:5d}-byte runs, {32 // lpr} rows a load, {wn} x {wk} warps, {u} loads a thread: "
                  f"{t:.1f} us at {gx} x {s} CTAs ({' '.join(f'{x:.1f}/{y}' for x, y in runs)})", flush=True)


def routes(shapes: list[str], b_order: str, dtype: str) -> None:
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    dev, manifest = get_device(), hg.get_registry().manifest
    stream = torch.cuda.current_stream()

    def per_launch(fn, n: int = 200) -> float:
        for i in range(16):
            fn(i)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = float("inf")
        for _ in range(3):
            e0.record()
            for i in range(n):
                fn(i)
            e1.record()
            e1.synchronize()
            best = min(best, e0.elapsed_time(e1) / n * 1e3)
        return best

    for shape in shapes:
        M, N, K = map(int, shape.lower().split("x"))
        x = torch.randn(M, K, device="cuda", dtype=tdt)
        ws = [torch.randn(N, K, device="cuda", dtype=tdt).t() if b_order == "col" else
              torch.randn(K, N, device="cuda", dtype=tdt) for _ in range(8)]
        c = torch.empty(M, N, device="cuda", dtype=tdt)
        print(f"== {M}x{N}x{K} B {b_order} {dtype}: torch.matmul "
              f"{per_launch(lambda i: torch.matmul(x, ws[i % 8], out=c)):.1f} us", flush=True)
        prob = hg.Matmul(x, ws[0], out=c).problem
        for est, recipe in planner.ranked_recipes(prob, manifest, dev.info.cc, dev.info.sm_count):
            if any(manifest.kernels[s.kernel].tile[0] > planner.DECODE_ROWS for s in recipe.steps if hasattr(s, "kernel")):
                continue
            ex = Execution(recipe, dtype, 0, manifest)
            try:
                packs = [ex.pack((x.data_ptr(), w.data_ptr(), c.data_ptr()), 1.0, 0.0) for w in ws]
                us = per_launch(lambda i: ex.launch(packs[i % 8], stream.cuda_stream))
                print(f"   {us:6.1f} us (estimate {est:6.1f})  {planner.describe(recipe)}", flush=True)
            finally:
                torch.cuda.synchronize()
                ex.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["reads", "routes"])
    ap.add_argument("shapes", nargs="+", help="reads: KxN; routes: MxNxK")
    ap.add_argument("--b", default="row", choices=["row", "col"], help="routes: B row-major (K x N) or as nn.Linear")
    ap.add_argument("--dtype", default="f16", choices=["f16", "bf16"])
    args = ap.parse_args()
    print(torch.cuda.get_device_name(), flush=True)
    if args.what == "reads":
        reads(args.shapes)
    else:
        routes(args.shapes, args.b, args.dtype)


if __name__ == "__main__":
    main()
