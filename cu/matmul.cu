// Family "matmul": the helper kernels behind hgemm_rt.matmul (ladder "matmul": not catalogue GEMMs, so
// the generic GEMM tests and bench.py skip them; tests/test_matmul.py checks them through matmul).
// Every stride is in elements and may be any value (transposing views included); alpha and beta
// arrive as the bit patterns of fp32 values in i32 parameters.
// Epilogue: every kernel here stores y = scale * act(alpha * x + bias) + beta * C_old (cu/common/
// epilogue.cuh; x the sum, or the source element of a copy), in fp32 before the final rounding, with
// the parameters ptr:bias, i32:bias_stride, i32:epi, i32:scale_bits right after i32:beta_bits; the bias
// is indexed by the output's (destination's) row or column and shared by every matrix of a batch.
// Without bias, activation or scale (Epilogue::linear(), the common case) a kernel runs its alpha/beta
// code as before; the general epilogue is a __noinline__ function of its own, so that its code (an
// activation per element) takes no registers from the main loops.
// Batched: every kernel here takes a batch on grid.z (cu/CONTRACT.md): matrix z of the launch is
// (z / batch_inner, z % batch_inner), each operand offset by its 64-bit batch strides (0: broadcast);
// an unbatched launch has batch_inner = 1 and zero strides.
//
// matmul_copy2d_{f16,bf16,f32}: the memory-bound glue of the padding path.
//   dst[r*drs + c*dcs] = epilogue(S(r, c)) (+ beta * dst[...] when beta != 0), r < M, c < N, where
//   S(r, c) = src[r*srs + c*scs] inside src_rows x src_cols and 0 outside (zero padding).
//   256 threads, 64 x 64 tile through shared memory: the read walks the source's contiguous
//   dimension and the write the destination's (so a transposing copy is as coalesced as a plain
//   one), in 16-byte vectors wherever the run is contiguous and aligned. With bias, activation or
//   scale the copy is element by element straight from global memory (copy2d_general), and so is
//   SwiGLU (epi & kSwiGLU, `swiglu = true`): dst(r, c) = value_swiglu(S(r, c), S(r, N + c), r, c, N)
//   (+ beta * dst), N the destination's width and src_cols = 2N (the fallback after a plain GEMM into
//   a temporary where no fused kernel runs).
//   Any M, N >= 1, any alignment; sm_80+.
//
// matmul_gemm_mma_{f16,bf16}_m{16,32,64,128} (variants b = row | col):
//   C = epilogue(A.B) (+ beta * C). A: M x K row-major with leading dimension lda. B: K x N row-major
//   (b=row, "NN") or N x K row-major (b=col, "TN") with ldb. C: any strides, any alignment.
//   fp32 accumulation with mma.sync m16n8k16 fed by ldmatrix from XOR-swizzled shared memory,
//   multi-stage cp.async pipeline, BN = 128, BK = 64, BM = 16..128 (the small-M / decode shapes
//   get a tile that wastes no tensor-core rows).
//   Needs A and B 16-byte aligned and lda, ldb multiples of 8 (16-byte cp.async chunks); any M, N,
//   K >= 1: edge chunks are loaded element by element and zero-filled (see load_chunk).
//   Split-K: the launch may set grid.z = cluster.z = S in {1, 2, 4, 8} (sm_90). Each CTA of the
//   cluster sums one K slice into an fp32 tile kept in its shared memory; after a cluster barrier CTA r
//   adds rows [r*BM/S, (r+1)*BM/S) of all S tiles through distributed shared memory and applies the
//   epilogue. No workspace, no second launch, no atomics. Without a cluster (S = 1, and always on
//   sm_80..89) the CTA reads back its own tile.
//   Smem: stages * (BM + BN) * BK * 2 bytes (the fp32 tile reuses the pipeline buffers).
//
// matmul_split_tf32: an operand of the 3xTF32 product (matmul's fp32 inputs at fp32 accuracy on TF32 tensor
//   cores, role gemm_tf32x3). src (rows x K, any strides) becomes 2 KB planes of rows x 32 fp32 (KB =
//   ceil(K / 32) k-blocks; plane q at dst + q * rows * 32, rows of 128 bytes): plane kb holds the TF32 heads
//   hi(x) and plane KB + kb the residuals lo(x) of k-block kb (hg::tf32_split); zero past K.
//   The GEMM sums lo(a) hi(b) + hi(a) lo(b) + hi(a) hi(b) (each product to ~2^-21 relative; the lo(a) lo(b)
//   term and the residuals' own rounding are what is dropped). A plane per k-block keeps each TMA box of the
//   GEMM one contiguous run (rows of 3K elements put every box row on another page: at 8192^3 the GEMM ran
//   at half its rate). 64 x 64 source tile through shared memory, read along the source's contiguous
//   dimension, written in 128-byte plane rows. Grid: (ceil(K / 64), ceil(rows / 64)). sm_80+ (cvt.rna).
//
// matmul_split_f16x3: an operand of the 3xFP16 product (matmul's fp32 inputs at fp32 accuracy on fp16 tensor
//   cores, role gemm_f16x3). Each line of src (rows x K, any strides) is scaled by a power of two, 2^shift, that
//   puts its largest finite magnitude in [2^14, 2^15) (fp16's range holds 2^-24 .. 65504, so a line of any
//   magnitude keeps its 22 bits: no overflow, and its small entries stay above fp16's normal floor down to 2^-17 of
//   its largest), and split into fp16 head hi = rn(y) and residual lo = rn(y - hi) (y = x 2^shift, exact): 2 KB
//   planes of rows x 64 fp16 (KB = ceil(K / 64) k-blocks; plane q at dst + q * rows * 64, rows of 128 bytes),
//   hi in planes 0 .. KB - 1, lo in KB .. 2 KB - 1, zero past K; shift[r] = the line's exponent (int32), which
//   the GEMM takes back off its sums. hi and lo hold 22 of x's 24 bits; with hi(a)hi(b) + hi(a)lo(b) + lo(a)hi(b)
//   the dropped terms are ~2^-22 relative. A non-finite x keeps hi = x (inf / NaN) and lo = 0. A CTA owns
//   kX3Lines whole lines (the exponent needs all of a line): a pass for the maxima, then the split through a
//   kX3Lines x 64 shared tile, read along the source's contiguous dimension. Grid: (1, ceil(rows / kX3Lines),
//   matrices): matrix z = (outer, inner) = divmod(z, batch_inner) at element offsets outer * bs?_o + inner * bs?_i
//   of src (bss), of the planes (bsd, in the planes' fp32 units) and of the exponents (bse).
//
// matmul_gemm_simt_{f16,bf16,f32}: C = epilogue(A.B) (+ beta * C) with any strides for A, B and C and any
//   alignment, fp32 FMA, 256 threads, 64 x 64 tile, 4 x 4 outputs per thread. The correctness fallback
//   (dtypes/arches without a tensor-core kernel) and the one-launch path for tiny problems.
#include "common/dsmem.cuh"
#include "common/matmul_util.cuh"

namespace {

using hgu::from_f32;
using hgu::to_f32;

// ================================================================================================
// copy2d
// ================================================================================================
constexpr int kCopyTile = 64;
constexpr int kCopyThreads = 256;

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
__device__ __forceinline__ long long iabs(int x) { return x < 0 ? -static_cast<long long>(x) : x; }
// Element offset of this CTA's matrix in an operand with batch strides s_outer, s_inner, where grid.z
// is the batch (kernels without clusters); see hgu::grid_z for the two levels.
__device__ __forceinline__ long long batch_offset(int batch_inner, long long s_outer, long long s_inner) {
  const int z = static_cast<int>(blockIdx.z), outer = z / batch_inner;
  return outer * s_outer + (z - outer * batch_inner) * s_inner;
}

// Work item e of a 64 x 64 tile: the vector of V elements starting at (r, c). Along a row (cfast), 8
// consecutive threads cover one 128-byte row of the tile; down a column (the transposing side),
// consecutive threads take consecutive columns, so their shared-memory accesses stay in one row
// (conflict-free) while each reads or writes 16 contiguous bytes of its own column in global memory.
template <int V, int kChunks>
__device__ __forceinline__ void tile_slot(int e, bool cfast, int& r, int& c) {
  if (cfast) {
    r = e / kChunks;
    c = (e % kChunks) * V;
  } else {
    c = e % kCopyTile;
    r = (e / kCopyTile) * V;
  }
}

// A 64 x 64 tile moves through shared memory in 16-byte vectors of V elements. Each side walks its
// contiguous dimension (the one with the smaller |stride|): a vector of V consecutive elements
// along it is read with 16-byte loads wherever the run is inside the matrix and contiguous (aligned
// or not, see load16_any) and written with one 16-byte store where it is also aligned; V guarded
// element accesses otherwise (ragged edges, misaligned destinations, general strides).
// alpha == 1, beta == 0 is a pure bit copy; otherwise the store side computes alpha * x + beta * dst in
// fp32. Only for a linear epilogue (no bias, activation or scale): copy2d_general does the others.
template <typename T>
__device__ __forceinline__ void copy2d_vec(const T* __restrict__ src, T* __restrict__ dst, int M, int N,
                                           int src_rows, int src_cols, int srs, int scs, int drs, int dcs,
                                           int alpha_bits, int beta_bits, int batch_inner, long long bss_o,
                                           long long bss_i, long long bsd_o, long long bsd_i) {
  constexpr int V = 16 / sizeof(T);
  // grid.z is the batch (no clusters here): this CTA's source matrix, and below its destination
  // (each applied where it is used: a pointer live across both phases costs the occupancy of a
  // kernel that needs every CTA it can get in flight)
  src += batch_offset(batch_inner, bss_o, bss_i);
  constexpr int kChunks = kCopyTile / V;  // vectors per tile row
  // rows padded by one vector (they stay 16-byte aligned): the 16-byte row accesses of 8 threads
  // then cover all banks
  __shared__ __align__(16) T tile[kCopyTile][kCopyTile + V];
  const int r0 = blockIdx.y * kCopyTile, c0 = blockIdx.x * kCopyTile;
  const bool src_cfast = iabs(scs) <= iabs(srs);
  const bool dst_cfast = iabs(dcs) <= iabs(drs);
  const bool plain = alpha_bits == __float_as_int(1.f) && beta_bits == 0;
  const float alpha = __int_as_float(alpha_bits), beta = __int_as_float(beta_bits);
#pragma unroll
  for (int i = 0; i < kCopyTile * kChunks / kCopyThreads; ++i) {
    int r, c;  // first element of this thread's vector
    tile_slot<V, kChunks>(threadIdx.x + i * kCopyThreads, src_cfast, r, c);
    const int gr = r0 + r, gc = c0 + c;
    uint4 u;
    T* x = reinterpret_cast<T*>(&u);
    const T* p = src + static_cast<long long>(gr) * srs + static_cast<long long>(gc) * scs;
    // the aligned 16-byte chunk(s) load16_any reads must also lie inside this contiguous row (or
    // column) of the source: past its ends they hold bytes outside the allocation or a strided
    // matrix's unwritten padding (memcheck / initcheck flag both)
    const T* line = src_cfast ? src + static_cast<long long>(gr) * srs : src + static_cast<long long>(gc) * scs;
    const int line_len = src_cfast ? src_cols : src_rows;
    const bool full = (src_cfast ? (gr < src_rows && gc + V <= src_cols && scs == 1)
                                 : (gc < src_cols && gr + V <= src_rows && srs == 1)) &&
                      hgu::chunks_inside(p, reinterpret_cast<uintptr_t>(line),
                                         reinterpret_cast<uintptr_t>(line + line_len));
    if (full) {
      u = hgu::load16_any(p);  // contiguous run inside the source, aligned or not
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int rr = src_cfast ? gr : gr + j, cc = src_cfast ? gc + j : gc;
        x[j] = (rr < src_rows && cc < src_cols) ? src[static_cast<long long>(rr) * srs + static_cast<long long>(cc) * scs]
                                                : T{};  // outside the source: the zero padding
      }
    }
    if (src_cfast) {
      *reinterpret_cast<uint4*>(&tile[r][c]) = u;
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) tile[r + j][c] = x[j];
    }
  }
  __syncthreads();
  dst += batch_offset(batch_inner, bsd_o, bsd_i);
#pragma unroll
  for (int i = 0; i < kCopyTile * kChunks / kCopyThreads; ++i) {
    int r, c;
    tile_slot<V, kChunks>(threadIdx.x + i * kCopyThreads, dst_cfast, r, c);
    const int gr = r0 + r, gc = c0 + c;
    if (gr >= M || gc >= N) continue;
    uint4 u;
    T* x = reinterpret_cast<T*>(&u);
    if (dst_cfast) {
      u = *reinterpret_cast<const uint4*>(&tile[r][c]);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) x[j] = tile[r + j][c];
    }
    T* q = dst + static_cast<long long>(gr) * drs + static_cast<long long>(gc) * dcs;
    const bool full = dst_cfast ? (gc + V <= N && dcs == 1) : (gr + V <= M && drs == 1);
    if (plain && full && aligned16(q)) {
      *reinterpret_cast<uint4*>(q) = u;
      continue;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const int rr = dst_cfast ? gr : gr + j, cc = dst_cfast ? gc + j : gc;
      if (rr < M && cc < N) {
        T* qe = dst + static_cast<long long>(rr) * drs + static_cast<long long>(cc) * dcs;
        if (plain) {
          *qe = x[j];
        } else {
          float v = alpha * to_f32(x[j]);
          if (beta != 0.f) v += beta * to_f32(*qe);  // BLAS convention: beta == 0 never reads C
          *qe = from_f32<T>(v);
        }
      }
    }
  }
}

// w * s as a 64-bit product, opaque to the compiler: written as a C++ product in copy2d_general's loop it
// became a 64-bit induction variable, whose extra registers took SwiGLU's copy to 36 (sm_90).
__device__ __forceinline__ long long mul_wide(int w, int s) {
  long long r;
  asm("mul.wide.s32 %0, %1, %2;" : "=l"(r) : "r"(w), "r"(s));
  return r;
}

// The copies with the general epilogue (bias, activation, scale): dst(r, c) = the epilogue of S(r, c) at
// the destination's (row, column); with SwiGLU (epi & kSwiGLU, src_cols = 2N) the value_swiglu of the
// gate S(r, c) and the up part S(r, N + c). One element at a time straight from global memory (no tile:
// a rare path, which this keeps small), in functions of their own so that their code takes no registers
// from copy2d_vec (which every plain and alpha/beta copy runs, 8 CTAs of 32 registers per SM): each
// thread keeps one coordinate of the tile (the column when dst's rows are contiguous, kCfast, so that
// consecutive threads store consecutive elements) and walks the other, its pointers and bounds along
// the fixed one computed once. The kernel takes the registers of its largest function: with both
// coordinates free, SwiGLU's two source loads and two bias elements took 36-38 (sm_90), and the
// vector path then ran at 40 too.
template <typename T, bool kSwiGLU, bool kCfast>
__device__ __noinline__ void copy2d_general(const T* __restrict__ src, T* __restrict__ dst, int M, int N,
                                            int src_rows, int src_cols, int srs, int scs, int drs, int dcs,
                                            const hge::Epilogue<T> ep, int batch_inner, long long bss_o,
                                            long long bss_i, long long bsd_o, long long bsd_i) {
  const int lane = threadIdx.x % kCopyTile, first = threadIdx.x / kCopyTile;
  constexpr int kStep = kCopyThreads / kCopyTile;
  // the fixed coordinate f (a column if kCfast, else a row) and the walked one w = w0 + first + kStep * i
  const int f = (kCfast ? blockIdx.x : blockIdx.y) * kCopyTile + lane;
  const int w0 = (kCfast ? blockIdx.y : blockIdx.x) * kCopyTile;
  if (f >= (kCfast ? N : M)) return;
  src += batch_offset(batch_inner, bss_o, bss_i);
  dst += batch_offset(batch_inner, bsd_o, bsd_i);
  const T* s = src + static_cast<long long>(f) * (kCfast ? scs : srs);  // the fixed column or row
  const T* su = s + static_cast<long long>(N) * scs;  // SwiGLU's up part: column N + c
  T* d = dst + static_cast<long long>(f) * (kCfast ? dcs : drs);
  const int sw = kCfast ? srs : scs, dw = kCfast ? drs : dcs;  // strides along w
  const int w_end = min(w0 + kCopyTile, kCfast ? M : N);
  const int mode = ep.flags & hge::kBiasMask;
#pragma unroll 1
  for (int w = w0 + first; w < w_end; w += kStep) {
    const int r = kCfast ? w : f, c = kCfast ? f : w;
    // bias_at(r, c) and, for SwiGLU, bias_at(r, N + c), from one index (reading the ones of the fixed
    // coordinate once, before the loop, took 37 registers)
    float bg = 0.f, bu = 0.f;
    if (mode != 0) {
      const int i = mode == hge::kBiasCol ? c : r;
      bg = to_f32(ep.bias[static_cast<long long>(i) * ep.bias_stride]);
      if constexpr (kSwiGLU)
        bu = mode == hge::kBiasCol ? to_f32(ep.bias[static_cast<long long>(N + i) * ep.bias_stride]) : bg;
    }
    // S(r, c) and the up part S(r, N + c) (at su + the same offset): the source with its zero padding
    const long long off = mul_wide(w, sw);
    const bool row_in = r < src_rows;
    const float g = row_in && c < src_cols ? to_f32(s[off]) : 0.f;
    float v;
    if constexpr (kSwiGLU) {
      const float u = row_in && N + c < src_cols ? to_f32(su[off]) : 0.f;
      v = ep.value_swiglu_b(g, u, bg, bu);
    } else {
      v = ep.value_b(g, bg);
    }
    T* q = d + static_cast<long long>(w) * dw;
    if (ep.beta != 0.f) v += ep.beta * to_f32(*q);  // BLAS convention: beta == 0 never reads C
    *q = from_f32<T>(v);
  }
}

template <typename T, bool kCfast>
__device__ __forceinline__ void copy2d_general_dispatch(const T* src, T* dst, int M, int N, int src_rows,
                                                        int src_cols, int srs, int scs, int drs, int dcs,
                                                        const hge::Epilogue<T>& ep, int batch_inner, long long bss_o,
                                                        long long bss_i, long long bsd_o, long long bsd_i) {
  if (ep.swiglu())
    copy2d_general<T, true, kCfast>(src, dst, M, N, src_rows, src_cols, srs, scs, drs, dcs, ep, batch_inner, bss_o,
                                    bss_i, bsd_o, bsd_i);
  else
    copy2d_general<T, false, kCfast>(src, dst, M, N, src_rows, src_cols, srs, scs, drs, dcs, ep, batch_inner, bss_o,
                                     bss_i, bsd_o, bsd_i);
}

template <typename T>
__device__ __forceinline__ void copy2d(const T* __restrict__ src, T* __restrict__ dst, int M, int N,
                                       int src_rows, int src_cols, int srs, int scs, int drs, int dcs,
                                       int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,
                                       int scale_bits, int batch_inner, long long bss_o, long long bss_i,
                                       long long bsd_o, long long bsd_i) {
  const hge::Epilogue<T> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
  if (ep.linear())
    copy2d_vec<T>(src, dst, M, N, src_rows, src_cols, srs, scs, drs, dcs, alpha_bits, beta_bits, batch_inner, bss_o,
                  bss_i, bsd_o, bsd_i);
  else if (iabs(dcs) <= iabs(drs))  // dst's rows contiguous: consecutive threads along a row
    copy2d_general_dispatch<T, true>(src, dst, M, N, src_rows, src_cols, srs, scs, drs, dcs, ep, batch_inner, bss_o,
                                     bss_i, bsd_o, bsd_i);
  else
    copy2d_general_dispatch<T, false>(src, dst, M, N, src_rows, src_cols, srs, scs, drs, dcs, ep, batch_inner, bss_o,
                                      bss_i, bsd_o, bsd_i);
}

// ================================================================================================
// mma.sync GEMM with cluster split-K
// ================================================================================================
template <typename T, int BM_, int WARPS_M, int WARPS_N, int STAGES, bool B_ROW>
struct MmaCfg {
  using Elem = T;
  static constexpr int BM = BM_, BN = 128, BK = 64;
  static constexpr int kStages = STAGES;
  static constexpr bool kBRow = B_ROW;
  static constexpr int kWarpsM = WARPS_M, kWarpsN = WARPS_N;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // warp tile
  static constexpr int MF = WM / 16, NF = WN / 8;                // mma fragments per warp
  static constexpr int kABytes = BM * BK * 2, kBBytes = BN * BK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSmemBytes = STAGES * kStageBytes;
  static constexpr int kRedStride = BN + 8;  // floats; +8 makes the float2 fragment stores conflict-free
  static_assert(sizeof(T) == 2, "16-bit inputs only");
  static_assert(WM % 16 == 0 && WN % 16 == 0, "warp tile: whole m16 fragments, pairs of n8 fragments");
  static_assert(BM * kRedStride * 4 <= kSmemBytes, "the fp32 partial tile must fit in the pipeline buffers");
  static_assert((BM * BK / 8) % kThreads == 0 && (BN * BK / 8) % kThreads == 0, "whole chunks per thread");
  static_assert(BM % 8 == 0, "split-K row slices: BM must divide by every cluster size up to 8");
  static_assert(kWarpsM * WM == BM, "warps along M cover the tile");
};

// Byte offset of 16-byte chunk `c` of row `r` in a tile whose rows are `row_chunks` chunks long:
// the chunk index is XORed with the row (low 3 bits), so the 8 rows an ldmatrix phase reads at the
// same logical chunk land in 8 different bank groups.
template <int kRowChunks>
__device__ __forceinline__ uint32_t swz(int r, int c) {
  return static_cast<uint32_t>(r * kRowChunks * 16 + (((c & ~7) | ((c ^ r) & 7)) << 4));
}

// One 16-byte chunk of a tile row: the `elems` (may be <= 0 or > 8) valid 2-byte elements at src,
// zeros after them. kEdge = false: the whole tile is inside the matrix, every chunk is one cp.async.
// kEdge = true: a whole chunk is still one cp.async; a partial or empty one is element loads and one
// shared store, so no byte past the row's last element is ever addressed: a zero-filling cp.async
// with src-size < 16 still counts as a 16-byte access to memcheck, which flagged it past the end of
// the allocation when a ragged row (N = 141 in a buffer of row stride 144) was the buffer's last.
template <bool kEdge, typename T>
__device__ __forceinline__ void load_chunk(uint32_t dst, const T* src, int elems) {
  if (!kEdge || elems >= 8) {
    hg::cp_async_16(dst, src);
    return;
  }
  uint32_t w[4] = {0u, 0u, 0u, 0u};
  const auto* s = reinterpret_cast<const unsigned short*>(src);
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (j < elems) w[j / 2] |= static_cast<uint32_t>(s[j]) << (16 * (j % 2));
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}

template <class C, bool kEdge>
__device__ __forceinline__ void mma_load_tiles(uint32_t sA, uint32_t sB, const typename C::Elem* A,
                                               const typename C::Elem* B, int M, int N, int K, int lda, int ldb,
                                               int m0, int n0, int k0) {
  const int tid = threadIdx.x;
  // A tile: BM rows of 8 chunks (64 k)
#pragma unroll
  for (int i = 0; i < C::BM * 8 / C::kThreads; ++i) {
    const int e = tid + i * C::kThreads, r = e >> 3, c = e & 7;
    const int gm = m0 + r, gk = k0 + c * 8;
    load_chunk<kEdge>(sA + swz<8>(r, c), A + (long long)gm * lda + gk, gm < M ? K - gk : 0);
  }
  if constexpr (!C::kBRow) {  // B given N x K: BN rows (n) of 8 chunks (k)
#pragma unroll
    for (int i = 0; i < C::BN * 8 / C::kThreads; ++i) {
      const int e = tid + i * C::kThreads, r = e >> 3, c = e & 7;
      const int gn = n0 + r, gk = k0 + c * 8;
      load_chunk<kEdge>(sB + swz<8>(r, c), B + (long long)gn * ldb + gk, gn < N ? K - gk : 0);
    }
  } else {  // B given K x N: BK rows (k) of BN/8 chunks (n)
    constexpr int kRowChunks = C::BN / 8;
#pragma unroll
    for (int i = 0; i < C::BK * kRowChunks / C::kThreads; ++i) {
      const int e = tid + i * C::kThreads, r = e / kRowChunks, c = e % kRowChunks;
      const int gk = k0 + r, gn = n0 + c * 8;
      load_chunk<kEdge>(sB + swz<kRowChunks>(r, c), B + (long long)gk * ldb + gn, gk < K ? N - gn : 0);
    }
  }
}

// One pipeline stage. Interior tiles (the CTA-uniform common case) issue bare cp.async with no
// per-chunk test: a per-chunk branch there cost 15% at 4096^3 (docs/dev/tuning_log.md, util).
template <class C>
__device__ __forceinline__ void mma_load_stage(uint32_t sA, uint32_t sB, const typename C::Elem* A,
                                               const typename C::Elem* B, int M, int N, int K, int lda, int ldb,
                                               int m0, int n0, int k0) {
  if (m0 + C::BM <= M && n0 + C::BN <= N && k0 + C::BK <= K)
    mma_load_tiles<C, false>(sA, sB, A, B, M, N, K, lda, ldb, m0, n0, k0);
  else
    mma_load_tiles<C, true>(sA, sB, A, B, M, N, K, lda, ldb, m0, n0, k0);
}

template <class C>
__device__ __forceinline__ void mma_compute_stage(uint32_t sA, uint32_t sB, int wm0, int wn0, int lane,
                                                  float (&acc)[C::MF][C::NF][4]) {
#pragma unroll
  for (int kk = 0; kk < C::BK / 16; ++kk) {
    uint32_t af[C::MF][4], bf[C::NF][2];
#pragma unroll
    for (int mi = 0; mi < C::MF; ++mi) {
      // lanes 0-15 address rows 0-15 at k chunk 2kk, lanes 16-31 the same rows at chunk 2kk+1:
      // registers come back as a0..a3 of the m16n8k16 A fragment
      const int r = wm0 + mi * 16 + (lane & 15), c = kk * 2 + (lane >> 4);
      hg::ldmatrix_x4(af[mi][0], af[mi][1], af[mi][2], af[mi][3], sA + swz<8>(r, c));
    }
#pragma unroll
    for (int nj = 0; nj < C::NF / 2; ++nj) {
      if constexpr (!C::kBRow) {
        // rows are n: lanes 0-7 / 8-15 give b0 / b1 of fragment 2nj, lanes 16-31 those of 2nj+1
        const int r = wn0 + nj * 16 + (lane & 7) + ((lane >> 4) << 3), c = kk * 2 + ((lane >> 3) & 1);
        hg::ldmatrix_x4(bf[2 * nj][0], bf[2 * nj][1], bf[2 * nj + 1][0], bf[2 * nj + 1][1], sB + swz<8>(r, c));
      } else {
        // rows are k: the transposing ldmatrix turns the k-major 8x8 blocks into B fragments
        const int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
        const int c = (wn0 + nj * 16) / 8 + (lane >> 4);
        hg::ldmatrix_x4_trans(bf[2 * nj][0], bf[2 * nj][1], bf[2 * nj + 1][0], bf[2 * nj + 1][1],
                              sB + swz<C::BN / 8>(r, c));
      }
    }
#pragma unroll
    for (int mi = 0; mi < C::MF; ++mi)
#pragma unroll
      for (int ni = 0; ni < C::NF; ++ni) hgu::mma_f32<typename C::Elem>(acc[mi][ni], af[mi], bf[ni]);
  }
}

// kBatched = false: the code of an unbatched launch, with no batch arithmetic at all (A and B stay
// kernel parameters, which the address math of the pipeline's loads reads from the constant bank).
template <class C, bool kBatched>
__device__ __forceinline__ void gemm_mma_body(const typename C::Elem* __restrict__ A,
                                              const typename C::Elem* __restrict__ B,
                                              typename C::Elem* __restrict__ Cout, int M, int N, int K, int lda,
                                              int ldb, int ldc_r, int ldc_c, int alpha_bits, int beta_bits,
                                              const typename C::Elem* bias, int bias_stride, int epi, int scale_bits,
                                              int batch_inner, long long bsa_o, long long bsa_i, long long bsb_o,
                                              long long bsb_i, long long bsc_o, long long bsc_i) {
  using T = typename C::Elem;
  extern __shared__ __align__(128) unsigned char smem[];
  int splits, split;
  if constexpr (kBatched) {
    const hgu::GridZ gz = hgu::grid_z(batch_inner);
    A += hgu::batch_offset(gz, bsa_o, bsa_i);
    B += hgu::batch_offset(gz, bsb_o, bsb_i);
    splits = gz.splits;
    split = gz.split;
  } else {
    splits = gridDim.z;
    split = static_cast<int>(blockIdx.z);
  }
  const uint32_t s0 = hg::smem_u32(smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int m0 = blockIdx.y * C::BM, n0 = blockIdx.x * C::BN;
  const int wm0 = (warp / C::kWarpsN) * C::WM, wn0 = (warp % C::kWarpsN) * C::WN;

  // This CTA's K slice, in whole BK tiles (slices never share a tile, so each K element is summed once).
  const int k_tiles = (K + C::BK - 1) / C::BK;
  const int per = (k_tiles + splits - 1) / splits;
  const int kt0 = min(k_tiles, split * per);
  const int nk = min(k_tiles, kt0 + per) - kt0;

  float acc[C::MF][C::NF][4];
#pragma unroll
  for (int mi = 0; mi < C::MF; ++mi)
#pragma unroll
    for (int ni = 0; ni < C::NF; ++ni)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;

  auto stage_a = [&](int s) { return s0 + s * C::kStageBytes; };
  auto stage_b = [&](int s) { return s0 + s * C::kStageBytes + C::kABytes; };
#pragma unroll
  for (int s = 0; s < C::kStages - 1; ++s) {
    if (s < nk) mma_load_stage<C>(stage_a(s), stage_b(s), A, B, M, N, K, lda, ldb, m0, n0, (kt0 + s) * C::BK);
    hg::cp_async_commit();  // an empty group keeps the wait_group count uniform
  }
  for (int t = 0; t < nk; ++t) {
    hg::cp_async_wait<C::kStages - 2>();
    // tile t has landed for every thread, and every warp is done reading the slot refilled below
    __syncthreads();
    const int nt = t + C::kStages - 1;
    if (nt < nk) {
      const int s = nt % C::kStages;
      mma_load_stage<C>(stage_a(s), stage_b(s), A, B, M, N, K, lda, ldb, m0, n0, (kt0 + nt) * C::BK);
    }
    hg::cp_async_commit();
    const int s = t % C::kStages;
    mma_compute_stage<C>(stage_a(s), stage_b(s), wm0, wn0, lane, acc);
  }
  hg::cp_async_wait<0>();
  __syncthreads();  // the pipeline buffers become the fp32 partial tile

  float* red = reinterpret_cast<float*>(smem);
  {
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mi = 0; mi < C::MF; ++mi)
#pragma unroll
      for (int ni = 0; ni < C::NF; ++ni) {
        const int r = wm0 + mi * 16 + g, c = wn0 + ni * 8 + 2 * q;
        *reinterpret_cast<float2*>(red + r * C::kRedStride + c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
        *reinterpret_cast<float2*>(red + (r + 8) * C::kRedStride + c) =
            make_float2(acc[mi][ni][2], acc[mi][ni][3]);
      }
  }
  // C's batch offset is taken here: a pointer held across the main loop costs registers there
  if constexpr (kBatched) Cout += hgu::batch_offset(hgu::grid_z(batch_inner), bsc_o, bsc_i);
  const hge::Epilogue<T> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
  hgu::cluster_reduce_store<T, C::BM, C::BN, C::kRedStride>(smem, splits, tid, C::kThreads, Cout, M, N, m0, n0, ldc_r,
                                                            ldc_c, ep);
}

// An unbatched launch (grid.z = the cluster's size: splits only) runs gemm_mma_body<C, false>, the same
// code as before kernels took a batch; a batched one the body that offsets A, B and C per matrix.
template <class C>
__device__ __forceinline__ void gemm_mma(const typename C::Elem* A, const typename C::Elem* B, typename C::Elem* Cout,
                                         int M, int N, int K, int lda, int ldb, int ldc_r, int ldc_c, int alpha_bits,
                                         int beta_bits, const typename C::Elem* bias, int bias_stride, int epi,
                                         int scale_bits, int batch_inner, long long bsa_o, long long bsa_i,
                                         long long bsb_o, long long bsb_i, long long bsc_o, long long bsc_i) {
  if (gridDim.z == static_cast<unsigned>(hgu::grid_z(batch_inner).splits))
    gemm_mma_body<C, false>(A, B, Cout, M, N, K, lda, ldb, ldc_r, ldc_c, alpha_bits, beta_bits, bias, bias_stride,
                            epi, scale_bits, batch_inner, bsa_o, bsa_i, bsb_o, bsb_i, bsc_o, bsc_i);
  else
    gemm_mma_body<C, true>(A, B, Cout, M, N, K, lda, ldb, ldc_r, ldc_c, alpha_bits, beta_bits, bias, bias_stride,
                           epi, scale_bits, batch_inner, bsa_o, bsa_i, bsb_o, bsb_i, bsc_o, bsc_i);
}

// ================================================================================================
// SIMT fallback
// ================================================================================================
constexpr int kSimtTile = 64, kSimtBK = 16, kSimtThreads = 256;

// A thread's 4 x 4 outputs, rows m + 16i and columns n + 16j, through the epilogue. kLinear: alpha and
// beta only (the common case); the general one (bias, activation, scale) is a function of its own so
// that its code takes no registers from the main loop.
struct SimtAcc {
  float v[4][4];
};
template <typename T, bool kLinear>
__device__ __forceinline__ void simt_store(const SimtAcc& a, T* C, int M, int N, int crs, int ccs, int m, int n,
                                           const hge::Epilogue<T>& ep) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int gm = m + 16 * i, gn = n + 16 * j;
      if (gm < M && gn < N) {
        T* p = C + (long long)gm * crs + (long long)gn * ccs;
        float v = kLinear ? ep.alpha * a.v[i][j] : ep.value(a.v[i][j], gm, gn);
        if (ep.beta != 0.f) v += ep.beta * to_f32(*p);
        *p = from_f32<T>(v);
      }
    }
}
template <typename T>
__device__ __noinline__ void simt_store_general(const SimtAcc a, T* C, int M, int N, int crs, int ccs, int m, int n,
                                                const hge::Epilogue<T> ep) {
  simt_store<T, false>(a, C, M, N, crs, ccs, m, n, ep);
}

// An element of A or B through the read-only path. The compiler infers it by itself for fp32, but not
// for the 16-bit types once the kernel calls simt_store_general (which writes through C); __ldg on fp32
// would turn its predicated loads into branches.
template <typename T>
__device__ __forceinline__ T simt_ld(const T* p) {
  if constexpr (sizeof(T) == 2)
    return __ldg(p);
  else
    return *p;
}

template <typename T>
__device__ __forceinline__ void gemm_simt(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                          int M, int N, int K, int ars, int acs, int brs, int bcs, int crs,
                                          int ccs, int alpha_bits, int beta_bits, const T* bias, int bias_stride,
                                          int epi, int scale_bits, int batch_inner, long long bsa_o, long long bsa_i,
                                          long long bsb_o, long long bsb_i, long long bsc_o, long long bsc_i) {
  __shared__ float As[kSimtBK][kSimtTile + 4];  // As[k][m]
  A += batch_offset(batch_inner, bsa_o, bsa_i);  // grid.z is the batch (no clusters here)
  B += batch_offset(batch_inner, bsb_o, bsb_i);
  __shared__ float Bs[kSimtBK][kSimtTile + 4];  // Bs[k][n]
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * kSimtTile, n0 = blockIdx.x * kSimtTile;
  // a warp walks the operand's contiguous index where it has one
  const bool a_kfast = (acs < 0 ? -(long long)acs : acs) <= (ars < 0 ? -(long long)ars : ars);
  const bool b_nfast = (bcs < 0 ? -(long long)bcs : bcs) <= (brs < 0 ? -(long long)brs : brs);
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += kSimtBK) {
#pragma unroll
    for (int i = 0; i < kSimtTile * kSimtBK / kSimtThreads; ++i) {
      const int e = tid + i * kSimtThreads;
      const int m = a_kfast ? e / kSimtBK : e % kSimtTile, k = a_kfast ? e % kSimtBK : e / kSimtTile;
      const int gm = m0 + m, gk = k0 + k;
      As[k][m] = (gm < M && gk < K) ? to_f32(simt_ld(A + (long long)gm * ars + (long long)gk * acs)) : 0.f;
      const int n = b_nfast ? e % kSimtTile : e / kSimtBK, kb = b_nfast ? e / kSimtTile : e % kSimtBK;
      const int gn = n0 + n, gkb = k0 + kb;
      Bs[kb][n] = (gn < N && gkb < K) ? to_f32(simt_ld(B + (long long)gkb * brs + (long long)gn * bcs)) : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kSimtBK; ++k) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }
  const hge::Epilogue<T> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
  C += batch_offset(batch_inner, bsc_o, bsc_i);
  SimtAcc a;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) a.v[i][j] = acc[i][j];
  if (ep.linear())
    simt_store<T, true>(a, C, M, N, crs, ccs, m0 + ty, n0 + tx, ep);
  else
    simt_store_general<T>(a, C, M, N, crs, ccs, m0 + ty, n0 + tx, ep);
}

// ================================================================================================
// split_tf32
// ================================================================================================
constexpr int kSplitBlock = 32;  // a plane's width: one 128-byte row of fp32 (hgemm_rt.problem.SPLIT_FORMATS)

__device__ __forceinline__ void split_tf32(const float* __restrict__ src, float* __restrict__ dst, int rows, int K,
                                           int srs, int scs) {
  constexpr int kPer = kCopyTile * kCopyTile / kCopyThreads;
  __shared__ float tile[kCopyTile][kCopyTile + 1];  // +1: the column walk of a transposed source is conflict-free
  const int r0 = blockIdx.y * kCopyTile, k0 = blockIdx.x * kCopyTile;
  const bool kfast = iabs(scs) <= iabs(srs);  // consecutive threads walk the source's contiguous dimension
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = threadIdx.x + i * kCopyThreads, a = e / kCopyTile, b = e % kCopyTile;
    const int r = kfast ? a : b, k = kfast ? b : a, gr = r0 + r, gk = k0 + k;
    tile[r][k] = gr < rows && gk < K ? src[static_cast<long long>(gr) * srs + static_cast<long long>(gk) * scs]
                                     : 0.f;  // past K: the last k-block's zero padding
  }
  __syncthreads();
  const int blocks = (K + kSplitBlock - 1) / kSplitBlock;
  const long long lo_planes = static_cast<long long>(blocks) * rows * kSplitBlock;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = threadIdx.x + i * kCopyThreads, r = e / kCopyTile, k = e % kCopyTile;
    const int gr = r0 + r, gk = k0 + k;
    if (gr >= rows || gk >= blocks * kSplitBlock) continue;
    float hi, lo;
    hg::tf32_split(tile[r][k], hi, lo);
    float* q = dst + (static_cast<long long>(gk / kSplitBlock) * rows + gr) * kSplitBlock + gk % kSplitBlock;
    q[0] = hi;
    q[lo_planes] = lo;
  }
}

// ================================================================================================
// split_f16x3
// ================================================================================================
constexpr int kX3Lines = 16;       // lines (rows of the split's source) per CTA
constexpr int kF16Block = 64;      // a plane's width: one 128-byte row of fp16 (hgemm_rt.problem.SPLIT_FORMATS)
constexpr int kX3Top = 14;         // a line's largest finite magnitude goes to [2^kX3Top, 2^(kX3Top + 1))
constexpr int kX3Per = kX3Lines * kF16Block / kCopyThreads;  // tile elements per thread
constexpr int kX3Unroll = 8;       // tiles of the maxima pass in flight per thread
constexpr int kX3Batch = 4;        // k-blocks of the split pass per shared-memory round (their loads in flight)

// Element i of this thread's share of a kX3Lines x kF16Block tile: consecutive threads walk the source's
// contiguous dimension (K for a row-major line, the lines for a transposed source)
__device__ __forceinline__ void x3_slot(int i, bool kfast, int& line, int& k) {
  const int e = static_cast<int>(threadIdx.x) + i * kCopyThreads;
  line = kfast ? e / kF16Block : e % kX3Lines;
  k = kfast ? e % kF16Block : e / kX3Lines;
}

__device__ __forceinline__ void split_f16x3(const float* __restrict__ src, __half* __restrict__ dst,
                                            int* __restrict__ shift, int rows, int K, int srs, int scs) {
  // (src, dst and shift: this CTA's matrix)
  __shared__ float tile[kX3Batch][kX3Lines][kF16Block + 1];
  __shared__ int amax[kX3Lines];  // bits of the lines' largest finite |x| (non-negative floats order as ints)
  __shared__ int sh[kX3Lines];
  const int r0 = blockIdx.y * kX3Lines;
  const bool kfast = iabs(scs) <= iabs(srs);
  auto load = [&](int line, int k) {
    const int gr = r0 + line;
    return gr < rows && k < K ? src[static_cast<long long>(gr) * srs + static_cast<long long>(k) * scs] : 0.f;
  };
  if (threadIdx.x < kX3Lines) amax[threadIdx.x] = 0;
  float m[kX3Per];  // a slot's line is the same in every tile
#pragma unroll
  for (int i = 0; i < kX3Per; ++i) m[i] = 0.f;
#pragma unroll 1
  for (int k0 = 0; k0 < K; k0 += kX3Unroll * kF16Block) {
    float x[kX3Unroll][kX3Per];
#pragma unroll
    for (int u = 0; u < kX3Unroll; ++u)
#pragma unroll
      for (int i = 0; i < kX3Per; ++i) {
        int line, k;
        x3_slot(i, kfast, line, k);
        x[u][i] = load(line, k0 + u * kF16Block + k);
      }
#pragma unroll
    for (int u = 0; u < kX3Unroll; ++u)
#pragma unroll
      for (int i = 0; i < kX3Per; ++i)
        if (isfinite(x[u][i])) m[i] = fmaxf(m[i], fabsf(x[u][i]));
  }
  __syncthreads();  // amax is zeroed
#pragma unroll
  for (int i = 0; i < kX3Per; ++i) {
    int line, k;
    x3_slot(i, kfast, line, k);
    float v = m[i];
    if (kfast) {  // a warp's 32 slots share their line
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
      if (threadIdx.x % 32 == 0) atomicMax(&amax[line], __float_as_int(v));
    } else {
      atomicMax(&amax[line], __float_as_int(v));
    }
  }
  __syncthreads();
  if (threadIdx.x < kX3Lines) {
    const float a = __int_as_float(amax[threadIdx.x]);
    const int s = a > 0.f ? kX3Top - ilogbf(a) : 0;  // ilogbf is exact for subnormals too
    sh[threadIdx.x] = s;
    if (r0 + static_cast<int>(threadIdx.x) < rows) shift[r0 + threadIdx.x] = s;
  }
  const int blocks = (K + kF16Block - 1) / kF16Block;
  const long long lo_planes = static_cast<long long>(blocks) * rows * kF16Block;
#pragma unroll 1
  for (int kb0 = 0; kb0 < blocks; kb0 += kX3Batch) {
    __syncthreads();  // sh is written; the previous round's tiles are read
#pragma unroll
    for (int p = 0; p < kX3Batch; ++p)
#pragma unroll
      for (int i = 0; i < kX3Per; ++i) {
        int line, k;
        x3_slot(i, kfast, line, k);
        tile[p][line][k] = load(line, (kb0 + p) * kF16Block + k);  // past K: the last k-block's zero padding
      }
    __syncthreads();
#pragma unroll
    for (int p = 0; p < kX3Batch; ++p) {
      if (kb0 + p >= blocks) break;
#pragma unroll
      for (int i = 0; i < kX3Per / 2; ++i) {  // fp16 pairs, a warp writing 128 contiguous bytes of a plane row
        const int e = static_cast<int>(threadIdx.x) + i * kCopyThreads, line = e / (kF16Block / 2);
        const int k = 2 * (e % (kF16Block / 2)), gr = r0 + line;
        if (gr >= rows) continue;
        __half hi[2], lo[2];
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float y = ldexpf(tile[p][line][k + j], sh[line]);  // exact: a power of two, inside fp32's range
          hi[j] = __float2half_rn(y);
          lo[j] = isfinite(y) ? __float2half_rn(y - __half2float(hi[j])) : __float2half_rn(0.f);
        }
        __half* q = dst + (static_cast<long long>(kb0 + p) * rows + gr) * kF16Block + k;
        *reinterpret_cast<__half2*>(q) = __halves2half2(hi[0], hi[1]);
        *reinterpret_cast<__half2*>(q + lo_planes) = __halves2half2(lo[0], lo[1]);
      }
    }
  }
}

}  // namespace

// ---- extern "C" entry points: the splits written out, the rest instantiated from matmul.toml (matmul.instances.cuh) ----
extern "C" __global__ void __launch_bounds__(kCopyThreads)
    matmul_split_tf32(const float* src, float* dst, int src_rows, int src_cols, int srs, int scs) {
  hg::griddep_begin();
  split_tf32(src, dst, src_rows, src_cols, srs, scs);
}
// two CTAs an SM: batches of short lines (64 x 256^3) are many CTAs of little work each, latency-bound
extern "C" __global__ void __launch_bounds__(kCopyThreads, 2)
    matmul_split_f16x3(const float* src, float* dst, int* shift, int src_rows, int src_cols, int srs, int scs,
                     int batch_inner, long long bss_o, long long bss_i, long long bsd_o, long long bsd_i,
                     long long bse_o, long long bse_i) {
  hg::griddep_begin();
  const hgu::GridZ z = hgu::grid_z(batch_inner);
  __half* planes = reinterpret_cast<__half*>(dst + hgu::batch_offset(z, bsd_o, bsd_i));  // (dst: the planes' fp32 units)
  split_f16x3(src + hgu::batch_offset(z, bss_o, bss_i), planes, shift + hgu::batch_offset(z, bse_o, bse_i), src_rows,
              src_cols, srs, scs);
}
#define MATMUL_COPY2D(NAME, T)                                                                             \
  extern "C" __global__ void __launch_bounds__(kCopyThreads)                                              \
      NAME(const T* src, T* dst, int M, int N, int src_rows, int src_cols, int srs, int scs, int drs,    \
           int dcs, int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi, int scale_bits, \
           int batch_inner, long long bss_o, long long bss_i, long long bsd_o, long long bsd_i) {           \
    hg::griddep_begin();                                                                                \
    copy2d<T>(src, dst, M, N, src_rows, src_cols, srs, scs, drs, dcs, alpha_bits, beta_bits, bias, bias_stride, \
              epi, scale_bits, batch_inner, bss_o, bss_i, bsd_o, bsd_i);                                    \
  }

#define MATMUL_MMA_ONE(SYM, T, BM, WMW, WNW, ST, BROW)                                                     \
  extern "C" __global__ void __launch_bounds__(WMW * WNW * 32, 1)                                        \
      SYM(const T* A, const T* B, T* C, int M, int N, int K, int lda, int ldb, int ldc_r,                \
          int ldc_c, int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,            \
          int scale_bits, int batch_inner, long long bsa_o, long long bsa_i, long long bsb_o,           \
          long long bsb_i, long long bsc_o, long long bsc_i) {                                          \
    hg::griddep_begin();                                                                                 \
    gemm_mma<MmaCfg<T, BM, WMW, WNW, ST, BROW>>(A, B, C, M, N, K, lda, ldb, ldc_r, ldc_c, alpha_bits,    \
                                                beta_bits, bias, bias_stride, epi, scale_bits,           \
                                                batch_inner, bsa_o, bsa_i, bsb_o, bsb_i, bsc_o, bsc_i);  \
  }                                                                                                      \
  HG_EXPORT_DSMEM(SYM, MmaCfg<T, BM, WMW, WNW, ST, BROW>::kSmemBytes)
// One symbol of the gemm_strided_mma ABI: BM, warps along M x N, stages (the knobs in matmul.toml) and the `b`
// variant (row: B K x N, col: B N x K).
#define HG_B_ROW_row true
#define HG_B_ROW_col false
#define MATMUL_MMA_SYM(SYM, T, BM, WMW, WNW, ST, B) MATMUL_MMA_ONE(SYM, T, BM, WMW, WNW, ST, HG_B_ROW_##B)

#define MATMUL_SIMT(NAME, T)                                                                                \
  extern "C" __global__ void __launch_bounds__(kSimtThreads)                                              \
      NAME(const T* A, const T* B, T* C, int M, int N, int K, int ars, int acs, int brs, int bcs, int crs, \
           int ccs, int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,               \
           int scale_bits, int batch_inner, long long bsa_o, long long bsa_i, long long bsb_o,             \
           long long bsb_i, long long bsc_o, long long bsc_i) {                                           \
    hg::griddep_begin();                                                                                  \
    gemm_simt<T>(A, B, C, M, N, K, ars, acs, brs, bcs, crs, ccs, alpha_bits, beta_bits, bias, bias_stride, \
                 epi, scale_bits, batch_inner, bsa_o, bsa_i, bsb_o, bsb_i, bsc_o, bsc_i);                  \
  }

#include "matmul.instances.cuh"
