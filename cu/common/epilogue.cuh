// The fused epilogue of the matmul GEMMs (hgemm_rt.matmul's bias=, activation=, scale=, beta=), applied
// to the fp32 accumulator before the final rounding. One truth for the encoding: hgemm_rt/epilogue.py
// writes the same bits.
//
//   y = scale * act(alpha * acc + bias) + beta * C_old
//   SwiGLU (kSwiGLU): the GEMM's columns [0, N) are the gate and [N, 2N) the up projection of output
//   column n: y = scale * silu(alpha * acc[n] + bias[n]) * (alpha * acc[N + n] + bias[N + n]) + beta * C_old
//
// Kernel parameters (cu/CONTRACT.md): "ptr:bias" (output dtype, 0 without bias), "i32:bias_stride" (elements
// between consecutive bias values), "i32:epi" (the bits below), "i32:scale_bits" (fp32 bit pattern).
// beta == 0 never reads C (BLAS convention: it may hold NaN).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>

#include "pack.cuh"

namespace hge {

// i32:epi bits
constexpr int kBiasMask = 3;       // bits 0-1: bias per ...
constexpr int kBiasCol = 1;        //   output column: bias[n * bias_stride] (nn.Linear's bias)
constexpr int kBiasRow = 2;        //   output row: bias[m * bias_stride]
constexpr int kActShift = 4;       // bits 4-7: activation
constexpr int kActMask = 15 << kActShift;
constexpr int kActNone = 0, kActRelu = 1, kActGelu = 2, kActGeluTanh = 3, kActSilu = 4;
constexpr int kSwiGLU = 1 << 8;    // bit 8: gate/up pairs (only kernels that declare it)

// e^x as one ex2.approx.ftz (what __expf is, less the denormal handling it compiles to without -ftz): the
// activations' arguments and results that matter are far from fp32's denormal range (fp16/bf16 outputs).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float fast_exp(float x) { return fast_exp2(x * 1.4426950408889634f); }
// 1 / x as one rcp.approx.ftz for x >= 1 or +inf (1 / inf = 0): __fdividef adds 4 instructions per call
// rescaling denormal divisors, which these never are.
__device__ __forceinline__ float rcp_ge1(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// The activations are bound by the SM's issue slots and its MUFU pipe (16 lanes an SM: 8 cycles a warp per
// MUFU op), both idle tensor cores while the epilogue runs: each is written for the fewest instructions.
//
// gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)). erf by Abramowitz & Stegun 7.1.26 (absolute error below
// 1.5e-7, far under an fp16/bf16 output's rounding): 1 - erf(z) = q = t (a1 + t (a2 + ...)) e^(-z^2),
// t = 1 / (1 + p z), z = |x| / sqrt 2 >= 0. Then gelu(x) = relu(x) - 0.5 |x| q for either sign, so -0.5 goes
// into the coefficients and 1/sqrt 2 into p and the exponent: 15 SASS instructions an element with the bias and
// scale (the fused kernel's pass, sm_90a), 2 of them MUFU. Branch-free: erff's branches diverge inside a warp
// and made the fused epilogue's gelu cost a quarter of a 4096 x 8192 x 2048 GEMM on the H100.
__device__ __forceinline__ float gelu_erf(float x) {
  const float ax = fabsf(x);
  const float t = rcp_ge1(fmaf(0.3275911f * 0.70710678118654752f, ax, 1.f));
  const float c = fmaf(t, fmaf(t, fmaf(t, fmaf(t, -0.5f * 1.061405429f, 0.5f * 1.453152027f), -0.5f * 1.421413741f),
                               0.5f * 0.284496736f),
                       -0.5f * 0.254829592f);  // -0.5 (a1 + t (a2 + ...))
  const float e = fast_exp2(x * (x * (-0.5f * 1.4426950408889634f)));  // e^(-z^2)
  return fmaf(ax, (c * t) * e, fmaxf(x, 0.f));
}
// The tanh form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + e^(-2u)), u = sqrt(2/pi) (x + 0.044715 x^3),
// the exponent's constants folded: no tanhf.
__device__ __forceinline__ float gelu_tanh(float x) {
  constexpr float k = -2.f * 0.79788456080286536f * 1.4426950408889634f;  // -2u log2(e) = x (k + k' x^2)
  return x * rcp_ge1(1.f + fast_exp2(x * fmaf(x * x, k * 0.044715f, k)));
}
// x / (1 + e^-x): where e^-x overflows to inf (x below about -88) the reciprocal is 0, giving (-)0, silu's limit.
__device__ __forceinline__ float silu(float x) { return x * rcp_ge1(1.f + fast_exp(-x)); }

__device__ __forceinline__ float activate(int act, float x) {
  switch (act) {
    case kActRelu: return fmaxf(x, 0.f);
    case kActGelu: return gelu_erf(x);
    case kActGeluTanh: return gelu_tanh(x);
    case kActSilu: return silu(x);
    default: return x;
  }
}

// The epilogue's run-time parameters, unpacked once per kernel.
template <typename T>
struct Epilogue {
  float alpha, beta, scale;
  const T* bias;
  int bias_stride;
  int flags;

  __device__ __forceinline__ Epilogue(int alpha_bits, int beta_bits, const T* bias_, int bias_stride_, int epi,
                                      int scale_bits)
      : alpha(__int_as_float(alpha_bits)), beta(__int_as_float(beta_bits)), scale(__int_as_float(scale_bits)),
        bias(bias_), bias_stride(bias_stride_), flags(epi) {}

  // Only alpha (and beta): no bias, no activation, scale 1 (the loops may skip the per-element work).
  __device__ __forceinline__ bool linear() const { return flags == 0 && scale == 1.f; }
  __device__ __forceinline__ bool swiglu() const { return (flags & kSwiGLU) != 0; }

  __device__ __forceinline__ float bias_at(int row, int col) const {
    const int mode = flags & kBiasMask;
    if (mode == 0) return 0.f;
    const long long i = static_cast<long long>(mode == kBiasCol ? col : row) * bias_stride;
    return hg::to_f32(bias[i]);
  }
  // scale * act(alpha * acc + bias): the value before beta * C_old is added.
  __device__ __forceinline__ float value(float acc, int row, int col) const {
    if (linear()) return alpha * acc;
    return value_b(acc, bias_at(row, col));
  }
  // SwiGLU output column `col` of `n_out`: gate accumulator g (GEMM column col), up u (column n_out + col).
  __device__ __forceinline__ float value_swiglu(float g, float u, int row, int col, int n_out) const {
    return value_swiglu_b(g, u, bias_at(row, col), bias_at(row, n_out + col));
  }
  // The same with the bias values already read (b = bias_at(row, col); bg, bu those of the gate and up
  // columns), for kernels that read each once per row or column block rather than once per element.
  __device__ __forceinline__ float value_b(float acc, float b) const {
    const float x = alpha * acc + b;
    return scale * activate((flags & kActMask) >> kActShift, x);
  }
  __device__ __forceinline__ float value_swiglu_b(float g, float u, float bg, float bu) const {
    const float x = alpha * g + bg;
    const float y = alpha * u + bu;
    return scale * silu(x) * y;
  }
};

}  // namespace hge
