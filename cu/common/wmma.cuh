// One parametrised WMMA HGEMM main loop shared by the hgemm_wmma* families (sm_80+: cp.async).
//
// Every rung of the WMMA ladder after the naive one is this template with different named knobs
// (Knobs below): a rung is a struct deriving from the rung before it that names the knobs it changes,
// so it differs from the previous one exactly by the technique its name adds:
//   fragment shape (m16n16k16 / m32n8k16), warp grid per block, fragments per warp, BK,
//   stages (1 = single buffer, 2 = double buffer, 3-4 = multi-stage cp.async pipeline),
//   smem row padding, the global->smem copy (scalar, 128-bit through registers, cp.async 128-bit),
//   accumulator type (half / float), fragment prefetch, static or dynamic shared memory.
//
// Layout: NN, A is M x K row-major, B is K x N row-major, C is M x N row-major; fp16 in and out.
// Bounds: every tile load is guarded (zero fill past M, N, K), every store is guarded, so a block may
// overhang any edge. The 128-bit copies move 8 halves at a time: they need K % 8 == 0 and N % 8 == 0 (the
// chunk is then either fully inside or fully outside, and row starts stay 16-byte aligned); kernels using
// them declare that in `require`. The scalar copy takes any shape.
#pragma once
#include <mma.h>
#include <cuda_fp16.h>
#include <cstdint>
#include "dsmem.cuh"
#include "ptx.cuh"

namespace hg {
namespace wmma_gemm {

using namespace nvcuda;

enum class Copy {
  kScalar,  // one half per thread and load, through registers (the first tiled rung)
  kVec8,    // 128-bit global loads through registers, 128-bit smem stores
  kAsync,   // 128-bit cp.async global -> smem, no registers, overlaps with the MMAs
};

// The knobs of a rung, with the values of the plainest one (the first tiled rung). A rung derives from
// Knobs, or from the rung it improves on, and redefines what it changes. The block geometry (kWarpsM,
// kWarpsN: warp grid; kFragsM, kFragsN: fragments per warp; kBK: K step) has no default: the first
// rung of a family names it.
struct Knobs {
  static constexpr int kFragM = 16, kFragN = 16, kFragK = 16;  // WMMA fragment shape
  static constexpr int kStages = 1;      // smem buffers: 1 single, 2 double, 3-4 cp.async pipeline
  static constexpr int kPad = 0;         // smem row padding (halves)
  static constexpr Copy kCopy = Copy::kScalar;
  using Acc = half;                      // accumulator type
  // Pipelined rungs only: keep two register sets of fragments and load the next K slice (across the
  // K-tile barrier) while the MMAs of the current slice run.
  static constexpr bool kPrefetch = false;
  static constexpr bool kDynamicSmem = false;  // dynamic (extern) shared memory, else a static array
};

// A rung under the declarations' variant axes: stages, and stages x acc.
template <class Rung, int S>
struct Stages : Rung {
  static constexpr int kStages = S;
};
template <class Rung, int S, typename A>
struct StagesAcc : Stages<Rung, S> {
  using Acc = A;
};

// What the kernel body reads: the knobs under short names, and the shapes derived from them.
template <class K>
struct Config {
  static constexpr int FM = K::kFragM, FN = K::kFragN, FK = K::kFragK;
  static constexpr int WARPS_M = K::kWarpsM, WARPS_N = K::kWarpsN, TM = K::kFragsM, TN = K::kFragsN;
  static constexpr int BK = K::kBK, STAGES = K::kStages, PAD = K::kPad;
  static constexpr Copy COPY = K::kCopy;
  using Acc = typename K::Acc;
  static constexpr bool PREFETCH = K::kPrefetch;
  static constexpr bool DSMEM = K::kDynamicSmem;

  static constexpr int kWarps = WARPS_M * WARPS_N;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int WTM = TM * FM, WTN = TN * FN;  // warp tile
  static constexpr int BM = WARPS_M * WTM, BN = WARPS_N * WTN;
  static constexpr int kVec = COPY == Copy::kScalar ? 1 : 8;  // halves per copy

  // A tile: BM x BK row-major, row stride LDA. With PAD = 8 the stride is an odd multiple of 16 bytes
  // modulo 128, so the 8 rows one ldmatrix phase reads land in 8 different 16-byte bank groups.
  static constexpr int LDA = BK + PAD;
  // B tile: for 16-wide fragments BK x BN row-major with stride LDB (same padding argument). For 8-wide
  // fragments (m32n8k16) a 16x8 fragment at column 8*j would start only 16-byte aligned in a row-major
  // tile, but WMMA wants 256-bit aligned pointers; so B is stored column-blocked instead:
  // [BN/8][BK][8], each 8-column block dense (ldm = 8). Its 8 rows of 16 bytes are 128 contiguous bytes:
  // conflict-free without padding, and every fragment starts 256-byte aligned.
  static constexpr bool kBlockedB = (FN == 8);
  static constexpr int LDB = kBlockedB ? 8 : BN + PAD;
  static constexpr int kAHalves = BM * LDA;
  static constexpr int kBHalves = kBlockedB ? BK * BN : BK * LDB;
  static constexpr int kStageHalves = kAHalves + kBHalves;
  static constexpr int kBuffers = STAGES < 1 ? 1 : STAGES;
  static constexpr int kPipeBytes = kBuffers * kStageHalves * 2;

  // Epilogue: each warp stages one fragment at a time in smem (row stride LDE, a multiple of 8 halves /
  // 4 floats as store_matrix_sync requires) and writes it out as one 16-byte chunk per lane.
  static constexpr int LDE = FN + 8;
  static constexpr int kEpiBytes = kWarps * FM * LDE * (int)sizeof(Acc);
  static constexpr int kSmemBytes = kPipeBytes > kEpiBytes ? kPipeBytes : kEpiBytes;

  static constexpr int kAChunks = BM * BK / kVec, kBChunks = BK * BN / kVec;

  static_assert(kThreads <= 1024, "a block holds at most 32 warps");
  static_assert(STAGES <= 1 || COPY == Copy::kAsync, "pipelined buffers are filled by cp.async");
  static_assert(!PREFETCH || STAGES >= 2, "the fragment prefetch runs in the cp.async pipeline");
  static_assert(DSMEM || kSmemBytes <= 48 * 1024, "static shared memory is limited to 48 KB");
  static_assert(!DSMEM || kEpiBytes <= kPipeBytes, "epilogue staging must fit in the pipeline buffers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory over the 227 KB per-block limit of any GPU");
  static_assert((FM == 16 && FN == 16 && FK == 16) || (FM == 32 && FN == 8 && FK == 16),
                "fragment shapes used by this ladder: m16n16k16, m32n8k16");
  static_assert(BK % FK == 0, "BK must be a multiple of the fragment K");
  static_assert(BK % kVec == 0 && BN % kVec == 0, "a copy chunk must not straddle a tile row");
  static_assert(kAChunks % kThreads == 0 && kBChunks % kThreads == 0,
                "every thread copies the same number of chunks (no idle-thread branch in the loop)");
  static_assert(PAD % 8 == 0, "padding keeps rows 16-byte aligned (cp.async, ldmatrix) and ldm % 8 == 0");
  static_assert((kAHalves * 2) % 32 == 0 && (kStageHalves * 2) % 32 == 0 && (FM * LDA * 2) % 32 == 0 &&
                    (FK * LDB * 2) % 32 == 0,
                "every WMMA fragment pointer into smem must be 256-bit aligned");
  static_assert(FM * FN == 32 * 8, "epilogue: one 8-half chunk per lane per fragment");
  static_assert((FM * LDE * (int)sizeof(Acc)) % 32 == 0, "epilogue staging must stay 256-bit aligned");
};

template <class Cfg>
using FragA = wmma::fragment<wmma::matrix_a, Cfg::FM, Cfg::FN, Cfg::FK, half, wmma::row_major>;
template <class Cfg>
using FragB = wmma::fragment<wmma::matrix_b, Cfg::FM, Cfg::FN, Cfg::FK, half, wmma::row_major>;
template <class Cfg>
using FragC = wmma::fragment<wmma::accumulator, Cfg::FM, Cfg::FN, Cfg::FK, typename Cfg::Acc>;

// Offset (halves) of B element (k, n) inside one stage's B tile.
template <class Cfg>
__device__ __forceinline__ int b_offset(int k, int n) {
  if constexpr (Cfg::kBlockedB)
    return (n >> 3) * (Cfg::BK * 8) + k * 8 + (n & 7);
  else
    return k * Cfg::LDB + n;
}

// Copies the K-tile starting at column k0 of A and row k0 of B into one stage buffer.
template <class Cfg>
__device__ __forceinline__ void load_tile(half* sA, half* sB, const half* __restrict__ A,
                                          const half* __restrict__ B, int M, int N, int K, int m0, int n0,
                                          int k0, int tid) {
  constexpr int V = Cfg::kVec;
  constexpr int A_CPR = Cfg::BK / V;  // chunks per A tile row
  constexpr int B_CPR = Cfg::BN / V;  // chunks per B tile row
#pragma unroll
  for (int i = 0; i < Cfg::kAChunks / Cfg::kThreads; ++i) {
    const int c = tid + i * Cfg::kThreads;
    const int r = c / A_CPR, kc = (c % A_CPR) * V;  // consecutive threads walk a row: coalesced
    const int gr = m0 + r, gk = k0 + kc;
    const bool ok = gr < M && gk < K;  // with V = 8, K % 8 == 0: the whole chunk is in or out
    half* dst = sA + r * Cfg::LDA + kc;
    const half* src = A + (size_t)gr * K + gk;
    if constexpr (Cfg::COPY == Copy::kAsync) {
      cp_async_16_zfill(dst, ok ? src : A, ok ? 16 : 0);  // src-size 0: no read, 16 zero bytes
    } else if constexpr (Cfg::COPY == Copy::kVec8) {
      *reinterpret_cast<uint4*>(dst) = ok ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    } else {
      *dst = ok ? *src : __float2half(0.f);
    }
  }
#pragma unroll
  for (int i = 0; i < Cfg::kBChunks / Cfg::kThreads; ++i) {
    const int c = tid + i * Cfg::kThreads;
    int r, nc;
    if constexpr (Cfg::kBlockedB) {
      // k fastest: a warp fills 16-byte rows of a column block back to back (conflict-free smem
      // writes) while still reading whole 32-byte sectors of each global row (2 lanes per row).
      static_assert(Cfg::BK * 2 >= 32 && V == 8, "blocked B copy needs 128-bit chunks and BK >= 16");
      r = c % Cfg::BK;
      nc = (c / Cfg::BK) * V;
    } else {
      r = c / B_CPR;
      nc = (c % B_CPR) * V;
    }
    const int gk = k0 + r, gn = n0 + nc;
    const bool ok = gk < K && gn < N;
    half* dst = sB + b_offset<Cfg>(r, nc);
    const half* src = B + (size_t)gk * N + gn;
    if constexpr (Cfg::COPY == Copy::kAsync) {
      cp_async_16_zfill(dst, ok ? src : B, ok ? 16 : 0);
    } else if constexpr (Cfg::COPY == Copy::kVec8) {
      *reinterpret_cast<uint4*>(dst) = ok ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
    } else {
      *dst = ok ? *src : __float2half(0.f);
    }
  }
}

// Fragments of one FK slice (column kk of the A tile, row kk of the B tile) for one warp: TM A and TN B
// fragments, each one ldmatrix (.trans for B) under the hood.
template <class Cfg>
__device__ __forceinline__ void load_frags(const half* sA, const half* sB, FragA<Cfg> (&a)[Cfg::TM],
                                           FragB<Cfg> (&b)[Cfg::TN], int kk, int wm, int wn) {
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
    wmma::load_matrix_sync(a[i], sA + (wm * Cfg::WTM + i * Cfg::FM) * Cfg::LDA + kk, Cfg::LDA);
#pragma unroll
  for (int j = 0; j < Cfg::TN; ++j)
    wmma::load_matrix_sync(b[j], sB + b_offset<Cfg>(kk, wn * Cfg::WTN + j * Cfg::FN), Cfg::LDB);
}

template <class Cfg>
__device__ __forceinline__ void mma_frags(FragC<Cfg> (&acc)[Cfg::TM][Cfg::TN], const FragA<Cfg> (&a)[Cfg::TM],
                                          const FragB<Cfg> (&b)[Cfg::TN]) {
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
}

// All MMAs of one K-tile for one warp.
template <class Cfg>
__device__ __forceinline__ void mma_tile(const half* sA, const half* sB, FragC<Cfg> (&acc)[Cfg::TM][Cfg::TN],
                                         int wm, int wn) {
#pragma unroll
  for (int kk = 0; kk < Cfg::BK; kk += Cfg::FK) {
    FragA<Cfg> a[Cfg::TM];
    FragB<Cfg> b[Cfg::TN];
    load_frags<Cfg>(sA, sB, a, b, kk, wm, wn);
    mma_frags<Cfg>(acc, a, b);
  }
}

template <typename T>
__device__ __forceinline__ half to_half(T v) {
  if constexpr (sizeof(T) == 2) return v; else return __float2half_rn(v);
}

// Guarded epilogue through a per-warp smem staging fragment: lane l writes the 8 consecutive outputs
// starting at element 8*l of the fragment, as one 16-byte store when the kernel copies 8-wide (N % 8 == 0
// then guarantees chunk alignment and all-in/all-out), element by element otherwise.
template <class Cfg>
__device__ __forceinline__ void store_tile(FragC<Cfg> (&acc)[Cfg::TM][Cfg::TN], unsigned char* smem,
                                           half* __restrict__ C, int M, int N, int m0, int n0, int warp,
                                           int lane) {
  using Acc = typename Cfg::Acc;
  Acc* stage = reinterpret_cast<Acc*>(smem) + warp * Cfg::FM * Cfg::LDE;
  const int e = lane * 8, r = e / Cfg::FN, c = e % Cfg::FN;
  const int wm = warp / Cfg::WARPS_N, wn = warp % Cfg::WARPS_N;
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) {
      wmma::store_matrix_sync(stage, acc[i][j], Cfg::LDE, wmma::mem_row_major);
      __syncwarp();
      __align__(16) half out[8];
#pragma unroll
      for (int t = 0; t < 8; ++t) out[t] = to_half(stage[r * Cfg::LDE + c + t]);
      const int gr = m0 + wm * Cfg::WTM + i * Cfg::FM + r;
      const int gc = n0 + wn * Cfg::WTN + j * Cfg::FN + c;
      if (gr < M) {
        half* dst = C + (size_t)gr * N + gc;
        if constexpr (Cfg::kVec == 8) {
          if (gc < N) *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(out);
        } else {
#pragma unroll
          for (int t = 0; t < 8; ++t)
            if (gc + t < N) dst[t] = out[t];
        }
      }
      __syncwarp();  // the next store_matrix_sync overwrites the staging buffer
    }
  }
}

// The whole block: main loop over K-tiles, then the epilogue. `smem` holds Cfg::kSmemBytes bytes.
template <class Cfg>
__device__ __forceinline__ void gemm(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C,
                                     int M, int N, int K, unsigned char* smem) {
  // Column tile from the swizzled grid (CONTRACT.md "tiles+swizzle"); with a plain "tiles" grid
  // gridDim.z == 1 and this is blockIdx.x. The last z strip may be short: its extra blocks leave.
  const int bx = blockIdx.z * gridDim.x + blockIdx.x;
  const int n0 = bx * Cfg::BN, m0 = blockIdx.y * Cfg::BM;
  if (n0 >= N) return;

  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int wm = warp / Cfg::WARPS_N, wn = warp % Cfg::WARPS_N;
  half* const sbase = reinterpret_cast<half*>(smem);

  FragC<Cfg> acc[Cfg::TM][Cfg::TN];
#pragma unroll
  for (int i = 0; i < Cfg::TM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::TN; ++j) wmma::fill_fragment(acc[i][j], typename Cfg::Acc(0));

  const int KT = (K + Cfg::BK - 1) / Cfg::BK;

  if constexpr (Cfg::STAGES <= 1) {
    // Single buffer: copy, wait, compute, and a second barrier before the buffer is overwritten.
    half* sA = sbase;
    half* sB = sbase + Cfg::kAHalves;
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
      load_tile<Cfg>(sA, sB, A, B, M, N, K, m0, n0, kt * Cfg::BK, tid);
      if constexpr (Cfg::COPY == Copy::kAsync) {
        cp_async_commit();
        cp_async_wait<0>();
      }
      __syncthreads();
      mma_tile<Cfg>(sA, sB, acc, wm, wn);
      __syncthreads();
    }
  } else {
    constexpr int S = Cfg::STAGES;
    // Prologue: tiles 0..S-2 in flight. A group is committed even when empty so that the group count,
    // and with it the wait_group arithmetic below, does not depend on K.
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
      if (s < KT)
        load_tile<Cfg>(sbase + s * Cfg::kStageHalves, sbase + s * Cfg::kStageHalves + Cfg::kAHalves, A, B, M, N,
                       K, m0, n0, s * Cfg::BK, tid);
      cp_async_commit();
    }
    int read = 0, write = S - 1;  // stage buffers: consumed now / refilled now
    if constexpr (Cfg::PREFETCH) {
      // Slice q of tile kt: refill (q == 0), MMAs on the fragments loaded one slice earlier, then (last
      // slice) wait for tile kt + 1 and cross the barrier, then load the next slice's fragments into the
      // other register set. The MMAs are issued before the wait/barrier, so the tensor cores stay busy
      // while the warp waits, and the ldmatrix latency hides behind them.
      // Group count: before the wait in iteration kt, S - 1 + kt + 1 groups are committed; leaving S - 2
      // pending means tiles 0..kt+1 have landed. Buffer `write` (tile kt - 1) was last read before the
      // barrier of iteration kt - 1, so refilling it at slice 0 of iteration kt is safe.
      constexpr int KK = Cfg::BK / Cfg::FK;
      static_assert(KK % 2 == 0, "the two fragment sets alternate per slice: slices per K-tile must be even");
      FragA<Cfg> a[2][Cfg::TM];
      FragB<Cfg> b[2][Cfg::TN];
      cp_async_wait<S - 2>();
      __syncthreads();
      load_frags<Cfg>(sbase, sbase + Cfg::kAHalves, a[0], b[0], 0, wm, wn);
#pragma unroll 1
      for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
        for (int q = 0; q < KK; ++q) {
          if (q == 0) {
            const int next = kt + S - 1;
            if (next < KT)
              load_tile<Cfg>(sbase + write * Cfg::kStageHalves, sbase + write * Cfg::kStageHalves + Cfg::kAHalves,
                             A, B, M, N, K, m0, n0, next * Cfg::BK, tid);
            cp_async_commit();
          }
          mma_frags<Cfg>(acc, a[q & 1], b[q & 1]);
          if (q == KK - 1) {
            cp_async_wait<S - 2>();
            __syncthreads();
            read = read + 1 == S ? 0 : read + 1;
            write = write + 1 == S ? 0 : write + 1;
          }
          if (q < KK - 1 || kt + 1 < KT)
            load_frags<Cfg>(sbase + read * Cfg::kStageHalves, sbase + read * Cfg::kStageHalves + Cfg::kAHalves,
                            a[(q + 1) & 1], b[(q + 1) & 1], ((q + 1) % KK) * Cfg::FK, wm, wn);
        }
      }
    } else {
#pragma unroll 1
      for (int kt = 0; kt < KT; ++kt) {
        // (S - 1) + kt groups are committed; leaving S - 2 pending means tile kt has landed (for this
        // thread), and the barrier makes it everyone's. The same barrier proves that every warp finished
        // computing on buffer `write` (tile kt - 1), so it may be refilled: one barrier per K-tile.
        cp_async_wait<S - 2>();
        __syncthreads();
        const int next = kt + S - 1;
        if (next < KT)
          load_tile<Cfg>(sbase + write * Cfg::kStageHalves, sbase + write * Cfg::kStageHalves + Cfg::kAHalves, A,
                         B, M, N, K, m0, n0, next * Cfg::BK, tid);
        cp_async_commit();
        mma_tile<Cfg>(sbase + read * Cfg::kStageHalves, sbase + read * Cfg::kStageHalves + Cfg::kAHalves, acc,
                      wm, wn);
        read = read + 1 == S ? 0 : read + 1;
        write = write + 1 == S ? 0 : write + 1;
      }
    }
    cp_async_wait<0>();  // only empty groups remain, but leave nothing in flight into the staging reuse
    __syncthreads();     // every warp is done reading the pipeline buffers the epilogue reuses
  }

  store_tile<Cfg>(acc, smem, C, M, N, m0, n0, warp, lane);
}

// Kernel body: the smem comes either from a static array (kernels that stay under the 48 KB static
// limit and need no launch attribute) or from the dynamic window sized by the manifest's `dsmem`
// (stages * (BM * (BK + 8) + BK * (BN + 8)) * 2 = kPipeBytes, which the epilogue staging fits in).
template <class Cfg>
__device__ __forceinline__ void kernel_body(const half* A, const half* B, half* C, int M, int N, int K) {
  if constexpr (Cfg::DSMEM) {
    extern __shared__ __align__(128) unsigned char hg_wmma_dsmem[];
    gemm<Cfg>(A, B, C, M, N, K, hg_wmma_dsmem);
  } else {
    __shared__ __align__(128) unsigned char smem[Cfg::kSmemBytes];
    gemm<Cfg>(A, B, C, M, N, K, smem);
  }
}

// The dynamic shared memory a kernel needs (exported per symbol with HG_EXPORT_DSMEM).
template <class Cfg>
constexpr int dsmem_bytes = Cfg::DSMEM ? Cfg::kSmemBytes : 0;

}  // namespace wmma_gemm
}  // namespace hg
