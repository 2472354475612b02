// Family "util_sm90_fused": the persistent Hopper GEMM with the fused epilogue behind hgemm_rt.matmul
// (ladder "util", role "gemm_fused_wgmma", sm_90a).
//
// util_gemm_wgmma_fused_{f16,bf16}_{tn,nn}:
//   C = scale * act(alpha * A.B + bias) + beta * C_old (cu/common/epilogue.cuh; SwiGLU pairs gate/up
//   columns) over batch_count matrices, fp32 accumulation, fp16 (bf16) in and out.
//   The kernel is the catalogue's hgemm_sm90_wgmma_tma_ws_persistent_{tn,nn} with 4 stages (the code is
//   cu/common/sm90_gemm.cuh, rung Fused = Stages<Persistent, 4> + kFused): 384 threads, a producer
//   warpgroup issuing TMA into a 4-stage ring of 128 x 64 A + 256 x 64 B tiles, two consumer warpgroups
//   owning 64 x 256 each (wgmma.m64n256k16, 128 fp32 accumulators under setmaxnreg 232), grouped tile
//   order, stmatrix + TMA-store epilogue with half-tile staging (two passes of 128 columns) that overlaps
//   the next tile's main loop. What kFused adds, all in the epilogue or once per tile:
//   - the epilogue math on the accumulators before they are packed (no extra work when linear() and
//     beta == 0 but the alpha multiply; C_old read through `C` only where beta != 0);
//   - batch: tile t of batch_count * tiles-per-matrix, matrix b = t / tiles-per-matrix, (outer, inner) =
//     (b / batch_inner, b % batch_inner); batched launches (tma_levels & 16) read A and B and store C
//     through rank-4 maps (cols, rows, inner, outer), tma_levels bits 1/2, 4/8, 32/64 saying which
//     levels the A, B, C maps have; C_old moves by outer * bsc_o + inner * bsc_i elements;
//   - SwiGLU (epi & kSwiGLU): N is the output width F, B has 2F rows (tn) or columns (nn); a tile covers
//     128 output columns at n0, its B stage holding gate [n0, n0 + 128) then up [F + n0, F + n0 + 128),
//     so each thread holds the gate and the up value of an output element in d[4j + i] and
//     d[4(j + 16) + i]; the 128 x 128 output tile is stored in one staging pass.
//   Grid: min(tiles over the batch, SMs) x 1 x 1 (tiles = ceil(M/128) * ceil(N/256), SwiGLU
//   ceil(M/128) * ceil(F/128), times batch_count).
//   Smem: 4 * (128 + 256) * 64 * 2 ring + 128 * 128 * 2 staging + barriers + 1 KB alignment slack.
//   Shapes: any M, N, K >= 1 (TMA zero-fills loads and clips stores); the runtime passes 16-byte aligned
//   operands with 16-byte-multiple row strides (TMA's rule; C_old's pairs are read as 4-byte words).
#include "common/dsmem.cuh"
#include "common/sm90_gemm.cuh"

using namespace hg90g;  // the knobs, rungs and sm90_gemm (cu/common/sm90_gemm.cuh)

// Parameters in the toml's order: the three maps, then C_old's pointer, the shape, C's row stride, the
// epilogue (cu/common/epilogue.cuh) and the batch. RUNG is a knobs type without commas.
#define UTIL_FUSED(NAME, RUNG)                                                                                   \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                                      \
      NAME(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,                     \
           const __grid_constant__ CUtensorMap tmC, const RUNG::T* C, int M, int N, int K, int ldc_r,             \
           int alpha_bits, int beta_bits, const RUNG::T* bias, int bias_stride, int epi, int scale_bits,         \
           int batch_count, int batch_inner, int tma_levels, long long bsc_o, long long bsc_i) {                 \
    sm90_gemm<Config<RUNG>>(tmA, tmB, tmC, M, N, K,                                                              \
                            FusedArgs<RUNG::T>{C, ldc_r, alpha_bits, beta_bits, bias, bias_stride, epi,          \
                                               scale_bits, batch_count, batch_inner, tma_levels, bsc_o, bsc_i}); \
  }                                                                                                              \
  HG_EXPORT_DSMEM(NAME, Config<RUNG>::kSmemBytes)

UTIL_FUSED(util_gemm_wgmma_fused_f16_tn, Fused)
UTIL_FUSED(util_gemm_wgmma_fused_f16_nn, Nn<Fused>)
UTIL_FUSED(util_gemm_wgmma_fused_bf16_tn, Bf16<Fused>)
UTIL_FUSED(util_gemm_wgmma_fused_bf16_nn, Bf16<Nn<Fused>>)
