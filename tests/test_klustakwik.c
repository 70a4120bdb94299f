/* test_klustakwik.c — .fet/.fmask/.clu: round trips, drop_last_n_features, default masks, and
 * every rejection message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/klustakwik.h"
#include "core/rng.h"
#include "ss_test.h"

static uint64_t seed;

static void expect_msg(const ss_ctx *ctx, const char *path, const char *tail) {
  char expected[2048];
  snprintf(expected, sizeof(expected), "%s: %s", path, tail);
  assert_string_equal(ss_error_message(ctx), expected);
}

static void features_round_trip(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, 1);
  enum { N = 53, D = 7 };
  ss_matrix f = {N, D, malloc(sizeof(float) * N * D)}, m = {N, D, malloc(sizeof(float) * N * D)};
  for (int i = 0; i < N * D; i++) {
    f.data[i] = (float)(ss_rng_next_normal(&r) * 1e4);
    /* masks: 0, 1 or a partial value that %g prints exactly */
    m.data[i] = (float)ss_rng_next_below(&r, 5) / 4.0f;
  }
  char fet[512], fmask[512];
  ss_test_path(fet, sizeof(fet), "x.fet.1");
  ss_test_path(fmask, sizeof(fmask), "x.fmask.1");
  assert_int_equal(ss_kk_write_features(&ctx, fet, fmask, &f, &m), SS_OK);
  ss_matrix f2, m2;
  assert_int_equal(ss_kk_read_features(&ctx, fet, fmask, 0, &f2, &m2), SS_OK);
  assert_int_equal(f2.rows, N);
  assert_int_equal(f2.cols, D);
  assert_memory_equal(f2.data, f.data, sizeof(float) * N * D);
  assert_memory_equal(m2.data, m.data, sizeof(float) * N * D);
  ss_matrix_free(&f2);
  ss_matrix_free(&m2);
  /* drop the last 2 columns of both files */
  assert_int_equal(ss_kk_read_features(&ctx, fet, fmask, 2, &f2, &m2), SS_OK);
  assert_int_equal(f2.cols, D - 2);
  assert_int_equal(m2.cols, D - 2);
  for (int p = 0; p < N; p++)
    for (int i = 0; i < D - 2; i++) {
      assert_true(f2.data[p * (D - 2) + i] == f.data[p * D + i]);
      assert_true(m2.data[p * (D - 2) + i] == m.data[p * D + i]);
    }
  ss_matrix_free(&f2);
  ss_matrix_free(&m2);
  /* no mask file: all ones */
  assert_int_equal(ss_kk_read_features(&ctx, fet, NULL, 1, &f2, &m2), SS_OK);
  assert_int_equal(m2.rows, N);
  assert_int_equal(m2.cols, D - 1);
  for (int i = 0; i < N * (D - 1); i++) assert_true(m2.data[i] == 1.0f);
  ss_matrix_free(&f2);
  ss_matrix_free(&m2);
  ss_matrix_free(&f);
  ss_matrix_free(&m);
}

static void reads_klustakwik_layout(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  /* as written by klusta: integer features, trailing time column, trailing spaces */
  const char *fet = ss_test_write_file("k.fet.2", "3\n10 -20 1000 \n30 40 2000 \n");
  const char *fmask = ss_test_write_file("k.fmask.2", "3\n1 0.5 0\n0 1 0\n");
  ss_matrix f, m;
  assert_int_equal(ss_kk_read_features(&ctx, fet, fmask, 1, &f, &m), SS_OK);
  assert_int_equal(f.rows, 2);
  assert_int_equal(f.cols, 2);
  assert_true(f.data[1] == -20.0f && f.data[3] == 40.0f);
  assert_true(m.data[1] == 0.5f && m.data[2] == 0.0f);
  ss_matrix_free(&f);
  ss_matrix_free(&m);
}

static void expect_features_error(const char *fet_text, const char *fmask_text, int64_t drop, ss_status st,
                                  int blame_mask, const char *tail) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *fet = ss_test_write_file("e.fet.1", fet_text);
  const char *fmask = fmask_text ? ss_test_write_file("e.fmask.1", fmask_text) : NULL;
  ss_matrix f, m;
  assert_int_equal(ss_kk_read_features(&ctx, fet, fmask, drop, &f, &m), st);
  if (st == SS_OK) {
    ss_matrix_free(&f);
    ss_matrix_free(&m);
    return;
  }
  assert_null(f.data);
  assert_null(m.data);
  char expected[2048], tail2[1024];
  /* "%F" in a tail stands for the .fet path */
  const char *mark = strstr(tail, "%F");
  if (mark) snprintf(tail2, sizeof(tail2), "%.*s%s%s", (int)(mark - tail), tail, fet, mark + 2);
  else snprintf(tail2, sizeof(tail2), "%s", tail);
  snprintf(expected, sizeof(expected), "%s: %s", blame_mask ? fmask : fet, tail2);
  assert_string_equal(ss_error_message(&ctx), expected);
}

static void feature_rejections(void **state) {
  (void)state;
  const char *mask_ok = "2\n1 1\n1 1\n";
  expect_features_error("3\n1 2\n3 4\n", NULL, 0, SS_ERR_INPUT, 0, "line 2: 2 values, expected 3");
  expect_features_error("2\n1 2\n3 4 5\n", NULL, 0, SS_ERR_INPUT, 0, "line 3: 3 values, expected 2");
  expect_features_error("", NULL, 0, SS_ERR_INPUT, 0, "empty file (expected the number of features on line 1)");
  expect_features_error("2\n", NULL, 0, SS_ERR_INPUT, 0, "no data rows");
  expect_features_error("two\n1 2\n", NULL, 0, SS_ERR_INPUT, 0,
                        "line 1: expected the number of features (an integer >= 1), got \"two\"");
  expect_features_error("0\n", NULL, 0, SS_ERR_INPUT, 0,
                        "line 1: expected the number of features (an integer >= 1), got \"0\"");
  expect_features_error("2 3\n1 2\n", NULL, 0, SS_ERR_INPUT, 0,
                        "line 1: expected the number of features (an integer >= 1), got \"2 3\"");
  expect_features_error("2\n1 nan\n", NULL, 0, SS_ERR_INPUT, 0, "line 2, column 2: not finite: \"nan\"");
  expect_features_error("2\n1 2\nx 4\n", NULL, 0, SS_ERR_INPUT, 0, "line 3, column 1: not a number: \"x\"");
  expect_features_error("2\n1 2\n", NULL, 2, SS_ERR_INPUT, 0,
                        "drop_last_n_features = 2 leaves no features (the file has 2)");
  expect_features_error("2\n1 2\n3 4\n", "2\n1 1\n", 0, SS_ERR_INPUT, 1, "1 rows, but %F has 2");
  expect_features_error("2\n1 2\n", "3\n1 1 1\n", 0, SS_ERR_INPUT, 1, "line 1: 3 masks per row, but %F has 2 features");
  expect_features_error("2\n1 2\n3 4\n", "2\n1 1\n1 1.5\n", 0, SS_ERR_INPUT, 1,
                        "line 3, column 2: mask outside [0, 1]: \"1.5\"");
  expect_features_error("2\n1 2\n", "2\n-0.1 1\n", 0, SS_ERR_INPUT, 1,
                        "line 2, column 1: mask outside [0, 1]: \"-0.1\"");
  expect_features_error("2\n1 2\n", "2\n1 inf\n", 0, SS_ERR_INPUT, 1, "line 2, column 2: not finite: \"inf\"");
  expect_features_error("2\n1 2\n3 4\n", mask_ok, 0, SS_OK, 0, "");
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_matrix f, m;
  const char *fet = ss_test_write_file("n.fet.1", "2\n1 2\n");
  assert_int_equal(ss_kk_read_features(&ctx, fet, NULL, -1, &f, &m), SS_ERR_USAGE);
  assert_string_equal(ss_error_message(&ctx), "drop_last_n_features: expected an integer >= 0, got -1");
  char missing[512];
  ss_test_path(missing, sizeof(missing), "missing.fet.1");
  assert_int_equal(ss_kk_read_features(&ctx, missing, NULL, 0, &f, &m), SS_ERR_IO);
  expect_msg(&ctx, missing, "cannot open: No such file or directory");
}

static void clu_round_trip_and_rejections(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int32_t labels[6] = {1, 2, 2, 5, 1, 3};
  char path[512];
  ss_test_path(path, sizeof(path), "x.clu.1");
  assert_int_equal(ss_kk_write_clu(&ctx, path, 6, labels), SS_OK);
  FILE *fp = fopen(path, "r");
  char text[128] = {0};
  assert_true(fread(text, 1, sizeof(text) - 1, fp) > 0);
  fclose(fp);
  assert_string_equal(text, "5\n1\n2\n2\n5\n1\n3\n"); /* KlustaKwik: header = largest label */
  int64_t n, k;
  int32_t *got;
  assert_int_equal(ss_kk_read_clu(&ctx, path, &n, &got, &k), SS_OK);
  assert_int_equal(n, 6);
  assert_int_equal(k, 5);
  assert_memory_equal(got, labels, sizeof(labels));
  free(got);

  const char *p = ss_test_write_file("b.clu.1", "3\n1\n-2\n");
  assert_int_equal(ss_kk_read_clu(&ctx, p, &n, &got, NULL), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 3, column 1: label outside [0, 2147483647]: \"-2\"");
  p = ss_test_write_file("b.clu.1", "3\n1\n2.5\n");
  assert_int_equal(ss_kk_read_clu(&ctx, p, &n, &got, NULL), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 3, column 1: not an integer: \"2.5\"");
  p = ss_test_write_file("b.clu.1", "x\n1\n");
  assert_int_equal(ss_kk_read_clu(&ctx, p, &n, &got, NULL), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 1: expected the number of clusters (an integer >= 0), got \"x\"");
  p = ss_test_write_file("b.clu.1", "3\n");
  assert_int_equal(ss_kk_read_clu(&ctx, p, &n, &got, NULL), SS_ERR_INPUT);
  expect_msg(&ctx, p, "no data rows");
  p = ss_test_write_file("b.clu.1", "3\n1 2\n");
  assert_int_equal(ss_kk_read_clu(&ctx, p, &n, &got, NULL), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 2: 2 values, expected 1");
  labels[2] = -1;
  assert_int_equal(ss_kk_write_clu(&ctx, path, 6, labels), SS_ERR_INTERNAL);
  expect_msg(&ctx, path, "label 2 is negative (-1)");
}

static void writes_into_missing_directory_fail_cleanly(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float v[2] = {1, 2};
  ss_matrix f = {1, 2, v};
  char fet[512];
  ss_test_path(fet, sizeof(fet), "nodir/x.fet.1");
  assert_int_equal(ss_kk_write_features(&ctx, fet, NULL, &f, NULL), SS_ERR_IO);
  expect_msg(&ctx, fet, "cannot create: No such file or directory");
  int32_t l[1] = {1};
  assert_int_equal(ss_kk_write_clu(&ctx, fet, 1, l), SS_ERR_IO);
  char fmask[512];
  ss_test_path(fmask, sizeof(fmask), "ok.fmask.1");
  ss_matrix bad = {2, 2, v};
  assert_int_equal(ss_kk_write_features(&ctx, fet, fmask, &f, &bad), SS_ERR_INTERNAL);
  expect_msg(&ctx, fmask, "masks must have the shape of the features (1 x 2)");
}

int main(void) {
  seed = (uint64_t)time(NULL);
  printf("test_klustakwik: seed %llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(features_round_trip),
      cmocka_unit_test(reads_klustakwik_layout),
      cmocka_unit_test(feature_rejections),
      cmocka_unit_test(clu_round_trip_and_rejections),
      cmocka_unit_test(writes_into_missing_directory_fail_cleanly),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
