/* features_pca.h — per-channel PCA features (Klusta's): for every channel, the covariance of the
 * waveforms of the spikes whose mask on that channel is > 0, regularised by (1/N)·R where N is the
 * number of fitting spikes and R the covariance of all unmasked (spike, channel) waveforms pooled
 * (Klusta meant R; its code kept the identity by a typo, which is not scale-free); the n_pcs
 * leading eigenvectors (Jacobi, descending eigenvalues, each vector's largest-magnitude entry made
 * positive) form the channel's basis. Features are the projections of each channel's waveform on
 * its basis, uncentred as in Klusta, laid out [N × C·n_pcs] (channel-major: c·n_pcs + k).
 * The fitting spikes are at most features.pca_max_spikes chosen from the seed (SS_RNG_PCA_SUBSET).
 * The projection has a CUDA twin (stages/features/features_pca.cu); the basis is always fitted on the CPU (from
 * at most pca_max_spikes excerpt spikes). The dispatching entry points take the backend. (Named
 * features_pca.h, not features.h, so that no project header shares a name with glibc's <features.h>.) */
#ifndef SS_FEATURES_H
#define SS_FEATURES_H

#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int n_channels, n_wave, n_pcs;
  float *basis;        /* [n_channels][n_pcs][n_wave] */
  double *eigenvalues; /* [n_channels][n_pcs] */
  int64_t n_fit;       /* spikes the basis was fitted on */
} ss_pca;

/* Which of n spikes fit the basis: all when n <= max, else max of them drawn without replacement
 * from (seed, SS_RNG_PCA_SUBSET); ascending indices, malloc'd. */
ss_status ss_pca_subset(ss_ctx *ctx, uint64_t seed, int64_t n, int64_t max, int64_t **idx, int64_t *n_idx);

/* Fit on waveforms [n × n_channels × n_wave] and masks [n × n_channels] (all of them: pick the
 * subset first). n may be 0: the basis is then the unit vectors. */
ss_status ss_pca_fit_cpu(ss_ctx *ctx, const float *waveforms, const float *masks, int64_t n, int n_channels, int n_wave,
                         int n_pcs, ss_pca *out);
ss_status ss_pca_fit(ss_ctx *ctx, const ss_backend *be, const float *waveforms, const float *masks, int64_t n,
                     int n_channels, int n_wave, int n_pcs, ss_pca *out);
void ss_pca_free(ss_pca *pca);

/* features[i][c·n_pcs + k] = <basis[c][k], waveform[i][c]> */
ss_status ss_pca_project_cpu(ss_ctx *ctx, const ss_pca *pca, const float *waveforms, int64_t n, float *features);
ss_status ss_pca_project(ss_ctx *ctx, const ss_backend *be, const ss_pca *pca, const float *waveforms, int64_t n,
                         float *features);

/* Eigen-decomposition of the symmetric n × n matrix a (row-major; destroyed) by cyclic Jacobi
 * rotations: eigenvalues descending in evals, eigenvector k in row k of evecs (unit length, largest-
 * magnitude entry positive). */
ss_status ss_eigen_symmetric(ss_ctx *ctx, int n, double *a, double *evals, double *evecs);

/* --- CUDA, device-resident (stages/features/features_pca.cu; built only with SS_HAVE_CUDA) ----------------
 * d_features[i][c·P + k] = <basis[c][k], d_waveforms[i][c]>; d_basis = the ss_pca basis copied to
 * the device ([C][P][W] floats). One strided batched FP32 SGEMM over the channels on `stream` (NULL:
 * the backend's); the backend's cuBLAS handle is pointed at `stream` before the call. Asynchronous. */
ss_status ss_pca_project_cuda(ss_ctx *ctx, const ss_backend *be, int n_channels, int n_wave, int n_pcs,
                              const float *d_basis, const float *d_waveforms, int64_t n, float *d_features,
                              ss_stream stream);
/* Host arrays in and out (what ss_pca_project does with a CUDA backend): upload, project, download. */
ss_status ss_pca_project_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_pca *pca, const float *waveforms,
                                   int64_t n, float *features);

#ifdef __cplusplus
}
#endif
#endif
