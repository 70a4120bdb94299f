/* nwb_write.c — the streaming NWB 2.x writer (layout in nwb_write.h).
 *
 * Samples are buffered to one HDF5 chunk of rows and written as whole chunks, so memory stays at one
 * chunk whatever the recording length and HDF5 never has to read a partial chunk back. Typed objects
 * are recorded as they are created; their `object_id`s and the file `identifier` are written on
 * close, derived from a hash of the content (so the same recording gives the same file). */
#include "io/nwb_write.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "io/nwb_spec.h"
#include "io/nwb_write_internal.h"
#include "core/rng.h"

#define NWB_CHUNK_ROWS 30000                  /* one second at 30 kHz */
#define NWB_CHUNK_MAX_BYTES (4 * 1024 * 1024) /* cap for many-channel recordings */
#define NWB_DEVICE "/general/devices/probe"
#define NWB_GROUP "/general/extracellular_ephys/shank0"
#define NWB_ELECTRODES SS_NWB_ELECTRODES
#define NWB_PATH_MAX SS_NWB_PATH_MAX

/* ---- typed objects ---- */
ss_status ss_nwbw_typed(ss_ctx *ctx, ss_nwb_writer *w, hid_t obj, const char *path, const char *type, const char *ns,
                        const char *description) {
  if (w->n_typed >= SS_NWB_MAX_TYPED) return ss_fail(ctx, SS_ERR_INTERNAL, "%s: too many typed objects", w->final_path);
  snprintf(w->typed[w->n_typed++], NWB_PATH_MAX, "%s", path);
  SS_TRY(ss_h5_attr_str(ctx, obj, "neurodata_type", type, path));
  SS_TRY(ss_h5_attr_str(ctx, obj, "namespace", ns, path));
  if (description) SS_TRY(ss_h5_attr_str(ctx, obj, "description", description, path));
  return SS_OK;
}

static hid_t make_group(hid_t file, const char *path) {
  hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
  H5Pset_obj_track_times(gcpl, 0); /* no creation times: same content, same bytes */
  hid_t g = H5Gcreate2(file, path, H5P_DEFAULT, gcpl, H5P_DEFAULT);
  H5Pclose(gcpl);
  return g;
}

static ss_status plain_group(ss_ctx *ctx, ss_nwb_writer *w, const char *path) {
  hid_t g = make_group(w->file, path);
  if (g < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create group %s", w->final_path, path);
  H5Gclose(g);
  return SS_OK;
}

ss_status ss_nwbw_group(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *type, const char *ns,
                        const char *description, hid_t *out) {
  hid_t g = make_group(w->file, path);
  if (g < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create group %s", w->final_path, path);
  ss_status st = ss_nwbw_typed(ctx, w, g, path, type, ns, description);
  if (out && st == SS_OK) *out = g;
  else H5Gclose(g);
  return st;
}

ss_status ss_nwbw_array(ss_ctx *ctx, ss_nwb_writer *w, const char *path, hid_t type, const void *buf, int rank,
                        const hsize_t *dims, const char *ntype, const char *description, hid_t *out) {
  hid_t s = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_obj_track_times(dcpl, 0);
  hssize_t n = H5Sget_simple_extent_npoints(s);
  hid_t d = H5Dcreate2(w->file, path, type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  herr_t e = d < 0 ? -1 : (n > 0 ? H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) : 0);
  H5Pclose(dcpl);
  H5Sclose(s);
  ss_status st = e < 0 ? ss_fail(ctx, SS_ERR_IO, "%s: cannot write dataset %s", w->final_path, path) : SS_OK;
  if (st == SS_OK && ntype) {
    const char *ns = strcmp(ntype, "ElementIdentifiers") == 0 || strncmp(ntype, "Vector", 6) == 0 ||
                             strcmp(ntype, "DynamicTableRegion") == 0
                         ? "hdmf-common"
                         : "core";
    st = ss_nwbw_typed(ctx, w, d, path, ntype, ns, strcmp(ntype, "ElementIdentifiers") == 0 ? NULL : description);
  }
  if (d >= 0 && (st != SS_OK || !out)) H5Dclose(d);
  if (st == SS_OK && out) *out = d;
  return st;
}

ss_status ss_nwbw_vector(ss_ctx *ctx, ss_nwb_writer *w, const char *path, hid_t type, const void *buf, int64_t n,
                         const char *ntype, const char *description, hid_t *out) {
  hsize_t dim = (hsize_t)n;
  return ss_nwbw_array(ctx, w, path, type, buf, 1, &dim, ntype, description, out);
}

ss_status ss_nwbw_index(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *target, const uint64_t *ends,
                        int64_t n, const char *description) {
  hid_t d = -1;
  SS_TRY(ss_nwbw_vector(ctx, w, path, H5T_STD_U64LE, ends, n, "VectorIndex", description, &d));
  ss_status st = ss_h5_attr_ref(ctx, d, "target", w->file, target, path);
  H5Dclose(d);
  return st;
}

ss_status ss_nwbw_ids(ss_ctx *ctx, ss_nwb_writer *w, const char *table, int64_t n) {
  int64_t *v = NULL;
  SS_TRY(SS_ALLOC(ctx, v, n > 0 ? (size_t)n : 1, "element ids"));
  for (int64_t i = 0; i < n; i++) v[i] = i;
  char path[NWB_PATH_MAX];
  snprintf(path, sizeof(path), "%s/id", table);
  ss_status st = ss_nwbw_vector(ctx, w, path, H5T_NATIVE_INT64, v, n, "ElementIdentifiers", NULL, NULL);
  free(v);
  return st;
}

ss_status ss_nwbw_strings(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *const *values, int64_t n,
                          const char *description) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  ss_status st = ss_nwbw_vector(ctx, w, path, t, values, n, "VectorData", description, NULL);
  H5Tclose(t);
  return st;
}

/* A string column holding one value n times. */
static ss_status same_strings(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *value, int n,
                              const char *description) {
  const char **v = NULL;
  SS_TRY(SS_ALLOC(ctx, v, (size_t)(n > 0 ? n : 1), "string column"));
  for (int i = 0; i < n; i++) v[i] = value;
  ss_status st = ss_nwbw_strings(ctx, w, path, v, n, description);
  free(v);
  return st;
}

/* ---- file skeleton ---- */
static void iso_now(char *buf, size_t len) {
  const char *epoch = getenv("SOURCE_DATE_EPOCH"); /* reproducible builds convention */
  time_t t = epoch && *epoch ? (time_t)strtoll(epoch, NULL, 10) : time(NULL);
  strftime(buf, len, "%Y-%m-%dT%H:%M:%S+00:00", gmtime(&t));
}

static ss_status write_root(ss_ctx *ctx, ss_nwb_writer *w) {
  hid_t root = H5Gopen2(w->file, "/", H5P_DEFAULT);
  ss_status st = ss_nwbw_typed(ctx, w, root, "/", "NWBFile", "core", NULL);
  if (st == SS_OK) st = ss_h5_attr_str(ctx, root, "nwb_version", SS_NWB_VERSION, "/");
  H5Gclose(root);
  SS_TRY(st);
  char now[64];
  iso_now(now, sizeof(now));
  const char *desc = w->meta.session_description ? w->meta.session_description : "spikestream recording";
  SS_TRY(ss_h5_dataset_str(ctx, w->file, "session_description", desc, w->final_path));
  SS_TRY(ss_h5_dataset_str(ctx, w->file, "session_start_time", now, w->final_path));
  SS_TRY(ss_h5_dataset_str(ctx, w->file, "timestamps_reference_time", now, w->final_path));
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  const char *dates[1] = {now};
  st = ss_nwbw_vector(ctx, w, "/file_create_date", t, dates, 1, NULL, NULL, NULL);
  H5Tclose(t);
  SS_TRY(st);
  static const char *groups[] = {"/acquisition",
                                 "/analysis",
                                 "/processing",
                                 "/stimulus",
                                 "/stimulus/presentation",
                                 "/stimulus/templates",
                                 "/general",
                                 "/general/devices",
                                 "/general/extracellular_ephys"};
  for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) SS_TRY(plain_group(ctx, w, groups[i]));
  return ss_nwb_spec_write(ctx, w->file, w->final_path);
}

static ss_status write_device_and_group(ss_ctx *ctx, ss_nwb_writer *w) {
  hid_t g;
  SS_TRY(ss_nwbw_group(ctx, w, NWB_DEVICE, "Device", "core", "recording probe", NULL));
  SS_TRY(ss_nwbw_group(ctx, w, NWB_GROUP, "ElectrodeGroup", "core", "all channels", &g));
  ss_status st = ss_h5_attr_str(ctx, g, "location", "unknown", NWB_GROUP);
  if (st == SS_OK && H5Lcreate_soft(NWB_DEVICE, g, "device", H5P_DEFAULT, H5P_DEFAULT) < 0)
    st = ss_fail(ctx, SS_ERR_IO, "%s: cannot link %s/device", w->final_path, NWB_GROUP);
  H5Gclose(g);
  return st;
}

static ss_status write_position_columns(ss_ctx *ctx, ss_nwb_writer *w, double *tmp) {
  /* x, y, z and the probe-relative rel_x, rel_y (NWB >= 2.5); positions in µm as given */
  const char *names[] = {"x", "y", "z", "rel_x", "rel_y"};
  const double *src[] = {w->meta.channel_x, w->meta.channel_y, NULL, w->meta.channel_x, w->meta.channel_y};
  int n = w->meta.n_channels;
  for (int k = 0; k < 5; k++) {
    for (int c = 0; c < n; c++) tmp[c] = src[k] ? src[k][c] : 0.0;
    char path[NWB_PATH_MAX];
    snprintf(path, sizeof(path), "%s/%s", NWB_ELECTRODES, names[k]);
    SS_TRY(ss_nwbw_vector(ctx, w, path, H5T_NATIVE_DOUBLE, tmp, n, "VectorData", "contact position (um)", NULL));
  }
  return SS_OK;
}

static ss_status write_electrodes(ss_ctx *ctx, ss_nwb_writer *w) {
  int n = w->meta.n_channels;
  hid_t t;
  SS_TRY(ss_nwbw_group(ctx, w, NWB_ELECTRODES, "DynamicTable", "hdmf-common", "metadata about extracellular electrodes",
                       &t));
  static const char *cols[] = {"x", "y", "z", "rel_x", "rel_y", "location", "group", "group_name"};
  ss_status st = ss_h5_attr_strs(ctx, t, "colnames", cols, 8, NWB_ELECTRODES);
  H5Gclose(t);
  SS_TRY(st);
  SS_TRY(ss_nwbw_ids(ctx, w, NWB_ELECTRODES, n));
  double *tmp = NULL;
  hobj_ref_t *refs = NULL;
  SS_TRY(SS_ALLOC(ctx, tmp, (size_t)n, "electrode column"));
  st = write_position_columns(ctx, w, tmp);
  free(tmp);
  SS_TRY(st);
  SS_TRY(same_strings(ctx, w, NWB_ELECTRODES "/location", "unknown", n, "brain area"));
  SS_TRY(same_strings(ctx, w, NWB_ELECTRODES "/group_name", "shank0", n, "electrode group name"));
  SS_TRY(SS_ALLOC(ctx, refs, (size_t)n, "electrode groups"));
  for (int c = 0; c < n && st == SS_OK; c++)
    if (H5Rcreate(&refs[c], w->file, NWB_GROUP, H5R_OBJECT, -1) < 0)
      st = ss_fail(ctx, SS_ERR_IO, "%s: cannot reference %s", w->final_path, NWB_GROUP);
  if (st == SS_OK)
    st = ss_nwbw_vector(ctx, w, NWB_ELECTRODES "/group", H5T_STD_REF_OBJ, refs, n, "VectorData", "electrode group",
                        NULL);
  free(refs);
  return st;
}

/* An extendable 1-D or 2-D dataset chunked by w->chunk_rows rows. */
static hid_t extendable(ss_nwb_writer *w, const char *path, hid_t type, int rank, hsize_t cols) {
  hsize_t dims[2] = {0, cols}, maxd[2] = {H5S_UNLIMITED, cols}, chunk[2] = {(hsize_t)w->chunk_rows, cols};
  hid_t s = H5Screate_simple(rank, dims, maxd), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, rank, chunk);
  H5Pset_obj_track_times(dcpl, 0);
  hid_t d = H5Dcreate2(w->file, path, type, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(s);
  return d;
}

static ss_status write_series(ss_ctx *ctx, ss_nwb_writer *w) {
  const ss_nwb_meta *m = &w->meta;
  hid_t g;
  SS_TRY(ss_nwbw_group(ctx, w, w->series, "ElectricalSeries", "core", "extracellular recording", &g));
  ss_status st = ss_h5_attr_str(ctx, g, "comments", "no comments", w->series);
  H5Gclose(g);
  SS_TRY(st);
  char path[NWB_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/data", w->series);
  w->data = extendable(w, path, H5T_STD_I16LE, 2, (hsize_t)m->n_channels);
  if (w->data < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create %s", w->final_path, path);
  SS_TRY(ss_h5_attr_f64(ctx, w->data, "conversion", m->conversion, path));
  SS_TRY(ss_h5_attr_f64(ctx, w->data, "offset", m->offset, path));
  SS_TRY(ss_h5_attr_f64(ctx, w->data, "resolution", -1.0, path));
  SS_TRY(ss_h5_attr_str(ctx, w->data, "unit", "volts", path));
  if (m->write_timestamps) {
    snprintf(path, sizeof(path), "%s/timestamps", w->series);
    w->timestamps = extendable(w, path, H5T_IEEE_F64LE, 1, 1);
    if (w->timestamps < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create %s", w->final_path, path);
    SS_TRY(ss_h5_attr_i32(ctx, w->timestamps, "interval", 1, path));
    SS_TRY(ss_h5_attr_str(ctx, w->timestamps, "unit", "seconds", path));
  } else {
    snprintf(path, sizeof(path), "%s/starting_time", w->series);
    hid_t s = H5Screate(H5S_SCALAR);
    hid_t d = H5Dcreate2(w->file, path, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Sclose(s);
    st = d >= 0 && H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &m->starting_time) >= 0
             ? SS_OK
             : ss_fail(ctx, SS_ERR_IO, "%s: cannot write %s", w->final_path, path);
    if (st == SS_OK) st = ss_h5_attr_f64(ctx, d, "rate", m->rate_hz, path);
    if (st == SS_OK) st = ss_h5_attr_str(ctx, d, "unit", "seconds", path);
    if (d >= 0) H5Dclose(d);
    SS_TRY(st);
  }
  /* electrodes: a region over every row of the electrodes table, in channel order */
  int64_t *rows = NULL;
  SS_TRY(SS_ALLOC(ctx, rows, (size_t)m->n_channels, "electrode region"));
  for (int c = 0; c < m->n_channels; c++) rows[c] = c;
  snprintf(path, sizeof(path), "%s/electrodes", w->series);
  hid_t d = -1;
  st = ss_nwbw_vector(ctx, w, path, H5T_NATIVE_INT64, rows, m->n_channels, "DynamicTableRegion",
                      "the recorded electrodes", &d);
  free(rows);
  if (st == SS_OK) st = ss_h5_attr_ref(ctx, d, "table", w->file, NWB_ELECTRODES, path);
  if (d >= 0) H5Dclose(d);
  return st;
}

/* An external link stands for a series kept in another file (HDF5 resolves it when the file is
 * read; the target need not exist while writing). */
static ss_status write_link(ss_ctx *ctx, ss_nwb_writer *w) {
  if (H5Lcreate_external(w->meta.link_file, w->meta.link_path, w->file, w->series, H5P_DEFAULT, H5P_DEFAULT) < 0)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot link %s to %s:%s", w->final_path, w->series, w->meta.link_file,
                   w->meta.link_path);
  return SS_OK;
}

static ss_status write_acquisition(ss_ctx *ctx, ss_nwb_writer *w) {
  switch (w->meta.acquisition) {
    case SS_NWB_ACQ_SERIES: return write_series(ctx, w);
    case SS_NWB_ACQ_LINK: return write_link(ctx, w);
    default: return SS_OK;
  }
}

static ss_status check_meta(ss_ctx *ctx, const char *path, const ss_nwb_meta *m) {
  if (m->n_channels <= 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: n_channels: expected > 0, got %d", path, m->n_channels);
  if (!(m->rate_hz > 0) || m->rate_hz > 1e12)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: rate_hz: expected > 0, got %g", path, m->rate_hz);
  if (m->acquisition == SS_NWB_ACQ_SERIES && (!(m->conversion > 0) || m->conversion > 1e300))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: conversion: expected > 0, got %g", path, m->conversion);
  if (m->acquisition == SS_NWB_ACQ_LINK && (!m->link_file || !*m->link_file || !m->link_path || !*m->link_path))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: acquisition link: expected a file and a path", path);
  const char *name = m->series_name ? m->series_name : "";
  if (strchr(name, '/') || strlen(name) > 200)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: series_name: expected a name without '/', got \"%s\"", path, name);
  return SS_OK;
}

ss_status ss_nwb_writer_open(ss_ctx *ctx, const char *path, const ss_nwb_meta *meta, ss_nwb_writer **out) {
  *out = NULL;
  SS_TRY(check_meta(ctx, path, meta));
  ss_h5_quiet();
  ss_nwb_writer *w = NULL;
  SS_TRY(SS_CALLOC(ctx, w, 1, "NWB writer"));
  w->meta = *meta;
  w->data = w->timestamps = -1;
  ss_status st = ss_atomic_begin(ctx, &w->af, path, 0);
  w->final_path = w->af.final_path;
  w->tmp_path = w->af.tmp_path;
  if (st != SS_OK) {
    free(w);
    return st;
  }
  snprintf(w->series, sizeof(w->series), "/acquisition/%s",
           meta->series_name && *meta->series_name ? meta->series_name : "ElectricalSeries");
  if (meta->identifier) snprintf(w->identifier, sizeof(w->identifier), "%s", meta->identifier);
  int64_t cap = NWB_CHUNK_MAX_BYTES / (2 * (int64_t)meta->n_channels);
  w->chunk_rows = cap < 1 ? 1 : cap < NWB_CHUNK_ROWS ? cap : NWB_CHUNK_ROWS;
  w->hash = ss_rng_mix64((uint64_t)meta->n_channels ^ ss_rng_mix64((uint64_t)(meta->rate_hz * 1000.0)));
  if (meta->acquisition == SS_NWB_ACQ_SERIES) /* the only mode with samples to buffer */
    st = SS_ALLOC(ctx, w->buf, (size_t)(w->chunk_rows * meta->n_channels), "NWB write buffer");
  if (st == SS_OK) {
    w->file = H5Fcreate(w->tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (w->file < 0) st = ss_fail(ctx, SS_ERR_IO, "%s: cannot create the file", w->tmp_path);
  }
  if (st == SS_OK) st = write_root(ctx, w);
  if (st == SS_OK) st = write_device_and_group(ctx, w);
  if (st == SS_OK) st = write_electrodes(ctx, w);
  if (st == SS_OK) st = write_acquisition(ctx, w);
  /* the caller's pointers are used during open only */
  w->meta.channel_x = w->meta.channel_y = NULL;
  w->meta.session_description = w->meta.identifier = w->meta.series_name = NULL;
  w->meta.link_file = w->meta.link_path = NULL;
  if (st != SS_OK) {
    ss_nwb_writer_abort(w);
    return st;
  }
  *out = w;
  return SS_OK;
}

/* Grow `d` to hold `rows` more rows and write them from buf. */
static ss_status append_rows(ss_ctx *ctx, ss_nwb_writer *w, hid_t d, hid_t mtype, const void *buf, int64_t rows,
                             hsize_t cols, int rank) {
  hsize_t size[2] = {(hsize_t)(w->n_written + rows), cols}, start[2] = {(hsize_t)w->n_written, 0},
          count[2] = {(hsize_t)rows, cols};
  herr_t e = H5Dset_extent(d, size);
  hid_t fs = e < 0 ? -1 : H5Dget_space(d), ms = H5Screate_simple(rank, count, NULL);
  if (fs >= 0) e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
  if (fs >= 0 && e >= 0) e = H5Dwrite(d, mtype, ms, fs, H5P_DEFAULT, buf);
  if (fs >= 0) H5Sclose(fs);
  H5Sclose(ms);
  if (fs < 0 || e < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot append %lld samples", w->final_path, (long long)rows);
  return SS_OK;
}

static ss_status flush(ss_ctx *ctx, ss_nwb_writer *w) {
  int64_t rows = w->n_buffered;
  if (rows == 0) return SS_OK;
  SS_TRY(append_rows(ctx, w, w->data, H5T_NATIVE_INT16, w->buf, rows, (hsize_t)w->meta.n_channels, 2));
  if (w->timestamps >= 0) {
    double *t = NULL;
    SS_TRY(SS_ALLOC(ctx, t, (size_t)rows, "timestamps"));
    for (int64_t i = 0; i < rows; i++) t[i] = w->meta.starting_time + (double)(w->n_written + i) / w->meta.rate_hz;
    ss_status st = append_rows(ctx, w, w->timestamps, H5T_NATIVE_DOUBLE, t, rows, 1, 1);
    free(t);
    SS_TRY(st);
  }
  w->n_written += rows;
  w->n_buffered = 0;
  return SS_OK;
}

static uint64_t hash_samples(uint64_t h, const int16_t *x, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (uint16_t)x[i]) * 0x100000001B3ull; /* FNV-1a over samples */
  return h;
}

ss_status ss_nwb_writer_append(ss_ctx *ctx, ss_nwb_writer *w, const int16_t *samples, int64_t n) {
  int C = w->meta.n_channels;
  if (w->data < 0 && n > 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: samples appended without a series", w->final_path);
  if (n < 0) return ss_fail(ctx, SS_ERR_INTERNAL, "%s: append of %lld samples", w->final_path, (long long)n);
  while (n > 0) {
    int64_t take = w->chunk_rows - w->n_buffered;
    if (take > n) take = n;
    memcpy(w->buf + w->n_buffered * C, samples, (size_t)(take * C) * sizeof(int16_t));
    w->hash = hash_samples(w->hash, samples, (size_t)(take * C));
    w->n_buffered += take;
    samples += take * C;
    n -= take;
    if (w->n_buffered == w->chunk_rows) SS_TRY(flush(ctx, w));
  }
  return SS_OK;
}

/* identifier and object_ids, from the content hash: UUID version 4 layout */
static ss_status write_ids(ss_ctx *ctx, ss_nwb_writer *w) {
  uint64_t key = ss_rng_key(w->hash ^ (uint64_t)w->n_written, SS_RNG_GENERIC, 0);
  if (!w->identifier[0]) snprintf(w->identifier, sizeof(w->identifier), "spikestream-%016llx", (unsigned long long)key);
  SS_TRY(ss_h5_dataset_str(ctx, w->file, "identifier", w->identifier, w->final_path));
  for (int i = 0; i < w->n_typed; i++) {
    uint64_t a = ss_rng_u64(key, 2 * (uint64_t)i), b = ss_rng_u64(key, 2 * (uint64_t)i + 1);
    char uuid[40];
    snprintf(uuid, sizeof(uuid), "%08x-%04x-4%03x-%04x-%012llx", (unsigned)(a >> 32), (unsigned)(a >> 16) & 0xffffu,
             (unsigned)a & 0xfffu, (unsigned)(0x8000u | ((b >> 48) & 0x3fffu)),
             (unsigned long long)(b & 0xffffffffffffull));
    hid_t o = H5Oopen(w->file, w->typed[i], H5P_DEFAULT);
    ss_status st = o < 0 ? ss_fail(ctx, SS_ERR_IO, "%s: cannot open %s", w->final_path, w->typed[i])
                         : ss_h5_attr_str(ctx, o, "object_id", uuid, w->typed[i]);
    if (o >= 0) H5Oclose(o);
    SS_TRY(st);
  }
  return SS_OK;
}

static void release(ss_nwb_writer *w) {
  if (w->data >= 0) H5Dclose(w->data);
  if (w->timestamps >= 0) H5Dclose(w->timestamps);
  free(w->buf);
  free(w);
}

ss_status ss_nwb_writer_close(ss_ctx *ctx, ss_nwb_writer *w) {
  ss_status st = flush(ctx, w);
  if (st == SS_OK) st = write_ids(ctx, w);
  if (w->data >= 0) H5Dclose(w->data);
  if (w->timestamps >= 0) H5Dclose(w->timestamps);
  w->data = w->timestamps = -1;
  if (st == SS_OK && ss_h5_close_checked(w->file) < 0)
    st = ss_fail(ctx, SS_ERR_IO, "%s: cannot finish the file (a write failed)", w->final_path);
  else if (st != SS_OK) ss_h5_close_discard(w->file);
  w->file = -1;
  if (st == SS_OK) st = ss_atomic_commit(ctx, &w->af);
  else ss_atomic_abort(&w->af);
  release(w);
  return st;
}

void ss_nwb_writer_abort(ss_nwb_writer *w) {
  if (!w) return;
  if (w->data >= 0) H5Dclose(w->data);
  if (w->timestamps >= 0) H5Dclose(w->timestamps);
  w->data = w->timestamps = -1;
  ss_h5_close_discard(w->file);
  ss_atomic_abort(&w->af);
  release(w);
}
