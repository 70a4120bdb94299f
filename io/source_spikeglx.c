/* source_spikeglx.c — SpikeGLX recordings: a flat int16 .bin described by its .meta (key=value
 * lines). The subset of keys understood is listed in docs/formats.md; sync and non-neural channels
 * are left out through the store's column selection. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/source_internal.h"

#define META_MAX_BYTES (16 << 20)
#define NP1_MAX_INT 512  /* imMaxInt when the .meta predates the key: 10-bit NP 1.0 */
#define NP2_MAX_INT 8192 /* 14-bit NP 2.0 */
#define NP2_GAIN 80.0    /* NP 2.0 probes have one fixed gain */
#define NI_MAX_INT 32768 /* niMaxInt when absent */
#define SHANK_PITCH_UM 250.0
#define COL_PITCH_UM 32.0
#define NP1_ROW_PITCH_UM 20.0
#define NP2_ROW_PITCH_UM 15.0

typedef struct {
  char meta[SS_SOURCE_PATH_MAX], bin[SS_SOURCE_PATH_MAX];
  char *text; /* the .meta, NUL-terminated per line */
  size_t len;
  int imec;            /* typeThis imec (else nidq) */
  int n_saved, n_kept; /* saved channels; channels delivered (the first n_kept) */
  int counts[4];       /* snsApLfSy (AP, LF, SY) or snsMnMaXaDw (MN, MA, XA, DW) */
  int np2;             /* ~imroTbl entries without per-channel gains */
  int *acq;            /* [n_saved] acquired channel id of each saved channel */
} meta_t;

/* ---------------------------------------------------------------- key=value access */

static const char *get(const meta_t *m, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = m->text; p < m->text + m->len; p += strlen(p) + 1)
    if (strncmp(p, key, kl) == 0 && p[kl] == '=') return p + kl + 1;
  return NULL;
}

static ss_status bad(ss_ctx *ctx, const meta_t *m, const char *key, const char *want, const char *got) {
  return ss_fail(ctx, SS_ERR_INPUT, "%s: key %s: expected %s, got %s%s%s", m->meta, key, want, got ? "\"" : "",
                 got ? got : "none", got ? "\"" : "");
}

static ss_status number(ss_ctx *ctx, const meta_t *m, const char *key, double dflt, double *out) {
  const char *v = get(m, key);
  if (!v && !isnan(dflt)) {
    *out = dflt;
    return SS_OK;
  }
  char *end = NULL;
  *out = v ? strtod(v, &end) : NAN;
  if (!v || end == v || *end || !isfinite(*out)) return bad(ctx, m, key, "a number", v);
  return SS_OK;
}

/* "a,b,c[,d]" → counts */
static ss_status int_list(ss_ctx *ctx, const meta_t *m, const char *key, int n, int *out) {
  const char *v = get(m, key), *p = v;
  for (int i = 0; p && i < n; i++) {
    char *end = NULL;
    long x = strtol(p, &end, 10);
    if (end == p || x < 0 || x > SS_SOURCE_MAX_CHANNELS * 4 || (i < n - 1 ? *end != ',' : *end != '\0')) p = NULL;
    else out[i] = (int)x, p = end + 1;
  }
  return p ? SS_OK : bad(ctx, m, key, n == 3 ? "three counts \"AP,LF,SY\"" : "four counts \"MN,MA,XA,DW\"", v);
}

static ss_status read_meta(ss_ctx *ctx, meta_t *m) {
  FILE *f = fopen(m->meta, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open the SpikeGLX .meta", m->meta);
  SS_TRY(SS_ALLOC(ctx, m->text, META_MAX_BYTES + 1, "SpikeGLX .meta"));
  m->len = fread(m->text, 1, META_MAX_BYTES, f);
  int big = !feof(f) && fgetc(f) != EOF;
  fclose(f);
  if (big) return ss_fail(ctx, SS_ERR_INPUT, "%s: larger than %d bytes: not a SpikeGLX .meta", m->meta, META_MAX_BYTES);
  m->text[m->len] = '\0';
  for (size_t i = 0; i < m->len; i++)
    if (m->text[i] == '\n' || m->text[i] == '\r') m->text[i] = '\0';
  return SS_OK;
}

/* ---------------------------------------------------------------- channels and scale */

/* snsSaveChanSubset: "all" or "a:b,c,..." acquired ids, one per saved channel. */
static ss_status saved_ids(ss_ctx *ctx, meta_t *m) {
  SS_TRY(SS_ALLOC(ctx, m->acq, (size_t)m->n_saved, "SpikeGLX channel ids"));
  const char *v = get(m, "snsSaveChanSubset"), *p = v;
  int k = 0;
  if (!v || strcmp(v, "all") == 0) {
    for (k = 0; k < m->n_saved; k++) m->acq[k] = k;
    return SS_OK;
  }
  while (p && *p) {
    char *end = NULL;
    long a = strtol(p, &end, 10), b = a;
    if (end != p && *end == ':') b = strtol(p = end + 1, &end, 10);
    if (end == p || b < a || a < 0 || k + (b - a) >= m->n_saved || (*end && *end != ',')) break;
    for (long x = a; x <= b; x++) m->acq[k++] = (int)x;
    p = *end ? end + 1 : end;
  }
  if (!p || *p || k != m->n_saved) return bad(ctx, m, "snsSaveChanSubset", "\"all\" or one id per saved channel", v);
  return SS_OK;
}

static ss_status channel_counts(ss_ctx *ctx, meta_t *m) {
  double n = 0;
  SS_TRY(number(ctx, m, "nSavedChans", NAN, &n));
  if (n < 1 || n > SS_SOURCE_MAX_CHANNELS + 8 || n != floor(n))
    return bad(ctx, m, "nSavedChans", "a channel count >= 1", get(m, "nSavedChans"));
  m->n_saved = (int)n;
  const char *key = m->imec ? "snsApLfSy" : "snsMnMaXaDw";
  int k = m->imec ? 3 : 4;
  SS_TRY(int_list(ctx, m, key, k, m->counts));
  int sum = 0;
  for (int i = 0; i < k; i++) sum += m->counts[i];
  m->n_kept = m->counts[0] + m->counts[1]; /* AP + LF, or MN + MA: saved first, in that order */
  if (sum != m->n_saved || m->n_kept < 1) {
    char want[96];
    snprintf(want, sizeof(want), "counts summing to nSavedChans (%d) with at least one neural channel", m->n_saved);
    return bad(ctx, m, key, want, get(m, key));
  }
  return saved_ids(ctx, m);
}

/* The next "(...)" group of a map value: its inside into buf; NULL at the end. */
static const char *group(const char *p, char *buf, size_t len) {
  p = p ? strchr(p, '(') : NULL;
  const char *e = p ? strchr(p, ')') : NULL;
  if (!e || (size_t)(e - p) >= len) return NULL;
  memcpy(buf, p + 1, (size_t)(e - p - 1));
  buf[e - p - 1] = '\0';
  return e + 1;
}

/* Per-channel gain from ~imroTbl: entries of 6 fields (NP 1.0: chan bank ref apGain lfGain apFilt)
 * give AP or LF gains; 4 or 5 fields (NP 2.0) mean the fixed gain. */
static ss_status imro_gains(ss_ctx *ctx, meta_t *m, double *gain) {
  const char *key = "~imroTbl", *v = get(m, key), *p = v;
  char buf[256];
  int n_acq_ap = 0, acq_counts[3] = {0};
  if (get(m, "acqApLfSy") && int_list(ctx, m, "acqApLfSy", 3, acq_counts) == SS_OK) n_acq_ap = acq_counts[0];
  else n_acq_ap = m->counts[0] ? m->counts[0] : m->counts[1];
  p = group(p, buf, sizeof(buf)); /* header (type,count) */
  int entries = 0, fields = 0;
  double ap[SS_SOURCE_MAX_CHANNELS], lf[SS_SOURCE_MAX_CHANNELS];
  while (p && entries < SS_SOURCE_MAX_CHANNELS && (p = group(p, buf, sizeof(buf))) != NULL) {
    double f[8];
    int nf = sscanf(buf, "%lf %lf %lf %lf %lf %lf %lf", &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6]);
    if (nf < 4 || nf > 6 || (fields && nf != fields)) return bad(ctx, m, key, "entries of 4 to 6 numbers", buf);
    fields = nf;
    ap[entries] = nf == 6 ? f[3] : NP2_GAIN;
    lf[entries++] = nf == 6 ? f[4] : NP2_GAIN;
  }
  if (!entries) return bad(ctx, m, key, "a (type,count) header and one entry per channel", v);
  m->np2 = fields < 6;
  for (int c = 0; c < m->n_kept; c++) {
    int id = m->acq[c], lfp = id >= n_acq_ap || m->counts[0] == 0, e = id >= n_acq_ap ? id - n_acq_ap : id;
    if (e >= entries) return bad(ctx, m, key, "an entry for every saved channel", v);
    gain[c] = lfp ? lf[e] : ap[e];
    if (!(gain[c] > 0)) return bad(ctx, m, key, "gains > 0", buf);
  }
  return SS_OK;
}

static ss_status scales(ss_ctx *ctx, meta_t *m, ss_source_info *info) {
  double range = 0, max_int = 0;
  SS_TRY(ss_source_info_scale(ctx, info, 1.0));
  if (m->imec) {
    SS_TRY(number(ctx, m, "imAiRangeMax", NAN, &range));
    SS_TRY(imro_gains(ctx, m, info->uv_per_step));
    SS_TRY(number(ctx, m, "imMaxInt", m->np2 ? NP2_MAX_INT : NP1_MAX_INT, &max_int));
  } else {
    double mn = 0, ma = 0;
    SS_TRY(number(ctx, m, "niAiRangeMax", NAN, &range));
    SS_TRY(number(ctx, m, "niMaxInt", NI_MAX_INT, &max_int));
    if (m->counts[0]) SS_TRY(number(ctx, m, "niMNGain", NAN, &mn));
    if (m->counts[1]) SS_TRY(number(ctx, m, "niMAGain", NAN, &ma));
    for (int c = 0; c < m->n_kept; c++) info->uv_per_step[c] = c < m->counts[0] ? mn : ma;
  }
  const char *rk = m->imec ? "imAiRangeMax" : "niAiRangeMax", *mk = m->imec ? "imMaxInt" : "niMaxInt";
  if (!(range > 0)) return bad(ctx, m, rk, "a voltage > 0", get(m, rk));
  if (!(max_int > 0)) return bad(ctx, m, mk, "an integer > 0", get(m, mk));
  for (int c = 0; c < m->n_kept; c++) info->uv_per_step[c] = range / max_int / info->uv_per_step[c] * 1e6;
  SS_TRY(ss_source_check_scales(ctx, m->meta, "gains", info->uv_per_step, m->n_kept));
  info->scale_known = 1;
  return SS_OK;
}

/* ---------------------------------------------------------------- geometry */

/* ~snsGeomMap (header part,shanks,spacing,width; entries shank:x:z:used, µm) or ~snsShankMap
 * (header shanks,cols,rows; entries shank:col:row:used, placed with the pitches above). */
static ss_status positions(ss_ctx *ctx, meta_t *m, ss_source_info *info) {
  const char *key = get(m, "~snsGeomMap") ? "~snsGeomMap" : "~snsShankMap", *v = get(m, key), *p = v;
  if (!v) return SS_OK;
  int geom = key[4] == 'G';
  char buf[256];
  double spacing = SHANK_PITCH_UM;
  p = group(p, buf, sizeof(buf));
  if (geom && p) {
    char *c = strchr(buf, ',');
    c = c ? strchr(c + 1, ',') : NULL;
    if (!c || sscanf(c + 1, "%lf", &spacing) != 1) return bad(ctx, m, key, "a header (part,shanks,spacing,width)", buf);
  }
  SS_TRY(SS_ALLOC(ctx, info->x_um, (size_t)m->n_kept, "positions"));
  SS_TRY(SS_ALLOC(ctx, info->y_um, (size_t)m->n_kept, "positions"));
  int k = 0;
  double row_pitch = m->np2 ? NP2_ROW_PITCH_UM : NP1_ROW_PITCH_UM;
  while (p && (p = group(p, buf, sizeof(buf))) != NULL) {
    double s, a, b;
    int used;
    if (sscanf(buf, "%lf:%lf:%lf:%d", &s, &a, &b, &used) != 4 || k >= m->n_kept)
      return bad(ctx, m, key, "one entry shank:x:z:used (or shank:col:row:used) per neural channel", buf);
    info->x_um[k] = s * spacing + (geom ? a : a * COL_PITCH_UM);
    info->y_um[k++] = geom ? b : b * row_pitch;
  }
  if (k != m->n_kept) {
    char got[32];
    snprintf(got, sizeof(got), "%d entries", k);
    return bad(ctx, m, key, "one entry per neural channel", got);
  }
  info->has_positions = 1;
  return SS_OK;
}

/* ---------------------------------------------------------------- entry */

static void pair_paths(const char *path, meta_t *m) {
  const char *dot = strrchr(path, '.');
  int stem = dot && !strchr(dot, '/') ? (int)(dot - path) : (int)strlen(path);
  snprintf(m->meta, sizeof(m->meta), "%.*s.meta", stem, path);
  snprintf(m->bin, sizeof(m->bin), "%.*s.bin", stem, path);
}

int ss_source_is_spikeglx(const char *path) {
  const char *dot = strrchr(path, '.');
  if (!dot || (strcmp(dot, ".bin") != 0 && strcmp(dot, ".meta") != 0)) return 0;
  meta_t m;
  pair_paths(path, &m);
  return access(m.meta, R_OK) == 0;
}

static ss_status open_meta(ss_ctx *ctx, meta_t *m, ss_source_info *info, ss_store *store) {
  SS_TRY(read_meta(ctx, m));
  const char *type = get(m, "typeThis");
  m->imec = type ? strcmp(type, "imec") == 0 : get(m, "imSampRate") != NULL;
  if (type && !m->imec && strcmp(type, "nidq") != 0) return bad(ctx, m, "typeThis", "imec or nidq", type);
  double rate = 0, bytes = 0;
  SS_TRY(number(ctx, m, m->imec ? "imSampRate" : "niSampRate", NAN, &rate));
  SS_TRY(ss_source_check_rate(ctx, m->meta, m->imec ? "imSampRate" : "niSampRate", rate));
  SS_TRY(channel_counts(ctx, m));
  SS_TRY(ss_source_check_channels(ctx, m->meta, "nSavedChans", m->n_kept, NULL));
  int fd;
  int64_t size;
  SS_TRY(ss_source_open_fd(ctx, m->bin, &fd, &size));
  int64_t frame = (int64_t)m->n_saved * 2;
  SS_TRY(ss_source_flat_store(ctx, store, fd, size, 0, m->n_saved, size / frame));
  SS_TRY(number(ctx, m, "fileSizeBytes", (double)size, &bytes));
  if (bytes != (double)size || size % frame != 0 || size == 0) {
    char want[SS_SOURCE_PATH_MAX + 96];
    snprintf(want, sizeof(want), "the size of %s (%lld bytes) and whole %d-channel frames", m->bin, (long long)size,
             m->n_saved);
    return bad(ctx, m, "fileSizeBytes", want, get(m, "fileSizeBytes") ? get(m, "fileSizeBytes") : "(absent)");
  }
  info->format = SS_FORMAT_SPIKEGLX;
  snprintf(info->dtype, sizeof(info->dtype), "int16");
  snprintf(info->data_path, sizeof(info->data_path), "%s", m->bin);
  info->rate_hz = rate;
  info->n_channels = m->n_kept;
  info->n_samples = size / frame;
  if (m->n_kept < m->n_saved) { /* the delivered channels are the first n_kept of each frame */
    store->dims[1] = m->n_kept;
    SS_TRY(SS_ALLOC(ctx, store->cols, (size_t)m->n_kept, "channel selection"));
    for (int c = 0; c < m->n_kept; c++) store->cols[c] = c;
  }
  info->n_left_out = m->n_saved - m->n_kept;
  if (info->n_left_out)
    snprintf(info->left_out, sizeof(info->left_out), "%s",
             m->imec ? "sync (SY)" : "auxiliary analog and digital (XA, DW)");
  SS_TRY(scales(ctx, m, info));
  return positions(ctx, m, info);
}

ss_status ss_source_open_spikeglx(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  meta_t m;
  memset(&m, 0, sizeof(m));
  pair_paths(spec->path, &m);
  ss_status st = open_meta(ctx, &m, info, store);
  free(m.text);
  free(m.acq);
  return st;
}
