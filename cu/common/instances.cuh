// Helpers of the generated instantiation lines (<family>.instances.cuh, written by the build from the toml's
// `instance` fields; hgemm_build/instances.py): one macro call per declared symbol, the variant values passed as
// tokens (acc f16|f32) and mapped here to what the ladders' templates take. Included just before that list.
#pragma once

#define HG_ACC_IS_F32_f16 false
#define HG_ACC_IS_F32_f32 true
#define HG_ACC_T_f16 half
#define HG_ACC_T_f32 float

// mma.sync ladder (cu/common/mma.cuh): the rung under AccStages for the (acc, stages) variant
#define HG_MMA_SYM(SYM, RUNG, ACC, S)                                              \
  using SYM##_knobs = hg::mma::AccStages<RUNG, HG_ACC_IS_F32_##ACC, S>;            \
  HG_MMA_KERNEL(SYM, SYM##_knobs)

// CUDA-core ladder (cu/common/cuda_core.cuh): acc f16 is the rung's half2 math (AccH2), f32 the rung itself
#define HG_CUDA_ACC_f16(R) hg::cc::AccH2<R>
#define HG_CUDA_ACC_f32(R) R
#define HG_CUDA_SYM_ACC(SYM, RUNG, ACC) HG_CUDA_RUNG(SYM, HG_CUDA_ACC_##ACC(RUNG))
