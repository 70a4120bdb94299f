/* matrix.h — dense 2-D float matrices (rows = points, columns = dimensions) for the stand-alone
 * tools (knn, kmeans) and tests, from and to .npy, HDF5 and CSV, chosen by file extension:
 *   .npy            any numeric dtype, 2-D (a 1-D array is one column)
 *   .h5 / .hdf5     `dataset` names the 2-D dataset (NULL: the file's only dataset at the root)
 *   .csv / .txt     comma- or whitespace-separated numbers, one row per line; one header line is
 *                   skipped when it is not numeric; written comma- (.csv) or space- (.txt)
 *                   separated with %.9g (exact for float32)
 * Writers: `dataset` NULL means "data" (matrices) or "labels" (labels) in new HDF5 files.
 * Every reader rejects NaN/Inf (reporting file, row and column), ragged rows, empty input. */
#ifndef SS_MATRIX_H
#define SS_MATRIX_H

#include <stdint.h>
#include <stdio.h>

#include "io/array.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t rows, cols;
  float *data; /* row-major, owned */
} ss_matrix;

ss_status ss_matrix_read(ss_ctx *ctx, const char *path, const char *dataset, ss_matrix *out);
ss_status ss_matrix_write(ss_ctx *ctx, const char *path, const char *dataset, const ss_matrix *m);
/* Integer vectors (labels) in the same formats: .npy int32/int64, HDF5 dataset, CSV one per line. */
ss_status ss_labels_read(ss_ctx *ctx, const char *path, const char *dataset, int64_t *n, int32_t **out);
ss_status ss_labels_write(ss_ctx *ctx, const char *path, const char *dataset, int64_t n, const int32_t *labels);
void ss_matrix_free(ss_matrix *m);

/* Text tables: the CSV/TXT readers, shared with io/klustakwik.c. Values are separated by commas
 * and/or whitespace; blank lines and lines starting with '#' are skipped. */
typedef struct {
  int64_t lines_before;  /* lines already consumed from the stream: messages count from lines_before + 1 */
  int allow_header;      /* skip the first non-blank line when its first field is not a number */
  int64_t expected_cols; /* > 0: every row must hold this many values; 0: the first row decides */
  int check_range;       /* reject values outside [lo, hi], calling them `range_what` in the message */
  double lo, hi;
  const char *range_what;
} ss_text_opts;
/* Read the rest of `f` as float rows (NaN/Inf and float32 overflow rejected; no rows is an error). */
ss_status ss_text_read_matrix(ss_ctx *ctx, FILE *f, const char *path, const ss_text_opts *opts, ss_matrix *out);
/* Read the rest of `f` as int32 values (expected_cols is forced to 1: one value per line). */
ss_status ss_text_read_labels(ss_ctx *ctx, FILE *f, const char *path, const ss_text_opts *opts, int64_t *n,
                              int32_t **out);

#ifdef __cplusplus
}
#endif
#endif
