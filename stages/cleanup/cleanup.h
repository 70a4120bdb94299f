/* cleanup.h — the cleanup stage after masked EM: the automatic merge of over-split units (merge.c)
 * and the cleanup of impure clusters that the merge cannot fix (cleanup.c).
 *
 * The merge. Masked EM over-splits true units on purpose; the merge joins the pieces back. Two
 * Gaussian clusters a, b are a candidate pair when
 *  - their mean waveforms correlate (Pearson, over the samples of their shared channels laid end to
 *    end) at or above merge.waveform_corr. Shared channels: those where either unit's mean mask is
 *    at least SS_MERGE_CHANNEL_MASK (the channels the units are seen on); when neither unit has such
 *    a channel, their peak channels;
 *  - and merging their spike trains does not raise the refractory-violation fraction by more than
 *    merge.max_violation_increase: with v(X) the number of inter-spike intervals shorter than
 *    merge.refractory_ms in train X, before = (v(a) + v(b)) / (n_a + n_b) and
 *    after = v(a ∪ b) / (n_a + n_b); refused when after − before > max_violation_increase;
 *  - and (merge.max_amp_ratio > 0) the larger of the two mean waveforms' peak-to-peak amplitudes (on
 *    each one's largest channel) is at most merge.max_amp_ratio times the smaller: two units of one
 *    shape and different amplitudes correlate as well as two pieces of one unit, and collisions can
 *    hide the refractory violations their union should show.
 * Pairs of the same origin (merge_input.origin) are never candidates.
 * Greedy: the candidate with the highest correlation is tested first; an accepted merge replaces the
 * two units by one (count-weighted mean waveform and mask, the union of the trains) and every
 * correlation involving it is recomputed before the next choice; a refused pair is never retried.
 * The noise cluster (label 0) never merges. Every decision is logged with its evidence and returned.
 * Deterministic: no randomness, ties broken by the lower cluster ids. */
#ifndef SS_CLEANUP_H
#define SS_CLEANUP_H

#include <stdint.h>

#include "params/params.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A channel belongs to a unit's footprint when the unit's mean mask there is at least this. */
#define SS_MERGE_CHANNEL_MASK 0.5

/* What the merge looks at. labels in 0..k−1 (0 = noise); times ascending (ties allowed). */
typedef struct {
  int64_t n;             /* spikes */
  const int64_t *times;  /* [n] samples, ascending */
  const int32_t *labels; /* [n] */
  int64_t k;             /* clusters, noise included */
  int n_channels, n_wave;
  const float *mean_waveform; /* [k × n_channels × n_wave] (channel-major inside a cluster) */
  const float *mean_mask;     /* [k × n_channels] */
  double rate_hz;
  const int32_t *origin; /* [k] or NULL: clusters of the same origin never merge, nor do the
                                 units they join (the pieces the cleanup split apart) */
} ss_merge_input;

/* One tested pair. */
typedef struct {
  int32_t a, b;                   /* cluster ids in the input numbering (a < b); b joins a when accepted */
  double corr;                    /* waveform correlation on the shared channels */
  int n_shared;                   /* shared channels */
  double viol_before, viol_after; /* refractory-violation fractions */
  double amp_ratio;               /* larger over smaller peak-to-peak amplitude (>= 1) */
  int accepted;
} ss_merge_decision;

typedef struct {
  int64_t k_in, k_out;          /* clusters before and after, noise included */
  int32_t *map;                 /* [k_in]: input cluster → output cluster (0 stays 0; outputs numbered by
                              their smallest input id, contiguous) */
  ss_merge_decision *decisions; /* in the order they were taken */
  int64_t n_decisions;
  int64_t n_merges;
} ss_merge_result;

/* Merge over-split units of `in` with the merge section's thresholds (p->merge.enabled is not
 * consulted: the caller decides whether to merge). */
ss_status ss_merge_run(ss_ctx *ctx, const ss_params *p, const ss_merge_input *in, ss_merge_result *out);
void ss_merge_result_free(ss_merge_result *r);

/* Pearson correlation of two units' mean waveforms on their shared channels (NaN when a waveform
 * is flat there); *n_shared receives the number of shared channels. */
double ss_merge_waveform_corr(const float *wa, const float *ma, const float *wb, const float *mb, int n_channels,
                              int n_wave, int *n_shared);
/* Intervals shorter than `refractory` samples in the union of two ascending trains (b may be empty). */
int64_t ss_merge_violations(const int64_t *a, int64_t na, const int64_t *b, int64_t nb, int64_t refractory);

/* --- cleanup after the merge: outliers and splits ----------------------------------------------------
 *
 * Masked EM leaves two kinds of impure clusters that the merge cannot fix (docs/accuracy.md):
 *  - catch-all clusters: a broad Gaussian that collects spikes distorted by a collision with another
 *    unit's spike (their features fit no unit, and masked EM's noise cluster is too weak in ~100
 *    dimensions to take them);
 *  - two units in one cluster: with masks spanning 15–25 channels, the BIC price of a second dense
 *    covariance block exceeds what separating two units gains when their difference lies mostly
 *    along one direction.
 * The cleanup, per cluster (noise excluded):
 *  1. Robust core. Per feature j, the median μ_j and s_j = max(1.4826·MAD_j, ν_j), ν_j the noise
 *     spread of feature j (1.4826·MAD over the spikes whose mask on j's channel is 0); a spike's
 *     distance is z² = Σ_j ((x_j − μ_j)/s_j)². Spikes with z² > merge.outlier_z2 · D are outliers;
 *     μ and s are re-estimated on the inliers, SS_CLEANUP_CORE_ITERATIONS times in all.
 *  2. Split. The inliers (at least 2·merge.split_min_spikes of them), scaled by ν, are projected on
 *     their first principal component over the features of the merge.split_max_channels channels of
 *     highest mean mask (every channel on a probe with no more); a Gaussian kernel density (Silverman's bandwidth,
 *     SS_CLEANUP_KDE_GRID points) is computed along it. For two of its local maxima, the valley
 *     ratio is the density minimum between them over the lower maximum; when the lowest ratio over
 *     pairs whose cut leaves at least merge.split_min_spikes inliers on each side is below
 *     merge.split_valley, the cluster splits at that minimum. The larger part keeps the cluster's id
 *     and its outliers (the lower side on a tie); both parts go through 1–2 again.
 *  3. Outliers of the final clusters go to the cluster with the smallest z² when that z² is at most
 *     merge.outlier_z2 · D there, else to noise (0).
 * Medians, MADs and the principal component use at most SS_CLEANUP_SAMPLE of a cluster's inliers
 * (evenly spaced), ν at most SS_CLEANUP_NOISE_SAMPLE spikes; z² and projections cover every spike.
 * Labels are renumbered contiguously (existing clusters keep their order, split-off parts follow).
 * Deterministic: no randomness, sequential in cluster order. */

#define SS_CLEANUP_CORE_ITERATIONS 3
#define SS_CLEANUP_KDE_GRID 200
#define SS_CLEANUP_SAMPLE 4096
#define SS_CLEANUP_NOISE_SAMPLE 20000

typedef struct {
  int64_t n;
  int n_channels, n_pcs;
  const float *features; /* [n × n_channels·n_pcs] */
  const float *masks;    /* [n × n_channels] */
  int64_t k;             /* clusters, noise included; labels in 0..k−1 */
  int n_threads;         /* OpenMP threads (<= 0: one); the labels do not depend on it */
} ss_cleanup_input;

typedef struct {
  int64_t k_in, k_out; /* clusters before and after, noise included */
  int64_t n_splits;
  int64_t n_outliers;   /* spikes that left their cluster's core */
  int64_t n_reassigned; /* of those, taken by another cluster (the rest went to noise) */
  int32_t *origin;      /* [k_out]: the input cluster each output cluster comes from (0 for
                             noise); free with ss_cleanup_result_free */
} ss_cleanup_result;

void ss_cleanup_result_free(ss_cleanup_result *r);

/* Clean up labels[0..n) in place (rules above). merge.outlier_z2 = 0 keeps every spike in its
 * cluster; merge.split_valley = 0 never splits. */
ss_status ss_merge_cleanup(ss_ctx *ctx, const ss_params *p, const ss_cleanup_input *in, int32_t *labels,
                           ss_cleanup_result *out);

/* The split point of the projections p[0..m) (ascending) by the density rule of step 2: returns
 * the lowest valley ratio found (1 when there is no admissible pair of maxima) and its cut in *cut
 * (the parts are p < cut and p >= cut, each at least min_part values). */
double ss_merge_valley(const double *p, int64_t m, int64_t min_part, double *cut);

#ifdef __cplusplus
}
#endif
#endif
