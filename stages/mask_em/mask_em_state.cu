/* mask_em_state.cu — the masked EM problem on the device (CUDA): allocation, label counts, grouping
 * and compaction, the labelling hash, the score and the exact deletion move. */
#include <cub/cub.cuh>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "stages/mask_em/mask_em_cuda.cuh"

namespace ss_em_cuda {
namespace {

constexpr int SUM_THREADS = 1024;               /* single-block deterministic sums */
constexpr int SEG_WARPS = 8;                    /* deletion segments: one warp per segment */
constexpr size_t COST_BUDGET = (size_t)4 << 30; /* bytes of the chunk × K cost matrix */

__host__ __device__ inline double penalty(double pk, double pkl, double log_n, double kp, long long cnt) {
  if (cnt <= 0) return 0.0;
  double kbar = kp / (double)cnt;
  return 2.0 * pk * kbar + pkl * kbar * log_n / 2.0;
}

/* Deterministic block sum (fixed tree) of one double per thread; result valid in thread 0. */
template <int T>
__device__ double block_sum(double v, double *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = T / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  return sh[0];
}

/* ---- labels -------------------------------------------------------------------------------------- */

__global__ void k_iota(int32_t *v, int64_t n) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) v[j] = (int32_t)j;
}

__global__ void k_histogram(const int32_t *labels, int64_t n, unsigned long long *cnt) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) atomicAdd(cnt + labels[j], 1ull);
}

__global__ void k_relabel(int32_t *labels, int64_t n, const int32_t *map) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) labels[j] = map[labels[j]];
}

/* Counts of labels != prev (out[0]) and the order-free labelling hash (out[1]): a wrapping sum of
 * per-point mixes, a deterministic stand-in for the CPU's sequential hash (cycle detection only). */
__global__ void k_diff_hash(const int32_t *labels, const int32_t *prev, int64_t n, unsigned long long *out) {
  __shared__ unsigned long long sc[PT_THREADS], sh[PT_THREADS];
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  unsigned long long c = 0, h = 0;
  if (j < n) {
    c = prev && labels[j] != prev[j];
    h = ss_rng_mix64(((uint64_t)(uint32_t)labels[j] << 32 ^ (uint64_t)j) + SS_RNG_GOLDEN);
  }
  sc[threadIdx.x] = c, sh[threadIdx.x] = h;
  __syncthreads();
  for (int s = PT_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sc[threadIdx.x] += sc[threadIdx.x + s], sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, sc[0]), atomicAdd(out + 1, sh[0]);
}

/* ---- score, label sums, deletion ----------------------------------------------------------------- */

__global__ void k_sum(const double *v, int64_t n, double *out) {
  __shared__ double sh[SUM_THREADS];
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < n; j += SUM_THREADS) s += v[j];
  s = block_sum<SUM_THREADS>(s, sh);
  if (threadIdx.x == 0) *out = s;
}

/* Σ k_p over each cluster's grouped points (one block per cluster). */
__global__ void k_group_kp(const int64_t *group, const int32_t *order, const double *kp, double *out) {
  __shared__ double sh[PT_THREADS];
  int64_t c = blockIdx.x;
  double s = 0.0;
  for (int64_t g = group[c] + threadIdx.x; g < group[c + 1]; g += PT_THREADS) s += kp[order[g]];
  s = block_sum<PT_THREADS>(s, sh);
  if (threadIdx.x == 0) out[c] = s;
}

__global__ void k_del_keys(const int32_t *labels, const int32_t *second, int64_t n, int64_t k, uint32_t *keys) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) keys[j] = (uint32_t)(labels[j] * (k + 1) + second[j] + 1);
}

__global__ void k_key_histogram(const uint32_t *keys, int64_t n, int *cnt) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) atomicAdd(cnt + keys[j], 1);
}

/* One warp per (cluster, second) segment: Σ k_p, Σ (cost2 − cost), points without a finite second. */
__global__ void k_del_segments(const int *seg_off, const int *seg_cnt, int64_t n_seg, const int32_t *order,
                               const double *kp, const double *cost, const double *cost2, const int32_t *second,
                               double *s_kp, double *s_diff, int *s_bad) {
  int64_t warp = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  int64_t n_warps = (int64_t)gridDim.x * blockDim.x / 32;
  for (int64_t s = warp; s < n_seg; s += n_warps) {
    if (seg_cnt[s] == 0) continue;
    double a = 0.0, b = 0.0;
    int bad = 0;
    for (int64_t g = seg_off[s] + lane; g < seg_off[s] + seg_cnt[s]; g += 32) {
      int32_t j = order[g];
      a += kp[j];
      if (second[j] < 0 || !isfinite(cost2[j])) bad++;
      else b += cost2[j] - cost[j];
    }
    for (int o = 16; o > 0; o >>= 1) {
      a += __shfl_down_sync(FULL, a, o);
      b += __shfl_down_sync(FULL, b, o);
      bad += __shfl_down_sync(FULL, bad, o);
    }
    if (lane == 0) s_kp[s] = a, s_diff[s] = b, s_bad[s] = bad;
  }
}

struct penparams {
  double pk, pkl, log_n;
};

/* Per cluster: totals of its row of segments (the labelling's k_p sum and count). */
__global__ void k_del_totals(int64_t k, const int *seg_cnt, const double *s_kp, double *tot_kp, long long *tot_n) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= k) return;
  double a = 0.0;
  long long m = 0;
  for (int64_t t = 0; t <= k; t++) {
    int64_t s = c * (k + 1) + t;
    if (seg_cnt[s]) a += s_kp[s], m += seg_cnt[s];
  }
  tot_kp[c] = a, tot_n[c] = m;
}

__global__ void k_del_delta(int64_t k, const int *seg_cnt, const double *s_kp, const double *s_diff, const int *s_bad,
                            const double *tot_kp, const long long *tot_n, penparams pp, double *delta) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= k) return;
  if (c == 0 || tot_n[c] == 0) {
    delta[c] = INFINITY;
    return;
  }
  double dl = -penalty(pp.pk, pp.pkl, pp.log_n, tot_kp[c], tot_n[c]);
  int finite = 1;
  for (int64_t t = 0; t <= k; t++) {
    int64_t s = c * (k + 1) + t, to = t - 1;
    if (!seg_cnt[s]) continue;
    if (to < 0 || s_bad[s]) {
      finite = 0;
      continue;
    }
    dl += s_diff[s];
    dl += penalty(pp.pk, pp.pkl, pp.log_n, tot_kp[to] + s_kp[s], tot_n[to] + seg_cnt[s]) -
          penalty(pp.pk, pp.pkl, pp.log_n, tot_kp[to], tot_n[to]);
  }
  delta[c] = finite ? dl : INFINITY;
}

__global__ void k_del_apply(const int32_t *order, int64_t g0, int64_t g1, const int32_t *second, const double *cost2,
                            int32_t *labels, double *cost) {
  int64_t g = g0 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (g >= g1) return;
  int32_t j = order[g];
  labels[j] = second[j];
  cost[j] = cost2[j];
}

ss_status ensure_tmp(ss_ctx *ctx, prob &p, size_t bytes) {
  if (bytes <= p.tmp_bytes) return SS_OK;
  SS_TRY(dalloc(ctx, p.tmp, (int64_t)bytes, "masked EM sort workspace"));
  p.tmp_bytes = bytes;
  return SS_OK;
}

/* Points per E-step chunk: the chunk × K cost matrix within COST_BUDGET and an eighth of the free
 * device memory (one chunk keeps the label order for the block part). */
int64_t cost_chunk(int64_t n, int64_t k_cap) {
  size_t free_b = 0, total_b = 0, budget = COST_BUDGET;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b / 8 < budget) budget = free_b / 8;
  int64_t c = (int64_t)(budget / (sizeof(double) * (size_t)k_cap));
  return c < n ? (c > 0 ? c : 1) : (n > 0 ? n : 1);
}

int end_bit(uint64_t max_key) {
  int b = 1;
  while (b < 32 && (max_key >> b)) b++;
  return b;
}

/* Stable sort of the points by `keys` (order = positions), keys ≤ max_key. */
ss_status sort_by(ss_ctx *ctx, prob &p, const uint32_t *keys, uint64_t max_key) {
  size_t bytes = p.tmp_bytes;
  cudaError_t e = cub::DeviceRadixSort::SortPairs(p.tmp, bytes, keys, p.keys_sorted, p.iota, p.order, (int)p.n, 0,
                                                  end_bit(max_key), p.s);
  SS_CUDA_TRY(ctx, e);
  return SS_OK;
}

} // namespace

void prob_free(prob &p) {
  void *ptrs[] = {p.X_own,     p.kp_own,     p.pm_own,     p.u_bits,  p.labels, p.best,  p.second,      p.order,
                  p.iota,      p.prev,       p.cost,       p.cost1,   p.cost2,  p.keys,  p.keys_sorted, p.tmp,
                  p.group,     p.count_d,    p.item_first, p.hist,    p.scal,   p.alive, p.n_u,         p.u_feat,
                  p.map,       p.weight,     p.kp_sum,     p.offset,  p.diag,   p.block, p.Lw,          p.Ww,
                  p.binv,      p.tri,        p.posg,       p.coef,    p.base,   p.C,     p.dsum,        p.items,
                  p.part_stat, p.part_block, p.seg_cnt,    p.seg_off, p.s_bad,  p.s_kp,  p.s_diff,      p.tot_kp,
                  p.delta,     p.tot_n};
  for (void *q : ptrs) cudaFree(q);
  p = prob();
}

/* Capacity for k clusters (per-cluster device arrays are recomputed each M-step: not preserved). */
ss_status reserve(ss_ctx *ctx, prob &p, int64_t k) {
  if (k <= p.k_cap) return SS_OK;
  int64_t cap = p.k_cap ? p.k_cap : 4, d = p.d;
  while (cap < k) cap *= 2;
  p.k_cap = cap;
  p.chunk = cost_chunk(p.n_cap, cap);
  p.item_cap = p.n_cap / MSTEP_CHUNK + cap + 1;
  p.seg_cap = cap * (cap + 1);
  SS_TRY(dalloc(ctx, p.group, cap + 1, "masked EM groups"));
  SS_TRY(dalloc(ctx, p.count_d, cap, "masked EM counts"));
  SS_TRY(dalloc(ctx, p.item_first, cap + 1, "masked EM M-step items"));
  SS_TRY(dalloc(ctx, p.hist, cap, "masked EM counts"));
  SS_TRY(dalloc(ctx, p.alive, cap, "masked EM cluster flags"));
  SS_TRY(dalloc(ctx, p.n_u, cap, "masked EM cluster masks"));
  SS_TRY(dalloc(ctx, p.u_feat, cap * d, "masked EM cluster masks"));
  SS_TRY(dalloc(ctx, p.u_bits, cap * words(d), "masked EM cluster masks"));
  SS_TRY(dalloc(ctx, p.map, cap, "masked EM cluster ids"));
  SS_TRY(dalloc(ctx, p.weight, cap, "masked EM weights"));
  SS_TRY(dalloc(ctx, p.kp_sum, cap, "masked EM penalty sums"));
  SS_TRY(dalloc(ctx, p.offset, cap * d, "masked EM means"));
  SS_TRY(dalloc(ctx, p.diag, cap * d, "masked EM variances"));
  SS_TRY(dalloc(ctx, p.block, cap * d * d, "masked EM covariance blocks"));
  SS_TRY(dalloc(ctx, p.Lw, cap * d * d, "masked EM Cholesky factors"));
  SS_TRY(dalloc(ctx, p.Ww, cap * d * d, "masked EM inverse factors"));
  SS_TRY(dalloc(ctx, p.binv, cap * d * d, "masked EM inverse blocks"));
  SS_TRY(dalloc(ctx, p.tri, cap * tri_size(d), "masked EM packed inverse blocks"));
  SS_TRY(dalloc(ctx, p.posg, cap * d, "masked EM cluster-mask positions"));
  SS_TRY(dalloc(ctx, p.coef, cap * 3 * d, "masked EM E-step coefficients"));
  SS_TRY(dalloc(ctx, p.base, cap, "masked EM cluster constants"));
  SS_TRY(dalloc(ctx, p.C, p.chunk * cap, "masked EM cost matrix (a chunk of points x clusters)"));
  SS_TRY(dalloc(ctx, p.items, p.item_cap, "masked EM M-step items"));
  SS_TRY(dalloc(ctx, p.part_stat, p.item_cap * (4 * d + 1), "masked EM M-step partial sums"));
  SS_TRY(dalloc(ctx, p.part_block, p.item_cap * d * d, "masked EM M-step partial blocks"));
  SS_TRY(dalloc(ctx, p.seg_cnt, p.seg_cap, "masked EM deletion segments"));
  SS_TRY(dalloc(ctx, p.seg_off, p.seg_cap, "masked EM deletion segments"));
  SS_TRY(dalloc(ctx, p.s_bad, p.seg_cap, "masked EM deletion segments"));
  SS_TRY(dalloc(ctx, p.s_kp, p.seg_cap, "masked EM deletion segments"));
  SS_TRY(dalloc(ctx, p.s_diff, p.seg_cap, "masked EM deletion segments"));
  SS_TRY(dalloc(ctx, p.tot_kp, cap, "masked EM deletion totals"));
  SS_TRY(dalloc(ctx, p.tot_n, cap, "masked EM deletion totals"));
  SS_TRY(dalloc(ctx, p.delta, cap, "masked EM deletion scores"));
  size_t b1 = 0, b2 = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, b1, p.seg_cnt, p.seg_off, (int)p.seg_cap, p.s);
  cub::DeviceRadixSort::SortPairs(nullptr, b2, p.keys, p.keys_sorted, p.iota, p.order, (int)p.n_cap, 0, 32, p.s);
  SS_TRY(ensure_tmp(ctx, p, b1 > b2 ? b1 : b2));
  p.count_h.assign(cap, 0);
  p.group_h.assign(cap + 1, 0);
  p.alive_h.assign(cap, 0);
  p.weight_h.assign(cap, 0.0);
  return SS_OK;
}

ss_status set_k(ss_ctx *ctx, prob &p, int64_t k) {
  SS_TRY(reserve(ctx, p, k));
  for (int64_t c = p.k; c < k; c++) p.count_h[c] = 0, p.alive_h[c] = 0;
  p.k = k;
  return SS_OK;
}

ss_status prob_init(ss_ctx *ctx, prob &p, const ss_backend *be, const ss_mask_em_opts *o, int64_t n_cap, int64_t d,
                    int64_t k_cap, bool own_rows) {
  p = prob();
  p.be = be, p.o = o, p.s = ss_cuda_stream(be), p.blas = ss_cuda_cublas(be);
  p.n_cap = n_cap, p.n = n_cap, p.d = d;
  SS_TRY(dalloc(ctx, p.labels, n_cap, "masked EM labels"));
  SS_TRY(dalloc(ctx, p.best, n_cap, "masked EM best clusters"));
  SS_TRY(dalloc(ctx, p.second, n_cap, "masked EM second clusters"));
  SS_TRY(dalloc(ctx, p.order, n_cap, "masked EM point order"));
  SS_TRY(dalloc(ctx, p.iota, n_cap, "masked EM point ids"));
  SS_TRY(dalloc(ctx, p.prev, n_cap, "masked EM previous labels"));
  SS_TRY(dalloc(ctx, p.cost, n_cap, "masked EM costs"));
  SS_TRY(dalloc(ctx, p.cost1, n_cap, "masked EM best costs"));
  SS_TRY(dalloc(ctx, p.cost2, n_cap, "masked EM second costs"));
  SS_TRY(dalloc(ctx, p.keys, n_cap, "masked EM sort keys"));
  SS_TRY(dalloc(ctx, p.keys_sorted, n_cap, "masked EM sort keys"));
  SS_TRY(dalloc(ctx, p.scal, 4, "masked EM scalars"));
  SS_TRY(dalloc(ctx, p.dsum, 1, "masked EM scalars"));
  if (own_rows) {
    SS_TRY(dalloc(ctx, p.X_own, n_cap * 4 * d, "masked EM sub-problem rows"));
    SS_TRY(dalloc(ctx, p.kp_own, n_cap, "masked EM sub-problem rows"));
    SS_TRY(dalloc(ctx, p.pm_own, n_cap * words(d), "masked EM sub-problem rows"));
    p.X = p.X_own, p.kp = p.kp_own, p.pm = p.pm_own;
  }
  k_iota<<<blocks(n_cap, PT_THREADS), PT_THREADS, 0, p.s>>>(p.iota, n_cap);
  SS_CUDA_TRY_LAUNCH(ctx, "iota");
  return set_k(ctx, p, k_cap);
}

/* Counts of the labels (device histogram → host); returns via p.count_h. */
ss_status counts(ss_ctx *ctx, prob &p) {
  SS_CUDA_TRY(ctx, cudaMemsetAsync(p.hist, 0, sizeof(unsigned long long) * (size_t)p.k, p.s));
  k_histogram<<<blocks(p.n, PT_THREADS), PT_THREADS, 0, p.s>>>(p.labels, p.n, p.hist);
  SS_CUDA_TRY_LAUNCH(ctx, "histogram");
  SS_CUDA_TRY(ctx,
              cudaMemcpyAsync(p.count_h.data(), p.hist, sizeof(int64_t) * (size_t)p.k, cudaMemcpyDeviceToHost, p.s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  return SS_OK;
}

/* Group by label: counts (host), offsets (host and device), order. */
ss_status group(ss_ctx *ctx, prob &p) {
  SS_TRY(counts(ctx, p));
  p.group_h[0] = 0;
  for (int64_t c = 0; c < p.k; c++) p.group_h[c + 1] = p.group_h[c] + p.count_h[c];
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.group, p.group_h.data(), sizeof(int64_t) * (size_t)(p.k + 1),
                                   cudaMemcpyHostToDevice, p.s));
  return sort_by(ctx, p, (const uint32_t *)p.labels, (uint64_t)(p.k - 1));
}

void compact(prob &p, ss_ctx *ctx, ss_status *st) {
  *st = counts(ctx, p);
  if (*st != SS_OK) return;
  std::vector<int32_t> id((size_t)p.k);
  int32_t next = 1;
  id[0] = 0;
  for (int64_t c = 1; c < p.k; c++) id[c] = p.count_h[c] > 0 ? next++ : -1;
  cudaError_t e = cudaMemcpyAsync(p.map, id.data(), sizeof(int32_t) * (size_t)p.k, cudaMemcpyHostToDevice, p.s);
  if (e == cudaSuccess) {
    k_relabel<<<blocks(p.n, PT_THREADS), PT_THREADS, 0, p.s>>>(p.labels, p.n, p.map);
    e = cudaStreamSynchronize(p.s);
  }
  if (e != cudaSuccess) *st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: masked EM compaction: %s", cudaGetErrorString(e));
  p.k = next;
  for (int64_t c = 0; c < next; c++) p.alive_h[c] = 0;
}

/* Changed labels against prev (or 0 when prev is null) and the labelling hash. */
ss_status diff_hash(ss_ctx *ctx, prob &p, const int32_t *prev, int64_t *changed, uint64_t *hash) {
  unsigned long long out[2] = {0, 0};
  SS_CUDA_TRY(ctx, cudaMemsetAsync(p.scal, 0, sizeof(out), p.s));
  k_diff_hash<<<blocks(p.n, PT_THREADS), PT_THREADS, 0, p.s>>>(p.labels, prev, p.n, p.scal);
  SS_CUDA_TRY_LAUNCH(ctx, "labelling hash");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(out, p.scal, sizeof(out), cudaMemcpyDeviceToHost, p.s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  if (changed) *changed = (int64_t)out[0];
  if (hash) *hash = out[1] + ss_rng_mix64((uint64_t)p.k + SS_RNG_GOLDEN);
  return SS_OK;
}

/* Score = Σ cost + Σ penalties of the labelling; *live = non-empty Gaussian clusters + 1. */
ss_status score(ss_ctx *ctx, prob &p, double *sc, int64_t *live) {
  SS_TRY(group(ctx, p));
  k_group_kp<<<(unsigned)p.k, PT_THREADS, 0, p.s>>>(p.group, p.order, p.kp, p.kp_sum);
  k_sum<<<1, SUM_THREADS, 0, p.s>>>(p.cost, p.n, p.dsum);
  SS_CUDA_TRY_LAUNCH(ctx, "score");
  std::vector<double> kp((size_t)p.k);
  double total = 0;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(kp.data(), p.kp_sum, sizeof(double) * (size_t)p.k, cudaMemcpyDeviceToHost, p.s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(&total, p.dsum, sizeof(double), cudaMemcpyDeviceToHost, p.s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  int64_t l = 1;
  for (int64_t c = 0; c < p.k; c++) {
    total += penalty(p.o->penalty_k, p.o->penalty_k_log_n, p.log_n, kp[c], p.count_h[c]);
    if (c > 0) l += p.count_h[c] > 0;
  }
  *sc = total;
  if (live) *live = l;
  return SS_OK;
}

/* Exact deletion (after a C-step), as mask_em_state.c: score change of moving each Gaussian
 * cluster's points to their second best; the best improving candidates are applied. */
ss_status delete_step(ss_ctx *ctx, prob &p, int64_t *n_deleted) {
  cudaStream_t s = p.s;
  int64_t k = p.k, n_seg = k * (k + 1);
  *n_deleted = 0;
  k_del_keys<<<blocks(p.n, PT_THREADS), PT_THREADS, 0, s>>>(p.labels, p.second, p.n, k, p.keys);
  SS_CUDA_TRY(ctx, cudaMemsetAsync(p.seg_cnt, 0, sizeof(int) * (size_t)n_seg, s));
  k_key_histogram<<<blocks(p.n, PT_THREADS), PT_THREADS, 0, s>>>(p.keys, p.n, p.seg_cnt);
  SS_CUDA_TRY_LAUNCH(ctx, "deletion keys");
  size_t bytes = p.tmp_bytes;
  SS_CUDA_TRY(ctx, cub::DeviceScan::ExclusiveSum(p.tmp, bytes, p.seg_cnt, p.seg_off, (int)n_seg, s));
  SS_TRY(sort_by(ctx, p, p.keys, (uint64_t)(n_seg - 1)));
  unsigned nb = blocks(n_seg * 32, SEG_WARPS * 32);
  if (nb > 65535u * 16u) nb = 65535u * 16u;
  k_del_segments<<<nb, SEG_WARPS * 32, 0, s>>>(p.seg_off, p.seg_cnt, n_seg, p.order, p.kp, p.cost, p.cost2, p.second,
                                               p.s_kp, p.s_diff, p.s_bad);
  k_del_totals<<<blocks(k, PT_THREADS), PT_THREADS, 0, s>>>(k, p.seg_cnt, p.s_kp, p.tot_kp, p.tot_n);
  penparams pp = {p.o->penalty_k, p.o->penalty_k_log_n, p.log_n};
  k_del_delta<<<blocks(k, PT_THREADS), PT_THREADS, 0, s>>>(k, p.seg_cnt, p.s_kp, p.s_diff, p.s_bad, p.tot_kp, p.tot_n,
                                                           pp, p.delta);
  SS_CUDA_TRY_LAUNCH(ctx, "deletion");
  std::vector<double> delta((size_t)k);
  std::vector<int> off((size_t)n_seg), cnt;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(delta.data(), p.delta, sizeof(double) * (size_t)k, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(off.data(), p.seg_off, sizeof(int) * (size_t)n_seg, cudaMemcpyDeviceToHost, s));
  bool many = p.o->max_deletions_per_iteration > 1;
  if (many) {
    cnt.resize((size_t)n_seg);
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(cnt.data(), p.seg_cnt, sizeof(int) * (size_t)n_seg, cudaMemcpyDeviceToHost, s));
  }
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  /* candidates best first; with several deletions, skip any touching a frozen cluster (as the CPU) */
  std::vector<int8_t> frozen((size_t)k, 0);
  int64_t done = 0;
  while (done < p.o->max_deletions_per_iteration) {
    int64_t cb = -1;
    for (int64_t c = 1; c < k; c++)
      if (!frozen[c] && delta[c] < 0.0 && (cb < 0 || delta[c] < delta[cb])) cb = c;
    if (cb < 0) break;
    bool ok = true;
    if (many)
      for (int64_t t = 1; t <= k; t++) ok = ok && !(cnt[cb * (k + 1) + t] > 0 && frozen[t - 1]);
    frozen[cb] = 1;
    if (!ok) continue;
    int64_t g0 = off[cb * (k + 1)], g1 = cb + 1 < k ? off[(cb + 1) * (k + 1)] : p.n;
    if (g1 > g0)
      k_del_apply<<<blocks(g1 - g0, PT_THREADS), PT_THREADS, 0, s>>>(p.order, g0, g1, p.second, p.cost2, p.labels,
                                                                     p.cost);
    SS_CUDA_TRY_LAUNCH(ctx, "deletion apply");
    if (many)
      for (int64_t t = 1; t <= k; t++)
        if (cnt[cb * (k + 1) + t] > 0) frozen[t - 1] = 1;
    done++;
  }
  *n_deleted = done;
  return SS_OK;
}

} // namespace ss_em_cuda
