// Thread-block cluster and programmatic dependent launch primitives (sm_90+), shared by the Hopper GEMMs and the
// kernels behind hgemm_rt.matmul.
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

// Programmatic dependent launch: a grid launched after this one with programmatic stream serialization (or a
// programmatic graph edge) may start once every CTA here has called launch_dependents or exited; its griddep_wait
// returns once this grid has completed and its writes are visible. Without such a launch (and before sm_90,
// where they compile to nothing) both return at once. A kernel declared `dependent_launch` (cu/*.toml) calls
// griddep_wait in every CTA before its first global access: the launcher then starts it as a dependent.
__device__ __forceinline__ void griddep_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void griddep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
// A dependent kernel's first global access: wait for the kernel before, then let the next one launch (its CTAs
// take only what this grid leaves, and its own griddep_wait holds it until this grid has finished).
__device__ __forceinline__ void griddep_begin() {
  griddep_wait();
  griddep_launch_dependents();
}

}  // namespace hg
