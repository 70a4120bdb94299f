/* backend.c — backend selection and CPU thread resolution; CUDA specifics are in core/backend_cuda.cu. */
#include "backend.h"

#include <string.h>
#include <strings.h>

#include "log.h"
#if SS_HAVE_CUDA
#include "core/backend_cuda.h"
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

ss_status ss_device_kind_parse(ss_ctx *ctx, const char *text, ss_device_kind *out) {
  if (strcasecmp(text, "auto") == 0) *out = SS_DEVICE_AUTO;
  else if (strcasecmp(text, "cpu") == 0) *out = SS_DEVICE_CPU;
  else if (strcasecmp(text, "cuda") == 0 || strcasecmp(text, "gpu") == 0) *out = SS_DEVICE_CUDA;
  else return ss_fail(ctx, SS_ERR_USAGE, "--device: expected auto|cpu|cuda, got \"%s\"", text);
  return SS_OK;
}

const char *ss_device_kind_name(ss_device_kind kind) {
  switch (kind) {
    case SS_DEVICE_AUTO: return "auto";
    case SS_DEVICE_CPU: return "cpu";
    case SS_DEVICE_CUDA: return "cuda";
  }
  return "?";
}

int ss_backend_cuda_built(void) { return SS_HAVE_CUDA; }

/* Why a build without the backend has no device: said the same way everywhere (`info`, `auto`'s log,
 * ss_cuda_not_built). */
static const char not_built[] =
    "this build has no CUDA backend; rebuild with the CUDA toolkit, see docs/architecture.md";

ss_status ss_cuda_not_built(ss_ctx *ctx, const char *what) {
  return ss_fail(ctx, SS_ERR_UNSUPPORTED, "%s: no CUDA device available (%s)", what, not_built);
}

int ss_backend_gpu_count(char *why, size_t why_len) {
#if SS_HAVE_CUDA
  return ss_cuda_device_count(why, why_len);
#else
  if (why) snprintf(why, why_len, "%s", not_built);
  return 0;
#endif
}

ss_status ss_backend_gpu_info(ss_ctx *ctx, int index, ss_gpu_info *info) {
#if SS_HAVE_CUDA
  return ss_cuda_device_info(ctx, index, info);
#else
  (void)index;
  memset(info, 0, sizeof(*info));
  return ss_cuda_not_built(ctx, "GPU information");
#endif
}

int ss_threads_resolve(int n) {
  if (n > 0) return n;
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

ss_status ss_backend_open(ss_ctx *ctx, ss_device_kind requested, int gpu_index, int n_threads, ss_backend *be) {
  memset(be, 0, sizeof(*be));
  be->n_threads = ss_threads_resolve(n_threads);
  be->kind = SS_DEVICE_CPU;
  if (requested == SS_DEVICE_CPU) return SS_OK;

  char why[256] = "";
  int count = ss_backend_gpu_count(why, sizeof(why));
  if (count == 0) {
    if (requested == SS_DEVICE_CUDA && !ss_backend_cuda_built()) return ss_cuda_not_built(ctx, "--device cuda");
    if (requested == SS_DEVICE_CUDA)
      return ss_fail(ctx, SS_ERR_DEVICE, "--device cuda: no CUDA device available (%s)", why);
    ss_log_info(ctx, "device auto: no CUDA device (%s); using the CPU backend with %d thread(s)", why, be->n_threads);
    return SS_OK;
  }
  if (gpu_index < 0 || gpu_index >= count)
    return ss_fail(ctx, SS_ERR_USAGE, "--gpu: index %d out of range (this machine has %d CUDA device(s))", gpu_index,
                   count);
#if SS_HAVE_CUDA
  SS_TRY(ss_cuda_state_create(ctx, gpu_index, &be->gpu, &be->cuda));
  be->kind = SS_DEVICE_CUDA;
  if (requested == SS_DEVICE_AUTO) ss_log_info(ctx, "device auto: using CUDA device %d (%s)", gpu_index, be->gpu.name);
#endif
  return SS_OK;
}

ss_status ss_backend_bind_thread(ss_ctx *ctx, const ss_backend *be) {
#if SS_HAVE_CUDA
  if (be->kind == SS_DEVICE_CUDA) return ss_cuda_bind_thread(ctx, be->gpu.index);
#endif
  (void)ctx;
  (void)be;
  return SS_OK;
}

void ss_backend_close(ss_backend *be) {
#if SS_HAVE_CUDA
  if (be->cuda) ss_cuda_state_destroy(be->cuda);
#endif
  be->cuda = NULL;
}
