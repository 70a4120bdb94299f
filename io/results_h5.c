/* results_h5.c — writes the results file's stable core (layout: results_h5.h, docs/formats.md). */
#include "io/results_h5.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "io/h5_util.h"

ss_status ss_results_dataset_nd(ss_ctx *ctx, hid_t loc, const char *name, hid_t type, int rank, const int64_t *dims,
                                const void *data, const char *file) {
  if (rank < 1 || rank > SS_RESULTS_MAX_RANK)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: %s: rank %d outside 1..%d", file, name, rank, SS_RESULTS_MAX_RANK);
  hsize_t hd[SS_RESULTS_MAX_RANK];
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    hd[i] = (hsize_t)dims[i];
    count *= dims[i];
  }
  hid_t space = H5Screate_simple(rank, hd, NULL);
  hid_t d = space < 0 ? -1 : H5Dcreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t w = d < 0 ? -1 : (count > 0 ? H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : 0);
  if (d >= 0) H5Dclose(d);
  if (space >= 0) H5Sclose(space);
  if (d < 0 || w < 0) return ss_fail(ctx, SS_ERR_IO, "%s: %s: cannot write the dataset", file, name);
  return SS_OK;
}

ss_status ss_results_dataset(ss_ctx *ctx, hid_t loc, const char *name, hid_t type, int64_t rows, int64_t cols,
                             const void *data, const char *file) {
  int64_t dims[2] = {rows, cols};
  return ss_results_dataset_nd(ctx, loc, name, type, cols > 0 ? 2 : 1, dims, data, file);
}

ss_status ss_results_dataset_strs(ss_ctx *ctx, hid_t loc, const char *name, const char *const *values, int64_t n,
                                  const char *file) {
  size_t len = 1;
  for (int64_t i = 0; i < n; i++) len = strlen(values[i]) > len ? strlen(values[i]) : len;
  char *buf = NULL;
  SS_TRY(SS_CALLOC(ctx, buf, (size_t)(n > 0 ? n : 1) * len, "string dataset"));
  for (int64_t i = 0; i < n; i++) memcpy(buf + (size_t)i * len, values[i], strlen(values[i]));
  hid_t type = H5Tcopy(H5T_C_S1);
  herr_t e = type < 0 ? -1 : H5Tset_size(type, len);
  if (e >= 0) e = H5Tset_strpad(type, H5T_STR_NULLPAD);
  ss_status st = e < 0 ? ss_fail(ctx, SS_ERR_IO, "%s: %s: cannot make the string type", file, name)
                       : ss_results_dataset(ctx, loc, name, type, n, 0, buf, file);
  if (type >= 0) H5Tclose(type);
  free(buf);
  return st;
}

ss_status ss_results_group(ss_ctx *ctx, hid_t loc, const char *name, const char *file, hid_t *group) {
  *group = H5Gcreate2(loc, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (*group < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create the group %s", file, name);
  return SS_OK;
}

static ss_status check_core(ss_ctx *ctx, const char *path, const ss_results_core *c) {
  if (!(c->sample_rate > 0) || !isfinite(c->sample_rate))
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: sample_rate: expected > 0, got %g", path, c->sample_rate);
  if (c->n_channels <= 0 || c->n_pcs <= 0 || c->n < 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: shape: %lld spikes, %d channels, %d PCs", path, (long long)c->n,
                   c->n_channels, c->n_pcs);
  return SS_OK;
}

static ss_status write_core(ss_ctx *ctx, hid_t f, const char *path, const ss_results_core *c) {
  const int64_t n = c->n;
  SS_TRY(ss_h5_attr_f64(ctx, f, "sample_rate", c->sample_rate, path));
  SS_TRY(ss_h5_attr_i32(ctx, f, "n_channels", c->n_channels, path));
  SS_TRY(ss_h5_attr_i32(ctx, f, "n_pcs", c->n_pcs, path));
  SS_TRY(ss_h5_attr_str(ctx, f, "version", SS_VERSION, path));
  SS_TRY(ss_h5_attr_str(ctx, f, "software", "spikestream", path));
  SS_TRY(ss_h5_attr_str(ctx, f, "commit", SS_GIT_COMMIT, path));
  hid_t g = H5Gcreate2(f, "spikes", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (g < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create /spikes", path);
  double *secs = NULL;
  ss_status st = SS_ALLOC(ctx, secs, (size_t)(n > 0 ? n : 1), "spike times in seconds");
  for (int64_t i = 0; st == SS_OK && i < n; i++)
    secs[i] = ((double)c->time_samples[i] + c->time_fraction[i]) / c->sample_rate;
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "time_samples", H5T_NATIVE_INT64, n, 0, c->time_samples, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "time_fraction", H5T_NATIVE_FLOAT, n, 0, c->time_fraction, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "time_s", H5T_NATIVE_DOUBLE, n, 0, secs, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "peak_channel", H5T_NATIVE_INT32, n, 0, c->peak_channel, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "amplitude", H5T_NATIVE_FLOAT, n, 0, c->amplitude, path);
  if (st == SS_OK && c->cluster) st = ss_results_dataset(ctx, g, "cluster", H5T_NATIVE_INT32, n, 0, c->cluster, path);
  free(secs);
  H5Gclose(g);
  SS_TRY(st);
  SS_TRY(ss_results_dataset(ctx, f, "features", H5T_NATIVE_FLOAT, n, (int64_t)c->n_channels * c->n_pcs, c->features,
                            path));
  SS_TRY(ss_results_dataset(ctx, f, "masks", H5T_NATIVE_FLOAT, n, c->n_channels, c->masks, path));
  return ss_h5_dataset_str(ctx, f, "params", c->params_json ? c->params_json : "{}", path);
}

ss_status ss_results_begin(ss_ctx *ctx, const char *path, const ss_results_core *core, ss_results_file *rf) {
  memset(rf, 0, sizeof(*rf));
  rf->file = -1;
  SS_TRY(check_core(ctx, path, core));
  ss_h5_quiet();
  SS_TRY(ss_atomic_begin(ctx, &rf->af, path, 0));
  rf->file = ss_h5_mem_create(ctx, &rf->af, path);
  if (rf->file < 0) return SS_ERR_IO;
  ss_status st = write_core(ctx, rf->file, path, core);
  if (st != SS_OK) ss_results_abort(rf);
  return st;
}

ss_status ss_results_commit(ss_ctx *ctx, ss_results_file *rf) {
  hid_t f = rf->file;
  rf->file = -1;
  return ss_h5_mem_commit(ctx, f, &rf->af);
}

void ss_results_abort(ss_results_file *rf) {
  ss_h5_mem_abort(rf->file, &rf->af);
  rf->file = -1;
}

ss_status ss_results_write(ss_ctx *ctx, const char *path, const ss_results_core *core) {
  ss_results_file rf;
  SS_TRY(ss_results_begin(ctx, path, core, &rf));
  return ss_results_commit(ctx, &rf);
}
