/* merge.h — automatic merge of over-split units after masked EM (issue 5).
 *
 * Masked EM over-splits true units on purpose (MASKED_EM.md §9); this stage joins the pieces back.
 * Two Gaussian clusters a, b are a candidate pair when
 *  - their mean waveforms correlate (Pearson, over the samples of their shared channels laid end to
 *    end) at or above merge.waveform_corr. Shared channels: those where either unit's mean mask is
 *    at least SS_MERGE_CHANNEL_MASK (the channels the units are seen on); when neither unit has such
 *    a channel, their peak channels;
 *  - and merging their spike trains does not raise the refractory-violation fraction by more than
 *    merge.max_violation_increase: with v(X) the number of inter-spike intervals shorter than
 *    merge.refractory_ms in train X, before = (v(a) + v(b)) / (n_a + n_b) and
 *    after = v(a ∪ b) / (n_a + n_b); refused when after − before > max_violation_increase.
 * Greedy: the candidate with the highest correlation is tested first; an accepted merge replaces the
 * two units by one (count-weighted mean waveform and mask, the union of the trains) and every
 * correlation involving it is recomputed before the next choice; a refused pair is never retried.
 * The noise cluster (label 0) never merges. Every decision is logged with its evidence and returned.
 * Deterministic: no randomness, ties broken by the lower cluster ids. */
#ifndef SS_MERGE_H
#define SS_MERGE_H

#include <stdint.h>

#include "params/params.h"
#include "src/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A channel belongs to a unit's footprint when the unit's mean mask there is at least this. */
#define SS_MERGE_CHANNEL_MASK 0.5

/* What the merge looks at. labels in 0..k−1 (0 = noise); times ascending (ties allowed). */
typedef struct {
  int64_t n;                  /* spikes */
  const int64_t *times;       /* [n] samples, ascending */
  const int32_t *labels;      /* [n] */
  int64_t k;                  /* clusters, noise included */
  int n_channels, n_wave;
  const float *mean_waveform; /* [k × n_channels × n_wave] (channel-major inside a cluster) */
  const float *mean_mask;     /* [k × n_channels] */
  double rate_hz;
} ss_merge_input;

/* One tested pair. */
typedef struct {
  int32_t a, b;            /* cluster ids in the input numbering (a < b); b joins a when accepted */
  double corr;             /* waveform correlation on the shared channels */
  int n_shared;            /* shared channels */
  double viol_before, viol_after; /* refractory-violation fractions */
  int accepted;
} ss_merge_decision;

typedef struct {
  int64_t k_in, k_out;     /* clusters before and after, noise included */
  int32_t *map;            /* [k_in]: input cluster → output cluster (0 stays 0; outputs numbered by
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

#ifdef __cplusplus
}
#endif
#endif
