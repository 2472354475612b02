// Family "util_sm90": the Hopper split-K GEMM behind hgemm_rt.matmul (ladder "util", sm_90a).
//
// util_gemm_wgmma_{f16,bf16}_m{64,128}_{tn,nn}:
//   C = alpha * A.B + beta * C with fp32 accumulation. A: M x K through a TMA map (any 16-byte-
//   multiple row stride), B: N x K (tn) or K x N (nn) through a TMA map, C: any strides and alignment.
//   Any M, N, K >= 1: TMA zero-fills out-of-bounds boxes.
//   Why: the catalogue's Hopper kernels use 128 x 256 tiles and the whole K per tile, so shapes with
//   few output tiles (M = 16..128 decode shapes, 1024^3) leave most of the 132 SMs idle. Here the
//   launch also splits K: grid = (ceil(N/256), ceil(M/BM), S) with a thread-block cluster (1, 1, S),
//   S in {1, 2, 4, 8}; each CTA of a cluster runs one K slice, keeps its fp32 partial tile in shared
//   memory, and after a cluster barrier CTA r adds rows [r*BM/S, (r+1)*BM/S) of all S partial tiles
//   through distributed shared memory and applies the epilogue: one launch, no workspace, no atomics.
//   Threads: 128 * (1 + BM/64). Warpgroup 0 is the producer (one thread issues the TMA loads into a
//   ring of full/empty mbarrier stages); each consumer warpgroup owns 64 rows of the BM x 256 tile
//   with wgmma.m64n256k16 (128 fp32 accumulators per thread).
//   Smem: stages * (BM + 256) * 64 * 2 bytes (128B-swizzled TMA boxes, reused for the fp32 partial
//   tile) + barriers + 1 KB alignment slack. Arch: sm_90a (wgmma, setmaxnreg).
#include <cuda.h>  // CUtensorMap

#include "common/matmul_util.cuh"
#include "common/sm90.cuh"

namespace {

using hg90::smem_u32;

constexpr int BN = 256;
constexpr int BK = 64;  // 64 fp16 = 128 B: one 128-byte swizzle row, the layout the descriptors read
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;

template <typename T, int BM_, bool NN, int STAGES>
struct WCfg {
  using Elem = T;
  static constexpr int BM = BM_;
  static constexpr bool kNN = NN;
  static constexpr int kStages = STAGES;
  static constexpr int kConsumers = BM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;  // what each full barrier expects from TMA
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kBarOffset = kRingBytes;
  static constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8 + 1024;
  static constexpr int kRedStride = BN + 8;  // floats: the float2 fragment stores are conflict-free
  // DSMEM loads in flight per thread in the split-K reduction: 2 keeps the 384-thread kernel under
  // its 168-register cap without spills (4 spilled), the 256-thread one has room for 4.
  static constexpr int kReduceBatch = kConsumers > 1 ? 2 : 4;
  static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzled tiles must stay 1024-byte aligned");
  static_assert(BM * kRedStride * 4 <= kRingBytes, "the fp32 partial tile reuses the ring");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");
};

template <class W>
__device__ __forceinline__ void wgmma_splitk(const CUtensorMap& tmA, const CUtensorMap& tmB, typename W::Elem* C,
                                             int M, int N, int K, int ldc_r, int ldc_c, int alpha_bits,
                                             int beta_bits) {
  using T = typename W::Elem;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  uint8_t* sA = smem;
  uint8_t* sB = smem + W::kStages * W::kABytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + W::kBarOffset);
  uint64_t* empty = full + W::kStages;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    hg90::prefetch_tmap(&tmA);
    hg90::prefetch_tmap(&tmB);
    for (int s = 0; s < W::kStages; ++s) {
      hg90::mbar_init(&full[s], 1);              // the producer's arrive.expect_tx
      hg90::mbar_init(&empty[s], W::kConsumers);  // one arrival per consumer warpgroup
    }
    hg90::fence_barrier_init();
  }
  __syncthreads();

  const int m0 = blockIdx.y * W::BM, n0 = blockIdx.x * BN;
  // This CTA's K slice in whole BK tiles: the slices never share a tile, so each K element is
  // summed exactly once; the last slices may be empty (their partial tile is zero).
  const int splits = gridDim.z;
  const int k_tiles = (K + BK - 1) / BK;
  const int per = (k_tiles + splits - 1) / splits;
  const int kt0 = min(k_tiles, static_cast<int>(blockIdx.z) * per);
  const int nk = min(k_tiles, kt0 + per) - kt0;

  if (wg == 0) {
    if constexpr (W::kConsumers > 1) hg90::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int kb = 0; kb < nk; ++kb) {
        hg90::mbar_wait(&empty[stage], phase ^ 1);  // a fresh barrier passes the "previous" phase
        hg90::mbar_arrive_expect_tx(&full[stage], W::kStageBytes);
        const int k0 = (kt0 + kb) * BK;
        hg90::tma_load_2d(sA + stage * W::kABytes, &tmA, &full[stage], k0, m0);
        uint8_t* b = sB + stage * W::kBBytes;
        if constexpr (!W::kNN) {
          hg90::tma_load_2d(b, &tmB, &full[stage], k0, n0);  // 256 rows of N, 64 K each
        } else {
#pragma unroll
          for (int c = 0; c < BN / 64; ++c)  // 64-column chunks of 64 K rows (MN-major)
            hg90::tma_load_2d(b + c * (64 * 128), &tmB, &full[stage], n0 + 64 * c, k0);
        }
        if (++stage == W::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
  } else {
    if constexpr (W::kConsumers > 1) hg90::setmaxnreg_inc<kConsumerRegs>();
    const int cw = wg - 1;  // rows [64 cw, 64 cw + 64) of the tile
    const int tid = threadIdx.x % 128;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) d[i] = 0.f;  // an empty K slice still contributes its zeros
    int stage = 0, prev = -1;
    uint32_t phase = 0;
    for (int kb = 0; kb < nk; ++kb) {
      hg90::mbar_wait(&full[stage], phase);
      const uint32_t a_base = smem_u32(sA + stage * W::kABytes) + cw * 64 * 128;
      const uint32_t b_base = smem_u32(sB + stage * W::kBBytes);
      hg90::wgmma_fence();
      hg90::wgmma_kblock<T, W::kNN, BK>(d, a_base, b_base, true);
      hg90::wgmma_commit();
      hg90::wgmma_wait<1>();  // one k-block in flight; the one before it has finished reading its stage
      if (prev >= 0 && tid == 0) hg90::mbar_arrive(&empty[prev]);
      prev = stage;
      if (++stage == W::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    hg90::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < 128; ++i) hg90::fence_regs(d[i]);
    // Every consumer must be done reading the ring before it becomes the partial tile.
    hg90::named_bar_sync(1, 128 * W::kConsumers);
    // wgmma m64nNk16 accumulator layout (warp w, lane l): d[4j + 2h + e] is row 16w + 8h + l/4,
    // column 8j + 2(l%4) + e.
    float* red = reinterpret_cast<float*>(smem);
    const int warp = tid / 32, lane = tid % 32;
    const int row = cw * 64 + warp * 16 + lane / 4, col = 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < 32; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(red + (row + 8 * h) * W::kRedStride + col + 8 * j) =
            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
  }
  uint32_t rank = 0;
  if (splits > 1) {
    rank = hgu::cluster_ctarank();
    hgu::cluster_sync();  // all partial tiles of the cluster are written
  } else {
    __syncthreads();
  }
  if (wg > 0)
    hgu::reduce_store<T, W::BM, BN, W::kRedStride, W::kReduceBatch>(smem, splits, rank, threadIdx.x - 128, 128 * W::kConsumers, C, M,
                                                   N, m0, n0, ldc_r, ldc_c, __int_as_float(alpha_bits),
                                                   __int_as_float(beta_bits));
  if (splits > 1) hgu::cluster_sync();  // peers may still be reading this CTA's tile
}

}  // namespace

#define UTIL_WGMMA(NAME, T, BM, NN, STAGES)                                                                       \
  extern "C" __global__ void __launch_bounds__(WCfg<T, BM, NN, STAGES>::kThreads, 1)                             \
      NAME(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, T* C, int M, int N, \
           int K, int ldc_r, int ldc_c, int alpha_bits, int beta_bits) {                                         \
    wgmma_splitk<WCfg<T, BM, NN, STAGES>>(tmA, tmB, C, M, N, K, ldc_r, ldc_c, alpha_bits, beta_bits);           \
  }
// 4 stages of 48 KB at BM = 128, 5 of 40 KB at BM = 64 (as deep as 227 KB allows).
UTIL_WGMMA(util_gemm_wgmma_f16_m64_tn, __half, 64, false, 5)
UTIL_WGMMA(util_gemm_wgmma_f16_m64_nn, __half, 64, true, 5)
UTIL_WGMMA(util_gemm_wgmma_f16_m128_tn, __half, 128, false, 4)
UTIL_WGMMA(util_gemm_wgmma_f16_m128_nn, __half, 128, true, 4)
UTIL_WGMMA(util_gemm_wgmma_bf16_m64_tn, __nv_bfloat16, 64, false, 5)
UTIL_WGMMA(util_gemm_wgmma_bf16_m64_nn, __nv_bfloat16, 64, true, 5)
UTIL_WGMMA(util_gemm_wgmma_bf16_m128_tn, __nv_bfloat16, 128, false, 4)
UTIL_WGMMA(util_gemm_wgmma_bf16_m128_nn, __nv_bfloat16, 128, true, 4)
