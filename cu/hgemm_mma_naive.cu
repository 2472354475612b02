// Family "hgemm_mma_naive": rung 1 of the mma.sync ladder.
//   hgemm_mma_m16n8k16_naive: NN (A M x K, B K x N, C M x N, row-major), fp16 in, fp16 out,
//   fp16 or fp32 accumulation (variant axis acc). One warp per block computes one 16x8 tile of C
//   with one mma.sync.m16n8k16 per k-step: the 16x16 A slice and 16x8 B slice are staged in
//   shared memory, then ldmatrix.x4 (A) and ldmatrix.x2.trans (B, stored k-major) build the
//   fragments. Threads 32; static smem 768 bytes; sm_80+.
//   Any M, N, K >= 1: every global load and store is guarded (out-of-range inputs read as zero).
#include <cuda_fp16.h>

#include "common/mma.cuh"

namespace {

template <bool F32>
__device__ __forceinline__ void mma_naive(const half* __restrict__ A, const half* __restrict__ B,
                                          half* __restrict__ C, int M, int N, int K) {
  // Row pitches of 32 and 16 bytes keep every ldmatrix row address 16-byte aligned.
  __shared__ __align__(16) half sA[16][16];  // m x k
  __shared__ __align__(16) half sB[16][8];   // k x n
  const int lane = threadIdx.x;
  const int m0 = blockIdx.y * 16, n0 = blockIdx.x * 8;
  const half zero = __float2half(0.f);

  hg::mma::AccTile<F32> acc;
  acc.zero();
  // Each lane stages 8 elements of A (row lane/2, k half lane%2) and 4 of B (k row lane/2).
  const int ar = lane >> 1, ac = (lane & 1) * 8;
  const int br = lane >> 1, bc = (lane & 1) * 4;
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int gm = m0 + ar;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int gk = k0 + ac + e;
      sA[ar][ac + e] = (gm < M && gk < K) ? A[(size_t)gm * K + gk] : zero;
    }
    const int gk = k0 + br;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int gn = n0 + bc + e;
      sB[br][bc + e] = (gk < K && gn < N) ? B[(size_t)gk * N + gn] : zero;
    }
    __syncthreads();  // the block is this one warp: orders the stores before ldmatrix
    uint32_t a[4], b[2];
    // x4: lanes 0-15 give rows 0-15 at k 0-7, lanes 16-31 the same rows at k 8-15.
    hg::ldmatrix_x4(a[0], a[1], a[2], a[3], &sA[lane & 15][(lane >> 4) * 8]);
    // x2.trans: lanes 0-15 give k rows 0-15; .trans yields the k-pairs the col-major B operand needs.
    hg::ldmatrix_x2_trans(b[0], b[1], &sB[lane & 15][0]);
    acc.mma(a, b);
    __syncthreads();  // fragments read before the next slice overwrites smem
  }

  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = m0 + g + h * 8;
    const uint32_t bits = acc.packed(h);
    const __half2 v = *reinterpret_cast<const __half2*>(&bits);
    const int col = n0 + 2 * t;
    if (row < M) {
      if (col < N) C[(size_t)row * N + col] = __low2half(v);
      if (col + 1 < N) C[(size_t)row * N + col + 1] = __high2half(v);
    }
  }
}

}  // namespace

extern "C" __global__ void __launch_bounds__(32) hgemm_mma_m16n8k16_naive__accf16(
    const half* A, const half* B, half* C, int M, int N, int K) {
  mma_naive<false>(A, B, C, M, N, K);
}

extern "C" __global__ void __launch_bounds__(32) hgemm_mma_m16n8k16_naive__accf32(
    const half* A, const half* B, half* C, int M, int N, int K) {
  mma_naive<true>(A, B, C, M, N, K);
}
