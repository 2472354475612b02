// Family "naive": one thread per output element, straight from global memory.
//   hgemm_naive_f16: NN, fp16 in, fp32 accumulate, fp16 out.
//   sgemm_naive_f32: NN, fp32 in/acc/out.
// Threads: 32 x 8 per block; block tile BM=8 rows x BN=32 columns; no shared memory.
// Any M, N, K >= 1 (every access guarded); sm_80+.
#include <cuda_fp16.h>

#include "common/pack.cuh"

template <typename T>
__device__ __forceinline__ void naive_gemm(const T* __restrict__ A, const T* __restrict__ B,
                                           T* __restrict__ C, int M, int N, int K) {
  // threadIdx.x walks N so that a warp reads consecutive B and writes consecutive C elements.
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0.f;
  for (int k = 0; k < K; ++k)
    acc += hg::to_f32(A[(size_t)row * K + k]) * hg::to_f32(B[(size_t)k * N + col]);
  C[(size_t)row * N + col] = hg::from_f32<T>(acc);
}

extern "C" __global__ void hgemm_naive_f16(const half* A, const half* B, half* C, int M, int N, int K) {
  naive_gemm(A, B, C, M, N, K);
}

extern "C" __global__ void sgemm_naive_f32(const float* A, const float* B, float* C, int M, int N, int K) {
  naive_gemm(A, B, C, M, N, K);
}
