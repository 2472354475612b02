// Family "hgemm_mma_warp4x4x2": rungs 5, 6, 7 and 9 of the mma.sync ladder, NN layout.
//   A M x K, B K x N, C M x N, row-major; fp16 in, fp16 out; acc f16|f32 x stages 2|3|4 variants
//   (symbols name__acc<..>__stages<n>). Block 2 x 4 warps (256 threads); the warp tile is doubled
//   along N to 4 x 8 mma tiles = 64 x 64, so the block tile is 128 x 256, BK 32: each warp loads
//   64x16 of A and 16x64 of B per k-step for 32 mmas, halving the ldmatrix bytes per flop of the
//   64 x 32 warp tile. cp.async ring, dynamic smem, block swizzle, fragments double-buffered in
//   registers (ldmatrix of k-step k+1 issued before the mmas of k-step k), epilogue gathers each
//   row's 8 columns in one lane through quad shuffles and stores 16 bytes.
//   One block per SM (fp32 accumulators alone take 128 registers per thread).
//   Requires M % 128 == 0, N % 256 == 0, K % 32 == 0, 16-byte aligned pointers; sm_80+
//   (the padded rungs need > 99 KB of smem at 4 stages: sm_80 and sm_90 only).
//
//   ..._warp4x4x2_stages_dsmem          ldmatrix.x2.trans per n8 B tile; smem padded by 16 B/row:
//                                        stages * (128*40 + 32*264) * 2 bytes.
//   ..._warp4x4x2_stages_dsmem_x4       ldmatrix.x4.trans: two n8 B tiles per instruction.
//   ..._warp4x4x2_stages_dsmem_rr       + register reuse: serpentine mma order, so each mma shares
//                                        its A or its B fragment with the one before.
//   ..._warp4x4x2_stages_dsmem_swizzle  + XOR-swizzled smem instead of padding:
//                                        stages * (128*32 + 32*256) * 2 bytes.
#include "common/mma_ladder.cuh"

using namespace hg::mma::rungs;  // the knobs of each rung (cu/common/mma_ladder.cuh)

#include "common/instances.cuh"
#include "hgemm_mma_warp4x4x2.instances.cuh"
