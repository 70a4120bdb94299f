/* quality.c — per-unit quality metrics and labels (quality.h; definitions in docs/quality.md): each
 * cluster's spikes gathered in time order by a counting sort, then one pass per metric. */
#include "stages/metrics/quality.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *ss_quality_label_name(int label) {
  return label == SS_QUALITY_GOOD ? "good" : (label == SS_QUALITY_MUA ? "mua" : "noise");
}

/* --- one unit ---------------------------------------------------------------------------------- */

double ss_quality_isi_violation_ratio(const int64_t *t, int64_t n, double rate_hz, double duration_s,
                                      double refractory_ms, double censored_ms, int64_t *n_violations) {
  int64_t v = 0;
  const double tr = refractory_ms * 1e-3, tc = censored_ms * 1e-3;
  for (int64_t i = 1; i < n; i++) {
    double isi = (double)(t[i] - t[i - 1]) / rate_hz;
    if (isi >= tc && isi < tr) v++;
  }
  if (n_violations) *n_violations = v;
  if (n < 2 || !(tr > tc) || !(duration_s > 0)) return 0.0;
  return (double)v * duration_s / (2.0 * (double)n * (double)n * (tr - tc));
}

double ss_quality_presence_ratio(const int64_t *t, int64_t n, int64_t n_samples, int64_t bins) {
  if (bins < 1 || n_samples < 1) return 0.0;
  int64_t hit = 0, last = -1; /* ascending times visit the bins in order: count the changes */
  for (int64_t i = 0; i < n; i++) {
    int64_t b = (int64_t)floor((double)t[i] * (double)bins / (double)n_samples);
    b = b < 0 ? 0 : (b >= bins ? bins - 1 : b);
    hit += b != last;
    last = b;
  }
  return (double)hit / (double)bins;
}

/* Gaussian smoothing of h[0..B) with a kernel of sd s bins, renormalised where it leaves the range
 * (so the edges keep their level instead of sagging). */
static void smooth(const double *h, double *out, int64_t B, double s) {
  const int64_t r = (int64_t)ceil(4 * s);
  for (int64_t i = 0; i < B; i++) {
    double sw = 0, sv = 0;
    for (int64_t j = i - r; j <= i + r; j++) {
      if (j < 0 || j >= B) continue;
      double w = exp(-0.5 * (double)((j - i) * (j - i)) / (s * s));
      sw += w;
      sv += w * h[j];
    }
    out[i] = sv / sw;
  }
}

ss_status ss_quality_amplitude_cutoff(ss_ctx *ctx, const float *a, int64_t n, int64_t max_bins, double *cutoff) {
  const int64_t B = max_bins < n / 5 ? max_bins : n / 5;
  *cutoff = NAN;
  if (B < 10) return SS_OK;
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t i = 0; i < n; i++) {
    double m = fabs((double)a[i]);
    lo = m < lo ? m : lo;
    hi = m > hi ? m : hi;
  }
  const double width = (hi - lo) / (double)B;
  if (!(width > 0)) return SS_OK;
  double *h = NULL, *pdf = NULL;
  SS_TRY(SS_CALLOC(ctx, h, (size_t)B, "amplitude histogram"));
  if (SS_ALLOC(ctx, pdf, (size_t)B, "amplitude histogram") != SS_OK) {
    free(h);
    return SS_ERR_NOMEM;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t b = (int64_t)((fabs((double)a[i]) - lo) / width);
    h[b < B ? b : B - 1] += 1.0 / ((double)n * width); /* density */
  }
  smooth(h, pdf, B, B >= 100 ? (double)B / 100.0 : 1.0);
  int64_t peak = 0;
  for (int64_t i = 1; i < B; i++)
    if (pdf[i] > pdf[peak]) peak = i;
  int64_t g = peak; /* above the mode, the bin whose density is nearest the lowest bin's */
  for (int64_t i = peak + 1; i < B; i++)
    if (fabs(pdf[i] - pdf[0]) < fabs(pdf[g] - pdf[0])) g = i;
  double tail = 0;
  for (int64_t i = g; i < B; i++) tail += pdf[i] * width;
  *cutoff = tail < 0.5 ? tail : 0.5;
  free(h);
  free(pdf);
  return SS_OK;
}

int ss_quality_classify(const ss_params *p, int64_t id, double snr, double isi_ratio, double presence, double cutoff) {
  if (id == 0 || snr < p->quality.noise_snr) return SS_QUALITY_NOISE;
  if (snr >= p->quality.good_snr && isi_ratio < p->quality.good_isi_ratio && presence >= p->quality.good_presence &&
      cutoff < p->quality.good_amplitude_cutoff)
    return SS_QUALITY_GOOD;
  return SS_QUALITY_MUA; /* NaN metrics land here: a unit is good only on evidence */
}

/* --- every unit -------------------------------------------------------------------------------- */

void ss_quality_free(ss_quality *q) {
  free(q->n_spikes);
  free(q->n_violations);
  free(q->firing_rate_hz);
  free(q->snr);
  free(q->isi_violation_ratio);
  free(q->presence_ratio);
  free(q->amplitude_cutoff);
  free(q->label);
  memset(q, 0, sizeof(*q));
}

static ss_status quality_alloc(ss_ctx *ctx, ss_quality *q, int64_t k) {
  memset(q, 0, sizeof(*q));
  q->k = k;
  size_t K = (size_t)(k > 0 ? k : 1);
  if (SS_CALLOC(ctx, q->n_spikes, K, "quality metrics") || SS_CALLOC(ctx, q->n_violations, K, "quality metrics") ||
      SS_CALLOC(ctx, q->firing_rate_hz, K, "quality metrics") || SS_CALLOC(ctx, q->snr, K, "quality metrics") ||
      SS_CALLOC(ctx, q->isi_violation_ratio, K, "quality metrics") ||
      SS_CALLOC(ctx, q->presence_ratio, K, "quality metrics") ||
      SS_CALLOC(ctx, q->amplitude_cutoff, K, "quality metrics") || SS_CALLOC(ctx, q->label, K, "quality metrics")) {
    ss_quality_free(q);
    return SS_ERR_NOMEM;
  }
  return SS_OK;
}

/* Peak magnitude of the cluster's mean waveform on its peak channel over that channel's noise level
 * (NaN where the channel has none). */
static double unit_snr(const ss_cluster_stats *st, const float *sigma, int64_t c) {
  const int ch = st->peak_channel[c];
  const float *w = st->wave + ((size_t)c * st->C + ch) * st->W;
  double peak = 0;
  for (int t = 0; t < st->W; t++) peak = fabs((double)w[t]) > peak ? fabs((double)w[t]) : peak;
  return sigma[ch] > 0 ? peak / (double)sigma[ch] : NAN;
}

/* Spike indices grouped by cluster, time order kept: cluster c's are order[start[c] .. start[c+1]). */
static ss_status group_spikes(ss_ctx *ctx, const ss_quality_input *in, int64_t k, int64_t **start, int64_t **order) {
  SS_TRY(SS_CALLOC(ctx, *start, (size_t)k + 1, "spikes by cluster"));
  SS_TRY(SS_ALLOC(ctx, *order, (size_t)(in->n > 0 ? in->n : 1), "spikes by cluster"));
  for (int64_t i = 0; i < in->n; i++) (*start)[in->labels[i] + 1]++;
  for (int64_t c = 0; c < k; c++) (*start)[c + 1] += (*start)[c];
  int64_t *fill = NULL;
  SS_TRY(SS_ALLOC(ctx, fill, (size_t)k + 1, "spikes by cluster"));
  memcpy(fill, *start, ((size_t)k + 1) * sizeof(int64_t));
  for (int64_t i = 0; i < in->n; i++) (*order)[fill[in->labels[i]]++] = i;
  free(fill);
  return SS_OK;
}

static ss_status unit_metrics(ss_ctx *ctx, const ss_params *p, const ss_quality_input *in, int64_t c, int64_t m,
                              const int64_t *t, const float *a, ss_quality *q) {
  q->n_spikes[c] = m;
  q->firing_rate_hz[c] = in->duration_s > 0 ? (double)m / in->duration_s : 0.0;
  q->snr[c] = unit_snr(in->stats, in->sigma, c);
  q->isi_violation_ratio[c] = ss_quality_isi_violation_ratio(t, m, in->rate_hz, in->duration_s,
                                                             p->quality.refractory_ms, p->quality.censored_ms,
                                                             &q->n_violations[c]);
  q->presence_ratio[c] = ss_quality_presence_ratio(t, m, in->n_samples, p->quality.presence_bins);
  SS_TRY(ss_quality_amplitude_cutoff(ctx, a, m, p->quality.amplitude_bins, &q->amplitude_cutoff[c]));
  q->label[c] = ss_quality_classify(p, c, q->snr[c], q->isi_violation_ratio[c], q->presence_ratio[c],
                                    q->amplitude_cutoff[c]);
  return SS_OK;
}

ss_status ss_quality_compute(ss_ctx *ctx, const ss_params *p, const ss_quality_input *in, ss_quality *q) {
  const int64_t k = in->stats->k;
  SS_TRY(quality_alloc(ctx, q, k));
  int64_t *start = NULL, *order = NULL, *t = NULL;
  float *a = NULL;
  size_t n1 = (size_t)(in->n > 0 ? in->n : 1);
  ss_status st = group_spikes(ctx, in, k, &start, &order);
  if (st == SS_OK) st = SS_ALLOC(ctx, t, n1, "unit spike times");
  if (st == SS_OK) st = SS_ALLOC(ctx, a, n1, "unit amplitudes");
  for (int64_t c = 0; st == SS_OK && c < k; c++) {
    const int64_t m = start[c + 1] - start[c];
    for (int64_t j = 0; j < m; j++) {
      t[j] = in->time_samples[order[start[c] + j]];
      a[j] = in->amplitude[order[start[c] + j]];
    }
    st = unit_metrics(ctx, p, in, c, m, t, a, q);
  }
  free(start);
  free(order);
  free(t);
  free(a);
  if (st != SS_OK) ss_quality_free(q);
  return st;
}
