// Thin inline-PTX wrappers shared by the kernel families (sm_80+).
// Keep each wrapper __forceinline__: a call that is not inlined costs registers and, for wgmma,
// serialises the tensor cores.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

namespace hg {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from a shared-window address (the staged epilogues' read-back: cu/common/mma.cuh, cu/matmul_sm90.cu).
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t smem_addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(smem_addr)
               : "memory");
  return v;
}

// x as a TF32 head and residual (3xTF32: matmul_split_tf32's planes):
// hi = x rounded to TF32 (cvt.rna: to nearest, ties away from zero), lo = x - hi rounded alike. A head rounded up
// past FLT_MAX is truncated instead; an inf or NaN x has no residual.
__device__ __forceinline__ float tf32_rna(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r);
}
__device__ __forceinline__ void tf32_split(float x, float& hi, float& lo) {
  hi = tf32_rna(x);
  if (isinf(hi) && !isinf(x)) hi = __uint_as_float(__float_as_uint(x) & 0xffffe000u);
  lo = isfinite(x) ? tf32_rna(x - hi) : 0.f;
}
// The residual of x past the head tf32 wgmma takes from an fp32 operand (its low 13 mantissa bits dropped: a
// truncation), rounded to TF32 as above; none for an inf or NaN x. (The gemm_tf32x3s kernels' split: the heads stay
// the operand's own bits.) The residual is exact and far from overflow, so cvt.rna's rounding is the integer add on
// its bits (the carry moves into the exponent where it should), without cvt's checks for inf and NaN.
__device__ __forceinline__ float tf32_trunc_residual(float x) {
  const float rest = x - __uint_as_float(__float_as_uint(x) & 0xffffe000u);
  const float lo = __uint_as_float((__float_as_uint(rest) + 0x1000u) & 0xffffe000u);
  return fabsf(x) < INFINITY ? lo : 0.f;
}

// ---- cp.async (global -> shared, bypassing registers) ----
// 16-byte copy, cached in L2 only (.cg): the tile is reused from shared memory, not L1.
// 16-byte copy that reads src_bytes (0..16) and zero-fills the rest: guarded loads at ragged edges.
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(smem)), "l"(gmem),
               "r"(src_bytes));
}
// An L2 cache policy for the lines a copy brings: evict_first where `stream` (data read once, which then
// neither pushes out what other kernels reuse nor makes dirty lines write back early), else evict_normal.
__device__ __forceinline__ uint64_t l2_policy(bool stream) {
  uint64_t policy;
  if (stream)
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  else
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
// cp_async_16_zfill for streamed data: the lines tagged with `policy` (l2_policy), and the L2
// asked to fetch the whole 256-byte run around each piece (neighbouring threads' pieces arrive with it).
__device__ __forceinline__ void cp_async_16_zfill_stream(void* smem, const void* gmem, int src_bytes,
                                                         uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint.L2::256B [%0], [%1], 16, %2, %3;\n" ::"r"(smem_u32(smem)),
               "l"(gmem), "r"(src_bytes), "l"(policy));
}
__device__ __forceinline__ void cp_async_8(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem_u32(smem)), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::); }

// The 128-byte line holding p into L1 (and L2), without a register or a wait: for a few values read much later.
__device__ __forceinline__ void prefetch_l1(const void* p) { asm volatile("prefetch.global.L1 [%0];" ::"l"(p)); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// ---- ldmatrix (shared -> registers in the mma.sync fragment layout) ----
__device__ __forceinline__ void ldmatrix_x1(uint32_t& r0, const void* smem) {
  asm volatile("ldmatrix.sync.aligned.x1.m8n8.shared.b16 {%0}, [%1];\n" : "=r"(r0) : "r"(smem_u32(smem)));
}

// ---- mma.sync m16n8k16, row.col ----
// fp16 accumulate: C/D are 2 registers of half2.
__device__ __forceinline__ void mma_m16n8k16_f16(uint32_t (&d)[2], const uint32_t (&a)[4],
                                                 const uint32_t (&b)[2], const uint32_t (&c)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}
// fp32 accumulate: C/D are 4 floats.
__device__ __forceinline__ void mma_m16n8k16_f32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// ---- shared-window (uint32_t) address overloads ----
// Kernels that keep their smem addresses as 32-bit shared-window offsets (stage base + per-lane
// offset + compile-time immediate) avoid the 64-bit generic-pointer arithmetic and its registers.
__device__ __forceinline__ void cp_async_16(uint32_t smem_addr, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_addr), "l"(gmem));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.x2.m8n8.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                            uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.x4.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.x2.trans.m8n8.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r0), "=r"(r1)
               : "r"(smem_addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                  uint32_t smem_addr) {
  asm volatile("ldmatrix.sync.aligned.x4.trans.m8n8.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(smem_addr));
}

// Pointer forms: forward to the 32-bit shared-address forms above (one asm body per instruction).
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem) { cp_async_16(smem_u32(smem), gmem); }
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, const void* smem) {
  ldmatrix_x2(r0, r1, smem_u32(smem));
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* smem) {
  ldmatrix_x4(r0, r1, r2, r3, smem_u32(smem));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, const void* smem) {
  ldmatrix_x2_trans(r0, r1, smem_u32(smem));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3,
                                                  const void* smem) {
  ldmatrix_x4_trans(r0, r1, r2, r3, smem_u32(smem));
}

}  // namespace hg
