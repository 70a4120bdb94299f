/* mask_em_mstep.cu — the M-step of masked EM on the device (CUDA): per-cluster weights, means,
 * diagonals, cluster masks and covariance blocks by deterministic segmented reductions. */
#include <vector>

#include "stages/mask_em/mask_em_cuda.cuh"

namespace ss_em_cuda {
namespace {

constexpr int STAT_THREADS = 128; /* M-step stats: threads over features */
constexpr int PAIR_THREADS = 256; /* M-step block: threads over (x, y) pairs */

/* ---- M-step -------------------------------------------------------------------------------------- */

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

__global__ void k_mblock_final(const int64_t *item_first, const double *part, const int64_t *count, const int8_t *alive,
                               const int32_t *n_u, const double *offset, const double *diag, const int32_t *u_feat,
                               mparams mp, double *block) {
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

} // namespace

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
  SS_CUDA_TRY(ctx,
              cudaMemcpyAsync(p.count_d, p.count_h.data(), sizeof(int64_t) * (size_t)k, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.item_first, first.data(), sizeof(int64_t) * (size_t)(k + 1),
                                   cudaMemcpyHostToDevice, s));
  if (!it.empty())
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.items, it.data(), sizeof(item) * it.size(), cudaMemcpyHostToDevice, s));
  mparams mp = {o->prior_point, o->points_for_cluster_mask, d};
  unsigned ni = (unsigned)it.size();
  if (ni) k_mstat_part<<<ni, STAT_THREADS, 0, s>>>(p.items, p.order, p.X, p.kp, d, p.part_stat);
  k_mstat_final<<<(unsigned)k, STAT_THREADS, sizeof(double) * (size_t)d, s>>>(p.item_first, p.part_stat, p.count_d,
                                                                              p.alive, p.nu, p.s2, mp, p.offset, p.diag,
                                                                              p.n_u, p.u_feat, p.u_bits, p.kp_sum);
  if (ni) k_mblock_part<<<ni, PAIR_THREADS, 0, s>>>(p.items, p.order, p.X, p.alive, p.n_u, p.u_feat, d, p.part_block);
  k_mblock_final<<<(unsigned)k, PAIR_THREADS, 0, s>>>(p.item_first, p.part_block, p.count_d, p.alive, p.n_u, p.offset,
                                                      p.diag, p.u_feat, mp, p.block);
  SS_CUDA_TRY_LAUNCH(ctx, "M-step");
  return SS_OK;
}

} // namespace ss_em_cuda
