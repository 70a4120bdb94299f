/* stages/features/features_pca.cu — the CUDA twin of ss_pca_project_cpu: per-channel PCA projection of device
 * waveforms as one strided batched SGEMM over the channels (the basis is fitted on the CPU).
 *
 * In cuBLAS's column-major terms, channel c computes F_cᵀ (P × n, leading dimension C·P, starting
 * at column offset c·P of the features) = B_cᵀᵀ · X_cᵀ, where B_c is the channel's basis ([P][W]
 * row-major = W × P column-major, lda W) and X_cᵀ the channel's waveforms (W × n column-major,
 * leading dimension C·W, starting at c·W). Batch stride: P·W in the basis, W in the waveforms, P in
 * the features. FP32 accumulation (the backend's math mode, no TF32) against the CPU's double: a few
 * float roundings over W terms, far inside the 1e-4 relative agreement the issue asks for. */
#include <climits>

#include "core/cuda_util.cuh"
#include "stages/features/features_pca.h"

namespace {

/* Spikes per SGEMM call, so that every element offset cuBLAS forms fits its int arithmetic. */
int64_t rows_per_call(int C, int W) {
  int64_t per = (int64_t)C * W;
  int64_t rows = (int64_t)INT_MAX / (per > 0 ? per : 1);
  return rows > 0 ? rows : 1;
}

/* Restores a cuBLAS handle's stream when it goes out of scope. */
struct stream_guard {
  cublasHandle_t h;
  cudaStream_t prev = nullptr;
  explicit stream_guard(cublasHandle_t handle) : h(handle) { cublasGetStream(h, &prev); }
  ~stream_guard() { cublasSetStream(h, prev); }
};

} // namespace

extern "C" ss_status ss_pca_project_cuda(ss_ctx *ctx, const ss_backend *be, int n_channels, int n_wave, int n_pcs,
                                         const float *d_basis, const float *d_waveforms, int64_t n, float *d_features,
                                         ss_stream stream) {
  const int C = n_channels, W = n_wave, P = n_pcs;
  if (C < 1 || W < 1 || P < 1 || P > W)
    return ss_fail(ctx, SS_ERR_INTERNAL, "features: projection of %d channels × %d samples on %d components", C, W, P);
  if (n <= 0) return SS_OK;
  cublasHandle_t h = ss_cuda_cublas(be);
  /* the handle is the backend's: give its stream back afterwards (later stages, e.g. masked EM, use it
   * on the backend's stream, and the caller's stream may be destroyed) */
  stream_guard guard(h);
  SS_CUBLAS_TRY(ctx, cublasSetStream(h, stream ? (cudaStream_t)stream : ss_cuda_stream(be)));
  const float one = 1.0f, zero = 0.0f;
  const int64_t step = rows_per_call(C, W);
  for (int64_t i0 = 0; i0 < n; i0 += step) {
    const int rows = (int)(n - i0 < step ? n - i0 : step);
    SS_CUBLAS_TRY(ctx, cublasSgemmStridedBatched(h, CUBLAS_OP_T, CUBLAS_OP_N, P, rows, W, &one, d_basis, W,
                                                 (long long)P * W, d_waveforms + i0 * C * W, C * W, W, &zero,
                                                 d_features + i0 * C * P, C * P, P, C));
  }
  return SS_OK;
}

extern "C" ss_status ss_pca_project_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_pca *pca,
                                              const float *waveforms, int64_t n, float *features) {
  const int C = pca->n_channels, W = pca->n_wave, P = pca->n_pcs;
  if (n <= 0) return SS_OK;
  cudaStream_t st = ss_cuda_stream(be);
  const size_t nb = (size_t)C * P * W, nw = (size_t)n * C * W, nf = (size_t)n * C * P;
  ss_dbuf<float> basis, wf, feat;
  SS_TRY(basis.alloc(ctx, nb, "PCA basis"));
  SS_TRY(wf.alloc(ctx, nw, "waveforms"));
  SS_TRY(feat.alloc(ctx, nf, "features"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(basis.p, pca->basis, nb * sizeof(float), cudaMemcpyHostToDevice, st));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(wf.p, waveforms, nw * sizeof(float), cudaMemcpyHostToDevice, st));
  ss_status status = ss_pca_project_cuda(ctx, be, C, W, P, basis.p, wf.p, n, feat.p, NULL);
  if (status == SS_OK)
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(features, feat.p, nf * sizeof(float), cudaMemcpyDeviceToHost, st));
  cudaStreamSynchronize(st); /* the buffers are freed on return */
  return status;
}
