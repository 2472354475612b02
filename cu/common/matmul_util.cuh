// Device helpers of the "util" family (cu/util.cu), the kernels behind hgemm_rt.matmul: element
// conversions for the three dtypes, a bf16 mma.sync, a zero-filling cp.async on a shared-window
// address, and the thread-block-cluster primitives of the split-K reduction (sm_90).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "ptx.cuh"

namespace hgu {

// ---- element <-> fp32 (all arithmetic of the helpers is done in fp32) ----
template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Two fp32 values -> one 32-bit register holding the pair (low half = first element).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <>
__device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}
template <>
__device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

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

// 16-byte cp.async to a shared-window address that reads `src_bytes` (0..16) and zero-fills the rest:
// the ragged M/N/K edges of a tile load as zeros, so they add nothing to the product.
__device__ __forceinline__ void cp_async_16_zfill(uint32_t smem_addr, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr), "l"(gmem), "r"(src_bytes));
}

// ---- thread-block cluster (sm_90): the split-K partial tiles are summed through DSMEM ----
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every CTA in the cluster; release/acquire orders the partial-tile stores before
// the peers' DSMEM reads (and those reads before a CTA may exit and give its smem away).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
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

}  // namespace hgu
