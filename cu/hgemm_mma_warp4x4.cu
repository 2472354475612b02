// Family "hgemm_mma_warp4x4": rungs 2-4 of the mma.sync ladder, NN layout.
//   A M x K, B K x N, C M x N, row-major; fp16 in, fp16 out; mma.sync.m16n8k16, ldmatrix.x4 (A) and
//   ldmatrix.x2.trans (B). Block 2 x 4 warps (256 threads), warp tile 4 x 4 mma tiles = 64 x 32,
//   block tile 128 x 128. Shared tiles padded by 16 bytes per row against bank conflicts.
//   Requires M % 128 == 0, N % 128 == 0, K % BK == 0, 16-byte aligned pointers; sm_80+.
//
//   hgemm_mma_m16n8k16_mma2x4_warp4x4               BK 16, synchronous 128-bit loads through
//       registers into one smem buffer; fp16 accumulation; static smem (128*24 + 16*136)*2 bytes.
//   hgemm_mma_m16n8k16_mma2x4_warp4x4_stages        BK 16, cp.async ring of `stages` buffers,
//       block swizzle; static smem stages*(128*24 + 16*136)*2 <= 42 KB.
//   hgemm_mma_m16n8k16_mma2x4_warp4x4_stages_dsmem  BK 32 (fewer barriers per flop), dynamic smem
//       stages*(128*40 + 32*136)*2 bytes.
//   The stages rungs come as acc f16|f32 x stages 2|3|4 (symbols name__acc<..>__stages<n>).
#include "common/mma.cuh"

namespace {
using hg::mma::Knobs;
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
}  // namespace

HG_MMA_KERNEL(hgemm_mma_m16n8k16_mma2x4_warp4x4, Warp4x4)
HG_MMA_ACC_STAGES(hgemm_mma_m16n8k16_mma2x4_warp4x4_stages, Warp4x4)
HG_MMA_ACC_STAGES(hgemm_mma_m16n8k16_mma2x4_warp4x4_stages_dsmem, Warp4x4StagesDsmem)
