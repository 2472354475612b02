// The mma.sync (m16n8k16) HGEMM ladder: one configurable block-tile kernel body shared by every
// rung from hgemm_mma_m16n8k16_mma2x4_warp4x4 on, plus the accumulator tile used by the naive rung.
// Each rung (mma_ladder.cuh) is a struct of named knobs (Knobs below) deriving from the rung it
// improves on and naming only what it changes; the knobs are exactly the techniques the catalogue
// names add one after another (stages, dynamic smem, warp tile x2, ldmatrix.x4, register reuse,
// TN layout, XOR swizzle). Config<Rung> derives the tile shapes and shared-memory sizes from them.
//
// Layouts (row-major, C is M x N): A is M x K. NN: B is K x N. TN: B is N x K.
// Block = WARPS_M x WARPS_N warps; warp tile = WMT x WNT mma tiles of 16x8; BK = k per stage.
// Shapes must be multiples of the block tile (the .toml files declare this as `require`).
#pragma once
#include <cuda_fp16.h>
#include <cstdint>
#include <type_traits>

#include "dsmem.cuh"
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
// How the epilogue writes C.
//   Direct: every lane stores its half2 pairs (4 bytes; a warp instruction covers 8 rows x 16 B).
//   Shfl:   the quad's four half2 gather in one lane by shuffles, which stores 16 bytes (same rows
//           and bytes per instruction as Direct, a quarter of the lanes).
//   Smem:   the fp16 tile goes through shared memory (XOR-swizzled, conflict free both ways) and
//           leaves in 16-byte stores of whole rows: a warp instruction writes 512 contiguous bytes,
//           which for big tiles beats Shfl's 16-byte row pieces (docs/dev/tuning_log.md, "common/mma.cuh").
enum class Store { Direct, Shfl, Smem };

// A plain shared-memory store at a shared-window address (the staged epilogue; its 16-byte read-back is
// hg::ld_shared_v4, cu/common/ptx.cuh). Kept here, its only user, rather than in ptx.cuh, which every family includes.
__device__ __forceinline__ void st_shared_b32(uint32_t smem_addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(smem_addr), "r"(v) : "memory");
}

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
// The knobs of a rung, with the values of the plainest one. A rung derives from Knobs (or from the
// rung it improves on) and redefines the knobs it changes:
//   struct X2X4 : X2 { static constexpr bool kBX4 = true; };
// The geometry (kWarpsM, kWarpsN, kWarpTilesM, kWarpTilesN, kBK) has no default: every first rung of
// a family names it.
struct Knobs {
  static constexpr Layout kLayout = Layout::NN;
  // 1: synchronous 128-bit global loads through registers into one buffer (no cp.async);
  // >= 2: cp.async ring of kStages shared-memory buffers.
  static constexpr int kStages = 1;
  static constexpr bool kF32Acc = false;           // fp32 accumulators (else fp16)
  static constexpr Smem kSmem = Smem::Pad;
  static constexpr bool kBX4 = false;              // ldmatrix.x4 loads two n8 B fragments at once
  static constexpr bool kRegDoubleBuffer = false;  // fragments double-buffered: ldmatrix k+1 under mma k
  static constexpr Store kStore = Store::Direct;   // epilogue path (see Store)
  static constexpr bool kSerpentine = false;       // snake mma order: consecutive mmas share A or B
  static constexpr bool kDynamicSmem = false;      // dynamic (extern) shared memory, else a static array
  static constexpr int kMinBlocks = 1;             // __launch_bounds__ blocks per SM
};

// A rung under the declarations' variant axes: acc (f16 | f32) and stages.
template <class Rung, bool F32, int S>
struct AccStages : Rung {
  static constexpr bool kF32Acc = F32;
  static constexpr int kStages = S;
};

// What the kernel body reads: the knobs under short names, and the shapes derived from them.
template <class K>
struct Config {
  static constexpr Layout L = K::kLayout;
  static constexpr int WARPS_M = K::kWarpsM, WARPS_N = K::kWarpsN;
  static constexpr int WMT = K::kWarpTilesM, WNT = K::kWarpTilesN;  // mma tiles per warp along M and N
  static constexpr int WM = 16 * WMT, WN = 8 * WNT;  // warp tile
  static constexpr int BM = WARPS_M * WM, BN = WARPS_N * WN, BK = K::kBK;
  static constexpr int THREADS = 32 * WARPS_M * WARPS_N;
  static constexpr int STAGES = K::kStages;
  static constexpr bool F32 = K::kF32Acc;
  static constexpr Smem SMEM = K::kSmem;
  static constexpr bool B_X4 = K::kBX4;
  static constexpr bool REG_DB = K::kRegDoubleBuffer;
  static constexpr Store STORE = K::kStore;
  static constexpr bool SERPENTINE = K::kSerpentine;
  static constexpr bool DSMEM = K::kDynamicSmem;
  static constexpr int MIN_BLOCKS = K::kMinBlocks;

  using TileA = SmemTile<BM, BK, SMEM>;
  using TileB = std::conditional_t<L == Layout::NN, SmemTile<BK, BN, SMEM>, SmemTile<BN, BK, SMEM>>;
  static constexpr int STAGE_ELEMS = TileA::ELEMS + TileB::ELEMS;
  static constexpr int SMEM_BYTES = (STAGES < 2 ? 1 : STAGES) * STAGE_ELEMS * 2;
  static constexpr int KSTEPS = BK / 16;

  static_assert(STAGES >= 1, "at least one shared-memory buffer");
  static_assert(THREADS <= 1024, "a block holds at most 32 warps");
  static_assert(MIN_BLOCKS >= 1 && MIN_BLOCKS * THREADS <= 2048, "an SM holds at most 2048 threads");
  static_assert(BK % 16 == 0, "BK is a whole number of mma k-steps");
  static_assert(!B_X4 || WNT % 2 == 0, "ldmatrix.x4 for B takes n8 tiles in pairs");
  static_assert(!REG_DB || STAGES >= 2, "register double buffering rides on the cp.async ring");
  static_assert(STORE != Store::Smem || STAGES >= 2, "the staged epilogue reuses the cp.async ring");
  static_assert(DSMEM || SMEM_BYTES <= 48 * 1024, "static shared memory is limited to 48 KB");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory over the 227 KB per-block limit of any GPU");
};

// Global -> shared copy of one tile in 16-byte chunks; thread `tid` owns chunks tid, tid + THREADS...
// which sit ROW_STEP rows apart in the same column, so one smem offset and one global pointer per
// thread serve every iteration (ROW_STEP is a multiple of the swizzle period).
template <class Tile, int THREADS>
struct TileCopy {
  static constexpr int CHUNKS = Tile::ROWS * Tile::CHUNKS;
  static constexpr int ITERS = CHUNKS / THREADS;
  static constexpr int ROW_STEP = THREADS / Tile::CHUNKS;
  static_assert(CHUNKS % THREADS == 0 && THREADS % Tile::CHUNKS == 0, "tile must split evenly");
  static_assert(ROW_STEP % Tile::PERIOD == 0, "iterations must keep the swizzle key");

  uint32_t soff;    // byte offset of this thread's first chunk within the tile
  const half* src;  // this thread's first chunk in global memory (advanced tile by tile)
  size_t it_step;   // elements between iterations in global memory (ROW_STEP rows)

  // g: element (0, 0) of the first tile in global memory; ld: its leading dimension.
  __device__ __forceinline__ TileCopy(int tid, const half* g, int ld) {
    const int row = tid / Tile::CHUNKS, col = (tid % Tile::CHUNKS) * 8;
    soff = Tile::offset(row, col) * 2;
    src = g + (size_t)row * ld + col;
    it_step = (size_t)ROW_STEP * ld;
  }
  __device__ __forceinline__ void async(uint32_t s) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it)
      cp_async_16(s + soff + it * ROW_STEP * Tile::LD * 2, src + it * it_step);
  }
  __device__ __forceinline__ void to_regs(uint4 (&r)[ITERS]) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it) r[it] = *reinterpret_cast<const uint4*>(src + it * it_step);
  }
  __device__ __forceinline__ void from_regs(half* s, const uint4 (&r)[ITERS]) const {
#pragma unroll
    for (int it = 0; it < ITERS; ++it)
      *reinterpret_cast<uint4*>(reinterpret_cast<char*>(s) + soff + it * ROW_STEP * Tile::LD * 2) = r[it];
  }
};

// One warp's fragments for one k-step of 16.
template <class Cfg>
struct Frags {
  uint32_t a[Cfg::WMT][4];
  uint32_t b[Cfg::WNT][2];
};

// Per-lane ldmatrix addressing, as byte offsets from a stage's A or B tile. Only the parts a
// swizzle can scramble are kept in registers; every step of 16 rows (a multiple of the swizzle
// period) is a compile-time immediate on top.
template <class Cfg>
struct FragLoader {
  using TA = typename Cfg::TileA;
  using TB = typename Cfg::TileB;
  static constexpr bool NN = Cfg::L == Layout::NN;
  static constexpr int BJ = Cfg::B_X4 ? 2 : 1;      // n8 tiles per B ldmatrix
  static constexpr int NB = NN ? Cfg::WNT / BJ : Cfg::KSTEPS;  // B offsets kept per lane
  uint32_t a_off[Cfg::KSTEPS];
  uint32_t b_off[NB];

  __device__ __forceinline__ FragLoader(int lane, int wm, int wn) {
    // A: x4 = rows 0-15 at k 0-7 (lanes 0-15) | rows 0-15 at k 8-15 (lanes 16-31).
    const int a_row = wm * Cfg::WM + (lane & 15);
#pragma unroll
    for (int kk = 0; kk < Cfg::KSTEPS; ++kk) a_off[kk] = TA::offset(a_row, kk * 16 + (lane >> 4) * 8) * 2;
    if constexpr (NN) {
      // B stored k-major [BK][BN]; .trans turns each 8x8 (k x n) block into the col-major
      // fragment. x2: lanes 0-15 address k rows 0-15 of one n8 block. x4: lanes 16-31 address
      // the next n8 block, giving the fragments of tiles j and j + 1.
      const int col = wn * Cfg::WN + (Cfg::B_X4 ? (lane >> 4) * 8 : 0);
#pragma unroll
      for (int jb = 0; jb < NB; ++jb) b_off[jb] = TB::offset(lane & 15, col + jb * BJ * 8) * 2;
    } else {
      // B stored n-major [BN][BK]: already the col-major fragment, no .trans. x2: lanes 0-7 rows
      // n 0-7 at k 0-7, lanes 8-15 the same rows at k 8-15. x4: lanes 16-31 the same for rows
      // n 8-15 (tile j + 1).
      const int row = wn * Cfg::WN + (lane & 7) + (Cfg::B_X4 ? (lane >> 4) * 8 : 0);
#pragma unroll
      for (int kk = 0; kk < Cfg::KSTEPS; ++kk) b_off[kk] = TB::offset(row, kk * 16 + ((lane >> 3) & 1) * 8) * 2;
    }
  }

  // sA, sB: shared-window addresses of the stage's A and B tiles.
  __device__ __forceinline__ void load(Frags<Cfg>& f, uint32_t sA, uint32_t sB, int kk) const {
#pragma unroll
    for (int i = 0; i < Cfg::WMT; ++i)
      ldmatrix_x4(f.a[i][0], f.a[i][1], f.a[i][2], f.a[i][3], sA + a_off[kk] + i * 16 * TA::LD * 2);
#pragma unroll
    for (int j = 0; j < Cfg::WNT; j += BJ) {
      if constexpr (NN) {
        const uint32_t addr = sB + b_off[j / BJ] + kk * 16 * TB::LD * 2;
        if constexpr (Cfg::B_X4) ldmatrix_x4_trans(f.b[j][0], f.b[j][1], f.b[j + 1][0], f.b[j + 1][1], addr);
        else ldmatrix_x2_trans(f.b[j][0], f.b[j][1], addr);
      } else {
        const uint32_t addr = sB + b_off[kk] + j * 8 * TB::LD * 2;
        if constexpr (Cfg::B_X4) ldmatrix_x4(f.b[j][0], f.b[j][1], f.b[j + 1][0], f.b[j + 1][1], addr);
        else ldmatrix_x2(f.b[j][0], f.b[j][1], addr);
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

// Store::Smem epilogue: the block's C tile leaves through shared memory (the pipeline buffers, free
// once every warp is past its last ldmatrix) in slabs of SLAB rows, as many as fit; a slab is whole
// warp rows, written by the warps that own it and stored by all threads, one 16-byte chunk each.
// Chunk c of row r sits at chunk c ^ (r & 7): the 8 rows of an m16n8 fragment write then fill all
// 32 banks once, and the 32 chunks a warp reads from one row are 512 distinct contiguous bytes.
__host__ __device__ constexpr int epi_slab_rows(int bm, int wm, int bn, int smem_bytes) {
  int r = bm;
  while (r > wm && (r * bn * 2 > smem_bytes || bm % r != 0)) r -= wm;
  return r;
}

template <class Cfg>
__device__ __forceinline__ void store_tile_smem(const AccTile<Cfg::F32> (&acc)[Cfg::WMT][Cfg::WNT], half* C,
                                                int N, int m0, int n0, uint32_t s0, int tid, int wm, int wn) {
  constexpr int RC = Cfg::BN / 8;  // 16-byte chunks per C row
  static_assert(RC % 8 == 0, "the XOR swizzle needs rows of at least 8 chunks");
  // Largest slab of whole warp rows (WM) that divides BM and fits in the pipeline's smem.
  constexpr int SLAB = epi_slab_rows(Cfg::BM, Cfg::WM, Cfg::BN, Cfg::SMEM_BYTES);
  static_assert(SLAB * Cfg::BN * 2 <= Cfg::SMEM_BYTES && Cfg::BM % SLAB == 0, "a slab must fit in smem");
  const int lane = tid & 31, g = lane >> 2, t = lane & 3;
  cp_async_wait<0>();  // only empty groups can be pending, but the buffers are about to be reused
  __syncthreads();     // every warp has read its last fragments
#pragma unroll 1
  for (int p = 0; p < Cfg::BM / SLAB; ++p) {
    const int r0 = wm * Cfg::WM - p * SLAB;  // this warp's first row within the slab
    if (r0 >= 0 && r0 < SLAB) {
#pragma unroll
      for (int i = 0; i < Cfg::WMT; ++i)
#pragma unroll
        for (int j = 0; j < Cfg::WNT; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = r0 + i * 16 + h * 8 + g, ch = (wn * Cfg::WN + j * 8) >> 3;
            st_shared_b32(s0 + (r * RC + (ch ^ (r & 7))) * 16 + t * 4, acc[i][j].packed(h));
          }
    }
    __syncthreads();
    half* cs = C + (size_t)(m0 + p * SLAB) * N + n0;
#pragma unroll 4
    for (int c = tid; c < SLAB * RC; c += Cfg::THREADS) {
      const int r = c / RC, ch = c % RC;
      *reinterpret_cast<uint4*>(cs + (size_t)r * N + ch * 8) = ld_shared_v4(s0 + (r * RC + (ch ^ (r & 7))) * 16);
    }
    if (p + 1 < Cfg::BM / SLAB) __syncthreads();  // the next slab overwrites this one
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
  constexpr uint32_t A_BYTES = TA::ELEMS * 2, STAGE_BYTES = Cfg::STAGE_ELEMS * 2;

  // Block swizzle (CONTRACT.md "tiles+swizzle"): gridDim.z strips of N; the last may be short.
  const int bx = blockIdx.z * gridDim.x + blockIdx.x;
  if (bx * Cfg::BN >= N) return;
  const int m0 = blockIdx.y * Cfg::BM, n0 = bx * Cfg::BN;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % Cfg::WARPS_M, wn = warp / Cfg::WARPS_M;

  TileCopy<TA, Cfg::THREADS> copy_a(tid, A + (size_t)m0 * K, K);
  TileCopy<TB, Cfg::THREADS> copy_b(tid, NN ? B + n0 : B + (size_t)n0 * K, NN ? N : K);
  const size_t b_step = NN ? (size_t)Cfg::BK * N : (size_t)Cfg::BK;  // per k-tile, elements

  const FragLoader<Cfg> ld(lane, wm, wn);
  AccTile<Cfg::F32> acc[Cfg::WMT][Cfg::WNT];
#pragma unroll
  for (int i = 0; i < Cfg::WMT; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::WNT; ++j) acc[i][j].zero();

  const int KT = K / Cfg::BK;
  const uint32_t s0 = smem_u32(smem);

  if constexpr (S == 1) {
    // Synchronous: 128-bit loads into registers, then into the single smem buffer.
    uint4 ra[TileCopy<TA, Cfg::THREADS>::ITERS], rb[TileCopy<TB, Cfg::THREADS>::ITERS];
#pragma unroll 1
    for (int kt = 0; kt < KT; ++kt) {
      copy_a.to_regs(ra);
      copy_b.to_regs(rb);
      copy_a.src += Cfg::BK;
      copy_b.src += b_step;
      __syncthreads();  // the previous tile's fragments have all been read
      copy_a.from_regs(smem, ra);
      copy_b.from_regs(smem + TA::ELEMS, rb);
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < Cfg::KSTEPS; ++kk) {
        Frags<Cfg> f;
        ld.load(f, s0, s0 + A_BYTES, kk);
        warp_mma<Cfg>(acc, f);
      }
    }
  } else {
    // cp.async ring: stage s holds A then B. Exactly one commit group per k-tile (empty past the
    // end) so that wait_group<S-2> always means "the tile about to be read has landed".
    const uint32_t s_end = s0 + S * STAGE_BYTES;
    auto next = [&](uint32_t s) { s += STAGE_BYTES; return s == s_end ? s0 : s; };
    auto issue = [&](uint32_t s, int kt) {
      if (kt < KT) {
        copy_a.async(s);
        copy_b.async(s + A_BYTES);
        copy_a.src += Cfg::BK;
        copy_b.src += b_step;
      }
      cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(s0 + s * STAGE_BYTES, s);
    cp_async_wait<S - 2>();
    __syncthreads();

    uint32_t rs = s0;                          // stage being read
    uint32_t ws = s0 + (S - 1) * STAGE_BYTES;  // stage being written: the one read last k-tile
    if constexpr (Cfg::REG_DB) {
      Frags<Cfg> f[2];
      ld.load(f[0], rs, rs + A_BYTES, 0);
#pragma unroll 1
      for (int kt = 0; kt < KT; ++kt) {
#pragma unroll
        for (int kk = 0; kk < Cfg::KSTEPS; ++kk) {
          if (kk == Cfg::KSTEPS - 1) {
            // The next tile must be resident before its first fragments are prefetched; the
            // barrier also tells that every warp has read its last fragments of the stage the
            // next k-tile's cp.async will overwrite.
            cp_async_wait<S - 2>();
            __syncthreads();
            rs = next(rs);
          }
          // Prefetch the next k-step (the next tile's first one at the end; past the last tile it
          // reads a stale stage whose fragments are never used).
          ld.load(f[(kk + 1) & 1], rs, rs + A_BYTES, (kk + 1) % Cfg::KSTEPS);
          if (kk == 0) {
            issue(ws, kt + S - 1);
            ws = next(ws);
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
        ws = next(ws);
#pragma unroll
        for (int kk = 0; kk < Cfg::KSTEPS; ++kk) {
          Frags<Cfg> f;
          ld.load(f, rs, rs + A_BYTES, kk);
          warp_mma<Cfg>(acc, f);
        }
        rs = next(rs);
      }
    }
    // No wait needed here: the last k-tile's wait_group already covered every real copy (the
    // groups committed after it are empty).
  }

  if constexpr (Cfg::STORE == Store::Smem) {
    store_tile_smem<Cfg>(acc, C, N, m0, n0, s0, tid, wm, wn);
    return;
  }
  // Epilogue: accumulators -> fp16 -> C. All tiles are packed to half2 first: that frees the fp32
  // accumulators before the shuffles need registers (the 64 x 64 fp32 warp tile spills otherwise).
  uint32_t out[Cfg::WMT][Cfg::WNT][2];
#pragma unroll
  for (int i = 0; i < Cfg::WMT; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::WNT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) out[i][j][h] = acc[i][j].packed(h);

  const int g = lane >> 2, t = lane & 3;
  half* c0 = C + (size_t)(m0 + wm * Cfg::WM + g) * N + n0 + wn * Cfg::WN;
#pragma unroll
  for (int i = 0; i < Cfg::WMT; ++i) {
#pragma unroll
    for (int j = 0; j < Cfg::WNT; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        half* row = c0 + (size_t)(i * 16 + h * 8) * N + j * 8;
        const uint32_t v = out[i][j][h];
        if constexpr (Cfg::STORE == Store::Shfl) {
          // Collective store: the quad's four half2 of this row gather in lane t == 0, which
          // writes all 8 columns with one 16-byte store (a quarter of the store instructions).
          // Four shuffles rather than three: the stored quad is then four fresh registers, which
          // spares ptxas a register-allocation knot (a spill) in the 64 x 64 fp32 warp tile.
          uint32_t q[4];
#pragma unroll
          for (int k = 0; k < 4; ++k) q[k] = __shfl_sync(0xffffffffu, v, k, 4);
          if (t == 0) *reinterpret_cast<uint4*>(row) = make_uint4(q[0], q[1], q[2], q[3]);
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

// One extern "C" kernel per declared symbol. RUNG is a knobs type without commas (a rung, or an
// alias), so that it can sit inside __launch_bounds__. Its dynamic smem (0 for a static rung) is
// exported for the build's check against the toml's dsmem.
#define HG_MMA_KERNEL(SYM, RUNG)                                                                      \
  extern "C" __global__ void __launch_bounds__(hg::mma::Config<RUNG>::THREADS,                          \
                                               hg::mma::Config<RUNG>::MIN_BLOCKS)                       \
      SYM(const half* A, const half* B, half* C, int M, int N, int K) {                                 \
    hg::mma::kernel_body<hg::mma::Config<RUNG>>(A, B, C, M, N, K);                                      \
  }                                                                                                     \
  HG_EXPORT_DSMEM(SYM, hg::mma::Config<RUNG>::DSMEM ? hg::mma::Config<RUNG>::SMEM_BYTES : 0)

// The (acc, stages) variants of a rung: f16 x 2|3|4 (HG_MMA_F16_STAGES), and f32 x 2|3|4 on top
// (HG_MMA_ACC_STAGES), each the rung under AccStages; symbols follow CONTRACT.md:
// NAME__acc<f16|f32>__stages<2|3|4> (axes in declared order).
#define HG_MMA_VARIANT(NAME, RUNG, ACC, F32, S) \
  using NAME##__acc##ACC##__stages##S##_knobs = hg::mma::AccStages<RUNG, F32, S>; \
  HG_MMA_KERNEL(NAME##__acc##ACC##__stages##S, NAME##__acc##ACC##__stages##S##_knobs)
#define HG_MMA_F16_STAGES(NAME, RUNG)        \
  HG_MMA_VARIANT(NAME, RUNG, f16, false, 2) \
  HG_MMA_VARIANT(NAME, RUNG, f16, false, 3) \
  HG_MMA_VARIANT(NAME, RUNG, f16, false, 4)
#define HG_MMA_ACC_STAGES(NAME, RUNG) \
  HG_MMA_F16_STAGES(NAME, RUNG)       \
  HG_MMA_VARIANT(NAME, RUNG, f32, true, 2) \
  HG_MMA_VARIANT(NAME, RUNG, f32, true, 3) \
  HG_MMA_VARIANT(NAME, RUNG, f32, true, 4)
