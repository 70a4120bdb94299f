/* source_hdf5.c — the HDF5 back-ends: NWB 2.x, Kwik .raw.kwd and plain HDF5 datasets. Each only
 * finds its data and metadata (rate, scale, positions); the samples themselves are read by the
 * shared store (source_store.c), for which this file maps the dataset's storage to file offsets. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define SS_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SS_ASAN 1
#endif
#endif
#if defined(SS_ASAN) || defined(__SANITIZE_UNDEFINED__)
#define SS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(undefined_behavior_sanitizer)
#define SS_SANITIZED 1
#endif
#endif
#ifdef SS_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SS_ASAN
#include <sanitizer/asan_interface.h>
#endif

#include "core/log.h"
#include "io/h5_util.h"
#include "io/source_internal.h"

#define MAX_PREAD_TILES (1 << 20) /* beyond this many chunks, read through HDF5 instead */
#define TIMESTAMP_BLOCK 65536     /* timestamps checked this many at a time */
#define TIMESTAMP_TOLERANCE 0.01  /* relative deviation of one interval from 1/rate */
#define NWB_ELECTRODES "general/extracellular_ephys/electrodes"
#define UV_PER_VOLT 1e6

typedef struct {
  hid_t fid;
  const char *file;
  char group[SS_SOURCE_NAME_MAX]; /* NWB series or Kwik recording group */
} h5src;

int ss_source_is_hdf5(const char *path) {
  ss_h5_quiet();
  return H5Fis_hdf5(path) > 0;
}

/* ---------------------------------------------------------------- locating the data */

static int is_series(hid_t fid, const char *path) {
  char type[64];
  if (!ss_h5_is_group(fid, path)) return 0;
  hid_t g = H5Gopen2(fid, path, H5P_DEFAULT);
  int ok = ss_h5_read_attr_str(g, "neurodata_type", type, sizeof(type)) && strcmp(type, "ElectricalSeries") == 0;
  H5Gclose(g);
  return ok;
}

typedef struct {
  hid_t fid;
  const char *parent;
  int want_series; /* 1: ElectricalSeries only; 0: any group */
  char first[SS_SOURCE_NAME_MAX];
  char names[1024]; /* comma-separated, for messages */
  int count;
} child_scan;

static herr_t scan_child(hid_t g, const char *name, const H5L_info_t *li, void *arg) {
  (void)g;
  (void)li;
  child_scan *c = arg;
  char path[SS_SOURCE_NAME_MAX];
  snprintf(path, sizeof(path), "%s/%s", c->parent, name);
  if (c->want_series ? !is_series(c->fid, path) : !ss_h5_is_group(c->fid, path)) return 0;
  if (!c->first[0]) snprintf(c->first, sizeof(c->first), "%s", name);
  c->count++;
  size_t used = strlen(c->names);
  snprintf(c->names + used, sizeof(c->names) - used, "%s%s", used ? ", " : "", name);
  return 0;
}

static void scan_children(hid_t fid, const char *parent, int want_series, child_scan *c) {
  memset(c, 0, sizeof(*c));
  c->fid = fid;
  c->parent = parent;
  c->want_series = want_series;
  if (!ss_h5_is_group(fid, parent)) return;
  H5Literate_by_name(fid, parent, H5_INDEX_NAME, H5_ITER_INC, NULL, scan_child, c, H5P_DEFAULT);
}

static int has_electrical_series(hid_t fid) {
  child_scan c;
  scan_children(fid, "/acquisition", 1, &c);
  return c.first[0] != 0;
}

static ss_status nwb_locate(ss_ctx *ctx, h5src *h, const char *series) {
  child_scan c;
  scan_children(h->fid, "/acquisition", 1, &c);
  if (series && *series) {
    ss_h5_path(h->group, sizeof(h->group), "/acquisition/%s", series);
    if (!is_series(h->fid, h->group))
      return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: no such ElectricalSeries (available: %s)", h->file, h->group,
                     c.names[0] ? c.names : "none");
  } else {
    if (!c.first[0]) return ss_fail(ctx, SS_ERR_INPUT, "%s: /acquisition: no ElectricalSeries", h->file);
    /* an LFP series beside the raw one is common: sorting the first by name would be a guess */
    if (c.count > 1)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: /acquisition holds %d ElectricalSeries (%s): name one with --series",
                     h->file, c.count, c.names);
    ss_h5_path(h->group, sizeof(h->group), "/acquisition/%s", c.first);
  }
  return SS_OK;
}

static ss_status kwik_locate(ss_ctx *ctx, h5src *h, const char *recording) {
  child_scan c;
  scan_children(h->fid, "/recordings", 0, &c);
  const char *name = recording && *recording ? recording : ss_h5_is_group(h->fid, "/recordings/0") ? "0" : c.first;
  ss_h5_path(h->group, sizeof(h->group), "/recordings/%s", name);
  if (!*name || !ss_h5_is_group(h->fid, h->group))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: no such recording (available: %s)", h->file, h->group,
                   c.names[0] ? c.names : "none");
  return SS_OK;
}

/* ---------------------------------------------------------------- the dataset and its storage */

static ss_status check_dataset(ss_ctx *ctx, h5src *h, const char *path, ss_layout layout, ss_source_info *info,
                               hid_t *dset, ss_elem *elem) {
  if (!ss_h5_is_dataset(h->fid, path)) return ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: missing", h->file, path);
  hid_t d = H5Dopen2(h->fid, path, H5P_DEFAULT), t = H5Dget_type(d);
  int64_t dims[8];
  int rank = ss_h5_shape(d, dims);
  char tn[32];
  ss_h5_type_name(t, tn, sizeof(tn));
  H5T_class_t cls = H5Tget_class(t);
  size_t size = H5Tget_size(t);
  H5Tclose(t);
  ss_status st = SS_OK;
  const char *shape = layout == SS_LAYOUT_TIME_MAJOR ? "time x channels" : "channels x time";
  if (rank != 2)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: expected rank 2 (%s), got rank %d", h->file, path, shape, rank);
  else if (!(cls == H5T_INTEGER && strcmp(tn, "int16") == 0) && !(cls == H5T_FLOAT && (size == 4 || size == 8)))
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: expected int16, float32 or float64 samples, got %s", h->file, path,
                 tn);
  if (st != SS_OK) {
    H5Dclose(d);
    return st;
  }
  int td = layout == SS_LAYOUT_TIME_MAJOR ? 0 : 1;
  info->n_samples = dims[td];
  char detail[128], field[SS_SOURCE_NAME_MAX + 16];
  snprintf(detail, sizeof(detail), " (shape %lld x %lld, %s)", (long long)dims[0], (long long)dims[1], shape);
  snprintf(field, sizeof(field), "dataset %s", path);
  if (dims[1 - td] == 0)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: zero channels (shape %lld x %lld, %s)", h->file, path,
                 (long long)dims[0], (long long)dims[1], shape);
  else if (dims[1 - td] > SS_SOURCE_MAX_CHANNELS)
    st = ss_source_check_channels(ctx, h->file, field, dims[1 - td], detail);
  else if (dims[td] == 0)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: no samples (shape %lld x %lld, %s)", h->file, path,
                 (long long)dims[0], (long long)dims[1], shape);
  if (st != SS_OK) {
    H5Dclose(d);
    return st;
  }
  info->n_channels = (int)dims[1 - td];
  *elem = cls == H5T_INTEGER ? SS_ELEM_I16 : size == 4 ? SS_ELEM_F32 : SS_ELEM_F64;
  ss_h5_path(info->dtype, sizeof(info->dtype), "%s", tn);
  ss_h5_path(info->dataset, sizeof(info->dataset), "%s", path);
  info->layout = layout;
  *dset = d;
  return SS_OK;
}

/* 1 when dataset d is stored in h's own file; 0 when an external link led into another file (an NWB
 * file whose series lives elsewhere), whose offsets mean nothing in h->file. */
static int in_own_file(const h5src *h, hid_t d) {
  char a[SS_SOURCE_PATH_MAX], b[SS_SOURCE_PATH_MAX];
  hid_t f = H5Iget_file_id(d);
  ssize_t na = H5Fget_name(h->fid, a, sizeof(a)), nb = f >= 0 ? H5Fget_name(f, b, sizeof(b)) : -1;
  if (f >= 0) H5Fclose(f);
  return na > 0 && nb > 0 && (size_t)na < sizeof(a) && (size_t)nb < sizeof(b) && strcmp(a, b) == 0;
}

/* Map the dataset's storage to file offsets when it can be read with pread: in h's own file,
 * little-endian, no filters, no external storage or user block, contiguous or chunked with a sane
 * number of chunks. Returns 1 when mapped, 0 when the library must read it, -1 when out of memory (recorded in ctx). */
static int map_storage(ss_ctx *ctx, h5src *h, hid_t d, ss_store *s) {
  if (!in_own_file(h, d)) return 0;
  const hid_t le[] = {H5T_STD_I16LE, H5T_IEEE_F32LE, H5T_IEEE_F64LE};
  hid_t t = H5Dget_type(d), dcpl = H5Dget_create_plist(d), fcpl = H5Fget_create_plist(h->fid);
  hsize_t ublock = 0;
  H5Pget_userblock(fcpl, &ublock);
  H5D_layout_t layout = H5Pget_layout(dcpl);
  int ok = H5Tequal(t, le[s->elem]) > 0 && H5Pget_nfilters(dcpl) == 0 && H5Pget_external_count(dcpl) == 0 &&
           ublock == 0 && (layout == H5D_CONTIGUOUS || layout == H5D_CHUNKED);
  if (ok && layout == H5D_CHUNKED) {
    hsize_t c[2];
    ok = H5Pget_chunk(dcpl, 2, c) == 2;
    s->cdims[0] = (int64_t)c[0];
    s->cdims[1] = (int64_t)c[1];
  } else {
    s->cdims[0] = s->dims[0];
    s->cdims[1] = s->dims[1];
  }
  H5Pclose(fcpl);
  H5Pclose(dcpl);
  H5Tclose(t);
  if (!ok) return 0;
  s->grid[0] = (s->dims[0] + s->cdims[0] - 1) / s->cdims[0];
  s->grid[1] = (s->dims[1] + s->cdims[1] - 1) / s->cdims[1];
  if (s->grid[0] * s->grid[1] > MAX_PREAD_TILES) return 0;
  if (SS_ALLOC(ctx, s->tile_off, (size_t)(s->grid[0] * s->grid[1]), "chunk offsets") != SS_OK) return -1;
  for (int64_t i = 0; i < s->grid[0] * s->grid[1]; i++) {
    haddr_t addr = HADDR_UNDEF;
    if (layout == H5D_CONTIGUOUS) {
      addr = H5Dget_offset(d);
    } else {
      hsize_t coord[2] = {(hsize_t)((i / s->grid[1]) * s->cdims[0]), (hsize_t)((i % s->grid[1]) * s->cdims[1])};
      unsigned mask = 0;
      hsize_t bytes = 0;
      if (H5Dget_chunk_info_by_coord(d, coord, &mask, &addr, &bytes) < 0) return 0;
    }
    s->tile_off[i] = addr == HADDR_UNDEF ? -1 : (int64_t)addr; /* unwritten: the fill value, zero */
  }
  s->fd = open(h->file, O_RDONLY);
  struct stat sb;
  s->file_size = s->fd >= 0 && fstat(s->fd, &sb) == 0 ? (int64_t)sb.st_size : -1;
#ifdef POSIX_FADV_SEQUENTIAL
  if (s->fd >= 0) posix_fadvise(s->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  return s->fd >= 0;
}

/* Refuse a dataset whose declared size the file cannot back: contiguous storage smaller than
 * declared (or past the end of the file), or chunked storage with no chunk at all. Reading it would
 * produce fill values for as long as the declared extent, which is not a recording. */
static ss_status check_storage(ss_ctx *ctx, h5src *h, hid_t d, const char *path, const ss_store *s) {
  hid_t dcpl = H5Dget_create_plist(d);
  H5D_layout_t layout = H5Pget_layout(dcpl);
  int external = H5Pget_external_count(dcpl) > 0;
  H5Pclose(dcpl);
  if (external || (layout != H5D_CONTIGUOUS && layout != H5D_CHUNKED)) return SS_OK;
  uint64_t declared = (uint64_t)s->dims[0] * (uint64_t)s->dims[1] * s->elem_size; /* < 2^63: HDF5 bounds the extent */
  uint64_t stored = H5Dget_storage_size(d);
  if (layout == H5D_CONTIGUOUS) {
    haddr_t addr = H5Dget_offset(d);
    struct stat sb;
    if (addr != HADDR_UNDEF && in_own_file(h, d) && stat(h->file, &sb) == 0 && (uint64_t)sb.st_size < addr + stored)
      stored = (uint64_t)sb.st_size > addr ? (uint64_t)sb.st_size - addr : 0; /* the file was cut short */
    if (stored >= declared) return SS_OK;
  } else if (stored > 0) {
    return SS_OK;
  }
  char stores[64];
  if (layout == H5D_CONTIGUOUS) snprintf(stores, sizeof(stores), "%llu bytes", (unsigned long long)stored);
  else snprintf(stores, sizeof(stores), "no chunk");
  return ss_fail(ctx, SS_ERR_INPUT,
                 "%s: dataset %s: declares %lld x %lld %s samples (%llu bytes), the file stores %s "
                 "of them (%s)",
                 h->file, path, (long long)s->dims[0], (long long)s->dims[1],
                 s->elem == SS_ELEM_I16   ? "int16"
                 : s->elem == SS_ELEM_F32 ? "float32"
                                          : "float64",
                 (unsigned long long)declared, stores, layout == H5D_CONTIGUOUS ? "contiguous" : "chunked");
}

static ss_status open_store(ss_ctx *ctx, h5src *h, const char *path, ss_layout layout, ss_source_info *info,
                            ss_store *s) {
  hid_t d = -1;
  SS_TRY(check_dataset(ctx, h, path, layout, info, &d, &s->elem));
  s->elem_size = s->elem == SS_ELEM_I16 ? 2 : s->elem == SS_ELEM_F32 ? 4 : 8;
  s->transposed = layout == SS_LAYOUT_CHANNEL_MAJOR;
  int64_t dims[8];
  ss_h5_shape(d, dims);
  s->dims[0] = dims[0];
  s->dims[1] = dims[1];
  ss_status st = check_storage(ctx, h, d, path, s);
  if (st != SS_OK) {
    H5Dclose(d);
    return st;
  }
  const int mapped = map_storage(ctx, h, d, s);
  if (mapped != 0) {
    H5Dclose(d);
    return mapped > 0 ? SS_OK : SS_ERR_NOMEM;
  }
  free(s->tile_off);
  s->tile_off = NULL;
  if (s->fd >= 0) close(s->fd);
  s->fd = -1;
  s->h5dset = d; /* read through the library; the store now owns the file too */
  s->h5file = h->fid;
  h->fid = -1;
  return SS_OK;
}

/* ---------------------------------------------------------------- NWB metadata */

static double unit_to_uv(const char *unit) {
  if (!strcmp(unit, "volts") || !strcmp(unit, "volt") || !strcmp(unit, "V")) return UV_PER_VOLT;
  if (!strcmp(unit, "millivolts") || !strcmp(unit, "mV")) return 1e3;
  if (!strcmp(unit, "microvolts") || !strcmp(unit, "uV") || !strcmp(unit, "\xc2\xb5V")) return 1.0;
  return 0.0;
}

static ss_status read_block(ss_ctx *ctx, h5src *h, hid_t d, const char *path, int64_t start, int64_t n, double *out) {
  hsize_t st[1] = {(hsize_t)start}, cnt[1] = {(hsize_t)n};
  hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, cnt, NULL);
  herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
  if (e >= 0) e = H5Dread(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, out);
  H5Sclose(ms);
  H5Sclose(fs);
  return e < 0 ? ss_fail(ctx, SS_ERR_IO, "%s: %s: read failed", h->file, path) : SS_OK;
}

/* Check every interval against the rate from the first and last timestamps, a block at a time. */
static ss_status check_timestamps(ss_ctx *ctx, h5src *h, hid_t d, const char *path, int64_t n, double *buf,
                                  ss_source_info *info) {
  double first, last;
  SS_TRY(read_block(ctx, h, d, path, 0, 1, &first));
  SS_TRY(read_block(ctx, h, d, path, n - 1, 1, &last));
  double dt = (last - first) / (double)(n - 1), prev = first;
  for (int64_t b = 0; b < n; b += TIMESTAMP_BLOCK) {
    int64_t m = n - b < TIMESTAMP_BLOCK ? n - b : TIMESTAMP_BLOCK;
    SS_TRY(read_block(ctx, h, d, path, b, m, buf));
    for (int64_t i = (b == 0); i < m; i++) {
      double t = buf[i], step = t - prev;
      if (!isfinite(t))
        return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: timestamp %lld is not finite (%g)", h->file, path,
                       (long long)(b + i), t);
      if (!(step > 0))
        return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: not strictly increasing at index %lld (%.9g after %.9g)", h->file,
                       path, (long long)(b + i), t, prev);
      if (fabs(step - dt) > TIMESTAMP_TOLERANCE * dt)
        return ss_fail(ctx, SS_ERR_INPUT,
                       "%s: %s: irregular sampling at index %lld: interval %.9g s, expected %.9g s (%.9g Hz from the "
                       "first and last timestamps, tolerance %g%%)",
                       h->file, path, (long long)(b + i), step, dt, 1.0 / dt, TIMESTAMP_TOLERANCE * 100);
      prev = t;
    }
  }
  SS_TRY(ss_source_check_rate(ctx, h->file, path, 1.0 / dt));
  info->rate_hz = 1.0 / dt;
  info->start_time_s = first;
  info->from_timestamps = 1;
  return SS_OK;
}

static ss_status nwb_timing_from_timestamps(ss_ctx *ctx, h5src *h, const char *path, ss_source_info *info) {
  hid_t d = H5Dopen2(h->fid, path, H5P_DEFAULT);
  int64_t dims[8];
  int rank = ss_h5_shape(d, dims);
  ss_status st = SS_OK;
  double *buf = NULL;
  if (rank != 1 || dims[0] != info->n_samples)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected %lld timestamps (one per sample), got %s%lld", h->file, path,
                 (long long)info->n_samples, rank == 1 ? "" : "a non-vector of ", (long long)(rank >= 1 ? dims[0] : 0));
  else if (dims[0] < 2)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: a rate needs at least 2 timestamps, got %lld", h->file, path,
                 (long long)dims[0]);
  else if ((st = SS_ALLOC(ctx, buf, TIMESTAMP_BLOCK, "timestamps")) == SS_OK)
    st = check_timestamps(ctx, h, d, path, dims[0], buf, info);
  free(buf);
  H5Dclose(d);
  return st;
}

static ss_status nwb_timing(ss_ctx *ctx, h5src *h, ss_source_info *info) {
  char path[SS_SOURCE_NAME_MAX + 32];
  snprintf(path, sizeof(path), "%s/starting_time", h->group);
  if (ss_h5_is_dataset(h->fid, path)) {
    hid_t d = H5Dopen2(h->fid, path, H5P_DEFAULT);
    double start = 0.0, rate = 0.0;
    int have_rate = ss_h5_read_attr_f64(d, "rate", &rate);
    herr_t e = H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &start);
    H5Dclose(d);
    if (!have_rate) return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: attribute rate: missing or not a number", h->file, path);
    char field[SS_SOURCE_NAME_MAX + 64];
    snprintf(field, sizeof(field), "%s: attribute rate", path);
    SS_TRY(ss_source_check_rate(ctx, h->file, field, rate));
    if (e < 0 || !isfinite(start)) return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected a finite number", h->file, path);
    info->rate_hz = rate;
    info->start_time_s = start;
    return SS_OK;
  }
  snprintf(path, sizeof(path), "%s/timestamps", h->group);
  if (ss_h5_is_dataset(h->fid, path)) return nwb_timing_from_timestamps(ctx, h, path, info);
  return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: neither starting_time nor timestamps", h->file, h->group);
}

static ss_status nwb_scale(ss_ctx *ctx, h5src *h, ss_source_info *info) {
  hid_t d = H5Dopen2(h->fid, info->dataset, H5P_DEFAULT);
  double conversion = 1.0, offset = 0.0;
  char unit[64] = "volts";
  ss_h5_read_attr_f64(d, "conversion", &conversion);
  ss_h5_read_attr_f64(d, "offset", &offset);
  ss_h5_read_attr_str(d, "unit", unit, sizeof(unit));
  H5Dclose(d);
  double per_unit = unit_to_uv(unit);
  if (per_unit == 0.0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: attribute unit: expected volts, millivolts or microvolts, got \"%s\"",
                   h->file, info->dataset, unit);
  if (!isfinite(conversion) || conversion == 0.0 || !isfinite(offset))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: conversion/offset: expected finite numbers (conversion != 0), got %g/%g",
                   h->file, info->dataset, conversion, offset);
  SS_TRY(ss_source_info_scale(ctx, info, conversion * per_unit));
  info->offset_uv = offset * per_unit;
  info->scale_known = 1;
  char path[SS_SOURCE_NAME_MAX + 32];
  snprintf(path, sizeof(path), "%s/channel_conversion", h->group);
  if (!ss_h5_exists(h->fid, path)) return SS_OK;
  double *cc = NULL;
  int64_t n = 0;
  SS_TRY(ss_h5_read_f64_vector(ctx, h->fid, path, h->file, &cc, &n));
  ss_status st = SS_OK;
  if (n != info->n_channels)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected %d values (one per channel), got %lld", h->file, path,
                 info->n_channels, (long long)n);
  if (st == SS_OK) st = ss_source_check_scales(ctx, h->file, path, cc, info->n_channels);
  for (int c = 0; c < info->n_channels && st == SS_OK; c++) info->uv_per_step[c] *= cc[c];
  free(cc);
  return st;
}

/* Electrode positions: the series' electrodes region into the electrodes table's rel_x/rel_y (probe
 * coordinates, NWB >= 2.5) or else x/y. A table without position columns means no positions; a
 * table that has them but does not fit the series (lengths, region rows, non-finite values) is
 * refused, since `sort` would otherwise fall back to a default probe. */
static ss_status nwb_positions(ss_ctx *ctx, h5src *h, ss_source_info *info) {
  const char *cols[2][2] = {{NWB_ELECTRODES "/rel_x", NWB_ELECTRODES "/rel_y"},
                            {NWB_ELECTRODES "/x", NWB_ELECTRODES "/y"}};
  int k = ss_h5_is_dataset(h->fid, cols[0][0]) && ss_h5_is_dataset(h->fid, cols[0][1]) ? 0 : 1;
  if (!ss_h5_is_dataset(h->fid, cols[k][0]) || !ss_h5_is_dataset(h->fid, cols[k][1])) return SS_OK;
  double *x = NULL, *y = NULL, *rows = NULL;
  int64_t nx = 0, ny = 0, nr = 0;
  char region[SS_SOURCE_NAME_MAX + 32];
  snprintf(region, sizeof(region), "%s/electrodes", h->group);
  int has_region = ss_h5_is_dataset(h->fid, region);
  ss_status st = ss_h5_read_f64_vector(ctx, h->fid, cols[k][0], h->file, &x, &nx);
  if (st == SS_OK) st = ss_h5_read_f64_vector(ctx, h->fid, cols[k][1], h->file, &y, &ny);
  if (st == SS_OK && nx != ny)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: %lld values, expected %lld like %s", h->file, cols[k][0], (long long)nx,
                 (long long)ny, cols[k][1]);
  if (st == SS_OK && has_region) st = ss_h5_read_f64_vector(ctx, h->fid, region, h->file, &rows, &nr);
  if (st == SS_OK && (has_region ? nr : nx) != info->n_channels)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: %lld rows, expected %d (one per channel of the series)", h->file,
                 has_region ? region : cols[k][0], (long long)(has_region ? nr : nx), info->n_channels);
  if (st == SS_OK) st = SS_ALLOC(ctx, info->x_um, (size_t)info->n_channels, "positions");
  if (st == SS_OK) st = SS_ALLOC(ctx, info->y_um, (size_t)info->n_channels, "positions");
  for (int c = 0; c < info->n_channels && st == SS_OK; c++) {
    double r = rows ? rows[c] : c;
    if (!(r >= 0 && r < (double)nx) || r != floor(r))
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: channel %d: row %.9g is outside the electrodes table (%lld rows)",
                   h->file, region, c, r, (long long)nx);
    else if (!isfinite(x[(int64_t)r]) || !isfinite(y[(int64_t)r]))
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: row %lld: position (%.9g, %.9g) is not finite", h->file, NWB_ELECTRODES,
                   (long long)r, x[(int64_t)r], y[(int64_t)r]);
    else info->x_um[c] = x[(int64_t)r], info->y_um[c] = y[(int64_t)r];
  }
  info->has_positions = st == SS_OK;
  free(x);
  free(y);
  free(rows);
  return st;
}

static ss_status nwb_metadata(ss_ctx *ctx, h5src *h, ss_source_info *info) {
  SS_TRY(nwb_timing(ctx, h, info));
  SS_TRY(nwb_scale(ctx, h, info));
  return nwb_positions(ctx, h, info);
}

/* ---------------------------------------------------------------- Kwik and plain metadata */

/* 1 when the object's attribute is stored as an integer: Open Ephys writes the recording's
 * start_time as a sample count (uint64), the Kwik layout as seconds (float). */
static int attr_is_integer(hid_t obj, const char *name) {
  if (H5Aexists(obj, name) <= 0) return 0;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1;
  int integer = t >= 0 && H5Tget_class(t) == H5T_INTEGER;
  if (t >= 0) H5Tclose(t);
  if (a >= 0) H5Aclose(a);
  return integer;
}

static ss_status kwik_metadata(ss_ctx *ctx, h5src *h, const ss_source_spec *spec, ss_source_info *info) {
  hid_t g = H5Gopen2(h->fid, h->group, H5P_DEFAULT), d = H5Dopen2(h->fid, info->dataset, H5P_DEFAULT);
  double rate = 0.0, start = 0.0;
  int have = ss_h5_read_attr_f64(g, "sample_rate", &rate) || ss_h5_read_attr_f64(d, "sample_rate", &rate);
  ss_h5_read_attr_f64(g, "start_time", &start);
  int in_samples = attr_is_integer(g, "start_time");
  H5Dclose(d);
  H5Gclose(g);
  if (!have) rate = spec->rate_hz;
  if (!have && !(rate > 0))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: attribute sample_rate: expected a number > 0, got none (give --rate HZ)",
                   h->file, h->group);
  char field[SS_SOURCE_NAME_MAX + 64];
  snprintf(field, sizeof(field), "%s: attribute sample_rate", h->group);
  SS_TRY(ss_source_check_rate(ctx, h->file, have ? field : "--rate", rate));
  info->rate_hz = rate;
  info->start_time_s = !isfinite(start) ? 0.0 : in_samples ? start / rate : start;
  info->scale_known = spec->uv_per_step > 0;
  SS_TRY(ss_source_info_scale(ctx, info, spec->uv_per_step > 0 ? spec->uv_per_step : 1.0));
  /* Open Ephys writes µV per bit per channel here */
  char app[SS_SOURCE_NAME_MAX + 32];
  snprintf(app, sizeof(app), "%s/application_data", h->group);
  if (ss_h5_is_group(h->fid, app)) {
    g = H5Gopen2(h->fid, app, H5P_DEFAULT);
    int found = ss_h5_read_attr_f64s(g, "channel_bit_volts", info->uv_per_step, info->n_channels);
    H5Gclose(g);
    snprintf(field, sizeof(field), "%s: attribute channel_bit_volts", app);
    if (found) SS_TRY(ss_source_check_scales(ctx, h->file, field, info->uv_per_step, info->n_channels));
    if (found) info->scale_known = 1;
  }
  return SS_OK;
}

static ss_status plain_metadata(ss_ctx *ctx, h5src *h, const ss_source_spec *spec, ss_source_info *info) {
  if (!(spec->rate_hz > 0) || !isfinite(spec->rate_hz))
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: dataset %s: a plain HDF5 dataset needs the sampling rate (--rate HZ), got %g", h->file,
                   info->dataset, spec->rate_hz);
  SS_TRY(ss_source_check_rate(ctx, h->file, "--rate", spec->rate_hz));
  info->rate_hz = spec->rate_hz;
  info->scale_known = spec->uv_per_step > 0;
  return ss_source_info_scale(ctx, info, spec->uv_per_step > 0 ? spec->uv_per_step : 1.0);
}

/* ---------------------------------------------------------------- entry */

static ss_status choose_format(ss_ctx *ctx, h5src *h, const ss_source_spec *spec, ss_source_format *f) {
  *f = spec->format;
  if (*f == SS_FORMAT_AUTO) {
    if (spec->dataset && *spec->dataset) *f = SS_FORMAT_HDF5;
    else if (has_electrical_series(h->fid)) *f = SS_FORMAT_NWB;
    else if (ss_h5_is_group(h->fid, "/recordings")) *f = SS_FORMAT_KWIK;
    else
      return ss_fail(ctx, SS_ERR_INPUT,
                     "%s: neither NWB (no ElectricalSeries under /acquisition) nor Kwik (no /recordings): name the "
                     "data with --dataset PATH",
                     h->file);
  }
  if (*f == SS_FORMAT_HDF5 && !(spec->dataset && *spec->dataset))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: a plain HDF5 file needs the dataset path (--dataset PATH)", h->file);
  return SS_OK;
}

/* ---------------------------------------------------------------- .kwik → .raw.kwd */

/* The .raw.kwd a .kwik's recording points to: /recordings/<r>/raw's hdf5_path attribute
 * ("{raw.kwd}/..." for the sibling STEM.raw.kwd, or "FILE.raw.kwd/..." beside the .kwik), else
 * STEM.raw.kwd, else the one STEM_*.raw.kwd (Open Ephys adds the processor id). */
static ss_status kwik_follow(ss_ctx *ctx, const ss_source_spec *spec, char *kwd, size_t len) {
  const char *path = spec->path, *slash = strrchr(path, '/');
  int dir = slash ? (int)(slash - path + 1) : 0, stem = (int)(strlen(path) - strlen(".kwik"));
  char attr[SS_SOURCE_NAME_MAX] = "", group[SS_SOURCE_NAME_MAX + 32];
  snprintf(group, sizeof(group), "/recordings/%s/raw", spec->series && *spec->series ? spec->series : "0");
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open as HDF5", path);
  if (ss_h5_is_group(f, group)) {
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    ss_h5_read_attr_str(g, "hdf5_path", attr, sizeof(attr));
    H5Gclose(g);
  }
  H5Fclose(f);
  char *end = strstr(attr, ".raw.kwd");
  if (strncmp(attr, "{raw.kwd}", 9) == 0 || !end) snprintf(kwd, len, "%.*s.raw.kwd", stem, path);
  else snprintf(kwd, len, "%.*s%.*s.raw.kwd", dir, path, (int)(end - attr), attr);
  if (access(kwd, R_OK) == 0) return SS_OK;
  char pattern[SS_SOURCE_PATH_MAX + 16];
  snprintf(pattern, sizeof(pattern), "%.*s_*.raw.kwd", stem, path);
  glob_t gl;
  int found = glob(pattern, 0, NULL, &gl) == 0 ? (int)gl.gl_pathc : 0;
  if (found == 1) snprintf(kwd, len, "%s", gl.gl_pathv[0]);
  if (found) globfree(&gl);
  if (found == 1) return SS_OK;
  return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: the recording's samples are in a .raw.kwd: %s not found%s", path, group,
                 kwd, found > 1 ? " and several STEM_*.raw.kwd match: name one" : "");
}

static ss_status open_hdf5(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  const char *dot = strrchr(spec->path, '.');
  ss_source_spec followed;
  if (dot && strcmp(dot, ".kwik") == 0) {
    SS_TRY(kwik_follow(ctx, spec, info->data_path, sizeof(info->data_path)));
    followed = *spec;
    followed.path = info->data_path;
    spec = &followed;
  }
  h5src h = {H5Fopen(spec->path, H5F_ACC_RDONLY, H5P_DEFAULT), spec->path, ""};
  if (h.fid < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open as HDF5", spec->path);
  ss_source_format f;
  ss_status st = choose_format(ctx, &h, spec, &f);
  char data[SS_SOURCE_NAME_MAX + 8];
  if (st == SS_OK && f == SS_FORMAT_NWB) st = nwb_locate(ctx, &h, spec->series);
  if (st == SS_OK && f == SS_FORMAT_KWIK) st = kwik_locate(ctx, &h, spec->series);
  snprintf(data, sizeof(data), "%s/data", h.group);
  info->format = f;
  ss_layout layout = f == SS_FORMAT_HDF5 ? spec->layout : SS_LAYOUT_TIME_MAJOR;
  if (st == SS_OK) st = open_store(ctx, &h, f == SS_FORMAT_HDF5 ? spec->dataset : data, layout, info, store);
  if (st == SS_OK) {
    hid_t keep = h.fid < 0 ? store->h5file : h.fid; /* metadata reads need the file either way */
    h.fid = keep;
    st = f == SS_FORMAT_NWB    ? nwb_metadata(ctx, &h, info)
         : f == SS_FORMAT_KWIK ? kwik_metadata(ctx, &h, spec, info)
                               : plain_metadata(ctx, &h, spec, info);
    if (store->h5file == keep) h.fid = -1; /* owned by the store */
  }
  if (h.fid >= 0) H5Fclose(h.fid);
  return st;
}

/* ---------------------------------------------------------------- isolation */

/* HDF5 1.10 trusts the sizes and offsets in a file's metadata: on some corrupt files (a global heap
 * collection mutated under a variable-length string attribute, an object header of absurd size) it
 * loops forever, crashes, asks for tens of GiB or writes past its buffers inside the library, where
 * no check of ours can reach. So the metadata is read in a child process only, under a time limit,
 * and sent back through a pipe: a child killed by a signal, ending early or still running at the
 * limit refuses the file with one line. This process then opens only the samples' dataset (its
 * shape and type: no attributes, no global heap). Without fork the file is read here directly. */

/* The child's report: the outcome and a failure's message, then on success the info's per-channel
 * arrays (the pointers travel as presence flags). */
typedef struct {
  int32_t status, msg_len, has_scale, has_positions;
  ss_source_info info;
} child_report;

static void write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) _Exit(4);
    c += w, n -= (size_t)w;
  }
}

static void send_report(int fd, ss_status st, const ss_ctx *c, const ss_source_info *info) {
  child_report r;
  memset(&r, 0, sizeof(r));
  r.status = st;
  r.msg_len = st == SS_OK ? 0 : (int32_t)c->msg_len;
  r.info = *info;
  r.info.uv_per_step = r.info.x_um = r.info.y_um = NULL;
  r.has_scale = st == SS_OK && info->uv_per_step;
  r.has_positions = st == SS_OK && info->has_positions && info->x_um && info->y_um;
  const size_t bytes = (size_t)info->n_channels * sizeof(double);
  write_all(fd, &r, sizeof(r));
  write_all(fd, c->msg, (size_t)r.msg_len);
  if (r.has_scale) write_all(fd, info->uv_per_step, bytes);
  if (r.has_positions) write_all(fd, info->x_um, bytes), write_all(fd, info->y_um, bytes);
}

#ifdef SS_SANITIZED
/* Sanitizer builds (the test suite, the fuzzers): a report in the child is libhdf5's when the
 * faulting frame is the library's (an ASan report whose frame #0 is an interceptor such as free,
 * with no C source of ours, and frame #1 in libhdf5), and so is a death with no report at all (an
 * allocator CHECK on a heap that the uninstrumented library wrote over: our instrumented code would
 * have been reported at the write); the child then ends like the crash it is. A report from our own
 * code (any UBSan report: libhdf5 is not instrumented) ends it with SAN_EXIT, and the parent aborts,
 * so that the fuzzer and the sanitizer suite see our bug. The callbacks take no argument: the
 * verdict lives in the child's own copy of this variable (-1: no report yet, 0: ours, 1: libhdf5's). */
#define SAN_EXIT 86
static int san_in_library = -1;

static int frame_has(const char *report, const char *frame, const char *needle) {
  const char *f = strstr(report, frame);
  if (!f) return 0;
  char line[1024];
  size_t n = strcspn(f, "\n");
  snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) - 1 ? n : sizeof(line) - 1), f);
  return strstr(line, needle) != NULL;
}

static void san_report(const char *report) {
  san_in_library = !frame_has(report, "#0 ", ".c:") && frame_has(report, "#1 ", "libhdf5");
}

/* The sanitizers' hook for every report's SUMMARY line (it replaces the runtime's printing of it). */
void __sanitizer_report_error_summary(const char *summary);
void __sanitizer_report_error_summary(const char *summary) {
  fprintf(stderr, "%s\n", summary);
  if (strstr(summary, "UndefinedBehaviorSanitizer")) san_in_library = 0;
}

static void san_death(void) { _Exit(san_in_library != 0 ? 1 : SAN_EXIT); }
#endif

static void isolated_child(const ss_source_spec *spec, ss_source_info *info, int out) {
  static const int crash[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof(crash) / sizeof(crash[0]); i++) signal(crash[i], SIG_DFL); /* die quietly */
#ifdef SS_SANITIZED
  __sanitizer_set_death_callback(san_death); /* in place of a fuzzer's, which would claim the input */
#endif
#ifdef SS_ASAN
  __asan_set_error_report_callback(san_report);
#endif
  ss_ctx c;
  ss_ctx_init(&c);
  c.quiet = 1;
  c.log_level = SS_LOG_ERROR;
  ss_store store;
  ss_store_init(&store);
  send_report(out, open_hdf5(&c, spec, info, &store), &c, info);
  _Exit(0); /* no exit handlers: the parent's stdio buffers and libhdf5 stay the parent's */
}

/* Read the child's report until it closes the pipe (it exited or died), at most `limit` seconds and
 * `cap` bytes. Returns 1 when the pipe closed, 0 at the limit or on a failed read, -1 when the buffer
 * could not grow (the failure is in ctx). */
static int read_report(ss_ctx *ctx, int fd, double limit, size_t cap, unsigned char **buf, size_t *len) {
  const double t0 = ss_now();
  size_t have = 0;
  for (;;) {
    double left = limit - (ss_now() - t0);
    if (left <= 0) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, left > 1000.0 ? 1000000 : (int)(left * 1000.0) + 1);
    if (r < 0 && errno != EINTR) return 0; /* cannot wait with a limit: treat as past it */
    if (r <= 0) continue;
    if (*len == have) {
      if (have >= cap) return 0;
      if (ss_realloc(ctx, (void **)buf, have ? 2 * have : 4096, 1, "metadata report") != SS_OK) return -1;
      have = have ? 2 * have : 4096;
    }
    ssize_t n = read(fd, *buf + *len, have - *len);
    if (n == 0) return 1;
    if (n < 0 && errno != EINTR) return 0;
    if (n > 0) *len += (size_t)n;
  }
}

/* Take the info from the child's report (the path stays this process's). */
static ss_status adopt_report(ss_ctx *ctx, const char *path, const unsigned char *buf, size_t len,
                              ss_source_info *info) {
  child_report r;
  if (len < sizeof(r))
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: the HDF5 library ended reading the metadata without a result: a corrupt file", path);
  memcpy(&r, buf, sizeof(r));
  const int channels_ok = r.info.n_channels > 0 && r.info.n_channels <= SS_SOURCE_MAX_CHANNELS;
  const size_t bytes = channels_ok ? (size_t)r.info.n_channels * sizeof(double) : 0;
  const int sane = r.status >= SS_OK && r.status <= SS_ERR_INTERNAL && r.msg_len >= 0 && r.msg_len < SS_CTX_MSG_MAX &&
                   (r.status != SS_OK || channels_ok);
  if (!sane || len != sizeof(r) + (size_t)r.msg_len + bytes * (size_t)((r.has_scale != 0) + 2 * (r.has_positions != 0)))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: the HDF5 library returned a damaged metadata result: a corrupt file", path);
  const unsigned char *at = buf + sizeof(r);
  if (r.status != SS_OK) return ss_fail(ctx, (ss_status)r.status, "%.*s", (int)r.msg_len, (const char *)at);
  char keep[SS_SOURCE_PATH_MAX];
  memcpy(keep, info->path, sizeof(keep));
  free(info->uv_per_step), free(info->x_um), free(info->y_um);
  *info = r.info;
  memcpy(info->path, keep, sizeof(keep));
  info->has_positions = r.has_positions != 0;
  if (r.has_scale) SS_TRY(SS_ALLOC(ctx, info->uv_per_step, (size_t)info->n_channels, "channel scales"));
  if (r.has_scale) memcpy(info->uv_per_step, at, bytes), at += bytes;
  if (!r.has_positions) return SS_OK;
  SS_TRY(SS_ALLOC(ctx, info->x_um, (size_t)info->n_channels, "positions"));
  SS_TRY(SS_ALLOC(ctx, info->y_um, (size_t)info->n_channels, "positions"));
  memcpy(info->x_um, at, bytes);
  memcpy(info->y_um, at + bytes, bytes);
  return SS_OK;
}

/* Read the metadata in a child (above). *isolated = 0 when no child could be started. */
static ss_status read_isolated(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, int *isolated) {
  const double limit = spec->hdf5_limit_s > 0 ? spec->hdf5_limit_s : SS_SOURCE_HDF5_LIMIT_S;
  *isolated = 0;
  int fds[2];
  if (pipe(fds) != 0) return SS_OK;
  fcntl(fds[0], F_SETFD, FD_CLOEXEC); /* a program started meanwhile must hold neither end */
  fcntl(fds[1], F_SETFD, FD_CLOEXEC);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    isolated_child(spec, info, fds[1]);
  }
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return SS_OK;
  }
  *isolated = 1;
  unsigned char *buf = NULL;
  size_t len = 0, cap = sizeof(child_report) + SS_CTX_MSG_MAX + 3 * SS_SOURCE_MAX_CHANNELS * sizeof(double);
  const int ended = read_report(ctx, fds[0], limit, cap, &buf, &len);
  close(fds[0]);
  int status = 0;
  if (ended != 1) kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ss_status st;
  if (ended < 0) st = SS_ERR_NOMEM; /* the report buffer could not grow: recorded in ctx */
  else if (!ended)
    st = ss_fail(
        ctx, SS_ERR_INPUT,
        "%s: the HDF5 library did not finish reading the metadata in %g s: a corrupt file (or a very slow disk)",
        spec->path, limit);
  else if (WIFSIGNALED(status))
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: the HDF5 library crashed reading the metadata (signal %d): a corrupt file",
                 spec->path, WTERMSIG(status));
#ifdef SS_SANITIZED
  else if (WIFEXITED(status) && WEXITSTATUS(status) == SAN_EXIT) {
    fprintf(stderr, "%s: a sanitizer report from our own code in the metadata child (above)\n", spec->path);
    abort();
  }
#endif
  else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) /* 0 unless something ended it early */
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: the HDF5 library failed reading the metadata (exit %d): a corrupt file",
                 spec->path, WEXITSTATUS(status));
  else st = adopt_report(ctx, spec->path, buf, len, info);
  free(buf);
  return st;
}

/* After an isolated metadata read: open the samples' dataset only. */
static ss_status open_samples(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  const char *file = info->data_path[0] ? info->data_path : spec->path;
  h5src h = {H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), file, ""};
  if (h.fid < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open as HDF5", file);
  char dataset[sizeof(info->dataset)]; /* open_store writes info->dataset again */
  memcpy(dataset, info->dataset, sizeof(dataset));
  ss_status st = open_store(ctx, &h, dataset, info->layout, info, store);
  if (h.fid >= 0) H5Fclose(h.fid);
  return st;
}

ss_status ss_source_open_hdf5(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  ss_h5_quiet();
  int isolated = 0;
  SS_TRY(read_isolated(ctx, spec, info, &isolated));
  return isolated ? open_samples(ctx, spec, info, store) : open_hdf5(ctx, spec, info, store);
}
