/* bench_common.c — median timing and the benchmark JSON document. */
#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pthread.h>
#include <stdatomic.h>
#if SS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "build_config.h"
#include "core/log.h"

ss_status ss_bench_doc_init(ss_ctx *ctx, ss_bench_doc *doc, const char *bench, const char *device) {
  memset(doc, 0, sizeof(*doc));
  doc->root = cJSON_CreateObject();
  if (!doc->root) return ss_fail(ctx, SS_ERR_NOMEM, "bench %s: out of memory", bench);
  char date[32], host[256] = "";
  time_t now = time(NULL);
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  gethostname(host, sizeof(host) - 1);
  cJSON_AddStringToObject(doc->root, "bench", bench);
  cJSON_AddStringToObject(doc->root, "device", device);
  cJSON_AddStringToObject(doc->root, "date", date);
  cJSON_AddStringToObject(doc->root, "commit", SS_GIT_COMMIT);
  cJSON_AddStringToObject(doc->root, "version", SS_VERSION);
  cJSON_AddStringToObject(doc->root, "host", host);
  doc->cases = cJSON_AddArrayToObject(doc->root, "cases");
  doc->summary = cJSON_AddObjectToObject(doc->root, "summary");
  return SS_OK;
}

cJSON *ss_bench_case(ss_bench_doc *doc, const char *name) {
  cJSON *c = cJSON_CreateObject();
  cJSON_AddStringToObject(c, "case", name);
  cJSON_AddItemToArray(doc->cases, c);
  return c;
}

void ss_bench_summary_number(ss_bench_doc *doc, const char *key, double value) {
  cJSON_DeleteItemFromObjectCaseSensitive(doc->summary, key);
  cJSON_AddNumberToObject(doc->summary, key, value);
}

void ss_bench_doc_free(ss_bench_doc *doc) {
  cJSON_Delete(doc->root);
  memset(doc, 0, sizeof(*doc));
}

ss_status ss_bench_doc_write(ss_ctx *ctx, ss_bench_doc *doc, const char *path) {
  char *text = cJSON_Print(doc->root);
  ss_bench_doc_free(doc);
  if (!text) return ss_fail(ctx, SS_ERR_NOMEM, "%s: out of memory", path);
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid());
  FILE *f = fopen(tmp, "wb");
  int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
  if (f && fclose(f) != 0) ok = 0;
  free(text);
  if (!ok || rename(tmp, path) != 0) {
    remove(tmp);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot write the benchmark result", path);
  }
  return SS_OK;
}

void ss_bench_device_string(const ss_backend *be, char *buf, size_t len) {
  if (be && be->kind == SS_DEVICE_CUDA)
    snprintf(buf, len, "%s (cc %d.%d, %d SMs) + %d CPU threads", be->gpu.name, be->gpu.cc_major, be->gpu.cc_minor,
             be->gpu.sm_count, ss_threads_resolve(0));
  else snprintf(buf, len, "CPU, %d threads", ss_threads_resolve(0));
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double ss_bench_median_s(ss_bench_fn fn, void *arg, int warmup, int repeats, ss_status *st) {
  *st = SS_OK;
  for (int i = 0; i < warmup; i++)
    if ((*st = fn(arg)) != SS_OK) return -1;
  if (repeats < 1) repeats = 1;
  double *t = malloc(sizeof(double) * (size_t)repeats);
  if (!t) {
    *st = SS_ERR_NOMEM;
    return -1;
  }
  for (int i = 0; i < repeats; i++) {
    double t0 = ss_now();
    if ((*st = fn(arg)) != SS_OK) {
      free(t);
      return -1;
    }
    t[i] = ss_now() - t0;
  }
  qsort(t, (size_t)repeats, sizeof(double), cmp_double);
  double med = repeats % 2 ? t[repeats / 2] : 0.5 * (t[repeats / 2 - 1] + t[repeats / 2]);
  free(t);
  return med;
}

/* --- device memory sampler ----------------------------------------------------------------------- */

#define SS_BENCH_MEM_PERIOD_US 1000

typedef struct {
  pthread_t thread;
  atomic_int stop;
  int device;
  size_t baseline, peak;
} gpu_mem_impl;

#if SS_HAVE_CUDA
static size_t used_bytes(void) {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return total_b - free_b;
}

static void *sample(void *arg) {
  gpu_mem_impl *g = arg;
  cudaSetDevice(g->device);
  while (!atomic_load(&g->stop)) {
    size_t u = used_bytes();
    if (u > g->peak) g->peak = u;
    struct timespec nap = {0, SS_BENCH_MEM_PERIOD_US * 1000L};
    nanosleep(&nap, NULL);
  }
  return NULL;
}
#endif

ss_status ss_bench_gpu_mem_start(ss_ctx *ctx, const ss_backend *be, ss_bench_gpu_mem *m) {
  m->impl = NULL;
#if SS_HAVE_CUDA
  if (be->kind != SS_DEVICE_CUDA) return SS_OK;
  gpu_mem_impl *g = calloc(1, sizeof(*g));
  if (!g) return ss_fail(ctx, SS_ERR_NOMEM, "bench: memory sampler: out of memory");
  g->device = be->gpu.index;
  g->baseline = g->peak = used_bytes();
  if (pthread_create(&g->thread, NULL, sample, g) != 0) {
    free(g);
    return ss_fail(ctx, SS_ERR_INTERNAL, "bench: cannot start the memory sampler thread");
  }
  m->impl = g;
#else
  (void)ctx;
  (void)be;
#endif
  return SS_OK;
}

double ss_bench_gpu_mem_stop_mib(ss_bench_gpu_mem *m) {
  gpu_mem_impl *g = m->impl;
  if (!g) return 0;
  atomic_store(&g->stop, 1);
  pthread_join(g->thread, NULL);
  double mib = (double)(g->peak - g->baseline) / 1048576.0;
  free(g);
  m->impl = NULL;
  return mib;
}

int ss_bench_read_steal(double *out, int cap) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  char line[512];
  int n = 0;
  const double tick = (double)sysconf(_SC_CLK_TCK);
  while (n < cap && fgets(line, sizeof(line), f) && strncmp(line, "cpu", 3) == 0) {
    unsigned long long v[8];
    if (sscanf(line, "%*s %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
               &v[7]) != 8)
      break;
    out[n++] = (double)v[7] / tick;
  }
  fclose(f);
  return n;
}

int ss_bench_parse_sizes(const char *list, int64_t *sizes, int max) {
  int n = 0;
  for (const char *p = list; *p && n < max;) {
    char *end;
    long long v = strtoll(p, &end, 10);
    if (end != p && (*end == ',' || *end == '\0') && v > 0) sizes[n++] = v;
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  return n;
}
