/* bench_knn.c — KNN timings for bench/results/knn.json (merged with the peers by knn_peers.py):
 *   grid:      1,200 queries, references 2^10..2^15, d in {32, 64, 128, 256}, k = 25
 *   large:     10^5 (and 10^4) queries x 10^6 references, d = 96, k = 10
 *   per case:  device-resident (queries and outputs on the GPU, CUDA events on the backend stream):
 *              our search (auto, and each path forced) and the distance SGEMM tiles alone on the same
 *              data, launched plainly and as one CUDA graph -> ratio_to_gemm = ours / the faster of
 *              the two; host API end to end (upload, search, download; wall clock) with, for
 *              reference, upload + centring + SGEMMs; our CPU path on the grid
 *   chunks:    1,200 queries, references 2^11..2^15, d in {32, 128}, k = 25: device-resident tiled
 *              search with 1024, 4096 (the default) and 8192 references per warp of the one-tile
 *              selection-and-finish kernel (ss_knn_opts.warp_chunk; warps per query = next_pow2(n / chunk) <= 8)
 * usage: bench_knn [OUT.json] [--quick] [--no-cpu] [--no-chunks] [--no-large] [--grid-only] [--qtile-sweep]
 *                  [--sweeps-only] [--case M N D K]
 *   (--quick: small sizes, for a smoke run without a GPU; the others skip parts, for short runs
 *   (--grid-only: the grid alone, no large cases or chunks; --qtile-sweep (CUDA): the tiled path with 4096
 *   (one tile), 256 and 128 queries per distance tile, group "query_tiles"; --sweeps-only: only the sweeps asked for);
 *   --case: that one case alone, group "probe", e.g. under a profiler) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#if SS_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "stages/knn/knn.h"
#include "core/log.h"
#include "core/rng.h"

#define GRID_QUERIES 1200
#define GRID_K 25
#define LARGE_D 96
#define LARGE_K 10
#define GRID_DEVICE_REPEATS 20
#define LARGE_DEVICE_REPEATS 5
#define FUSED_MAX_REFS 65536 /* the fused path is timed on the grid only (auto takes the tiled path beyond) */
#define CHUNK_SWEEP_MIN_LOG2 11
#define QTILE_SWEEP_MIN_LOG2 12

typedef struct {
  ss_ctx *ctx;
  ss_knn_index *ix;
  ss_knn_opts o;
  const float *q;
  int64_t m;
  int64_t *idx;
  double *dist;
  ss_knn_stats stats;
} run_arg;

static ss_status run_search(void *p) {
  run_arg *a = p;
  return ss_knn_search(a->ctx, a->ix, &a->o, a->q, a->m, a->idx, a->dist, &a->stats);
}

static float *random_points(int64_t n, int64_t d, uint64_t stream) {
  float *x = malloc(sizeof(float) * (size_t)(n * d));
  if (!x) return NULL;
  ss_rng r = ss_rng_make(1, SS_RNG_GENERIC, stream);
  for (int64_t i = 0; i < n * d; i++) x[i] = (float)(200.0 * ss_rng_uniform(r.key, (uint64_t)i) - 100.0);
  return x;
}

/* Median seconds of a search (or, gemm_only, of its distance GEMMs alone) on an existing index. */
static double time_search(ss_ctx *ctx, ss_knn_index *ix, const float *q, int64_t m, int64_t k, int gemm_only,
                          int repeats, ss_knn_stats *stats) {
  run_arg a = {.ctx = ctx, .ix = ix, .q = q, .m = m};
  ss_params p;
  ss_params_defaults(&p);
  ss_knn_opts_from_params(&a.o, &p);
  a.o.k = k, a.o.gemm_only = gemm_only;
  a.idx = malloc(sizeof(int64_t) * (size_t)(m * k));
  a.dist = malloc(sizeof(double) * (size_t)(m * k));
  ss_status st = SS_ERR_NOMEM;
  double t = a.idx && a.dist ? ss_bench_median_s(run_search, &a, 1, repeats, &st) : -1;
  if (st != SS_OK) fprintf(stderr, "bench_knn: %s\n", ss_error_message(ctx));
  if (stats) *stats = a.stats;
  free(a.idx);
  free(a.dist);
  return st == SS_OK ? t : NAN;
}

static const char *path_name(int path) { return path == SS_KNN_PATH_FUSED ? "fused" : "tiled"; }

static void add_stats(cJSON *c, const ss_knn_stats *s) {
  cJSON_AddStringToObject(c, "path", path_name(s->path));
  cJSON_AddStringToObject(c, "strategy", ss_knn_strategy_name(s->strategy));
  cJSON_AddNumberToObject(c, "candidates", (double)s->candidates);
  cJSON_AddNumberToObject(c, "exact_fallbacks", (double)s->fallbacks);
  cJSON_AddNumberToObject(c, "query_tile", (double)s->query_tile);
  cJSON_AddNumberToObject(c, "ref_tile", (double)s->ref_tile);
  cJSON_AddBoolToObject(c, "graph", s->graph);
}

#if SS_HAVE_CUDA
/* Device-resident timings of one case: auto, each path forced (the fused one only where it applies and
 * n <= FUSED_MAX_REFS, the range where auto considers it), the SGEMM tiles alone, plain and as one CUDA graph.
 * Returns auto / the faster GEMM. */
static double device_timings(cJSON *c, ss_ctx *ctx, ss_knn_index *ix, const float *q, int64_t m, int64_t d, int64_t k,
                             int repeats) {
  float *dq = NULL;
  int32_t *di = NULL;
  double *dd = NULL, ratio = NAN;
  uint8_t *dc = NULL;
  if (cudaMalloc((void **)&dq, sizeof(float) * (size_t)(m * d)) != cudaSuccess ||
      cudaMalloc((void **)&di, sizeof(int32_t) * (size_t)(m * k)) != cudaSuccess ||
      cudaMalloc((void **)&dd, sizeof(double) * (size_t)(m * k)) != cudaSuccess ||
      cudaMalloc((void **)&dc, (size_t)m) != cudaSuccess ||
      cudaMemcpy(dq, q, sizeof(float) * (size_t)(m * d), cudaMemcpyHostToDevice) != cudaSuccess) {
    fprintf(stderr, "bench_knn: device buffers for %lld queries failed\n", (long long)m);
  } else {
    ss_params p;
    ss_params_defaults(&p);
    ss_knn_opts o;
    ss_knn_opts_from_params(&o, &p);
    o.k = k;
    enum { T_AUTO, T_FUSED, T_TILED, T_GEMM, T_GEMM_GRAPH, T_COUNT };
    static const char *const keys[T_COUNT] = {"device_s", "fused_device_s", "tiled_device_s", "gemm_device_s",
                                              "gemm_graph_device_s"};
    const int paths[T_COUNT] = {SS_KNN_PATH_AUTO, SS_KNN_PATH_FUSED, SS_KNN_PATH_GEMM, SS_KNN_PATH_GEMM,
                                SS_KNN_PATH_GEMM};
    const int gemm_only[T_COUNT] = {0, 0, 0, 1, SS_KNN_GEMM_ONLY_GRAPH};
    double t[T_COUNT] = {NAN, NAN, NAN, NAN, NAN};
    ss_knn_stats st = {0}, auto_st = {0};
    int fusable = ss_knn_candidates(k, ix->n) <= SS_KNN_FUSED_MAX_CANDIDATES && ix->n <= FUSED_MAX_REFS;
    for (int i = 0; i < T_COUNT; i++) {
      o.path = paths[i];
      o.gemm_only = gemm_only[i];
      if (i == T_FUSED && !(fusable && d <= SS_KNN_FUSED_MAX_DIM)) continue;
      if (ss_knn_cuda_time_device(ctx, ix, &o, dq, m, di, dd, dc, repeats, &t[i], &st) != SS_OK) {
        fprintf(stderr, "bench_knn: %s\n", ss_error_message(ctx));
        t[i] = NAN;
        continue;
      }
      if (i == T_AUTO) auto_st = st;
      cJSON_AddNumberToObject(c, keys[i], t[i]);
    }
    /* the stronger yardstick (NaN-safe: a NaN graph time loses) */
    double gemm = t[T_GEMM_GRAPH] < t[T_GEMM] ? t[T_GEMM_GRAPH] : t[T_GEMM];
    ratio = t[T_AUTO] / gemm;
    cJSON_AddNumberToObject(c, "ratio_to_gemm", ratio);
    cJSON_AddNumberToObject(c, "ratio_to_gemm_plain", t[T_AUTO] / t[T_GEMM]);
    cJSON_AddStringToObject(c, "device_path", path_name(auto_st.path));
    cJSON_AddBoolToObject(c, "device_graph", auto_st.graph);
    printf("  device-resident: ours %.6f s (%s; fused %.6f, tiled %.6f)  gemm %.6f s (graph %.6f)  ratio %.2f\n",
           t[T_AUTO], path_name(auto_st.path), t[T_FUSED], t[T_TILED], t[T_GEMM], t[T_GEMM_GRAPH], ratio);
  }
  cudaFree(dq), cudaFree(di), cudaFree(dd), cudaFree(dc);
  return ratio;
}
#endif

#if SS_HAVE_CUDA
/* A knob of the GPU search swept on grid-sized searches, device-resident: one case per (n, d) of the
 * group, one timing per value (key "<key><value>"). */
typedef struct {
  const char *group, *key, *label;
  int64_t dims[2], values[3];
  int min_log2;
  int path; /* ss_knn_path forced while sweeping */
  int knob; /* KNOB_*: the ss_knn_opts field swept */
} knob_sweep;

enum { KNOB_WARP_CHUNK = 0, KNOB_QUERY_TILE };

/* References per warp of the one-tile selection-and-finish kernel (ss_knn_opts.warp_chunk), on the tiled path. */
static const knob_sweep CHUNK_SWEEP = {"chunks",           "device_s_chunk",     "chunk",          {32, 128},
                                       {1024, 4096, 8192}, CHUNK_SWEEP_MIN_LOG2, SS_KNN_PATH_GEMM, KNOB_WARP_CHUNK};
/* Queries per distance tile on the tiled path (ss_knn_opts.query_tile), --qtile-sweep: a tile of 1,200 x n
 * floats leaves L2 for DRAM at large n; 128 or 256 queries at a time keep it there. */
static const knob_sweep QTILE_SWEEP = {"query_tiles",    "device_s_qtile",     "query tile",     {32, 128},
                                       {4096, 256, 128}, QTILE_SWEEP_MIN_LOG2, SS_KNN_PATH_GEMM, KNOB_QUERY_TILE};

static void sweep_case(ss_bench_doc *doc, ss_ctx *ctx, ss_knn_index *ix, const knob_sweep *ks, int64_t n, int64_t d,
                       const float *dq, int32_t *di, double *dd, uint8_t *dc) {
  const int64_t m = GRID_QUERIES, k = GRID_K;
  char name[128];
  snprintf(name, sizeof(name), "%s_m%lld_n%lld_d%lld_k%lld", ks->group, (long long)m, (long long)n, (long long)d,
           (long long)k);
  cJSON *c = ss_bench_case(doc, name);
  cJSON_AddStringToObject(c, "group", ks->group);
  cJSON_AddNumberToObject(c, "queries", (double)m);
  cJSON_AddNumberToObject(c, "refs", (double)n);
  cJSON_AddNumberToObject(c, "dim", (double)d);
  cJSON_AddNumberToObject(c, "k", (double)k);
  printf("%s:", name);
  for (int vi = 0; vi < 3; vi++) {
    ss_params p;
    ss_params_defaults(&p);
    ss_knn_opts o;
    ss_knn_opts_from_params(&o, &p);
    o.k = k, o.path = ks->path;
    if (ks->knob == KNOB_WARP_CHUNK) o.warp_chunk = ks->values[vi];
    else o.query_tile = ks->values[vi];
    double t = NAN;
    ss_knn_stats st = {0};
    if (ss_knn_cuda_time_device(ctx, ix, &o, dq, m, di, dd, dc, GRID_DEVICE_REPEATS, &t, &st) != SS_OK)
      fprintf(stderr, "bench_knn: %s\n", ss_error_message(ctx));
    char key[64];
    snprintf(key, sizeof(key), "%s%lld", ks->key, (long long)ks->values[vi]);
    cJSON_AddNumberToObject(c, key, t);
    printf("  %s %lld: %.6f s (tiles %lld x %lld)", ks->label, (long long)ks->values[vi], t, (long long)st.query_tile,
           (long long)st.ref_tile);
  }
  printf("\n");
  fflush(stdout);
}

static void sweep(ss_bench_doc *doc, ss_ctx *ctx, const ss_backend *gpu, const knob_sweep *ks) {
  const int64_t m = GRID_QUERIES, k = GRID_K;
  for (int di = 0; di < 2; di++)
    for (int e = ks->min_log2; e <= 15; e++) {
      int64_t n = (int64_t)1 << e, d = ks->dims[di];
      float *ref = random_points(n, d, 1), *q = random_points(m, d, 2), *dq = NULL;
      int32_t *di_ = NULL;
      double *dd = NULL;
      uint8_t *dc = NULL;
      ss_knn_index *ix = NULL;
      if (ref && q && ss_knn_index_create(ctx, gpu, ref, n, d, &ix) == SS_OK &&
          cudaMalloc((void **)&dq, sizeof(float) * (size_t)(m * d)) == cudaSuccess &&
          cudaMalloc((void **)&di_, sizeof(int32_t) * (size_t)(m * k)) == cudaSuccess &&
          cudaMalloc((void **)&dd, sizeof(double) * (size_t)(m * k)) == cudaSuccess &&
          cudaMalloc((void **)&dc, (size_t)m) == cudaSuccess &&
          cudaMemcpy(dq, q, sizeof(float) * (size_t)(m * d), cudaMemcpyHostToDevice) == cudaSuccess)
        sweep_case(doc, ctx, ix, ks, n, d, dq, di_, dd, dc);
      if (ix) ss_knn_index_free(ix);
      cudaFree(dq), cudaFree(di_), cudaFree(dd), cudaFree(dc);
      free(ref), free(q);
    }
}
#endif

/* One case: device-resident GPU timings, host API end to end, optionally the CPU path. Returns the
 * device-resident ratio ours / GEMM. */
static double bench_case(ss_bench_doc *doc, ss_ctx *ctx, const ss_backend *gpu, const ss_backend *cpu,
                         const char *group, int64_t m, int64_t n, int64_t d, int64_t k, int repeats,
                         int device_repeats) {
  float *ref = random_points(n, d, 1), *q = random_points(m, d, 2);
  if (!ref || !q) {
    free(ref), free(q);
    return NAN;
  }
  char name[128];
  snprintf(name, sizeof(name), "%s_m%lld_n%lld_d%lld_k%lld", group, (long long)m, (long long)n, (long long)d,
           (long long)k);
  cJSON *c = ss_bench_case(doc, name);
  cJSON_AddStringToObject(c, "group", group);
  cJSON_AddNumberToObject(c, "queries", (double)m);
  cJSON_AddNumberToObject(c, "refs", (double)n);
  cJSON_AddNumberToObject(c, "dim", (double)d);
  cJSON_AddNumberToObject(c, "k", (double)k);
  double ratio = NAN;
  ss_knn_index *ix = NULL;
  if (gpu && ss_knn_index_create(ctx, gpu, ref, n, d, &ix) == SS_OK) {
    ss_knn_stats s;
    printf("%s\n", name);
#if SS_HAVE_CUDA
    ratio = device_timings(c, ctx, ix, q, m, d, k, device_repeats);
#else
    (void)device_repeats; /* device-resident timings need the CUDA backend */
#endif
    double ours = time_search(ctx, ix, q, m, k, 0, repeats, &s);
    double gemm = time_search(ctx, ix, q, m, k, 1, repeats, NULL);
    cJSON_AddNumberToObject(c, "gpu_s", ours); /* host API end to end; what the torch speedup uses */
    cJSON_AddNumberToObject(c, "host_gemm_s", gemm);
    cJSON_AddNumberToObject(c, "host_ratio", ours / gemm);
    add_stats(c, &s);
    ss_knn_index_free(ix);
    printf("  host API: gpu %.5f s  upload+centring+gemm %.5f s  ratio %.2f  (%s, %lld fallbacks)\n", ours, gemm,
           ours / gemm, ss_knn_strategy_name(s.strategy), (long long)s.fallbacks);
  }
  if (cpu && ss_knn_index_create(ctx, cpu, ref, n, d, &ix) == SS_OK) {
    double t = time_search(ctx, ix, q, m, k, 0, 1, NULL);
    cJSON_AddNumberToObject(c, "cpu_s", t);
    ss_knn_index_free(ix);
    printf("  cpu %.4f s\n", t);
  }
  fflush(stdout);
  free(ref), free(q);
  return ratio;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const char *out = "bench/results/knn_ours.json";
  int quick = 0, with_cpu = 1, with_chunks = 1, with_large = 1;
  int with_qtile_sweep = 0, sweeps_only = 0; /* --sweeps-only: the sweeps asked for, nothing else */
  int64_t probe[4] = {0, 0, 0, 0};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--case") && i + 4 < argc)
      for (int j = 0; j < 4; j++) probe[j] = strtoll(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--no-cpu")) with_cpu = 0;
    else if (!strcmp(argv[i], "--no-chunks")) with_chunks = 0;
    else if (!strcmp(argv[i], "--no-large")) with_large = 0;
    else if (!strcmp(argv[i], "--grid-only")) with_large = with_chunks = 0;
    else if (!strcmp(argv[i], "--qtile-sweep")) with_qtile_sweep = 1;
    else if (!strcmp(argv[i], "--sweeps-only")) sweeps_only = 1;
    else if (argv[i][0] == '-') {
      fprintf(stderr, "bench_knn: unknown option %s\n", argv[i]);
      return 2;
    } else out = argv[i];
  }
  if (with_qtile_sweep && !SS_HAVE_CUDA) {
    fprintf(stderr, "bench_knn: --qtile-sweep needs the CUDA backend\n");
    return 2;
  }
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ctx.quiet = 1;
  ss_backend cpu, gpu;
  int have_gpu = ss_backend_gpu_count(NULL, 0) > 0;
  if (ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 0, &cpu) != SS_OK ||
      (have_gpu && ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 0, &gpu) != SS_OK)) {
    fprintf(stderr, "bench_knn: %s\n", ss_error_message(&ctx));
    return 3;
  }
  char device[512];
  ss_bench_device_string(have_gpu ? &gpu : &cpu, device, sizeof(device));
  ss_bench_doc doc;
  if (ss_bench_doc_init(&ctx, &doc, "knn", device) != SS_OK) return 3;
  const ss_backend *g = have_gpu ? &gpu : NULL;
  if (probe[0] > 0) {
    bench_case(&doc, &ctx, g, NULL, "probe", probe[0], probe[1], probe[2], probe[3], 5, GRID_DEVICE_REPEATS);
    quick = -1; /* nothing else */
  }
  double max_ratio = 0, max_large = 0; /* device-resident ours / GEMM over every case with k <= 32 */
  double grid_ratios[64];
  int n_grid = 0;
  const int64_t dims[] = {32, 64, 128, 256};
  int top = quick ? 11 : 15;
  for (int di = 0; di < 4 && quick >= 0 && !sweeps_only; di++)
    for (int e = 10; e <= top; e++) {
      double r = bench_case(&doc, &ctx, g, with_cpu ? &cpu : NULL, "grid", quick ? 200 : GRID_QUERIES, (int64_t)1 << e,
                            dims[di], GRID_K, 5, GRID_DEVICE_REPEATS);
      if (GRID_K <= 32 && r > max_ratio) max_ratio = r;
      if (r == r) grid_ratios[n_grid++] = r;
    }
  if (have_gpu && quick >= 0) {
    const int64_t large_m[] = {100000, 10000};
    for (int i = 0; i < 2 && with_large && !sweeps_only; i++) {
      double r = bench_case(&doc, &ctx, g, NULL, "large", quick ? large_m[i] / 100 : large_m[i],
                            quick ? 10000 : 1000000, LARGE_D, LARGE_K, 3, LARGE_DEVICE_REPEATS);
      if (LARGE_K <= 32 && r > max_ratio) max_ratio = r;
      if (r > max_large) max_large = r;
    }
#if SS_HAVE_CUDA
    if (with_chunks && !quick && !sweeps_only) sweep(&doc, &ctx, g, &CHUNK_SWEEP);
    if (with_qtile_sweep && !quick) sweep(&doc, &ctx, g, &QTILE_SWEEP);
#endif
    ss_bench_summary_number(&doc, "max_ratio_to_gemm_k32", max_ratio);
    ss_bench_summary_number(&doc, "max_ratio_to_gemm_large", max_large);
    if (n_grid) {
      qsort(grid_ratios, (size_t)n_grid, sizeof(double), cmp_double);
      ss_bench_summary_number(&doc, "median_ratio_to_gemm_grid", grid_ratios[n_grid / 2]);
      ss_bench_summary_number(&doc, "max_ratio_to_gemm_grid", grid_ratios[n_grid - 1]);
    }
  }
  if (ss_bench_doc_write(&ctx, &doc, out) != SS_OK) {
    fprintf(stderr, "bench_knn: %s\n", ss_error_message(&ctx));
    return 3;
  }
  printf("wrote %s\n", out);
  if (have_gpu) ss_backend_close(&gpu);
  ss_backend_close(&cpu);
  return 0;
}
