// CuTe TN HGEMM building block (sm_80+ instructions: cp.async, ldmatrix, mma.sync m16n8k16).
//   A: M x K row-major, B: N x K row-major (B column-major), C: M x N row-major; fp16 in and out,
//   accumulator fp16 or fp32 (the AccT knob).
// One block computes a BM x BN tile of C with WM x WN warps; each warp owns (BM/WM) x (BN/WN) outputs.
// The caller guarantees M % BM == 0, N % BN == 0, K % BK == 0 (declared in the family's `require`):
// no load or store is predicated, so the main loop carries no bounds arithmetic.
// Dynamic shared memory: Stages * (BM + BN) * BK * sizeof(half) bytes (smem_bytes() below); the
// epilogue reuses the same bytes, so it needs none of its own.
#pragma once
#include <cuda_fp16.h>
#include <cute/tensor.hpp>

namespace hg::cute_tn {
using namespace cute;

// K: the kernel's named knobs, static members of a struct (cu/hgemm_cute.cu): kBM, kBN, kBK (block
// tile), kWarpsM, kWarpsN (warp grid), kStages (cp.async ring) and AccT (accumulator: half_t or float).
template <class K>
struct Config {
  using T = half_t;
  using AccT = typename K::AccT;
  static constexpr int BM = K::kBM, BN = K::kBN, BK = K::kBK, Stages = K::kStages, WM = K::kWarpsM, WN = K::kWarpsN;
  static constexpr int kThreads = WM * WN * 32;

  static_assert(BK % 16 == 0 && (BK == 32 || BK == 64), "BK is one or two 8x(16B) swizzle rows: 32 or 64");
  static_assert(BM % (16 * WM) == 0, "each warp needs whole m16 atoms");
  static_assert(BN % (16 * WN) == 0, "each warp needs whole pairs of n8 atoms (ldmatrix.x4 loads two)");
  static_assert(Stages >= 2, "the pipeline needs at least double buffering");
  static_assert(kThreads <= 1024, "a block holds at most 32 warps");
  static_assert(std::is_same_v<AccT, half_t> || std::is_same_v<AccT, float>, "fp16 or fp32 accumulators");

  // mma.sync m16n8k16, both operands K-major ("TN"): one atom per warp, WM x WN warps. The N
  // permutation (16 * WN) gives every warp two n8 atoms per K step, so one ldmatrix.x4 fetches the
  // B fragments of both (4 8x8 matrices = 2 atoms x 2 k8 halves) just as it fetches one m16 A atom.
  using MmaOp = std::conditional_t<std::is_same_v<AccT, float>, SM80_16x8x16_F32F16F16F32_TN,
                                   SM80_16x8x16_F16F16F16F16_TN>;
  using TiledMma = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<WM>, Int<WN>, _1>>,
                            Tile<Int<16 * WM>, Int<16 * WN>, _16>>;

  // Shared memory operand tiles: rows of BK halves (K contiguous), Swizzle<3,3,3> on the element
  // offset XORs the 16-byte chunk index (bits 3..5) with bits 6..8. An ldmatrix phase reads 8
  // consecutive rows at one logical chunk; after the XOR those 8 rows land on 8 different 16-byte
  // bank groups (for BK=64 one row is 128 B and row&7 picks the chunk; for BK=32 two rows share
  // 128 B and (row>>1)&3 plus the row parity separate them), so ldmatrix and the 16-byte cp.async
  // stores are bank-conflict free without padding.
  using SmemAtom = decltype(composition(Swizzle<3, 3, 3>{},
                                        Layout<Shape<_8, Int<BK>>, Stride<Int<BK>, _1>>{}));
  using SmemLayoutA = decltype(tile_to_shape(SmemAtom{}, Shape<Int<BM>, Int<BK>, Int<Stages>>{}));
  using SmemLayoutB = decltype(tile_to_shape(SmemAtom{}, Shape<Int<BN>, Int<BK>, Int<Stages>>{}));

  // Global -> shared: 16-byte cp.async.cg (L2 only: the tile is reused from shared memory), BK/8
  // threads per row so that a warp reads whole 64/128-byte row segments.
  static constexpr int kChunksPerRow = BK / 8;
  using G2SCopy = decltype(make_tiled_copy(
      Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<uint128_t>, T>{},
      Layout<Shape<Int<kThreads / kChunksPerRow>, Int<kChunksPerRow>>, Stride<Int<kChunksPerRow>, _1>>{},
      Layout<Shape<_1, _8>>{}));
  static_assert(BM % (kThreads / kChunksPerRow) == 0 && BN % (kThreads / kChunksPerRow) == 0,
                "the cp.async thread layout must tile both operand tiles");

  // Shared -> registers: ldmatrix.x4 (four 8x8 b16 matrices per warp instruction), for A and B.
  using S2RAtom = Copy_Atom<SM75_U32x4_LDSM_N, T>;

  // Epilogue: the accumulators (converted to fp16) go to shared memory in slabs of EpiRows full rows,
  // then leave as 16-byte row-contiguous stores. Same Swizzle<3,3,3> on 64-wide rows: the 8 rows a
  // warp's m16n8 fragment writes (4-byte pairs) hit 8 different chunks, conflict free both ways.
  static constexpr int kRowsPerMmaM = 16 * WM;  // rows covered by one MMA_M index of a thread
  static constexpr int kMmaM = BM / kRowsPerMmaM;
  static constexpr int kSmemBytes = Stages * (BM + BN) * BK * 2;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit of any GPU");
  // Largest number of MMA_M slices whose fp16 slab fits in the pipeline's shared memory.
  static constexpr int kEpiMmaM = [] {
    int m = kMmaM;
    while (m > 1 && (m * kRowsPerMmaM * BN * 2 > kSmemBytes || kMmaM % m != 0)) --m;
    return m;
  }();
  static constexpr int EpiRows = kEpiMmaM * kRowsPerMmaM;
  static_assert(EpiRows * BN * 2 <= kSmemBytes, "epilogue slab must fit in the pipeline smem");
  static_assert(BN % 64 == 0, "epilogue swizzle atom is 64 columns wide");
  using SmemLayoutC = decltype(tile_to_shape(
      composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}),
      Shape<Int<EpiRows>, Int<BN>>{}));
  using R2SCopyAtom = Copy_Atom<UniversalCopy<uint32_t>, T>;  // one half2 pair of the m16n8 fragment
  static constexpr int kS2GThreadsN = BN / 8;                  // 16 B per thread along a row
  using S2GCopy = decltype(make_tiled_copy(
      Copy_Atom<UniversalCopy<uint128_t>, T>{},
      Layout<Shape<Int<kThreads / kS2GThreadsN>, Int<kS2GThreadsN>>, Stride<Int<kS2GThreadsN>, _1>>{},
      Layout<Shape<_1, _8>>{}));
  static_assert(EpiRows % (kThreads / kS2GThreadsN) == 0, "S2G thread layout must tile the slab");

  static constexpr int smem_bytes() { return kSmemBytes; }
};

template <class Cfg>
__device__ __forceinline__ void gemm_tn(const half* __restrict__ Aptr, const half* __restrict__ Bptr,
                                        half* __restrict__ Cptr, int M, int N, int K) {
  using T = typename Cfg::T;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, Stages = Cfg::Stages;
  extern __shared__ __align__(128) uint8_t smem_raw[];

  // Block swizzle (CONTRACT.md, grid "tiles+swizzle"): column strips are stacked in gridDim.z so
  // that blocks resident at the same time share B panels in L2; the last strip may be short.
  const int bx = blockIdx.z * gridDim.x + blockIdx.x;
  if (bx * BN >= N) return;
  const int by = blockIdx.y;
  const int tid = threadIdx.x;

  Tensor mA = make_tensor(make_gmem_ptr(reinterpret_cast<const T*>(Aptr)), make_shape(M, K),
                          make_stride(K, _1{}));
  Tensor mB = make_tensor(make_gmem_ptr(reinterpret_cast<const T*>(Bptr)), make_shape(N, K),
                          make_stride(K, _1{}));
  Tensor mC = make_tensor(make_gmem_ptr(reinterpret_cast<T*>(Cptr)), make_shape(M, N), make_stride(N, _1{}));
  Tensor gA = local_tile(mA, make_tile(Int<BM>{}, Int<BK>{}), make_coord(by, _));  // (BM, BK, k)
  Tensor gB = local_tile(mB, make_tile(Int<BN>{}, Int<BK>{}), make_coord(bx, _));  // (BN, BK, k)
  Tensor gC = local_tile(mC, make_tile(Int<BM>{}, Int<BN>{}), make_coord(by, bx));  // (BM, BN)

  static_assert((cosize_v<typename Cfg::SmemLayoutA> + cosize_v<typename Cfg::SmemLayoutB>) * sizeof(T) ==
                    Cfg::smem_bytes(),
                "the operand tiles must fill exactly the dynamic smem the kernel exports (smem_bytes)");
  T* smem_a = reinterpret_cast<T*>(smem_raw);
  T* smem_b = smem_a + cosize(typename Cfg::SmemLayoutA{});
  Tensor sA = make_tensor(make_smem_ptr(smem_a), typename Cfg::SmemLayoutA{});  // (BM, BK, Stages)
  Tensor sB = make_tensor(make_smem_ptr(smem_b), typename Cfg::SmemLayoutB{});  // (BN, BK, Stages)

  typename Cfg::TiledMma tiled_mma;
  auto thr_mma = tiled_mma.get_slice(tid);
  Tensor tCrA = thr_mma.partition_fragment_A(sA(_, _, 0));  // (MMA, MMA_M, MMA_K)
  Tensor tCrB = thr_mma.partition_fragment_B(sB(_, _, 0));  // (MMA, MMA_N, MMA_K)
  Tensor tCrC = thr_mma.partition_fragment_C(gC);           // (MMA, MMA_M, MMA_N), AccT
  clear(tCrC);

  typename Cfg::G2SCopy g2s;
  auto thr_g2s = g2s.get_slice(tid);
  Tensor tAgA = thr_g2s.partition_S(gA);  // (CPY, CPY_M, CPY_K, k)
  Tensor tAsA = thr_g2s.partition_D(sA);  // (CPY, CPY_M, CPY_K, Stages)
  Tensor tBgB = thr_g2s.partition_S(gB);
  Tensor tBsB = thr_g2s.partition_D(sB);

  auto s2r_a = make_tiled_copy_A(typename Cfg::S2RAtom{}, tiled_mma);
  auto thr_s2r_a = s2r_a.get_slice(tid);
  Tensor tXsA = thr_s2r_a.partition_S(sA);  // (CPY, CPY_M, CPY_K, Stages)
  Tensor tXrA = thr_s2r_a.retile_D(tCrA);   // (CPY, CPY_M, CPY_K)
  auto s2r_b = make_tiled_copy_B(typename Cfg::S2RAtom{}, tiled_mma);
  auto thr_s2r_b = s2r_b.get_slice(tid);
  Tensor tXsB = thr_s2r_b.partition_S(sB);
  Tensor tXrB = thr_s2r_b.retile_D(tCrB);

  const int k_tiles = K / BK;
  int k_fetch = 0;  // next K tile to request from global memory

  // Prologue: put Stages-1 K tiles in flight. Every step commits a group, empty or not, so that
  // "wait until at most Stages-2 groups are pending" always means "the oldest tile has landed".
  CUTE_UNROLL
  for (int s = 0; s < Stages - 1; ++s) {
    if (k_fetch < k_tiles) {
      copy(g2s, tAgA(_, _, _, k_fetch), tAsA(_, _, _, s));
      copy(g2s, tBgB(_, _, _, k_fetch), tBsB(_, _, _, s));
    }
    cp_async_fence();
    ++k_fetch;
  }
  int stage_read = 0;
  int stage_write = Stages - 1;

  cp_async_wait<Stages - 2>();
  __syncthreads();
  constexpr int KB = size<2>(tCrA);  // k16 steps per K tile
  // Registers hold the fragments of all KB k16 steps of a tile: step kb+1 is loaded by ldmatrix
  // while the tensor cores work on step kb.
  copy(s2r_a, tXsA(_, _, 0, stage_read), tXrA(_, _, 0));
  copy(s2r_b, tXsB(_, _, 0, stage_read), tXrB(_, _, 0));

  CUTE_NO_UNROLL
  for (int kt = 0; kt < k_tiles; ++kt) {
    CUTE_UNROLL
    for (int kb = 0; kb < KB; ++kb) {
      if (kb == KB - 1) {
        // Last k16 step of this tile: the next tile must be resident before its first ldmatrix,
        // and the barrier also tells every warp that the stage just read may be overwritten.
        stage_read = stage_read + 1 == Stages ? 0 : stage_read + 1;
        cp_async_wait<Stages - 2>();
        __syncthreads();
      }
      const int kb_next = (kb + 1) % KB;
      copy(s2r_a, tXsA(_, _, kb_next, stage_read), tXrA(_, _, kb_next));
      copy(s2r_b, tXsB(_, _, kb_next, stage_read), tXrB(_, _, kb_next));
      if (kb == 0) {
        // Refill the stage every warp finished reading before the last barrier.
        if (k_fetch < k_tiles) {
          copy(g2s, tAgA(_, _, _, k_fetch), tAsA(_, _, _, stage_write));
          copy(g2s, tBgB(_, _, _, k_fetch), tBsB(_, _, _, stage_write));
        }
        cp_async_fence();
        ++k_fetch;
        stage_write = stage_write + 1 == Stages ? 0 : stage_write + 1;
      }
      gemm(tiled_mma, tCrC, tCrA(_, _, kb), tCrB(_, _, kb), tCrC);
    }
  }

  // ---- Epilogue: registers -> swizzled smem slab -> 16-byte coalesced global stores ----
  cp_async_wait<0>();  // only empty groups can remain, but the smem is about to be reused
  __syncthreads();     // every warp is done with ldmatrix on the pipeline buffers

  // fp16 copy of the accumulators; pairs convert with one packed cvt (F2FP) each.
  Tensor tCrD = make_tensor_like<T>(tCrC);
  CUTE_UNROLL
  for (int i = 0; i < size(tCrC); ++i) tCrD(i) = static_cast<T>(tCrC(i));

  Tensor sC = make_tensor(make_smem_ptr(reinterpret_cast<T*>(smem_raw)), typename Cfg::SmemLayoutC{});
  auto r2s = make_tiled_copy_C(typename Cfg::R2SCopyAtom{}, tiled_mma);
  auto thr_r2s = r2s.get_slice(tid);
  Tensor tRrD = thr_r2s.retile_S(tCrD);  // (CPY, MMA_M, MMA_N)
  Tensor tRsC = thr_r2s.partition_D(sC);  // (CPY, kEpiMmaM, MMA_N)

  typename Cfg::S2GCopy s2g;
  auto thr_s2g = s2g.get_slice(tid);
  Tensor tSsC = thr_s2g.partition_S(sC);  // (CPY, CPY_M, CPY_N)
  Tensor gC_slabs = local_tile(gC, make_tile(Int<Cfg::EpiRows>{}, Int<BN>{}), make_coord(_, 0));

  CUTE_UNROLL
  for (int p = 0; p < Cfg::kMmaM / Cfg::kEpiMmaM; ++p) {
    CUTE_UNROLL
    for (int m = 0; m < Cfg::kEpiMmaM; ++m)
      copy(r2s, tRrD(_, p * Cfg::kEpiMmaM + m, _), tRsC(_, m, _));
    __syncthreads();
    Tensor tSgC = thr_s2g.partition_D(gC_slabs(_, _, p));
    copy(s2g, tSsC, tSgC);
    if (p + 1 < Cfg::kMmaM / Cfg::kEpiMmaM) __syncthreads();  // the slab is rewritten next pass
  }
}

}  // namespace hg::cute_tn
