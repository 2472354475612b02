// Family "hgemm_cuda_t16x8": HGEMM CUDA-core ladder, steps 14-15: 16x8 outputs per thread.
//   NN (A M x K, B K x N, C M x N, row-major); fp16 in, fp16 out. 128 threads (8 x 16), block tile
//   128 x 128, BK = 32, two smem buffers: dbuf 2 * (32*128 + 32*128) halves = 32 KB, async
//   2 * (128*40 + 32*128) halves = 36 KB (static). Requires M % 128 == 0, N % 128 == 0, K % 32 == 0;
//   A, B, C 16-byte aligned. sm_80+ (cp.async).
// Twice the outputs of the 8x8 rungs per thread: per k a thread reads 16 + 8 halves of smem for 128
// FMAs (8 + 8 for 64 before). Variants as in hgemm_cuda_f16x8: __accf16 (default, HFMA2 into fp16
// partial sums flushed into fp32 every 16 k) and __accf32 (FFMA). The accf16 build holds 64 half2 +
// 128 fp32 accumulators: tiled_hgemm keeps its k loop rolled and stages the next tile in pieces
// (see REG_BOUND in cu/common/cuda_core.cuh) so that it fits in 255 registers without spilling.
//   step 14  hgemm_t_16x8_sliced_k32_f16x8_pack_dbuf        register-staged double buffer, A
//                                                           transposed in smem, one barrier per step.
//   step 15  hgemm_t_16x8_sliced_k32_f16x8_pack_dbuf_async  cp.async double buffer, A row-major.
// The knobs of both (steps 12 and 13 of hgemm_cuda_f16x8 with 16x8 thread tiles) are in
// cu/common/cuda_core_ladder.cuh.
#include "common/cuda_core_ladder.cuh"

using namespace hg::cc::rungs;  // the knobs of each rung

#include "common/instances.cuh"
#include "hgemm_cuda_t16x8.instances.cuh"
