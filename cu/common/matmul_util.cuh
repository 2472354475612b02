// Device helpers of the "matmul" family (cu/matmul.cu), the kernels behind hgemm_rt.matmul: element
// conversions for the three dtypes, a bf16 mma.sync, the any-alignment 16-byte load of the copies,
// the thread-block-cluster primitives of the split-K reduction (sm_90) and the stores that apply the
// fused epilogue (cu/common/epilogue.cuh) to the fp32 sums.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "cluster.cuh"
#include "epilogue.cuh"
#include "pack.cuh"
#include "ptx.cuh"

namespace hgu {

using hg::from_f32;  // cu/common/pack.cuh (all arithmetic of the helpers is done in fp32)
using hg::pack2;
using hg::to_f32;

// ---- mma.sync m16n8k16 row.col with fp32 accumulation, for fp16 and bf16 inputs ----
template <typename T>
__device__ __forceinline__ void mma_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]);
template <>
__device__ __forceinline__ void mma_f32<__half>(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  hg::mma_m16n8k16_f32(d, a, b, d);
}
template <>
__device__ __forceinline__ void mma_f32<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                       const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// ---- thread-block cluster (sm_90): the split-K partial tiles are summed through DSMEM ----
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
using hg::cluster_ctarank;  // cu/common/cluster.cuh
using hg::cluster_sync;
// float4 at the same shared-window offset in CTA `rank` of this cluster.
__device__ __forceinline__ float4 ld_dsmem_f4(uint32_t smem_addr, uint32_t rank) {
  float4 v;
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %4, %5;\n"
      "ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [remote];\n"
      "}\n"
      : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
      : "r"(smem_addr), "r"(rank)
      : "memory");
  return v;
}
#endif

// ---- the batch (grid.z): which matrix of a batched launch this CTA works on ----
// A batched launch has grid.z = splits x batch with a cluster (1, 1, splits) along z (sm_90), so the
// cluster's index along z is the batch index and the rank in the cluster the K slice; without a
// cluster (splits = 1, and always before sm_90) blockIdx.z is the batch index. The batch index is
// (outer, inner) with inner = z % batch_inner (two levels of batch dimensions, as a 4-D attention
// tensor (B, H, S, D) viewed from a (B, S, H, D) layout has); an unbatched launch has grid.z = splits,
// batch_inner = 1 and zero batch strides.
struct GridZ {
  int splits;  // CTAs per cluster along z (the split-K factor)
  int split;   // this CTA's K slice
  int outer, inner;
};
__device__ __forceinline__ GridZ grid_z(int batch_inner) {
  GridZ g;
  int z;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t n, r, c;
  asm("mov.u32 %0, %%cluster_nctaid.z;\n" : "=r"(n));  // (a cluster along M, matmul_sm90's multicast pair, is no split)
  asm("mov.u32 %0, %%cluster_ctaid.z;\n" : "=r"(r));
  asm("mov.u32 %0, %%clusterid.z;\n" : "=r"(c));
  g.splits = static_cast<int>(n);
  g.split = static_cast<int>(r);
  z = static_cast<int>(c);
#else
  g.splits = 1;
  g.split = 0;
  z = static_cast<int>(blockIdx.z);
#endif
  g.outer = z / batch_inner;
  g.inner = z - g.outer * batch_inner;
  return g;
}
// Element offset of batch (outer, inner) in an operand with batch strides s_outer, s_inner (64-bit:
// a batch stride may exceed 2^31 elements; zero for a broadcast operand).
__device__ __forceinline__ long long batch_offset(const GridZ& g, long long s_outer, long long s_inner) {
  return g.outer * s_outer + g.inner * s_inner;
}

// 16 bytes starting at any element-aligned address p, read as one or two aligned 16-byte loads and
// funnel-shifted into place: rows of an odd leading dimension (4095 fp16) then still move in
// vectors. Both aligned chunks hold bytes of the requested run, so neither can touch a page the
// run does not (the second one is read only when p is misaligned), but they can hold bytes outside
// the matrix: callers check chunks_inside() first. The source must not be written by the same kernel.
__device__ __forceinline__ uint4 load16_any(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint4* q = reinterpret_cast<const uint4*>(a & ~static_cast<uintptr_t>(15));
  const uint32_t sh = static_cast<uint32_t>(a & 15);
  // read-only path (the source never aliases the destination); __ldg also keeps the global space
  // explicit, which the integer round trip of the address would otherwise lose (generic LD)
  if (sh == 0) return __ldg(q);
  const uint4 lo = __ldg(q), hi = __ldg(q + 1);
  const uint32_t w[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
  const uint32_t bits = (sh & 3) * 8;  // 0 or 16 for element sizes of 2 or 4 bytes
  uint4 o;
  // a switch on the word offset keeps every index a constant (no local-memory array)
#define HGU_SEL(k)                                  \
  o.x = __funnelshift_r(w[k], w[k + 1], bits);     \
  o.y = __funnelshift_r(w[k + 1], w[k + 2], bits); \
  o.z = __funnelshift_r(w[k + 2], w[k + 3], bits); \
  o.w = __funnelshift_r(w[k + 3], w[k + 4], bits);
  switch (sh >> 2) {
    case 0: HGU_SEL(0) break;
    case 1: HGU_SEL(1) break;
    case 2: HGU_SEL(2) break;
    default: HGU_SEL(3) break;
  }
#undef HGU_SEL
  return o;
}

// Whether the aligned chunk(s) load16_any(p) reads lie inside the byte range [lo, hi).
__device__ __forceinline__ bool chunks_inside(const void* p, uintptr_t lo, uintptr_t hi) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t q = a & ~static_cast<uintptr_t>(15);
  return q >= lo && q + ((a & 15) ? 32 : 16) <= hi;
}

// store4_values' element-wise path: the cols_left first of x (+ beta * C), one element at a time at stride ldc_c.
template <typename T>
__device__ __forceinline__ void store4_elements(T* p, int ldc_c, int cols_left, float (&x)[4], float beta) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (j < cols_left) {
      T* e = p + static_cast<long long>(j) * ldc_c;
      float y = x[j];
      if (beta != 0.f) y += beta * to_f32(*e);
      *e = from_f32<T>(y);
    }
  }
}

// Four consecutive output columns of one row, x[j] already through the epilogue (fp32): x + beta * C,
// one 8-byte store where C's row is contiguous and the address aligned, element stores otherwise (any
// strides, ragged edges: only the cols_left first values are stored). BLAS convention: beta == 0
// never reads C (it may hold NaN).
template <typename T>
__device__ __forceinline__ void store4_values(T* C, long long off, int ldc_c, int cols_left, float (&x)[4],
                                              float beta) {
  T* p = C + off;
  if (ldc_c == 1 && cols_left >= 4 && (reinterpret_cast<uintptr_t>(p) & 7) == 0) {
    uint2* q = reinterpret_cast<uint2*>(p);
    if (beta != 0.f) {
      const uint2 old = *q;
      const T* o = reinterpret_cast<const T*>(&old);
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] += beta * to_f32(o[j]);
    }
    *q = make_uint2(pack2<T>(x[0], x[1]), pack2<T>(x[2], x[3]));
    return;
  }
  store4_elements(p, ldc_c, cols_left, x, beta);
}

// fp32: one 16-byte store where C's row is contiguous and the address aligned.
template <>
__device__ __forceinline__ void store4_values<float>(float* C, long long off, int ldc_c, int cols_left, float (&x)[4],
                                                     float beta) {
  float* p = C + off;
  if (ldc_c == 1 && cols_left >= 4 && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
    float4* q = reinterpret_cast<float4*>(p);
    if (beta != 0.f) {
      const float4 o = *q;
      x[0] += beta * o.x, x[1] += beta * o.y, x[2] += beta * o.z, x[3] += beta * o.w;
    }
    *q = make_float4(x[0], x[1], x[2], x[3]);
    return;
  }
  store4_elements(p, ldc_c, cols_left, x, beta);
}

// Output (row, col .. col + 3), sums v: the epilogue, then store4_values. kLinear (ep.linear(), the
// common case): alpha * v alone. Otherwise bias, activation and scale per element, only for the
// cols_left columns inside C (no bias element past the last column is read).
template <typename T, bool kLinear>
__device__ __forceinline__ void store4(T* C, long long off, int ldc_c, int cols_left, float4 v,
                                       const hge::Epilogue<T>& ep, int row, int col) {
  float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if (kLinear)
      x[j] *= ep.alpha;
    else if (j < cols_left)
      x[j] = ep.value(x[j], row, col + j);
  }
  store4_values<T>(C, off, ldc_c, cols_left, x, ep.beta);
}

// The split-K epilogue shared by the matmul GEMMs. Every CTA of the cluster holds its fp32 partial
// BM x BN tile at shared offset `tile` (row stride kStride floats) and has passed a cluster barrier;
// CTA `rank` of `splits` sums rows [rank*BM/splits, (rank+1)*BM/splits) over all the CTAs' tiles
// (distributed shared memory) and stores them through the epilogue: C[m*ldc_r + n*ldc_c] =
// scale * act(alpha * sum + bias) (+ beta * C), m and n the output row and column.
// Threads t = 0..nthreads-1 of the CTA take float4 column quads in turn. With splits == 1 (and always
// before sm_90) the CTA reads back only its own tile.
template <typename T, int BM, int BN, int kStride, bool kLinear, int kBatch = 4>
__device__ __forceinline__ void reduce_store_body(const unsigned char* tile, int splits, uint32_t rank, int t,
                                                  int nthreads, T* C, int M, int N, int m0, int n0, int ldc_r,
                                                  int ldc_c, const hge::Epilogue<T>& ep) {
  const int rows = BM / splits;
  constexpr int kQuads = BN / 4;
  const uint32_t base = hg::smem_u32(tile);
  for (int e = t; e < rows * kQuads; e += nthreads) {
    const int r = static_cast<int>(rank) * rows + e / kQuads, c = (e % kQuads) * 4;
    const uint32_t off = static_cast<uint32_t>((r * kStride + c) * 4);
    float4 v;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (splits > 1) {
      // Issue every peer's load before the first add: a DSMEM round trip is hundreds of cycles, and
      // an add between the loads would wait for each one in turn.
      // (kBatch loads in flight: 4 * kBatch registers, chosen to fit under the kernel's cap)
      v = make_float4(0.f, 0.f, 0.f, 0.f);
      for (int p0 = 0; p0 < splits; p0 += kBatch) {
        float4 w[kBatch];
#pragma unroll
        for (int p = 0; p < kBatch; ++p)
          if (p0 + p < splits) w[p] = ld_dsmem_f4(base + off, static_cast<uint32_t>(p0 + p));
#pragma unroll
        for (int p = 0; p < kBatch; ++p) {
          if (p0 + p < splits) {
            v.x += w[p].x;
            v.y += w[p].y;
            v.z += w[p].z;
            v.w += w[p].w;
          }
        }
      }
    } else {
      v = *reinterpret_cast<const float4*>(tile + off);
    }
#else
    v = *reinterpret_cast<const float4*>(tile + off);
#endif
    const int gm = m0 + r, gn = n0 + c;
    if (gm < M && gn < N)
      store4<T, kLinear>(C, static_cast<long long>(gm) * ldc_r + static_cast<long long>(gn) * ldc_c, ldc_c, N - gn, v,
                         ep, gm, gn);
  }
}
// The general epilogue (bias, activation, scale) as a function of its own: its code (an activation
// per element) then takes no registers from the GEMM's main loop, which stays what it is without it.
template <typename T, int BM, int BN, int kStride>
__device__ __noinline__ void reduce_store_general(const unsigned char* tile, int splits, uint32_t rank, int t,
                                                  int nthreads, T* C, int M, int N, int m0, int n0, int ldc_r,
                                                  int ldc_c, const hge::Epilogue<T> ep) {
  reduce_store_body<T, BM, BN, kStride, false>(tile, splits, rank, t, nthreads, C, M, N, m0, n0, ldc_r, ldc_c, ep);
}
template <typename T, int BM, int BN, int kStride>
__device__ __forceinline__ void reduce_store(const unsigned char* tile, int splits, uint32_t rank, int t, int nthreads,
                                             T* C, int M, int N, int m0, int n0, int ldc_r, int ldc_c,
                                             const hge::Epilogue<T>& ep) {
  if (ep.linear())
    reduce_store_body<T, BM, BN, kStride, true>(tile, splits, rank, t, nthreads, C, M, N, m0, n0, ldc_r, ldc_c, ep);
  else
    reduce_store_general<T, BM, BN, kStride>(tile, splits, rank, t, nthreads, C, M, N, m0, n0, ldc_r, ldc_c, ep);
}

// The split-K epilogue's whole protocol, once every thread of the CTA has written its part of the
// CTA's fp32 partial tile at `tile`: the barrier that publishes the tiles (the cluster's with splits
// > 1, the CTA's otherwise, and always before sm_90), the summed store, and the cluster barrier that
// keeps each tile alive until its peers have read it.
template <typename T, int BM, int BN, int kStride>
__device__ __forceinline__ void cluster_reduce_store(const unsigned char* tile, int splits, int t, int nthreads, T* C,
                                                     int M, int N, int m0, int n0, int ldc_r, int ldc_c,
                                                     const hge::Epilogue<T>& ep) {
  uint32_t rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1) {
    rank = cluster_ctarank();
    cluster_sync();
  } else {
    __syncthreads();
  }
#else
  __syncthreads();  // no clusters before sm_90: the runtime launches S = 1 only
#endif
  reduce_store<T, BM, BN, kStride>(tile, splits, rank, t, nthreads, C, M, N, m0, n0, ldc_r, ldc_c, ep);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (splits > 1) cluster_sync();  // peers may still be reading this CTA's tile
#endif
}

}  // namespace hgu
