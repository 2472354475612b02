// Family "hgemm_cuda_f16x4": HGEMM CUDA-core ladder, steps 3-7 (half4 = 64-bit global vectors).
//   NN (A M x K, B K x N, C M x N, row-major); fp16 in, fp32 accumulate (FFMA), fp16 out.
//   Threads: (BM/TM) * (BN/TN) = 256 per block; static smem only: BM*BK + BK*BN halves (4 KB / 2 KB).
//   Requires M % BM == 0, N % BN == 0, K % BK == 0; A, B, C 8-byte aligned. sm_80+.
// Every rung is a knobs struct for hg::cc::tiled_hgemm (cu/common/cuda_core_ladder.cuh) deriving from
// the rung it improves on; it names exactly the knobs its name adds:
//   step 3  hgemm_t_8x8_sliced_k_f16x4           128x128x8, 8x8/thread, half4 moved as 2 x half2
//                                                 (32-bit LDG/STS/STG), A row-major in smem, read one
//                                                 element per row (4-way bank conflicts).
//   step 4  hgemm_t_8x8_sliced_k_f16x4_pack      + packed: one 64-bit LDG / STS / STG per half4, A rows
//                                                 read 4 k's at a time.
//   step 5  hgemm_t_8x8_sliced_k_f16x4_bcf       step 3 + A stored transposed ("bank-conflict free"):
//                                                 a thread's 8 A values at one k are contiguous.
//   step 6  hgemm_t_8x8_sliced_k_f16x4_pack_bcf  both.
//   step 7  hgemm_t_4x4_sliced_k_f16x4_pack_bcf  step 6 with a 4x4 thread tile (64x64 block tile).
#include "common/cuda_core_ladder.cuh"

using namespace hg::cc::rungs;  // the knobs of each rung

#include "common/instances.cuh"
#include "hgemm_cuda_f16x4.instances.cuh"
