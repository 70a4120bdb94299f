/* source_openephys.c — Open Ephys binary recordings: structure.oebin (JSON) names the continuous
 * streams; each stream's continuous.dat is flat int16, channel-interleaved. Channels that are not
 * in microvolts or are named ADC/AUX are left out through the store's column selection. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/source_internal.h"

#define OEBIN_MAX_BYTES (64 << 20)
#define OEBIN_NAME "structure.oebin"

typedef struct {
  char oebin[SS_SOURCE_PATH_MAX], dir[SS_SOURCE_PATH_MAX - 64];
  cJSON *root;
} oebin_t;

static int is_dir(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static void locate(const char *path, oebin_t *o) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  if (is_dir(path)) {
    snprintf(o->dir, sizeof(o->dir), "%.*s", (int)(n < sizeof(o->dir) ? n : sizeof(o->dir) - 1), path);
    snprintf(o->oebin, sizeof(o->oebin), "%s/" OEBIN_NAME, o->dir);
    return;
  }
  snprintf(o->oebin, sizeof(o->oebin), "%s", path);
  const char *slash = strrchr(path, '/');
  size_t d = slash ? (size_t)(slash - path) : 0;
  if (slash) snprintf(o->dir, sizeof(o->dir), "%.*s", (int)(d < sizeof(o->dir) ? d : sizeof(o->dir) - 1), path);
  else snprintf(o->dir, sizeof(o->dir), ".");
}

int ss_source_is_openephys(const char *path) {
  oebin_t o;
  locate(path, &o);
  const char *dot = strrchr(o.oebin, '.');
  struct stat sb;
  return dot && strcmp(dot, ".oebin") == 0 && stat(o.oebin, &sb) == 0 && S_ISREG(sb.st_mode);
}

static ss_status parse(ss_ctx *ctx, oebin_t *o) {
  FILE *f = fopen(o->oebin, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open", o->oebin);
  char *text = NULL;
  ss_status st = SS_ALLOC(ctx, text, OEBIN_MAX_BYTES + 1, "structure.oebin");
  size_t len = st == SS_OK ? fread(text, 1, OEBIN_MAX_BYTES, f) : 0;
  fclose(f);
  if (st != SS_OK) return st;
  text[len] = '\0';
  o->root = len < OEBIN_MAX_BYTES ? cJSON_Parse(text) : NULL;
  free(text);
  if (!o->root) return ss_fail(ctx, SS_ERR_INPUT, "%s: not JSON (or larger than %d bytes)", o->oebin, OEBIN_MAX_BYTES);
  return SS_OK;
}

/* A stream's name: folder_name without its trailing slash. */
static void stream_name(const cJSON *s, char *buf, size_t len) {
  const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "folder_name");
  const char *v = cJSON_IsString(f) ? f->valuestring : "";
  size_t n = strlen(v);
  while (n > 0 && v[n - 1] == '/') n--;
  snprintf(buf, len, "%.*s", (int)n, v);
}

static ss_status pick_stream(ss_ctx *ctx, const oebin_t *o, const char *want, const cJSON **out) {
  const cJSON *cont = cJSON_GetObjectItemCaseSensitive(o->root, "continuous"), *s;
  int n = cJSON_GetArraySize(cont);
  if (!cJSON_IsArray(cont) || n == 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: key continuous: expected a non-empty array of streams", o->oebin);
  char names[1024] = "", name[SS_SOURCE_NAME_MAX];
  *out = NULL;
  cJSON_ArrayForEach(s, cont) {
    stream_name(s, name, sizeof(name));
    const cJSON *sn = cJSON_GetObjectItemCaseSensitive(s, "stream_name");
    int match = want && (strcmp(name, want) == 0 || (cJSON_IsString(sn) && strcmp(sn->valuestring, want) == 0));
    if (match || (!want && n == 1)) *out = s;
    size_t used = strlen(names);
    snprintf(names + used, sizeof(names) - used, "%s%s", used ? ", " : "", name);
  }
  if (*out) return SS_OK;
  if (want) return ss_fail(ctx, SS_ERR_INPUT, "%s: no continuous stream %s (available: %s)", o->oebin, want, names);
  return ss_fail(ctx, SS_ERR_INPUT, "%s: %d continuous streams: choose one with --series NAME (%s)", o->oebin, n,
                 names);
}

static ss_status num(ss_ctx *ctx, const oebin_t *o, const cJSON *obj, const char *where, const char *key, double *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (cJSON_IsNumber(v) && isfinite(v->valuedouble)) {
    *out = v->valuedouble;
    return SS_OK;
  }
  char *text = v ? cJSON_PrintUnformatted(v) : NULL;
  ss_fail(ctx, SS_ERR_INPUT, "%s: %s: key %s: expected a number, got %s", o->oebin, where, key, text ? text : "none");
  free(text);
  return SS_ERR_INPUT;
}

static int neural(const cJSON *ch) {
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(ch, "units"),
              *n = cJSON_GetObjectItemCaseSensitive(ch, "channel_name");
  const char *units = cJSON_IsString(u) ? u->valuestring : "", *name = cJSON_IsString(n) ? n->valuestring : "";
  int uv = !strcmp(units, "uV") || !strcmp(units, "\xc2\xb5V") || !strcmp(units, "\xce\xbcV");
  return uv && strncmp(name, "ADC", 3) != 0 && strncmp(name, "AUX", 3) != 0;
}

/* Channels: the neural ones become store columns with their bit_volts (µV per bit). */
static ss_status channels(ss_ctx *ctx, const oebin_t *o, const cJSON *s, const char *where, int total,
                          ss_source_info *info, ss_store *store) {
  const cJSON *chs = cJSON_GetObjectItemCaseSensitive(s, "channels"), *ch;
  if (!cJSON_IsArray(chs) || cJSON_GetArraySize(chs) != total)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: key channels: expected an array of num_channels (%d) entries", o->oebin,
                   where, total);
  SS_TRY(SS_ALLOC(ctx, store->cols, (size_t)total, "channel selection"));
  SS_TRY(SS_ALLOC(ctx, info->uv_per_step, (size_t)total, "channel scales"));
  int k = 0, i = 0;
  cJSON_ArrayForEach(ch, chs) {
    if (neural(ch)) {
      char field[SS_SOURCE_NAME_MAX + 64];
      snprintf(field, sizeof(field), "%s: channels[%d]", where, i);
      SS_TRY(num(ctx, o, ch, field, "bit_volts", &info->uv_per_step[k]));
      store->cols[k++] = i;
    } else {
      const cJSON *n = cJSON_GetObjectItemCaseSensitive(ch, "channel_name");
      size_t used = strlen(info->left_out);
      if (used + 40 < sizeof(info->left_out))
        snprintf(info->left_out + used, sizeof(info->left_out) - used, "%s%s", used ? ", " : "",
                 cJSON_IsString(n) ? n->valuestring : "?");
    }
    i++;
  }
  if (k == 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: no channel in uV (ADC/AUX and other units are left out)", o->oebin,
                   where);
  info->n_channels = k;
  info->n_left_out = total - k;
  info->scale_known = 1;
  return ss_source_check_scales(ctx, o->oebin, "bit_volts", info->uv_per_step, k);
}

static ss_status open_stream(ss_ctx *ctx, const oebin_t *o, const ss_source_spec *spec, ss_source_info *info,
                             ss_store *store) {
  const cJSON *s;
  SS_TRY(pick_stream(ctx, o, spec->series, &s));
  char name[SS_SOURCE_NAME_MAX], where[SS_SOURCE_NAME_MAX + 32];
  stream_name(s, name, sizeof(name));
  snprintf(where, sizeof(where), "stream %s", name);
  double rate = 0, total = 0;
  SS_TRY(num(ctx, o, s, where, "sample_rate", &rate));
  SS_TRY(ss_source_check_rate(ctx, o->oebin, "sample_rate", rate));
  SS_TRY(num(ctx, o, s, where, "num_channels", &total));
  if (total != floor(total)) total = -1;
  SS_TRY(ss_source_check_channels(ctx, o->oebin, "num_channels", (int64_t)total, NULL));
  SS_TRY(channels(ctx, o, s, where, (int)total, info, store));
  if (snprintf(info->data_path, sizeof(info->data_path), "%s/continuous/%s/continuous.dat", o->dir, name) >=
      (int)sizeof(info->data_path))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: path of continuous.dat too long", o->oebin, where);
  snprintf(info->dataset, sizeof(info->dataset), "%s", name);
  int fd;
  int64_t size, frame = (int64_t)total * 2;
  SS_TRY(ss_source_open_fd(ctx, info->data_path, &fd, &size));
  SS_TRY(ss_source_flat_store(ctx, store, fd, size, 0, (int64_t)total, size / frame));
  if (size == 0 || size % frame != 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %lld bytes is not a whole number of %d-channel int16 frames",
                   info->data_path, (long long)size, (int)total);
  store->dims[1] = info->n_channels;
  if (info->n_channels == (int)total) { /* every channel kept: whole frames straight into the chunk */
    free(store->cols);
    store->cols = NULL;
  }
  info->format = SS_FORMAT_OPENEPHYS;
  snprintf(info->dtype, sizeof(info->dtype), "int16");
  info->rate_hz = rate;
  info->n_samples = size / frame;
  return SS_OK;
}

ss_status ss_source_open_openephys(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  oebin_t o;
  memset(&o, 0, sizeof(o));
  locate(spec->path, &o);
  ss_status st = parse(ctx, &o);
  if (st == SS_OK) st = open_stream(ctx, &o, spec, info, store);
  cJSON_Delete(o.root);
  return st;
}
