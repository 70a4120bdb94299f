/* mask_em_step.c — the M-step and the E-step of masked EM (docs/mask_em.md) on the sparse data.
 *
 * Sparsity: a point's masked entries (m = 0) have y = ν and η = σ² exactly, so with r = y − ν
 * (zero there) and e = ν − μ every sum splits into a per-cluster constant plus a correction over
 * the point's unmasked entries only:
 *   M-step   Σ_p d_i d_j = Σ_p r_pi r_pj − a_i a_j (N + 2P)  with a = μ − ν = Σ_p r_p / (N + P),
 *   E-step   ‖L⁻¹ d_U‖² = eᵀB⁻¹e + 2 (B⁻¹e)ᵀ r + rᵀ B⁻¹ r  over U_c ∩ unmasked(p),
 *            Σ_{M_c} d²/δ = Σ_{M_c} e²/δ + Σ_{M_c ∩ unmasked(p)} r (r + 2e)/δ,
 *            Σ_i η h = Σ_i σ² h + Σ_{unmasked(p)} (η − σ²) h.
 * The work per (point, cluster) is O(s + s_U²) with s the point's unmasked count and s_U its
 * overlap with U_c, instead of O(D + u²). All of it is double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/mask_em/mask_em_internal.h"

#define EM_BLOCK_POINTS 32 /* points per E-step block: their entries stay in cache over all clusters */

/* ---- M-step ------------------------------------------------------------------------------------ */

/* Pass A of cluster c: sums over its points, mean, diagonal variances and U_c. */
static void mstep_stats(ss_mask_em_state *st, int64_t c) {
  const ss_mask_em_data *dt = st->data;
  const ss_mask_em_opts *o = st->opts;
  ss_mask_em_model *md = &st->model;
  int64_t d = dt->d, n_c = md->count[c];
  double *s = ss_em_scratch(st), *sr = s + d, *se = s + 2 * d, *sr2 = s + 3 * d, ks = 0.0;
  memset(s, 0, sizeof(double) * (size_t)(4 * d));
  for (int64_t g = st->group[c]; g < st->group[c + 1]; g++) {
    int64_t p = ss_em_point(st, st->order[g]);
    ks += dt->kp[p];
    for (int64_t e = dt->row[p]; e < dt->row[p + 1]; e++) {
      int32_t i = dt->feat[e];
      double r = (double)dt->y[e] - dt->nu[i];
      s[i] += dt->mask[e];
      sr[i] += r;
      se[i] += (double)dt->eta[e] - dt->sigma2[i];
      sr2[i] += r * r;
    }
  }
  md->kp_sum[c] = ks;
  if (c == 0) return;
  double P = o->prior_point, den = (double)n_c + P - 1.0;
  double *mean = md->mean + c * d, *diag = md->diag + c * d, *a = md->offset + c * d;
  int32_t *uf = md->u_feat + c * d, u = 0;
  for (int64_t i = 0; i < d; i++) {
    a[i] = sr[i] / ((double)n_c + P);
    mean[i] = dt->nu[i] + a[i];
    double dd = fmax(sr2[i] - a[i] * a[i] * ((double)n_c + 2.0 * P), 0.0); /* Σ_p d_pi², exact form ≥ 0 */
    diag[i] = (dd + ((double)n_c + P) * dt->sigma2[i] + se[i]) / den;      /* + Σ η + P σ² */
    if (s[i] >= o->points_for_cluster_mask) uf[u++] = (int32_t)i;
  }
  md->n_u[c] = u;
}

/* Pass B of cluster c: the dense block on U_c from the points' overlapping entries. */
static void mstep_block(ss_mask_em_state *st, int64_t c) {
  const ss_mask_em_data *dt = st->data;
  ss_mask_em_model *md = &st->model;
  int64_t d = dt->d, u = md->n_u[c];
  if (u == 0) return;
  double *q = ss_em_scratch(st), *rr = q + u * u, *B = md->block + md->block_off[c];
  int32_t *pos = st->iscratch + (size_t)ss_em_thread() * st->iscratch_per_thread, *qq = pos + d;
  const int32_t *uf = md->u_feat + c * d;
  for (int64_t i = 0; i < d; i++) pos[i] = -1;
  for (int64_t k = 0; k < u; k++) pos[uf[k]] = (int32_t)k;
  memset(q, 0, sizeof(double) * (size_t)(u * u));
  for (int64_t g = st->group[c]; g < st->group[c + 1]; g++) {
    int64_t p = ss_em_point(st, st->order[g]), nb = 0;
    for (int64_t e = dt->row[p]; e < dt->row[p + 1]; e++) {
      int32_t i = dt->feat[e];
      if (pos[i] < 0) continue;
      qq[nb] = pos[i];
      rr[nb++] = (double)dt->y[e] - dt->nu[i];
    }
    for (int64_t x = 0; x < nb; x++)
      for (int64_t y = x; y < nb; y++) q[qq[x] * u + qq[y]] += rr[x] * rr[y]; /* qq increasing: upper */
  }
  double P = st->opts->prior_point, den = (double)md->count[c] + P - 1.0, w = (double)md->count[c] + 2.0 * P;
  const double *a = md->offset + c * d, *diag = md->diag + c * d;
  for (int64_t x = 0; x < u; x++) {
    B[x * u + x] = diag[uf[x]];
    for (int64_t y = x + 1; y < u; y++) B[x * u + y] = B[y * u + x] = (q[x * u + y] - a[uf[x]] * a[uf[y]] * w) / den;
  }
}

/* Counts, liveness and weights with pseudo-counts. */
static void mstep_weights(ss_mask_em_state *st) {
  ss_mask_em_model *md = &st->model;
  const ss_mask_em_opts *o = st->opts;
  int64_t k = md->k, kg = 0;
  for (int64_t c = 1; c < k; c++) {
    md->alive[c] = md->count[c] > 0 && (double)md->count[c] + o->prior_point - 1.0 > 0.0;
    kg += md->alive[c];
  }
  double Q = st->has_noise ? o->noise_point : 0.0;
  double Z = (double)st->n + Q + o->prior_point * (double)kg;
  md->alive[0] = st->has_noise && (double)md->count[0] + Q > 0.0;
  md->weight[0] = md->alive[0] ? ((double)md->count[0] + Q) / Z : 0.0;
  for (int64_t c = 1; c < k; c++) md->weight[c] = md->alive[c] ? ((double)md->count[c] + o->prior_point) / Z : 0.0;
  for (int64_t i = 0; i < st->data->d; i++) md->mean[i] = st->data->nu[i]; /* noise row, for display */
}

/* Offsets of the packed blocks; grows the pools. */
static ss_status block_layout(ss_ctx *ctx, ss_mask_em_model *md) {
  int64_t off = 0;
  for (int64_t c = 0; c < md->k; c++) {
    md->block_off[c] = off;
    if (c > 0 && md->alive[c]) off += (int64_t)md->n_u[c] * md->n_u[c];
  }
  md->block_off[md->k] = off;
  if (off <= md->block_cap) return SS_OK;
  int64_t cap = off + off / 2 + 1;
  SS_TRY(SS_REALLOC(ctx, md->block, (size_t)cap, "masked EM: covariance blocks"));
  SS_TRY(SS_REALLOC(ctx, md->block_inv, (size_t)cap, "masked EM: covariance blocks"));
  md->block_cap = cap;
  return SS_OK;
}

ss_status ss_mask_em_mstep(ss_ctx *ctx, ss_mask_em_state *st) {
  ss_mask_em_model *md = &st->model;
  int64_t k = md->k;
  int nt = st->n_threads;
  ss_mask_em_group(st);
  mstep_weights(st);
  SS_OMP(omp parallel for schedule(dynamic, 1) num_threads(nt))
  for (int64_t c = 0; c < k; c++)
    if (c == 0 || md->alive[c]) mstep_stats(st, c);
  for (int64_t c = 1; c < k; c++)
    if (!md->alive[c]) md->n_u[c] = 0, md->kp_sum[c] = 0.0;
  SS_TRY(block_layout(ctx, md));
  SS_OMP(omp parallel for schedule(dynamic, 1) num_threads(nt))
  for (int64_t c = 1; c < k; c++)
    if (md->alive[c]) mstep_block(st, c);
  return SS_OK;
}

/* ---- E-step: per-cluster preparation ----------------------------------------------------------- */

/* In-place Cholesky of the u × u matrix L (lower part used); 0 when not positive definite. */
static int cholesky(double *L, int64_t u) {
  for (int64_t j = 0; j < u; j++) {
    double s = L[j * u + j];
    for (int64_t k = 0; k < j; k++) s -= L[j * u + k] * L[j * u + k];
    if (!(s > 0.0) || !isfinite(s)) return 0;
    double ljj = sqrt(s);
    L[j * u + j] = ljj;
    for (int64_t i = j + 1; i < u; i++) {
      double t = L[i * u + j];
      for (int64_t k = 0; k < j; k++) t -= L[i * u + k] * L[j * u + k];
      L[i * u + j] = t / ljj;
    }
  }
  return 1;
}

/* B⁻¹ = L⁻ᵀ L⁻¹ from the factor L (W: u × u scratch for L⁻¹). */
static void inverse_from_cholesky(const double *L, double *W, double *Binv, int64_t u) {
  for (int64_t j = 0; j < u; j++) {
    for (int64_t i = 0; i < j; i++) W[i * u + j] = 0.0;
    W[j * u + j] = 1.0 / L[j * u + j];
    for (int64_t i = j + 1; i < u; i++) {
      double t = 0.0;
      for (int64_t k = j; k < i; k++) t -= L[i * u + k] * W[k * u + j];
      W[i * u + j] = t / L[i * u + i];
    }
  }
  for (int64_t i = 0; i < u; i++)
    for (int64_t j = i; j < u; j++) {
      double t = 0.0;
      for (int64_t k = j; k < u; k++) t += W[k * u + i] * W[k * u + j];
      Binv[i * u + j] = Binv[j * u + i] = t;
    }
}

/* Factor, invert and derive the cost coefficients of cluster c; 0 when it must be removed. */
static int estep_prepare(ss_mask_em_state *st, int64_t c) {
  const ss_mask_em_data *dt = st->data;
  ss_mask_em_model *md = &st->model;
  int64_t d = dt->d, u = md->n_u[c];
  double *L = ss_em_scratch(st), *W = L + u * u, *v = W + u * u;
  const double *B = md->block + md->block_off[c], *a = md->offset + c * d, *diag = md->diag + c * d;
  double *Binv = md->block_inv + md->block_off[c];
  const int32_t *uf = md->u_feat + c * d;
  ss_mask_em_coef *cf = md->coef + c * d;
  if (u > 0) memcpy(L, B, sizeof(double) * (size_t)(u * u)); /* u = 0: B may be NULL (no blocks at all) */
  if (!cholesky(L, u)) return 0;
  double log_det = 0.0, base = 0.0;
  for (int64_t q = 0; q < u; q++) log_det += 2.0 * log(L[q * u + q]);
  inverse_from_cholesky(L, W, Binv, u);
  for (int64_t i = 0; i < d; i++) {
    cf[i].pos = -1;
    cf[i].h = cf[i].a = 1.0 / diag[i];
    cf[i].b = -2.0 * a[i]; /* 2(ν − μ) */
  }
  for (int64_t q = 0; q < u; q++) {
    double t = 0.0;
    for (int64_t x = 0; x < u; x++) t -= Binv[q * u + x] * a[uf[x]]; /* (B⁻¹ e)_q, e = −a */
    v[q] = t;
    base -= t * a[uf[q]]; /* eᵀ B⁻¹ e */
    cf[uf[q]] = (ss_mask_em_coef){.h = Binv[q * u + q], .a = 2.0 * t, .b = 0.0, .pos = (int32_t)q};
  }
  for (int64_t i = 0; i < d; i++) {
    if (cf[i].pos < 0) {
      if (!(diag[i] > 0.0) || !isfinite(diag[i])) return 0;
      log_det += log(diag[i]);
      base += a[i] * a[i] / diag[i];
    }
    base += dt->sigma2[i] * cf[i].h;
  }
  md->log_det[c] = log_det;
  md->base[c] = base + log_det - 2.0 * log(md->weight[c]) + (double)d * SS_EM_LOG_2PI;
  return isfinite(md->base[c]);
}

/* ---- E-step: costs ------------------------------------------------------------------------------ */

/* 2·cost(p, c) − base_c for a point given as its entries (feature, r = y − ν, ev = η − σ²). */
static double pair_cost(const ss_mask_em_model *md, int64_t c, const int32_t *feat, const double *r, const double *ev,
                        int64_t cnt, int32_t *qb, double *rb) {
  const ss_mask_em_coef *cf = md->coef + c * md->d;
  double acc = 0.0;
  int64_t nb = 0;
  for (int64_t e = 0; e < cnt; e++) {
    const ss_mask_em_coef *k = cf + feat[e];
    acc += ev[e] * k->h;
    if (k->pos < 0) {
      acc += k->a * r[e] * (r[e] + k->b);
    } else {
      acc += k->a * r[e];
      qb[nb] = k->pos;
      rb[nb++] = r[e];
    }
  }
  if (nb) {
    int64_t u = md->n_u[c];
    const double *Bi = md->block_inv + md->block_off[c];
    for (int64_t x = 0; x < nb; x++) {
      const double *row = Bi + (int64_t)qb[x] * u;
      double t = 0.5 * row[qb[x]] * rb[x];
      for (int64_t y = 0; y < x; y++) t += row[qb[y]] * rb[y];
      acc += 2.0 * rb[x] * t;
    }
  }
  return acc;
}

/* The entries of data point p as doubles r, ev (feat points into the data). */
static int64_t point_entries(const ss_mask_em_data *dt, int64_t p, double *r, double *ev) {
  int64_t cnt = 0;
  for (int64_t e = dt->row[p]; e < dt->row[p + 1]; e++, cnt++) {
    int32_t i = dt->feat[e];
    r[cnt] = (double)dt->y[e] - dt->nu[i];
    ev[cnt] = (double)dt->eta[e] - dt->sigma2[i];
  }
  return cnt;
}

double ss_mask_em_point_cost(const ss_mask_em_state *st, int64_t j, int64_t c) {
  const ss_mask_em_model *md = &st->model;
  if (c < 0 || c >= md->k || !md->alive[c]) return INFINITY;
  if (c == 0) return -log(md->weight[0]);
  int64_t d = st->data->d, p = ss_em_point(st, j);
  /* Deliberately outside ss_alloc: a per-point probe for tests, not on the sort path (NAN when out of memory). */
  double *r = malloc(sizeof(double) * (size_t)(3 * d));
  int32_t *qb = malloc(sizeof(int32_t) * (size_t)d);
  double cost = NAN;
  if (r && qb) {
    int64_t cnt = point_entries(st->data, p, r, r + d);
    cost = 0.5 * (md->base[c] + pair_cost(md, c, st->data->feat + st->data->row[p], r, r + d, cnt, qb, r + 2 * d));
  }
  free(r);
  free(qb);
  return cost;
}

static inline void keep_two(int32_t c, double cost, int32_t *b1, double *c1, int32_t *b2, double *c2) {
  if (cost < *c1) {
    *b2 = *b1, *c2 = *c1;
    *b1 = c, *c1 = cost;
  } else if (cost < *c2) {
    *b2 = c, *c2 = cost;
  }
}

/* Best and second best of the points j0 .. j1−1 over every alive cluster (clusters in index order). */
static void estep_block(ss_mask_em_state *st, int64_t j0, int64_t j1) {
  const ss_mask_em_data *dt = st->data;
  const ss_mask_em_model *md = &st->model;
  int64_t d = dt->d;
  double *r = ss_em_scratch(st), *ev = r + EM_BLOCK_POINTS * d, *rb = ev + EM_BLOCK_POINTS * d;
  int32_t *qb = st->iscratch + (size_t)ss_em_thread() * st->iscratch_per_thread;
  int64_t off[EM_BLOCK_POINTS + 1];
  off[0] = 0;
  for (int64_t j = j0; j < j1; j++) {
    off[j - j0 + 1] = off[j - j0] + point_entries(dt, ss_em_point(st, j), r + off[j - j0], ev + off[j - j0]);
    st->best[j] = st->second[j] = -1;
    st->cost1[j] = st->cost2[j] = INFINITY;
    if (md->alive[0]) st->best[j] = 0, st->cost1[j] = -log(md->weight[0]);
  }
  for (int64_t c = 1; c < md->k; c++) {
    if (!md->alive[c]) continue;
    for (int64_t j = j0; j < j1; j++) {
      int64_t b = j - j0, p = ss_em_point(st, j);
      double cost = 0.5 * (md->base[c] + pair_cost(md, c, dt->feat + dt->row[p], r + off[b], ev + off[b],
                                                   off[b + 1] - off[b], qb, rb));
      keep_two((int32_t)c, cost, &st->best[j], &st->cost1[j], &st->second[j], &st->cost2[j]);
    }
  }
}

ss_status ss_mask_em_estep(ss_ctx *ctx, ss_mask_em_state *st) {
  (void)ctx;
  ss_mask_em_model *md = &st->model;
  int64_t k = md->k, failed = 0;
  int nt = st->n_threads;
  SS_OMP(omp parallel for schedule(dynamic, 1) num_threads(nt) reduction(+ : failed))
  for (int64_t c = 1; c < k; c++)
    if (md->alive[c] && !estep_prepare(st, c)) {
      md->alive[c] = 0; /* removed before the C-step: its points go to their next best */
      failed++;
    }
  st->n_chol_fail = failed;
  int64_t n_blocks = (st->n + EM_BLOCK_POINTS - 1) / EM_BLOCK_POINTS;
  SS_OMP(omp parallel for schedule(dynamic, 4) num_threads(nt))
  for (int64_t b = 0; b < n_blocks; b++) {
    int64_t j0 = b * EM_BLOCK_POINTS, j1 = j0 + EM_BLOCK_POINTS < st->n ? j0 + EM_BLOCK_POINTS : st->n;
    estep_block(st, j0, j1);
  }
  return SS_OK;
}

ss_status ss_em_full_step(ss_ctx *ctx, ss_mask_em_state *st, int64_t *changed) {
  SS_TRY(ss_mask_em_mstep(ctx, st));
  SS_TRY(ss_mask_em_estep(ctx, st));
  *changed = ss_mask_em_cstep(st);
  return SS_OK;
}
