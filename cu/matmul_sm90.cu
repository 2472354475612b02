// Family "matmul_sm90": the Hopper split-K GEMM behind hgemm_rt.matmul (ladder "matmul", sm_90a).
//
// matmul_gemm_wgmma_{f16,bf16}_m{64,128}_{tn,nn} (BN = 256), matmul_gemm_wgmma_f16_m{64,128}n{128,64}_{tn,nn},
// matmul_gemm_wgmma_{f16,bf16}_m128n{112,96}_tn, matmul_gemm_wgmma_{f16,bf16}_m128n{32,16,8}_tn (decode as
// C^T = B^T A^T: the weights as A, the token count as the wgmma N; one B box a stage, no SwiGLU, no multicast):
//   C = scale * act(alpha * A.B + bias) + beta * C (cu/common/epilogue.cuh: ptr:bias, i32:bias_stride,
//   i32:epi, i32:scale_bits after i32:beta_bits, the bias indexed by C's row or column) with fp32
//   accumulation; the general epilogue's stores are a function of their own (store_pass_general), the
//   linear one's (alpha/beta only) are inline as before; the decode tiles store a C whose rows are contiguous (C^T)
//   down its columns (store_pass_columns). A: M x K through a TMA map (any 16-byte-
//   multiple row stride), B: N x K (tn) or K x N (nn) through a TMA map, C: any strides and alignment.
//   Any M, N, K >= 1: TMA zero-fills out-of-bounds boxes.
//   Why: the catalogue's Hopper kernels use 128 x 256 tiles and the whole K per tile, so shapes with
//   few output tiles (M = 16..128 decode shapes, 1024^3) leave most of the 132 SMs idle. Here the
//   launch also splits K: grid = (ceil(N/256), ceil(M/BM), S) with a thread-block cluster (1, 1, S),
//   S in {1, 2, 4, 8}; each CTA of a cluster runs one K slice, keeps its fp32 partial tile in shared
//   memory, and after a cluster barrier CTA r adds rows [r*BM/S, (r+1)*BM/S) of all S partial tiles
//   through distributed shared memory and applies the epilogue: one launch, no workspace, no atomics.
//   B multicast (unsplit, unbatched): a cluster (1, 2, 1) pairs the CTAs of two neighbouring rows of tiles; each
//   loads half of their shared B tile and multicasts it into both rings (hg90::tma_load_2d_multicast_hint), a
//   stage is freed by both CTAs' consumers, and an odd last row's partner computes nothing (grid.y rounded up).
//   Batched: grid.z = S x batch, the batch index from the cluster's z; A and B through rank-4 maps
//   (cols, rows, inner, outer batch), C offset by 64-bit batch strides (cu/CONTRACT.md).
//   Threads: 128 * (1 + BM/64). Warpgroup 0 is the producer (one thread issues the TMA loads into a
//   ring of full/empty mbarrier stages); each consumer warpgroup owns 64 rows of the BM x BN tile
//   with wgmma.m64n{BN}k16 (BN / 2 fp32 accumulators per thread).
//   Smem: stages * (BM + BN) * 64 * 2 bytes (128B-swizzled TMA boxes, reused for the fp32 partial
//   tile) + barriers + 1 KB alignment slack. Arch: sm_90a (wgmma, setmaxnreg).
//   A B stage is two halves of BN/2 columns (tn: two TMA boxes of BN/2 rows; nn: 64-column chunks),
//   so that with SwiGLU (epi & kSwiGLU; every tn kernel, nn with BN = 128, 256: `swiglu = true`) N is
//   the output width F, B has 2F [gate | up] columns (nn) or rows (tn), a tile is BN/2 output columns
//   from n0 = blockIdx.x * BN/2 (grid.x = ceil(F / (BN/2))), its stage holds gate columns [n0, n0 + BN/2)
//   then up columns [F + n0, ...), and the stores pair the summed partial tile's column c with
//   BN/2 + c (hge::Epilogue::value_swiglu, output columns < F only). Split-K works alike.
#include <cuda.h>  // CUtensorMap

#include <type_traits>

#include "common/dsmem.cuh"
#include "common/matmul_util.cuh"
#include "common/sm90.cuh"

namespace {

using hg90::smem_u32;

constexpr int kRowBytes = 128;  // a k-block: one 128-byte swizzle row of each operand row (64 fp16, 32 fp32)
constexpr int kProducerRegs = 40;
constexpr int kConsumerRegs = 232;

// A batched launch reads A and B through rank-4 tensor maps, (cols, rows, inner batch, outer batch):
// a per-batch pointer offset cannot move a map built on the host. `tma_levels` says which batch levels
// each map has (an operand broadcast along a level has size 1 there and takes coordinate 0).
constexpr int kLevelAInner = 1, kLevelAOuter = 2, kLevelBInner = 4, kLevelBOuter = 8;
constexpr int kRank4Maps = 16;  // set on batched launches; unbatched ones keep rank-2 maps

using hg90::tma_load_4d;  // cu/common/sm90.cuh

// The producer's loop: TMA loads of this CTA's K slice into the ring. kRank4: batched launch, the
// maps carry the batch levels (coordinates ai, ao of A and bi, bo of B). A B stage is two halves of
// BN/2 columns (rows of N for tn), the first from B's column n_lo, the second from n_hi: n0 and
// n0 + BN/2 for a plain tile, gate n0 and up F + n0 for a SwiGLU one (wgmma_splitk). tn loads each half
// as one box of BN/2 rows (W::kTokenN: the whole stage as one box of BN rows from n_lo); nn loads chunks of BK
// columns (a 128-byte row: 64 fp16, 32 fp32) by BK K rows, BN/(2 BK) per half (BN = BK: one chunk at n_lo).
// W::kX3 (3xTF32, 3xFP16): the K slice walks 3 x3_blocks k-blocks, the three products lo(a) hi(b), hi(a) lo(b),
// hi(a) hi(b) of each k-block (32 TF32 or 64 fp16 columns) in turn (so the second read of a head plane comes from
// L2), A and B being rank-4 maps (32 fp32 units, rows, 2 x3_blocks planes, matrices) of matmul_split_tf32's or
// matmul_split_f16x3's planes, ai / bi the matrix (0 unbatched).
// W::kMc = 2 (a cluster of two CTAs along M, unbatched, unsplit): the pair shares its B tile; CTA `rank` loads
// the halves (tn) or 64-column chunks (nn) whose index is `rank` modulo 2 and multicasts them into both rings.
template <class W, bool kRank4>
__device__ __forceinline__ void produce(const CUtensorMap& tmA, const CUtensorMap& tmB, uint8_t* sA, uint8_t* sB,
                                        uint64_t* full, uint64_t* empty, int nk, int kt0, int m0, int n_lo,
                                        int n_hi, int ai, int ao, int bi, int bo, uint64_t b_policy,
                                        int x3_blocks = 0, int rank = 0) {
  constexpr int BN = W::BN, mc = W::kMc;
  // a B box of this CTA's: loaded for itself, or multicast to the pair (mc = 2) when its index is this CTA's
  auto load_b = [&](uint8_t* dst, uint64_t* bar, int part, int c0, int c1) {
    if constexpr (mc == 1)
      hg90::tma_load_2d_hint(dst, &tmB, bar, c0, c1, b_policy);
    else if (part % mc == rank)
      hg90::tma_load_2d_multicast_hint(dst, &tmB, bar, c0, c1, (1u << mc) - 1, b_policy);
  };
  int stage = 0;
  uint32_t phase = 0;
  for (int kb = 0; kb < nk; ++kb) {
    hg90::mbar_wait(&empty[stage], phase ^ 1);  // a fresh barrier passes the "previous" phase
    hg90::mbar_arrive_expect_tx(&full[stage], W::kStageBytes);
    if constexpr (W::kX3) {  // k-block kt: product kt % 3 of the k-block kk = kt / 3 (lo planes from KB on)
      const int kt = kt0 + kb, kk = kt / 3, piece = kt - 3 * kk;
      tma_load_4d(sA + stage * W::kABytes, &tmA, &full[stage], 0, m0, kk + (piece == 0 ? x3_blocks : 0), ai);
      const int pb = kk + (piece == 1 ? x3_blocks : 0);
#pragma unroll
      for (int h = 0; h < 2; ++h)
        hg90::tma_load_4d_hint(sB + stage * W::kBBytes + h * (BN / 2 * 128), &tmB, &full[stage], 0, h ? n_hi : n_lo,
                               pb, bi, b_policy);
      if (++stage == W::kStages) {
        stage = 0;
        phase ^= 1;
      }
      continue;
    }
    const int k0 = (kt0 + kb) * W::BK;
    if constexpr (kRank4)
      tma_load_4d(sA + stage * W::kABytes, &tmA, &full[stage], k0, m0, ai, ao);
    else
      hg90::tma_load_2d(sA + stage * W::kABytes, &tmA, &full[stage], k0, m0);
    uint8_t* b = sB + stage * W::kBBytes;
    if constexpr (W::kTokenN) {  // one box of BN rows (no SwiGLU halves)
      if constexpr (kRank4)
        hg90::tma_load_4d_hint(b, &tmB, &full[stage], k0, n_lo, bi, bo, b_policy);
      else
        hg90::tma_load_2d_hint(b, &tmB, &full[stage], k0, n_lo, b_policy);
    } else if constexpr (!W::kNN) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // BN/2 rows of N, 64 K each, per half (128 bytes a row)
        if constexpr (kRank4)
          hg90::tma_load_4d_hint(b + h * (BN / 2 * 128), &tmB, &full[stage], k0, h ? n_hi : n_lo, bi, bo, b_policy);
        else
          load_b(b + h * (BN / 2 * 128), &full[stage], h, k0, h ? n_hi : n_lo);
      }
    } else {
      constexpr int BK = W::BK, kHalf = BN >= 2 * BK ? BN / (2 * BK) : BN / BK;  // chunks from n_lo
#pragma unroll
      for (int c = 0; c < BN / BK; ++c) {  // BK-column chunks of BK K rows (MN-major)
        const int n = c < kHalf ? n_lo + BK * c : n_hi + BK * (c - kHalf);
        if constexpr (kRank4)
          hg90::tma_load_4d_hint(b + c * (BK * 128), &tmB, &full[stage], n, k0, bi, bo, b_policy);
        else
          load_b(b + c * (BK * 128), &full[stage], c, n, k0);
      }
    }
    if (++stage == W::kStages) {
      stage = 0;
      phase ^= 1;
    }
  }
}

template <typename T, int BM_, int BN_, bool NN, int STAGES, int X3 = 0, int MC = 1, int OCC = 1, bool X3S = false>
struct WCfg {
  using Elem = T;
  // C's (and the bias's) element: the operands' but for the split products (3xTF32, 3xFP16), whose C is fp32
  using Out = std::conditional_t<(X3 > 0), float, T>;
  // CTAs resident on one SM (the `occ` variant, 2: half the ring, no setmaxnreg split; for a batch of short-K
  // tiles that one CTA an SM would run in two waves)
  static constexpr int kOcc = OCC;
  // B multicast (the `mc` variant, 2): launched in clusters (1, 2, 1) whose pair of CTAs share their B tile;
  // 1: no cluster along M (the unicast symbols, compiled without any of the pair's code)
  static constexpr int kMc = MC;
  // 3xTF32 (the gemm_tf32x3 kernels, T = float) and 3xFP16 (gemm_f16x3, T = __half): A and B as hi/lo planes
  // (produce), and each k-block's products summed in the tensor cores from zero, then added to the accumulators
  // with FADD (consumer): the tensor cores' accumulation rounds toward zero, so a sum kept there over K =
  // 2048-8192 lost 6-12x cuBLAS SGEMM's accuracy (H100; docs/dev/tuning_log.md). 3xFP16's planes are scaled by a
  // power of two per row of A and of B^T (matmul_split_f16x3), which the consumers take back off before the epilogue.
  static constexpr bool kX3 = X3 > 0;
  static constexpr bool kX3Scaled = kX3 && sizeof(T) == 2;  // 3xFP16: rows scaled by powers of two (unscale_x3)
  // 3xTF32 from the fp32 operands themselves (the gemm_tf32x3s kernels, T = float): the consumers write each
  // stage's residuals into a second ring (split_stage_tf32) and run its three products, the heads read from the
  // stage itself; one launch, no planes in global memory
  static constexpr bool kX3Smem = X3S;
  static constexpr int kPromote = X3;  // kX3: k-blocks summed in the tensor cores per FADD into the accumulators
  // kX3, kX3Smem: tiles in groups of kGroupM rows of M, walked down M first, so that a wave of ~132 CTAs shares
  // its A and B panels in L2 (the row-by-row order re-read all of B from DRAM per two rows of tiles: at 4096^3
  // fp32 that was ~3 GB, most of the 1.5 ms)
  static constexpr int kGroupM = 8;
  static constexpr bool kGroupedOrder = kX3 || kX3Smem;
  static constexpr int BM = BM_;
  static constexpr int BN = BN_;  // 256: m64n256k16; 128: m64n128k16 (twice the CTAs on small grids)
  static constexpr int kAcc = BN / 2;  // fp32 accumulators per consumer thread
  static constexpr bool kNN = NN;
  // BN = 32, 16, 8 (fp16/bf16 tn, unicast): the decode tiles of C^T = B^T A^T, the token count as the wgmma N. B's
  // stage is one TMA box of BN rows (whole 8-row swizzle atoms: 1024-byte aligned), so there are no SwiGLU halves.
  static constexpr bool kTokenN = (BN == 32 || BN == 16 || BN == 8) && !NN && !kX3 && !kX3Smem && sizeof(T) == 2 &&
                                  kMc == 1;
  // SwiGLU needs each half of the B stage to be whole loads: for tn two boxes of BN/2 rows (not kTokenN), for nn
  // only where a half holds whole 64-column chunks (BN = 128, 256).
  static constexpr bool kSwiGLU = (!NN && !kTokenN) || BN >= 128;
  static constexpr int kStages = STAGES;
  static constexpr int kConsumers = BM / 64;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  static constexpr int BK = kRowBytes / sizeof(T);  // k-block in elements: 64 fp16/bf16, 32 fp32 (tf32)
  static constexpr int kABytes = BM * kRowBytes, kBBytes = BN * kRowBytes;
  static constexpr int kStageBytes = kABytes + kBBytes;  // what each full barrier expects from TMA
  static constexpr int kRingBytes = kStages * kStageBytes;
  // kX3Smem: the residuals' ring, kRingBytes past the tiles' (the residual of the fp32 at p is at p + kRingBytes)
  static constexpr int kBarOffset = kRingBytes * (kX3Smem ? 2 : 1);
  static constexpr int kSmemBytes = kBarOffset + 2 * kStages * 8 + 1024;
  static constexpr int kRedStride = BN + 8;  // floats: the float2 fragment stores are conflict-free
  // store_staged: a consumer warpgroup's 64 x BN tile as whole 64-column boxes (BN = 112: 64 + 48 columns, the
  // second box's last 16 unused), so the second warpgroup's tile starts past the first's last box
  static constexpr int kStagedBytes = 64 * 128 * ((BN + 63) / 64);
  // Output quads each reducing thread sums at once (reduce_store_wide): up to 2 * kGroup float4
  // DSMEM loads in flight per thread (no spills under the 168-register cap of the 384-thread kernels).
  static constexpr int kGroup = 8;
  static_assert(!kX3 || (!NN && BN <= 192), "3xTF32 / 3xFP16: tn, two accumulator sets in registers");
  static_assert(BM == 64 || BM == 128, "one or two consumer warpgroups of 64 rows");
  static_assert(kMc == 1 || (kMc == 2 && !kX3 && !kX3Smem), "B multicast: a pair of CTAs, not for the split products");
  static_assert(!kX3Smem || (!kX3 && sizeof(T) == 4 && BN <= 192 && (!NN || BN == 64 * kConsumers)),
                "3xTF32 in shared memory: fp32; nn: a 4 x 4 block of B's stage a consumer thread");
  // BN = 112, 96 (fp16/bf16 tn only): B halves of 56 / 48 rows stay whole 8-row swizzle atoms (1024-byte aligned);
  // nn's halves would not be whole 64-column chunks
  static constexpr bool kNarrowN = (BN == 112 || BN == 96) && !NN && !kX3 && !kX3Smem && sizeof(T) == 2;
  static_assert(BN == 64 || BN == 128 || BN == 256 || ((kX3 || kX3Smem) && BN == 192) || kNarrowN || kTokenN,
                "m64n64, m64n128, m64n256 (split products: m64n192; fp16/bf16 tn: m64n112, m64n96; unicast: m64n32, "
                "m64n16, m64n8)");
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "swizzled tiles must stay 1024-byte aligned");
  static_assert(BM * kRedStride * 4 <= kRingBytes, "the fp32 partial tile reuses the ring");
  static_assert(kConsumers * kStagedBytes <= kRingBytes, "the staged tiles reuse the ring");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
  static_assert(kOcc > 1 || kProducerRegs * 128 + kConsumerRegs * 128 * kConsumers <= 65536, "register file");
  static_assert(kOcc == 1 || kOcc * (kSmemBytes + 1024) <= 228 * 1024, "kOcc CTAs an SM: their shared memory");
};

// The stores of reduce_store_wide: this CTA's rows [row0, row0 + rows) of its (summed) partial tile, quad
// e of `total` at a time, through the epilogue. kLinear: alpha and beta only (the common case).
template <class W, bool kLinear>
__device__ __forceinline__ void store_pass(const uint8_t* tile, int row0, int total, int t, typename W::Out* C,
                                           int M, int N, int m0, int n0, int ldc_r, int ldc_c,
                                           const hge::Epilogue<typename W::Out>& ep) {
  constexpr int kThreads = 128 * W::kConsumers, kQuads = W::BN / 4;
#pragma unroll 1
  for (int e = t; e < total; e += kThreads) {
    const int r = row0 + e / kQuads, c = (e % kQuads) * 4;
    const float4 v = *reinterpret_cast<const float4*>(tile + (r * W::kRedStride + c) * 4);
    const int gm = m0 + r, gn = n0 + c;
    if (gm < M && gn < N)
      hgu::store4<typename W::Out, kLinear>(
          C, static_cast<long long>(gm) * ldc_r + static_cast<long long>(gn) * ldc_c, ldc_c, N - gn, v, ep, gm, gn);
  }
}
// The general epilogue (bias, activation, scale) as a function of its own, so that its code takes no
// registers from the main loop (which then stays what it is without it).
template <class W>
__device__ __noinline__ void store_pass_general(const uint8_t* tile, int row0, int total, int t,
                                                typename W::Out* C, int M, int N, int m0, int n0, int ldc_r,
                                                int ldc_c, const hge::Epilogue<typename W::Out> ep) {
  store_pass<W, false>(tile, row0, total, t, C, M, N, m0, n0, ldc_r, ldc_c, ep);
}

// W::kTokenN into a C whose rows are contiguous (ldc_r == 1: C^T = B^T A^T, the tile's rows are C's columns): 8 rows
// of one column of the summed tile a thread, as two 4-element runs (hgu::store4_values at unit stride), the threads of
// a column consecutive, so that a warp writes whole runs of 128 rows of C's columns where the element stores of
// store_pass would write BN / 4 columns' runs of 128 / BN. Reads sums that other threads wrote: the caller waits.
template <class W>
__device__ __noinline__ void store_pass_columns(const uint8_t* tile, int row0, int rows, int t, typename W::Out* C,
                                                int M, int N, int m0, int n0, int ldc_c,
                                                const hge::Epilogue<typename W::Out> ep) {
  constexpr int kThreads = 128 * W::kConsumers;
  const int chunks = rows / 8;  // (rows = BM / splits: a multiple of 16)
#pragma unroll 1
  for (int e = t; e < chunks * W::BN; e += kThreads) {
    const int r = row0 + 8 * (e % chunks), c = e / chunks, gm = m0 + r, gn = n0 + c;
    if (gm >= M || gn >= N) continue;
    const float* v = reinterpret_cast<const float*>(tile) + r * W::kRedStride + c;
    const long long off = gm + static_cast<long long>(gn) * ldc_c;
#pragma unroll
    for (int h = 0; h < 8; h += 4) {
      float x[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) x[i] = h + i < M - gm ? ep.value(v[(h + i) * W::kRedStride], gm + h + i, gn) : 0.f;
      if (h < M - gm) hgu::store4_values<typename W::Out>(C, off + h, 1, M - gm - h, x, ep.beta);
    }
  }
}

// The SwiGLU stores: output quad (r, c) of this CTA's BN/2-column tile from the gate quad at column c
// and the up quad at column BN/2 + c of the summed partial tile; output column n0 + c of N (= F).
template <class W>
__device__ __noinline__ void store_pass_swiglu(const uint8_t* tile, int row0, int rows, int t, typename W::Out* C,
                                               int M, int N, int m0, int n0, int ldc_r, int ldc_c,
                                               const hge::Epilogue<typename W::Out> ep) {
  constexpr int kThreads = 128 * W::kConsumers, kQuads = W::BN / 8;  // output quads per row
#pragma unroll 1
  for (int e = t; e < rows * kQuads; e += kThreads) {
    const int r = row0 + e / kQuads, c = (e % kQuads) * 4;
    const float* row = reinterpret_cast<const float*>(tile) + r * W::kRedStride;
    const float4 g = *reinterpret_cast<const float4*>(row + c);
    const float4 u = *reinterpret_cast<const float4*>(row + W::BN / 2 + c);
    const int gm = m0 + r, gn = n0 + c;
    if (gm < M && gn < N) {
      const float gs[4] = {g.x, g.y, g.z, g.w}, us[4] = {u.x, u.y, u.z, u.w};
      float x[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) x[j] = j < N - gn ? ep.value_swiglu(gs[j], us[j], gm, gn + j, N) : 0.f;
      hgu::store4_values<typename W::Out>(
          C, static_cast<long long>(gm) * ldc_r + static_cast<long long>(gn) * ldc_c, ldc_c, N - gn, x, ep.beta);
    }
  }
}

// K groups (k_groups > 1, unbatched launches): `groups` clusters along grid.z run the same tile, each on its
// own share of K, so that a few tiles with a long K fill the SMs (H100: a cluster of 8 fits 120 SMs, and
// 128 x 128 x 131072 has 1-4 tiles). After its cluster's DSMEM sum, each CTA publishes its rows of the tile to
// `work` (fp32) and counts itself in; the last of the groups to arrive adds every group's rows in group order (so
// the sum is bitwise the same whichever arrives last) into its own rows, resets the count and stores them. Nobody
// waits on anybody, so the groups need not be resident together. `work`: int32 counts (tiles x splits, rounded up
// to kKgCountAlign bytes; zero before a launch and left zero), then tiles x groups fp32 BM x BN partials.
// Deferred (k_groups | kKgDeferred): nobody counts or sums; each CTA writes its rows of the tile, unscaled, into
// its group's fp32 plane of C's shape (`work`: groups planes of M x kg_pitch(N)), and matmul_kgroups_sum (a second
// launch) adds the planes and applies the epilogue. For many groups of small tiles (64 x 64 x 65536: 132 groups),
// where one CTA summing every group's partial would read megabytes alone.
struct KGroups {
  float* work;
  int groups, group, tile;
  bool deferred;
  int M, N, m0, n0;
};
constexpr int kKgCountAlign = 256;  // bytes: the partials start on this after the counts
constexpr int kKgDeferred = 1 << 16, kKgGroupsMask = kKgDeferred - 1;  // the i32:k_groups bits
__host__ __device__ constexpr int kg_pitch(int N) { return (N + 3) & ~3; }  // a deferred plane's row (fp32 quads)

template <class W>
__device__ __noinline__ bool kgroups_fixup(uint8_t* tile, int row0, int total, int t, const KGroups kg,
                                           uint32_t rank, int splits) {
  constexpr int kThreads = 128 * W::kConsumers, kQuads = W::BN / 4;
  __shared__ int last;
  const int tiles = static_cast<int>(gridDim.x * gridDim.y), counts = tiles * splits;
  int* count = reinterpret_cast<int*>(kg.work) + kg.tile * splits + static_cast<int>(rank);
  float* part = kg.work + (counts * 4 + kKgCountAlign - 1) / kKgCountAlign * (kKgCountAlign / 4) +
                static_cast<long long>(kg.tile) * kg.groups * (W::BM * W::BN);
  auto mine = [&](int e) {
    return reinterpret_cast<float4*>(tile + ((row0 + e / kQuads) * W::kRedStride + (e % kQuads) * 4) * 4);
  };
  auto slot = [&](int q, int e) {
    return reinterpret_cast<float4*>(part + static_cast<long long>(q) * (W::BM * W::BN) + (row0 + e / kQuads) * W::BN +
                                     (e % kQuads) * 4);
  };
  if (kg.deferred) {  // this CTA's rows into its group's plane, inside C only
    const int ldw = kg_pitch(kg.N);
    float* plane = kg.work + static_cast<long long>(kg.group) * kg.M * ldw;
#pragma unroll 1
    for (int e = t; e < total; e += kThreads) {
      const int r = kg.m0 + row0 + e / kQuads, c = kg.n0 + (e % kQuads) * 4;
      if (r < kg.M && c < kg.N)
        __stcg(reinterpret_cast<float4*>(plane + static_cast<long long>(r) * ldw + c), *mine(e));
    }
    return false;
  }
#pragma unroll 1
  for (int e = t; e < total; e += kThreads) __stcg(slot(kg.group, e), *mine(e));
  __threadfence();
  hg90::named_bar_sync(1, kThreads);
  if (t == 0) last = atomicAdd(count, 1) == kg.groups - 1;
  hg90::named_bar_sync(1, kThreads);
  if (!last) return false;
  __threadfence();  // every group's rows are visible (they fenced before counting in)
#pragma unroll 1
  for (int e = t; e < total; e += kThreads) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int q = 0; q < kg.groups; ++q) {
      const float4 v = q == kg.group ? *mine(e) : __ldcg(slot(q, e));
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
    *mine(e) = s;
  }
  if (t == 0) *count = 0;  // for the next launch on this workspace
  hg90::named_bar_sync(1, kThreads);  // the stores read quads other threads summed (SwiGLU pairs)
  return true;
}

// The split-K epilogue: CTA `rank` of `splits` sums rows [rank*BM/splits, (rank+1)*BM/splits) of
// every CTA's fp32 partial tile (distributed shared memory) and stores the epilogue of the sums
// (scale * act(alpha * sum + bias) + beta * C, cu/common/epilogue.cuh).
// Same result as hgu::reduce_store, in two passes over the same thread -> quad map: (1) the sums of
// kGroup quads, all peers' DSMEM loads for them issued two peers at a time, written back in place
// into this CTA's own rows (no peer reads those), then (2) the stores to C. A DSMEM round trip is
// ~1 us under load, and hgu::reduce_store's one-quad-at-a-time loop made the reduction the largest
// cost of the short split-K launches (M = 128, 1024^3; docs/dev/tuning_log.md, matmul_sm90); the split keeps the stores' 64-bit
// addressing out of the loads' register peak (the 384-thread kernels run under a 168-register cap).
template <class W>
__device__ __forceinline__ void reduce_store_wide(uint8_t* tile, int splits, uint32_t rank, int t,
                                                  typename W::Out* C, int M, int N, int m0, int n0, int ldc_r,
                                                  int ldc_c, const hge::Epilogue<typename W::Out>& ep,
                                                  const KGroups& kg) {
  constexpr int kThreads = 128 * W::kConsumers, kQuads = W::BN / 4, G = W::kGroup;
  const int rows = W::BM / splits, total = rows * kQuads, row0 = static_cast<int>(rank) * rows;
  const uint32_t base = smem_u32(tile);
  auto offset = [&](int e) { return static_cast<uint32_t>(((row0 + e / kQuads) * W::kRedStride + (e % kQuads) * 4) * 4); };
  if (splits > 1) {
#pragma unroll 1
    for (int e0 = t; e0 < total; e0 += G * kThreads) {
      uint32_t off[G];
      float4 acc[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        off[g] = offset(min(e0 + g * kThreads, total - 1));
        acc[g] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll 1
      for (int p = 0; p < splits; p += 2) {
        float4 w0[G], w1[G];  // quads past the end (the last group of a thread) load nothing
#pragma unroll
        for (int g = 0; g < G; ++g)
          w0[g] = e0 + g * kThreads < total ? hgu::ld_dsmem_f4(base + off[g], static_cast<uint32_t>(p))
                                            : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int g = 0; g < G; ++g)
          w1[g] = e0 + g * kThreads < total && p + 1 < splits
                      ? hgu::ld_dsmem_f4(base + off[g], static_cast<uint32_t>(p + 1))
                      : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int g = 0; g < G; ++g) {
          acc[g].x += w0[g].x + w1[g].x;
          acc[g].y += w0[g].y + w1[g].y;
          acc[g].z += w0[g].z + w1[g].z;
          acc[g].w += w0[g].w + w1[g].w;
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g)
        if (e0 + g * kThreads < total) *reinterpret_cast<float4*>(tile + off[g]) = acc[g];
    }
  }
  if (kg.groups > 1 && !kgroups_fixup<W>(tile, row0, total, t, kg, rank, splits)) return;  // another group stores
  if constexpr (W::kTokenN) {
    if (ldc_r == 1) {  // the tile's rows are C's columns (after K groups' sum, kgroups_fixup's last barrier waited)
      if (splits > 1 && kg.groups <= 1) hg90::named_bar_sync(1, 128 * W::kConsumers);  // every write-back is done
      store_pass_columns<W>(tile, row0, rows, t, C, M, N, m0, n0, ldc_c, ep);
      return;
    }
  }
  if (ep.linear()) {
    store_pass<W, true>(tile, row0, total, t, C, M, N, m0, n0, ldc_r, ldc_c, ep);
    return;
  }
  if constexpr (W::kSwiGLU) {
    if (ep.swiglu()) {  // n0 is the first output column of the tile's BN/2
      // the pass reads gate and up quads that other threads summed above: wait for all their write-backs
      // (after K groups' sum, kgroups_fixup's last barrier did)
      if (splits > 1 && kg.groups <= 1) hg90::named_bar_sync(1, 128 * W::kConsumers);
      store_pass_swiglu<W>(tile, row0, rows, t, C, M, N, m0, n0, ldc_r, ldc_c, ep);
      return;
    }
  }
  store_pass_general<W>(tile, row0, total, t, C, M, N, m0, n0, ldc_r, ldc_c, ep);
}

// The common unsplit case: alpha * acc alone (no bias, activation or scale; beta 0) into a row-major C whose
// rows start on 16 bytes (unit column stride, row stride and N multiples of 8, C 16-byte aligned): each consumer
// warpgroup stmatrix-es its 64 x BN tile into the idle ring as fp16/bf16 (64-column boxes of 128-byte rows, the last
// part-filled at BN = 112, 96; 16-byte chunks swizzled by row: conflict-free), then stores whole 16-byte chunks, a
// warp covering 512 contiguous bytes of rows. No fp32 tile, no second pass, 16-byte rather than 8-byte stores (what the fp32 round
// trip and the registers' 4-byte pairs cost: docs/dev/code_measurements.md, "matmul_sm90 staged store").
template <class W>
__device__ __forceinline__ bool staged_store_ok(const typename W::Out* C, int splits, int N, int ldc_r, int ldc_c,
                                                int beta_bits, int epi, int scale_bits) {
  return splits == 1 && ldc_c == 1 && (ldc_r & 7) == 0 && (N & 7) == 0 && (reinterpret_cast<uintptr_t>(C) & 15) == 0 &&
         beta_bits == 0 && epi == 0 && scale_bits == 0x3f800000;
}
// Byte offset of 16-byte chunk k (columns 8k .. 8k + 7) of row r in a warpgroup's staged tile.
__device__ __forceinline__ uint32_t staged_chunk(int r, int k) {
  return static_cast<uint32_t>((k / 8) * (64 * 128) + r * 128 + (((k % 8) ^ (r % 8)) << 4));
}
// wgmma m64nNk16 accumulator layout (warp w, lane l): d[4j + 2h + e] is row 16w + 8h + l/4, column
// 8j + 2(l%4) + e. stmatrix x4 of blocks j, j + 1: lane l addresses row l % 8 of matrix l / 8 (matrices 0/1:
// rows 0-7 / 8-15 of block j, 2/3 those of block j + 1). Rows at or past M and chunks at or past N are not
// stored (N is a multiple of 8: a chunk is all in or all out).
template <class W>
__device__ __forceinline__ void store_staged(const float (&d)[W::kAcc], uint8_t* stage, typename W::Out* C, int M,
                                             int N, int ldc_r, int row0, int n0, float alpha, int cw, int tid) {
  using T = typename W::Out;
  constexpr int kChunks = W::BN / 8;  // 16-byte chunks of a row
  const int warp = tid / 32, lane = tid % 32;
  const uint32_t base = smem_u32(stage);
  {
    const int mat = lane / 8, r = warp * 16 + (mat & 1) * 8 + lane % 8;
#pragma unroll
    for (int j = 0; j < kChunks; j += 2)
      hg90::stmatrix_x4(base + staged_chunk(r, j + (mat >> 1)), hg90::pack2<T>(alpha * d[4 * j], alpha * d[4 * j + 1]),
                        hg90::pack2<T>(alpha * d[4 * j + 2], alpha * d[4 * j + 3]),
                        hg90::pack2<T>(alpha * d[4 * j + 4], alpha * d[4 * j + 5]),
                        hg90::pack2<T>(alpha * d[4 * j + 6], alpha * d[4 * j + 7]));
  }
  hg90::named_bar_sync(2 + cw, 128);  // this warpgroup's tile is staged
#pragma unroll
  for (int e = tid; e < 64 * kChunks; e += 128) {
    const int r = e / kChunks, k = e % kChunks;
    if (row0 + r < M && n0 + 8 * k < N)
      *reinterpret_cast<uint4*>(C + static_cast<long long>(row0 + r) * ldc_r + n0 + 8 * k) =
          hg::ld_shared_v4(base + staged_chunk(r, k));
  }
}

// 3xFP16: the sums of the scaled planes back to A.B: d (row r, column c) times 2^-(a_shift[r] + b_shift[c]), exact
// (ldexpf: a power of two, apart from fp32's own underflow and overflow). Rows past M and columns past N hold
// zeros: their index is clamped. (The split products take no SwiGLU: the producer loads B's rows n0 + c.)
template <class W>
__device__ __forceinline__ void unscale_x3(float (&d)[W::kAcc], const int* a_shift, const int* b_shift, int M, int N,
                                           int row0, int n0, int tid) {
  const int warp = tid / 32, lane = tid % 32;
  const int r = row0 + warp * 16 + lane / 4;
  const int sa[2] = {a_shift[min(r, M - 1)], a_shift[min(r + 8, M - 1)]};
#pragma unroll
  for (int j = 0; j < W::BN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int c = 8 * j + 2 * (lane % 4) + e;
      const int sb = b_shift[min(n0 + c, N - 1)];
#pragma unroll
      for (int h = 0; h < 2; ++h) d[4 * j + 2 * h + e] = ldexpf(d[4 * j + 2 * h + e], -(sa[h] + sb));
    }
}

// The matrix a batched split product's operand holds at this CTA's batch index: its planes are stacked one matrix
// after another over the levels it varies on (outer before inner), as the runtime's split steps write them.
__device__ __forceinline__ int x3_matrix(const hgu::GridZ& gz, int batch_inner, bool outer, bool inner) {
  return (outer ? gz.outer * (inner ? batch_inner : 1) : 0) + (inner ? gz.inner : 0);
}

// kX3Smem: the residuals of a stage's A and B tiles (hg::tf32_trunc_residual: tf32 wgmma reads the heads from the
// tiles themselves), written at the same offsets in the residuals' ring, 16 bytes a step: an elementwise map, so the
// 128-byte swizzle TMA wrote the tiles in holds for them too. The consumers' threads (t of 128 * kConsumers) share
// the work; the writes are made visible to the tensor cores (the async proxy) before the caller's barrier.
// nn: B's stage holds BK-column chunks of K rows (MN-major), which tf32 wgmma cannot read: each thread reads a 4 x 4
// block of it, and after a barrier (every block read) writes it back transposed, as the K-major tile a tn stage holds
// (row n at n * 128 bytes, its 16-byte units swizzled by n % 8), beside the block's residuals.
template <class W>
__device__ __forceinline__ void split_stage_tf32(const uint8_t* a, uint8_t* b, int t) {
  constexpr int kThreads = 128 * W::kConsumers;
  static_assert(W::kABytes % (16 * kThreads) == 0 && W::kBBytes % (16 * kThreads) == 0, "whole steps a thread");
  auto residual4 = [](const float4& v) {
    return make_float4(hg::tf32_trunc_residual(v.x), hg::tf32_trunc_residual(v.y), hg::tf32_trunc_residual(v.z),
                       hg::tf32_trunc_residual(v.w));
  };
  auto split = [&](const uint8_t* base, auto chunks) {
    constexpr int kPer = decltype(chunks)::value / kThreads;
    float4 v[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) v[i] = reinterpret_cast<const float4*>(base)[t + i * kThreads];
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      reinterpret_cast<float4*>(const_cast<uint8_t*>(base) + W::kRingBytes)[t + i * kThreads] = residual4(v[i]);
  };
  if constexpr (!W::kNN) {
    split(a, std::integral_constant<int, W::kABytes / 16>{});
    split(b, std::integral_constant<int, W::kBBytes / 16>{});
  } else {
    // block (kb, nb): K rows 4 kb.., columns 4 nb..; thread bits [1:0] and [3 + ...) pick nb, bit 2 and the top two
    // kb, so that each 8 threads' loads (one K row, 8 units) and stores (two rows' units) meet few bank conflicts
    constexpr int BK = W::BK, kNbHi = W::BN / 16;
    const int nb = (t & 3) + 4 * ((t >> 3) % kNbHi), kb = ((t >> 2) & 1) + 2 * ((t >> 3) / kNbHi);
    const int n0 = 4 * nb, chunk = n0 / BK * (BK * 128);
    float4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = 4 * kb + i;
      v[i] = *reinterpret_cast<const float4*>(b + chunk + k * 128 + ((((n0 % BK) >> 2) ^ (k & 7)) << 4));
    }
    split(a, std::integral_constant<int, W::kABytes / 16>{});
    hg90::named_bar_sync(1, kThreads);  // every block of the chunks read before any is overwritten
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + j;
      const float4 h = j == 0 ? make_float4(v[0].x, v[1].x, v[2].x, v[3].x)
                     : j == 1 ? make_float4(v[0].y, v[1].y, v[2].y, v[3].y)
                     : j == 2 ? make_float4(v[0].z, v[1].z, v[2].z, v[3].z)
                              : make_float4(v[0].w, v[1].w, v[2].w, v[3].w);
      uint8_t* p = b + n * 128 + ((kb ^ (n & 7)) << 4);
      *reinterpret_cast<float4*>(p) = h;
      *reinterpret_cast<float4*>(p + W::kRingBytes) = residual4(h);
    }
  }
  hg90::fence_proxy_async_smem();
}

template <class W>
__device__ __forceinline__ void wgmma_splitk(const CUtensorMap& tmA, const CUtensorMap& tmB, typename W::Out* C,
                                             int M, int N, int K, int ldc_r, int ldc_c, int alpha_bits,
                                             int beta_bits, const typename W::Out* bias, int bias_stride, int epi,
                                             int scale_bits, int batch_inner, int tma_levels, long long bsc_o,
                                             long long bsc_i, float* work, int k_groups, const int* a_shift = nullptr,
                                             const int* b_shift = nullptr) {
  using T = typename W::Elem;
  using Out = typename W::Out;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  uint8_t* sA = smem;
  uint8_t* sB = smem + W::kStages * W::kABytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + W::kBarOffset);
  uint64_t* empty = full + W::kStages;
  const int wg = threadIdx.x / 128;
  // A cluster of two CTAs along M (grid.y even, unbatched, unsplit): the pair multicasts its shared B tile, so
  // each stage is freed by both CTAs' consumers (the peer's producer writes into this CTA's ring too).
  constexpr int mc = W::kMc;
  const hgu::GridZ gz = hgu::grid_z(batch_inner);
  if constexpr (mc > 1) {  // (a launch the runtime never makes would hang or corrupt the peer's ring)
    if (hg::cluster_nctaid_y() != static_cast<uint32_t>(mc) || gz.splits > 1 || (tma_levels & kRank4Maps)) __trap();
  }

  if (threadIdx.x == 0) {
    hg90::prefetch_tmap(&tmA);
    hg90::prefetch_tmap(&tmB);
    for (int s = 0; s < W::kStages; ++s) {
      hg90::mbar_init(&full[s], 1);                   // the producer's arrive.expect_tx
      hg90::mbar_init(&empty[s], W::kConsumers * mc);  // one arrival per consumer warpgroup of the pair
    }
    hg90::fence_barrier_init();
  }
  if constexpr (mc > 1)
    hgu::cluster_sync();  // the peer's barriers are initialised before anything multicasts or arrives on them
  else
    __syncthreads();
  hg::griddep_begin();  // dependent_launch: the setup above overlaps the kernel before; nothing global before this

  constexpr int BN = W::BN;
  // SwiGLU (epi & kSwiGLU): N is the output width F, B has 2F [gate | up] columns, and a tile is BN/2
  // output columns from n0: the B stage holds gate columns [n0, n0 + BN/2) then up [F + n0, ...), so
  // the accumulator holds the gate in columns [0, BN/2) and the up part in [BN/2, BN).
  const bool swiglu = W::kSwiGLU && (epi & hge::kSwiGLU) != 0;
  int mt = blockIdx.y, nt = blockIdx.x;
  if constexpr (W::kGroupedOrder) {
    const int tile = blockIdx.y * gridDim.x + blockIdx.x, per_group = W::kGroupM * gridDim.x;
    const int first = tile / per_group * W::kGroupM, rows = min(static_cast<int>(gridDim.y) - first, W::kGroupM);
    mt = first + tile % per_group % rows;
    nt = tile % per_group / rows;
  }
  const int m0 = mt * W::BM, n0 = nt * (swiglu ? BN / 2 : BN);
  // This CTA's K slice in whole BK tiles: the slices never share a tile, so each K element is
  // summed exactly once; the last slices may be empty (their partial tile is zero).
  // With K groups (unbatched) the cluster's z is its group: slice gz.split of group g is slice g * splits + gz.split.
  const int splits = gz.splits;
  const bool kg_deferred = (k_groups & kKgDeferred) != 0;
  k_groups &= kKgGroupsMask;
  const int group = k_groups > 1 ? gz.outer : 0, pieces = splits * k_groups;
  const int x3_blocks = W::kX3 ? (K + W::BK - 1) / W::BK : 0;  // k-blocks of one product (3xTF32: three of them)
  // a batched split product: the matrix of A's and B's planes (and exponents), flat over the levels each varies on
  const int x3_a = x3_matrix(gz, batch_inner, tma_levels & kLevelAOuter, tma_levels & kLevelAInner);
  const int x3_b = x3_matrix(gz, batch_inner, tma_levels & kLevelBOuter, tma_levels & kLevelBInner);
  const int k_tiles = W::kX3 ? 3 * x3_blocks : (K + W::BK - 1) / W::BK;
  const int per = (k_tiles + pieces - 1) / pieces;
  const int kt0 = min(k_tiles, (group * splits + gz.split) * per);
  const int nk = min(k_tiles, kt0 + per) - kt0;

  if (wg == 0) {
    if constexpr (W::kConsumers > 1 && W::kOcc == 1) hg90::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      // B is streamed where one CTA of M reads each tile of it, or two and B fits in L2 (64 MiB: H100 50 MB,
      // H200 60 MB): its lines are evicted first, so that they do not push out (or make write back) other
      // lines; with two CTAs of M and a B beyond L2 the second reader would miss (docs/dev/code_measurements.md,
      // "B streamed"). (A multicast pair reads its B tile once.)
      const int b_readers = static_cast<int>(gridDim.y) / mc;
      const bool b_in_l2 = static_cast<long long>(N) * K * sizeof(T) <= (64ll << 20);
      const uint64_t b_policy = hg::l2_policy(b_readers == 1 || (b_readers == 2 && b_in_l2));
      if constexpr (W::kX3) {
        produce<W, false>(tmA, tmB, sA, sB, full, empty, nk, kt0, m0, n0, n0 + BN / 2, x3_a, 0, x3_b, 0, b_policy,
                          x3_blocks);
      } else if (tma_levels & kRank4Maps) {
        const int ai = tma_levels & kLevelAInner ? gz.inner : 0, ao = tma_levels & kLevelAOuter ? gz.outer : 0;
        const int bi = tma_levels & kLevelBInner ? gz.inner : 0, bo = tma_levels & kLevelBOuter ? gz.outer : 0;
        produce<W, true>(tmA, tmB, sA, sB, full, empty, nk, kt0, m0, n0, swiglu ? N + n0 : n0 + BN / 2, ai, ao, bi,
                         bo, b_policy);
      } else {
        produce<W, false>(tmA, tmB, sA, sB, full, empty, nk, kt0, m0, n0, swiglu ? N + n0 : n0 + BN / 2, 0, 0, 0, 0,
                          b_policy, 0, static_cast<int>(hgu::cluster_ctarank()));
      }
    }
    // The producer takes part in the cluster barriers only: the epilogue code lives in the consumer
    // branch so that ptxas allocates it under the consumers' register budget, not the producer's 40
    // (after the branches join, every reduction wider than 2 loads spilled).
    if (splits > 1) {
      hgu::cluster_sync();
      hgu::cluster_sync();
    } else if constexpr (mc > 1) {
      hgu::cluster_sync();  // the consumers' last one
    }
  } else {
    if constexpr (W::kConsumers > 1 && W::kOcc == 1) hg90::setmaxnreg_inc<kConsumerRegs>();
    // rows [64 cw, 64 cw + 64) of the tile; through a shuffle, provably warp-uniform (the k-loop's descriptors then
    // stay in uniform registers)
    const int cw = __shfl_sync(0xffffffffu, wg, 0) - 1;
    const int tid = threadIdx.x % 128;
    float d[W::kAcc];
#pragma unroll
    for (int i = 0; i < W::kAcc; ++i) d[i] = 0.f;  // an empty K slice still contributes its zeros
    int stage = 0, prev = -1;
    uint32_t phase = 0;
    // Free a stage: one arrival per consumer warpgroup on each CTA of the pair's copy of its barrier (threads
    // 0 .. mc - 1 in parallel), as sm90_gemm's release does for its clusters
    auto release = [&](int s) {
      if constexpr (mc > 1) {
        if (tid < mc) hg90::mbar_arrive_cluster(&empty[s], static_cast<uint32_t>(tid));
      } else if (tid == 0) {
        hg90::mbar_arrive(&empty[s]);
      }
    };
    if constexpr (W::kX3) {
      // kPromote k-blocks' products, summed in the tensor cores from zero. The second consumer's groups are
      // offset by half a group, so that the two never drain the tensor cores' queue at once.
      float t[W::kAcc];
      const int offset = cw * (W::kPromote / 2);
#pragma unroll 1
      for (int kb = 0; kb < nk; ++kb) {
        const int g = (kb + offset) % W::kPromote;  // this k-block's place in its group
        hg90::mbar_wait(&full[stage], phase);
        hg90::wgmma_fence();
        hg90::wgmma_kblock<T, false, false, W::BK>(t, smem_u32(sA + stage * W::kABytes) + cw * 64 * 128,
                                                   smem_u32(sB + stage * W::kBBytes), g != 0 && kb != 0);
        hg90::wgmma_commit();
        hg90::wgmma_wait<1>();  // the k-block before this one has finished reading its stage
        if (prev >= 0 && tid == 0) hg90::mbar_arrive(&empty[prev]);
        prev = stage;
        if (g == W::kPromote - 1 || kb == nk - 1) {
          hg90::wgmma_wait<0>();
#pragma unroll
          for (int i = 0; i < W::kAcc; ++i) hg90::fence_regs(t[i]);
          if (tid == 0) hg90::mbar_arrive(&empty[stage]);
          prev = -1;
#pragma unroll
          for (int i = 0; i < W::kAcc; ++i) d[i] += t[i];  // round to nearest, here
        }
        if (++stage == W::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    } else if constexpr (W::kX3Smem) {
      // Each k-block: its stage's residuals written by all consumers (a named barrier: B's rows are shared) while
      // the k-block before runs in the tensor cores; then that k-block's sums, waited for, join the accumulators
      // (round to nearest), and lo(a) hi(b) + hi(a) lo(b) + hi(a) hi(b) of this one are issued into t from zero.
      // (Reading t while any product is in flight would make ptxas serialise every wgmma.)
      float t[W::kAcc];
      constexpr int kLo = W::kRingBytes;  // a tile's residuals, past the tile
      auto retire = [&]() {  // the k-block in flight has finished: its stage is free, its sums join the accumulators
        hg90::wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < W::kAcc; ++i) hg90::fence_regs(t[i]);
        if (tid == 0) hg90::mbar_arrive(&empty[prev]);
#pragma unroll
        for (int i = 0; i < W::kAcc; ++i) d[i] += t[i];
      };
#pragma unroll 1
      for (int kb = 0; kb < nk; ++kb) {
        hg90::mbar_wait(&full[stage], phase);
        const uint8_t* a = sA + stage * W::kABytes;
        uint8_t* b = sB + stage * W::kBBytes;
        split_stage_tf32<W>(a, b, threadIdx.x - 128);
        hg90::named_bar_sync(1, 128 * W::kConsumers);
        if (kb > 0) retire();
        const uint32_t ah = smem_u32(a) + cw * 64 * 128, bh = smem_u32(b);
        hg90::wgmma_fence();
        hg90::wgmma_kblock<T, false, false, W::BK>(t, ah + kLo, bh, false);
        hg90::wgmma_kblock<T, false, false, W::BK>(t, ah, bh + kLo, true);
        hg90::wgmma_kblock<T, false, false, W::BK>(t, ah, bh, true);
        hg90::wgmma_commit();
        prev = stage;
        if (++stage == W::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
      if (nk > 0) retire();
    } else {
      // stage 0's descriptors of this consumer's A rows and of B; a stage's are one add away
      const uint64_t da0 = hg90::kblock_desc<false>(smem_u32(sA) + cw * 64 * 128);
      const uint64_t db0 = hg90::kblock_desc<W::kNN>(smem_u32(sB));
      for (int kb = 0; kb < nk; ++kb) {
        hg90::mbar_wait(&full[stage], phase);
        hg90::wgmma_fence();
        hg90::wgmma_kblock_desc<T, false, W::kNN, W::BK>(d, hg90::desc_advance(da0, stage * W::kABytes),
                                                         hg90::desc_advance(db0, stage * W::kBBytes), true);
        hg90::wgmma_commit();
        hg90::wgmma_wait<1>();  // one k-block in flight; the one before it has finished reading its stage
        if (prev >= 0) release(prev);
        prev = stage;
        if (++stage == W::kStages) {
          stage = 0;
          phase ^= 1;
        }
      }
    }
    hg90::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < W::kAcc; ++i) hg90::fence_regs(d[i]);
    if constexpr (W::kX3Scaled)
      unscale_x3<W>(d, a_shift + static_cast<long long>(x3_a) * M, b_shift + static_cast<long long>(x3_b) * N, M, N,
                    m0 + cw * 64, n0, tid);
    // Every consumer must be done reading the ring before it becomes the partial (or staged) tile.
    hg90::named_bar_sync(1, 128 * W::kConsumers);
    if constexpr (sizeof(Out) == 2 && BN >= 16) {  // (stmatrix x4: two 8-column blocks at a time)
      Out* Cb = C + hgu::batch_offset(hgu::grid_z(batch_inner), bsc_o, bsc_i);
      if (staged_store_ok<W>(Cb, pieces, N, ldc_r, ldc_c, beta_bits, epi, scale_bits)) {
        store_staged<W>(d, smem + cw * W::kStagedBytes, Cb, M, N, ldc_r, m0 + cw * 64, n0, __int_as_float(alpha_bits),
                        cw, tid);
        if constexpr (mc > 1) hgu::cluster_sync();  // the peer may still arrive on this CTA's barriers
        return;
      }
    }
    // wgmma m64nNk16 accumulator layout (warp w, lane l): d[4j + 2h + e] is row 16w + 8h + l/4,
    // column 8j + 2(l%4) + e.
    float* red = reinterpret_cast<float*>(smem);
    const int warp = tid / 32, lane = tid % 32;
    const int row = cw * 64 + warp * 16 + lane / 4, col = 2 * (lane % 4);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        *reinterpret_cast<float2*>(red + (row + 8 * h) * W::kRedStride + col + 8 * j) =
            make_float2(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
    uint32_t rank = 0;
    if (splits > 1) {
      rank = hgu::cluster_ctarank();
      hgu::cluster_sync();  // all partial tiles of the cluster are written
    } else {
      hg90::named_bar_sync(1, 128 * W::kConsumers);  // this CTA's partial tile is written
    }
    // C's batch offset is taken here: values held across the main loop cost the consumers registers
    const hge::Epilogue<Out> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
    reduce_store_wide<W>(smem, splits, rank, threadIdx.x - 128,
                         C + hgu::batch_offset(hgu::grid_z(batch_inner), bsc_o, bsc_i), M, N, m0, n0, ldc_r, ldc_c, ep,
                         KGroups{work, k_groups, group, static_cast<int>(blockIdx.y * gridDim.x + blockIdx.x),
                                 kg_deferred, M, N, m0, n0});
    // peers may still be reading this CTA's tile (split-K) or arriving on its barriers (the multicast pair)
    if (splits > 1 || mc > 1) hgu::cluster_sync();
  }
}

// matmul_kgroups_sum: C = epilogue(the sum of the deferred K groups' planes) (see KGroups). A CTA: 32 output quads (a
// tile of 2 rows x 64 columns), each summed by 8 warps over every 8th group, then by warp 0 over the 8 sums in
// order: the same bits whatever the schedule. The loads of a warp cover 512 contiguous bytes of 2 rows.
constexpr int kSumRows = 2, kSumCols = 64, kSumSlices = 8;
template <typename T>
__device__ __forceinline__ void kgroups_sum(const float* __restrict__ work, T* C, int M, int N, int ldc_r, int ldc_c,
                                            int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,
                                            int scale_bits, int groups) {
  static_assert(kSumRows * kSumCols / 4 == 32, "a warp holds the CTA's quads");
  __shared__ float4 sums[kSumSlices][32];
  hg::griddep_wait();  // launched as the GEMM's programmatic dependent: its planes are written
  const int lane = threadIdx.x % 32, slice = threadIdx.x / 32;
  const int r = blockIdx.y * kSumRows + lane / (kSumCols / 4), c = blockIdx.x * kSumCols + lane % (kSumCols / 4) * 4;
  const bool inside = r < M && c < N;
  const int ldw = kg_pitch(N);
  const long long plane = static_cast<long long>(M) * ldw;
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
  if (inside) {
    const float* p = work + static_cast<long long>(r) * ldw + c;
#pragma unroll 4
    for (int g = slice; g < groups; g += kSumSlices) {
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p + g * plane));
      s.x += v.x;
      s.y += v.y;
      s.z += v.z;
      s.w += v.w;
    }
  }
  sums[slice][lane] = s;
  __syncthreads();
  if (slice != 0 || !inside) return;
#pragma unroll
  for (int k = 1; k < kSumSlices; ++k) {
    const float4 v = sums[k][lane];
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
  }
  const hge::Epilogue<T> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
  float x[4] = {ep.value(s.x, r, c), ep.value(s.y, r, c + 1), ep.value(s.z, r, c + 2), ep.value(s.w, r, c + 3)};
  hgu::store4_values<T>(C, static_cast<long long>(r) * ldc_r + static_cast<long long>(c) * ldc_c, ldc_c, N - c, x,
                        ep.beta);
}

}  // namespace

#define MATMUL_KGROUPS_SUM(NAME, T)                                                                                   \
  extern "C" __global__ void __launch_bounds__(32 * kSumSlices, 1)                                                 \
      NAME(const float* work, T* C, int M, int N, int ldc_r, int ldc_c, int alpha_bits, int beta_bits,              \
           const T* bias, int bias_stride, int epi, int scale_bits, int k_groups) {                                 \
    kgroups_sum<T>(work, C, M, N, ldc_r, ldc_c, alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits, k_groups); \
  }

// One kernel of the gemm_strided_wgmma ABI (matmul_sm90.toml) over the configuration CFG (a WCfg)
#define MATMUL_WGMMA_KERNEL(SYM, CFG)                                                                                \
  extern "C" __global__ void __launch_bounds__(CFG::kThreads, CFG::kOcc)                                          \
      SYM(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, CFG::Out* C, int M,    \
          int N, int K, int ldc_r, int ldc_c, int alpha_bits, int beta_bits, const CFG::Out* bias, int bias_stride, \
          int epi, int scale_bits, int batch_inner, int tma_levels, long long bsc_o, long long bsc_i, float* work,  \
          int k_groups) {                                                                                           \
    wgmma_splitk<CFG>(tmA, tmB, C, M, N, K, ldc_r, ldc_c, alpha_bits, beta_bits, bias, bias_stride, epi,           \
                      scale_bits, batch_inner, tma_levels, bsc_o, bsc_i, work, k_groups);                           \
  }                                                                                                                 \
  HG_EXPORT_DSMEM(SYM, CFG::kSmemBytes)
#define MATMUL_WGMMA_SYM_OCC(SYM, T, BM, BN, NN, STAGES, MC, OCC) \
  using SYM##_cfg = WCfg<T, BM, BN, NN, STAGES, 0, MC, OCC>;     \
  MATMUL_WGMMA_KERNEL(SYM, SYM##_cfg)
// The symbols and their knobs are declared in matmul_sm90.toml, whose `instance` lines the build generates
// (matmul_sm90.instances.cuh, included at the end): `mc` 2 multicasts the B tile to a pair of CTAs along M, `occ` 2
// runs two CTAs an SM, each with half the stages. The rings: 4 stages of 48 KB at BM = 128, 5 of 40 KB at BM = 64
// (as deep as 227 KB allows); the narrower tiles keep a ~192 KB ring; the decode tiles (BN = 32, 16, 8) 11-13
// stages of 20-17 KB, most of it A's weights in flight. TF32 (fp32 operands, tn only: tf32 wgmma
// reads K-major operands) takes the same stage bytes (a k-block of 32 fp32 is one 128-byte row, as 64 fp16 are).
// 3xTF32 from the fp32 operands as they are (role gemm_strided_wgmma, acc f32: fp32 accuracy): the residuals made in
// shared memory (split_stage_tf32), whose second ring halves the stages of the TF32 kernels' ~192 KB; nn takes B
// as K x N (MN-major chunks), transposed into the stage's K-major tile by the split.
#define MATMUL_TF32X3S(NAME, BM, BN, NN, STAGES)                         \
  using NAME##_cfg = WCfg<float, BM, BN, NN, STAGES, 0, 1, 1, true>; \
  MATMUL_WGMMA_KERNEL(NAME, NAME##_cfg)
// 3xTF32 (role gemm_tf32x3): A and B as matmul_split_tf32's planes, each k-block's products added in fp32 FMA.
#define MATMUL_TF32X3(NAME, BM, BN, STAGES, PROMOTE)                                                                \
  extern "C" __global__ void __launch_bounds__(WCfg<float, BM, BN, false, STAGES, PROMOTE>::kThreads, 1)         \
      NAME(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, float* C, int M,    \
           int N, int K, int ldc_r, int ldc_c, int alpha_bits, int beta_bits, const float* bias, int bias_stride, \
           int epi, int scale_bits) {                                                                           \
    wgmma_splitk<WCfg<float, BM, BN, false, STAGES, PROMOTE>>(tmA, tmB, C, M, N, K, ldc_r, ldc_c, alpha_bits,    \
                                                           beta_bits, bias, bias_stride, epi, scale_bits, 1, 0, 0, \
                                                           0, nullptr, 1);                                      \
  }                                                                                                               \
  HG_EXPORT_DSMEM(NAME, WCfg<float, BM, BN, false, STAGES, PROMOTE>::kSmemBytes)
// The 3xTF32 products promote their partial sums every 4 k-blocks (128 of K; the toml's instance knob): as
// fast as rarer promotion, as accurate as every 3 (docs/dev/code_measurements.md, "3xTF32 promotion").
// 3xFP16 (role gemm_f16x3): A and B as matmul_split_f16x3's scaled fp16 planes and their rows' exponents, C fp32.
#define MATMUL_F16X3(NAME, BM, BN, STAGES, PROMOTE)                                                                  \
  extern "C" __global__ void __launch_bounds__(WCfg<__half, BM, BN, false, STAGES, PROMOTE>::kThreads, 1)         \
      NAME(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB, float* C, int M,      \
           int N, int K, int ldc_r, int ldc_c, int alpha_bits, int beta_bits, const float* bias, int bias_stride,   \
           int epi, int scale_bits, int batch_inner, int tma_levels, long long bsc_o, long long bsc_i,             \
           const int* a_shift, const int* b_shift) {                                                               \
    wgmma_splitk<WCfg<__half, BM, BN, false, STAGES, PROMOTE>>(tmA, tmB, C, M, N, K, ldc_r, ldc_c, alpha_bits,     \
                                                             beta_bits, bias, bias_stride, epi, scale_bits,         \
                                                             batch_inner, tma_levels, bsc_o, bsc_i, nullptr, 1,     \
                                                             a_shift, b_shift);                                     \
  }                                                                                                                 \
  HG_EXPORT_DSMEM(NAME, WCfg<__half, BM, BN, false, STAGES, PROMOTE>::kSmemBytes)
#include "matmul_sm90.instances.cuh"
