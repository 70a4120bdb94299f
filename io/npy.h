/* npy.h — NumPy .npy files (format versions 1.0–3.0, little-endian, C or Fortran order on read,
 * C order on write). Used for phy folders and as a matrix format of the stand-alone tools. */
#ifndef SS_NPY_H
#define SS_NPY_H

#include "io/array.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read a whole .npy file. Rejects big-endian, object, structured and unknown dtypes, shapes whose
 * product does not match the file size (truncated), and more than SS_ARRAY_MAX_DIMS dimensions. */
ss_status ss_npy_read(ss_ctx *ctx, const char *path, ss_array *out);
/* Write atomically (temporary name, then rename). */
ss_status ss_npy_write(ss_ctx *ctx, const char *path, const ss_array *a);

#ifdef __cplusplus
}
#endif
#endif
