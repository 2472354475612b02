// The mma.sync (m16n8k16) HGEMM ladder: one configurable block-tile kernel body shared by every
// rung from hgemm_mma_m16n8k16_mma2x4_warp4x4 on, plus the accumulator tile used by the naive rung.
// Each rung is a Config<...> instantiation; the knobs below are exactly the techniques the catalogue
// names add one after another (stages, dynamic smem, warp tile x2, ldmatrix.x4, register reuse,
// TN layout, XOR swizzle), so a rung differs from the previous one only in its Config line.
//
// Layouts (row-major, C is M x N): A is M x K. NN: B is K x N. TN: B is N x K.
// Block = WARPS_M x WARPS_N warps; warp tile = WMT x WNT mma tiles of 16x8; BK = k per stage.
// Shapes must be multiples of the block tile (the .toml files declare this as `require`).
#pragma once
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

#include "ptx.cuh"

namespace hg {
namespace mma {

enum class Layout { NN, TN };
// Bank-conflict strategy for the shared-memory tiles.
//   Pad:     each row padded by 8 halves (16 bytes), so 8 consecutive rows start in 8 different
//            16-byte bank groups (row pitch is an odd multiple of 16 bytes modulo 128).
//   Swizzle: no padding; the 16-byte chunk index is XORed with a function of the row so that the
//            8 rows an ldmatrix phase reads (and the 8 chunks a cp.async phase writes) fall in 8
//            distinct bank groups. Saves the padding's smem and keeps rows 128-byte aligned.
enum class Smem { Pad, Swizzle };

// ---------------------------------------------------------------------------------------------
// Accumulator of one m16n8 output tile, fp16 (2 x half2) or fp32 (4 floats).
// Fragment layout (PTX ISA, mma.m16n8k16): with g = lane / 4 and t = lane % 4 a lane holds
// row g, columns 2t and 2t+1 (part 0) and row g + 8, the same columns (part 1).
template <bool F32>
struct AccTile;

template <>
struct AccTile<false> {
  uint32_t d[2];
  __device__ __forceinline__ void zero() { d[0] = d[1] = 0u; }
  __device__ __forceinline__ void mma(const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_m16n8k16_f16(d, a, b, d);
  }
  // half2 bits of part h (0: row g, 1: row g + 8).
  __device__ __forceinline__ uint32_t packed(int h) const { return d[h]; }
};

template <>
struct AccTile<true> {
  float d[4];
  __device__ __forceinline__ void zero() { d[0] = d[1] = d[2] = d[3] = 0.f; }
  __device__ __forceinline__ void mma(const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_m16n8k16_f32(d, a, b, d);
  }
  __device__ __forceinline__ uint32_t packed(int h) const {
    const __half2 v = __floats2half2_rn(d[2 * h], d[2 * h + 1]);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
};

// ---------------------------------------------------------------------------------------------
// A ROWS x COLS tile of halves in shared memory, addressed in 16-byte chunks (COLS % 8 == 0).
template <int ROWS_, int COLS_, Smem P>
struct SmemTile {
  static constexpr int ROWS = ROWS_;
  static constexpr int COLS = COLS_;
  static constexpr int CHUNKS = COLS / 8;                   // 16-byte chunks per row
  static constexpr int LD = (P == Smem::Pad) ? COLS + 8 : COLS;  // halves per row
  static constexpr int ELEMS = ROWS * LD;
  // Swizzle period in rows: every offset(row + k * PERIOD, col) == offset(row, col) + k*PERIOD*LD.
  static constexpr int PERIOD = 8;
  static_assert(COLS % 8 == 0, "rows are moved in 16-byte chunks");
  static_assert(P == Smem::Pad || CHUNKS >= 2, "a swizzled row needs at least two chunks");
  static_assert(ROWS % PERIOD == 0, "tile rows must be a multiple of the swizzle period");

  // XOR key of a row. Rows of >= 128 bytes: the row's low 3 bits, so 8 consecutive rows read at
  // one column land in 8 different chunks of the 128-byte bank window. Shorter rows share a
  // 128-byte line with 8/CHUNKS neighbours; the key then comes from the line index instead.
  __device__ __forceinline__ static int key(int row) {
    if constexpr (CHUNKS >= 8) return row & 7;
    else return (row / (8 / CHUNKS)) & (CHUNKS - 1);
  }
  // Element offset of the 16-byte chunk holding (row, col); col is a multiple of 8.
  __device__ __forceinline__ static int offset(int row, int col) {
    if constexpr (P == Smem::Pad) return row * LD + col;
    else return row * LD + (((col >> 3) ^ key(row)) << 3);
  }
};

// ---------------------------------------------------------------------------------------------
template <Layout L_, int WARPS_M_, int WARPS_N_, int WMT_, int WNT_, int BK_, int STAGES_, bool F32_,
          Smem SMEM_, bool B_X4_, bool REG_DB_, bool SHFL_STORE_, bool SERPENTINE_, bool DSMEM_,
          int MIN_BLOCKS_>
struct Config {
  static constexpr Layout L = L_;
  static constexpr int WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int WMT = WMT_, WNT = WNT_;  // mma tiles per warp along M and N
  static constexpr int WM = 16 * WMT, WN = 8 * WNT;  // warp tile
  static constexpr int BM = WARPS_M * WM, BN = WARPS_N * WN, BK = BK_;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  // STAGES == 1: synchronous 128-bit global loads through registers (no cp.async).
  // STAGES >= 2: cp.async ring of STAGES shared-memory buffers.
  static constexpr int STAGES = STAGES_;
  static constexpr bool F32 = F32_;            // fp32 accumulators (else fp16)
  static constexpr Smem SMEM = SMEM_;
  static constexpr bool B_X4 = B_X4_;          // ldmatrix.x4 loads two n8 B fragments at once
  static constexpr bool REG_DB = REG_DB_;      // double-buffered fragments: ldmatrix k+1 under mma k
  static constexpr bool SHFL_STORE = SHFL_STORE_;  // quad shuffle -> one 16-byte store per row
  static constexpr bool SERPENTINE = SERPENTINE_;  // snake mma order: consecutive mmas share A or B
  static constexpr bool DSMEM = DSMEM_;        // dynamic (extern) shared memory
  static constexpr int MIN_BLOCKS = MIN_BLOCKS_;  // __launch_bounds__ occupancy hint

  using TileA = SmemTile<BM, BK, SMEM>;
  using TileB = std::conditional_t<L == Layout::NN, SmemTile<BK, BN, SMEM>, SmemTile<BN, BK, SMEM>>;
  static constexpr int STAGE_ELEMS = TileA::ELEMS + TileB::ELEMS;
  static constexpr int SMEM_BYTES = (STAGES < 2 ? 1 : STAGES) * STAGE_ELEMS * 2;
  static constexpr int KSTEPS = BK / 16;

  static_assert(BK % 16 == 0, "BK is a whole number of mma k-steps");
  static_assert(!B_X4 || WNT % 2 == 0, "ldmatrix.x4 for B takes n8 tiles in pairs");
  static_assert(!REG_DB || STAGES >= 2, "register double buffering rides on the cp.async ring");
  static_assert(DSMEM || SMEM_BYTES <= 48 * 1024, "static shared memory is limited to 48 KB");
};

// Global -> shared copy of one tile in 16-byte chunks; thread `tid` owns chunks tid, tid + THREADS...
// which sit ROW_STEP rows apart in the same column, so one smem offset and one global pointer per
// thread serve every iteration.
template <class Tile, int THREADS>
struct TileCopy {
  static constexpr int CHUNKS = Tile::ROWS * Tile::CHUNKS;
  static constexpr int ITERS = CHUNKS / THREADS;
  static constexpr int ROW_STEP = THREADS / Tile::CHUNKS;
  static_assert(CHUNKS % THREADS == 0 && THREADS % Tile::CHUNKS == 0, "tile must split evenly");
  static_assert(ROW_STEP % Tile::PERIOD == 0, "iterations must keep the swizzle key");

  int soff;  // smem element offset of this thread's first chunk
  int row, col;
  __device__ __forceinline__ explicit TileCopy(int tid)
      : row(tid / Tile::CHUNKS), col((tid % Tile::CHUNKS) * 8) {
    soff = Tile::offset(row, col);
  }
  // g points at element (0, 0) of the tile in global memory; ld is its leading dimension.
  __device__ __forceinline__ void async(half* s, const half* g, int ld) const {
    const half* src = g + (size_t)row * ld + col;
#pragma unroll
    for (int it = 0; it < ITERS; ++it)
      cp_async_16(s + soff + it * ROW_STEP * Tile::LD, src + (size_t)it * ROW_STEP * ld);
  }
  __device__ __forceinline__ void to_regs(uint4 (&r)[ITERS], const half* g, int ld) const {
    const half* src = g + (size_t)row * ld + col;
#pragma unroll
    for (int it = 0; it < ITERS; ++it)
      r[it] = *reinterpret_cast<const uint4*>(src + (size_t)it * ROW_STEP * ld);
  }
  __device__ __forceinline__ void from_regs(half* s, const uint4 (&r)[ITERS]) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it)
      *reinterpret_cast<uint4*>(s + soff + it * ROW_STEP * Tile::LD) = r[it];
  }
};

// One warp's fragments for one k-step of 16.
template <class Cfg>
struct Frags {
  uint32_t a[Cfg::WMT][4];
  uint32_t b[Cfg::WNT][2];
};

// Per-lane ldmatrix addressing. Lane-dependent parts are computed once; the per-tile steps
// (16 rows of A, 8 or 16 columns of B, 16 k) are compile-time constants added on top, which is
// valid for the swizzled tiles as well because 16 rows is a multiple of the swizzle period.
template <class Cfg>
struct FragLoader {
  using TA = typename Cfg::TileA;
  using TB = typename Cfg::TileB;
  int a_row, a_col;  // A: x4 = rows 0-15 x k 0-7 | rows 0-15 x k 8-15 (lane / 16 picks the half)
  int b_row, b_col;
  __device__ __forceinline__ FragLoader(int lane, int wm, int wn) {
    a_row = wm * Cfg::WM + (lane & 15);
    a_col = (lane >> 4) * 8;
    if constexpr (Cfg::L == Layout::NN) {
      // B stored k-major [BK][BN]; .trans turns each 8x8 (k x n) block into the col-major fragment.
      // x2: lanes 0-15 address k rows 0-15 of one n8 column block.
      // x4: lanes 16-31 address the next n8 block, giving fragments of tiles j and j+1.
      b_row = lane & 15;
      b_col = wn * Cfg::WN + (Cfg::B_X4 ? (lane >> 4) * 8 : 0);
    } else {
      // B stored n-major [BN][BK]: already the col-major fragment, no .trans.
      // x2: lanes 0-7 rows n 0-7 at k 0-7, lanes 8-15 the same rows at k 8-15.
      // x4: lanes 16-31 repeat that for rows n 8-15 (tile j+1).
      b_row = wn * Cfg::WN + (lane & 7) + (Cfg::B_X4 ? (lane >> 4) * 8 : 0);
      b_col = ((lane >> 3) & 1) * 8;
    }
  }

  __device__ __forceinline__ void load(Frags<Cfg>& f, const half* sA, const half* sB, int kk) const {
#pragma unroll
    for (int i = 0; i < Cfg::WMT; ++i)
      ldmatrix_x4(f.a[i][0], f.a[i][1], f.a[i][2], f.a[i][3],
                  sA + TA::offset(a_row, kk * 16 + a_col) + i * 16 * TA::LD);
    if constexpr (Cfg::L == Layout::NN) {
      const half* base = sB + kk * 16 * TB::LD;
      if constexpr (Cfg::B_X4) {
#pragma unroll
        for (int j = 0; j < Cfg::WNT; j += 2)
          ldmatrix_x4_trans(f.b[j][0], f.b[j][1], f.b[j + 1][0], f.b[j + 1][1],
                            base + TB::offset(b_row, b_col + j * 8));
      } else {
#pragma unroll
        for (int j = 0; j < Cfg::WNT; ++j)
          ldmatrix_x2_trans(f.b[j][0], f.b[j][1], base + TB::offset(b_row, b_col + j * 8));
      }
    } else {
      if constexpr (Cfg::B_X4) {
#pragma unroll
        for (int j = 0; j < Cfg::WNT; j += 2)
          ldmatrix_x4(f.b[j][0], f.b[j][1], f.b[j + 1][0], f.b[j + 1][1],
                      sB + TB::offset(b_row, kk * 16 + b_col) + j * 8 * TB::LD);
      } else {
#pragma unroll
        for (int j = 0; j < Cfg::WNT; ++j)
          ldmatrix_x2(f.b[j][0], f.b[j][1], sB + TB::offset(b_row, kk * 16 + b_col) + j * 8 * TB::LD);
      }
    }
  }
};

template <class Cfg>
__device__ __forceinline__ void warp_mma(AccTile<Cfg::F32> (&acc)[Cfg::WMT][Cfg::WNT], const Frags<Cfg>& f) {
#pragma unroll
  for (int i = 0; i < Cfg::WMT; ++i) {
#pragma unroll
    for (int jj = 0; jj < Cfg::WNT; ++jj) {
      // Serpentine: odd rows run right to left, so the mma after a row change reuses the B
      // fragment just used (the SASS operand-reuse cache), as the next one in a row reuses A.
      const int j = (Cfg::SERPENTINE && (i & 1)) ? Cfg::WNT - 1 - jj : jj;
      acc[i][j].mma(f.a[i], f.b[j]);
    }
  }
}

// The block-tile kernel body. Grid: x = column tiles (times gridDim.z strips under block swizzle),
// y = row tiles. Requires M % BM == 0, N % BN == 0, K % BK == 0 and 16-byte aligned pointers.
template <class Cfg>
__device__ __forceinline__ void gemm(const half* __restrict__ A, const half* __restrict__ B,
                                     half* __restrict__ C, int M, int N, int K, half* smem) {
  using TA = typename Cfg::TileA;
  using TB = typename Cfg::TileB;
  constexpr int S = Cfg::STAGES;
  constexpr bool NN = Cfg::L == Layout::NN;

  // Block swizzle (CONTRACT.md "tiles+swizzle"): gridDim.z strips of N; the last may be short.
  const int bx = blockIdx.z * gridDim.x + blockIdx.x;
  if (bx * Cfg::BN >= N) return;
  const int m0 = blockIdx.y * Cfg::BM, n0 = bx * Cfg::BN;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % Cfg::WARPS_M, wn = warp / Cfg::WARPS_M;

  const TileCopy<TA, Cfg::THREADS> copy_a(tid);
  const TileCopy<TB, Cfg::THREADS> copy_b(tid);
  // Tile origins in global memory and their step per k-tile.
  const half* gA = A + (size_t)m0 * K;
  const half* gB = NN ? B + n0 : B + (size_t)n0 * K;
  const int ldb = NN ? N : K;
  const size_t b_step = NN ? (size_t)Cfg::BK * N : (size_t)Cfg::BK;

  const FragLoader<Cfg> ld(lane, wm, wn);
  AccTile<Cfg::F32> acc[Cfg::WMT][Cfg::WNT];
#pragma unroll
  for (int i = 0; i < Cfg::WMT; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::WNT; ++j) acc[i][j].zero();

  const int KT = K / Cfg::BK;

  if constexpr (S == 1) {
    // Synchronous: 128-bit loads into registers, then into the single smem buffer.
    half* sA = smem;
    half* sB = smem + TA::ELEMS;
    uint4 ra[TileCopy<TA, Cfg::THREADS>::ITERS], rb[TileCopy<TB, Cfg::THREADS>::ITERS];
    for (int kt = 0; kt < KT; ++kt) {
      copy_a.to_regs(ra, gA, K);
      copy_b.to_regs(rb, gB, ldb);
      gA += Cfg::BK;
      gB += b_step;
      __syncthreads();  // the previous tile's fragments have all been read
      copy_a.from_regs(sA, ra);
      copy_b.from_regs(sB, rb);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < Cfg::KSTEPS; ++kk) {
        Frags<Cfg> f;
        ld.load(f, sA, sB, kk);
        warp_mma<Cfg>(acc, f);
      }
    }
  } else {
    // cp.async ring: stage s holds A then B. Exactly one commit group per k-tile (empty past the
    // end) so that wait_group<S-2> always means "the tile about to be read has landed".
    auto stage_a = [&](int s) { return smem + s * Cfg::STAGE_ELEMS; };
    auto stage_b = [&](int s) { return smem + s * Cfg::STAGE_ELEMS + TA::ELEMS; };
    auto issue = [&](int s, int kt) {
      if (kt < KT) {
        copy_a.async(stage_a(s), gA, K);
        copy_b.async(stage_b(s), gB, ldb);
        gA += Cfg::BK;
        gB += b_step;
      }
      cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s, s);
    cp_async_wait<S - 2>();
    __syncthreads();

    int rs = 0;      // stage being read
    int ws = S - 1;  // stage being written (the one read in the previous k-tile)
    if constexpr (Cfg::REG_DB) {
      Frags<Cfg> f[2];
      ld.load(f[0], stage_a(0), stage_b(0), 0);
#pragma unroll 1
      for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
        for (int kk = 0; kk < Cfg::KSTEPS; ++kk) {
          if (kk == Cfg::KSTEPS - 1) {
            // Next tile must be resident before its first fragments are prefetched; every warp
            // has also loaded its last fragments of stage `ws`'s predecessor by now.
            cp_async_wait<S - 2>();
            __syncthreads();
            rs = (rs + 1 == S) ? 0 : rs + 1;
          }
          // Prefetch the next k-step (the next tile's first one at the end; past the last tile it
          // reads a stale stage whose fragments are never used).
          ld.load(f[(kk + 1) & 1], stage_a(rs), stage_b(rs), (kk + 1) % Cfg::KSTEPS);
          if (kk == 0) {
            issue(ws, kt + S - 1);
            ws = (ws + 1 == S) ? 0 : ws + 1;
          }
          warp_mma<Cfg>(acc, f[kk & 1]);
        }
      }
    } else {
#pragma unroll 1
      for (int kt = 0; kt < KT; ++kt) {
        cp_async_wait<S - 2>();
        __syncthreads();  // tile kt resident; stage ws no longer read by anyone
        issue(ws, kt + S - 1);
        ws = (ws + 1 == S) ? 0 : ws + 1;
#pragma unroll
        for (int kk = 0; kk < Cfg::KSTEPS; ++kk) {
          Frags<Cfg> f;
          ld.load(f, stage_a(rs), stage_b(rs), kk);
          warp_mma<Cfg>(acc, f);
        }
        rs = (rs + 1 == S) ? 0 : rs + 1;
      }
    }
    cp_async_wait_all();  // nothing left in flight when the block exits
  }

  // Epilogue: accumulators -> fp16 -> C.
  const int g = lane >> 2, t = lane & 3;
  half* c0 = C + (size_t)(m0 + wm * Cfg::WM + g) * N + n0 + wn * Cfg::WN;
#pragma unroll
  for (int i = 0; i < Cfg::WMT; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::WNT; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        half* row = c0 + (size_t)(i * 16 + h * 8) * N + j * 8;
        const uint32_t v = acc[i][j].packed(h);
        if constexpr (Cfg::SHFL_STORE) {
          // Collective store: the quad's four half2 of this row gather in lane t == 0, which
          // writes all 8 columns with one 16-byte store (a quarter of the store instructions).
          const uint32_t v1 = __shfl_down_sync(0xffffffffu, v, 1, 4);
          const uint32_t v2 = __shfl_down_sync(0xffffffffu, v, 2, 4);
          const uint32_t v3 = __shfl_down_sync(0xffffffffu, v, 3, 4);
          if (t == 0) *reinterpret_cast<uint4*>(row) = make_uint4(v, v1, v2, v3);
        } else {
          *reinterpret_cast<uint32_t*>(row + 2 * t) = v;
        }
      }
    }
  }
}

// Kernel entry body: picks static or dynamic shared memory for the rung.
template <class Cfg>
__device__ __forceinline__ void kernel_body(const half* A, const half* B, half* C, int M, int N, int K) {
  if constexpr (Cfg::DSMEM) {
    extern __shared__ __align__(128) unsigned char hg_mma_dsmem[];
    gemm<Cfg>(A, B, C, M, N, K, reinterpret_cast<half*>(hg_mma_dsmem));
  } else {
    __shared__ __align__(128) half hg_mma_smem[Cfg::SMEM_BYTES / 2];
    gemm<Cfg>(A, B, C, M, N, K, hg_mma_smem);
  }
}

}  // namespace mma
}  // namespace hg

// One extern "C" kernel per declared symbol. CFG is a Config type without commas (an alias), so
// that it can sit inside __launch_bounds__.
#define HG_MMA_KERNEL(SYM, CFG)                                                              \
  extern "C" __global__ void __launch_bounds__(CFG::THREADS, CFG::MIN_BLOCKS)                 \
      SYM(const half* A, const half* B, half* C, int M, int N, int K) {                       \
    hg::mma::kernel_body<CFG>(A, B, C, M, N, K);                                              \
  }

// The six (acc, stages) variants of a rung. CFG is an alias template CFG<bool F32, int STAGES>;
// symbols follow CONTRACT.md: NAME__acc<f16|f32>__stages<2|3|4> (axes in declared order).
#define HG_MMA_VARIANT(NAME, CFG, ACC, F32, S) \
  using NAME##__acc##ACC##__stages##S##_cfg = CFG<F32, S>; \
  HG_MMA_KERNEL(NAME##__acc##ACC##__stages##S, NAME##__acc##ACC##__stages##S##_cfg)
#define HG_MMA_ACC_STAGES(NAME, CFG)        \
  HG_MMA_VARIANT(NAME, CFG, f16, false, 2) \
  HG_MMA_VARIANT(NAME, CFG, f16, false, 3) \
  HG_MMA_VARIANT(NAME, CFG, f16, false, 4) \
  HG_MMA_VARIANT(NAME, CFG, f32, true, 2)  \
  HG_MMA_VARIANT(NAME, CFG, f32, true, 3)  \
  HG_MMA_VARIANT(NAME, CFG, f32, true, 4)
