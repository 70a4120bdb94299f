/* model_h5.c — writes model.h5 (layout in model_h5.h), atomically; the causal twin /live when given. */
#include "io/model_h5.h"

#include <hdf5.h>
#include <stdio.h>
#include <string.h>

#include "build_config.h"
#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "io/results_h5.h"

#define CRC_TEXT 16

static ss_status nd(ss_ctx *ctx, hid_t loc, const char *name, hid_t type, int rank, int64_t d0, int64_t d1, int64_t d2,
                    const void *data, const char *path) {
  int64_t dims[3] = {d0, d1, d2};
  return ss_results_dataset_nd(ctx, loc, name, type, rank, dims, data, path);
}

static ss_status write_attrs(ss_ctx *ctx, hid_t f, const ss_model_file *m, const char *path) {
  char crc[CRC_TEXT];
  snprintf(crc, sizeof(crc), "%08x", m->input_crc32);
  SS_TRY(ss_h5_attr_str(ctx, f, "software", "spikestream", path));
  SS_TRY(ss_h5_attr_str(ctx, f, "version", SS_VERSION, path));
  SS_TRY(ss_h5_attr_str(ctx, f, "commit", SS_GIT_COMMIT, path));
  SS_TRY(ss_h5_attr_f64(ctx, f, "sample_rate", m->sample_rate, path));
  const struct {
    const char *name;
    int value;
  } ints[] = {{"n_channels", m->n_channels}, {"n_pcs", m->n_pcs},       {"n_wave", m->n_wave},
              {"n_before", m->n_before},     {"n_after", m->n_after},   {"polarity", m->polarity},
              {"join_size", m->join_size}};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) SS_TRY(ss_h5_attr_i32(ctx, f, ints[i].name, ints[i].value, path));
  SS_TRY(ss_h5_attr_str(ctx, f, "input_path", m->input_path ? m->input_path : "", path));
  return ss_h5_attr_str(ctx, f, "input_crc32", crc, path);
}

/* A filter group (/filter, /live/filter): second-order sections and the band they realise. */
typedef struct {
  int64_t n_sections;
  const double *sos; /* [n_sections × 6] */
  int order;
  double low_hz, high_hz;
  const char *mode; /* "zero_phase" or "causal" */
} filter_group;

static ss_status write_filter_group(ss_ctx *ctx, hid_t parent, const filter_group *fg, double rate_hz,
                                    const char *path) {
  hid_t g;
  SS_TRY(ss_results_group(ctx, parent, "filter", path, &g));
  ss_status st = nd(ctx, g, "sos", H5T_NATIVE_DOUBLE, 2, fg->n_sections, 6, 0, fg->sos, path);
  if (st == SS_OK) st = ss_h5_attr_i32(ctx, g, "order", fg->order, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "low_hz", fg->low_hz, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "high_hz", fg->high_hz, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "rate_hz", rate_hz, path);
  if (st == SS_OK) st = ss_h5_attr_str(ctx, g, "mode", fg->mode, path);
  H5Gclose(g);
  return st;
}

static ss_status write_front(ss_ctx *ctx, hid_t f, const ss_model_file *m, const char *path) {
  const int64_t C = m->n_channels;
  const filter_group fg = {m->n_sections, m->sos, m->filter_order, m->low_hz, m->high_hz, "zero_phase"};
  SS_TRY(write_filter_group(ctx, f, &fg, m->sample_rate, path));
  hid_t g;
  ss_status st;
  SS_TRY(ss_results_group(ctx, f, "threshold", path, &g));
  st = nd(ctx, g, "sigma", H5T_NATIVE_FLOAT, 1, C, 0, 0, m->sigma, path);
  if (st == SS_OK) st = nd(ctx, g, "weak", H5T_NATIVE_FLOAT, 1, C, 0, 0, m->weak, path);
  if (st == SS_OK) st = nd(ctx, g, "strong", H5T_NATIVE_FLOAT, 1, C, 0, 0, m->strong, path);
  H5Gclose(g);
  SS_TRY(st);
  SS_TRY(ss_results_group(ctx, f, "probe", path, &g));
  st = nd(ctx, g, "x_um", H5T_NATIVE_DOUBLE, 1, C, 0, 0, m->x_um, path);
  if (st == SS_OK) st = nd(ctx, g, "y_um", H5T_NATIVE_DOUBLE, 1, C, 0, 0, m->y_um, path);
  if (st == SS_OK) st = nd(ctx, g, "adjacency", H5T_NATIVE_INT32, 2, m->n_edges, 2, 0, m->adjacency, path);
  if (st == SS_OK) st = nd(ctx, g, "connected", H5T_NATIVE_INT32, 1, C, 0, 0, m->connected, path);
  H5Gclose(g);
  SS_TRY(st);
  SS_TRY(ss_results_group(ctx, f, "pca", path, &g));
  st = nd(ctx, g, "basis", H5T_NATIVE_FLOAT, 3, C, m->n_pcs, m->n_wave, m->pca_basis, path);
  if (st == SS_OK) st = nd(ctx, g, "eigenvalues", H5T_NATIVE_DOUBLE, 2, C, m->n_pcs, 0, m->pca_eigenvalues, path);
  H5Gclose(g);
  return st;
}

static ss_status write_clusters(ss_ctx *ctx, hid_t f, const ss_model_file *m, const char *path) {
  const int64_t C = m->n_channels, D = C * m->n_pcs, K = m->k, M = m->n_ref;
  hid_t g;
  SS_TRY(ss_results_group(ctx, f, "clusters", path, &g));
  ss_status st = nd(ctx, g, "id", H5T_NATIVE_INT32, 1, K, 0, 0, m->cluster_id, path);
  if (st == SS_OK) st = nd(ctx, g, "n_spikes", H5T_NATIVE_INT64, 1, K, 0, 0, m->cluster_count, path);
  if (st == SS_OK) st = nd(ctx, g, "centroid", H5T_NATIVE_FLOAT, 2, K, D, 0, m->centroid, path);
  if (st == SS_OK) st = nd(ctx, g, "variance", H5T_NATIVE_FLOAT, 2, K, D, 0, m->variance, path);
  if (st == SS_OK) st = nd(ctx, g, "mean_mask", H5T_NATIVE_FLOAT, 2, K, C, 0, m->mean_mask, path);
  if (st == SS_OK) st = nd(ctx, g, "mean_waveform", H5T_NATIVE_FLOAT, 3, K, C, m->n_wave, m->mean_waveform, path);
  H5Gclose(g);
  SS_TRY(st);
  SS_TRY(ss_results_group(ctx, f, "knn", path, &g));
  st = nd(ctx, g, "features", H5T_NATIVE_FLOAT, 2, M, D, 0, m->ref_features, path);
  if (st == SS_OK) st = nd(ctx, g, "masks", H5T_NATIVE_FLOAT, 2, M, C, 0, m->ref_masks, path);
  if (st == SS_OK) st = nd(ctx, g, "labels", H5T_NATIVE_INT32, 1, M, 0, 0, m->ref_labels, path);
  if (st == SS_OK) st = nd(ctx, g, "time_samples", H5T_NATIVE_INT64, 1, M, 0, 0, m->ref_times, path);
  if (st == SS_OK) st = ss_h5_attr_i32(ctx, g, "stride", (int)m->ref_stride, path);
  H5Gclose(g);
  return st;
}

/* A scalar int64 attribute (counts that may pass 2^31). */
static ss_status attr_i64(ss_ctx *ctx, hid_t obj, const char *name, int64_t value, const char *path) {
  hid_t sp = H5Screate(H5S_SCALAR);
  hid_t a = sp < 0 ? -1 : H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  herr_t w = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, &value);
  if (a >= 0) H5Aclose(a);
  if (sp >= 0) H5Sclose(sp);
  if (w < 0) return ss_fail(ctx, SS_ERR_IO, "%s: attribute %s: cannot write", path, name);
  return SS_OK;
}

static ss_status write_scale(ss_ctx *ctx, hid_t f, const ss_model_file *m, const char *path) {
  SS_TRY(nd(ctx, f, "uv_per_step", H5T_NATIVE_DOUBLE, 1, m->n_channels, 0, 0, m->uv_per_step, path));
  return ss_h5_attr_f64(ctx, f, "offset_uv", m->offset_uv, path);
}

/* /live/filter: the sections live mode runs causally (the twin's own design, docs/live.md). */
static ss_status write_live_filter(ss_ctx *ctx, hid_t live, const ss_model_file *m, const char *path) {
  const ss_model_live *l = m->live;
  const filter_group fg = {l->filter_sections, l->filter_sos, l->filter_order, l->filter_low_hz, l->filter_high_hz,
                           "causal"};
  return write_filter_group(ctx, live, &fg, m->sample_rate, path);
}

static ss_status write_live(ss_ctx *ctx, hid_t f, const ss_model_file *m, const char *path) {
  const ss_model_live *l = m->live;
  const int64_t C = m->n_channels, P = m->n_pcs, D = C * P, K = l->k, M = l->n_ref;
  hid_t g;
  SS_TRY(ss_results_group(ctx, f, "live", path, &g));
  ss_status st = nd(ctx, g, "sigma", H5T_NATIVE_FLOAT, 1, C, 0, 0, l->sigma, path);
  if (st == SS_OK) st = nd(ctx, g, "weak", H5T_NATIVE_FLOAT, 1, C, 0, 0, l->weak, path);
  if (st == SS_OK) st = nd(ctx, g, "strong", H5T_NATIVE_FLOAT, 1, C, 0, 0, l->strong, path);
  if (st == SS_OK) st = nd(ctx, g, "pca_basis", H5T_NATIVE_FLOAT, 3, C, P, m->n_wave, l->pca_basis, path);
  if (st == SS_OK) st = nd(ctx, g, "pca_eigenvalues", H5T_NATIVE_DOUBLE, 2, C, P, 0, l->pca_eigenvalues, path);
  if (st == SS_OK) st = nd(ctx, g, "unit_id", H5T_NATIVE_INT32, 1, K, 0, 0, l->unit_id, path);
  if (st == SS_OK) st = nd(ctx, g, "centroid", H5T_NATIVE_FLOAT, 2, K, D, 0, l->centroid, path);
  if (st == SS_OK) st = nd(ctx, g, "mean_mask", H5T_NATIVE_FLOAT, 2, K, C, 0, l->mean_mask, path);
  if (st == SS_OK) st = nd(ctx, g, "ref_features", H5T_NATIVE_FLOAT, 2, M, D, 0, l->ref_features, path);
  if (st == SS_OK) st = nd(ctx, g, "ref_masks", H5T_NATIVE_FLOAT, 2, M, C, 0, l->ref_masks, path);
  if (st == SS_OK) st = nd(ctx, g, "ref_labels", H5T_NATIVE_INT32, 1, M, 0, 0, l->ref_labels, path);
  if (st == SS_OK) st = nd(ctx, g, "ref_times", H5T_NATIVE_INT64, 1, M, 0, 0, l->ref_times, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "time_offset_samples", l->time_offset_samples, path);
  if (st == SS_OK) st = attr_i64(ctx, g, "n_matched", l->n_matched, path);
  if (st == SS_OK) st = attr_i64(ctx, g, "n_causal", l->n_causal, path);
  if (st == SS_OK) st = attr_i64(ctx, g, "stride", l->ref_stride, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "threshold_factor", l->threshold_factor, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "partner_fraction", l->partner_fraction, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "partner_fraction_at_one", l->partner_fraction_at_one, path);
  if (st == SS_OK) st = write_live_filter(ctx, g, m, path);
  H5Gclose(g);
  return st;
}

ss_status ss_model_write(ss_ctx *ctx, const char *path, const ss_model_file *m) {
  ss_h5_quiet();
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 0));
  hid_t f = H5Fcreate(af.tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) {
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot create the file", path);
  }
  ss_status st = write_attrs(ctx, f, m, path);
  if (st == SS_OK) st = write_front(ctx, f, m, path);
  if (st == SS_OK) st = write_clusters(ctx, f, m, path);
  if (st == SS_OK) st = write_scale(ctx, f, m, path);
  if (st == SS_OK && m->live) st = write_live(ctx, f, m, path);
  if (st == SS_OK) st = ss_h5_dataset_str(ctx, f, "params", m->params_json ? m->params_json : "{}", path);
  if (H5Fclose(f) < 0 && st == SS_OK) st = ss_fail(ctx, SS_ERR_IO, "%s: cannot close the file", path);
  if (st != SS_OK) {
    ss_atomic_abort(&af);
    return st;
  }
  return ss_atomic_commit(ctx, &af);
}
