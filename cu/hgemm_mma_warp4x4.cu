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
using namespace hg::mma;  // Config<layout, warps_m, warps_n, wmt, wnt, BK, stages, f32, smem, b_x4,
                          //        reg_db, store, serpentine, dsmem, min_blocks>: see common/mma.cuh
// Two blocks per SM (<= 128 registers per thread).
using Warp4x4 = Config<Layout::NN, 2, 4, 4, 4, 16, 1, false, Smem::Pad, false, false, Store::Direct,
                       false, false, 2>;
template <bool F32, int S>
using Warp4x4Stages = Config<Layout::NN, 2, 4, 4, 4, 16, S, F32, Smem::Pad, false, false, Store::Direct,
                             false, false, 2>;
template <bool F32, int S>
using Warp4x4StagesDsmem = Config<Layout::NN, 2, 4, 4, 4, 32, S, F32, Smem::Pad, false, false,
                                  Store::Direct, false, true, 2>;
}  // namespace

HG_MMA_KERNEL(hgemm_mma_m16n8k16_mma2x4_warp4x4, Warp4x4)
HG_MMA_ACC_STAGES(hgemm_mma_m16n8k16_mma2x4_warp4x4_stages, Warp4x4Stages)
HG_MMA_ACC_STAGES(hgemm_mma_m16n8k16_mma2x4_warp4x4_stages_dsmem, Warp4x4StagesDsmem)
