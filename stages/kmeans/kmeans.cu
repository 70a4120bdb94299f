/* kmeans.cu — the CUDA k-means backend: a device-resident problem (points uploaded once),
 * k-means++ on the device, and Lloyd iterations captured in a CUDA graph so that a run of
 * SS_KM_GRAPH_PASSES passes costs one launch and one host synchronisation.
 *
 * One pass = three kernels (two on the fused path, which is built but off: FUSED_ENABLED), each a
 * no-op once the device-side state says `done`:
 *   assign    persistent blocks walk tiles of points: fused score + argmin over centroid tiles in
 *             shared memory (the n × k matrix is never written; the last centroid tile is only as
 *             wide as the clusters left), the exact distance of the winner, the changed count and
 *             inertia per block; on the fused path also the block's fixed-point sums and counts in
 *             shared memory (each thread owns whole dimensions: no atomics), written once per block
 *   partial   (not fused) per-block fixed-point sums and counts over a dimension slice
 *   update    one block per cluster adds the block partials (exact integers), divides and forms
 *             ‖c‖²; the last block to finish (a ticket) makes the convergence test, re-seeds empty
 *             clusters and advances the pass
 * Every quantity that decides a label is computed exactly as on the CPU (stages/kmeans/kmeans_math.h). */
#include <new>

#include "core/cuda_util.cuh"
#include "stages/kmeans/kmeans.h"
#include "stages/kmeans/kmeans_math.h"
#include "core/log.h"
#include "core/rng.h"

namespace {

/* assign: each thread scores TP points × TC centroids; a block covers BP points × BC centroids and
 * walks the dimensions in stages of BD through shared memory. An 8 × 8 register tile needs four
 * 128-bit shared loads per 64 FMAs, which keeps the FMA pipe rather than shared memory the limit.
 * A thread's centroids are float4 groups strided by NTX · 4 so that the 8 lanes of a quarter-warp
 * read 128 contiguous bytes (no bank conflict); its points are contiguous (a broadcast). The last
 * centroid tile uses TC / 2 when at most BC / 2 clusters are left (K = 80: 64 + 32, not 128). */
constexpr int ASSIGN_TP = 8;
constexpr int ASSIGN_TC = 8;
constexpr int ASSIGN_VEC = 4; /* floats per shared-memory load */
constexpr int ASSIGN_NTY = 16;
constexpr int ASSIGN_NTX = 8; /* lanes sharing a point group: a power of two dividing the warp */
constexpr int ASSIGN_THREADS = ASSIGN_NTY * ASSIGN_NTX;
constexpr int ASSIGN_BP = ASSIGN_TP * ASSIGN_NTY;
constexpr int ASSIGN_BC = ASSIGN_TC * ASSIGN_NTX;
constexpr int ASSIGN_BD = 32;
constexpr int ASSIGN_PAD = 4;        /* keeps rows 16-byte aligned for float4 reads */
constexpr int ASSIGN_MIN_BLOCKS = 3; /* launch bounds: registers for 3 blocks of 128 threads per SM */
constexpr int ASSIGN_WARPS = ASSIGN_THREADS / 32;
static_assert(ASSIGN_BP <= ASSIGN_THREADS, "the assign tail gives each point of a block one thread");
static_assert(ASSIGN_TP % ASSIGN_VEC == 0 && ASSIGN_TC % (2 * ASSIGN_VEC) == 0, "float4 register tiles");
constexpr unsigned FULL_MASK = 0xffffffffu;
/* fused path: the block's k × d int64 sums + k counts in shared memory, at most this many bytes.
 * Measured slower than assign + partial on an H200 (published case 1.94 vs 1.85 ms: the sums cost
 * the assign kernel as much as the separate partial kernel does, docs/kmeans.md), hence off. */
constexpr bool FUSED_ENABLED = false;
constexpr size_t FUSED_SMEM_MAX = 64 * 1024;

/* partial (large k × d): shared memory for k × (dimension slice) int64 sums plus k counts. */
constexpr int UPDATE_THREADS = 256;
constexpr size_t UPDATE_SMEM = 96 * 1024;
constexpr int64_t UPDATE_MIN_POINTS = 256; /* fewer points per block only adds partials to reduce */
constexpr int UPDATE_BLOCKS_PER_SM = 4;
constexpr int64_t UPDATE_MAX_SLICE = (int64_t)1 << 30; /* points × slice per block: 32-bit indexing */
constexpr int FILL_THREADS = 256;
constexpr int RF_THREADS = 512;                /* update: one block per cluster */
constexpr int RF_MAX_D = 1024;                 /* update: centroid rows up to this width are staged for ‖c‖² */
constexpr int PP_THREADS = SS_KMEANS_PP_BLOCK; /* one k-means++ block per CUDA block */
constexpr int PP_BD = 32;
constexpr int SS_KM_GRAPH_PASSES = 16;
constexpr int KM_PHASES = 3; /* profile: assign (+ sums when fused), partial, update */

struct km_state {
  int it; /* current pass */
  int done;
  int converged;
  int n_updates;
  long long reseeded;
  unsigned ticket; /* update blocks finished in this pass */
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
  int64_t n, ntiles, chunk, tol_count, max_iter;
  int d, k, na, pc, dcw; /* na: assign blocks, pc: partial rows */
  double scale, inv_scale;
};

/* Tile column of centroid c (0..TC−1) of lane tx: ascending in c, as the argmin needs. */
__device__ __forceinline__ int centroid_slot(int tx, int c) {
  return (c / ASSIGN_VEC) * (ASSIGN_NTX * ASSIGN_VEC) + tx * ASSIGN_VEC + c % ASSIGN_VEC;
}

typedef float xs_row[ASSIGN_BP + ASSIGN_PAD];
typedef float cs_row[ASSIGN_BC + ASSIGN_PAD];

/* Scores of the block's points against centroids [k0, k0 + TC · NTX), folded into (best, arg). */
template <int TC>
__device__ __forceinline__ void score_tile(const km_dev &a, int64_t p0, int k0, xs_row *xs, cs_row *cs, float *best,
                                           int *arg) {
  constexpr int BC = TC * ASSIGN_NTX;
  const int tid = threadIdx.x, tx = tid % ASSIGN_NTX, ty = tid / ASSIGN_NTX, d = a.d, k = a.k;
  float acc[ASSIGN_TP][TC];
#pragma unroll
  for (int i = 0; i < ASSIGN_TP; i++)
#pragma unroll
    for (int c = 0; c < TC; c++) acc[i][c] = 0.0f;
  for (int d0 = 0; d0 < d; d0 += ASSIGN_BD) {
    const int nd = min(ASSIGN_BD, d - d0);
    for (int e = tid; e < ASSIGN_BP * ASSIGN_BD; e += ASSIGN_THREADS) {
      int p = e / ASSIGN_BD, j = e % ASSIGN_BD;
      int64_t gp = p0 + p;
      xs[j][p] = gp < a.n && j < nd ? ss_km_centred(a.x[gp * d + d0 + j], a.shift[d0 + j]) : 0.0f;
    }
    for (int e = tid; e < BC * ASSIGN_BD; e += ASSIGN_THREADS) {
      int c = e / ASSIGN_BD, j = e % ASSIGN_BD, gc = k0 + c;
      cs[j][c] = gc < k && j < nd ? a.cent[(int64_t)gc * d + d0 + j] : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < nd; j++) { /* dimension order: the same fmaf chain as the CPU's dot */
      float xa[ASSIGN_TP], ca[TC];
#pragma unroll
      for (int q = 0; q < ASSIGN_TP / ASSIGN_VEC; q++) {
        const float4 v = *reinterpret_cast<const float4 *>(&xs[j][ty * ASSIGN_TP + q * ASSIGN_VEC]);
        xa[q * 4] = v.x, xa[q * 4 + 1] = v.y, xa[q * 4 + 2] = v.z, xa[q * 4 + 3] = v.w;
      }
#pragma unroll
      for (int q = 0; q < TC / ASSIGN_VEC; q++) {
        const float4 v = *reinterpret_cast<const float4 *>(&cs[j][centroid_slot(tx, q * ASSIGN_VEC)]);
        ca[q * 4] = v.x, ca[q * 4 + 1] = v.y, ca[q * 4 + 2] = v.z, ca[q * 4 + 3] = v.w;
      }
#pragma unroll
      for (int i = 0; i < ASSIGN_TP; i++)
#pragma unroll
        for (int c = 0; c < TC; c++) acc[i][c] = fmaf(xa[i], ca[c], acc[i][c]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int c = 0; c < TC; c++) { /* ascending index, strict <: the lowest index wins ties */
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

/* ss_km_sqdist with its loads unrolled ahead of the (unchanged, in-order) fmaf chain. */
__device__ __forceinline__ float exact_sqdist(const float *__restrict__ x, const float *__restrict__ s,
                                              const float *__restrict__ c, int d) {
  float acc = 0.0f;
#pragma unroll 8
  for (int j = 0; j < d; j++) {
    float t = ss_km_centred(__ldg(x + j), __ldg(s + j)) - __ldg(c + j);
    acc = fmaf(t, t, acc);
  }
  return acc;
}

/* Fused path: thread j owns dimension j of the block's sums, so no atomics; runs of equal labels
 * (neighbouring image patches) are added in a register first. Integer sums: any order is exact. */
__device__ __forceinline__ void tile_sums(const km_dev &a, int64_t p0, const int *s_lab, long long *ssum) {
  const int d = a.d, np = (int)min((int64_t)ASSIGN_BP, a.n - p0);
  for (int j = threadIdx.x; j < d; j += ASSIGN_THREADS) {
    const float sj = a.shift[j];
    int cur = s_lab[0];
    long long run = 0;
#pragma unroll 4
    for (int p = 0; p < np; p++) {
      const int lab = s_lab[p];
      const long long v = ss_km_fixed(ss_km_centred(__ldg(a.x + (p0 + p) * d + j), sj), a.scale);
      if (lab != cur) ssum[(int64_t)cur * d + j] += run, cur = lab, run = 0;
      run += v;
    }
    ssum[(int64_t)cur * d + j] += run;
  }
}

/* Block-wide sum of one value per thread of an ASSIGN_THREADS block, in a fixed order. */
template <typename T>
__device__ T assign_block_sum(T v, T *warp_buf) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(FULL_MASK, v, off);
  if (threadIdx.x % 32 == 0) warp_buf[threadIdx.x / 32] = v;
  __syncthreads();
  T r = 0;
  for (int w = 0; w < ASSIGN_WARPS; w++) r += warp_buf[w];
  return r;
}

/* FUSED: also the block's fixed-point sums and counts (dynamic shared memory: k·d int64 + k).
 * Without a.st (model assignment) it only writes labels and distances. */
template <bool FUSED>
__global__ void __launch_bounds__(ASSIGN_THREADS, ASSIGN_MIN_BLOCKS) assign_kernel(km_dev a) {
  if (a.st && a.st->done) return;
  __shared__ __align__(16) float xs[ASSIGN_BD][ASSIGN_BP + ASSIGN_PAD];
  __shared__ __align__(16) float cs[ASSIGN_BD][ASSIGN_BC + ASSIGN_PAD];
  __shared__ int s_lab[ASSIGN_BP];
  __shared__ double s_wd[ASSIGN_WARPS];
  __shared__ int s_wi[ASSIGN_WARPS];
  extern __shared__ long long smem_sums[];
  long long *ssum = smem_sums;
  unsigned *scnt = reinterpret_cast<unsigned *>(ssum + (int64_t)a.k * a.d);
  const int tid = threadIdx.x, tx = tid % ASSIGN_NTX, ty = tid / ASSIGN_NTX, d = a.d, k = a.k;
  if (FUSED) {
    for (int e = tid; e < k * d; e += ASSIGN_THREADS) ssum[e] = 0;
    for (int c = tid; c < k; c += ASSIGN_THREADS) scnt[c] = 0u;
  }
  double my_in = 0.0;
  int my_ch = 0;
  for (int64_t t = blockIdx.x; t < a.ntiles; t += gridDim.x) {
    const int64_t p0 = t * ASSIGN_BP;
    float best[ASSIGN_TP];
    int arg[ASSIGN_TP];
#pragma unroll
    for (int i = 0; i < ASSIGN_TP; i++) best[i] = INFINITY, arg[i] = 0;
    int k0 = 0;
    for (; k - k0 > ASSIGN_BC / 2; k0 += ASSIGN_BC) score_tile<ASSIGN_TC>(a, p0, k0, xs, cs, best, arg);
    if (k0 < k) score_tile<ASSIGN_TC / 2>(a, p0, k0, xs, cs, best, arg);
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
    if (tid < ASSIGN_BP && p0 + tid < a.n) {
      const int64_t gp = p0 + tid;
      const int lab = s_lab[tid];
      const float dd = exact_sqdist(a.x + gp * d, a.shift, a.cent + (int64_t)lab * d, d);
      my_ch += a.labels[gp] != lab;
      my_in += (double)dd;
      a.labels[gp] = lab;
      if (a.dist) a.dist[gp] = dd;
      if (FUSED) atomicAdd(&scnt[lab], 1u);
    }
    if (FUSED) tile_sums(a, p0, s_lab, ssum);
    __syncthreads(); /* s_lab is rewritten by the next tile */
  }
  if (!a.blk_changed) return;
  const double in = assign_block_sum(my_in, s_wd);
  const int ch = assign_block_sum(my_ch, s_wi);
  if (tid == 0) a.blk_changed[blockIdx.x] = ch, a.blk_inertia[blockIdx.x] = in;
  if (FUSED) {
    unsigned long long *out = a.psum + (int64_t)blockIdx.x * k * d;
    for (int e = tid; e < k * d; e += ASSIGN_THREADS) out[e] = (unsigned long long)ssum[e];
    for (int c = tid; c < k; c += ASSIGN_THREADS) a.pcount[(int64_t)blockIdx.x * k + c] = scnt[c];
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
    a.psum[((int64_t)blockIdx.x * k + e / w) * d + j0 + e % w] = ((unsigned long long)(long long)shi[e] << 32) +
                                                                 (unsigned long long)slo[e];
  if (counts)
    for (int c = threadIdx.x; c < k; c += blockDim.x) a.pcount[(int64_t)blockIdx.x * k + c] = scnt[c];
}

/* Block-wide sums in a fixed tree (RF_THREADS threads). */
template <typename T>
__device__ T block_sum(T v, T *buf) {
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = RF_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  T r = buf[0];
  __syncthreads();
  return r;
}

/* The farthest point (lowest index on ties) whose cluster keeps a point; -1 when none. Counts are
 * read through L2 (__ldcg): other blocks of the update kernel wrote them. */
__device__ int64_t farthest_donor(const km_dev &a, float *bv, long long *bi) {
  float fd = -1.0f;
  long long far = -1;
  for (int64_t i = threadIdx.x; i < a.n; i += RF_THREADS)
    if (a.dist[i] > fd && __ldcg(&a.counts[a.labels[i]]) > 1) fd = a.dist[i], far = i;
  bv[threadIdx.x] = fd;
  bi[threadIdx.x] = far;
  __syncthreads();
  for (int s = RF_THREADS / 2; s > 0; s >>= 1) {
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
    if (__ldcg(&a.counts[c]) > 0) continue;
    int64_t far = farthest_donor(a, bv, bi);
    if (far < 0) return;
    int donor = a.labels[far];
    for (int j = threadIdx.x; j < a.d; j += RF_THREADS) {
      long long v = ss_km_fixed(ss_km_centred(a.x[far * a.d + j], a.shift[j]), a.scale);
      a.sums[(int64_t)donor * a.d + j] = __ldcg(&a.sums[(int64_t)donor * a.d + j]) - (unsigned long long)v;
      a.sums[(int64_t)c * a.d + j] = (unsigned long long)v;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      a.counts[donor] = __ldcg(&a.counts[donor]) - 1;
      a.counts[c] = 1;
      a.labels[far] = c;
      a.dist[far] = -1.0f;
      a.st->reseeded++;
    }
    __syncthreads();
  }
}

/* Centroid c from its sums and count (count > 0), staged in row (shared, d ≤ RF_MAX_D) for ‖c‖². */
__device__ void finish_centroid(const km_dev &a, int c, long long count, float *row) {
  const int d = a.d;
  for (int j = threadIdx.x; j < d; j += RF_THREADS) {
    float v = ss_km_mean((long long)__ldcg(&a.sums[(int64_t)c * d + j]), a.inv_scale, count);
    a.cent[(int64_t)c * d + j] = v;
    if (d <= RF_MAX_D) row[j] = v;
  }
  __syncthreads();
  if (threadIdx.x == 0) a.cnorm[c] = ss_km_norm2(d <= RF_MAX_D ? row : a.cent + (int64_t)c * d, d);
  __syncthreads();
}

/* The last update block: inertia, stop, reseeding (then every centroid again), next pass. */
__device__ void finish_pass(const km_dev &a, int it, bool stop, bool converged, double *s_d, float *s_f, long long *s_l,
                            float *row) {
  double in = 0.0;
  for (int b = threadIdx.x; b < a.na; b += RF_THREADS) in += a.blk_inertia[b];
  in = block_sum(in, s_d);
  if (!stop) {
    int empty = 0;
    for (int c = threadIdx.x; c < a.k; c += RF_THREADS) empty |= __ldcg(&a.counts[c]) == 0;
    if (__syncthreads_or(empty)) { /* rare: the donors' centroids change too */
      reseed(a, s_f, s_l);
      for (int c = 0; c < a.k; c++) finish_centroid(a, c, __ldcg(&a.counts[c]), row);
    }
  }
  if (threadIdx.x == 0) {
    a.hist[it] = in;
    a.st->done = stop;
    a.st->converged = converged;
    a.st->n_updates = stop ? it : it + 1;
    a.st->it = stop ? it : it + 1;
    a.st->ticket = 0u;
  }
}

/* One block per cluster: the convergence test (every block, from the integer changed count), the
 * exact sums of the block partials, the division and ‖c‖²; the last block finishes the pass. */
__global__ void __launch_bounds__(RF_THREADS) update_kernel(km_dev a) {
  if (a.st->done) return;
  __shared__ double s_d[RF_THREADS];
  __shared__ long long s_l[RF_THREADS];
  __shared__ float s_f[RF_THREADS];
  __shared__ unsigned long long s_u[RF_THREADS];
  __shared__ float row[RF_MAX_D];
  __shared__ bool s_last;
  const int it = a.st->it, c = blockIdx.x, d = a.d, k = a.k, tid = threadIdx.x;
  long long ch = 0;
  for (int b = tid; b < a.na; b += RF_THREADS) ch += a.blk_changed[b];
  ch = block_sum(ch, s_l);
  const bool converged = it > 0 && ch <= a.tol_count, stop = converged || it >= a.max_iter;
  if (!stop) {
    long long cnt = 0;
    for (int g = tid; g < a.pc; g += RF_THREADS) cnt += a.pcount[(int64_t)g * k + c];
    cnt = block_sum(cnt, s_l);
    /* rows r = 0..R−1 of the partials per column when d is small; any order: integers */
    const int R = d < RF_THREADS ? RF_THREADS / d : 1;
    for (int j0 = 0; j0 < d; j0 += RF_THREADS) {
      const int e = tid, r = e / d, j = j0 + e % d;
      unsigned long long s = 0ull;
      if (r < R && j < d)
        for (int g = r; g < a.pc; g += R) s += a.psum[((int64_t)g * k + c) * d + j];
      s_u[tid] = s;
      __syncthreads();
      if (tid < min(RF_THREADS, d - j0)) {
        unsigned long long t = 0ull;
        for (int q = 0; q < R; q++) t += s_u[q * min(d, RF_THREADS) + tid];
        a.sums[(int64_t)c * d + j0 + tid] = t;
      }
      __syncthreads();
    }
    if (tid == 0) a.counts[c] = cnt;
    if (cnt > 0) finish_centroid(a, c, cnt, row);
  }
  __threadfence(); /* every thread's sums and counts reach L2 before the ticket */
  __syncthreads();
  if (tid == 0) {
    s_last = atomicAdd(&a.st->ticket, 1u) == (unsigned)(k - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  finish_pass(a, it, stop, converged, s_d, s_f, s_l, row);
}

__global__ void fill_kernel(float *p, int64_t n, float v) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

/* D² against the previous centroid (the ss_km_sqdist chain) and the block's tree sum. */
__global__ void __launch_bounds__(PP_THREADS)
    pp_update_kernel(const float *x, const float *shift, const float *prev, int64_t n, int d, float *d2, double *bsum) {
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
  for (int s = PP_THREADS / 2; s > 0; s >>= 1) { /* the tree of pp_block_sum() in stages/kmeans/kmeans.c */
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
  for (int j = threadIdx.x; j < d; j += blockDim.x) cent[(int64_t)c * d + j] = ss_km_centred(x[pick * d + j], shift[j]);
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
  int na_model = 0; /* assign blocks of a model assignment (no sums) */
  /* the Lloyd graph, kept for later runs on the same problem (its buffers never move) */
  cudaGraphExec_t exec = nullptr;
  km_dev layout = {};
  bool fused = false;
  size_t fused_smem = 0;
  dim3 ugrid;
  size_t smem = 0;
  ~ss_kmeans_gpu() {
    if (exec) cudaGraphExecDestroy(exec);
  }
};

/* Persistent assign blocks: as many as fit on the device at once, then evened out so that every
 * block walks the same number of point tiles (±1). */
template <bool FUSED>
static ss_status assign_grid(ss_ctx *ctx, const ss_kmeans_gpu *g, size_t smem, int *grid) {
  int per_sm = 0;
  if (smem > 0)
    SS_CUDA_TRY(ctx,
                cudaFuncSetAttribute(assign_kernel<FUSED>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  SS_CUDA_TRY(ctx, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, assign_kernel<FUSED>, ASSIGN_THREADS, smem));
  if (per_sm < 1) per_sm = 1;
  const int64_t tiles = cdiv(g->n, ASSIGN_BP), slots = (int64_t)g->be->gpu.sm_count * per_sm;
  *grid = (int)cdiv(tiles, cdiv(tiles, slots));
  return SS_OK;
}

extern "C" ss_status ss_kmeans_gpu_open(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb,
                                        ss_kmeans_gpu **out) {
  *out = nullptr;
  ss_kmeans_gpu *g = new (std::nothrow) ss_kmeans_gpu();
  if (!g) return ss_fail(ctx, SS_ERR_NOMEM, "kmeans: out of memory for the CUDA state");
  g->be = be;
  g->n = pb->n, g->d = pb->d, g->k = pb->k;
  g->tol_count = pb->tol_count, g->max_iter = pb->max_iterations, g->scale = pb->scale;
  *out = g;
  int64_t ntiles = cdiv(pb->n, ASSIGN_BP); /* an upper bound on any assign grid */
  cudaStream_t s = ss_cuda_stream(be);
  SS_TRY(g->x.alloc(ctx, (size_t)(pb->n * pb->d), "k-means points"));
  SS_TRY(g->shift.alloc(ctx, (size_t)pb->d, "k-means shift"));
  SS_TRY(g->cent.alloc(ctx, (size_t)(pb->k * pb->d), "k-means centroids"));
  SS_TRY(g->cnorm.alloc(ctx, (size_t)pb->k, "k-means centroid norms"));
  SS_TRY(g->dist.alloc(ctx, (size_t)pb->n, "k-means distances"));
  SS_TRY(g->labels.alloc(ctx, (size_t)pb->n, "k-means labels"));
  SS_TRY(g->blk_changed.alloc(ctx, (size_t)ntiles, "k-means block changes"));
  SS_TRY(g->blk_inertia.alloc(ctx, (size_t)ntiles, "k-means block inertia"));
  SS_TRY(assign_grid<false>(ctx, g, 0, &g->na_model));
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
  a.n = g->n, a.d = (int)g->d, a.k = (int)g->k, a.ntiles = cdiv(g->n, ASSIGN_BP), a.na = g->na_model;
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
  fill_kernel<<<(unsigned)cdiv(n, FILL_THREADS), FILL_THREADS, 0, s>>>(g->d2, n, INFINITY);
  pp_select_kernel<<<1, PP_THREADS, 0, s>>>(g->bsum, nb, g->d2, n, key, 0, g->x, g->shift, d, g->cent);
  SS_CUDA_TRY_LAUNCH(ctx, "k-means++ first pick");
  for (int64_t c = 1; c < g->k; c++) {
    pp_update_kernel<<<(unsigned)nb, PP_THREADS, 0, s>>>(g->x, g->shift, g->cent.p + (c - 1) * d, n, d, g->d2, g->bsum);
    pp_select_kernel<<<1, PP_THREADS, 0, s>>>(g->bsum, nb, g->d2, n, key, (int)c, g->x, g->shift, d, g->cent);
    SS_CUDA_TRY_LAUNCH(ctx, "k-means++");
  }
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(centroids_c, g->cent.p, sizeof(float) * g->k * d, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}

/* Split path (k × d sums too large to sit beside the assign tiles): the dimension slice that fits
 * the partial kernel's shared memory, and how many point blocks. */
static ss_status split_layout(ss_ctx *ctx, ss_kmeans_gpu *g, km_dev *a) {
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
  g->ugrid = dim3((unsigned)pc, (unsigned)dc);
  g->smem = (size_t)(k * dcw) * sizeof(unsigned long long) + (size_t)k * sizeof(unsigned);
  SS_CUDA_TRY(ctx, cudaFuncSetAttribute(partial_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)g->smem));
  return SS_OK;
}

/* Fused path when the block's sums fit beside the assign tiles; a receives na, pc (and the split
 * layout); the partial buffers are allocated here. */
static ss_status update_layout(ss_ctx *ctx, ss_kmeans_gpu *g, km_dev *a) {
  const int64_t k = g->k, d = g->d;
  g->fused_smem = (size_t)(k * d) * sizeof(long long) + (size_t)k * sizeof(unsigned);
  g->fused = FUSED_ENABLED && g->fused_smem <= FUSED_SMEM_MAX;
  if (g->fused) {
    SS_TRY(assign_grid<true>(ctx, g, g->fused_smem, &a->na));
    a->pc = a->na;
  } else {
    a->na = g->na_model;
    SS_TRY(split_layout(ctx, g, a));
  }
  SS_TRY(g->psum.alloc(ctx, (size_t)((int64_t)a->pc * k * d), "k-means partial sums"));
  SS_TRY(g->pcount.alloc(ctx, (size_t)((int64_t)a->pc * k), "k-means partial counts"));
  SS_TRY(g->sums.alloc(ctx, (size_t)(k * d), "k-means sums"));
  SS_TRY(g->counts.alloc(ctx, (size_t)k, "k-means counts"));
  return SS_OK;
}

/* The kernels of one pass; with events, a timestamp before each and after the last (profile). */
static void launch_pass(const ss_kmeans_gpu *g, const km_dev &a, cudaStream_t s, cudaEvent_t *ev) {
  if (ev) cudaEventRecord(ev[0], s);
  if (g->fused) assign_kernel<true><<<(unsigned)a.na, ASSIGN_THREADS, g->fused_smem, s>>>(a);
  else assign_kernel<false><<<(unsigned)a.na, ASSIGN_THREADS, 0, s>>>(a);
  if (ev) cudaEventRecord(ev[1], s);
  if (!g->fused) partial_kernel<<<g->ugrid, UPDATE_THREADS, g->smem, s>>>(a);
  if (ev) cudaEventRecord(ev[2], s);
  update_kernel<<<(unsigned)a.k, RF_THREADS, 0, s>>>(a);
  if (ev) cudaEventRecord(ev[3], s);
}

/* Record `passes` Lloyd passes into a graph. */
static ss_status capture_passes(ss_ctx *ctx, const ss_kmeans_gpu *g, const km_dev &a, int passes, cudaGraphExec_t *exec,
                                cudaStream_t s) {
  SS_CUDA_TRY(ctx, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int p = 0; p < passes; p++) launch_pass(g, a, s, nullptr);
  cudaGraph_t graph;
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  SS_CUDA_TRY(ctx, e);
  e = cudaGraphInstantiate(exec, graph, 0);
  cudaGraphDestroy(graph);
  SS_CUDA_TRY(ctx, e);
  return SS_OK;
}

/* The layout and the graph of SS_KM_GRAPH_PASSES passes (fewer when the cap is lower), built on
 * the first run. */
static ss_status lloyd_graph(ss_ctx *ctx, ss_kmeans_gpu *g, int passes) {
  if (g->exec) return SS_OK;
  SS_TRY(g->hist.alloc(ctx, (size_t)(g->max_iter + 1), "k-means inertia"));
  SS_TRY(g->st.alloc(ctx, 1, "k-means state"));
  km_dev l = {};
  SS_TRY(update_layout(ctx, g, &l));
  km_dev a = dev_view(g); /* after the allocations it points to */
  a.na = l.na, a.pc = l.pc, a.dcw = l.dcw, a.chunk = l.chunk;
  g->layout = a;
  return capture_passes(ctx, g, a, passes, &g->exec, ss_cuda_stream(g->be));
}

/* A fresh run from init_c: centroids and norms uploaded, labels −1 (no label yet), state zero. */
static ss_status start_run(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c) {
  cudaStream_t s = ss_cuda_stream(g->be);
  SS_TRY(upload_centroids(ctx, g, init_c));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(g->labels.p, 0xff, sizeof(int32_t) * g->n, s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(g->st.p, 0, sizeof(km_state), s));
  return SS_OK;
}

static int graph_passes(const ss_kmeans_gpu *g) {
  return (int)(g->max_iter + 1 < SS_KM_GRAPH_PASSES ? g->max_iter + 1 : SS_KM_GRAPH_PASSES);
}

extern "C" ss_status ss_kmeans_gpu_lloyd(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c, ss_kmeans_result *res) {
  cudaStream_t s = ss_cuda_stream(g->be);
  const int passes = graph_passes(g);
  SS_TRY(lloyd_graph(ctx, g, passes));
  SS_TRY(start_run(ctx, g, init_c));
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
  SS_CUDA_TRY(ctx,
              cudaMemcpyAsync(res->inertia, g->hist.p, sizeof(double) * (hs.n_updates + 1), cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  res->final_inertia = res->inertia[hs.n_updates];
  for (int64_t it = 0; it <= hs.n_updates; it++)
    ss_log_debug(ctx, "kmeans (cuda): pass %lld: inertia %.9g", (long long)it, res->inertia[it]);
  return SS_OK;
}

/* The same passes launched one kernel at a time between events: per-kernel time of a pass. */
extern "C" ss_status ss_kmeans_gpu_profile(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c,
                                           ss_kmeans_pass_profile *prof) {
  cudaStream_t s = ss_cuda_stream(g->be);
  SS_TRY(lloyd_graph(ctx, g, graph_passes(g)));
  SS_TRY(start_run(ctx, g, init_c));
  const int passes = (int)g->max_iter + 1;
  cudaEvent_t ev[KM_PHASES + 1];
  for (int i = 0; i <= KM_PHASES; i++) SS_CUDA_TRY(ctx, cudaEventCreate(&ev[i]));
  double ms[KM_PHASES] = {0};
  cudaError_t e = cudaSuccess;
  for (int p = 0; p < passes && e == cudaSuccess; p++) {
    launch_pass(g, g->layout, s, ev);
    e = cudaEventSynchronize(ev[KM_PHASES]);
    for (int i = 0; i < KM_PHASES && e == cudaSuccess; i++) {
      float t = 0.0f;
      e = cudaEventElapsedTime(&t, ev[i], ev[i + 1]);
      ms[i] += t;
    }
  }
  for (int i = 0; i <= KM_PHASES; i++) cudaEventDestroy(ev[i]);
  SS_CUDA_TRY(ctx, e);
  prof->passes = passes;
  prof->fused = g->fused;
  prof->assign_blocks = g->layout.na;
  prof->partial_rows = g->layout.pc;
  prof->assign_ms = ms[0] / passes;
  prof->partial_ms = ms[1] / passes;
  prof->update_ms = ms[2] / passes;
  return SS_OK;
}

extern "C" ss_status ss_kmeans_gpu_assign(ss_ctx *ctx, ss_kmeans_gpu *g, const float *centroids_c, int32_t *labels,
                                          float *dist) {
  cudaStream_t s = ss_cuda_stream(g->be);
  SS_TRY(upload_centroids(ctx, g, centroids_c));
  km_dev a = dev_view(g);
  a.st = nullptr;
  a.blk_changed = nullptr;
  assign_kernel<false><<<(unsigned)a.na, ASSIGN_THREADS, 0, s>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "k-means assignment");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(labels, g->labels.p, sizeof(int32_t) * g->n, cudaMemcpyDeviceToHost, s));
  if (dist) SS_CUDA_TRY(ctx, cudaMemcpyAsync(dist, g->dist.p, sizeof(float) * g->n, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}
