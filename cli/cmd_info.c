/* cmd_info.c — `spikestream info`: version, build options, backends and the GPUs this machine has. */
#include <stdio.h>

#include "build_config.h"
#include "core/backend.h"
#include "cli/cli.h"

static const char usage[] =
    "usage: spikestream info [options]\n\n"
    "Print the version, the build options, the available backends and each CUDA device\n"
    "(name, memory, compute capability), or why there is none.\n\noptions:\n" SS_CLI_COMMON_HELP;

int ss_cmd_info(int argc, char **argv, ss_ctx *ctx) {
  int first, code = ss_cli_parse(argc, argv, "info", NULL, usage, ctx, NULL, NULL, &first);
  if (code >= 0) return code;
  if (first < argc) return ss_cli_usage_error("info", "unexpected argument \"%s\"", argv[first]);

  printf("spikestream %s (commit %s, %s build)\n", SS_VERSION, SS_GIT_COMMIT, SS_BUILD_TYPE);
  printf("build: OpenMP %s, CUDA %s%s%s\n", SS_BUILD_OPENMP, SS_BUILD_CUDA,
         ss_backend_cuda_built() ? ", architectures " : "", ss_backend_cuda_built() ? SS_BUILD_CUDA_ARCHS : "");
  printf("cpu backend: %d thread(s)\n", ss_threads_resolve(0));
  char why[256] = "";
  int n = ss_backend_gpu_count(why, sizeof(why));
  if (n == 0) {
    printf("cuda backend: no CUDA device (%s); the CPU backend will be used\n", why);
    return 0;
  }
  printf("cuda backend: %d device(s)\n", n);
  for (int i = 0; i < n; i++) {
    ss_gpu_info g;
    ss_status st = ss_backend_gpu_info(ctx, i, &g);
    if (st != SS_OK) return ss_cli_finish("info", ctx, st);
    printf("  gpu %d: %s, %.1f GiB (%.1f GiB free), compute capability %d.%d, %d SMs, driver %d.%d, runtime %d.%d\n", i,
           g.name, g.total_mem / 1073741824.0, g.free_mem / 1073741824.0, g.cc_major, g.cc_minor, g.sm_count,
           g.driver_version / 1000, (g.driver_version % 1000) / 10, g.runtime_version / 1000,
           (g.runtime_version % 1000) / 10);
  }
  return 0;
}
