/* probe.c — probe storage, the simple JSON layout, file dispatch, validation and the adjacency graph. */
#include "params/probe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "params/params.h"
#include "params/probe_internal.h"

#define SS_PROBE_MAX_BYTES (16u << 20)

void ss_probe_free(ss_probe *p) {
  free(p->channel);
  free(p->x);
  free(p->y);
  free(p->shank);
  free(p->connected);
  free(p->adj_start);
  free(p->adj);
  free(p->probe);
  free(p->shape);
  free(p->shape_a);
  free(p->shape_b);
  free(p->axes);
  free(p->contact_id);
  free(p->shank_id);
  for (int i = 0; p->probe_extra && i < p->n_probes; i++) free(p->probe_extra[i]);
  free(p->probe_extra);
  memset(p, 0, sizeof(*p));
}

/* Contacts start wired, connected, on shank 0 of probe 0, as 5 µm circles in the x-y plane. */
ss_status ss_probe_alloc(ss_ctx *ctx, ss_probe *p, int n, int n_probes) {
  memset(p, 0, sizeof(*p));
  p->n = n;
  p->n_probes = n_probes;
  if (SS_CALLOC(ctx, p->channel, n, "probe") || SS_CALLOC(ctx, p->x, n, "probe") || SS_CALLOC(ctx, p->y, n, "probe") ||
      SS_CALLOC(ctx, p->shank, n, "probe") || SS_CALLOC(ctx, p->connected, n, "probe") ||
      SS_CALLOC(ctx, p->adj_start, n + 1, "probe") || SS_CALLOC(ctx, p->probe, n, "probe") ||
      SS_CALLOC(ctx, p->shape, n, "probe") || SS_CALLOC(ctx, p->shape_a, n, "probe") ||
      SS_CALLOC(ctx, p->shape_b, n, "probe") || SS_CALLOC(ctx, p->axes, (size_t)n * 4, "probe") ||
      SS_CALLOC(ctx, p->contact_id, n, "probe") || SS_CALLOC(ctx, p->shank_id, n, "probe") ||
      SS_CALLOC(ctx, p->probe_extra, n_probes, "probe")) {
    ss_probe_free(p);
    return SS_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) {
    p->connected[i] = 1;
    p->shape_a[i] = 5.0;
    p->axes[4 * i] = p->axes[4 * i + 3] = 1.0;
  }
  return SS_OK;
}

int ss_probe_contact_of_channel(const ss_probe *p, int c) {
  for (int i = 0; c >= 0 && i < p->n; i++)
    if (p->channel[i] == c) return i;
  return -1;
}

int ss_probe_n_wired(const ss_probe *p) {
  int k = 0;
  for (int i = 0; i < p->n; i++) k += p->channel[i] >= 0;
  return k;
}

/* --- adjacency ------------------------------------------------------------------------------ */

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Build the CSR from an n×n 0/1 matrix (symmetric, zero diagonal). */
static ss_status adjacency_from_matrix(ss_ctx *ctx, ss_probe *p, const unsigned char *m) {
  int n = p->n, total = 0;
  for (size_t i = 0; i < (size_t)n * n; i++) total += m[i];
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
      m[(size_t)i * p->n + j] = i != j && p->channel[i] >= 0 && p->channel[j] >= 0 && p->shank[i] == p->shank[j] &&
                                sqrt(dx * dx + dy * dy) <= radius_um;
    }
  ss_status st = adjacency_from_matrix(ctx, p, m);
  free(m);
  return st;
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
      st = ss_probe_get_int(ctx, origin, cJSON_GetArrayItem(pair, e), path, &ab[e]);
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

/* --- JSON helpers: every failure names the JSON path ------------------------------------------- */

ss_status ss_probe_get_number(ss_ctx *ctx, const char *origin, const cJSON *item, const char *path, double *out) {
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

ss_status ss_probe_get_int(ss_ctx *ctx, const char *origin, const cJSON *item, const char *path, int *out) {
  double v = 0;
  SS_TRY(ss_probe_get_number(ctx, origin, item, path, &v));
  if (v != floor(v) || fabs(v) > 1e9)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected an integer, got %g", origin, path, v);
  *out = (int)v;
  return SS_OK;
}

ss_status ss_probe_get_array(ss_ctx *ctx, const char *origin, const cJSON *obj, const char *key, int want, int required,
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

ss_status ss_probe_read_positions(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, double scale,
                                  ss_probe *p, int base) {
  int i = 0;
  for (const cJSON *row = arr->child; row; row = row->next, i++) {
    char path[96];
    snprintf(path, sizeof(path), "%s[%d]", key, i);
    if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != 2)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected [x, y]", origin, path);
    snprintf(path, sizeof(path), "%s[%d][0]", key, i);
    SS_TRY(ss_probe_get_number(ctx, origin, cJSON_GetArrayItem(row, 0), path, &p->x[base + i]));
    snprintf(path, sizeof(path), "%s[%d][1]", key, i);
    SS_TRY(ss_probe_get_number(ctx, origin, cJSON_GetArrayItem(row, 1), path, &p->y[base + i]));
    p->x[base + i] *= scale;
    p->y[base + i] *= scale;
  }
  return SS_OK;
}

ss_status ss_probe_read_ints(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, int *dst) {
  int i = 0;
  for (const cJSON *it = arr->child; it; it = it->next, i++) {
    char path[96];
    snprintf(path, sizeof(path), "%s[%d]", key, i);
    SS_TRY(ss_probe_get_int(ctx, origin, it, path, &dst[i]));
  }
  return SS_OK;
}

/* --- the simple layout ----------------------------------------------------------------------- */

static ss_status read_int_shanks(ss_ctx *ctx, const char *origin, const cJSON *arr, ss_probe *p) {
  SS_TRY(ss_probe_read_ints(ctx, origin, arr, "shanks", p->shank));
  for (int i = 0; i < p->n; i++) snprintf(p->shank_id[i], SS_PROBE_ID_LEN, "%d", p->shank[i]);
  return SS_OK;
}

static ss_status load_simple(ss_ctx *ctx, const char *origin, const cJSON *root, ss_probe *p) {
  const cJSON *ch, *pos, *sh, *con;
  SS_TRY(ss_probe_get_array(ctx, origin, root, "channels", -1, 1, &ch));
  int n = cJSON_GetArraySize(ch);
  if (n == 0 || n > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: channels: %d entries (expected 1 to %d)", origin, n, SS_PROBE_MAX_CONTACTS);
  SS_TRY(ss_probe_get_array(ctx, origin, root, "positions", n, 1, &pos));
  SS_TRY(ss_probe_get_array(ctx, origin, root, "shanks", n, 0, &sh));
  SS_TRY(ss_probe_get_array(ctx, origin, root, "connected", n, 0, &con));
  SS_TRY(ss_probe_alloc(ctx, p, n, 1));
  SS_TRY(ss_probe_read_ints(ctx, origin, ch, "channels", p->channel));
  SS_TRY(ss_probe_read_positions(ctx, origin, pos, "positions", 1.0, p, 0));
  if (sh) SS_TRY(read_int_shanks(ctx, origin, sh, p));
  int i = 0;
  for (const cJSON *it = con ? con->child : NULL; it; it = it->next, i++) {
    if (!cJSON_IsBool(it)) return ss_fail(ctx, SS_ERR_INPUT, "%s: connected[%d]: expected true or false", origin, i);
    p->connected[i] = cJSON_IsTrue(it);
  }
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
  if (cJSON_IsString(name)) snprintf(p->name, sizeof(p->name), "%s", name->valuestring);
  return SS_OK;
}

/* Channel ids: non-negative or -1 (unwired), and unique among wired contacts. */
static ss_status validate_channels(ss_ctx *ctx, const char *origin, ss_probe *p) {
  int unwired = 0;
  for (int i = 0; i < p->n; i++) {
    if (p->channel[i] < -1)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: contact %d: channel index %d is negative", origin, i, p->channel[i]);
    if (p->channel[i] == -1) {
      p->connected[i] = 0;
      unwired++;
    }
    for (int j = 0; j < i; j++)
      if (p->channel[i] >= 0 && p->channel[j] == p->channel[i])
        return ss_fail(ctx, SS_ERR_INPUT, "%s: duplicate channel %d (contacts %d and %d)", origin, p->channel[i], j, i);
  }
  if (unwired == p->n) return ss_fail(ctx, SS_ERR_INPUT, "%s: no contact is wired to a device channel", origin);
  if (unwired)
    ss_log_info(ctx, "%s: %d of %d contacts have device channel -1 (unwired) and are left out", origin, unwired, p->n);
  return SS_OK;
}

ss_status ss_probe_finish(ss_ctx *ctx, const char *origin, const cJSON *adjacency, double radius_um, ss_probe *p) {
  SS_TRY(validate_channels(ctx, origin, p));
  if (adjacency) {
    if (!cJSON_IsArray(adjacency))
      return ss_fail(ctx, SS_ERR_INPUT, "%s: adjacency: expected an array of pairs", origin);
    return load_adjacency_list(ctx, origin, adjacency, p);
  }
  if (!(radius_um > 0) || !isfinite(radius_um))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: no adjacency list and no valid radius (%g)", origin, radius_um);
  return adjacency_by_radius(ctx, p, radius_um);
}

static void default_name(ss_probe *p, const char *origin) {
  if (p->name[0]) return;
  const char *slash = strrchr(origin, '/');
  snprintf(p->name, sizeof(p->name), "%s", slash ? slash + 1 : origin);
}

ss_status ss_probe_load_json(ss_ctx *ctx, const char *json, const char *origin, double radius_um, ss_probe *out) {
  memset(out, 0, sizeof(*out));
  cJSON *root = cJSON_Parse(json);
  if (!root) return ss_fail(ctx, SS_ERR_INPUT, "%s: invalid JSON", origin);
  ss_status st;
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(root, "probes");
  if (!cJSON_IsObject(root)) st = ss_fail(ctx, SS_ERR_INPUT, "%s: expected a JSON object", origin);
  else if (cJSON_IsArray(probes)) st = ss_probe_load_probeinterface(ctx, origin, root, out);
  else if (cJSON_GetObjectItemCaseSensitive(root, "channels")) st = load_simple(ctx, origin, root, out);
  else
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: neither a probeinterface file (\"probes\") nor a simple probe (\"channels\")",
                 origin);
  if (st == SS_OK)
    st = ss_probe_finish(ctx, origin, cJSON_GetObjectItemCaseSensitive(root, "adjacency"), radius_um, out);
  if (st == SS_OK) default_name(out, origin);
  cJSON_Delete(root);
  if (st != SS_OK) ss_probe_free(out);
  return st;
}

static int ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), m = strlen(tail);
  return n >= m && strcmp(s + n - m, tail) == 0;
}

ss_status ss_probe_load_file(ss_ctx *ctx, const char *path, double radius_um, ss_probe *out) {
  char *text = NULL;
  memset(out, 0, sizeof(*out));
  SS_TRY(ss_read_text_file(ctx, path, SS_PROBE_MAX_BYTES, &text, NULL));
  ss_status st = ends_with(path, ".prb") ? ss_probe_load_prb(ctx, text, path, radius_um, out)
                                         : ss_probe_load_json(ctx, text, path, radius_um, out);
  if (st == SS_OK) default_name(out, path);
  free(text);
  return st;
}

ss_status ss_probe_from_positions(ss_ctx *ctx, int n, const double *x, const double *y, double radius_um,
                                  ss_probe *out) {
  if (n <= 0 || n > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "probe from positions: %d channels (expected 1 to %d)", n, SS_PROBE_MAX_CONTACTS);
  SS_TRY(ss_probe_alloc(ctx, out, n, 1));
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
  int wired = ss_probe_n_wired(p);
  if (wired != n_rec) {
    if (wired != p->n)
      return ss_fail(ctx, SS_ERR_INPUT, "probe %s: has %d wired channels (%d contacts, %d unwired), the recording %d",
                     p->name, wired, p->n, p->n - wired, n_rec);
    return ss_fail(ctx, SS_ERR_INPUT, "probe %s: has %d channels, the recording %d", p->name, p->n, n_rec);
  }
  return SS_OK;
}
