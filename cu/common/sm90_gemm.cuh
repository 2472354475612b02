// The persistent Hopper GEMM of the hgemm_sm90 family (cu/hgemm_sm90.cu, whose banner gives the design
// and its reasons), shared so that other families can instantiate it: the knobs and the rungs of the
// ladder, Config (shared-memory layout), TileSched (tile order), the epilogues and sm90_gemm (producer +
// consumer warpgroups). A family declares its symbols with a rung: sm90_gemm<Config<Rung>>(...).
// The kFused knob (rung Fused, cu/matmul_sm90_fused.cu) adds the fused epilogue (cu/common/epilogue.cuh), a
// batch of matrices in the persistent tile order over rank-4 tensor maps, SwiGLU tiles and grouped GEMM
// (mixture of experts: ragged row groups read from a device vector); with it off, every catalogue kernel
// compiles to the SASS it had before the knob existed.
#pragma once
#include <cuda.h>  // CUtensorMap (128-byte, 64-byte aligned opaque struct)
#include <type_traits>
#include "epilogue.cuh"
#include "ptx.cuh"  // hg::l2_policy
#include "sm90.cuh"

namespace hg90g {

using hg90::smem_u32;

constexpr int BM = 128;
constexpr int BN = 256;
constexpr int BK = 64;
constexpr int kThreads = 384;
constexpr int kConsumers = 2;          // consumer warpgroups
constexpr int kWgRows = BM / kConsumers;  // 64 rows of the tile per consumer = one wgmma M
constexpr int kProducerRegs = 40;      // the producer needs a handful of registers ...
constexpr int kConsumerRegs = 232;     // ... so the consumers get 128 accumulators + addressing
static_assert(kProducerRegs * 128 + kConsumerRegs * 256 <= 65536, "register file over-subscribed");
static_assert(BK * 2 == 128, "BK must span exactly one 128-byte swizzle row");
static_assert(kWgRows == 64, "one wgmma m64 per consumer warpgroup");
static_assert(kThreads == 128 * (1 + kConsumers), "one producer warpgroup and kConsumers consumer warpgroups");

// Rows of M (in elements) covered by one group of the grouped tile order: consecutive tile indices
// walk down a 2048-row strip before moving to the next 256-column strip, so the ~132 tiles in
// flight share A rows and B columns in L2.
constexpr int kGroupRows = 2048;

// The grouped GEMM (kFused, group_mode != 0; see kGroupContiguous below): the most groups its shared-memory
// table holds, one int32 inclusive prefix sum per group in the dynamic shared memory the fused kernel has
// left under the 227 KB per block (232448 bytes less the ring, staging, barriers, stage tile indices and
// alignment slack: see Config). The kernel traps on a launch with more; the runtime refuses them before.
constexpr int kMaxGroups = 492;

// One kernel's compile-time shape. Both consumers work on the same 128 x 256 tile (rows 0-63 and
// 64-127, "cooperative") and read the same B stage, so a stage is 128 + 256 rows of 64 K: 48 KB of
// TMA fill per 4.2 MFLOP, and 2 x 4 x (2 + 8) KB of wgmma operand reads from shared memory. That is
// the least shared-memory traffic per flop that fp32 accumulators allow (one m64n256k16 per
// warpgroup and k16), which matters because the chip runs at its power cap from 4096^3 up.
// Not ping-pong (each consumer owning whole 64 x 256 tiles): that needs 1.7x the smem fill per flop and
// ran slower. Nor consumers staggered by 1-2 k-blocks so that each one's epilogue overlaps the other's
// wgmma: the tile-boundary bubble is not where the time goes (docs/dev/tuning_log.md, "hgemm_sm90").
//
// A kernel's knobs, with the values of the plainest one (hgemm_sm90_wgmma_tma_ws_tn). A kernel is a
// struct deriving from the one it extends and naming the knobs it changes; Nn<>, Bf16<> and Stages<>
// below are the layout, dtype and stage-count axes.
struct Knobs {
  using T = __half;                      // input and output dtype (__half or __nv_bfloat16)
  static constexpr bool kAT = false;     // A column-major: BM/64 boxes of 64 K rows x 64 M columns
  static constexpr bool kNN = false;     // B K x N row-major (else N x K: TN)
  static constexpr int kStages = 4;      // TMA ring stages
  static constexpr int kBN = BN;         // tile columns: BN, or 192 (m64n192k16) for the plain persistent kernel
  static constexpr int kClusterM = 1;    // CTAs per cluster along M, sharing (multicasting) B
  static constexpr bool kPersistent = false;  // persistent grid walking tiles, else one tile per CTA
  static constexpr bool kTmaStore = false;    // stmatrix + TMA-store epilogue, else direct stores
  // The matmul family's fused GEMM (cu/matmul_sm90_fused.cu; persistent, TMA store, half-tile staging, no
  // cluster, A row-major): hge::Epilogue applied to the accumulators (bias, activation, scale,
  // beta * C_old read through a pointer), batch_count matrices over rank-4 tensor maps, SwiGLU tiles.
  static constexpr bool kFused = false;
  // kFused + stream-K (StreamK below): the last partial wave's tiles cut along K, one piece per CTA, partial
  // tiles summed through a workspace (ptr:work) by the CTA holding each tile's k-block 0.
  static constexpr bool kStreamK = false;
  // kFused, not stream-K: the tiles claimed from a counter (TileQueue below; the `queue` variant, ptr:work)
  static constexpr bool kQueue = false;
};
template <class Rung>
struct Nn : Rung {
  static constexpr bool kNN = true;
};
template <class Rung>
struct Bf16 : Rung {
  using T = __nv_bfloat16;
};
template <class Rung, int S>
struct Stages : Rung {
  static constexpr int kStages = S;
};
template <class Rung, int N>
struct Bn : Rung {
  static constexpr int kBN = N;
};

// The knobs and what derives from them: shared-memory layout and barrier counts.
template <class Rung>
struct Config : Rung {
  using Rung::kStages, Rung::kClusterM, Rung::kPersistent, Rung::kTmaStore;
  static constexpr int kBN = Rung::kBN;
  static constexpr int kABytes = BM * BK * 2;                 // 16 KB per stage
  static constexpr int kBBytes = kBN * BK * 2;                // 32 KB per stage (24 at kBN = 192)
  static constexpr int kStageBytes = kABytes + kBBytes;       // TMA bytes each full barrier expects
  // Output staging for the TMA-store epilogue. With 3 stages the whole 128 x 256 fp16 tile fits
  // (64 KB); a 4th stage leaves room for half of it only (32 KB), stored in two passes of 128
  // columns per consumer. A 128 x 192 tile is staged whole (48 KB; half of it is no whole 64-column box).
  static constexpr int kCStageCols = kStages >= 4 && (kBN / 2) % 64 == 0 ? kBN / 2 : kBN;
  static constexpr int kCBytes = kTmaStore ? BM * kCStageCols * 2 : 0;
  static constexpr int kBarOffset = kStages * kStageBytes + kCBytes;
  // kFused: one more barrier per consumer after full[] and empty[] (its C_old loads into its staging buffer),
  // then the grouped GEMM's table of per-group tile prefix sums (kMaxGroups ints).
  static constexpr int kColdBars = Rung::kFused ? kConsumers : 0;
  static constexpr int kGroupOffset = kBarOffset + (2 * kStages + kColdBars) * 8;
  static constexpr int kGroupBytes = Rung::kFused ? kMaxGroups * 4 : 0;
  // The slack for aligning the dynamic shared memory up to 1024 bytes: it is 16-byte aligned (PTX
  // `.extern .shared .align 16`), so 1008 bytes do; kFused counts on that (its two barriers take the other 16).
  static constexpr int kSlack = Rung::kFused ? 1008 : 1024;
  // The fused kernels' half tiles (half_tile; toml half_tiles), not in stream-K pieces, which compute a tile whole
  // (its partials are summed over all BN columns)
  static constexpr bool kHalfTiles = Rung::kFused && !Rung::kStreamK;
  // kFused: the tile index of each stage (kQueue)
  static constexpr int kStageTileOffset = kGroupOffset + kGroupBytes;
  static constexpr int kStageTileBytes = Rung::kFused ? kStages * 4 : 0;
  static constexpr int kSmemBytes = kStageTileOffset + kStageTileBytes + kSlack;  // + barriers, (table), slack
  // Arrivals that free a stage: every consumer that reads it, in every CTA that it is multicast to.
  static constexpr int kEmptyArrivals = kConsumers * kClusterM;
  // B rows (TN: N rows of 64 K; NN: 64-column chunks) loaded by this CTA; the peer loads the rest.
  static constexpr int kBSlice = kBN / kClusterM;
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit");
  static_assert(kStages >= 2, "the TMA ring needs at least two stages");
  static_assert(kClusterM == 1 || kClusterM == 2, "cluster of 1 or 2 CTAs along M");
  static_assert(!(kClusterM > 1 && !kPersistent), "clusters only with the persistent schedule");
  static_assert(!Rung::kStreamK || Rung::kFused, "stream-K: the fused GEMM's epilogue and batch");
  static_assert(kBN == BN || (kBN == 192 && kPersistent && kTmaStore && kClusterM == 1 && !Rung::kFused),
                "other tile widths: the plain persistent kernel (m64n192k16)");
  static_assert(!Rung::kFused || (kPersistent && kTmaStore && kClusterM == 1 && !Rung::kAT && kCStageCols == BN / 2),
                "the fused GEMM: persistent, TMA store with half-tile staging (one SwiGLU tile), no cluster, A row-major");
};

// ---- the fused GEMM's run-time parameters (kFused; cu/CONTRACT.md, role gemm_fused_wgmma) ----
// tma_levels bits: which batch levels each rank-4 map has (a level a map lacks takes coordinate 0).
constexpr int kLevelAInner = 1, kLevelAOuter = 2, kLevelBInner = 4, kLevelBOuter = 8;
constexpr int kRank4Maps = 16;  // batched launch: A, B and C are rank-4 maps (cols, rows, inner, outer)
constexpr int kLevelCInner = 32, kLevelCOuter = 64;
// C has no tensor map (rows, base or width off TMA's 16-byte rules): the fused kernels store every tile through x.C
// (the plain and bias-only epilogues' staged passes by StagedStore, the others' register pairs as the partial tiles'
// path does) and read C_old through it; tmap:C is never touched.
constexpr int kCNoMap = 128;
// SwiGLU: a tile covers this many output columns, its B stage holding their gate and up rows/columns.
constexpr int kSwiGLUCols = BN / 2;
// Grouped GEMM (i32:group_mode, mixture of experts): the matrices are the `groups` experts, matrix e having
// only the rows of its group (a device int32 vector `group`, read at kernel start and per tile):
//  kGroupContiguous: group = ends[groups] (torch._grouped_mm's offsets): expert e owns rows
//    [clamp(ends[e-1], 0, M), clamp(ends[e], that, M)) of A and C (ends[-1] = 0), B is the expert's matrix;
//  kGroupMasked (any other non-zero mode): group = counts[groups]: rows [0, clamp(counts[e], 0, M)) of
//    matrix e of the batched A, B and C.
// Tiles: ceil(rows / BM) x tiles_n per group, the groups one after another, each in the grouped order (strips
// of up to kGroupRows inside the group); rows at or past a group's end are never stored.
constexpr int kGroupContiguous = 1, kGroupMasked = 2;

template <typename T>
struct FusedArgs {
  // C (the matrix tmap:C stores): read for beta * C_old where beta != 0, and written directly for a
  // grouped tile whose rows cross its group's end. Row stride ldc_r, column stride 1, batch strides
  // bsc_o/bsc_i.
  T* C;
  int ldc_r;
  int alpha_bits, beta_bits;
  const T* bias;
  int bias_stride, epi, scale_bits;
  int batch_count, batch_inner, tma_levels;
  long long bsc_o, bsc_i;
  const int* group;  // grouped GEMM: ends or counts, `groups` of them (group_mode 0: not grouped, unread)
  int group_mode, groups;
  float* work = nullptr;  // kStreamK: the workspace (StreamK) ...; kQueue: the tile counter (TileQueue) or null
  int sk_tiles = 0;       // ... and how many of the last tiles are stream-K tiles
};
struct NoFused {};  // the catalogue kernels' (none)

// Rows [start, end) of group e (grouped GEMM), clamped so that no table makes them leave [0, M): contiguous
// [clamp(ends[e-1], 0, M), clamp(ends[e], start, M)) of A and C, masked [0, clamp(counts[e], 0, M)) of
// matrix e. Read-only loads of the (L2-resident) group vector.
__device__ __forceinline__ void group_rows(const int* group, int mode, int e, int M, int& start, int& end) {
  if (mode == kGroupContiguous) {
    start = e > 0 ? min(max(__ldg(group + e - 1), 0), M) : 0;
    end = min(max(__ldg(group + e), start), M);
  } else {
    start = 0;
    end = min(max(__ldg(group + e), 0), M);
  }
}

// The grouped GEMM's table, once per CTA at kernel start by all kThreads threads: tab[e] = the m-tiles
// (ceil(rows / BM)) of groups 0..e, an inclusive block-wide scan of E <= kMaxGroups counts in chunks of
// kThreads (a warp scan by shuffles, then one over the warps' sums in `scratch`, kThreads / 32 ints), each
// thread loading its group's bounds: E independent loads, not a chain. Ends with __syncthreads (the table
// is visible to every thread).
__device__ __forceinline__ void group_scan(int* tab, int* scratch, const int* group, int mode, int E, int M) {
  constexpr int kWarps = kThreads / 32;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int carry = 0;
  for (int base = 0; base < E; base += kThreads) {
    const int e = base + tid;
    int v = 0;
    if (e < E) {
      int start, end;
      group_rows(group, mode, e, M, start, end);
      v = (end - start) / BM + ((end - start) % BM != 0);  // (no overflow at M near 2^31)
    }
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, v, o);
      if (lane >= o) v += y;
    }
    if (lane == 31) scratch[warp] = v;
    __syncthreads();
    if (warp == 0) {
      int w = lane < kWarps ? scratch[lane] : 0;
#pragma unroll
      for (int o = 1; o < kWarps; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, w, o);
        if (lane >= o) w += y;
      }
      if (lane < kWarps) scratch[lane] = w;
    }
    __syncthreads();
    if (e < E) tab[e] = carry + v + (warp > 0 ? scratch[warp - 1] : 0);
    carry += scratch[kWarps - 1];
    hg90::fence_proxy_async_smem();  // (scratch is the staging buffer, later written by TMA: cold_load)
    __syncthreads();  // scratch is rewritten by the next chunk; the last one publishes tab
  }
}

// Tile order. Persistent: cluster-tile t = clusterId + i * numClusters, grouped along M.
// Non-persistent ("tiles" grid): one tile, blockIdx.x walks N and blockIdx.y walks M.
// kBatched (the fused GEMM): the tiles of batch_count matrices, tile t in matrix t / (tiles per matrix),
// each matrix in the grouped order; a tile covers `cols` output columns (BN, or kSwiGLUCols).
// Grouped GEMM (group_mode != 0): tab[E-1] x tiles_n tiles, group e's (tab[e] - tab[e-1]) x tiles_n of them
// after those of the groups before it (a binary search of the shared table, empty groups never matching),
// each group in the grouped order of its own m-tiles. next() then gives the tile's first row (contiguous: in
// A and C; masked: in matrix e), the batch coordinates of matrix e and row_end, the group's end (rows at or
// past it are not stored); without groups row_end = M.
template <int kClusterM, bool kPersistent, bool kBatched = false, int kBN = BN>
struct TileSched {
  int tiles_m, tiles_n, total, next_t, stride;
  uint32_t rank;
  int cols, per_matrix, batch_inner;  // kBatched only
  int row_end, M_, group_mode, groups;  // kBatched only: grouped GEMM
  const int* tab;                       // (shared memory)
  const int* group_vec;                 // the group vector (FusedArgs::group)
  __device__ TileSched(int M, int N, int cols_, int batch_count, int batch_inner_, int group_mode_ = 0,
                       const int* group_ = nullptr, int groups_ = 0, const int* tab_ = nullptr) {
    static_assert(kBatched && kPersistent && kClusterM == 1, "batched tile order: persistent, no cluster");
    cols = cols_;
    batch_inner = batch_inner_;
    tiles_m = (M + BM - 1) / BM;
    tiles_n = (N + cols - 1) / cols;
    per_matrix = tiles_m * tiles_n;
    total = per_matrix * batch_count;
    M_ = row_end = M;
    group_mode = group_mode_;
    group_vec = group_;
    groups = groups_;
    tab = tab_;
    if (group_mode != 0) {  // all groups' m-tiles, tab[groups - 1] of them
      tiles_m = groups > 0 ? tab[groups - 1] : 0;
      per_matrix = total = tiles_m * tiles_n;
    }
    rank = 0;
    next_t = static_cast<int>(blockIdx.x);
    stride = static_cast<int>(gridDim.x);
  }
  __device__ TileSched(int M, int N) {
    tiles_m = (M + BM * kClusterM - 1) / (BM * kClusterM);
    tiles_n = (N + kBN - 1) / kBN;
    total = tiles_m * tiles_n;
    rank = kClusterM > 1 ? hg90::cluster_ctarank() : 0;
    next_t = kPersistent ? static_cast<int>(blockIdx.x) / kClusterM : 0;
    stride = kPersistent ? static_cast<int>(gridDim.x) / kClusterM : 1;
    if (!kPersistent) total = 1;
  }
  __device__ bool next(int& m0, int& n0) {
    int outer, inner;
    return next(m0, n0, outer, inner);
  }
  // + the tile's matrix (outer, inner) = (b / batch_inner, b % batch_inner); 0 unless kBatched.
  __device__ bool next(int& m0, int& n0, int& outer, int& inner) {
    outer = inner = 0;
    if (next_t >= total) return false;
    at(next_t, m0, n0, outer, inner);
    next_t += stride;
    return true;
  }
  // Tile t's first row and column and its matrix (the stream-K schedule walks tiles by index too).
  __device__ __forceinline__ void at(int t, int& m0, int& n0, int& outer, int& inner) {
    if (kPersistent) {
      constexpr int group = kGroupRows / (BM * kClusterM);
      int b = 0, strip_m = tiles_m;  // the matrix, and the m-tiles its strips walk
      if constexpr (kBatched) {
        if (group_mode != 0) {
          // Grouped: the group b of tile t is the first whose tiles end past t (tab[b] * tiles_n > t), and its
          // strips stay inside it: strips across group ends split a wave's tiles over each small group's strip,
          // which then reads its A rows twice (docs/dev/code_measurements.md, "grouped strips").
          const int vt = t / tiles_n;
          int lo = 0, hi = groups - 1;
          while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (tab[mid] > vt)
              hi = mid;
            else
              lo = mid + 1;
          }
          b = lo;
          const int first = b > 0 ? tab[b - 1] : 0;
          strip_m = tab[b] - first;
          t -= first * tiles_n;
        } else {
          b = t / per_matrix;
          t -= b * per_matrix;
        }
      }
      const int per_group = group * tiles_n;
      const int first_m = (t / per_group) * group;
      const int gsz = min(strip_m - first_m, group);
      const int tm = first_m + (t % per_group) % gsz;
      const int tn = (t % per_group) / gsz;
      int row = 0;  // grouped: the group's first row
      if constexpr (kBatched) {
        if (group_mode != 0) group_rows(group_vec, group_mode, b, M_, row, row_end);
        outer = b / batch_inner;
        inner = b - outer * batch_inner;
      }
      m0 = row + (tm * kClusterM + static_cast<int>(rank)) * BM;
      n0 = tn * (kBatched ? cols : kBN);
    } else {
      m0 = blockIdx.y * BM;
      n0 = blockIdx.x * kBN;
    }
  }
};

// The tile queue of the fused GEMM's `queue` variant (kQueue): the producer alone decides the tile order, and writes
// each tile's index beside the ring stage of the tile's first k-block, where the consumers read it once that stage
// is full. (The plain variant's consumers walk the static order themselves: reading the index there slows static
// launches; docs/dev/code_measurements.md, "tile queue".)
// - Static (`work` null): the CTA's tiles blockIdx.x + i * gridDim.x, as TileSched::next gives them.
// - Dynamic (`work` given): the first tile blockIdx.x, each later one the next unclaimed tile, gridDim.x + an
//   atomicAdd on the int32 counter work[0]. With the static stride, CTAs that run slower fall behind the rest, and
//   over a long batched launch those far behind read operands that the output stream has pushed out of L2
//   (docs/dev/code_measurements.md, "tile queue"). Each claim is made a tile ahead, so that its round trip
//   overlaps the tile's loads. Every CTA with a first tile claims until a claim fails, so a launch makes exactly
//   `total` claims: the one that returns total - 1 is the last, and the CTA that made it sets the counter back to
//   zero for the next launch (the runtime zeroes it once, when it allocates it).
struct TileQueue {
  int* ctr;
  int total, cur, ahead;
  __device__ TileQueue(int* ctr_, int total_) : ctr(ctr_), total(total_), cur(static_cast<int>(blockIdx.x)) {
    ahead = claim();
  }
  // The tile after `cur` (none once cur is past the end: this CTA's last claim has failed). Nothing here waits for
  // the atomic's value: it is read a tile later.
  __device__ int claim() {
    if (cur >= total) return cur;
    if (ctr == nullptr) return cur + static_cast<int>(gridDim.x);
    return static_cast<int>(gridDim.x) + atomicAdd(ctr, 1);
  }
  // This CTA's next tile (false: none left).
  __device__ bool next(int& t) {
    t = cur;
    if (t >= total) return false;
    cur = ahead;
    if (ctr != nullptr && cur == static_cast<int>(gridDim.x) + total - 1) atomicExch(ctr, 0);  // the last claim
    ahead = claim();
    return true;
  }
};

// The queue's counter (the `queue` variant's `work`; null: the static order), null for every other kernel.
template <class K, class X>
__device__ __forceinline__ int* tile_queue_counter(const X& x) {
  if constexpr (K::kQueue)
    return reinterpret_cast<int*>(x.work);
  else
    return nullptr;
}

// ---- stream-K (kStreamK; cu/matmul_sm90_fused.cu's matmul_gemm_wgmma_streamk_*) ----
// Where a persistent grid's last wave of tiles would leave SMs idle (tiles % G of the G CTAs busy, or fewer
// tiles than CTAs), the last sk_tiles tiles are each cut along K into s = min(G / sk_tiles, nk) equal pieces,
// one per CTA: unit u = the piece u % s of tile u / s, run by CTA u, after the whole tiles before them (tile t
// by CTA t mod G, dp_tiles = tiles - sk_tiles a multiple of G). The pieces of one wave cover the same k-range
// of each tile at the same time, as whole tiles do, so the CTAs sharing an operand panel read it together from
// L2 (pieces at unrelated k offsets, as a plain even split of all k-blocks makes them, each read their panels
// from DRAM: 2-4x slower on the H100).
// With at most kSkSerialPieces pieces, piece 0 (k-block 0) is the tile's owner: it adds the other pieces' fp32
// partial tiles (CTAs u + 1 .. u + s - 1, which run no epilogue) to its accumulators, in order, and runs the
// epilogue. With more, one SM reading s - 1 partials one after another is what limits
// (docs/dev/code_measurements.md, "stream-K fix-up"), so every piece stores its partial and, once all have, sums
// its 1/s of the tile over them and stores that part of C through the epilogue (sk_reduce_store). Either way the
// order of the additions is fixed: results are bitwise repeatable.
// Every CTA signals what others wait for before it waits itself: no deadlock while every CTA is resident (grid
// <= SMs, one CTA per SM). The workspace: kSkFlagSlots int32 flags and counters, then one 64 x 256 fp32 partial
// per CTA and consumer warpgroup (slot 2c + cw), thread tid's float4 i at i * 128 + tid (each warp's stores one
// 512-byte run).
// - serial: CTA c's writer sets flag 2c + cw once its partial is in L2; the owner resets it once seen;
// - shared: stream-K tile st's consumer cw counts its pieces whose partial is stored at kSkCounters + 4 st + cw
//   and those whose share of C is stored at that + 2; the last of the latter resets both.
// Every launch leaves them as it found them: zero (the runtime zeroes the workspace once).
constexpr int kSkCounters = 1024;            // ints: first the flags, up to 512 CTAs x 2 consumers
constexpr int kSkFlagSlots = 2048;           // ... then the counters, 4 per stream-K tile (at most 256 of them)
constexpr int kSkPartFloats = kWgRows * BN;  // one consumer warpgroup's partial tile
constexpr int kSkSerialPieces = 4;           // the owner reads its peers' partials itself up to this many pieces
constexpr int kSkQuads = kSkPartFloats / 4;  // float4s of a partial

// The schedule's constants live in shared memory (the group table's room, which stream-K does not use), read
// at each piece: in registers they pushed the consumers (128 accumulators under 232 registers) into spills.
struct SkConfig {
  int nk, dp_tiles, splits, units;  // k-blocks per tile; whole tiles first; pieces per stream-K tile; pieces
};
__device__ __forceinline__ void sk_config(SkConfig* cfg, int total, int sk_tiles, int nk) {
  const int sk = min(max(sk_tiles, 1), total), G = static_cast<int>(gridDim.x);
  cfg->nk = nk;
  cfg->dp_tiles = total - sk;
  cfg->splits = max(min(G / sk, nk), 1);
  cfg->units = sk * cfg->splits;
}

// One register of state (the consumers have none to spare): cur, the next whole tile while below dp_tiles,
// then this CTA's piece (if it has one), then kDone.
struct StreamK {  // (cfg: the shared SkConfig, passed in, not held)
  static constexpr int kDone = 0x7fffffff;
  int cur;
  __device__ StreamK() : cur(static_cast<int>(blockIdx.x)) {}
  // This CTA's next piece: tile t, k-blocks [kb0, kb1). False when it has none left.
  __device__ __forceinline__ bool next(const volatile SkConfig* cfg, int& t, int& kb0, int& kb1) {
    const int nk = cfg->nk, dp_tiles = cfg->dp_tiles, c = static_cast<int>(blockIdx.x);
    if (cur < dp_tiles) {
      t = cur;
      kb0 = 0;
      kb1 = nk;
      cur += static_cast<int>(gridDim.x);
      return true;
    }
    if (cur == kDone || c >= cfg->units) return false;
    cur = kDone;
    const int s = cfg->splits, j = c % s;
    t = dp_tiles + c / s;
    kb0 = j * nk / s;  // (s x nk < 2^31: the runtime's bound)
    kb1 = (j + 1) * nk / s;
    return true;
  }
};

__device__ __forceinline__ int ld_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ float4* sk_part(float* work, int slot) {
  return reinterpret_cast<float4*>(work + kSkFlagSlots + static_cast<long long>(slot) * kSkPartFloats);
}

// Thread 0 of the warpgroup waits until *flag == value (then all 128 threads go on: named barrier 1 + cw).
__device__ __forceinline__ void sk_wait(const int* flag, int value, int cw, int tid) {
  if (tid == 0) {
    while (ld_acquire(flag) != value) {
    }
  }
  hg90::named_bar_sync(1 + cw, 128);
}

// Thread 0 adds 1 to *flag once all 128 threads' stores are in L2.
__device__ __forceinline__ void sk_signal(int* flag, int cw, int tid) {
  hg90::named_bar_sync(1 + cw, 128);
  if (tid == 0) {
    __threadfence();
    atomicAdd(flag, 1);
  }
}

// This warpgroup's accumulators into its slot (2 blockIdx.x + cw) of the workspace.
__device__ __forceinline__ void sk_store_partial(const float (&d)[128], float* work, int cw, int tid) {
  float4* part = sk_part(work, 2 * static_cast<int>(blockIdx.x) + cw);
#pragma unroll
  for (int i = 0; i < 32; ++i)
    __stcg(part + i * 128 + tid, make_float4(d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]));
}

// Adds the partial tile at `part` to this warpgroup's accumulators. Each thread copies its 32 float4 into
// shared memory with cp.async (all in flight at once, no registers: with 128 accumulators live, loads into
// registers went two at a time, a round trip to L2 each, and made the fix-up the largest cost of a short
// piece), then adds them from there. `buf`: this warpgroup's 64 KB of the TMA ring, idle by then (a CTA's
// piece is its last work: its producer loads nothing more).
__device__ __forceinline__ void sk_add(float (&d)[128], const float4* part, uint32_t buf, int tid) {
#pragma unroll
  for (int i = 0; i < 32; ++i) hg::cp_async_16(buf + (i * 128 + tid) * 16, part + i * 128 + tid);
  hg::cp_async_commit();
  hg::cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < 32; ++i) {  // (each thread reads back only what it copied)
    const uint4 v = hg::ld_shared_v4(buf + (i * 128 + tid) * 16);
    d[4 * i] += __uint_as_float(v.x);
    d[4 * i + 1] += __uint_as_float(v.y);
    d[4 * i + 2] += __uint_as_float(v.z);
    d[4 * i + 3] += __uint_as_float(v.w);
  }
}

// Serial fix-up (at most kSkSerialPieces pieces), the owner (piece 0 of its tile, CTA blockIdx.x): each peer's
// partial added to this warpgroup's accumulators in turn, then the tile's epilogue as a whole tile's. The buffers
// are the ring's first 128 KB, which the other consumer's last wgmma may still be reading: both consumers meet at
// named barrier kConsumersBar first (without it a peer's flag found already up let one consumer's copies land in
// the A stage the other's tensor cores were reading: wrong rows, NaN among them, on the H100).
constexpr int kConsumersBar = 1 + kConsumers;  // named barrier of the consumer warpgroups (1 + cw: each one's own)
__device__ __forceinline__ void sk_gather(float (&d)[128], float* work, const volatile SkConfig* cfg, uint32_t buf,
                                          int cw, int tid) {
  const int c0 = static_cast<int>(blockIdx.x), s = cfg->splits;
  int* flags = reinterpret_cast<int*>(work);
  hg90::named_bar_sync(kConsumersBar, 128 * kConsumers);
  for (int c = c0 + 1; c < c0 + s; ++c) {
    const int slot = 2 * c + cw;
    sk_wait(flags + slot, 1, cw, tid);
    if (tid == 0) flags[slot] = 0;  // (read once per launch: the next launch finds it zero)
    sk_add(d, sk_part(work, slot), buf, tid);
  }
}

// C's elements col and col + 1 of a row at p (p = &C[row][col]): a 4-byte word where p is 4-byte aligned (`word`:
// always for C's rows on TMA's 16-byte rule, col being even; the same for every pair of a thread's row, 8 columns
// apart), else two elements (kCNoMap: odd row strides); the lone first element where col + 1 == N, nothing at or
// past N. c_pair reads C_old (0 past N); c_store_pair writes v's pair.
template <typename T>
__device__ __forceinline__ bool word_aligned(const T* p) {
  return (reinterpret_cast<uintptr_t>(p) & 3) == 0;
}
template <typename T>
__device__ __forceinline__ float2 c_pair(const T* p, int col, int N, bool word) {
  if (col + 1 < N) {
    if (!word) return make_float2(hg::to_f32(p[0]), hg::to_f32(p[1]));
    const uint32_t v = *reinterpret_cast<const uint32_t*>(p);
    return make_float2(hg::to_f32(reinterpret_cast<const T*>(&v)[0]), hg::to_f32(reinterpret_cast<const T*>(&v)[1]));
  }
  return make_float2(col < N ? hg::to_f32(p[0]) : 0.f, 0.f);
}
template <typename T>
__device__ __forceinline__ void c_store_pair(T* p, int col, int N, bool word, uint32_t v) {
  const T* e = reinterpret_cast<const T*>(&v);
  if (col + 1 < N) {
    if (word) {
      *reinterpret_cast<uint32_t*>(p) = v;
    } else {
      p[0] = e[0];
      p[1] = e[1];
    }
  } else if (col < N) {
    p[0] = e[0];
  }
}

// C's elements (row, col) and (row, col + 1) from the sums g0, g1 of their accumulators (SwiGLU: g0, g1 the gate
// sums and u0, u1 the up sums of output column col and the next): the epilogue, beta * C_old, and the pair's store.
template <typename T>
__device__ __forceinline__ void sk_store_pair(const hge::Epilogue<T>& e, T* cb, int ldc, int row, int col, int M,
                                              int N, float g0, float g1, float u0, float u1) {
  if (row >= M || col >= N) return;
  T* p = cb + static_cast<long long>(row) * ldc + col;
  float v0, v1;
  if (e.swiglu()) {
    v0 = e.value_swiglu(g0, u0, row, col, N);
    v1 = e.value_swiglu(g1, u1, row, col + 1, N);
  } else {
    v0 = e.value(g0, row, col);
    v1 = e.value(g1, row, col + 1);
  }
  if (e.beta != 0.f) {
    const float2 o = c_pair(p, col, N, word_aligned(p));
    v0 = fmaf(e.beta, o.x, v0);
    v1 = fmaf(e.beta, o.y, v1);
  }
  c_store_pair(p, col, N, word_aligned(p), hg90::pack2<T>(v0, v1));
}

// Shared fix-up (more than kSkSerialPieces pieces): every piece of the tile, the owner too, has stored its partial
// (sk_store_partial); once all s have, piece j sums its 1/s of the tile's float4s over the s partials (in a fixed
// order: every tpq-th partial per lane, then a butterfly) and stores those elements of C itself, through the
// epilogue: no piece waits for another's sum, and no owner gathers and stores the tile after them (the serial
// steps this removes: docs/dev/code_measurements.md, "stream-K fix-up"). Only the float4s of output columns are
// summed: 8-column blocks below N - n0 (float4 i of thread t is block i: the accumulator layout below), or a
// SwiGLU tile's gate blocks 0-15, each with its up block i + 16. The last piece to finish resets the tile's
// counters for the next launch.
template <typename T>
__device__ __forceinline__ void sk_reduce_store(float* work, const volatile SkConfig* cfg, const FusedArgs<T>& x,
                                                int M, int N, int m0, int n0, int outer, int inner, int cw,
                                                int tid) {
  const int c = static_cast<int>(blockIdx.x), s = cfg->splits, j = c % s;
  int* counters = reinterpret_cast<int*>(work) + kSkCounters + 4 * (c / s) + cw;  // [0] stored, [2] done
  sk_signal(counters, cw, tid);
  sk_wait(counters, s, cw, tid);
  const hge::Epilogue<T> e(x.alpha_bits, x.beta_bits, x.bias, x.bias_stride, x.epi, x.scale_bits);
  T* cb = x.C + outer * x.bsc_o + inner * x.bsc_i;
  constexpr int kPeerStride = 2 * kSkQuads;  // float4s between consecutive CTAs' slots of one consumer
  const float4* part0 = sk_part(work, 2 * (c - j) + cw);
  const bool swiglu = e.swiglu();
  const int quads = 128 * (swiglu ? 16 : min(32, (N - n0 + 7) / 8));
  const int lo = j * quads / s, nq = (j + 1) * quads / s - lo;
  // tpq lanes per float4 (a power of two up to 8, so many where the share is small), each summing every tpq-th
  // partial, then their sums added by a butterfly: enough loads in flight where s is large and the share small
  int tpq = 1;
  while (tpq < 8 && 2 * tpq * nq <= 128) tpq *= 2;
  const int sub = tid & (tpq - 1);
  for (int base = 0; base < nq; base += 128 / tpq) {  // (uniform: the shuffles below take every lane)
    const int qi = base + tid / tpq, q = lo + qi;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f), u = a;
    if (qi < nq) {
#pragma unroll 8
      for (int p = sub; p < s; p += tpq) {
        const float4 v = __ldcg(part0 + p * kPeerStride + q);
        a.x += v.x;
        a.y += v.y;
        a.z += v.z;
        a.w += v.w;
        if (swiglu) {
          const float4 w = __ldcg(part0 + p * kPeerStride + 16 * 128 + q);
          u.x += w.x;
          u.y += w.y;
          u.z += w.z;
          u.w += w.w;
        }
      }
    }
    for (int o = 1; o < tpq; o *= 2) {
      a.x += __shfl_xor_sync(0xffffffffu, a.x, o);
      a.y += __shfl_xor_sync(0xffffffffu, a.y, o);
      a.z += __shfl_xor_sync(0xffffffffu, a.z, o);
      a.w += __shfl_xor_sync(0xffffffffu, a.w, o);
      if (swiglu) {  // (uniform: the epilogue's flag)
        u.x += __shfl_xor_sync(0xffffffffu, u.x, o);
        u.y += __shfl_xor_sync(0xffffffffu, u.y, o);
        u.z += __shfl_xor_sync(0xffffffffu, u.z, o);
        u.w += __shfl_xor_sync(0xffffffffu, u.w, o);
      }
    }
    if (qi < nq && sub == 0) {
      // float4 q: block i = q / 128 of thread t = q % 128 (warp t / 32, lane t % 32), rows 16 (t / 32) +
      // (t % 32) / 4 and 8 below, columns 8i + 2 (t % 4) and the next
      const int t = q & 127, row = m0 + cw * kWgRows + 16 * (t >> 5) + ((t & 31) >> 2);
      const int col = n0 + 8 * (q >> 7) + 2 * (t & 3);
      sk_store_pair<T>(e, cb, x.ldc_r, row, col, M, N, a.x, a.y, u.x, u.y);
      sk_store_pair<T>(e, cb, x.ldc_r, row + 8, col, M, N, a.z, a.w, u.z, u.w);
    }
  }
  hg90::named_bar_sync(1 + cw, 128);
  if (tid == 0 && atomicAdd(counters + 2, 1) == s - 1) {  // every piece is past the wait: reset both
    counters[0] = 0;
    counters[2] = 0;
  }
}

// ---- epilogues: 64 x 256 fp32 accumulators of one consumer warpgroup -> C ----
// Accumulator layout of wgmma m64nNk16 (per warp w of the warpgroup, lane l): for each 8-column
// block j, d[4j + 2h + e] is row 16w + 8h + l/4, column 8j + 2(l%4) + e.

// Direct: each thread stores its pairs straight to global memory, guarded; any N.
template <typename T>
__device__ __forceinline__ void epilogue_direct(const float (&d)[128], T* C, int M, int N, int row0, int n0) {
  const int lane = threadIdx.x % 32;
  const int warp = (threadIdx.x / 32) % 4;
  const int r = row0 + warp * 16 + lane / 4;
  const int c0 = n0 + 2 * (lane % 4);
  const bool pair_ok = (N % 2) == 0;  // 4-byte aligned pair stores need an even row stride
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const int c = c0 + 8 * j;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = r + 8 * h;
      if (row < M) {
        T* p = C + static_cast<size_t>(row) * N + c;
        const uint32_t v = hg90::pack2<T>(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]);
        if (pair_ok && c + 1 < N) {
          *reinterpret_cast<uint32_t*>(p) = v;
        } else {
          const T* e = reinterpret_cast<const T*>(&v);
          if (c < N) p[0] = e[0];
          if (c + 1 < N) p[1] = e[1];
        }
      }
    }
  }
}

// The TMA-store epilogue's staging buffer (per consumer warpgroup): 64-row x 64-column boxes of 128-byte
// rows whose 16-byte chunks are 128B-swizzled (chunk k of row r at k ^ (r % 8): the 8 rows of each 8x8
// matrix hit 8 different bank groups, conflict-free), the layout TMA reads and writes through a map with
// the 128B swizzle. The address of this lane's row for the x4 stmatrix/ldmatrix of 8-column blocks jj
// and jj + 1 (columns within the staged pass) of warp `warp`'s 16 rows: lane l addresses row l % 8 of
// matrix l / 8, matrices 0/1 being rows 0-7/8-15 of block jj and 2/3 those of block jj + 1, i.e. the
// registers d[4j + 0..7] of accumulator block j (the layout above).
// staged_at: the address of element (row, col) of the staged pass.
__device__ __forceinline__ uint32_t staged_at(uint32_t base, int row, int col) {
  return base + (col / 64) * (64 * 128) + row * 128 + ((((col % 64) / 8) ^ (row % 8)) << 4) + (col % 8) * 2;
}
__device__ __forceinline__ uint32_t staging_addr(uint32_t base, int warp, int lane, int jj) {
  const int mat = lane / 8;                              // which of the 4 matrices this lane addresses
  const int row = warp * 16 + (mat & 1) * 8 + lane % 8;  // 0..63; row % 8 == lane % 8
  const int col = 8 * (jj + (mat >> 1));                 // column within this pass
  return staged_at(base, row, col);
}

// stmatrix of kBlocks 8-column blocks of the accumulator, from block j0, into the staging buffer at `base`
// (block jj of the pass at staging_addr's place for it), as fp16/bf16 pairs.
template <typename T, int kBlocks, int NACC>
__device__ __forceinline__ void stage_blocks(const float (&d)[NACC], int j0, uint32_t base, int warp, int lane) {
#pragma unroll
  for (int jj = 0; jj < kBlocks; jj += 2) {
    const int j = j0 + jj;
    hg90::stmatrix_x4(staging_addr(base, warp, lane, jj), hg90::pack2<T>(d[4 * j + 0], d[4 * j + 1]),
                      hg90::pack2<T>(d[4 * j + 2], d[4 * j + 3]), hg90::pack2<T>(d[4 * j + 4], d[4 * j + 5]),
                      hg90::pack2<T>(d[4 * j + 6], d[4 * j + 7]));
  }
}

// A store whose pass(...) the warpgroup's threads run on the staged pass (StagedStore), not bulk tensor stores.
template <class S, class = void>
struct ThreadStore : std::false_type {};
template <class S>
struct ThreadStore<S, std::void_t<decltype(S::kThreads)>> : std::bool_constant<S::kThreads> {};

// kCNoMap: the staged passes written through a pointer by the warpgroup's threads, each warp a row at a time:
// C at c (the warpgroup's first row, the tile's first column; row stride ldc), rows [0, rows), columns before
// `cols` (past N: clipped). Lane l reads the row's staged columns [4l, 4l + 4) (8 bytes: the warp's 256 bytes in
// two wavefronts) and, with lane l - 1's through a shuffle, stores the 8-byte-aligned run of C that ends inside
// them (a row `lead` elements past 8 bytes: columns [4l - lead, 4l + 4 - lead)), element by element where the run
// leaves [0, cols); lane 31 then stores the row's last `lead` columns. 256 bytes a store instruction, where the
// register layout's pairs (the partial tiles' path) write 8 rows x 16 bytes each, which is slower
// (docs/dev/code_measurements.md, "staged store through a pointer").
template <typename T>
struct StagedStore {
  static constexpr bool kThreads = true;
  T* c;
  int ldc, rows, cols;
  __device__ __forceinline__ void pass(uint32_t base, int col0, int warp, int lane) const {
    const int col = 4 * lane, ncols = cols - col0;
    const uint32_t at = base + (col / 64) * (64 * 128) + (col % 8) * 2;  // staged_at's row-free part, hoisted
    const int chunk = (col % 64) / 8;
#pragma unroll 1
    for (int r = warp; r < rows; r += 4) {
      uint32_t lo, hi;
      asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(lo), "=r"(hi) : "r"(at + r * 128 + ((chunk ^ (r % 8)) << 4)));
      const unsigned long long mine = (static_cast<unsigned long long>(hi) << 32) | lo;
      const unsigned long long prev = __shfl_up_sync(0xffffffffu, mine, 1);  // (lane 0: its own, never stored)
      uint16_t* g = reinterpret_cast<uint16_t*>(c + static_cast<long long>(r) * ldc + col0);
      const int lead = static_cast<int>((reinterpret_cast<uintptr_t>(g) >> 1) & 3);
      const unsigned long long run = lead ? (mine << (16 * lead)) | (prev >> (16 * (4 - lead))) : mine;
      const int e0 = col - lead;  // the run's first column
      if (e0 >= 0 && e0 + 4 <= ncols) {
        *reinterpret_cast<unsigned long long*>(g + e0) = run;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (e0 + i >= 0 && e0 + i < ncols) g[e0 + i] = static_cast<uint16_t>(run >> (16 * i));
      }
      if (lane == 31) {
#pragma unroll
        for (int i = 1; i < 4; ++i)
          if (i >= 4 - lead && col + i < ncols) g[col + i] = static_cast<uint16_t>(mine >> (16 * i));
      }
    }
  }
};

// TMA store: stmatrix the tile (as fp16) into the staging buffer, then one thread issues the bulk tensor
// stores (store(src, col, row): a 64 x 64 box). The store runs asynchronously while this warpgroup starts the
// next tile; the buffer is reused only after the previous store has finished reading it. kCols below the tile's
// width (2 NACC columns) stages the tile in passes of kCols. before_pass(d, pass), where given, changes the pass's accumulators first (while the
// previous store may still be reading the buffer). A ThreadStore (StagedStore) instead has the warpgroup's threads
// write each staged pass once all have staged it.
struct NoPassHook {
  template <int NACC>
  __device__ __forceinline__ void operator()(float (&)[NACC], int) const {}
};
template <typename T, int kCols, class Store, class Hook = NoPassHook, int NACC>
__device__ __forceinline__ void epilogue_tma(float (&d)[NACC], const Store& store, uint8_t* sCw, int wg, int row0,
                                             int n0, const Hook& before_pass = Hook{}, int passes = 2 * NACC / kCols) {
  constexpr bool kBulk = !ThreadStore<Store>::value;
  constexpr int kTileCols = 2 * NACC;  // (64 rows of the tile per consumer warpgroup: 2 accumulators a column)
  static_assert(kTileCols % kCols == 0 && kCols % 64 == 0, "passes of whole 64-column boxes");
  const int tid = threadIdx.x % 128;
  const int lane = threadIdx.x % 32;
  const int warp = tid / 32;
  const uint32_t base = smem_u32(sCw);
#pragma unroll
  for (int pass = 0; pass < kTileCols / kCols; ++pass) {
    if (pass >= passes) break;  // (a half tile's second half: nothing of it to store)
    before_pass(d, pass);
    if (kBulk && tid == 0) hg90::tma_store_wait_read<0>();
    hg90::named_bar_sync(1 + wg, 128);  // (threads' store: every thread has read the previous pass)
    stage_blocks<T, kCols / 8>(d, pass * (kCols / 8), base, warp, lane);
    if constexpr (kBulk) hg90::fence_proxy_async_smem();  // stmatrix writes -> visible to the TMA engine
    hg90::named_bar_sync(1 + wg, 128);
    if constexpr (kBulk) {
      if (tid == 0) {
#pragma unroll
        for (int c = 0; c < kCols / 64; ++c) store(sCw + c * (64 * 128), n0 + pass * kCols + 64 * c, row0);
        hg90::tma_store_commit();
      }
    } else {
      store.pass(base, pass * kCols, warp, lane);
    }
  }
}

// ---- the fused epilogue (kFused) ----
constexpr int kFusedCols = BN / 2;  // columns per staging pass (half-tile staging; one SwiGLU tile)

// C's tensor map at the tile's matrix (its batch coordinates by tma_levels): the bulk stores of the staging
// buffer's 64 x 64 boxes, and the loads and L2 prefetches of C_old (the same boxes: tmC is read too).
// A batched launch's stores tag C's lines evict_first: written once, they leave L2 before the operands of each
// matrix that later tiles still read (fewer operand bytes from DRAM: docs/dev/code_measurements.md, "batched C
// evict-first"). Unbatched launches keep the default policy, so that a C that fits in L2
// stays there for the next kernel (the MLP's down GEMM reads the SwiGLU GEMM's output).
struct CMapAt {
  const CUtensorMap* map;
  int ci, co;
  bool rank4;
  template <typename T>
  __device__ __forceinline__ CMapAt(const CUtensorMap* map_, const FusedArgs<T>& x, int outer, int inner)
      : map(map_),
        ci((x.tma_levels & kLevelCInner) ? inner : 0),
        co((x.tma_levels & kLevelCOuter) ? outer : 0),
        rank4((x.tma_levels & kRank4Maps) != 0) {}
  __device__ __forceinline__ void store(const uint8_t* src, int col, int row) const {
    if (rank4)
      hg90::tma_store_4d_hint(map, src, col, row, ci, co, hg::l2_policy(true));
    else
      hg90::tma_store_2d(map, src, col, row);
  }
  __device__ __forceinline__ void load(uint8_t* dst, uint64_t* bar, int col, int row) const {
    if (rank4)
      hg90::tma_load_4d(dst, map, bar, col, row, ci, co);
    else
      hg90::tma_load_2d(dst, map, bar, col, row);
  }
  __device__ __forceinline__ void prefetch(int col, int row) const {
    if (rank4)
      hg90::tma_prefetch_4d(map, col, row, ci, co);
    else
      hg90::tma_prefetch_2d(map, col, row);
  }
};

// A tile whose columns all lie in the first half of its BN (not SwiGLU, whose halves are gate and up): its B
// stage holds BN / 2 rows, its wgmma are m64n(BN/2)k16 on d[0 .. BN/4) and its epilogue stores one pass; only in
// kernels with kHalfTiles (Config). The producer and the consumers both ask here: the bytes one expects are those
// the other reads.
template <typename T>
__device__ __forceinline__ bool half_tile(const FusedArgs<T>& x, int n0, int N) {
  return (x.epi & hge::kSwiGLU) == 0 && n0 + BN / 2 >= N;
}

// An ungrouped launch with alpha 1, beta 0 and scale 1: what the plain and bias-only epilogues below need.
template <typename T>
__device__ __forceinline__ bool unit_scalars(const FusedArgs<T>& x) {
  return x.group_mode == 0 && x.alpha_bits == 0x3f800000 && x.beta_bits == 0 && x.scale_bits == 0x3f800000;
}

// A launch whose epilogue is the plain store (unit_scalars, no bias, activation or SwiGLU): the fused kernel then
// stores as the catalogue's does (epilogue_tma, the passes unrolled): the general epilogue_fused path issues more
// instructions and stalls more often with none ready (docs/dev/code_measurements.md, "plain epilogue").
template <typename T>
__device__ __forceinline__ bool plain_epilogue(const FusedArgs<T>& x) {
  return unit_scalars(x) && x.epi == 0;
}

// A tile whose epilogue only adds a bias (unit_scalars, no activation or SwiGLU), per row, or per column with the
// tile's columns before N and the bias contiguous and 4-byte aligned: the plain store's unrolled passes adding the
// bias to each (BiasPass), not epilogue_fused's general loop, which is slower (docs/dev/code_measurements.md,
// "bias pass"). Other column biases take the general path.
template <typename T>
__device__ __forceinline__ bool bias_pass_fits(const FusedArgs<T>& x, int n0, int N) {
  const int mode = x.epi & hge::kBiasMask;
  if (!unit_scalars(x) || mode == 0 || x.epi != mode) return false;
  return mode == hge::kBiasRow ||
         (x.bias_stride == 1 && n0 + BN <= N && (reinterpret_cast<uintptr_t>(x.bias) & 3) == 0);
}

// beta * C_old through the staging buffer (cold_load): beta != 0, C has a map, and this warpgroup's 64 rows at
// row0 all before the group's end (the grouped GEMM's partial tiles read it through x.C; rows all at or past the
// end, or past M: no epilogue). Warp votes, as in epilogue_fused, which decides the same way.
template <typename T>
__device__ __forceinline__ bool fused_cold(const FusedArgs<T>& x, int row_end, int row0) {
  return __int_as_float(x.beta_bits) != 0.f &&
         !__any_sync(0xffffffffu, row_end <= row0 || (x.group_mode != 0 && row_end < row0 + kWgRows) ||
                                      (x.tma_levels & kCNoMap));
}

// beta != 0: a consumer warpgroup's C_old of the tile (its 64 rows at row0 if they begin before row_end, the
// tile's columns at n0 before N) into L2, by the producer thread as it starts the tile's loads, for cold_load
// at its end (and the partial tiles' reads through x.C). No shared memory, no barrier, no wait.
template <typename T>
__device__ __forceinline__ void cold_prefetch(const CMapAt& cm, const FusedArgs<T>& x, int n0, int N, int row0,
                                              int row_end) {
  if (__int_as_float(x.beta_bits) == 0.f || row0 >= row_end || (x.tma_levels & kCNoMap)) return;
  const int cols = (x.epi & hge::kSwiGLU) ? kSwiGLUCols : BN;
#pragma unroll
  for (int c = 0; c < BN; c += 64)
    if (c < cols && n0 + c < N) cm.prefetch(n0 + c, row0);
}

// The bias values of the tile into L1, probe p < 8 by consumer thread p of each warpgroup at the start of the tile's
// main loop (no register, no wait), so that the epilogue's bias loads, which every consumer warp issues at the same
// point, wait on L1 rather than L2: per column, the tile's BN columns from n0 (SwiGLU: 128 gate columns from n0
// and their up columns from N + n0), probed at most 37 values (74 bytes) apart so that each 128-byte line is
// touched; per row, each consumer warpgroup's first and last row. A strided bias gets its first lines only.
// (Issued by the producer thread instead, with C_old's prefetch, the bias epilogues ran slower:
// docs/dev/code_measurements.md, "bias prefetch".)
template <typename T>
__device__ __forceinline__ void bias_prefetch(const FusedArgs<T>& x, int n0, int N, int m0, int M, int p) {
  const int mode = x.epi & hge::kBiasMask;
  if (mode == 0) return;
  long long i;
  if (mode == hge::kBiasCol) {
    if ((x.epi & hge::kSwiGLU) != 0)
      i = (p / 4) * static_cast<long long>(N) + min(n0 + (p % 4) * (kSwiGLUCols - 1) / 3, N - 1);
    else
      i = min(n0 + p * (BN - 1) / 7, N - 1);
  } else {
    if (p >= 2 * kConsumers) return;
    i = min(m0 + (p / 2) * kWgRows + (p % 2) * (kWgRows - 1), M - 1);
  }
  hg::prefetch_l1(x.bias + i * x.bias_stride);
}

// C_old of one staging pass (64 rows at row x kFusedCols columns at col) into the staging buffer sCw by TMA,
// completing on bar (the warpgroup's own, one arrival per phase): by one thread, once the previous bulk
// store from sCw (its own) has been read. The warpgroup waits on bar and reads it back by ldmatrix.
template <typename T>
__device__ __forceinline__ void cold_load(const CMapAt& cm, uint8_t* sCw, uint64_t* bar, int col, int row) {
  hg90::tma_store_wait_read<0>();
  hg90::mbar_arrive_expect_tx(bar, kWgRows * kFusedCols * sizeof(T));
#pragma unroll
  for (int c = 0; c < kFusedCols / 64; ++c) cm.load(sCw + c * (64 * 128), bar, col + 64 * c, row);
}

// Two 16-bit elements (low first) of a 32-bit word as floats.
template <typename T>
__device__ __forceinline__ float2 unpack2(uint32_t w) {
  const T* v = reinterpret_cast<const T*>(&w);
  return make_float2(hg::to_f32(v[0]), hg::to_f32(v[1]));
}

// The column bias of this thread's columns of a pass, bias[(off + min(c + 8j + i, N - 1)) * stride] for
// j < 16, i < 2 (e.bias_at with the clamped column), as pairs in bp[j] (i = 0 the low half): one 4-byte
// load per pair where the bias is contiguous (stride 1), the pairs 4-byte aligned and the pass's columns
// [cp, cp + kFusedCols) all before N; else two 2-byte loads. Read-only loads (the L1-resident vector).
template <typename T>
__device__ __forceinline__ void bias_pairs(uint32_t (&bp)[kFusedCols / 8], const T* bias, int stride, int off,
                                           int cp, int c, int N) {
  const unsigned short* b = reinterpret_cast<const unsigned short*>(bias);
  if (stride == 1 && cp + kFusedCols <= N && (reinterpret_cast<uintptr_t>(b + off) & 3) == 0) {
    const unsigned int* p = reinterpret_cast<const unsigned int*>(b + off + c);  // c is even
#pragma unroll
    for (int j = 0; j < kFusedCols / 8; ++j) bp[j] = __ldg(p + 4 * j);
  } else {
#pragma unroll
    for (int j = 0; j < kFusedCols / 8; ++j) {
      const uint32_t lo = __ldg(b + static_cast<long long>(off + min(c + 8 * j, N - 1)) * stride);
      const uint32_t hi = __ldg(b + static_cast<long long>(off + min(c + 8 * j + 1, N - 1)) * stride);
      bp[j] = lo | (hi << 16);
    }
  }
}

// bias_pass_fits' epilogue_tma hook: the bias of each accumulator of a kFusedCols-column pass, read as
// epilogue_fused reads it (bias_pairs' contiguous pairs per column, clamped rows per row), one pair at a time:
// bias_pairs' 16 words live beside the unrolled passes' state pushed the main loop's phase into local memory.
template <typename T>
struct BiasPass {
  const FusedArgs<T>& x;
  bool on;  // bias_pass_fits (else nothing to add: the plain store)
  int row0, n0, M;
  __device__ __forceinline__ void operator()(float (&d)[128], int pass) const {
    constexpr int kBlocks = kFusedCols / 8;
    if (!on) return;
    const int lane = threadIdx.x % 32, warp = (threadIdx.x % 128) / 32;
    const int j0 = pass * kBlocks;
    if ((x.epi & hge::kBiasMask) == hge::kBiasCol) {  // the pairs (c + 8j, c + 8j + 1) as 4-byte words
      const unsigned int* p =
          reinterpret_cast<const unsigned int*>(x.bias + n0 + pass * kFusedCols + 2 * (lane % 4));
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        const float2 b = unpack2<T>(__ldg(p + 4 * j));
        d[4 * (j0 + j) + 0] += b.x;
        d[4 * (j0 + j) + 1] += b.y;
        d[4 * (j0 + j) + 2] += b.x;
        d[4 * (j0 + j) + 3] += b.y;
      }
    } else {  // rows r and r + 8, clamped as epilogue_fused's (its e.bias_at(rr[h], 0))
      const int r = row0 + warp * 16 + lane / 4;
      const float b0 = hg::to_f32(x.bias[static_cast<long long>(min(r, M - 1)) * x.bias_stride]);
      const float b1 = hg::to_f32(x.bias[static_cast<long long>(min(r + 8, M - 1)) * x.bias_stride]);
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        d[4 * (j0 + j) + 0] += b0;
        d[4 * (j0 + j) + 1] += b0;
        d[4 * (j0 + j) + 2] += b1;
        d[4 * (j0 + j) + 3] += b1;
      }
    }
  }
};

// The fused epilogue: each accumulator becomes y = scale * act(alpha * acc + bias) (e.value_b, the bias read
// once per pass (per column) or tile (per row)) + beta * C_old, then the tile is stored as epilogue_tma does
// in two passes of kFusedCols columns. SwiGLU: d[4j + i] holds the gate of column block j < 16 and
// d[4(j + 16) + i] the matching up value (the B stage holds gate then up), so the output is 64 x 128 per
// consumer, stored in one pass.
// The passes are a loop, not unrolled: each works on d[0..63], pass 1's accumulators moved there at the end
// of pass 0 (64 moves), so that the pass's code (one copy per activation) exists once, not once per pass.
// linear() && beta == 0: the catalogue's epilogue (alpha only, skipped at 1; no loads).
// beta == 0: the math of each pass runs before the wait for the previous store's read of the staging
// buffer, overlapping it.
// beta != 0 (`cold`: fused_cold): C_old comes by TMA into the staging buffer (the boxes that the pass's
// store writes) and is read back by ldmatrix in the accumulator layout, the same 8x8 matrices as the
// stmatrix: pass 0's is issued by the caller before the last k-block's wgmma finish, pass 1's here once
// pass 0's store has been read (cold_load), both from L2 (cold_prefetch at the start of the tile's main
// loop); the pass's math runs while it comes. The stmatrix needs no barrier then: the load came after the
// previous store's read, and each warp rewrites only the rows it read.
// Rows and columns past M and N are computed (their stores are clipped) with clamped bias indices.
// Grouped GEMM: row_end is the tile's group end (else M). This warpgroup's 64 rows at row0 all before it:
// the TMA store as above; none (or, without groups, none before M): nothing to do; some: the rows before
// row_end stored straight from the registers through x.C (guarded pairs, as epilogue_direct), since a bulk
// store would write them all, and beta * C_old read through x.C, those rows only. kCNoMap: every tile that way.
// half (half_tile; the k-loop ran m64n(BN/2)k16 into d[0..63]): one pass, d[64..127] hold nothing of the tile.
template <typename T>
__device__ __forceinline__ void epilogue_fused(float (&d)[128], const CMapAt& cm, uint8_t* sCw, uint64_t* cbar,
                                               uint32_t& cphase, bool cold, int wg, int row0, int n0, int M, int N,
                                               int row_end, int outer, int inner, const FusedArgs<T>& x,
                                               bool half) {
  constexpr int kBlocks = kFusedCols / 8;  // per pass: 16 blocks of 8 columns
  // (Both the same in every thread of the warpgroup. Decided by warp votes, since ptxas cannot tell that
  // row_end, loaded from memory, is warp-uniform: a branch on it otherwise takes the tile loop's stage
  // and phase out of the uniform datapath, adding 9 instructions per k-block.)
  const bool grouped = x.group_mode != 0;
  if (__all_sync(0xffffffffu, row_end <= row0)) return;  // (row_end = M without groups)
  const bool partial = (x.tma_levels & kCNoMap) || __any_sync(0xffffffffu, grouped && row_end < row0 + kWgRows);
  const hge::Epilogue<T> e(x.alpha_bits, x.beta_bits, x.bias, x.bias_stride, x.epi, x.scale_bits);
  const bool swiglu = e.swiglu();
  const int tid = threadIdx.x % 128, lane = threadIdx.x % 32, warp = tid / 32;
  const int r = row0 + warp * 16 + lane / 4;             // this thread's rows r and r + 8
  const int rr[2] = {min(r, M - 1), min(r + 8, M - 1)};  // clamped: bias reads stay inside bias[]
  // Per-row bias: 2 values per thread and tile. Per column: bias_pairs in each pass.
  const int bias_mode = e.flags & hge::kBiasMask;
  const bool bias_col = bias_mode == hge::kBiasCol, bias_row = bias_mode != 0 && !bias_col;
  const float brow[2] = {bias_row ? e.bias_at(rr[0], 0) : 0.f, bias_row ? e.bias_at(rr[1], 0) : 0.f};
  T* cb = x.C + outer * x.bsc_o + inner * x.bsc_i;  // C (partial tiles: C_old and the stores)
  const uint32_t sbase = smem_u32(sCw);
  const int passes = swiglu || half ? 1 : BN / kFusedCols;
#pragma unroll 1
  for (int pass = 0; pass < passes; ++pass) {
    const int cp = n0 + pass * kFusedCols;  // the pass's first column
    const int c = cp + 2 * (lane % 4);      // this thread's columns c + 8j, c + 8j + 1 (j < kBlocks)
    if (cold && pass > 0 && tid == 0) cold_load<T>(cm, sCw, cbar, cp, row0);
    if (swiglu) {  // gate d[4j + i], up d[4(j + 16) + i]; a column bias has 2N entries
      uint32_t bg[kBlocks], bu[kBlocks];
      if (bias_col) {
        bias_pairs<T>(bg, e.bias, e.bias_stride, 0, cp, c, N);
        bias_pairs<T>(bu, e.bias, e.bias_stride, N, cp, c, N);
      }
#pragma unroll
      for (int j = 0; j < kBlocks; ++j) {
        const float2 g2 = bias_col ? unpack2<T>(bg[j]) : make_float2(0.f, 0.f);
        const float2 u2 = bias_col ? unpack2<T>(bu[j]) : make_float2(0.f, 0.f);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int h = i / 2, i0 = i % 2;
          d[4 * j + i] = e.value_swiglu_b(d[4 * j + i], d[4 * (j + kBlocks) + i],
                                          bias_col ? (i0 ? g2.y : g2.x) : brow[h],
                                          bias_col ? (i0 ? u2.y : u2.x) : brow[h]);
        }
      }
    } else if (e.linear()) {
      if (e.alpha != 1.f) {
#pragma unroll
        for (int i = 0; i < 4 * kBlocks; ++i) d[i] *= e.alpha;
      }
    } else {
      uint32_t bp[kBlocks];
      if (bias_col) bias_pairs<T>(bp, e.bias, e.bias_stride, 0, cp, c, N);
      // One copy of the pass per activation, so that each element's activation is not a switch.
      auto apply = [&](auto act) {
        hge::Epilogue<T> ea = e;
        ea.flags = (e.flags & ~hge::kActMask) | (decltype(act)::value << hge::kActShift);
#pragma unroll
        for (int j = 0; j < kBlocks; ++j) {
          const float2 b2 = bias_col ? unpack2<T>(bp[j]) : make_float2(0.f, 0.f);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int h = i / 2, i0 = i % 2;
            d[4 * j + i] = ea.value_b(d[4 * j + i], bias_col ? (i0 ? b2.y : b2.x) : brow[h]);
          }
        }
      };
      switch ((e.flags & hge::kActMask) >> hge::kActShift) {
        case hge::kActRelu: apply(std::integral_constant<int, hge::kActRelu>{}); break;
        case hge::kActGelu: apply(std::integral_constant<int, hge::kActGelu>{}); break;
        case hge::kActGeluTanh: apply(std::integral_constant<int, hge::kActGeluTanh>{}); break;
        case hge::kActSilu: apply(std::integral_constant<int, hge::kActSilu>{}); break;
        default: apply(std::integral_constant<int, hge::kActNone>{}); break;
      }
    }
    if (e.beta != 0.f) {
      if (cold) {  // + beta * C_old from the staging buffer (cold_load)
        hg90::mbar_wait(cbar, cphase);
        cphase ^= 1;
#pragma unroll
        for (int jj = 0; jj < kBlocks; jj += 2) {
          uint32_t v[4];  // d[4jj + 2q], d[4jj + 2q + 1]'s C_old in v[q]
          hg90::ldmatrix_x4(staging_addr(sbase, warp, lane, jj), v);
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float2 o = unpack2<T>(v[q]);
            d[4 * jj + 2 * q] = fmaf(e.beta, o.x, d[4 * jj + 2 * q]);
            d[4 * jj + 2 * q + 1] = fmaf(e.beta, o.y, d[4 * jj + 2 * q + 1]);
          }
        }
      } else {  // partial tile: pairs of columns through x.C (4-byte words: C's rows are 16-byte aligned)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (r + 8 * h >= row_end) continue;
          const T* p = cb + static_cast<long long>(r + 8 * h) * x.ldc_r + c;
          const bool word = word_aligned(p);
#pragma unroll
          for (int j = 0; j < kBlocks; ++j) {
            const float2 o = c_pair(p + 8 * j, c + 8 * j, N, word);
            d[4 * j + 2 * h] = fmaf(e.beta, o.x, d[4 * j + 2 * h]);
            d[4 * j + 2 * h + 1] = fmaf(e.beta, o.y, d[4 * j + 2 * h + 1]);
          }
        }
      }
    }
    if (partial) {
      // Rows r, r + 8 before row_end, column pairs c + 8j (4-byte words: C's rows are 16-byte aligned, c
      // even), a lone last column where N is odd.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (r + 8 * h >= row_end) continue;
        T* p = cb + static_cast<long long>(r + 8 * h) * x.ldc_r + c;
        const bool word = word_aligned(p);
#pragma unroll
        for (int j = 0; j < kBlocks; ++j)
          c_store_pair(p + 8 * j, c + 8 * j, N, word, hg90::pack2<T>(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]));
      }
    } else {
      if (!cold) {  // the previous store must have read the staging buffer (cold: cold_load waited for it)
        if (tid == 0) hg90::tma_store_wait_read<0>();
        hg90::named_bar_sync(1 + wg, 128);
      }
      stage_blocks<T, kBlocks>(d, 0, sbase, warp, lane);
      hg90::fence_proxy_async_smem();  // stmatrix writes -> visible to the TMA engine
      hg90::named_bar_sync(1 + wg, 128);
      if (tid == 0) {
#pragma unroll
        for (int cc = 0; cc < kFusedCols / 64; ++cc) cm.store(sCw + cc * (64 * 128), cp + 64 * cc, row0);
        hg90::tma_store_commit();
      }
    }
    if (pass + 1 < passes) {  // the next pass's accumulators into d[0..63]
#pragma unroll
      for (int i = 0; i < 4 * kBlocks; ++i) d[i] = d[i + 4 * kBlocks];
    }
  }
}

// The queue variant's schedule, made by each warpgroup after its setmaxnreg (nothing for the other kernels).
template <bool kQueue, class Make>
__device__ __forceinline__ auto queue_sched(const Make& make) {
  if constexpr (kQueue)
    return make();
  else
    return 0;
}

template <class K, typename CArg, class X = NoFused>
__device__ __forceinline__ void sm90_gemm(const CUtensorMap& tmA, const CUtensorMap& tmB, const CArg& cArg, int M,
                                          int N, int K_, const X& x = X{}) {
  using T = typename K::T;
  constexpr int kStages = K::kStages;
  constexpr int kClusterM = K::kClusterM;
  static_assert(std::is_same_v<CArg, std::conditional_t<K::kTmaStore, CUtensorMap, T*>>,
                "C is a tensor map for the TMA-store epilogue, a pointer for direct stores");
  static_assert(std::is_same_v<X, std::conditional_t<K::kFused, FusedArgs<T>, NoFused>>,
                "the fused GEMM's run-time parameters (FusedArgs), none for the catalogue's");
  extern __shared__ __align__(16) uint8_t smem_raw[];
  // 128B-swizzled TMA boxes and wgmma descriptors assume 1024-byte aligned tiles.
  uint8_t* smem = smem_raw + ((1024 - (smem_u32(smem_raw) & 1023)) & 1023);
  uint8_t* sA = smem;
  uint8_t* sB = smem + kStages * K::kABytes;
  uint8_t* sC = smem + kStages * K::kStageBytes;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + K::kBarOffset);
  uint64_t* empty = full + kStages;
  [[maybe_unused]] uint64_t* cbar = empty + kStages;  // kFused: each consumer's C_old barrier

  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    hg90::prefetch_tmap(&tmA);
    hg90::prefetch_tmap(&tmB);
    for (int s = 0; s < kStages; ++s) {
      hg90::mbar_init(&full[s], 1);  // the local producer's arrive.expect_tx
      hg90::mbar_init(&empty[s], K::kEmptyArrivals);
    }
    if constexpr (K::kFused) {
      for (int c = 0; c < kConsumers; ++c) hg90::mbar_init(&cbar[c], 1);  // cold_load's arrive.expect_tx
    }
    hg90::fence_barrier_init();
  }
  if (kClusterM > 1)
    hg90::cluster_sync();
  else
    __syncthreads();
  hg::griddep_begin();  // dependent_launch: the setup above overlaps the kernel before; nothing global before this

  const int nk = (K_ + BK - 1) / BK;
  using Sched = TileSched<kClusterM, K::kPersistent, K::kFused, K::kBN>;
  static_assert(!K::kStreamK || K::kGroupBytes >= static_cast<int>(sizeof(SkConfig)), "SkConfig's room");
  static_assert(!K::kStreamK || kConsumers * kSkPartFloats * 4 <= kStages * K::kStageBytes, "sk_gather's buffers");
  Sched sched = [&] {
    if constexpr (K::kFused) {
      const int cols = (x.epi & hge::kSwiGLU) ? kSwiGLUCols : BN;
      if (x.group_mode == 0) return Sched(M, N, cols, x.batch_count, x.batch_inner);
      // Grouped GEMM: the table of the groups' m-tile prefix sums, built by the whole CTA (the staging
      // buffer, unused before the first epilogue, holds the scan's warp sums). More groups than the table
      // holds: trap (the runtime refuses them); more than there are matrices: those have no tiles.
      if (x.groups > kMaxGroups || K::kStreamK) __trap();  // (stream-K: no grouped GEMM)
      const int E = min(x.groups, x.batch_count);
      int* tab = reinterpret_cast<int*>(smem + K::kGroupOffset);
      group_scan(tab, reinterpret_cast<int*>(sC), x.group, x.group_mode, E, M);
      return Sched(M, N, cols, x.batch_count, x.batch_inner, x.group_mode, x.group, E, tab);
    } else {
      return Sched(M, N);
    }
  }();
  if constexpr (K::kStreamK) {
    if (threadIdx.x == 0) sk_config(reinterpret_cast<SkConfig*>(smem + K::kGroupOffset), sched.total, x.sk_tiles, nk);
    __syncthreads();
  }
  // The queue variant's warpgroups remake the schedule after their setmaxnreg (queue_sched): the one made before,
  // live across it, went to the stack (24 bytes stored and 44 loaded, against 8 and 20). The plain variant's code
  // is as it was: any of the queue's objects there, dead or a reference, cost it 24 bytes of spills, and making
  // the schedule above through make_sched changed its SASS (so the two constructions stay side by side).
  [[maybe_unused]] auto make_sched = [&] {
    if constexpr (K::kFused) {
      const int cols = (x.epi & hge::kSwiGLU) ? kSwiGLUCols : BN;
      if (x.group_mode == 0) return Sched(M, N, cols, x.batch_count, x.batch_inner);
      return Sched(M, N, cols, x.batch_count, x.batch_inner, x.group_mode, x.group, min(x.groups, x.batch_count),
                   reinterpret_cast<const int*>(smem + K::kGroupOffset));
    } else {
      return Sched(M, N);
    }
  };
  int m0, n0, outer, inner;
  // The next piece of work: a tile and its k-blocks [kb0, kb1) (the whole K but for stream-K pieces).
  // (made by each warpgroup after its setmaxnreg: state live across it went to the stack)
  using SkState = std::conditional_t<K::kStreamK, StreamK, int>;
  auto sk_cfg = [&] { return reinterpret_cast<const volatile SkConfig*>(smem + K::kGroupOffset); };
  auto make_sk = [&]() -> SkState {
    if constexpr (K::kStreamK)
      return StreamK();
    else
      return 0;
  };
  auto next_piece = [&](SkState& sk, int& kb0, int& kb1) -> bool {
    if constexpr (K::kStreamK) {
      int t;
      if (!sk.next(sk_cfg(), t, kb0, kb1)) return false;
      outer = inner = 0;
      sched.at(t, m0, n0, outer, inner);
      return true;
    } else {
      kb0 = 0;
      kb1 = nk;
      return sched.next(m0, n0, outer, inner);
    }
  };
  int kb0, kb1;
  // kQueue: the tiles come from the producer (TileQueue): each one's index beside the stage of its first k-block;
  // after the last, a stage without data and index -1. The index is written after the stage's empty barrier and
  // read after its full barrier, in the warp whose thread then releases the stage (compute-sanitizer's racecheck,
  // which does not follow mbarrier waits, reports the end marker's write as a potential WAR hazard).
  constexpr bool kQueue = K::kQueue;
  static_assert(!kQueue || (K::kFused && !K::kStreamK), "the tile queue: the plain fused GEMM");
  [[maybe_unused]] volatile int* const stage_tile = reinterpret_cast<volatile int*>(smem + K::kStageTileOffset);

  if (wg == 0) {
    // ---------------- producer ----------------
    hg90::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) {
      const uint32_t rank = sched.rank;
      int stage = 0;
      uint32_t phase = 0;
      [[maybe_unused]] SkState sk = make_sk();
      [[maybe_unused]] int tile = -1;
      [[maybe_unused]] auto qsched = queue_sched<kQueue>(make_sched);
      [[maybe_unused]] auto queue = [&] {
        if constexpr (kQueue)
          return TileQueue(tile_queue_counter<K>(x), qsched.total);
        else
          return 0;
      }();
      auto produce_next = [&]() -> bool {
        if constexpr (!kQueue) {
          return next_piece(sk, kb0, kb1);
        } else {
          if (!queue.next(tile)) return false;
          outer = inner = 0;
          qsched.at(tile, m0, n0, outer, inner);
          sched.row_end = qsched.row_end;  // (where the code both variants share reads it)
          kb0 = 0;
          kb1 = nk;
          return true;
        }
      };
      while (produce_next()) {
        // kFused: the tile's batch coordinates in each map, and where B's second half starts: the
        // up rows/columns of the tile's output columns (SwiGLU, B has 2N rows/columns) or n0 + BN/2.
        [[maybe_unused]] int ai = 0, ao = 0, bi = 0, bo = 0, nb1 = 0;
        [[maybe_unused]] bool rank4 = false, half = false;
        if constexpr (K::kFused) {
          rank4 = (x.tma_levels & kRank4Maps) != 0;
          ai = (x.tma_levels & kLevelAInner) ? inner : 0;
          ao = (x.tma_levels & kLevelAOuter) ? outer : 0;
          bi = (x.tma_levels & kLevelBInner) ? inner : 0;
          bo = (x.tma_levels & kLevelBOuter) ? outer : 0;
          nb1 = (x.epi & hge::kSwiGLU) ? N + n0 : n0 + BN / 2;
          half = K::kHalfTiles && half_tile(x, n0, N);
          // The tile's C_old into L2 for its epilogue (stream-K: the owner's, the piece of k-block 0), from here
          // rather than by a consumer thread: that branch at the start of the tile took the consumers' main loop
          // stage and phase out of the uniform datapath (62 vector instructions a k-block instead of 30).
          if (kb0 == 0) {
            const CMapAt cm(&cArg, x, outer, inner);
#pragma unroll 1  // (unrolled, its values spilled in the NN kernels' producer)
            for (int c = 0; c < kConsumers; ++c) cold_prefetch(cm, x, n0, N, m0 + c * kWgRows, sched.row_end);
          }
        }
        for (int kb = kb0; kb < kb1; ++kb) {
          // A fresh barrier counts as having completed the phase before phase 0, so the first pass
          // over the ring does not block.
          hg90::mbar_wait(&empty[stage], phase ^ 1);
          if (kQueue && kb == kb0) stage_tile[stage] = tile;
          hg90::mbar_arrive_expect_tx(&full[stage], K::kStageBytes - (half ? K::kBBytes / 2 : 0));
          const int k0 = kb * BK;
          if constexpr (K::kFused) {
            auto load = [&](uint8_t* dst, const CUtensorMap* map, int c0, int c1, int c2, int c3) {
              if (rank4)
                hg90::tma_load_4d(dst, map, &full[stage], c0, c1, c2, c3);
              else
                hg90::tma_load_2d(dst, map, &full[stage], c0, c1);
            };
            load(sA + stage * K::kABytes, &tmA, k0, m0, ai, ao);
            uint8_t* b = sB + stage * K::kBBytes;
            if (!K::kNN) {  // TN: two boxes of BN/2 rows (n0, nb1) of 64 K
              load(b, &tmB, k0, n0, bi, bo);
              if (!half) load(b + (BN / 2) * 128, &tmB, k0, nb1, bi, bo);
            } else {  // NN: 64-column chunks, the first BN/128 from n0, the rest from nb1
#pragma unroll
              for (int c = 0; c < BN / 64; ++c)
                if (c < BN / 128 || !half)
                  load(b + c * (64 * 128), &tmB, (c < BN / 128 ? n0 : nb1) + 64 * (c % (BN / 128)), k0, bi, bo);
            }
          } else if (!K::kAT) {
            hg90::tma_load_2d(sA + stage * K::kABytes, &tmA, &full[stage], k0, m0);
          } else {
            // A^T is K x M row-major: one 64-column (M) panel per consumer warpgroup, 64 K rows each
#pragma unroll
            for (int c = 0; c < BM / 64; ++c)
              hg90::tma_load_2d(sA + stage * K::kABytes + c * (64 * 128), &tmA, &full[stage], m0 + 64 * c, k0);
          }
          uint8_t* b = sB + stage * K::kBBytes;
          if constexpr (K::kFused) {
            // (the fused GEMM loaded its B boxes above)
          } else if (!K::kNN) {
            // TN: B tile = BN rows of N, each 64 K elements (128 B); this CTA's slice of rows.
            const int r0 = static_cast<int>(rank) * K::kBSlice;
            if (kClusterM > 1)
              hg90::tma_load_2d_multicast(b + r0 * 128, &tmB, &full[stage], k0, n0 + r0, (1u << kClusterM) - 1);
            else
              hg90::tma_load_2d(b, &tmB, &full[stage], k0, n0);
          } else {
            // NN: B tile = BN/64 boxes of 64 K rows x 64 N columns (128 B), one per 64-column chunk.
#pragma unroll
            for (int c = 0; c < K::kBSlice / 64; ++c) {
              const int chunk = static_cast<int>(rank) * (K::kBSlice / 64) + c;
              if (kClusterM > 1)
                hg90::tma_load_2d_multicast(b + chunk * (64 * 128), &tmB, &full[stage], n0 + 64 * chunk, k0,
                                            (1u << kClusterM) - 1);
              else
                hg90::tma_load_2d(b + chunk * (64 * 128), &tmB, &full[stage], n0 + 64 * chunk, k0);
            }
          }
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
      if constexpr (kQueue) {  // the end: the next stage, full without data, index -1
        hg90::mbar_wait(&empty[stage], phase ^ 1);
        stage_tile[stage] = -1;
        hg90::mbar_arrive(&full[stage]);
      }
    }
  } else {
    // ---------------- consumers ----------------
    hg90::setmaxnreg_inc<kConsumerRegs>();
    // consumer index: rows [64 cw, 64 cw + 64) of the tile. Through a shuffle it is provably warp-uniform, so the
    // k-loop's descriptors stay in uniform registers; the fused kernels keep wg - 1 and rebuild their descriptors each
    // k-block (there the descriptors kept across the loop made them spill).
    const int cw = K::kFused ? wg - 1 : __shfl_sync(0xffffffffu, wg, 0) - 1;
    // stage 0's descriptors of this consumer's A rows (MN-major, kAT: its 64-column panel, the same offset) and of
    // B; a stage's are one add away
    [[maybe_unused]] const uint64_t da0 = hg90::kblock_desc<K::kAT>(smem_u32(sA) + cw * kWgRows * 128);
    [[maybe_unused]] const uint64_t db0 = hg90::kblock_desc<K::kNN>(smem_u32(sB));
    const int tid = threadIdx.x % 128;
    float d[K::kBN / 2];
    int stage = 0;
    uint32_t phase = 0;
    [[maybe_unused]] uint32_t cphase = 0;  // kFused: the phase parity of this consumer's C_old barrier
    // Release a stage. Cluster: one thread per CTA of the cluster arrives on that CTA's copy of the
    // barrier (the peer's producer multicasts into our copy of the stage too), in parallel.
    auto release = [&](int s) {
      if (kClusterM > 1) {
        if (tid < kClusterM) hg90::mbar_arrive_cluster(&empty[s], static_cast<uint32_t>(tid));
      } else if (tid == 0) {
        hg90::mbar_arrive(&empty[s]);
      }
    };
    [[maybe_unused]] auto qsched = queue_sched<kQueue>(make_sched);
    [[maybe_unused]] SkState sk = make_sk();
    // kQueue: the next tile is the index beside its first k-block's stage, once that stage is full
    auto consume_next = [&]() -> bool {
      if constexpr (!kQueue) {
        return next_piece(sk, kb0, kb1);
      } else {
        // (warp-wide, so that the wait, the loop's exit and the tile's coordinates are provably uniform: mbar_wait's
        // per-thread loop here, or a branch on the loaded index, took the k-loop's stage and phase out of the
        // uniform datapath; the index through redux.sync lands in a uniform register)
        while (!__all_sync(0xffffffffu, hg90::mbar_try_wait(&full[stage], phase))) {
        }
        const int t = __reduce_max_sync(0xffffffffu, stage_tile[stage]);
        if (t < 0) return false;
        outer = inner = 0;
        qsched.at(t, m0, n0, outer, inner);
        sched.row_end = qsched.row_end;
        kb0 = 0;
        kb1 = nk;
        return true;
      }
    };
    while (consume_next()) {
      // (stream-K: a piece without k-block 0 writes a partial tile, no epilogue)
      [[maybe_unused]] const bool owner = !K::kStreamK || kb0 == 0;
      if constexpr (K::kFused) {
        if (owner && tid < 8) bias_prefetch(x, n0, N, m0, M, tid);
      }
      int prev = -1;
      // The half_tile test, warp-uniform by the vote; made again after the k-loop rather than held across it (held,
      // the queue variant spilled one more word)
      [[maybe_unused]] auto half_now = [&]() -> bool {
        if constexpr (K::kHalfTiles)
          return __all_sync(0xffffffffu, half_tile(x, n0, N));
        else
          return false;
      };
      // The k-blocks into acc (d, or its first BN / 4 for a half tile: m64n(BN/2)k16)
      auto kloop = [&](auto& acc) {
        for (int kb = kb0; kb < kb1; ++kb) {
          hg90::mbar_wait(&full[stage], phase);
          hg90::wgmma_fence();
          if constexpr (K::kFused) {
            hg90::wgmma_kblock<T, K::kAT, K::kNN, BK>(acc, smem_u32(sA + stage * K::kABytes) + cw * kWgRows * 128,
                                                      smem_u32(sB + stage * K::kBBytes), kb > kb0);
          } else {
            hg90::wgmma_kblock_desc<T, K::kAT, K::kNN, BK>(acc, hg90::desc_advance(da0, stage * K::kABytes),
                                                           hg90::desc_advance(db0, stage * K::kBBytes), kb > kb0);
          }
          hg90::wgmma_commit();
          // Keep one k-block of MMAs in flight; the one before it is done, so its stage is free.
          hg90::wgmma_wait<1>();
          if (prev >= 0) release(prev);
          prev = stage;
          if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
          }
        }
      };
      if (half_now())
        kloop(*reinterpret_cast<float(*)[BN / 4]>(&d[0]));
      else
        kloop(d);
      // (stream-K: a piece of a tile cut in more than kSkSerialPieces, which stores its share of C itself)
      [[maybe_unused]] bool sk_shared = false;
      if constexpr (K::kStreamK) sk_shared = (!owner || kb1 < nk) && sk_cfg()->splits > kSkSerialPieces;
      [[maybe_unused]] bool cold = false;
      if constexpr (K::kFused) {
        // beta * C_old of a full warpgroup tile: pass 0's C_old into the staging buffer by TMA now, while the
        // last k-block's wgmma run (the previous tile's last store was issued a main loop ago: no wait).
        cold = owner && !sk_shared && fused_cold(x, sched.row_end, m0 + cw * kWgRows);
        if (cold && tid == 0)
          cold_load<T>(CMapAt(&cArg, x, outer, inner), sC + cw * (kWgRows * K::kCStageCols * 2), &cbar[cw], n0,
                       m0 + cw * kWgRows);
      }
      hg90::wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < K::kBN / 2; ++i) hg90::fence_regs(d[i]);
      if (prev >= 0) release(prev);
      const int row0 = m0 + cw * kWgRows;
      if constexpr (K::kStreamK) {
        if (sk_shared) {
          sk_store_partial(d, x.work, cw, tid);
          sk_reduce_store<T>(x.work, sk_cfg(), x, M, N, m0, n0, outer, inner, cw, tid);
          continue;
        }
        if (!owner) {  // serial: the owner reads this partial once its flag is up
          sk_store_partial(d, x.work, cw, tid);
          sk_signal(reinterpret_cast<int*>(x.work) + 2 * static_cast<int>(blockIdx.x) + cw, cw, tid);
          continue;
        }
        if (kb1 < nk) sk_gather(d, x.work, sk_cfg(), smem_u32(smem) + cw * kSkPartFloats * 4, cw, tid);
      }
      if constexpr (K::kFused) {
        const CMapAt cm(&cArg, x, outer, inner);
        uint8_t* sCw = sC + cw * (kWgRows * K::kCStageCols * 2);
        const auto store = [&](const uint8_t* src, int col, int row) { cm.store(src, col, row); };
        // the catalogue's epilogue (no math, the passes unrolled), or the same adding a bias to each pass; without
        // C's map (kCNoMap) the threads store the staged passes
        const bool bias_only = bias_pass_fits(x, n0, N);
        const bool half = half_now();
        const int passes = half ? 1 : BN / kFusedCols;
        if ((bias_only || plain_epilogue(x)) && (x.tma_levels & kCNoMap)) {
          const StagedStore<T> direct{x.C + outer * x.bsc_o + inner * x.bsc_i + static_cast<long long>(row0) * x.ldc_r + n0,
                                      x.ldc_r, min(kWgRows, M - row0), N - n0};
          epilogue_tma<T, K::kCStageCols>(d, direct, sCw, cw, row0, n0, BiasPass<T>{x, bias_only, row0, n0, M}, passes);
        } else if (bias_only || plain_epilogue(x)) {
          epilogue_tma<T, K::kCStageCols>(d, store, sCw, cw, row0, n0, BiasPass<T>{x, bias_only, row0, n0, M}, passes);
        } else {
          epilogue_fused<T>(d, cm, sCw, &cbar[cw], cphase, cold, cw, row0, n0, M, N, sched.row_end, outer, inner, x,
                            half);
        }
      } else if constexpr (K::kTmaStore) {
        const CUtensorMap* tmC = &cArg;
        epilogue_tma<T, K::kCStageCols>(
            d, [&](const uint8_t* src, int col, int row) { hg90::tma_store_2d(tmC, src, col, row); },
            sC + cw * (kWgRows * K::kCStageCols * 2), cw, row0, n0);
      } else {
        epilogue_direct<T>(d, cArg, M, N, row0, n0);
      }
    }
    if constexpr (K::kTmaStore) {
      // The staging buffer must stay valid until the last bulk store has read it.
      if (tid == 0) hg90::tma_store_wait_all<0>();
    }
  }
  // A CTA must not exit while its cluster peer can still arrive on its empty barriers.
  if (kClusterM > 1) hg90::cluster_sync();
}

// Kernels, each deriving from the one it extends (the banner of cu/hgemm_sm90.cu lists what each adds).
struct Ws : Knobs {};  // one 128 x 256 tile per CTA ("tiles" grid), 4 stages, direct stores
struct Persistent : Ws {  // persistent grid, grouped tile order, TMA-store epilogue
  static constexpr bool kPersistent = true;
  static constexpr bool kTmaStore = true;
};
struct Cluster2 : Persistent {  // 2-CTA cluster along M, B multicast to both
  static constexpr int kClusterM = 2;
};
// The staging buffer costs the fourth ring stage; this one keeps 4 stages and stores directly.
struct Cluster2Direct : Cluster2 {
  static constexpr bool kTmaStore = false;
};
struct Acol : Persistent {  // A column-major
  static constexpr bool kAT = true;
};
// The matmul family's fused GEMM (cu/matmul_sm90_fused.cu): the persistent kernel with 4 stages and half-tile
// staging + the fused epilogue, batch and SwiGLU.
struct Fused : Stages<Persistent, 4> {
  static constexpr bool kFused = true;
};
struct FusedStreamK : Fused {
  static constexpr bool kStreamK = true;
};
template <class Rung>
struct Queue : Rung {
  static constexpr bool kQueue = true;
};

}  // namespace hg90g
