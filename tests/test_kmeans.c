/* test_kmeans.c — k-means on the CPU: hand-checked cases, k-means++ reproducibility, empty-cluster
 * reseeding, thread-count independence, bad inputs with their messages, nearest-centroid
 * assignment, image patches and the `spikestream kmeans` round trip. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/matrix.h"
#include "io/npy.h"
#include "stages/kmeans/kmeans.h"
#include "core/rng.h"
#include "ss_test.h"

static ss_backend cpu(int threads) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_CPU, 0, threads, &be), SS_OK);
  return be;
}

static ss_kmeans_opts opts(int64_t k, const float *init) {
  ss_params p;
  ss_params_defaults(&p);
  ss_kmeans_opts o;
  ss_kmeans_opts_from_params(&o, &p);
  o.k = k;
  o.init_centroids = init;
  return o;
}

/* Gaussian blobs: k centres uniform in [-10, 10]^d, unit noise; fresh for every seed. */
static float *blobs(int64_t n, int64_t d, int64_t k, uint64_t seed) {
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, 0);
  float *c = malloc(sizeof(float) * (size_t)(k * d)), *x = malloc(sizeof(float) * (size_t)(n * d));
  for (int64_t e = 0; e < k * d; e++) c[e] = (float)(20.0 * ss_rng_next_uniform(&r) - 10.0);
  for (int64_t i = 0; i < n; i++) {
    int64_t b = (int64_t)ss_rng_next_below(&r, (uint64_t)k);
    for (int64_t j = 0; j < d; j++) x[i * d + j] = c[b * d + j] + (float)ss_rng_next_normal(&r);
  }
  free(c);
  return x;
}

static void one_dimension_by_hand(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu(2);
  const float x[] = {0, 1, 10, 11}, init[] = {0, 10};
  ss_kmeans_opts o = opts(2, init);
  ss_kmeans_result r;
  assert_int_equal(ss_kmeans_fit(&ctx, &be, x, 4, 1, &o, &r), SS_OK);
  assert_int_equal(r.labels[0], 0);
  assert_int_equal(r.labels[1], 0);
  assert_int_equal(r.labels[2], 1);
  assert_int_equal(r.labels[3], 1);
  assert_float_equal(r.centroids[0], 0.5f, 1e-6);
  assert_float_equal(r.centroids[1], 10.5f, 1e-6);
  assert_float_equal(r.final_inertia, 1.0, 1e-6);
  assert_float_equal(r.inertia[0], 2.0, 1e-6); /* against the initial centroids: 0 + 1 + 0 + 1 */
  assert_int_equal(r.n_iterations, 1);
  assert_int_equal(r.converged, 1);
  ss_kmeans_result_free(&r);
  ss_backend_close(&be);
}

static void two_groups_by_hand(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu(1);
  const float x[] = {0, 0, 10, 10, 2, 0, 12, 10, 0, 2, 10, 12};
  ss_kmeans_opts o = opts(2, NULL);
  o.seed = 3;
  ss_kmeans_result r;
  assert_int_equal(ss_kmeans_fit(&ctx, &be, x, 6, 2, &o, &r), SS_OK);
  int a = r.labels[0], b = r.labels[1];
  assert_int_not_equal(a, b);
  for (int i = 0; i < 6; i++) assert_int_equal(r.labels[i], i % 2 ? b : a);
  assert_float_equal(r.centroids[a * 2], 2.0f / 3.0f, 1e-5);
  assert_float_equal(r.centroids[a * 2 + 1], 2.0f / 3.0f, 1e-5);
  assert_float_equal(r.centroids[b * 2], 32.0f / 3.0f, 1e-5);
  assert_float_equal(r.centroids[b * 2 + 1], 32.0f / 3.0f, 1e-5);
  assert_float_equal(r.final_inertia, 96.0 / 9.0, 1e-5); /* 48/9 per group */
  ss_kmeans_result_free(&r);
  ss_backend_close(&be);
}

static int is_row_of(const float *c, const float *x, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n; i++)
    if (memcmp(c, x + i * d, sizeof(float) * (size_t)d) == 0) return 1;
  return 0;
}

static void kmeanspp_reproducible(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int64_t n = 2000, d = 5, k = 12;
  float *x = blobs(n, d, k, 11);
  float c1[12 * 5], c2[12 * 5], c3[12 * 5];
  ss_kmeans_opts o = opts(k, NULL);
  o.seed = 42;
  ss_backend b1 = cpu(1), b2 = cpu(2);
  assert_int_equal(ss_kmeans_init_centroids(&ctx, &b1, x, n, d, &o, c1), SS_OK);
  assert_int_equal(ss_kmeans_init_centroids(&ctx, &b2, x, n, d, &o, c2), SS_OK);
  assert_memory_equal(c1, c2, sizeof(c1));
  o.seed = 43;
  assert_int_equal(ss_kmeans_init_centroids(&ctx, &b2, x, n, d, &o, c3), SS_OK);
  assert_memory_not_equal(c1, c3, sizeof(c1));
  /* k-means++ on well separated blobs: the k picks are distinct points, near data rows */
  for (int64_t c = 0; c < k; c++)
    for (int64_t e = c + 1; e < k; e++) assert_memory_not_equal(c1 + c * d, c1 + e * d, sizeof(float) * d);
  /* random init picks distinct rows too (centring and un-centring may round: compare loosely) */
  o.init = SS_KMEANS_INIT_RANDOM;
  assert_int_equal(ss_kmeans_init_centroids(&ctx, &b1, x, n, d, &o, c3), SS_OK);
  for (int64_t c = 0; c < k; c++) {
    int found = is_row_of(c3 + c * d, x, n, d);
    for (int64_t i = 0; !found && i < n; i++) {
      double err = 0;
      for (int64_t j = 0; j < d; j++) err = fmax(err, fabs(c3[c * d + j] - x[i * d + j]));
      found = err < 1e-5;
    }
    assert_true(found);
  }
  free(x);
  ss_backend_close(&b1);
  ss_backend_close(&b2);
}

static void empty_cluster_reseeded(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu(2);
  /* cluster 1 starts far away and gets no point; the farthest point (2, at distance² 4 from
   * centroid 0) re-seeds it */
  const float x[] = {0, 1, 2, 10}, init[] = {0, 100, 10};
  ss_kmeans_opts o = opts(3, init);
  ss_kmeans_result r;
  assert_int_equal(ss_kmeans_fit(&ctx, &be, x, 4, 1, &o, &r), SS_OK);
  assert_int_equal(r.n_reseeded, 1);
  const int32_t want[] = {0, 0, 1, 2};
  assert_memory_equal(r.labels, want, sizeof(want));
  assert_float_equal(r.centroids[0], 0.5f, 1e-6);
  assert_float_equal(r.centroids[1], 2.0f, 1e-6);
  assert_float_equal(r.centroids[2], 10.0f, 1e-6);
  assert_float_equal(r.final_inertia, 0.5, 1e-6);
  assert_int_equal(r.converged, 1);
  ss_kmeans_result_free(&r);
  ss_backend_close(&be);
}

static void thread_count_independent(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int64_t n = 9000, d = 7, k = 13;
  float *x = blobs(n, d, 9, 5); /* fewer true blobs than k: some clusters split, reseeding likely */
  ss_kmeans_opts o = opts(k, NULL);
  o.seed = 9;
  ss_kmeans_result ref, r;
  ss_backend b1 = cpu(1);
  assert_int_equal(ss_kmeans_fit(&ctx, &b1, x, n, d, &o, &ref), SS_OK);
  for (int t = 2; t <= 3; t++) {
    ss_backend bt = cpu(t);
    assert_int_equal(ss_kmeans_fit(&ctx, &bt, x, n, d, &o, &r), SS_OK);
    assert_int_equal(r.n_iterations, ref.n_iterations);
    assert_memory_equal(r.labels, ref.labels, sizeof(int32_t) * n);
    assert_memory_equal(r.centroids, ref.centroids, sizeof(float) * k * d);
    assert_memory_equal(r.inertia, ref.inertia, sizeof(double) * (ref.n_iterations + 1));
    ss_kmeans_result_free(&r);
    ss_backend_close(&bt);
  }
  /* inertia never increases along Lloyd's iterations */
  for (int64_t it = 1; it <= ref.n_iterations; it++) assert_true(ref.inertia[it] <= ref.inertia[it - 1] * (1 + 1e-6));
  ss_kmeans_result_free(&ref);
  free(x);
  ss_backend_close(&b1);
}

static void expect_fail(ss_status got, ss_status want, ss_ctx *ctx, const char *msg) {
  assert_int_equal(got, want);
  assert_string_equal(ss_error_message(ctx), msg);
  ss_ctx_clear(ctx);
}

static void bad_inputs(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu(1);
  float x[] = {0, 1, 2, 3};
  ss_kmeans_result r;
  ss_kmeans_opts o = opts(5, NULL);
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 4, 1, &o, &r), SS_ERR_INPUT, &ctx,
              "kmeans: k = 5 exceeds the number of points (4)");
  o.k = 0;
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 4, 1, &o, &r), SS_ERR_INPUT, &ctx, "kmeans: k must be at least 1, got 0");
  o.k = 1;
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 0, 1, &o, &r), SS_ERR_INPUT, &ctx, "kmeans: no points (empty input)");
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 4, 0, &o, &r), SS_ERR_INPUT, &ctx, "kmeans: the points have no dimensions");
  x[3] = NAN;
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 2, 2, &o, &r), SS_ERR_INPUT, &ctx,
              "kmeans: points: row 1, column 1 is not finite (nan)");
  x[3] = 3;
  const float bad_init[] = {INFINITY};
  o.init_centroids = bad_init;
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 4, 1, &o, &r), SS_ERR_INPUT, &ctx,
              "kmeans: initial centroids: row 0, column 0 is not finite (inf)");
  o.init_centroids = NULL;
  o.tol_change_fraction = 2;
  expect_fail(ss_kmeans_fit(&ctx, &be, x, 4, 1, &o, &r), SS_ERR_INPUT, &ctx,
              "kmeans: tol_change_fraction must lie in [0, 1], got 2");
  int32_t lab[4];
  expect_fail(ss_kmeans_assign(&ctx, &be, x, 0, 1, x, 4, lab, NULL), SS_ERR_INPUT, &ctx,
              "kmeans: the model has no centroids");
  ss_backend_close(&be);
}

static void assign_against_model(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu(2);
  const float cent[] = {0, 10}, x[] = {1, 6, 4, 5, -3};
  int32_t lab[5];
  float dist[5];
  assert_int_equal(ss_kmeans_assign(&ctx, &be, cent, 2, 1, x, 5, lab, dist), SS_OK);
  const int32_t want[] = {0, 1, 0, 0, 0}; /* 5 is equidistant: the lower index wins */
  const float want_d[] = {1, 16, 16, 25, 9};
  assert_memory_equal(lab, want, sizeof(want));
  for (int i = 0; i < 5; i++) assert_float_equal(dist[i], want_d[i], 1e-5);
  ss_backend_close(&be);
}

static void patches_of_an_image(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float img[3 * 4 * 2]; /* h 3, w 4, c 2: value = 100 y + 10 x + c */
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 4; x++)
      for (int c = 0; c < 2; c++) img[(y * 4 + x) * 2 + c] = (float)(100 * y + 10 * x + c);
  float *p;
  int64_t n, d;
  assert_int_equal(ss_kmeans_patches(&ctx, img, 3, 4, 2, 2, &p, &n, &d), SS_OK);
  assert_int_equal(n, 6);
  assert_int_equal(d, 8);
  const float want[] = {110, 111, 120, 121, 210, 211, 220, 221}; /* patch at (1, 1) = row 4 */
  assert_memory_equal(p + 4 * 8, want, sizeof(want));
  free(p);
  expect_fail(ss_kmeans_patches(&ctx, img, 3, 4, 2, 4, &p, &n, &d), SS_ERR_INPUT, &ctx,
              "kmeans: patch size 4 does not fit a 3 x 4 image");
}

static const char *write_ppm(const char *name, int w, int h, int maxval) {
  static char path[512];
  ss_test_path(path, sizeof(path), name);
  FILE *f = fopen(path, "wb");
  fprintf(f, "P6\n# a comment\n%d %d\n%d\n", w, h, maxval);
  for (int i = 0; i < w * h * 3; i++) fputc((i * 37) % 256, f);
  fclose(f);
  return path;
}

static void image_files(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float *img;
  int64_t h, w, c;
  const char *ppm = write_ppm("img.ppm", 5, 4, 255);
  assert_int_equal(ss_kmeans_image_read(&ctx, ppm, &img, &h, &w, &c), SS_OK);
  assert_int_equal(h, 4);
  assert_int_equal(w, 5);
  assert_int_equal(c, 3);
  assert_float_equal(img[7], ((7 * 37) % 256), 0);
  free(img);
  char msg[1024];
  ppm = write_ppm("deep.ppm", 2, 2, 65535);
  snprintf(msg, sizeof(msg), "%s: PPM maxval: expected 1..255 (8-bit), got 65535", ppm);
  expect_fail(ss_kmeans_image_read(&ctx, ppm, &img, &h, &w, &c), SS_ERR_INPUT, &ctx, msg);
  const char *png = ss_test_write_file("photo.png", "\x89PNG");
  snprintf(msg, sizeof(msg),
           "%s: unsupported image format: give a binary PPM (.ppm, P6) or a .npy H x W x C array (no image "
           "library is built in: convert PNG/JPEG first)",
           png);
  expect_fail(ss_kmeans_image_read(&ctx, png, &img, &h, &w, &c), SS_ERR_INPUT, &ctx, msg);
  /* a .npy uint8 H x W x 3 image */
  char npy[512];
  ss_test_path(npy, sizeof(npy), "img.npy");
  uint8_t px[2 * 3 * 3];
  for (int i = 0; i < 18; i++) px[i] = (uint8_t)(i * 10);
  ss_array a = {.dtype = SS_DT_U8, .ndim = 3, .shape = {2, 3, 3}, .data = px};
  assert_int_equal(ss_npy_write(&ctx, npy, &a), SS_OK);
  assert_int_equal(ss_kmeans_image_read(&ctx, npy, &img, &h, &w, &c), SS_OK);
  assert_int_equal(h * 100 + w * 10 + c, 233);
  assert_float_equal(img[17], 170, 0);
  free(img);
}

static void cli_round_trip(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char *out, *err, args[4096], dir[512], path[600];
  const char *pts = ss_test_write_file("pts.csv", "x\n0\n1\n10\n11\n");
  const char *init = ss_test_write_file("init.csv", "0\n10\n");
  ss_test_path(dir, sizeof(dir), "km_out");
  snprintf(args, sizeof(args), "kmeans '%s' --k 2 --init '%s' --device cpu -o '%s'", pts, init, dir);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "inertia: 1\n"));
  free(out), free(err);
  int64_t n;
  int32_t *lab;
  snprintf(path, sizeof(path), "%s/labels.npy", dir);
  assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &lab), SS_OK);
  assert_int_equal(n, 4);
  assert_int_equal(lab[0] * 1000 + lab[1] * 100 + lab[2] * 10 + lab[3], 11);
  free(lab);
  ss_matrix m;
  snprintf(path, sizeof(path), "%s/centroids.npy", dir);
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_OK);
  assert_int_equal(m.rows * 10 + m.cols, 21);
  assert_float_equal(m.data[0], 0.5f, 1e-6);
  assert_float_equal(m.data[1], 10.5f, 1e-6);
  ss_matrix_free(&m);

  snprintf(args, sizeof(args), "kmeans '%s' --k 9 --device cpu -o '%s'", pts, dir);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  assert_string_equal(err, "spikestream kmeans: kmeans: k = 9 exceeds the number of points (4)\n");
  free(out), free(err);
  snprintf(args, sizeof(args), "kmeans '%s' --k 2", pts);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 2);
  assert_non_null(strstr(err, "give the output folder with -o DIR"));
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("kmeans --help", &out, &err), 0);
  assert_non_null(strstr(out, "usage: spikestream kmeans"));
  free(out), free(err);

  /* image patches: 5 x 4 PPM, 2 x 2 patches -> 12 rows of 12 values */
  const char *ppm = write_ppm("cli.ppm", 5, 4, 255);
  snprintf(args, sizeof(args), "kmeans --patches '%s' --patch 2 --k 3 --seed 1 --device cpu -o '%s'", ppm, dir);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "inertia: "));
  free(out), free(err);
  snprintf(path, sizeof(path), "%s/centroids.npy", dir);
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_OK);
  assert_int_equal(m.rows * 100 + m.cols, 312);
  ss_matrix_free(&m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(one_dimension_by_hand),
      cmocka_unit_test(two_groups_by_hand),
      cmocka_unit_test(kmeanspp_reproducible),
      cmocka_unit_test(empty_cluster_reseeded),
      cmocka_unit_test(thread_count_independent),
      cmocka_unit_test(bad_inputs),
      cmocka_unit_test(assign_against_model),
      cmocka_unit_test(patches_of_an_image),
      cmocka_unit_test(image_files),
      cmocka_unit_test(cli_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
