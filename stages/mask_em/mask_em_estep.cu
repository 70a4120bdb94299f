/* mask_em_estep.cu — the E-step of masked EM on the device (CUDA): per-cluster factorisation and
 * coefficients, the per-point costs (DGEMM plus the block part rᵀB⁻¹r), best/second selection and
 * the C-step. */
#include <cmath>

#include "stages/mask_em/mask_em_cuda.cuh"

namespace ss_em_cuda {
namespace {

constexpr int CHOL_THREADS = 128;                 /* one block per cluster */
constexpr int QUAD_THREADS = 64;                  /* warp-union block-part kernel (fallback): one point per thread */
constexpr int SPARSE_THREADS = 128;               /* sparse block-part kernel: points per block (at most) */
constexpr int SPARSE_MIN_THREADS = 32;            /* ... and at least (one warp) */
constexpr int SPARSE_TILE = 8;                    /* entries of a point held in registers per pass (ILP) */
constexpr size_t SPARSE_SMEM_TARGET = 112 * 1024; /* bytes per block: two blocks per SM on sm_90 */
constexpr int STAGE_BATCH = 8;                    /* loads in flight per thread when staging B_c⁻¹ */
constexpr int SPARSE_WAVES = 8;                   /* blocks wanted per SM before clusters are split over blocks */
constexpr size_t DEFAULT_SMEM_LIMIT = 48 * 1024;  /* dynamic shared memory without the opt-in attribute */

__device__ inline void keep_two(int32_t c, double cost, int32_t &b1, double &c1, int32_t &b2, double &c2) {
  if (cost < c1) {
    b2 = b1, c2 = c1;
    b1 = c, c1 = cost;
  } else if (cost < c2) {
    b2 = c, c2 = cost;
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
__global__ void k_factor(int64_t k, const int32_t *n_u, const int32_t *u_feat, const double *block,
                         const double *offset, const double *diag, const double *s2, const double *weight, eparams ep,
                         int8_t *alive, double *Lw, double *Ww, double *binv, double *tri, int16_t *posg, double *coef,
                         double *base, unsigned long long *n_fail) {
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
                       const int8_t *alive, const int32_t *n_u, const uint32_t *u_bits, const double *binv, double *C) {
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

size_t quad_smem_bytes(int64_t d) {
  return sizeof(double) * (size_t)(d * QUAD_THREADS) + sizeof(int32_t) * (size_t)(d * (QUAD_THREADS / 32));
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
  k_quad_sparse<SPARSE_TILE>
      <<<dim3((unsigned)tiles, (unsigned)groups), (unsigned)t, p.q_smem, p.s>>>(p.X, p.pm, perm, qp, p.alive, p.n_u,
                                                                                p.tri, p.posg, p.C);
}

} // namespace

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

/* The warp-union kernel's shared memory for p's dimension, opted in when it exceeds the default
 * limit (not needed when the global-memory kernel runs instead). */
ss_status quad_opt_in(ss_ctx *ctx, const prob &p) {
  size_t qs = quad_smem_bytes(p.d);
  if (qs > DEFAULT_SMEM_LIMIT && !p.q_global)
    SS_CUDA_TRY(ctx, cudaFuncSetAttribute(k_quad, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)qs));
  return SS_OK;
}

ss_status estep(ss_ctx *ctx, prob &p) {
  cudaStream_t s = p.s;
  int64_t k = p.k, d = p.d;
  SS_CUDA_TRY(ctx, cudaMemsetAsync(p.scal, 0, sizeof(unsigned long long) * 4, s));
  eparams ep = {d, (double)d * SS_EM_LOG_2PI};
  k_factor<<<(unsigned)k, CHOL_THREADS, sizeof(double) * (size_t)(2 * d), s>>>(k, p.n_u, p.u_feat, p.block, p.offset,
                                                                               p.diag, p.s2, p.weight, ep, p.alive,
                                                                               p.Lw, p.Ww, p.binv, p.tri, p.posg,
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

} // namespace ss_em_cuda
