/* model_h5.h — model.h5: everything needed to label new spikes of the same probe later (live mode,
 * incremental sorting), written atomically by `sort` and read back, validated, for live mode. Both
 * sides work on plain arrays. Layout (docs/formats.md):
 *   attributes  software, version, commit, sample_rate, n_channels, n_pcs, n_wave, n_before, n_after,
 *               polarity, join_size, input_path, input_crc32
 *   /filter     sos [S × 6] float64 (b0 b1 b2 1 a1 a2 per section); attributes order, low_hz,
 *               high_hz, rate_hz, mode ("zero_phase": offline; live mode runs /live/filter)
 *   /threshold  sigma, weak, strong [C] float32 (µV; weak = +inf on excluded channels)
 *   /probe      x_um, y_um [C] float64, adjacency [E × 2] int32 (recording channels, a < b)
 *   /pca        basis [C × P × W] float32, eigenvalues [C × P] float64
 *   /clusters   id [K] int32 (0 = noise), n_spikes [K] int64, centroid [K × D] float32 (mean feature
 *               vector), variance [K × D] float32 (per-feature variance: the covariance diagonal),
 *               mean_mask [K × C] float32, mean_waveform [K × C × W] float32
 *   /knn        features [M × D] float32, masks [M × C] float32, labels [M] int32, time_samples [M]
 *               int64: the labelled reference set (every spike, or every `stride`-th when there are
 *               more than the cap); attribute stride
 *   /params     the parameter JSON used (string)
 *   uv_per_step [C] float64 and attribute offset_uv: the recording's scale (µV = int16 × uv_per_step[c]
 *               + offset_uv), so live mode can read raw int16 streams
 *   /probe/connected [C] int32 (1 = used by detection)
 *   /live       the causal twin for live mode (absent when sort.live_model = false or it failed):
 *               sigma, weak, strong [C] float32; pca_basis [C × P × W] float32, pca_eigenvalues
 *               [C × P] float64; unit_id [K] int32 (the offline ids, non-decreasing: a unit's
 *               prototypes are consecutive rows); centroid [K × D] float32; mean_mask [K × C] float32;
 *               ref_features [M × D], ref_masks [M × C] float32, ref_labels [M] int32, ref_times [M]
 *               int64; attributes time_offset_samples (float64: median causal − offline), n_matched,
 *               n_causal, stride (int64), threshold_factor, partner_fraction, partner_fraction_at_one
 *               (float64: the threshold calibration); /live/filter: sos [S × 6] float64 and attributes
 *               order, low_hz, high_hz, rate_hz, mode = "causal": the filter live mode runs */
#ifndef SS_MODEL_H5_H
#define SS_MODEL_H5_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The causal twin (/live). */
typedef struct {
  const float *sigma, *weak, *strong;
  const float *pca_basis;
  const double *pca_eigenvalues;
  int64_t k;
  const int32_t *unit_id;
  const float *centroid, *mean_mask;
  int64_t n_ref, ref_stride;
  const float *ref_features, *ref_masks;
  const int32_t *ref_labels;
  const int64_t *ref_times;
  double time_offset_samples;
  int64_t n_matched, n_causal;
  /* the causal filter live mode runs (/live/filter; models without it: the root's sections) */
  int filter_sections, filter_order;
  const double *filter_sos; /* [filter_sections × 6] b0 b1 b2 1 a1 a2 */
  double filter_low_hz, filter_high_hz;
  /* threshold calibration: factor on the strong threshold; offline spikes with a causal partner at
   * that factor and at factor 1 */
  double threshold_factor, partner_fraction, partner_fraction_at_one;
} ss_model_live;

typedef struct {
  double sample_rate;
  int n_channels, n_pcs, n_wave, n_before, n_after, polarity, join_size;
  const char *input_path;
  uint32_t input_crc32;
  /* filter */
  int n_sections, filter_order;
  const double *sos; /* [n_sections × 6] */
  double low_hz, high_hz;
  /* thresholds */
  const float *sigma, *weak, *strong;
  /* probe */
  const double *x_um, *y_um;
  const int32_t *adjacency; /* [n_edges × 2] */
  int64_t n_edges;
  const int32_t *connected; /* [C] */
  /* recording scale */
  const double *uv_per_step; /* [C] */
  double offset_uv;
  /* PCA */
  const float *pca_basis;
  const double *pca_eigenvalues;
  /* clusters */
  int64_t k;
  const int32_t *cluster_id;
  const int64_t *cluster_count;
  const float *centroid, *variance, *mean_mask, *mean_waveform;
  /* KNN reference set */
  int64_t n_ref, ref_stride;
  const float *ref_features, *ref_masks;
  const int32_t *ref_labels;
  const int64_t *ref_times;
  const char *params_json;
  const ss_model_live *live; /* NULL: no /live group */
} ss_model_file;

ss_status ss_model_write(ss_ctx *ctx, const char *path, const ss_model_file *m);

/* --- reading what live mode needs -------------------------------------------------------------------- */

/* The most second-order sections (and the highest order) a model's filter may have. */
#define SS_MODEL_MAX_SECTIONS 8

/* model.h5 as live mode reads it: the root's sizes, scale and probe, the causal filter (/live/filter,
 * or the root's /filter in models written before the twin had one) and the /live group. Every array
 * is malloc'd; free with ss_model_live_data_free. D = n_channels · n_pcs. */
typedef struct {
  double rate_hz;
  int n_channels, n_pcs, n_wave, n_before, n_after, polarity, join_size;
  double *uv_per_step; /* [C] non-zero */
  double offset_uv;
  /* the causal filter */
  int n_sections, filter_order;
  double *sos; /* [n_sections × 6] b0 b1 b2 1 a1 a2 */
  double low_hz, high_hz;
  /* probe */
  int32_t *connected; /* [C] 0 or 1 */
  int64_t n_edges;
  int32_t *adjacency; /* [n_edges × 2] two different channels in [0, C) */
  /* causal thresholds: σ >= 0, weak and strong >= 0 (+inf: excluded channel) */
  float *sigma, *weak, *strong; /* [C] */
  /* causal PCA */
  float *pca_basis;        /* [C × P × W] */
  double *pca_eigenvalues; /* [C × P] */
  /* units' centroids (a unit may have several rows: prototypes) */
  int64_t k;        /* >= 1 */
  int32_t *unit_id; /* [k] non-decreasing, >= 0 */
  float *centroid;  /* [k × D] */
  float *mean_mask; /* [k × C] in [0, 1] */
  /* the causal KNN reference set */
  int64_t n_ref;
  float *ref_features; /* [n_ref × D] */
  float *ref_masks;    /* [n_ref × C] in [0, 1] */
  int32_t *ref_labels; /* [n_ref] each one of unit_id */
  int64_t *ref_times;  /* [n_ref] >= 0 */
} ss_model_live_data;

/* Read and validate every field above (the error names the file, the field and the value); on failure
 * nothing stays allocated. A model without /live is refused. */
ss_status ss_model_read_live(ss_ctx *ctx, const char *path, ss_model_live_data *out);
void ss_model_live_data_free(ss_model_live_data *d);

#ifdef __cplusplus
}
#endif
#endif
