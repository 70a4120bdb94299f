/* cluster_metrics.h — the metrics stage: per-cluster statistics of a labelling (centroids, variances,
 * mean masks, mean waveforms, amplitudes, refractory violations), and agreement between two
 * labellings of the same points: the adjusted Rand index (Hubert & Arabie) and the "merged" ARI,
 * where every found cluster is first mapped to its majority true cluster (so over-splitting a true
 * unit costs nothing). Labels are non-negative int32. */
#ifndef SS_CLUSTER_METRICS_H
#define SS_CLUSTER_METRICS_H

#include <stdint.h>

#include "core/status.h"
#include "stages/features/features_pca.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- per-cluster statistics ------------------------------------------------------------------------ */

/* The spikes a labelling covers (one row each; features [n × C·P], masks [n × C]). */
typedef struct {
  int64_t n;
  int n_channels, n_pcs;
  double rate_hz;
  const int64_t *time_samples; /* ascending */
  const float *amplitude;      /* signed peak amplitude */
  const float *features;
  const float *masks;
} ss_cluster_spikes;

/* Per-cluster statistics over labels 0..k−1, in sequential sums (deterministic, independent of the
 * thread count). The mean waveforms are rebuilt from the PCA features, which is exact for the mean
 * since projection is linear: for each cluster and channel, Σ_p mean(feature_p) · basis_p. */
typedef struct {
  int64_t k;
  int C, P, W;
  int64_t *count;
  float *centroid;          /* [k × C·P] mean feature vector */
  float *variance;          /* [k × C·P] per-feature variance */
  float *mean_mask;         /* [k × C] */
  float *wave;              /* [k × C × W] mean waveform rebuilt from the PCA features */
  float *amp_mean, *amp_sd; /* [k] of the signed peak amplitude */
  int32_t *peak_channel;    /* [k] channel of the largest peak-to-peak of the mean waveform */
  double *viol_fraction;    /* [k] inter-spike intervals shorter than refractory_ms / spikes */
} ss_cluster_stats;

ss_status ss_cluster_stats_compute(ss_ctx *ctx, const ss_cluster_spikes *s, const ss_pca *pca, const int32_t *labels,
                                   int64_t k, double refractory_ms, ss_cluster_stats *out);
void ss_cluster_stats_free(ss_cluster_stats *st);

/* --- agreement between labellings ---------------------------------------------------------------- */

/* Adjusted Rand index of labellings a and b (1 when identical up to renaming; 1 as well when both
 * put every point in one cluster). */
ss_status ss_cluster_ari(ss_ctx *ctx, const int32_t *a, const int32_t *b, int64_t n, double *ari);
/* mapped[p] = the true label most frequent in found[p]'s cluster (ties: the lowest true label);
 * purity (may be NULL) = the fraction of points whose true label is their cluster's majority. */
ss_status ss_cluster_majority_map(ss_ctx *ctx, const int32_t *found, const int32_t *truth, int64_t n, int32_t *mapped,
                                  double *purity);
/* ARI between the majority-mapped found labels and the truth. */
ss_status ss_cluster_merged_ari(ss_ctx *ctx, const int32_t *found, const int32_t *truth, int64_t n, double *ari);

#ifdef __cplusplus
}
#endif
#endif
