/* probe_pi.c — probeinterface JSON: a ProbeGroup read into one ss_probe (contacts concatenated,
 * shanks apart per probe) and written back with every key probeinterface's reader needs. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params/probe_internal.h"

/* The probeinterface format version written; its reader accepts any. */
#define SS_PROBEINTERFACE_VERSION "0.3.2"

static const char *const shape_names[] = {"circle", "square", "rect"};
/* Per-probe keys kept verbatim (annotations, ...) in the order probeinterface writes them. */
static const char *const extra_keys[] = {"annotations", "contact_annotations", "probe_planar_contour", "contact_sides"};

typedef struct {
  ss_ctx *ctx;
  const char *origin;
  const cJSON *pr;
  int k;        /* probe index */
  int base, n;  /* its contacts */
  double scale; /* file units → µm */
  char key[96]; /* "probes[k].name" for messages */
} pi_probe;

static const char *pkey(pi_probe *q, const char *name) {
  snprintf(q->key, sizeof(q->key), "probes[%d].%s", q->k, name);
  return q->key;
}

static ss_status read_units(pi_probe *q) {
  const cJSON *nd = cJSON_GetObjectItemCaseSensitive(q->pr, "ndim");
  if (nd && !(cJSON_IsNumber(nd) && nd->valuedouble == 2))
    return ss_fail(q->ctx, SS_ERR_INPUT, "%s: %s: %s: only planar probes (ndim 2) are supported", q->origin,
                   pkey(q, "ndim"), cJSON_IsNumber(nd) && nd->valuedouble == 3 ? "3 (a 3-D probe)" : "not 2");
  const cJSON *u = cJSON_GetObjectItemCaseSensitive(q->pr, "si_units");
  q->scale = 1.0;
  if (!u) return SS_OK;
  if (cJSON_IsString(u) && strcmp(u->valuestring, "um") == 0) q->scale = 1.0;
  else if (cJSON_IsString(u) && strcmp(u->valuestring, "mm") == 0) q->scale = 1e3;
  else if (cJSON_IsString(u) && strcmp(u->valuestring, "m") == 0) q->scale = 1e6;
  else return ss_fail(q->ctx, SS_ERR_INPUT, "%s: %s: expected \"um\", \"mm\" or \"m\"", q->origin, pkey(q, "si_units"));
  return SS_OK;
}

static ss_status read_axes(pi_probe *q, ss_probe *p) {
  const cJSON *arr;
  SS_TRY(ss_probe_get_array(q->ctx, q->origin, q->pr, "contact_plane_axes", q->n, 0, &arr));
  int i = 0;
  for (const cJSON *c = arr ? arr->child : NULL; c; c = c->next, i++) {
    char path[128];
    for (int a = 0; a < 4; a++) {
      snprintf(path, sizeof(path), "probes[%d].contact_plane_axes[%d][%d][%d]", q->k, i, a / 2, a % 2);
      const cJSON *row = cJSON_GetArrayItem(c, a / 2);
      if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) != 2 || !cJSON_IsArray(row) || cJSON_GetArraySize(row) != 2)
        return ss_fail(q->ctx, SS_ERR_INPUT, "%s: %s: expected [[a, b], [c, d]]", q->origin, path);
      SS_TRY(ss_probe_get_number(q->ctx, q->origin, cJSON_GetArrayItem(row, a % 2), path,
                                 &p->axes[4 * (q->base + i) + a]));
    }
  }
  return SS_OK;
}

static ss_status read_shape_param(pi_probe *q, const cJSON *obj, int i, const char *name, int required, double *out) {
  char path[128];
  snprintf(path, sizeof(path), "probes[%d].contact_shape_params[%d].%s", q->k, i, name);
  const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, name) : NULL;
  if (!v && !required) return SS_OK;
  SS_TRY(ss_probe_get_number(q->ctx, q->origin, v, path, out));
  if (*out < 0) return ss_fail(q->ctx, SS_ERR_INPUT, "%s: %s: %g is negative", q->origin, path, *out);
  *out *= q->scale;
  return SS_OK;
}

static ss_status read_shapes(pi_probe *q, ss_probe *p) {
  const cJSON *sh, *par;
  SS_TRY(ss_probe_get_array(q->ctx, q->origin, q->pr, "contact_shapes", q->n, 0, &sh));
  SS_TRY(ss_probe_get_array(q->ctx, q->origin, q->pr, "contact_shape_params", q->n, 0, &par));
  for (int i = 0; sh && i < q->n; i++) {
    const cJSON *s = cJSON_GetArrayItem(sh, i);
    int k = 0;
    while (k < 3 && !(cJSON_IsString(s) && strcmp(s->valuestring, shape_names[k]) == 0)) k++;
    if (k == 3)
      return ss_fail(q->ctx, SS_ERR_INPUT,
                     "%s: probes[%d].contact_shapes[%d]: expected \"circle\", \"square\" or \"rect\"", q->origin, q->k,
                     i);
    p->shape[q->base + i] = k;
  }
  for (int i = 0; par && i < q->n; i++) {
    const cJSON *o = cJSON_GetArrayItem(par, i);
    int s = p->shape[q->base + i];
    SS_TRY(read_shape_param(q, o, i, s == SS_PROBE_CIRCLE ? "radius" : "width", 1, &p->shape_a[q->base + i]));
    if (s == SS_PROBE_RECT) SS_TRY(read_shape_param(q, o, i, "height", 1, &p->shape_b[q->base + i]));
  }
  return SS_OK;
}

static ss_status read_labels(pi_probe *q, const char *key, char (*dst)[SS_PROBE_ID_LEN]) {
  const cJSON *arr;
  SS_TRY(ss_probe_get_array(q->ctx, q->origin, q->pr, key, q->n, 0, &arr));
  int i = 0;
  for (const cJSON *it = arr ? arr->child : NULL; it; it = it->next, i++) {
    if (cJSON_IsString(it) && strlen(it->valuestring) < SS_PROBE_ID_LEN)
      snprintf(dst[i], SS_PROBE_ID_LEN, "%s", it->valuestring);
    else if (cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble))
      snprintf(dst[i], SS_PROBE_ID_LEN, "%.0f", it->valuedouble);
    else
      return ss_fail(q->ctx, SS_ERR_INPUT, "%s: probes[%d].%s[%d]: expected a string of at most %d characters",
                     q->origin, q->k, key, i, SS_PROBE_ID_LEN - 1);
  }
  return SS_OK;
}

/* Shank labels → global shank numbers in order of first appearance; returns the count used. */
static int number_shanks(ss_probe *p, int base, int n, int offset) {
  int distinct = 0;
  for (int i = base; i < base + n; i++) {
    int j = base;
    while (j < i && strcmp(p->shank_id[j], p->shank_id[i]) != 0) j++;
    p->shank[i] = j < i ? p->shank[j] : offset + distinct++;
  }
  return distinct > 0 ? distinct : 1;
}

static ss_status keep_extra(pi_probe *q, ss_probe *p) {
  cJSON *o = cJSON_CreateObject();
  if (!o) return ss_fail(q->ctx, SS_ERR_NOMEM, "probe: out of memory");
  for (size_t k = 0; k < sizeof(extra_keys) / sizeof(*extra_keys); k++) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(q->pr, extra_keys[k]);
    cJSON *copy = v ? cJSON_Duplicate(v, 1) : NULL;
    if (copy && k == 2) /* the contour is in file units */
      for (cJSON *pt = copy->child; pt; pt = pt->next)
        for (cJSON *c = pt->child; c; c = c->next)
          if (cJSON_IsNumber(c)) cJSON_SetNumberValue(c, c->valuedouble * q->scale);
    if (copy) cJSON_AddItemToObject(o, extra_keys[k], copy);
  }
  p->probe_extra[q->k] = cJSON_PrintUnformatted(o);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "annotations"), "name");
  if (!p->name[0] && cJSON_IsString(name)) snprintf(p->name, sizeof(p->name), "%s", name->valuestring);
  cJSON_Delete(o);
  return p->probe_extra[q->k] ? SS_OK : ss_fail(q->ctx, SS_ERR_NOMEM, "probe: out of memory");
}

static ss_status read_probe(pi_probe *q, ss_probe *p, int *shank_offset) {
  const cJSON *pos, *dci;
  SS_TRY(read_units(q));
  SS_TRY(ss_probe_get_array(q->ctx, q->origin, q->pr, "contact_positions", q->n, 1, &pos));
  SS_TRY(ss_probe_get_array(q->ctx, q->origin, q->pr, "device_channel_indices", q->n, 1, &dci));
  SS_TRY(ss_probe_read_positions(q->ctx, q->origin, pos, "contact_positions", q->scale, p, q->base));
  SS_TRY(ss_probe_read_ints(q->ctx, q->origin, dci, "device_channel_indices", p->channel + q->base));
  SS_TRY(read_axes(q, p));
  SS_TRY(read_shapes(q, p));
  SS_TRY(read_labels(q, "contact_ids", p->contact_id + q->base));
  SS_TRY(read_labels(q, "shank_ids", p->shank_id + q->base));
  for (int i = q->base; i < q->base + q->n; i++) p->probe[i] = q->k;
  *shank_offset += number_shanks(p, q->base, q->n, *shank_offset);
  return keep_extra(q, p);
}

ss_status ss_probe_load_probeinterface(ss_ctx *ctx, const char *origin, const cJSON *root, ss_probe *p) {
  const cJSON *probes = cJSON_GetObjectItemCaseSensitive(root, "probes");
  int total = 0, n_probes = cJSON_GetArraySize(probes);
  if (n_probes == 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: probes: empty", origin);
  for (const cJSON *pr = probes->child; pr; pr = pr->next) {
    const cJSON *pos;
    if (!cJSON_IsObject(pr)) return ss_fail(ctx, SS_ERR_INPUT, "%s: probes: expected objects", origin);
    SS_TRY(ss_probe_get_array(ctx, origin, pr, "contact_positions", -1, 1, &pos));
    total += cJSON_GetArraySize(pos);
  }
  if (total == 0 || total > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %d contacts (expected 1 to %d)", origin, total, SS_PROBE_MAX_CONTACTS);
  SS_TRY(ss_probe_alloc(ctx, p, total, n_probes));
  pi_probe q = {.ctx = ctx, .origin = origin};
  int shank_offset = 0;
  for (const cJSON *pr = probes->child; pr; pr = pr->next, q.k++) {
    q.pr = pr;
    q.n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(pr, "contact_positions"));
    SS_TRY(read_probe(&q, p, &shank_offset));
    q.base += q.n;
  }
  return SS_OK;
}

/* --- writing --------------------------------------------------------------------------------- */

static cJSON *pair(double a, double b) {
  double v[2] = {a, b};
  return cJSON_CreateDoubleArray(v, 2);
}

static int any_label(const ss_probe *p, char (*labels)[SS_PROBE_ID_LEN], int k) {
  for (int i = 0; i < p->n; i++)
    if (p->probe[i] == k && labels[i][0]) return 1;
  return 0;
}

static void add_contacts(cJSON *o, const ss_probe *p, int k) {
  cJSON *pos = cJSON_AddArrayToObject(o, "contact_positions");
  cJSON *axes = cJSON_AddArrayToObject(o, "contact_plane_axes");
  cJSON *shapes = cJSON_AddArrayToObject(o, "contact_shapes");
  cJSON *params = cJSON_AddArrayToObject(o, "contact_shape_params");
  for (int i = 0; i < p->n; i++) {
    if (p->probe[i] != k) continue;
    cJSON_AddItemToArray(pos, pair(p->x[i], p->y[i]));
    cJSON *ax = cJSON_CreateArray();
    cJSON_AddItemToArray(ax, pair(p->axes[4 * i], p->axes[4 * i + 1]));
    cJSON_AddItemToArray(ax, pair(p->axes[4 * i + 2], p->axes[4 * i + 3]));
    cJSON_AddItemToArray(axes, ax);
    cJSON_AddItemToArray(shapes, cJSON_CreateString(shape_names[p->shape[i]]));
    cJSON *sp = cJSON_CreateObject();
    cJSON_AddNumberToObject(sp, p->shape[i] == SS_PROBE_CIRCLE ? "radius" : "width", p->shape_a[i]);
    if (p->shape[i] == SS_PROBE_RECT) cJSON_AddNumberToObject(sp, "height", p->shape_b[i]);
    cJSON_AddItemToArray(params, sp);
  }
}

static void add_wiring(cJSON *o, const ss_probe *p, int k, cJSON *extra) {
  cJSON *contour = cJSON_DetachItemFromObjectCaseSensitive(extra, "probe_planar_contour");
  if (contour) cJSON_AddItemToObject(o, "probe_planar_contour", contour);
  cJSON *dci = cJSON_AddArrayToObject(o, "device_channel_indices");
  for (int i = 0; i < p->n; i++)
    if (p->probe[i] == k) cJSON_AddItemToArray(dci, cJSON_CreateNumber(p->channel[i]));
  char(*const lists[2])[SS_PROBE_ID_LEN] = {p->contact_id, p->shank_id};
  static const char *const keys[2] = {"contact_ids", "shank_ids"};
  for (int l = 0; l < 2; l++) {
    if (!any_label(p, lists[l], k)) continue;
    cJSON *arr = cJSON_AddArrayToObject(o, keys[l]);
    for (int i = 0; i < p->n; i++)
      if (p->probe[i] == k) cJSON_AddItemToArray(arr, cJSON_CreateString(lists[l][i]));
  }
  cJSON *sides = cJSON_DetachItemFromObjectCaseSensitive(extra, "contact_sides");
  if (sides) cJSON_AddItemToObject(o, "contact_sides", sides);
}

/* annotations need model_name and manufacturer (probeinterface's schema); name is ours when absent */
static cJSON *annotations(const ss_probe *p, cJSON *extra) {
  cJSON *a = cJSON_DetachItemFromObjectCaseSensitive(extra, "annotations");
  if (!cJSON_IsObject(a)) {
    cJSON_Delete(a);
    a = cJSON_CreateObject();
  }
  if (!cJSON_GetObjectItemCaseSensitive(a, "name") && p->n_probes == 1) cJSON_AddStringToObject(a, "name", p->name);
  if (!cJSON_GetObjectItemCaseSensitive(a, "manufacturer")) cJSON_AddStringToObject(a, "manufacturer", "");
  if (!cJSON_GetObjectItemCaseSensitive(a, "model_name")) cJSON_AddStringToObject(a, "model_name", "");
  return a;
}

static cJSON *probe_object(const ss_probe *p, int k) {
  cJSON *extra = p->probe_extra && p->probe_extra[k] ? cJSON_Parse(p->probe_extra[k]) : NULL;
  if (!extra) extra = cJSON_CreateObject();
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "ndim", 2);
  cJSON_AddStringToObject(o, "si_units", "um");
  cJSON_AddItemToObject(o, "annotations", annotations(p, extra));
  cJSON *ca = cJSON_DetachItemFromObjectCaseSensitive(extra, "contact_annotations");
  cJSON_AddItemToObject(o, "contact_annotations", ca ? ca : cJSON_CreateObject());
  add_contacts(o, p, k);
  add_wiring(o, p, k, extra);
  cJSON_Delete(extra);
  return o;
}

ss_status ss_probe_to_probeinterface(ss_ctx *ctx, const ss_probe *p, char **json_out) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "specification", "probeinterface");
  cJSON_AddStringToObject(root, "version", SS_PROBEINTERFACE_VERSION);
  cJSON *probes = cJSON_AddArrayToObject(root, "probes");
  int n_probes = p->n_probes > 0 ? p->n_probes : 1;
  for (int k = 0; k < n_probes; k++) cJSON_AddItemToArray(probes, probe_object(p, k));
  *json_out = cJSON_Print(root);
  cJSON_Delete(root);
  return *json_out ? SS_OK : ss_fail(ctx, SS_ERR_NOMEM, "probe %s: out of memory writing JSON", p->name);
}

ss_status ss_probe_write_probeinterface(ss_ctx *ctx, const ss_probe *p, const char *path) {
  char *text = NULL;
  SS_TRY(ss_probe_to_probeinterface(ctx, p, &text));
  FILE *f = fopen(path, "w");
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  int err = errno;
  if (f && fclose(f) != 0) ok = 0;
  free(text);
  return ok ? SS_OK : ss_fail(ctx, SS_ERR_IO, "%s: cannot write: %s", path, strerror(err));
}
