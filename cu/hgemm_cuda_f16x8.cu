// Family "hgemm_cuda_f16x8": HGEMM CUDA-core ladder, steps 8-13 (half8 = 128-bit global vectors).
//   NN (A M x K, B K x N, C M x N, row-major); fp16 in, fp16 out. 256 threads, 8x8 outputs each,
//   128 x 128 block tile. Static smem: buffers * (BM*BK(+8 pad per A row, cp.async rungs) + BK*BN)
//   halves, at most 2 * (128*40 + 32*128) * 2 B = 36 KB. Requires M % 128 == 0, N % 128 == 0,
//   K % BK == 0 (BK = 8, 16, 32 by rung); A, B, C 16-byte aligned. sm_80+ (cp.async).
// Accumulation: steps 8-9 fp32 (FFMA). Steps 10-13 are the fast rungs and carry an `acc` variant:
//   __accf16 (default): half2 math, HFMA2 into fp16 partial sums that are added into fp32 every 16 k
//                       (hg::cc::Acc::kH2: 2x the FFMA rate, error of a 16-term fp16 sum);
//   __accf32:           FFMA, fp32 throughout.
// Every rung is a knobs struct for hg::cc::tiled_hgemm (cu/common/cuda_core.cuh), deriving from the one
// it improves on:
//   step 8   hgemm_t_8x8_sliced_k_f16x8_pack_bcf       BK=8, one LDG.128 per thread and operand
//                                                      (A by threads 0-127, B by 128-255), A
//                                                      transposed in smem, 2 barriers per K step.
//   step 9   hgemm_t_8x8_sliced_k_f16x8_pack_bcf_dbuf  + double buffer: the next tile is loaded into
//                                                      registers during compute, one barrier per step.
//   step 10  hgemm_t_8x8_sliced_k16_f16x8_pack_dbuf    BK=16 (still A transposed through registers).
//   step 11  hgemm_t_8x8_sliced_k16_f16x8_pack_dbuf_async  cp.async (LDGSTS) fills the buffers; it
//                                                      cannot transpose, so A stays row-major (padded,
//                                                      threads' rows interleaved: conflict-free).
//   step 12  hgemm_t_8x8_sliced_k32_f16x8_pack_dbuf    BK=32.
//   step 13  hgemm_t_8x8_sliced_k32_f16x8_pack_dbuf_async  BK=32, cp.async.
#include "common/cuda_core.cuh"

using hg::cc::ALayout;
using hg::cc::Pipe;

// Step 8: 128x128x8, 8x8 outputs per thread, packed 128-bit global vectors, A transposed. Steps 8-9
// accumulate in fp32 only; kMinBlocks = 2: two blocks per SM (fits 128 registers, no spills).
struct F16x8PackBcf : hg::cc::Knobs {
  static constexpr int kBM = 128, kBN = 128, kBK = 8;
  static constexpr int kTM = 8, kTN = 8;
  static constexpr int kVec = 8;
  static constexpr bool kPack = true;
  static constexpr ALayout kALayout = ALayout::kTransposed;
  static constexpr int kMinBlocks = 2;
};
// Step 9: + register-staged double buffer.
struct F16x8PackBcfDbuf : F16x8PackBcf {
  static constexpr Pipe kPipe = Pipe::kDbuf;
};
// Steps 10-13 come as __accf16 (AccH2: half2 math, one block per SM) and __accf32 (the rung below:
// FFMA, kMinBlocks = 2 where that fits in 128 registers without spilling).
// Step 10: BK = 16.
struct K16Dbuf : F16x8PackBcfDbuf {
  static constexpr int kBK = 16;
};
// Step 11: cp.async double buffer; A row-major (interleaved rows), read 2 k's at a time.
struct K16DbufAsync : K16Dbuf {
  static constexpr ALayout kALayout = ALayout::kInterleaved;
  static constexpr int kAKVec = 2;
  static constexpr Pipe kPipe = Pipe::kAsync;
};
// Step 12: step 10 with BK = 32.
struct K32Dbuf : K16Dbuf {
  static constexpr int kBK = 32;
};
// Step 13: step 11 with BK = 32; one block per SM (128 registers would spill).
struct K32DbufAsync : K16DbufAsync {
  static constexpr int kBK = 32;
  static constexpr int kMinBlocks = 1;
};

HG_CUDA_RUNG(hgemm_t_8x8_sliced_k_f16x8_pack_bcf, F16x8PackBcf)
HG_CUDA_RUNG(hgemm_t_8x8_sliced_k_f16x8_pack_bcf_dbuf, F16x8PackBcfDbuf)
HG_CUDA_RUNG_ACC(hgemm_t_8x8_sliced_k16_f16x8_pack_dbuf, K16Dbuf)
HG_CUDA_RUNG_ACC(hgemm_t_8x8_sliced_k16_f16x8_pack_dbuf_async, K16DbufAsync)
HG_CUDA_RUNG_ACC(hgemm_t_8x8_sliced_k32_f16x8_pack_dbuf, K32Dbuf)
HG_CUDA_RUNG_ACC(hgemm_t_8x8_sliced_k32_f16x8_pack_dbuf_async, K32DbufAsync)
