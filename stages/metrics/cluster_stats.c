/* cluster_stats.c — per-cluster statistics of a labelling (cluster_metrics.h): sums over the spikes in
 * order, then means, variances, amplitudes, refractory violations and the mean waveforms rebuilt from
 * the PCA basis. */
#include "stages/metrics/cluster_metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ss_cluster_stats_free(ss_cluster_stats *st) {
  free(st->count);
  free(st->centroid);
  free(st->variance);
  free(st->mean_mask);
  free(st->wave);
  free(st->amp_mean);
  free(st->amp_sd);
  free(st->peak_channel);
  free(st->viol_fraction);
  memset(st, 0, sizeof(*st));
}

static ss_status stats_alloc(ss_ctx *ctx, ss_cluster_stats *o, int64_t k, int C, int P, int W) {
  memset(o, 0, sizeof(*o));
  o->k = k;
  o->C = C;
  o->P = P;
  o->W = W;
  size_t K = (size_t)k, D = (size_t)C * P;
  if (SS_CALLOC(ctx, o->count, K, "cluster statistics") != SS_OK || SS_CALLOC(ctx, o->centroid, K * D, "centroids") ||
      SS_CALLOC(ctx, o->variance, K * D, "variances") || SS_CALLOC(ctx, o->mean_mask, K * C, "mean masks") ||
      SS_CALLOC(ctx, o->wave, K * C * W, "mean waveforms") || SS_CALLOC(ctx, o->amp_mean, K, "amplitudes") ||
      SS_CALLOC(ctx, o->amp_sd, K, "amplitudes") || SS_CALLOC(ctx, o->peak_channel, K, "peak channels") ||
      SS_CALLOC(ctx, o->viol_fraction, K, "violations")) {
    ss_cluster_stats_free(o);
    return SS_ERR_NOMEM;
  }
  return SS_OK;
}

/* wave[c][t] = Σ_p centroid[c·P + p] · basis[c][p][t]; peak channel = largest peak-to-peak. */
static void rebuild_waveforms(ss_cluster_stats *o, const ss_pca *pca) {
  const int C = o->C, P = o->P, W = o->W;
  for (int64_t c = 0; c < o->k; c++) {
    double best = -1;
    for (int ch = 0; ch < C; ch++) {
      float *w = o->wave + ((size_t)c * C + ch) * W;
      const float *f = o->centroid + (size_t)c * C * P + (size_t)ch * P;
      double lo = INFINITY, hi = -INFINITY;
      for (int t = 0; t < W; t++) {
        double v = 0;
        for (int p = 0; p < P; p++) v += (double)f[p] * pca->basis[((size_t)ch * pca->n_pcs + p) * pca->n_wave + t];
        w[t] = (float)v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      if (hi - lo > best) {
        best = hi - lo;
        o->peak_channel[c] = ch;
      }
    }
  }
}

ss_status ss_cluster_stats_compute(ss_ctx *ctx, const ss_cluster_spikes *s, const ss_pca *pca, const int32_t *labels,
                                   int64_t k, double refractory_ms, ss_cluster_stats *o) {
  const int C = s->n_channels, P = s->n_pcs, D = C * P;
  SS_TRY(stats_alloc(ctx, o, k, C, P, pca->n_wave));
  double *sum = NULL, *sq = NULL, *msum = NULL, *a1 = NULL, *a2 = NULL;
  int64_t *last = NULL, *viol = NULL;
  ss_status st = SS_OK;
  if (SS_CALLOC(ctx, sum, (size_t)k * D, "cluster sums") || SS_CALLOC(ctx, sq, (size_t)k * D, "cluster sums") ||
      SS_CALLOC(ctx, msum, (size_t)k * C, "cluster sums") || SS_CALLOC(ctx, a1, (size_t)k, "cluster sums") ||
      SS_CALLOC(ctx, a2, (size_t)k, "cluster sums") || SS_ALLOC(ctx, last, (size_t)k, "cluster sums") ||
      SS_CALLOC(ctx, viol, (size_t)k, "cluster sums"))
    st = SS_ERR_NOMEM;
  int64_t refr = llround(refractory_ms * s->rate_hz / 1000.0);
  for (int64_t c = 0; st == SS_OK && c < k; c++) last[c] = INT64_MIN;
  for (int64_t i = 0; st == SS_OK && i < s->n; i++) {
    int64_t c = labels[i];
    o->count[c]++;
    for (int j = 0; j < D; j++) {
      double x = s->features[i * D + j];
      sum[c * D + j] += x;
      sq[c * D + j] += x * x;
    }
    for (int ch = 0; ch < C; ch++) msum[c * C + ch] += s->masks[i * C + ch];
    a1[c] += s->amplitude[i];
    a2[c] += (double)s->amplitude[i] * s->amplitude[i];
    if (last[c] != INT64_MIN && s->time_samples[i] - last[c] < refr) viol[c]++;
    last[c] = s->time_samples[i];
  }
  for (int64_t c = 0; st == SS_OK && c < k; c++) {
    double n = (double)(o->count[c] > 0 ? o->count[c] : 1);
    for (int j = 0; j < D; j++) {
      double m = sum[c * D + j] / n, v = sq[c * D + j] / n - m * m;
      o->centroid[c * D + j] = (float)m;
      o->variance[c * D + j] = (float)(v > 0 ? v : 0);
    }
    for (int ch = 0; ch < C; ch++) o->mean_mask[c * C + ch] = (float)(msum[c * C + ch] / n);
    double am = a1[c] / n, av = a2[c] / n - am * am;
    o->amp_mean[c] = (float)am;
    o->amp_sd[c] = (float)sqrt(av > 0 ? av : 0);
    o->viol_fraction[c] = (double)viol[c] / n;
  }
  if (st == SS_OK) rebuild_waveforms(o, pca);
  free(sum);
  free(sq);
  free(msum);
  free(a1);
  free(a2);
  free(last);
  free(viol);
  if (st != SS_OK) ss_cluster_stats_free(o);
  return st;
}
