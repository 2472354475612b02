// Family "hgemm_sm90": Hopper GEMM, TMA loads + wgmma from shared memory, warp-specialised.
//
//   Layouts : TN (A M x K row-major, B N x K row-major) and NN (A M x K, B K x N row-major); C M x N.
//             The *_acol_* kernels take A column-major (stored K x M row-major, e.g. a transposed view)
//             and read it MN-major through the transposed-A wgmma descriptor: no copy of A.
//   Dtypes  : fp16 (or bf16) in, fp32 accumulate, fp16 (bf16) out.
//   Threads : 384 = 3 warpgroups. Warpgroup 0 is the producer (one elected thread issues TMA, the
//             rest only give their registers away through setmaxnreg), warpgroups 1 and 2 are the
//             consumers, each owning 64 x 256 of the 128 x 256 CTA tile with wgmma.m64n256k16
//             (128 fp32 accumulators per thread).
//   Tile    : BM x BN x BK = 128 x 256 x 64; 64 fp16 = 128 B = one 128-byte swizzle atom row, so TMA
//             writes exactly the layout the wgmma descriptors describe.
//   Smem    : stages * (BM + BN) * BK * 2 B ring (full/empty mbarrier pair per stage)
//             + BM * BN * 2 B output staging for the TMA-store epilogue + 1 KB alignment slack + barriers.
//   Arch    : sm_90a (wgmma, setmaxnreg), built with -gencode=arch=compute_90a,code=sm_90a.
//   Shapes  : any M, N, K >= 1: TMA zero-fills out-of-bounds loads (so the K tail contributes 0) and
//             clips out-of-bounds stores; the direct epilogue guards each element. TMA needs every
//             leading dimension's byte stride to be a multiple of 16, hence the declared divisibility
//             (TN: K % 8; NN: K % 8 and N % 8; with the TMA-store epilogue also N % 8).
//
// Kernels (see hgemm_sm90.toml):
//   *_ws_{tn,nn}                       one 128x256 tile per CTA ("tiles" grid), 4 stages, direct stores
//   *_ws_persistent_{tn,nn}[_bf16]     persistent grid, grouped tile order, stmatrix + TMA-store
//                                      epilogue that overlaps the next tile's main loop; variants
//                                      stages=3 (whole-tile staging) / 4 (half-tile, two passes)
//   *_ws_persistent_cluster2_{tn,nn}   + 2-CTA cluster along M: each CTA loads half of the shared B
//                                      tile and multicasts it to both (B traffic from L2 halved)
//   *_ws_persistent_cluster2_direct_tn the same with 4 stages and direct stores (no staging buffer)
//   *_ws_persistent_acol_{tn,nn}[_bf16] the persistent kernels with A column-major
//   *_ws_persistent_n192_{tn,nn}[_bf16] the persistent kernels with 128 x 192 tiles (wgmma.m64n192k16, the tile
//                                      staged whole): for N where 256-wide tiles leave a wave part-empty
//
// The code (knobs, rungs, Config, TileSched, epilogues, sm90_gemm) is in cu/common/sm90_gemm.cuh, shared
// with matmul_sm90_fused.cu (its kFused rung); this file declares the catalogue's symbols.
#include "common/dsmem.cuh"
#include "common/declared_rung.cuh"
#include "common/sm90_gemm.cuh"

using namespace hg90g;  // the knobs, rungs and sm90_gemm (cu/common/sm90_gemm.cuh)

// One extern "C" symbol per catalogue entry, with its dynamic smem exported (HG_EXPORT_DSMEM). Parameters:
// tensor maps by value (__grid_constant__, so TMA reads them from the parameter space), then C (pointer or
// tensor map), M, N, K. RUNG is a knobs type without commas.
#define HG90_KERNEL_PTRC(NAME, RUNG)                                                                     \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                              \
      NAME(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, RUNG::T* C,  \
           int M, int N, int K) {                                                                        \
    sm90_gemm<Config<RUNG>>(tmA, tmB, C, M, N, K);                                                       \
  }                                                                                                      \
  HG_EXPORT_DSMEM(NAME, Config<RUNG>::kSmemBytes)
// TMA-store kernels, one symbol per stage count: variants = { stages = [3, 4] } (3 stages +
// whole-tile staging, or 4 stages + half-tile staging).
#define HG90_KERNEL_TMAC(SYM, RUNG, STAGES)                                                              \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                              \
      SYM(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,              \
          const __grid_constant__ CUtensorMap tmC, int M, int N, int K) {                                \
    sm90_gemm<Config<Stages<RUNG, STAGES>>>(tmA, tmB, tmC, M, N, K);                                     \
  }                                                                                                      \
  HG_EXPORT_DSMEM(SYM, Config<Stages<RUNG, STAGES>>::kSmemBytes)
// One declared symbol (hgemm_sm90.toml's instance lines): BASE the rung before the toml's dtype and layout.
#define HG90_PTRC_SYM(SYM, BASE, T, NN)               \
  using SYM##_rung = DeclaredRung<BASE, T, NN>::type; \
  HG90_KERNEL_PTRC(SYM, SYM##_rung)
#define HG90_TMAC_SYM(SYM, BASE, T, NN, STAGES)       \
  using SYM##_rung = DeclaredRung<BASE, T, NN>::type; \
  HG90_KERNEL_TMAC(SYM, SYM##_rung, STAGES)

struct PersistentN192 : Bn<Persistent, 192> {};  // (a knob names a rung without commas)

#include "hgemm_sm90.instances.cuh"
