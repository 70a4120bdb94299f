/* motion.cu — the registration of a filtered chunk on the device: the CPU's weights (motion.c) uploaded
 * once, one thread per output value. */
#include <cstdlib>
#include <new>

#include "core/cuda_util.cuh"
#include "stages/motion/motion.h"

struct ss_motion_cuda {
  int64_t n_bins = 0, bin_samples = 1;
  int C = 0;
  int32_t *d_src = nullptr;
  float *d_w = nullptr;
};

extern "C" void ss_motion_cuda_close(ss_motion_cuda *h) {
  if (!h) return;
  cudaFree(h->d_src);
  cudaFree(h->d_w);
  delete h;
}

extern "C" ss_status ss_motion_cuda_open(ss_ctx *ctx, const ss_motion_reg *r, ss_motion_cuda **out) {
  *out = nullptr;
  ss_motion_cuda *h = new (std::nothrow) ss_motion_cuda();
  if (!h) return ss_fail(ctx, SS_ERR_NOMEM, "registration: out of host memory");
  h->n_bins = r->n_bins;
  h->bin_samples = r->bin_samples;
  h->C = r->n_channels;
  const size_t cells = (size_t)r->n_bins * r->n_channels * SS_MOTION_TAPS;
  ss_status st = SS_CUDA_ALLOC(ctx, h->d_src, cells, "registration weights");
  if (st == SS_OK) st = SS_CUDA_ALLOC(ctx, h->d_w, cells, "registration weights");
  if (st == SS_OK && (cudaMemcpy(h->d_src, r->src, cells * sizeof(int32_t), cudaMemcpyHostToDevice) != cudaSuccess ||
                      cudaMemcpy(h->d_w, r->w, cells * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess))
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: registration weights upload: %s", cudaGetErrorString(cudaGetLastError()));
  if (st != SS_OK) {
    ss_motion_cuda_close(h);
    return st;
  }
  *out = h;
  return SS_OK;
}

__global__ void k_register(const float *in, float *out, int64_t rows, int C, int64_t row0, int64_t bin_samples,
                           int64_t n_bins, const int32_t *src, const float *w) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * C) return;
  int64_t t = i / C;
  int c = (int)(i - t * C);
  int64_t b = (row0 + t) / bin_samples;
  b = b < 0 ? 0 : b >= n_bins ? n_bins - 1 : b;
  size_t at = ((size_t)b * C + c) * SS_MOTION_TAPS;
  const float *v = in + t * C;
  /* the CPU's order of operations, unfused, so both give the same floats */
  float s = __fadd_rn(__fmul_rn(w[at], v[src[at]]), __fmul_rn(w[at + 1], v[src[at + 1]]));
  s = __fadd_rn(s, __fmul_rn(w[at + 2], v[src[at + 2]]));
  out[i] = __fadd_rn(s, __fmul_rn(w[at + 3], v[src[at + 3]]));
}

extern "C" ss_status ss_motion_apply_cuda(ss_ctx *ctx, const ss_motion_cuda *h, const float *d_in, float *d_out,
                                          int64_t n_rows, int64_t row0_sample, ss_stream stream) {
  const int64_t count = n_rows * h->C;
  if (count <= 0) return SS_OK;
  const int threads = 256;
  k_register<<<(unsigned)((count + threads - 1) / threads), threads, 0, (cudaStream_t)stream>>>(
      d_in, d_out, n_rows, h->C, row0_sample, h->bin_samples, h->n_bins, h->d_src, h->d_w);
  SS_CUDA_TRY_LAUNCH(ctx, "registration");
  return SS_OK;
}
