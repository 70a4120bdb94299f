/* bench_common.h — what every benchmark program shares: a median-of-repeats timer and the JSON
 * result document (bench/README.md):
 *   {"bench", "device", "date", "commit", "host", "cases": [...], "summary": {...}}
 * Benchmarks measure; tests check. A benchmark never asserts a speed. */
#ifndef SS_BENCH_COMMON_H
#define SS_BENCH_COMMON_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "core/backend.h"
#include "core/status.h"

typedef struct {
  cJSON *root;
  cJSON *cases;
  cJSON *summary;
} ss_bench_doc;

/* `device` describes where it ran, e.g. "NVIDIA H100 80GB HBM3 + 16 CPU threads". */
ss_status ss_bench_doc_init(ss_ctx *ctx, ss_bench_doc *doc, const char *bench, const char *device);
/* A new case object appended to "cases"; fill it with cJSON_Add*ToObject. */
cJSON *ss_bench_case(ss_bench_doc *doc, const char *name);
void ss_bench_summary_number(ss_bench_doc *doc, const char *key, double value);
/* Write atomically to `path` and free the document. */
ss_status ss_bench_doc_write(ss_ctx *ctx, ss_bench_doc *doc, const char *path);
void ss_bench_doc_free(ss_bench_doc *doc);

/* A device description for ss_bench_doc_init: the GPU name when `be` is CUDA, plus CPU threads. */
void ss_bench_device_string(const ss_backend *be, char *buf, size_t len);

/* Call fn(arg) `warmup` times, then `repeats` times, and return the median wall time in seconds.
 * fn must finish its device work before returning (synchronise). A failing call stops the run:
 * its status lands in *st. */
typedef ss_status (*ss_bench_fn)(void *arg);
double ss_bench_median_s(ss_bench_fn fn, void *arg, int warmup, int repeats, ss_status *st);

/* Steal time (the hypervisor running something else on a virtual CPU: the guest's threads stop without
 * a context switch), from /proc/stat, in seconds: out[0] all CPUs, out[1 + i] CPU i; at most `cap`
 * entries. Returns the count read (0 when /proc/stat is unreadable). */
int ss_bench_read_steal(double *out, int cap);

/* A comma-separated list of positive sizes ("10000,100000") into sizes[0 .. max); returns how many.
 * Entries that are not positive integers are skipped. */
int ss_bench_parse_sizes(const char *list, int64_t *sizes, int max);

/* Peak device memory of a region: a thread samples cudaMemGetInfo every millisecond between start
 * and stop (device-wide, so run nothing else on the GPU meanwhile). Without CUDA or a device,
 * stop returns 0. */
typedef struct {
  void *impl;
} ss_bench_gpu_mem;
ss_status ss_bench_gpu_mem_start(ss_ctx *ctx, const ss_backend *be, ss_bench_gpu_mem *m);
/* Peak MiB in use above what was in use at start. */
double ss_bench_gpu_mem_stop_mib(ss_bench_gpu_mem *m);

#endif
