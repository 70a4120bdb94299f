/* compare_load.c — spike trains for `compare` from the four places sortings live: our results file,
 * an NWB units table, a phy folder and KlustaKwik .clu + sample-index files. Every reader checks
 * shapes, types, lengths and values and names the file and field it rejects. */
#include <ctype.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/h5_util.h"
#include "io/klustakwik.h"
#include "io/npy.h"
#include "io/outset.h"
#include "tools/compare.h"

/* Time base of NWB spike times (seconds) when the file has no ElectricalSeries rate and none is
 * given: 1 µs resolution, rescaled to the other side's rate before matching. */
#define NWB_FALLBACK_RATE_HZ 1e6
#define LOAD_PATH_MAX 4096
#define RES_LINE_MAX 256

static int excluded(const ss_trains_load_opts *o, int64_t id) {
  for (int e = 0; o && e < o->n_exclude; e++)
    if (o->exclude[e] == id) return 1;
  return 0;
}

/* Drop excluded labels (in place) before building the trains. */
static int64_t drop_excluded(const ss_trains_load_opts *o, int64_t n, int64_t *times, int64_t *labels) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    if (!excluded(o, labels[i])) times[k] = times[i], labels[k] = labels[i], k++;
  return k;
}

/* --- HDF5 helpers ---------------------------------------------------------------------------- */

/* A whole 1-D integer dataset as int64. */
static ss_status read_i64_vector(ss_ctx *ctx, hid_t file, const char *path, const char *fname, int64_t **out,
                                 int64_t *n) {
  *out = NULL;
  *n = 0;
  if (!ss_h5_is_dataset(file, path)) return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: missing", fname, path);
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT), t = H5Dget_type(d);
  int64_t dims[8];
  int rank = ss_h5_shape(d, dims);
  char tn[32];
  ss_h5_type_name(t, tn, sizeof(tn));
  int is_int = H5Tget_class(t) == H5T_INTEGER;
  H5Tclose(t);
  ss_status st = SS_OK;
  if (rank != 1) st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected rank 1, got rank %d", fname, path, rank);
  else if (!is_int) st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected an integer type, got %s", fname, path, tn);
  else if ((st = SS_ALLOC(ctx, *out, dims[0] > 0 ? dims[0] : 1, path)) == SS_OK) {
    if (dims[0] > 0 && H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) {
      free(*out);
      *out = NULL;
      st = ss_fail(ctx, SS_ERR_IO, "%s: %s: read failed", fname, path);
    } else {
      *n = dims[0];
    }
  }
  H5Dclose(d);
  return st;
}

/* --- results file ---------------------------------------------------------------------------- */

static ss_status load_results(ss_ctx *ctx, hid_t f, const char *path, const ss_trains_load_opts *o,
                              ss_spike_trains *out) {
  double rate = 0;
  if (!ss_h5_read_attr_f64(f, "sample_rate", &rate))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: attribute sample_rate: missing", path);
  if (!(rate > 0) || !isfinite(rate))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: attribute sample_rate: expected a rate > 0 Hz, got %g", path, rate);
  int64_t *times = NULL, *labels = NULL, n = 0, nl = 0;
  ss_status st = read_i64_vector(ctx, f, "/spikes/time_samples", path, &times, &n);
  if (st == SS_OK && !ss_h5_is_dataset(f, "/spikes/cluster"))
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: /spikes/cluster: missing (the file holds no clustering yet)", path);
  if (st == SS_OK) st = read_i64_vector(ctx, f, "/spikes/cluster", path, &labels, &nl);
  if (st == SS_OK && nl != n)
    st = ss_fail(ctx, SS_ERR_INPUT,
                 "%s: /spikes/cluster: expected %" PRId64 " values (as /spikes/time_samples), got %" PRId64, path, n,
                 nl);
  if (st == SS_OK) {
    n = drop_excluded(o, n, times, labels);
    st = ss_spike_trains_from_labels(ctx, n, times, labels, rate, path, out);
  }
  free(times);
  free(labels);
  return st;
}

/* --- NWB units table ------------------------------------------------------------------------- */

/* Rate and start time of the first ElectricalSeries under /acquisition that has starting_time. */
static int nwb_series_timing(hid_t f, double *rate, double *start) {
  if (!ss_h5_is_group(f, "/acquisition")) return 0;
  hid_t g = H5Gopen2(f, "/acquisition", H5P_DEFAULT);
  H5G_info_t info;
  int found = 0;
  if (H5Gget_info(g, &info) >= 0) {
    for (hsize_t i = 0; i < info.nlinks && !found; i++) {
      char name[256], dpath[512];
      if (H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof(name), H5P_DEFAULT) < 0) continue;
      snprintf(dpath, sizeof(dpath), "/acquisition/%s/starting_time", name);
      if (!ss_h5_is_dataset(f, dpath)) continue;
      hid_t d = H5Dopen2(f, dpath, H5P_DEFAULT);
      double r = 0, s0 = 0;
      if (ss_h5_read_attr_f64(d, "rate", &r) && r > 0 && isfinite(r) &&
          H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &s0) >= 0 && isfinite(s0)) {
        *rate = r, *start = s0, found = 1;
      }
      H5Dclose(d);
    }
  }
  H5Gclose(g);
  return found;
}

static ss_status nwb_check_index(ss_ctx *ctx, const char *path, const int64_t *index, int64_t n_units,
                                 int64_t n_times) {
  int64_t prev = 0;
  for (int64_t u = 0; u < n_units; u++) {
    if (index[u] < prev || index[u] > n_times)
      return ss_fail(ctx, SS_ERR_INPUT,
                     "%s: /units/spike_times_index[%" PRId64 "]: expected a non-decreasing end in [%" PRId64
                     ", %" PRId64 "], got %" PRId64,
                     path, u, prev, n_times, index[u]);
    prev = index[u];
  }
  if (n_units > 0 && prev != n_times)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: /units/spike_times_index: last end is %" PRId64 ", expected %" PRId64
                   " (the length of /units/spike_times)",
                   path, prev, n_times);
  return SS_OK;
}

static int cmp_i64(const void *pa, const void *pb) {
  int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
  return (a > b) - (a < b);
}

/* Seconds to samples of the series' time base. */
static ss_status nwb_sample(ss_ctx *ctx, const char *path, const double *sec, int64_t k, double rate, double start,
                            int64_t *out) {
  if (!isfinite(sec[k]))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: /units/spike_times[%" PRId64 "]: expected a finite time, got %g", path, k,
                   sec[k]);
  double s = (sec[k] - start) * rate;
  if (s < -0.5 || s > 9.2e18)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: /units/spike_times[%" PRId64 "]: expected a time >= the recording start (%g s), got %g", path,
                   k, start, sec[k]);
  *out = llround(s);
  return SS_OK;
}

/* The trains, units in ascending id order (units without spikes kept), and their SNRs. */
static ss_status nwb_build(ss_ctx *ctx, const char *path, const double *sec, const int64_t *index, const int64_t *ids,
                           const double *snr, int64_t n_units, double rate, double start, const ss_trains_load_opts *o,
                           ss_spike_trains *out) {
  int64_t *order, k = 0, pos = 0;
  SS_TRY(SS_ALLOC(ctx, order, n_units > 0 ? n_units : 1, "units"));
  for (int64_t r = 0; r < n_units; r++)
    if (!excluded(o, ids[r])) order[k++] = r;
  /* rows in ascending id (insertion sort: unit tables are small) */
  for (int64_t a = 1; a < k; a++)
    for (int64_t b = a; b > 0 && ids[order[b - 1]] > ids[order[b]]; b--) {
      int64_t t = order[b];
      order[b] = order[b - 1], order[b - 1] = t;
    }
  int64_t total = 0;
  for (int64_t i = 0; i < k; i++) total += index[order[i]] - (order[i] ? index[order[i] - 1] : 0);
  ss_status st = SS_OK;
  out->n_units = (int)k;
  out->rate_hz = rate;
  if ((st = SS_ALLOC(ctx, out->unit_id, k > 0 ? k : 1, "units")) || (st = SS_ALLOC(ctx, out->start, k + 1, "units")) ||
      (st = SS_ALLOC(ctx, out->times, total > 0 ? total : 1, "spike times")) ||
      (snr && (st = SS_ALLOC(ctx, out->snr, k > 0 ? k : 1, "unit SNRs")))) {
    free(order);
    return st;
  }
  for (int64_t i = 0; i < k && st == SS_OK; i++) {
    int64_t r = order[i], from = r ? index[r - 1] : 0;
    out->unit_id[i] = ids[r];
    out->start[i] = pos;
    if (snr) out->snr[i] = snr[r];
    for (int64_t j = from; j < index[r] && st == SS_OK; j++)
      st = nwb_sample(ctx, path, sec, j, rate, start, &out->times[pos++]);
    qsort(out->times + out->start[i], (size_t)(pos - out->start[i]), sizeof(int64_t), cmp_i64);
  }
  out->start[k] = pos;
  free(order);
  return st;
}

static ss_status load_nwb(ss_ctx *ctx, hid_t f, const char *path, const ss_trains_load_opts *o, ss_spike_trains *out) {
  double rate = 0, start = 0;
  int assumed = 0;
  if (!nwb_series_timing(f, &rate, &start)) {
    assumed = !(o && o->rate_hz > 0);
    rate = assumed ? NWB_FALLBACK_RATE_HZ : o->rate_hz;
  }
  double *sec = NULL, *snr = NULL;
  int64_t *index = NULL, *ids = NULL, n_times = 0, n_units = 0, n_ids = 0, n_snr = 0;
  ss_status st = ss_h5_read_f64_vector(ctx, f, "/units/spike_times", path, &sec, &n_times);
  if (st == SS_OK) st = read_i64_vector(ctx, f, "/units/spike_times_index", path, &index, &n_units);
  if (st == SS_OK) st = read_i64_vector(ctx, f, "/units/id", path, &ids, &n_ids);
  if (st == SS_OK && n_ids != n_units)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: /units/id: expected %" PRId64 " rows (as spike_times_index), got %" PRId64,
                 path, n_units, n_ids);
  for (int64_t a = 0; st == SS_OK && a < n_units; a++)
    for (int64_t b = a + 1; st == SS_OK && b < n_units; b++)
      if (ids[a] == ids[b])
        st = ss_fail(ctx, SS_ERR_INPUT, "%s: /units/id: id %" PRId64 " appears twice", path, ids[a]);
  if (st == SS_OK) st = nwb_check_index(ctx, path, index, n_units, n_times);
  if (st == SS_OK && ss_h5_is_dataset(f, "/units/snr")) {
    st = ss_h5_read_f64_vector(ctx, f, "/units/snr", path, &snr, &n_snr);
    if (st == SS_OK && n_snr != n_units)
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: /units/snr: expected %" PRId64 " values (one per unit), got %" PRId64, path,
                   n_units, n_snr);
  }
  snprintf(out->source, sizeof(out->source), "%s", path);
  if (st == SS_OK) st = nwb_build(ctx, path, sec, index, ids, snr, n_units, rate, start, o, out);
  out->rate_assumed = assumed;
  if (st != SS_OK) ss_spike_trains_free(out);
  free(sec), free(snr), free(index), free(ids);
  return st;
}

static ss_status load_hdf5(ss_ctx *ctx, const char *path, const ss_trains_load_opts *o, ss_spike_trains *out) {
  ss_h5_quiet();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: not a readable HDF5 file", path);
  ss_status st;
  if (ss_h5_is_group(f, "/units")) st = load_nwb(ctx, f, path, o, out);
  else if (ss_h5_is_group(f, "/spikes")) st = load_results(ctx, f, path, o, out);
  else
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: neither an NWB units table (/units) nor a spikestream results file (/spikes)",
                 path);
  H5Fclose(f);
  return st;
}

/* --- phy folder ------------------------------------------------------------------------------ */

/* `sample_rate = 30000.0` from params.py (the only line we need; Python syntax otherwise ignored). */
static ss_status phy_sample_rate(ss_ctx *ctx, const char *dir, double *rate) {
  char p[LOAD_PATH_MAX], line[1024];
  snprintf(p, sizeof(p), "%s/params.py", dir);
  FILE *f = fopen(p, "r");
  if (!f) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open (a phy folder needs params.py with sample_rate)", p);
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) {
    char *s = line;
    while (isspace((unsigned char)*s)) s++;
    if (strncmp(s, "sample_rate", 11) != 0) continue;
    s += 11;
    while (isspace((unsigned char)*s)) s++;
    if (*s != '=') continue;
    char *end;
    *rate = strtod(s + 1, &end);
    while (isspace((unsigned char)*end)) end++;
    if (end == s + 1 || (*end && *end != '#') || !(*rate > 0) || !isfinite(*rate)) {
      fclose(f);
      line[strcspn(line, "\n")] = '\0';
      return ss_fail(ctx, SS_ERR_INPUT, "%s: sample_rate: expected a rate > 0 Hz, got \"%s\"", p, line);
    }
    found = 1;
  }
  fclose(f);
  if (!found) return ss_fail(ctx, SS_ERR_INPUT, "%s: sample_rate: missing", p);
  return SS_OK;
}

static ss_status read_npy_vector(ss_ctx *ctx, const char *dir, const char *name, int64_t **out, int64_t *n) {
  char p[LOAD_PATH_MAX];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  ss_array a;
  memset(&a, 0, sizeof(a));
  SS_TRY(ss_npy_read(ctx, p, &a));
  ss_status st = SS_OK;
  int column = a.ndim == 2 && a.shape[1] == 1;
  if (a.ndim != 1 && !column)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: expected a vector (N or N×1), got %d dimensions", p, a.ndim);
  else if (a.dtype == SS_DT_F32 || a.dtype == SS_DT_F64)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: expected an integer dtype, got %s", p, ss_dtype_name(a.dtype));
  else st = ss_array_to_i64(ctx, &a, p, out);
  if (st == SS_OK) *n = a.shape[0];
  ss_array_free(&a);
  return st;
}

static ss_status load_phy(ss_ctx *ctx, const char *dir, const ss_trains_load_opts *o, ss_spike_trains *out) {
  double rate = 0;
  SS_TRY(phy_sample_rate(ctx, dir, &rate));
  int64_t *times = NULL, *labels = NULL, n = 0, nl = 0;
  ss_status st = read_npy_vector(ctx, dir, "spike_times.npy", &times, &n);
  if (st == SS_OK) st = read_npy_vector(ctx, dir, "spike_clusters.npy", &labels, &nl);
  if (st == SS_OK && nl != n)
    st = ss_fail(ctx, SS_ERR_INPUT,
                 "%s/spike_clusters.npy: expected %" PRId64 " values (as spike_times.npy), got %" PRId64, dir, n, nl);
  if (st == SS_OK) {
    n = drop_excluded(o, n, times, labels);
    st = ss_spike_trains_from_labels(ctx, n, times, labels, rate, dir, out);
  }
  free(times);
  free(labels);
  return st;
}

/* --- KlustaKwik ------------------------------------------------------------------------------ */

/* BASE.res.N for BASE.clu.N (".clu" replaced in the file name). */
static ss_status res_path_for(ss_ctx *ctx, const char *clu, char *res) {
  const char *base = strrchr(clu, '/');
  base = base ? base + 1 : clu;
  const char *hit = strstr(base, ".clu");
  if (!hit || strlen(clu) >= LOAD_PATH_MAX)
    return ss_fail(ctx, SS_ERR_USAGE, "%s: cannot derive the spike times file (give --times FILE)", clu);
  snprintf(res, LOAD_PATH_MAX, "%.*s.res%s", (int)(hit - clu), clu, hit + 4);
  return SS_OK;
}

/* One non-negative sample index per line (blank lines and '#' comments skipped). */
static ss_status read_res(ss_ctx *ctx, const char *path, int64_t **out, int64_t *n) {
  FILE *f = fopen(path, "r");
  if (!f) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open the spike times file", path);
  int64_t cap = 1024, k = 0, line_no = 0;
  int64_t *v = NULL;
  char line[RES_LINE_MAX];
  ss_status st = SS_ALLOC(ctx, v, (size_t)cap, path);
  while (st == SS_OK && fgets(line, sizeof(line), f)) {
    line_no++;
    char *s = line, *end;
    while (isspace((unsigned char)*s)) s++;
    if (!*s || *s == '#') continue;
    long long x = strtoll(s, &end, 10);
    while (isspace((unsigned char)*end)) end++;
    if (end == s || *end || x < 0) {
      s[strcspn(s, "\r\n")] = '\0';
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: line %" PRId64 ": expected a sample index >= 0, got \"%s\"", path, line_no,
                   s);
      break;
    }
    if (k == cap) {
      if ((st = SS_REALLOC(ctx, v, (size_t)cap * 2, path)) != SS_OK) break;
      cap *= 2;
    }
    v[k++] = x;
  }
  fclose(f);
  if (st != SS_OK) {
    free(v);
    return st;
  }
  *out = v;
  *n = k;
  return SS_OK;
}

static ss_status load_clu(ss_ctx *ctx, const char *path, const ss_trains_load_opts *o, ss_spike_trains *out) {
  if (!o || !(o->rate_hz > 0))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: a .clu file carries no sample rate (give --rate HZ)", path);
  char res[LOAD_PATH_MAX];
  if (o->times_path) snprintf(res, sizeof(res), "%s", o->times_path);
  else SS_TRY(res_path_for(ctx, path, res));
  int64_t n = 0, nt = 0, *times = NULL, *labels = NULL;
  int32_t *lab32 = NULL;
  SS_TRY(ss_kk_read_clu(ctx, path, &n, &lab32, NULL));
  ss_status st = read_res(ctx, res, &times, &nt);
  if (st == SS_OK && nt != n)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: expected %" PRId64 " spike times (one per label in %s), got %" PRId64, res, n,
                 path, nt);
  if (st == SS_OK) st = SS_ALLOC(ctx, labels, n > 0 ? n : 1, "labels");
  if (st == SS_OK) {
    for (int64_t i = 0; i < n; i++) labels[i] = lab32[i];
    n = drop_excluded(o, n, times, labels);
    st = ss_spike_trains_from_labels(ctx, n, times, labels, o->rate_hz, path, out);
  }
  free(lab32);
  free(times);
  free(labels);
  return st;
}

ss_status ss_spike_trains_load(ss_ctx *ctx, const char *path, const ss_trains_load_opts *opts, ss_spike_trains *out) {
  memset(out, 0, sizeof(*out));
  struct stat sb;
  if (stat(path, &sb) != 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: no such file or directory", path);
  SS_TRY(ss_outset_check_file(ctx, path));
  if (S_ISDIR(sb.st_mode)) return load_phy(ctx, path, opts, out);
  const char *base = strrchr(path, '/');
  if (strstr(base ? base + 1 : path, ".clu")) return load_clu(ctx, path, opts, out);
  if (H5Fis_hdf5(path) > 0) return load_hdf5(ctx, path, opts, out);
  return ss_fail(ctx, SS_ERR_INPUT,
                 "%s: unknown sorting format (expected results .h5, NWB, a phy folder or a .clu file)", path);
}
