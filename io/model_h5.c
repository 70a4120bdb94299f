/* model_h5.c — model.h5 (layout in model_h5.h): the writer, atomic, with the causal twin /live when
 * given, and the reader of what live mode needs, validating every field it reads. */
#include "io/model_h5.h"

#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "io/outset.h"
#include "io/results_h5.h"
#include "params/params.h"

#define CRC_TEXT 16

/* --- the writer ----------------------------------------------------------------------------------- */

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
  } ints[] = {{"n_channels", m->n_channels}, {"n_pcs", m->n_pcs},     {"n_wave", m->n_wave},
              {"n_before", m->n_before},     {"n_after", m->n_after}, {"polarity", m->polarity},
              {"join_size", m->join_size}};
  for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
    SS_TRY(ss_h5_attr_i32(ctx, f, ints[i].name, ints[i].value, path));
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
  const filter_group fg = {l->filter_sections, l->filter_sos,     l->filter_order,
                           l->filter_low_hz,   l->filter_high_hz, "causal"};
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
  hid_t f = ss_h5_mem_create(ctx, &af, path);
  if (f < 0) return SS_ERR_IO;
  ss_status st = write_attrs(ctx, f, m, path);
  if (st == SS_OK) st = write_front(ctx, f, m, path);
  if (st == SS_OK) st = write_clusters(ctx, f, m, path);
  if (st == SS_OK) st = write_scale(ctx, f, m, path);
  if (st == SS_OK && m->live) st = write_live(ctx, f, m, path);
  if (st == SS_OK) st = ss_h5_dataset_str(ctx, f, "params", m->params_json ? m->params_json : "{}", path);
  if (st != SS_OK) {
    ss_h5_mem_abort(f, &af);
    return st;
  }
  return ss_h5_mem_commit(ctx, f, &af);
}

/* --- the reader ----------------------------------------------------------------------------------- */

/* Limits the reader accepts (beyond them a file is taken as corrupt). */
#define SS_MODEL_MAX_CHANNELS 100000
#define SS_MODEL_MAX_PCS 16
#define SS_MODEL_MAX_WAVE 100000
#define SS_MODEL_MAX_JOIN 1000
#define SS_MODEL_SOS_COLS 6
#define SS_MODEL_MAX_RANK 3
#define SS_MODEL_FREE_DIM (-1) /* a dimension the file decides (units, reference spikes, edges) */

typedef struct {
  ss_ctx *ctx;
  hid_t f;
  const char *file;
} reader;

typedef struct {
  H5T_class_t cls; /* the file's type must be of this class and size */
  size_t size;
  const char *name;
} elem_type;

static const elem_type T_F32 = {H5T_FLOAT, 4, "float32"}, T_F64 = {H5T_FLOAT, 8, "float64"},
                       T_I32 = {H5T_INTEGER, 4, "int32"}, T_I64 = {H5T_INTEGER, 8, "int64"};

static hid_t mem_type(const elem_type *t) {
  if (t->cls == H5T_FLOAT) return t->size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  return t->size == 4 ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64;
}

/* "[3 × K]" from dims (free dims named by `free_name`). */
static void dims_text(char *buf, size_t len, int rank, const int64_t *dims, const char *free_name) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && at < len; i++) {
    const char *sep = i ? " × " : "";
    if (dims[i] == SS_MODEL_FREE_DIM) at += (size_t)snprintf(buf + at, len - at, "%s%s", sep, free_name);
    else at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, sep, dims[i]);
  }
  if (at < len) snprintf(buf + at, len - at, "]");
}

/* Read dataset `path` of the expected type and shape (free dims take the file's size and are written
 * back into want); *out is malloc'd (at least one element). */
static ss_status read_array(reader *r, const char *path, const elem_type *t, int rank, int64_t *want,
                            const char *free_name, void **out) {
  *out = NULL;
  if (!ss_h5_is_dataset(r->f, path)) return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: missing", r->file, path);
  hid_t d = H5Dopen2(r->f, path, H5P_DEFAULT), ft = H5Dget_type(d);
  int64_t dims[8] = {0};
  int got_rank = ss_h5_shape(d, dims);
  char tn[32];
  ss_h5_type_name(ft, tn, sizeof(tn));
  int ok = H5Tget_class(ft) == t->cls && H5Tget_size(ft) == t->size && got_rank == rank &&
           (t->cls != H5T_INTEGER || H5Tget_sign(ft) == H5T_SGN_2);
  for (int i = 0; ok && i < rank; i++) ok = want[i] == SS_MODEL_FREE_DIM || want[i] == dims[i];
  H5Tclose(ft);
  if (!ok) {
    char we[128], ge[128];
    dims_text(we, sizeof(we), rank, want, free_name);
    dims_text(ge, sizeof(ge), got_rank > 0 ? got_rank : 0, dims, "?");
    H5Dclose(d);
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected %s %s, got %s %s", r->file, path, we, t->name, ge, tn);
  }
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= (want[i] = dims[i]);
  ss_status st = ss_alloc(r->ctx, out, (size_t)(count > 0 ? count : 1), t->size, path);
  if (st == SS_OK && count > 0 && H5Dread(d, mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
    st = ss_fail(r->ctx, SS_ERR_IO, "%s: %s: cannot read the dataset", r->file, path);
  H5Dclose(d);
  if (st != SS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

/* Element i of an array of `rank` dims as "[a, b, c]". */
static void index_text(char *buf, size_t len, int64_t i, int rank, const int64_t *dims) {
  int64_t idx[SS_MODEL_MAX_RANK] = {0};
  for (int k = rank - 1; k >= 0; k--) {
    idx[k] = dims[k] > 0 ? i % dims[k] : 0;
    i = dims[k] > 0 ? i / dims[k] : 0;
  }
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int k = 0; k < rank && at < len; k++)
    at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, k ? ", " : "", idx[k]);
  if (at < len) snprintf(buf + at, len - at, "]");
}

static int64_t count_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int k = 0; k < rank; k++) n *= dims[k];
  return n;
}

/* Every value within [lo, hi] (NaN never; ±inf only when allow_inf and the bound admits it). */
static ss_status check_range(reader *r, const char *path, const double *v64, const float *v32, int rank,
                             const int64_t *dims, double lo, double hi, int allow_inf, const char *what) {
  int64_t n = count_of(rank, dims);
  for (int64_t i = 0; i < n; i++) {
    double x = v64 ? v64[i] : (double)v32[i];
    if ((!isnan(x) && (allow_inf || isfinite(x)) && x >= lo && x <= hi)) continue;
    char at[96];
    index_text(at, sizeof(at), i, rank, dims);
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected %s, got %g at %s", r->file, path, what, x, at);
  }
  return SS_OK;
}

static ss_status read_f32(reader *r, const char *path, int rank, int64_t *dims, const char *free_name, double lo,
                          double hi, int allow_inf, const char *what, float **out) {
  SS_TRY(read_array(r, path, &T_F32, rank, dims, free_name, (void **)out));
  ss_status st = check_range(r, path, NULL, *out, rank, dims, lo, hi, allow_inf, what);
  if (st != SS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

static ss_status read_f64(reader *r, const char *path, int rank, int64_t *dims, double lo, double hi, const char *what,
                          double **out) {
  SS_TRY(read_array(r, path, &T_F64, rank, dims, "n", (void **)out));
  ss_status st = check_range(r, path, *out, NULL, rank, dims, lo, hi, 0, what);
  if (st != SS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

/* A numeric attribute of `obj_path` ("/" for the root) that must be finite and in [lo, hi]
 * (integral when `integral`). */
static ss_status read_attr(reader *r, const char *obj_path, const char *name, double lo, double hi, int integral,
                           double *out) {
  hid_t o = H5Oopen(r->f, obj_path, H5P_DEFAULT);
  int ok = o >= 0 && ss_h5_read_attr_f64(o, name, out);
  if (o >= 0) H5Oclose(o);
  const char *sep = strcmp(obj_path, "/") ? "/" : "";
  if (!ok)
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute %s%s%s: missing or not a number", r->file, obj_path, sep, name);
  if (!isfinite(*out) || *out < lo || *out > hi || (integral && *out != floor(*out)))
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute %s%s%s: expected %s in [%g, %g], got %g", r->file, obj_path,
                   sep, name, integral ? "an integer" : "a number", lo, hi, *out);
  return SS_OK;
}

static ss_status read_int_attr(reader *r, const char *obj_path, const char *name, double lo, double hi, int *out) {
  double v;
  SS_TRY(read_attr(r, obj_path, name, lo, hi, 1, &v));
  *out = (int)v;
  return SS_OK;
}

static ss_status read_root(reader *r, ss_model_live_data *m) {
  SS_TRY(read_attr(r, "/", "sample_rate", 0, INFINITY, 0, &m->rate_hz));
  if (!(m->rate_hz > 0))
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute sample_rate: expected > 0, got %g", r->file, m->rate_hz);
  SS_TRY(read_int_attr(r, "/", "n_channels", 1, SS_MODEL_MAX_CHANNELS, &m->n_channels));
  SS_TRY(read_int_attr(r, "/", "n_pcs", 1, SS_MODEL_MAX_PCS, &m->n_pcs));
  SS_TRY(read_int_attr(r, "/", "n_before", 0, SS_MODEL_MAX_WAVE, &m->n_before));
  SS_TRY(read_int_attr(r, "/", "n_after", 0, SS_MODEL_MAX_WAVE, &m->n_after));
  SS_TRY(read_int_attr(r, "/", "n_wave", 1, 2.0 * SS_MODEL_MAX_WAVE, &m->n_wave));
  if (m->n_wave != m->n_before + m->n_after)
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute n_wave: expected n_before + n_after = %d, got %d", r->file,
                   m->n_before + m->n_after, m->n_wave);
  SS_TRY(read_int_attr(r, "/", "polarity", SS_POLARITY_NEGATIVE, SS_POLARITY_BOTH, &m->polarity));
  SS_TRY(read_int_attr(r, "/", "join_size", 0, SS_MODEL_MAX_JOIN, &m->join_size));
  int64_t dims[1] = {m->n_channels};
  SS_TRY(read_f64(r, "/uv_per_step", 1, dims, -INFINITY, INFINITY, "finite values", &m->uv_per_step));
  for (int c = 0; c < m->n_channels; c++)
    if (m->uv_per_step[c] == 0)
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /uv_per_step: expected a non-zero scale, got 0 at [%d]", r->file, c);
  return read_attr(r, "/", "offset_uv", -INFINITY, INFINITY, 0, &m->offset_uv);
}

/* The causal filter: /live/filter (the twin's own design), or the root's /filter in models written
 * before the twin had one. */
static ss_status read_filter(reader *r, ss_model_live_data *m) {
  const char *grp = ss_h5_is_group(r->f, "/live/filter") ? "/live/filter" : "/filter";
  char sos_path[32];
  snprintf(sos_path, sizeof(sos_path), "%s/sos", grp);
  int64_t dims[2] = {SS_MODEL_FREE_DIM, SS_MODEL_SOS_COLS};
  double v;
  SS_TRY(read_f64(r, sos_path, 2, dims, -INFINITY, INFINITY, "finite values", &m->sos));
  if (dims[0] < 1 || dims[0] > SS_MODEL_MAX_SECTIONS)
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected 1 to %d sections, got %" PRId64, r->file, sos_path,
                   SS_MODEL_MAX_SECTIONS, dims[0]);
  for (int64_t q = 0; q < dims[0]; q++) {
    const double *row = m->sos + q * SS_MODEL_SOS_COLS;
    if (row[3] != 1.0)
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected a0 = 1, got %g at [%" PRId64 ", 3]", r->file, sos_path,
                     row[3], q);
  }
  m->n_sections = (int)dims[0];
  SS_TRY(read_attr(r, grp, "order", 1, SS_MODEL_MAX_SECTIONS, 1, &v));
  m->filter_order = (int)v;
  SS_TRY(read_attr(r, grp, "low_hz", 0, m->rate_hz / 2, 0, &m->low_hz));
  return read_attr(r, grp, "high_hz", 0, m->rate_hz / 2, 0, &m->high_hz);
}

/* /probe/connected (0 or 1) and /probe/adjacency (pairs of two different channels). */
static ss_status read_probe(reader *r, ss_model_live_data *m) {
  const int C = m->n_channels;
  int64_t cd[1] = {C}, ad[2] = {SS_MODEL_FREE_DIM, 2};
  SS_TRY(read_array(r, "/probe/connected", &T_I32, 1, cd, "C", (void **)&m->connected));
  SS_TRY(read_array(r, "/probe/adjacency", &T_I32, 2, ad, "E", (void **)&m->adjacency));
  m->n_edges = ad[0];
  for (int c = 0; c < C; c++)
    if (m->connected[c] != 0 && m->connected[c] != 1)
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /probe/connected: expected 0 or 1, got %d at [%d]", r->file,
                     (int)m->connected[c], c);
  for (int64_t e = 0; e < m->n_edges; e++) {
    int a = m->adjacency[2 * e], b = m->adjacency[2 * e + 1];
    if (a < 0 || a >= C || b < 0 || b >= C || a == b)
      return ss_fail(r->ctx, SS_ERR_INPUT,
                     "%s: /probe/adjacency: expected two different channels in [0, %d), got (%d, %d) at [%" PRId64 "]",
                     r->file, C, a, b, e);
  }
  return SS_OK;
}

/* Causal noise levels (0 on excluded channels) and thresholds (+inf there). */
static ss_status read_thresholds(reader *r, ss_model_live_data *m) {
  int64_t d[3][1] = {{m->n_channels}, {m->n_channels}, {m->n_channels}};
  SS_TRY(read_f32(r, "/live/sigma", 1, d[0], "C", 0, INFINITY, 0, "finite values >= 0", &m->sigma));
  SS_TRY(read_f32(r, "/live/weak", 1, d[1], "C", 0, INFINITY, 1, "values >= 0 (+inf: excluded)", &m->weak));
  return read_f32(r, "/live/strong", 1, d[2], "C", 0, INFINITY, 1, "values >= 0 (+inf: excluded)", &m->strong);
}

static ss_status read_pca(reader *r, ss_model_live_data *m) {
  int64_t bd[3] = {m->n_channels, m->n_pcs, m->n_wave}, ed[2] = {m->n_channels, m->n_pcs};
  SS_TRY(read_f32(r, "/live/pca_basis", 3, bd, "?", -INFINITY, INFINITY, 0, "finite values", &m->pca_basis));
  return read_f64(r, "/live/pca_eigenvalues", 2, ed, -INFINITY, INFINITY, "finite values", &m->pca_eigenvalues);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static ss_status read_units(reader *r, ss_model_live_data *m) {
  const int64_t C = m->n_channels, D = C * m->n_pcs;
  int64_t ud[1] = {SS_MODEL_FREE_DIM};
  SS_TRY(read_array(r, "/live/unit_id", &T_I32, 1, ud, "K", (void **)&m->unit_id));
  m->k = ud[0];
  if (m->k < 1) return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /live/unit_id: expected at least one unit, got 0", r->file);
  for (int64_t u = 0; u < m->k; u++)
    if (m->unit_id[u] < 0 || (u > 0 && m->unit_id[u] < m->unit_id[u - 1]))
      return ss_fail(r->ctx, SS_ERR_INPUT,
                     "%s: /live/unit_id: expected non-decreasing ids >= 0, got %d at [%" PRId64 "]", r->file,
                     (int)m->unit_id[u], u);
  int64_t cd[2] = {m->k, D}, md[2] = {m->k, C};
  SS_TRY(read_f32(r, "/live/centroid", 2, cd, "K", -INFINITY, INFINITY, 0, "finite values", &m->centroid));
  return read_f32(r, "/live/mean_mask", 2, md, "K", 0, 1, 0, "values in [0, 1]", &m->mean_mask);
}

static ss_status read_reference(reader *r, ss_model_live_data *m) {
  const int64_t C = m->n_channels, D = C * m->n_pcs;
  int64_t ld[1] = {SS_MODEL_FREE_DIM};
  SS_TRY(read_array(r, "/live/ref_labels", &T_I32, 1, ld, "M", (void **)&m->ref_labels));
  m->n_ref = ld[0];
  for (int64_t i = 0; i < m->n_ref; i++)
    if (!bsearch(&m->ref_labels[i], m->unit_id, (size_t)m->k, sizeof(int32_t), cmp_i32))
      return ss_fail(r->ctx, SS_ERR_INPUT,
                     "%s: /live/ref_labels: expected one of /live/unit_id, got %d at [%" PRId64 "]", r->file,
                     (int)m->ref_labels[i], i);
  int64_t fd[2] = {m->n_ref, D}, md[2] = {m->n_ref, C}, td[1] = {m->n_ref};
  SS_TRY(read_f32(r, "/live/ref_features", 2, fd, "M", -INFINITY, INFINITY, 0, "finite values", &m->ref_features));
  SS_TRY(read_f32(r, "/live/ref_masks", 2, md, "M", 0, 1, 0, "values in [0, 1]", &m->ref_masks));
  SS_TRY(read_array(r, "/live/ref_times", &T_I64, 1, td, "M", (void **)&m->ref_times));
  for (int64_t i = 0; i < m->n_ref; i++)
    if (m->ref_times[i] < 0)
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /live/ref_times: expected >= 0, got %" PRId64 " at [%" PRId64 "]",
                     r->file, m->ref_times[i], i);
  return SS_OK;
}

static ss_status read_all(reader *r, ss_model_live_data *m) {
  if (!ss_h5_is_group(r->f, "/live"))
    return ss_fail(r->ctx, SS_ERR_INPUT,
                   "%s: /live: missing: the model has no causal twin for live mode (sort it again with "
                   "sort.live_model = true)",
                   r->file);
  SS_TRY(read_root(r, m));
  SS_TRY(read_filter(r, m));
  SS_TRY(read_probe(r, m));
  SS_TRY(read_thresholds(r, m));
  SS_TRY(read_pca(r, m));
  SS_TRY(read_units(r, m));
  return read_reference(r, m);
}

ss_status ss_model_read_live(ss_ctx *ctx, const char *path, ss_model_live_data *out) {
  memset(out, 0, sizeof(*out));
  SS_TRY(ss_outset_check_file(ctx, path));
  ss_h5_quiet();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open as an HDF5 model file", path);
  reader r = {ctx, f, path};
  ss_status st = read_all(&r, out);
  H5Fclose(f);
  if (st != SS_OK) ss_model_live_data_free(out);
  return st;
}

void ss_model_live_data_free(ss_model_live_data *d) {
  free(d->uv_per_step);
  free(d->sos);
  free(d->connected);
  free(d->adjacency);
  free(d->sigma);
  free(d->weak);
  free(d->strong);
  free(d->pca_basis);
  free(d->pca_eigenvalues);
  free(d->unit_id);
  free(d->centroid);
  free(d->mean_mask);
  free(d->ref_features);
  free(d->ref_masks);
  free(d->ref_labels);
  free(d->ref_times);
  memset(d, 0, sizeof(*d));
}
