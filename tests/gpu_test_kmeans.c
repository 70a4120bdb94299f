/* gpu_test_kmeans.c — GPU group: the CUDA k-means backend against the CPU reference on fresh random
 * data — the same k-means++ picks, identical labels, centroids equal to 1e-5 (relative to the
 * largest centroid coordinate; the contract says bit-identical), the same iteration count — for
 * sizes that are and are not multiples of the kernels' tiles; reseeding and model assignment. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages/kmeans/kmeans.h"
#include "core/rng.h"
#include "ss_test.h"

#define CENTROID_RTOL 1e-5
#define INERTIA_RTOL 1e-9

typedef ss_test_backends backends;

/* Blobs: `centres` centres uniform in [-10, 10]^d plus unit normal noise, offset by 50 so that the
 * data are not centred (the shift matters). */
static float *blobs(int64_t n, int64_t d, int64_t centres, uint64_t seed) {
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, 1);
  float *c = malloc(sizeof(float) * (size_t)(centres * d)), *x = malloc(sizeof(float) * (size_t)(n * d));
  for (int64_t e = 0; e < centres * d; e++) c[e] = (float)(20.0 * ss_rng_next_uniform(&r) + 40.0);
  for (int64_t i = 0; i < n; i++) {
    int64_t b = (int64_t)ss_rng_next_below(&r, (uint64_t)centres);
    for (int64_t j = 0; j < d; j++) x[i * d + j] = c[b * d + j] + (float)ss_rng_next_normal(&r);
  }
  free(c);
  return x;
}

static void expect_same_result(const ss_kmeans_result *g, const ss_kmeans_result *c) {
  assert_int_equal(g->n_iterations, c->n_iterations);
  assert_int_equal(g->converged, c->converged);
  assert_int_equal(g->n_reseeded, c->n_reseeded);
  int64_t diff = 0;
  for (int64_t i = 0; i < c->n; i++) diff += g->labels[i] != c->labels[i];
  if (diff) fprintf(stderr, "%lld labels differ\n", (long long)diff);
  assert_int_equal(diff, 0);
  double scale = 0, worst = 0;
  for (int64_t e = 0; e < c->k * c->d; e++) scale = fmax(scale, fabs(c->centroids[e]));
  for (int64_t e = 0; e < c->k * c->d; e++) worst = fmax(worst, fabs(g->centroids[e] - c->centroids[e]));
  assert_true(worst <= CENTROID_RTOL * scale);
  assert_true(fabs(g->final_inertia - c->final_inertia) <= INERTIA_RTOL * c->final_inertia);
}

static void one_case(backends *b, int64_t n, int64_t d, int64_t k, uint64_t seed) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float *x = blobs(n, d, k > 3 ? k - 2 : k, seed); /* fewer centres than k: some clusters split */
  float *init_c = malloc(sizeof(float) * (size_t)(k * d)), *init_g = malloc(sizeof(float) * (size_t)(k * d));
  ss_params p;
  ss_params_defaults(&p);
  ss_kmeans_opts o;
  ss_kmeans_opts_from_params(&o, &p);
  o.k = k;
  o.seed = seed;
  o.max_iterations = 25;
  assert_int_equal(ss_kmeans_init_centroids(&ctx, &b->cpu, x, n, d, &o, init_c), SS_OK);
  assert_int_equal(ss_kmeans_init_centroids(&ctx, &b->gpu, x, n, d, &o, init_g), SS_OK);
  assert_memory_equal(init_c, init_g, sizeof(float) * (size_t)(k * d)); /* the same k-means++ picks */
  o.init_centroids = init_c;
  ss_kmeans_result rc, rg;
  assert_int_equal(ss_kmeans_fit(&ctx, &b->cpu, x, n, d, &o, &rc), SS_OK);
  assert_int_equal(ss_kmeans_fit(&ctx, &b->gpu, x, n, d, &o, &rg), SS_OK);
  printf("n %lld d %lld k %lld: %lld iterations, inertia cpu %.9g gpu %.9g, %lld reseeded\n", (long long)n,
         (long long)d, (long long)k, (long long)rc.n_iterations, rc.final_inertia, rg.final_inertia,
         (long long)rc.n_reseeded);
  expect_same_result(&rg, &rc);
  /* nearest-centroid assignment against the fitted model */
  int32_t *lc = malloc(sizeof(int32_t) * (size_t)n), *lg = malloc(sizeof(int32_t) * (size_t)n);
  float *dc = malloc(sizeof(float) * (size_t)n), *dg = malloc(sizeof(float) * (size_t)n);
  assert_int_equal(ss_kmeans_assign(&ctx, &b->cpu, rc.centroids, k, d, x, n, lc, dc), SS_OK);
  assert_int_equal(ss_kmeans_assign(&ctx, &b->gpu, rc.centroids, k, d, x, n, lg, dg), SS_OK);
  assert_memory_equal(lc, lg, sizeof(int32_t) * (size_t)n);
  assert_memory_equal(dc, dg, sizeof(float) * (size_t)n);
  ss_kmeans_result_free(&rc);
  ss_kmeans_result_free(&rg);
  free(lc), free(lg), free(dc), free(dg), free(x), free(init_c), free(init_g);
}

static void cpu_and_gpu_agree(void **state) {
  backends *b = *state;
  const int64_t cases[][3] = {{1000, 3, 5},  {5000, 75, 80}, {20011, 17, 33}, {3001, 96, 256},
                              {777, 130, 7}, {64, 1, 1},     {4096, 32, 32},  {12345, 2, 300}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
    one_case(b, cases[c][0], cases[c][1], cases[c][2], 100 + c);
}

static void random_init_and_tolerance(void **state) {
  backends *b = *state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int64_t n = 30000, d = 12, k = 40;
  float *x = blobs(n, d, 25, 7);
  ss_params p;
  ss_params_defaults(&p);
  ss_kmeans_opts o;
  ss_kmeans_opts_from_params(&o, &p);
  o.k = k;
  o.init = SS_KMEANS_INIT_RANDOM;
  o.tol_change_fraction = 0.001;
  ss_kmeans_result rc, rg;
  assert_int_equal(ss_kmeans_fit(&ctx, &b->cpu, x, n, d, &o, &rc), SS_OK);
  assert_int_equal(ss_kmeans_fit(&ctx, &b->gpu, x, n, d, &o, &rg), SS_OK);
  expect_same_result(&rg, &rc);
  ss_kmeans_result_free(&rc);
  ss_kmeans_result_free(&rg);
  free(x);
}

static void empty_cluster_reseeded(void **state) {
  backends *b = *state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const float x[] = {0, 1, 2, 10}, init[] = {0, 100, 10};
  ss_kmeans_opts o = {.k = 3, .init_centroids = init, .max_iterations = 10};
  ss_kmeans_result rc, rg;
  assert_int_equal(ss_kmeans_fit(&ctx, &b->cpu, x, 4, 1, &o, &rc), SS_OK);
  assert_int_equal(ss_kmeans_fit(&ctx, &b->gpu, x, 4, 1, &o, &rg), SS_OK);
  assert_int_equal(rg.n_reseeded, 1);
  expect_same_result(&rg, &rc);
  assert_float_equal(rg.centroids[1], 2.0f, 1e-6);
  ss_kmeans_result_free(&rc);
  ss_kmeans_result_free(&rg);
}

int main(void) {
  ss_test_require_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(cpu_and_gpu_agree),
      cmocka_unit_test(random_init_and_tolerance),
      cmocka_unit_test(empty_cluster_reseeded),
  };
  return cmocka_run_group_tests(tests, ss_test_backends_setup, ss_test_backends_teardown);
}
