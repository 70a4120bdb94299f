/* probe_prb.c — the klusta/phy .prb probe: a Python-literal subset (dicts, lists, tuples, numbers,
 * strings, comments, NAME = value statements) parsed into a JSON tree, then channel_groups read as
 * one probe per group (a shank each), with 'graph' edges as the adjacency when any group has them. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "params/probe_internal.h"

typedef struct {
  ss_ctx *ctx;
  const char *origin, *s;
  int line;
} prb_lex;

static void skip_space(prb_lex *L) {
  for (;;) {
    if (*L->s == '\n') L->line++;
    if (isspace((unsigned char)*L->s)) L->s++;
    else if (*L->s == '#')
      while (*L->s && *L->s != '\n') L->s++;
    else if (*L->s == '\\' && L->s[1] == '\n') L->s++;
    else return;
  }
}

static ss_status bad_token(prb_lex *L) {
  int n = 0;
  if (!*L->s) return ss_fail(L->ctx, SS_ERR_INPUT, "%s: line %d: unexpected end of file", L->origin, L->line);
  while (L->s[n] && !isspace((unsigned char)L->s[n]) && n < 24) n++;
  return ss_fail(L->ctx, SS_ERR_INPUT,
                 "%s: line %d: unexpected token '%.*s' (a .prb file may hold only dicts, lists, tuples, numbers and "
                 "strings)",
                 L->origin, L->line, n ? n : 1, L->s);
}

static int accept(prb_lex *L, char c) {
  skip_space(L);
  if (*L->s != c) return 0;
  L->s++;
  return 1;
}

static ss_status parse_value(prb_lex *L, cJSON **out, int depth);

static ss_status parse_string(prb_lex *L, cJSON **out) {
  char q = *L->s++;
  const char *start = L->s;
  while (*L->s && *L->s != q && *L->s != '\n' && *L->s != '\\') L->s++;
  if (*L->s != q) return bad_token(L);
  *out = cJSON_CreateString("");
  if (!*out) return ss_fail(L->ctx, SS_ERR_NOMEM, "%s: out of memory", L->origin);
  char *text = NULL;
  ss_status st = SS_ALLOC(L->ctx, text, (size_t)(L->s - start) + 1, L->origin);
  if (st != SS_OK) {
    cJSON_Delete(*out);
    *out = NULL;
    return st;
  }
  memcpy(text, start, (size_t)(L->s - start));
  text[L->s - start] = 0;
  cJSON_SetValuestring(*out, text);
  free(text);
  L->s++;
  return SS_OK;
}

static ss_status parse_number(prb_lex *L, cJSON **out) {
  char *end = NULL;
  double v = strtod(L->s, &end);
  if (end == L->s || isalpha((unsigned char)*end) || *end == '_') return bad_token(L);
  L->s = end;
  *out = cJSON_CreateNumber(v);
  return *out ? SS_OK : ss_fail(L->ctx, SS_ERR_NOMEM, "%s: out of memory", L->origin);
}

/* a dict key becomes a JSON member name: integers as decimal text */
static ss_status key_text(prb_lex *L, const cJSON *k, char *buf, size_t n) {
  if (cJSON_IsString(k)) snprintf(buf, n, "%s", k->valuestring);
  else if (cJSON_IsNumber(k) && k->valuedouble == (double)(long)k->valuedouble)
    snprintf(buf, n, "%ld", (long)k->valuedouble);
  else return ss_fail(L->ctx, SS_ERR_INPUT, "%s: line %d: dict keys must be integers or strings", L->origin, L->line);
  return SS_OK;
}

static ss_status parse_items(prb_lex *L, cJSON *c, char close, int dict, int depth) {
  while (!accept(L, close)) {
    cJSON *k = NULL, *v = NULL;
    SS_TRY(parse_value(L, &k, depth + 1));
    if (dict) {
      char name[64];
      ss_status st = key_text(L, k, name, sizeof(name));
      cJSON_Delete(k);
      SS_TRY(st);
      if (!accept(L, ':')) return bad_token(L);
      SS_TRY(parse_value(L, &v, depth + 1));
      cJSON_DeleteItemFromObjectCaseSensitive(c, name);
      cJSON_AddItemToObject(c, name, v);
    } else cJSON_AddItemToArray(c, k);
    if (!accept(L, ',')) {
      if (!accept(L, close)) return bad_token(L);
      return SS_OK;
    }
  }
  return SS_OK;
}

static ss_status parse_value(prb_lex *L, cJSON **out, int depth) {
  skip_space(L);
  if (depth > 32) return ss_fail(L->ctx, SS_ERR_INPUT, "%s: line %d: nested too deeply", L->origin, L->line);
  char c = *L->s;
  if (c == '{' || c == '[' || c == '(') {
    L->s++;
    *out = c == '{' ? cJSON_CreateObject() : cJSON_CreateArray();
    if (!*out) return ss_fail(L->ctx, SS_ERR_NOMEM, "%s: out of memory", L->origin);
    ss_status st = parse_items(L, *out, c == '{' ? '}' : c == '[' ? ']' : ')', c == '{', depth);
    if (st != SS_OK) {
      cJSON_Delete(*out);
      *out = NULL;
    }
    return st;
  }
  if (c == '\'' || c == '"') return parse_string(L, out);
  if (isdigit((unsigned char)c) || c == '-' || c == '+' || c == '.') return parse_number(L, out);
  return bad_token(L);
}

/* NAME = value statements into one object */
static ss_status parse_file(prb_lex *L, cJSON *root) {
  for (skip_space(L); *L->s; skip_space(L)) {
    const char *start = L->s;
    while (isalnum((unsigned char)*L->s) || *L->s == '_') L->s++;
    if (L->s == start || isdigit((unsigned char)*start)) {
      L->s = start;
      return bad_token(L);
    }
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)(L->s - start), start);
    if (!accept(L, '=')) return bad_token(L);
    cJSON *v = NULL;
    ss_status st = parse_value(L, &v, 0);
    if (v) cJSON_AddItemToObject(root, name, v);
    SS_TRY(st);
  }
  return SS_OK;
}

/* --- channel_groups → probe -------------------------------------------------------------------- */

static ss_status read_group(ss_ctx *ctx, const char *origin, const cJSON *g, int k, int *base, cJSON *edges,
                            ss_probe *p) {
  const cJSON *ch = cJSON_GetObjectItemCaseSensitive(g, "channels");
  const cJSON *geo = cJSON_GetObjectItemCaseSensitive(g, "geometry");
  const cJSON *graph = cJSON_GetObjectItemCaseSensitive(g, "graph");
  if (!cJSON_IsObject(geo))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: channel_groups[%s].geometry: missing or not a dict", origin, g->string);
  int i = 0;
  for (const cJSON *c = ch->child; c; c = c->next, i++) {
    int b = *base + i;
    char path[96], key[32];
    snprintf(path, sizeof(path), "channel_groups[%s].channels[%d]", g->string, i);
    SS_TRY(ss_probe_get_int(ctx, origin, c, path, &p->channel[b]));
    snprintf(key, sizeof(key), "%d", p->channel[b]);
    const cJSON *xy = cJSON_GetObjectItemCaseSensitive(geo, key);
    snprintf(path, sizeof(path), "channel_groups[%s].geometry[%d]", g->string, p->channel[b]);
    if (!cJSON_IsArray(xy) || cJSON_GetArraySize(xy) != 2)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: missing or not (x, y)", origin, path);
    SS_TRY(ss_probe_get_number(ctx, origin, xy->child, path, &p->x[b]));
    SS_TRY(ss_probe_get_number(ctx, origin, xy->child->next, path, &p->y[b]));
    p->shank[b] = p->probe[b] = k;
    snprintf(p->shank_id[b], SS_PROBE_ID_LEN, "%s", g->string);
  }
  *base += i;
  for (const cJSON *e = cJSON_IsArray(graph) ? graph->child : NULL; e; e = e->next)
    cJSON_AddItemToArray(edges, cJSON_Duplicate(e, 1));
  return SS_OK;
}

static ss_status read_groups(ss_ctx *ctx, const char *origin, const cJSON *groups, double radius_um, ss_probe *p) {
  int total = 0, n_groups = 0;
  if (!cJSON_IsObject(groups)) return ss_fail(ctx, SS_ERR_INPUT, "%s: channel_groups: missing or not a dict", origin);
  for (const cJSON *g = groups->child; g; g = g->next, n_groups++) {
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(g, "channels");
    if (!cJSON_IsArray(ch))
      return ss_fail(ctx, SS_ERR_INPUT, "%s: channel_groups[%s].channels: missing or not a list", origin, g->string);
    total += cJSON_GetArraySize(ch);
  }
  if (total == 0 || total > SS_PROBE_MAX_CONTACTS)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %d channels (expected 1 to %d)", origin, total, SS_PROBE_MAX_CONTACTS);
  SS_TRY(ss_probe_alloc(ctx, p, total, n_groups));
  cJSON *edges = cJSON_CreateArray();
  if (!edges) return ss_fail(ctx, SS_ERR_NOMEM, "%s: out of memory", origin);
  ss_status st = SS_OK;
  int base = 0, k = 0;
  for (const cJSON *g = groups->child; g && st == SS_OK; g = g->next, k++)
    st = read_group(ctx, origin, g, k, &base, edges, p);
  if (st == SS_OK) st = ss_probe_finish(ctx, origin, cJSON_GetArraySize(edges) ? edges : NULL, radius_um, p);
  cJSON_Delete(edges);
  return st;
}

ss_status ss_probe_load_prb(ss_ctx *ctx, const char *text, const char *origin, double radius_um, ss_probe *out) {
  memset(out, 0, sizeof(*out));
  prb_lex L = {ctx, origin, text, 1};
  cJSON *root = cJSON_CreateObject();
  if (!root) return ss_fail(ctx, SS_ERR_NOMEM, "%s: out of memory", origin);
  ss_status st = parse_file(&L, root);
  if (st == SS_OK)
    st = read_groups(ctx, origin, cJSON_GetObjectItemCaseSensitive(root, "channel_groups"), radius_um, out);
  cJSON_Delete(root);
  if (st != SS_OK) ss_probe_free(out);
  return st;
}
