/* klustakwik.h — KlustaKwik's text files (docs/formats.md): BASE.fet.S (line 1: number of
 * columns D; then one row of D numbers per point), BASE.fmask.S (the same layout, masks in [0, 1])
 * and BASE.clu.S (line 1: the number of clusters K; then one label per point, KlustaKwik numbering:
 * 1 = noise, 2..K Gaussian clusters). */
#ifndef SS_KLUSTAKWIK_H
#define SS_KLUSTAKWIK_H

#include <stdint.h>

#include "io/matrix.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Read features [N × (D − drop_last)] and masks of the same shape. `fmask_path` NULL: all masks 1.
 * The .fmask header must equal the .fet header (both count the dropped columns, as KlustaKwik). */
ss_status ss_kk_read_features(ss_ctx *ctx, const char *fet_path, const char *fmask_path, int64_t drop_last,
                              ss_matrix *features, ss_matrix *masks);
/* Write a .fet file (%.9g: float32 exact) and, when `fmask_path` is not NULL, a .fmask file (%.9g:
 * exact too) of `masks`, which must have the shape of `features`. Both atomically. */
ss_status ss_kk_write_features(ss_ctx *ctx, const char *fet_path, const char *fmask_path, const ss_matrix *features,
                               const ss_matrix *masks);
/* The same, formatting rows on n_threads threads (the text does not depend on it). */
ss_status ss_kk_write_features_threads(ss_ctx *ctx, const char *fet_path, const char *fmask_path,
                                       const ss_matrix *features, const ss_matrix *masks, int n_threads);
/* Read a .clu file: labels must be non-negative integers; `n_clusters` (may be NULL) receives the
 * header. Labels above the header are accepted (other tools count clusters differently). */
ss_status ss_kk_read_clu(ss_ctx *ctx, const char *path, int64_t *n, int32_t **labels, int64_t *n_clusters);
/* Write a .clu file; the header is the largest label (KlustaKwik: labels 1..K, header K). */
ss_status ss_kk_write_clu(ss_ctx *ctx, const char *path, int64_t n, const int32_t *labels);

#ifdef __cplusplus
}
#endif
#endif
