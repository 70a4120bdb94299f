/* phy.c — writes the phy folder of a sorting and checks such folders (file list in phy.h). */
#define _XOPEN_SOURCE 700 /* realpath: params.py names the recording by its absolute path */
#include "io/phy.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic_file.h"
#include "io/npy.h"

/* --- raw data ---------------------------------------------------------------------------------- */

/* phylib's flat reader picks files by extension (traces.py: EPHYS_RAW_EXTENSIONS). */
static int phylib_flat_extension(const char *path) {
  static const char *ext[] = {".dat", ".bin", ".raw", ".mda"};
  const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
  if (!dot || (slash && dot < slash)) return 0;
  for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++)
    if (strcmp(dot, ext[i]) == 0) return 1;
  return 0;
}

int ss_phy_raw_location(const ss_source_info *info, const ss_source_spec *spec, char *dat_path, size_t len,
                        int64_t *offset, int *n_channels_dat) {
  if (strcmp(info->dtype, "int16") != 0 || info->float_step > 0) return 0;
  const char *file = NULL;
  int64_t off = 0;
  int frame = info->n_channels;
  if (info->format == SS_FORMAT_BINARY) {
    file = info->path;
    off = spec->byte_offset;
  } else if (info->format == SS_FORMAT_SPIKEGLX) { /* the left-out channels end each frame */
    file = info->data_path;
    frame += info->n_left_out;
  } else if (info->format == SS_FORMAT_OPENEPHYS && info->n_left_out == 0) {
    file = info->data_path;
  }
  if (!file || !file[0] || !phylib_flat_extension(file)) return 0;
  char *abs = realpath(file, NULL);
  snprintf(dat_path, len, "%s", abs ? abs : file);
  free(abs);
  *offset = off;
  *n_channels_dat = frame;
  return 1;
}

ss_status ss_phy_write_recording(ss_ctx *ctx, const char *dir, ss_source *src) {
  const ss_source_info *info = ss_source_get_info(src);
  char path[SS_PHY_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/%s", dir, SS_PHY_RECORDING);
  SS_TRY(ss_make_dir(ctx, dir));
  /* about 1 MiB of samples per chunk, at least 1,024 rows */
  int64_t rows = (int64_t)(1 << 19) / info->n_channels;
  SS_TRY(ss_source_configure(ctx, src, rows < 1024 ? 1024 : rows, 0, 0));
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  const int64_t n = ss_source_n_chunks(src);
  for (int64_t i = 0; i < n; i++) {
    ss_chunk c;
    ss_status st = ss_source_chunk(ctx, src, i, &c);
    size_t count = (size_t)c.n * (size_t)c.n_channels;
    if (st == SS_OK && fwrite(c.data + (size_t)c.left * c.n_channels, sizeof(int16_t), count, af.f) != count)
      st = ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    if (st != SS_OK) {
      ss_atomic_abort(&af);
      return st;
    }
  }
  return ss_atomic_commit(ctx, &af);
}

/* Peak-to-peak over time on the template's largest channel, as phylib measures it. */
static double template_ptp(const float *t, int n_wave, int n_channels) {
  double ptp = 0;
  for (int ch = 0; ch < n_channels; ch++) {
    double lo = t[ch], hi = t[ch];
    for (int w = 1; w < n_wave; w++) {
      double v = t[(size_t)w * n_channels + ch];
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
    ptp = hi - lo > ptp ? hi - lo : ptp;
  }
  return ptp;
}

ss_status ss_phy_amplitudes(ss_ctx *ctx, const float *templates, int n_templates, int n_wave, int n_channels,
                            const int32_t *spike_templates, const float *amp_uv, int64_t n_spikes, float *out) {
  double *ptp = NULL;
  SS_TRY(SS_ALLOC(ctx, ptp, (size_t)(n_templates > 0 ? n_templates : 1), "template peak-to-peak"));
  for (int k = 0; k < n_templates; k++)
    ptp[k] = template_ptp(templates + (size_t)k * n_wave * n_channels, n_wave, n_channels);
  for (int64_t i = 0; i < n_spikes; i++) {
    int k = spike_templates[i];
    double p = k >= 0 && k < n_templates ? ptp[k] : 0;
    out[i] = p > 0 ? (float)(fabs(amp_uv[i]) / p) : 0.0f;
  }
  free(ptp);
  return SS_OK;
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
    fputs("dat_path = []  # no raw traces\n", af.f);
  }
  if (ph->dat_path[0] && ph->n_samples_dat > 0) fprintf(af.f, "# dat_path frames: %" PRId64 "\n", ph->n_samples_dat);
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

/* whitening_mat.npy and its inverse: the identity, so phylib's unwhitening leaves the templates (µV)
 * as they are; written so that phylib finds them instead of writing an inverse into the folder. */
static ss_status write_whitening(ss_ctx *ctx, const char *dir, int64_t C) {
  double *eye = NULL;
  SS_TRY(SS_CALLOC(ctx, eye, (size_t)(C > 0 ? C * C : 1), "whitening matrix"));
  for (int64_t i = 0; i < C; i++) eye[i * C + i] = 1.0;
  ss_status st = write_npy(ctx, dir, "whitening_mat.npy", SS_DT_F64, 2, C, C, 0, eye);
  if (st == SS_OK) st = write_npy(ctx, dir, "whitening_mat_inv.npy", SS_DT_F64, 2, C, C, 0, eye);
  free(eye);
  return st;
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
  SS_TRY(write_npy(ctx, dir, "channel_shanks.npy", SS_DT_I32, 1, C, 0, 0, ph->channel_shanks));
  SS_TRY(write_whitening(ctx, dir, C));
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

/* --- params.py --------------------------------------------------------------------------------- */

#define PHY_MAX_DAT 16

/* What the checker reads of params.py: the keys phylib's TemplateModel reads. */
typedef struct {
  int found[6]; /* dat_path, n_channels_dat, dtype, offset, sample_rate, hp_filtered */
  char dat[PHY_MAX_DAT][SS_PHY_PATH_MAX];
  int n_dat;
  long long n_channels_dat, offset;
  int item_size; /* of dtype; 0 unknown */
  double sample_rate;
  int64_t frames; /* "# dat_path frames: N", -1 when absent */
} phy_params;

static const char *const PARAM_KEYS[] = {"dat_path", "n_channels_dat", "dtype", "offset", "sample_rate", "hp_filtered"};

static const char *skip_space(const char *p) {
  while (*p == ' ' || *p == '\t') p++;
  return p;
}

/* A Python string literal ('...' or "...", optionally r-prefixed) at p into out; returns the
 * character after it, or NULL when p holds none. */
static const char *py_literal(const char *p, char *out, size_t len) {
  int raw = *p == 'r' || *p == 'R';
  p += raw;
  char q = *p;
  if (q != '\'' && q != '"') return NULL;
  size_t n = 0;
  for (p++; *p && *p != q; p++) {
    if (*p == '\\' && !raw && p[1]) p++;
    if (n + 1 < len) out[n++] = *p;
  }
  out[n] = '\0';
  return *p == q ? p + 1 : NULL;
}

/* After a value: nothing, or a comment. */
static int line_end(const char *p) {
  p = skip_space(p);
  return *p == '\0' || *p == '\n' || *p == '\r' || *p == '#';
}

static int parse_dat_path(const char *v, phy_params *pp) {
  if (*v != '[') {
    const char *end = py_literal(v, pp->dat[0], sizeof(pp->dat[0]));
    pp->n_dat = end != NULL;
    return end && line_end(end);
  }
  for (v = skip_space(v + 1); *v != ']'; v = skip_space(v)) {
    if (pp->n_dat == PHY_MAX_DAT || !(v = py_literal(v, pp->dat[pp->n_dat++], sizeof(pp->dat[0])))) return 0;
    v = skip_space(v);
    if (*v == ',') v++;
    else if (*v != ']') return 0;
  }
  return line_end(v + 1);
}

static int dtype_size(const char *name) {
  static const struct {
    const char *name;
    int size;
  } t[] = {{"int16", 2}, {"uint16", 2}, {"int8", 1}, {"uint8", 1}, {"int32", 4}, {"float32", 4}, {"float64", 8}};
  for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
    if (strcmp(name, t[i].name) == 0) return t[i].size;
  return 0;
}

/* One "key = value" line; returns 0 when the value does not parse as phylib needs it. */
static int parse_value(int key, const char *v, phy_params *pp) {
  char text[64], *end;
  switch (key) {
    case 0: return parse_dat_path(v, pp);
    case 1:
    case 3: {
      long long x = strtoll(v, &end, 10);
      *(key == 1 ? &pp->n_channels_dat : &pp->offset) = x;
      return end != v && line_end(end) && (key == 1 ? x > 0 : x >= 0);
    }
    case 2: return (v = py_literal(v, text, sizeof(text))) && line_end(v) && (pp->item_size = dtype_size(text)) > 0;
    case 4:
      pp->sample_rate = strtod(v, &end);
      return end != v && line_end(end) && pp->sample_rate > 0 && isfinite(pp->sample_rate);
    default: return (!strncmp(v, "True", 4) && line_end(v + 4)) || (!strncmp(v, "False", 5) && line_end(v + 5));
  }
}

static void parse_line(checker *k, const char *path, int ln, const char *line, phy_params *pp) {
  const char *p = skip_space(line);
  long long frames;
  if (sscanf(p, "# dat_path frames: %lld", &frames) == 1) pp->frames = frames;
  if (line_end(p)) return;
  for (int i = 0; i < N_OF(PARAM_KEYS); i++) {
    size_t n = strlen(PARAM_KEYS[i]);
    if (strncmp(p, PARAM_KEYS[i], n) != 0 || *skip_space(p + n) != '=') continue;
    pp->found[i] = 1;
    const char *v = skip_space(skip_space(p + n) + 1);
    if (!parse_value(i, v, pp)) {
      char shown[128];
      snprintf(shown, sizeof(shown), "%s", v);
      shown[strcspn(shown, "\r\n")] = '\0';
      problem(k, "%s: line %d: %s: cannot use the value %s", path, ln, PARAM_KEYS[i], shown);
    }
  }
}

/* params.py: every key phylib reads, with a value it can use. */
static void check_params(checker *k, phy_params *pp) {
  char path[SS_PHY_PATH_MAX + 64], line[SS_PHY_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/params.py", k->dir);
  memset(pp, 0, sizeof(*pp));
  pp->frames = -1;
  FILE *f = fopen(path, "r");
  if (!f) {
    problem(k, "%s: cannot open: %s", path, strerror(errno));
    return;
  }
  for (int ln = 1; fgets(line, sizeof(line), f); ln++) parse_line(k, path, ln, line, pp);
  fclose(f);
  for (int i = 0; i < N_OF(PARAM_KEYS); i++)
    if (!pp->found[i]) problem(k, "%s: %s: missing", path, PARAM_KEYS[i]);
}

/* Each dat_path file: present, of an extension phylib maps, whole frames after the offset, exactly
 * the frames params.py notes, and long enough for the last spike. */
static void check_dat(checker *k, const phy_params *pp, int64_t last_spike) {
  if (!pp->found[0] || !pp->n_channels_dat || !pp->item_size) return;
  int64_t frame = pp->n_channels_dat * pp->item_size, total = 0;
  for (int i = 0; i < pp->n_dat; i++) {
    char path[2 * SS_PHY_PATH_MAX + 8];
    if (pp->dat[i][0] == '/') snprintf(path, sizeof(path), "%s", pp->dat[i]);
    else snprintf(path, sizeof(path), "%s/%s", k->dir, pp->dat[i]);
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) {
      problem(k, "%s/params.py: dat_path: %s: %s", k->dir, path, stat(path, &sb) ? strerror(errno) : "not a file");
      continue;
    }
    if (!phylib_flat_extension(path))
      problem(k, "%s/params.py: dat_path: %s: phylib maps only .dat, .bin, .raw and .mda files", k->dir, path);
    int64_t data = (int64_t)sb.st_size - pp->offset;
    if (data < 0 || data % frame != 0)
      problem(k, "%s: %lld bytes, not offset %lld + whole frames of n_channels_dat %lld × %d bytes", path,
              (long long)sb.st_size, pp->offset, pp->n_channels_dat, pp->item_size);
    total += data > 0 ? data / frame : 0;
    if (pp->n_dat == 1 && pp->frames >= 0 && data != pp->frames * frame)
      problem(k, "%s: %lld bytes, expected offset %lld + %" PRId64 " frames × %" PRId64 " bytes (params.py)", path,
              (long long)sb.st_size, pp->offset, pp->frames, frame);
  }
  if (pp->n_dat > 0 && last_spike >= total)
    problem(k, "%s/params.py: dat_path: %" PRId64 " frames, but spike_times.npy reaches sample %" PRId64, k->dir, total,
            last_spike);
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

/* Non-decreasing; returns the last time (-1 when none). */
static int64_t check_times(checker *k, const ss_array *t) {
  int64_t *v = NULL, last = -1;
  ss_ctx sub;
  ss_ctx_init(&sub);
  if (ss_array_to_i64(&sub, t, "spike_times.npy", &v) != SS_OK) return -1;
  for (int64_t i = 1; i < t->shape[0]; i++)
    if (v[i] < v[i - 1]) {
      problem(k, "%s/spike_times.npy: times decrease at index %" PRId64 " (%" PRId64 " after %" PRId64 ")", k->dir, i,
              v[i], v[i - 1]);
      break;
    }
  if (t->shape[0] > 0) last = v[t->shape[0] - 1];
  free(v);
  return last;
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

/* Files phylib reads when present: channel_shanks.npy [C], whitening_mat(_inv).npy [C × C]. */
static void check_optional(checker *k, int64_t C) {
  static const char *names[] = {"channel_shanks.npy", "whitening_mat.npy", "whitening_mat_inv.npy"};
  for (int i = 0; i < N_OF(names); i++) {
    char path[SS_PHY_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", k->dir, names[i]);
    struct stat sb;
    ss_array a;
    if (stat(path, &sb) != 0 && errno == ENOENT) continue;
    if (!(i == 0 ? load(k, names[i], 1, INT_TYPES, N_OF(INT_TYPES), &a)
                 : load(k, names[i], 2, FLOAT_TYPES, N_OF(FLOAT_TYPES), &a)))
      continue;
    if (C >= 0) expect_dim(k, names[i], &a, 0, C, "channels, as channel_map.npy");
    if (C >= 0 && i > 0) expect_dim(k, names[i], &a, 1, C, "channels, as channel_map.npy");
    ss_array_free(&a);
  }
}

ss_status ss_phy_check(ss_ctx *ctx, const char *dir) {
  checker k = {ctx, dir, 0};
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return ss_fail(ctx, SS_ERR_INPUT, "%s: not a directory", dir);
  ss_ctx_clear(ctx);
  phy_params pp;
  check_params(&k, &pp);
  int n_dat = pp.found[1] ? (int)pp.n_channels_dat : -1;
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
  int64_t last = h_st ? check_times(&k, &st) : -1;
  check_dat(&k, &pp, last);
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
  check_optional(&k, C);
  ss_array *all[] = {&st, &sc, &sp, &am, &tp, &cm, &cp, &pf, &pi, &si};
  int have[] = {h_st, h_sc, h_sp, h_am, h_tp, h_cm, h_cp, h_pf, h_pi, h_si};
  for (int i = 0; i < N_OF(have); i++)
    if (have[i]) ss_array_free(all[i]);
  return k.problems ? SS_ERR_INPUT : SS_OK;
}
