/* gpu_test_knn.c — GPU group: the CUDA KNN gives the CPU's neighbours exactly (indices and
 * distances) for every tile shape, k > 64 and ties, on every path (the fused path where K' <= 64 and
 * d <= 256; on the tiled path the per-warp finish and, for one reference tile, the selection-and-finish
 * kernel with 1-8 warps per query where K' <= 64, the block finish beyond); the k-selection names run the
 * warp queue; incremental mode on the GPU; the CLI gives identical files on both devices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stages/knn/knn.h"
#if SS_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "core/rng.h"
#include "ss_test.h"

/* grid 0: uniform in [-100, 100]; 1: coordinates in {0, 1, 2} (exact ties); 2: points along a line
 * in index order plus small noise, so that a query's neighbours are consecutive references (all in
 * one chunk of one warp). */
static float *random_points(int64_t n, int64_t d, uint64_t stream, int grid) {
  float *x = malloc(sizeof(float) * (size_t)(n * d));
  ss_rng r = ss_rng_make((uint64_t)time(NULL), SS_RNG_TEST, stream);
  for (int64_t i = 0; i < n * d; i++) {
    if (grid == 1) x[i] = (float)ss_rng_next_below(&r, 3);
    else if (grid == 2)
      x[i] = (float)((i % d ? 0.0 : 200.0 * (double)(i / d) / (double)n - 100.0) + ss_rng_next_uniform(&r));
    else x[i] = (float)(200.0 * ss_rng_next_uniform(&r) - 100.0);
  }
  return x;
}

static ss_backend open_be(ss_device_kind kind) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, kind, 0, 0, &be), SS_OK);
  return be;
}

static const char *path_name(int path) { return path == SS_KNN_PATH_FUSED ? "fused" : "tiled"; }

typedef struct {
  int64_t n, m, d, k, query_tile, ref_tile;
  int grid;
  int64_t warp_chunk; /* 0: the built-in chunk of the warp queue */
} gpu_case;

static void compare_case(const gpu_case *c, uint64_t stream) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend cpu = open_be(SS_DEVICE_CPU), gpu = open_be(SS_DEVICE_CUDA);
  float *ref = random_points(c->n, c->d, stream, c->grid), *q = random_points(c->m, c->d, stream + 1, c->grid);
  int64_t mk = c->m * c->k, ties = 0;
  int64_t *ci = malloc(sizeof(int64_t) * mk), *gi = malloc(sizeof(int64_t) * mk);
  double *cd = malloc(sizeof(double) * mk), *gd = malloc(sizeof(double) * mk);
  ss_knn_index *cx, *gx;
  assert_int_equal(ss_knn_index_create(&ctx, &cpu, ref, c->n, c->d, &cx), SS_OK);
  assert_int_equal(ss_knn_index_create(&ctx, &gpu, ref, c->n, c->d, &gx), SS_OK);
  ss_knn_opts o = {.k = c->k, .query_tile = c->query_tile, .ref_tile = c->ref_tile, .warp_chunk = c->warp_chunk};
  assert_int_equal(ss_knn_search(&ctx, cx, &o, q, c->m, ci, cd, NULL), SS_OK);
  for (int64_t i = 0; i < c->m; i++)
    for (int64_t r = 0; r + 1 < c->k; r++) ties += cd[i * c->k + r] == cd[i * c->k + r + 1];
  /* the tiled path, the fused path (when K' and d allow it), and auto */
  const int strategies[] = {SS_KNN_WARP, SS_KNN_AUTO, SS_KNN_AUTO};
  const int paths[] = {SS_KNN_PATH_GEMM, SS_KNN_PATH_FUSED, SS_KNN_PATH_AUTO};
  for (int s = 0; s < 3; s++) {
    o.strategy = strategies[s];
    o.path = paths[s];
    ss_knn_stats st;
    if (ss_knn_search(&ctx, gx, &o, q, c->m, gi, gd, &st) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
    int64_t diff = 0;
    for (int64_t i = 0; i < mk; i++) diff += ci[i] != gi[i] || cd[i] != gd[i];
    printf("n %lld m %lld d %lld k %lld tiles %lldx%lld grid %d, %s %s: %lld differences, %lld ties, %lld "
           "fallbacks\n",
           (long long)c->n, (long long)c->m, (long long)c->d, (long long)c->k, (long long)st.query_tile,
           (long long)st.ref_tile, c->grid, path_name(st.path), ss_knn_strategy_name(st.strategy), (long long)diff,
           (long long)ties, (long long)st.fallbacks);
    int few = ss_knn_candidates(c->k, c->n) <= SS_KNN_FUSED_MAX_CANDIDATES;
    int applies = paths[s] == SS_KNN_PATH_FUSED ? few && c->d <= SS_KNN_FUSED_MAX_DIM : 1;
    if (paths[s] != SS_KNN_PATH_AUTO) assert_int_equal(st.path, applies ? paths[s] : SS_KNN_PATH_GEMM);
    assert_int_equal(st.strategy, SS_KNN_WARP);
    assert_int_equal(diff, 0);
  }
  ss_knn_index_free(cx);
  ss_knn_index_free(gx);
  free(ref), free(q), free(ci), free(gi), free(cd), free(gd);
  ss_backend_close(&cpu);
  ss_backend_close(&gpu);
}

static void cpu_gpu_identical(void **state) {
  (void)state;
  const gpu_case cases[] = {
      {5000, 700, 3, 1, 4096, 65536, 0, 0},
      {10007, 300, 37, 25, 4096, 65536, 0, 0},
      {3001, 200, 128, 100, 4096, 65536, 0, 0},  /* k > 64 */
      {70001, 150, 16, 10, 4096, 65536, 0, 0},   /* two reference tiles, the last one short */
      {20011, 1001, 24, 70, 333, 4999, 0, 0},    /* small odd tiles: many of both kinds */
      {9000, 400, 3, 15, 4096, 65536, 1, 0},     /* coordinates in {0,1,2}: exact ties everywhere */
      {600, 50, 8, 600, 4096, 65536, 0, 0},      /* k = n */
      {1024, 1200, 32, 25, 4096, 65536, 0, 0},   /* the published grid's smallest case */
      {33000, 1300, 256, 25, 4096, 65536, 0, 0}, /* fused: many splits, d a multiple of the dimension tile */
      {4999, 130, 45, 49, 4096, 65536, 0, 0},    /* fused: the largest K' (64), queries and d off the tiles */
      {40, 70, 3, 40, 4096, 65536, 0, 0},        /* fused: k = n smaller than one reference tile */
      {5000, 20, 5, 1800, 4096, 65536, 0, 0},    /* K' = 2033: the largest warp queue (P = 4096) */
      {30011, 500, 7, 32, 4096, 65536, 2, 0},    /* neighbours consecutive in index order, k = 32, d odd */
      {9001, 700, 24, 20, 256, 65536, 0, 0},     /* the filter path in three query batches (256, 256, 188) */
      {100003, 64, 9, 20, 4096, 16384, 0, 0},    /* seven reference tiles: shared thresholds across tiles */
      /* the per-warp finish (K' <= 64), the seeded warp queue (one reference tile, K' <= 64, n > 4096) and the
       * one-tile selection-and-finish kernel (K' <= 64, n <= 4096; warps per query W = next_pow2(n / chunk) <= 8,
       * chunk = warp_chunk or 4096): */
      {1025, 333, 33, 1, 4096, 65536, 0, 0},      /* k = 1, n and m off every tile, d odd */
      {2500, 257, 19, 50, 4096, 65536, 0, 0},     /* K' = 64: the largest per-warp finish and seed */
      {2500, 257, 19, 51, 4096, 65536, 0, 0},     /* K' = 65: the block finish, no seed */
      {20000, 301, 40, 25, 4096, 65536, 0, 0},    /* four chunks per query: the finish merges four lists */
      {6000, 203, 4, 32, 4096, 65536, 1, 0},      /* {0,1,2}: seed ties, every query scanned by its block */
      {9999, 1200, 32, 25, 4096, 65536, 0, 1024}, /* 1024-reference chunks: 9 lists per query, seeded */
      {4096, 300, 24, 25, 4096, 65536, 0, 0},     /* W = 1: four passes of 1024 */
      {4096, 301, 24, 25, 4096, 65536, 0, 2048},  /* W = 2: two passes each, one merge round */
      {3333, 200, 40, 25, 4096, 65536, 0, 1024},  /* W = 4 parts of 834: one partial pass each */
      {1500, 333, 20, 25, 4096, 65536, 0, 1024},  /* W = 2 (4 queries per block), one merge round */
      {4000, 200, 12, 50, 4096, 65536, 0, 1024},  /* W = 4, K' = 64, a partial last block */
      {3000, 77, 9, 1, 4096, 65536, 0, 256},      /* k = 1, W = 8 parts of 375 */
      {4000, 1000, 16, 20, 300, 65536, 0, 512},   /* four query tiles (both distance buffers), W = 8 */
      /* the fused kernel (auto on <= 65,536 references, K' <= 64, d <= 256; forced above): */
      {1024, 1200, 256, 25, 4096, 65536, 0, 0}, /* the grid's 2^10, d 256: one tile per split */
      {20011, 77, 61, 25, 4096, 65536, 0, 0},   /* 3 query tiles, 53 splits of 3 tiles, n, m, d off every tile */
      {3001, 45, 33, 32, 4096, 65536, 0, 0},    /* k = 32, d odd, a short last tile */
      {700, 90, 5, 1, 4096, 65536, 0, 0},       /* k = 1: six splits of one tile */
      {4000, 300, 3, 25, 4096, 65536, 1, 0},    /* {0,1,2}: seeds and thresholds at ties, block scans */
      {3000, 100, 300, 10, 4096, 65536, 0, 0},  /* d > 256: fused forced falls back to the tiled path */
      {60, 33, 7, 52, 4096, 65536, 0, 0},       /* K' = n = 60 < one tile: no seed, trivially certified */
      /* grid-like shapes with d <= 64: */
      {2048, 1200, 64, 25, 4096, 65536, 0, 0}, /* the grid's 2^11, d 64: D = 64, float4 rows */
      {1000, 13, 41, 50, 4096, 65536, 0, 0},   /* K' = 64, d odd above 32, n off the 256-reference tile */
      {300, 9, 33, 30, 4096, 65536, 1, 0},     /* {0,1,2}: seed ties, block scans of a partial block */
      {4096, 2100, 8, 10, 4096, 65536, 0, 0},  /* fused: the filter path in one batch of 17 query tiles */
      /* the TF32 filter path: small n, the three-kernel seed, ties */
      {2048, 300, 64, 25, 4096, 65536, 0, 0},   /* n d beyond k_fused_small: 512 samples of 2,048 */
      {20000, 150, 256, 25, 4096, 65536, 0, 0}, /* 1,250 samples at d 256: the seed in three kernels */
      {1500, 200, 100, 30, 4096, 65536, 1, 0},  /* {0,1,2}: ties at every threshold, lists over capacity */
      /* the staged candidate rows of balanced k_fused_small blocks (32 < d <= 64, d % 4 = 0): */
      {1000, 1200, 44, 25, 4096, 65536, 0, 0}, /* rows of 11 float4s, n off the tile, two passes where P > 32 */
      {1000, 1200, 36, 30, 4096, 65536, 1, 0}, /* {0,1,2}: ties, overflowing lists skip the stage for the scan */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) compare_case(&cases[i], 100 + 2 * i);
}

/* kmin and bitonic name the tiled path's warp queue: with path auto they force the tiled path, report the warp
 * queue and give the CPU's answer (one reference tile: n > 4096 selects with k_select_warp, n <= 4096 with the
 * selection-and-finish kernel). */
static void strategy_names_run_warp(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend cpu = open_be(SS_DEVICE_CPU), gpu = open_be(SS_DEVICE_CUDA);
  const int64_t ns[] = {5000, 3000}, m = 300, d = 16, k = 25;
  int64_t *ci = malloc(sizeof(int64_t) * m * k), *gi = malloc(sizeof(int64_t) * m * k);
  double *cd = malloc(sizeof(double) * m * k), *gd = malloc(sizeof(double) * m * k);
  for (int c = 0; c < 2; c++) {
    float *ref = random_points(ns[c], d, 71 + 2 * (uint64_t)c, 0), *q = random_points(m, d, 72 + 2 * (uint64_t)c, 0);
    ss_knn_index *cx, *gx;
    assert_int_equal(ss_knn_index_create(&ctx, &cpu, ref, ns[c], d, &cx), SS_OK);
    assert_int_equal(ss_knn_index_create(&ctx, &gpu, ref, ns[c], d, &gx), SS_OK);
    ss_knn_opts o = {.k = k, .query_tile = 4096, .ref_tile = 65536};
    assert_int_equal(ss_knn_search(&ctx, cx, &o, q, m, ci, cd, NULL), SS_OK);
    const int names[] = {SS_KNN_KMIN, SS_KNN_BITONIC};
    for (int s = 0; s < 2; s++) {
      o.strategy = names[s];
      ss_knn_stats st;
      if (ss_knn_search(&ctx, gx, &o, q, m, gi, gd, &st) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
      int64_t diff = 0;
      for (int64_t i = 0; i < m * k; i++) diff += ci[i] != gi[i] || cd[i] != gd[i];
      printf("n %lld, --strategy %s: %s path, %s, %lld differences\n", (long long)ns[c], ss_knn_strategy_name(names[s]),
             path_name(st.path), ss_knn_strategy_name(st.strategy), (long long)diff);
      assert_int_equal(st.path, SS_KNN_PATH_GEMM);
      assert_int_equal(st.strategy, SS_KNN_WARP);
      assert_int_equal(diff, 0);
    }
    ss_knn_index_free(cx);
    ss_knn_index_free(gx);
    free(ref), free(q);
  }
  free(ci), free(gi), free(cd), free(gd);
  ss_backend_close(&cpu);
  ss_backend_close(&gpu);
}

/* The device-resident entry: queries and outputs on the device, same answer as the CPU. */
static void device_entry_identical(void **state) {
  (void)state;
#if SS_HAVE_CUDA
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend cpu = open_be(SS_DEVICE_CPU), gpu = open_be(SS_DEVICE_CUDA);
  const int64_t n = 8191, m = 777, d = 20, k = 12;
  float *ref = random_points(n, d, 51, 0), *q = random_points(m, d, 52, 0);
  int64_t *ci = malloc(sizeof(int64_t) * m * k);
  int32_t *gi = malloc(sizeof(int32_t) * m * k);
  double *cd = malloc(sizeof(double) * m * k), *gd = malloc(sizeof(double) * m * k);
  uint8_t *cert = malloc((size_t)m);
  ss_knn_index *cx, *gx;
  assert_int_equal(ss_knn_index_create(&ctx, &cpu, ref, n, d, &cx), SS_OK);
  assert_int_equal(ss_knn_index_create(&ctx, &gpu, ref, n, d, &gx), SS_OK);
  ss_knn_opts o = {.k = k, .query_tile = 4096, .ref_tile = 65536};
  assert_int_equal(ss_knn_search(&ctx, cx, &o, q, m, ci, cd, NULL), SS_OK);
  float *dq;
  int32_t *di;
  double *dd;
  uint8_t *dc;
  assert_int_equal(cudaMalloc((void **)&dq, sizeof(float) * m * d), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&di, sizeof(int32_t) * m * k), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dd, sizeof(double) * m * k), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dc, (size_t)m), cudaSuccess);
  assert_int_equal(cudaMemcpy(dq, q, sizeof(float) * m * d, cudaMemcpyHostToDevice), cudaSuccess);
  const int paths[] = {SS_KNN_PATH_FUSED, SS_KNN_PATH_GEMM};
  for (int p = 0; p < 2; p++) {
    o.path = paths[p];
    ss_knn_stats st;
    assert_int_equal(cudaMemset(di, 0xff, sizeof(int32_t) * m * k), cudaSuccess);
    if (ss_knn_cuda_search_device(&ctx, gx, &o, dq, m, di, dd, dc, &st) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
    assert_int_equal(st.path, paths[p]);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(gi, di, sizeof(int32_t) * m * k, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(gd, dd, sizeof(double) * m * k, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(cert, dc, (size_t)m, cudaMemcpyDeviceToHost), cudaSuccess);
    int64_t diff = 0, certified = 0;
    for (int64_t i = 0; i < m * k; i++) diff += ci[i] != gi[i] || cd[i] != gd[i];
    for (int64_t i = 0; i < m; i++) certified += cert[i];
    printf("device entry, %s path: %lld differences, %lld of %lld certified\n", path_name(paths[p]), (long long)diff,
           (long long)certified, (long long)m);
    assert_int_equal(diff, 0);
  }
  cudaFree(dq), cudaFree(di), cudaFree(dd), cudaFree(dc);
  ss_knn_index_free(cx);
  ss_knn_index_free(gx);
  free(ref), free(q), free(ci), free(gi), free(cd), free(gd), free(cert);
  ss_backend_close(&cpu);
  ss_backend_close(&gpu);
#endif
}

/* Repeated searches with the same shape: the first runs plain launches, the second captures a CUDA
 * graph, later ones replay it — with new query values each time (host API: same device buffers),
 * then with another k (a new graph), then through the device entry with two query buffers in turn
 * (each change of pointer changes the graph key). Every answer is the CPU's. */
static void check_gpu_answer(const ss_knn_index *cx, const int64_t *gi, const double *gd, const float *q, int64_t m,
                             int64_t k, const char *what, int call) {
  int64_t *ci = malloc(sizeof(int64_t) * m * k);
  double *cd = malloc(sizeof(double) * m * k);
  int64_t diff = 0;
  for (int64_t i = 0; i < m; i++) ss_knn_exact_scan(cx->ref, cx->n, cx->d, q + i * cx->d, k, ci + i * k, cd + i * k);
  for (int64_t i = 0; i < m * k; i++) diff += ci[i] != gi[i] || cd[i] != gd[i];
  printf("%s, call %d: %lld differences\n", what, call, (long long)diff);
  assert_int_equal(diff, 0);
  free(ci), free(cd);
}

static void repeated_searches_identical(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend cpu = open_be(SS_DEVICE_CPU), gpu = open_be(SS_DEVICE_CUDA);
  const int64_t n = 5003, m = 300, d = 13, kmax = 70;
  float *ref = random_points(n, d, 61, 0);
  int64_t *gi = malloc(sizeof(int64_t) * m * kmax);
  double *gd = malloc(sizeof(double) * m * kmax);
  ss_knn_index *cx, *gx;
  assert_int_equal(ss_knn_index_create(&ctx, &cpu, ref, n, d, &cx), SS_OK);
  assert_int_equal(ss_knn_index_create(&ctx, &gpu, ref, n, d, &gx), SS_OK);
  const int64_t ks[] = {32, kmax, 32};
  const int strategies[] = {SS_KNN_WARP, SS_KNN_AUTO, SS_KNN_AUTO};
  const int paths[] = {SS_KNN_PATH_AUTO, SS_KNN_PATH_AUTO, SS_KNN_PATH_FUSED}; /* tiled, tiled (K' > 64), fused */
  static const char *const what[] = {"host API, k 32", "host API, k 70", "host API, k 32, fused path"};
  for (int v = 0; v < 3; v++) {
    ss_knn_opts o = {.k = ks[v], .strategy = strategies[v], .path = paths[v], .query_tile = 4096, .ref_tile = 65536};
    for (int call = 0; call < 4; call++) {
      float *q = random_points(m, d, 62 + 4 * (uint64_t)v + (uint64_t)call, 0);
      ss_knn_stats st;
      if (ss_knn_search(&ctx, gx, &o, q, m, gi, gd, &st) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
      check_gpu_answer(cx, gi, gd, q, m, o.k, what[v], call);
      printf("  graph %d\n", st.graph);
      assert_int_equal(st.graph, call > 0); /* plain, then captured, then replayed */
      free(q);
    }
  }
#if SS_HAVE_CUDA
  const int64_t k = 25;
  float *dq[2];
  int32_t *di, *hi = malloc(sizeof(int32_t) * m * k);
  double *dd;
  uint8_t *dc;
  assert_int_equal(cudaMalloc((void **)&dq[0], sizeof(float) * m * d), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dq[1], sizeof(float) * m * d), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&di, sizeof(int32_t) * m * k), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dd, sizeof(double) * m * k), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&dc, (size_t)m), cudaSuccess);
  ss_knn_opts o = {.k = k, .query_tile = 4096, .ref_tile = 65536};
  for (int call = 0; call < 6; call++) {
    int b = call / 3; /* three calls on each buffer: plain, capture, replay */
    float *q = random_points(m, d, 80 + (uint64_t)call, 0);
    assert_int_equal(cudaMemcpy(dq[b], q, sizeof(float) * m * d, cudaMemcpyHostToDevice), cudaSuccess);
    ss_knn_stats st;
    if (ss_knn_cuda_search_device(&ctx, gx, &o, dq[b], m, di, dd, dc, &st) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    assert_int_equal(cudaMemcpy(hi, di, sizeof(int32_t) * m * k, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(cudaMemcpy(gd, dd, sizeof(double) * m * k, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int64_t i = 0; i < m * k; i++) gi[i] = hi[i];
    check_gpu_answer(cx, gi, gd, q, m, k, "device entry", call);
    printf("  graph %d\n", st.graph);
    /* call 0 calibrates the auto path, which captures the chosen path's graph for this very key */
    if (call > 0) assert_int_equal(st.graph, call % 3 != 0);
    free(q);
  }
  cudaFree(dq[0]), cudaFree(dq[1]), cudaFree(di), cudaFree(dd), cudaFree(dc);
  free(hi);
#endif
  ss_knn_index_free(cx);
  ss_knn_index_free(gx);
  free(ref), free(gi), free(gd);
  ss_backend_close(&cpu);
  ss_backend_close(&gpu);
}

static void incremental_identical(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend cpu = open_be(SS_DEVICE_CPU), gpu = open_be(SS_DEVICE_CUDA);
  const int64_t n = 2000, m = 2500, d = 6, k = 9;
  float *ref = random_points(n, d, 31, 0), *q = random_points(m, d, 32, 0);
  int32_t *lab = malloc(sizeof(int32_t) * n), *a = malloc(sizeof(int32_t) * m), *b = malloc(sizeof(int32_t) * m);
  int64_t *ai = malloc(sizeof(int64_t) * m * k), *bi = malloc(sizeof(int64_t) * m * k);
  for (int64_t i = 0; i < n; i++) lab[i] = (int32_t)((i * 7) % 4);
  ss_knn_index *cx, *gx;
  assert_int_equal(ss_knn_index_create(&ctx, &cpu, ref, n, d, &cx), SS_OK);
  assert_int_equal(ss_knn_index_create(&ctx, &gpu, ref, n, d, &gx), SS_OK);
  ss_knn_opts o = {.k = k, .query_tile = 4096, .ref_tile = 65536};
  assert_int_equal(ss_knn_classify(&ctx, cx, lab, &o, q, m, 1, a, ai, NULL, NULL), SS_OK);
  assert_int_equal(ss_knn_classify(&ctx, gx, lab, &o, q, m, 1, b, bi, NULL, NULL), SS_OK);
  for (int64_t i = 0; i < m; i++) assert_int_equal(a[i], b[i]);
  for (int64_t i = 0; i < m * k; i++) assert_int_equal(ai[i], bi[i]);
  ss_knn_index_free(cx);
  ss_knn_index_free(gx);
  free(ref), free(q), free(lab), free(a), free(b), free(ai), free(bi);
  ss_backend_close(&cpu);
  ss_backend_close(&gpu);
}

static void k_beyond_gpu_limit(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend gpu = open_be(SS_DEVICE_CUDA);
  const int64_t n = 3000, d = 2, k = 2000;
  float *ref = random_points(n, d, 41, 0);
  int64_t *idx = malloc(sizeof(int64_t) * k);
  ss_knn_index *gx;
  assert_int_equal(ss_knn_index_create(&ctx, &gpu, ref, n, d, &gx), SS_OK);
  ss_knn_opts o = {.k = k, .query_tile = 4096, .ref_tile = 65536};
  assert_int_equal(ss_knn_search(&ctx, gx, &o, ref, 1, idx, NULL, NULL), SS_ERR_UNSUPPORTED);
  assert_string_equal(ss_error_message(&ctx), "knn: k = 2000 needs 2258 candidates per query, more than the GPU "
                                              "limit of 2048 (use --device cpu)");
  ss_knn_index_free(gx);
  free(ref), free(idx);
  ss_backend_close(&gpu);
}

/* Acceptance 3: --generate 10000 1000 5 3, then knn on both devices: identical outputs. */
static void cli_both_devices(void **state) {
  (void)state;
  char gen[512], oc[512], og[512], args[2048], *so, *se;
  ss_test_path(gen, sizeof(gen), "gen.csv");
  ss_test_path(oc, sizeof(oc), "cpu.csv");
  ss_test_path(og, sizeof(og), "gpu.csv");
  snprintf(args, sizeof(args), "knn --generate 10000 1000 5 3 -o '%s'", gen);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
  free(so), free(se);
  const char *modes[] = {"", "--incremental"};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof(args), "knn '%s' %s --device cpu -o '%s'", gen, modes[i], oc);
    assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
    printf("%s", se);
    free(so), free(se);
    snprintf(args, sizeof(args), "knn '%s' %s --device cuda -o '%s'", gen, modes[i], og);
    assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
    printf("%s", se);
    free(so), free(se);
    char *a = ss_test_slurp(oc), *b = ss_test_slurp(og);
    assert_string_equal(a, b);
    free(a), free(b);
  }
}

int main(void) {
  ss_test_require_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_gpu_identical),      cmocka_unit_test(strategy_names_run_warp),
      cmocka_unit_test(device_entry_identical), cmocka_unit_test(repeated_searches_identical),
      cmocka_unit_test(incremental_identical),  cmocka_unit_test(k_beyond_gpu_limit),
      cmocka_unit_test(cli_both_devices),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
