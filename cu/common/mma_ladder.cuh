// The rungs of the mma.sync HGEMM ladder (rungs 2-10, families hgemm_mma_warp4x4, _warp4x4x2, _tn) as
// named knobs for hg::mma::Config (mma.cuh). Each rung derives from the rung it improves on and names
// only the knobs it changes, so the whole ladder reads as one chain of changes here; the family files
// declare its symbols. The acc and stages variants are AccStages<Rung, F32, S>.
#pragma once
#include "mma.cuh"

namespace hg::mma::rungs {

// Rung 2: 2 x 4 warps of 4 x 4 mma tiles (64 x 32), BK 16, synchronous loads into one buffer; two
// blocks per SM (<= 128 registers per thread).
struct Warp4x4 : Knobs {
  static constexpr int kWarpsM = 2, kWarpsN = 4;
  static constexpr int kWarpTilesM = 4, kWarpTilesN = 4;
  static constexpr int kBK = 16;
  static constexpr int kMinBlocks = 2;
};
// Rung 3 is Warp4x4 under its variants (acc, and stages >= 2: the cp.async ring).
// Rung 4: + BK 32 (fewer barriers per flop) in dynamic smem.
struct Warp4x4StagesDsmem : Warp4x4 {
  static constexpr int kBK = 32;
  static constexpr bool kDynamicSmem = true;
};
// Rung 5: the warp tile doubled along N (64 x 64), fragments double-buffered in registers, the
// shuffle epilogue; one block per SM.
struct X2 : Warp4x4StagesDsmem {
  static constexpr int kWarpTilesN = 8;
  static constexpr bool kRegDoubleBuffer = true;
  static constexpr Store kStore = Store::Shfl;
  static constexpr int kMinBlocks = 1;
};
// Rung 6: B fragments by ldmatrix.x4.
struct X2X4 : X2 {
  static constexpr bool kBX4 = true;
};
// Rung 7: + register reuse (serpentine mma order).
struct X2RR : X2X4 {
  static constexpr bool kSerpentine = true;
};
// Rung 8: rung 4 with B N x K (TN).
struct Tn : Warp4x4StagesDsmem {
  static constexpr Layout kLayout = Layout::TN;
};
// Rung 9: rung 7 with XOR-swizzled smem instead of padding.
struct X2Swizzle : X2RR {
  static constexpr Smem kSmem = Smem::Swizzle;
};
// Rung 10: rung 9 in TN, 4 x 2 warps of 64 x 128 (4 x 16 mma tiles), epilogue staged through smem.
struct TnSwizzleX4 : X2Swizzle {
  static constexpr Layout kLayout = Layout::TN;
  static constexpr int kWarpsM = 4, kWarpsN = 2;
  static constexpr int kWarpTilesN = 16;
  static constexpr Store kStore = Store::Smem;
};

}  // namespace hg::mma::rungs
