// The knobs type of a kernel the build instantiates from its toml (hgemm_build/instances.py): the family's base
// rung R with the declaration's layout (Nn for an NN kernel) and dtype (Bf16 for bf16) applied, in that nesting
// (Bf16<Nn<R>>), so that the dtype and layout are written once, in the toml.
#pragma once
#include <cuda_bf16.h>

#include <type_traits>

#include "common/sm90_gemm.cuh"

namespace hg90g {

template <class R, class T, bool kNnLayout>
struct DeclaredRung {
  using Laid = std::conditional_t<kNnLayout, Nn<R>, R>;
  using type = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, Bf16<Laid>, Laid>;
};

}  // namespace hg90g
