/* live_model.h — the causal twin of a sorted model: what live mode needs to label spikes
 * as they arrive, read from model.h5's /live group (its own causal filter, /live/filter) plus the
 * root's probe and scale.
 *
 * Offline sorting filters zero-phase; live mode can only filter causally, so its waveforms and
 * features differ from the offline ones. `sort` therefore runs the front end again with a causal
 * filter of low order (it keeps the spike trough) and a strong threshold calibrated so that most
 * offline spikes have a causal partner (ss_live_calibrate), and labels each causal spike with the
 * offline spike it matches (same time after removing the median causal−offline offset, within
 * join_size + 1 samples; peak channels equal or adjacent). The matched causal spikes give per-unit
 * causal centroids (several prototypes per unit) and a causal KNN reference set (docs/live.md).
 * This file owns the loader (io/model_h5.c reads and validates the file) and the builder used by
 * `sort`. */
#ifndef SS_LIVE_MODEL_H
#define SS_LIVE_MODEL_H

#include <stdint.h>

#include "core/backend.h"
#include "stages/detect/detect.h"
#include "stages/features/features_pca.h"
#include "stages/filter/filter.h"
#include "core/status.h"
#include "stages/threshold/threshold.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double rate_hz;
  int n_channels, n_pcs, n_wave, n_before, n_after, polarity, join_size;
  double *uv_per_step;
  double offset_uv;         /* int16 → µV */
  ss_filter filter;         /* /live/filter (older models: /filter), run causally */
  ss_thresholds thresholds; /* causal σ / weak / strong */
  ss_detect_graph graph;    /* from /probe (use = connected) */
  ss_pca pca;               /* causal basis */
  int64_t k;                /* centroid rows (a unit may have several: prototypes) */
  int32_t *unit_id;         /* [k] the offline sort's cluster ids, non-decreasing */
  float *centroid;          /* [k × C·P] mean causal feature vector */
  float *mean_mask;         /* [k × C] */
  int64_t n_ref;            /* causal KNN reference set */
  float *ref_features;
  float *ref_masks;
  int32_t *ref_labels;
  int64_t *ref_times;
} ss_live_model;

ss_status ss_live_model_load(ss_ctx *ctx, const char *path,
                             ss_live_model *m); /* validates everything, names file/field/value (io/model_h5.h) */
void ss_live_model_free(ss_live_model *m);

/* ---- the builder used by `sort` ------------------------------------------------------------------ */

/* A spike table seen by the matcher: times (sample + fraction) and peak channels, sorted by time. */
typedef struct {
  int64_t n;
  const int64_t *time_samples;
  const float *time_fraction; /* NULL: 0 */
  const int32_t *peak_channel;
} ss_live_spike_times;

/* 1 when channels a and b are equal or adjacent in g (g NULL: only equal). */
int ss_live_channels_near(const ss_detect_graph *g, int a, int b);

/* Median of causal − offline times (samples, sub-sample times included) over each causal spike's
 * nearest offline spike on an equal or adjacent peak channel within max_lag samples; 0 when no pair
 * exists. *n_pairs (may be NULL): the pairs the median was taken over. */
ss_status ss_live_time_offset(ss_ctx *ctx, const ss_live_spike_times *causal, const ss_live_spike_times *offline,
                              const ss_detect_graph *g, int64_t max_lag, double *offset, int64_t *n_pairs);

/* For each causal spike i, match[i] = index of the nearest offline spike whose time lies within
 * tolerance samples of (causal time − offset) and whose peak channel is equal or adjacent; −1 when
 * none. Ties go to the earlier offline spike. *n_matched counts the matches. */
ss_status ss_live_match(ss_ctx *ctx, const ss_live_spike_times *causal, const ss_live_spike_times *offline,
                        const ss_detect_graph *g, double offset, double tolerance, int64_t *match, int64_t *n_matched);

/* Threshold calibration. `candidates` come from a causal detection at a lowered strong threshold
 * (weak unchanged, so the components are those of any higher strong threshold); strength[i] is the
 * largest factor on the strong threshold at which candidate i is still a spike: its peak value over
 * the unscaled strong threshold of its peak channel (the peak node has the largest value/σ). For each
 * offline spike, the strongest candidate within tolerance of (offline time + offset) on an equal or
 * adjacent channel is its partner at every factor up to that strength. *factor = the largest factor
 * in [min_factor, 1] at which at least `recall` of the offline spikes have a partner (min_factor
 * when none reaches it); *achieved = the fraction that has one at *factor. */
typedef struct {
  double factor;   /* on the strong threshold (1: the offline detect.strong_std) */
  double achieved; /* offline spikes with a partner at that factor */
  double at_one;   /* ... and at factor 1 */
} ss_live_calibration;

ss_status ss_live_calibrate(ss_ctx *ctx, const ss_live_spike_times *candidates, const float *strength,
                            const ss_live_spike_times *offline, const ss_detect_graph *g, double offset,
                            double tolerance, double recall, double min_factor, ss_live_calibration *out);

/* The twin, as `sort` writes it. */
typedef struct {
  double offset;                   /* time_offset_samples: median causal − offline (samples) */
  ss_live_calibration calibration; /* set by the caller (sort), written to /live */
  int64_t n_causal, n_matched;
  int64_t k;        /* centroid rows: prototypes of the units with matched causal spikes (noise 0 included) */
  int64_t n_units;  /* those units */
  int32_t *unit_id; /* [k] non-decreasing: a unit's prototypes are consecutive rows */
  float *centroid;  /* [k × D] */
  float *mean_mask; /* [k × C] */
  int64_t n_ref, ref_stride;
  float *ref_features, *ref_masks;
  int32_t *ref_labels;
  int64_t *ref_times;
} ss_live_twin;

/* What the builder reads: the offline spikes and their labels (unit ids >= 0), the causal spikes with
 * their features [n × C·P] and masks [n × C]. */
typedef struct {
  ss_live_spike_times offline;
  const int32_t *offline_labels;
  ss_live_spike_times causal;
  const float *causal_features, *causal_masks;
  int n_channels, n_pcs;
  const ss_detect_graph *graph; /* NULL: only equal channels are near */
  int64_t max_lag;              /* samples searched for the offset */
  double tolerance;             /* samples around the offset-corrected time (detect.join_size) */
  int64_t ref_cap;              /* reference set: all matched, or every stride-th beyond this many */
  /* prototypes: a unit with many matched spikes gets up to max_prototypes centroids (k-means on its
   * causal features, one per SS_LIVE_SPIKES_PER_PROTOTYPE spikes) instead of its mean alone; <= 1 or
   * be NULL: the mean alone */
  int64_t max_prototypes;
  const ss_backend *be; /* runs the k-means */
  uint64_t seed;
} ss_live_twin_input;

/* Matched causal spikes per prototype (fewer: fewer prototypes; a unit keeps at least one). */
#define SS_LIVE_SPIKES_PER_PROTOTYPE 20
/* A unit's prototype k-means uses at most this many of its spikes per prototype (evenly spaced). */
#define SS_LIVE_PROTOTYPE_MAX_SPIKES 64
/* Lloyd iterations of a unit's prototype k-means. */
#define SS_LIVE_PROTOTYPE_ITERATIONS 50

/* Offset, matching, per-unit centroids and mean masks, reference set. Fails (SS_ERR_INPUT) when no
 * causal spike matches. */
ss_status ss_live_twin_build(ss_ctx *ctx, const ss_live_twin_input *in, ss_live_twin *out);
void ss_live_twin_free(ss_live_twin *t);

#ifdef __cplusplus
}
#endif
#endif
