/* backend.h — the one backend interface: which device runs the stages, and its handles.
 *
 * Every stage takes an ss_backend *. On the CPU it carries the thread count; on CUDA it also
 * carries an opaque state (stream, cuBLAS and cuSOLVER handles) owned by core/backend_cuda.cu. `auto`
 * resolves to CUDA when this build has the backend and a device is present, and logs its choice.
 * Nothing falls back silently: asking for CUDA where there is none is an error. */
#ifndef SS_BACKEND_H
#define SS_BACKEND_H

#include <stddef.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SS_DEVICE_AUTO = 0, SS_DEVICE_CPU, SS_DEVICE_CUDA } ss_device_kind;

/* A CUDA stream as C code sees it (cudaStream_t is `struct CUstream_st *`), so that device-resident
 * stage entry points can be declared in the stage headers; NULL means the backend's own stream. */
typedef struct CUstream_st *ss_stream;

typedef struct {
  int index;
  char name[256];
  size_t total_mem;
  size_t free_mem;
  int cc_major, cc_minor;
  int sm_count;
  int driver_version, runtime_version; /* e.g. 13000 */
} ss_gpu_info;

typedef struct ss_backend {
  ss_device_kind kind; /* resolved: SS_DEVICE_CPU or SS_DEVICE_CUDA */
  int n_threads;       /* CPU threads for OpenMP regions; >= 1 */
  ss_gpu_info gpu;     /* valid when kind == SS_DEVICE_CUDA */
  void *cuda;          /* opaque CUDA state, see core/backend_cuda.h */
} ss_backend;

ss_status ss_device_kind_parse(ss_ctx *ctx, const char *text, ss_device_kind *out);
const char *ss_device_kind_name(ss_device_kind kind);

/* 1 when this build contains the CUDA backend. */
int ss_backend_cuda_built(void);
/* The one answer when CUDA is asked of a build without the backend (every CUDA entry point of such a
 * build, drivers/cuda_off.c, and `--device cuda`): records "<what>: no CUDA device available (this
 * build has no CUDA backend; ...)" and returns SS_ERR_UNSUPPORTED (exit 3). */
ss_status ss_cuda_not_built(ss_ctx *ctx, const char *what);
/* Number of usable CUDA devices (0 without the backend, a driver or a device). When there are none,
 * `why` (if not NULL) receives the reason. Never fails. */
int ss_backend_gpu_count(char *why, size_t why_len);
ss_status ss_backend_gpu_info(ss_ctx *ctx, int index, ss_gpu_info *info);

/* Open a backend. n_threads <= 0 means all the CPU's threads. */
ss_status ss_backend_open(ss_ctx *ctx, ss_device_kind requested, int gpu_index, int n_threads, ss_backend *be);
void ss_backend_close(ss_backend *be);
/* Make `be`'s device current for the calling thread: a thread other than the one that opened a CUDA
 * backend must call this before it runs a stage (the CUDA runtime's current device is per thread).
 * A no-op on the CPU. */
ss_status ss_backend_bind_thread(ss_ctx *ctx, const ss_backend *be);

/* The number of threads an OpenMP region should use when asked for n (<= 0: all). */
int ss_threads_resolve(int n);

#ifdef __cplusplus
}
#endif
#endif
