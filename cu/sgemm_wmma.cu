// Family "sgemm_wmma": the TF32 tensor-core rung of the SGEMM ladder (step 8).
//   sgemm_wmma_m16n16k8_mma4x2_warp2x4_stages__stages{2,3}
//   Layout NN (A M x K, B K x N, C M x N, row-major); fp32 in, TF32 multiply (operands rounded to
//   nearest TF32) with fp32 accumulate, fp32 out; sm_80+.
//   256 threads = 4 x 2 warps ("mma4x2"), each warp 2 x 4 WMMA m16n16k8 tiles ("warp2x4"): warp tile
//   32 x 64, block tile 128 x 128, K step BK = 16 (two m16n16k8 steps per slice).
//   Dynamic smem: stages * (BM * (BK + 4) + BK * (BN + 8)) * 4 bytes (37888 / 56832 for 2 / 3 stages).
//   Grid "tiles+swizzle" (block swizzle along N in grid.z strips).
//   Requires N % 4 == 0 and K % 4 == 0 (16-byte cp.async chunks of A and B rows, float4 stores of C);
//   M, N, K edges are guarded (zero-filled loads, guarded stores).
#include <mma.h>
#include "common/dsmem.cuh"
#include "common/sgemm.cuh"

namespace sgw {
using namespace nvcuda;

constexpr int kBM = 128, kBN = 128;
constexpr int kWM = 16, kWN = 16, kWK = 8;       // WMMA TF32 shape m16n16k8
constexpr int kWarpsM = 4, kWarpsN = 2;          // mma4x2: warps per block along M, N
constexpr int kFragsM = 2, kFragsN = 4;          // warp2x4: WMMA tiles per warp along M, N
// K step: two m16n16k8 steps per slice; 16 keeps 3 stages at 55.5 KB, under the 99 KB per-block limit
// of sm_86/sm_89 as well. The stage count is the declared variant axis.
constexpr int kBK = 16;
constexpr int kThreads = 32 * kWarpsM * kWarpsN;
static_assert(kBM == kWarpsM * kFragsM * kWM && kBN == kWarpsN * kFragsN * kWN, "warps tile the block");

// Shared-memory pitches (floats). TF32 fragments are gathered with 32-bit reads: A lanes read rows
// g = lane/4 at columns t = lane%4, B lanes read K rows t at columns g. A pitch of BK + 4 (20 or 36)
// puts A's eight rows on eight different 4-bank groups (g*20 or g*36 mod 32), + t: 32 distinct banks;
// a pitch of 136 spreads B's four K rows 8 banks apart (t*8 + g: 32 distinct banks). Both stay
// multiples of 4 floats: rows remain 16-byte aligned for cp.async, and every fragment origin stays
// 32-byte aligned as WMMA requires.
constexpr int kLdB = kBN + 8;
template <int BK>
struct Slice {
  static_assert(BK % kWK == 0, "whole WMMA K steps per slice");
  static constexpr int kLdA = BK + 4;
  static constexpr int kAFloats = kBM * kLdA;             // A stage [BM][BK + 4], then
  static constexpr int kFloats = kAFloats + BK * kLdB;    // B stage [BK][BN + 8]
  static_assert((kAFloats * 4) % 32 == 0 && (kFloats * 4) % 32 == 0, "stage bases 32-byte aligned");
};

// Epilogue scratch: one 16 x 16 accumulator tile per warp at a time, pitch 20 (row starts spread).
constexpr int kLdC = kWN + 4;

// One K slice (A: BM x BK, B: BK x BN) into a stage with 16-byte cp.async (BK / 8 + BK / 8 per thread).
// A: BK / 4 threads read one row segment; B: a warp reads one 512-byte row segment.
// Out-of-range chunks are zero-filled (they add nothing to the dot products).
template <int BK>
__device__ __forceinline__ void load_slice(float* stage, const float* A, const float* B, int M, int N, int K, int m0,
                                           int n0, int k0, int tid) {
  constexpr int kLdA = Slice<BK>::kLdA;
  float* sA = stage;
  float* sB = stage + Slice<BK>::kAFloats;
  constexpr int kAChunks = kBM * BK / 4 / kThreads;
  constexpr int kBChunks = BK * kBN / 4 / kThreads;
#pragma unroll
  for (int i = 0; i < kAChunks; ++i) {
    const int r = tid / (BK / 4) + i * (kThreads / (BK / 4));
    const int c = (tid % (BK / 4)) * 4;
    const int gm = m0 + r, gk = k0 + c;
    const bool ok = gm < M && gk < K;
    hg::cp_async_16_zfill(sA + r * kLdA + c, ok ? A + (size_t)gm * K + gk : A, ok ? 16 : 0);
  }
#pragma unroll
  for (int i = 0; i < kBChunks; ++i) {
    const int r = tid / (kBN / 4) + i * (kThreads / (kBN / 4));
    const int c = (tid % (kBN / 4)) * 4;
    const int gk = k0 + r, gn = n0 + c;
    const bool ok = gk < K && gn < N;
    hg::cp_async_16_zfill(sB + r * kLdB + c, ok ? B + (size_t)gk * N + gn : B, ok ? 16 : 0);
  }
}

// wmma::load_matrix_sync / store_matrix_sync on a float* emit the generic-address forms of
// wmma.load / wmma.store for TF32 (nvcc 13.0 does not infer .shared for them even on a __shared__
// array): 64-bit address arithmetic and LD.E / ST.E instead of LDS / STS. These wrappers issue the
// .shared forms of the same PTX instructions into the same nvcuda::wmma fragments (identical register
// layout: the state space only changes the addressing). p must be 32-byte aligned, ldm in elements.
// One body for both operand loads: only the fragment letter (a or b) of the instruction differs.
#define HG_TF32_LOAD_SHARED(fn, ab)                                                                  \
  template <typename Frag>                                                                          \
  __device__ __forceinline__ void fn(Frag& f, const float* p, int ldm) {                            \
    static_assert(Frag::num_elements == 4, "m16n16k8 TF32 matrix_" #ab " fragment");                \
    uint32_t r[4];                                                                                  \
    asm volatile("wmma.load." #ab ".sync.aligned.row.m16n16k8.shared.tf32 {%0, %1, %2, %3}, [%4], %5;\n" \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])                                   \
                 : "r"(hg::smem_u32(p)), "r"(ldm));                                                 \
    _Pragma("unroll") for (int t = 0; t < 4; ++t) f.x[t] = __uint_as_float(r[t]);                  \
  }
HG_TF32_LOAD_SHARED(load_a_shared, a)
HG_TF32_LOAD_SHARED(load_b_shared, b)
#undef HG_TF32_LOAD_SHARED
template <typename Frag>
__device__ __forceinline__ void store_c_shared(float* p, const Frag& f, int ldm) {
  static_assert(Frag::num_elements == 8, "m16n16k8 fp32 accumulator fragment");
  asm volatile("wmma.store.d.sync.aligned.row.m16n16k8.shared.f32 [%0], {%1, %2, %3, %4, %5, %6, %7, %8}, %9;\n"
               ::"r"(hg::smem_u32(p)), "f"(f.x[0]), "f"(f.x[1]), "f"(f.x[2]), "f"(f.x[3]), "f"(f.x[4]),
               "f"(f.x[5]), "f"(f.x[6]), "f"(f.x[7]), "r"(ldm)
               : "memory");
}

template <typename Frag>
__device__ __forceinline__ void round_to_tf32(Frag& f) {
  // Round to nearest TF32 (10-bit mantissa) rather than letting the tensor core truncate.
#pragma unroll
  for (int t = 0; t < f.num_elements; ++t) f.x[t] = wmma::__float_to_tf32(f.x[t]);
}

// Dynamic smem of one kernel: kStages slices (exported per symbol for the build's check).
template <int BK, int kStages>
constexpr int kSmemBytes = kStages * Slice<BK>::kFloats * (int)sizeof(float);

template <int BK, int kStages>
__device__ __forceinline__ void sgemm_wmma_tf32_stages(const float* __restrict__ A, const float* __restrict__ B,
                                                       float* __restrict__ C, int M, int N, int K) {
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kSmemBytes<BK, kStages> <= 227 * 1024, "shared memory over the 227 KB per-block limit of any GPU");
  constexpr int kLdA = Slice<BK>::kLdA, kStageFloats = Slice<BK>::kFloats;
  static_assert(kWarpsM * kWarpsN * kWM * kLdC <= kStageFloats, "scratch fits in the drained pipeline");
  extern __shared__ __align__(128) float smem[];

  // Block swizzle (contract grid policy "tiles+swizzle"): column tile from grid.z strips.
  const int bx = blockIdx.z * gridDim.x + blockIdx.x;
  if (bx * kBN >= N) return;
  const int m0 = blockIdx.y * kBM, n0 = bx * kBN;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int k_tiles = (K + BK - 1) / BK;

  wmma::fragment<wmma::accumulator, kWM, kWN, kWK, float> acc[kFragsM][kFragsN];
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) wmma::fill_fragment(acc[i][j], 0.f);

  // Prologue: slices 0 .. stages-2 in flight, one commit group each (empty groups past the end keep
  // the group count, and so the wait below, uniform).
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_slice<BK>(smem + s * kStageFloats, A, B, M, N, K, m0, n0, s * BK, tid);
    hg::cp_async_commit();
  }

  for (int t = 0; t < k_tiles; ++t) {
    hg::cp_async_wait<kStages - 2>();  // this thread's copies of slice t have landed ...
    __syncthreads();                   // ... everyone's too, and everyone has finished slice t-1
    // Refill the stage slice t-1 used: safe after the barrier above (the only one per slice).
    const int pre = t + kStages - 1;
    if (pre < k_tiles) load_slice<BK>(smem + (pre % kStages) * kStageFloats, A, B, M, N, K, m0, n0, pre * BK, tid);
    hg::cp_async_commit();

    const float* sA = smem + (t % kStages) * kStageFloats;
    const float* sB = sA + Slice<BK>::kAFloats;
#pragma unroll
    for (int kk = 0; kk < BK; kk += kWK) {
      wmma::fragment<wmma::matrix_a, kWM, kWN, kWK, wmma::precision::tf32, wmma::row_major> fa[kFragsM];
      wmma::fragment<wmma::matrix_b, kWM, kWN, kWK, wmma::precision::tf32, wmma::row_major> fb[kFragsN];
#pragma unroll
      for (int i = 0; i < kFragsM; ++i) {
        load_a_shared(fa[i], sA + (wm * kFragsM * kWM + i * kWM) * kLdA + kk, kLdA);
        round_to_tf32(fa[i]);
      }
#pragma unroll
      for (int j = 0; j < kFragsN; ++j) {
        load_b_shared(fb[j], sB + kk * kLdB + wn * kFragsN * kWN + j * kWN, kLdB);
        round_to_tf32(fb[j]);
      }
#pragma unroll
      for (int i = 0; i < kFragsM; ++i)
#pragma unroll
        for (int j = 0; j < kFragsN; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
  }

  // Epilogue through shared memory: the accumulator layout is opaque, so each warp stages one 16 x 16
  // tile, then writes it as guarded float4 rows (ragged edges, and only 16-byte alignment of C needed).
  hg::cp_async_wait_all();  // only empty groups can remain, but drain before reusing the stages
  __syncthreads();          // every warp is done reading the last slice
  float* scratch = smem + warp * kWM * kLdC;
#pragma unroll
  for (int i = 0; i < kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j) {
      store_c_shared(scratch, acc[i][j], kLdC);
      __syncwarp();
#pragma unroll
      for (int h = 0; h < kWM * kWN / 4 / 32; ++h) {
        const int idx = lane + 32 * h;
        const int r = idx / (kWN / 4), c = (idx % (kWN / 4)) * 4;
        const int gm = m0 + (wm * kFragsM + i) * kWM + r;
        const int gn = n0 + (wn * kFragsN + j) * kWN + c;
        if (gm < M && gn < N)
          *reinterpret_cast<float4*>(C + (size_t)gm * N + gn) = *reinterpret_cast<const float4*>(scratch + r * kLdC + c);
      }
      __syncwarp();  // the scratch tile is overwritten by the next fragment
    }
}

}  // namespace sgw

// 2 blocks per SM: 128 registers per thread at most (64 accumulator floats + fragments).
#define SGEMM_WMMA_STAGES(symbol, stages)                                                              \
  extern "C" __global__ void __launch_bounds__(sgw::kThreads, 2)                                     \
      symbol(const float* A, const float* B, float* C, int M, int N, int K) {                        \
    sgw::sgemm_wmma_tf32_stages<sgw::kBK, stages>(A, B, C, M, N, K);                                  \
  }                                                                                                  \
  HG_EXPORT_DSMEM(symbol, sgw::kSmemBytes<sgw::kBK, stages>)

#include "sgemm_wmma.instances.cuh"
