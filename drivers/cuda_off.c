/* cuda_off.c — every CUDA entry point of the stages and the front end, for a build without the CUDA
 * backend (compiled only then): each answers ss_cuda_not_built, so the callers need no CUDA-or-not
 * branches. Handles never exist in such a build, so the functions taking one are never reached. */
#include <string.h>

#include "core/backend.h"
#include "drivers/frontend_internal.h"
#include "stages/detect/detect.h"
#include "stages/features/features_pca.h"
#include "stages/filter/filter.h"
#include "stages/kmeans/kmeans.h"
#include "stages/knn/knn.h"
#include "stages/live/live_cuda.h"
#include "stages/match/match.h"
#include "stages/mask_em/mask_em.h"
#include "stages/motion/motion.h"
#include "stages/threshold/threshold.h"

/* The parameters are unused on purpose (CMakeLists.txt builds this file with -Wno-unused-parameter). */

/* ---- filter ---- */

ss_status ss_filter_zero_phase_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in,
                                    int64_t n_rows, int n_channels, float *d_out, ss_stream stream) {
  return ss_cuda_not_built(ctx, "filter");
}
ss_status ss_filter_forward_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in,
                                 int64_t n_rows, int n_channels, float *d_out, ss_stream stream) {
  return ss_cuda_not_built(ctx, "filter");
}
ss_status ss_filter_common_median_cuda(ss_ctx *ctx, const ss_backend *be, float *d_x, int64_t n_rows, int n_channels,
                                       const int *use, ss_stream stream) {
  return ss_cuda_not_built(ctx, "filter");
}
ss_status ss_filter_causal_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, double *d_state, int *started,
                                const float *d_in, int64_t n_rows, int n_channels, float *d_out, ss_stream stream) {
  return ss_cuda_not_built(ctx, "filter");
}
ss_status ss_filter_zero_phase_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *in,
                                         int64_t n_rows, int n_channels, float *out) {
  return ss_cuda_not_built(ctx, "filter");
}
ss_status ss_filter_causal_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, ss_filter_state *st,
                                     const float *in, int64_t n_rows, float *out) {
  return ss_cuda_not_built(ctx, "filter");
}
ss_status ss_filter_common_median_cuda_host(ss_ctx *ctx, const ss_backend *be, float *x, int64_t n_rows, int n_channels,
                                            const int *use) {
  return ss_cuda_not_built(ctx, "filter");
}

/* ---- threshold ---- */

ss_status ss_threshold_compute_cuda(ss_ctx *ctx, const ss_backend *be, const ss_params *p,
                                    const ss_sample_block *blocks, int n_blocks, int n_channels, const int *use,
                                    ss_thresholds *out) {
  return ss_cuda_not_built(ctx, "threshold");
}
ss_status ss_threshold_compute_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_params *p,
                                         const ss_sample_block *blocks, int n_blocks, int n_channels, const int *use,
                                         ss_thresholds *out) {
  return ss_cuda_not_built(ctx, "threshold");
}

/* ---- detect ---- */

ss_status ss_detect_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg, const ss_detect_graph *g,
                              const ss_thresholds *th, ss_detect_cuda **out) {
  *out = NULL; /* no handle */
  return ss_cuda_not_built(ctx, "detect");
}
ss_status ss_detect_cuda_run(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, ss_stream stream,
                             ss_spike_dev *out) {
  return ss_cuda_not_built(ctx, "detect");
}
ss_status ss_detect_cuda_find(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, int64_t open_row,
                              ss_stream stream) {
  return ss_cuda_not_built(ctx, "detect");
}
ss_status ss_detect_cuda_reserve(ss_ctx *ctx, ss_detect_cuda *d, int64_t rows, int64_t spikes, ss_stream stream) {
  return ss_cuda_not_built(ctx, "detect");
}
ss_status ss_detect_cuda_finish(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, ss_stream stream,
                                ss_spike_dev *out, int64_t *first_open, const int64_t **last_rows) {
  return ss_cuda_not_built(ctx, "detect");
}
void ss_detect_cuda_close(ss_detect_cuda *d) {}
ss_status ss_detect_block_cuda(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg, const ss_detect_graph *g,
                               const ss_thresholds *th, const ss_detect_block *blk, ss_spike_list *out) {
  return ss_cuda_not_built(ctx, "detect");
}

/* ---- features ---- */

ss_status ss_pca_project_cuda(ss_ctx *ctx, const ss_backend *be, int n_channels, int n_wave, int n_pcs,
                              const float *d_basis, const float *d_waveforms, int64_t n, float *d_features,
                              ss_stream stream) {
  return ss_cuda_not_built(ctx, "features");
}
ss_status ss_pca_project_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_pca *pca, const float *waveforms,
                                   int64_t n, float *features) {
  return ss_cuda_not_built(ctx, "features");
}

/* ---- kmeans ---- */

ss_status ss_kmeans_gpu_open(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, ss_kmeans_gpu **out) {
  *out = NULL; /* no handle */
  return ss_cuda_not_built(ctx, "kmeans");
}
ss_status ss_kmeans_gpu_pp(ss_ctx *ctx, ss_kmeans_gpu *g, uint64_t seed, float *centroids_c) {
  return ss_cuda_not_built(ctx, "kmeans");
}
ss_status ss_kmeans_gpu_lloyd(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c, ss_kmeans_result *res) {
  return ss_cuda_not_built(ctx, "kmeans");
}
ss_status ss_kmeans_gpu_assign(ss_ctx *ctx, ss_kmeans_gpu *g, const float *centroids_c, int32_t *labels, float *dist) {
  return ss_cuda_not_built(ctx, "kmeans");
}
void ss_kmeans_gpu_close(ss_kmeans_gpu *g) {}
ss_status ss_kmeans_gpu_profile(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c, ss_kmeans_pass_profile *prof) {
  return ss_cuda_not_built(ctx, "kmeans");
}

/* ---- knn ---- */

ss_status ss_knn_cuda_index_create(ss_ctx *ctx, ss_knn_index *ix) { return ss_cuda_not_built(ctx, "knn"); }
void ss_knn_cuda_index_free(ss_knn_index *ix) {}
ss_status ss_knn_cuda_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                             int64_t *idx, double *dist, uint8_t *certified, ss_knn_stats *stats) {
  return ss_cuda_not_built(ctx, "knn");
}
ss_status ss_knn_cuda_time_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m,
                                  int32_t *d_idx, double *d_dist, uint8_t *d_certified, int repeats, double *median_s,
                                  ss_knn_stats *stats) {
  return ss_cuda_not_built(ctx, "knn");
}
ss_status ss_knn_cuda_search_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query,
                                    int64_t m, int32_t *d_idx, double *d_dist, uint8_t *d_certified,
                                    ss_knn_stats *stats) {
  return ss_cuda_not_built(ctx, "knn");
}

/* ---- masked EM ---- */

ss_status ss_mask_em_fit_cuda(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, int64_t n, int64_t d,
                              const ss_mask_em_opts *o, ss_mask_em_result *res) {
  memset(res, 0, sizeof(*res)); /* empty, as the CUDA fit leaves it on failure: the caller may free it */
  return ss_cuda_not_built(ctx, "masked EM");
}
ss_status ss_mask_em_cuda_trace(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                const ss_mask_em_opts *o, const int32_t *start, int64_t k, int64_t iterations,
                                ss_mask_em_snapshot *snap, int32_t *labels_out) {
  return ss_cuda_not_built(ctx, "masked EM");
}
ss_status ss_mask_em_cuda_profile_iteration(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                            const ss_mask_em_opts *o, const int32_t *start, int64_t k, int reps,
                                            ss_mask_em_cuda_profile *prof) {
  memset(prof, 0, sizeof(*prof)); /* no timings */
  return ss_cuda_not_built(ctx, "masked EM");
}

/* ---- live ---- */

ss_status ss_live_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m, const ss_detect_config *cfg,
                            int masked_distance, ss_knn_index *knn, ss_live_wait wait, ss_live_laps *laps,
                            ss_live_cuda **out) {
  *out = NULL; /* no handle */
  return ss_cuda_not_built(ctx, "live");
}
ss_status ss_live_cuda_append(ss_ctx *ctx, ss_live_cuda *g, int64_t drop, const int16_t *rows, int64_t n, int want_flag,
                              int *strong) {
  return ss_cuda_not_built(ctx, "live");
}
ss_status ss_live_cuda_detect(ss_ctx *ctx, ss_live_cuda *g, const ss_detect_block *blk, int64_t open_row,
                              const ss_knn_opts *ko, ss_live_found *out) {
  return ss_cuda_not_built(ctx, "live");
}
void ss_live_cuda_reset(ss_live_cuda *g) {}
void ss_live_cuda_counts(const ss_live_cuda *g, int64_t *graphed, int64_t *direct, int64_t *waits) {
  *graphed = *direct = *waits = 0; /* nothing ran on a device */
}
void ss_live_cuda_close(ss_live_cuda *g) {}

/* ---- match ---- */

ss_status ss_match_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_match_bank *bank, ss_match_cuda **out) {
  *out = NULL; /* no handle */
  return ss_cuda_not_built(ctx, "match");
}
ss_status ss_match_chunk_cuda(ss_ctx *ctx, ss_match_cuda *h, ss_match_chunk *ch, ss_match_list *out) {
  return ss_cuda_not_built(ctx, "match");
}
void ss_match_cuda_close(ss_match_cuda *h) {}

/* ---- front end ---- */

ss_status ss_frontend_chunks_cuda(ss_ctx *ctx, const ss_backend *be, const ss_fe_state *fs, ss_source *src,
                                  ss_fe_accum *acc, ss_frontend_model *model) {
  return ss_cuda_not_built(ctx, "front end");
}

/* ---- motion ---- */

ss_status ss_motion_cuda_open(ss_ctx *ctx, const ss_motion_reg *r, ss_motion_cuda **out) {
  *out = NULL;
  return ss_cuda_not_built(ctx, "registration");
}
void ss_motion_cuda_close(ss_motion_cuda *h) {}
ss_status ss_motion_apply_cuda(ss_ctx *ctx, const ss_motion_cuda *h, const float *d_in, float *d_out, int64_t n_rows,
                               int64_t row0_sample, ss_stream stream) {
  return ss_cuda_not_built(ctx, "registration");
}
