/* nwb_units.c — the units table of the NWB writer (nwb_write.h): spike_times with its unsigned
 * spike_times_index, each unit's electrodes (a ragged region into the electrodes table), the mean
 * waveforms in volts, peak_channel, snr and the caller's further columns. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "io/h5_util.h"
#include "io/nwb_write_internal.h"

#define UNITS_MAX_COLUMNS 32

static ss_status check_units(ss_ctx *ctx, const char *path, const ss_nwb_units *u, int n_channels) {
  for (int k = 0; k < u->n_units; k++) {
    if (u->n_spikes[k] < 0)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: unit %d: n_spikes: expected >= 0, got %lld", path, k,
                     (long long)u->n_spikes[k]);
    for (int64_t i = 1; i < u->n_spikes[k]; i++)
      if (!(u->spike_times[k][i] >= u->spike_times[k][i - 1]))
        return ss_fail(ctx, SS_ERR_INPUT, "%s: unit %d: spike_times[%lld] = %g is before the previous one (%g)", path,
                       k, (long long)i, u->spike_times[k][i], u->spike_times[k][i - 1]);
  }
  if (u->n_unit_channels < 0 || (u->n_unit_channels > 0 && !u->unit_channels))
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: unit electrodes: %d per unit without a table", path, u->n_unit_channels);
  for (int64_t i = 0; i < (int64_t)u->n_units * u->n_unit_channels; i++)
    if (u->unit_channels[i] < 0 || u->unit_channels[i] >= n_channels)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: unit %lld: electrode %d: expected a channel in [0, %d)", path,
                     (long long)(i / u->n_unit_channels), u->unit_channels[i], n_channels);
  if (u->waveform_mean_uv && u->n_wave > 0 && u->n_unit_channels == 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: waveform_mean without unit electrodes", path);
  if (u->n_columns < 0 || u->n_columns > UNITS_MAX_COLUMNS - 8)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: %d unit columns", path, u->n_columns);
  return SS_OK;
}

/* The identifier and object ids derive from the content: a file without samples (units only) gets
 * its distinct ids from the spike times. */
static uint64_t hash_units(uint64_t h, const ss_nwb_units *u) {
  for (int k = 0; k < u->n_units; k++) {
    h = ss_rng_mix64(h ^ (uint64_t)u->n_spikes[k]);
    for (int64_t i = 0; i < u->n_spikes[k]; i++) {
      uint64_t bits;
      memcpy(&bits, &u->spike_times[k][i], sizeof(bits));
      h = (h ^ bits) * 0x100000001B3ull; /* FNV-1a step, as over the samples */
    }
  }
  return ss_rng_mix64(h);
}

static ss_status spike_times(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_units *u) {
  int64_t total = 0;
  for (int k = 0; k < u->n_units; k++) total += u->n_spikes[k];
  double *times = NULL;
  uint64_t *ends = NULL;
  ss_status st = SS_ALLOC(ctx, times, total > 0 ? (size_t)total : 1, "spike times");
  if (st == SS_OK) st = SS_ALLOC(ctx, ends, u->n_units > 0 ? (size_t)u->n_units : 1, "spike index");
  int64_t at = 0;
  for (int k = 0; st == SS_OK && k < u->n_units; k++) {
    if (u->n_spikes[k] > 0) memcpy(times + at, u->spike_times[k], (size_t)u->n_spikes[k] * sizeof(double));
    at += u->n_spikes[k];
    ends[k] = (uint64_t)at;
  }
  if (st == SS_OK)
    st = ss_nwbw_vector(ctx, w, "/units/spike_times", H5T_NATIVE_DOUBLE, times, total, "VectorData",
                        "the spike times for each unit (s)", NULL);
  if (st == SS_OK)
    st = ss_nwbw_index(ctx, w, "/units/spike_times_index", "/units/spike_times", ends, u->n_units,
                       "Index for VectorData 'spike_times'");
  free(times);
  free(ends);
  return st;
}

/* electrodes: n_unit_channels rows per unit, a region into the electrodes table. */
static ss_status electrodes(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_units *u) {
  const int64_t K = u->n_units, E = u->n_unit_channels;
  int64_t *rows = NULL;
  uint64_t *ends = NULL;
  ss_status st = SS_ALLOC(ctx, rows, (size_t)(K * E > 0 ? K * E : 1), "unit electrodes");
  if (st == SS_OK) st = SS_ALLOC(ctx, ends, (size_t)(K > 0 ? K : 1), "unit electrodes");
  for (int64_t i = 0; st == SS_OK && i < K * E; i++) rows[i] = u->unit_channels[i];
  for (int64_t k = 0; st == SS_OK && k < K; k++) ends[k] = (uint64_t)((k + 1) * E);
  hid_t d = -1;
  if (st == SS_OK)
    st = ss_nwbw_vector(ctx, w, "/units/electrodes", H5T_NATIVE_INT64, rows, K * E, "DynamicTableRegion",
                        "the electrodes that each spike unit came from", &d);
  if (st == SS_OK) st = ss_h5_attr_ref(ctx, d, "table", w->file, SS_NWB_ELECTRODES, "/units/electrodes");
  if (d >= 0) H5Dclose(d);
  if (st == SS_OK)
    st = ss_nwbw_index(ctx, w, "/units/electrodes_index", "/units/electrodes", ends, K,
                       "Index for VectorData 'electrodes'");
  free(rows);
  free(ends);
  return st;
}

/* waveform_mean [units × samples × electrodes] float32 in volts (the schema fixes unit "volts"). */
static ss_status waveform_mean(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_units *u) {
  const size_t n = (size_t)u->n_units * (size_t)u->n_wave * (size_t)u->n_unit_channels;
  float *v = NULL;
  SS_TRY(SS_ALLOC(ctx, v, n > 0 ? n : 1, "waveform_mean"));
  for (size_t i = 0; i < n; i++) v[i] = u->waveform_mean_uv[i] * 1e-6f;
  hsize_t dims[3] = {(hsize_t)u->n_units, (hsize_t)u->n_wave, (hsize_t)u->n_unit_channels};
  hid_t d = -1;
  ss_status st = ss_nwbw_array(ctx, w, "/units/waveform_mean", H5T_IEEE_F32LE, v, 3, dims, "VectorData",
                               "the spike waveform mean for each spike unit", &d);
  free(v);
  if (st == SS_OK) st = ss_h5_attr_str(ctx, d, "unit", "volts", "/units/waveform_mean");
  if (st == SS_OK && u->waveform_rate_hz > 0)
    st = ss_h5_attr_f64(ctx, d, "sampling_rate", u->waveform_rate_hz, "/units/waveform_mean");
  if (d >= 0) H5Dclose(d);
  return st;
}

static ss_status column(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_column *c, int n) {
  char path[SS_NWB_PATH_MAX];
  snprintf(path, sizeof(path), "/units/%s", c->name);
  switch (c->type) {
    case SS_NWB_COL_F64:
      return ss_nwbw_vector(ctx, w, path, H5T_NATIVE_DOUBLE, c->values, n, "VectorData", c->description, NULL);
    case SS_NWB_COL_I64:
      return ss_nwbw_vector(ctx, w, path, H5T_NATIVE_INT64, c->values, n, "VectorData", c->description, NULL);
    default: return ss_nwbw_strings(ctx, w, path, (const char *const *)c->values, n, c->description);
  }
}

/* colnames in writing order; the further columns' names must be plain and new. */
static ss_status colnames(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_units *u, const char **names, int *n) {
  int m = 0;
  names[m++] = "spike_times";
  if (u->n_unit_channels > 0) names[m++] = "electrodes";
  if (u->n_unit_channels > 0 && u->n_wave > 0 && u->waveform_mean_uv) names[m++] = "waveform_mean";
  if (u->peak_channel) names[m++] = "peak_channel";
  if (u->snr) names[m++] = "snr";
  for (int i = 0; i < u->n_columns; i++) {
    const char *c = u->columns[i].name;
    size_t len = c ? strlen(c) : 0;
    int bad = len == 0 || len > 100 || strchr(c, '/') || strcmp(c, "id") == 0 ||
              (len > 6 && strcmp(c + len - 6, "_index") == 0);
    for (int r = 0; !bad && r < m; r++) bad = strcmp(c, names[r]) == 0;
    if (bad) return ss_fail(ctx, SS_ERR_INTERNAL, "%s: unit column name \"%s\"", w->final_path, c ? c : "(null)");
    names[m++] = c;
  }
  *n = m;
  return SS_OK;
}

ss_status ss_nwb_writer_set_units(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_units *u) {
  SS_TRY(check_units(ctx, w->final_path, u, w->meta.n_channels));
  if (ss_h5_exists(w->file, "/units")) return ss_fail(ctx, SS_ERR_INTERNAL, "%s: units written twice", w->final_path);
  const char *names[UNITS_MAX_COLUMNS];
  int n_names = 0;
  SS_TRY(colnames(ctx, w, u, names, &n_names));
  hid_t g;
  SS_TRY(ss_nwbw_group(ctx, w, "/units", "Units", "core", u->description ? u->description : "units", &g));
  ss_status st = ss_h5_attr_strs(ctx, g, "colnames", names, n_names, "/units");
  H5Gclose(g);
  SS_TRY(st);
  SS_TRY(ss_nwbw_ids(ctx, w, "/units", u->n_units));
  w->hash = hash_units(w->hash, u);
  SS_TRY(spike_times(ctx, w, u));
  if (u->n_unit_channels > 0) SS_TRY(electrodes(ctx, w, u));
  if (u->n_unit_channels > 0 && u->n_wave > 0 && u->waveform_mean_uv) SS_TRY(waveform_mean(ctx, w, u));
  if (u->peak_channel)
    SS_TRY(ss_nwbw_vector(ctx, w, "/units/peak_channel", H5T_NATIVE_INT32, u->peak_channel, u->n_units, "VectorData",
                          "channel with the largest template amplitude", NULL));
  if (u->snr)
    SS_TRY(ss_nwbw_vector(ctx, w, "/units/snr", H5T_NATIVE_DOUBLE, u->snr, u->n_units, "VectorData",
                          "peak-to-trough template amplitude on the peak channel over the noise sigma", NULL));
  for (int i = 0; i < u->n_columns; i++) SS_TRY(column(ctx, w, &u->columns[i], u->n_units));
  return SS_OK;
}
