// Family "sgemm_sliced_k": the CUDA-core rungs of the SGEMM ladder (steps 2..7).
//   Layout NN (A M x K, B K x N, C M x N, row-major); fp32 in, fp32 accumulate (FFMA), fp32 out; sm_80+.
//   sgemm_sliced_k_f32: 32 x 32 threads, one output each, K sliced through 32 x 32 shared tiles.
//     Any M, N, K >= 1 (every access guarded).
//   sgemm_t_8x8_*: 256 threads, 128 x 128 block tile, 8 x 8 outputs per thread, 128-bit global loads
//     and stores. Requires N % 4 == 0 and K % 4 == 0 (16-byte aligned rows); M, N, K edges guarded.
//     Static smem: (BK * (128 + 4) + BK * 128) * 4 bytes per buffer, 1 or 2 buffers; BK = 8 or 16.
// Helpers (tile movement, inner product, epilogue) live in common/sgemm.cuh; each rung below is a
// knobs struct for sgemm_t8x8 (kBK, kBcf, kPipe) deriving from the rung it improves on.
#include <type_traits>
#include "common/sgemm.cuh"

// ---- step 2: shared-memory K slices, one output per thread ----
template <int BS>
__device__ __forceinline__ void sgemm_sliced_k(const float* __restrict__ A, const float* __restrict__ B,
                                               float* __restrict__ C, int M, int N, int K) {
  // threadIdx.x walks N: a warp reads one row of the B tile (consecutive banks) and one element of
  // the A tile (broadcast), and writes 32 consecutive floats of C.
  __shared__ float sA[BS][BS];
  __shared__ float sB[BS][BS];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int m = blockIdx.y * BS + ty;
  const int n = blockIdx.x * BS + tx;
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += BS) {
    // Each thread brings one element of each tile; zeros past the edges keep the inner loop unguarded.
    sA[ty][tx] = (m < M && k0 + tx < K) ? A[(size_t)m * K + k0 + tx] : 0.f;
    sB[ty][tx] = (k0 + ty < K && n < N) ? B[(size_t)(k0 + ty) * N + n] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BS; ++k) acc = fmaf(sA[ty][k], sB[k][tx], acc);
    __syncthreads();  // the tiles are overwritten next slice
  }
  if (m < M && n < N) C[(size_t)m * N + n] = acc;
}

extern "C" __global__ void __launch_bounds__(32 * 32) sgemm_sliced_k_f32(const float* A, const float* B, float* C,
                                                                         int M, int N, int K) {
  sgemm_sliced_k<32>(A, B, C, M, N, K);
}

// ---- steps 3..7: 8 x 8 thread tiles ----
// How the next K slice reaches shared memory:
//   Single    : load, barrier, compute, barrier (one buffer, two barriers per slice).
//   DbufRegs  : two buffers; slice k+1 is loaded into registers before slice k is computed and stored
//               to the other buffer after it: one barrier per slice, global latency hidden by the FFMAs.
//   DbufAsync : two buffers; slice k+1 is copied by cp.async straight into the other buffer while slice
//               k is computed: one barrier per slice, no staging registers.
enum class Pipe { Single, DbufRegs, DbufAsync };

// Step 3: BK 8, A as in global memory, one buffer (load, barrier, compute, barrier).
struct T8x8 {
  static constexpr int kBK = 8;
  static constexpr bool kBcf = false;  // A tile transposed in smem ("bank-conflict free")
  static constexpr Pipe kPipe = Pipe::Single;
};
// Step 4: A transposed.
struct T8x8Bcf : T8x8 {
  static constexpr bool kBcf = true;
};
// Step 5: register-staged double buffer.
struct T8x8BcfDbuf : T8x8Bcf {
  static constexpr Pipe kPipe = Pipe::DbufRegs;
};
// Step 6: BK 16.
struct K16BcfDbuf : T8x8BcfDbuf {
  static constexpr int kBK = 16;
};
// Step 7: cp.async double buffer.
struct K16BcfDbufAsync : K16BcfDbuf {
  static constexpr Pipe kPipe = Pipe::DbufAsync;
};

template <class Rung>
__device__ __forceinline__ void sgemm_t8x8(const float* __restrict__ A, const float* __restrict__ B,
                                           float* __restrict__ C, int M, int N, int K) {
  using namespace sg;
  constexpr int BK = Rung::kBK;
  constexpr bool kBcf = Rung::kBcf;
  constexpr Pipe kPipe = Rung::kPipe;
  static_assert(BK % 8 == 0, "the tile movers work in passes of 8 K columns");
  static_assert(kPipe != Pipe::DbufAsync || kBcf, "the cp.async mover writes the transposed A tile");
  constexpr Layout L = kBcf ? Layout::Split : Layout::Contiguous;
  constexpr int kBufs = kPipe == Pipe::Single ? 1 : 2;
  // bcf: A transposed (padded, see kPadAT); otherwise A as in global memory.
  using ATile = std::conditional_t<kBcf, float[BK][kBM + kPadAT], float[kBM][BK]>;
  static_assert(kBufs * (sizeof(ATile) + BK * kBN * sizeof(float)) <= 48 * 1024,
                "static shared memory is limited to 48 KB");
  __shared__ __align__(16) ATile sA[kBufs];
  __shared__ __align__(16) float sB[kBufs][BK][kBN];

  const int tid = threadIdx.x;
  const int tx = tid & 15, ty = tid >> 4;
  const Operands op{A, B, C, M, N, K, (int)blockIdx.y * kBM, (int)blockIdx.x * kBN};
  const TileCoords tc(tid);
  const int k_tiles = (K + BK - 1) / BK;
  float acc[kTM][kTN] = {};

  auto to_smem = [&](int buf, const Stage<BK>& st) {
    if constexpr (kBcf) store_a_transposed<BK>(sA[buf], st, tc);
    else store_a_rowmajor<BK>(sA[buf], st, tc);
    store_b<BK>(sB[buf], st, tc);
  };
  auto compute = [&](int buf) { mma_slice<BK, kBcf, L>(acc, sA[buf], sB[buf], tx, ty); };

  if constexpr (kPipe == Pipe::Single) {
    for (int t = 0; t < k_tiles; ++t) {
      Stage<BK> st;
      load_global(st, op, tc, t * BK);
      to_smem(0, st);
      __syncthreads();
      compute(0);
      __syncthreads();  // everyone is done reading before the next slice overwrites the buffer
    }
  } else if constexpr (kPipe == Pipe::DbufRegs) {
    {
      Stage<BK> st;
      load_global(st, op, tc, 0);
      to_smem(0, st);
    }
    __syncthreads();
    for (int t = 0; t < k_tiles; ++t) {
      const int cur = t & 1;
      const bool more = t + 1 < k_tiles;
      Stage<BK> st;
      if (more) load_global(st, op, tc, (t + 1) * BK);  // in flight during compute(cur)
      compute(cur);
      // Buffer cur^1 was last read in iteration t-1, which every thread left through the barrier below.
      if (more) to_smem(cur ^ 1, st);
      __syncthreads();  // the one barrier per slice: cur^1 is complete, cur is free
    }
  } else {
    cp_async_tile_bcf<BK>(sA[0], sB[0], op, tc, 0);
    hg::cp_async_commit();
    hg::cp_async_wait<0>();
    __syncthreads();
    for (int t = 0; t < k_tiles; ++t) {
      const int cur = t & 1;
      if (t + 1 < k_tiles) {
        cp_async_tile_bcf<BK>(sA[cur ^ 1], sB[cur ^ 1], op, tc, (t + 1) * BK);
        hg::cp_async_commit();
      }
      compute(cur);
      hg::cp_async_wait<0>();  // this thread's copies into cur^1 have landed ...
      __syncthreads();         // ... and everyone's; everyone is also done reading cur
    }
  }
  store_c<L>(acc, op, tx, ty);
}

// 256 threads, 2 blocks per SM: caps registers at 128 (64 accumulators + fragments + staging).
#define SGEMM_T8X8(name, RUNG)                                                                         \
  extern "C" __global__ void __launch_bounds__(sg::kThreads, 2)                                       \
      name(const float* A, const float* B, float* C, int M, int N, int K) {                          \
    sgemm_t8x8<RUNG>(A, B, C, M, N, K);                                                                \
  }

#include "common/instances.cuh"
#include "sgemm_sliced_k.instances.cuh"
