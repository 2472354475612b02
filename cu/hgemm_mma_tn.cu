// Family "hgemm_mma_tn": rungs 8 and 10 of the mma.sync ladder, TN layout.
//   A M x K row-major, B N x K row-major (B column-major), C M x N row-major; fp16 in, fp16 out;
//   acc f16|f32 x stages 2|3|4 variants (symbols name__acc<..>__stages<n>). Both tiles are k-major
//   in smem, so B fragments come from plain (non-.trans) ldmatrix. cp.async ring, dynamic smem,
//   block swizzle; 256 threads = 2 x 4 warps. sm_80+.
//
//   hgemm_mma_m16n8k16_mma2x4_warp4x4_stages_dsmem_tn         warp tile 64 x 32, block 128 x 128 x 32;
//       ldmatrix.x2 per n8 B tile; padded smem: stages * (128*40 + 128*40) * 2 bytes.
//       Requires M % 128, N % 128, K % 32 == 0.
//   hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages_dsmem_tn_swizzle_x4   warp tile 64 x 64, block
//       128 x 256 x 64; ldmatrix.x4 for B (two n8 tiles); XOR-swizzled smem, no padding:
//       stages * (128*64 + 256*64) * 2 bytes (48 KB a stage: 4 stages need sm_90's 227 KB, 3 fit
//       sm_80); register double buffering, serpentine mma order, quad-shuffle 16-byte stores; one
//       block per SM. BK 64 rather than 32: every row segment a thread block reads from A and B is
//       then a whole 128-byte line, and there is one barrier per 128 mmas per warp instead of 64
//       (measured on an H200: 464 -> 495 TFLOPS at 4096^3, 494 -> 517 at 8192^3, fp16 acc).
//       Requires M % 128, N % 256, K % 64 == 0.
//   16-byte aligned pointers for both.
#include "common/mma.cuh"

namespace {
using hg::mma::Config;
using hg::mma::Layout;
using hg::mma::Smem;

// Config<layout, warps_m, warps_n, wmt, wnt, BK, stages, f32, smem, b_x4, reg_db, shfl_store,
//        serpentine, dsmem, min_blocks>
template <bool F32, int S>
using Tn = Config<Layout::TN, 2, 4, 4, 4, 32, S, F32, Smem::Pad, false, false, false, false, true, 2>;
template <bool F32, int S>
using TnSwizzleX4 =
    Config<Layout::TN, 2, 4, 4, 8, 64, S, F32, Smem::Swizzle, true, true, true, true, true, 1>;
}  // namespace

HG_MMA_ACC_STAGES(hgemm_mma_m16n8k16_mma2x4_warp4x4_stages_dsmem_tn, Tn)
HG_MMA_ACC_STAGES(hgemm_mma_m16n8k16_mma2x4_warp4x4x2_stages_dsmem_tn_swizzle_x4, TnSwizzleX4)
