/* probe.c — probe JSON (probeinterface and simple layouts), validation and the adjacency graph. */
#include "params/probe.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"

#define SS_PROBE_MAX_BYTES (16u << 20)
#define SS_PROBE_MAX_CONTACTS 65536

void ss_probe_free(ss_probe *p) {
  free(p->channel);
  free(p->x);
  free(p->y);
  free(p->shank);
  free(p->connected);
  free(p->adj_start);
  free(p->adj);
  memset(p, 0, sizeof(*p));
}

static ss_status probe_alloc(ss_ctx *ctx, ss_probe *p, int n) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  if (SS_CALLOC(ctx, p->channel, n, "probe") || SS_CALLOC(ctx, p->x, n, "probe") || SS_CALLOC(ctx, p->y, n, "probe") ||
      SS_CALLOC(ctx, p->shank, n, "probe") || SS_CALLOC(ctx, p->connected, n, "probe") ||
      SS_CALLOC(ctx, p->adj_start, n + 1, "probe")) {
    ss_probe_free(p);
    return SS_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) p->connected[i] = 1;
  return SS_OK;
}

int ss_probe_contact_of_channel(const ss_probe *p, int c) {
  for (int i = 0; i < p->n; i++)
    if (p->channel[i] == c) return i;
  return -1;
}

/* --- adjacency ------------------------------------------------------------------------------ */

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Build the CSR from an n×n 0/1 matrix (symmetric, zero diagonal). */
static ss_status adjacency_from_matrix(ss_ctx *ctx, ss_probe *p, const unsigned char *m) {
  int n = p->n, total = 0;
  for (int i = 0; i < n * n; i++) total += m[i];
  free(p->adj);
  p->adj = NULL;
  SS_TRY(SS_ALLOC(ctx, p->adj, total ? total : 1, "probe adjacency"));
  int k = 0;
  for (int i = 0; i < n; i++) {
    p->adj_start[i] = k;
    for (int j = 0; j < n; j++)
      if (m[(size_t)i * n + j]) p->adj[k++] = j;
  }
  p->adj_start[n] = k;
  for (int i = 0; i < n; i++) qsort(p->adj + p->adj_start[i], (size_t)ss_probe_degree(p, i), sizeof(int), cmp_int);
  return SS_OK;
}

static ss_status adjacency_by_radius(ss_ctx *ctx, ss_probe *p, double radius_um) {
  unsigned char *m = NULL;
  SS_TRY(SS_CALLOC(ctx, m, (size_t)p->n * p->n, "probe adjacency"));
  for (int i = 0; i < p->n; i++)
    for (int j = 0; j < p->n; j++) {
      double dx = p->x[i] - p->x[j], dy = p->y[i] - p->y[j];
      m[(size_t)i * p->n + j] = i != j && p->shank[i] == p->shank[j] && sqrt(dx * dx + dy * dy) <= radius_um;
    }
  ss_status st = adjacency_from_matrix(ctx, p, m);
  free(m);
  return st;
}

/* --- JSON helpers: every failure names the JSON path ------------------------------------------- */

static ss_status get_number(ss_ctx *ctx, const char *origin, const cJSON *item, const char *path, double *out) {
  if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble)) {
    char *text = item ? cJSON_PrintUnformatted(item) : NULL;
    ss_status st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected a finite number, got %s", origin, path,
                           text ? text : "nothing");
    free(text);
    return st;
  }
  *out = item->valuedouble;
  return SS_OK;
}

static ss_status get_int(ss_ctx *ctx, const char *origin, const cJSON *item, const char *path, int *out) {
  double v = 0;
  SS_TRY(get_number(ctx, origin, item, path, &v));
  if (v != floor(v) || fabs(v) > 1e9)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected an integer, got %g", origin, path, v);
  *out = (int)v;
  return SS_OK;
}

static ss_status get_array(ss_ctx *ctx, const char *origin, const cJSON *obj, const char *key, int want, int required,
                           const cJSON **out) {
  *out = cJSON_GetObjectItemCaseSensitive(obj, key);
  if (!*out) {
    if (!required) return SS_OK;
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: missing", origin, key);
  }
  if (!cJSON_IsArray(*out)) return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected an array", origin, key);
  int n = cJSON_GetArraySize(*out);
  if (want >= 0 && n != want)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: has %d entries, expected %d (one per contact)", origin, key, n, want);
  return SS_OK;
}

/* positions [[x, y], ...] → p->x, p->y starting at contact `base` */
static ss_status read_positions(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, ss_probe *p,
                                int base) {
  int i = 0;
  for (const cJSON *row = arr->child; row; row = row->next, i++) {
    char path[96];
    snprintf(path, sizeof(path), "%s[%d]", key, i);
    if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) < 2)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected [x, y]", origin, path);
    snprintf(path, sizeof(path), "%s[%d][0]", key, i);
    SS_TRY(get_number(ctx, origin, cJSON_GetArrayItem(row, 0), path, &p->x[base + i]));
    snprintf(path, sizeof(path), "%s[%d][1]", key, i);
    SS_TRY(get_number(ctx, origin, cJSON_GetArrayItem(row, 1), path, &p->y[base + i]));
  }
  return SS_OK;
}

static ss_status read_ints(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, int *dst) {
  int i = 0;
  for (const cJSON *it = arr->child; it; it = it->next, i++) {
    char path[96];
    snprintf(path, sizeof(path), "%s[%d]", key, i);
    SS_TRY(get_int(ctx, origin, it, path, &dst[i]));
  }
  return SS_OK;
}

/* shank ids are strings in probeinterface ("" = one shank) and integers in the simple layout */
static ss_status read_shanks(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, int *dst, int offset) {
  int i = 0;
  for (const cJSON *it = arr->child; it; it = it->next, i++) {
    if (cJSON_IsString(it)) {
      char *end = NULL;
      long v = *it->valuestring ? strtol(it->valuestring, &end, 10) : 0;
      if (*it->valuestring && *end)
        return ss_fail(ctx, SS_ERR_INPUT, "%s: %s[%d]: expected a shank number, got \"%s\"", origin, key, i,
                       it->valuestring);
      dst[i] = (int)v + offset;
    } else {
      char path[96];
      snprintf(path, sizeof(path), "%s[%d]", key, i);
      SS_TRY(get_int(ctx, origin, it, path, &dst[i]));
      dst[i] += offset;
    }
  }
  return SS_OK;
}

/* --- the two layouts ------------------------------------------------------------------------- */

static ss_status load_probeinterface(ss_ctx *ctx, const char *origin, const cJSON *probes, ss_probe *p) {
  int total = 0, n_probes = cJSON_GetArraySize(probes);
  if (n_probes == 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: probes: empty", origin);
  for (const cJSON *pr = probes->child; pr; pr = pr->next) {
    const cJSON *pos;
    SS_TRY(get_array(ctx, origin, pr, "contact_positions", -1, 1, &pos));
    total += cJSON_GetArraySize(pos);
  }
  if (total == 0 || total > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %d contacts (expected 1 to %d)", origin, total, SS_PROBE_MAX_CONTACTS);
  SS_TRY(probe_alloc(ctx, p, total));
  int base = 0, shank_offset = 0;
  for (const cJSON *pr = probes->child; pr; pr = pr->next) {
    const cJSON *pos, *dci, *sh;
    get_array(ctx, origin, pr, "contact_positions", -1, 1, &pos);
    int n = cJSON_GetArraySize(pos);
    SS_TRY(get_array(ctx, origin, pr, "device_channel_indices", n, 1, &dci));
    SS_TRY(get_array(ctx, origin, pr, "shank_ids", n, 0, &sh));
    SS_TRY(read_positions(ctx, origin, pos, "contact_positions", p, base));
    SS_TRY(read_ints(ctx, origin, dci, "device_channel_indices", p->channel + base));
    int max_shank = 0;
    if (sh) SS_TRY(read_shanks(ctx, origin, sh, "shank_ids", p->shank + base, shank_offset));
    for (int i = base; i < base + n; i++) {
      if (p->channel[i] == -1) p->connected[i] = 0;
      if (p->shank[i] - shank_offset > max_shank) max_shank = p->shank[i] - shank_offset;
    }
    base += n;
    shank_offset += max_shank + 1; /* shanks of different probes never touch */
  }
  return SS_OK;
}

static ss_status load_simple(ss_ctx *ctx, const char *origin, const cJSON *root, ss_probe *p) {
  const cJSON *ch, *pos, *sh, *con;
  SS_TRY(get_array(ctx, origin, root, "channels", -1, 1, &ch));
  int n = cJSON_GetArraySize(ch);
  if (n == 0 || n > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: channels: %d entries (expected 1 to %d)", origin, n, SS_PROBE_MAX_CONTACTS);
  SS_TRY(get_array(ctx, origin, root, "positions", n, 1, &pos));
  SS_TRY(get_array(ctx, origin, root, "shanks", n, 0, &sh));
  SS_TRY(get_array(ctx, origin, root, "connected", n, 0, &con));
  SS_TRY(probe_alloc(ctx, p, n));
  SS_TRY(read_ints(ctx, origin, ch, "channels", p->channel));
  SS_TRY(read_positions(ctx, origin, pos, "positions", p, 0));
  if (sh) SS_TRY(read_shanks(ctx, origin, sh, "shanks", p->shank, 0));
  int i = 0;
  for (const cJSON *it = con ? con->child : NULL; it; it = it->next, i++) {
    if (!cJSON_IsBool(it)) return ss_fail(ctx, SS_ERR_INPUT, "%s: connected[%d]: expected true or false", origin, i);
    p->connected[i] = cJSON_IsTrue(it);
  }
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
  if (cJSON_IsString(name)) snprintf(p->name, sizeof(p->name), "%s", name->valuestring);
  return SS_OK;
}

/* adjacency [[a, b], ...] of channel ids → CSR */
static ss_status load_adjacency_list(ss_ctx *ctx, const char *origin, const cJSON *list, ss_probe *p) {
  unsigned char *m = NULL;
  SS_TRY(SS_CALLOC(ctx, m, (size_t)p->n * p->n, "probe adjacency"));
  ss_status st = SS_OK;
  int k = 0;
  for (const cJSON *pair = list->child; pair && st == SS_OK; pair = pair->next, k++) {
    int ab[2] = {0, 0};
    char path[64];
    snprintf(path, sizeof(path), "adjacency[%d]", k);
    if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2) {
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected a pair [a, b]", origin, path);
      break;
    }
    for (int e = 0; e < 2 && st == SS_OK; e++) {
      st = get_int(ctx, origin, cJSON_GetArrayItem(pair, e), path, &ab[e]);
      if (st == SS_OK && (ab[e] = ss_probe_contact_of_channel(p, ab[e])) < 0)
        st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: channel %d is not on the probe", origin, path,
                     (int)cJSON_GetArrayItem(pair, e)->valuedouble);
    }
    if (st == SS_OK && ab[0] == ab[1])
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: %s: a channel cannot be adjacent to itself", origin, path);
    if (st == SS_OK) m[(size_t)ab[0] * p->n + ab[1]] = m[(size_t)ab[1] * p->n + ab[0]] = 1;
  }
  if (st == SS_OK) st = adjacency_from_matrix(ctx, p, m);
  free(m);
  return st;
}

/* Channel ids: non-negative (or -1 for unconnected probeinterface contacts) and unique. */
static ss_status validate_channels(ss_ctx *ctx, const char *origin, const ss_probe *p) {
  for (int i = 0; i < p->n; i++) {
    if (p->channel[i] < 0 && !(p->channel[i] == -1 && !p->connected[i]))
      return ss_fail(ctx, SS_ERR_INPUT, "%s: contact %d: channel index %d is negative", origin, i, p->channel[i]);
    for (int j = 0; j < i; j++)
      if (p->channel[i] >= 0 && p->channel[j] == p->channel[i])
        return ss_fail(ctx, SS_ERR_INPUT, "%s: duplicate channel %d (contacts %d and %d)", origin, p->channel[i], j, i);
  }
  return SS_OK;
}

static ss_status finish(ss_ctx *ctx, const char *origin, const cJSON *root, double radius_um, ss_probe *p) {
  SS_TRY(validate_channels(ctx, origin, p));
  const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "adjacency");
  if (list) {
    if (!cJSON_IsArray(list)) return ss_fail(ctx, SS_ERR_INPUT, "%s: adjacency: expected an array of pairs", origin);
    return load_adjacency_list(ctx, origin, list, p);
  }
  if (!(radius_um > 0) || !isfinite(radius_um))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: no adjacency list and no valid radius (%g)", origin, radius_um);
  return adjacency_by_radius(ctx, p, radius_um);
}

ss_status ss_probe_load_json(ss_ctx *ctx, const char *json, const char *origin, double radius_um, ss_probe *out) {
  memset(out, 0, sizeof(*out));
  cJSON *root = cJSON_Parse(json);
  if (!root) return ss_fail(ctx, SS_ERR_INPUT, "%s: invalid JSON", origin);
  ss_status st;
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(root, "probes");
  if (!cJSON_IsObject(root)) st = ss_fail(ctx, SS_ERR_INPUT, "%s: expected a JSON object", origin);
  else if (cJSON_IsArray(probes)) st = load_probeinterface(ctx, origin, probes, out);
  else if (cJSON_GetObjectItemCaseSensitive(root, "channels")) st = load_simple(ctx, origin, root, out);
  else
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: neither a probeinterface file (\"probes\") nor a simple probe (\"channels\")",
                 origin);
  if (st == SS_OK) st = finish(ctx, origin, root, radius_um, out);
  if (st == SS_OK && !out->name[0]) {
    const char *slash = strrchr(origin, '/');
    snprintf(out->name, sizeof(out->name), "%s", slash ? slash + 1 : origin);
  }
  cJSON_Delete(root);
  if (st != SS_OK) ss_probe_free(out);
  return st;
}

ss_status ss_probe_load_file(ss_ctx *ctx, const char *path, double radius_um, ss_probe *out) {
  char *text = NULL;
  memset(out, 0, sizeof(*out));
  SS_TRY(ss_read_text_file(ctx, path, SS_PROBE_MAX_BYTES, &text, NULL));
  ss_status st = ss_probe_load_json(ctx, text, path, radius_um, out);
  free(text);
  return st;
}

ss_status ss_probe_from_positions(ss_ctx *ctx, int n, const double *x, const double *y, double radius_um,
                                  ss_probe *out) {
  if (n <= 0 || n > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "probe from positions: %d channels (expected 1 to %d)", n, SS_PROBE_MAX_CONTACTS);
  SS_TRY(probe_alloc(ctx, out, n));
  snprintf(out->name, sizeof(out->name), "positions");
  for (int i = 0; i < n; i++) {
    if (!isfinite(x[i]) || !isfinite(y[i])) {
      ss_probe_free(out);
      return ss_fail(ctx, SS_ERR_INPUT, "probe from positions: channel %d: position (%g, %g) is not finite", i, x[i],
                     y[i]);
    }
    out->channel[i] = i;
    out->x[i] = x[i];
    out->y[i] = y[i];
  }
  ss_status st = adjacency_by_radius(ctx, out, radius_um);
  if (st != SS_OK) ss_probe_free(out);
  return st;
}

ss_status ss_probe_check_recording(ss_ctx *ctx, const ss_probe *p, int n_rec) {
  for (int i = 0; i < p->n; i++)
    if (p->channel[i] >= n_rec)
      return ss_fail(ctx, SS_ERR_INPUT, "probe %s: channel %d is out of range for a recording of %d channels", p->name,
                     p->channel[i], n_rec);
  if (p->n != n_rec)
    return ss_fail(ctx, SS_ERR_INPUT, "probe %s: has %d channels, the recording %d", p->name, p->n, n_rec);
  return SS_OK;
}
