/* sort_internal.h — what the sort driver (sort.c) shares with its output writer (sort_outputs.c):
 * the run's state and the per-cluster statistics. Not a public interface. */
#ifndef SS_SORT_INTERNAL_H
#define SS_SORT_INTERNAL_H

#include <stdint.h>

#include "params/probe.h"
#include "drivers/frontend.h"
#include "stages/live/live_model.h"
#include "stages/cleanup/merge.h"
#include "drivers/sort.h"

/* Per-cluster statistics over labels 0..k−1 (sequential sums: deterministic). */
typedef struct {
  int64_t k;
  int C, P, W;
  int64_t *count;
  float *centroid;      /* [k × C·P] mean feature vector */
  float *variance;      /* [k × C·P] per-feature variance */
  float *mean_mask;     /* [k × C] */
  float *wave;          /* [k × C × W] mean waveform rebuilt from the PCA features (sort.h) */
  float *amp_mean, *amp_sd; /* [k] of the signed peak amplitude */
  int32_t *peak_channel;    /* [k] channel of the largest peak-to-peak of the mean waveform */
  double *viol_fraction;    /* [k] inter-spike intervals shorter than merge.refractory_ms / spikes */
} ss_cluster_stats;

ss_status ss_cluster_stats_compute(ss_ctx *ctx, const ss_spikes *s, const ss_pca *pca, const int32_t *labels,
                                   int64_t k, double refractory_ms, ss_cluster_stats *out);
void ss_cluster_stats_free(ss_cluster_stats *st);

typedef struct {
  const ss_sort_opts *o;
  const ss_source_info *info;
  const ss_probe *probe;
  ss_spikes spikes;
  ss_frontend_model fe;
  int32_t *labels_raw;
  int64_t k_raw;
  int32_t *labels;
  int64_t k;
  int merged;             /* the merge ran */
  ss_merge_result merge;  /* the first merge pass (results.h5 /merges) */
  int64_t n_merges_after_cleanup; /* merges of the pass after the cleanup */
  ss_cluster_stats stats; /* of the final labels */
  uint32_t crc;
  const char *device;     /* where masked EM ran, in words */
  ss_sort_summary *sum;
  int has_live;           /* the causal twin below was fitted (model.h5 /live) */
  ss_frontend_model live_fe;
  ss_live_twin live;
} ss_sort_state;

/* The causal twin of the model (sort.live_model): a second front-end pass with filter.causal = 1
 * and the twin built from it (live_model.h). A failure is logged as a warning and leaves
 * has_live = 0: model.h5 is then written without /live. */
void ss_sort_live_twin(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s);

/* results.h5, phy/, BASE.fet.1/.fmask.1/.clu.1 and model.h5 under o->out_dir. */
ss_status ss_sort_write_outputs(ss_ctx *ctx, const ss_sort_state *s);

#endif
