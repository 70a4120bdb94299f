/* knn_lean.cuh — the lean selection and finish, shared by the tiled path's one-tile kernel (k_select_finish), the
 * fused path's one-kernel form (k_fused_small) and the filter path's list finish (k_list_finish): a seed per query,
 * every value within the band of the seed a candidate, their exact distances, sorted and cut to k. */
#ifndef SS_KNN_LEAN_CUH
#define SS_KNN_LEAN_CUH

#include "stages/knn/knn_common.cuh"

namespace knn_cuda {

/* ---- selection and finish in one kernel (K' <= kRegList) --------------------------------------------------
 * The tiled path's one-reference-tile search with K' <= 64 and n <= kSfMaxRefs selects AND finishes in one kernel
 * (k_select_finish), and so do the fused path (k_fused_small, which computes the rows itself) and the filter path's
 * list finish (k_list_finish): no list leaves the SM, no finish launch. A query gets W warps (W a power of two
 * <= kSfWarps, about `chunk` references each; W = 1 with the default chunk), a block of kSfThreads threads
 * kSfWarps / W queries. Lean candidates (lean_select_finish), two passes over each warp's part, PL values per lane
 * at a time:
 *  1. every lane keeps its S smallest values and the next one (kSeedChains independent insertion chains, merged);
 *     W = 1: the seed x = the k-th smallest of the warp's (S + 1) × 32 of them (warp_kth_select: >= k values of
 *     the part are <= x); W > 1: x_w from the S × 32 smallest alone (seed_kth_union), after one barrier every warp
 *     of the query takes x = min_w x_w;
 *  2. every value within the band y = x + 2E (E: the values' error bound) and its index is appended to the query's
 *     candidate slots in shared memory, placed by ballots (lean_filter; W = 1: no block barrier at all, so that a
 *     block's queries run on independently; W > 1: one atomicAdd per warp and pass reserves its slots). A part of
 *     at most PL kWarp references keeps its values in registers between the passes.
 * What depends on the query alone (its norm and band bound E, its coordinates as doubles) is loaded before the
 * values exist (lean_prepare), off the selection's chain.
 * There is no approximate sort, no queue and no certificate test: at least k references have values <= x, so exact
 * distances <= x + E, and a reference whose value exceeds y has an exact distance > x + E, beaten by those k; so the
 * first k of the P candidates by (exact, index) are the answer. On random rows (k 25, the bench's rows, 2,000
 * simulated queries each at 2^10 d 32 / 64, 2^11 and 2^12 d 32) the band holds P = 26.1-26.4 candidates on average,
 * 99th percentile 29-30, more than 32 in at most 0.05 % of the queries (x from the S × 32 smallest alone: 27.7-28.2,
 * 33-34 and 2-2.9 %); more than kRegList (ties at x) sends the query to the block's exact scan (finish_block_scans),
 * as a failed certificate does. With W = 1 and d <= kLaneMaxDim a lane computes the exact distances of its
 * candidates (two at most) alone; otherwise the query's W warps compute those of its candidate groups in turn
 * (finish_exact_groups, through shared memory); its first warp sorts them and writes the answer (finish_warp_write).
 * A seeded warp queue in this kernel (sorted list + pending buffer merges, K' cut by an approximate sort) was slower
 * on every grid case. */
constexpr int kSfThreads = kThreads; /* finish_block_scans' scan buffer assumes kThreads at most */
constexpr int kSfWarps = kSfThreads / kWarp;
constexpr int kSfMinPerLane = 8, kSfMaxPerLane = 32; /* values per lane per pass (registers): PL */
/* references per warp (ss_knn_opts.warp_chunk overrides; W = next_pow2(n / chunk) <= kSfWarps): each warp
 * pays a seed, so fewer, longer parts win while there are enough warps (chunks of 256 or 512 were slower than 1024
 * everywhere) */
constexpr int64_t kSfChunk = 4096;
constexpr int64_t kSfMinChunk = 2 * kRegList; /* a part then has more than K' references */
/* The size rule: one-kernel selection and finish for n <= kSfMaxRefs, beyond it k_select_warp + k_finish_warp
 * (from 2^13 references one block holding a query's warps through its barriers and finish streams the rows slower
 * than the independent warps of k_select_warp: 109 vs 93 us at 2^13, d 32) */
constexpr int64_t kSfMaxRefs = 4096;
/* blocks per SM the registers must allow: 3 capped them at 80 and spilled (no faster than 2) */
constexpr int kSfMinBlocks = 2;
constexpr int kLeanCap = kRegList; /* candidate slots per query: the register lists of the finish */
/* Balanced launches of the one-warp-per-query kernels (k_fused_small, k_filter_seed_fused, k_list_finish): with
 * blocks of kSfWarps queries, a query count just above kSfWarps × SMs puts a second block on some SMs, and those
 * finish last (H100, 1,200 queries = 150 blocks on 132 SMs, clock64 / globaltimer phases: blocks sharing an SM
 * took 13.8 us against 10.9 us alone at 2^10, d 32, 32.9 against 22.8 at d 128). Up to kQbMax × SMs queries the
 * blocks take ceil(m / SMs) queries instead (at most kQbMax warps, one block per SM). */
constexpr int kQbMax = 12;
inline int balanced_queries(int64_t m, int sm_count) {
  int64_t sms = sm_count > 0 ? sm_count : 1;
  if ((m + kSfWarps - 1) / kSfWarps <= sms || m > kQbMax * sms) return kSfWarps;
  return (int)((m + sms - 1) / sms);
}
static_assert(kSfMinPerLane * kWarp >= kRegList, "a first pass can seed K'");
static_assert(kSfMaxPerLane == 4 * kSfMinPerLane, "the three pass widths of launch_select_finish");

constexpr int kLeanMaxS = 4; /* seed values per lane: 2 or 4 (lean_s_class) */
/* independent insertion chains of a lane's seed values (merged at the end): a pass's values are inserted four
 * at a time instead of one after another */
constexpr int kSeedChains = 4;

/* The lean kernels' template arguments: PL from the longest part (kSfMinPerLane, twice that or kSfMaxPerLane
 * values per lane per pass), S from k (2 seed values per lane up to kLeanSeed2MaxK, else 4: the K-th of 64
 * values passes ~K + 2 on random rows for K <= 32, but ~K + 20 for K = 50, over the kLeanCap slots). */
constexpr int kLeanSeed2MaxK = 32;
inline int lean_pl_class(int64_t len) {
  return len <= kSfMinPerLane * kWarp ? 0 : len <= 2 * kSfMinPerLane * kWarp ? 1 : 2;
}
inline int lean_s_class(int64_t k) { return k <= kLeanSeed2MaxK ? 0 : 1; }

/* A lean kernel's block shape: NQ query slots (warps) at most, kMinBlocks blocks per SM for the registers: the classic
 * launch (kSfWarps queries a block, two blocks per SM) or the balanced one (balanced_queries: up to kQbMax queries
 * a block, one block per SM). */
template <int NQ, int NW = NQ>
struct lean_shape {
  static constexpr int kMinBlocks = NW == kSfWarps ? kSfMinBlocks : 1;
};

namespace {

/* One element of a warp's chunk (k_select_warp, k_select_finish): the tiled path's value. */
__device__ __forceinline__ float warp_value(const float *row, const float *rn, float qn, int t, int len) {
  return t < len ? fmaxf(qn + rn[t] + row[t], 0.0f) : INFINITY;
}

/* x from the S smallest values of every lane of a query's W warps (nw = W rows of `mins`, S kWarp values used
 * in each): the smallest of this warp's m[t] with >= K of the union <= it, +inf if none — so that the minimum
 * over the W warps is the K-th smallest of the union (each warp's own K-th would admit ~W K candidates). */
template <int S, int N>
__device__ float seed_kth_union(const float (&m)[N], int K, const float (*mins)[kLeanMaxS * kWarp], int nw) {
  int c[S] = {};
  for (int p = 0; p < nw; p++)
    for (int i = 0; i < S * kWarp; i++) { /* the same address across the warp: a broadcast */
      float b = mins[p][i];
#pragma unroll
      for (int t = 0; t < S; t++) c[t] += b <= m[t];
    }
  float x = INFINITY;
#pragma unroll
  for (int t = 0; t < S; t++) x = fminf(x, c[t] >= K ? m[t] : INFINITY);
  for (int o = kWarp / 2; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(kFull, x, o));
  return x;
}

/* x: the K-th smallest of the warp's N × 32 values m (each lane's ascending; non-negative, +inf for none), +inf when
 * fewer than K are finite. Bisection on pivots drawn from the values: the answer stays in (lo, hi], with
 * count(<= hi) >= K unless hi = +inf; a round takes the first lane's smallest value inside as the pivot and counts
 * the values <= it by N ballots. The lean seed (W = 1) takes N = S + 1: each lane's S smallest and its next one,
 * because the K-th of the S × 32 smallest alone (seed_kth) overshoots the part's K-th value by one rank for every
 * lane holding more than S of the part's K smallest (25 of 1,024 values in 32 lanes: ~2.3 lanes hold three); that
 * widened the band to P > 32 candidates in ~2 % of the queries (k 25, simulated on the bench's rows) — about one
 * balanced block in five, and the slowest block sets the kernel's time. Rounds: ~8 on average for N = 3 (at most
 * 17 in 3,000 simulated rows), each a chain of ~15 instructions, where seed_kth's rank count over 96 values would
 * issue ~700 a warp — all the block's warps rank at once, so the counts were issue-bound (ncu, 2^10 d 32). H100,
 * 1,200 queries, k 25, against seed_kth over 64 values plus a correction for the next values below its x (the same
 * x; medians of two runs): 2^10 d 32 13.10 -> 12.74 / 13.06 -> 12.83 us, d 64 15.92 -> 15.57 / 15.71 ->
 * 15.71, 2^11 d 32 17.28 -> 17.55 / 17.34 -> 17.18, 2^12 d 32 28.99 -> 29.31 / 29.28 -> 28.61. */
template <int N>
__device__ float warp_kth_select(const float (&m)[N], int K) {
  float lo = -1.0f, hi = INFINITY;
  for (;;) {
    float cand = INFINITY;
#pragma unroll
    for (int t = N - 1; t >= 0; t--)
      if (m[t] > lo && m[t] < hi) cand = m[t];
    unsigned bal = __ballot_sync(kFull, cand < INFINITY);
    if (!bal) return hi; /* uniform */
    float p = __shfl_sync(kFull, cand, __ffs(bal) - 1);
    int c = 0;
#pragma unroll
    for (int t = 0; t < N; t++) c += __popc(__ballot_sync(kFull, m[t] <= p));
    if (c >= K) hi = p;
    else lo = p;
  }
}

/* the lean finish computes a candidate's exact distance in one lane (exact_dist_short, exact_dist_lane) up to this
 * d, by warp-cooperative groups beyond (H100, 1,200 queries, k 25: at d 32 and 64 the lane was faster, 2^10 d 32:
 * 21 -> 19 us, 2^11 d 64: 37 -> 35; at d 128 slower, 2^10: 39 -> 41 us) */
constexpr int kLaneMaxDim = 2 * kWarp;

/* A block's lean selection state: per query of the block (at most NQ: kSfWarps, or kQbMax in a balanced launch). */
template <int NQ>
struct lean_shared_t {
  int ci[NQ][kLeanCap];       /* candidate indices (the finish needs no approximate value) */
  int cnt[NQ];                /* candidates found (may exceed kLeanCap: the exact scan) */
  float seed[NQ];             /* per warp: x_w */
  double qd[NQ][kLaneMaxDim]; /* d <= kLaneMaxDim: the query as doubles, zeros to a multiple of 32 */
  double ex[NQ][kRegList];    /* W > 1: the candidates' exact distances, gathered for the first warp */
  int need_scan[NQ];
  float mins[NQ][kLeanMaxS * kWarp]; /* W > 1: every lane's S smallest values, for the query's seed */
  double E[NQ]; /* k_fused_small: the bound E, kept here across the distance phase (in registers it spilled) */
};
using lean_shared = lean_shared_t<kSfWarps>;

/* Row sources of the lean selection: element t of a warp's part (+inf beyond len) and its reference index —
 * computed from t (operator(), id), or loaded together (kPaired: pair, so that no index load waits in the
 * filter). */
struct gemm_row { /* the tiled path: the SGEMM's −2 q'·r' plus the norms */
  static constexpr bool kPaired = false;
  const float *row, *rn;
  float qn;
  int i0; /* the part's first reference */
  __device__ float operator()(int t, int len) const { return warp_value(row, rn, qn, t, len); }
  __device__ int id(int t) const { return i0 + t; }
};
struct value_row { /* k_fused_small: the values themselves */
  static constexpr bool kPaired = false;
  const float *row;
  __device__ float operator()(int t, int len) const { return t < len ? row[t] : INFINITY; }
  __device__ int id(int t) const { return t; }
};
struct list_row { /* the filter path: a query's candidate list, (value bits, reference index) pairs */
  static constexpr bool kPaired = true;
  const int2 *p;
  __device__ int2 pair(int t, int len) const { return t < len ? p[t] : make_int2(__float_as_int(INFINITY), kNoIndex); }
};

template <int PL, typename Src>
__device__ __forceinline__ void lean_load(const Src &src, int base, int len, int lane, float (&v)[PL], int (&ids)[PL]) {
#pragma unroll
  for (int c = 0; c < PL; c++) {
    int t = base + c * kWarp + lane;
    if constexpr (Src::kPaired) {
      int2 e = src.pair(t, len);
      v[c] = __int_as_float(e.x), ids[c] = e.y;
    } else {
      v[c] = src(t, len);
    }
  }
}

/* Pass 2 of one warp: the indices of its part's values <= y into the query's slots ci, placed by ballots in the
 * warp's order; v holds pass 1's values when the part is a single pass. cnt: the query's shared counter when its W > 1
 * warps append together (one atomicAdd reserves a pass's slots), nullptr for a query's only warp (no shared state).
 * Returns the warp's count (all lanes). */
template <int PL, typename Src>
__device__ int lean_filter(const Src &src, int len, float y, float (&v)[PL], int (&ids)[PL], int *cnt, int *ci,
                           int lane) {
  const unsigned below = (1u << lane) - 1u;
  int total = 0;
  for (int base = 0; base < len; base += PL * kWarp) {
    if (len > PL * kWarp) lean_load<PL>(src, base, len, lane, v, ids); /* uniform */
    int pos0 = total;
    if (cnt) { /* uniform */
      int pass = 0;
#pragma unroll
      for (int c = 0; c < PL; c++) pass += __popc(__ballot_sync(kFull, v[c] <= y));
      int start = lane == 0 && pass ? atomicAdd(cnt, pass) : 0;
      pos0 = __shfl_sync(kFull, start, 0);
    }
    int off = 0;
#pragma unroll
    for (int c = 0; c < PL; c++) {
      bool hit = v[c] <= y;
      unsigned mk = __ballot_sync(kFull, hit);
      int pos = pos0 + off + __popc(mk & below);
      if (hit && pos < kLeanCap) {
        if constexpr (Src::kPaired) ci[pos] = ids[c];
        else ci[pos] = src.id(base + c * kWarp + lane);
      }
      off += __popc(mk);
    }
    total += off;
  }
  return total;
}

constexpr int bitrev5(int i) { return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4); }
constexpr int popc5(int i) { return (i & 1) + ((i >> 1) & 1) + ((i >> 2) & 1) + ((i >> 3) & 1) + ((i >> 4) & 1); }

/* ss_knn_exact_dist of one reference row with d <= kWarp by one thread (the lean finish: a lane per candidate,
 * no shuffles): the row in registers (float4 loads when rows are 16-byte aligned), the 32 partials — one
 * coordinate each, exact zeros beyond d — folded in bit-reversed order like the one-thread definition, fully
 * unrolled so that the stack stays in registers. qd: the query as doubles, zeros beyond d. */
__device__ double exact_dist_short(const double *qd, const float *row, int d) {
  float x[kWarp];
  if (d % 4 == 0) {
#pragma unroll
    for (int j = 0; j < kWarp; j += 4) {
      float4 t = j < d ? __ldg((const float4 *)(row + j)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      x[j] = t.x, x[j + 1] = t.y, x[j + 2] = t.z, x[j + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kWarp; j++) x[j] = j < d ? __ldg(row + j) : 0.0f;
  }
  double st[SS_KNN_EXACT_LEVELS + 1];
#pragma unroll
  for (int i = 0; i < kWarp; i++) {
    const int l = bitrev5(i);
    double t = __dsub_rn(qd[l], (double)x[l]);
    double p = __dmul_rn(t, t);
    int top = popc5(i);
#pragma unroll
    for (int c = i; c & 1; c >>= 1) p = __dadd_rn(st[--top], p);
    st[top] = p;
  }
  return st[0];
}

/* ss_knn_exact_dist of one reference row with d <= kLaneMaxDim (ls.qd's length) by one thread: the 32 partials in
 * registers, the row read kLaneSlice coordinates at a time (float4 loads when rows are 16-byte aligned) from global
 * memory or, kShared, from the warp's staged copy (stage_rows), then the definition's pairwise combination. qd: the
 * query as doubles, zeros beyond d up to a multiple of 32. */
constexpr int kLaneSlice = 16; /* no spills at the lean kernels' register limits; 32 spilled */
template <bool kShared>
__device__ __forceinline__ float4 row_ld4(const float *p) {
  return kShared ? *(const float4 *)p : __ldg((const float4 *)p);
}
template <bool kShared>
__device__ __forceinline__ float row_ld1(const float *p) {
  return kShared ? *p : __ldg(p);
}
template <bool kShared = false>
__device__ __forceinline__ double exact_dist_lane(const double *qd, const float *row, int d) {
  double p[kWarp];
#pragma unroll
  for (int l = 0; l < kWarp; l++) p[l] = 0.0;
  for (int j0 = 0; j0 < d; j0 += kWarp) {
#pragma unroll
    for (int h = 0; h < kWarp; h += kLaneSlice) {
      float x[kLaneSlice];
      if (d % 4 == 0) {
#pragma unroll
        for (int j = 0; j < kLaneSlice; j += 4) {
          float4 t = j0 + h + j < d ? row_ld4<kShared>(row + j0 + h + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          x[j] = t.x, x[j + 1] = t.y, x[j + 2] = t.z, x[j + 3] = t.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < kLaneSlice; j++) x[j] = j0 + h + j < d ? row_ld1<kShared>(row + j0 + h + j) : 0.0f;
      }
#pragma unroll
      for (int l = 0; l < kLaneSlice; l++) {
        double t = __dsub_rn(qd[j0 + h + l], (double)x[l]);
        p[h + l] = __dadd_rn(p[h + l], __dmul_rn(t, t));
      }
    }
  }
  /* the levels written out: a loop over them was rolled into local memory */
#pragma unroll
  for (int l = 0; l < 16; l++) p[l] = __dadd_rn(p[l], p[l + 16]);
#pragma unroll
  for (int l = 0; l < 8; l++) p[l] = __dadd_rn(p[l], p[l + 8]);
#pragma unroll
  for (int l = 0; l < 4; l++) p[l] = __dadd_rn(p[l], p[l + 4]);
  p[0] = __dadd_rn(p[0], p[2]), p[1] = __dadd_rn(p[1], p[3]);
  return __dadd_rn(p[0], p[1]);
}

/* The lean finish's staged candidate rows (k_fused_small's balanced blocks, kWarp < d <= kLaneMaxDim, d % 4 == 0):
 * a warp's kWarp rows at a stride of a multiple of 32 floats plus 4, so that the lanes' 16-byte reads of eight rows
 * at a time fall in distinct banks. A row per lane read from global memory touched 32 lines with every 16-byte load
 * and requested each sector twice (ncu, 2^10 d 64: the lean finish waited on those loads for ~14 % of the block's
 * time); copied by the warp, each load is a contiguous 256 bytes. H100, 1,200 queries, k 25, medians of three or four
 * rounds against the unstaged rows in seven runs: 2^10 d 64 -0.9 to +0.05 us (17.2 -> 16.9
 * typical), 2^11 d 64 -0.2 to -1.1; at d 32 (one round trip of eight loads a lane) it was slower in both runs that
 * staged it (13.8 -> 13.9 and 13.5 -> 14.0 us), so it stays off there. Staging the distance phase's first batch
 * of A fragments the same way during the query preparation was much slower (2^10 d 32 13.6 -> 15.9 us, d 64 17.4
 * -> 19.0). */
__host__ __device__ constexpr int stage_stride(int d) { return (d + kWarp - 1) / kWarp * kWarp + 4; }
__host__ __device__ constexpr bool stage_applies(int d) { return d > kWarp && d <= kLaneMaxDim && d % 4 == 0; }
/* np <= kWarp candidate rows (ids) copied into stage by 16-byte cp.async, half a warp a row (two rows an
 * instruction), then visible to the warp. */
__device__ void stage_rows(const float *ref, int d, const int *ids, int np, float *stage, int lane) {
  const int stride = stage_stride(d), c = lane % (kWarp / 2);
  if (4 * c < d)
    for (int r = lane / (kWarp / 2); r < np; r += 2)
      cp_async16(stage + r * stride + 4 * c, ref + (int64_t)ids[r] * d + 4 * c);
  cp_async_commit();
  cp_async_wait_all();
  __syncwarp();
}

/* Sort 32 entries (one per lane) ascending by (value, index): reg_sort64's network for one register. */
template <typename V>
__device__ __forceinline__ void reg_sort32(V &v, int &ix, int lane) {
#pragma unroll
  for (int k = 2; k <= kWarp; k <<= 1)
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) reg_cx(v, ix, j, (lane & k) == 0, lane);
}

/* The bound on |value − exact| of k_filter's values: ss_knn_error_bound (the float pipeline: norms, final sum,
 * centring, the dot's float accumulation in any order) plus what the tensor cores add to the dot product q'·r':
 * each input rounded to nearest TF32 (unit roundoff 2^-11) puts at most (2u + u²) |q_i r_i| on a product; the
 * MMA's float accumulation, whose rounding NVIDIA does not document, is allowed kTcAccUlps units of 2^-24 of the
 * magnitudes summed per k8 step (published measurements of TF32 MMAs show truncation to float, i.e. a unit or
 * two). By Cauchy–Schwarz the dot's extra error is at most (2u + u² + steps kTcAccUlps 2^-24) ‖q'‖ ‖r'‖; the
 * value's, through −2 q'·r', twice that. An absolute term covers inputs or products below FLT_MIN, should the
 * tensor cores flush them (each flushed input moves the dot by at most FLT_MIN times the other's norm). It also
 * bounds the float values of the fused seed, whose references alone are rounded (it only adds terms). */
constexpr double kTf32Unit = 1.0 / 2048.0, kTcAccUlps = 16.0;
constexpr double kFltMin = 1.1754943508222875e-38; /* 2^-126 */
__device__ __forceinline__ double tc_error_bound(int d, double q_norm, double r_norm_max) {
  double steps = (double)((d + kFdimStep - 1) / kFdimStep + 1);
  double rel = 2.0 * kTf32Unit + kTf32Unit * kTf32Unit + steps * kTcAccUlps * SS_KNN_FLT_UNIT_ROUNDOFF;
  double flushed = 4.0 * (double)(d + SS_KNN_BOUND_SLACK) * kFltMin * (q_norm + r_norm_max + 1.0);
  return ss_knn_error_bound(d, q_norm, r_norm_max) + 2.0 * rel * q_norm * r_norm_max + flushed;
}

/* The bound on the values a finish reads for a query of squared centred norm qn. */
__device__ __forceinline__ double value_error_bound(const finish_args &f, double qn) {
  return f.tc ? tc_error_bound(f.d, sqrt(qn), f.ref_norm_max) : ss_knn_error_bound(f.d, sqrt(qn), f.ref_norm_max);
}

/* The lean band of a seed x for values within E of the exact distances: x + 2E rounded down to a float, so that a
 * value v is <= it exactly when v <= x + 2E; +inf when x is. */
__device__ __forceinline__ float lean_band(float x, double E) {
  return x < INFINITY ? __double2float_rd((double)x + 2.0 * E) : INFINITY;
}

/* The exact finish takes a candidate per lane (exact_dist_short, exact_dist_lane: the query as doubles in
 * ls.qd) rather than warp-cooperative groups: the same for the query's W warps. */
__device__ __forceinline__ bool lean_lane_rows(const finish_args &f, int W) { return W == 1 && f.d <= kLaneMaxDim; }

/* What the lean finish of query qq needs of the query alone, prepared by each of its warps before the values exist
 * (the loads off the selection's chain): the bound E of its values (value_error_bound) returned, its candidate
 * count reset and its coordinates as doubles in ls.qd[ql] (zeros to a multiple of 32) where the finish takes a
 * candidate per lane or d <= 32. Visible to the query's warps after lean_select_finish's first barrier (W = 1: its
 * __syncwarp). */
template <typename LS>
__device__ double lean_prepare(const finish_args &f, int64_t qq, bool valid, int W, int ql, int part, LS &ls,
                               int lane) {
  if (part == 0 && lane == 0) ls.cnt[ql] = 0;
  if (part == 0 && (lean_lane_rows(f, W) || f.d <= kWarp))
    for (int j = lane; j < min(kLaneMaxDim, (f.d + kWarp - 1) / kWarp * kWarp); j += kWarp)
      ls.qd[ql][j] = valid && j < f.d ? (double)f.q[qq * f.d + j] : 0.0;
  return valid ? value_error_bound(f, finish_query_norm(f, qq, lane)) : 0.0;
}

/* The lean selection and finish (above) of query qq (block-local ql) by its W warps; `part` is this warp's
 * part (len values read through src); S: seed values per lane; EB: the exact groups' coordinate blocks per round
 * trip (warp_exact_group); E: lean_prepare's bound; stage: the warp's kWarp staged rows (stage_stride floats
 * each) where stage_applies, nullptr to read the candidates' rows from global memory. Called by every thread of
 * the block (barriers); leaves ls.need_scan[ql] for finish_block_scans and returns it (the same in the query's
 * warps). */
template <int PL, int S, int EB, typename Src, typename LS>
__device__ bool lean_select_finish(const finish_args &f, const Src &src, int len, int W, int ql, int part, int64_t qq,
                                   bool valid, double E, LS &ls, int w, int lane, float *stage = nullptr) {
  const bool lane_rows = lean_lane_rows(f, W);
  constexpr int S1 = S + 1;                /* and the next value: warp_kth_select (W = 1) */
  float v[PL], m[S1], mc[kSeedChains][S1]; /* independent insertion chains, merged after the passes */
  int ids[PL];                             /* paired sources only: the values' reference indices */
#pragma unroll
  for (int h = 0; h < kSeedChains; h++)
#pragma unroll
    for (int t = 0; t < S1; t++) mc[h][t] = INFINITY;
  for (int base = 0; base < len; base += PL * kWarp) {
    lean_load<PL>(src, base, len, lane, v, ids);
#pragma unroll
    for (int c = 0; c < PL; c++) seed_insert<S1>(mc[c % kSeedChains], v[c]);
  }
#pragma unroll
  for (int t = 0; t < S1; t++) m[t] = mc[0][t];
#pragma unroll
  for (int h = 1; h < kSeedChains; h++)
#pragma unroll
    for (int t = 0; t < S1; t++) seed_insert<S1>(m, mc[h][t]);
  static_assert(S <= kLeanMaxS, "lean_shared.mins holds S values per lane");
  float x;
  if (W == 1) {
    x = warp_kth_select<S1>(m, f.k);
  } else { /* W is uniform across the block: so is the barrier */
#pragma unroll
    for (int t = 0; t < S; t++) ls.mins[w][t * kWarp + lane] = m[t];
    __syncthreads();
    x = seed_kth_union<S>(m, f.k, &ls.mins[ql * W], W);
  }
  /* W = 1: the warp alone reads what it wrote (no block barrier, so its warps run on independently) */
  if (W > 1) {
    if (lane == 0) ls.seed[w] = x;
    __syncthreads(); /* seeds, counters and query copies visible */
    for (int p = 0; p < W; p++) x = fminf(x, ls.seed[ql * W + p]);
  } else {
    __syncwarp();
  }
  float y = lean_band(x, E);
  int P = valid && x < INFINITY ? lean_filter<PL>(src, len, y, v, ids, W > 1 ? &ls.cnt[ql] : nullptr, ls.ci[ql], lane)
                                : 0;
  if (W > 1) {
    __syncthreads(); /* the query's candidates are complete */
    P = ls.cnt[ql];
  } else {
    __syncwarp();
  }
  bool over = !(x < INFINITY) || P > kLeanCap, one = P <= kWarp; /* one: a candidate per lane */
  int li[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int e = lane + kWarp * h;
    li[h] = valid && !over && e < P ? ls.ci[ql][e] : kNoIndex;
  }
  double sd[2] = {(double)INFINITY, (double)INFINITY};
  /* the same for the query's W warps */
  bool short_rows = lane_rows || (one && f.d <= kWarp);
  if (short_rows && stage) { /* lane_rows and stage_applies */
    if (valid && !over)      /* uniform */
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if (P <= h * kWarp) break; /* uniform */
        if (h) __syncwarp();       /* the first half's reads are done */
        stage_rows(f.ref, f.d, ls.ci[ql] + h * kWarp, min(P - h * kWarp, kWarp), stage, lane);
        const float *row = stage + lane * stage_stride(f.d);
        if (li[h] != kNoIndex) sd[h] = exact_dist_lane<true>(ls.qd[ql], row, f.d);
      }
  } else if (short_rows) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (!(valid && !over && part == 0 && li[h] != kNoIndex)) continue;
      const float *row = f.ref + (int64_t)li[h] * f.d;
      sd[h] = f.d <= kWarp ? exact_dist_short(ls.qd[ql], row, f.d) : exact_dist_lane(ls.qd[ql], row, f.d);
    }
  } else {
    if (valid && !over) finish_exact_groups<EB>(f, qq, li, P, part, W, lane, sd);
  }
  if (W > 1 && !short_rows) { /* W is uniform across the block, so the barrier below is too */
    if (valid && !over)
#pragma unroll
      for (int h = 0; h < 2; h++)
        if (sd[h] < INFINITY) ls.ex[ql][lane + kWarp * h] = sd[h];
  }
  if (W > 1) __syncthreads();
  if (W > 1 && !short_rows && valid && !over && part == 0)
#pragma unroll
    for (int h = 0; h < 2; h++) sd[h] = lane + kWarp * h < P ? ls.ex[ql][lane + kWarp * h] : (double)INFINITY;
  if (valid && !over && part == 0) { /* every reference outside the candidates is beaten by k of them: done */
    if (one) reg_sort32(sd[0], li[0], lane);
    else reg_sort64(sd, li, lane);
    finish_warp_write(f, qq, sd, li, lane);
  }
  if (lane == 0 && part == 0) ls.need_scan[ql] = valid && over;
  return valid && over;
}

} // namespace
} // namespace knn_cuda
#endif
