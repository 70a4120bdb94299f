/* klustakwik.c — KlustaKwik .fet / .fmask / .clu text files, parsed with the text-table reader
 * of io/matrix.c after a one-integer header line. */
#include "io/klustakwik.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"

#define KK_FEATURE_FORMAT "%.9g" /* float32 exact */
#define KK_MASK_FORMAT \
  "%.9g" /* float32 exact: `cluster` on these files reproduces the labels of the run that wrote them */
#define KK_TOKEN_SHOWN 40

/* Read line 1 of a KlustaKwik file: one non-negative integer (`what` names it in messages). */
static ss_status read_header(ss_ctx *ctx, FILE *f, const char *path, const char *what, int64_t min, int64_t *out) {
  char *line = NULL;
  size_t cap = 0;
  if (getline(&line, &cap, f) < 0) {
    free(line);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: empty file (expected %s on line 1)", path, what);
  }
  char *end;
  errno = 0;
  long long v = strtoll(line, &end, 10);
  int ok = end != line && errno == 0 && v >= min;
  while (ok && (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n')) end++;
  ok = ok && *end == '\0';
  if (!ok) {
    size_t len = strcspn(line, "\r\n");
    ss_status st = ss_fail(ctx, SS_ERR_INPUT, "%s: line 1: expected %s (an integer >= %" PRId64 "), got \"%.*s\"", path,
                           what, min, (int)(len < KK_TOKEN_SHOWN ? len : KK_TOKEN_SHOWN), line);
    free(line);
    return st;
  }
  free(line);
  *out = v;
  return SS_OK;
}

/* Header + rows of one .fet or .fmask file. */
static ss_status read_table(ss_ctx *ctx, const char *path, const char *what, int is_mask, int64_t *header,
                            ss_matrix *out) {
  memset(out, 0, sizeof(*out));
  FILE *f = fopen(path, "r");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  ss_status st = read_header(ctx, f, path, what, 1, header);
  if (st == SS_OK) {
    ss_text_opts o = {.lines_before = 1, .expected_cols = *header};
    if (is_mask) {
      o.check_range = 1;
      o.lo = 0.0;
      o.hi = 1.0;
      o.range_what = "mask";
    }
    st = ss_text_read_matrix(ctx, f, path, &o, out);
  }
  fclose(f);
  return st;
}

/* Keep the first `keep` columns of every row, in place. */
static void keep_columns(ss_matrix *m, int64_t keep) {
  if (keep == m->cols) return;
  for (int64_t r = 0; r < m->rows; r++)
    memmove(m->data + r * keep, m->data + r * m->cols, (size_t)keep * sizeof(float));
  m->cols = keep;
}

static ss_status read_masks(ss_ctx *ctx, const char *fet_path, const char *fmask_path, int64_t fet_cols,
                            const ss_matrix *features, ss_matrix *masks) {
  int64_t header;
  SS_TRY(read_table(ctx, fmask_path, "the number of masks per row", 1, &header, masks));
  ss_status st = SS_OK;
  if (header != fet_cols)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: line 1: %" PRId64 " masks per row, but %s has %" PRId64 " features",
                 fmask_path, header, fet_path, fet_cols);
  else if (masks->rows != features->rows)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: %" PRId64 " rows, but %s has %" PRId64, fmask_path, masks->rows, fet_path,
                 features->rows);
  if (st != SS_OK) ss_matrix_free(masks);
  return st;
}

ss_status ss_kk_read_features(ss_ctx *ctx, const char *fet_path, const char *fmask_path, int64_t drop_last,
                              ss_matrix *features, ss_matrix *masks) {
  memset(masks, 0, sizeof(*masks));
  memset(features, 0, sizeof(*features));
  if (drop_last < 0)
    return ss_fail(ctx, SS_ERR_USAGE, "drop_last_n_features: expected an integer >= 0, got %" PRId64, drop_last);
  int64_t cols;
  SS_TRY(read_table(ctx, fet_path, "the number of features", 0, &cols, features));
  if (drop_last >= cols) {
    ss_matrix_free(features);
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: drop_last_n_features = %" PRId64 " leaves no features (the file has %" PRId64 ")", fet_path,
                   drop_last, cols);
  }
  if (fmask_path) {
    ss_status st = read_masks(ctx, fet_path, fmask_path, cols, features, masks);
    if (st != SS_OK) {
      ss_matrix_free(features);
      return st;
    }
    keep_columns(masks, cols - drop_last);
  }
  keep_columns(features, cols - drop_last);
  if (!fmask_path) {
    size_t n = (size_t)(features->rows * features->cols);
    ss_status st = SS_ALLOC(ctx, masks->data, n, "all-ones masks");
    if (st != SS_OK) {
      ss_matrix_free(features);
      return st;
    }
    for (size_t i = 0; i < n; i++) masks->data[i] = 1.0f;
    masks->rows = features->rows;
    masks->cols = features->cols;
  }
  return SS_OK;
}

/* Rows are formatted in blocks, in parallel, then written in order: the text is the same for any
 * thread count. A block holds about this many bytes of text. */
#define KK_BLOCK_BYTES (8u << 20)
#define KK_NUMBER_CHARS 24 /* the longest "%.9g" of a float: sign, 9 digits, point, "e-45" */

/* One row as text with its newline; returns its length. */
static size_t format_row(char *out, const float *v, int64_t cols, const char *format) {
  char *p = out;
  for (int64_t c = 0; c < cols; c++) {
    if (c) *p++ = ' ';
    /* most masks are exactly 0 or 1: skip the (slow) float formatting for them; same text */
    if (v[c] == 0.0f && !signbit(v[c])) *p++ = '0';
    else if (v[c] == 1.0f) *p++ = '1';
    else p += snprintf(p, KK_NUMBER_CHARS + 1, format, (double)v[c]);
  }
  *p++ = '\n';
  return (size_t)(p - out);
}

static ss_status write_table(ss_ctx *ctx, const char *path, const ss_matrix *m, const char *format, int n_threads) {
  (void)n_threads; /* read by the OpenMP pragma only: unused in a build without OpenMP */
  const size_t row_cap = (size_t)m->cols * (KK_NUMBER_CHARS + 1) + 2;
  int64_t block = (int64_t)(KK_BLOCK_BYTES / row_cap);
  if (block < 1) block = 1;
  char *buf = NULL;
  size_t *len = NULL;
  SS_TRY(SS_ALLOC(ctx, buf, (size_t)block * row_cap, "text rows"));
  ss_status st = SS_ALLOC(ctx, len, (size_t)block, "text rows");
  ss_atomic_file af;
  if (st == SS_OK) st = ss_atomic_begin(ctx, &af, path, 1);
  if (st != SS_OK) {
    free(buf);
    free(len);
    return st;
  }
  fprintf(af.f, "%" PRId64 "\n", m->cols);
  for (int64_t r0 = 0; r0 < m->rows && !ferror(af.f); r0 += block) {
    int64_t nb = m->rows - r0 < block ? m->rows - r0 : block;
#pragma omp parallel for num_threads(n_threads > 0 ? n_threads : 1) schedule(static)
    for (int64_t i = 0; i < nb; i++)
      len[i] = format_row(buf + i * row_cap, m->data + (r0 + i) * m->cols, m->cols, format);
    for (int64_t i = 0; i < nb; i++) fwrite(buf + i * row_cap, 1, len[i], af.f);
  }
  free(buf);
  free(len);
  return ss_atomic_commit(ctx, &af);
}

ss_status ss_kk_write_features_threads(ss_ctx *ctx, const char *fet_path, const char *fmask_path,
                                       const ss_matrix *features, const ss_matrix *masks, int n_threads) {
  if (fmask_path && (!masks || masks->rows != features->rows || masks->cols != features->cols))
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: masks must have the shape of the features (%" PRId64 " x %" PRId64 ")",
                   fmask_path, features->rows, features->cols);
  SS_TRY(write_table(ctx, fet_path, features, KK_FEATURE_FORMAT, n_threads));
  if (fmask_path) SS_TRY(write_table(ctx, fmask_path, masks, KK_MASK_FORMAT, n_threads));
  return SS_OK;
}

ss_status ss_kk_write_features(ss_ctx *ctx, const char *fet_path, const char *fmask_path, const ss_matrix *features,
                               const ss_matrix *masks) {
  return ss_kk_write_features_threads(ctx, fet_path, fmask_path, features, masks, 1);
}

ss_status ss_kk_read_clu(ss_ctx *ctx, const char *path, int64_t *n, int32_t **labels, int64_t *n_clusters) {
  *n = 0;
  *labels = NULL;
  FILE *f = fopen(path, "r");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  int64_t header;
  ss_status st = read_header(ctx, f, path, "the number of clusters", 0, &header);
  if (st == SS_OK) {
    ss_text_opts o = {.lines_before = 1, .check_range = 1, .lo = 0.0, .hi = INT32_MAX, .range_what = "label"};
    st = ss_text_read_labels(ctx, f, path, &o, n, labels);
  }
  fclose(f);
  if (st == SS_OK && n_clusters) *n_clusters = header;
  return st;
}

ss_status ss_kk_write_clu(ss_ctx *ctx, const char *path, int64_t n, const int32_t *labels) {
  int32_t max = 0;
  for (int64_t i = 0; i < n; i++) {
    if (labels[i] < 0)
      return ss_fail(ctx, SS_ERR_INTERNAL, "%s: label %" PRId64 " is negative (%" PRId32 ")", path, i, labels[i]);
    if (labels[i] > max) max = labels[i];
  }
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  fprintf(af.f, "%" PRId32 "\n", max);
  for (int64_t i = 0; i < n && !ferror(af.f); i++) fprintf(af.f, "%" PRId32 "\n", labels[i]);
  return ss_atomic_commit(ctx, &af);
}
