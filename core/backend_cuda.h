/* cuda_backend.h — the C-callable side of the CUDA backend: device discovery and the per-backend
 * state (one stream, a cuBLAS and a cuSOLVER handle). Included by core/backend.c only when the
 * build has CUDA; CUDA stage files use core/cuda_util.cuh for the handles and error checks. */
#ifndef SS_CUDA_BACKEND_H
#define SS_CUDA_BACKEND_H

#include "core/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

int ss_cuda_device_count(char *why, size_t why_len);
ss_status ss_cuda_device_info(ss_ctx *ctx, int index, ss_gpu_info *info);
ss_status ss_cuda_state_create(ss_ctx *ctx, int index, ss_gpu_info *info, void **state);
void ss_cuda_state_destroy(void *state);
ss_status ss_cuda_bind_thread(ss_ctx *ctx, int index);

#ifdef __cplusplus
}
#endif
#endif
