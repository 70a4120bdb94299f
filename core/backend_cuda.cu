/* device.cu — CUDA device discovery and the backend state (stream, cuBLAS, cuSOLVER handles). */
#include <stdio.h>
#include <new>
#include <string.h>

#include "core/backend_cuda.h"
#include "core/cuda_util.cuh"

const char *ss_cublas_status_name(cublasStatus_t st) {
  switch (st) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
    case CUBLAS_STATUS_MAPPING_ERROR: return "mapping error";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "internal error";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
    default: return "unknown cuBLAS status";
  }
}

ss_status ss_cuda_malloc(ss_ctx *ctx, void **ptr, size_t bytes, const char *what) {
  *ptr = nullptr;
  if (bytes == 0) return SS_OK;
  cudaError_t e = cudaMalloc(ptr, bytes);
  if (e == cudaSuccess) return SS_OK;
  cudaGetLastError(); /* clear the sticky-free error so later calls are not blamed */
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return ss_fail(ctx, SS_ERR_DEVICE, "GPU out of memory: %s needs %.1f MiB, %.1f MiB free of %.1f MiB", what,
                 bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
}

extern "C" int ss_cuda_device_count(char *why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) {
      if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
        snprintf(why, why_len, "no NVIDIA GPU or driver on this machine: %s", cudaGetErrorString(e));
      else snprintf(why, why_len, "%s", cudaGetErrorString(e));
    }
    return 0;
  }
  if (n == 0 && why) snprintf(why, why_len, "the driver reports no device");
  return n;
}

extern "C" ss_status ss_cuda_device_info(ss_ctx *ctx, int index, ss_gpu_info *info) {
  memset(info, 0, sizeof(*info));
  cudaDeviceProp prop;
  SS_CUDA_TRY(ctx, cudaGetDeviceProperties(&prop, index));
  info->index = index;
  snprintf(info->name, sizeof(info->name), "%s", prop.name);
  info->total_mem = prop.totalGlobalMem;
  info->cc_major = prop.major;
  info->cc_minor = prop.minor;
  info->sm_count = prop.multiProcessorCount;
  cudaDriverGetVersion(&info->driver_version);
  cudaRuntimeGetVersion(&info->runtime_version);
  int prev = 0;
  SS_CUDA_TRY(ctx, cudaGetDevice(&prev));
  SS_CUDA_TRY(ctx, cudaSetDevice(index));
  size_t free_b = 0, total_b = 0;
  cudaError_t e = cudaMemGetInfo(&free_b, &total_b);
  cudaSetDevice(prev);
  SS_CUDA_TRY(ctx, e);
  info->free_mem = free_b;
  return SS_OK;
}

extern "C" ss_status ss_cuda_state_create(ss_ctx *ctx, int index, ss_gpu_info *info, void **state) {
  *state = nullptr;
  SS_TRY(ss_cuda_device_info(ctx, index, info));
  SS_CUDA_TRY(ctx, cudaSetDevice(index));
  ss_cuda_state *s = new (std::nothrow) ss_cuda_state();
  if (!s) return ss_fail(ctx, SS_ERR_NOMEM, "CUDA backend state: out of host memory");
  s->device = index;
  ss_status st = SS_OK;
  if (cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking) != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: cannot create a stream on device %d", index);
  else if (cublasCreate(&s->cublas) != CUBLAS_STATUS_SUCCESS)
    st = ss_fail(ctx, SS_ERR_DEVICE, "cuBLAS: cannot create a handle on device %d", index);
  else if (cusolverDnCreate(&s->cusolver) != CUSOLVER_STATUS_SUCCESS)
    st = ss_fail(ctx, SS_ERR_DEVICE, "cuSOLVER: cannot create a handle on device %d", index);
  if (st == SS_OK) {
    cublasSetStream(s->cublas, s->stream);
    /* Agreement with the CPU twins is part of the contract: plain FP32, no TF32 unless a stage
     * opts in for its own calls and a test shows agreement holds. */
    cublasSetMathMode(s->cublas, CUBLAS_DEFAULT_MATH);
    cusolverDnSetStream(s->cusolver, s->stream);
    *state = s;
    return SS_OK;
  }
  ss_cuda_state_destroy(s);
  return st;
}

extern "C" ss_status ss_cuda_bind_thread(ss_ctx *ctx, int index) {
  SS_CUDA_TRY(ctx, cudaSetDevice(index));
  return SS_OK;
}

extern "C" void ss_cuda_state_destroy(void *state) {
  ss_cuda_state *s = (ss_cuda_state *)state;
  if (!s) return;
  if (s->cusolver) cusolverDnDestroy(s->cusolver);
  if (s->cublas) cublasDestroy(s->cublas);
  if (s->stream) cudaStreamDestroy(s->stream);
  delete s;
}
