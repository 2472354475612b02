// Device helpers for the SGEMM ladder (cu/sgemm_*.cu): fp32 NN, C = A * B, row-major everywhere.
//
// The CUDA-core rungs share one block shape: 256 threads, a 128 x 128 output tile, 8 x 8 outputs per
// thread (16 x 16 threads), K sliced by BK (8 or 16). What differs from rung to rung is where the
// A tile lives in shared memory (as in global, or transposed: "bcf"), and how the next K slice is
// brought in (load, barrier, compute, barrier / register-staged double buffer / cp.async double buffer).
// The pieces below are those building blocks; the kernels in cu/sgemm_sliced_k.cu only combine them.
//
// Edge handling: every global access is guarded. 128-bit accesses need K % 4 == 0 (rows of A start
// 16-byte aligned, and a float4 of A is then either all inside K or all outside) and N % 4 == 0 (the
// same for B and C). The kernels declare exactly that in `require`; M is free.
#pragma once
#include <cstdint>
#include "ptx.cuh"

namespace sg {

constexpr int kThreads = 256;  // 16 x 16 threads
constexpr int kBM = 128;
constexpr int kBN = 128;
constexpr int kTM = 8;  // outputs per thread along M
constexpr int kTN = 8;  // outputs per thread along N
static_assert(kBM == 16 * kTM && kBN == 16 * kTN, "16 x 16 threads of 8 x 8 outputs tile 128 x 128");

// Padding of the transposed A tile sA[BK][kBM + kPadAT]. The global->shared mapping below has the two
// threads of a pair write rows k and k + 4 of the transposed tile for the same m: with a row pitch of
// 132 floats those land 4 * 132 = 528 = 16 (mod 32) banks apart, so a warp's 32 scalar stores hit 32
// different banks. The pitch stays a multiple of 4 floats, so float4 reads of a row stay aligned.
constexpr int kPadAT = 4;

// ---- cp.async, 4 bytes, zero-filling: the transposed A tile is scattered one float at a time. ----
// src_bytes is 4 (copy) or 0 (write a zero, read nothing): the guarded edge of a ragged matrix.
__device__ __forceinline__ void cp_async_4_zfill(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(hg::smem_u32(smem)), "l"(gmem),
               "r"(src_bytes));
}

// Guarded 128-bit global load: one predicated LDG.E.128, zeros outside the matrix.
__device__ __forceinline__ float4 ldg_f4(const float* p, bool ok) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (ok) v = *reinterpret_cast<const float4*>(p);
  return v;
}

// ---- which float4 of the A / B tile a thread moves (global -> shared), per pass of 8 K columns ----
// A (BM x BK): thread pairs read 32 contiguous bytes of one row (a full sector), 128 rows per pass.
// B (BK x BN): a warp reads one 512-byte row segment, 8 rows per pass.
// A K slice of BK columns takes BK / 8 passes of each.
struct TileCoords {
  int a_m, a_k;  // A: row in the tile, first K column of the float4 (pass 0)
  int b_k, b_n;  // B: K row in the tile (pass 0), first column of the float4
  __device__ __forceinline__ explicit TileCoords(int tid)
      : a_m(tid >> 1), a_k((tid & 1) * 4), b_k(tid >> 5), b_n((tid & 31) * 4) {}
};
static_assert(kThreads == 2 * kBM && kThreads == 8 * (kBN / 4), "one float4 of A and of B per thread per 8 K");

// Registers that carry one K slice from global to shared memory (BK / 8 float4 of A and of B).
template <int BK>
struct Stage {
  static constexpr int kPasses = BK / 8;
  float4 a[kPasses];
  float4 b[kPasses];
};

// The block's view of A, B, C: origin of its tile and the bounds that guard the edges.
struct Operands {
  const float* A;
  const float* B;
  float* C;
  int M, N, K;
  int m0, n0;  // first row / column of the block's C tile
};

template <int BK>
__device__ __forceinline__ void load_global(Stage<BK>& st, const Operands& op, const TileCoords& tc, int k0) {
  const int am = op.m0 + tc.a_m;
  const int bn = op.n0 + tc.b_n;
#pragma unroll
  for (int p = 0; p < Stage<BK>::kPasses; ++p) {
    const int ak = k0 + p * 8 + tc.a_k;
    const int bk = k0 + p * 8 + tc.b_k;
    st.a[p] = ldg_f4(op.A + (size_t)am * op.K + ak, am < op.M && ak < op.K);
    st.b[p] = ldg_f4(op.B + (size_t)bk * op.N + bn, bk < op.K && bn < op.N);
  }
}

// A tile kept as in global memory, sA[kBM][BK]: one STS.128 per float4.
template <int BK>
__device__ __forceinline__ void store_a_rowmajor(float (*sA)[BK], const Stage<BK>& st, const TileCoords& tc) {
#pragma unroll
  for (int p = 0; p < Stage<BK>::kPasses; ++p)
    *reinterpret_cast<float4*>(&sA[tc.a_m][p * 8 + tc.a_k]) = st.a[p];
}

// A tile transposed, sA[BK][kBM + kPadAT] ("bcf"): four scalar stores per float4 here buy float4
// reads of A in the inner loop (a thread's rows become contiguous along M).
template <int BK>
__device__ __forceinline__ void store_a_transposed(float (*sA)[kBM + kPadAT], const Stage<BK>& st,
                                                   const TileCoords& tc) {
#pragma unroll
  for (int p = 0; p < Stage<BK>::kPasses; ++p) {
    const int k = p * 8 + tc.a_k;
    sA[k + 0][tc.a_m] = st.a[p].x;
    sA[k + 1][tc.a_m] = st.a[p].y;
    sA[k + 2][tc.a_m] = st.a[p].z;
    sA[k + 3][tc.a_m] = st.a[p].w;
  }
}

template <int BK>
__device__ __forceinline__ void store_b(float (*sB)[kBN], const Stage<BK>& st, const TileCoords& tc) {
#pragma unroll
  for (int p = 0; p < Stage<BK>::kPasses; ++p)
    *reinterpret_cast<float4*>(&sB[p * 8 + tc.b_k][tc.b_n]) = st.b[p];
}

// cp.async version of load_global + store_a_transposed + store_b: the copy goes global -> shared
// without registers (LDGSTS), so the loads of slice k+1 need no registers while slice k is computed.
// A is scattered transposed one float at a time (4-byte cp.async); B moves 16 bytes at a time.
template <int BK>
__device__ __forceinline__ void cp_async_tile_bcf(float (*sA)[kBM + kPadAT], float (*sB)[kBN], const Operands& op,
                                                  const TileCoords& tc, int k0) {
  const int am = op.m0 + tc.a_m;
  const int bn = op.n0 + tc.b_n;
#pragma unroll
  for (int p = 0; p < BK / 8; ++p) {
    const int k = p * 8 + tc.a_k;
    const bool a_ok = am < op.M && k0 + k < op.K;  // K % 4 == 0: the 4 floats share one verdict
    // Out of range: zero-fill and point at the matrix base, so no address past the end is formed.
    const float* a_src = a_ok ? op.A + (size_t)am * op.K + k0 + k : op.A;
#pragma unroll
    for (int j = 0; j < 4; ++j) cp_async_4_zfill(&sA[k + j][tc.a_m], a_src + (a_ok ? j : 0), a_ok ? 4 : 0);

    const int bk = k0 + p * 8 + tc.b_k;
    const bool b_ok = bk < op.K && bn < op.N;
    hg::cp_async_16_zfill(&sB[p * 8 + tc.b_k][tc.b_n], b_ok ? op.B + (size_t)bk * op.N + bn : op.B, b_ok ? 16 : 0);
  }
}

// ---- the thread's 8 x 8 outputs ----
// Layout::Contiguous: rows ty*8 .. ty*8+7, columns tx*8 .. tx*8+7 (the straightforward split). Its
// float4 reads of B start 8 floats apart, so in each 8-thread phase of an LDS.128, threads tx and tx+4
// hit the same four banks: every B read is a 2-way bank conflict.
// Layout::Split: rows {ty*4 .. +3} and {64 + ty*4 .. +3}, columns likewise. With the transposed A tile,
// each half is one float4 read, and the 16 threads of a half-warp read 16 consecutive float4 of B:
// 256 contiguous bytes, no bank conflict; the two rows of threads in a warp read the same A (broadcast).
enum class Layout { Contiguous, Split };

template <Layout L>
__device__ __forceinline__ int out_row(int ty, int i) {
  if constexpr (L == Layout::Contiguous) return ty * kTM + i;
  else return (i < 4 ? 0 : kBM / 2) + ty * 4 + (i & 3);
}
template <Layout L>
__device__ __forceinline__ int out_col(int tx, int j) {
  if constexpr (L == Layout::Contiguous) return tx * kTN + j;
  else return (j < 4 ? 0 : kBN / 2) + tx * 4 + (j & 3);
}

// One K slice of outer products from shared memory. ATransposed: sA is [BK][kBM + kPadAT], else [kBM][BK].
template <int BK, bool ATransposed, Layout L, typename SA>
__device__ __forceinline__ void mma_slice(float (&acc)[kTM][kTN], SA sA, const float (*sB)[kBN], int tx, int ty) {
#pragma unroll
  for (int k = 0; k < BK; ++k) {
    float a[kTM], b[kTN];
    if constexpr (ATransposed) {
      static_assert(L == Layout::Split, "the transposed A tile is read as two float4 halves");
      const float4 a0 = *reinterpret_cast<const float4*>(&sA[k][out_row<L>(ty, 0)]);
      const float4 a1 = *reinterpret_cast<const float4*>(&sA[k][out_row<L>(ty, 4)]);
      a[0] = a0.x; a[1] = a0.y; a[2] = a0.z; a[3] = a0.w;
      a[4] = a1.x; a[5] = a1.y; a[6] = a1.z; a[7] = a1.w;
    } else {
      // Reads across rows of the row-major tile (the compiler merges them along k into float4 once the
      // slice is unrolled): 8 rows x BK/4 reads per slice for one thread's column of A.
#pragma unroll
      for (int i = 0; i < kTM; ++i) a[i] = sA[out_row<L>(ty, i)][k];
    }
    const float4 b0 = *reinterpret_cast<const float4*>(&sB[k][out_col<L>(tx, 0)]);
    const float4 b1 = *reinterpret_cast<const float4*>(&sB[k][out_col<L>(tx, 4)]);
    b[0] = b0.x; b[1] = b0.y; b[2] = b0.z; b[3] = b0.w;
    b[4] = b1.x; b[5] = b1.y; b[6] = b1.z; b[7] = b1.w;
#pragma unroll
    for (int i = 0; i < kTM; ++i)
#pragma unroll
      for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// Guarded 128-bit stores of the 8 x 8 outputs (two float4 per row); N % 4 == 0 keeps each float4
// wholly inside or wholly outside C.
template <Layout L>
__device__ __forceinline__ void store_c(const float (&acc)[kTM][kTN], const Operands& op, int tx, int ty) {
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int m = op.m0 + out_row<L>(ty, i);
    if (m >= op.M) continue;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int n = op.n0 + out_col<L>(tx, 4 * h);
      if (n < op.N)
        *reinterpret_cast<float4*>(op.C + (size_t)m * op.N + n) =
            make_float4(acc[i][4 * h], acc[i][4 * h + 1], acc[i][4 * h + 2], acc[i][4 * h + 3]);
    }
  }
}

}  // namespace sg
