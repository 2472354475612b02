// Family "hgemm_cute": HGEMM with CuTe (CUTLASS headers), layout TN.
//   hgemm_mma_stages_block_swizzle_tn_cute (alias hgemm_cute_tn)
//   hgemm_mma_stages_block_swizzle_tn_cute_warp2x2 (alias hgemm_cute_tn_warp2x2), fp16 accumulation only
//   A: M x K row-major, B: N x K row-major, C: M x N row-major. fp16 in, fp16 out,
//   accumulate fp16 (__accf16) or fp32 (__accf32, the launch default).
// Block tile 128 x 256 x 32, 256 threads = 8 warps as 2 (M) x 4 (N), each warp 64 x 64; warp2x2: 128
// threads = 4 warps as 2 x 2, each warp 64 x 128.
// Dynamic smem: stages * (128 + 256) * 32 * 2 bytes (48/72/96 KiB for 2/3/4 stages), reused by the
// epilogue. Minimum arch sm_80 (cp.async, ldmatrix, mma.sync m16n8k16).
// Requires M % 128 == 0, N % 256 == 0, K % 32 == 0 (nothing is predicated); 16-byte aligned pointers.
// Grid "tiles+swizzle": bx = blockIdx.z * gridDim.x + blockIdx.x walks N, blockIdx.y walks M.
#include "common/cute_tn.cuh"
#include "common/dsmem.cuh"

namespace {
// 128x256 rather than 128x128: with fp32 accumulators a 64x64 warp tile is the largest that fits in
// 255 registers, and 8 such warps per block halve the global->smem bytes per MMA compared with four.
// BK=32 keeps 4 stages at 96 KiB, inside every sm_8x part's shared memory.
struct CuteTn {
  static constexpr int kBM = 128, kBN = 256, kBK = 32;
  static constexpr int kWarpsM = 2, kWarpsN = 4;
};
// 4 warps of 64 x 128 (LeetCUDA's layout): per k16 step a warp issues 12 ldmatrix.x4 for 64 MMAs where
// a 64 x 64 warp issues 8 for 32, and with fp16 accumulators (128 registers; fp32 would need 256) a
// 128-thread block fits twice per SM, so one block's barriers and epilogue overlap the other's MMAs.
struct CuteTnWarp2x2 : CuteTn {
  static constexpr int kWarpsN = 2;
};
// The declared variant axes: acc (f16 | f32; warp2x2 f16 only) and stages.
template <class Rung, class Acc, int S>
struct Variant : Rung {
  using AccT = Acc;
  static constexpr int kStages = S;
};
template <class Acc, int S>
using CuteTnCfg = hg::cute_tn::Config<Variant<CuteTn, Acc, S>>;
template <int S>
using CuteTnWarp2x2Cfg = hg::cute_tn::Config<Variant<CuteTnWarp2x2, cute::half_t, S>>;
}  // namespace

// One declared symbol (hgemm_cute.toml's instance lines): the accumulator token (f16|f32) and the stage count.
#define HG_CUTE_ACC_T_f16 cute::half_t
#define HG_CUTE_ACC_T_f32 float
#define HGEMM_CUTE_TN(SYM, ACC, STAGES)                                                                   \
  extern "C" __global__ void __launch_bounds__(CuteTnCfg<HG_CUTE_ACC_T_##ACC, STAGES>::kThreads, 1)       \
      SYM(const half* A, const half* B, half* C, int M, int N, int K) {                                   \
    hg::cute_tn::gemm_tn<CuteTnCfg<HG_CUTE_ACC_T_##ACC, STAGES>>(A, B, C, M, N, K);                        \
  }                                                                                                       \
  HG_EXPORT_DSMEM(SYM, CuteTnCfg<HG_CUTE_ACC_T_##ACC, STAGES>::smem_bytes())

#define HGEMM_CUTE_TN_WARP2X2(SYM, STAGES)                                                                \
  extern "C" __global__ void __launch_bounds__(CuteTnWarp2x2Cfg<STAGES>::kThreads, 2)                     \
      SYM(const half* A, const half* B, half* C, int M, int N, int K) {                                   \
    hg::cute_tn::gemm_tn<CuteTnWarp2x2Cfg<STAGES>>(A, B, C, M, N, K);                                      \
  }                                                                                                       \
  HG_EXPORT_DSMEM(SYM, CuteTnWarp2x2Cfg<STAGES>::smem_bytes())

#include "hgemm_cute.instances.cuh"
