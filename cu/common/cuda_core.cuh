// Shared core of the HGEMM CUDA-core ladder (cu/hgemm_cuda_*.cu): one templated block-tile GEMM whose
// named knobs (Knobs below) are exactly the techniques the ladder's names promise. Every rung
// (cuda_core_ladder.cuh) is a struct deriving from the rung it improves on that names the knobs it
// changes, so two rungs differ only in the knobs their names differ in.
//
//   NN layout: A is M x K row-major, B is K x N row-major, C is M x N row-major; fp16 in, fp16 out.
//   One block computes a kBM x kBN tile of C, K in steps of kBK; each thread a kTM x kTN tile, so
//   THREADS = (kBM/kTM) * (kBN/kTN). These and kVec have no default: every first rung names them.
//   Requires M % BM == 0, N % BN == 0, K % BK == 0 (declared in each .toml `require`); pointers
//   aligned to the global vector width (`align`).
//
// Technique knobs (tiled_hgemm reads kVec as VEC, kPack as PACK, kALayout as AL, kAKVec as AKV, kPipe
// as PIPE, kAcc as ACC):
//   VEC    halves per global load of one thread: 4 (f16x4, 64-bit) or 8 (f16x8, 128-bit).
//   PACK   false: every global/shared access is split into 32-bit half2 pieces ("unpacked");
//          true:  one VEC-wide access (LDG.E.64 / LDG.E.128, LDS.64 / LDS.128, STG.64 / STG.128).
//   AL     layout of the A tile in shared memory:
//          kRowMajor     sA[BM][BK] as in global memory; a thread's TM rows are contiguous, so the
//                        four rows a warp reads at one k sit 8 rows (a multiple of 128 bytes) apart:
//                        the same banks -> 4-way bank conflicts. This is the rung "bcf" improves on.
//          kTransposed   "bcf": sA[BK][BM], stored transposed from registers. The TM values a thread
//                        needs at one k are contiguous: one vector load, conflict-free. Rows of sA are
//                        XOR-swizzled in 16-byte blocks (ATSwizzle) so the transposing stores of a warp
//                        are conflict-free too, with no padding.
//          kInterleaved  sA[BM][BK+8] row-major (what cp.async can produce: it cannot transpose), and a
//                        thread's rows are strided by BM/TM so a warp reads consecutive padded rows:
//                        conflict-free; each row is read AKV k's at a time.
//   AKV    halves of one A row read at once along k (kRowMajor / kInterleaved): 1 = scalar LDS.U16;
//          kTransposed reads one k at a time (AKV 1).
//   PIPE   kSingle: one smem buffer, two barriers per K step (the classic sliced-K loop).
//          kDbuf:   two smem buffers; the next tile is fetched into registers while this one is
//                   computed, then stored to the other buffer: one __syncthreads per K step.
//          kAsync:  two smem buffers filled by cp.async (LDGSTS, no register staging): one
//                   __syncthreads per K step.
//   ACC    kF32: halves converted to fp32 and accumulated with FFMA (accuracy of an fp32 GEMM).
//          kH2:  half2 math: HFMA2 does two fp16 FMAs per instruction (twice the FFMA rate) into half2
//                partial sums; every kFlushK = 16 k these short fp16 partial sums are added into fp32
//                accumulators, so the rounding error stays that of a 16-term fp16 dot product (~6e-4
//                relative on N(0,1) data, simulated) instead of growing like sqrt(K) as a pure fp16
//                accumulator's does (~1e-2 at K=4096; cuBLAS COMPUTE_16F ~2.4e-3). Declared acc="f16".
#pragma once
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>
#include "ptx.cuh"

namespace hg::cc {

enum class ALayout { kRowMajor, kTransposed, kInterleaved };
enum class Pipe { kSingle, kDbuf, kAsync };
enum class Acc { kF32, kH2 };

// ---- vector moves of NH halves (global <-> registers <-> shared) ----
// PACK: one access of NH*2 bytes; otherwise NH/2 separate 32-bit (half2) accesses.
__device__ __forceinline__ uint32_t h2_bits(half2 v) { return *reinterpret_cast<const uint32_t*>(&v); }
__device__ __forceinline__ half2 bits_h2(uint32_t v) { return *reinterpret_cast<const half2*>(&v); }

// The register side is rebuilt word by word from/into a uint2/uint4 value: reinterpreting a local
// half2 array as uint4 lets the compiler split the access into 32-bit pieces.
template <int NH, bool PACK>
__device__ __forceinline__ void ld_halves(half2 (&dst)[NH / 2], const half* src) {
  static_assert(NH == 2 || NH == 4 || NH == 8, "vector of 2, 4 or 8 halves");
  if constexpr (PACK && NH == 8) {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    dst[0] = bits_h2(v.x), dst[1] = bits_h2(v.y), dst[2] = bits_h2(v.z), dst[3] = bits_h2(v.w);
  } else if constexpr (PACK && NH == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(src);
    dst[0] = bits_h2(v.x), dst[1] = bits_h2(v.y);
  } else {
#pragma unroll
    for (int i = 0; i < NH / 2; ++i) dst[i] = reinterpret_cast<const half2*>(src)[i];
  }
}
template <int NH, bool PACK>
__device__ __forceinline__ void st_halves(half* dst, const half2 (&src)[NH / 2]) {
  static_assert(NH == 2 || NH == 4 || NH == 8, "vector of 2, 4 or 8 halves");
  if constexpr (PACK && NH == 8) {
    *reinterpret_cast<uint4*>(dst) = make_uint4(h2_bits(src[0]), h2_bits(src[1]), h2_bits(src[2]), h2_bits(src[3]));
  } else if constexpr (PACK && NH == 4) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(h2_bits(src[0]), h2_bits(src[1]));
  } else {
#pragma unroll
    for (int i = 0; i < NH / 2; ++i) reinterpret_cast<half2*>(dst)[i] = src[i];
  }
}
// Global stores of C as one st.global.v4/v2 (STG.E.128 / STG.E.64). A plain uint4 assignment is split
// by the compiler into 32-bit stores here: it cannot prove the row address (row * N) 16-byte aligned.
template <int NH, bool PACK>
__device__ __forceinline__ void st_global_halves(half* dst, const half2 (&src)[NH / 2]) {
  if constexpr (PACK && NH == 8) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(h2_bits(src[0])), "r"(h2_bits(src[1])),
                 "r"(h2_bits(src[2])), "r"(h2_bits(src[3]))
                 : "memory");
  } else if constexpr (PACK && NH == 4) {
    asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(dst), "r"(h2_bits(src[0])), "r"(h2_bits(src[1])) : "memory");
  } else {
    st_halves<NH, false>(dst, src);
  }
}
__device__ __forceinline__ half half_of(half2 v, int i) { return i == 0 ? __low2half(v) : __high2half(v); }

// static_for<N>(f) calls f(std::integral_constant<int, i>) for i = 0..N-1 (compile-time i).
template <int I, int N, class F>
__device__ __forceinline__ void static_for_impl(F&& f) {
  if constexpr (I < N) {
    f(std::integral_constant<int, I>{});
    static_for_impl<I + 1, N>(f);
  }
}
template <int N, class F>
__device__ __forceinline__ void static_for(F&& f) { static_for_impl<0, N>(f); }

// ---- one ROWS x COLS tile of a row-major global matrix, cut into VEC-half chunks over THREADS ----
// Default: chunk c = tid + i * THREADS is row c / (COLS/VEC), column (c % (COLS/VEC)) * VEC, so
// consecutive threads read consecutive 8/16-byte pieces of a row (coalesced). When the tile has fewer
// chunks than threads, the last threads idle during the copy.
// RUNS: a thread's kIters chunks lie in one row, TPR threads interleaved per row; chunk i is at a
// constant offset i * TPR * VEC from chunk 0, so all its addresses come from one register plus
// immediates. Register-bound kernels use it: the default map keeps one 64-bit address per chunk live.
template <int ROWS, int COLS, int VEC, int THREADS, bool RUNS = false>
struct TileMap {
  static constexpr int kPerRow = COLS / VEC;
  static constexpr int kChunks = ROWS * kPerRow;
  static constexpr int kIters = (kChunks + THREADS - 1) / THREADS;
  static constexpr int TPR = RUNS ? kPerRow / kIters : 1;
  static_assert(COLS % VEC == 0, "tile width must be a whole number of vectors");
  static_assert(!RUNS || (kChunks % THREADS == 0 && kPerRow % kIters == 0), "RUNS: whole runs per row");
  __device__ static bool active(int tid, int i) { return kChunks % THREADS == 0 || tid + i * THREADS < kChunks; }
  __device__ static int row(int tid, int i) { return RUNS ? tid / TPR : (tid + i * THREADS) / kPerRow; }
  __device__ static int col(int tid, int i) {
    return RUNS ? (tid % TPR + i * TPR) * VEC : (tid + i * THREADS) % kPerRow * VEC;
  }
};

// Register-staged copy (kSingle / kDbuf): global -> registers, later registers -> shared memory.
template <int ROWS, int COLS, int VEC, bool PACK, int THREADS, bool RUNS = false>
struct RegStage {
  using Map = TileMap<ROWS, COLS, VEC, THREADS, RUNS>;
  half2 r[Map::kIters][VEC / 2];

  // Chunks [I0, I1) of this thread (all by default): a register-bound kernel stages a tile in parts.
  template <int I0 = 0, int I1 = Map::kIters>
  __device__ __forceinline__ void load(const half* __restrict__ g, int ld, int tid) {
#pragma unroll
    for (int i = I0; i < I1; ++i)
      if (Map::active(tid, i)) ld_halves<VEC, PACK>(r[i], g + (size_t)Map::row(tid, i) * ld + Map::col(tid, i));
  }
  // Same orientation as global memory: s[row * PITCH + col].
  template <int PITCH, int I0 = 0, int I1 = Map::kIters>
  __device__ __forceinline__ void store(half* s, int tid) const {
#pragma unroll
    for (int i = I0; i < I1; ++i)
      if (Map::active(tid, i)) st_halves<VEC, PACK>(s + Map::row(tid, i) * PITCH + Map::col(tid, i), r[i]);
  }
  // Transposed ("bcf"): element (row, col) goes to s[col * ROWS + SWZ::col(col, row)], one 16-bit
  // store per element.
  template <class SWZ, int I0 = 0, int I1 = Map::kIters>
  __device__ __forceinline__ void store_transposed(half* s, int tid) const {
#pragma unroll
    for (int i = I0; i < I1; ++i)
      if (Map::active(tid, i)) {
        // The chunk's VEC k's share one swizzle (k / VEC is constant): one base address, and the
        // VEC stores differ by immediate offsets (j * ROWS), keeping address registers few.
        const int c = Map::col(tid, i);
        half* d = s + c * ROWS + SWZ::col(c, Map::row(tid, i));
#pragma unroll
        for (int j = 0; j < VEC; ++j) d[j * ROWS] = half_of(r[i][j / 2], j % 2);
      }
  }
};

// Placement of A^T (BK rows of BM halves) for kTransposed. A warp's 32 loaded chunks cover
// R = 32 / G tile rows (m) times G = BK / VEC chunk columns (k). For one j, its 32 transposing stores
// go to G k-rows that are VEC apart; unswizzled, those start in the same bank (a k-row is a multiple
// of 128 bytes) and the G groups of R consecutive m collide. XOR-ing m with ((k / VEC) % G) * R moves
// group g to its own R-half window: conflict-free. Readers fetch 8 (or TM) consecutive m starting at
// a multiple of 8: the XOR touches only bits >= log2(R) >= 3 of m, so such a vector stays contiguous.
template <int BM, int BK, int VEC>
struct ATSwizzle {
  static constexpr int G = BK / VEC > 0 ? BK / VEC : 1;
  static constexpr int R = 32 / G;
  static_assert(G <= 4 && 32 % G == 0, "at most 4 chunk columns per A row: R >= 8 keeps 16-byte vectors whole");
  static_assert(BM % 32 == 0, "the XOR stays inside the tile");
  __device__ static int col(int k, int m) { return m ^ ((k / VEC) % G * R); }
};

// cp.async copy (kAsync): global -> shared directly (LDGSTS), same orientation, no registers.
template <int ROWS, int COLS, int VEC, int THREADS, int PITCH>
__device__ __forceinline__ void async_copy(half* s, const half* __restrict__ g, int ld, int tid) {
  using Map = TileMap<ROWS, COLS, VEC, THREADS>;
  static_assert(VEC == 8 || VEC == 4, "cp.async copies 16 or 8 bytes");
#pragma unroll
  for (int i = 0; i < Map::kIters; ++i)
    if (Map::active(tid, i)) {
      half* dst = s + Map::row(tid, i) * PITCH + Map::col(tid, i);
      const half* src = g + (size_t)Map::row(tid, i) * ld + Map::col(tid, i);
      if constexpr (VEC == 8) hg::cp_async_16(dst, src);
      else hg::cp_async_8(dst, src);
    }
}

// ---- the A operand of one thread for KG consecutive k: TM values per k ----
// row_of(m): which tile row the thread's m-th row is (also the C row it writes).
template <ALayout AL, int TM, int TY, int AKV, bool PACK, class SWZ>
struct AFrag {
  static constexpr int KG = AL == ALayout::kTransposed ? 1 : AKV;  // k's fetched per load
  static_assert(AL != ALayout::kTransposed || TM % 2 == 0, "transposed A is read as half2 pairs");
  static_assert(KG == 1 || KG % 2 == 0, "A k-vectors are whole half2s");
  // kTransposed: v[m/2] holds rows (m, m+1) at one k. kRowMajor/kInterleaved with KG >= 2: v[m][kk/2]
  // holds k's (kk, kk+1) of row m. KG == 1: s[m] is a scalar.
  static constexpr int kRegs = AL == ALayout::kTransposed ? TM / 2 : (KG == 1 ? TM : TM * KG / 2);
  half2 v[kRegs];
  half s[KG == 1 && AL != ALayout::kTransposed ? TM : 1];

  __device__ static int row_of(int ty, int m) { return AL == ALayout::kInterleaved ? ty + m * TY : ty * TM + m; }

  // sA points at the buffer; k0 is the first k of the group; PITCH is the row pitch of sA.
  template <int PITCH>
  __device__ __forceinline__ void load(const half* sA, int k0, int ty) {
    if constexpr (AL == ALayout::kTransposed) {
      // TM consecutive m (8 at a time) of k-row k0, each 8-block at its swizzled place.
      constexpr int V = TM < 8 ? TM : 8;
#pragma unroll
      for (int j = 0; j < TM / V; ++j)
        ld_halves<V, PACK>(reinterpret_cast<half2(&)[V / 2]>(v[j * V / 2]), sA + k0 * PITCH + SWZ::col(k0, ty * TM + j * V));
    } else if constexpr (KG == 1) {
#pragma unroll
      for (int m = 0; m < TM; ++m) s[m] = sA[row_of(ty, m) * PITCH + k0];
    } else {
#pragma unroll
      for (int m = 0; m < TM; ++m)
        ld_halves<KG, PACK>(reinterpret_cast<half2(&)[KG / 2]>(v[m * KG / 2]), sA + row_of(ty, m) * PITCH + k0);
    }
  }
  // Value of row m at k = k0 + kk.
  __device__ __forceinline__ half at(int m, int kk) const {
    if constexpr (AL == ALayout::kTransposed) return half_of(v[m / 2], m % 2);
    else if constexpr (KG == 1) return s[m];
    else return half_of(v[m * KG / 2 + kk / 2], kk % 2);
  }
  // The same value in both lanes of a half2 (HFMA2 operand selector .H0_H0 / .H1_H1, no extra move).
  __device__ __forceinline__ half2 bcast(int m, int kk) const {
    if constexpr (AL == ALayout::kTransposed) return m % 2 ? __high2half2(v[m / 2]) : __low2half2(v[m / 2]);
    else if constexpr (KG == 1) return __half2half2(s[m]);
    else return kk % 2 ? __high2half2(v[m * KG / 2 + kk / 2]) : __low2half2(v[m * KG / 2 + kk / 2]);
  }
};

// ---- accumulators of one thread's TM x TN tile ----
template <Acc ACC, int TM, int TN>
struct Accum;

template <int TM, int TN>
struct Accum<Acc::kF32, TM, TN> {
  float c[TM][TN];
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int n = 0; n < TN; ++n) c[m][n] = 0.f;
  }
  // One k: c += a(:) * b(:)^T. The TM + TN conversions are amortised over TM * TN FFMAs.
  template <class AF>
  __device__ __forceinline__ void fma(const AF& a, int kk, const half2 (&b)[TN / 2]) {
    float bf[TN];
#pragma unroll
    for (int n = 0; n < TN / 2; ++n) {
      const float2 t = __half22float2(b[n]);
      bf[2 * n] = t.x;
      bf[2 * n + 1] = t.y;
    }
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      const float af = __half2float(a.at(m, kk));
#pragma unroll
      for (int n = 0; n < TN; ++n) c[m][n] = fmaf(af, bf[n], c[m][n]);
    }
  }
  __device__ __forceinline__ void flush() {}
  __device__ __forceinline__ half2 out(int m, int n2) const { return __floats2half2_rn(c[m][2 * n2], c[m][2 * n2 + 1]); }
};

template <int TM, int TN>
struct Accum<Acc::kH2, TM, TN> {
  half2 h[TM][TN / 2];  // short fp16 partial sums (at most kFlushK terms)
  float c[TM][TN];      // fp32 running sums
  __device__ __forceinline__ void zero_h() {
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int n = 0; n < TN / 2; ++n) h[m][n] = __float2half2_rn(0.f);
  }
  __device__ __forceinline__ void zero() {
    zero_h();
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int n = 0; n < TN; ++n) c[m][n] = 0.f;
  }
  // One k: TM * TN / 2 HFMA2, each two fp16 FMAs; a(m) broadcast to both lanes.
  template <class AF>
  __device__ __forceinline__ void fma(const AF& a, int kk, const half2 (&b)[TN / 2]) {
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      const half2 am = a.bcast(m, kk);
#pragma unroll
      for (int n = 0; n < TN / 2; ++n) h[m][n] = __hfma2(am, b[n], h[m][n]);
    }
  }
  // Move the fp16 partial sums into fp32 and restart them (called every kFlushK k's).
  __device__ __forceinline__ void flush() {
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int n = 0; n < TN / 2; ++n) {
        const float2 t = __half22float2(h[m][n]);
        c[m][2 * n] += t.x;
        c[m][2 * n + 1] += t.y;
      }
    zero_h();
  }
  __device__ __forceinline__ half2 out(int m, int n2) const { return __floats2half2_rn(c[m][2 * n2], c[m][2 * n2 + 1]); }
};

// fp16 partial sums span this many k before they are added into fp32 (see kH2 above).
constexpr int kFlushK = 16;

// ---- the knobs of a rung ----
// The values of the plainest rung; a rung derives from Knobs, or from the rung it improves on, and
// redefines the knobs it changes (the list above). kBM, kBN, kBK, kTM, kTN and kVec have no default.
struct Knobs {
  static constexpr bool kPack = false;
  static constexpr ALayout kALayout = ALayout::kRowMajor;
  static constexpr int kAKVec = 1;
  static constexpr Pipe kPipe = Pipe::kSingle;
  static constexpr Acc kAcc = Acc::kF32;  // the acc = f32 build; AccH2<Rung> is its acc = f16 variant
  static constexpr int kMinBlocks = 1;    // __launch_bounds__ blocks per SM
};

// The acc = f16 variant of a rung (half2 math). Its fp16 partial sums come on top of the fp32
// accumulators and need ~150-255 registers per thread: one block per SM.
template <class Rung>
struct AccH2 : Rung {
  static constexpr Acc kAcc = Acc::kH2;
  static constexpr int kMinBlocks = 1;
};

template <class Rung>
constexpr int kThreads = (Rung::kBM / Rung::kTM) * (Rung::kBN / Rung::kTN);

// ---- the block-tile GEMM ----
template <class Rung>
__device__ __forceinline__ void tiled_hgemm(const half* __restrict__ A, const half* __restrict__ B,
                                            half* __restrict__ C, int M, int N, int K) {
  constexpr int BM = Rung::kBM, BN = Rung::kBN, BK = Rung::kBK, TM = Rung::kTM, TN = Rung::kTN;
  constexpr int VEC = Rung::kVec, AKV = Rung::kAKVec;
  constexpr bool PACK = Rung::kPack;
  constexpr ALayout AL = Rung::kALayout;
  constexpr Pipe PIPE = Rung::kPipe;
  constexpr Acc ACC = Rung::kAcc;
  constexpr int TX = BN / TN, TY = BM / TM, THREADS = TX * TY;
  static_assert(BM % TM == 0 && BN % TN == 0, "thread tiles must tile the block tile");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps");
  static_assert(Rung::kMinBlocks >= 1 && Rung::kMinBlocks * THREADS <= 2048, "an SM holds at most 2048 threads");
  static_assert(VEC == 4 || VEC == 8, "global vectors of 4 (64-bit) or 8 (128-bit) halves");
  static_assert(AL != ALayout::kTransposed || AKV == 1, "transposed A is read one k at a time");
  static_assert(TN % 2 == 0 && (TN == 2 || TN == 4 || TN == 8), "B fragment is one 2/4/8-half vector");
  static_assert(PIPE != Pipe::kAsync || AL != ALayout::kTransposed, "cp.async copies verbatim: no transpose");
  static_assert(PIPE != Pipe::kAsync || PACK, "cp.async moves whole vectors");
  // A warp is WX threads along N by WY along M: 8 x 4, so at one k it reads 8 * TN * 2 contiguous
  // bytes of B and only 4 rows of A (broadcast to the 8 threads that share a row).
  constexpr int WX = TX < 8 ? TX : 8, WY = 32 / WX;
  static_assert(TX % WX == 0 && TY % WY == 0, "warps must tile the thread grid");
  using SWZ = ATSwizzle<BM, BK, VEC>;
  using AF = AFrag<AL, TM, TY, AKV, PACK, SWZ>;
  static_assert(BK % AF::KG == 0, "A k-vectors must tile BK");

  // Padding of kInterleaved: +8 halves (16 bytes) keeps rows 16-byte aligned while moving consecutive
  // rows to different banks. kRowMajor keeps the unpadded layout on purpose (the rung bcf improves
  // on); kTransposed is swizzled instead (ATSwizzle).
  constexpr int A_ROWS = AL == ALayout::kTransposed ? BK : BM;
  constexpr int A_PITCH = AL == ALayout::kTransposed ? BM : BK + (AL == ALayout::kRowMajor ? 0 : 8);
  constexpr int B_PITCH = BN;  // a warp reads 8 consecutive TN-vectors of one row: conflict-free
  constexpr int NBUF = PIPE == Pipe::kSingle ? 1 : 2;
  static_assert(NBUF * (A_ROWS * A_PITCH + BK * B_PITCH) * 2 <= 48 * 1024, "static shared memory is limited to 48 KB");
  __shared__ __align__(16) half sA[NBUF][A_ROWS * A_PITCH];
  __shared__ __align__(16) half sB[NBUF][BK * B_PITCH];

  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int tx = (warp % (TX / WX)) * WX + lane % WX;
  const int ty = (warp / (TX / WX)) * WY + lane / WX;

  // When A's tile has fewer chunks than threads (BK = 8 with 128-bit loads), B's copy starts at the
  // first thread A leaves idle, so the two copies use disjoint threads instead of the same half.
  constexpr int A_CHUNKS = TileMap<BM, BK, VEC, THREADS>::kChunks;
  const int tid_b = A_CHUNKS < THREADS ? (tid + THREADS - A_CHUNKS) % THREADS : tid;

  const half* Ablk = A + (size_t)blockIdx.y * BM * K;  // tile t starts at Ablk + t * BK
  const half* Bblk = B + (size_t)blockIdx.x * BN;      // tile t starts at Bblk + t * BK * N
  const int nk = K / BK;

  Accum<ACC, TM, TN> acc;
  acc.zero();

  // fp16 partial sums never span more than kFlushK k's: flushed inside the tile when BK > kFlushK
  // (a compile-time position after unrolling), else every FLUSH_TILES tiles (a uniform branch).
  static_assert(BK % kFlushK == 0 || kFlushK % BK == 0, "flush points must align with K tiles");
  constexpr int FLUSH_TILES = BK >= kFlushK ? 1 : kFlushK / BK;
  static_assert(kFlushK % AF::KG == 0, "flush points must align with A k-vectors");

  // Thread tiles above 64 outputs with kH2 hold 64 half2 + 128 fp32 accumulators: keep the k loop
  // rolled (no fragments prefetched across k) and stage one operand at a time, or registers spill.
  constexpr bool REG_BOUND = ACC == Acc::kH2 && TM * TN > 64;
  constexpr int K_UNROLL = REG_BOUND ? 1 : BK / AF::KG;
  constexpr bool SPLIT_STAGE = REG_BOUND && PIPE == Pipe::kDbuf;
  constexpr int PARTS = SPLIT_STAGE ? 2 : 1;  // pieces per operand when staging is split
  // k in [kb, ke) of one shared-memory buffer (kb, ke are constants after inlining). With BK >
  // kFlushK, the range is cut at multiples of kFlushK and the fp16 sums are flushed at each cut: a
  // compile-time position, never a branch inside the (possibly rolled) k loop.
  constexpr int CUT = (ACC == Acc::kH2 && BK > kFlushK) ? kFlushK : BK;
  auto compute = [&](const half* a_s, const half* b_s, int kb, int ke) {
    // Callers pass [kb, ke) with kb a multiple of CUT or ke - kb <= CUT - kb % CUT (one chunk).
#pragma unroll
    for (int c0 = kb; c0 < ke; c0 += CUT) {
      const int c1 = c0 + CUT < ke ? c0 + CUT : ke;
#pragma unroll(K_UNROLL)
      for (int k0 = c0; k0 < c1; k0 += AF::KG) {
        AF a;
        a.template load<A_PITCH>(a_s, k0, ty);
#pragma unroll
        for (int kk = 0; kk < AF::KG; ++kk) {
          half2 b[TN / 2];
          ld_halves<TN, PACK>(b, b_s + (k0 + kk) * B_PITCH + tx * TN);
          acc.fma(a, kk, b);
        }
      }
      if constexpr (ACC == Acc::kH2 && BK > kFlushK)
        if (c1 % kFlushK == 0) acc.flush();
    }
  };
  auto maybe_flush = [&](int t) {
    if constexpr (ACC == Acc::kH2 && BK <= kFlushK) {
      if (FLUSH_TILES == 1 || (t + 1) % FLUSH_TILES == 0 || t + 1 == nk) acc.flush();
    }
  };

  if constexpr (PIPE == Pipe::kAsync) {
    async_copy<BM, BK, VEC, THREADS, A_PITCH>(sA[0], Ablk, K, tid);
    async_copy<BK, BN, VEC, THREADS, B_PITCH>(sB[0], Bblk, N, tid_b);
    hg::cp_async_commit();
    for (int t = 0; t < nk; ++t) {
      // Tile t has landed (own copies), and after the barrier everyone's copies are visible and
      // everyone has finished computing tile t-1, so its buffer may be refilled with tile t+1 while
      // tile t is computed.
      hg::cp_async_wait<0>();
      __syncthreads();
      if (t + 1 < nk) {
        const int nb = (t + 1) & 1;
        async_copy<BM, BK, VEC, THREADS, A_PITCH>(sA[nb], Ablk + (t + 1) * BK, K, tid);
        async_copy<BK, BN, VEC, THREADS, B_PITCH>(sB[nb], Bblk + (size_t)(t + 1) * BK * N, N, tid_b);
      }
      hg::cp_async_commit();
      compute(sA[t & 1], sB[t & 1], 0, BK);
      maybe_flush(t);
    }
  } else {
    RegStage<BM, BK, VEC, PACK, THREADS, SPLIT_STAGE> ra;
    RegStage<BK, BN, VEC, PACK, THREADS, SPLIT_STAGE> rb;
    auto store_a = [&](int buf) {
      if constexpr (AL == ALayout::kTransposed) ra.template store_transposed<SWZ>(sA[buf], tid);
      else ra.template store<A_PITCH>(sA[buf], tid);
    };
    auto store_b = [&](int buf) { rb.template store<B_PITCH>(sB[buf], tid_b); };
    auto to_smem = [&](int buf) {
      store_a(buf);
      store_b(buf);
    };
    if constexpr (PIPE == Pipe::kSingle) {
      for (int t = 0; t < nk; ++t) {
        // The global loads are in flight while the block waits for the previous compute to finish.
        ra.load(Ablk + t * BK, K, tid);
        rb.load(Bblk + (size_t)t * BK * N, N, tid_b);
        __syncthreads();
        to_smem(0);
        __syncthreads();
        compute(sA[0], sB[0], 0, BK);
        maybe_flush(t);
      }
    } else {
      ra.load(Ablk, K, tid);
      rb.load(Bblk, N, tid_b);
      to_smem(0);
      __syncthreads();
      for (int t = 0; t < nk; ++t) {
        // Fetch tile t+1 into registers, compute tile t, then write t+1 into the other buffer: that
        // buffer was last read while computing t-1, which everyone finished before the last barrier.
        const bool next = t + 1 < nk;
        if constexpr (!SPLIT_STAGE) {
          if (next) {
            ra.load(Ablk + (t + 1) * BK, K, tid);
            rb.load(Bblk + (size_t)(t + 1) * BK * N, N, tid_b);
          }
          compute(sA[t & 1], sB[t & 1], 0, BK);
          if (next) to_smem((t + 1) & 1);
        } else {
          // Register-bound tiles stage the next tile in 2 * PARTS pieces (A's chunks, then B's), one
          // per slice of the k loop, so only a piece's staging registers are live at a time.
          constexpr int PA = decltype(ra)::Map::kIters, PB = decltype(rb)::Map::kIters;
          static_assert(PA % PARTS == 0 && PB % PARTS == 0 && BK % (2 * PARTS * AF::KG) == 0, "even pieces");
          constexpr int KS = BK / (2 * PARTS);
          const half* an = Ablk + (t + 1) * BK;
          const half* bn = Bblk + (size_t)(t + 1) * BK * N;
          const int nb = (t + 1) & 1;
          static_for<PARTS>([&](auto pc) {
            constexpr int p = decltype(pc)::value, I0 = p * PA / PARTS, I1 = (p + 1) * PA / PARTS;
            if (next) ra.template load<I0, I1>(an, K, tid);
            compute(sA[t & 1], sB[t & 1], p * KS, (p + 1) * KS);
            if (next) {
              if constexpr (AL == ALayout::kTransposed) ra.template store_transposed<SWZ, I0, I1>(sA[nb], tid);
              else ra.template store<A_PITCH, I0, I1>(sA[nb], tid);
            }
          });
          static_for<PARTS>([&](auto pc) {
            constexpr int p = decltype(pc)::value, I0 = p * PB / PARTS, I1 = (p + 1) * PB / PARTS;
            if (next) rb.template load<I0, I1>(bn, N, tid_b);
            compute(sA[t & 1], sB[t & 1], (PARTS + p) * KS, (PARTS + p + 1) * KS);
            if (next) rb.template store<B_PITCH, I0, I1>(sB[nb], tid_b);
          });
        }
        __syncthreads();
        maybe_flush(t);
      }
    }
  }

  // Epilogue: row m of the thread tile is C row row_of(ty, m); its TN columns are contiguous and
  // written with the same access width as the loads (PACK: VEC-half vectors, else half2).
  half* Cblk = C + (size_t)blockIdx.y * BM * N + (size_t)blockIdx.x * BN + tx * TN;
  constexpr int SV = PACK ? (VEC < TN ? VEC : TN) : 2;
#pragma unroll
  for (int m = 0; m < TM; ++m) {
    half* crow = Cblk + (size_t)AF::row_of(ty, m) * N;
#pragma unroll
    for (int n = 0; n < TN; n += SV) {
      half2 o[SV / 2];
#pragma unroll
      for (int j = 0; j < SV / 2; ++j) o[j] = acc.out(m, n / 2 + j);
      st_global_halves<SV, PACK>(crow + n, o);
    }
  }
  (void)M;
}

}  // namespace hg::cc

// One extern "C" entry point per rung (symbol = catalogue name, no demangling); RUNG is a knobs type.
#define HG_CUDA_RUNG(SYM, RUNG)                                                                        \
  extern "C" __global__ void __launch_bounds__(hg::cc::kThreads<RUNG>, RUNG::kMinBlocks)                \
      SYM(const half* __restrict__ A, const half* __restrict__ B, half* __restrict__ C, int M, int N, int K) { \
    hg::cc::tiled_hgemm<RUNG>(A, B, C, M, N, K);                                                        \
  }
// The acc variant axis, as declared: SYM__accf16 (half2 math, AccH2) and SYM__accf32 (the rung).
#define HG_CUDA_RUNG_ACC(SYM, RUNG)                  \
  HG_CUDA_RUNG(SYM##__accf16, hg::cc::AccH2<RUNG>)   \
  HG_CUDA_RUNG(SYM##__accf32, RUNG)
