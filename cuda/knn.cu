/* knn.cu — KNN on the GPU: centred references resident on the device; per (query tile, reference
 * tile) a cuBLAS SGEMM writes −2 q·r, a selection kernel (k-pass minimum, bitonic sort or warp
 * queue) adds the norms and keeps each chunk's K' best, a merge kernel folds the chunks into the
 * running K' list of each query; after the last reference tile the candidates are re-ranked by the
 * exact distance and certified (src/knn.h). GEMMs run on the backend stream and selections on a
 * second stream, double-buffered, so the memory-bound selection overlaps the next GEMM. `auto`
 * times the three strategies on the first tile of the first search of each (GPU, n class, K' class)
 * and remembers the fastest for the life of the process. */
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "cuda/cuda_util.cuh"
#include "src/knn.h"
#include "src/log.h"

namespace {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;           /* block size of kmin, bitonic, merge, re-rank, centring */
constexpr int kChunk = 4096;            /* references per block for kmin / bitonic (shared memory) */
constexpr int kWarpBuf = 64;            /* warp queue: pending insertions before a merge */
constexpr int kWarpsPerBlock = 4;       /* warp queue: independent warps per block */
constexpr int kWarpMinChunk = 1024;     /* warp queue: fewest references per warp */
constexpr int64_t kTargetWarps = 16384; /* warp queue: work items per tile that fill an H100 */
constexpr int64_t kMinRefTile = 4096, kMinQueryTile = 128;
constexpr double kMemFraction = 0.8;    /* of the free device memory a search may take */
constexpr int kNoIndex = INT_MAX;       /* padding entries: (+inf, kNoIndex) sort last */
constexpr int kCalibRepeats = 2;        /* auto: runs per strategy; the fastest counts */
constexpr int kCalibSlots = 64;
constexpr size_t kSmemDefault = 48 * 1024;

/* A grow-only device buffer kept by the index between searches. */
struct ws_buf {
  void *p = nullptr;
  size_t bytes = 0;
};

struct knn_dev {
  float *ref = nullptr, *ref_c = nullptr, *ref_norm = nullptr, *mean = nullptr;
  cudaStream_t sel = nullptr;
  cudaEvent_t gemm_done[2] = {nullptr, nullptr}, sel_done[2] = {nullptr, nullptr}, t0 = nullptr, t1 = nullptr;
  ws_buf q, qc, qn, dist_tile[2], run_v, run_i, part_v, part_i, out_i, out_d, cert;
};

ss_status ws_ensure(ss_ctx *ctx, ws_buf *b, size_t bytes, const char *what) {
  if (bytes <= b->bytes) return SS_OK;
  cudaFree(b->p);
  b->p = nullptr;
  b->bytes = 0;
  SS_TRY(ss_cuda_malloc(ctx, &b->p, bytes, what));
  b->bytes = bytes;
  return SS_OK;
}

template <typename V>
__device__ __forceinline__ bool kv_less(V av, int ai, V bv, int bi) {
  return av < bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void warp_argmin(float &v, int &i) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(kFull, v, o);
    int oi = __shfl_xor_sync(kFull, i, o);
    if (kv_less(ov, oi, v, i)) v = ov, i = oi;
  }
}

/* In-place ascending bitonic sort of P (a power of two) pairs by (value, index), by `nthreads`
 * cooperating threads of a warp (kWarpOnly) or of the block. */
template <typename V, bool kWarpOnly>
__device__ void bitonic_sort(V *sv, int *si, int P, int tid, int nthreads) {
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = tid; t < P / 2; t += nthreads) {
        int i = ((t & ~(j - 1)) << 1) | (t & (j - 1)), l = i + j;
        bool up = (i & k) == 0;
        V vi = sv[i], vl = sv[l];
        int ii = si[i], il = si[l];
        if (kv_less(vl, il, vi, ii) == up) sv[i] = vl, sv[l] = vi, si[i] = il, si[l] = ii;
      }
      if (kWarpOnly) __syncwarp();
      else __syncthreads();
    }
}

/* Centre rows by the mean and take their squared norms; one warp per row. */
__global__ void k_center(const float *x, const float *mean, int64_t n, int64_t d, float *xc, float *norm,
                         unsigned *norm_max_bits) {
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
  float *pv;          /* (Qt × nch) × Kc partial lists */
  int *pi;
};

__device__ __forceinline__ float tile_value(const tile_args &a, int qq, float qn, int r) {
  return fmaxf(qn + a.rnorm[r] + a.dist[(int64_t)qq * a.ld + r], 0.0f);
}

/* k-pass minimum: the chunk in shared memory, K' block-wide minimum searches, each for the
 * smallest (value, position) after the previous one. One block per (query, chunk). */
__global__ void k_select_kmin(tile_args a) {
  extern __shared__ float sm_f[];
  __shared__ float red_v[kThreads / kWarp];
  __shared__ int red_i[kThreads / kWarp];
  __shared__ float last_v;
  __shared__ int last_i;
  int item = blockIdx.x, qq = item / a.nch, c = item % a.nch, begin = c * a.chunk;
  int len = min(a.chunk, a.Rt - begin), lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  float qn = a.qnorm[qq];
  for (int t = threadIdx.x; t < len; t += blockDim.x) sm_f[t] = tile_value(a, qq, qn, begin + t);
  if (threadIdx.x == 0) last_v = -INFINITY, last_i = -1;
  __syncthreads();
  float *outv = a.pv + (int64_t)item * a.Kc;
  int *outi = a.pi + (int64_t)item * a.Kc;
  for (int p = 0; p < a.Kc; p++) {
    float lv = last_v, bv = INFINITY;
    int li = last_i, bi = kNoIndex;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      float v = sm_f[t];
      if (kv_less(lv, li, v, t) && kv_less(v, t, bv, bi)) bv = v, bi = t;
    }
    warp_argmin(bv, bi);
    if (lane == 0) red_v[w] = bv, red_i[w] = bi;
    __syncthreads();
    if (w == 0) {
      bool have = lane < (int)(blockDim.x / kWarp);
      bv = have ? red_v[lane] : INFINITY;
      bi = have ? red_i[lane] : kNoIndex;
      warp_argmin(bv, bi);
      if (lane == 0) {
        outv[p] = bv;
        outi[p] = bi == kNoIndex ? kNoIndex : a.r0 + begin + bi;
        last_v = bv, last_i = bi;
      }
    }
    __syncthreads();
  }
}

/* Bitonic: the chunk as (value, index) pairs in shared memory, fully sorted, the first K' kept. */
__global__ void k_select_bitonic(tile_args a, int P) {
  extern __shared__ unsigned char sm_b[];
  float *sv = (float *)sm_b;
  int *si = (int *)(sv + P);
  int item = blockIdx.x, qq = item / a.nch, c = item % a.nch, begin = c * a.chunk;
  int len = min(a.chunk, a.Rt - begin);
  float qn = a.qnorm[qq];
  for (int t = threadIdx.x; t < P; t += blockDim.x) {
    bool in = t < len;
    sv[t] = in ? tile_value(a, qq, qn, begin + t) : INFINITY;
    si[t] = in ? a.r0 + begin + t : kNoIndex;
  }
  __syncthreads();
  bitonic_sort<float, false>(sv, si, P, threadIdx.x, blockDim.x);
  for (int t = threadIdx.x; t < a.Kc; t += blockDim.x) {
    a.pv[(int64_t)item * a.Kc + t] = sv[t];
    a.pi[(int64_t)item * a.Kc + t] = si[t];
  }
}

/* Warp queue: sort the list (first Kc) and the nb pending entries behind it; keep the first Kc. */
__device__ void warp_queue_merge(float *sv, int *si, int Kc, int nb, int P, int lane) {
  __syncwarp();
  for (int t = Kc + nb + lane; t < P; t += kWarp) sv[t] = INFINITY, si[t] = kNoIndex;
  __syncwarp();
  bitonic_sort<float, true>(sv, si, P, lane, kWarp);
}

/* Warp queue: each warp streams its chunk once; an element enters the pending buffer only when it
 * beats the warp's threshold (its K'-th best so far, or the query's running K'-th from earlier
 * reference tiles); a full buffer is merged into the sorted list. After the first few hundred
 * elements almost everything is rejected by one comparison, so the kernel runs at memory speed. */
__global__ void k_select_warp(tile_args a, int P, int n_items, const float *run_v) {
  extern __shared__ unsigned char sm_w[];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int item = blockIdx.x * (blockDim.x / kWarp) + w;
  if (item >= n_items) return;
  float *sv = (float *)(sm_w + (size_t)w * P * (sizeof(float) + sizeof(int)));
  int *si = (int *)(sv + P);
  int qq = item / a.nch, c = item % a.nch, begin = c * a.chunk, len = min(a.chunk, a.Rt - begin);
  float qn = a.qnorm[qq], tau = run_v[(int64_t)qq * a.Kc + a.Kc - 1];
  for (int t = lane; t < a.Kc; t += kWarp) sv[t] = INFINITY, si[t] = kNoIndex;
  int nb = 0;
  for (int base = 0; base < len; base += kWarp) {
    int t = base + lane;
    float v = t < len ? tile_value(a, qq, qn, begin + t) : INFINITY;
    bool pass = t < len && v < tau; /* v == tau loses: tau's index is lower (earlier reference) */
    unsigned mask = __ballot_sync(kFull, pass);
    if (!mask) continue;
    int cnt = __popc(mask);
    if (nb + cnt > kWarpBuf) {
      warp_queue_merge(sv, si, a.Kc, nb, P, lane);
      nb = 0;
      tau = fminf(tau, sv[a.Kc - 1]);
    }
    if (pass) {
      int pos = a.Kc + nb + __popc(mask & ((1u << lane) - 1u));
      sv[pos] = v;
      si[pos] = a.r0 + begin + t;
    }
    nb += cnt;
  }
  if (nb) warp_queue_merge(sv, si, a.Kc, nb, P, lane);
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
  for (int t = threadIdx.x; t < Kc; t += blockDim.x) av[t] = run_v[(int64_t)qq * Kc + t], ai[t] = run_i[(int64_t)qq * Kc + t];
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
  for (int t = threadIdx.x; t < Kc; t += blockDim.x) run_v[(int64_t)qq * Kc + t] = av[t], run_i[(int64_t)qq * Kc + t] = ai[t];
}

/* Exact re-rank of each query's K' candidates, the top k out, and the certificate. */
__global__ void k_rerank(const float *q, const float *ref, int64_t d, int64_t n, const float *qnorm,
                         const float *run_v, const int *run_i, int Kc, int k, int P, double ref_norm_max,
                         int *out_i, double *out_d, uint8_t *cert) {
  extern __shared__ unsigned char sm_r[];
  double *sd = (double *)sm_r;
  int *si = (int *)(sd + P);
  int qq = blockIdx.x;
  const float *qrow = q + (int64_t)qq * d;
  for (int t = threadIdx.x; t < P; t += blockDim.x) {
    int r = t < Kc ? run_i[(int64_t)qq * Kc + t] : kNoIndex;
    sd[t] = r == kNoIndex ? (double)INFINITY : ss_knn_exact_dist(qrow, ref + (int64_t)r * d, d);
    si[t] = r;
  }
  __syncthreads();
  bitonic_sort<double, false>(sd, si, P, threadIdx.x, blockDim.x);
  for (int t = threadIdx.x; t < k; t += blockDim.x) out_i[(int64_t)qq * k + t] = si[t], out_d[(int64_t)qq * k + t] = sd[t];
  if (threadIdx.x == 0) {
    double approx_last = run_v[(int64_t)qq * Kc + Kc - 1];
    double bound = ss_knn_error_bound(d, sqrt((double)qnorm[qq]), ref_norm_max);
    cert[qq] = (int64_t)Kc >= n || approx_last - bound > sd[k - 1];
  }
}

int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Chunks per reference tile: shared-memory strategies use fixed chunks; the warp queue splits a
 * row only as much as it takes to give the GPU enough warps. */
void plan_chunks(int strategy, int64_t Qt, int64_t Rt, int *nch, int *chunk) {
  if (strategy == SS_KNN_WARP) {
    int64_t want = ceil_div(kTargetWarps, Qt), most = Rt / kWarpMinChunk > 1 ? Rt / kWarpMinChunk : 1;
    int64_t c = want < most ? want : most;
    *chunk = (int)ceil_div(Rt, c);
  } else {
    *chunk = kChunk;
  }
  *nch = (int)ceil_div(Rt, *chunk);
}

int64_t max_chunks(int64_t Q, int64_t R) {
  int nk, ck, nw, cw;
  plan_chunks(SS_KNN_KMIN, Q, R, &nk, &ck);
  plan_chunks(SS_KNN_WARP, Q, R, &nw, &cw);
  /* a shorter last query tile can ask the warp queue for more chunks */
  int64_t warp_most = R / kWarpMinChunk > 1 ? R / kWarpMinChunk : 1;
  return nk > warp_most ? nk : (warp_most > nw ? warp_most : nw);
}

int warp_queue_size(int Kc) { return next_pow2(Kc + kWarpBuf); }

size_t warp_smem(int Kc, int *warps) {
  size_t per = (size_t)warp_queue_size(Kc) * (sizeof(float) + sizeof(int));
  int wpb = (int)(kSmemDefault / per);
  *warps = wpb < 1 ? 1 : (wpb > kWarpsPerBlock ? kWarpsPerBlock : wpb);
  return per * (size_t)*warps;
}

struct search_plan {
  int64_t Q, R;
  int Kc, k;
  int64_t part_chunks;
};

size_t plan_bytes(const search_plan &p, int64_t m, int64_t d) {
  size_t tiles = 2 * (size_t)p.Q * (size_t)p.R * sizeof(float);
  size_t lists = (size_t)p.Q * (size_t)p.Kc * (1 + (size_t)p.part_chunks) * (sizeof(float) + sizeof(int));
  size_t queries = (size_t)m * (size_t)d * 2 * sizeof(float) + (size_t)m * sizeof(float);
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
  size_t free_b = 0, total_b = 0;
  SS_CUDA_TRY(ctx, cudaMemGetInfo(&free_b, &total_b));
  size_t budget = (size_t)(kMemFraction * (double)(free_b + already_held));
  for (;;) {
    p->part_chunks = max_chunks(p->Q, p->R);
    if (plan_bytes(*p, m, d) <= budget) return SS_OK;
    if (p->R > kMinRefTile) p->R = p->R / 2 > kMinRefTile ? p->R / 2 : kMinRefTile;
    else if (p->Q > kMinQueryTile) p->Q = p->Q / 2 > kMinQueryTile ? p->Q / 2 : kMinQueryTile;
    else return SS_OK; /* the smallest tiles; the allocations report what is missing */
  }
}

size_t ws_held(const knn_dev *dv) {
  const ws_buf *b[] = {&dv->q, &dv->qc, &dv->qn, &dv->dist_tile[0], &dv->dist_tile[1], &dv->run_v, &dv->run_i,
                       &dv->part_v, &dv->part_i, &dv->out_i, &dv->out_d, &dv->cert};
  size_t s = 0;
  for (const ws_buf *x : b) s += x->bytes;
  return s;
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
  return SS_OK;
}

struct search_run {
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
  SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s0, r.dv->sel_done[b], 0));
  SS_CUBLAS_TRY(ctx, cublasSgemm(r.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Rt, (int)Qt, (int)d, &alpha,
                                 r.dv->ref_c + r0 * d, (int)d, r.qc + q0 * d, (int)d, &beta,
                                 (float *)r.dv->dist_tile[b].p, (int)Rt));
  SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->gemm_done[b], r.s0));
  return SS_OK;
}

/* Selection of one tile on the selection stream, then the merge into the running lists. */
ss_status select_tile(ss_ctx *ctx, const search_run &r, int strategy, int64_t q0, int64_t Qt, int64_t r0, int64_t Rt,
                      int b) {
  tile_args a;
  a.dist = (const float *)r.dv->dist_tile[b].p;
  a.ld = Rt;
  a.qnorm = r.qn + q0;
  a.rnorm = r.dv->ref_norm + r0;
  a.r0 = (int)r0, a.Rt = (int)Rt, a.Kc = r.p.Kc;
  a.pv = (float *)r.dv->part_v.p;
  a.pi = (int *)r.dv->part_i.p;
  plan_chunks(strategy, Qt, Rt, &a.nch, &a.chunk);
  int64_t items = Qt * a.nch;
  SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s1, r.dv->gemm_done[b], 0));
  if (strategy == SS_KNN_KMIN) {
    k_select_kmin<<<(unsigned)items, kThreads, (size_t)a.chunk * sizeof(float), r.s1>>>(a);
  } else if (strategy == SS_KNN_BITONIC) {
    int P = next_pow2(a.chunk > a.Kc ? a.chunk : a.Kc);
    k_select_bitonic<<<(unsigned)items, kThreads, (size_t)P * (sizeof(float) + sizeof(int)), r.s1>>>(a, P);
  } else {
    int wpb;
    size_t smem = warp_smem(a.Kc, &wpb);
    k_select_warp<<<(unsigned)ceil_div(items, wpb), wpb * kWarp, smem, r.s1>>>(a, warp_queue_size(a.Kc), (int)items,
                                                                               (const float *)r.dv->run_v.p);
  }
  SS_CUDA_TRY_LAUNCH(ctx, "knn selection");
  SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->sel_done[b], r.s1));
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

/* ---- auto: measured choice, cached per (GPU, n class, K' class) ---------------------------------- */

struct calib_slot {
  int device, n_class, kc_class, strategy;
};
std::mutex g_calib_mu;
calib_slot g_calib[kCalibSlots];
int g_ncalib = 0;

int log2_floor(int64_t x) {
  int l = 0;
  while (x > 1) x >>= 1, l++;
  return l;
}

ss_status time_strategy(ss_ctx *ctx, const search_run &r, int strategy, int64_t Qt, int64_t Rt, float *ms) {
  *ms = INFINITY;
  for (int rep = 0; rep < kCalibRepeats; rep++) {
    SS_TRY(fill_lists(ctx, r, Qt));
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->t0, r.s1));
    SS_TRY(select_tile(ctx, r, strategy, 0, Qt, 0, Rt, 0));
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->t1, r.s1));
    SS_CUDA_TRY(ctx, cudaEventSynchronize(r.dv->t1));
    float t;
    SS_CUDA_TRY(ctx, cudaEventElapsedTime(&t, r.dv->t0, r.dv->t1));
    if (t < *ms) *ms = t;
  }
  return SS_OK;
}

ss_status resolve_strategy(ss_ctx *ctx, const search_run &r, int requested, int64_t m, int *out) {
  *out = requested;
  if (requested != SS_KNN_AUTO) return SS_OK;
  int device = ss_cuda_of(r.ix->be)->device, nc = log2_floor(r.ix->n), kc = log2_floor(next_pow2(r.p.Kc));
  {
    std::lock_guard<std::mutex> lock(g_calib_mu);
    for (int i = 0; i < g_ncalib; i++)
      if (g_calib[i].device == device && g_calib[i].n_class == nc && g_calib[i].kc_class == kc) {
        *out = g_calib[i].strategy;
        return SS_OK;
      }
  }
  int64_t Qt = r.p.Q < m ? r.p.Q : m, Rt = r.p.R < r.ix->n ? r.p.R : r.ix->n;
  SS_TRY(gemm_tile(ctx, r, 0, Qt, 0, Rt, 0));
  const int cand[] = {SS_KNN_KMIN, SS_KNN_BITONIC, SS_KNN_WARP};
  float ms[3];
  int best = 0;
  for (int i = 0; i < 3; i++) {
    SS_TRY(time_strategy(ctx, r, cand[i], Qt, Rt, &ms[i]));
    if (ms[i] < ms[best]) best = i;
  }
  *out = cand[best];
  ss_log_info(ctx, "knn: auto k-selection on GPU %d for n ~ 2^%d, %d candidates: %s (kmin %.3f ms, bitonic %.3f ms, "
              "warp %.3f ms on a %lld x %lld tile)", device, nc, r.p.Kc, ss_knn_strategy_name(*out), ms[0], ms[1],
              ms[2], (long long)Qt, (long long)Rt);
  std::lock_guard<std::mutex> lock(g_calib_mu);
  if (g_ncalib < kCalibSlots) g_calib[g_ncalib++] = calib_slot{device, nc, kc, *out};
  return SS_OK;
}

ss_status upload_queries(ss_ctx *ctx, const search_run &r, const float *query, int64_t m) {
  int64_t d = r.ix->d;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(r.dv->q.p, query, (size_t)(m * d) * sizeof(float), cudaMemcpyHostToDevice, r.s0));
  unsigned blocks = (unsigned)ceil_div(m, kThreads / kWarp);
  k_center<<<blocks, kThreads, 0, r.s0>>>((const float *)r.dv->q.p, r.dv->mean, m, d, (float *)r.dv->qc.p,
                                          (float *)r.dv->qn.p, nullptr);
  SS_CUDA_TRY_LAUNCH(ctx, "knn query centring");
  return SS_OK;
}

ss_status run_tiles(ss_ctx *ctx, const search_run &r, int strategy, int64_t m, int gemm_only) {
  int64_t n = r.ix->n, d = r.ix->d;
  int tile = 0;
  for (int64_t q0 = 0; q0 < m; q0 += r.p.Q) {
    int64_t Qt = m - q0 < r.p.Q ? m - q0 : r.p.Q;
    if (!gemm_only) SS_TRY(fill_lists(ctx, r, Qt));
    for (int64_t r0 = 0; r0 < n; r0 += r.p.R, tile++) {
      int64_t Rt = n - r0 < r.p.R ? n - r0 : r.p.R;
      SS_TRY(gemm_tile(ctx, r, q0, Qt, r0, Rt, tile % 2));
      if (!gemm_only) SS_TRY(select_tile(ctx, r, strategy, q0, Qt, r0, Rt, tile % 2));
    }
    if (gemm_only) continue;
    int P = next_pow2(r.p.Kc);
    k_rerank<<<(unsigned)Qt, kThreads, (size_t)P * (sizeof(double) + sizeof(int)), r.s1>>>(
        (const float *)r.dv->q.p + q0 * d, r.dv->ref, d, n, r.qn + q0, (const float *)r.dv->run_v.p,
        (const int *)r.dv->run_i.p, r.p.Kc, r.p.k, P, r.ix->ref_norm_max, (int *)r.dv->out_i.p + q0 * r.p.k,
        (double *)r.dv->out_d.p + q0 * r.p.k, (uint8_t *)r.dv->cert.p + q0);
    SS_CUDA_TRY_LAUNCH(ctx, "knn re-rank");
  }
  return SS_OK;
}

ss_status download(ss_ctx *ctx, const search_run &r, int64_t m, int64_t *idx, double *dist, uint8_t *cert) {
  int64_t mk = m * r.p.k;
  std::vector<int> tmp;
  try {
    tmp.resize((size_t)mk);
  } catch (...) {
    return ss_fail(ctx, SS_ERR_NOMEM, "knn: out of host memory for %lld neighbour indices", (long long)mk);
  }
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(tmp.data(), r.dv->out_i.p, (size_t)mk * sizeof(int), cudaMemcpyDeviceToHost, r.s1));
  if (dist)
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(dist, r.dv->out_d.p, (size_t)mk * sizeof(double), cudaMemcpyDeviceToHost, r.s1));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(cert, r.dv->cert.p, (size_t)m, cudaMemcpyDeviceToHost, r.s1));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(r.s1));
  for (int64_t i = 0; i < mk; i++) idx[i] = tmp[(size_t)i];
  return SS_OK;
}

}  // namespace

extern "C" ss_status ss_knn_cuda_index_create(ss_ctx *ctx, ss_knn_index *ix) {
  knn_dev *dv = new (std::nothrow) knn_dev();
  if (!dv) return ss_fail(ctx, SS_ERR_NOMEM, "knn: out of host memory for the device index");
  ix->cuda = dv;
  int64_t n = ix->n, d = ix->d;
  if (n >= kNoIndex)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "knn: %lld reference points exceed the GPU limit of %d", (long long)n,
                   kNoIndex - 1);
  cudaStream_t s0 = ss_cuda_stream(ix->be);
  SS_CUDA_TRY(ctx, cudaStreamCreateWithFlags(&dv->sel, cudaStreamNonBlocking));
  for (int b = 0; b < 2; b++) {
    SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&dv->gemm_done[b], cudaEventDisableTiming));
    SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&dv->sel_done[b], cudaEventDisableTiming));
  }
  SS_CUDA_TRY(ctx, cudaEventCreate(&dv->t0));
  SS_CUDA_TRY(ctx, cudaEventCreate(&dv->t1));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref, n * d, "KNN references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref_c, n * d, "KNN centred references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref_norm, n, "KNN reference norms"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->mean, d, "KNN reference mean"));
  ss_dbuf<unsigned> max_bits;
  SS_TRY(max_bits.alloc(ctx, 1, "KNN norm maximum"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->ref, ix->ref, (size_t)(n * d) * sizeof(float), cudaMemcpyHostToDevice, s0));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->mean, ix->mean, (size_t)d * sizeof(float), cudaMemcpyHostToDevice, s0));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(max_bits.p, 0, sizeof(unsigned), s0));
  k_center<<<(unsigned)ceil_div(n, kThreads / kWarp), kThreads, 0, s0>>>(dv->ref, dv->mean, n, d, dv->ref_c,
                                                                          dv->ref_norm, max_bits.p);
  SS_CUDA_TRY_LAUNCH(ctx, "knn reference centring");
  unsigned bits = 0;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(&bits, max_bits.p, sizeof(unsigned), cudaMemcpyDeviceToHost, s0));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s0));
  float mx;
  memcpy(&mx, &bits, sizeof(mx));
  ix->ref_norm_max = sqrt((double)mx);
  return SS_OK;
}

extern "C" void ss_knn_cuda_index_free(ss_knn_index *ix) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  if (!dv) return;
  if (dv->sel) cudaStreamSynchronize(dv->sel);
  cudaFree(dv->ref), cudaFree(dv->ref_c), cudaFree(dv->ref_norm), cudaFree(dv->mean);
  ws_buf *b[] = {&dv->q, &dv->qc, &dv->qn, &dv->dist_tile[0], &dv->dist_tile[1], &dv->run_v, &dv->run_i,
                 &dv->part_v, &dv->part_i, &dv->out_i, &dv->out_d, &dv->cert};
  for (ws_buf *x : b) cudaFree(x->p);
  for (int i = 0; i < 2; i++) {
    if (dv->gemm_done[i]) cudaEventDestroy(dv->gemm_done[i]);
    if (dv->sel_done[i]) cudaEventDestroy(dv->sel_done[i]);
  }
  if (dv->t0) cudaEventDestroy(dv->t0);
  if (dv->t1) cudaEventDestroy(dv->t1);
  if (dv->sel) cudaStreamDestroy(dv->sel);
  delete dv;
  ix->cuda = nullptr;
}

extern "C" ss_status ss_knn_cuda_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query,
                                        int64_t m, int64_t *idx, double *dist, uint8_t *certified,
                                        ss_knn_stats *stats) {
  int64_t Kc = ss_knn_candidates(o->k, ix->n);
  if (Kc > SS_KNN_GPU_MAX_CANDIDATES)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "knn: k = %lld needs %lld candidates per query, more than the GPU limit "
                   "of %d (use --device cpu)", (long long)o->k, (long long)Kc, SS_KNN_GPU_MAX_CANDIDATES);
  if (o->query_tile < 1 || o->ref_tile < 1)
    return ss_fail(ctx, SS_ERR_INPUT, "knn: query_tile and ref_tile must be >= 1, got %lld and %lld",
                   (long long)o->query_tile, (long long)o->ref_tile);
  search_run r;
  r.ix = ix;
  r.dv = (knn_dev *)ix->cuda;
  r.s0 = ss_cuda_stream(ix->be);
  r.s1 = r.dv->sel;
  r.blas = ss_cuda_cublas(ix->be);
  SS_CUBLAS_TRY(ctx, cublasSetStream(r.blas, r.s0));
  SS_TRY(plan_search(ctx, o, ix->n, m, ix->d, (int)Kc, &r.p, ws_held(r.dv)));
  SS_TRY(alloc_workspace(ctx, r.dv, r.p, m, ix->d));
  r.qc = (const float *)r.dv->qc.p;
  r.qn = (const float *)r.dv->qn.p;
  SS_TRY(upload_queries(ctx, r, query, m));
  int strategy = SS_KNN_AUTO;
  if (!o->gemm_only) SS_TRY(resolve_strategy(ctx, r, o->strategy, m, &strategy));
  SS_TRY(run_tiles(ctx, r, strategy, m, o->gemm_only));
  if (o->gemm_only) {
    SS_CUDA_TRY(ctx, cudaStreamSynchronize(r.s0));
  } else {
    SS_TRY(download(ctx, r, m, idx, dist, certified));
    SS_CUDA_TRY(ctx, cudaStreamSynchronize(r.s0));
  }
  if (stats) {
    stats->candidates = Kc;
    stats->strategy = strategy;
    stats->query_tile = r.p.Q;
    stats->ref_tile = r.p.R;
  }
  return SS_OK;
}
