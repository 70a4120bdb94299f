/* cleanup.c — the cleanup after the merge (cleanup.h): robust outliers per cluster, density-valley
 * splits along the first principal component, and reassignment of the outliers. */
#include "stages/cleanup/cleanup.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/order.h"

#ifdef _OPENMP
#include <omp.h>
#define SS_THREAD_ID() omp_get_thread_num()
#else
#define SS_THREAD_ID() 0
#endif

/* --- cleanup: robust statistics ------------------------------------------------------------------ */

/* 1.4826 · MAD estimates a Gaussian's standard deviation. */
#define SS_CLEANUP_MAD_TO_SD 1.4826
/* Silverman's rule of thumb: h = 0.9 · min(sd, IQR/1.34) · m^(−1/5). */
#define SS_CLEANUP_SILVERMAN 0.9
#define SS_CLEANUP_IQR_TO_SD 1.34
/* Kernel contributions beyond this many bandwidths are dropped (exp(−12.5) ≈ 4e-6). */
#define SS_CLEANUP_KDE_CUTOFF 5.0
/* A feature's noise spread needs at least this many spikes masked on its channel; fewer: the spread
 * of the same principal component pooled over all channels. */
#define SS_CLEANUP_MIN_NOISE_SPIKES 20
/* Spread below which a feature counts as constant (features are in µV-scaled PCA units). */
#define SS_CLEANUP_MIN_SPREAD 1e-9
/* Power iteration for the first principal component: at most this many steps, or until the unit
 * vector moves by less than the tolerance (L1). */
#define SS_CLEANUP_POWER_ITERATIONS 300
#define SS_CLEANUP_POWER_TOL 1e-9
/* SS_CLEANUP_SAMPLE and SS_CLEANUP_NOISE_SAMPLE (cleanup.h) bound the cost on long recordings: a median
 * of 4096 values is within ~0.02 σ of the cluster's. */
/* Spikes staged at a time for the scatter matrix of the split test. */
#define SS_CLEANUP_BLOCK 1024

/* Median and 1.4826·MAD of a[0..n), n >= 1; reorders a. */
static void median_sd(double *a, int64_t n, double *med, double *sd) {
  *med = ss_order_median(a, n);
  for (int64_t i = 0; i < n; i++) a[i] = fabs(a[i] - *med);
  *sd = SS_CLEANUP_MAD_TO_SD * ss_order_median(a, n);
}

typedef struct {
  int64_t n;
  int D, P;
  const float *x;           /* [n × D] */
  double thr;               /* outlier_z2 · D (INFINITY: no outliers) */
  int64_t min_part;         /* split_min_spikes */
  double valley;            /* split_valley */
  int max_ch;               /* split_max_channels */
  const float *masks;       /* [n × C] */
  double *chw;              /* [C] mean mask of a segment's inliers per channel */
  uint8_t *chosen;          /* [C] channels the split test looks at */
  int *feat;                /* [D] their features, ascending */
  int T;                    /* threads */
  double *noise;            /* [D] noise spread per feature */
  double *buf;              /* [T × n] scratch, n per thread */
  double *proj;             /* [n] projections */
  double *cov;              /* [D × D] */
  double *mean, *row, *vec; /* [D] each */
  double *block;            /* [SS_CLEANUP_BLOCK × D] */
  int64_t *pos;             /* [n] sampled member positions */
  double *sample;           /* [D × SS_CLEANUP_SAMPLE] the sampled spikes, feature-major */
  /* final clusters: robust centre and spread, [k_cap × D] */
  double *mu, *sd;
  int64_t k_cap;
} cleanup_state;

/* Element k of s evenly spaced among n (k < s <= n): floor(k·n/s), strictly increasing in k. */
static int64_t even(int64_t k, int64_t n, int64_t s) { return (int64_t)((__int128)k * n / s); }

/* The spread (1.4826·MAD) of the values of feature column `col` of the spikes masked on channel
 * `chan`, or on any channel when chan < 0 (column col + c·P on channel c: the same principal
 * component pooled over channels, at most n values). 0 when fewer than SS_CLEANUP_MIN_NOISE_SPIKES. */
static double masked_spread(const cleanup_state *s, const float *masks, int chan, int col, double *buf) {
  const int C = s->D / s->P;
  const int64_t S = s->n < SS_CLEANUP_NOISE_SAMPLE ? s->n : SS_CLEANUP_NOISE_SAMPLE;
  int64_t m = 0;
  for (int64_t k = 0; k < S && m < s->n; k++) {
    int64_t i = even(k, s->n, S);
    for (int c = chan < 0 ? 0 : chan; c < (chan < 0 ? C : chan + 1) && m < s->n; c++)
      if (masks[i * C + c] == 0.0f) buf[m++] = s->x[i * s->D + (chan < 0 ? c * s->P + col : col)];
  }
  if (m < SS_CLEANUP_MIN_NOISE_SPIKES) return 0;
  double med, sd;
  median_sd(buf, m, &med, &sd);
  return sd;
}

/* The positions in idx[0..m) of at most SS_CLEANUP_SAMPLE of the flagged spikes (inl[i] = 1), evenly
 * spaced among them, into pos; returns their number. */
static int64_t sample_inliers(const uint8_t *inl, int64_t m, int64_t *pos) {
  int64_t n_in = 0, q = 0, k = 0;
  for (int64_t i = 0; i < m; i++) n_in += inl[i];
  const int64_t S = n_in < SS_CLEANUP_SAMPLE ? n_in : SS_CLEANUP_SAMPLE;
  for (int64_t i = 0, rank = 0; i < m && k < S; i++) {
    if (!inl[i]) continue;
    if (rank++ == even(k, n_in, S)) {
      pos[q++] = i;
      k++;
    }
  }
  return q;
}

/* ν_j: the spread of feature j over the spikes masked (mask 0) on its channel; for a channel masked
 * on too few spikes, the same component pooled over channels; SS_CLEANUP_MIN_SPREAD at the least. */
static void noise_spread(cleanup_state *s, const float *masks) {
  const int T = s->T;
  (void)T;
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
#endif
  for (int j = 0; j < s->D; j++) { /* features are independent: any thread count gives the same values */
    double *buf = s->buf + (size_t)SS_THREAD_ID() * (size_t)s->n;
    double v = masked_spread(s, masks, j / s->P, j, buf);
    if (!(v > SS_CLEANUP_MIN_SPREAD)) v = masked_spread(s, masks, -1, j % s->P, buf);
    s->noise[j] = v > SS_CLEANUP_MIN_SPREAD ? v : SS_CLEANUP_MIN_SPREAD;
  }
}

static double z2(const cleanup_state *s, const float *x, const double *mu, const double *sd) {
  double t = 0;
  for (int j = 0; j < s->D; j++) {
    double z = (x[j] - mu[j]) / sd[j];
    t += z * z;
  }
  return t;
}

/* Robust centre and spread of the spikes idx[0..m) and their inlier flags (cleanup.h, step 1). Features,
 * then spikes, are independent: the result does not depend on the thread count. */
static void robust_core(cleanup_state *s, const int64_t *idx, int64_t m, uint8_t *inl, double *mu, double *sd) {
  const int T = s->T;
  (void)T;
  memset(inl, 1, (size_t)m);
  for (int it = 0; it < SS_CLEANUP_CORE_ITERATIONS; it++) {
    const int64_t q = sample_inliers(inl, m, s->pos);
    if (q < 2) return;              /* keep the previous estimate (the first pass always has m >= 2) */
    for (int64_t r = 0; r < q; r++) /* row by row (the spikes are scattered in memory), feature-major */
      for (int j = 0; j < s->D; j++) s->sample[(size_t)j * q + r] = s->x[idx[s->pos[r]] * s->D + j];
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
#endif
    for (int j = 0; j < s->D; j++) {
      double *buf = s->buf + (size_t)SS_THREAD_ID() * (size_t)s->n;
      memcpy(buf, s->sample + (size_t)j * q, (size_t)q * sizeof(double));
      median_sd(buf, q, &mu[j], &sd[j]);
      sd[j] = sd[j] > s->noise[j] ? sd[j] : s->noise[j];
    }
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) schedule(static)
#endif
    for (int64_t i = 0; i < m; i++) inl[i] = z2(s, s->x + idx[i] * s->D, mu, sd) <= s->thr;
  }
}

/* --- cleanup: the density-valley split ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Number of p[0..m) (ascending) below v. */
static int64_t count_below(const double *p, int64_t m, double v) {
  int64_t lo = 0, hi = m;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (p[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Silverman's bandwidth of p[0..m) (ascending); 0 when p is constant. */
static double bandwidth(const double *p, int64_t m) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < m; i++) mean += p[i];
  mean /= (double)m;
  for (int64_t i = 0; i < m; i++) var += (p[i] - mean) * (p[i] - mean);
  double sd = sqrt(var / (double)m), iqr = (p[(3 * m) / 4] - p[m / 4]) / SS_CLEANUP_IQR_TO_SD;
  double spread = iqr > 0 && iqr < sd ? iqr : sd;
  return SS_CLEANUP_SILVERMAN * spread * pow((double)m, -0.2);
}

double ss_merge_valley(const double *p, int64_t m, int64_t min_part, double *cut) {
  double dens[SS_CLEANUP_KDE_GRID], grid[SS_CLEANUP_KDE_GRID], best = 1.0;
  *cut = NAN;
  double h = m >= 2 ? bandwidth(p, m) : 0;
  if (!(h > 0)) return best;
  const int G = SS_CLEANUP_KDE_GRID;
  int64_t lo = 0, hi = 0;
  for (int g = 0; g < G; g++) { /* the grid ascends: a sliding window of the points within the cutoff */
    grid[g] = p[0] + (p[m - 1] - p[0]) * g / (G - 1);
    while (lo < m && p[lo] < grid[g] - SS_CLEANUP_KDE_CUTOFF * h) lo++;
    while (hi < m && p[hi] <= grid[g] + SS_CLEANUP_KDE_CUTOFF * h) hi++;
    dens[g] = 0;
    for (int64_t i = lo; i < hi; i++) dens[g] += exp(-0.5 * (grid[g] - p[i]) * (grid[g] - p[i]) / (h * h));
  }
  for (int a = 1; a < G - 1; a++) {
    if (!(dens[a] >= dens[a - 1] && dens[a] > dens[a + 1])) continue;
    for (int b = a + 1; b < G - 1; b++) {
      if (!(dens[b] >= dens[b - 1] && dens[b] > dens[b + 1])) continue;
      int v = a;
      for (int g = a; g <= b; g++) v = dens[g] < dens[v] ? g : v;
      double ratio = dens[v] / (dens[a] < dens[b] ? dens[a] : dens[b]);
      int64_t below = count_below(p, m, grid[v]);
      if (ratio < best && below >= min_part && m - below >= min_part) {
        best = ratio;
        *cut = grid[v];
      }
    }
  }
  return best;
}

/* The leading eigenvector of the symmetric D × D matrix a (full, row-major) by power iteration from
 * v_j = sqrt(a_jj) (deterministic, and not orthogonal to the top eigenvector of a covariance unless
 * the data are degenerate); w is scratch [D]. */
static void leading_eigenvector(const double *a, int D, double *v, double *w) {
  double norm = 0;
  for (int j = 0; j < D; j++) norm += (v[j] = sqrt(a[j * D + j] > 0 ? a[j * D + j] : 0));
  if (!(norm > 0)) return;
  for (int it = 0; it < SS_CLEANUP_POWER_ITERATIONS; it++) {
    double nn = 0, change = 0;
    for (int r = 0; r < D; r++) {
      double t = 0;
      for (int c = 0; c < D; c++) t += a[r * D + c] * v[c];
      w[r] = t;
      nn += t * t;
    }
    nn = sqrt(nn);
    if (!(nn > 0)) return;
    for (int j = 0; j < D; j++) {
      double x = w[j] / nn;
      change += fabs(x - v[j]);
      v[j] = x;
    }
    if (change < SS_CLEANUP_POWER_TOL) return;
  }
}

/* The features the split test of the spikes idx[0..m) (inl[i] = 1) looks at, ascending, into s->feat:
 * those of the split_max_channels channels of highest mean mask over the inliers (ties: the lower
 * channel), every channel when the probe has no more; returns their number. */
static int split_features(cleanup_state *s, const int64_t *idx, const uint8_t *inl, int64_t m) {
  const int P = s->P, C = s->D / P;
  memset(s->chosen, C <= s->max_ch, (size_t)C);
  if (C > s->max_ch) {
    memset(s->chw, 0, (size_t)C * sizeof(double));
    for (int64_t i = 0; i < m; i++)
      if (inl[i])
        for (int c = 0; c < C; c++) s->chw[c] += s->masks[idx[i] * C + c];
    for (int r = 0; r < s->max_ch; r++) { /* max_ch passes of a maximum: C·max_ch, no sort needed */
      int best = -1;
      for (int c = 0; c < C; c++)
        if (!s->chosen[c] && (best < 0 || s->chw[c] > s->chw[best])) best = c;
      s->chosen[best] = 1;
    }
  }
  int F = 0;
  for (int c = 0; c < C; c++) {
    if (!s->chosen[c]) continue;
    for (int col = 0; col < P; col++) s->feat[F++] = c * P + col;
  }
  return F;
}

/* Σ y yᵀ over the sampled inliers idx[pos[0..q)], y = x_f/ν_f − mean over the F features s->feat, into
 * s->cov (full F × F). Rows of y are staged in blocks of SS_CLEANUP_BLOCK spikes; each thread owns whole
 * rows of the sum, and every entry adds the spikes in the same order: the result does not depend on the
 * thread count. */
static void scatter_matrix(cleanup_state *s, const int64_t *idx, int64_t q, int F) {
  const int D = s->D, T = s->T;
  (void)T;
  const int *f = s->feat;
  double *y = s->block;
  memset(s->cov, 0, (size_t)F * F * sizeof(double));
  for (int64_t r0 = 0; r0 < q; r0 += SS_CLEANUP_BLOCK) {
    const int64_t r = q - r0 < SS_CLEANUP_BLOCK ? q - r0 : SS_CLEANUP_BLOCK;
    for (int64_t k = 0; k < r; k++)
      for (int a = 0; a < F; a++) y[k * F + a] = s->x[idx[s->pos[r0 + k]] * D + f[a]] / s->noise[f[a]] - s->mean[a];
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
#endif
    for (int a = 0; a < F; a++)
      for (int64_t k = 0; k < r; k++) {
        double ya = y[k * F + a];
        for (int b = a; b < F; b++) s->cov[a * F + b] += ya * y[k * F + b];
      }
  }
  for (int a = 0; a < F; a++)
    for (int b = 0; b < a; b++) s->cov[a * F + b] = s->cov[b * F + a];
}

/* Projections of the inliers idx[i] (inl[i] = 1) on their first principal component over the split
 * test's features, in noise units, into s->proj (in member order, inliers only); returns their number. */
static int64_t project(cleanup_state *s, const int64_t *idx, const uint8_t *inl, int64_t m) {
  const int D = s->D, F = split_features(s, idx, inl, m);
  const int *f = s->feat;
  double *mean = s->mean, *v = s->vec;
  memset(mean, 0, (size_t)F * sizeof(double));
  int64_t q = 0;
  for (int64_t i = 0; i < m; i++)
    if (inl[i]) {
      for (int a = 0; a < F; a++) mean[a] += s->x[idx[i] * D + f[a]] / s->noise[f[a]];
      q++;
    }
  for (int a = 0; a < F; a++) mean[a] /= (double)q;
  scatter_matrix(s, idx, sample_inliers(inl, m, s->pos), F);
  leading_eigenvector(s->cov, F, v, s->row);
  int64_t k = 0;
  for (int64_t i = 0; i < m; i++) {
    if (!inl[i]) continue;
    double t = 0;
    for (int a = 0; a < F; a++) t += (s->x[idx[i] * D + f[a]] / s->noise[f[a]] - mean[a]) * v[a];
    s->proj[k++] = t;
  }
  return k;
}

/* --- cleanup: the driver ------------------------------------------------------------------------- */

typedef struct {
  int32_t id;
  int64_t start, len; /* a run of cleanup_work.ord */
} segment;

typedef struct {
  int64_t *ord;      /* [n] spike indices grouped by cluster */
  int64_t *tmp;      /* [n] partition scratch */
  uint8_t *inl;      /* [n] inlier flags of the current segment */
  int64_t *outliers; /* [n] */
  int64_t n_out;
  segment *stack; /* [n + k] pending segments (each split adds one, and a part has >= 1 spike) */
  int64_t depth;
  uint8_t *has_model; /* [k_cap] the cluster has a robust centre (it had >= 2 spikes) */
  int32_t *parent;    /* [k_cap] the cluster a split-off part came from (itself for input clusters) */
} cleanup_work;

static void cleanup_free(cleanup_state *s, cleanup_work *w) {
  free(s->noise);
  free(s->buf);
  free(s->proj);
  free(s->cov);
  free(s->chw);
  free(s->chosen);
  free(s->feat);
  free(s->mean);
  free(s->row);
  free(s->vec);
  free(s->block);
  free(s->pos);
  free(s->sample);
  free(s->mu);
  free(s->sd);
  free(w->ord);
  free(w->tmp);
  free(w->inl);
  free(w->outliers);
  free(w->stack);
  free(w->has_model);
  free(w->parent);
}

static ss_status grow_models(ss_ctx *ctx, cleanup_state *s, cleanup_work *w, int64_t need) {
  if (need <= s->k_cap) return SS_OK;
  int64_t cap = s->k_cap * 2 > need ? s->k_cap * 2 : need;
  SS_TRY(SS_REALLOC(ctx, s->mu, (size_t)cap * s->D, "cleanup: model means"));
  SS_TRY(SS_REALLOC(ctx, s->sd, (size_t)cap * s->D, "cleanup: model spreads"));
  SS_TRY(SS_REALLOC(ctx, w->has_model, (size_t)cap, "cleanup: model flags"));
  SS_TRY(SS_REALLOC(ctx, w->parent, (size_t)cap, "cleanup: model parents"));
  memset(w->has_model + s->k_cap, 0, (size_t)(cap - s->k_cap));
  for (int64_t c = s->k_cap; c < cap; c++) w->parent[c] = (int32_t)c;
  s->k_cap = cap;
  return SS_OK;
}

static ss_status cleanup_init(ss_ctx *ctx, const ss_params *p, const ss_cleanup_input *in, cleanup_state *s,
                              cleanup_work *w) {
  memset(s, 0, sizeof(*s));
  memset(w, 0, sizeof(*w));
  const int64_t n = in->n;
  const size_t D = (size_t)in->n_channels * in->n_pcs, nn = (size_t)(n > 0 ? n : 1);
  s->n = n;
  s->D = (int)D;
  s->P = in->n_pcs;
  s->x = in->features;
  s->T = in->n_threads > 0 ? in->n_threads : 1;
  s->thr = p->merge.outlier_z2 > 0 ? p->merge.outlier_z2 * (double)D : INFINITY;
  s->min_part = p->merge.split_min_spikes;
  s->valley = p->merge.split_valley;
  s->max_ch = p->merge.split_max_channels > 0 && p->merge.split_max_channels < in->n_channels
                  ? (int)p->merge.split_max_channels
                  : in->n_channels;
  s->masks = in->masks;
  SS_TRY(SS_CALLOC(ctx, s->noise, D, "cleanup noise"));
  SS_TRY(SS_ALLOC(ctx, s->buf, (size_t)s->T * nn, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->proj, nn, "cleanup projections"));
  const size_t F = (size_t)s->max_ch * (size_t)in->n_pcs; /* the split test's features at most */
  SS_TRY(SS_ALLOC(ctx, s->cov, F * F, "cleanup covariance"));
  SS_TRY(SS_ALLOC(ctx, s->chw, (size_t)in->n_channels, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->chosen, (size_t)in->n_channels, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->feat, D, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->mean, D, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->row, D, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->vec, D, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->block, (size_t)SS_CLEANUP_BLOCK * D, "cleanup scratch"));
  SS_TRY(SS_ALLOC(ctx, s->pos, nn, "cleanup sample"));
  SS_TRY(SS_ALLOC(ctx, s->sample, D * SS_CLEANUP_SAMPLE, "cleanup sample"));
  SS_TRY(SS_ALLOC(ctx, w->ord, nn, "cleanup order"));
  SS_TRY(SS_ALLOC(ctx, w->tmp, nn, "cleanup order"));
  SS_TRY(SS_ALLOC(ctx, w->inl, nn, "cleanup flags"));
  SS_TRY(SS_ALLOC(ctx, w->outliers, nn, "cleanup outliers"));
  SS_TRY(SS_ALLOC(ctx, w->stack, nn + (size_t)in->k, "cleanup stack"));
  SS_TRY(grow_models(ctx, s, w, in->k > 1 ? in->k : 2));
  noise_spread(s, in->masks);
  return SS_OK;
}

/* Group the spikes by cluster (noise left out) and push one segment per non-empty cluster, the
 * highest id first so that clusters are taken in increasing order. */
static ss_status push_clusters(ss_ctx *ctx, const ss_cleanup_input *in, const int32_t *labels, cleanup_work *w) {
  int64_t *start = NULL;
  SS_TRY(SS_CALLOC(ctx, start, (size_t)in->k + 1, "cleanup order"));
  for (int64_t i = 0; i < in->n; i++) {
    if (labels[i] < 0 || labels[i] >= in->k) {
      free(start);
      return ss_fail(ctx, SS_ERR_INTERNAL, "cleanup: spike %" PRId64 ": label %d outside 0..%" PRId64, i, labels[i],
                     in->k - 1);
    }
    start[labels[i] + 1]++;
  }
  for (int64_t c = 0; c < in->k; c++) start[c + 1] += start[c];
  for (int64_t c = in->k - 1; c >= 1; c--)
    if (start[c + 1] > start[c]) w->stack[w->depth++] = (segment){(int32_t)c, start[c], start[c + 1] - start[c]};
  for (int64_t i = 0; i < in->n; i++) w->ord[start[labels[i]]++] = i;
  free(start);
  return SS_OK;
}

/* Try the split of segment g (its inliers flagged in w->inl); on success the lower side keeps g's id
 * (with the outliers), the upper side takes new_id, and both are pushed back. */
static int try_split(ss_ctx *ctx, cleanup_state *s, cleanup_work *w, segment g, int32_t new_id, int32_t *labels) {
  const int64_t *idx = w->ord + g.start;
  int64_t q = 0;
  for (int64_t i = 0; i < g.len; i++) q += w->inl[i];
  if (!(s->valley > 0) || q < 2 * s->min_part) return 0;
  project(s, idx, w->inl, g.len);
  memcpy(s->buf, s->proj, (size_t)q * sizeof(double));
  qsort(s->buf, (size_t)q, sizeof(double), cmp_double);
  double cut, ratio = ss_merge_valley(s->buf, q, s->min_part, &cut);
  if (!(ratio < s->valley)) return 0;
  /* the larger side keeps the id and the outliers (the lower side on a tie): a rule that does not
   * depend on the sign of the principal component */
  const int64_t below = count_below(s->buf, q, cut);
  const int keep_upper = q - below > below;
  int64_t na = 0, nb = 0, k = 0;
  for (int64_t i = 0; i < g.len; i++) { /* stable partition: the kept side and the outliers first */
    int leaves = w->inl[i] && ((s->proj[k++] >= cut) != keep_upper);
    if (!leaves) w->tmp[na++] = idx[i];
  }
  k = 0;
  for (int64_t i = 0; i < g.len; i++)
    if (w->inl[i] && ((s->proj[k++] >= cut) != keep_upper)) {
      labels[idx[i]] = new_id;
      w->tmp[na + nb++] = idx[i];
    }
  memcpy(w->ord + g.start, w->tmp, (size_t)g.len * sizeof(int64_t));
  ss_log_info(ctx,
              "cleanup: cluster %d splits at a density valley %.2f of its lower peak: %" PRId64 " spikes stay, %" PRId64
              " form cluster %d",
              g.id, ratio, na, nb, new_id);
  w->parent[new_id] = g.id;
  w->stack[w->depth++] = (segment){new_id, g.start + na, nb};
  w->stack[w->depth++] = (segment){g.id, g.start, na};
  return 1;
}

/* Every segment: its robust core, then a split or its outliers recorded (cleanup.h, steps 1–2). */
static ss_status process_segments(ss_ctx *ctx, cleanup_state *s, cleanup_work *w, int64_t *k, int32_t *labels,
                                  ss_cleanup_result *out) {
  while (w->depth > 0) {
    segment g = w->stack[--w->depth];
    if (g.len < 2) continue; /* no spread to measure: the spike stays, and takes no outliers */
    double *mu = s->mu + (size_t)g.id * s->D, *sd = s->sd + (size_t)g.id * s->D;
    robust_core(s, w->ord + g.start, g.len, w->inl, mu, sd);
    SS_TRY(grow_models(ctx, s, w, *k + 1));
    mu = s->mu + (size_t)g.id * s->D; /* the arrays may have moved */
    sd = s->sd + (size_t)g.id * s->D;
    if (try_split(ctx, s, w, g, (int32_t)*k, labels)) {
      ++*k;
      out->n_splits++;
      continue;
    }
    w->has_model[g.id] = 1;
    for (int64_t i = 0; i < g.len; i++)
      if (!w->inl[i]) w->outliers[w->n_out++] = w->ord[g.start + i];
  }
  return SS_OK;
}

/* Each outlier to the cluster of smallest z² when within the threshold there, else noise (step 3). */
static void reassign(const cleanup_state *s, const cleanup_work *w, int64_t k, int32_t *labels,
                     ss_cleanup_result *out) {
  for (int64_t o = 0; o < w->n_out; o++) {
    int64_t i = w->outliers[o];
    double best = INFINITY;
    int32_t to = 0;
    for (int64_t c = 1; c < k; c++) {
      if (!w->has_model[c]) continue;
      double d = z2(s, s->x + i * s->D, s->mu + (size_t)c * s->D, s->sd + (size_t)c * s->D);
      if (d < best) {
        best = d;
        to = (int32_t)c;
      }
    }
    labels[i] = best <= s->thr ? to : 0;
    out->n_reassigned += labels[i] != 0;
  }
  out->n_outliers = w->n_out;
}

/* Contiguous labels: noise stays 0, non-empty clusters keep their order; the origin of each output
 * cluster is the input cluster its parents lead back to. */
static ss_status renumber(ss_ctx *ctx, int64_t n, int64_t k_in, int64_t k, const int32_t *parent, int32_t *labels,
                          ss_cleanup_result *out) {
  int32_t *map = NULL;
  SS_TRY(SS_CALLOC(ctx, map, (size_t)k, "cleanup map"));
  for (int64_t i = 0; i < n; i++) map[labels[i]] = 1;
  int32_t next = 1;
  for (int64_t c = 1; c < k; c++) map[c] = map[c] ? next++ : 0;
  map[0] = 0;
  for (int64_t i = 0; i < n; i++) labels[i] = map[labels[i]];
  out->k_out = next;
  ss_status st = SS_CALLOC(ctx, out->origin, (size_t)next, "cleanup origins");
  for (int64_t c = 1; st == SS_OK && c < k; c++) {
    int32_t root = (int32_t)c;
    while (root >= k_in) root = parent[root];
    if (map[c]) out->origin[map[c]] = root;
  }
  free(map);
  return st;
}

void ss_cleanup_result_free(ss_cleanup_result *r) {
  free(r->origin);
  r->origin = NULL;
}

ss_status ss_merge_cleanup(ss_ctx *ctx, const ss_params *p, const ss_cleanup_input *in, int32_t *labels,
                           ss_cleanup_result *out) {
  memset(out, 0, sizeof(*out));
  out->k_in = out->k_out = in->k;
  if (in->k < 1 || in->n_channels < 1 || in->n_pcs < 1 || in->n < 0)
    return ss_fail(ctx, SS_ERR_INTERNAL,
                   "cleanup: %" PRId64 " clusters, %d channels, %d components, %" PRId64 " spikes", in->k,
                   in->n_channels, in->n_pcs, in->n);
  cleanup_state s;
  cleanup_work w;
  ss_status st = cleanup_init(ctx, p, in, &s, &w);
  int64_t k = in->k;
  if (st == SS_OK) st = push_clusters(ctx, in, labels, &w);
  if (st == SS_OK) st = process_segments(ctx, &s, &w, &k, labels, out);
  if (st == SS_OK) reassign(&s, &w, k, labels, out);
  if (st == SS_OK) st = renumber(ctx, in->n, in->k, k, w.parent, labels, out);
  cleanup_free(&s, &w);
  if (st != SS_OK) ss_cleanup_result_free(out);
  if (st == SS_OK)
    ss_log_info(ctx,
                "cleanup: %" PRId64 " clusters -> %" PRId64 " (%" PRId64 " splits); %" PRId64 " outliers: %" PRId64
                " to another cluster, %" PRId64 " to noise",
                out->k_in, out->k_out, out->n_splits, out->n_outliers, out->n_reassigned,
                out->n_outliers - out->n_reassigned);
  return st;
}
