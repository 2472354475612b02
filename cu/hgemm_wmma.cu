// Family "hgemm_wmma": the first seven rungs of the WMMA HGEMM ladder (Tensor Cores through nvcuda::wmma).
//   Layout NN (A M x K row-major, B K x N row-major, C M x N row-major); fp16 in, fp16 accumulate
//   (HMMA.F16), fp16 out. Minimum arch sm_80 (cp.async).
//   Grid "tiles": blockIdx.x walks N tiles, blockIdx.y walks M tiles.
//
//   rung                                   threads  block tile (BMxBNxBK)  smem (static)    requires
//   m16n16k16_naive                          32      16x16x16 (1 warp)     none             M,N,K % 16
//   m16n16k16_mma4x2                        256      64x32x16              3 KB (+epilogue) none
//   m16n16k16_mma4x2_warp2x4                256     128x128x16             8 KB             N,K % 8
//   ..._async                               256     128x128x16             8 KB             N,K % 8
//   ..._async_offset                        256     128x128x16            10.25 KB          N,K % 8
//   ..._dbuf_async                          256     128x128x16            20.5 KB           N,K % 8
//   m32n8k16_mma2x4_warp2x4_dbuf_async      256     128x128x16            20 KB             N,K % 8
// The tiled rungs share one template (cu/common/wmma.cuh); each adds one knob to the previous
// (cu/common/wmma_ladder.cuh).
#include "common/wmma_ladder.cuh"

using namespace nvcuda;
namespace wg = hg::wmma_gemm;
using namespace hg::wmma_gemm::rungs;  // the knobs of each rung (cu/common/wmma_ladder.cuh)

// Rung 1: one warp per 16x16 output tile, fragments loaded straight from global memory. WMMA loads need
// 256-bit aligned pointers and whole 16x16 tiles, hence M, N, K % 16 == 0 and 32-byte aligned buffers.
extern "C" __global__ void __launch_bounds__(32)
    hgemm_wmma_m16n16k16_naive(const half* A, const half* B, half* C, int M, int N, int K) {
  const int n0 = blockIdx.x * 16, m0 = blockIdx.y * 16;
  if (m0 >= M || n0 >= N) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> a;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::row_major> b;
  wmma::fragment<wmma::accumulator, 16, 16, 16, half> acc;
  wmma::fill_fragment(acc, __float2half(0.f));
#pragma unroll 4
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(a, A + (size_t)m0 * K + k, K);
    wmma::load_matrix_sync(b, B + (size_t)k * N + n0, N);
    wmma::mma_sync(acc, a, b, acc);
  }
  wmma::store_matrix_sync(C + (size_t)m0 * N + n0, acc, N, wmma::mem_row_major);
}

#define HG_WMMA_STATIC_KERNEL(SYM, RUNG)                                                              \
  extern "C" __global__ void __launch_bounds__(wg::Config<RUNG>::kThreads)                          \
      SYM(const half* A, const half* B, half* C, int M, int N, int K) {                              \
    wg::kernel_body<wg::Config<RUNG>>(A, B, C, M, N, K);                                             \
  }

#include "common/instances.cuh"
#include "hgemm_wmma.instances.cuh"
