/* knn_csv.c — the stand-alone KNN tool's CSV layout ("numels,newels,classes,dim" then one row per
 * point: coordinates and class, −1 = to classify) and the random table generator (--generate). The
 * rows are parsed by io/'s text-table reader, so ragged rows, non-numbers and NaN/Inf get io/'s
 * messages; this file checks the header and the class column. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"
#include "io/atomic_file.h"
#include "io/matrix.h"
#include "stages/knn/knn.h"
#include "core/rng.h"

#define KNN_CSV_HEADER_NAMES "numels,newels,classes,dim"
#define KNN_CSV_FIELDS 4
#define KNN_CSV_SHOWN 60 /* characters of a bad header shown in messages */
/* --generate: blob centres in [−CENTRE, CENTRE], points centre + SPREAD · N(0, 1) clipped to ±LIMIT */
#define KNN_GEN_LIMIT 100.0
#define KNN_GEN_CENTRE 70.0
#define KNN_GEN_SPREAD 15.0

void ss_knn_table_free(ss_knn_table *t) {
  if (!t) return;
  free(t->x);
  free(t->label);
  memset(t, 0, sizeof(*t));
}

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
}

static const char *const header_names[KNN_CSV_FIELDS] = {"numels", "newels", "classes", "dim"};
static const int64_t header_min[KNN_CSV_FIELDS] = {0, 0, 1, 1};
static const int64_t header_max[KNN_CSV_FIELDS] = {SS_KNN_MAX_POINTS, SS_KNN_MAX_POINTS, SS_KNN_MAX_CLASSES,
                                                   SS_KNN_MAX_DIM};

/* The four comma-separated counts of a header line, each checked for overflow and range. */
static ss_status parse_header_line(ss_ctx *ctx, char *p, const char *path, int64_t line, int64_t v[KNN_CSV_FIELDS]) {
  char shown[KNN_CSV_SHOWN + 1];
  snprintf(shown, sizeof(shown), "%s", p);
  char *field[KNN_CSV_FIELDS + 1];
  int n = 0;
  for (char *q = p; q && n <= KNN_CSV_FIELDS; n++) {
    field[n] = q;
    q = strchr(q, ',');
    if (q) *q++ = '\0';
  }
  if (n != KNN_CSV_FIELDS)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: line %" PRId64 ": expected the header " KNN_CSV_HEADER_NAMES " (four integers), got \"%s\"",
                   path, line, shown);
  for (int i = 0; i < KNN_CSV_FIELDS; i++) {
    if (ss_parse_size(ctx, field[i], header_min[i], header_max[i], &v[i]) != SS_OK) {
      ss_ctx_prefix(ctx, "%s: line %" PRId64 ": header: %s", path, line, header_names[i]);
      return SS_ERR_INPUT;
    }
  }
  return SS_OK;
}

/* The first meaningful line: the four counts (after an optional line of their names). */
static ss_status read_header(ss_ctx *ctx, FILE *f, const char *path, int64_t *lines, int64_t v[KNN_CSV_FIELDS]) {
  char *line = NULL;
  size_t cap = 0;
  ss_status st = ss_fail(ctx, SS_ERR_INPUT, "%s: empty file: expected the header " KNN_CSV_HEADER_NAMES, path);
  while (getline(&line, &cap, f) >= 0) {
    ++*lines;
    trim(line);
    char *p = line + strspn(line, " \t");
    if (*p == '\0' || *p == '#' || strcmp(p, KNN_CSV_HEADER_NAMES) == 0) continue;
    st = parse_header_line(ctx, p, path, *lines, v);
    break;
  }
  free(line);
  return st;
}

/* Split the parsed rows into coordinates and classes, checking the class column and the counts. */
static ss_status split_rows(ss_ctx *ctx, const char *path, const ss_matrix *m, const int64_t h[KNN_CSV_FIELDS],
                            ss_knn_table *t) {
  int64_t d = h[3], n = m->rows;
  t->n_points = n, t->dim = d, t->classes = h[2];
  SS_TRY(SS_ALLOC(ctx, t->x, (size_t)(n * d), "KNN table coordinates"));
  SS_TRY(SS_ALLOC(ctx, t->label, (size_t)n, "KNN table classes"));
  for (int64_t i = 0; i < n; i++) {
    memcpy(t->x + i * d, m->data + i * (d + 1), sizeof(float) * (size_t)d);
    float c = m->data[i * (d + 1) + d];
    if (c != floorf(c) || c < -1.0f || c >= (float)h[2])
      return ss_fail(ctx, SS_ERR_INPUT,
                     "%s: row %" PRId64 ": class: expected -1 or an integer in [0, %" PRId64 "), got %.9g", path, i + 1,
                     h[2], c);
    t->label[i] = (int32_t)c;
    if (c < 0) t->n_new++;
    else t->n_labelled++;
  }
  if (n != h[0] + h[1])
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: header: numels + newels = %" PRId64 " + %" PRId64 " rows, got %" PRId64 " rows", path, h[0],
                   h[1], n);
  if (t->n_new != h[1])
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: newels = %" PRId64 " points to classify (class -1), got %" PRId64,
                   path, h[1], t->n_new);
  return SS_OK;
}

ss_status ss_knn_csv_read(ss_ctx *ctx, const char *path, ss_knn_table *t) {
  memset(t, 0, sizeof(*t));
  FILE *f = fopen(path, "r");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  int64_t h[KNN_CSV_FIELDS], lines = 0;
  ss_status st = read_header(ctx, f, path, &lines, h);
  ss_matrix m = {0};
  if (st == SS_OK) {
    ss_text_opts o = {.lines_before = lines, .expected_cols = h[3] + 1};
    st = ss_text_read_matrix(ctx, f, path, &o, &m);
  }
  fclose(f);
  if (st == SS_OK) st = split_rows(ctx, path, &m, h, t);
  ss_matrix_free(&m);
  if (st != SS_OK) ss_knn_table_free(t);
  return st;
}

static int write_rows(FILE *f, const ss_knn_table *t) {
  int ok = fprintf(f, "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 "\n", t->n_points - t->n_new, t->n_new, t->classes,
                   t->dim) > 0;
  for (int64_t i = 0; ok && i < t->n_points; i++) {
    for (int64_t j = 0; ok && j < t->dim; j++) ok = fprintf(f, "%.9g,", t->x[i * t->dim + j]) > 0;
    ok = ok && fprintf(f, "%d\n", t->label[i]) > 0;
  }
  return ok;
}

ss_status ss_knn_csv_write(ss_ctx *ctx, const char *path, const ss_knn_table *t) {
  if (!path || strcmp(path, "-") == 0) {
    if (!write_rows(stdout, t) || fflush(stdout) != 0)
      return ss_fail(ctx, SS_ERR_IO, "standard output: write failed: %s", strerror(errno));
    return SS_OK;
  }
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  if (!write_rows(af.f, t)) {
    int e = errno;
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", path, strerror(e));
  }
  return ss_atomic_commit(ctx, &af);
}

ss_status ss_knn_generate(ss_ctx *ctx, int64_t n_train, int64_t n_new, int64_t classes, int64_t dim, uint64_t seed,
                          ss_knn_table *t) {
  memset(t, 0, sizeof(*t));
  if (n_train < 1 || n_new < 0 || classes < 1 || dim < 1 || n_train > SS_KNN_MAX_POINTS || n_new > SS_KNN_MAX_POINTS ||
      classes > SS_KNN_MAX_CLASSES || dim > SS_KNN_MAX_DIM)
    return ss_fail(ctx, SS_ERR_USAGE,
                   "knn: --generate: expected N_TRAIN in [1, %lld], N_NEW in [0, %lld], CLASSES in "
                   "[1, %lld], DIM in [1, %lld], got %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64,
                   SS_KNN_MAX_POINTS, SS_KNN_MAX_POINTS, SS_KNN_MAX_CLASSES, SS_KNN_MAX_DIM, n_train, n_new, classes,
                   dim);
  int64_t n = n_train + n_new;
  double *centre = NULL;
  ss_status st = SS_ALLOC(ctx, centre, (size_t)(classes * dim), "KNN generator centres");
  if (st == SS_OK) st = SS_ALLOC(ctx, t->x, (size_t)(n * dim), "KNN generated coordinates");
  if (st == SS_OK) st = SS_ALLOC(ctx, t->label, (size_t)n, "KNN generated classes");
  if (st != SS_OK) {
    free(centre);
    ss_knn_table_free(t);
    return st;
  }
  ss_rng rng = ss_rng_make(seed, SS_RNG_KNN_GENERATE, 0);
  for (int64_t c = 0; c < classes * dim; c++) centre[c] = KNN_GEN_CENTRE * (2.0 * ss_rng_next_uniform(&rng) - 1.0);
  for (int64_t i = 0; i < n; i++) {
    int64_t c = (int64_t)ss_rng_next_below(&rng, (uint64_t)classes);
    for (int64_t j = 0; j < dim; j++) {
      double v = centre[c * dim + j] + KNN_GEN_SPREAD * ss_rng_next_normal(&rng);
      t->x[i * dim + j] = (float)fmin(KNN_GEN_LIMIT, fmax(-KNN_GEN_LIMIT, v));
    }
    t->label[i] = i < n_train ? (int32_t)c : -1;
  }
  free(centre);
  t->n_points = n, t->dim = dim, t->classes = classes, t->n_labelled = n_train, t->n_new = n_new;
  return SS_OK;
}
