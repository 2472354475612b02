// Family "matmul_decode": the decode-shape GEMM behind hgemm_rt.matmul (M <= 16: one token or a few, as
// an LLM generates). Such a GEMM reads all of B once and does almost no arithmetic per byte, so its
// speed is how fast B streams from HBM: what matters is keeping enough bytes in flight per SM without
// the CTA-wide barriers of a tiled pipeline. Here every thread runs its own cp.async ring: it copies
// the 16-byte pieces of A and B that it will itself consume, kStages chunks ahead, and reads them back
// into mma.sync fragments; nothing is shared between threads until the final reduction, so the ring
// needs no barrier at all. B as K x N (matmul_gemm_decode_nn, below) loads into registers instead.
//
// matmul_gemm_decode_tn_{f16,bf16} (variant b = col), the ABI of the gemm_strided_mma kernels:
//   C = epilogue(A.B) (+ beta * C), cu/common/epilogue.cuh (bias, activation, scale: the parameters after
//   beta_bits, as in matmul.cu; the general epilogue runs in hgu::reduce_store_general, a function of its
//   own). A: M x K row-major with leading dimension lda. B: N x K row-major with
//   ldb (b=col: the nn.Linear weight, the layout of decoding). C: any strides, any alignment.
//   A warp owns 16 rows x 32 columns of C for its share of K, in 32-wide chunks: one m16n8k16 pair per
//   8 columns, fp32 accumulation. A CTA is 8 warps along K (warp w takes chunks w, w + 8, ...), so
//   that together they read 512-byte runs of each of its 32 rows of B at a time, which DRAM streams
//   better than scattered 64-byte pieces.
//   The k order inside a chunk is permuted, the same way for A and B (a dot product does not care):
//   thread (g = lane/4, q = lane%4) loads 8 consecutive k, kb + 8q .. 8q+7, which become its fragment
//   slots, so every load is one 16-byte vector.
//   The warps' partial tiles are summed in shared memory; split-K over a cluster (grid.z = cluster.z
//   = S in {1, 2, 4, 8}, sm_90) then sums the CTAs' tiles through DSMEM (hgu::cluster_reduce_store).
//   Batched: grid.z = splits x batch, the batch index from the cluster's z (hgu::grid_z), A, B and C
//   offset by 64-bit batch strides (cu/CONTRACT.md).
//   Needs A and B 16-byte aligned and lda, ldb multiples of 8; any M, N, K >= 1 (edge chunks are
//   loaded element by element and zero-filled). Any M works; M > 16 re-reads B per 16 rows, which
//   the planner prices.
#include "common/dsmem.cuh"
#include "common/matmul_util.cuh"

namespace {

constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kBM = 16, kBN = 32, kChunk = 32;  // C tile of a CTA; K per warp step
constexpr int kTiles = kBN / 8;                  // m16n8 tiles per warp
constexpr int kSlots = 6;                        // 16-byte pieces per thread per chunk: A rows g, g+8; 4 of B
constexpr int kRedStride = kBN + 4;              // floats per row of a warp's partial tile (16-byte rows)
// The ring, [warp][stage][slot][lane] 16-byte pieces (a warp's reads of one slot are 512 contiguous
// bytes: conflict-free); declared as the kernels' dynamic shared memory in matmul_decode.toml.
template <int kStages>
__host__ __device__ constexpr int ring_bytes() { return kWarps * kStages * kSlots * 32 * 16; }
static_assert(kBM % 8 == 0, "split-K row slices: BM must divide by every cluster size up to 8");

// 8 consecutive elements p[0..valid) (zero beyond), for chunks at the matrix edges.
template <typename T>
__device__ __forceinline__ uint4 load8_edge(const T* p, int valid) {
  static_assert(sizeof(T) == 2, "16-bit elements");
  const unsigned short* e = reinterpret_cast<const unsigned short*>(p);
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = (2 * i < valid ? e[2 * i] : 0u) | ((2 * i + 1 < valid ? static_cast<uint32_t>(e[2 * i + 1]) : 0u) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ int clamp8(int x) { return x < 0 ? 0 : (x > 8 ? 8 : x); }

// The warps' partial kBM x BN tiles red[0 .. kNumWarps) (after a barrier) summed into red[0], thread t of
// nthreads taking every nthreads-th element: each element has one owner, which reads all, then overwrites.
template <int kNumWarps, int BN, int kStride>
__device__ __forceinline__ void sum_warp_tiles(float (*red)[kBM][kStride], int t, int nthreads) {
  for (int e = t; e < kBM * BN; e += nthreads) {
    const int r = e / BN, c = e % BN;
    float s = 0.f;
#pragma unroll
    for (int w = 0; w < kNumWarps; ++w) s += red[w][r][c];
    red[0][r][c] = s;
  }
}

// This CTA's K slice of a split-K cluster: chunks [c_begin, c_end), k < k_end (slices never share a chunk,
// so each k is summed once).
struct KSlice {
  int c_begin, c_end, k_end;
};
__device__ __forceinline__ KSlice k_slice(const hgu::GridZ& gz, int K) {
  const int chunks = (K + kChunk - 1) / kChunk;
  const int per = (chunks + gz.splits - 1) / gz.splits;
  KSlice ks;
  ks.c_begin = min(chunks, gz.split * per);
  ks.c_end = min(chunks, ks.c_begin + per);
  ks.k_end = min(K, ks.c_end * kChunk);
  return ks;
}

// One thread's 16-byte pieces of one K chunk: A rows g and g + 8, and one row of B per 8-column tile.
struct Chunk {
  uint4 a_lo, a_hi;
  uint4 b[kTiles];
};

// The ragged last chunk of a slice (kb + 32 > kEnd), loaded element by element straight into registers.
template <typename T>
__device__ __forceinline__ void load_ragged_chunk(Chunk& ch, const T* __restrict__ A, const T* __restrict__ B,
                                                  int M, int N, int kEnd, int lda, int ldb, int m0, int n0, int kb,
                                                  int g, int q, bool two_row_groups) {
  const int ka = kb + 8 * q, kvalid = clamp8(kEnd - ka);
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int r = m0 + g;
  ch.a_lo = r < M ? load8_edge(A + static_cast<long long>(r) * lda + ka, kvalid) : zero;
  ch.a_hi = two_row_groups && r + 8 < M ? load8_edge(A + static_cast<long long>(r + 8) * lda + ka, kvalid) : zero;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int n = n0 + 8 * j + g;
    ch.b[j] = n < N ? load8_edge(B + static_cast<long long>(n) * ldb + ka, kvalid) : zero;
  }
}

// A whole chunk (kb + 32 <= kEnd) copied into this thread's ring stage `ring` (kSlots pieces, 512
// bytes apart): pieces outside the matrix are zero-filled (a 0-byte copy from a valid address).
template <typename T>
__device__ __forceinline__ void issue_chunk(uint4* ring, const T* __restrict__ A, const T* __restrict__ B, int M,
                                            int N, int lda, int ldb, int m0, int n0, int kb, int g, int q,
                                            bool two_row_groups) {
  const int ka = kb + 8 * q;
  // Every piece is read once per CTA: evict-first lines, whole 256-byte runs fetched into L2
  // (docs/dev/code_measurements.md, "decode loads")
  const uint64_t policy = hg::l2_policy(true);
  auto copy_row = [&](uint4* dst, const T* base, int ld, int row, int rows) {
    const bool in = row < rows;
    hg::cp_async_16_zfill_stream(dst, in ? base + static_cast<long long>(row) * ld + ka : base, in ? 16 : 0, policy);
  };
  copy_row(ring, A, lda, m0 + g, M);
  if (two_row_groups) copy_row(ring + 32, A, lda, m0 + g + 8, M);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) copy_row(ring + 32 * (2 + j), B, ldb, n0 + 8 * j + g, N);
}

__device__ __forceinline__ void read_chunk(Chunk& ch, const uint4* ring, bool two_row_groups) {
  ch.a_lo = ring[0];
  ch.a_hi = two_row_groups ? ring[32] : make_uint4(0, 0, 0, 0);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) ch.b[j] = ring[32 * (2 + j)];
}

// Fragment slot pair (2q, 2q+1) of half h of k-step s is k = kb + 8q + 2(2s+h) + {0, 1}: register
// 2s+h of the thread's 16-byte pieces of A and of B.
template <typename T>
__device__ __forceinline__ void compute_chunk(const Chunk& ch, float (&acc)[kTiles][4]) {
  const uint32_t lo[4] = {ch.a_lo.x, ch.a_lo.y, ch.a_lo.z, ch.a_lo.w};
  const uint32_t hi[4] = {ch.a_hi.x, ch.a_hi.y, ch.a_hi.z, ch.a_hi.w};
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    const uint32_t a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const uint32_t w[4] = {ch.b[j].x, ch.b[j].y, ch.b[j].z, ch.b[j].w};
      const uint32_t b[2] = {w[2 * s], w[2 * s + 1]};
      hgu::mma_f32<T>(acc[j], a, b);
    }
  }
}

template <typename T, int kStages>
__device__ __forceinline__ void gemm_decode(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                            int M, int N, int K, int lda, int ldb, int ldc_r, int ldc_c,
                                            int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,
                                            int scale_bits, int batch_inner, long long bsa_o, long long bsa_i,
                                            long long bsb_o, long long bsb_i, long long bsc_o, long long bsc_i) {
  static_assert(kWarps * kBM * kRedStride * 4 <= ring_bytes<kStages>(), "the partial tiles reuse the ring");
  extern __shared__ __align__(128) unsigned char smem[];
  hg::griddep_begin();  // dependent_launch (matmul_decode.toml): nothing global is touched before this
  const hgu::GridZ gz = hgu::grid_z(batch_inner);
  A += hgu::batch_offset(gz, bsa_o, bsa_i);
  B += hgu::batch_offset(gz, bsb_o, bsb_i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const bool two_row_groups = M - m0 > 8;  // rows g + 8 exist somewhere in this tile

  const int splits = gz.splits;
  const KSlice ks = k_slice(gz, K);
  const int c_begin = ks.c_begin, c_end = ks.c_end, kEnd = ks.k_end;

  float acc[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;

  // This warp's chunks: c_begin + warp + j * kWarps for j < mine; a ragged last chunk of the slice
  // (only where kEnd == K) is loaded directly after the ring has drained.
  const int first = c_begin + warp;
  const int mine = first < c_end ? (c_end - 1 - first) / kWarps + 1 : 0;
  const bool ragged_last = mine > 0 && (first + (mine - 1) * kWarps + 1) * kChunk > kEnd;
  const int whole = mine - (ragged_last ? 1 : 0);
  uint4* ring = reinterpret_cast<uint4*>(smem) + warp * kStages * kSlots * 32 + lane;
  auto stage = [&](int j) { return ring + (j % kStages) * kSlots * 32; };
  auto issue = [&](int j) {
    issue_chunk<T>(stage(j), A, B, M, N, lda, ldb, m0, n0, (first + j * kWarps) * kChunk, g, q, two_row_groups);
  };
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < whole) issue(j);
    hg::cp_async_commit();  // an empty group keeps the wait count uniform
  }
  for (int j = 0; j < whole; ++j) {
    hg::cp_async_wait<kStages - 2>();  // chunk j has landed (this thread's own copies: no barrier)
    Chunk ch;
    read_chunk(ch, stage(j), two_row_groups);
    if (j + kStages - 1 < whole) issue(j + kStages - 1);  // the stage chunk j - 1 was read from
    hg::cp_async_commit();
    compute_chunk<T>(ch, acc);
  }
  hg::cp_async_wait<0>();
  if (ragged_last) {
    Chunk ch;
    load_ragged_chunk<T>(ch, A, B, M, N, kEnd, lda, ldb, m0, n0, (first + whole * kWarps) * kChunk, g, q,
                         two_row_groups);
    compute_chunk<T>(ch, acc);
  }
  __syncthreads();  // the ring becomes the warps' partial tiles

  // C fragment: acc[j][0..1] are row g, acc[j][2..3] row g + 8, columns 8j + 2q + {0, 1}.
  auto red = reinterpret_cast<float(*)[kBM][kRedStride]>(smem);
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int c = 8 * j + 2 * q;
    *reinterpret_cast<float2*>(&red[warp][g][c]) = make_float2(acc[j][0], acc[j][1]);
    *reinterpret_cast<float2*>(&red[warp][g + 8][c]) = make_float2(acc[j][2], acc[j][3]);
  }
  __syncthreads();
  sum_warp_tiles<kWarps, kBN>(red, threadIdx.x, kThreads);
  // C's batch offset is taken here, not with A's and B's: held across the main loop it spilled (sm_80)
  C += hgu::batch_offset(hgu::grid_z(batch_inner), bsc_o, bsc_i);
  const hge::Epilogue<T> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
  hgu::cluster_reduce_store<T, kBM, kBN, kRedStride>(reinterpret_cast<const unsigned char*>(&red[0][0][0]), splits,
                                                     threadIdx.x, kThreads, C, M, N, m0, n0, ldc_r, ldc_c, ep);
}

// ---- B as K x N (variant b = row: x @ W with W row-major, as decoding with a K x N weight has it) ----
// matmul_gemm_decode_nn_{f16,bf16}: thread (g, q) of a warp loads rows kb + 8q .. 8q + 7 of B at columns
// nw + 8g .. 8g + 7 (nw the warp's 64 columns) straight into registers, one 16-byte load each, so a warp's
// load instruction reads 128-byte runs of 4 rows. The k order is the N x K kernel's (A's 16-byte pieces
// unchanged); B's fragments come out of the 8 row pieces by byte permutes: n8 tile j takes column
// nw + 8g + j of each, so its C fragment column 2q (+1) is nw + 16q (+8) + j.
// No ring here: a CTA is small (8 warps along K, two or more an SM) and the bytes in flight come from the
// warps of all of them, each with a whole chunk's loads outstanding (faster than a per-thread cp.async ring:
// docs/dev/code_measurements.md, "decode loads"). The warps take the chunks of the CTA's
// K slice in turn; their partial tiles are summed in shared memory, then split-K over a cluster as above.
// Pieces past K or N are zero (element loads at a ragged column edge: nothing past the last element is read).
struct RowB {
  static constexpr int kWarps = 8, kThreads = kWarps * 32;
  static constexpr int kBN = 64;            // C columns of a CTA (one warp's)
  static constexpr int kRedStride = kBN + 4;
  static constexpr int kRedBytes = kWarps * kBM * kRedStride * 4;  // the warps' partial tiles
  // chunks of each warp prefetched into L2 before griddep_wait: 2 is the fastest of 0-4 on weights back to back
  // (docs/dev/code_measurements.md, "decode prefetch")
  static constexpr int kPrefetchChunks = 2;
};

__device__ __forceinline__ uint4 ldg_stream16(const void* p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}
// The 8 elements at p, `valid` of them inside the matrix (zero past them).
template <typename T>
__device__ __forceinline__ uint4 load_piece(const T* p, int valid, uint64_t policy) {
  if (valid >= 8) return ldg_stream16(p, policy);
  return valid > 0 ? load8_edge(p, valid) : make_uint4(0, 0, 0, 0);
}

// One thread's chunk: A rows g and g + 8 at k = kb + 8q .. 8q + 7, and B rows kb + 8q .. 8q + 7 at its columns.
struct RowChunk {
  uint4 a_lo, a_hi;
  uint4 b[8];
};
template <typename T>
__device__ __forceinline__ void load_chunk_rowb(RowChunk& ch, const T* __restrict__ A, const T* __restrict__ B,
                                                int M, int N, int kEnd, int lda, int ldb, int m0, int nc, int kb,
                                                int g, int q, bool two_row_groups, uint64_t policy) {
  const int ka = kb + 8 * q, a_valid = clamp8(kEnd - ka), r = m0 + g;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  ch.a_lo = r < M ? load_piece(A + static_cast<long long>(r) * lda + ka, a_valid, policy) : zero;
  ch.a_hi = two_row_groups && r + 8 < M ? load_piece(A + static_cast<long long>(r + 8) * lda + ka, a_valid, policy)
                                        : zero;
  const int b_valid = clamp8(N - nc);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    ch.b[i] = ka + i < kEnd ? load_piece(B + static_cast<long long>(ka + i) * ldb + nc, b_valid, policy) : zero;
}

// Fragment slots (2q, 2q+1) and (2q+8, 2q+9) of k-step s are k = kb + 8q + 4s + {0, 1} and + {2, 3}:
// rows 4s .. 4s + 3 of the thread's B pieces, column j of each (a half of word j / 2) paired by prmt.
template <typename T>
__device__ __forceinline__ void compute_chunk_rowb(const RowChunk& ch, float (&acc)[8][4]) {
  const uint32_t lo[4] = {ch.a_lo.x, ch.a_lo.y, ch.a_lo.z, ch.a_lo.w};
  const uint32_t hi[4] = {ch.a_hi.x, ch.a_hi.y, ch.a_hi.z, ch.a_hi.w};
#pragma unroll
  for (int s = 0; s < 2; ++s) {
    uint32_t w[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const uint4 v = ch.b[4 * s + r];
      w[r][0] = v.x, w[r][1] = v.y, w[r][2] = v.z, w[r][3] = v.w;
    }
    const uint32_t a[4] = {lo[2 * s], hi[2 * s], lo[2 * s + 1], hi[2 * s + 1]};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t sel = (j & 1) ? 0x7632u : 0x5410u;
      const uint32_t b[2] = {__byte_perm(w[0][j / 2], w[1][j / 2], sel), __byte_perm(w[2][j / 2], w[3][j / 2], sel)};
      hgu::mma_f32<T>(acc[j], a, b);
    }
  }
}

template <typename T>
__device__ __forceinline__ void gemm_decode_rowb(const T* __restrict__ A, const T* __restrict__ B, T* __restrict__ C,
                                                 int M, int N, int K, int lda, int ldb, int ldc_r, int ldc_c,
                                                 int alpha_bits, int beta_bits, const T* bias, int bias_stride,
                                                 int epi, int scale_bits, int batch_inner, long long bsa_o,
                                                 long long bsa_i, long long bsb_o, long long bsb_i, long long bsc_o,
                                                 long long bsc_i) {
  extern __shared__ __align__(128) unsigned char smem[];
  const hgu::GridZ gz = hgu::grid_z(batch_inner);
  A += hgu::batch_offset(gz, bsa_o, bsa_i);
  B += hgu::batch_offset(gz, bsb_o, bsb_i);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * RowB::kBN;
  const int nc = n0 + 8 * g;  // this thread's 8 columns of B
  const bool two_row_groups = M - m0 > 8;

  const int splits = gz.splits;
  const KSlice ks = k_slice(gz, K);
  const int c_begin = ks.c_begin, c_end = ks.c_end, kEnd = ks.k_end;
  // Launched as a dependent, the CTA may start while the kernel before still runs: the first chunks of its B slice
  // head for L2 meanwhile (a prefetch cannot return stale data: L2 is where that kernel's writes land).
  if (N - n0 >= RowB::kBN) {
#pragma unroll
    for (int j = 0; j < RowB::kPrefetchChunks; ++j) {
      const int c = c_begin + warp + j * RowB::kWarps, row = c * kChunk + lane;
      if (c < c_end && row < kEnd) hg::prefetch_l2(B + static_cast<long long>(row) * ldb + n0);
    }
  }
  hg::griddep_begin();  // dependent_launch (matmul_decode.toml): nothing global is touched before this

  float acc[8][4];
#pragma unroll
  for (int j = 0; j < 8; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.f;
  const uint64_t policy = hg::l2_policy(true);
  for (int c = c_begin + warp; c < c_end; c += RowB::kWarps) {
    RowChunk ch;
    load_chunk_rowb<T>(ch, A, B, M, N, kEnd, lda, ldb, m0, nc, c * kChunk, g, q, two_row_groups, policy);
    compute_chunk_rowb<T>(ch, acc);
  }

  constexpr int kRed = RowB::kRedStride;
  auto red = reinterpret_cast<float(*)[kBM][kRed]>(smem);
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int c = 16 * q + j;
    red[warp][g][c] = acc[j][0];
    red[warp][g][c + 8] = acc[j][1];
    red[warp][g + 8][c] = acc[j][2];
    red[warp][g + 8][c + 8] = acc[j][3];
  }
  __syncthreads();
  sum_warp_tiles<RowB::kWarps, RowB::kBN>(red, threadIdx.x, RowB::kThreads);
  C += hgu::batch_offset(hgu::grid_z(batch_inner), bsc_o, bsc_i);
  const hge::Epilogue<T> ep(alpha_bits, beta_bits, bias, bias_stride, epi, scale_bits);
  hgu::cluster_reduce_store<T, kBM, RowB::kBN, kRed>(reinterpret_cast<const unsigned char*>(&red[0][0][0]), splits,
                                                     threadIdx.x, RowB::kThreads, C, M, N, m0, n0, ldc_r, ldc_c, ep);
}

}  // namespace

// ---- extern "C" entry points: instantiated from matmul_decode.toml (matmul_decode.instances.cuh) ----
// Before sm_90 one CTA's ring fills most of an SM's shared memory anyway; ptxas's own register target
// there (80) made the batched kernels spill, so it is told the real occupancy. sm_90 keeps its choice.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define HG_DECODE_BOUNDS __launch_bounds__(kThreads, 2)
#else
#define HG_DECODE_BOUNDS __launch_bounds__(kThreads)
#endif
// STAGES ring stages (matmul_decode.toml's knob: 4; 2 to 8 stream alike once two CTAs (16 warps) share an SM,
// docs/dev/tuning_log.md, matmul_decode)
#define MATMUL_DECODE(SYM, T, STAGES)                                                                     \
  extern "C" __global__ void HG_DECODE_BOUNDS                                                          \
      SYM(const T* A, const T* B, T* C, int M, int N, int K, int lda, int ldb, int ldc_r,       \
                   int ldc_c, int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,  \
                   int scale_bits, int batch_inner, long long bsa_o, long long bsa_i, long long bsb_o,  \
                   long long bsb_i, long long bsc_o, long long bsc_i) {                                 \
    gemm_decode<T, STAGES>(A, B, C, M, N, K, lda, ldb, ldc_r, ldc_c, alpha_bits, beta_bits, bias, bias_stride, epi, \
                      scale_bits, batch_inner, bsa_o, bsa_i, bsb_o, bsb_i, bsc_o, bsc_i);                 \
  }                                                                                                     \
  HG_EXPORT_DSMEM(SYM, ring_bytes<STAGES>())
// B as K x N (b = row): two CTAs or more an SM (RowB: 8 warps, no ring).
#define MATMUL_DECODE_ROWB(SYM, T)                                                                        \
  extern "C" __global__ void __launch_bounds__(RowB::kThreads)                                         \
      SYM(const T* A, const T* B, T* C, int M, int N, int K, int lda, int ldb, int ldc_r,       \
                   int ldc_c, int alpha_bits, int beta_bits, const T* bias, int bias_stride, int epi,  \
                   int scale_bits, int batch_inner, long long bsa_o, long long bsa_i, long long bsb_o,  \
                   long long bsb_i, long long bsc_o, long long bsc_i) {                                 \
    gemm_decode_rowb<T>(A, B, C, M, N, K, lda, ldb, ldc_r, ldc_c, alpha_bits, beta_bits, bias, bias_stride, \
                        epi, scale_bits, batch_inner, bsa_o, bsa_i, bsb_o, bsb_i, bsc_o, bsc_i);           \
  }                                                                                                     \
  HG_EXPORT_DSMEM(SYM, RowB::kRedBytes)

#include "matmul_decode.instances.cuh"
