/* kmeans.cu — the CUDA k-means backend: a device-resident problem (points uploaded once),
 * k-means++ on the device, and Lloyd iterations captured in a CUDA graph so that a run of
 * SS_KM_GRAPH_PASSES passes costs one launch and one host synchronisation.
 *
 * One pass = four kernels, each a no-op once the device-side state says `done`:
 *   assign    fused score + argmin over centroid tiles in shared memory (the n × k matrix is never
 *             written), then the exact distance of the winner; per-block changed count and inertia
 *   partial   per-block fixed-point sums and counts of its points in shared memory, written once
 *             per block; each int64 sum is kept as two 32-bit words updated by native 32-bit
 *             shared atomics with an explicit carry (64-bit shared atomics are CAS loops)
 *   reduce    one thread per (cluster, dimension) sums the block partials (exact integers)
 *   finalize  one block: inertia, convergence test, empty-cluster reseeding, division, ‖c‖²
 * Every quantity that decides a label is computed exactly as on the CPU (src/kmeans_math.h). */
#include <new>

#include "cuda/cuda_util.cuh"
#include "src/kmeans.h"
#include "src/kmeans_math.h"
#include "src/log.h"
#include "src/rng.h"

namespace {

/* assign: each thread scores TP points × TC centroids; a block covers BP points × BC centroids and
 * walks the dimensions in stages of BD through shared memory. An 8 × 8 register tile needs four
 * 128-bit shared loads per 64 FMAs, which keeps the FMA pipe rather than shared memory the limit.
 * A thread's centroids are float4 groups strided by NTX · 4 so that the 8 lanes of a quarter-warp
 * read 128 contiguous bytes (no bank conflict); its points are contiguous (a broadcast). */
constexpr int ASSIGN_TP = 8;
constexpr int ASSIGN_TC = 8;
constexpr int ASSIGN_VEC = 4; /* floats per shared-memory load */
constexpr int ASSIGN_NTY = 16;
constexpr int ASSIGN_NTX = 8; /* lanes sharing a point group: a power of two dividing the warp */
constexpr int ASSIGN_THREADS = ASSIGN_NTY * ASSIGN_NTX;
constexpr int ASSIGN_BP = ASSIGN_TP * ASSIGN_NTY;
constexpr int ASSIGN_BC = ASSIGN_TC * ASSIGN_NTX;
constexpr int ASSIGN_BD = 32;
constexpr int ASSIGN_PAD = 4; /* keeps rows 16-byte aligned for float4 reads */
static_assert(ASSIGN_BP <= ASSIGN_THREADS, "the assign tail gives each point of a block one thread");
static_assert(ASSIGN_TP % ASSIGN_VEC == 0 && ASSIGN_TC % ASSIGN_VEC == 0, "float4 register tiles");
constexpr unsigned FULL_MASK = 0xffffffffu;

/* partial: shared memory for k × (dimension slice) int64 sums (low and high words) plus k counts. */
constexpr int UPDATE_THREADS = 256;
constexpr size_t UPDATE_SMEM = 96 * 1024;
constexpr int64_t UPDATE_MIN_POINTS = 256; /* fewer points per block only adds partials to reduce */
constexpr int UPDATE_BLOCKS_PER_SM = 4;
constexpr int64_t UPDATE_MAX_SLICE = (int64_t)1 << 30; /* points × slice per block: 32-bit indexing */
constexpr int REDUCE_THREADS = 256;
constexpr int FINAL_THREADS = 1024;
constexpr int PP_THREADS = SS_KMEANS_PP_BLOCK; /* one k-means++ block per CUDA block */
constexpr int PP_BD = 32;
constexpr int SS_KM_GRAPH_PASSES = 16;

struct km_state {
  int it;        /* current pass */
  int done;
  int converged;
  int n_updates;
  long long reseeded;
};

/* Everything a pass touches, passed by value to every kernel. */
struct km_dev {
  const float *x, *shift;
  float *cent, *cnorm, *dist;
  int32_t *labels;
  int *blk_changed;
  double *blk_inertia;
  unsigned long long *psum, *sums;
  unsigned *pcount;
  long long *counts;
  double *hist;
  km_state *st;
  int64_t n, nblk, chunk, tol_count, max_iter;
  int d, k, pc, dcw;
  double scale, inv_scale;
};

/* Tile column of centroid c (0..TC−1) of lane tx: ascending in c, as the argmin needs. */
__device__ __forceinline__ int centroid_slot(int tx, int c) {
  return (c / ASSIGN_VEC) * (ASSIGN_NTX * ASSIGN_VEC) + tx * ASSIGN_VEC + c % ASSIGN_VEC;
}

__global__ void __launch_bounds__(ASSIGN_THREADS) assign_kernel(km_dev a) {
  if (a.st && a.st->done) return;
  __shared__ __align__(16) float xs[ASSIGN_BD][ASSIGN_BP + ASSIGN_PAD];
  __shared__ __align__(16) float cs[ASSIGN_BD][ASSIGN_BC + ASSIGN_PAD];
  __shared__ int s_lab[ASSIGN_BP];
  __shared__ double s_in[ASSIGN_BP];
  __shared__ int s_ch[ASSIGN_BP];
  const int tid = threadIdx.x, tx = tid % ASSIGN_NTX, ty = tid / ASSIGN_NTX, d = a.d, k = a.k;
  const int64_t p0 = (int64_t)blockIdx.x * ASSIGN_BP;
  float best[ASSIGN_TP];
  int arg[ASSIGN_TP];
#pragma unroll
  for (int i = 0; i < ASSIGN_TP; i++) best[i] = INFINITY, arg[i] = 0;

  for (int k0 = 0; k0 < k; k0 += ASSIGN_BC) {
    float acc[ASSIGN_TP][ASSIGN_TC];
#pragma unroll
    for (int i = 0; i < ASSIGN_TP; i++)
#pragma unroll
      for (int c = 0; c < ASSIGN_TC; c++) acc[i][c] = 0.0f;
    for (int d0 = 0; d0 < d; d0 += ASSIGN_BD) {
      const int nd = min(ASSIGN_BD, d - d0);
      for (int e = tid; e < ASSIGN_BP * ASSIGN_BD; e += ASSIGN_THREADS) {
        int p = e / ASSIGN_BD, j = e % ASSIGN_BD;
        int64_t gp = p0 + p;
        xs[j][p] = gp < a.n && j < nd ? ss_km_centred(a.x[gp * d + d0 + j], a.shift[d0 + j]) : 0.0f;
      }
      for (int e = tid; e < ASSIGN_BC * ASSIGN_BD; e += ASSIGN_THREADS) {
        int c = e / ASSIGN_BD, j = e % ASSIGN_BD, gc = k0 + c;
        cs[j][c] = gc < k && j < nd ? a.cent[(int64_t)gc * d + d0 + j] : 0.0f;
      }
      __syncthreads();
#pragma unroll 4
      for (int j = 0; j < nd; j++) { /* dimension order: the same fmaf chain as the CPU's dot */
        float xa[ASSIGN_TP], ca[ASSIGN_TC];
#pragma unroll
        for (int q = 0; q < ASSIGN_TP / ASSIGN_VEC; q++) {
          const float4 v = *reinterpret_cast<const float4 *>(&xs[j][ty * ASSIGN_TP + q * ASSIGN_VEC]);
          xa[q * 4] = v.x, xa[q * 4 + 1] = v.y, xa[q * 4 + 2] = v.z, xa[q * 4 + 3] = v.w;
        }
#pragma unroll
        for (int q = 0; q < ASSIGN_TC / ASSIGN_VEC; q++) {
          const float4 v = *reinterpret_cast<const float4 *>(&cs[j][centroid_slot(tx, q * ASSIGN_VEC)]);
          ca[q * 4] = v.x, ca[q * 4 + 1] = v.y, ca[q * 4 + 2] = v.z, ca[q * 4 + 3] = v.w;
        }
#pragma unroll
        for (int i = 0; i < ASSIGN_TP; i++)
#pragma unroll
          for (int c = 0; c < ASSIGN_TC; c++) acc[i][c] = fmaf(xa[i], ca[c], acc[i][c]);
      }
      __syncthreads();
    }
#pragma unroll
    for (int c = 0; c < ASSIGN_TC; c++) { /* ascending index, strict <: the lowest index wins ties */
      int gc = k0 + centroid_slot(tx, c);
      if (gc < k) {
        float cn = a.cnorm[gc];
#pragma unroll
        for (int i = 0; i < ASSIGN_TP; i++) {
          float sc = ss_km_score(acc[i][c], cn);
          if (sc < best[i]) best[i] = sc, arg[i] = gc;
        }
      }
    }
  }
  /* the ASSIGN_NTX lanes of a point group hold disjoint centroid subsets: (score, index) minimum */
#pragma unroll
  for (int off = ASSIGN_NTX / 2; off > 0; off >>= 1)
#pragma unroll
    for (int i = 0; i < ASSIGN_TP; i++) {
      float ob = __shfl_xor_sync(FULL_MASK, best[i], off);
      int oa = __shfl_xor_sync(FULL_MASK, arg[i], off);
      if (ob < best[i] || (ob == best[i] && oa < arg[i])) best[i] = ob, arg[i] = oa;
    }
  if (tx == 0)
#pragma unroll
    for (int i = 0; i < ASSIGN_TP; i++) s_lab[ty * ASSIGN_TP + i] = arg[i];
  __syncthreads();
  if (tid < ASSIGN_BP) {
    int64_t gp = p0 + tid;
    double in = 0.0;
    int ch = 0;
    if (gp < a.n) {
      int lab = s_lab[tid];
      float dd = ss_km_sqdist(a.x + gp * d, a.shift, a.cent + (int64_t)lab * d, d);
      ch = a.labels[gp] != lab;
      a.labels[gp] = lab;
      if (a.dist) a.dist[gp] = dd;
      in = (double)dd;
    }
    s_in[tid] = in;
    s_ch[tid] = ch;
  }
  __syncthreads();
  if (a.blk_changed && tid == 0) {
    double in = 0.0;
    int ch = 0;
    for (int t = 0; t < ASSIGN_BP; t++) in += s_in[t], ch += s_ch[t];
    a.blk_changed[blockIdx.x] = ch;
    a.blk_inertia[blockIdx.x] = in;
  }
}

/* Block (pc, dc): points [pc·chunk, ...) and dimensions [dc·dcw, ...): fixed-point sums per cluster. */
__global__ void __launch_bounds__(UPDATE_THREADS) partial_kernel(km_dev a) {
  if (a.st->done) return;
  extern __shared__ unsigned long long sm[];
  const int k = a.k, d = a.d, j0 = blockIdx.y * a.dcw, w = min(a.dcw, d - j0);
  /* sum = hi · 2^32 + lo: |value| < 2^62 / n (ss_km_scale) keeps hi within int32 */
  unsigned *slo = reinterpret_cast<unsigned *>(sm);
  int *shi = reinterpret_cast<int *>(slo + (size_t)k * a.dcw);
  unsigned *scnt = reinterpret_cast<unsigned *>(shi + (size_t)k * a.dcw);
  const bool counts = blockIdx.y == 0;
  for (int e = threadIdx.x; e < k * w; e += blockDim.x) slo[e] = 0u, shi[e] = 0;
  if (counts)
    for (int c = threadIdx.x; c < k; c += blockDim.x) scnt[c] = 0u;
  __syncthreads();
  const int64_t lo = (int64_t)blockIdx.x * a.chunk, hi = min(a.n, lo + a.chunk);
  const unsigned total = (unsigned)((hi - lo) * w);
  for (unsigned e = threadIdx.x; e < total; e += blockDim.x) {
    int64_t i = lo + e / w;
    int j = j0 + (int)(e % w);
    long long v = ss_km_fixed(ss_km_centred(a.x[i * d + j], a.shift[j]), a.scale);
    const int at = a.labels[i] * w + (j - j0);
    const unsigned lo = (unsigned)(unsigned long long)v;
    const unsigned old = atomicAdd(&slo[at], lo);
    const int hi = (int)(v >> 32) + (old + lo < old); /* plus the carry out of the low word */
    if (hi) atomicAdd(&shi[at], hi);
  }
  if (counts)
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) atomicAdd(&scnt[a.labels[i]], 1u);
  __syncthreads();
  for (int e = threadIdx.x; e < k * w; e += blockDim.x)
    a.psum[((int64_t)blockIdx.x * k + e / w) * d + j0 + e % w] =
        ((unsigned long long)(long long)shi[e] << 32) + (unsigned long long)slo[e];
  if (counts)
    for (int c = threadIdx.x; c < k; c += blockDim.x) a.pcount[(int64_t)blockIdx.x * k + c] = scnt[c];
}

__global__ void reduce_kernel(km_dev a) {
  if (a.st->done) return;
  const int64_t kd = (int64_t)a.k * a.d, e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e < kd) {
    unsigned long long s = 0ull; /* integer sums: exact in any order */
    for (int p = 0; p < a.pc; p++) s += a.psum[(int64_t)p * kd + e];
    a.sums[e] = s;
  } else if (e < kd + a.k) {
    int c = (int)(e - kd);
    long long s = 0;
    for (int p = 0; p < a.pc; p++) s += a.pcount[(int64_t)p * a.k + c];
    a.counts[c] = s;
  }
}

/* Block-wide sums in a fixed tree (FINAL_THREADS threads). */
template <typename T>
__device__ T block_sum(T v, T *buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = FINAL_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  T r = buf[0];
  __syncthreads();
  return r;
}

/* The farthest point (lowest index on ties) whose cluster keeps a point; -1 when none. */
__device__ int64_t farthest_donor(const km_dev &a, float *bv, long long *bi) {
  float fd = -1.0f;
  long long far = -1;
  for (int64_t i = threadIdx.x; i < a.n; i += FINAL_THREADS)
    if (a.dist[i] > fd && a.counts[a.labels[i]] > 1) fd = a.dist[i], far = i;
  bv[threadIdx.x] = fd;
  bi[threadIdx.x] = far;
  __syncthreads();
  for (int s = FINAL_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) {
      float v = bv[threadIdx.x + s];
      long long i = bi[threadIdx.x + s];
      if (v > bv[threadIdx.x] || (v == bv[threadIdx.x] && i < bi[threadIdx.x] && i >= 0))
        bv[threadIdx.x] = v, bi[threadIdx.x] = i;
    }
    __syncthreads();
  }
  int64_t r = bi[0];
  __syncthreads();
  return r;
}

/* Empty clusters in index order take the farthest point of a cluster that keeps one (as cpu_reseed). */
__device__ void reseed(const km_dev &a, float *bv, long long *bi) {
  for (int c = 0; c < a.k; c++) {
    if (a.counts[c] > 0) continue;
    int64_t far = farthest_donor(a, bv, bi);
    if (far < 0) return;
    int donor = a.labels[far];
    for (int j = threadIdx.x; j < a.d; j += FINAL_THREADS) {
      long long v = ss_km_fixed(ss_km_centred(a.x[far * a.d + j], a.shift[j]), a.scale);
      a.sums[(int64_t)donor * a.d + j] -= (unsigned long long)v;
      a.sums[(int64_t)c * a.d + j] = (unsigned long long)v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      a.counts[donor]--;
      a.counts[c] = 1;
      a.labels[far] = c;
      a.dist[far] = -1.0f;
      a.st->reseeded++;
    }
    __syncthreads();
  }
}

__global__ void __launch_bounds__(FINAL_THREADS) finalize_kernel(km_dev a) {
  if (a.st->done) return;
  __shared__ double s_d[FINAL_THREADS];
  __shared__ long long s_l[FINAL_THREADS];
  __shared__ float s_f[FINAL_THREADS];
  const int it = a.st->it;
  double in = 0.0;
  long long ch = 0;
  for (int64_t b = threadIdx.x; b < a.nblk; b += FINAL_THREADS) in += a.blk_inertia[b], ch += a.blk_changed[b];
  in = block_sum(in, s_d);
  ch = block_sum(ch, s_l);
  const bool converged = it > 0 && ch <= a.tol_count;
  if (converged || it >= a.max_iter) {
    if (threadIdx.x == 0) {
      a.hist[it] = in;
      a.st->done = 1;
      a.st->converged = converged;
      a.st->n_updates = it;
    }
    return;
  }
  reseed(a, s_f, s_l);
  const int64_t kd = (int64_t)a.k * a.d;
  for (int64_t e = threadIdx.x; e < kd; e += FINAL_THREADS)
    a.cent[e] = ss_km_mean((long long)a.sums[e], a.inv_scale, a.counts[e / a.d]);
  __syncthreads();
  for (int c = threadIdx.x; c < a.k; c += FINAL_THREADS) a.cnorm[c] = ss_km_norm2(a.cent + (int64_t)c * a.d, a.d);
  if (threadIdx.x == 0) {
    a.hist[it] = in;
    a.st->it = it + 1;
    a.st->n_updates = it + 1;
  }
}

__global__ void fill_kernel(float *p, int64_t n, float v) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

/* D² against the previous centroid (the ss_km_sqdist chain) and the block's tree sum. */
__global__ void __launch_bounds__(PP_THREADS) pp_update_kernel(const float *x, const float *shift,
                                                               const float *prev, int64_t n, int d, float *d2,
                                                               double *bsum) {
  __shared__ float xs[PP_THREADS][PP_BD + 1];
  __shared__ double red[PP_THREADS];
  const int tid = threadIdx.x;
  const int64_t p0 = (int64_t)blockIdx.x * PP_THREADS, i = p0 + tid;
  float acc = 0.0f;
  for (int d0 = 0; d0 < d; d0 += PP_BD) {
    const int w = min(PP_BD, d - d0);
    for (int e = tid; e < PP_THREADS * PP_BD; e += PP_THREADS) {
      int p = e / PP_BD, j = e % PP_BD;
      xs[p][j] = p0 + p < n && j < w ? x[(p0 + p) * d + d0 + j] : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < w; j++) {
      float t = ss_km_centred(xs[tid][j], shift[d0 + j]) - prev[d0 + j];
      acc = fmaf(t, t, acc);
    }
    __syncthreads();
  }
  double v = 0.0;
  if (i < n) {
    float o = d2[i];
    if (acc < o) o = acc, d2[i] = acc;
    v = (double)o;
  }
  red[tid] = v;
  __syncthreads();
  for (int s = PP_THREADS / 2; s > 0; s >>= 1) { /* the tree of pp_block_sum() in src/kmeans.c */
    if (tid < s) red[tid] += red[tid + s];
    __syncthreads();
  }
  if (tid == 0) bsum[blockIdx.x] = red[0];
}

__global__ void pp_select_kernel(const double *bsum, int64_t nb, const float *d2, int64_t n, uint64_t key, int c,
                                 const float *x, const float *shift, int d, float *cent) {
  __shared__ int64_t pick;
  if (threadIdx.x == 0)
    pick = c == 0 ? (int64_t)ss_rng_below(key, 0, (uint64_t)n)
                  : ss_km_pp_select(bsum, nb, d2, n, ss_rng_uniform(key, (uint64_t)c));
  __syncthreads();
  for (int j = threadIdx.x; j < d; j += blockDim.x)
    cent[(int64_t)c * d + j] = ss_km_centred(x[pick * d + j], shift[j]);
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

} /* namespace */

struct ss_kmeans_gpu {
  const ss_backend *be;
  int64_t n, d, k, tol_count, max_iter;
  double scale;
  ss_dbuf<float> x, shift, cent, cnorm, dist, d2;
  ss_dbuf<int32_t> labels;
  ss_dbuf<int> blk_changed;
  ss_dbuf<double> blk_inertia, hist, bsum;
  ss_dbuf<unsigned long long> psum, sums;
  ss_dbuf<unsigned> pcount;
  ss_dbuf<long long> counts;
  ss_dbuf<km_state> st;
  /* the Lloyd graph, kept for later runs on the same problem (its buffers never move) */
  cudaGraphExec_t exec = nullptr;
  km_dev layout = {};
  dim3 ugrid;
  size_t smem = 0;
  ~ss_kmeans_gpu() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

extern "C" ss_status ss_kmeans_gpu_open(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb,
                                        ss_kmeans_gpu **out) {
  *out = nullptr;
  ss_kmeans_gpu *g = new (std::nothrow) ss_kmeans_gpu();
  if (!g) return ss_fail(ctx, SS_ERR_NOMEM, "kmeans: out of memory for the CUDA state");
  g->be = be;
  g->n = pb->n, g->d = pb->d, g->k = pb->k;
  g->tol_count = pb->tol_count, g->max_iter = pb->max_iterations, g->scale = pb->scale;
  *out = g;
  int64_t nblk = cdiv(pb->n, ASSIGN_BP);
  cudaStream_t s = ss_cuda_stream(be);
  SS_TRY(g->x.alloc(ctx, (size_t)(pb->n * pb->d), "k-means points"));
  SS_TRY(g->shift.alloc(ctx, (size_t)pb->d, "k-means shift"));
  SS_TRY(g->cent.alloc(ctx, (size_t)(pb->k * pb->d), "k-means centroids"));
  SS_TRY(g->cnorm.alloc(ctx, (size_t)pb->k, "k-means centroid norms"));
  SS_TRY(g->dist.alloc(ctx, (size_t)pb->n, "k-means distances"));
  SS_TRY(g->labels.alloc(ctx, (size_t)pb->n, "k-means labels"));
  SS_TRY(g->blk_changed.alloc(ctx, (size_t)nblk, "k-means block changes"));
  SS_TRY(g->blk_inertia.alloc(ctx, (size_t)nblk, "k-means block inertia"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->x.p, pb->x, sizeof(float) * pb->n * pb->d, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->shift.p, pb->shift, sizeof(float) * pb->d, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}

void ss_kmeans_gpu_close(ss_kmeans_gpu *g) { delete g; }

static km_dev dev_view(ss_kmeans_gpu *g) {
  km_dev a = {};
  a.x = g->x, a.shift = g->shift, a.cent = g->cent, a.cnorm = g->cnorm, a.dist = g->dist;
  a.labels = g->labels, a.blk_changed = g->blk_changed, a.blk_inertia = g->blk_inertia;
  a.psum = g->psum, a.sums = g->sums, a.pcount = g->pcount, a.counts = g->counts, a.hist = g->hist, a.st = g->st;
  a.n = g->n, a.d = (int)g->d, a.k = (int)g->k, a.nblk = cdiv(g->n, ASSIGN_BP);
  a.tol_count = g->tol_count, a.max_iter = g->max_iter, a.scale = g->scale, a.inv_scale = 1.0 / g->scale;
  return a;
}

/* Upload centred centroids and their norms (host fmaf chains equal the device ones). */
static ss_status upload_centroids(ss_ctx *ctx, ss_kmeans_gpu *g, const float *cent_c) {
  float *cn = nullptr;
  SS_TRY(SS_ALLOC(ctx, cn, (size_t)g->k, "k-means centroid norms"));
  for (int64_t c = 0; c < g->k; c++) cn[c] = ss_km_norm2(cent_c + c * g->d, g->d);
  cudaStream_t s = ss_cuda_stream(g->be);
  cudaError_t e = cudaMemcpyAsync(g->cent.p, cent_c, sizeof(float) * g->k * g->d, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = cudaMemcpyAsync(g->cnorm.p, cn, sizeof(float) * g->k, cudaMemcpyHostToDevice, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  free(cn);
  SS_CUDA_TRY(ctx, e);
  return SS_OK;
}

extern "C" ss_status ss_kmeans_gpu_pp(ss_ctx *ctx, ss_kmeans_gpu *g, uint64_t seed, float *centroids_c) {
  const int64_t n = g->n, nb = cdiv(n, PP_THREADS);
  const int d = (int)g->d;
  SS_TRY(g->d2.alloc(ctx, (size_t)n, "k-means++ distances"));
  SS_TRY(g->bsum.alloc(ctx, (size_t)nb, "k-means++ block sums"));
  cudaStream_t s = ss_cuda_stream(g->be);
  uint64_t key = ss_rng_key(seed, SS_RNG_KMEANS_INIT, 0); /* stream 0: as ss_kmeans_cpu_pp */
  fill_kernel<<<(unsigned)cdiv(n, REDUCE_THREADS), REDUCE_THREADS, 0, s>>>(g->d2, n, INFINITY);
  pp_select_kernel<<<1, PP_THREADS, 0, s>>>(g->bsum, nb, g->d2, n, key, 0, g->x, g->shift, d, g->cent);
  SS_CUDA_TRY_LAUNCH(ctx, "k-means++ first pick");
  for (int64_t c = 1; c < g->k; c++) {
    pp_update_kernel<<<(unsigned)nb, PP_THREADS, 0, s>>>(g->x, g->shift, g->cent.p + (c - 1) * d, n, d, g->d2,
                                                         g->bsum);
    pp_select_kernel<<<1, PP_THREADS, 0, s>>>(g->bsum, nb, g->d2, n, key, (int)c, g->x, g->shift, d, g->cent);
    SS_CUDA_TRY_LAUNCH(ctx, "k-means++");
  }
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(centroids_c, g->cent.p, sizeof(float) * g->k * d, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}

/* Update layout: the dimension slice that fits shared memory, and how many point blocks. */
static ss_status update_layout(ss_ctx *ctx, ss_kmeans_gpu *g, km_dev *a, dim3 *grid, size_t *smem) {
  /* a receives dcw, pc and chunk; the buffers it points to are (re)allocated here */
  int64_t k = g->k, d = g->d;
  int64_t dcw = ((int64_t)UPDATE_SMEM - k * (int64_t)sizeof(unsigned)) / (k * (int64_t)sizeof(unsigned long long));
  if (dcw < 1)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "kmeans: k = %lld exceeds the CUDA backend's limit of %lld clusters",
                   (long long)k, (long long)(UPDATE_SMEM / (sizeof(unsigned long long) + sizeof(unsigned))));
  if (dcw > d) dcw = d;
  int64_t dc = cdiv(d, dcw);
  int64_t pc = cdiv((int64_t)g->be->gpu.sm_count * UPDATE_BLOCKS_PER_SM, dc);
  int64_t pc_max = cdiv(g->n, UPDATE_MIN_POINTS);
  if (pc > pc_max) pc = pc_max;
  if (pc < cdiv(g->n * dcw, UPDATE_MAX_SLICE)) pc = cdiv(g->n * dcw, UPDATE_MAX_SLICE);
  a->dcw = (int)dcw;
  a->pc = (int)pc;
  a->chunk = cdiv(g->n, pc);
  *grid = dim3((unsigned)pc, (unsigned)dc);
  *smem = (size_t)(k * dcw) * sizeof(unsigned long long) + (size_t)k * sizeof(unsigned);
  SS_TRY(g->psum.alloc(ctx, (size_t)(pc * k * d), "k-means partial sums"));
  SS_TRY(g->pcount.alloc(ctx, (size_t)(pc * k), "k-means partial counts"));
  SS_TRY(g->sums.alloc(ctx, (size_t)(k * d), "k-means sums"));
  SS_TRY(g->counts.alloc(ctx, (size_t)k, "k-means counts"));
  SS_CUDA_TRY(ctx, cudaFuncSetAttribute(partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem));
  return SS_OK;
}

/* Record `passes` Lloyd passes into a graph. */
static ss_status capture_passes(ss_ctx *ctx, const km_dev &a, dim3 ugrid, size_t smem, int passes,
                                cudaGraphExec_t *exec, cudaStream_t s) {
  const unsigned ablocks = (unsigned)a.nblk;
  const unsigned rblocks = (unsigned)cdiv((int64_t)a.k * a.d + a.k, REDUCE_THREADS);
  SS_CUDA_TRY(ctx, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int p = 0; p < passes; p++) {
    assign_kernel<<<ablocks, ASSIGN_THREADS, 0, s>>>(a);
    partial_kernel<<<ugrid, UPDATE_THREADS, smem, s>>>(a);
    reduce_kernel<<<rblocks, REDUCE_THREADS, 0, s>>>(a);
    finalize_kernel<<<1, FINAL_THREADS, 0, s>>>(a);
  }
  cudaGraph_t graph;
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  SS_CUDA_TRY(ctx, e);
  e = cudaGraphInstantiate(exec, graph, 0);
  cudaGraphDestroy(graph);
  SS_CUDA_TRY(ctx, e);
  return SS_OK;
}

/* The graph of SS_KM_GRAPH_PASSES passes (fewer when the cap is lower), built on the first run. */
static ss_status lloyd_graph(ss_ctx *ctx, ss_kmeans_gpu *g, int passes) {
  if (g->exec) return SS_OK;
  SS_TRY(g->hist.alloc(ctx, (size_t)(g->max_iter + 1), "k-means inertia"));
  SS_TRY(g->st.alloc(ctx, 1, "k-means state"));
  SS_TRY(update_layout(ctx, g, &g->layout, &g->ugrid, &g->smem));
  km_dev a = dev_view(g); /* after the allocations it points to */
  a.dcw = g->layout.dcw, a.pc = g->layout.pc, a.chunk = g->layout.chunk;
  return capture_passes(ctx, a, g->ugrid, g->smem, passes, &g->exec, ss_cuda_stream(g->be));
}

extern "C" ss_status ss_kmeans_gpu_lloyd(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c, ss_kmeans_result *res) {
  cudaStream_t s = ss_cuda_stream(g->be);
  const int passes = (int)(g->max_iter + 1 < SS_KM_GRAPH_PASSES ? g->max_iter + 1 : SS_KM_GRAPH_PASSES);
  SS_TRY(lloyd_graph(ctx, g, passes));
  SS_TRY(upload_centroids(ctx, g, init_c));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(g->labels.p, 0xff, sizeof(int32_t) * g->n, s)); /* -1: no label yet */
  SS_CUDA_TRY(ctx, cudaMemsetAsync(g->st.p, 0, sizeof(km_state), s));
  km_state hs = {};
  for (int64_t launched = 0; !hs.done && launched <= g->max_iter; launched += passes) {
    SS_CUDA_TRY(ctx, cudaGraphLaunch(g->exec, s));
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(&hs, g->st.p, sizeof(hs), cudaMemcpyDeviceToHost, s));
    SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  }
  if (!hs.done) return ss_fail(ctx, SS_ERR_INTERNAL, "kmeans: the device run did not finish");
  res->n_iterations = hs.n_updates;
  res->converged = hs.converged;
  res->n_reseeded = hs.reseeded;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(res->labels, g->labels.p, sizeof(int32_t) * g->n, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(res->centroids, g->cent.p, sizeof(float) * g->k * g->d, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(res->inertia, g->hist.p, sizeof(double) * (hs.n_updates + 1), cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  res->final_inertia = res->inertia[hs.n_updates];
  for (int64_t it = 0; it <= hs.n_updates; it++)
    ss_log_debug(ctx, "kmeans (cuda): pass %lld: inertia %.9g", (long long)it, res->inertia[it]);
  return SS_OK;
}

extern "C" ss_status ss_kmeans_gpu_assign(ss_ctx *ctx, ss_kmeans_gpu *g, const float *centroids_c, int32_t *labels,
                                          float *dist) {
  cudaStream_t s = ss_cuda_stream(g->be);
  SS_TRY(upload_centroids(ctx, g, centroids_c));
  km_dev a = dev_view(g);
  a.st = nullptr;
  a.blk_changed = nullptr;
  assign_kernel<<<(unsigned)a.nblk, ASSIGN_THREADS, 0, s>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "k-means assignment");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(labels, g->labels.p, sizeof(int32_t) * g->n, cudaMemcpyDeviceToHost, s));
  if (dist) SS_CUDA_TRY(ctx, cudaMemcpyAsync(dist, g->dist.p, sizeof(float) * g->n, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}
