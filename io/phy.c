/* phy.c — writes the phy folder of a sorting and checks such folders (file list in phy.h). */
#define _XOPEN_SOURCE 700 /* realpath: params.py names the recording by its absolute path */
#include "io/phy.h"

#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "io/npy.h"

/* --- raw data location ------------------------------------------------------------------------- */

/* Storage offset of an int16 little-endian, time-major, contiguous, unfiltered dataset; -1 otherwise. */
static int64_t h5_contiguous_offset(const char *path, const char *dataset) {
  ss_h5_quiet();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return -1;
  int64_t off = -1;
  hid_t d = H5Dopen2(f, dataset, H5P_DEFAULT);
  if (d >= 0) {
    hid_t dcpl = H5Dget_create_plist(d), type = H5Dget_type(d);
    int contiguous = dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0;
    int le_int16 = type >= 0 && H5Tequal(type, H5T_STD_I16LE) > 0;
    haddr_t a = contiguous && le_int16 ? H5Dget_offset(d) : HADDR_UNDEF;
    if (a != HADDR_UNDEF) off = (int64_t)a;
    if (type >= 0) H5Tclose(type);
    if (dcpl >= 0) H5Pclose(dcpl);
    H5Dclose(d);
  }
  H5Fclose(f);
  return off;
}

int ss_phy_raw_location(const ss_source_info *info, const ss_source_spec *spec, char *dat_path, size_t len,
                        int64_t *offset) {
  if (strcmp(info->dtype, "int16") != 0) return 0;
  int64_t off = -1;
  if (info->format == SS_FORMAT_BINARY) off = spec->byte_offset;
  else if (info->layout == SS_LAYOUT_TIME_MAJOR && info->dataset[0])
    off = h5_contiguous_offset(info->path, info->dataset);
  if (off < 0) return 0;
  char *abs = realpath(info->path, NULL);
  snprintf(dat_path, len, "%s", abs ? abs : info->path);
  free(abs);
  *offset = off;
  return 1;
}

/* --- writer ------------------------------------------------------------------------------------ */

static ss_status write_npy(ss_ctx *ctx, const char *dir, const char *name, ss_dtype t, int ndim, int64_t d0, int64_t d1,
                           int64_t d2, const void *data) {
  char path[SS_PHY_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  ss_array a = {.dtype = t, .ndim = ndim, .shape = {d0, d1, d2, 0}, .data = (void *)data};
  return ss_npy_write(ctx, path, &a);
}

/* A Python string literal of a path (single quotes, backslashes and quotes escaped). */
static void py_string(FILE *f, const char *s) {
  fputc('\'', f);
  for (; *s; s++) {
    if (*s == '\\' || *s == '\'') fputc('\\', f);
    fputc(*s, f);
  }
  fputc('\'', f);
}

static ss_status write_params_py(ss_ctx *ctx, const char *dir, const ss_phy_folder *ph) {
  char path[SS_PHY_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/params.py", dir);
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  fputs("# phy parameters written by spikestream sort\n", af.f);
  if (ph->dat_path[0]) {
    fputs("dat_path = ", af.f);
    py_string(af.f, ph->dat_path);
    fputc('\n', af.f);
  } else {
    fputs("dat_path = []  # the recording is not a flat int16 layout phy can map: no raw traces\n", af.f);
  }
  fprintf(af.f, "n_channels_dat = %d\ndtype = '%s'\noffset = %" PRId64 "\nsample_rate = %.17g\nhp_filtered = %s\n",
          ph->n_channels_dat, ph->dtype, ph->offset, ph->sample_rate, ph->hp_filtered ? "True" : "False");
  return ss_atomic_commit(ctx, &af);
}

/* cluster_<name>.tsv: "cluster_id<TAB>column", then one row per cluster, a label or a number. */
static ss_status write_cluster_tsv(ss_ctx *ctx, const char *dir, const char *name, const char *column,
                                   const ss_phy_folder *ph, const char *const *text, const double *value) {
  char path[SS_PHY_PATH_MAX + 128];
  snprintf(path, sizeof(path), "%s/cluster_%s.tsv", dir, name);
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  fprintf(af.f, "cluster_id\t%s\n", column);
  for (int i = 0; i < ph->n_groups; i++) {
    if (text) fprintf(af.f, "%d\t%s\n", ph->cluster_ids[i], text[i]);
    else if (isnan(value[i])) fprintf(af.f, "%d\tnan\n", ph->cluster_ids[i]);
    else fprintf(af.f, "%d\t%.6g\n", ph->cluster_ids[i], value[i]);
  }
  return ss_atomic_commit(ctx, &af);
}

static ss_status write_groups(ss_ctx *ctx, const char *dir, const ss_phy_folder *ph) {
  SS_TRY(write_cluster_tsv(ctx, dir, "group", "group", ph, ph->cluster_groups, NULL));
  if (ph->cluster_ks_labels) SS_TRY(write_cluster_tsv(ctx, dir, "KSLabel", "KSLabel", ph, ph->cluster_ks_labels, NULL));
  for (int m = 0; m < ph->n_metrics; m++)
    SS_TRY(write_cluster_tsv(ctx, dir, ph->metric_names[m], ph->metric_names[m], ph, NULL, ph->metric_values[m]));
  return SS_OK;
}

ss_status ss_phy_write(ss_ctx *ctx, const char *dir, const ss_phy_folder *ph) {
  const int64_t N = ph->n_spikes, T = ph->n_templates, C = ph->n_channels;
  SS_TRY(ss_make_dir(ctx, dir));
  SS_TRY(write_npy(ctx, dir, "spike_times.npy", SS_DT_I64, 1, N, 0, 0, ph->spike_times));
  SS_TRY(write_npy(ctx, dir, "spike_clusters.npy", SS_DT_I32, 1, N, 0, 0, ph->spike_clusters));
  SS_TRY(write_npy(ctx, dir, "spike_templates.npy", SS_DT_I32, 1, N, 0, 0, ph->spike_templates));
  SS_TRY(write_npy(ctx, dir, "amplitudes.npy", SS_DT_F32, 1, N, 0, 0, ph->amplitudes));
  SS_TRY(write_npy(ctx, dir, "templates.npy", SS_DT_F32, 3, T, ph->n_wave, C, ph->templates));
  SS_TRY(write_npy(ctx, dir, "channel_map.npy", SS_DT_I32, 1, C, 0, 0, ph->channel_map));
  SS_TRY(write_npy(ctx, dir, "channel_positions.npy", SS_DT_F32, 2, C, 2, 0, ph->channel_positions));
  SS_TRY(write_npy(ctx, dir, "pc_features.npy", SS_DT_F32, 3, N, ph->n_pcs, ph->n_feat_channels, ph->pc_features));
  SS_TRY(write_npy(ctx, dir, "pc_feature_ind.npy", SS_DT_I32, 2, T, ph->n_feat_channels, 0, ph->pc_feature_ind));
  SS_TRY(write_npy(ctx, dir, "similar_templates.npy", SS_DT_F32, 2, T, T, 0, ph->similar_templates));
  SS_TRY(write_groups(ctx, dir, ph));
  return write_params_py(ctx, dir, ph);
}

/* --- checker ----------------------------------------------------------------------------------- */

typedef struct {
  ss_ctx *ctx;
  const char *dir;
  int problems;
} checker;

static void problem(checker *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(checker *k, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  ss_problem(k->ctx, SS_ERR_INPUT, "%s", line);
  k->problems++;
}

/* Load dir/name; a dtype outside `allowed` (a NULL-terminated list of ss_dtype + 1) or a rank other
 * than `ndim` is a problem. Returns 1 when loaded and of the expected kind. */
static int load(checker *k, const char *name, int ndim, const ss_dtype *allowed, int n_allowed, ss_array *a) {
  char path[SS_PHY_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/%s", k->dir, name);
  memset(a, 0, sizeof(*a));
  ss_ctx sub;
  ss_ctx_init(&sub);
  sub.quiet = 1;
  if (ss_npy_read(&sub, path, a) != SS_OK) {
    problem(k, "%s", ss_error_message(&sub));
    return 0;
  }
  int ok_type = 0;
  for (int i = 0; i < n_allowed; i++) ok_type |= a->dtype == allowed[i];
  if (!ok_type) problem(k, "%s: dtype %s is not one phy reads here", path, ss_dtype_name(a->dtype));
  if (a->ndim != ndim) problem(k, "%s: expected %d dimensions, got %d", path, ndim, a->ndim);
  if (!ok_type || a->ndim != ndim) {
    ss_array_free(a);
    return 0;
  }
  return 1;
}

static void expect_dim(checker *k, const char *name, const ss_array *a, int axis, int64_t want, const char *what) {
  if (a->shape[axis] != want)
    problem(k, "%s/%s: axis %d has %" PRId64 " entries, expected %" PRId64 " (%s)", k->dir, name, axis, a->shape[axis],
            want, what);
}

/* Integer values of a (any integer dtype) within [lo, hi); the first offender is reported. */
static void expect_range(checker *k, const char *name, const ss_array *a, int64_t lo, int64_t hi) {
  int64_t *v = NULL;
  ss_ctx sub;
  ss_ctx_init(&sub);
  if (ss_array_to_i64(&sub, a, name, &v) != SS_OK) {
    problem(k, "%s", ss_error_message(&sub));
    return;
  }
  int64_t n = ss_array_count(a);
  for (int64_t i = 0; i < n; i++)
    if (v[i] < lo || v[i] >= hi) {
      problem(k, "%s/%s: value %" PRId64 " at index %" PRId64 " outside [%" PRId64 ", %" PRId64 ")", k->dir, name, v[i],
              i, lo, hi);
      break;
    }
  free(v);
}

static const ss_dtype INT_TYPES[] = {SS_DT_I32, SS_DT_I64, SS_DT_U32, SS_DT_U64};
static const ss_dtype FLOAT_TYPES[] = {SS_DT_F32, SS_DT_F64};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* params.py: every key phy reads, and n_channels_dat. */
static void check_params(checker *k, int *n_channels_dat) {
  static const char *keys[] = {"dat_path", "n_channels_dat", "dtype", "offset", "sample_rate", "hp_filtered"};
  char path[SS_PHY_PATH_MAX + 64], line[SS_PHY_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/params.py", k->dir);
  FILE *f = fopen(path, "r");
  if (!f) {
    problem(k, "%s: cannot open: %s", path, strerror(errno));
    return;
  }
  int found[6] = {0};
  while (fgets(line, sizeof(line), f))
    for (int i = 0; i < 6; i++) {
      size_t n = strlen(keys[i]);
      if (strncmp(line, keys[i], n) != 0 || (line[n] != ' ' && line[n] != '=')) continue;
      found[i] = 1;
      if (i == 1) *n_channels_dat = atoi(strchr(line, '=') ? strchr(line, '=') + 1 : "0");
    }
  fclose(f);
  for (int i = 0; i < 6; i++)
    if (!found[i]) problem(k, "%s: %s: missing", path, keys[i]);
}

/* cluster_<name>.tsv: the header "cluster_id<TAB>column", then "ID<TAB>LABEL" rows with a phy label.
 * `optional`: a missing file is no problem. */
static void check_labels(checker *k, const char *name, const char *column, int optional) {
  char path[SS_PHY_PATH_MAX + 64], line[256], header[64];
  snprintf(path, sizeof(path), "%s/cluster_%s.tsv", k->dir, name);
  FILE *f = fopen(path, "r");
  if (!f) {
    if (!optional || errno != ENOENT) problem(k, "%s: cannot open: %s", path, strerror(errno));
    return;
  }
  snprintf(header, sizeof(header), "cluster_id\t%s\n", column);
  if (!fgets(line, sizeof(line), f) || strcmp(line, header) != 0)
    problem(k, "%s: line 1: expected the header \"cluster_id<TAB>%s\"", path, column);
  for (int ln = 2; fgets(line, sizeof(line), f); ln++) {
    char group[64];
    long long id;
    if (sscanf(line, "%lld\t%63s", &id, group) != 2 || id < 0 ||
        (strcmp(group, "noise") && strcmp(group, "mua") && strcmp(group, "good") && strcmp(group, "unsorted"))) {
      line[strcspn(line, "\n")] = '\0';
      problem(k, "%s: line %d: expected \"ID<TAB>noise|mua|good|unsorted\" with ID >= 0, got \"%s\"", path, ln, line);
      break;
    }
  }
  fclose(f);
}

static void check_times(checker *k, const ss_array *t) {
  int64_t *v = NULL;
  ss_ctx sub;
  ss_ctx_init(&sub);
  if (ss_array_to_i64(&sub, t, "spike_times.npy", &v) != SS_OK) return;
  for (int64_t i = 1; i < t->shape[0]; i++)
    if (v[i] < v[i - 1]) {
      problem(k, "%s/spike_times.npy: times decrease at index %" PRId64 " (%" PRId64 " after %" PRId64 ")", k->dir, i,
              v[i], v[i - 1]);
      break;
    }
  free(v);
}

static void check_positions(checker *k, const ss_array *p) {
  float *v = NULL;
  ss_ctx sub;
  ss_ctx_init(&sub);
  if (ss_array_to_f32(&sub, p, 1, "channel_positions.npy", &v) != SS_OK) {
    problem(k, "%s/channel_positions.npy: %s", k->dir, ss_error_message(&sub));
    return;
  }
  for (int64_t i = 0; i < p->shape[0]; i++)
    for (int64_t j = i + 1; j < p->shape[0]; j++)
      if (v[2 * i] == v[2 * j] && v[2 * i + 1] == v[2 * j + 1]) {
        problem(k, "%s/channel_positions.npy: channels %" PRId64 " and %" PRId64 " share a position", k->dir, i, j);
        free(v);
        return;
      }
  free(v);
}

ss_status ss_phy_check(ss_ctx *ctx, const char *dir) {
  checker k = {ctx, dir, 0};
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return ss_fail(ctx, SS_ERR_INPUT, "%s: not a directory", dir);
  ss_ctx_clear(ctx);
  int n_dat = -1;
  check_params(&k, &n_dat);
  ss_array st, sc, sp, am, tp, cm, cp, pf, pi, si;
  int h_st = load(&k, "spike_times.npy", 1, INT_TYPES + 1, 3, &st); /* int64, uint32, uint64 */
  int h_sc = load(&k, "spike_clusters.npy", 1, INT_TYPES, N_OF(INT_TYPES), &sc);
  int h_sp = load(&k, "spike_templates.npy", 1, INT_TYPES, N_OF(INT_TYPES), &sp);
  int h_am = load(&k, "amplitudes.npy", 1, FLOAT_TYPES, N_OF(FLOAT_TYPES), &am);
  int h_tp = load(&k, "templates.npy", 3, FLOAT_TYPES, N_OF(FLOAT_TYPES), &tp);
  int h_cm = load(&k, "channel_map.npy", 1, INT_TYPES, 3, &cm); /* int32, int64, uint32 */
  int h_cp = load(&k, "channel_positions.npy", 2, FLOAT_TYPES, N_OF(FLOAT_TYPES), &cp);
  int h_pf = load(&k, "pc_features.npy", 3, FLOAT_TYPES, N_OF(FLOAT_TYPES), &pf);
  int h_pi = load(&k, "pc_feature_ind.npy", 2, INT_TYPES, N_OF(INT_TYPES), &pi);
  int h_si = load(&k, "similar_templates.npy", 2, FLOAT_TYPES, N_OF(FLOAT_TYPES), &si);
  int64_t N = h_st ? st.shape[0] : -1, T = h_tp ? tp.shape[0] : -1, C = h_cm ? cm.shape[0] : -1;
  if (h_st) check_times(&k, &st);
  if (h_sc && N >= 0) expect_dim(&k, "spike_clusters.npy", &sc, 0, N, "spikes, as spike_times.npy");
  if (h_sp && N >= 0) expect_dim(&k, "spike_templates.npy", &sp, 0, N, "spikes, as spike_times.npy");
  if (h_sp && T >= 0) expect_range(&k, "spike_templates.npy", &sp, 0, T);
  if (h_sc) expect_range(&k, "spike_clusters.npy", &sc, 0, INT32_MAX);
  if (h_am && N >= 0) expect_dim(&k, "amplitudes.npy", &am, 0, N, "spikes, as spike_times.npy");
  if (h_tp && C >= 0) expect_dim(&k, "templates.npy", &tp, 2, C, "channels, as channel_map.npy");
  if (h_cm && n_dat > 0) expect_range(&k, "channel_map.npy", &cm, 0, n_dat);
  if (h_cp && C >= 0) expect_dim(&k, "channel_positions.npy", &cp, 0, C, "channels, as channel_map.npy");
  if (h_cp) expect_dim(&k, "channel_positions.npy", &cp, 1, 2, "x and y");
  if (h_cp && cp.shape[1] == 2) check_positions(&k, &cp);
  if (h_pf && N >= 0) expect_dim(&k, "pc_features.npy", &pf, 0, N, "spikes, as spike_times.npy");
  if (h_pi && T >= 0) expect_dim(&k, "pc_feature_ind.npy", &pi, 0, T, "templates, as templates.npy");
  if (h_pi && h_pf) expect_dim(&k, "pc_feature_ind.npy", &pi, 1, pf.shape[2], "channels per spike, as pc_features.npy");
  if (h_pi && C >= 0) expect_range(&k, "pc_feature_ind.npy", &pi, 0, C);
  if (h_si && T >= 0) expect_dim(&k, "similar_templates.npy", &si, 0, T, "templates, as templates.npy");
  if (h_si && T >= 0) expect_dim(&k, "similar_templates.npy", &si, 1, T, "templates, as templates.npy");
  check_labels(&k, "group", "group", 0);
  check_labels(&k, "KSLabel", "KSLabel", 1);
  ss_array *all[] = {&st, &sc, &sp, &am, &tp, &cm, &cp, &pf, &pi, &si};
  int have[] = {h_st, h_sc, h_sp, h_am, h_tp, h_cm, h_cp, h_pf, h_pi, h_si};
  for (int i = 0; i < N_OF(have); i++)
    if (have[i]) ss_array_free(all[i]);
  return k.problems ? SS_ERR_INPUT : SS_OK;
}
