/* matrix.h — dense 2-D float matrices (rows = points, columns = dimensions) for the stand-alone
 * tools (knn, kmeans) and tests, from and to .npy, HDF5 and CSV, chosen by file extension:
 *   .npy            any numeric dtype, 2-D (a 1-D array is one column)
 *   .h5 / .hdf5     `dataset` names the 2-D dataset (NULL: the file's only dataset at the root)
 *   .csv / .txt     comma- or whitespace-separated numbers, one row per line; one header line is
 *                   skipped when it is not numeric
 * Every reader rejects NaN/Inf (reporting file, row and column), ragged rows, empty input. */
#ifndef SS_MATRIX_H
#define SS_MATRIX_H

#include <stdint.h>

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

#ifdef __cplusplus
}
#endif
#endif
