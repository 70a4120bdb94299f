/* knn_tiled.cu — the tiled path: per (query tile, reference tile) a cuBLAS SGEMM writes −2 q·r, the warp queue
 * keeps each chunk's K' best and a merge folds them into each query's running list, then the exact finish; with one
 * reference tile the chunks' lists go straight to the finish (K' <= 64 and n <= 4,096: selection and finish in one
 * kernel), and repeated calls replay one CUDA graph. Also the centring kernel every path and the index use. */
#include <algorithm>

#include "stages/knn/knn_lean.cuh"

namespace knn_cuda {
namespace {

constexpr int kWarpBuf = 64;      /* warp queue: pending insertions before a merge */
constexpr int kWarpsPerBlock = 4; /* warp queue: independent warps per block */
/* warp queue: fewest references per warp. Every chunk pays a warm-up (its first K' ln(chunk / K')
 * insertions and their merges; ~10 us per extra chunk per query on the 1,200-query grid, inferred from
 * H100 timings): fewer, longer chunks win while kWarpUnroll keeps enough loads in
 * flight per warp. */
constexpr int kWarpMinChunk = 4096;
constexpr int kWarpUnroll = 8;          /* warp queue: loads per lane in flight (memory-level parallelism) */
constexpr int64_t kTargetWarps = 16384; /* warp queue: work items per tile that fill an H100 */
constexpr int64_t kMinRefTile = 4096, kMinQueryTile = 128;
constexpr double kMemFraction = 0.8; /* of the free device memory a search may take */
/* Chunk lists per query tile the workspace holds: at least one per kListChunk references (max_chunks). */
constexpr int kListChunk = 4096;
constexpr size_t kSmemDefault = 48 * 1024; /* warp queues per block: as many as fit in the default shared memory */

/* Centre rows by the mean and take their squared norms; one warp per row. With tau_bits (queries), also reset each
 * row's shared selection threshold to +inf: this kernel runs first in every tiled search. */
__global__ void k_center(const float *x, const float *mean, int64_t n, int64_t d, float *xc, float *norm,
                         unsigned *norm_max_bits, unsigned *tau_bits) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (r >= n) return;
  float s = 0.0f;
  for (int64_t j = lane; j < d; j += kWarp) {
    float c = x[r * d + j] - mean[j];
    xc[r * d + j] = c;
    s += c * c;
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
  if (lane == 0) {
    norm[r] = s;
    if (tau_bits) tau_bits[r] = kInfBits;
    if (norm_max_bits) atomicMax(norm_max_bits, __float_as_uint(s)); /* non-negative floats order as ints */
  }
}

__global__ void k_fill(float *v, int *i, int64_t count) {
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < count; t += (int64_t)gridDim.x * blockDim.x)
    v[t] = INFINITY, i[t] = kNoIndex;
}

/* What every selection kernel reads: the tile of −2 q·r (query rows of length ld), the norms. */
struct tile_args {
  const float *dist;  /* Qt rows × ld */
  int64_t ld;         /* = Rt */
  const float *qnorm; /* Qt, this query tile */
  const float *rnorm; /* Rt, this reference tile */
  int r0, Rt, nch, chunk, Kc;
  float *pv; /* (Qt × nch) × Kc partial lists */
  int *pi;
};

/* The list [0, PL) and the upper half [PL, P), both sorted ascending (P = 2 PL): the PL smallest of
 * the two, sorted, into the list (one half-cleaner pass, log2(PL) merge stages); one warp. */
__device__ void warp_merge_sorted(float *sv, int *si, int P, int lane) {
  int PL = P / 2;
  for (int t = lane; t < PL; t += kWarp) { /* half-cleaner against the upper half read backwards */
    int u = P - 1 - t;
    if (kv_less(sv[u], si[u], sv[t], si[t])) sv[t] = sv[u], si[t] = si[u];
  }
  __syncwarp();
  for (int j = PL / 2; j > 0; j >>= 1) { /* bitonic merge of the list */
    for (int t = lane; t < PL / 2; t += kWarp) {
      int i = ((t & ~(j - 1)) << 1) | (t & (j - 1)), l = i + j;
      float vi = sv[i], vl = sv[l];
      int ii = si[i], il = si[l];
      if (kv_less(vl, il, vi, ii)) sv[i] = vl, sv[l] = vi, si[i] = il, si[l] = ii;
    }
    __syncwarp();
  }
}

/* Warp queue layout (P = 2 PL entries, PL = next_pow2(max(K', kWarpBuf))): [0, PL) the sorted list,
 * whose first K' entries are the warp's best; [PL, PL + kWarpBuf) the pending buffer; the rest +inf,
 * never written. A merge sorts only the buffer, then the list followed by the reversed upper half is
 * a bitonic sequence: one half-cleaner pass keeps the PL smallest in the list (the upper half is not
 * written) and log2(PL) merge stages sort them — about half the work of sorting all P entries. */
__device__ void warp_queue_merge(float *sv, int *si, int nb, int P, int lane) {
  int PL = P / 2;
  __syncwarp();
  for (int t = nb + lane; t < kWarpBuf; t += kWarp) sv[PL + t] = INFINITY, si[PL + t] = kNoIndex;
  __syncwarp();
  bitonic_sort<float, true>(sv + PL, si + PL, kWarpBuf, lane, kWarp);
  warp_merge_sorted(sv, si, P, lane);
}

/* Publish a warp's K'-th best into the query's shared threshold. Values are >= 0 (clamped), so their
 * bits order as unsigned integers; an unfilled list (+inf) changes nothing. */
__device__ __forceinline__ void publish_tau(unsigned *tau_bits, float kth, int lane) {
  if (tau_bits && lane == 0 && kth < INFINITY) atomicMin(tau_bits, __float_as_uint(kth));
}

/* The seed of a warp queue with K' <= kSeedPerLane × 32 (k_select_warp in one-reference-tile searches): every lane
 * keeps the kSeedPerLane (2) smallest of its values; the K'-th smallest of those 64 values, x, is the
 * value of an element, and at least K' distinct elements are <= x. Filtering by v <= x therefore keeps the K'
 * best of those values (and the final K'-th value A <= x, so a rejected element, > x, is > A: what the
 * certificate needs), while the queue skips the warm-up through ~K' ln(len / K') insertions and their merges:
 * about K' + a few elements pass. +inf when fewer than K' values are finite (no filter). */
constexpr int kSeedPerLane = 2;
static_assert(SS_KNN_FUSED_MAX_CANDIDATES <= kSeedPerLane * kWarp, "a seed ranks K' of its samples");
/* k_select_warp's seed pass reads only the chunk's first kSeedPrefix elements (all of a short chunk): on
 * long chunks a full extra pass would double the selection's memory traffic (the chunks of a grid search
 * do not stay in L2), while the prefix is still in cache when the second pass reads it again. */
constexpr int kSeedPrefix = 1024;

__device__ __forceinline__ void seed_push(float &m0, float &m1, float v) {
  float m[2] = {m0, m1};
  seed_insert<2>(m, v);
  m0 = m[0], m1 = m[1];
}

/* x from every lane's two smallest (m0 <= m1): the K'-th smallest of the warp's 64 values (+inf when
 * fewer than K' are finite). */
__device__ float seed_from_pairs(float m0, float m1, int Kc) {
  const float m[2] = {m0, m1};
  return seed_kth<2>(m, Kc);
}

__device__ float warp_seed(const float *row, const float *rn, float qn, int len, int Kc, int lane) {
  float m0 = INFINITY, m1 = INFINITY;
  for (int base = 0; base < len; base += kWarp * kWarpUnroll) {
    float v[kWarpUnroll];
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) v[u] = warp_value(row, rn, qn, base + u * kWarp + lane, len);
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) seed_push(m0, m1, v[u]);
  }
  return seed_from_pairs(m0, m1, Kc);
}

/* Warp queue: each warp streams its chunk once, kWarpUnroll loads per lane in flight. An element
 * enters the pending buffer only when it beats the threshold: the smallest of the warp's own K'-th
 * best, the query's running K'-th from earlier reference tiles, and the query's shared threshold
 * (tau_bits, may be NULL: the smallest K'-th any warp of this search has published for the query).
 * A full buffer is merged into the sorted list and its new K'-th published. Every published value is
 * the K'-th of a list that ends among the finish kernel's inputs (directly, or through the running
 * list, which only improves), so it bounds the final K'-th candidate value from above: a rejected
 * element is >= that value, which is all the certificate needs (ties included: it compares values).
 * After warm-up nearly every element is rejected by one comparison: the kernel runs at memory speed.
 * With `seed` (one-tile searches with K' <= 64 and n > kSfMaxRefs; smaller ones select in k_select_finish)
 * the warm-up is skipped: warp_seed's x is applied inclusively from the first element (it is never
 * published: other warps compare strictly). */
__global__ void k_select_warp(tile_args a, int P, int n_items, const float *run_v, unsigned *tau_bits, int seed) {
  extern __shared__ unsigned char sm_w[];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int item = blockIdx.x * (blockDim.x / kWarp) + w;
  if (item >= n_items) return;
  float *sv = (float *)(sm_w + (size_t)w * P * (sizeof(float) + sizeof(int)));
  int *si = (int *)(sv + P);
  int qq = item / a.nch, c = item % a.nch, begin = c * a.chunk, len = min(a.chunk, a.Rt - begin);
  const float *row = a.dist + (int64_t)qq * a.ld + begin, *rn = a.rnorm + begin;
  unsigned *shared_tau = tau_bits ? tau_bits + qq : nullptr;
  float qn = a.qnorm[qq], tau = run_v ? run_v[(int64_t)qq * a.Kc + a.Kc - 1] : INFINITY;
  for (int t = lane; t < P; t += kWarp) sv[t] = INFINITY, si[t] = kNoIndex;
  /* v < nextafter(x) is v <= x: the seed keeps elements equal to it (see warp_seed) */
  if (seed && a.Kc <= kSeedPerLane * kWarp) {
    float x = warp_seed(row, rn, qn, len < kSeedPrefix ? len : kSeedPrefix, a.Kc, lane);
    tau = fminf(tau, nextafterf(x, INFINITY));
  }
  int nb = 0;
  for (int base = 0; base < len; base += kWarp * kWarpUnroll) {
    float v[kWarpUnroll];
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) /* independent loads first, then the filter */
      v[u] = warp_value(row, rn, qn, base + u * kWarp + lane, len);
    if (shared_tau) tau = fminf(tau, __uint_as_float(*(volatile unsigned *)shared_tau));
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) {
      bool pass = v[u] < tau; /* v == tau loses: the certificate only needs rejected values >= tau */
      unsigned mask = __ballot_sync(kFull, pass);
      if (!mask) continue;
      int cnt = __popc(mask);
      if (nb + cnt > kWarpBuf) {
        warp_queue_merge(sv, si, nb, P, lane);
        nb = 0;
        tau = fminf(tau, sv[a.Kc - 1]);
        publish_tau(shared_tau, sv[a.Kc - 1], lane);
        pass = v[u] < tau; /* the tighter threshold applies at once */
        mask = __ballot_sync(kFull, pass);
        cnt = __popc(mask);
      }
      if (pass) {
        int pos = P / 2 + nb + __popc(mask & ((1u << lane) - 1u));
        sv[pos] = v[u];
        si[pos] = a.r0 + begin + base + u * kWarp + lane;
      }
      nb += cnt;
    }
  }
  if (nb) {
    warp_queue_merge(sv, si, nb, P, lane);
    publish_tau(shared_tau, sv[a.Kc - 1], lane);
  }
  __syncwarp();
  for (int t = lane; t < a.Kc; t += kWarp) {
    a.pv[(int64_t)item * a.Kc + t] = sv[t];
    a.pi[(int64_t)item * a.Kc + t] = si[t];
  }
}

template <typename V>
__device__ __forceinline__ int count_less(const V *lv, const int *li, int n, V v, int i) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) >> 1;
    if (kv_less(lv[mid], li[mid], v, i)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Fold the nch partial lists of each query into its running list (merge by rank: an element's
 * place is its rank in its own list plus the number of smaller elements in the other). */
__global__ void k_merge(float *run_v, int *run_i, const float *pv, const int *pi, int nch, int Kc) {
  extern __shared__ unsigned char sm_m[];
  float *av = (float *)sm_m;
  int *ai = (int *)(av + Kc);
  float *bv = (float *)(ai + Kc);
  int *bi = (int *)(bv + Kc);
  float *cv = (float *)(bi + Kc);
  int *ci = (int *)(cv + Kc);
  int qq = blockIdx.x;
  for (int t = threadIdx.x; t < Kc; t += blockDim.x)
    av[t] = run_v[(int64_t)qq * Kc + t], ai[t] = run_i[(int64_t)qq * Kc + t];
  __syncthreads();
  for (int c = 0; c < nch; c++) {
    const float *qv = pv + ((int64_t)qq * nch + c) * Kc;
    const int *qi = pi + ((int64_t)qq * nch + c) * Kc;
    if (!kv_less(qv[0], qi[0], av[Kc - 1], ai[Kc - 1])) continue; /* nothing in it can enter */
    for (int t = threadIdx.x; t < Kc; t += blockDim.x) bv[t] = qv[t], bi[t] = qi[t];
    __syncthreads();
    for (int t = threadIdx.x; t < Kc; t += blockDim.x) {
      int pa = t + count_less(bv, bi, Kc, av[t], ai[t]);
      if (pa < Kc) cv[pa] = av[t], ci[pa] = ai[t];
      int pb = t + count_less(av, ai, Kc, bv[t], bi[t]);
      if (pb < Kc) cv[pb] = bv[t], ci[pb] = bi[t];
    }
    __syncthreads();
    float *tv = av;
    int *ti = ai;
    av = cv, ai = ci, cv = tv, ci = ti;
  }
  for (int t = threadIdx.x; t < Kc; t += blockDim.x)
    run_v[(int64_t)qq * Kc + t] = av[t], run_i[(int64_t)qq * Kc + t] = ai[t];
}

/* ---- the tiled path's finish: candidates → exact top k, certificate, device fallback --------------------
 * One block per query (K' > kFinList). The query's L approximate (value, index) entries (one list per chunk of a
 * one-tile search, else its running list) are sorted and cut to K'; their threshold T is the
 * K'-th value (every reference outside the K' has an approximate value >= T). The K' are re-ranked
 * by ss_knn_exact_dist and sorted by (exact, index). Certified when T − E > the k-th exact
 * distance; otherwise the block scans every reference exactly (a filtered insertion buffer merged
 * by bitonic sort), so the answer is always the contract's, with no host involvement. */
size_t finish_smem(int P1, int P2) {
  return (size_t)P1 * (sizeof(float) + sizeof(int)) + (size_t)P2 * (sizeof(double) + sizeof(int));
}

__global__ void k_finish(finish_args a) {
  extern __shared__ unsigned char sm_fin[];
  float *cv = (float *)sm_fin;
  int *ci = (int *)(cv + a.P1);
  double *sd = (double *)(ci + a.P1 + (a.P1 & 1)); /* 8-byte aligned */
  int *si = (int *)(sd + a.P2);
  __shared__ double s_qn;
  int qq = blockIdx.x;
  const float *qrow = a.q + (int64_t)qq * a.d;
  for (int t = threadIdx.x; t < a.P1; t += blockDim.x) {
    bool in = t < a.L;
    cv[t] = in ? a.cand_v[(int64_t)qq * a.L + t] : INFINITY;
    ci[t] = in ? a.cand_i[(int64_t)qq * a.L + t] : kNoIndex;
  }
  if (threadIdx.x < kWarp) { /* ‖q'‖² of the centred query (as the candidates stage centres it) */
    double s = 0.0;
    for (int j = threadIdx.x; j < a.d; j += kWarp) {
      double c = (double)(qrow[j] - a.mean[j]);
      s += c * c;
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
    if (threadIdx.x == 0) s_qn = s;
  }
  __syncthreads();
  if (a.L > a.Kc) bitonic_sort<float, false>(cv, ci, a.P1, threadIdx.x, blockDim.x);
  for (int t = threadIdx.x; t < a.Ps; t += blockDim.x) {
    int r = t < a.Kc ? ci[t] : kNoIndex;
    sd[t] = r == kNoIndex ? (double)INFINITY : ss_knn_exact_dist(qrow, a.ref + (int64_t)r * a.d, a.d);
    si[t] = r;
  }
  __syncthreads();
  bitonic_sort<double, false>(sd, si, a.Ps, threadIdx.x, blockDim.x);
  double approx_last = (double)cv[a.Kc - 1];
  double bound = ss_knn_error_bound(a.d, sqrt(s_qn), a.ref_norm_max);
  bool ok = (int64_t)a.Kc >= a.n || approx_last - bound > sd[a.k - 1];
  if (!ok) finish_exact_scan(a, qrow, sd, si, a.P2);
  for (int t = threadIdx.x; t < a.k; t += blockDim.x) {
    a.out_i[(int64_t)qq * a.k + t] = si[t];
    if (a.out_d) a.out_d[(int64_t)qq * a.k + t] = sd[t];
  }
  if (threadIdx.x == 0) {
    a.cert[qq] = ok;
    if (a.reset_tau) a.reset_tau[qq] = kInfBits;
  }
}

/* Lane's entries (lane, lane + kWarp) of sorted list c of a query's candidate lists (K' <= 2 kWarp). */
__device__ __forceinline__ void fetch_list(const float *gv, const int *gi, int c, int Kc, int lane, float (&v)[2],
                                           int (&ix)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int t = lane + h * kWarp;
    v[h] = t < Kc ? gv[(int64_t)c * Kc + t] : INFINITY;
    ix[h] = t < Kc ? gi[(int64_t)c * Kc + t] : kNoIndex;
  }
}

/* ---- finish, one warp per query (K' <= kFinList) -------------------------------------------------
 * The same answer as k_finish, without block-wide sorts and without shared memory: every input list (a
 * chunk's or the running list) is already sorted by (value, index), so the warp folds them
 * into one 64-entry list held in registers (reg_merge64, skipping lists whose best cannot enter; the
 * next list's loads are in flight during a merge); the K' exact distances (lane t: candidates t and
 * t + 32, computed by the warp in groups of kExGroup: warp_exact_group) are sorted in registers
 * (reg_sort64). A query without the certificate is flagged, and after a block barrier the block's four
 * warps scan the flagged queries one after another with finish_exact_scan (the fallback of k_finish, in
 * shared memory). */
constexpr int kFinList = kRegList; /* the merged list's length; K' <= this */
constexpr int kFinWarps = 4;       /* queries per block */

/* finish_warp_cert from a merged candidate list (lv, li: sorted, K' <= kFinList): thr = its K'-th value. */
__device__ bool finish_warp_query(const finish_args &a, int64_t qq, double qn, const float (&lv)[2], const int (&li)[2],
                                  double (&sd)[2], int lane) {
  int si[2] = {lane < a.Kc ? li[0] : kNoIndex, lane + kWarp < a.Kc ? li[1] : kNoIndex};
  return finish_warp_cert(a, qq, qn, (double)reg_get(lv, a.Kc - 1), (int64_t)a.Kc >= a.n, sd, si, lane);
}

__global__ void __launch_bounds__(kFinWarps *kWarp) k_finish_warp(finish_args a, int64_t m) {
  extern __shared__ __align__(16) unsigned char sm_fw[];
  __shared__ int need_scan[kFinWarps];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t qq = (int64_t)blockIdx.x * kFinWarps + w;
  bool scan = false;
  if (qq < m) { /* the whole warp: qq is uniform */
    const float *gv = a.cand_v + qq * a.L;
    const int *gi = a.cand_i + qq * a.L;
    int nl = a.L / a.Kc;
    float lv[2], cv[2], nv[2]; /* the merged list, the list being merged, the next one (registers) */
    int li[2], ci[2], ni[2];
    double qn = finish_query_norm(a, qq, lane);
    fetch_list(gv, gi, 0, a.Kc, lane, lv, li);
    fetch_list(gv, gi, nl > 1 ? 1 : 0, a.Kc, lane, nv, ni); /* one list ahead: its loads overlap a merge */
    for (int c = 1; c < nl; c++) {
      cv[0] = nv[0], cv[1] = nv[1], ci[0] = ni[0], ci[1] = ni[1];
      if (c + 1 < nl) fetch_list(gv, gi, c + 1, a.Kc, lane, nv, ni);
      if (!kv_less(reg_get(cv, 0), reg_get(ci, 0), reg_get(lv, a.Kc - 1), reg_get(li, a.Kc - 1)))
        continue; /* nothing in it can enter */
      reg_merge64(lv, li, cv, ci, lane);
    }
    double sd[2] = {(double)INFINITY, (double)INFINITY};
    finish_exact_groups(a, qq, li, a.Kc, 0, 1, lane, sd);
    scan = finish_warp_query(a, qq, qn, lv, li, sd, lane);
  }
  if (lane == 0) need_scan[w] = scan;
  int64_t q_first = (int64_t)blockIdx.x * kFinWarps;
  finish_block_scans(a, q_first, need_scan, (int)(m - q_first < kFinWarps ? m - q_first : kFinWarps), scan, sm_fw);
}

struct sf_args {
  tile_args t;   /* the rows of one query tile against the single reference tile; t.Kc = K' */
  finish_args f; /* that query tile's queries and outputs */
  int64_t m;     /* queries in the tile */
  int W, chunk;  /* warps per query (power of two), references per warp */
};

template <int PL, int S>
__global__ void __launch_bounds__(kSfThreads, kSfMinBlocks) k_select_finish(sf_args a) {
  extern __shared__ __align__(16) unsigned char sm_sf[]; /* the fallback scan's buffer */
  __shared__ lean_shared ls;
  const tile_args &t = a.t;
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, qpb = kSfWarps / a.W;
  int ql = w / a.W, part = w % a.W;
  int64_t q0 = (int64_t)blockIdx.x * qpb, qq = q0 + ql;
  bool valid = qq < a.m; /* uniform across the query's warps */
  int begin = part * a.chunk, len = valid ? max(0, min(a.chunk, t.Rt - begin)) : 0;
  gemm_row src = {t.dist + qq * t.ld + begin, t.rnorm + begin, valid ? t.qnorm[qq] : 0.0f, t.r0 + begin};
  double E = lean_prepare(a.f, qq, valid, a.W, ql, part, ls, lane);
  bool flagged = lean_select_finish<PL, S, kExBlocks>(a.f, src, len, a.W, ql, part, qq, valid, E, ls, w, lane);
  finish_block_scans(a.f, q0, ls.need_scan, (int)(a.m - q0 < qpb ? a.m - q0 : qpb), flagged, sm_sf);
}

using sf_kernel = void (*)(sf_args);
const sf_kernel kSelectFinish[2][3] = {{k_select_finish<kSfMinPerLane, 2>, k_select_finish<2 * kSfMinPerLane, 2>,
                                        k_select_finish<kSfMaxPerLane, 2>},
                                       {k_select_finish<kSfMinPerLane, 4>, k_select_finish<2 * kSfMinPerLane, 4>,
                                        k_select_finish<kSfMaxPerLane, 4>}};

/* ---- host side ------------------------------------------------------------------------------------- */

/* Chunks per reference tile: the warp queue splits a row only as much as it takes to give the GPU enough warps. */
void plan_chunks(int64_t Qt, int64_t Rt, int64_t wchunk, int *nch, int *chunk) {
  int64_t want = ceil_div(kTargetWarps, Qt), most = Rt / wchunk > 1 ? Rt / wchunk : 1;
  int64_t c = want < most ? want : most;
  *chunk = (int)ceil_div(Rt, c);
  *nch = (int)ceil_div(Rt, *chunk);
}

/* The most chunk lists of one query tile: the warp queue's, and at least one per kListChunk references — the bound
 * the workspace (part_v, part_i) and the one-tile test (tiled_search's `direct`) are sized by. */
int64_t max_chunks(int64_t Q, int64_t R, int64_t wchunk) {
  int nw, cw;
  plan_chunks(Q, R, wchunk, &nw, &cw);
  int64_t nk = ceil_div(R, kListChunk);
  /* a shorter last query tile can ask the warp queue for more chunks */
  int64_t warp_most = R / wchunk > 1 ? R / wchunk : 1;
  return nk > warp_most ? nk : (warp_most > nw ? warp_most : nw);
}

int warp_queue_size(int Kc) { return 2 * next_pow2(Kc > kWarpBuf ? Kc : kWarpBuf); }

size_t warp_smem(int Kc, int *warps) {
  size_t per = (size_t)warp_queue_size(Kc) * (sizeof(float) + sizeof(int));
  int wpb = (int)(kSmemDefault / per);
  *warps = wpb < 1 ? 1 : (wpb > kWarpsPerBlock ? kWarpsPerBlock : wpb);
  return per * (size_t)*warps;
}

size_t plan_bytes(const search_plan &p, int64_t m, int64_t d) {
  size_t tiles = 2 * (size_t)p.Q * (size_t)p.R * sizeof(float);
  size_t lists = (size_t)p.Q * (size_t)p.Kc * (1 + (size_t)p.part_chunks) * (sizeof(float) + sizeof(int));
  size_t queries = (size_t)m * (size_t)d * 2 * sizeof(float) + (size_t)m * (sizeof(float) + sizeof(unsigned));
  size_t outs = (size_t)m * (size_t)p.k * (sizeof(int) + sizeof(double)) + (size_t)m;
  return tiles + lists + queries + outs;
}

/* Tiles from the parameters, halved (references first) until the search fits in free memory. */
ss_status plan_search(ss_ctx *ctx, const ss_knn_opts *o, int64_t n, int64_t m, int64_t d, int Kc, search_plan *p,
                      size_t already_held) {
  p->Kc = Kc;
  p->k = (int)o->k;
  p->Q = o->query_tile < m ? o->query_tile : m;
  p->R = o->ref_tile < n ? o->ref_tile : n;
  p->wchunk = o->warp_chunk > 0 ? o->warp_chunk : kWarpMinChunk;
  p->sfchunk = o->warp_chunk > 0 ? std::max(o->warp_chunk, kSfMinChunk) : kSfChunk;
  size_t free_b = 0, total_b = 0;
  SS_CUDA_TRY(ctx, cudaMemGetInfo(&free_b, &total_b));
  size_t budget = (size_t)(kMemFraction * (double)(free_b + already_held));
  for (;;) {
    p->part_chunks = max_chunks(p->Q, p->R, p->wchunk);
    if (plan_bytes(*p, m, d) <= budget) return SS_OK;
    if (p->R > kMinRefTile) p->R = p->R / 2 > kMinRefTile ? p->R / 2 : kMinRefTile;
    else if (p->Q > kMinQueryTile) p->Q = p->Q / 2 > kMinQueryTile ? p->Q / 2 : kMinQueryTile;
    else return SS_OK; /* the smallest tiles; the allocations report what is missing */
  }
}

ss_status alloc_workspace(ss_ctx *ctx, knn_dev *dv, const search_plan &p, int64_t m, int64_t d) {
  size_t qr = (size_t)p.Q * (size_t)p.R * sizeof(float), lists = (size_t)p.Q * (size_t)p.Kc;
  size_t parts = lists * (size_t)p.part_chunks;
  SS_TRY(ws_ensure(ctx, &dv->q, (size_t)(m * d) * sizeof(float), "KNN queries"));
  SS_TRY(ws_ensure(ctx, &dv->qc, (size_t)(m * d) * sizeof(float), "KNN centred queries"));
  SS_TRY(ws_ensure(ctx, &dv->qn, (size_t)m * sizeof(float), "KNN query norms"));
  SS_TRY(ws_ensure(ctx, &dv->dist_tile[0], qr, "KNN distance tile"));
  SS_TRY(ws_ensure(ctx, &dv->dist_tile[1], qr, "KNN distance tile"));
  SS_TRY(ws_ensure(ctx, &dv->run_v, lists * sizeof(float), "KNN candidate lists"));
  SS_TRY(ws_ensure(ctx, &dv->run_i, lists * sizeof(int), "KNN candidate lists"));
  SS_TRY(ws_ensure(ctx, &dv->part_v, parts * sizeof(float), "KNN partial lists"));
  SS_TRY(ws_ensure(ctx, &dv->part_i, parts * sizeof(int), "KNN partial lists"));
  SS_TRY(ws_ensure(ctx, &dv->out_i, (size_t)m * (size_t)p.k * sizeof(int), "KNN neighbour indices"));
  SS_TRY(ws_ensure(ctx, &dv->out_d, (size_t)m * (size_t)p.k * sizeof(double), "KNN neighbour distances"));
  SS_TRY(ws_ensure(ctx, &dv->cert, (size_t)m, "KNN certificates"));
  SS_TRY(ws_ensure(ctx, &dv->tau, (size_t)m * sizeof(unsigned), "KNN shared thresholds"));
  return SS_OK;
}

struct search_run {
  bool direct; /* one reference tile: the chunks' lists go straight to the finish, one stream */
  bool sf;     /* direct, K' <= kRegList and the warp queue: selection and finish in k_select_finish */
  ss_knn_index *ix;
  knn_dev *dv;
  cudaStream_t s0, s1;
  cublasHandle_t blas;
  search_plan p;
  const float *qc, *qn;
};

ss_status gemm_tile(ss_ctx *ctx, const search_run &r, int64_t q0, int64_t Qt, int64_t r0, int64_t Rt, int b) {
  const float alpha = -2.0f, beta = 0.0f;
  int64_t d = r.ix->d;
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s0, r.dv->sel_done[b], 0));
  SS_CUBLAS_TRY(ctx,
                cublasSgemm(r.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Rt, (int)Qt, (int)d, &alpha, r.dv->ref_c + r0 * d,
                            (int)d, r.qc + q0 * d, (int)d, &beta, (float *)r.dv->dist_tile[b].p, (int)Rt));
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->gemm_done[b], r.s0));
  return SS_OK;
}

/* Selection of one tile by the warp queue on the selection stream (it uses and publishes the queries' shared
 * thresholds), then, unless the search is direct (the chunks' lists are the result), the merge into the running
 * lists. */
ss_status select_tile(ss_ctx *ctx, const search_run &r, int64_t q0, int64_t Qt, int64_t r0, int64_t Rt, int b) {
  tile_args a;
  a.dist = (const float *)r.dv->dist_tile[b].p;
  a.ld = Rt;
  a.qnorm = r.qn + q0;
  a.rnorm = r.dv->ref_norm + r0;
  a.r0 = (int)r0, a.Rt = (int)Rt, a.Kc = r.p.Kc;
  a.pv = (float *)r.dv->part_v.p;
  a.pi = (int *)r.dv->part_i.p;
  plan_chunks(Qt, Rt, r.p.wchunk, &a.nch, &a.chunk);
  int64_t items = Qt * a.nch;
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s1, r.dv->gemm_done[b], 0));
  int wpb;
  size_t smem = warp_smem(a.Kc, &wpb);
  k_select_warp<<<(unsigned)ceil_div(items, wpb), wpb * kWarp, smem, r.s1>>>(a, warp_queue_size(a.Kc), (int)items,
                                                                             r.direct ? nullptr
                                                                                      : (const float *)r.dv->run_v.p,
                                                                             (unsigned *)r.dv->tau.p + q0,
                                                                             (int)r.direct);
  SS_CUDA_TRY_LAUNCH(ctx, "knn selection");
  if (r.direct) return SS_OK;
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->sel_done[b], r.s1));
  size_t msmem = (size_t)r.p.Kc * 3 * (sizeof(float) + sizeof(int));
  k_merge<<<(unsigned)Qt, kThreads, msmem, r.s1>>>((float *)r.dv->run_v.p, (int *)r.dv->run_i.p, a.pv, a.pi, a.nch,
                                                   r.p.Kc);
  SS_CUDA_TRY_LAUNCH(ctx, "knn merge");
  return SS_OK;
}

ss_status fill_lists(ss_ctx *ctx, const search_run &r, int64_t Qt) {
  int64_t count = Qt * r.p.Kc;
  unsigned blocks = (unsigned)(ceil_div(count, kThreads) < 65535 ? ceil_div(count, kThreads) : 65535);
  k_fill<<<blocks, kThreads, 0, r.s1>>>((float *)r.dv->run_v.p, (int *)r.dv->run_i.p, count);
  SS_CUDA_TRY_LAUNCH(ctx, "knn list init");
  return SS_OK;
}

ss_status centre_queries(ss_ctx *ctx, const search_run &r, const float *d_query, int64_t m) {
  return centre_rows(ctx, r.s0, d_query, r.dv->mean, m, r.ix->d, (float *)r.dv->qc.p, (float *)r.dv->qn.p, nullptr,
                     (unsigned *)r.dv->tau.p, "knn query centring");
}

ss_status launch_finish(ss_ctx *ctx, const ss_knn_index *ix, const knn_dev *dv, const float *d_query, int64_t m,
                        const float *cand_v, const int *cand_i, int L, int Kc, int k, unsigned *reset_tau,
                        const finish_out &out, cudaStream_t s) {
  finish_args a = make_finish_args(ix, dv, d_query, cand_v, cand_i, L, Kc, k, reset_tau, out);
  if (Kc <= kFinList) /* every input list is sorted: a warp per query merges them */
    k_finish_warp<<<(unsigned)ceil_div(m, kFinWarps), kFinWarps * kWarp, finish_warp_smem(a.P2), s>>>(a, m);
  else k_finish<<<(unsigned)m, kThreads, finish_smem(a.P1 + 1, a.P2), s>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "knn finish (exact re-rank)");
  return SS_OK;
}

/* The one-tile selection and finish (k_select_finish) of query tile q0 (Qt queries, distance buffer b). */
ss_status launch_select_finish(ss_ctx *ctx, const search_run &r, const float *d_query, int64_t q0, int64_t Qt, int b,
                               const finish_out &out) {
  int64_t n = r.ix->n;
  sf_args a;
  a.t.dist = (const float *)r.dv->dist_tile[b].p;
  a.t.ld = n;
  a.t.qnorm = r.qn + q0;
  a.t.rnorm = r.dv->ref_norm;
  a.t.r0 = 0, a.t.Rt = (int)n, a.t.nch = 1, a.t.chunk = (int)n, a.t.Kc = r.p.Kc;
  a.t.pv = nullptr, a.t.pi = nullptr;
  a.f = make_finish_args(r.ix, r.dv, d_query + q0 * r.ix->d, nullptr, nullptr, r.p.Kc, r.p.Kc, r.p.k, nullptr, out);
  a.m = Qt;
  int parts = next_pow2(ceil_div(n, r.p.sfchunk));
  a.W = parts < kSfWarps ? parts : kSfWarps;
  a.chunk = (int)ceil_div(n, a.W);
  unsigned blocks = (unsigned)ceil_div(Qt, kSfWarps / a.W);
  size_t smem = finish_warp_smem(a.f.P2);
  kSelectFinish[lean_s_class(r.p.k)][lean_pl_class(a.chunk)]<<<blocks, kSfThreads, smem, r.s0>>>(a);

  SS_CUDA_TRY_LAUNCH(ctx, "knn selection and finish");
  return SS_OK;
}

ss_status run_tiles(ss_ctx *ctx, const search_run &r, const float *d_query, int64_t m, int gemm_only,
                    const finish_out &out) {
  int64_t n = r.ix->n, d = r.ix->d;
  int tile = 0;
  for (int64_t q0 = 0; q0 < m; q0 += r.p.Q) {
    int64_t Qt = m - q0 < r.p.Q ? m - q0 : r.p.Q;
    if (!gemm_only && !r.direct) SS_TRY(fill_lists(ctx, r, Qt));
    for (int64_t r0 = 0; r0 < n; r0 += r.p.R, tile++) {
      int64_t Rt = n - r0 < r.p.R ? n - r0 : r.p.R;
      SS_TRY(gemm_tile(ctx, r, q0, Qt, r0, Rt, tile % 2));
      if (!gemm_only && !r.sf) SS_TRY(select_tile(ctx, r, q0, Qt, r0, Rt, tile % 2));
    }
    if (gemm_only) continue;
    finish_out o = {out.idx + q0 * r.p.k, out.dist ? out.dist + q0 * r.p.k : nullptr, out.cert + q0};
    if (r.sf) { /* the single reference tile was buffer (tile - 1) % 2 */
      SS_TRY(launch_select_finish(ctx, r, d_query, q0, Qt, (tile - 1) % 2, o));
    } else if (r.direct) { /* the chunks' lists of the single reference tile */
      int nch, chunk;
      plan_chunks(Qt, n, r.p.wchunk, &nch, &chunk);
      SS_TRY(launch_finish(ctx, r.ix, r.dv, d_query + q0 * d, Qt, (const float *)r.dv->part_v.p,
                           (const int *)r.dv->part_i.p, nch * r.p.Kc, r.p.Kc, r.p.k, nullptr, o, r.s1));
    } else {
      SS_TRY(launch_finish(ctx, r.ix, r.dv, d_query + q0 * d, Qt, (const float *)r.dv->run_v.p,
                           (const int *)r.dv->run_i.p, r.p.Kc, r.p.Kc, r.p.k, nullptr, o, r.s1));
    }
  }
  return SS_OK;
}

/* What a graph of the tiled path bakes in besides the index: the caller's pointers, the workspace
 * (it may be reallocated between calls) and the shape. */
graph_key tiled_key(const search_run &r, const float *d_query, int64_t m, int gemm_only, const finish_out &out) {
  graph_key k;
  memset(&k, 0, sizeof(k));
  const knn_dev *dv = r.dv;
  const void *p[] = {d_query,      out.idx,      out.dist,           out.cert,
                     dv->qc.p,     dv->qn.p,     dv->dist_tile[0].p, dv->dist_tile[1].p,
                     dv->part_v.p, dv->part_i.p, dv->tau.p,          dv->run_v.p};
  static_assert(sizeof(p) / sizeof(p[0]) == sizeof(k.ptr) / sizeof(k.ptr[0]), "graph key pointers");
  memcpy(k.ptr, p, sizeof(p));
  const int64_t v[] = {m, gemm_only, r.p.Q, r.p.R, (int64_t)r.p.Kc * 65536 + r.p.k, r.p.wchunk, r.p.sfchunk};
  static_assert(sizeof(v) / sizeof(v[0]) <= sizeof(k.val) / sizeof(k.val[0]), "graph key values");
  memcpy(k.val, v, sizeof(v));
  return k;
}

} // namespace

ss_status tiled_setup(ss_ctx *ctx) {
  /* the largest finish buffers: K' = SS_KNN_GPU_MAX_CANDIDATES candidates and the scan buffer */
  int pmax = next_pow2(SS_KNN_GPU_MAX_CANDIDATES), scan = finish_scan_size(SS_KNN_GPU_MAX_CANDIDATES);
  SS_CUDA_TRY(ctx, cudaFuncSetAttribute(k_finish, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)finish_smem(pmax + 1, pmax > scan ? pmax : scan)));
  return SS_OK;
}

ss_status centre_rows(ss_ctx *ctx, cudaStream_t s, const float *x, const float *mean, int64_t n, int64_t d, float *xc,
                      float *norm, unsigned *norm_max_bits, unsigned *tau_bits, const char *what) {
  k_center<<<(unsigned)ceil_div(n, kThreads / kWarp), kThreads, 0, s>>>(x, mean, n, d, xc, norm, norm_max_bits,
                                                                        tau_bits);
  SS_CUDA_TRY_LAUNCH(ctx, what);
  return SS_OK;
}

/* The tiled path: centring, SGEMM tiles on the backend stream, selections and the finish on the
 * selection stream, joined back to the backend stream at the end. With one reference tile (one
 * stream) the sequence is replayed as a CUDA graph: on small problems the launches cost more than
 * the kernels. */
ss_status tiled_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                       const finish_out &out, ss_knn_stats *stats) {
  search_run r;
  r.ix = ix;
  r.dv = (knn_dev *)ix->cuda;
  r.s0 = ss_cuda_stream(ix->be);
  r.s1 = r.dv->sel;
  r.blas = ss_cuda_cublas(ix->be);
  r.direct = false;
  r.sf = false;
  SS_CUBLAS_TRY(ctx, cublasSetStream(r.blas, r.s0));
  /* the plan of the previous call when nothing changed: no cudaMemGetInfo on the repeated path */
  plan_key key = {m, o->query_tile, o->ref_tile, o->k, o->warp_chunk};
  if (r.dv->plan_valid && !memcmp(&key, &r.dv->plan_key_, sizeof(key))) {
    r.p = r.dv->plan;
  } else {
    SS_TRY(plan_search(ctx, o, ix->n, m, ix->d, Kc, &r.p, ws_held(r.dv)));
    SS_TRY(alloc_workspace(ctx, r.dv, r.p, m, ix->d));
    r.dv->plan = r.p, r.dv->plan_key_ = key, r.dv->plan_valid = true;
  }
  if (o->gemm_only) { /* benchmark hook: the distance GEMM alone, on the queries as given */
    r.qc = d_query;
    r.qn = nullptr;
    r.s1 = r.s0; /* no selection to overlap: no events */
    auto gemms = [&]() { return run_tiles(ctx, r, d_query, m, 1, out); };
    if (o->gemm_only != SS_KNN_GEMM_ONLY_GRAPH) return gemms();
    bool graphed;
    graph_key gkey = tiled_key(r, d_query, m, 1, out);
    SS_TRY(graph_run(ctx, r.dv->gemm_graph, gkey, r.s0, gemms, &graphed));
    if (stats) stats->graph = graphed;
    return SS_OK;
  }
  r.qc = (const float *)r.dv->qc.p;
  r.qn = (const float *)r.dv->qn.p;
  /* One reference tile: nothing to overlap, so one stream, and no running lists (fill, merge):
   * the finish kernel sorts the chunks' lists itself, up to its candidate limit. */
  r.direct = ix->n <= r.p.R && max_chunks(r.p.Q, r.p.R, r.p.wchunk) * Kc <= SS_KNN_GPU_MAX_CANDIDATES;
  if (r.direct) r.s1 = r.s0;
  /* every strategy selects with the warp queue; with K' <= kRegList and n <= kSfMaxRefs, in k_select_finish */
  r.sf = r.direct && ix->n <= kSfMaxRefs && Kc <= kRegList;
  if (r.s1 != r.s0) {
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->start, r.s0));
    SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s1, r.dv->start, 0));
  }
  auto search = [&]() -> ss_status {
    SS_TRY(centre_queries(ctx, r, d_query, m)); /* also resets the shared thresholds */
    return run_tiles(ctx, r, d_query, m, 0, out);
  };
  bool graphed = false;
  if (r.direct) SS_TRY(graph_run(ctx, r.dv->graph, tiled_key(r, d_query, m, 0, out), r.s0, search, &graphed));
  else SS_TRY(search());
  if (r.s1 != r.s0) {
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->done, r.s1));
    SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s0, r.dv->done, 0));
  }
  if (stats) {
    stats->strategy = SS_KNN_WARP;
    stats->query_tile = r.p.Q;
    stats->ref_tile = r.p.R;
    stats->graph = graphed;
  }
  return SS_OK;
}

} // namespace knn_cuda
