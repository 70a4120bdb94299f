/* array.c — ss_array: dtype table, allocation, and checked conversions to float32 / int64
 * (the only two element types the pipeline computes with). */
#include "io/array.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2^63: floating-point values at or beyond ±2^63 do not fit an int64. */
#define SS_TWO_POW_63 9223372036854775808.0

static const struct {
  size_t size;
  const char *name;
} dtype_table[] = {
    [SS_DT_U8] = {1, "uint8"},    [SS_DT_I16] = {2, "int16"},   [SS_DT_I32] = {4, "int32"},
    [SS_DT_I64] = {8, "int64"},   [SS_DT_U32] = {4, "uint32"},  [SS_DT_U64] = {8, "uint64"},
    [SS_DT_F32] = {4, "float32"}, [SS_DT_F64] = {8, "float64"},
};

static int dtype_valid(ss_dtype t) { return (int)t >= 0 && (int)t <= (int)SS_DT_F64; }

size_t ss_dtype_size(ss_dtype t) { return dtype_valid(t) ? dtype_table[t].size : 0; }

const char *ss_dtype_name(ss_dtype t) { return dtype_valid(t) ? dtype_table[t].name : "unknown"; }

int64_t ss_array_count(const ss_array *a) {
  int64_t n = 1;
  for (int d = 0; d < a->ndim; d++) n *= a->shape[d];
  return n;
}

int ss_shape_count(int ndim, const int64_t *shape, size_t item_size, int64_t *count) {
  int64_t nonzero = 1, n = 1;
  for (int d = 0; d < ndim; d++) {
    if (shape[d] < 0) return 0;
    if (shape[d] > 0 && __builtin_mul_overflow(nonzero, shape[d], &nonzero)) return 0;
    n = shape[d] == 0 ? 0 : n * shape[d]; /* bounded by nonzero */
  }
  int64_t bytes;
  if (item_size == 0 || __builtin_mul_overflow(nonzero, (int64_t)item_size, &bytes)) return 0;
  *count = n;
  return 1;
}

ss_status ss_array_alloc(ss_ctx *ctx, ss_array *a, ss_dtype t, int ndim, const int64_t *shape) {
  memset(a, 0, sizeof(*a));
  if (!dtype_valid(t)) return ss_fail(ctx, SS_ERR_INTERNAL, "array: invalid dtype %d", (int)t);
  if (ndim < 0 || ndim > SS_ARRAY_MAX_DIMS)
    return ss_fail(ctx, SS_ERR_INTERNAL, "array: %d dimensions (at most %d)", ndim, SS_ARRAY_MAX_DIMS);
  int64_t n = 0;
  if (!ss_shape_count(ndim, shape, ss_dtype_size(t), &n))
    return ss_fail(ctx, SS_ERR_NOMEM, "array: shape too large or negative");
  size_t count = (size_t)n;
  void *data = NULL;
  /* at least one byte so that an empty array still owns a non-NULL buffer */
  SS_TRY(ss_alloc(ctx, &data, count ? count : 1, ss_dtype_size(t), "array data"));
  a->dtype = t;
  a->ndim = ndim;
  for (int d = 0; d < ndim; d++) a->shape[d] = shape[d];
  a->data = data;
  return SS_OK;
}

void ss_array_free(ss_array *a) {
  if (!a) return;
  free(a->data);
  a->data = NULL;
  a->ndim = 0;
}

static int dtype_is_float(ss_dtype t) { return t == SS_DT_F32 || t == SS_DT_F64; }

/* Element i as a double (exact for every integer type up to 2^53, and for both float types). */
static double get_f64(const ss_array *a, int64_t i) {
  switch (a->dtype) {
    case SS_DT_U8: return ((const uint8_t *)a->data)[i];
    case SS_DT_I16: return ((const int16_t *)a->data)[i];
    case SS_DT_I32: return ((const int32_t *)a->data)[i];
    case SS_DT_I64: return (double)((const int64_t *)a->data)[i];
    case SS_DT_U32: return ((const uint32_t *)a->data)[i];
    case SS_DT_U64: return (double)((const uint64_t *)a->data)[i];
    case SS_DT_F32: return ((const float *)a->data)[i];
    case SS_DT_F64: return ((const double *)a->data)[i];
  }
  return 0.0;
}

/* "what: row r, column c" for 2-D arrays, "what: element i" otherwise (0-based indices). */
static void where(const ss_array *a, int64_t i, const char *what, char *buf, size_t len) {
  if (a->ndim == 2 && a->shape[1] > 0)
    snprintf(buf, len, "%s: row %" PRId64 ", column %" PRId64, what, i / a->shape[1], i % a->shape[1]);
  else snprintf(buf, len, "%s: element %" PRId64, what, i);
}

ss_status ss_array_to_f32(ss_ctx *ctx, const ss_array *a, int reject_nonfinite, const char *what, float **out) {
  *out = NULL;
  int64_t n = ss_array_count(a);
  float *f = NULL;
  SS_TRY(SS_ALLOC(ctx, f, (size_t)(n ? n : 1), "float32 conversion"));
  char loc[512];
  for (int64_t i = 0; i < n; i++) {
    double v = get_f64(a, i);
    f[i] = (float)v;
    if (reject_nonfinite && dtype_is_float(a->dtype) && !isfinite(f[i])) {
      where(a, i, what, loc, sizeof(loc));
      free(f);
      if (!isfinite(v)) return ss_fail(ctx, SS_ERR_INPUT, "%s: not finite: %g", loc, v);
      return ss_fail(ctx, SS_ERR_INPUT, "%s: out of float32 range: %g", loc, v);
    }
  }
  *out = f;
  return SS_OK;
}

ss_status ss_array_to_i64(ss_ctx *ctx, const ss_array *a, const char *what, int64_t **out) {
  *out = NULL;
  int64_t n = ss_array_count(a);
  int64_t *r = NULL;
  SS_TRY(SS_ALLOC(ctx, r, (size_t)(n ? n : 1), "int64 conversion"));
  char loc[512];
  for (int64_t i = 0; i < n; i++) {
    if (a->dtype == SS_DT_U64) {
      uint64_t u = ((const uint64_t *)a->data)[i];
      if (u > (uint64_t)INT64_MAX) {
        where(a, i, what, loc, sizeof(loc));
        free(r);
        return ss_fail(ctx, SS_ERR_INPUT, "%s: out of int64 range: %" PRIu64, loc, u);
      }
      r[i] = (int64_t)u;
    } else if (a->dtype == SS_DT_I64) {
      r[i] = ((const int64_t *)a->data)[i];
    } else if (dtype_is_float(a->dtype)) {
      double v = get_f64(a, i);
      if (!(v == floor(v)) || v >= SS_TWO_POW_63 || v < -SS_TWO_POW_63) {
        where(a, i, what, loc, sizeof(loc));
        free(r);
        if (isfinite(v) && v == floor(v)) return ss_fail(ctx, SS_ERR_INPUT, "%s: out of int64 range: %g", loc, v);
        return ss_fail(ctx, SS_ERR_INPUT, "%s: not an integer: %g", loc, v);
      }
      r[i] = (int64_t)v;
    } else {
      r[i] = (int64_t)get_f64(a, i); /* the remaining integer types are exact in a double */
    }
  }
  *out = r;
  return SS_OK;
}
