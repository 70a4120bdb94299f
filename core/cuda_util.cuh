/* cuda_util.cuh — what every CUDA stage file needs: the backend's stream and library handles,
 * checks that turn CUDA/cuBLAS/cuSOLVER errors into ss_status with the failing call named, and a
 * scoped device buffer. */
#ifndef SS_CUDA_UTIL_CUH
#define SS_CUDA_UTIL_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include "core/backend.h"
#include "core/status.h"

struct ss_cuda_state {
  int device;
  cudaStream_t stream;
  cublasHandle_t cublas;
  cusolverDnHandle_t cusolver;
};

static inline ss_cuda_state *ss_cuda_of(const ss_backend *be) { return (ss_cuda_state *)be->cuda; }
static inline cudaStream_t ss_cuda_stream(const ss_backend *be) { return ss_cuda_of(be)->stream; }
static inline cublasHandle_t ss_cuda_cublas(const ss_backend *be) { return ss_cuda_of(be)->cublas; }
static inline cusolverDnHandle_t ss_cuda_cusolver(const ss_backend *be) { return ss_cuda_of(be)->cusolver; }

const char *ss_cublas_status_name(cublasStatus_t st);

/* Each macro records the failing expression and returns SS_ERR_DEVICE from the caller. */
#define SS_CUDA_TRY(ctx, call) \
  do { \
    cudaError_t ss_e_ = (call); \
    if (ss_e_ != cudaSuccess) \
      return ss_fail((ctx), SS_ERR_DEVICE, "CUDA: %s: %s (%s:%d)", #call, cudaGetErrorString(ss_e_), __FILE__, \
                     __LINE__); \
  } while (0)

/* After a kernel launch: launch-configuration errors now, execution errors at the next sync.
 * cudaGetLastError returns the launch's error and clears it, so it is the value to report: peeking
 * after the clear would return success and hide a failed launch (e.g. too much shared memory). */
#define SS_CUDA_TRY_LAUNCH(ctx, what) \
  do { \
    cudaError_t ss_e_ = cudaGetLastError(); \
    if (ss_e_ != cudaSuccess) \
      return ss_fail((ctx), SS_ERR_DEVICE, "CUDA: launch of %s: %s (%s:%d)", (what), cudaGetErrorString(ss_e_), \
                     __FILE__, __LINE__); \
  } while (0)

#define SS_CUBLAS_TRY(ctx, call) \
  do { \
    cublasStatus_t ss_e_ = (call); \
    if (ss_e_ != CUBLAS_STATUS_SUCCESS) \
      return ss_fail((ctx), SS_ERR_DEVICE, "cuBLAS: %s: %s (%s:%d)", #call, ss_cublas_status_name(ss_e_), __FILE__, \
                     __LINE__); \
  } while (0)

#define SS_CUSOLVER_TRY(ctx, call) \
  do { \
    cusolverStatus_t ss_e_ = (call); \
    if (ss_e_ != CUSOLVER_STATUS_SUCCESS) \
      return ss_fail((ctx), SS_ERR_DEVICE, "cuSOLVER: %s: status %d (%s:%d)", #call, (int)ss_e_, __FILE__, __LINE__); \
  } while (0)

/* Device allocation with a clear out-of-memory message naming what and how much. */
ss_status ss_cuda_malloc(ss_ctx *ctx, void **ptr, size_t bytes, const char *what);
#define SS_CUDA_ALLOC(ctx, ptr, count, what) \
  ss_cuda_malloc((ctx), (void **)&(ptr), (size_t)(count) * sizeof(*(ptr)), (what))

/* A device buffer freed when it goes out of scope (error paths included). */
template <typename T>
struct ss_dbuf {
  T *p = nullptr;
  size_t n = 0;
  ss_dbuf() = default;
  ss_dbuf(const ss_dbuf &) = delete;
  ss_dbuf &operator=(const ss_dbuf &) = delete;
  ~ss_dbuf() { cudaFree(p); }
  ss_status alloc(ss_ctx *ctx, size_t count, const char *what) {
    cudaFree(p);
    p = nullptr;
    n = count;
    return ss_cuda_malloc(ctx, (void **)&p, count * sizeof(T), what);
  }
  operator T *() const { return p; }
};

#endif
