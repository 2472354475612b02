// Family "hgemm_wmma_stages": the multi-stage rungs of the WMMA HGEMM ladder (steps 8-11).
//   Layout NN (A M x K row-major, B K x N row-major, C M x N row-major); fp16 in, fp16 out; fp16
//   accumulate (HMMA.F16). Minimum arch sm_80 (cp.async).
//   Grid "tiles+swizzle": column tile bx = blockIdx.z * gridDim.x + blockIdx.x (blocks past N leave).
//   Each rung is built for stages 2, 3, 4 (symbol suffix __stagesS); smem rows padded by 8 halves.
//   Every load/store is guarded; the 128-bit copies need N % 8 == 0 and K % 8 == 0 (declared).
//
//   rung                                 threads  block tile  warp tile  smem per stage                  kind
//   m16n16k16_mma4x2_warp2x4_stages         256   128x128x16    32x64    (128*24 + 16*136)*2 = 10.25 KB  static
//   m16n16k16_mma4x2_warp2x4_stages_dsmem   256   128x128x32    32x64    (128*40 + 32*136)*2 = 18.5 KB   dynamic
//   m16n16k16_mma4x2_warp4x4_stages_dsmem   256   256x128x64    64x64    (256*72 + 64*136)*2 = 53 KB     dynamic
//   m16n16k16_mma4x4_warp4x4_stages_dsmem   512   256x256x32    64x64    (256*40 + 32*264)*2 = 36.5 KB   dynamic
// Dynamic smem = stages * per-stage bytes (the manifest's dsmem formula). The static rung stays under
// 48 KB even with 4 stages (41 KB), which is why it keeps BK = 16.
// The two 8-warp dsmem rungs also come with fp32 accumulation (variant acc = f32) and prefetch the next
// K slice's fragments across the K-tile barrier (knob kPrefetch), so the mmas do not wait on fragment
// loads at each K-tile boundary (faster: docs/dev/tuning_log.md, "hgemm_wmma_stages").
// BK = 64 for 256x128: each A row of the tile is then one whole 128-byte line per K-tile, and there are
// half as many barriers as with BK = 32 (faster: docs/dev/tuning_log.md). Its 53 KB
// stages need the opt-in smem of sm_80 (3 stages max) or sm_90 (4 stages); the runtime refuses the rest.
// The 16-warp rung keeps fragments single-buffered: 512 threads cap it at 128 registers.
#include "common/wmma_ladder.cuh"

namespace wg = hg::wmma_gemm;
using namespace hg::wmma_gemm::rungs;  // the knobs of each rung (cu/common/wmma_ladder.cuh)

// One extern "C" symbol per variant, body from the shared template (the knobs type is the variadic
// tail because template argument lists contain commas), and its dynamic smem for the build's check.
#define HG_WMMA_KERNEL(SYM, ...)                                                                     \
  extern "C" __global__ void __launch_bounds__(wg::Config<__VA_ARGS__>::kThreads, 1)                  \
      SYM(const half* A, const half* B, half* C, int M, int N, int K) {                              \
    wg::kernel_body<wg::Config<__VA_ARGS__>>(A, B, C, M, N, K);                                       \
  }                                                                                                  \
  HG_EXPORT_DSMEM(SYM, wg::dsmem_bytes<wg::Config<__VA_ARGS__>>)
// variants = { stages = [2, 3, 4] }: SYM__stagesS
#define HG_WMMA_STAGES(SYM, RUNG)                         \
  HG_WMMA_KERNEL(SYM##__stages2, wg::Stages<RUNG, 2>)     \
  HG_WMMA_KERNEL(SYM##__stages3, wg::Stages<RUNG, 3>)     \
  HG_WMMA_KERNEL(SYM##__stages4, wg::Stages<RUNG, 4>)
// variants = { stages = [2, 3, 4], acc = ["f16", "f32"] }: SYM__stagesS__accf16 / __accf32
#define HG_WMMA_STAGES_ACC1(SYM, RUNG, S)                                         \
  HG_WMMA_KERNEL(SYM##__stages##S##__accf16, wg::StagesAcc<RUNG, S, half>)        \
  HG_WMMA_KERNEL(SYM##__stages##S##__accf32, wg::StagesAcc<RUNG, S, float>)
#define HG_WMMA_STAGES_ACC(SYM, RUNG) \
  HG_WMMA_STAGES_ACC1(SYM, RUNG, 2) HG_WMMA_STAGES_ACC1(SYM, RUNG, 3) HG_WMMA_STAGES_ACC1(SYM, RUNG, 4)

#include "common/instances.cuh"
#include "hgemm_wmma_stages.instances.cuh"
