/* knn_filter.cu — the filter path, the fused path beyond 2,048 references (K' <= 64, d <= 256): a seed threshold per
 * query from a strided sample of the references, a tensor-core (TF32) kernel that appends every value within it to
 * the query's candidate list, and the lean finish over the lists; three to five launches, replayed as a CUDA graph. */
#include <algorithm>

#include "stages/knn/knn_fused.cuh"

namespace knn_cuda {
namespace {

/* ---- the filter path (beyond fused_small_applies, K' <= 64, d <= 256): seed, filter, list finish -------------
 * Five launches per batch of queries (three while the sample rows fit in shared memory: steps 1-3 are then
 * k_filter_seed_fused, k_fused_small's distance phase against the sample), no n-wide distance matrix:
 *  1. k_filter_centre: the queries centred and transposed (qt, dpad × mpad, zeros beyond d and m), their float
 *     norms (qn).
 *  2. k_filter<true>: the values max(‖q'‖² + ‖r'‖² − 2 q'·r', 0) against a strided sample of the references
 *     (the sample view, built once per index), written as rows (m × sample, L2-resident).
 *  3. k_filter_seed: per query (a warp) the seed x of its sample row (seed_kth: the k-th of the lanes' S
 *     smallest) and tau = x + 2E rounded down. The k sample references with values <= x have exact distances
 *     <= x + E, so the k-th exact distance is <= x + E too, and every reference of the true k nearest has a
 *     value <= x + 2E (E: tc_error_bound, which holds for the float values of the fused seed and the TF32
 *     ones of k_filter).
 *  4. k_filter<false>: the same values for every (query, reference), those <= tau appended to the query's
 *     candidate list as (value, index) pairs (~k n / sample per query on random rows; one global atomic per
 *     row and four lanes reserves the slots: filter_tile_out).
 *  5. k_list_finish: lean_select_finish over each list (W = 1; its seed-and-band argument holds for any set
 *     that contains the true k nearest); a list that overflowed its capacity goes to the block's exact scan.
 * k_filter computes its dot products on the tensor cores (TF32 MMAs, m16n8k8, float accumulators): kFlQ queries
 * × kFlR references a block tile, 16 queries × kFlR references a warp, shared-memory slices of kFlK coordinates
 * double-buffered by cp.async, the slice loop running on across a block's reference tiles so that the next
 * tile's first slice loads during the last one's arithmetic. TF32 rounds the inputs to 11 significant bits, so
 * the filter path's values carry a wider error bound than the float pipeline's (tc_error_bound: ~2^-9 ‖q'‖
 * ‖r'‖, against (d + 8) 2^-23 (‖q'‖ + ‖r'‖)²), used for tau and by the list finish's band; the exact finish
 * makes the result the same. An FFMA k_filter (8 × 8 values a thread) reached 31-49 % of the FMA pipe and was
 * slower than cuBLAS's SGEMM; a fused kernel pushing every value through the warp queue was slower still
 * (docs/knn.md). */
constexpr int kFlQ = 128, kFlR = kFr; /* block tile: queries × references (ref_t's padding) */
constexpr int kFlK = kFdimStep;       /* coordinates per shared-memory slice (dpad is a multiple): one k8 step */
constexpr int kFlThreads = 256;       /* eight warps of 16 queries */
constexpr int kFlBlocksPerSm = 2;     /* the registers of 64 accumulators a thread allow two */
/* sample references: n / kFlSampleDiv within [kFlMinSample, kFlMaxSample] (all of them when fewer), so that
 * ~kFlSampleDiv k candidates pass per query while the sample costs ~1 / kFlSampleDiv of the filter. H100 sweep
 * with the TF32 filter (1,200 queries, k 25): n / 16 beat n / 8 from 2^13 (2^15, d 32: 85 vs 118 us;
 * 2^14, d 128: 105 vs 121) and tied n / 32; at 2^11-2^12, 512 samples beat 256 (2^12, d 64: 45 vs 49 us). */
constexpr int64_t kFlSampleDiv = 16, kFlMinSample = 512, kFlMaxSample = 4096;
/* the one-kernel seed reads the sample (nspad × dpad floats) from L2 in every 8-query block: beyond this many
 * cells the three-kernel seed (its values from k_filter) is faster (2^15, d 256: 324 vs 356 us; 2^14, d 256 and
 * 2^15, d 128, at and below the limit: a tie or the one-kernel seed by 3 %) */
constexpr int64_t kFlFusedSeedCells = 2048 * 128;
/* list capacity: kFlListSlack × the expected k n / sample candidates, a power of two in [kFlMinList, kFlMaxList];
 * queries per batch so that the lists take at most kFlListBytes */
constexpr int64_t kFlListSlack = 4, kFlMinList = 256, kFlMaxList = 4096;
constexpr int64_t kFlListBytes = (int64_t)256 << 20;
static_assert(kFlK * kFlQ / 4 == kFlThreads && kFlK * kFlR / 4 == kFlThreads, "one float4 of each slice per thread");
static_assert(kFlQ % kSfWarps == 0 && kFlQ == kFlR, "centring blocks tile the padded queries; square tiles");

struct flt_seed_args {
  fs_args s; /* the batch's queries (s.q, s.mean, s.m, s.d, s.dpad), s.f for the bound, the sample view (s.ref_t,
              * s.rn, s.npad = nspad) for k_filter_seed_fused */
  float *qt, *qn, *tau;
  const float *vals; /* the sample rows (m × nspad) */
  int *cnt;
  int64_t mpad, nspad;
  int k;
};

/* The block's staged queries (qst: fs_prepare_queries, zeros beyond d and m) written transposed to qt up to mpad
 * (rounded to TF32: k_filter's), and their float norms (qn_s, fs_prepare_queries) to qn; behind a barrier. */
__device__ void filter_write_queries(const flt_seed_args &a, int64_t q0, const float *qst, const float *qn_s) {
  int tid = threadIdx.x, nq = a.s.nq;
  for (int t = tid; t < nq * a.s.dpad; t += blockDim.x) {
    int i = t % nq, j = t / nq;
    if (q0 + i < a.mpad) a.qt[(int64_t)j * a.mpad + q0 + i] = round_tf32(qst[i * a.s.dpad + j]);
  }
  if (tid < nq && q0 + tid < a.mpad) a.qn[q0 + tid] = qn_s[tid];
}

/* Query qq's threshold from its sample row (nspad values, +inf padding) by its warp, and a zero list length. */
template <int S>
__device__ void filter_seed_row(const flt_seed_args &a, const float *row, int64_t qq, int lane) {
  if (qq >= a.mpad) return; /* uniform per warp: a balanced block's slots beyond the padded queries */
  bool valid = qq < a.s.m;  /* uniform per warp */
  float m[S];
#pragma unroll
  for (int t = 0; t < S; t++) m[t] = INFINITY;
  if (valid)
    for (int64_t t = lane; t < a.nspad; t += kWarp) seed_insert<S>(m, row[t]);
  float x = seed_kth<S>(m, a.k);
  double qn = valid ? finish_query_norm(a.s.f, qq, lane) : 0.0;
  if (lane) return;
  /* padding queries take nothing */
  float y = valid ? lean_band(x, tc_error_bound(a.s.d, sqrt(qn), a.s.f.ref_norm_max)) : -1.0f;
  a.tau[qq] = y;
  a.cnt[qq] = 0;
}

__global__ void __launch_bounds__(kSfThreads) k_filter_centre(flt_seed_args a) {
  __shared__ float qst[kSfWarps * SS_KNN_FUSED_MAX_DIM], qn_s[kSfWarps];
  int64_t q0 = (int64_t)blockIdx.x * kSfWarps;
  fs_prepare_queries<kSfWarps>(a.s, q0, kSfWarps, nullptr, qn_s, qst);
  __syncthreads();
  filter_write_queries(a, q0, qst, qn_s);
}

/* Steps 1-3 in one kernel while the sample rows fit in shared memory (nspad <= kFsSmemRefs): k_fused_small's
 * distance phase against the sample view (a.s.ref_t in fragment order, a.s.rn, a.s.npad = nspad), a.s.nq queries a
 * block (kSfWarps, or up to kQbMax balanced). */
template <int NQ, int S>
__global__ void __launch_bounds__(NQ *kWarp, lean_shape<NQ>::kMinBlocks) k_filter_seed_fused(flt_seed_args a) {
  extern __shared__ __align__(16) unsigned char sm_fl[]; /* the block's sample rows */
  __shared__ __align__(16) float qf[fs_qfrag_floats(NQ)];
  __shared__ float qn_s[NQ];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t q0 = (int64_t)blockIdx.x * (blockDim.x / kWarp);
  float *rows = (float *)sm_fl; /* staging the queries first (sized for both) */
  fs_prepare_queries<NQ>(a.s, q0, a.s.nq, qf, qn_s, rows);
  __syncthreads();
  filter_write_queries(a, q0, rows, qn_s);
  __syncthreads();
  fs_distances<NQ>(a.s, q0, qf, qn_s, rows);
  __syncthreads();
  filter_seed_row<S>(a, rows + w * a.s.rs, q0 + w, lane);
}

template <int S>
__global__ void __launch_bounds__(kSfThreads) k_filter_seed(flt_seed_args a) {
  int64_t qq = (int64_t)blockIdx.x * kSfWarps + threadIdx.x / kWarp;
  if (qq < a.mpad) filter_seed_row<S>(a, a.vals + qq * a.nspad, qq, threadIdx.x % kWarp); /* whole warps */
}

struct flt_args {
  const float *qt, *qn, *tau, *ref_t, *rn;
  int64_t mpad, npad;
  int dpad, ntiles, tiles_per_split, cap;
  int *cnt;
  float *lv; /* k_filter<true>: the sample rows (mpad × npad) */
  int2 *lp;  /* k_filter<false>: the lists, (value bits, reference index) pairs (mpad × cap) */
};

/* k_filter's warp tile: kFlWarpQ queries (one m16 row of MMA tiles) × the block's kFlR references (kFlNt n8 MMA
 * tiles). MMA column c of n-tile nt is reference c kFlNt + nt of the block tile, so that lane (g, t) — g = lane / 4,
 * t = lane % 4 — holds the values of queries g and g + 8 against the kFlRefsPerLane consecutive references from
 * t kFlRefsPerLane: acc[j % kFlNt][j / kFlNt + 2 h] is query g + 8 h, reference t kFlRefsPerLane + j. */
constexpr int kFlWarpQ = 16, kFlNt = kFlR / 8, kFlRefsPerLane = kFlR / 4;
/* shared-memory row strides (floats): the A fragments' scalar loads (rows t, columns g) and the B fragments'
 * float4 loads (rows t, columns 16 g + 4 v) without bank conflicts */
constexpr int kFlAStride = kFlQ + 8, kFlBStride = kFlR + 4;
static_assert(kFlQ == kSfWarps * kFlWarpQ && kFlThreads == kSfWarps * kWarp, "a warp per 16 queries of the tile");
static_assert(kFlK == 8 && kFlNt == 16 && kFlRefsPerLane == 2 * kFlNt, "one k8 MMA step per slice; pick_run");

/* the value of query half h against reference j of the lane's run (run-time j: selects, since indexing a register
 * array at run time would put it in local memory) */
template <int h>
__device__ __forceinline__ float pick_run(const float (&acc)[kFlNt][4], int j) {
  float x[kFlNt];
#pragma unroll
  for (int nt = 0; nt < kFlNt; nt++) x[nt] = j & kFlNt ? acc[nt][1 + 2 * h] : acc[nt][2 * h];
    /* a select tree with constant trip counts (loops over a level variable were rolled into local memory) */
#pragma unroll
  for (int i = 0; i < 8; i++) x[i] = j & 8 ? x[i + 8] : x[i];
#pragma unroll
  for (int i = 0; i < 4; i++) x[i] = j & 4 ? x[i + 4] : x[i];
#pragma unroll
  for (int i = 0; i < 2; i++) x[i] = j & 2 ? x[i + 2] : x[i];
  return j & 1 ? x[1] : x[0];
}

/* The values of one block tile (acc: the dot products, in the warp tile's layout): written as rows (kValues), or
 * those <= their query's tau appended. Appends are aggregated per (row, the four lanes sharing it): one atomic
 * reserves their slots (one atomic per candidate, each waited on in divergent code, made the FFMA version 2-3
 * times slower). */
template <bool kValues>
__device__ __forceinline__ void filter_tile_out(const flt_args &a, int64_t q0, int64_t r0, int w, int lane,
                                                const float *tau_s, const float *qn_s, float (&acc)[kFlNt][4]) {
  int g = lane / 4, t = lane % 4, rl = w * kFlWarpQ + g; /* rows rl and rl + 8 of the block tile */
  int64_t c0 = r0 + t * kFlRefsPerLane;
  float rn[kFlRefsPerLane];
#pragma unroll
  for (int v = 0; v < kFlRefsPerLane / 4; v++) {
    float4 x = __ldg((const float4 *)(a.rn + c0) + v);
    rn[4 * v] = x.x, rn[4 * v + 1] = x.y, rn[4 * v + 2] = x.z, rn[4 * v + 3] = x.w;
  }
  const float qv[2] = {qn_s[rl], qn_s[rl + 8]};
  /* the tiled path's value before its clamp at 0: the filter decides on it (tau >= 0, so the clamp cannot change
   * a decision) and clamps only what it stores */
#pragma unroll
  for (int nt = 0; nt < kFlNt; nt++)
#pragma unroll
    for (int c = 0; c < 4; c++) /* -2 acc is exact: one rounding */
      acc[nt][c] = fmaf(-2.0f, acc[nt][c], qv[c / 2] + rn[nt + kFlNt * (c % 2)]);
  if constexpr (kValues) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float4 *row = (float4 *)(a.lv + (q0 + rl + 8 * h) * a.npad + c0);
#pragma unroll
      for (int v = 0; v < kFlRefsPerLane / 4; v++) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; e++) o[e] = fmaxf(acc[(4 * v + e) % kFlNt][(4 * v + e) / kFlNt + 2 * h], 0.0f);
        row[v] = make_float4(o[0], o[1], o[2], o[3]);
      }
    }
  } else {
    unsigned mk[2], cnt = 0; /* cnt: the two rows' hit counts, a byte each (four lanes: <= 4 kFlRefsPerLane) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float tq = tau_s[rl + 8 * h];
      mk[h] = 0;
#pragma unroll
      for (int j = 0; j < kFlRefsPerLane; j++) mk[h] |= (unsigned)(acc[j % kFlNt][j / kFlNt + 2 * h] <= tq) << j;
      cnt |= (unsigned)__popc(mk[h]) << (8 * h);
    }
    unsigned incl = cnt; /* inclusive over the row's four lanes, both rows in one scan */
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      unsigned z = __shfl_up_sync(kFull, incl, o, 4);
      if (t >= o) incl += z;
    }
    unsigned excl = incl - cnt;
    int base[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int tot = incl >> (8 * h) & 0xff;
      base[h] = t == 3 && tot ? atomicAdd(a.cnt + q0 + rl + 8 * h, tot) : 0;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int p = __shfl_sync(kFull, base[h], 3, 4) + (int)(excl >> (8 * h) & 0xff);
      int64_t q = q0 + rl + 8 * h;
      /* the lane's hits of the row, one per iteration (hits are rare: a loop, not predicated slots) */
      for (unsigned b = mk[h]; b; b &= b - 1, p++) {
        int j = __ffs(b) - 1;
        if (p < a.cap) /* beyond the capacity: counted, so the list finish scans the query */
          a.lp[q * a.cap + p] = make_int2(__float_as_int(fmaxf(h ? pick_run<1>(acc, j) : pick_run<0>(acc, j), 0.0f)),
                                          (int)(c0 + j));
      }
    }
  }
}

/* One k8 slice of the warp tile: the A fragment (queries w kFlWarpQ + g, + 8; coordinates t, t + 4) and, per
 * n-tile, the B fragment (references 16 g + nt of the block tile); the views hold TF32 values already. */
__device__ __forceinline__ void filter_slice(const float (*As)[kFlAStride], const float (*Bs)[kFlBStride], int w,
                                             int lane, float (&acc)[kFlNt][4]) {
  int g = lane / 4, t = lane % 4, qa = w * kFlWarpQ + g;
  const unsigned af[4] = {__float_as_uint(As[t][qa]), __float_as_uint(As[t][qa + 8]), __float_as_uint(As[t + 4][qa]),
                          __float_as_uint(As[t + 4][qa + 8])};
#pragma unroll
  for (int v = 0; v < kFlNt / 4; v++) {
    float4 x = *(const float4 *)&Bs[t][kFlNt * g + 4 * v], y = *(const float4 *)&Bs[t + 4][kFlNt * g + 4 * v];
    const float b0[4] = {x.x, x.y, x.z, x.w}, b1[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int e = 0; e < 4; e++) mma_tf32(acc[4 * v + e], af, __float_as_uint(b0[e]), __float_as_uint(b1[e]));
  }
}

template <bool kValues>
__global__ void __launch_bounds__(kFlThreads, kFlBlocksPerSm) k_filter(flt_args a) {
  __shared__ __align__(16) float As[2][kFlK][kFlAStride];
  __shared__ __align__(16) float Bs[2][kFlK][kFlBStride];
  __shared__ float tau_s[kFlQ], qn_s[kFlQ];
  int tid = threadIdx.x, w = tid / kWarp, lane = tid % kWarp;
  int64_t q0 = (int64_t)blockIdx.x * kFlQ;
  if (tid < kFlQ) tau_s[tid] = kValues ? 0.0f : a.tau[q0 + tid], qn_s[tid] = a.qn[q0 + tid];
  int lr = tid / (kFlQ / 4), lc = tid % (kFlQ / 4) * 4; /* this thread's float4 of each slice */
  int tile = blockIdx.y * a.tiles_per_split, t_end = min(a.ntiles, tile + a.tiles_per_split);
  /* the slice after the current one is the next tile's first after a tile's last: loaded during its arithmetic */
  const float *ap = a.qt + (int64_t)lr * a.mpad + q0 + lc;
  const float *bp = a.ref_t + (int64_t)lr * a.npad + (int64_t)tile * kFlR + lc;
  cp_async16(&As[0][lr][lc], ap);
  cp_async16(&Bs[0][lr][lc], bp);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  int buf = 0;
  for (; tile < t_end; tile++) {
    float acc[kFlNt][4] = {};
    for (int k0 = 0; k0 < a.dpad; k0 += kFlK) {
      int nk = k0 + kFlK;
      const float *nb = bp + (int64_t)nk * a.npad; /* the next slice, this tile */
      if (nk == a.dpad) nk = 0, nb = bp + kFlR;    /* the next tile's first */
      if (nk || tile + 1 < t_end) { /* uniform; into the other buffer, last read before the previous barrier */
        cp_async16(&As[buf ^ 1][lr][lc], ap + (int64_t)nk * a.mpad);
        cp_async16(&Bs[buf ^ 1][lr][lc], nb);
        cp_async_commit();
      }
      filter_slice(As[buf], Bs[buf], w, lane, acc);
      if (nk == 0) filter_tile_out<kValues>(a, q0, (int64_t)tile * kFlR, w, lane, tau_s, qn_s, acc);
      cp_async_wait_all();
      __syncthreads();
      buf ^= 1;
    }
    bp += kFlR;
  }
}

struct lf_args {
  const int2 *lp;
  const int *cnt;
  int cap;
  int64_t m;
  finish_args f;
};

template <int NQ, int PL, int S>
__global__ void __launch_bounds__(NQ *kWarp, lean_shape<NQ>::kMinBlocks) k_list_finish(lf_args a) {
  extern __shared__ __align__(16) unsigned char sm_lf[]; /* the fallback scan's buffer */
  __shared__ lean_shared_t<NQ> ls;
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nq = blockDim.x / kWarp;
  int64_t q0 = (int64_t)blockIdx.x * nq, qq = q0 + w;
  bool valid = qq < a.m;
  int c = valid ? a.cnt[qq] : 0;
  double E = lean_prepare(a.f, qq, valid, 1, w, 0, ls, lane);
  list_row src = {a.lp + qq * a.cap};
  /* an overflowed list is passed empty: no seed, so the query is scanned */
  bool flagged = lean_select_finish<PL, S, kExBlocks>(a.f, src, c <= a.cap ? c : 0, 1, w, 0, qq, valid, E, ls, w, lane);
  finish_block_scans(a.f, q0, ls.need_scan, (int)(a.m - q0 < nq ? a.m - q0 : nq), flagged, sm_lf);
}
using flt_seed_kernel = void (*)(flt_seed_args);
using lf_kernel = void (*)(lf_args);
const flt_seed_kernel kFilterSeed[2] = {k_filter_seed<2>, k_filter_seed<4>};
/* [balanced][S class] and [balanced][S class][PL class] */
const flt_seed_kernel kFilterSeedFused[2][2] = {{k_filter_seed_fused<kSfWarps, 2>, k_filter_seed_fused<kSfWarps, 4>},
                                                {k_filter_seed_fused<kQbMax, 2>, k_filter_seed_fused<kQbMax, 4>}};
#define SS_LF_ROW(NQ, S) \
  { k_list_finish<NQ, kSfMinPerLane, S>, k_list_finish<NQ, 2 * kSfMinPerLane, S>, k_list_finish<NQ, kSfMaxPerLane, S> }
const lf_kernel kListFinish[2][2][3] = {{SS_LF_ROW(kSfWarps, 2), SS_LF_ROW(kSfWarps, 4)},
                                        {SS_LF_ROW(kQbMax, 2), SS_LF_ROW(kQbMax, 4)}};
#undef SS_LF_ROW

/* Reference tiles per k_filter block: one while the grid is at most kFlOneTileWaves waves (H100, 1,200 queries,
 * k 25, every grid n from 2^11 to 2^15 (up to 2,560 blocks): one tile a block was as fast or faster than the rule
 * below, e.g. 2^12 d 64 42 -> 40 us, d 128 60 -> 54, 2^13 d 128 73 -> 69, 2^15 d 256 327 -> 315);
 * beyond, the fewest waves × tiles per block over the splits (a block holds its query tile's thresholds and norms
 * across its tiles; the last wave should be full). */
constexpr int64_t kFlOneTileWaves = 16;
int filter_tiles_per_split(int64_t qtiles, int64_t ntiles, int sm_count) {
  int64_t slots = (int64_t)kFlBlocksPerSm * sm_count, best = 1, best_cost = INT64_MAX;
  if (qtiles * ntiles <= kFlOneTileWaves * slots) return 1;
  for (int64_t t = 1; t <= ntiles; t++) {
    int64_t blocks = qtiles * ceil_div(ntiles, t), cost = ceil_div(blocks, slots) * t;
    if (cost <= best_cost) best = t, best_cost = cost;
  }
  return (int)best;
}

} // namespace

/* The one-kernel seed's shared-memory opt-in (kFusedSmemMax), once per index. */
ss_status filter_setup(ss_ctx *ctx) {
  for (const auto &shape : kFilterSeedFused)
    for (flt_seed_kernel kern : shape)
      SS_CUDA_TRY(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kFusedSmemMax));
  return SS_OK;
}

/* The filter path (above) for m queries, in batches (whole kFlQ tiles) of at most knn.query_tile queries whose
 * lists fit kFlListBytes. */
ss_status filter_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                        int dpad, int64_t npad, const finish_out &out, ss_knn_stats *stats) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  int64_t n = ix->n, k = o->k;
  int64_t ns = n / kFlSampleDiv;
  ns = ns < kFlMinSample ? kFlMinSample : ns > kFlMaxSample ? kFlMaxSample : ns;
  if (ns > n) ns = n;
  int64_t nspad = ceil_div(ns, kFlR) * kFlR;
  /* steps 1-3 in one kernel while the sample rows fit in shared memory and its L2 reads stay small; the sample
   * view's layout follows (fixed per index) */
  bool fused_seed = nspad <= kFsSmemRefs && nspad * dpad <= kFlFusedSeedCells;
  SS_TRY(fused_view(ctx, ix, dv, dpad, ns, nspad, fused_seed, &dv->samp_t, &dv->samp_tn, s));
  int64_t cap = next_pow2(kFlListSlack * ceil_div(k * n, ns));
  cap = cap < kFlMinList ? kFlMinList : cap > kFlMaxList ? kFlMaxList : cap;
  /* queries per batch: the lists within kFlListBytes, at most knn.query_tile (whole kFlQ tiles, at least one) */
  int64_t Q = kFlListBytes / (cap * (int64_t)sizeof(int2)) / kFlQ * kFlQ;
  int64_t Qo = o->query_tile / kFlQ * kFlQ, mpad = ceil_div(m, kFlQ) * kFlQ;
  if (Q > Qo) Q = Qo > kFlQ ? Qo : kFlQ;
  if (Q > mpad) Q = mpad;
  SS_TRY(ws_ensure(ctx, &dv->fl_qt, (size_t)(Q * dpad) * sizeof(float), "KNN filter queries"));
  SS_TRY(ws_ensure(ctx, &dv->fl_qn, (size_t)Q * sizeof(float), "KNN filter query norms"));
  SS_TRY(ws_ensure(ctx, &dv->fl_tau, (size_t)Q * sizeof(float), "KNN filter thresholds"));
  SS_TRY(ws_ensure(ctx, &dv->fl_cnt, (size_t)Q * sizeof(int), "KNN filter list lengths"));
  SS_TRY(ws_ensure(ctx, &dv->fl_li, (size_t)(Q * cap) * sizeof(int2), "KNN filter lists"));
  flt_seed_kernel seed = kFilterSeed[lean_s_class(k)];
  if (!fused_seed) SS_TRY(ws_ensure(ctx, &dv->fl_lv, (size_t)(Q * nspad) * sizeof(float), "KNN filter sample rows"));
  size_t scan_bytes = finish_warp_smem(
      make_finish_args(ix, dv, d_query, nullptr, nullptr, Kc, Kc, (int)k, nullptr, out).P2);
  int64_t qtiles = Q / kFlQ, ntiles = npad / kFlR, stiles = nspad / kFlR;
  int tps = filter_tiles_per_split(qtiles, ntiles, dv->sm_count),
      stps = filter_tiles_per_split(qtiles, stiles, dv->sm_count);
  auto launch = [&]() -> ss_status {
    for (int64_t q0 = 0; q0 < m; q0 += Q) {
      int64_t Qt = m - q0 < Q ? m - q0 : Q, Qtpad = ceil_div(Qt, kFlQ) * kFlQ;
      finish_out o_t = {out.idx + q0 * k, out.dist ? out.dist + q0 * k : nullptr, out.cert + q0};
      finish_args f = make_finish_args(ix, dv, d_query + q0 * ix->d, nullptr, nullptr, Kc, Kc, (int)k, nullptr, o_t);
      f.tc = true; /* the lists hold k_filter's TF32 values */
      flt_seed_args sa;
      memset(&sa, 0, sizeof(sa));
      sa.s.q = f.q, sa.s.mean = dv->mean, sa.s.m = (int)Qt, sa.s.d = (int)ix->d, sa.s.dpad = dpad, sa.s.f = f;
      sa.s.ref_t = dv->samp_t, sa.s.rn = dv->samp_tn, sa.s.npad = nspad, sa.s.rs = fs_row_stride(nspad);
      sa.qt = (float *)dv->fl_qt.p, sa.qn = (float *)dv->fl_qn.p, sa.tau = (float *)dv->fl_tau.p;
      sa.vals = (const float *)dv->fl_lv.p, sa.cnt = (int *)dv->fl_cnt.p;
      sa.mpad = Qtpad, sa.nspad = nspad, sa.k = (int)k;
      unsigned qblocks = (unsigned)(Qtpad / kSfWarps);
      /* balanced blocks (balanced_queries) for the padded batch (seed) and its queries (finish) */
      int nq_seed = balanced_queries(Qtpad, dv->sm_count), nq_fin = balanced_queries(Qt, dv->sm_count);
      flt_args fa;
      fa.qt = sa.qt, fa.qn = sa.qn, fa.tau = sa.tau, fa.ref_t = dv->samp_t, fa.rn = dv->samp_tn;
      fa.mpad = Qtpad, fa.npad = nspad, fa.dpad = dpad, fa.ntiles = (int)stiles, fa.tiles_per_split = stps;
      fa.cap = (int)cap, fa.cnt = sa.cnt, fa.lv = (float *)dv->fl_lv.p, fa.lp = (int2 *)dv->fl_li.p;
      sa.s.nq = fused_seed ? nq_seed : kSfWarps; /* k_filter_centre: blocks of kSfWarps */
      if (fused_seed) {
        /* the rows, or the staged queries; within kFusedSmemMax */
        size_t row_bytes = (size_t)nq_seed * (size_t)std::max(sa.s.rs, (int64_t)dpad) * sizeof(float);
        kFilterSeedFused[nq_seed > kSfWarps]
                        [lean_s_class(k)]<<<(unsigned)ceil_div(Qtpad, nq_seed), nq_seed * kWarp, row_bytes, s>>>(sa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter centring, sample and seed");
      } else {
        k_filter_centre<<<qblocks, kSfThreads, 0, s>>>(sa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter query centring");
        k_filter<true><<<dim3((unsigned)(Qtpad / kFlQ), (unsigned)ceil_div(stiles, stps)), kFlThreads, 0, s>>>(fa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter sample values");
        seed<<<qblocks, kSfThreads, 0, s>>>(sa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter seed");
      }
      fa.ref_t = dv->ref_t, fa.rn = dv->ref_tn, fa.npad = npad, fa.ntiles = (int)ntiles, fa.tiles_per_split = tps;
      k_filter<false><<<dim3((unsigned)(Qtpad / kFlQ), (unsigned)ceil_div(ntiles, tps)), kFlThreads, 0, s>>>(fa);
      SS_CUDA_TRY_LAUNCH(ctx, "knn filter");
      lf_args la;
      la.lp = fa.lp, la.cnt = fa.cnt, la.cap = (int)cap, la.m = Qt, la.f = f;
      lf_kernel fin = kListFinish[nq_fin > kSfWarps][lean_s_class(k)][lean_pl_class(cap / kFlListSlack * 2)];
      fin<<<(unsigned)ceil_div(Qt, nq_fin), nq_fin * kWarp, scan_bytes, s>>>(la);
      SS_CUDA_TRY_LAUNCH(ctx, "knn filter list finish");
    }
    return SS_OK;
  };
  const void *p[] = {d_query,      out.idx,      out.dist,    out.cert,    dv->fl_qt.p, dv->fl_qn.p,
                     dv->fl_tau.p, dv->fl_cnt.p, dv->fl_lv.p, dv->fl_li.p, dv->samp_t,  dv->ref_t};
  const int64_t v[] = {m, (int64_t)Kc * 65536 + k, -2, cap};
  return fused_graph_run(ctx, dv, s, p, v, launch, Q, (int64_t)tps * kFlR, stats);
}

} // namespace knn_cuda
