// Family "hgemm_cuda_sliced_k": HGEMM CUDA-core ladder, step 2.
//   hgemm_sliced_k_f16: NN (A M x K, B K x N, C M x N, row-major); fp16 in, fp32 accumulate, fp16 out.
// Threads: 32 x 32 per block, one output each; block tile BM = BN = 32, K sliced in BK = 32 steps
// through shared memory (2 x 32 x 32 floats = 8 KB static). Any M, N, K >= 1: every load is guarded
// (zero fill outside A / B) and every store is guarded, so ragged edges such as M = 33 are exact.
// sm_80+ (nothing architecture-specific).
#include <cuda_fp16.h>

namespace {

template <int BS>
__device__ __forceinline__ void sliced_k(const half* __restrict__ A, const half* __restrict__ B,
                                         half* __restrict__ C, int M, int N, int K) {
  // fp32 tiles: each element is converted once on its way in, not once per use (BS times). No
  // padding needed: a warp (fixed ty) reads one sA row as a broadcast and one sB row contiguously.
  __shared__ __align__(16) float sA[BS][BS];
  __shared__ __align__(16) float sB[BS][BS];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * BS + ty;  // this thread's C row, and the A row it loads
  const int col = blockIdx.x * BS + tx;  // this thread's C column, and the B column it loads
  float acc = 0.f;
  for (int k0 = 0; k0 < K; k0 += BS) {
    // A warp (fixed ty, tx = 0..31) reads 32 consecutive halves of one A row and of one B row.
    sA[ty][tx] = (row < M && k0 + tx < K) ? __half2float(A[(size_t)row * K + k0 + tx]) : 0.f;
    sB[ty][tx] = (k0 + ty < K && col < N) ? __half2float(B[(size_t)(k0 + ty) * N + col]) : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BS; ++k) acc = fmaf(sA[ty][k], sB[k][tx], acc);  // zero fill makes the tail exact
    __syncthreads();
  }
  if (row < M && col < N) C[(size_t)row * N + col] = __float2half_rn(acc);
}

}  // namespace

extern "C" __global__ void __launch_bounds__(1024)
    hgemm_sliced_k_f16(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C, int M, int N,
                       int K) {
  sliced_k<32>(A, B, C, M, N, K);
}
