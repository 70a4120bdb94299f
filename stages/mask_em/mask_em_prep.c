/* mask_em_prep.c — masked EM preprocessing and mask-pattern starts (docs/mask_em.md):
 * validation, normalisation to [0, 1], noise statistics with floors, the sparse corrected data
 * (y, η) and k_p; distinct mask patterns visited in a seeded random order. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "stages/mask_em/mask_em_internal.h"
#include "core/rng.h"

#define FLOOR_WARN_SHOWN 8 /* feature ids listed in a warning */

void ss_mask_em_opts_from_params(ss_mask_em_opts *o, const ss_params *p) {
  memset(o, 0, sizeof(*o));
  o->prior_point = p->mask_em.prior_point;
  o->noise_point = p->mask_em.noise_point;
  o->points_for_cluster_mask = p->mask_em.points_for_cluster_mask;
  o->penalty_k = p->mask_em.penalty_k;
  o->penalty_k_log_n = p->mask_em.penalty_k_log_n;
  o->max_deletions_per_iteration = p->mask_em.max_deletions_per_iteration;
  o->split_first = p->mask_em.split_first;
  o->split_every = p->mask_em.split_every;
  o->max_possible_clusters = p->mask_em.max_possible_clusters;
  o->fast = p->mask_em.preset == SS_EM_PRESET_FAST;
  o->num_starting_clusters = o->fast ? p->mask_em.fast_starting_clusters : p->mask_em.num_starting_clusters;
  o->start = p->mask_em.start;
  o->max_iterations = p->mask_em.max_iterations;
  o->fast_change_fraction = p->mask_em.fast_change_fraction;
  o->fast_score_delta = p->mask_em.fast_score_delta;
  o->quick_steps = p->mask_em.quick_steps;
  o->dist_thresh = p->mask_em.dist_thresh;
  o->noise_var_floor_rel = p->mask_em.noise_var_floor_rel;
  o->noise_var_floor_abs = p->mask_em.noise_var_floor_abs;
  o->seed = (uint64_t)p->seed;
}

void ss_mask_em_data_free(ss_mask_em_data *dt) {
  free(dt->row);
  free(dt->feat);
  free(dt->y);
  free(dt->eta);
  free(dt->mask);
  free(dt->kp);
  free(dt->nu);
  free(dt->sigma2);
  free(dt->x_min);
  free(dt->x_range);
  memset(dt, 0, sizeof(*dt));
}

/* Reject non-finite features and masks outside [0, 1], naming the first offender. */
static ss_status validate(ss_ctx *ctx, const float *x, const float *m, int64_t n, int64_t d) {
  if (n < 1 || d < 1)
    return ss_fail(ctx, SS_ERR_INPUT, "masked EM: empty input (%" PRId64 " points x %" PRId64 " features)", n, d);
  for (int64_t p = 0; p < n; p++)
    for (int64_t i = 0; i < d; i++) {
      float v = x[p * d + i], w = m[p * d + i];
      if (!isfinite(v))
        return ss_fail(ctx, SS_ERR_INPUT,
                       "masked EM: features: point %" PRId64 ", feature %" PRId64 ": not finite (%g)", p + 1, i + 1,
                       (double)v);
      if (!(w >= 0.0f && w <= 1.0f))
        return ss_fail(ctx, SS_ERR_INPUT, "masked EM: masks: point %" PRId64 ", feature %" PRId64 ": %g outside [0, 1]",
                       p + 1, i + 1, (double)w);
    }
  return SS_OK;
}

static double normalised(const ss_mask_em_data *dt, float v, int64_t i) {
  return dt->x_range[i] > 0.0 ? ((double)v - dt->x_min[i]) / dt->x_range[i] : 0.0;
}

/* Per-feature min and range over all points (sequential: exact, no order question). */
static void normalisation(ss_ctx *ctx, const float *x, int64_t n, int64_t d, ss_mask_em_data *dt) {
  for (int64_t i = 0; i < d; i++) dt->x_min[i] = dt->x_range[i] = x[i];
  for (int64_t p = 1; p < n; p++)
    for (int64_t i = 0; i < d; i++) {
      double v = x[p * d + i];
      if (v < dt->x_min[i]) dt->x_min[i] = v;
      if (v > dt->x_range[i]) dt->x_range[i] = v; /* the max, for now */
    }
  dt->n_constant = 0;
  for (int64_t i = 0; i < d; i++) {
    dt->x_range[i] -= dt->x_min[i];
    if (dt->x_range[i] <= 0.0) {
      dt->x_range[i] = 0.0;
      if (dt->n_constant++ == 0) ss_log_warn(ctx, "masked EM: feature %" PRId64 " is constant: normalised to 0", i + 1);
    }
  }
  if (dt->n_constant > 1) ss_log_warn(ctx, "masked EM: %" PRId64 " constant features in all", dt->n_constant);
}

/* Noise mean and population variance over m = 0 (two passes), and the feature's variance over all
 * points for the floor. acc: 4·d doubles of scratch. Returns the floored count. */
static int64_t noise_statistics(ss_ctx *ctx, const float *x, const float *m, const ss_mask_em_opts *o,
                                ss_mask_em_data *dt, double *acc) {
  int64_t n = dt->n, d = dt->d;
  double *cnt = acc, *sum = acc + d, *all = acc + 2 * d, *allsq = acc + 3 * d;
  memset(acc, 0, sizeof(double) * (size_t)(4 * d));
  for (int64_t p = 0; p < n; p++)
    for (int64_t i = 0; i < d; i++) {
      double v = normalised(dt, x[p * d + i], i);
      all[i] += v;
      if (m[p * d + i] == 0.0f) {
        cnt[i] += 1.0;
        sum[i] += v;
      }
    }
  for (int64_t i = 0; i < d; i++) {
    all[i] /= (double)n;
    dt->nu[i] = cnt[i] > 0.0 ? sum[i] / cnt[i] : all[i];
    sum[i] = 0.0;
  }
  for (int64_t p = 0; p < n; p++)
    for (int64_t i = 0; i < d; i++) {
      double v = normalised(dt, x[p * d + i], i);
      allsq[i] += (v - all[i]) * (v - all[i]);
      if (m[p * d + i] == 0.0f) sum[i] += (v - dt->nu[i]) * (v - dt->nu[i]);
    }
  int64_t floored = 0, shown = 0;
  char list[FLOOR_WARN_SHOWN * 24] = "";
  for (int64_t i = 0; i < d; i++) {
    double floor_i = fmax(o->noise_var_floor_rel * allsq[i] / (double)n, o->noise_var_floor_abs);
    double var = cnt[i] > 0.0 ? sum[i] / cnt[i] : 0.0;
    if (cnt[i] > 0.0 && var >= floor_i) {
      dt->sigma2[i] = var;
      continue;
    }
    dt->sigma2[i] = floor_i;
    if (shown++ < FLOOR_WARN_SHOWN)
      snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%" PRId64, floored ? ", " : "", i + 1);
    floored++;
  }
  if (floored)
    ss_log_warn(ctx,
                "masked EM: noise variance floored on %" PRId64 " feature(s) (%s%s): never masked, or below "
                "max(%g x the feature variance, %g)",
                floored, list, floored > FLOOR_WARN_SHOWN ? ", ..." : "", o->noise_var_floor_rel,
                o->noise_var_floor_abs);
  return floored;
}

/* CSR of the unmasked entries with y, η (computed in double, stored as float) and k_p. */
static ss_status corrected_data(ss_ctx *ctx, const float *x, const float *m, ss_mask_em_data *dt) {
  int64_t n = dt->n, d = dt->d, nnz = 0;
  SS_TRY(SS_ALLOC(ctx, dt->row, (size_t)n + 1, "masked EM point index"));
  SS_TRY(SS_ALLOC(ctx, dt->kp, (size_t)n, "masked EM k_p"));
  dt->row[0] = 0;
  for (int64_t p = 0; p < n; p++) {
    for (int64_t i = 0; i < d; i++) nnz += m[p * d + i] > 0.0f;
    dt->row[p + 1] = nnz;
  }
  dt->nnz = nnz;
  size_t cap = nnz > 0 ? (size_t)nnz : 1;
  SS_TRY(SS_ALLOC(ctx, dt->feat, cap, "masked EM feature ids"));
  SS_TRY(SS_ALLOC(ctx, dt->y, cap, "masked EM corrected data"));
  SS_TRY(SS_ALLOC(ctx, dt->eta, cap, "masked EM excess variance"));
  SS_TRY(SS_ALLOC(ctx, dt->mask, cap, "masked EM masks"));
  for (int64_t p = 0; p < n; p++) {
    int64_t e = dt->row[p];
    double np = 0.0;
    for (int64_t i = 0; i < d; i++) {
      double w = m[p * d + i];
      np += w;
      if (w <= 0.0) continue;
      double v = normalised(dt, x[p * d + i], i), nu = dt->nu[i], s2 = dt->sigma2[i];
      dt->feat[e] = (int32_t)i;
      dt->mask[e] = (float)w;
      dt->y[e] = (float)(w * v + (1.0 - w) * nu);
      dt->eta[e] = (float)(w * (1.0 - w) * (v - nu) * (v - nu) + (1.0 - w) * s2);
      e++;
    }
    dt->kp[p] = np * (np + 1.0) / 2.0 + np + 1.0;
  }
  return SS_OK;
}

ss_status ss_mask_em_prepare(ss_ctx *ctx, const float *x, const float *m, int64_t n, int64_t d,
                             const ss_mask_em_opts *o, int n_threads, ss_mask_em_data *dt) {
  (void)n_threads; /* preprocessing is sequential: once, and O(N·D) */
  memset(dt, 0, sizeof(*dt));
  SS_TRY(validate(ctx, x, m, n, d));
  dt->n = n;
  dt->d = d;
  double *acc = NULL;
  ss_status st = SS_ALLOC(ctx, dt->x_min, (size_t)d, "masked EM normalisation");
  if (st == SS_OK) st = SS_ALLOC(ctx, dt->x_range, (size_t)d, "masked EM normalisation");
  if (st == SS_OK) st = SS_ALLOC(ctx, dt->nu, (size_t)d, "masked EM noise mean");
  if (st == SS_OK) st = SS_ALLOC(ctx, dt->sigma2, (size_t)d, "masked EM noise variance");
  if (st == SS_OK) st = SS_ALLOC(ctx, acc, (size_t)(4 * d), "masked EM statistics");
  if (st == SS_OK) {
    normalisation(ctx, x, n, d, dt);
    dt->n_floored = noise_statistics(ctx, x, m, o, dt, acc);
    st = corrected_data(ctx, x, m, dt);
  }
  free(acc);
  if (st != SS_OK) ss_mask_em_data_free(dt);
  return st;
}

/* ---- mask-pattern starts ---------------------------------------------------------------------- */

typedef struct {
  int64_t words;  /* 64-bit words per pattern */
  uint64_t *bits; /* [n_patterns × words] in discovery order */
  int64_t n_patterns;
  int64_t *table; /* open addressing: pattern id or −1 */
  int64_t table_size;
} pattern_set;

static void point_bits(const ss_mask_em_data *dt, int64_t p, uint64_t *out, int64_t words) {
  memset(out, 0, sizeof(uint64_t) * (size_t)words);
  for (int64_t e = dt->row[p]; e < dt->row[p + 1]; e++) out[dt->feat[e] / 64] |= 1ull << (dt->feat[e] % 64);
}

static uint64_t bits_hash(const uint64_t *b, int64_t words) {
  uint64_t h = SS_RNG_GOLDEN;
  for (int64_t w = 0; w < words; w++) h = ss_rng_mix64(h ^ b[w]) + SS_RNG_GOLDEN;
  return h;
}

/* Pattern id of `b`, adding it when new. */
static int64_t pattern_id(pattern_set *ps, const uint64_t *b) {
  uint64_t slot = bits_hash(b, ps->words) & (uint64_t)(ps->table_size - 1);
  for (;; slot = (slot + 1) & (uint64_t)(ps->table_size - 1)) {
    int64_t id = ps->table[slot];
    if (id < 0) break;
    if (memcmp(ps->bits + id * ps->words, b, sizeof(uint64_t) * (size_t)ps->words) == 0) return id;
  }
  int64_t id = ps->n_patterns++;
  memcpy(ps->bits + id * ps->words, b, sizeof(uint64_t) * (size_t)ps->words);
  ps->table[slot] = id;
  return id;
}

static int64_t sym_diff(const uint64_t *a, const uint64_t *b, int64_t words) {
  int64_t s = 0;
  for (int64_t w = 0; w < words; w++) s += __builtin_popcountll(a[w] ^ b[w]);
  return s;
}

/* Cluster of every pattern: the first k0 − 1 are clusters 1..; the others join the nearest of them. */
static void pattern_clusters(const pattern_set *ps, int64_t n_clusters, int32_t *cluster_of) {
  for (int64_t id = 0; id < ps->n_patterns; id++) {
    if (id < n_clusters) {
      cluster_of[id] = (int32_t)(id + 1);
      continue;
    }
    int64_t best = 0, best_d = INT64_MAX;
    for (int64_t c = 0; c < n_clusters; c++) {
      int64_t dd = sym_diff(ps->bits + id * ps->words, ps->bits + c * ps->words, ps->words);
      if (dd < best_d) best_d = dd, best = c; /* strict: ties keep the lowest cluster id */
    }
    cluster_of[id] = (int32_t)(best + 1);
  }
}

ss_status ss_mask_em_start_masks(ss_ctx *ctx, const ss_mask_em_data *dt, int64_t k0, uint64_t seed, int32_t *labels,
                                 int64_t *k) {
  int64_t n = dt->n;
  pattern_set ps = {.words = (dt->d + 63) / 64};
  ps.table_size = 1;
  while (ps.table_size < 2 * n) ps.table_size *= 2;
  int64_t *visit = NULL, *pat_of = NULL;
  int32_t *cluster_of = NULL;
  uint64_t *tmp = NULL;
  ss_status st = SS_ALLOC(ctx, ps.bits, (size_t)(n * ps.words), "mask patterns");
  if (st == SS_OK) st = SS_ALLOC(ctx, ps.table, (size_t)ps.table_size, "mask pattern table");
  if (st == SS_OK) st = SS_ALLOC(ctx, visit, (size_t)n, "visiting order");
  if (st == SS_OK) st = SS_ALLOC(ctx, pat_of, (size_t)n, "pattern of each point");
  if (st == SS_OK) st = SS_ALLOC(ctx, tmp, (size_t)ps.words, "pattern");
  if (st == SS_OK) {
    for (int64_t s = 0; s < ps.table_size; s++) ps.table[s] = -1;
    for (int64_t p = 0; p < n; p++) visit[p] = p;
    ss_rng r = ss_rng_make(seed, SS_RNG_MASK_EM_START, 0);
    ss_rng_shuffle(&r, visit, (size_t)n);
    for (int64_t v = 0; v < n; v++) {
      point_bits(dt, visit[v], tmp, ps.words);
      pat_of[visit[v]] = pattern_id(&ps, tmp);
    }
    st = SS_ALLOC(ctx, cluster_of, (size_t)ps.n_patterns, "pattern clusters");
  }
  if (st == SS_OK) {
    int64_t n_clusters = ps.n_patterns < k0 - 1 ? ps.n_patterns : k0 - 1;
    if (n_clusters < 1) n_clusters = 1;
    pattern_clusters(&ps, n_clusters, cluster_of);
    for (int64_t p = 0; p < n; p++) labels[p] = cluster_of[pat_of[p]];
    *k = n_clusters + 1;
  }
  free(ps.bits);
  free(ps.table);
  free(visit);
  free(pat_of);
  free(cluster_of);
  free(tmp);
  return st;
}
