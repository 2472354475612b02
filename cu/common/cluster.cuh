// Thread-block cluster primitives (sm_90+), shared by the Hopper GEMMs and the split-K util kernels.
#pragma once
#include <cstdint>

namespace hg {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// CTAs of the cluster along y (1 outside a cluster launch).
__device__ __forceinline__ uint32_t cluster_nctaid_y() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctaid.y;\n" : "=r"(n));
  return n;
}
// Every thread of every CTA of the cluster. release/acquire orders each CTA's shared-memory writes
// (barrier init, partial tiles) before its peers' accesses to them, and the peers' accesses before
// a CTA may exit and give its shared memory away.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
#endif

}  // namespace hg
