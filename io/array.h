/* array.h — a typed n-dimensional host array (C order), the currency of io/: .npy files, HDF5
 * datasets and CSV matrices all read into and write from an ss_array. */
#ifndef SS_ARRAY_H
#define SS_ARRAY_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SS_DT_U8 = 0, SS_DT_I16, SS_DT_I32, SS_DT_I64, SS_DT_U32, SS_DT_U64, SS_DT_F32, SS_DT_F64 } ss_dtype;

#define SS_ARRAY_MAX_DIMS 4

typedef struct {
  ss_dtype dtype;
  int ndim;
  int64_t shape[SS_ARRAY_MAX_DIMS];
  void *data; /* owned; C order */
} ss_array;

size_t ss_dtype_size(ss_dtype t);
const char *ss_dtype_name(ss_dtype t); /* "float32", "int64", ... */
int64_t ss_array_count(const ss_array *a);
/* The element count of `shape` into *count; 0 when a dimension is negative or when the product of
 * the non-zero dimensions times item_size exceeds INT64_MAX (checked whatever the other dimensions,
 * so that strides and counts never overflow, even for an empty array). */
int ss_shape_count(int ndim, const int64_t *shape, size_t item_size, int64_t *count);
/* Allocate an array of the given shape (data uninitialised). */
ss_status ss_array_alloc(ss_ctx *ctx, ss_array *a, ss_dtype t, int ndim, const int64_t *shape);
void ss_array_free(ss_array *a);
/* Convert any numeric array to a new float32 / int32 / int64 buffer (malloc'd). Conversion to an
 * integer type fails on a non-integral or out-of-range value; to float fails on NaN/Inf when
 * `reject_nonfinite` is set, naming the flat index. `what` names the source in messages. */
ss_status ss_array_to_f32(ss_ctx *ctx, const ss_array *a, int reject_nonfinite, const char *what, float **out);
ss_status ss_array_to_i64(ss_ctx *ctx, const ss_array *a, const char *what, int64_t **out);

#ifdef __cplusplus
}
#endif
#endif
