/* npy.c — NumPy .npy reader (format 1.0–3.0, little-endian, C or Fortran order) and writer
 * (format 1.0, C order, header byte-identical to numpy.save: sorted-key dict literal, 21 − digits
 * of the growth axis spare spaces, then space padding so that magic + length + header + '\n' is a
 * multiple of 64 bytes). */
#include "io/npy.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/atomic_file.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "io/npy.c assumes a little-endian host"
#endif

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
#define NPY_PREFIX_V1 10          /* magic + 2 version bytes + uint16 header length */
#define NPY_PREFIX_V2 12          /* ... + uint32 header length */
#define NPY_ALIGN 64              /* numpy's ARRAY_ALIGN */
#define NPY_GROWTH_AXIS_DIGITS 21 /* numpy's GROWTH_AXIS_MAX_DIGITS */
#define NPY_MAX_HEADER (1 << 20)  /* a sane upper bound on a header we are willing to parse */
#define NPY_MAX_DESCR 64
#define NPY_SHOWN 20 /* characters of a bad header shown in messages */

/* numpy's dtype codes for our dtypes (without the byte-order character). */
static const char *const npy_codes[] = {
    [SS_DT_U8] = "u1",  [SS_DT_I16] = "i2", [SS_DT_I32] = "i4", [SS_DT_I64] = "i8",
    [SS_DT_U32] = "u4", [SS_DT_U64] = "u8", [SS_DT_F32] = "f4", [SS_DT_F64] = "f8",
};
#define NPY_N_CODES ((int)(sizeof(npy_codes) / sizeof(npy_codes[0])))

static void format_shape(char *buf, size_t len, int ndim, const int64_t *shape) {
  size_t used = (size_t)snprintf(buf, len, "(");
  for (int d = 0; d < ndim && used < len; d++)
    used += (size_t)snprintf(buf + used, len - used, d ? ", %" PRId64 : "%" PRId64, shape[d]);
  if (used < len) snprintf(buf + used, len - used, ndim == 1 ? ",)" : ")");
}

/* ---- header parsing: a Python dict literal with keys descr, fortran_order, shape ---- */

typedef struct {
  const char *path;
  const char *p, *end;
  char descr[NPY_MAX_DESCR];
  int have_descr, have_fortran, have_shape;
  int fortran;
  int ndim;
  int64_t shape[SS_ARRAY_MAX_DIMS];
} npy_header;

static void skip_ws(npy_header *h) {
  while (h->p < h->end && (*h->p == ' ' || *h->p == '\t' || *h->p == '\n' || *h->p == '\r')) h->p++;
}

static ss_status syntax_error(ss_ctx *ctx, npy_header *h, const char *expected) {
  int shown = (int)(h->end - h->p);
  if (shown > NPY_SHOWN) shown = NPY_SHOWN;
  while (shown > 0 && (h->p[shown - 1] == ' ' || h->p[shown - 1] == '\n')) shown--; /* the padding */
  return ss_fail(ctx, SS_ERR_INPUT, "%s: header: expected %s, got \"%.*s\"", h->path, expected, shown, h->p);
}

static ss_status expect_char(ss_ctx *ctx, npy_header *h, char c, const char *expected) {
  skip_ws(h);
  if (h->p >= h->end || *h->p != c) return syntax_error(ctx, h, expected);
  h->p++;
  return SS_OK;
}

static int accept_char(npy_header *h, char c) {
  skip_ws(h);
  if (h->p < h->end && *h->p == c) {
    h->p++;
    return 1;
  }
  return 0;
}

static ss_status parse_string(ss_ctx *ctx, npy_header *h, char *out, size_t len, const char *what) {
  skip_ws(h);
  if (h->p >= h->end || (*h->p != '\'' && *h->p != '"')) return syntax_error(ctx, h, what);
  char q = *h->p++;
  const char *start = h->p;
  while (h->p < h->end && *h->p != q) h->p++;
  if (h->p >= h->end) return ss_fail(ctx, SS_ERR_INPUT, "%s: header: unterminated string", h->path);
  size_t n = (size_t)(h->p - start);
  h->p++;
  if (n >= len) return ss_fail(ctx, SS_ERR_INPUT, "%s: header: %s too long: \"%.20s...\"", h->path, what, start);
  memcpy(out, start, n);
  out[n] = '\0';
  return SS_OK;
}

static ss_status parse_descr(ss_ctx *ctx, npy_header *h) {
  skip_ws(h);
  if (h->p < h->end && (*h->p == '[' || *h->p == '{'))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: descr: structured dtypes are not supported", h->path);
  SS_TRY(parse_string(ctx, h, h->descr, sizeof(h->descr), "a dtype string for 'descr'"));
  h->have_descr = 1;
  return SS_OK;
}

static ss_status parse_fortran(ss_ctx *ctx, npy_header *h) {
  skip_ws(h);
  const char *start = h->p;
  while (h->p < h->end && ((*h->p >= 'a' && *h->p <= 'z') || (*h->p >= 'A' && *h->p <= 'Z'))) h->p++;
  int n = (int)(h->p - start);
  if (n == 4 && !strncmp(start, "True", 4)) h->fortran = 1;
  else if (n == 5 && !strncmp(start, "False", 5)) h->fortran = 0;
  else {
    h->p = start;
    int left = (int)(h->end - start);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: fortran_order: expected True or False, got \"%.*s\"", h->path,
                   left < NPY_SHOWN ? left : NPY_SHOWN, start);
  }
  h->have_fortran = 1;
  return SS_OK;
}

static ss_status parse_dim(ss_ctx *ctx, npy_header *h, int64_t *out) {
  skip_ws(h);
  const char *start = h->p;
  int64_t v = 0;
  while (h->p < h->end && *h->p >= '0' && *h->p <= '9') {
    int digit = *h->p - '0';
    if (v > (INT64_MAX - digit) / 10)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: header: shape: dimension too large", h->path);
    v = v * 10 + digit;
    h->p++;
  }
  if (h->p == start) return syntax_error(ctx, h, "a non-negative integer in 'shape'");
  if (h->p < h->end && *h->p == 'L') h->p++; /* Python 2 long literal */
  *out = v;
  return SS_OK;
}

static ss_status parse_shape(ss_ctx *ctx, npy_header *h) {
  SS_TRY(expect_char(ctx, h, '(', "'(' starting 'shape'"));
  int ndim = 0;
  while (!accept_char(h, ')')) {
    int64_t dim = 0;
    SS_TRY(parse_dim(ctx, h, &dim));
    if (ndim == SS_ARRAY_MAX_DIMS)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: header: shape: more than %d dimensions", h->path, SS_ARRAY_MAX_DIMS);
    h->shape[ndim++] = dim;
    if (!accept_char(h, ',')) {
      SS_TRY(expect_char(ctx, h, ')', "',' or ')' in 'shape'"));
      break;
    }
  }
  if (ndim == 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: shape: 0-d arrays (shape ()) are not supported", h->path);
  h->ndim = ndim;
  h->have_shape = 1;
  return SS_OK;
}

static ss_status parse_header(ss_ctx *ctx, npy_header *h) {
  SS_TRY(expect_char(ctx, h, '{', "'{'"));
  while (!accept_char(h, '}')) {
    char key[32];
    SS_TRY(parse_string(ctx, h, key, sizeof(key), "a quoted key"));
    SS_TRY(expect_char(ctx, h, ':', "':'"));
    if (!strcmp(key, "descr")) SS_TRY(parse_descr(ctx, h));
    else if (!strcmp(key, "fortran_order")) SS_TRY(parse_fortran(ctx, h));
    else if (!strcmp(key, "shape")) SS_TRY(parse_shape(ctx, h));
    else return ss_fail(ctx, SS_ERR_INPUT, "%s: header: unknown key '%s'", h->path, key);
    if (!accept_char(h, ',')) {
      SS_TRY(expect_char(ctx, h, '}', "',' or '}'"));
      break;
    }
  }
  skip_ws(h);
  if (h->p < h->end) return syntax_error(ctx, h, "the end of the header after '}'");
  const char *missing = !h->have_descr ? "descr" : !h->have_fortran ? "fortran_order" : !h->have_shape ? "shape" : NULL;
  if (missing) return ss_fail(ctx, SS_ERR_INPUT, "%s: header: missing key '%s'", h->path, missing);
  return SS_OK;
}

static ss_status descr_to_dtype(ss_ctx *ctx, const npy_header *h, ss_dtype *out) {
  const char *d = h->descr;
  char order = d[0];
  if (order != '<' && order != '|' && order != '>' && order != '=')
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: descr: unsupported dtype '%s'", h->path, d);
  if (d[1] == 'O')
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: descr: object dtype '%s' is not supported", h->path, d);
  for (int t = 0; t < NPY_N_CODES; t++) {
    if (strcmp(d + 1, npy_codes[t])) continue;
    /* byte order matters only for multi-byte types; '=' is native, i.e. little-endian here */
    if (order == '>' && ss_dtype_size((ss_dtype)t) > 1)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: header: descr: big-endian dtype '%s' is not supported", h->path, d);
    *out = (ss_dtype)t;
    return SS_OK;
  }
  return ss_fail(ctx, SS_ERR_INPUT,
                 "%s: header: descr: unsupported dtype '%s' (supported: u1 i2 i4 i8 u4 u8 f4 f8, little-endian)",
                 h->path, d);
}

/* Reorder Fortran-order data (first index fastest) into C order (last index fastest). */
static void fortran_to_c(const ss_array *a, const char *src, char *dst) {
  size_t item = ss_dtype_size(a->dtype);
  int64_t cstride[SS_ARRAY_MAX_DIMS], idx[SS_ARRAY_MAX_DIMS] = {0};
  int64_t s = 1;
  for (int d = a->ndim - 1; d >= 0; d--) {
    cstride[d] = s;
    s *= a->shape[d];
  }
  int64_t n = ss_array_count(a), off = 0;
  for (int64_t j = 0; j < n; j++) {
    memcpy(dst + (size_t)off * item, src + (size_t)j * item, item);
    for (int d = 0; d < a->ndim; d++) { /* odometer over the Fortran index */
      off += cstride[d];
      if (++idx[d] < a->shape[d]) break;
      off -= cstride[d] * idx[d];
      idx[d] = 0;
    }
  }
}

static uint32_t read_le(const unsigned char *b, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

/* Read the prefix and header, leaving f at the first data byte. */
static ss_status read_header(ss_ctx *ctx, FILE *f, const char *path, npy_header *h, long *data_offset) {
  unsigned char prefix[NPY_PREFIX_V2];
  if (fread(prefix, 1, NPY_PREFIX_V1, f) != NPY_PREFIX_V1 || memcmp(prefix, NPY_MAGIC, NPY_MAGIC_LEN))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: not a .npy file (no \\x93NUMPY magic)", path);
  int major = prefix[NPY_MAGIC_LEN], minor = prefix[NPY_MAGIC_LEN + 1];
  if (major < 1 || major > 3 || minor != 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: version: unsupported .npy format version %d.%d", path, major, minor);
  uint32_t hlen;
  long prefix_len = NPY_PREFIX_V1;
  if (major == 1) {
    hlen = read_le(prefix + 8, 2);
  } else {
    if (fread(prefix + NPY_PREFIX_V1, 1, 2, f) != 2)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: header: truncated header length", path);
    hlen = read_le(prefix + 8, 4);
    prefix_len = NPY_PREFIX_V2;
  }
  if (hlen > NPY_MAX_HEADER)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: length %" PRIu32 " exceeds %d bytes", path, hlen, NPY_MAX_HEADER);
  char *text = NULL;
  SS_TRY(SS_ALLOC(ctx, text, hlen + 1, "npy header"));
  if (fread(text, 1, hlen, f) != hlen) {
    free(text);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: truncated (expected %" PRIu32 " header bytes)", path, hlen);
  }
  text[hlen] = '\0';
  memset(h, 0, sizeof(*h));
  h->path = path;
  h->p = text;
  h->end = text + hlen;
  ss_status st = parse_header(ctx, h);
  free(text);
  h->p = h->end = NULL;
  *data_offset = prefix_len + (long)hlen;
  return st;
}

/* The shape's byte size, checked for overflow and against what the file holds after the header,
 * before anything that size is allocated. */
static ss_status check_data_size(ss_ctx *ctx, FILE *f, const char *path, const npy_header *h, ss_dtype dt,
                                 long data_offset, size_t *need) {
  char shape[160];
  format_shape(shape, sizeof(shape), h->ndim, h->shape);
  int64_t count = 0;
  if (!ss_shape_count(h->ndim, h->shape, ss_dtype_size(dt), &count))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: header: shape %s of %s: the size in bytes overflows", path, shape,
                   ss_dtype_name(dt));
  struct stat sb;
  *need = (size_t)count * ss_dtype_size(dt);
  size_t have = (fstat(fileno(f), &sb) == 0 && sb.st_size > data_offset) ? (size_t)(sb.st_size - data_offset) : 0;
  if (have != *need)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: data: shape %s of %s needs %zu bytes, the file holds %zu%s", path, shape,
                   ss_dtype_name(dt), *need, have, have < *need ? " (truncated)" : "");
  return SS_OK;
}

ss_status ss_npy_read(ss_ctx *ctx, const char *path, ss_array *out) {
  memset(out, 0, sizeof(*out));
  FILE *f = fopen(path, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  npy_header h;
  long data_offset = 0;
  ss_dtype dt = SS_DT_U8;
  ss_status st = read_header(ctx, f, path, &h, &data_offset);
  if (st == SS_OK) st = descr_to_dtype(ctx, &h, &dt);
  ss_array raw = {0};
  size_t need = 0;
  if (st == SS_OK) st = check_data_size(ctx, f, path, &h, dt, data_offset, &need);
  if (st == SS_OK) st = ss_array_alloc(ctx, &raw, dt, h.ndim, h.shape);
  if (st == SS_OK && fread(raw.data, 1, need, f) != need) st = ss_fail(ctx, SS_ERR_IO, "%s: read failed", path);
  fclose(f);
  if (st == SS_OK && h.fortran && h.ndim > 1) {
    st = ss_array_alloc(ctx, out, dt, h.ndim, h.shape);
    if (st == SS_OK) fortran_to_c(&raw, raw.data, out->data);
    ss_array_free(&raw);
    return st;
  }
  if (st != SS_OK) {
    ss_array_free(&raw);
    return st;
  }
  *out = raw;
  return SS_OK;
}

/* The header numpy.save writes for `a`, including padding and the final newline; returns its length. */
static size_t build_header(const ss_array *a, char *buf, size_t len) {
  char shape[160];
  format_shape(shape, sizeof(shape), a->ndim, a->shape);
  int n = snprintf(buf, len, "{'descr': '%c%s', 'fortran_order': False, 'shape': %s, }",
                   ss_dtype_size(a->dtype) == 1 ? '|' : '<', npy_codes[a->dtype], shape);
  char growth[32];
  int growth_digits = snprintf(growth, sizeof(growth), "%" PRId64, a->shape[0]);
  for (int i = growth_digits; i < NPY_GROWTH_AXIS_DIGITS; i++) buf[n++] = ' ';
  size_t hlen = (size_t)n + 1; /* + '\n' */
  size_t pad = NPY_ALIGN - ((NPY_PREFIX_V1 + hlen) % NPY_ALIGN);
  memset(buf + n, ' ', pad);
  buf[n + pad] = '\n';
  return (size_t)n + pad + 1;
}

ss_status ss_npy_write(ss_ctx *ctx, const char *path, const ss_array *a) {
  if ((int)a->dtype < 0 || (int)a->dtype >= NPY_N_CODES)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: invalid dtype %d", path, (int)a->dtype);
  if (a->ndim < 1 || a->ndim > SS_ARRAY_MAX_DIMS)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: cannot write a %d-d array", path, a->ndim);
  char header[512];
  size_t hlen = build_header(a, header, sizeof(header));
  unsigned char prefix[NPY_PREFIX_V1] = {
      0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  size_t nbytes = (size_t)ss_array_count(a) * ss_dtype_size(a->dtype);
  if (fwrite(prefix, 1, sizeof(prefix), af.f) != sizeof(prefix) || fwrite(header, 1, hlen, af.f) != hlen ||
      (nbytes && fwrite(a->data, 1, nbytes, af.f) != nbytes)) {
    int e = errno;
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", path, strerror(e));
  }
  return ss_atomic_commit(ctx, &af);
}
