/* mask_em.cu — the CUDA twin of masked EM (MASKED_EM.md; CPU reference src/mask_em*.c).
 *
 * Preprocessing (normalisation, noise statistics, k_p) and the start run once on the host; then
 * the data live on the device for the whole run as one dense row per point,
 *   X[p] = [ EV | R² | R | M ]   (4·D doubles: η − σ², (y − ν)², y − ν, m; zero where m = 0),
 * computed from the CPU's float32 y, η exactly as the CPU computes its doubles.
 *
 * One full iteration:
 *   group     labels sorted once (CUB radix sort, stable: points of a cluster in index order)
 *   M-step    segmented reduction: fixed chunks of a cluster's sorted points → partial sums
 *             (stats per feature, u×u scatter products over U_c), combined per cluster in chunk
 *             order (deterministic; products without FMA contraction, as on the CPU)
 *   E-step    per-cluster Cholesky, L⁻¹ and B⁻¹ in a kernel (one block per cluster), then per chunk
 *             of points: one DGEMM [EV | R² | R] · [h | w | g]ᵀ for the diagonal, correction and
 *             linear parts, a kernel for the block part rᵀB⁻¹r (one thread per point walking only
 *             its own unmasked entries in U_c, B_c⁻¹'s lower triangle staged in shared memory per
 *             cluster; the old warp-union kernel remains for dimensions too large for shared
 *             memory), and a fused best/second pass
 *   C-step, deletion (exact score changes from a (cluster, second) segmented reduction), score:
 *             on the device; per-cluster vectors (K values) and scalars come back.
 * Split sub-problems run one after the other on the same stream, each on a gathered copy of its
 * points (concurrent sub-problems are a later optimisation). Everything accumulates in double;
 * no TF32 (DGEMM). Every reduction has a fixed order, so runs are deterministic. */
#include <cub/cub.cuh>

#include <cinttypes>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "core/cuda_util.cuh"
#include "core/log.h"
#include "stages/mask_em/mask_em.h"
#include "stages/mask_em/mask_em_internal.h"
#include "core/rng.h"

namespace {

constexpr int64_t MSTEP_CHUNK = 512;       /* points per M-step partial (fixed: deterministic) */
constexpr int STAT_THREADS = 128;          /* M-step stats: threads over features */
constexpr int PAIR_THREADS = 256;          /* M-step block: threads over (x, y) pairs */
constexpr int CHOL_THREADS = 128;          /* one block per cluster */
constexpr int QUAD_THREADS = 64;           /* warp-union block-part kernel (fallback): one point per thread */
constexpr int SPARSE_THREADS = 128;        /* sparse block-part kernel: points per block (at most) */
constexpr int SPARSE_MIN_THREADS = 32;     /* ... and at least (one warp) */
constexpr int SPARSE_TILE = 8;             /* entries of a point held in registers per pass (ILP) */
constexpr size_t SPARSE_SMEM_TARGET = 112 * 1024; /* bytes per block: two blocks per SM on sm_90 */
constexpr int STAGE_BATCH = 8;             /* loads in flight per thread when staging B_c⁻¹ */
constexpr int SPARSE_WAVES = 8;            /* blocks wanted per SM before clusters are split over blocks */
constexpr size_t DEFAULT_SMEM_LIMIT = 48 * 1024; /* dynamic shared memory without the opt-in attribute */
constexpr int PT_THREADS = 256;            /* per-point kernels */
constexpr int SUM_THREADS = 1024;          /* single-block deterministic sums */
constexpr int SEG_WARPS = 8;               /* deletion segments: one warp per segment */
constexpr size_t COST_BUDGET = (size_t)4 << 30; /* bytes of the chunk × K cost matrix */
constexpr int SUB_CYCLE_WINDOW = 64;       /* as the CPU's split sub-problems */
constexpr unsigned FULL = 0xffffffffu;
constexpr int64_t MAX_HISTORY = 1000000;

/* ---- device helpers ------------------------------------------------------------------------------ */

__host__ __device__ inline double penalty(double pk, double pkl, double log_n, double kp, long long cnt) {
  if (cnt <= 0) return 0.0;
  double kbar = kp / (double)cnt;
  return 2.0 * pk * kbar + pkl * kbar * log_n / 2.0;
}

__device__ inline void keep_two(int32_t c, double cost, int32_t &b1, double &c1, int32_t &b2, double &c2) {
  if (cost < c1) {
    b2 = b1, c2 = c1;
    b1 = c, c1 = cost;
  } else if (cost < c2) {
    b2 = c, c2 = cost;
  }
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

/* 32-bit words of a feature bitmask */
__host__ __device__ inline int64_t words(int64_t d) { return (d + 31) / 32; }

/* doubles of a packed lower triangle of a d × d matrix (per-cluster stride of the packed B⁻¹) */
__host__ __device__ inline int64_t tri_size(int64_t d) { return d * (d + 1) / 2; }

/* ---- data ---------------------------------------------------------------------------------------- */

__global__ void k_expand(const int64_t *row, const int32_t *feat, const float *y, const float *eta, const float *mask,
                         const double *nu, const double *s2, int64_t n, int64_t d, double *X, uint32_t *pm) {
  int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= n) return;
  double *x = X + p * 4 * d;
  int64_t nw = words(d);
  for (int64_t e = row[p]; e < row[p + 1]; e++) {
    int32_t i = feat[e];
    pm[p * nw + i / 32] |= 1u << (i % 32);
    double r = (double)y[e] - nu[i];
    x[i] = (double)eta[e] - s2[i];
    x[d + i] = __dmul_rn(r, r);
    x[2 * d + i] = r;
    x[3 * d + i] = (double)mask[e];
  }
}

__global__ void k_gather_bits(const uint32_t *pm, const int32_t *pts, int64_t n, int64_t nw, uint32_t *pmo) {
  int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (t < n * nw) pmo[t] = pm[(int64_t)pts[t / nw] * nw + t % nw];
}

__global__ void k_gather(const double *X, const double *kp, const int32_t *pts, int64_t n, int64_t w, double *Xo,
                         double *kpo) {
  int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (t >= n * w) return;
  int64_t j = t / w, i = t % w, p = pts[j];
  Xo[t] = X[p * w + i];
  if (i == 0) kpo[j] = kp[p];
}

/* ---- labels -------------------------------------------------------------------------------------- */

__global__ void k_fill(int32_t *v, int64_t n, int32_t val) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) v[j] = val;
}

__global__ void k_iota(int32_t *v, int64_t n) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) v[j] = (int32_t)j;
}

__global__ void k_random_halves(int32_t *labels, int64_t n, uint64_t key) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) labels[j] = (int32_t)(1 + (ss_rng_u64(key, (uint64_t)j) >> 63));
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

/* ---- M-step -------------------------------------------------------------------------------------- */

struct item {
  int64_t c, g0, g1;
};

/* Partial stats of one chunk: Σ m, Σ r, Σ (η − σ²), Σ r² per feature and Σ k_p, in point order. */
__global__ void k_mstat_part(const item *items, const int32_t *order, const double *X, const double *kp, int64_t d,
                             double *part) {
  item it = items[blockIdx.x];
  double *o = part + blockIdx.x * (4 * d + 1);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    double s = 0, sr = 0, se = 0, sr2 = 0;
    for (int64_t g = it.g0; g < it.g1; g++) {
      const double *x = X + (int64_t)order[g] * 4 * d;
      se += x[i];
      sr2 += x[d + i];
      sr += x[2 * d + i];
      s += x[3 * d + i];
    }
    o[i] = s, o[d + i] = sr, o[2 * d + i] = se, o[3 * d + i] = sr2;
  }
  if (threadIdx.x == 0) {
    double ks = 0;
    for (int64_t g = it.g0; g < it.g1; g++) ks += kp[order[g]];
    o[4 * d] = ks;
  }
}

struct mparams {
  double P, T;
  int64_t d;
};

/* Cluster c: combine its chunks in order; mean offset a, diagonal, U_c (as mask_em_step.c). */
__global__ void k_mstat_final(const int64_t *item_first, const double *part, const int64_t *count, const int8_t *alive,
                              const double *nu, const double *s2, mparams mp, double *offset, double *diag,
                              int32_t *n_u, int32_t *u_feat, uint32_t *u_bits, double *kp_sum) {
  extern __shared__ double s_mask[];
  int64_t c = blockIdx.x, d = mp.d, w = 4 * d + 1;
  if (c > 0 && !alive[c]) {
    if (threadIdx.x == 0) n_u[c] = 0, kp_sum[c] = 0.0;
    return;
  }
  int64_t f0 = item_first[c], f1 = item_first[c + 1];
  if (threadIdx.x == 0) {
    double ks = 0;
    for (int64_t f = f0; f < f1; f++) ks += part[f * w + 4 * d];
    kp_sum[c] = ks;
  }
  if (c == 0) return;
  double nc = (double)count[c], P = mp.P, den = nc + P - 1.0;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    double s = 0, sr = 0, se = 0, sr2 = 0;
    for (int64_t f = f0; f < f1; f++) {
      const double *o = part + f * w;
      s += o[i], sr += o[d + i], se += o[2 * d + i], sr2 += o[3 * d + i];
    }
    double a = sr / (nc + P);
    double dd = fmax(sr2 - __dmul_rn(__dmul_rn(a, a), nc + 2.0 * P), 0.0);
    offset[c * d + i] = a;
    diag[c * d + i] = (dd + __dmul_rn(nc + P, s2[i]) + se) / den;
    s_mask[i] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t u = 0;
    int64_t nw = words(d);
    for (int64_t w = 0; w < nw; w++) u_bits[c * nw + w] = 0;
    for (int64_t i = 0; i < d; i++)
      if (s_mask[i] >= mp.T) u_feat[c * d + u++] = (int32_t)i, u_bits[c * nw + i / 32] |= 1u << (i % 32);
    n_u[c] = u;
  }
}

__device__ inline void pair_of(int64_t t, int64_t u, int64_t &x, int64_t &y) {
  /* t enumerates the upper triangle row by row: row x has u − x entries */
  x = 0;
  while (t >= u - x) t -= u - x, x++;
  y = x + t;
}

/* Partial Σ r_x r_y over U_c of one chunk (upper triangle). */
__global__ void k_mblock_part(const item *items, const int32_t *order, const double *X, const int8_t *alive,
                              const int32_t *n_u, const int32_t *u_feat, int64_t d, double *part) {
  item it = items[blockIdx.x];
  int64_t c = it.c, u = n_u[c];
  if (c == 0 || !alive[c] || u == 0) return;
  const int32_t *uf = u_feat + c * d;
  double *o = part + blockIdx.x * d * d;
  for (int64_t t = threadIdx.x; t < u * (u + 1) / 2; t += blockDim.x) {
    int64_t x, y;
    pair_of(t, u, x, y);
    int64_t fx = 2 * d + uf[x], fy = 2 * d + uf[y];
    double q = 0;
    for (int64_t g = it.g0; g < it.g1; g++) {
      const double *r = X + (int64_t)order[g] * 4 * d;
      q += __dmul_rn(r[fx], r[fy]);
    }
    o[x * u + y] = q;
  }
}

__global__ void k_mblock_final(const int64_t *item_first, const double *part, const int64_t *count,
                               const int8_t *alive, const int32_t *n_u, const double *offset, const double *diag,
                               const int32_t *u_feat, mparams mp, double *block) {
  int64_t c = blockIdx.x, d = mp.d, u = n_u[c];
  if (c == 0 || !alive[c] || u == 0) return;
  double nc = (double)count[c], P = mp.P, den = nc + P - 1.0, w = nc + 2.0 * P;
  const double *a = offset + c * d;
  const int32_t *uf = u_feat + c * d;
  double *B = block + c * d * d;
  int64_t f0 = item_first[c], f1 = item_first[c + 1];
  for (int64_t t = threadIdx.x; t < u * (u + 1) / 2; t += blockDim.x) {
    int64_t x, y;
    pair_of(t, u, x, y);
    if (x == y) {
      B[x * u + x] = diag[c * d + uf[x]];
      continue;
    }
    double q = 0;
    for (int64_t f = f0; f < f1; f++) q += part[f * d * d + x * u + y];
    double v = (q - __dmul_rn(__dmul_rn(a[uf[x]], a[uf[y]]), w)) / den;
    B[x * u + y] = B[y * u + x] = v;
  }
}

/* ---- E-step: per-cluster factorisation and coefficients ----------------------------------------- */

struct eparams {
  int64_t d;
  double log2pi_d;
};

/* Cholesky of B_c (L, global scratch), W = L⁻¹, B⁻¹ = WᵀW (also packed as its lower triangle in
 * tri, row q at q(q+1)/2, and feature → position in U_c (−1 off U_c) in posg, for the sparse
 * block-part kernel), then the GEMM coefficients
 * coef[c] = [h | w | g] (h = diag Σ⁻¹; w = 1/δ on M_c, 0 on U_c; g = the linear coefficient) and
 * base_c. On failure the cluster is marked not alive and counted. */
__global__ void k_factor(int64_t k, const int32_t *n_u, const int32_t *u_feat, const double *block, const double *offset,
                         const double *diag, const double *s2, const double *weight, eparams ep, int8_t *alive,
                         double *Lw, double *Ww, double *binv, double *tri, int16_t *posg, double *coef, double *base,
                         unsigned long long *n_fail) {
  extern __shared__ double sh[]; /* v[d], then pos[d] as ints */
  int64_t c = blockIdx.x, d = ep.d, u = n_u[c];
  if (c == 0 || c >= k || !alive[c]) return;
  double *v = sh;
  int32_t *pos = (int32_t *)(sh + d);
  __shared__ int failed;
  const double *B = block + c * d * d, *a = offset + c * d, *dg = diag + c * d;
  double *L = Lw + c * d * d, *W = Ww + c * d * d, *Bi = binv + c * d * d, *cf = coef + c * 3 * d;
  const int32_t *uf = u_feat + c * d;
  if (threadIdx.x == 0) failed = 0;
  for (int64_t t = threadIdx.x; t < u * u; t += blockDim.x) L[t] = B[t];
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) pos[i] = -1;
  __syncthreads();
  for (int64_t q = threadIdx.x; q < u; q += blockDim.x) pos[uf[q]] = (int32_t)q;
  for (int64_t j = 0; j < u; j++) {
    if (threadIdx.x == 0) {
      double s = L[j * u + j];
      for (int64_t q = 0; q < j; q++) s -= L[j * u + q] * L[j * u + q];
      if (!(s > 0.0) || !isfinite(s)) failed = 1;
      else L[j * u + j] = sqrt(s);
    }
    __syncthreads();
    if (failed) break;
    double ljj = L[j * u + j];
    for (int64_t i = j + 1 + threadIdx.x; i < u; i += blockDim.x) {
      double t = L[i * u + j];
      for (int64_t q = 0; q < j; q++) t -= L[i * u + q] * L[j * u + q];
      L[i * u + j] = t / ljj;
    }
    __syncthreads();
  }
  if (failed) {
    if (threadIdx.x == 0) alive[c] = 0, atomicAdd(n_fail, 1ull);
    return;
  }
  for (int64_t j = threadIdx.x; j < u; j += blockDim.x) { /* column j of L⁻¹ */
    for (int64_t i = 0; i < j; i++) W[i * u + j] = 0.0;
    W[j * u + j] = 1.0 / L[j * u + j];
    for (int64_t i = j + 1; i < u; i++) {
      double t = 0.0;
      for (int64_t q = j; q < i; q++) t -= L[i * u + q] * W[q * u + j];
      W[i * u + j] = t / L[i * u + i];
    }
  }
  __syncthreads();
  for (int64_t t = threadIdx.x; t < u * (u + 1) / 2; t += blockDim.x) {
    int64_t i, j;
    pair_of(t, u, i, j);
    double s = 0.0;
    for (int64_t q = j; q < u; q++) s += W[q * u + i] * W[q * u + j];
    Bi[i * u + j] = Bi[j * u + i] = s;
    tri[c * tri_size(d) + j * (j + 1) / 2 + i] = s; /* row j ≥ i of the lower triangle */
  }
  __syncthreads();
  for (int64_t q = threadIdx.x; q < u; q += blockDim.x) {
    double t = 0.0;
    for (int64_t x = 0; x < u; x++) t -= Bi[q * u + x] * a[uf[x]]; /* (B⁻¹e)_q, e = −a */
    v[q] = t;
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    int32_t q = pos[i];
    double inv = 1.0 / dg[i];
    posg[c * d + i] = (int16_t)q;
    cf[i] = q < 0 ? inv : Bi[q * u + q];
    cf[d + i] = q < 0 ? inv : 0.0;
    cf[2 * d + i] = q < 0 ? inv * (-2.0 * a[i]) : 2.0 * v[q];
  }
  if (threadIdx.x == 0) {
    double log_det = 0.0, bs = 0.0;
    int ok = 1;
    for (int64_t q = 0; q < u; q++) log_det += 2.0 * log(L[q * u + q]);
    for (int64_t q = 0; q < u; q++) bs -= v[q] * a[uf[q]];
    for (int64_t i = 0; i < d; i++) {
      double h;
      if (pos[i] < 0) {
        if (!(dg[i] > 0.0) || !isfinite(dg[i])) ok = 0;
        log_det += log(dg[i]);
        bs += a[i] * a[i] / dg[i];
        h = 1.0 / dg[i];
      } else {
        h = Bi[pos[i] * u + pos[i]];
      }
      bs += s2[i] * h;
    }
    double b = bs + log_det - 2.0 * log(weight[c]) + ep.log2pi_d;
    base[c] = b;
    if (!ok || !isfinite(b)) alive[c] = 0, atomicAdd(n_fail, 1ull);
  }
}

/* ---- E-step: per point --------------------------------------------------------------------------- */

/* C[c·rows + p − r0] += rᵀ B_c⁻¹ r over U_c for the points perm[r0 .. r0 + rows) (perm null: the
 * identity), in the CPU's loop order. r is 0 off a point's unmasked set, so a warp works only on
 * the positions of U_c where some lane is unmasked (the OR of the lanes' feature bitmasks AND U_c's
 * bitmask; a skipped row or column adds exactly 0). With perm = the label order, the lanes are
 * points of one cluster with similar masks and that set is small for most clusters. */
__global__ void k_quad(const double *X, const uint32_t *pm, const int32_t *perm, int64_t r0, int64_t rows, int64_t d,
                       const int8_t *alive, const int32_t *n_u, const uint32_t *u_bits, const double *binv,
                       double *C) {
  extern __shared__ double rs[]; /* [active][QUAD_THREADS], then the warps' position lists [warps][d] */
  int64_t c = blockIdx.y, u = n_u[c];
  if (c == 0 || !alive[c] || u == 0) return;
  int64_t pl = blockIdx.x * (int64_t)QUAD_THREADS + threadIdx.x, nw = words(d);
  bool valid = pl < rows;
  int64_t j = valid ? (perm ? perm[r0 + pl] : r0 + pl) : 0;
  int lane = threadIdx.x % 32;
  int32_t *list = (int32_t *)(rs + d * QUAD_THREADS) + (threadIdx.x / 32) * d;
  const double *x = X + j * 4 * d + 2 * d;
  int na = 0, below = 0; /* below: U_c's features in earlier words */
  for (int64_t w = 0; w < nw; w++) {
    uint32_t ub = u_bits[c * nw + w];
    uint32_t act = __reduce_or_sync(FULL, valid ? pm[j * nw + w] : 0u) & ub;
    while (act) {
      int b = __ffs(act) - 1;
      act &= act - 1;
      if (lane == 0) list[na] = below + __popc(ub & ((1u << b) - 1u));
      rs[na * QUAD_THREADS + threadIdx.x] = valid ? x[w * 32 + b] : 0.0;
      na++;
    }
    below += __popc(ub);
  }
  __syncwarp();
  const double *Bi = binv + c * d * d;
  double acc = 0.0;
  for (int a = 0; a < na; a++) {
    int64_t q = list[a];
    double rx = rs[a * QUAD_THREADS + threadIdx.x];
    const double *row = Bi + q * u;
    double t = 0.5 * __ldg(row + q) * rx;
    for (int b = 0; b < a; b++) t += __ldg(row + list[b]) * rs[b * QUAD_THREADS + threadIdx.x];
    acc += 2.0 * rx * t;
  }
  if (valid) C[c * rows + (j - r0)] += acc;
}

/* Σ_x 2 r_x (½ B⁻¹_xx r_x + Σ_{y<x} B⁻¹_xy r_y) over the point's own entries in U_c — the same
 * terms, in the same order, as k_quad and the CPU (their extra terms are exact zeros) — for the
 * point whose (feature, r) list is column tid of sF, sR (ne entries, features increasing). B⁻¹ is
 * the packed lower triangle sB (row q at q(q+1)/2), sPos maps a feature to its position in U_c (−1
 * off U_c). R entries x at a time live in registers; one pass over the entries before them adds
 * their off-diagonal terms, each t_x still summed in increasing y. */
template <int R>
__device__ double sparse_quad(const int16_t *sF, const double *sR, const double *sB, const int16_t *sPos, int tid,
                              int T, int ne) {
  double acc = 0.0;
  int e = 0;
  while (e < ne) {
    int xe[R], xrow[R];
    double xr[R], t[R];
    int last = -1;
#pragma unroll
    for (int s = 0; s < R; s++) {
      int q = -1;
      while (e < ne && (q = sPos[sF[e * T + tid]]) < 0) e++;
      xe[s] = -1, xrow[s] = 0, xr[s] = 0.0, t[s] = 0.0;
      if (e < ne) {
        double r = sR[e * T + tid];
        xe[s] = e, last = e, xr[s] = r, xrow[s] = q * (q + 1) / 2;
        t[s] = 0.5 * sB[xrow[s] + q] * r;
        e++;
      }
    }
    for (int y = 0; y < last; y++) {
      int q = sPos[sF[y * T + tid]];
      if (q < 0) continue;
      double r = sR[y * T + tid];
#pragma unroll
      for (int s = 0; s < R; s++)
        if (y < xe[s]) t[s] += sB[xrow[s] + q] * r;
    }
#pragma unroll
    for (int s = 0; s < R; s++)
      if (xe[s] >= 0) acc += 2.0 * xr[s] * t[s];
  }
  return acc;
}

/* Block copy of n doubles from global to shared memory, STAGE_BATCH loads in flight per thread
 * (the copy is latency-bound otherwise: it runs once per cluster between two barriers). */
__device__ inline void stage(double *dst, const double *src, int64_t n, int tid, int T) {
  for (int64_t t0 = tid; t0 < n; t0 += (int64_t)T * STAGE_BATCH) {
    double v[STAGE_BATCH];
#pragma unroll
    for (int i = 0; i < STAGE_BATCH; i++) v[i] = t0 + i * T < n ? __ldg(src + t0 + i * T) : 0.0;
#pragma unroll
    for (int i = 0; i < STAGE_BATCH; i++)
      if (t0 + i * T < n) dst[t0 + i * T] = v[i];
  }
}

struct quadparams {
  int64_t r0, rows, d, e_cap, k, per_block; /* per_block: clusters handled by one block */
};

/* Dynamic shared memory of k_quad_sparse: the block's lists (t × e_cap doubles and features), one
 * packed triangle and the feature → position table. */
size_t sparse_smem_bytes(int64_t t, int64_t e_cap, int64_t d) {
  return sizeof(double) * (size_t)(t * e_cap + tri_size(d)) + sizeof(int16_t) * (size_t)(t * e_cap + d);
}

/* The block part, sparse: C[c·rows + p − r0] += rᵀ B_c⁻¹ r over U_c for the points perm[r0 + ...]
 * (perm null: the identity), one thread per point and clusters c0 .. c1 − 1 of blockIdx.y in turn.
 * Each thread first gathers its point's unmasked entries (feature, r = y − ν) into its column of
 * shared memory (at most e_cap: the largest unmasked count of the data); per cluster the block
 * stages the packed B_c⁻¹ and U_c's position table, then every thread walks its own entries only
 * (≈ s²/2 multiply-adds for s entries in U_c, instead of the warp union's). */
template <int R>
__global__ void __launch_bounds__(SPARSE_THREADS)
    k_quad_sparse(const double *X, const uint32_t *pm, const int32_t *perm, quadparams qp, const int8_t *alive,
                  const int32_t *n_u, const double *tri, const int16_t *posg, double *C) {
  extern __shared__ double sh[];
  const int T = (int)blockDim.x, tid = (int)threadIdx.x;
  const int64_t d = qp.d, nw = words(qp.d), e_cap = qp.e_cap;
  double *sR = sh, *sB = sh + T * e_cap;
  int16_t *sF = (int16_t *)(sB + tri_size(d)), *sPos = sF + T * e_cap;
  int64_t pl = blockIdx.x * (int64_t)T + tid;
  bool valid = pl < qp.rows;
  int64_t j = valid ? (perm ? perm[qp.r0 + pl] : qp.r0 + pl) : 0;
  int ne = 0;
  if (valid) {
    const double *x = X + j * 4 * d + 2 * d;
    for (int64_t w = 0; w < nw; w++) {
      uint32_t bits = pm[j * nw + w];
      while (bits && ne < e_cap) {
        int b = __ffs(bits) - 1, f = (int)(w * 32 + b);
        bits &= bits - 1;
        sF[ne * T + tid] = (int16_t)f;
        sR[ne * T + tid] = x[f];
        ne++;
      }
    }
  }
  int64_t c0 = blockIdx.y * qp.per_block, c1 = c0 + qp.per_block < qp.k ? c0 + qp.per_block : qp.k;
  for (int64_t c = c0; c < c1; c++) {
    int64_t u = n_u[c];
    if (c == 0 || !alive[c] || u == 0) continue; /* uniform over the block */
    __syncthreads();                             /* the previous cluster's tables are no longer read */
    stage(sB, tri + c * tri_size(d), tri_size(u), tid, T);
    for (int64_t t = tid; t < d; t += T) sPos[t] = posg[c * d + t];
    __syncthreads();
    double acc = sparse_quad<R>(sF, sR, sB, sPos, tid, T, ne);
    if (valid) C[c * qp.rows + (j - qp.r0)] += acc;
  }
}

/* The block part with B_c⁻¹, the position table and the point's entries read from global memory
 * (through the caches): the fallback when neither shared-memory kernel fits a block (very large D,
 * e.g. 384 channels × 3 PCs). One thread per point, cluster blockIdx.y; the terms of sparse_quad in
 * its order (entries x in feature order, each t_x summed over the entries y before it, increasing). */
__global__ void k_quad_global(const double *X, const uint32_t *pm, const int32_t *perm, int64_t r0, int64_t rows,
                              int64_t d, const int8_t *alive, const int32_t *n_u, const double *tri,
                              const int16_t *posg, double *C) {
  const int64_t c = blockIdx.y, pl = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c == 0 || !alive[c] || n_u[c] == 0 || pl >= rows) return;
  const int64_t j = perm ? perm[r0 + pl] : r0 + pl, nw = words(d);
  const double *x = X + j * 4 * d + 2 * d, *B = tri + c * tri_size(d);
  const int16_t *pos = posg + c * d;
  const uint32_t *bits = pm + j * nw;
  double acc = 0.0;
  for (int64_t w = 0; w < nw; w++) {
    for (uint32_t bx = bits[w]; bx; bx &= bx - 1) {
      const int fx = (int)(w * 32 + __ffs(bx) - 1), q = pos[fx];
      if (q < 0) continue;
      const double r = x[fx];
      const int64_t row = (int64_t)q * (q + 1) / 2;
      double t = 0.5 * B[row + q] * r;
      for (int64_t v = 0; v <= w; v++) {
        uint32_t by = v < w ? bits[v] : bits[v] & ((1u << (fx & 31)) - 1u); /* the entries before x */
        for (; by; by &= by - 1) {
          const int fy = (int)(v * 32 + __ffs(by) - 1), qy = pos[fy];
          if (qy >= 0) t += B[row + qy] * x[fy];
        }
      }
      acc += 2.0 * r * t;
    }
  }
  C[c * rows + (j - r0)] += acc;
}

__global__ void k_select(const double *C, int64_t r0, int64_t rows, int64_t k, const int8_t *alive, const double *base,
                         const double *weight, int32_t *best, int32_t *second, double *cost1, double *cost2) {
  int64_t pl = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (pl >= rows) return;
  int32_t b1 = -1, b2 = -1;
  double c1 = INFINITY, c2 = INFINITY;
  if (alive[0]) b1 = 0, c1 = -log(weight[0]);
  for (int64_t c = 1; c < k; c++)
    if (alive[c]) keep_two((int32_t)c, 0.5 * (base[c] + C[c * rows + pl]), b1, c1, b2, c2);
  int64_t j = r0 + pl;
  best[j] = b1, second[j] = b2, cost1[j] = c1, cost2[j] = c2;
}

/* C-step: out[0] = changed, out[1] = points without any cluster. */
__global__ void k_cstep(int32_t *labels, double *cost, const int32_t *best, const double *cost1, int64_t n,
                        unsigned long long *out) {
  __shared__ unsigned long long sc[PT_THREADS], su[PT_THREADS];
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  unsigned long long ch = 0, un = 0;
  if (j < n) {
    if (best[j] < 0) {
      cost[j] = INFINITY;
      un = 1;
    } else {
      ch = labels[j] != best[j];
      labels[j] = best[j];
      cost[j] = cost1[j];
    }
  }
  sc[threadIdx.x] = ch, su[threadIdx.x] = un;
  __syncthreads();
  for (int s = PT_THREADS / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sc[threadIdx.x] += sc[threadIdx.x + s], su[threadIdx.x] += su[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, sc[0]), atomicAdd(out + 1, su[0]);
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

__global__ void k_mark_half(const int32_t *sub_labels, int64_t n, int8_t *half) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) half[j] = sub_labels[j] == 2;
}

__global__ void k_apply_half(const int32_t *pts, const int8_t *half, int64_t n_c, int32_t c, int32_t knew,
                             int32_t *labels) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n_c && half[j] && labels[pts[j]] == c) labels[pts[j]] = knew;
}

size_t quad_smem_bytes(int64_t d) {
  return sizeof(double) * (size_t)(d * QUAD_THREADS) + sizeof(int32_t) * (size_t)(d * (QUAD_THREADS / 32));
}

inline unsigned blocks(int64_t n, int t) { return (unsigned)((n + t - 1) / t); }

/* ---- host side ----------------------------------------------------------------------------------- */

template <typename T>
ss_status dalloc(ss_ctx *ctx, T *&p, int64_t count, const char *what) {
  cudaFree(p);
  p = nullptr;
  return ss_cuda_malloc(ctx, (void **)&p, sizeof(T) * (size_t)(count > 0 ? count : 1), what);
}

struct timers {
  bool on = false;
  cudaEvent_t ev[12];
  int n = 0;
};

/* One problem on the device: the main one or a split sub-problem (gathered rows). */
struct prob {
  const ss_backend *be = nullptr;
  const ss_mask_em_opts *o = nullptr;
  cudaStream_t s = nullptr;
  cublasHandle_t blas = nullptr;
  int64_t n = 0, n_cap = 0, d = 0;
  int has_noise = 1;
  double log_n = 0;
  const double *X = nullptr, *kp = nullptr, *nu = nullptr, *s2 = nullptr;
  const uint32_t *pm = nullptr;               /* [n × words(d)] unmasked-feature bitmasks */
  double *X_own = nullptr, *kp_own = nullptr; /* sub-problems: the gathered rows */
  uint32_t *pm_own = nullptr;
  int64_t k = 0, k_cap = 0, chunk = 0;
  /* per point */
  int32_t *labels = nullptr, *best = nullptr, *second = nullptr, *order = nullptr, *iota = nullptr, *prev = nullptr;
  double *cost = nullptr, *cost1 = nullptr, *cost2 = nullptr;
  uint32_t *keys = nullptr, *keys_sorted = nullptr;
  unsigned char *tmp = nullptr;
  size_t tmp_bytes = 0;
  /* per cluster (device) */
  int64_t *group = nullptr, *count_d = nullptr, *item_first = nullptr;
  unsigned long long *hist = nullptr, *scal = nullptr;
  int8_t *alive = nullptr;
  int32_t *n_u = nullptr, *u_feat = nullptr, *map = nullptr;
  uint32_t *u_bits = nullptr;
  double *weight = nullptr, *kp_sum = nullptr, *offset = nullptr, *diag = nullptr, *block = nullptr, *Lw = nullptr,
         *Ww = nullptr, *binv = nullptr, *tri = nullptr, *coef = nullptr, *base = nullptr, *C = nullptr,
         *dsum = nullptr;
  int16_t *posg = nullptr;
  /* sparse block part: threads per block (0: the warp-union kernel), its shared memory, and the
   * largest unmasked count of a point (the data's, also a bound for gathered sub-problems) */
  int64_t q_threads = 0, e_cap = 0;
  size_t q_smem = 0;
  bool q_global = false; /* neither shared-memory kernel fits: k_quad_global */
  item *items = nullptr;
  double *part_stat = nullptr, *part_block = nullptr;
  int64_t item_cap = 0;
  /* deletion */
  int *seg_cnt = nullptr, *seg_off = nullptr, *s_bad = nullptr;
  double *s_kp = nullptr, *s_diff = nullptr, *tot_kp = nullptr, *delta = nullptr;
  long long *tot_n = nullptr;
  int64_t seg_cap = 0;
  /* host mirrors */
  std::vector<int64_t> count_h, group_h;
  std::vector<int8_t> alive_h;
  std::vector<double> weight_h;
  int64_t n_chol_fail = 0;
  timers *tm = nullptr;
};

void mark(prob &p) {
  if (p.tm && p.tm->on) cudaEventRecord(p.tm->ev[p.tm->n++], p.s);
}

void prob_free(prob &p) {
  void *ptrs[] = {p.X_own, p.kp_own, p.pm_own, p.u_bits, p.labels, p.best, p.second, p.order, p.iota, p.prev, p.cost, p.cost1, p.cost2,
                  p.keys, p.keys_sorted, p.tmp, p.group, p.count_d, p.item_first, p.hist, p.scal, p.alive, p.n_u,
                  p.u_feat, p.map, p.weight, p.kp_sum, p.offset, p.diag, p.block, p.Lw, p.Ww, p.binv, p.tri, p.posg, p.coef,
                  p.base, p.C, p.dsum, p.items, p.part_stat, p.part_block, p.seg_cnt, p.seg_off, p.s_bad, p.s_kp,
                  p.s_diff, p.tot_kp, p.delta, p.tot_n};
  for (void *q : ptrs) cudaFree(q);
  p = prob();
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
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.count_h.data(), p.hist, sizeof(int64_t) * (size_t)p.k, cudaMemcpyDeviceToHost, p.s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  return SS_OK;
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

/* ---- M-step ---- */

ss_status mstep(ss_ctx *ctx, prob &p) {
  SS_TRY(group(ctx, p));
  const ss_mask_em_opts *o = p.o;
  int64_t k = p.k, kg = 0, d = p.d;
  for (int64_t c = 1; c < k; c++) {
    p.alive_h[c] = p.count_h[c] > 0 && (double)p.count_h[c] + o->prior_point - 1.0 > 0.0;
    kg += p.alive_h[c];
  }
  double Q = p.has_noise ? o->noise_point : 0.0, Z = (double)p.n + Q + o->prior_point * (double)kg;
  p.alive_h[0] = p.has_noise && (double)p.count_h[0] + Q > 0.0;
  p.weight_h[0] = p.alive_h[0] ? ((double)p.count_h[0] + Q) / Z : 0.0;
  for (int64_t c = 1; c < k; c++) p.weight_h[c] = p.alive_h[c] ? ((double)p.count_h[c] + o->prior_point) / Z : 0.0;
  /* chunks of every cluster that needs stats (noise: k_p only) */
  std::vector<item> it;
  std::vector<int64_t> first((size_t)k + 1);
  for (int64_t c = 0; c < k; c++) {
    first[c] = (int64_t)it.size();
    if (c > 0 && !p.alive_h[c]) continue;
    for (int64_t g = p.group_h[c]; g < p.group_h[c + 1]; g += MSTEP_CHUNK)
      it.push_back({c, g, g + MSTEP_CHUNK < p.group_h[c + 1] ? g + MSTEP_CHUNK : p.group_h[c + 1]});
  }
  first[k] = (int64_t)it.size();
  if ((int64_t)it.size() > p.item_cap) return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM: M-step items overflow");
  cudaStream_t s = p.s;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.alive, p.alive_h.data(), (size_t)k, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.weight, p.weight_h.data(), sizeof(double) * (size_t)k, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.count_d, p.count_h.data(), sizeof(int64_t) * (size_t)k, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.item_first, first.data(), sizeof(int64_t) * (size_t)(k + 1), cudaMemcpyHostToDevice, s));
  if (!it.empty())
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.items, it.data(), sizeof(item) * it.size(), cudaMemcpyHostToDevice, s));
  mparams mp = {o->prior_point, o->points_for_cluster_mask, d};
  unsigned ni = (unsigned)it.size();
  if (ni) k_mstat_part<<<ni, STAT_THREADS, 0, s>>>(p.items, p.order, p.X, p.kp, d, p.part_stat);
  k_mstat_final<<<(unsigned)k, STAT_THREADS, sizeof(double) * (size_t)d, s>>>(
      p.item_first, p.part_stat, p.count_d, p.alive, p.nu, p.s2, mp, p.offset, p.diag, p.n_u, p.u_feat, p.u_bits,
      p.kp_sum);
  if (ni) k_mblock_part<<<ni, PAIR_THREADS, 0, s>>>(p.items, p.order, p.X, p.alive, p.n_u, p.u_feat, d, p.part_block);
  k_mblock_final<<<(unsigned)k, PAIR_THREADS, 0, s>>>(p.item_first, p.part_block, p.count_d, p.alive, p.n_u, p.offset,
                                                       p.diag, p.u_feat, mp, p.block);
  SS_CUDA_TRY_LAUNCH(ctx, "M-step");
  return SS_OK;
}

/* ---- E-step ---- */

/* Plan the sparse block-part kernel for points with at most e_cap unmasked features: the largest
 * power-of-two block (≤ SPARSE_THREADS points) whose shared memory stays within SPARSE_SMEM_TARGET
 * (two blocks per SM), down to one warp; when even that exceeds the device's per-block limit (very
 * large D), q_threads stays 0 and the warp-union kernel k_quad runs instead. */
ss_status quad_plan(ss_ctx *ctx, prob &p, int64_t e_cap) {
  p.e_cap = e_cap, p.q_threads = 0, p.q_smem = 0;
  int dev = 0, optin = 0;
  SS_CUDA_TRY(ctx, cudaGetDevice(&dev));
  SS_CUDA_TRY(ctx, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  const int forced = p.o ? p.o->gpu_block_kernel : SS_EM_BLOCK_AUTO;
  p.q_global = quad_smem_bytes(p.d) > (size_t)optin || forced == SS_EM_BLOCK_GLOBAL;
  if (p.q_global && p.d > INT16_MAX)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "masked EM (cuda): %lld features: the GPU block part takes at most %d",
                   (long long)p.d, INT16_MAX);
  if (p.d > INT16_MAX || forced == SS_EM_BLOCK_GLOBAL || forced == SS_EM_BLOCK_UNION)
    return SS_OK; /* features are int16 in shared memory */
  int64_t t = SPARSE_THREADS;
  while (t > SPARSE_MIN_THREADS && sparse_smem_bytes(t, e_cap, p.d) > SPARSE_SMEM_TARGET) t /= 2;
  size_t bytes = sparse_smem_bytes(t, e_cap, p.d);
  if (bytes > (size_t)optin) return SS_OK;
  if (bytes > DEFAULT_SMEM_LIMIT)
    SS_CUDA_TRY(ctx, cudaFuncSetAttribute(k_quad_sparse<SPARSE_TILE>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          (int)bytes));
  p.q_threads = t, p.q_smem = bytes;
  return SS_OK;
}

/* Grid of the sparse kernel: point tiles × cluster groups; the clusters are split over blocks only
 * when the tiles alone would not give every SM SPARSE_WAVES blocks (small problems). */
void launch_sparse(prob &p, const int32_t *perm, int64_t r0, int64_t rows) {
  int64_t t = p.q_threads, tiles = (rows + t - 1) / t, k = p.k;
  int64_t sms = p.be && p.be->gpu.sm_count > 0 ? p.be->gpu.sm_count : 1;
  int64_t groups = (SPARSE_WAVES * sms + tiles - 1) / tiles;
  groups = groups < 1 ? 1 : (groups > k ? k : groups);
  int64_t per = (k + groups - 1) / groups;
  groups = (k + per - 1) / per;
  quadparams qp = {r0, rows, p.d, p.e_cap, k, per};
  k_quad_sparse<SPARSE_TILE><<<dim3((unsigned)tiles, (unsigned)groups), (unsigned)t, p.q_smem, p.s>>>(
      p.X, p.pm, perm, qp, p.alive, p.n_u, p.tri, p.posg, p.C);
}

ss_status estep(ss_ctx *ctx, prob &p) {
  cudaStream_t s = p.s;
  int64_t k = p.k, d = p.d;
  SS_CUDA_TRY(ctx, cudaMemsetAsync(p.scal, 0, sizeof(unsigned long long) * 4, s));
  eparams ep = {d, (double)d * SS_EM_LOG_2PI};
  k_factor<<<(unsigned)k, CHOL_THREADS, sizeof(double) * (size_t)(2 * d), s>>>(
      k, p.n_u, p.u_feat, p.block, p.offset, p.diag, p.s2, p.weight, ep, p.alive, p.Lw, p.Ww, p.binv, p.tri, p.posg,
      p.coef, p.base, p.scal);
  SS_CUDA_TRY_LAUNCH(ctx, "E-step factorisation");
  mark(p);
  size_t quad_smem = quad_smem_bytes(d);
  const int32_t *perm = p.n <= p.chunk ? p.order : nullptr; /* the label order of this M-step (one chunk) */
  const double one = 1.0, zero = 0.0;
  for (int64_t r0 = 0; r0 < p.n; r0 += p.chunk) {
    int64_t rows = p.n - r0 < p.chunk ? p.n - r0 : p.chunk;
    SS_CUBLAS_TRY(ctx, cublasDgemm(p.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)rows, (int)k, (int)(3 * d), &one,
                                   p.X + r0 * 4 * d, (int)(4 * d), p.coef, (int)(3 * d), &zero, p.C, (int)rows));
    mark(p);
    if (p.q_threads > 0) {
      launch_sparse(p, perm, r0, rows);
    } else if (p.q_global) {
      dim3 g(blocks(rows, PT_THREADS), (unsigned)k);
      k_quad_global<<<g, PT_THREADS, 0, s>>>(p.X, p.pm, perm, r0, rows, d, p.alive, p.n_u, p.tri, p.posg, p.C);
    } else {
      dim3 g(blocks(rows, QUAD_THREADS), (unsigned)k);
      k_quad<<<g, QUAD_THREADS, quad_smem, s>>>(p.X, p.pm, perm, r0, rows, d, p.alive, p.n_u, p.u_bits, p.binv, p.C);
    }
    SS_CUDA_TRY_LAUNCH(ctx, "E-step block part");
    mark(p);
    k_select<<<blocks(rows, PT_THREADS), PT_THREADS, 0, s>>>(p.C, r0, rows, k, p.alive, p.base, p.weight, p.best,
                                                            p.second, p.cost1, p.cost2);
    SS_CUDA_TRY_LAUNCH(ctx, "E-step selection");
    mark(p);
  }
  unsigned long long fails = 0;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(&fails, p.scal, sizeof(fails), cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.alive_h.data(), p.alive, (size_t)k, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  p.n_chol_fail = (int64_t)fails;
  return SS_OK;
}

ss_status cstep(ss_ctx *ctx, prob &p, int64_t *changed, int64_t *unassigned) {
  unsigned long long out[2] = {0, 0};
  SS_CUDA_TRY(ctx, cudaMemsetAsync(p.scal, 0, sizeof(out), p.s));
  k_cstep<<<blocks(p.n, PT_THREADS), PT_THREADS, 0, p.s>>>(p.labels, p.cost, p.best, p.cost1, p.n, p.scal);
  SS_CUDA_TRY_LAUNCH(ctx, "C-step");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(out, p.scal, sizeof(out), cudaMemcpyDeviceToHost, p.s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  *changed = (int64_t)out[0];
  if (unassigned) *unassigned = (int64_t)out[1];
  return SS_OK;
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

ss_status full_step(ss_ctx *ctx, prob &p, int64_t *changed) {
  SS_TRY(mstep(ctx, p));
  SS_TRY(estep(ctx, p));
  return cstep(ctx, p, changed, nullptr);
}

/* ---- the fit -------------------------------------------------------------------------------------- */

struct dev_data {
  int64_t n = 0, d = 0, max_nnz = 0; /* max_nnz: the largest unmasked count of a point */
  double *X = nullptr, *kp = nullptr, *nu = nullptr, *s2 = nullptr;
  uint32_t *pm = nullptr;
  ~dev_data() {
    cudaFree(pm);
    cudaFree(X);
    cudaFree(kp);
    cudaFree(nu);
    cudaFree(s2);
  }
};

ss_status upload(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *dt, dev_data &dd) {
  cudaStream_t s = ss_cuda_stream(be);
  int64_t n = dt->n, d = dt->d, nnz = dt->nnz;
  dd.n = n, dd.d = d, dd.max_nnz = 0;
  for (int64_t q = 0; q < n; q++)
    if (dt->row[q + 1] - dt->row[q] > dd.max_nnz) dd.max_nnz = dt->row[q + 1] - dt->row[q];
  SS_TRY(dalloc(ctx, dd.X, n * 4 * d, "masked EM dense corrected data (N x 4D doubles)"));
  SS_TRY(dalloc(ctx, dd.kp, n, "masked EM k_p"));
  SS_TRY(dalloc(ctx, dd.pm, n * words(d), "masked EM feature bitmasks"));
  SS_TRY(dalloc(ctx, dd.nu, d, "masked EM noise means"));
  SS_TRY(dalloc(ctx, dd.s2, d, "masked EM noise variances"));
  ss_dbuf<int64_t> row;
  ss_dbuf<int32_t> feat;
  ss_dbuf<float> y, eta, mask;
  SS_TRY(row.alloc(ctx, (size_t)n + 1, "masked EM upload"));
  SS_TRY(feat.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_TRY(y.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_TRY(eta.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_TRY(mask.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(row, dt->row, sizeof(int64_t) * (size_t)(n + 1), cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(feat, dt->feat, sizeof(int32_t) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(y, dt->y, sizeof(float) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(eta, dt->eta, sizeof(float) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(mask, dt->mask, sizeof(float) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dd.kp, dt->kp, sizeof(double) * (size_t)n, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dd.nu, dt->nu, sizeof(double) * (size_t)d, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dd.s2, dt->sigma2, sizeof(double) * (size_t)d, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(dd.X, 0, sizeof(double) * (size_t)(n * 4 * d), s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(dd.pm, 0, sizeof(uint32_t) * (size_t)(n * words(d)), s));
  k_expand<<<blocks(n, PT_THREADS), PT_THREADS, 0, s>>>(row, feat, y, eta, mask, dd.nu, dd.s2, n, d, dd.X, dd.pm);
  SS_CUDA_TRY_LAUNCH(ctx, "expand");
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}

/* The main problem (and its split trial) over the resident data, labels from the host. */
ss_status main_init(ss_ctx *ctx, prob &p, const ss_backend *be, const ss_mask_em_opts *o, const dev_data &dd,
                    const int32_t *labels, int64_t k) {
  SS_TRY(prob_init(ctx, p, be, o, dd.n, dd.d, k, false));
  p.X = dd.X, p.kp = dd.kp, p.nu = dd.nu, p.s2 = dd.s2, p.pm = dd.pm;
  p.has_noise = 1;
  p.log_n = log((double)dd.n);
  SS_TRY(quad_plan(ctx, p, dd.max_nnz));
  size_t qs = quad_smem_bytes(dd.d);
  if (qs > DEFAULT_SMEM_LIMIT && !p.q_global)
    SS_CUDA_TRY(ctx, cudaFuncSetAttribute(k_quad, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)qs));
  if (labels)
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.labels, labels, sizeof(int32_t) * (size_t)dd.n, cudaMemcpyHostToDevice, p.s));
  return SS_OK;
}

struct gpu_run {
  ss_ctx *ctx;
  const ss_mask_em_opts *o;
  dev_data dd;
  prob st, trial, sub;
  std::vector<uint64_t> hashes;
  ss_mask_em_result *res;
  int64_t log_cap = 0, split_rounds = 0;
  ~gpu_run() {
    prob_free(st);
    prob_free(trial);
    prob_free(sub);
  }
};

ss_status log_push(gpu_run &r, const ss_mask_em_iter_log &e) {
  ss_mask_em_result *res = r.res;
  if (res->n_log == r.log_cap) {
    int64_t cap = r.log_cap ? 2 * r.log_cap : 64;
    void *l = realloc(res->log, sizeof(ss_mask_em_iter_log) * (size_t)cap);
    if (!l) return ss_fail(r.ctx, SS_ERR_NOMEM, "masked EM: out of memory for the iteration log");
    res->log = (ss_mask_em_iter_log *)l;
    r.log_cap = cap;
  }
  res->log[res->n_log++] = e;
  if (e.step == SS_EM_STEP_FULL)
    ss_log_info(r.ctx, "masked EM (cuda): iteration %" PRId64 ": score %.6f, %" PRId64 " clusters, %" PRId64
                       " changed, %" PRId64 " deleted, %" PRId64 " Cholesky failures, %.4f s",
                e.iteration, e.score, e.n_clusters, e.changed, e.deletions, e.chol_failures, e.seconds);
  else
    ss_log_info(r.ctx, "masked EM (cuda): iteration %" PRId64 ": split round: %" PRId64 " tried, %" PRId64
                       " accepted, score %.6f, %" PRId64 " clusters, %.3f s",
                e.iteration, e.splits_tried, e.splits_accepted, e.score, e.n_clusters, e.seconds);
  return SS_OK;
}

/* One full iteration: compaction, M, E, C, deletion, score (as mask_em.c). */
ss_status full_iteration(ss_ctx *ctx, prob &p, int64_t it, ss_mask_em_iter_log *e, ss_mask_em_result *res) {
  double t0 = ss_now();
  ss_status cs;
  compact(p, ctx, &cs);
  SS_TRY(cs);
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.prev, p.labels, sizeof(int32_t) * (size_t)p.n, cudaMemcpyDeviceToDevice, p.s));
  SS_TRY(mstep(ctx, p));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  double t1 = ss_now();
  SS_TRY(estep(ctx, p));
  double t2 = ss_now();
  int64_t changed = 0, deleted = 0, live = 0;
  SS_TRY(cstep(ctx, p, &changed, nullptr));
  SS_TRY(delete_step(ctx, p, &deleted));
  SS_TRY(diff_hash(ctx, p, p.prev, &changed, nullptr));
  double sc;
  SS_TRY(score(ctx, p, &sc, &live));
  double t3 = ss_now();
  if (!std::isfinite(sc))
    return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM (cuda): iteration %" PRId64 ": the score is not finite (%g)", it, sc);
  if (res) {
    res->t_mstep_s += t1 - t0;
    res->t_estep_s += t2 - t1;
    res->t_cstep_s += t3 - t2;
    res->n_deletions += deleted;
    res->n_chol_failures += p.n_chol_fail;
  }
  *e = ss_mask_em_iter_log{};
  e->iteration = it, e->step = SS_EM_STEP_FULL, e->score = sc, e->n_clusters = live, e->changed = changed;
  e->deletions = deleted, e->chol_failures = p.n_chol_fail, e->seconds = t3 - t0;
  return SS_OK;
}

/* ---- split round (as mask_em_split.c; sub-problems one after the other) ---- */

struct sub_res {
  double s1 = INFINITY, s2 = INFINITY;
  bool valid = false;
};

ss_status sub_converge(ss_ctx *ctx, prob &sub, bool *valid) {
  uint64_t seen[SUB_CYCLE_WINDOW];
  int64_t n_seen = 0;
  for (int64_t it = 0; it < sub.o->max_iterations; it++) {
    SS_TRY(mstep(ctx, sub));
    if (sub.count_h[1] == 0 || sub.count_h[2] == 0) return *valid = false, SS_OK;
    SS_TRY(estep(ctx, sub));
    int64_t changed, unassigned;
    SS_TRY(cstep(ctx, sub, &changed, &unassigned));
    if (unassigned) return *valid = false, SS_OK; /* both clusters removed for some point */
    if (changed == 0) break;
    uint64_t h;
    SS_TRY(diff_hash(ctx, sub, nullptr, nullptr, &h));
    bool repeat = false;
    for (int64_t s = 0; s < n_seen && s < SUB_CYCLE_WINDOW; s++) repeat = repeat || seen[s] == h;
    if (repeat) break;
    seen[n_seen++ % SUB_CYCLE_WINDOW] = h;
  }
  SS_TRY(counts(ctx, sub));
  *valid = sub.count_h[2] > 0 && sub.count_h[2] < sub.n;
  return SS_OK;
}

/* S1 and S2 of the cluster whose points are pts[0 .. n_c); half[j] = 1 for the second half. */
ss_status fit_sub(ss_ctx *ctx, gpu_run &r, const int32_t *pts, int64_t n_c, uint64_t key, sub_res *out, int8_t *half) {
  prob &sub = r.sub;
  cudaStream_t s = sub.s;
  int64_t w = 4 * r.dd.d;
  sub.n = n_c;
  sub.log_n = log((double)n_c);
  k_gather<<<blocks(n_c * w, PT_THREADS), PT_THREADS, 0, s>>>(r.dd.X, r.dd.kp, pts, n_c, w, sub.X_own, sub.kp_own);
  k_gather_bits<<<blocks(n_c * words(r.dd.d), PT_THREADS), PT_THREADS, 0, s>>>(r.dd.pm, pts, n_c, words(r.dd.d),
                                                                               sub.pm_own);
  SS_CUDA_TRY_LAUNCH(ctx, "split gather");
  sub.k = 0;
  SS_TRY(set_k(ctx, sub, 2));
  k_fill<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, s>>>(sub.labels, n_c, 1);
  SS_TRY(mstep(ctx, sub));
  SS_TRY(estep(ctx, sub));
  if (sub.alive_h[1]) {
    int64_t ch;
    SS_TRY(cstep(ctx, sub, &ch, nullptr));
    SS_TRY(score(ctx, sub, &out->s1, nullptr));
  }
  SS_TRY(set_k(ctx, sub, 3));
  k_random_halves<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, s>>>(sub.labels, n_c, key);
  SS_CUDA_TRY_LAUNCH(ctx, "split halves");
  SS_TRY(sub_converge(ctx, sub, &out->valid));
  if (out->valid) {
    SS_TRY(score(ctx, sub, &out->s2, nullptr));
    k_mark_half<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, s>>>(sub.labels, n_c, half);
    SS_CUDA_TRY_LAUNCH(ctx, "split halves");
  }
  return SS_OK;
}

ss_status try_split(ss_ctx *ctx, gpu_run &r, int64_t c, const int32_t *pts, int64_t n_c, const int8_t *half,
                    double *sc) {
  prob &st = r.st, &tr = r.trial;
  int64_t k = st.k, changed;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(tr.labels, st.labels, sizeof(int32_t) * (size_t)st.n, cudaMemcpyDeviceToDevice, st.s));
  tr.k = 0;
  SS_TRY(set_k(ctx, tr, k + 1));
  k_apply_half<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, st.s>>>(pts, half, n_c, (int32_t)c, (int32_t)k, tr.labels);
  SS_CUDA_TRY_LAUNCH(ctx, "split trial");
  SS_TRY(full_step(ctx, tr, &changed));
  return score(ctx, tr, sc, nullptr);
}

ss_status split_round(ss_ctx *ctx, gpu_run &r, int64_t round, double *reference, int64_t *tried, int64_t *accepted) {
  prob &st0 = r.st;
  *tried = *accepted = 0;
  int64_t k = st0.k, n = st0.n;
  if (k >= r.o->max_possible_clusters - 1) return SS_OK;
  SS_TRY(group(ctx, st0));
  std::vector<int64_t> grp(st0.group_h.begin(), st0.group_h.begin() + k + 1);
  ss_dbuf<int32_t> pts;
  ss_dbuf<int8_t> half;
  SS_TRY(pts.alloc(ctx, (size_t)n, "split points"));
  SS_TRY(half.alloc(ctx, (size_t)n, "split halves"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(pts, st0.order, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToDevice, st0.s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(half, 0, (size_t)n, st0.s));
  std::vector<sub_res> res((size_t)k);
  for (int64_t c = 1; c < k; c++) {
    int64_t n_c = grp[c + 1] - grp[c];
    if (n_c < 2) continue;
    uint64_t key = ss_rng_key(r.o->seed, SS_RNG_MASK_EM_SPLIT, ((uint64_t)round << 32) | (uint64_t)c);
    SS_TRY(fit_sub(ctx, r, pts + grp[c], n_c, key, &res[c], half + grp[c]));
  }
  for (int64_t c = 1; c < k; c++) {
    if (!res[c].valid || !(res[c].s2 < res[c].s1)) continue;
    if (r.st.k >= r.o->max_possible_clusters - 1) break;
    double sc;
    (*tried)++;
    SS_TRY(try_split(ctx, r, c, pts + grp[c], grp[c + 1] - grp[c], half + grp[c], &sc));
    if (sc < *reference) {
      std::swap(r.st, r.trial);
      *reference = sc;
      (*accepted)++;
      ss_log_debug(ctx, "masked EM (cuda): split of cluster %lld accepted (S1 %.6f, S2 %.6f, score %.6f)",
                   (long long)c, res[c].s1, res[c].s2, sc);
    }
  }
  return SS_OK;
}

ss_status split_step(ss_ctx *ctx, gpu_run &r, int64_t it, const ss_mask_em_iter_log &full, int64_t *accepted,
                     double *sc) {
  double t0 = ss_now(), ref = full.score;
  int64_t tried = 0, changed, live;
  *accepted = 0;
  if (r.st.k >= r.o->max_possible_clusters - 1) return SS_OK;
  if (full.changed != 0) {
    SS_TRY(full_step(ctx, r.st, &changed));
    SS_TRY(score(ctx, r.st, &ref, nullptr));
  }
  SS_TRY(split_round(ctx, r, r.split_rounds++, &ref, &tried, accepted));
  *sc = ref;
  SS_TRY(counts(ctx, r.st));
  live = 1;
  for (int64_t c = 1; c < r.st.k; c++) live += r.st.count_h[c] > 0;
  r.res->t_split_s += ss_now() - t0;
  r.res->n_splits_tried += tried;
  r.res->n_splits_accepted += *accepted;
  ss_mask_em_iter_log e{};
  e.iteration = it, e.step = SS_EM_STEP_SPLIT, e.score = ref, e.n_clusters = live, e.splits_tried = tried;
  e.splits_accepted = *accepted, e.seconds = ss_now() - t0;
  return log_push(r, e);
}

ss_status drv_full_iteration(ss_ctx *ctx, void *self, int64_t it, ss_mask_em_iter_log *e) {
  gpu_run &r = *(gpu_run *)self;
  SS_TRY(full_iteration(ctx, r.st, it, e, r.res));
  return log_push(r, *e);
}

ss_status drv_seen_before(ss_ctx *ctx, void *self, int *seen) {
  gpu_run &r = *(gpu_run *)self;
  uint64_t h;
  SS_TRY(diff_hash(ctx, r.st, nullptr, nullptr, &h));
  *seen = 0;
  for (uint64_t q : r.hashes) *seen = *seen || q == h;
  if ((int64_t)r.hashes.size() < MAX_HISTORY) r.hashes.push_back(h);
  return SS_OK;
}

ss_status drv_split_step(ss_ctx *ctx, void *self, int64_t it, const ss_mask_em_iter_log *full, int64_t *accepted,
                         double *score) {
  return split_step(ctx, *(gpu_run *)self, it, *full, accepted, score);
}

ss_status iterate(ss_ctx *ctx, gpu_run &r) {
  ss_em_driver d;
  d.self = &r;
  d.full_iteration = drv_full_iteration;
  d.seen_before = drv_seen_before;
  d.split_step = drv_split_step;
  d.n = r.st.n;
  return ss_em_drive(ctx, r.o, &d, r.res);
}

/* Starting labels on the host (mask patterns, .clu or k-means, as the CPU), compacted. */
ss_status host_start(ss_ctx *ctx, const ss_mask_em_data *dt, const ss_mask_em_opts *o, int n_threads,
                     std::vector<int32_t> &labels, int64_t *k) {
  ss_mask_em_state hs;
  SS_TRY(ss_mask_em_state_init(ctx, &hs, dt, o, NULL, dt->n, 1, o->num_starting_clusters, n_threads));
  ss_status s = ss_em_start_labels(ctx, dt, o, n_threads, &hs);
  if (s == SS_OK) {
    ss_mask_em_compact(&hs);
    labels.assign(hs.labels, hs.labels + dt->n);
    *k = hs.model.k;
  }
  ss_mask_em_state_free(&hs);
  return s;
}

ss_status fit(ss_ctx *ctx, const ss_backend *be, gpu_run &r, const float *x, const float *m, int64_t n, int64_t d) {
  ss_mask_em_result *res = r.res;
  double t0 = ss_now();
  ss_mask_em_data data;
  memset(&data, 0, sizeof(data));
  ss_status s = ss_mask_em_prepare(ctx, x, m, n, d, r.o, be->n_threads, &data);
  std::vector<int32_t> labels;
  int64_t k = 0;
  if (s == SS_OK) s = host_start(ctx, &data, r.o, be->n_threads, labels, &k);
  if (s == SS_OK) {
    if (k < 2) k = 2;
    res->n = n, res->d = d;
    res->n_constant_features = data.n_constant;
    res->n_floored_features = data.n_floored;
    s = upload(ctx, be, &data, r.dd);
  }
  ss_mask_em_data_free(&data);
  SS_TRY(s);
  SS_TRY(main_init(ctx, r.st, be, r.o, r.dd, labels.data(), k));
  SS_TRY(main_init(ctx, r.trial, be, r.o, r.dd, nullptr, k));
  SS_TRY(prob_init(ctx, r.sub, be, r.o, n, d, 4, true));
  SS_TRY(quad_plan(ctx, r.sub, r.dd.max_nnz));
  r.sub.nu = r.dd.nu, r.sub.s2 = r.dd.s2, r.sub.has_noise = 0;
  res->t_prepare_s = ss_now() - t0;
  res->start_clusters = k;
  ss_log_info(ctx, "masked EM (cuda, %s): %" PRId64 " points x %" PRId64 " features, %" PRId64 " starting clusters",
              be->gpu.name, n, d, k);
  ss_log_debug(ctx, "masked EM (cuda): block part %s (%" PRId64 " points per block, %zu bytes of shared memory, at most %" PRId64
               " unmasked features per point)", r.st.q_threads ? "sparse" : "warp-union", r.st.q_threads, r.st.q_smem,
               r.dd.max_nnz);
  SS_TRY(iterate(ctx, r));
  ss_status cs;
  compact(r.st, ctx, &cs);
  SS_TRY(cs);
  SS_TRY(SS_ALLOC(ctx, res->labels, (size_t)n, "masked EM result labels"));
  SS_CUDA_TRY(ctx, cudaMemcpy(res->labels, r.st.labels, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost));
  res->n_clusters = r.st.k;
  res->t_total_s = ss_now() - t0;
  ss_log_info(ctx, "masked EM (cuda): %s after %" PRId64 " iterations: %" PRId64 " clusters, score %.6f, %.2f s",
              ss_mask_em_stop_name(res->stop), res->n_iterations, res->n_clusters, res->score, res->t_total_s);
  return SS_OK;
}

/* Copy the model after an M-step into a host snapshot. */
ss_status snapshot(ss_ctx *ctx, prob &p, const double *nu, ss_mask_em_snapshot *sn) {
  int64_t k = p.k, d = p.d;
  memset(sn, 0, sizeof(*sn));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s)); /* the M-step ran on the backend's (non-blocking) stream */
  sn->k = k, sn->d = d;
  SS_TRY(SS_ALLOC(ctx, sn->count, (size_t)k, "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->weight, (size_t)k, "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->mean, (size_t)(k * d), "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->diag, (size_t)(k * d), "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->n_u, (size_t)k, "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->u_feat, (size_t)(k * d), "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->block, (size_t)(k * d * d), "snapshot"));
  memcpy(sn->count, p.count_h.data(), sizeof(int64_t) * (size_t)k);
  memcpy(sn->weight, p.weight_h.data(), sizeof(double) * (size_t)k);
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->mean, p.offset, sizeof(double) * (size_t)(k * d), cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->diag, p.diag, sizeof(double) * (size_t)(k * d), cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->n_u, p.n_u, sizeof(int32_t) * (size_t)k, cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->u_feat, p.u_feat, sizeof(int32_t) * (size_t)(k * d), cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->block, p.block, sizeof(double) * (size_t)(k * d * d), cudaMemcpyDeviceToHost));
  for (int64_t c = 0; c < k; c++)
    for (int64_t i = 0; i < d; i++) sn->mean[c * d + i] = c == 0 ? nu[i] : nu[i] + sn->mean[c * d + i];
  for (int64_t c = 0; c < k; c++)
    if (c == 0 || !p.alive_h[c]) sn->n_u[c] = 0;
  return SS_OK;
}

double elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1e-3;
}

}  // namespace

extern "C" ss_status ss_mask_em_fit_cuda(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, int64_t n,
                                         int64_t d, const ss_mask_em_opts *o, ss_mask_em_result *res) {
  memset(res, 0, sizeof(*res));
  if (be->kind != SS_DEVICE_CUDA || !be->cuda)
    return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM on CUDA: the backend is not a CUDA backend");
  if (o->quick_steps)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "mask_em.quick_steps: not implemented in this version (leave it off)");
  gpu_run r{};
  r.ctx = ctx, r.o = o, r.res = res;
  ss_status s = fit(ctx, be, r, x, m, n, d);
  if (s != SS_OK) ss_mask_em_result_free(res);
  return s;
}

extern "C" ss_status ss_mask_em_cuda_trace(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                           const ss_mask_em_opts *o, const int32_t *start, int64_t k,
                                           int64_t iterations, ss_mask_em_snapshot *snap, int32_t *labels_out) {
  dev_data dd;
  prob p;
  SS_TRY(upload(ctx, be, data, dd));
  ss_status s = main_init(ctx, p, be, o, dd, start, k);
  for (int64_t it = 0; s == SS_OK && it < iterations; it++) {
    /* full_iteration, with the snapshot taken between the M- and the E-step */
    ss_status cs;
    compact(p, ctx, &cs);
    s = cs;
    if (s == SS_OK) s = cudaMemcpy(p.prev, p.labels, sizeof(int32_t) * (size_t)p.n, cudaMemcpyDeviceToDevice) == cudaSuccess
                            ? SS_OK
                            : ss_fail(ctx, SS_ERR_DEVICE, "CUDA: trace copy failed");
    if (s == SS_OK) s = mstep(ctx, p);
    if (s == SS_OK) s = snapshot(ctx, p, data->nu, &snap[it]);
    if (s == SS_OK) s = estep(ctx, p);
    int64_t changed = 0, deleted = 0;
    if (s == SS_OK) s = cstep(ctx, p, &changed, nullptr);
    if (s == SS_OK) s = delete_step(ctx, p, &deleted);
    if (s == SS_OK) s = diff_hash(ctx, p, p.prev, &changed, nullptr);
    if (s == SS_OK) s = score(ctx, p, &snap[it].score, nullptr);
    snap[it].changed = changed, snap[it].deletions = deleted;
  }
  if (s == SS_OK && labels_out &&
      cudaMemcpy(labels_out, p.labels, sizeof(int32_t) * (size_t)p.n, cudaMemcpyDeviceToHost) != cudaSuccess)
    s = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: trace labels copy failed");
  prob_free(p);
  return s;
}

extern "C" ss_status ss_mask_em_cuda_profile_iteration(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                                       const ss_mask_em_opts *o, const int32_t *start, int64_t k,
                                                       int reps, ss_mask_em_cuda_profile *prof) {
  dev_data dd;
  prob p;
  memset(prof, 0, sizeof(*prof));
  SS_TRY(upload(ctx, be, data, dd));
  ss_status s = main_init(ctx, p, be, o, dd, start, k);
  timers tm;
  for (auto &e : tm.ev) cudaEventCreate(&e);
  std::vector<ss_mask_em_cuda_profile> runs;
  for (int rep = 0; s == SS_OK && rep < (reps > 0 ? reps : 1); rep++) {
    if (s == SS_OK && cudaMemcpyAsync(p.labels, start, sizeof(int32_t) * (size_t)p.n, cudaMemcpyHostToDevice, p.s) != cudaSuccess)
      s = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: profile upload failed");
    p.k = k;
    if (s != SS_OK || cudaStreamSynchronize(p.s) != cudaSuccess) break;
    ss_mask_em_cuda_profile pr{};
    double t0 = ss_now();
    ss_status cs;
    compact(p, ctx, &cs);
    s = cs;
    /* events: 0 start, 1 after group+M, 2 after factor, then (gemm, quad, select) per chunk, then C, del, score */
    tm.n = 0;
    tm.on = p.n <= p.chunk; /* one chunk: a fixed event layout */
    p.tm = &tm;
    mark(p);
    if (s == SS_OK) s = mstep(ctx, p);
    mark(p);
    if (s == SS_OK) s = estep(ctx, p);
    int64_t ch = 0, del = 0, live = 0;
    if (s == SS_OK) s = cstep(ctx, p, &ch, nullptr);
    mark(p);
    if (s == SS_OK) s = delete_step(ctx, p, &del);
    mark(p);
    double sc = 0;
    if (s == SS_OK) s = score(ctx, p, &sc, &live);
    mark(p);
    if (s == SS_OK && cudaStreamSynchronize(p.s) != cudaSuccess) s = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: profile sync");
    pr.total_s = ss_now() - t0;
    pr.clusters = p.k;
    if (tm.on && tm.n == 9) {
      pr.mstep_s = elapsed(tm.ev[0], tm.ev[1]);
      pr.chol_s = elapsed(tm.ev[1], tm.ev[2]);
      pr.gemm_s = elapsed(tm.ev[2], tm.ev[3]);
      pr.block_s = elapsed(tm.ev[3], tm.ev[4]);
      pr.select_s = elapsed(tm.ev[4], tm.ev[5]);
      pr.cstep_s = elapsed(tm.ev[5], tm.ev[6]);
      pr.delete_s = elapsed(tm.ev[6], tm.ev[7]);
      pr.score_s = elapsed(tm.ev[7], tm.ev[8]);
    }
    p.tm = nullptr;
    runs.push_back(pr);
  }
  for (auto &e : tm.ev) cudaEventDestroy(e);
  if (s == SS_OK && !runs.empty()) { /* the median run by total time */
    std::vector<size_t> idx(runs.size());
    for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
    for (size_t i = 1; i < idx.size(); i++)
      for (size_t j = i; j > 0 && runs[idx[j - 1]].total_s > runs[idx[j]].total_s; j--) std::swap(idx[j - 1], idx[j]);
    *prof = runs[idx[idx.size() / 2]];
  }
  prob_free(p);
  return s;
}
