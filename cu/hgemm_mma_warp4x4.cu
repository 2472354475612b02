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
#include "common/mma_ladder.cuh"

using namespace hg::mma::rungs;  // the knobs of each rung (cu/common/mma_ladder.cuh)

#include "common/instances.cuh"
#include "hgemm_mma_warp4x4.instances.cuh"
