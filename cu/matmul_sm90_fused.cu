// Family "matmul_sm90_fused": the persistent Hopper GEMM with the fused epilogue behind hgemm_rt.matmul
// (ladder "matmul", role "gemm_fused_wgmma", sm_90a).
//
// matmul_gemm_wgmma_fused_{f16,bf16}_{tn,nn}:
//   C = scale * act(alpha * A.B + bias) + beta * C_old (cu/common/epilogue.cuh; SwiGLU pairs gate/up
//   columns) over batch_count matrices, fp32 accumulation, fp16 (bf16) in and out.
//   The kernel is the catalogue's hgemm_sm90_wgmma_tma_ws_persistent_{tn,nn} with 4 stages (the code is
//   cu/common/sm90_gemm.cuh, rung Fused = Stages<Persistent, 4> + kFused): 384 threads, a producer
//   warpgroup issuing TMA into a 4-stage ring of 128 x 64 A + 256 x 64 B tiles, two consumer warpgroups
//   owning 64 x 256 each (wgmma.m64n256k16, 128 fp32 accumulators under setmaxnreg 232), grouped tile
//   order, stmatrix + TMA-store epilogue with half-tile staging (two passes of 128 columns) that overlaps
//   the next tile's main loop. What kFused adds, all in the epilogue or once per tile:
//   - the epilogue math on the accumulators before they are packed (no extra work when linear() and
//     beta == 0 but the alpha multiply), in a pass loop that is not unrolled (one copy of each
//     activation), the column bias read once per pass;
//   - beta != 0: C_old by TMA through tmC into the staging buffer, then ldmatrix in the accumulator
//     layout: the tile's C_old prefetched into L2 at the start of its main loop, pass 0's boxes loaded
//     while the last k-block's wgmma run, pass 1's once pass 0's store has read the buffer (one mbarrier
//     per consumer); the grouped GEMM's partial tiles read it through `C`;
//   - batch: tile t of batch_count * tiles-per-matrix, matrix b = t / tiles-per-matrix, (outer, inner) =
//     (b / batch_inner, b % batch_inner); batched launches (tma_levels & 16) read A and B and store C
//     through rank-4 maps (cols, rows, inner, outer), tma_levels bits 1/2, 4/8, 32/64 saying which
//     levels the A, B, C maps have; C_old moves by outer * bsc_o + inner * bsc_i elements;
//   - half tiles (toml half_tiles): a tile whose columns before N all lie in its first 128 (N - n0 <= 128, not
//     SwiGLU) loads B's first half only, runs m64n128k16 on d[0..63] and stores one staging pass (faster on
//     short batched tiles: docs/dev/code_measurements.md, "half tiles");
//   - SwiGLU (epi & kSwiGLU): N is the output width F, B has 2F rows (tn) or columns (nn); a tile covers
//     128 output columns at n0, its B stage holding gate [n0, n0 + 128) then up [F + n0, F + n0 + 128),
//     so each thread holds the gate and the up value of an output element in d[4j + i] and
//     d[4(j + 16) + i]; the 128 x 128 output tile is stored in one staging pass.
//   - grouped GEMM (mixture of experts; group_mode != 0, `groups` = E <= 496 = kMaxGroups experts, the
//     batch being the experts): matrix e has only the rows of its group, read on the GPU from the int32
//     vector `group`: group_mode 1 (contiguous) ends[E], expert e owning rows [ends[e-1], ends[e]) of A
//     and C (rank-4 maps with size-1 batch levels; B's inner level is the expert), M their total;
//     group_mode 2 (masked) counts[E], rows [0, counts[e]) of matrix e of the batched A, B and C. Both
//     clamped to [0, M) on the GPU. At kernel start all 384 threads scan the groups' m-tile counts
//     (ceil(rows / 128)) into a shared table of inclusive prefix sums; the tiles (sum of m-tiles x
//     tiles_n) are the groups' m-tiles laid end to end in the grouped order, each tile's group found by a
//     binary search of the table (producer and consumers alike, so they agree). TMA loads rows past a
//     group's end (the next expert's rows or zero fill, never stored); a warpgroup's 64 rows that cross
//     the end are stored straight from the registers, guarded (the rest keep the TMA store), and beta *
//     C_old reads stop there too. More groups than the table holds: the kernel traps (the runtime refuses
//     them). group_mode 0: none of this runs (the k-loops' SASS is the ungrouped one).
//   Grid: min(tiles over the batch, SMs) x 1 x 1 (tiles = ceil(M/128) * ceil(N/256), SwiGLU
//   ceil(M/128) * ceil(F/128), times batch_count; grouped: CTAs beyond the groups' tiles exit at once).
//   Smem: 4 * (128 + 256) * 64 * 2 ring + 128 * 128 * 2 staging + 10 barriers + 496 * 4 group table +
//   1008 bytes of alignment slack (the dynamic shared memory is 16-byte aligned) = 232448, the 227 KB per
//   block.
//   Shapes: any M, N, K >= 1 (TMA zero-fills loads and clips stores); the runtime passes 16-byte aligned
//   operands with 16-byte-multiple row strides (TMA's rule; partial tiles read C_old's pairs as 4-byte
//   words).
#include "common/dsmem.cuh"
#include "common/declared_rung.cuh"
#include "common/sm90_gemm.cuh"

using namespace hg90g;  // the knobs, rungs and sm90_gemm (cu/common/sm90_gemm.cuh)

// Parameters in the toml's order: the three maps, then C's pointer (C_old, and the grouped GEMM's partial
// tiles), the shape, C's row stride, the epilogue (cu/common/epilogue.cuh), the batch, then TAIL: the grouped
// GEMM's (group, group_mode, groups) and the dynamic tile order's counter (work: TileQueue in
// cu/common/sm90_gemm.cuh; null for the static order), or stream-K's (work, sk_tiles), each kernel passing the
// other's unused.
// RUNG is a knobs type without commas; TAIL_PARAMS and TAIL_ARGS are parenthesised lists.
#define HG_UNPAREN(...) __VA_ARGS__
#define MATMUL_FUSED_KERNEL(NAME, RUNG, TAIL_PARAMS, TAIL_ARGS)                                                    \
  extern "C" __global__ void __launch_bounds__(kThreads, 1)                                                      \
      NAME(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,                     \
           const __grid_constant__ CUtensorMap tmC, RUNG::T* C, int M, int N, int K, int ldc_r, int alpha_bits,  \
           int beta_bits, const RUNG::T* bias, int bias_stride, int epi, int scale_bits, int batch_count,        \
           int batch_inner, int tma_levels, long long bsc_o, long long bsc_i, HG_UNPAREN TAIL_PARAMS) {          \
    sm90_gemm<Config<RUNG>>(tmA, tmB, tmC, M, N, K,                                                              \
                            FusedArgs<RUNG::T>{C, ldc_r, alpha_bits, beta_bits, bias, bias_stride, epi,          \
                                               scale_bits, batch_count, batch_inner, tma_levels, bsc_o, bsc_i,   \
                                               HG_UNPAREN TAIL_ARGS});                                           \
  }                                                                                                              \
  HG_EXPORT_DSMEM(NAME, Config<RUNG>::kSmemBytes)
// One declared symbol (matmul_sm90_fused.toml's instance lines): BASE the rung before the toml's dtype and layout, the
// `queue` variant 1 taking its tiles from the producer's TileQueue (the dynamic order where `work` is a counter).
#define MATMUL_FUSED_VARIANT(NAME, RUNG)                                                          \
  MATMUL_FUSED_KERNEL(NAME, RUNG, (const int* group, int group_mode, int groups, float* work), \
                    (group, group_mode, groups, work))
#define MATMUL_FUSED_SYM(SYM, BASE, T, NN, QUEUE)                                                                   \
  using SYM##_rung = std::conditional_t<QUEUE != 0, Queue<DeclaredRung<BASE, T, NN>::type>,                      \
                                        DeclaredRung<BASE, T, NN>::type>;                                         \
  MATMUL_FUSED_VARIANT(SYM, SYM##_rung)

// Stream-K (cu/common/sm90_gemm.cuh, StreamK): the same GEMM and epilogue; the last sk_tiles tiles (the last
// partial wave) cut along K into one piece per CTA, partial tiles summed through the workspace `work` (fp32;
// its flags zero between launches). For the shapes whose last wave of tiles leaves SMs idle or that have fewer
// tiles than SMs. No grouped GEMM.
#define MATMUL_STREAMK_SYM(SYM, BASE, T, NN)                  \
  using SYM##_rung = DeclaredRung<BASE, T, NN>::type;       \
  MATMUL_FUSED_KERNEL(SYM, SYM##_rung, (float* work, int sk_tiles), (nullptr, 0, 0, work, sk_tiles))

#include "matmul_sm90_fused.instances.cuh"
