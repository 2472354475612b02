// The rungs of the WMMA HGEMM ladder (rungs 2-11, families hgemm_wmma and hgemm_wmma_stages) as named
// knobs for hg::wmma_gemm::Config (wmma.cuh). Each rung derives from the rung it improves on and names
// only the knobs it changes, so the whole ladder reads as one chain of changes here; the family files
// declare its symbols. The variant axes are Stages<Rung, S> and StagesAcc<Rung, S, Acc>.
#pragma once
#include "wmma.cuh"

namespace hg::wmma_gemm::rungs {

// Rung 2: 4 x 2 warps, one 16x16 fragment each (64 x 32 block tile), BK 16, scalar copies into one
// buffer.
struct Mma4x2 : Knobs {
  static constexpr int kWarpsM = 4, kWarpsN = 2;
  static constexpr int kFragsM = 1, kFragsN = 1;
  static constexpr int kBK = 16;
};
// Rung 3: 2 x 4 fragments per warp (128 x 128 block tile), 128-bit copies through registers.
struct Warp2x4 : Mma4x2 {
  static constexpr int kFragsM = 2, kFragsN = 4;
  static constexpr Copy kCopy = Copy::kVec8;
};
// Rung 4: cp.async copies.
struct Warp2x4Async : Warp2x4 {
  static constexpr Copy kCopy = Copy::kAsync;
};
// Rung 5: smem rows padded by 8 halves (conflict-free ldmatrix).
struct Warp2x4AsyncOffset : Warp2x4Async {
  static constexpr int kPad = 8;
};
// Rung 6: double buffer.
struct Warp2x4DbufAsync : Warp2x4AsyncOffset {
  static constexpr int kStages = 2;
};
// Rung 7: m32n8k16 fragments, 2 x 4 warps (the same 128 x 128 block tile).
struct M32n8Dbuf : Warp2x4DbufAsync {
  static constexpr int kFragM = 32, kFragN = 8;
  static constexpr int kWarpsM = 2, kWarpsN = 4;
};
// Rung 8: rung 6 under the stages variant axis (2-4 cp.async stages).
struct Warp2x4Stages : Warp2x4DbufAsync {};
// Rung 9: BK 32 in dynamic smem, fragments prefetched across the K-tile barrier.
struct Warp2x4StagesDsmem : Warp2x4Stages {
  static constexpr int kBK = 32;
  static constexpr bool kPrefetch = true;
  static constexpr bool kDynamicSmem = true;
};
// Rung 10: 4 x 4 fragments per warp (256 x 128 block tile), BK 64.
struct Mma4x2Warp4x4StagesDsmem : Warp2x4StagesDsmem {
  static constexpr int kFragsM = 4;
  static constexpr int kBK = 64;
};
// Rung 11: 4 x 4 warps (512 threads, 256 x 256), BK 32, fragments single-buffered.
struct Mma4x4Warp4x4StagesDsmem : Mma4x2Warp4x4StagesDsmem {
  static constexpr int kWarpsN = 4;
  static constexpr int kBK = 32;
  static constexpr bool kPrefetch = false;
};

}  // namespace hg::wmma_gemm::rungs
