/* frontend.h — the offline front end: a source streamed through filter → threshold → detect →
 * extract → PCA, giving the spike table (docs/architecture.md, "The pipeline").
 *
 * Two passes over the source:
 *  1. excerpts (detect.n_excerpts × detect.excerpt_s, spread evenly; chosen independently of the
 *     chunk size): filtered, they give the noise level and thresholds; spikes detected in them give
 *     the PCA basis (at most features.pca_max_spikes, chosen from the seed);
 *  2. chunks of io.chunk_s with margins: filter, detect, cut waveforms and project them at once, so
 *     memory holds no waveforms beyond a chunk.
 * The result does not depend on the chunk size: a spike belongs to the chunk holding its first
 * node, and the margin is at least the filter's settling length (transients below 1e-7 of the
 * signal) plus the waveform window and a slack for components that cross the chunk end; a smaller
 * io.margin_ms is raised to that (logged). Chunks are processed in parallel, n_threads at a time. */
#ifndef SS_FRONTEND_H
#define SS_FRONTEND_H

#include <stdint.h>

#include "io/source.h"
#include "params/params.h"
#include "params/probe.h"
#include "core/backend.h"
#include "stages/detect/detect.h"
#include "stages/features/features_pca.h"
#include "stages/filter/filter.h"
#include "stages/motion/motion.h"
#include "core/status.h"
#include "stages/threshold/threshold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The spike table, sorted by (time_samples, time_fraction, peak_channel). */
typedef struct {
  int64_t n;
  int n_channels, n_pcs;
  double rate_hz;
  int64_t *time_samples; /* nearest sample of the sub-sample time */
  float *time_fraction;  /* in [−0.5, 0.5): time = time_samples + time_fraction */
  int32_t *peak_channel;
  float *amplitude; /* filtered value at the peak, µV (signed) */
  float *features;  /* [n × n_channels·n_pcs] */
  float *masks;     /* [n × n_channels] */
} ss_spikes;

void ss_spikes_free(ss_spikes *s);

/* What the front end learnt and how it went. */
typedef struct {
  ss_filter filter;
  ss_thresholds thresholds;
  ss_pca pca;
  ss_detect_config detect;
  const ss_motion_reg *motion; /* borrowed from the caller of ss_frontend_run; NULL: not registered */
  int margin;                  /* samples on each side of a chunk */
  int64_t chunk_samples;
  int64_t n_chunks;
  int64_t n_excerpts;
  int64_t n_excerpt_spikes;
  int64_t n_truncated;      /* spikes whose component reached the end of the accurate margin */
  double seconds_threshold; /* wall time of pass 1 */
  double seconds_detect;    /* wall time of pass 2 */
  /* pass 2 on the GPU: busy time of each stage, summed over chunks (they overlap, so the sum of
   * these exceeds seconds_detect); 0 on the CPU */
  struct {
    double read_s;     /* reader thread: source chunk + copy into pinned memory */
    double upload_s;   /* host → device copy of the raw chunk */
    double filter_s;   /* int16 → µV, zero-phase filter, common reference */
    double detect_s;   /* flood fill, alignment, masks, waveforms */
    double project_s;  /* PCA projection */
    double download_s; /* spike table and features back to the host, appended */
    double wait_s;     /* main thread waiting for the reader */
  } gpu;
} ss_frontend_model;

void ss_frontend_model_free(ss_frontend_model *m);

/* The margin (samples) the front end uses at rate_hz for this filter and detection window. */
int ss_frontend_margin(const ss_params *p, const ss_filter *f, const ss_detect_config *cfg, double rate_hz);

/* Run the front end over `src` (opened; it is reconfigured here) with the backend's threads.
 * probe NULL: every channel used and none adjacent. motion: the registration applied to every filtered
 * chunk (stages/motion/motion.h), excerpts included; NULL: none. It must outlive the model, whose later
 * passes (ss_frontend_pass) register their chunks the same way. */
ss_status ss_frontend_run(ss_ctx *ctx, const ss_backend *be, const ss_params *p, ss_source *src, const ss_probe *probe,
                          const ss_motion_reg *motion, ss_spikes *out, ss_frontend_model *model);

/* A later pass over the recording, filtered (and registered) as the front end filtered it (the model's
 * filter, noise levels and registration), in its chunks of model->chunk_samples with margins of the filter's settling plus
 * `reach` samples on each side. For every chunk, `chunk` runs on a CPU thread (slot = 0 .. threads−1,
 * a chunk's slot in its batch; x may be changed), then `collect` runs on the calling thread in chunk
 * order with the same slot. */
typedef struct {
  float *x; /* filtered, [n_rows × n_channels], µV */
  int64_t n_rows;
  int64_t row0_sample;            /* recording sample of row 0 */
  int64_t own_begin, own_end;     /* the chunk's own rows */
  int64_t valid_begin, valid_end; /* rows inside the recording (chunk callback only) */
} ss_fe_view;

typedef struct {
  const char *name; /* progress label */
  int64_t reach;
  ss_status (*chunk)(ss_ctx *ctx, void *user, int slot, ss_fe_view *v);
  ss_status (*collect)(ss_ctx *ctx, void *user, int slot, const ss_fe_view *v); /* may be NULL */
  void *user;
} ss_fe_pass;

/* The number of slots `chunk` sees: the backend's CPU threads. */
int ss_frontend_pass_slots(const ss_backend *be);

ss_status ss_frontend_pass(ss_ctx *ctx, const ss_backend *be, const ss_params *p, ss_source *src, const ss_probe *probe,
                           const ss_frontend_model *model, const ss_fe_pass *pass);

#ifdef __cplusplus
}
#endif
#endif
