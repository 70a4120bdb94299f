/* merge.c — greedy merge of over-split units by mean-waveform correlation on shared channels, vetoed
 * by added refractory violations (rules in cleanup.h). */
#include "stages/cleanup/cleanup.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

void ss_merge_result_free(ss_merge_result *r) {
  free(r->map);
  free(r->decisions);
  memset(r, 0, sizeof(*r));
}

/* The channel with the largest peak-to-peak of a waveform; that peak-to-peak in *ptp when not NULL. */
static int peak_channel_ptp(const float *w, int n_channels, int n_wave, double *ptp) {
  int best = 0;
  double best_ptp = -1;
  for (int c = 0; c < n_channels; c++) {
    double lo = w[c * n_wave], hi = lo;
    for (int t = 1; t < n_wave; t++) {
      double v = w[c * n_wave + t];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    if (hi - lo > best_ptp) {
      best_ptp = hi - lo;
      best = c;
    }
  }
  if (ptp) *ptp = best_ptp;
  return best;
}

static int peak_channel(const float *w, int n_channels, int n_wave) {
  return peak_channel_ptp(w, n_channels, n_wave, NULL);
}

/* Larger over smaller peak-to-peak amplitude of two waveforms (INFINITY when one is flat). */
static double amp_ratio(const float *wa, const float *wb, int n_channels, int n_wave) {
  double pa, pb;
  peak_channel_ptp(wa, n_channels, n_wave, &pa);
  peak_channel_ptp(wb, n_channels, n_wave, &pb);
  const double lo = pa < pb ? pa : pb, hi = pa < pb ? pb : pa;
  return lo > 0 ? hi / lo : INFINITY;
}

double ss_merge_waveform_corr(const float *wa, const float *ma, const float *wb, const float *mb, int n_channels,
                              int n_wave, int *n_shared) {
  int pa = peak_channel(wa, n_channels, n_wave), pb = peak_channel(wb, n_channels, n_wave), any = 0;
  for (int c = 0; c < n_channels; c++) any |= ma[c] >= SS_MERGE_CHANNEL_MASK || mb[c] >= SS_MERGE_CHANNEL_MASK;
  double sa = 0, sb = 0, saa = 0, sbb = 0, sab = 0;
  int64_t m = 0;
  int used = 0;
  for (int c = 0; c < n_channels; c++) {
    int shared = any ? (ma[c] >= SS_MERGE_CHANNEL_MASK || mb[c] >= SS_MERGE_CHANNEL_MASK) : (c == pa || c == pb);
    if (!shared) continue;
    used++;
    for (int t = 0; t < n_wave; t++) {
      double x = wa[c * n_wave + t], y = wb[c * n_wave + t];
      sa += x;
      sb += y;
      saa += x * x;
      sbb += y * y;
      sab += x * y;
      m++;
    }
  }
  *n_shared = used;
  double cov = sab - sa * sb / (double)m, va = saa - sa * sa / (double)m, vb = sbb - sb * sb / (double)m;
  if (!(va > 0) || !(vb > 0)) return NAN;
  return cov / sqrt(va * vb);
}

int64_t ss_merge_violations(const int64_t *a, int64_t na, const int64_t *b, int64_t nb, int64_t refractory) {
  int64_t i = 0, j = 0, v = 0, prev = 0;
  int have = 0;
  while (i < na || j < nb) {
    int64_t t = (j >= nb || (i < na && a[i] <= b[j])) ? a[i++] : b[j++];
    if (have && t - prev < refractory) v++;
    prev = t;
    have = 1;
  }
  return v;
}

/* --- working state ------------------------------------------------------------------------------ */

typedef struct {
  int64_t k;
  int C, W;
  int8_t *alive;
  int64_t *count;
  int64_t *viol;
  int64_t **train;    /* per cluster, ascending */
  float *wave;        /* [k × C × W] current means */
  float *mask;        /* [k × C] */
  double *corr;       /* [k × k], upper triangle used */
  int *shared;        /* [k × k] */
  int8_t *refused;    /* [k × k] */
  int8_t *forbid;     /* [k × k] same origin (merge_input.origin) */
  int32_t *parent;    /* [k] the cluster each one joined (itself when alive) */
  int64_t refractory; /* samples */
} merge_state;

static void state_free(merge_state *s) {
  if (s->train)
    for (int64_t c = 0; c < s->k; c++) free(s->train[c]);
  free(s->train);
  free(s->alive);
  free(s->count);
  free(s->viol);
  free(s->wave);
  free(s->mask);
  free(s->corr);
  free(s->shared);
  free(s->refused);
  free(s->forbid);
  free(s->parent);
}

static void pair_corr(merge_state *s, int64_t a, int64_t b) {
  size_t ww = (size_t)s->C * s->W;
  s->corr[a * s->k + b] = ss_merge_waveform_corr(s->wave + a * ww, s->mask + a * s->C, s->wave + b * ww,
                                                 s->mask + b * s->C, s->C, s->W, &s->shared[a * s->k + b]);
}

static ss_status state_init(ss_ctx *ctx, const ss_params *p, const ss_merge_input *in, merge_state *s) {
  memset(s, 0, sizeof(*s));
  const int64_t k = in->k;
  s->k = k;
  s->C = in->n_channels;
  s->W = in->n_wave;
  s->refractory = llround(p->merge.refractory_ms * in->rate_hz / 1000.0);
  size_t kk = (size_t)k * (size_t)k, ww = (size_t)s->C * s->W;
  SS_TRY(SS_CALLOC(ctx, s->alive, (size_t)k, "merge state"));
  SS_TRY(SS_CALLOC(ctx, s->count, (size_t)k, "merge state"));
  SS_TRY(SS_CALLOC(ctx, s->viol, (size_t)k, "merge state"));
  SS_TRY(SS_CALLOC(ctx, s->train, (size_t)k, "merge trains"));
  SS_TRY(SS_ALLOC(ctx, s->wave, (size_t)k * ww, "merge waveforms"));
  SS_TRY(SS_ALLOC(ctx, s->mask, (size_t)k * s->C, "merge masks"));
  SS_TRY(SS_CALLOC(ctx, s->corr, kk, "merge correlations"));
  SS_TRY(SS_CALLOC(ctx, s->shared, kk, "merge correlations"));
  SS_TRY(SS_CALLOC(ctx, s->refused, kk, "merge correlations"));
  SS_TRY(SS_CALLOC(ctx, s->forbid, kk, "merge origins"));
  for (int64_t a = 0; in->origin && a < k; a++)
    for (int64_t b = 0; b < k; b++) s->forbid[a * k + b] = a != b && in->origin[a] == in->origin[b];
  SS_TRY(SS_ALLOC(ctx, s->parent, (size_t)k, "merge map"));
  memcpy(s->wave, in->mean_waveform, (size_t)k * ww * sizeof(float));
  memcpy(s->mask, in->mean_mask, (size_t)k * s->C * sizeof(float));
  for (int64_t i = 0; i < in->n; i++) {
    if (in->labels[i] < 0 || in->labels[i] >= k)
      return ss_fail(ctx, SS_ERR_INTERNAL, "merge: spike %" PRId64 ": label %d outside 0..%" PRId64, i, in->labels[i],
                     k - 1);
    if (i > 0 && in->times[i] < in->times[i - 1])
      return ss_fail(ctx, SS_ERR_INTERNAL, "merge: spike times not ascending at spike %" PRId64, i);
    s->count[in->labels[i]]++;
  }
  for (int64_t c = 0; c < k; c++) {
    s->parent[c] = (int32_t)c;
    s->alive[c] = c > 0 && s->count[c] > 0;
    SS_TRY(SS_ALLOC(ctx, s->train[c], (size_t)(s->count[c] > 0 ? s->count[c] : 1), "merge trains"));
    s->count[c] = 0;
  }
  for (int64_t i = 0; i < in->n; i++) s->train[in->labels[i]][s->count[in->labels[i]]++] = in->times[i];
  for (int64_t c = 1; c < k; c++) s->viol[c] = ss_merge_violations(s->train[c], s->count[c], NULL, 0, s->refractory);
  for (int64_t a = 1; a < k; a++)
    for (int64_t b = a + 1; b < k; b++)
      if (s->alive[a] && s->alive[b]) pair_corr(s, a, b);
  return SS_OK;
}

/* The untested pair of highest correlation at or above the threshold; 0 when none. */
static int best_pair(const merge_state *s, double threshold, int64_t *ba, int64_t *bb) {
  double best = -INFINITY;
  for (int64_t a = 1; a < s->k; a++) {
    if (!s->alive[a]) continue;
    for (int64_t b = a + 1; b < s->k; b++) {
      double c = s->corr[a * s->k + b];
      if (!s->alive[b] || s->refused[a * s->k + b] || s->forbid[a * s->k + b] || !(c >= threshold) || !(c > best))
        continue;
      best = c;
      *ba = a;
      *bb = b;
    }
  }
  return best > -INFINITY;
}

/* b joins a: union of the trains, count-weighted means, correlations of a recomputed. */
static ss_status join(ss_ctx *ctx, merge_state *s, int64_t a, int64_t b, int64_t viol_ab) {
  int64_t na = s->count[a], nb = s->count[b], i = 0, j = 0, o = 0;
  int64_t *t = NULL;
  SS_TRY(SS_ALLOC(ctx, t, (size_t)(na + nb), "merged train"));
  while (i < na || j < nb)
    t[o++] = (j >= nb || (i < na && s->train[a][i] <= s->train[b][j])) ? s->train[a][i++] : s->train[b][j++];
  free(s->train[a]);
  s->train[a] = t;
  double wa = (double)na / (double)(na + nb), wb = 1.0 - wa;
  size_t ww = (size_t)s->C * s->W;
  for (size_t q = 0; q < ww; q++) s->wave[a * ww + q] = (float)(wa * s->wave[a * ww + q] + wb * s->wave[b * ww + q]);
  for (int c = 0; c < s->C; c++)
    s->mask[a * s->C + c] = (float)(wa * s->mask[a * s->C + c] + wb * s->mask[b * s->C + c]);
  s->count[a] = na + nb;
  s->viol[a] = viol_ab;
  s->alive[b] = 0;
  s->parent[b] = (int32_t)a;
  for (int64_t c = 0; c < s->k; c++) { /* a inherits b's forbidden partners (kept symmetric) */
    int8_t f = s->forbid[a * s->k + c] | s->forbid[b * s->k + c];
    s->forbid[a * s->k + c] = s->forbid[c * s->k + a] = c != a && f;
  }
  for (int64_t c = 1; c < s->k; c++) {
    if (c == a || !s->alive[c]) continue;
    int64_t lo = c < a ? c : a, hi = c < a ? a : c;
    s->refused[lo * s->k + hi] = 0; /* a is a new unit: its pairs are untested */
    pair_corr(s, lo, hi);
  }
  return SS_OK;
}

static ss_status decide(ss_ctx *ctx, const ss_params *p, merge_state *s, int64_t a, int64_t b, ss_merge_decision *d) {
  int64_t n = s->count[a] + s->count[b];
  int64_t v_ab = ss_merge_violations(s->train[a], s->count[a], s->train[b], s->count[b], s->refractory);
  *d = (ss_merge_decision){.a = (int32_t)a,
                           .b = (int32_t)b,
                           .corr = s->corr[a * s->k + b],
                           .n_shared = s->shared[a * s->k + b],
                           .viol_before = (double)(s->viol[a] + s->viol[b]) / (double)n,
                           .viol_after = (double)v_ab / (double)n};
  const size_t ww = (size_t)s->C * s->W;
  d->amp_ratio = amp_ratio(s->wave + a * ww, s->wave + b * ww, s->C, s->W);
  d->accepted = d->viol_after - d->viol_before <= p->merge.max_violation_increase &&
                (p->merge.max_amp_ratio <= 0 || d->amp_ratio <= p->merge.max_amp_ratio);
  ss_log_info(ctx,
              "merge: clusters %d + %d (%" PRId64 " + %" PRId64 " spikes): waveform corr %.4f on %d shared channels; "
              "refractory violations %.3f%% -> %.3f%% (limit +%.3f%%); amplitude ratio %.2f: %s",
              d->a, d->b, s->count[a], s->count[b], d->corr, d->n_shared, 100 * d->viol_before, 100 * d->viol_after,
              100 * p->merge.max_violation_increase, d->amp_ratio, d->accepted ? "merged" : "refused");
  if (!d->accepted) {
    s->refused[a * s->k + b] = 1;
    return SS_OK;
  }
  return join(ctx, s, a, b, v_ab);
}

static ss_status push_decision(ss_ctx *ctx, ss_merge_result *r, int64_t *cap, const ss_merge_decision *d) {
  if (r->n_decisions == *cap) {
    int64_t nc = *cap ? 2 * *cap : 16;
    SS_TRY(SS_REALLOC(ctx, r->decisions, (size_t)nc, "merge log"));
    *cap = nc;
  }
  r->decisions[r->n_decisions++] = *d;
  return SS_OK;
}

/* Output numbering: roots in increasing id, noise 0 first. */
static ss_status build_map(ss_ctx *ctx, const merge_state *s, ss_merge_result *r) {
  SS_TRY(SS_ALLOC(ctx, r->map, (size_t)s->k, "merge map"));
  int32_t next = 0;
  for (int64_t c = 0; c < s->k; c++) {
    int64_t root = c;
    while (s->parent[root] != root) root = s->parent[root];
    r->map[c] = root == c ? next++ : r->map[root]; /* a root precedes everything that joined it */
  }
  r->k_out = next;
  return SS_OK;
}

ss_status ss_merge_run(ss_ctx *ctx, const ss_params *p, const ss_merge_input *in, ss_merge_result *out) {
  memset(out, 0, sizeof(*out));
  out->k_in = in->k;
  if (in->k < 1 || in->n_channels < 1 || in->n_wave < 1 || !(in->rate_hz > 0))
    return ss_fail(ctx, SS_ERR_INTERNAL, "merge: %" PRId64 " clusters, %d channels, %d samples, rate %g", in->k,
                   in->n_channels, in->n_wave, in->rate_hz);
  merge_state s;
  ss_status st = state_init(ctx, p, in, &s);
  int64_t cap = 0, a = 0, b = 0;
  while (st == SS_OK && best_pair(&s, p->merge.waveform_corr, &a, &b)) {
    ss_merge_decision d;
    st = decide(ctx, p, &s, a, b, &d);
    if (st == SS_OK) st = push_decision(ctx, out, &cap, &d);
    out->n_merges += st == SS_OK && d.accepted;
  }
  if (st == SS_OK) st = build_map(ctx, &s, out);
  state_free(&s);
  if (st != SS_OK) ss_merge_result_free(out);
  return st;
}
