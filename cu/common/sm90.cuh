// Hopper (sm_90 / sm_90a) PTX wrappers: mbarrier, TMA (cp.async.bulk.tensor, its L2 prefetch), cluster,
// wgmma, stmatrix/ldmatrix, setmaxnreg. Used by the hgemm_sm90, matmul_sm90 and matmul_sm90_fused families.
//
// Every wrapper is __forceinline__ on purpose: a wgmma wrapper that ends up as a real call makes
// ptxas serialise the whole warpgroup-MMA pipeline (warning C7510), and the accumulator array would be
// forced through memory. No printf/assert may appear in a kernel that uses these for the same reason.
// wgmma and setmaxnreg need the sm_90a target (-gencode=arch=compute_90a,code=sm_90a).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include "cluster.cuh"
#include "pack.cuh"

namespace hg90 {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------------------------------------
// mbarrier (shared-memory transaction barrier)
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
// Makes mbarrier.init visible to the async proxy (TMA complete_tx) and to the other CTAs of the cluster.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// Producer: one arrival that also announces `bytes` of TMA traffic for the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
// Arrive on the barrier at the same shared-memory offset in CTA `cta_rank` of this cluster
// (may be this CTA itself). Used to release a stage after wgmma.wait_group has retired the reads of
// it, so no data ordering is needed beyond the arrival itself: the default (.release.cta) form is
// used on purpose, since .release.cluster costs a MEMBAR.ALL.GPU that stalls the whole warpgroup.
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta_rank) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(smem_u32(bar)),
      "r"(cta_rank)
      : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(ok)
      : "r"(smem_u32(bar)), "r"(parity)
      : "memory");
  return ok != 0;
}
// Wait until the phase with the given parity has completed. try_wait already suspends the thread
// for a hardware-defined time, so the loop does not hammer shared memory.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  while (!mbar_try_wait(bar, parity)) {
  }
}

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------
// cluster_sync: after barrier init (a peer must not multicast into / arrive on barriers that are not
// initialised yet) and before exit (a CTA must not leave while its peer can still arrive on them).
using hg::cluster_ctarank;  // cu/common/cluster.cuh
using hg::cluster_sync;

// ---------------------------------------------------------------------------------------------
// TMA (bulk tensor copies). The tensor map is a __grid_constant__ kernel parameter; its generic
// address is what the instruction takes.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void tma_load_2d(void* dst, const void* tmap, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::
          "r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// Same box written to the same smem offset in every CTA of `cta_mask`, each CTA's barrier at the
// same offset receiving the complete_tx bytes.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%4, %5}], [%2], %3;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_u32(bar)), "h"(cta_mask), "r"(c0), "r"(c1)
      : "memory");
}
// The multicast load with an L2 cache policy (hg::l2_policy) for the lines it brings.
__device__ __forceinline__ void tma_load_2d_multicast_hint(void* dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                                           uint16_t cta_mask, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster.L2::cache_hint"
      " [%0], [%1, {%4, %5}], [%2], %3, %6;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_u32(bar)), "h"(cta_mask), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
// Shared -> global tile store; out-of-bounds rows/columns of the box are clipped by the hardware.
__device__ __forceinline__ void tma_store_2d(const void* tmap, const void* src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(smem_u32(src)), "r"(c0), "r"(c1)
               : "memory");
}
// Rank-4 forms for batched launches: maps of (cols, rows, inner batch, outer batch).
__device__ __forceinline__ void tma_load_4d(void* dst, const void* tmap, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// The same loads with an L2 cache policy (hg::l2_policy) for the lines they bring.
__device__ __forceinline__ void tma_load_2d_hint(void* dst, const void* tmap, uint64_t* bar, int c0, int c1,
                                                 uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
      "%4}], [%2], %5;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_load_4d_hint(void* dst, const void* tmap, uint64_t* bar, int c0, int c1, int c2,
                                                 int c3, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, "
      "%4, %5, %6}], [%2], %7;\n" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void tma_store_4d(const void* tmap, const void* src, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
// The rank-4 store with an L2 cache policy (hg::l2_policy) for the lines it writes.
__device__ __forceinline__ void tma_store_4d_hint(const void* tmap, const void* src, int c0, int c1, int c2, int c3,
                                                  uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.bulk_group.L2::cache_hint [%0, {%2, %3, %4, %5}], [%1], %6;\n" ::"l"(
          reinterpret_cast<uint64_t>(tmap)),
      "r"(smem_u32(src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "l"(policy)
      : "memory");
}
// L2 prefetch of a box (no shared memory, no barrier): warms the lines a later TMA load of the box reads.
__device__ __forceinline__ void tma_prefetch_2d(const void* tmap, int c0, int c1) {
  asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(c0), "r"(c1)
               : "memory");
}
__device__ __forceinline__ void tma_prefetch_4d(const void* tmap, int c0, int c1, int c2, int c3) {
  asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];\n" ::"l"(
                   reinterpret_cast<uint64_t>(tmap)),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3)
               : "memory");
}
__device__ __forceinline__ void tma_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most N committed store groups still read their shared-memory source.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void tma_store_wait_all() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy shared-memory writes (st.shared, stmatrix) become visible to the async proxy (TMA).
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void prefetch_tmap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// Named barrier over `threads` threads (a multiple of 32); id 0 is __syncthreads().
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// ---------------------------------------------------------------------------------------------
// setmaxnreg (sm_90a): warp-specialised register budgets. Takes effect only with a register cap at
// kernel entry (__launch_bounds__(threads, 1)); ptxas warns C7508 otherwise.
// ---------------------------------------------------------------------------------------------
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}

// ---------------------------------------------------------------------------------------------
// stmatrix / ldmatrix (sm_90): four 8x8 b16 matrices between the mma fragment layout and shared memory;
// lane l gives the address of row (l % 8) of matrix (l / 8).
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ void stmatrix_x4(uint32_t smem_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.x4.m8n8.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

// ldmatrix: the inverse of stmatrix_x4 (the same addresses give the same fragments back).
__device__ __forceinline__ void ldmatrix_x4(uint32_t smem_addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}

// ---------------------------------------------------------------------------------------------
// wgmma (sm_90a)
// ---------------------------------------------------------------------------------------------
// Shared-memory matrix descriptor for a 128-byte-swizzled tile (the layout TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B). Bits: [0,14) start address >> 4, [16,30) leading byte offset >> 4,
// [32,46) stride byte offset >> 4, [62,64) layout (1 = 128B swizzle). The tile base must be
// 1024-byte aligned (base_offset field left 0).
//  K-major operand (rows of 64 fp16 = 128 B): SBO = 1024 (next group of 8 rows); LBO unused (1).
//  MN-major operand (B of NN: 64 N-elements per 128 B row, rows walk K): LBO = byte distance
//  between 64-wide N chunks, SBO = 1024 (next group of 8 K rows).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>((lbo_bytes & 0x3FFFF) >> 4) << 16;
  d |= static_cast<uint64_t>((sbo_bytes & 0x3FFFF) >> 4) << 32;
  d |= 1ull << 62;
  return d;
}

// Orders register accesses to the accumulators before the asynchronous wgmma reads them.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across a wgmma wait (the asm above has
// no register operands, so without this the compiler could read d[] before the MMA finished).
__device__ __forceinline__ void fence_regs(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// D(64x256, fp32) (+)= A(64x16, smem desc) * B(16x256, smem desc).
// scale_d = 0 overwrites D (first K step of a tile), 1 accumulates. TRANS_B = 1 reads B MN-major
// (the NN layout: B is K x N row-major in global memory); 0 reads it K-major (TN). TRANS_A = 1
// reads A MN-major (A column-major: K x M row-major in global memory); 0 reads it K-major.
#define HG90_WGMMA_ACC_LIST(X)                                                                                 \
  X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15), X(16), \
      X(17), X(18), X(19), X(20), X(21), X(22), X(23), X(24), X(25), X(26), X(27), X(28), X(29), X(30), X(31),   \
      X(32), X(33), X(34), X(35), X(36), X(37), X(38), X(39), X(40), X(41), X(42), X(43), X(44), X(45), X(46),   \
      X(47), X(48), X(49), X(50), X(51), X(52), X(53), X(54), X(55), X(56), X(57), X(58), X(59), X(60), X(61),   \
      X(62), X(63), X(64), X(65), X(66), X(67), X(68), X(69), X(70), X(71), X(72), X(73), X(74), X(75), X(76),   \
      X(77), X(78), X(79), X(80), X(81), X(82), X(83), X(84), X(85), X(86), X(87), X(88), X(89), X(90), X(91),   \
      X(92), X(93), X(94), X(95), X(96), X(97), X(98), X(99), X(100), X(101), X(102), X(103), X(104), X(105),    \
      X(106), X(107), X(108), X(109), X(110), X(111), X(112), X(113), X(114), X(115), X(116), X(117), X(118),    \
      X(119), X(120), X(121), X(122), X(123), X(124), X(125), X(126), X(127)
#define HG90_ACC_OPERAND(i) "+f"(d[i])

// The first 64 of the list above: the m64n128k16 accumulators.
#define HG90_WGMMA_ACC_LIST64(X)                                                                               \
  X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15), X(16), \
      X(17), X(18), X(19), X(20), X(21), X(22), X(23), X(24), X(25), X(26), X(27), X(28), X(29), X(30), X(31),   \
      X(32), X(33), X(34), X(35), X(36), X(37), X(38), X(39), X(40), X(41), X(42), X(43), X(44), X(45), X(46),   \
      X(47), X(48), X(49), X(50), X(51), X(52), X(53), X(54), X(55), X(56), X(57), X(58), X(59), X(60), X(61),   \
      X(62), X(63)
#define HG90_ACC_REGS64                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                           \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                            \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
// the m64n64 and m64n256 accumulators' operand lists
#define HG90_ACC_REGS32                                                                                        \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define HG90_ACC_REGS128                                                                                       \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                                    \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                           \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                            \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "                            \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                            \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                            \
  "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "                \
  "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
// The first 32: the m64n64k16 accumulators.
#define HG90_WGMMA_ACC_LIST32(X)                                                                               \
  X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15), X(16), \
      X(17), X(18), X(19), X(20), X(21), X(22), X(23), X(24), X(25), X(26), X(27), X(28), X(29), X(30), X(31)
// The fp16/bf16 wgmma of one shape: accumulators REGS (%0 ..), descriptors DA, DB, scale-d SCALE (operand numbers).
#define HG90_WGMMA_F16_ASM(SHAPE, REGS, DA, DB, SCALE, TYPE, TRANS_A, TRANS_B)                                    \
  "{\n"                                                                                                        \
  ".reg .pred p;\n"                                                                                            \
  "setp.ne.b32 p, " SCALE ", 0;\n"                                                                             \
  "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE "\n" REGS ",\n"                                  \
  DA ", " DB ", p, 1, 1, " TRANS_A ", " TRANS_B ";\n"                                                           \
  "}\n"
#define HG90_WGMMA_M64N64K16_ASM(TYPE, TRANS_A, TRANS_B) \
  HG90_WGMMA_F16_ASM("m64n64k16", HG90_ACC_REGS32, "%32", "%33", "%34", TYPE, TRANS_A, TRANS_B)
#define HG90_WGMMA_M64N128K16_ASM(TYPE, TRANS_A, TRANS_B) \
  HG90_WGMMA_F16_ASM("m64n128k16", HG90_ACC_REGS64, "%64", "%65", "%66", TYPE, TRANS_A, TRANS_B)

// The first 96: the m64n192 accumulators.
#define HG90_ACC_REGS96 \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
  "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
  "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95}"
#define HG90_WGMMA_ACC_LIST96(X) \
  X(0), X(1), X(2), X(3), X(4), X(5), X(6), X(7), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15), \
  X(16), X(17), X(18), X(19), X(20), X(21), X(22), X(23), X(24), X(25), X(26), X(27), X(28), X(29), X(30), X(31), \
  X(32), X(33), X(34), X(35), X(36), X(37), X(38), X(39), X(40), X(41), X(42), X(43), X(44), X(45), X(46), X(47), \
  X(48), X(49), X(50), X(51), X(52), X(53), X(54), X(55), X(56), X(57), X(58), X(59), X(60), X(61), X(62), X(63), \
  X(64), X(65), X(66), X(67), X(68), X(69), X(70), X(71), X(72), X(73), X(74), X(75), X(76), X(77), X(78), X(79), \
  X(80), X(81), X(82), X(83), X(84), X(85), X(86), X(87), X(88), X(89), X(90), X(91), X(92), X(93), X(94), X(95)
#define HG90_WGMMA_M64N192K16_ASM(TYPE, TRANS_A, TRANS_B) \
  HG90_WGMMA_F16_ASM("m64n192k16", HG90_ACC_REGS96, "%96", "%97", "%98", TYPE, TRANS_A, TRANS_B)

// The first 56 and 48: the m64n112 and m64n96 accumulators (tiles whose count fills the SMs where 128 wide
// leaves a part-empty wave).
#define HG90_ACC_ITEMS48 \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47"
#define HG90_ACC_REGS48 "{" HG90_ACC_ITEMS48 "}"
#define HG90_ACC_REGS56 "{" HG90_ACC_ITEMS48 ", %48, %49, %50, %51, %52, %53, %54, %55}"
#define HG90_WGMMA_ACC_LIST48(X) \
  HG90_WGMMA_ACC_LIST32(X), X(32), X(33), X(34), X(35), X(36), X(37), X(38), X(39), X(40), X(41), X(42), X(43), \
      X(44), X(45), X(46), X(47)
#define HG90_WGMMA_ACC_LIST56(X) HG90_WGMMA_ACC_LIST48(X), X(48), X(49), X(50), X(51), X(52), X(53), X(54), X(55)
#define HG90_WGMMA_M64N112K16_ASM(TYPE, TRANS_A, TRANS_B) \
  HG90_WGMMA_F16_ASM("m64n112k16", HG90_ACC_REGS56, "%56", "%57", "%58", TYPE, TRANS_A, TRANS_B)
#define HG90_WGMMA_M64N96K16_ASM(TYPE, TRANS_A, TRANS_B) \
  HG90_WGMMA_F16_ASM("m64n96k16", HG90_ACC_REGS48, "%48", "%49", "%50", TYPE, TRANS_A, TRANS_B)

#define HG90_WGMMA_M64N256K16_ASM(TYPE, TRANS_A, TRANS_B) \
  HG90_WGMMA_F16_ASM("m64n256k16", HG90_ACC_REGS128, "%128", "%129", "%130", TYPE, TRANS_A, TRANS_B)

// The first 16, 8 and 4: the m64n32, m64n16 and m64n8 accumulators (swap-AB decode tiles: C^T = B^T A^T with the
// token count as the wgmma N).
#define HG90_ACC_ITEMS4 "%0, %1, %2, %3"
#define HG90_ACC_ITEMS8 HG90_ACC_ITEMS4 ", %4, %5, %6, %7"
#define HG90_ACC_REGS4 "{" HG90_ACC_ITEMS4 "}"
#define HG90_ACC_REGS8 "{" HG90_ACC_ITEMS8 "}"
#define HG90_ACC_REGS16 "{" HG90_ACC_ITEMS8 ", %8, %9, %10, %11, %12, %13, %14, %15}"
#define HG90_WGMMA_ACC_LIST4(X) X(0), X(1), X(2), X(3)
#define HG90_WGMMA_ACC_LIST8(X) HG90_WGMMA_ACC_LIST4(X), X(4), X(5), X(6), X(7)
#define HG90_WGMMA_ACC_LIST16(X) HG90_WGMMA_ACC_LIST8(X), X(8), X(9), X(10), X(11), X(12), X(13), X(14), X(15)
#define HG90_WGMMA_M64N32K16_ASM(T, A, B) HG90_WGMMA_F16_ASM("m64n32k16", HG90_ACC_REGS16, "%16", "%17", "%18", T, A, B)
#define HG90_WGMMA_M64N16K16_ASM(T, A, B) HG90_WGMMA_F16_ASM("m64n16k16", HG90_ACC_REGS8, "%8", "%9", "%10", T, A, B)
#define HG90_WGMMA_M64N8K16_ASM(T, A, B) HG90_WGMMA_F16_ASM("m64n8k16", HG90_ACC_REGS4, "%4", "%5", "%6", T, A, B)

// The primary templates: wgmma_m64n{N}k16<T, TRANS_A, TRANS_B>(float (&d)[NACC], desc_a, desc_b, scale_d), one per
// shape, each specialised below per element type and transposition.
#define HG90_DECLARE_WGMMA_SHAPE(N, NACC)                                                                  \
  template <typename T, int TRANS_A, int TRANS_B>                                                          \
  __device__ __forceinline__ void wgmma_m64n##N##k16(float(&d)[NACC], uint64_t desc_a, uint64_t desc_b, \
                                                     int scale_d);
HG90_DECLARE_WGMMA_SHAPE(256, 128)
HG90_DECLARE_WGMMA_SHAPE(192, 96)
HG90_DECLARE_WGMMA_SHAPE(128, 64)
HG90_DECLARE_WGMMA_SHAPE(112, 56)
HG90_DECLARE_WGMMA_SHAPE(96, 48)
HG90_DECLARE_WGMMA_SHAPE(64, 32)
HG90_DECLARE_WGMMA_SHAPE(32, 16)
HG90_DECLARE_WGMMA_SHAPE(16, 8)
HG90_DECLARE_WGMMA_SHAPE(8, 4)
#undef HG90_DECLARE_WGMMA_SHAPE

// One shape's specialisation: wgmma_m64n{N}k16 over NACC accumulators (HG90_WGMMA_M64N{N}K16_ASM,
// HG90_WGMMA_ACC_LIST{NACC}).
#define HG90_WGMMA_ACC_LIST128(X) HG90_WGMMA_ACC_LIST(X)
#define HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, N, NACC)                                                \
  template <>                                                                                              \
  __device__ __forceinline__ void wgmma_m64n##N##k16<CTYPE, TA, TB>(float(&d)[NACC], uint64_t desc_a,      \
                                                                  uint64_t desc_b, int scale_d) {          \
    asm volatile(HG90_WGMMA_M64N##N##K16_ASM(TYPE, #TA, #TB)                                                \
                 : HG90_WGMMA_ACC_LIST##NACC(HG90_ACC_OPERAND)                                              \
                 : "l"(desc_a), "l"(desc_b), "r"(scale_d));                                                \
  }
#define HG90_DEFINE_WGMMA(CTYPE, TYPE, TA, TB)             \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 256, 128) \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 192, 96)  \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 128, 64)  \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 112, 56)  \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 96, 48)   \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 64, 32)   \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 32, 16)   \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 16, 8)    \
  HG90_DEFINE_WGMMA_SHAPE(CTYPE, TYPE, TA, TB, 8, 4)
HG90_DEFINE_WGMMA(__half, "f16", 0, 0)
HG90_DEFINE_WGMMA(__half, "f16", 0, 1)
HG90_DEFINE_WGMMA(__half, "f16", 1, 0)
HG90_DEFINE_WGMMA(__half, "f16", 1, 1)
HG90_DEFINE_WGMMA(__nv_bfloat16, "bf16", 0, 0)
HG90_DEFINE_WGMMA(__nv_bfloat16, "bf16", 0, 1)
HG90_DEFINE_WGMMA(__nv_bfloat16, "bf16", 1, 0)
HG90_DEFINE_WGMMA(__nv_bfloat16, "bf16", 1, 1)
#undef HG90_DEFINE_WGMMA
#undef HG90_DEFINE_WGMMA_SHAPE

// TF32 (fp32 operands in shared memory; the tensor core reads their top 19 bits): k8 per instruction,
// and both operands K-major only (PTX has no transpose immediates for .tf32). The k8 slice of a
// 128-byte row is 32 bytes, as the k16 slice of fp16, so the same descriptors walk a k-block.
#define HG90_WGMMA_TF32_ASM(SHAPE, NACC_REGS, DA, DB, SCALE)                                                   \
  "{\n"                                                                                                        \
  ".reg .pred p;\n"                                                                                            \
  "setp.ne.b32 p, " SCALE ", 0;\n"                                                                             \
  "wgmma.mma_async.sync.aligned." SHAPE ".f32.tf32.tf32\n" NACC_REGS ",\n" DA ", " DB ", p, 1, 1;\n"          \
  "}\n"
__device__ __forceinline__ void wgmma_tf32(float (&d)[128], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(HG90_WGMMA_TF32_ASM("m64n256k8", HG90_ACC_REGS128, "%128", "%129", "%130")
               : HG90_WGMMA_ACC_LIST(HG90_ACC_OPERAND)
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
// m64n192k8: the 3xTF32 kernels' widest tile that leaves registers for a second accumulator set
__device__ __forceinline__ void wgmma_tf32(float (&d)[96], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(HG90_WGMMA_TF32_ASM("m64n192k8", HG90_ACC_REGS96, "%96", "%97", "%98")
               : HG90_WGMMA_ACC_LIST96(HG90_ACC_OPERAND)
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_tf32(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(HG90_WGMMA_TF32_ASM("m64n128k8", HG90_ACC_REGS64, "%64", "%65", "%66")
               : HG90_WGMMA_ACC_LIST64(HG90_ACC_OPERAND)
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
__device__ __forceinline__ void wgmma_tf32(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(HG90_WGMMA_TF32_ASM("m64n64k8", HG90_ACC_REGS32, "%32", "%33", "%34")
               : HG90_WGMMA_ACC_LIST32(HG90_ACC_OPERAND)
               : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

using hg::pack2;  // cu/common/pack.cuh

// The descriptor of a k-block's first slice at smem_addr: K-major rows of 128 B (the leading byte offset is unused
// under the 128-byte swizzle) or, for kMN, MN-major 64-wide panels 64 rows x 128 B apart.
template <bool kMN>
__device__ __forceinline__ uint64_t kblock_desc(uint32_t smem_addr) {
  return kMN ? wgmma_desc(smem_addr, 64 * 128, 1024) : wgmma_desc(smem_addr, 16, 1024);
}

// desc moved `bytes` (a multiple of 16) further in shared memory: one add to the start-address field (address >> 4
// in bits [0, 14); shared addresses stay below 2^18, so the sum never carries out of the field).
// (bytes is signed so that a stage's offset, stage * stage bytes >> 4, folds into one multiply: no wrap to honour)
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, int bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

// One k-block of BK elements as BK/16 wgmma m64nNk16 (N = 2 * accumulators: 256, 192, 128, 112, 96, 64, 32, 16 or
// 8) from 128-byte-swizzled shared memory, given the descriptors of its first slice (kblock_desc): A K-major (this
// warpgroup's 64 rows) or MN-major (kAT: one 64-wide M panel of BK rows), B K-major (TN) or MN-major (kNN, 64-wide
// column panels). The k-th 16-element slice of a K-major row starts 32 bytes further (the hardware applies the
// swizzle to the full address); of an MN-major operand, 16 K rows further. Each slice's descriptors are one add
// away from the first's, so a loop that keeps a stage's descriptors issues a k-block with no address arithmetic.
// With accumulate == false the first slice overwrites d (scale-d 0), so d needs no zeroing.
// T = float: BK fp32 elements (128 bytes: BK = 32) as BK/8 tf32 m64nNk8, both operands K-major (32 bytes a slice).
template <typename T, bool kAT, bool kNN, int BK, int NACC>
__device__ __forceinline__ void wgmma_kblock_desc(float (&d)[NACC], uint64_t da, uint64_t db, bool accumulate) {
  static_assert(NACC == 128 || NACC == 96 || NACC == 64 || NACC == 56 || NACC == 48 || NACC == 32 ||
                    (sizeof(T) == 2 && (NACC == 16 || NACC == 8 || NACC == 4)),
                "m64n256, m64n192, m64n128, m64n112, m64n96 or m64n64 accumulators (fp16/bf16: m64n32, m64n16, "
                "m64n8 too)");
  static_assert(BK * sizeof(T) == 128, "a k-block is one 128-byte swizzle row");
  constexpr int kStepA = kAT ? 16 * 128 : 32, kStepB = kNN ? 16 * 128 : 32;
  if constexpr (sizeof(T) == 4) {
    static_assert(!kAT && !kNN, "tf32 wgmma reads K-major operands only");
#pragma unroll
    for (int k = 0; k < BK / 8; ++k)
      wgmma_tf32(d, desc_advance(da, k * kStepA), desc_advance(db, k * kStepB), (accumulate || k > 0) ? 1 : 0);
  } else {
    constexpr int kTA = kAT ? 1 : 0, kTB = kNN ? 1 : 0;
#pragma unroll
    for (int k = 0; k < BK / 16; ++k) {
      const uint64_t dak = desc_advance(da, k * kStepA), dbk = desc_advance(db, k * kStepB);
      const int scale_d = (accumulate || k > 0) ? 1 : 0;
      if constexpr (NACC == 128)
        wgmma_m64n256k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 96)
        wgmma_m64n192k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 64)
        wgmma_m64n128k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 56)
        wgmma_m64n112k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 48)
        wgmma_m64n96k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 32)
        wgmma_m64n64k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 16)
        wgmma_m64n32k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else if constexpr (NACC == 8)
        wgmma_m64n16k16<T, kTA, kTB>(d, dak, dbk, scale_d);
      else
        wgmma_m64n8k16<T, kTA, kTB>(d, dak, dbk, scale_d);
    }
  }
}

// The same from the shared addresses of the k-block's A rows and B tile.
template <typename T, bool kAT, bool kNN, int BK, int NACC>
__device__ __forceinline__ void wgmma_kblock(float (&d)[NACC], uint32_t a_base, uint32_t b_base, bool accumulate) {
  wgmma_kblock_desc<T, kAT, kNN, BK>(d, kblock_desc<kAT>(a_base), kblock_desc<kNN>(b_base), accumulate);
}

}  // namespace hg90
