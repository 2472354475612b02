// Family "hgemm_cuda_f16x8": HGEMM CUDA-core ladder, steps 8-13 (half8 = 128-bit global vectors).
//   NN (A M x K, B K x N, C M x N, row-major); fp16 in, fp16 out. 256 threads, 8x8 outputs each,
//   128 x 128 block tile. Static smem: buffers * (BM*BK(+8 pad per A row, cp.async rungs) + BK*BN)
//   halves, at most 2 * (128*40 + 32*128) * 2 B = 36 KB. Requires M % 128 == 0, N % 128 == 0,
//   K % BK == 0 (BK = 8, 16, 32 by rung); A, B, C 16-byte aligned. sm_80+ (cp.async).
// Accumulation: steps 8-9 fp32 (FFMA). Steps 10-13 are the fast rungs and carry an `acc` variant:
//   __accf16 (default): half2 math, HFMA2 into fp16 partial sums that are added into fp32 every 16 k
//                       (hg::cc::Acc::kH2: 2x the FFMA rate, error of a 16-term fp16 sum);
//   __accf32:           FFMA, fp32 throughout.
// Every rung is a knobs struct for hg::cc::tiled_hgemm (cu/common/cuda_core_ladder.cuh), deriving from
// the one it improves on:
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
#include "common/cuda_core_ladder.cuh"

using namespace hg::cc::rungs;  // the knobs of each rung

#include "common/instances.cuh"
#include "hgemm_cuda_f16x8.instances.cuh"
