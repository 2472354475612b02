// Family "hgemm_mma_tn": rungs 8 and 10 of the mma.sync ladder, TN layout.
//   A M x K row-major, B N x K row-major (B column-major), C M x N row-major; fp16 in, fp16 out.
//   Both tiles are k-major in smem, so B fragments come from plain (non-.trans) ldmatrix. cp.async
//   ring, dynamic smem, block swizzle. sm_80+. Symbols name__acc<..>__stages<n>.
//
//   hgemm_mma_m16n8k16_mma2x4_warp4x4_stages_dsmem_tn         acc f16|f32 x stages 2|3|4; 256
//       threads = 2 x 4 warps, warp tile 64 x 32, block 128 x 128 x 32; ldmatrix.x2 per n8 B tile;
//       padded smem: stages * (128*40 + 128*40) * 2 bytes. Requires M % 128, N % 128, K % 32 == 0.
//   hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages_dsmem_tn_swizzle_x4   acc f16 x stages 2|3|4; 256
//       threads = 4 x 2 warps, warp tile 64 x 128 (4 x 16 m16n8 tiles), block 256 x 256 x 32;
//       ldmatrix.x4 for A and B (two n8 tiles); XOR-swizzled smem, no padding: stages * (256*32 +
//       256*32) * 2 bytes (32 KB a stage); register double buffering, serpentine mma order; C leaves
//       through smem in 16-byte row stores. One block per SM. Requires M % 256, N % 256, K % 32 == 0.
//       Why this shape: a 64 x 128 warp tile reads 96 bytes of ldmatrix per mma instead of the 128
//       of 64 x 64 warps in 128 x 256 blocks, and a 256 x 256 block brings 32 bytes of cp.async per
//       mma instead of 48, so shared memory stops competing with the tensor pipe; only fp16
//       accumulators fit (128 of the 255 registers; fp32 would need 256), hence no acc=f32 variant.
//       The epilogue is staged (Store::Smem): 16-byte row pieces per lane quad cost about three
//       times as long per wave of blocks (docs/dev/tuning_log.md, "hgemm_mma_tn").
//   16-byte aligned pointers for both.
#include "common/mma_ladder.cuh"

using namespace hg::mma::rungs;  // the knobs of each rung (cu/common/mma_ladder.cuh)

#include "common/instances.cuh"
#include "hgemm_mma_tn.instances.cuh"
