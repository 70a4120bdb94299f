/* sort_internal.h — what the parts of the sort driver share: the run's state, filled by the pipeline
 * (sort.c) and the causal twin's fit (sort_live_twin.c), and read by the writers (sort_write.c). Not
 * a public interface. */
#ifndef SS_SORT_INTERNAL_H
#define SS_SORT_INTERNAL_H

#include <stdint.h>

#include "core/log.h"
#include "params/probe.h"
#include "drivers/frontend.h"
#include "stages/live/live_model.h"
#include "stages/cleanup/cleanup.h"
#include "stages/metrics/cluster_metrics.h"
#include "drivers/sort.h"

/* model.h5's KNN reference sets (/knn and the twin's /live) hold at most this many spikes (every
 * stride-th beyond). */
#define SS_SORT_MODEL_KNN_MAX 200000

typedef struct {
  const ss_sort_opts *o;
  const ss_source_info *info;
  const ss_probe *probe;
  ss_spikes spikes;
  ss_frontend_model fe;
  ss_motion motion;  /* the rigid motion estimate (n_bins 0: not estimated) */
  ss_motion_reg reg; /* its registration, which fe borrows (n_bins 0: not registered) */
  int32_t *labels_raw;
  int64_t k_raw;
  int32_t *labels;
  int64_t k;
  int merged;                     /* the merge ran */
  ss_merge_result merge;          /* the first merge pass (results.h5 /merges) */
  int64_t n_merges_after_cleanup; /* merges of the pass after the cleanup */
  ss_cluster_stats stats;         /* of the final labels */
  uint32_t crc;
  const char *device; /* where masked EM ran, in words */
  ss_sort_summary *sum;
  int has_live; /* the causal twin below was fitted (model.h5 /live) */
  ss_frontend_model live_fe;
  ss_live_twin live;
  const ss_log_memory *log; /* the sort's log lines so far (sort.log) */
  const char *write_dir;    /* where the writers put the outputs: the output set's temporary folder */
  float *unit_tmpl;         /* the match stage's templates [k × unit_tmpl_w × C] µV (cluster 0: zeros); NULL
                               when matching did not run */
  int unit_tmpl_w;
} ss_sort_state;

/* The causal twin of the model (sort.live_model): a second front-end pass with filter.causal = 1
 * and the twin built from it (live_model.h). A failure is logged as a warning and leaves
 * has_live = 0: model.h5 is then written without /live; running out of host memory fails the sort. */
ss_status ss_sort_live_twin(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s);

/* Template matching (sort_match.c): the units' templates from the filtered recording, matched over
 * the whole recording (stages/match/match.h); the matched spikes replace s->spikes, labels 1..K in
 * s->labels (cluster 0 is left empty), each spike's raw label that of its nearest detection.
 * Nothing happens when match.max_rounds is 0 or the merge is off. */
ss_status ss_sort_match(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s);

/* Matching's shadows among n matched spikes (time, unit, peak-channel amplitude, fit scale): drop[i] = 1
 * when spike i was fitted below min_scale and a spike of another unit with a larger |amplitude| lies
 * within window samples (match.shadow_ms, match.shadow_scale); *n_dropped counts them. Order-free: the
 * flags do not depend on the spikes' order. */
ss_status ss_sort_shadows(ss_ctx *ctx, const int64_t *time, const int32_t *unit, const float *amplitude,
                          const float *scale, int64_t n, int64_t window, double min_scale, uint8_t *drop,
                          int64_t *n_dropped);

/* Quality metrics and labels of the final clusters (quality.h) into s->sum->quality. */
ss_status ss_sort_quality(ss_ctx *ctx, ss_sort_state *s);
/* The per-unit table: id, spikes, firing rate, SNR, ISI violation ratio, presence ratio, amplitude
 * cutoff, label; then the label counts. */
void ss_sort_print_units(FILE *f, const ss_sort_summary *sum);

/* units.nwb under s->write_dir (sort_nwb.c). */
ss_status ss_sort_write_nwb(ss_ctx *ctx, const ss_sort_state *s);

/* report.html under s->write_dir: the self-contained page of the sort (sort_report.c). */
ss_status ss_sort_write_report(ss_ctx *ctx, const ss_sort_state *s);

/* results.h5, phy/, BASE.fet.1/.fmask.1/.clu.1, model.h5, units.nwb, report.html and sort.log under
 * o->out_dir. */
ss_status ss_sort_write_outputs(ss_ctx *ctx, const ss_sort_state *s);

#endif
