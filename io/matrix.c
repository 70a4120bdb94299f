/* matrix.c — 2-D float matrices and int32 label vectors from and to .npy, HDF5 and CSV/TXT,
 * chosen by file extension; also the streaming text-table parser shared with io/klustakwik.c. */
#include "io/matrix.h"

#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/atomic_file.h"
#include "io/npy.h"

#define TEXT_INITIAL_VALUES 4096 /* first capacity of the growing value buffer */
#define TEXT_TOKEN_SHOWN 40      /* at most this many characters of a bad token in messages */
#define FLOAT_TEXT_FORMAT "%.9g" /* 9 significant digits: float32 round-trips exactly */
#define DEFAULT_MATRIX_DATASET "data"
#define DEFAULT_LABELS_DATASET "labels"

typedef enum { FMT_UNKNOWN, FMT_NPY, FMT_HDF5, FMT_CSV, FMT_TXT } file_format;

static file_format format_of(const char *path) {
  const char *dot = strrchr(path, '.');
  const char *slash = strrchr(path, '/');
  if (!dot || (slash && dot < slash)) return FMT_UNKNOWN;
  if (!strcasecmp(dot, ".npy")) return FMT_NPY;
  if (!strcasecmp(dot, ".h5") || !strcasecmp(dot, ".hdf5")) return FMT_HDF5;
  if (!strcasecmp(dot, ".csv")) return FMT_CSV;
  if (!strcasecmp(dot, ".txt")) return FMT_TXT;
  return FMT_UNKNOWN;
}

static ss_status unknown_format(ss_ctx *ctx, const char *path) {
  return ss_fail(ctx, SS_ERR_USAGE, "%s: unknown file type (expected .npy, .h5, .hdf5, .csv or .txt)", path);
}

void ss_matrix_free(ss_matrix *m) {
  if (!m) return;
  free(m->data);
  m->data = NULL;
  m->rows = m->cols = 0;
}

/* ---- text tables --------------------------------------------------------------------------- */

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
static int is_sep(char c) { return c == '\0' || c == ',' || is_blank(c); }
static char *skip_blank(char *p) {
  while (is_blank(*p)) p++;
  return p;
}

/* Value storage of the parser: float32 for matrices, int32 for labels. */
typedef struct {
  int integer;
  void *data;
  size_t n, cap;
} value_buf;

static ss_status buf_reserve(ss_ctx *ctx, value_buf *b) {
  if (b->n < b->cap) return SS_OK;
  size_t cap = b->cap ? b->cap * 2 : TEXT_INITIAL_VALUES;
  SS_TRY(ss_realloc(ctx, &b->data, cap, b->integer ? sizeof(int32_t) : sizeof(float), "text table: values"));
  b->cap = cap;
  return SS_OK;
}

/* The state of one text-table read: for messages and the column count. */
typedef struct {
  const char *path;
  const ss_text_opts *opts;
  int64_t line, cols, rows;
  int seen_data;
} text_state;

static ss_status token_error(ss_ctx *ctx, const text_state *t, int64_t col, const char *what, const char *tok) {
  int len = 0;
  while (!is_sep(tok[len]) && len < TEXT_TOKEN_SHOWN) len++;
  return ss_fail(ctx, SS_ERR_INPUT, "%s: line %" PRId64 ", column %" PRId64 ": %s: \"%.*s\"", t->path, t->line, col,
                 what, len, tok);
}

/* Parse one value at p into b; *end is set past it. */
static ss_status parse_value(ss_ctx *ctx, const text_state *t, value_buf *b, int64_t col, char *p, char **end) {
  errno = 0;
  double v;
  if (b->integer) {
    long long iv = strtoll(p, end, 10);
    if (*end == p || !is_sep(**end)) return token_error(ctx, t, col, "not an integer", p);
    if (errno == ERANGE || iv < INT32_MIN || iv > INT32_MAX) return token_error(ctx, t, col, "out of int32 range", p);
    v = (double)iv;
  } else {
    float fv = strtof(p, end);
    if (*end == p || !is_sep(**end)) return token_error(ctx, t, col, "not a number", p);
    if (!isfinite(fv)) return token_error(ctx, t, col, errno == ERANGE ? "out of float32 range" : "not finite", p);
    v = fv;
  }
  const ss_text_opts *o = t->opts;
  if (o->check_range && (v < o->lo || v > o->hi)) {
    char what[128];
    snprintf(what, sizeof(what), "%s outside [%.10g, %.10g]", o->range_what ? o->range_what : "value", o->lo, o->hi);
    return token_error(ctx, t, col, what, p);
  }
  SS_TRY(buf_reserve(ctx, b));
  if (b->integer) ((int32_t *)b->data)[b->n++] = (int32_t)v;
  else ((float *)b->data)[b->n++] = (float)v;
  return SS_OK;
}

/* Parse one non-blank line; *skip is set when it is the header line. */
static ss_status parse_line(ss_ctx *ctx, text_state *t, value_buf *b, char *p, int *skip) {
  *skip = 0;
  int first = !t->seen_data;
  t->seen_data = 1;
  if (first && t->opts->allow_header) { /* a header: the first non-blank line, not starting with a number */
    char *end;
    if (b->integer) (void)strtoll(p, &end, 10);
    else (void)strtof(p, &end);
    if (end == p || !is_sep(*end)) {
      *skip = 1;
      return SS_OK;
    }
  }
  int64_t col = 0;
  for (;;) {
    if (*p == ',' || *p == '\0')
      return ss_fail(ctx, SS_ERR_INPUT, "%s: line %" PRId64 ", column %" PRId64 ": empty value", t->path, t->line,
                     col + 1);
    char *end;
    SS_TRY(parse_value(ctx, t, b, col + 1, p, &end));
    col++;
    p = skip_blank(end);
    if (*p == '\0') break;
    if (*p == ',') p = skip_blank(p + 1);
  }
  if (t->cols == 0) t->cols = col;
  if (col != t->cols)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: line %" PRId64 ": %" PRId64 " values, expected %" PRId64, t->path, t->line,
                   col, t->cols);
  t->rows++;
  return SS_OK;
}

static ss_status text_read(ss_ctx *ctx, FILE *f, const char *path, const ss_text_opts *opts, value_buf *b,
                           text_state *t) {
  memset(t, 0, sizeof(*t));
  t->path = path;
  t->opts = opts;
  t->line = opts->lines_before;
  t->cols = opts->expected_cols > 0 ? opts->expected_cols : 0;
  char *line = NULL;
  size_t cap = 0;
  ss_status st = SS_OK;
  errno = 0;
  while (getline(&line, &cap, f) >= 0) {
    t->line++;
    char *p = skip_blank(line);
    if (*p == '\0' || *p == '#') continue;
    int skip;
    st = parse_line(ctx, t, b, p, &skip);
    if (st != SS_OK) break;
  }
  if (st == SS_OK && ferror(f)) st = ss_fail(ctx, SS_ERR_IO, "%s: read failed: %s", path, strerror(errno));
  free(line);
  if (st == SS_OK && t->rows == 0) st = ss_fail(ctx, SS_ERR_INPUT, "%s: no data rows", path);
  if (st != SS_OK) {
    free(b->data);
    b->data = NULL;
  }
  return st;
}

ss_status ss_text_read_matrix(ss_ctx *ctx, FILE *f, const char *path, const ss_text_opts *opts, ss_matrix *out) {
  memset(out, 0, sizeof(*out));
  value_buf b = {0};
  text_state t;
  SS_TRY(text_read(ctx, f, path, opts, &b, &t));
  out->rows = t.rows;
  out->cols = t.cols;
  out->data = b.data;
  return SS_OK;
}

ss_status ss_text_read_labels(ss_ctx *ctx, FILE *f, const char *path, const ss_text_opts *opts, int64_t *n,
                              int32_t **out) {
  *n = 0;
  *out = NULL;
  ss_text_opts o = *opts;
  o.expected_cols = 1;
  value_buf b = {.integer = 1};
  text_state t;
  SS_TRY(text_read(ctx, f, path, &o, &b, &t));
  *n = t.rows;
  *out = b.data;
  return SS_OK;
}

static ss_status open_read(ss_ctx *ctx, const char *path, FILE **f) {
  *f = fopen(path, "r");
  if (!*f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  return SS_OK;
}

static ss_status csv_read_matrix(ss_ctx *ctx, const char *path, ss_matrix *out) {
  FILE *f;
  SS_TRY(open_read(ctx, path, &f));
  ss_text_opts o = {.allow_header = 1};
  ss_status st = ss_text_read_matrix(ctx, f, path, &o, out);
  fclose(f);
  return st;
}

static ss_status csv_read_labels(ss_ctx *ctx, const char *path, int64_t *n, int32_t **out) {
  FILE *f;
  SS_TRY(open_read(ctx, path, &f));
  ss_text_opts o = {.allow_header = 1};
  ss_status st = ss_text_read_labels(ctx, f, path, &o, n, out);
  fclose(f);
  return st;
}

static ss_status finish_write(ss_ctx *ctx, ss_atomic_file *af) {
  if (ferror(af->f)) {
    int e = errno;
    ss_atomic_abort(af);
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", af->final_path, strerror(e));
  }
  return ss_atomic_commit(ctx, af);
}

static ss_status csv_write_matrix(ss_ctx *ctx, const char *path, char sep, const ss_matrix *m) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  for (int64_t r = 0; r < m->rows && !ferror(af.f); r++) {
    const float *row = m->data + r * m->cols;
    for (int64_t c = 0; c < m->cols; c++) {
      if (c) fputc(sep, af.f);
      fprintf(af.f, FLOAT_TEXT_FORMAT, (double)row[c]);
    }
    fputc('\n', af.f);
  }
  return finish_write(ctx, &af);
}

static ss_status csv_write_labels(ss_ctx *ctx, const char *path, int64_t n, const int32_t *labels) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  for (int64_t i = 0; i < n && !ferror(af.f); i++) fprintf(af.f, "%" PRId32 "\n", labels[i]);
  return finish_write(ctx, &af);
}

/* ---- HDF5 ---------------------------------------------------------------------------------- */

static const char *h5_class_name(H5T_class_t c) {
  switch (c) {
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "reference";
    case H5T_BITFIELD: return "bitfield";
    case H5T_TIME: return "time";
    default: return "unknown";
  }
}

/* The name of the only dataset at the root (dataset = NULL). */
static ss_status h5_only_dataset(ss_ctx *ctx, hid_t file, const char *path, char *name, size_t len) {
  H5G_info_t info;
  if (H5Gget_info(file, &info) < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot list the root group", path);
  int found = 0;
  char list[512] = "";
  for (hsize_t i = 0; i < info.nlinks; i++) {
    char link[256];
    if (H5Lget_name_by_idx(file, ".", H5_INDEX_NAME, H5_ITER_INC, i, link, sizeof(link), H5P_DEFAULT) < 0) continue;
    hid_t obj;
    H5E_BEGIN_TRY { obj = H5Oopen(file, link, H5P_DEFAULT); }
    H5E_END_TRY;
    if (obj < 0) continue;
    int is_dataset = H5Iget_type(obj) == H5I_DATASET;
    H5Oclose(obj);
    if (!is_dataset) continue;
    if (found++ == 0) snprintf(name, len, "%s", link);
    size_t used = strlen(list);
    snprintf(list + used, sizeof(list) - used, "%s'%s'", used ? ", " : "", link);
  }
  if (found == 1) return SS_OK;
  if (found == 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: no dataset at the root (name one with --dataset)", path);
  return ss_fail(ctx, SS_ERR_INPUT, "%s: %d datasets at the root (%s): name one with --dataset", path, found, list);
}

/* Read a numeric dataset of rank 1 or 2 into `out` (float32, float64 or int64 in memory). */
static ss_status h5_read_dataset(ss_ctx *ctx, hid_t file, const char *path, const char *name, ss_array *out) {
  hid_t ds;
  H5E_BEGIN_TRY { ds = H5Dopen2(file, name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (ds < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: dataset '%s': not found", path, name);
  hid_t type = H5Dget_type(ds), space = H5Dget_space(ds);
  H5T_class_t cls = H5Tget_class(type);
  size_t size = H5Tget_size(type);
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[2] = {0, 1};
  ss_status st = SS_OK;
  if (cls != H5T_INTEGER && cls != H5T_FLOAT)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset '%s': not numeric (HDF5 %s type)", path, name, h5_class_name(cls));
  else if (rank < 1 || rank > 2)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset '%s': expected 1 or 2 dimensions, got %d", path, name, rank);
  if (st == SS_OK) {
    H5Sget_simple_extent_dims(space, dims, NULL);
    ss_dtype dt = cls == H5T_INTEGER ? SS_DT_I64 : size <= sizeof(float) ? SS_DT_F32 : SS_DT_F64;
    hid_t mem = dt == SS_DT_I64 ? H5T_NATIVE_INT64 : dt == SS_DT_F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
    int64_t shape[2] = {(int64_t)dims[0], (int64_t)dims[1]};
    st = ss_array_alloc(ctx, out, dt, rank, shape);
    if (st == SS_OK && ss_array_count(out) > 0 && H5Dread(ds, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, out->data) < 0) {
      ss_array_free(out);
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset '%s': read failed", path, name);
    }
  }
  H5Sclose(space);
  H5Tclose(type);
  H5Dclose(ds);
  return st;
}

/* Open `path`, find the dataset (NULL: the only one at the root) and read it. `label` receives
 * "path: dataset 'name'" for the caller's messages. */
static ss_status h5_read(ss_ctx *ctx, const char *path, const char *dataset, ss_array *out, char *label, size_t len) {
  memset(out, 0, sizeof(*out));
  FILE *probe = fopen(path, "rb");
  if (!probe) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  fclose(probe);
  hid_t file;
  H5E_BEGIN_TRY { file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT); }
  H5E_END_TRY;
  if (file < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: not an HDF5 file", path);
  char only[256];
  ss_status st = SS_OK;
  if (!dataset) {
    st = h5_only_dataset(ctx, file, path, only, sizeof(only));
    dataset = only;
  }
  if (st == SS_OK) {
    snprintf(label, len, "%s: dataset '%s'", path, dataset);
    st = h5_read_dataset(ctx, file, path, dataset, out);
  }
  H5Fclose(file);
  return st;
}

/* Write a new HDF5 file holding one dataset (rank 1 or 2) atomically. */
static ss_status h5_write(ss_ctx *ctx, const char *path, const char *dataset, hid_t file_type, hid_t mem_type, int rank,
                          const hsize_t *dims, const void *data) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 0));
  hid_t file, space = -1, lcpl = -1, ds = -1;
  H5E_BEGIN_TRY { file = H5Fcreate(af.tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT); }
  H5E_END_TRY;
  if (file < 0) {
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot create the HDF5 file", path);
  }
  int ok = 0;
  H5E_BEGIN_TRY {
    space = H5Screate_simple(rank, dims, NULL);
    lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (space >= 0 && lcpl >= 0 && H5Pset_create_intermediate_group(lcpl, 1) >= 0)
      ds = H5Dcreate2(file, dataset, file_type, space, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    ok = ds >= 0 && H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
    if (ds >= 0) H5Dclose(ds);
    if (lcpl >= 0) H5Pclose(lcpl);
    if (space >= 0) H5Sclose(space);
    if (H5Fclose(file) < 0) ok = 0;
  }
  H5E_END_TRY;
  if (!ok) {
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: dataset '%s': write failed", path, dataset);
  }
  return ss_atomic_commit(ctx, &af);
}

/* ---- matrices ------------------------------------------------------------------------------ */

/* A 1-D array is one column; a 2-D array is itself; reject the rest and empty arrays. */
static ss_status array_to_matrix(ss_ctx *ctx, const ss_array *a, const char *what, ss_matrix *out) {
  if (a->ndim != 1 && a->ndim != 2)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: expected a 2-D matrix, got %d dimensions", what, a->ndim);
  int64_t rows = a->shape[0], cols = a->ndim == 2 ? a->shape[1] : 1;
  if (rows == 0 || cols == 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: empty matrix (%" PRId64 " x %" PRId64 ")", what, rows, cols);
  SS_TRY(ss_array_to_f32(ctx, a, 1, what, &out->data));
  out->rows = rows;
  out->cols = cols;
  return SS_OK;
}

/* A .npy file or an HDF5 dataset as an array; `what` receives the name messages use. */
static ss_status read_array(ss_ctx *ctx, file_format fmt, const char *path, const char *dataset, ss_array *a,
                            char *what, size_t len) {
  if (fmt == FMT_NPY) {
    snprintf(what, len, "%s", path);
    return ss_npy_read(ctx, path, a);
  }
  return h5_read(ctx, path, dataset, a, what, len);
}

ss_status ss_matrix_read(ss_ctx *ctx, const char *path, const char *dataset, ss_matrix *out) {
  memset(out, 0, sizeof(*out));
  file_format fmt = format_of(path);
  if (fmt == FMT_CSV || fmt == FMT_TXT) return csv_read_matrix(ctx, path, out);
  if (fmt != FMT_NPY && fmt != FMT_HDF5) return unknown_format(ctx, path);
  ss_array a;
  char what[1024];
  SS_TRY(read_array(ctx, fmt, path, dataset, &a, what, sizeof(what)));
  ss_status st = array_to_matrix(ctx, &a, what, out);
  ss_array_free(&a);
  return st;
}

ss_status ss_matrix_write(ss_ctx *ctx, const char *path, const char *dataset, const ss_matrix *m) {
  switch (format_of(path)) {
    case FMT_NPY: {
      ss_array a = {.dtype = SS_DT_F32, .ndim = 2, .shape = {m->rows, m->cols}, .data = (void *)m->data};
      return ss_npy_write(ctx, path, &a);
    }
    case FMT_HDF5: {
      hsize_t dims[2] = {(hsize_t)m->rows, (hsize_t)m->cols};
      return h5_write(ctx, path, dataset ? dataset : DEFAULT_MATRIX_DATASET, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, dims,
                      m->data);
    }
    case FMT_CSV: return csv_write_matrix(ctx, path, ',', m);
    case FMT_TXT: return csv_write_matrix(ctx, path, ' ', m);
    default: return unknown_format(ctx, path);
  }
}

/* ---- labels -------------------------------------------------------------------------------- */

/* A 1-D array, or 2-D with one column or one row, of integral values in the int32 range. */
static ss_status array_to_labels(ss_ctx *ctx, const ss_array *a, const char *what, int64_t *n, int32_t **out) {
  int vector = a->ndim == 1 || (a->ndim == 2 && (a->shape[0] == 1 || a->shape[1] == 1));
  if (!vector)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: expected a 1-D vector of labels, got %d dimensions", what, a->ndim);
  int64_t count = ss_array_count(a);
  if (count == 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: no labels", what);
  int64_t *v;
  SS_TRY(ss_array_to_i64(ctx, a, what, &v));
  int32_t *r = NULL;
  ss_status st = SS_ALLOC(ctx, r, (size_t)count, "labels");
  for (int64_t i = 0; st == SS_OK && i < count; i++) {
    if (v[i] < INT32_MIN || v[i] > INT32_MAX)
      st = ss_fail(ctx, SS_ERR_INPUT, "%s: element %" PRId64 ": out of int32 range: %" PRId64, what, i, v[i]);
    else r[i] = (int32_t)v[i];
  }
  free(v);
  if (st != SS_OK) {
    free(r);
    return st;
  }
  *n = count;
  *out = r;
  return SS_OK;
}

ss_status ss_labels_read(ss_ctx *ctx, const char *path, const char *dataset, int64_t *n, int32_t **out) {
  *n = 0;
  *out = NULL;
  file_format fmt = format_of(path);
  if (fmt == FMT_CSV || fmt == FMT_TXT) return csv_read_labels(ctx, path, n, out);
  if (fmt != FMT_NPY && fmt != FMT_HDF5) return unknown_format(ctx, path);
  ss_array a;
  char what[1024];
  SS_TRY(read_array(ctx, fmt, path, dataset, &a, what, sizeof(what)));
  ss_status st = array_to_labels(ctx, &a, what, n, out);
  ss_array_free(&a);
  return st;
}

ss_status ss_labels_write(ss_ctx *ctx, const char *path, const char *dataset, int64_t n, const int32_t *labels) {
  switch (format_of(path)) {
    case FMT_NPY: {
      ss_array a = {.dtype = SS_DT_I32, .ndim = 1, .shape = {n}, .data = (void *)labels};
      return ss_npy_write(ctx, path, &a);
    }
    case FMT_HDF5: {
      hsize_t dims[1] = {(hsize_t)n};
      return h5_write(ctx, path, dataset ? dataset : DEFAULT_LABELS_DATASET, H5T_STD_I32LE, H5T_NATIVE_INT32, 1, dims,
                      labels);
    }
    case FMT_CSV:
    case FMT_TXT: return csv_write_labels(ctx, path, n, labels);
    default: return unknown_format(ctx, path);
  }
}
