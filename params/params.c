/* params.c — loading, checking and printing ss_params through the table of params_table.c. */
#include "params/params.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params/params_table.h"

/* Largest parameter file accepted. */
#define SS_PARAMS_MAX_BYTES (1u << 20)

static void *field(ss_params *p, const ss_param_spec *s) { return (char *)p + s->offset; }
static const void *cfield(const ss_params *p, const ss_param_spec *s) { return (const char *)p + s->offset; }

static const ss_param_spec *find_spec(const char *path) {
  for (size_t i = 0; i < ss_param_table_len; i++)
    if (strcmp(ss_param_table[i].path, path) == 0) return &ss_param_table[i];
  return NULL;
}

/* 1 when `path` names a section (a prefix "path." of some parameter). */
static int is_section(const char *path) {
  size_t n = strlen(path);
  for (size_t i = 0; i < ss_param_table_len; i++)
    if (strncmp(ss_param_table[i].path, path, n) == 0 && ss_param_table[i].path[n] == '.') return 1;
  return 0;
}

static void store(ss_params *p, const ss_param_spec *s, double v) {
  switch (s->type) {
    case SS_PT_NUMBER: *(double *)field(p, s) = v; break;
    case SS_PT_INT: *(int64_t *)field(p, s) = (int64_t)v; break;
    case SS_PT_BOOL:
    case SS_PT_ENUM: *(int *)field(p, s) = (int)v; break;
  }
}

static double load(const ss_params *p, const ss_param_spec *s) {
  switch (s->type) {
    case SS_PT_NUMBER: return *(const double *)cfield(p, s);
    case SS_PT_INT: return (double)*(const int64_t *)cfield(p, s);
    case SS_PT_BOOL:
    case SS_PT_ENUM: return *(const int *)cfield(p, s);
  }
  return 0;
}

void ss_params_defaults(ss_params *p) {
  memset(p, 0, sizeof(*p));
  for (size_t i = 0; i < ss_param_table_len; i++) store(p, &ss_param_table[i], ss_param_table[i].def);
}

/* "a number > 0", "an integer in [1, 8]", "one of \"a\", \"b\"", "true or false". */
static void describe(const ss_param_spec *s, char *buf, size_t len) {
  if (s->type == SS_PT_BOOL) {
    snprintf(buf, len, "true or false");
    return;
  }
  if (s->type == SS_PT_ENUM) {
    size_t used = (size_t)snprintf(buf, len, "one of");
    for (int i = 0; s->options[i] && used < len; i++)
      used += (size_t)snprintf(buf + used, len - used, "%s \"%s\"", i ? "," : "", s->options[i]);
    return;
  }
  const char *kind = s->type == SS_PT_INT ? "an integer" : "a number";
  int has_lo = isfinite(s->min), has_hi = isfinite(s->max) && s->max < 9.0e15;
  if (has_lo && has_hi)
    snprintf(buf, len, "%s in %c%g, %g%c", kind, s->min_open ? '(' : '[', s->min, s->max, s->max_open ? ')' : ']');
  else if (has_lo) snprintf(buf, len, "%s %s %g", kind, s->min_open ? ">" : ">=", s->min);
  else if (has_hi) snprintf(buf, len, "%s %s %g", kind, s->max_open ? "<" : "<=", s->max);
  else snprintf(buf, len, "%s", kind);
}

static int in_range(const ss_param_spec *s, double v) {
  if (!isfinite(v)) return 0;
  if (s->min_open ? !(v > s->min) : !(v >= s->min)) return 0;
  if (s->max_open ? !(v < s->max) : !(v <= s->max)) return 0;
  return s->type != SS_PT_INT || v == floor(v);
}

static void show_json(const cJSON *item, char *buf, size_t len) {
  char *text = cJSON_PrintUnformatted(item);
  snprintf(buf, len, "%s", text ? text : "?");
  if (strlen(buf) == len - 1 && len > 4) strcpy(buf + len - 4, "...");
  free(text);
}

/* Check one JSON value against its spec; store it or report one problem line. */
static void apply_value(ss_ctx *ctx, const char *origin, int show_path, const ss_param_spec *s, const cJSON *item,
                        ss_params *p) {
  char want[256], got[128];
  describe(s, want, sizeof(want));
  show_json(item, got, sizeof(got));
  if (s->type == SS_PT_BOOL) {
    if (cJSON_IsBool(item)) {
      store(p, s, cJSON_IsTrue(item) ? 1 : 0);
      return;
    }
  } else if (s->type == SS_PT_ENUM) {
    if (cJSON_IsString(item)) {
      for (int i = 0; s->options[i]; i++)
        if (strcmp(item->valuestring, s->options[i]) == 0) {
          store(p, s, i);
          return;
        }
    }
  } else if (cJSON_IsNumber(item) && in_range(s, item->valuedouble)) {
    store(p, s, item->valuedouble);
    return;
  }
  if (show_path) ss_problem(ctx, SS_ERR_INPUT, "%s: %s: expected %s, got %s", origin, s->path, want, got);
  else ss_problem(ctx, SS_ERR_INPUT, "%s: expected %s, got %s", origin, want, got);
}

static void apply_object(ss_ctx *ctx, const char *origin, const cJSON *obj, const char *prefix, ss_params *p) {
  for (const cJSON *item = obj->child; item; item = item->next) {
    char path[256];
    snprintf(path, sizeof(path), "%s%s%s", prefix, *prefix ? "." : "", item->string);
    const ss_param_spec *s = find_spec(path);
    if (s) {
      apply_value(ctx, origin, 1, s, item, p);
    } else if (is_section(path)) {
      if (cJSON_IsObject(item)) apply_object(ctx, origin, item, path, p);
      else ss_problem(ctx, SS_ERR_INPUT, "%s: %s: expected an object (a parameter section)", origin, path);
    } else {
      ss_problem(ctx, SS_ERR_INPUT, "%s: %s: unknown key", origin, path);
    }
  }
}

/* Line and column of a cJSON parse error, for the message. */
static void locate(const char *json, const char *at, int *line, int *col) {
  *line = 1;
  *col = 1;
  for (const char *c = json; c < at && *c; c++) {
    if (*c == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

ss_status ss_params_apply_json(ss_ctx *ctx, const char *json, const char *origin, ss_params *p) {
  ss_ctx_clear(ctx);
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
  if (!root) {
    int line, col;
    locate(json, end ? end : json, &line, &col);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: invalid JSON at line %d, column %d", origin, line, col);
  }
  if (!cJSON_IsObject(root)) {
    cJSON_Delete(root);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: expected a JSON object at the top level", origin);
  }
  apply_object(ctx, origin, root, "", p);
  cJSON_Delete(root);
  if (ctx->n_problems) return ctx->status;
  return ss_params_validate(ctx, p);
}

ss_status ss_read_text_file(ss_ctx *ctx, const char *path, size_t max_bytes, char **out, size_t *len) {
  *out = NULL;
  FILE *f = fopen(path, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  char *buf = NULL;
  size_t cap = 0, n = 0;
  ss_status st = SS_OK;
  for (;;) {
    if (n + 4096 + 1 > cap) {
      cap = cap ? cap * 2 : 8192;
      if ((st = SS_REALLOC(ctx, buf, cap, path)) != SS_OK) break;
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (n > max_bytes) {
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: larger than the %zu bytes allowed", path, max_bytes);
      break;
    }
    if (got == 0) {
      if (ferror(f)) st = ss_fail(ctx, SS_ERR_IO, "%s: read error", path);
      break;
    }
  }
  fclose(f);
  if (st != SS_OK) {
    free(buf);
    return st;
  }
  if (!buf) SS_TRY(SS_ALLOC(ctx, buf, 1, path));
  buf[n] = '\0';
  if (strlen(buf) != n) {
    free(buf);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: contains a NUL byte: not a text file", path);
  }
  *out = buf;
  if (len) *len = n;
  return SS_OK;
}

ss_status ss_params_load_file(ss_ctx *ctx, const char *path, ss_params *p) {
  ss_params_defaults(p);
  char *text = NULL;
  SS_TRY(ss_read_text_file(ctx, path, SS_PARAMS_MAX_BYTES, &text, NULL));
  ss_status st = ss_params_apply_json(ctx, text, path, p);
  free(text);
  return st;
}

ss_status ss_params_set(ss_ctx *ctx, ss_params *p, const char *path, const char *value) {
  return ss_params_set_named(ctx, p, path, value, SS_PARAMS_OPTION);
}

ss_status ss_params_set_named(ss_ctx *ctx, ss_params *p, const char *path, const char *value, const char *option) {
  /* --param names the parameter in its messages; a dedicated option (--k) is the name itself. */
  int generic = strcmp(option, SS_PARAMS_OPTION) == 0;
  const ss_param_spec *s = find_spec(path);
  if (!s) return ss_fail(ctx, SS_ERR_USAGE, "%s %s: unknown parameter", option, path);
  /* Accept bare words for enums and JSON for the rest, so "negative" and "3" both work. */
  cJSON *item = NULL;
  if (s->type == SS_PT_ENUM) item = cJSON_CreateString(value);
  else item = cJSON_Parse(value);
  if (!item) {
    if (generic) return ss_fail(ctx, SS_ERR_USAGE, "%s %s: cannot read \"%s\"", option, path, value);
    return ss_fail(ctx, SS_ERR_USAGE, "%s: cannot read \"%s\"", option, value);
  }
  ss_ctx_clear(ctx);
  apply_value(ctx, option, generic, s, item, p);
  cJSON_Delete(item);
  if (ctx->n_problems) return ctx->status;
  return SS_OK;
}

ss_status ss_params_validate(ss_ctx *ctx, const ss_params *p) {
  int before = ctx->n_problems;
  if (!(p->detect.weak_std < p->detect.strong_std))
    ss_problem(ctx, SS_ERR_INPUT, "detect.weak_std: must be below detect.strong_std (%g >= %g)", p->detect.weak_std,
               p->detect.strong_std);
  if (p->mask_em.num_starting_clusters > p->mask_em.max_possible_clusters)
    ss_problem(ctx, SS_ERR_INPUT,
               "mask_em.num_starting_clusters: must not exceed mask_em.max_possible_clusters (%lld > %lld)",
               (long long)p->mask_em.num_starting_clusters, (long long)p->mask_em.max_possible_clusters);
  if (!(p->quality.censored_ms < p->quality.refractory_ms))
    ss_problem(ctx, SS_ERR_INPUT, "quality.censored_ms: must be below quality.refractory_ms (%g >= %g)",
               p->quality.censored_ms, p->quality.refractory_ms);
  if (!(p->quality.noise_snr <= p->quality.good_snr))
    ss_problem(ctx, SS_ERR_INPUT, "quality.noise_snr: must not exceed quality.good_snr (%g > %g)", p->quality.noise_snr,
               p->quality.good_snr);
  if (!(p->templates.amp_min <= p->templates.amp_max))
    ss_problem(ctx, SS_ERR_INPUT, "templates.amp_min: must not exceed templates.amp_max (%g > %g)",
               p->templates.amp_min, p->templates.amp_max);
  if (!(p->match.amp_min <= p->match.amp_max))
    ss_problem(ctx, SS_ERR_INPUT, "match.amp_min: must not exceed match.amp_max (%g > %g)", p->match.amp_min,
               p->match.amp_max);
  return ctx->n_problems > before ? SS_ERR_INPUT : SS_OK;
}

/* Walk to (creating) the object for the section part of a dotted path. */
static cJSON *section_of(cJSON *root, const char *path, const char **leaf) {
  cJSON *obj = root;
  const char *start = path;
  for (const char *dot = strchr(start, '.'); dot; dot = strchr(start, '.')) {
    char name[64];
    snprintf(name, sizeof(name), "%.*s", (int)(dot - start), start);
    cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!next) next = cJSON_AddObjectToObject(obj, name);
    obj = next;
    start = dot + 1;
  }
  *leaf = start;
  return obj;
}

char *ss_params_to_json(const ss_params *p) {
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  for (size_t i = 0; i < ss_param_table_len; i++) {
    const ss_param_spec *s = &ss_param_table[i];
    const char *leaf;
    cJSON *obj = section_of(root, s->path, &leaf);
    if (!obj) continue;
    double v = load(p, s);
    if (s->type == SS_PT_BOOL) cJSON_AddBoolToObject(obj, leaf, v != 0);
    else if (s->type == SS_PT_ENUM) cJSON_AddStringToObject(obj, leaf, s->options[(int)v]);
    else cJSON_AddNumberToObject(obj, leaf, v);
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  return text;
}

char *ss_params_doc_markdown(void) {
  size_t cap = 64 * 1024, used = 0;
  char *buf = malloc(cap);
  if (!buf) return NULL;
  ss_params def;
  ss_params_defaults(&def);
  used += (size_t)snprintf(buf, cap, "| parameter | default | accepts | meaning |\n| --- | --- | --- | --- |\n");
  for (size_t i = 0; i < ss_param_table_len && used < cap; i++) {
    const ss_param_spec *s = &ss_param_table[i];
    char want[256], dv[64];
    describe(s, want, sizeof(want));
    double v = load(&def, s);
    if (s->type == SS_PT_BOOL) snprintf(dv, sizeof(dv), "%s", v != 0 ? "true" : "false");
    else if (s->type == SS_PT_ENUM) snprintf(dv, sizeof(dv), "\"%s\"", s->options[(int)v]);
    else snprintf(dv, sizeof(dv), "%.10g", v);
    used += (size_t)snprintf(buf + used, cap - used, "| `%s` | %s | %s | %s |\n", s->path, dv, want, s->doc);
  }
  return buf;
}
