// The rungs of the HGEMM CUDA-core ladder (steps 3-15, families hgemm_cuda_f16x4, _f16x8, _t16x8) as
// named knobs for hg::cc::tiled_hgemm (cuda_core.cuh). Each rung derives from the rung it improves on
// and names only the knobs it changes, so the whole ladder reads as one chain of changes here; the
// family files declare its symbols.
#pragma once
#include "cuda_core.cuh"

namespace hg::cc::rungs {

// Step 3: 128x128x8, 8x8 outputs per thread, half4 global vectors. kMinBlocks = 2: ptxas fits every
// rung of hgemm_cuda_f16x4 in 128 registers without spills, so two 256-thread blocks share an SM;
// without the bound step 4 took 167 registers, ran one block per SM and fell behind step 3
// (docs/dev/tuning_log.md, "hgemm_cuda_f16x4").
struct F16x4 : Knobs {
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

// Step 8: step 6 with half8 (128-bit) global vectors. Steps 8-9 accumulate in fp32 only, two blocks
// per SM (fits 128 registers, no spills).
struct F16x8PackBcf : F16x4PackBcf {
  static constexpr int kVec = 8;
};
// Step 9: + register-staged double buffer.
struct F16x8PackBcfDbuf : F16x8PackBcf {
  static constexpr Pipe kPipe = Pipe::kDbuf;
};
// Steps 10-15 come as __accf16 (AccH2: half2 math, one block per SM) and __accf32 (the rung itself:
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

// Step 14: step 12 with 16x8 outputs per thread (128 threads); one block per SM.
struct T16x8Dbuf : K32Dbuf {
  static constexpr int kTM = 16;
  static constexpr int kMinBlocks = 1;
};
// Step 15: step 13 with 16x8 outputs per thread.
struct T16x8DbufAsync : K32DbufAsync {
  static constexpr int kTM = 16;
};

}  // namespace hg::cc::rungs
