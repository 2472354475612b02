// Family "hgemm_cuda_f16x4": HGEMM CUDA-core ladder, steps 3-7 (half4 = 64-bit global vectors).
//   NN (A M x K, B K x N, C M x N, row-major); fp16 in, fp32 accumulate (FFMA), fp16 out.
//   Threads: (BM/TM) * (BN/TN) = 256 per block; static smem only: BM*BK + BK*BN halves (4 KB / 2 KB).
//   Requires M % BM == 0, N % BN == 0, K % BK == 0; A, B, C 8-byte aligned. sm_80+.
// Every rung is a knobs struct for hg::cc::tiled_hgemm (cu/common/cuda_core.cuh) deriving from the rung
// it improves on; it names exactly the knobs its name adds:
//   step 3  hgemm_t_8x8_sliced_k_f16x4           128x128x8, 8x8/thread, half4 moved as 2 x half2
//                                                 (32-bit LDG/STS/STG), A row-major in smem, read one
//                                                 element per row (4-way bank conflicts).
//   step 4  hgemm_t_8x8_sliced_k_f16x4_pack      + packed: one 64-bit LDG / STS / STG per half4, A rows
//                                                 read 4 k's at a time.
//   step 5  hgemm_t_8x8_sliced_k_f16x4_bcf       step 3 + A stored transposed ("bank-conflict free"):
//                                                 a thread's 8 A values at one k are contiguous.
//   step 6  hgemm_t_8x8_sliced_k_f16x4_pack_bcf  both.
//   step 7  hgemm_t_4x4_sliced_k_f16x4_pack_bcf  step 6 with a 4x4 thread tile (64x64 block tile).
#include "common/cuda_core.cuh"

using hg::cc::ALayout;

// Step 3: 128x128x8, 8x8 outputs per thread, half4 global vectors. kMinBlocks = 2: ptxas fits every
// rung in 128 registers without spills, so two 256-thread blocks share an SM; without the bound step 4
// took 167 registers, ran one block per SM and fell behind step 3 (docs/tuning_log.md,
// "hgemm_cuda_f16x4").
struct F16x4 : hg::cc::Knobs {
  static constexpr int kBM = 128, kBN = 128, kBK = 8;
  static constexpr int kTM = 8, kTN = 8;
  static constexpr int kVec = 4;
  static constexpr int kMinBlocks = 2;
};
// Step 4: one 64-bit access per half4; A rows read 4 k's at a time.
struct F16x4Pack : F16x4 {
  static constexpr bool kPack = true;
  static constexpr int kAKVec = 4;
};
// Step 5: step 3 with A transposed in smem.
struct F16x4Bcf : F16x4 {
  static constexpr ALayout kALayout = ALayout::kTransposed;
};
// Step 6: both.
struct F16x4PackBcf : F16x4Bcf {
  static constexpr bool kPack = true;
};
// Step 7: 4x4 outputs per thread, 64x64 block tile.
struct T4x4PackBcf : F16x4PackBcf {
  static constexpr int kBM = 64, kBN = 64;
  static constexpr int kTM = 4, kTN = 4;
};

HG_CUDA_RUNG(hgemm_t_8x8_sliced_k_f16x4, F16x4)
HG_CUDA_RUNG(hgemm_t_8x8_sliced_k_f16x4_pack, F16x4Pack)
HG_CUDA_RUNG(hgemm_t_8x8_sliced_k_f16x4_bcf, F16x4Bcf)
HG_CUDA_RUNG(hgemm_t_8x8_sliced_k_f16x4_pack_bcf, F16x4PackBcf)
HG_CUDA_RUNG(hgemm_t_4x4_sliced_k_f16x4_pack_bcf, T4x4PackBcf)
