/* test_knn.c — KNN on the CPU: neighbours against a float64 brute force (ties included), the vote
 * rule, incremental mode against the serial loop, the CSV layout's errors, and the CLI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/matrix.h"
#include "stages/knn/knn.h"
#include "core/rng.h"
#include "ss_test.h"

typedef struct {
  double v;
  int64_t i;
} ref_item;

static int ref_cmp(const void *pa, const void *pb) {
  const ref_item *a = pa, *b = pb;
  if (a->v != b->v) return a->v < b->v ? -1 : 1;
  return a->i < b->i ? -1 : a->i > b->i;
}

/* The yardstick: every distance in float64, sorted by (distance, index). Returns the ties that
 * touch the first k (equal distances at neighbouring ranks up to rank k). */
static int64_t brute_force(const float *ref, int64_t n, int64_t d, const float *q, int64_t k, int64_t *idx,
                           double *dist) {
  ref_item *all = malloc(sizeof(ref_item) * (size_t)n);
  for (int64_t r = 0; r < n; r++) { /* ss_knn_exact_dist's documented order, every partial and level */
    double s[SS_KNN_EXACT_LANES] = {0.0};
    for (int64_t j = 0; j < d; j++) {
      double t = (double)q[j] - (double)ref[r * d + j];
      s[j % SS_KNN_EXACT_LANES] = s[j % SS_KNN_EXACT_LANES] + t * t;
    }
    for (int o = SS_KNN_EXACT_LANES / 2; o > 0; o >>= 1)
      for (int l = 0; l < o; l++) s[l] = s[l] + s[l + o];
    all[r] = (ref_item){s[0], r};
  }
  qsort(all, (size_t)n, sizeof(*all), ref_cmp);
  int64_t ties = 0;
  for (int64_t c = 0; c < k; c++) {
    idx[c] = all[c].i, dist[c] = all[c].v;
    if (c + 1 < n && all[c + 1].v == all[c].v) ties++;
  }
  free(all);
  return ties;
}

static float *random_points(int64_t n, int64_t d, uint64_t stream, int grid) {
  float *x = malloc(sizeof(float) * (size_t)(n * d));
  ss_rng r = ss_rng_make((uint64_t)time(NULL), SS_RNG_TEST, stream);
  for (int64_t i = 0; i < n * d; i++)
    x[i] = grid ? (float)ss_rng_next_below(&r, 3) : (float)(200.0 * ss_rng_next_uniform(&r) - 100.0);
  return x;
}

static ss_backend cpu(void) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 0, &be), SS_OK);
  return be;
}

/* Search m random queries and compare with the brute force; returns the ties seen. */
static int64_t check_case(int64_t n, int64_t m, int64_t d, int64_t k, int grid, uint64_t stream) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu();
  float *ref = random_points(n, d, stream, grid), *q = random_points(m, d, stream + 1, grid);
  ss_knn_index *ix;
  assert_int_equal(ss_knn_index_create(&ctx, &be, ref, n, d, &ix), SS_OK);
  ss_knn_opts o = {.k = k};
  int64_t *idx = malloc(sizeof(int64_t) * (size_t)(m * k)), *want_i = malloc(sizeof(int64_t) * (size_t)k);
  double *dist = malloc(sizeof(double) * (size_t)(m * k)), *want_d = malloc(sizeof(double) * (size_t)k);
  ss_knn_stats stats;
  assert_int_equal(ss_knn_search(&ctx, ix, &o, q, m, idx, dist, &stats), SS_OK);
  int64_t ties = 0;
  for (int64_t i = 0; i < m; i++) {
    ties += brute_force(ref, n, d, q + i * d, k, want_i, want_d);
    for (int64_t c = 0; c < k; c++) {
      if (idx[i * k + c] != want_i[c] || dist[i * k + c] != want_d[c])
        fail_msg("n %lld d %lld k %lld: query %lld rank %lld: got %lld (%.17g), want %lld (%.17g)", (long long)n,
                 (long long)d, (long long)k, (long long)i, (long long)c, (long long)idx[i * k + c], dist[i * k + c],
                 (long long)want_i[c], want_d[c]);
    }
  }
  printf("n %lld m %lld d %lld k %lld grid %d: %lld ties at ranks <= k, %lld exact fallbacks\n", (long long)n,
         (long long)m, (long long)d, (long long)k, grid, (long long)ties, (long long)stats.fallbacks);
  ss_knn_index_free(ix);
  free(ref), free(q), free(idx), free(want_i), free(dist), free(want_d);
  ss_backend_close(&be);
  return ties;
}

static void search_matches_float64(void **state) {
  (void)state;
  check_case(1000, 50, 3, 7, 0, 1);
  check_case(517, 40, 33, 70, 0, 3);
  check_case(64, 20, 5, 64, 0, 5); /* k = n */
  check_case(2003, 30, 100, 10, 0, 7);
}

static void ties_by_lower_index(void **state) {
  (void)state;
  /* coordinates in {0, 1, 2}: many exactly equal distances */
  assert_true(check_case(800, 60, 3, 15, 1, 11) > 0);
}

static void vote_rules(void **state) {
  (void)state;
  assert_int_equal(ss_knn_vote((int32_t[]){5}, 1), 5);
  assert_int_equal(ss_knn_vote((int32_t[]){3, 2, 2}, 3), 2);
  assert_int_equal(ss_knn_vote((int32_t[]){1, 2, 2, 1}, 4), 1); /* tie: 1 has the nearest member */
  assert_int_equal(ss_knn_vote((int32_t[]){2, 1, 1, 2, 3}, 5), 2);
  assert_int_equal(ss_knn_vote((int32_t[]){7, 4, 9}, 3), 7);
}

static void bad_k(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu();
  float ref[4] = {0, 1, 2, 3};
  ss_knn_index *ix;
  assert_int_equal(ss_knn_index_create(&ctx, &be, ref, 4, 1, &ix), SS_OK);
  ss_knn_opts o = {.k = 5};
  int64_t idx[5];
  assert_int_equal(ss_knn_search(&ctx, ix, &o, ref, 1, idx, NULL, NULL), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "knn: k = 5 exceeds the number of reference points (4)");
  ss_knn_index_free(ix);
  ss_backend_close(&be);
}

/* The obvious serial algorithm: query i against references + queries 0..i−1, then vote. */
static void serial_loop(const float *ref, const int32_t *lab, int64_t n, const float *q, int64_t m, int64_t d,
                        int64_t k, int32_t *out, int64_t *out_idx) {
  float *all = malloc(sizeof(float) * (size_t)((n + m) * d));
  int32_t *all_lab = malloc(sizeof(int32_t) * (size_t)(n + m)), *nb = malloc(sizeof(int32_t) * (size_t)k);
  double *dist = malloc(sizeof(double) * (size_t)k);
  memcpy(all, ref, sizeof(float) * (size_t)(n * d));
  memcpy(all_lab, lab, sizeof(int32_t) * (size_t)n);
  for (int64_t i = 0; i < m; i++) {
    brute_force(all, n + i, d, q + i * d, k, out_idx + i * k, dist);
    for (int64_t c = 0; c < k; c++) nb[c] = all_lab[out_idx[i * k + c]];
    out[i] = ss_knn_vote(nb, k);
    memcpy(all + (n + i) * d, q + i * d, sizeof(float) * (size_t)d);
    all_lab[n + i] = out[i];
  }
  free(all), free(all_lab), free(nb), free(dist);
}

static void incremental_equals_serial(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be = cpu();
  const int64_t n = 150, m = 2 * SS_KNN_INCREMENTAL_BLOCK + 300, d = 4, k = 5, classes = 3;
  float *ref = random_points(n, d, 21, 0), *q = random_points(m, d, 22, 0);
  int32_t *lab = malloc(sizeof(int32_t) * n), *got = malloc(sizeof(int32_t) * m), *want = malloc(sizeof(int32_t) * m);
  int64_t *gi = malloc(sizeof(int64_t) * m * k), *wi = malloc(sizeof(int64_t) * m * k);
  for (int64_t i = 0; i < n; i++) lab[i] = (int32_t)(i % classes);
  ss_knn_index *ix;
  assert_int_equal(ss_knn_index_create(&ctx, &be, ref, n, d, &ix), SS_OK);
  ss_knn_opts o = {.k = k};
  assert_int_equal(ss_knn_classify(&ctx, ix, lab, &o, q, m, 1, got, gi, NULL, NULL), SS_OK);
  serial_loop(ref, lab, n, q, m, d, k, want, wi);
  int64_t from_queries = 0;
  for (int64_t i = 0; i < m; i++) {
    assert_int_equal(got[i], want[i]);
    for (int64_t c = 0; c < k; c++) {
      assert_int_equal(gi[i * k + c], wi[i * k + c]);
      from_queries += gi[i * k + c] >= n;
    }
  }
  assert_true(from_queries > m); /* most neighbours are earlier queries: the mode is exercised */
  ss_knn_index_free(ix);
  free(ref), free(q), free(lab), free(got), free(want), free(gi), free(wi);
  ss_backend_close(&be);
}

static void expect_csv_error(const char *name, const char *text, const char *msg_after_path) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *path = ss_test_write_file(name, text);
  ss_knn_table t;
  assert_int_equal(ss_knn_csv_read(&ctx, path, &t), SS_ERR_INPUT);
  char want[1024];
  snprintf(want, sizeof(want), "%s: %s", path, msg_after_path);
  assert_string_equal(ss_error_message(&ctx), want);
}

static void csv_errors(void **state) {
  (void)state;
  expect_csv_error("ragged.csv", "2,1,2,2\n1,2,0\n3,4\n5,6,-1\n", "line 3: 2 values, expected 3");
  expect_csv_error("rows.csv", "3,1,2,2\n1,2,0\n3,4,1\n5,6,-1\n", "header: numels + newels = 3 + 1 rows, got 3 rows");
  expect_csv_error("newels.csv", "2,1,2,2\n1,2,0\n3,4,-1\n5,6,-1\n",
                   "header: newels = 1 points to classify (class -1), got 2");
  expect_csv_error("text.csv", "2,1,2,2\n1,x,0\n3,4,1\n5,6,-1\n", "line 2, column 2: not a number: \"x\"");
  expect_csv_error("nan.csv", "2,1,2,2\n1,nan,0\n3,4,1\n5,6,-1\n", "line 2, column 2: not finite: \"nan\"");
  expect_csv_error("header.csv", "2,1,2\n1,2,0\n",
                   "line 1: expected the header numels,newels,classes,dim (four "
                   "integers), got \"2,1,2\"");
  expect_csv_error("class.csv", "2,0,2,2\n1,2,0\n3,4,2\n", "row 2: class: expected -1 or an integer in [0, 2), got 2");
  expect_csv_error("fraction.csv", "2,0,2,2\n1,2,0\n3,4,0.5\n",
                   "row 2: class: expected -1 or an integer in [0, 2), got 0.5");

  /* header sizes: overflow and range are refused with the field and the text as written */
  expect_csv_error("dimmax.csv", "2,0,2,9223372036854775807\n1,2,0\n3,4,1\n",
                   "line 1: header: dim: expected an integer in [1, 65536], got \"9223372036854775807\"");
  expect_csv_error("digits.csv", "12345678901234567890123,0,2,2\n1,2,0\n",
                   "line 1: header: numels: expected an integer in [0, 1000000000000], got "
                   "\"12345678901234567890123\"");
  expect_csv_error("classes.csv", "1,0,-3,2\n1,2,0\n",
                   "line 1: header: classes: expected an integer in [1, 2147483647], got \"-3\"");

  /* the names line is optional */
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *ok = ss_test_write_file("ok.csv", "numels,newels,classes,dim\n2,1,2,2\n1,2,0\n3,4,1\n5,6,-1\n");
  ss_knn_table t;
  assert_int_equal(ss_knn_csv_read(&ctx, ok, &t), SS_OK);
  assert_int_equal(t.n_labelled, 2);
  assert_int_equal(t.n_new, 1);
  assert_int_equal(t.label[2], -1);
  assert_true(t.x[5] == 6.0f);
  ss_knn_table_free(&t);
}

static void cli_round_trip(void **state) {
  (void)state;
  char gen[512], out[512], out2[512], npy[512], args[2048], *so, *se;
  ss_test_path(gen, sizeof(gen), "gen.csv");
  ss_test_path(out, sizeof(out), "out.csv");
  ss_test_path(out2, sizeof(out2), "gen2.csv");
  ss_test_path(npy, sizeof(npy), "pred.npy");
  snprintf(args, sizeof(args), "knn --generate 400 100 3 2 -o '%s' --seed 7", gen);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
  free(so), free(se);
  snprintf(args, sizeof(args), "knn -o '%s' --seed 7 --generate 400 100 3 2", out2);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
  free(so), free(se);
  char *a = ss_test_slurp(gen), *b = ss_test_slurp(out2);
  assert_string_equal(a, b); /* same seed, same file */
  assert_true(strncmp(a, "400,100,3,2\n", 12) == 0);
  free(a), free(b);

  snprintf(args, sizeof(args), "knn '%s' --k 7 -o '%s' --device cpu -q", gen, out);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
  free(so), free(se);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_knn_table in, res;
  assert_int_equal(ss_knn_csv_read(&ctx, gen, &in), SS_OK);
  assert_int_equal(ss_knn_csv_read(&ctx, out, &res), SS_OK);
  assert_int_equal(res.n_points, 500);
  assert_int_equal(res.n_new, 0);
  /* the classes written equal the library's answer */
  ss_backend be = cpu();
  ss_knn_index *ix;
  assert_int_equal(ss_knn_index_create(&ctx, &be, in.x, 400, 2, &ix), SS_OK);
  int32_t pred[100];
  ss_knn_opts o = {.k = 7};
  assert_int_equal(ss_knn_classify(&ctx, ix, in.label, &o, in.x + 400 * 2, 100, 0, pred, NULL, NULL, NULL), SS_OK);
  for (int i = 0; i < 500; i++) {
    assert_true(res.x[i * 2] == in.x[i * 2]);
    assert_int_equal(res.label[i], i < 400 ? in.label[i] : pred[i - 400]);
  }
  ss_knn_index_free(ix);
  ss_backend_close(&be);
  ss_knn_table_free(&in);
  ss_knn_table_free(&res);

  snprintf(args, sizeof(args), "knn '%s' --cv 5 --device cpu -q", gen);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
  assert_non_null(strstr(so, "cross-validated accuracy (5 folds, k = 10): "));
  free(so), free(se);
  snprintf(args, sizeof(args), "knn '%s' --incremental -o '%s' --device cpu -q", gen, npy);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 0);
  free(so), free(se);
  ss_matrix dm;
  char dpath[512];
  ss_test_path(dpath, sizeof(dpath), "pred.distances.npy");
  assert_int_equal(ss_matrix_read(&ctx, dpath, NULL, &dm), SS_OK);
  assert_int_equal(dm.rows, 100);
  assert_int_equal(dm.cols, 10);
  ss_matrix_free(&dm);
}

static void cli_errors(void **state) {
  (void)state;
  char args[1024], *so, *se, want[1024];
  const char *small = ss_test_write_file("small.csv", "2,1,2,2\n1,2,0\n3,4,1\n5,6,-1\n");
  snprintf(args, sizeof(args), "knn '%s' --k 5 --device cpu", small);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 1);
  assert_string_equal(se, "spikestream knn: knn: k = 5 exceeds the number of reference points (2)\n");
  free(so), free(se);
  const char *ragged = ss_test_write_file("ragged2.csv", "2,1,2,2\n1,2,0\n3,4\n5,6,-1\n");
  snprintf(args, sizeof(args), "knn '%s' --device cpu", ragged);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 1);
  snprintf(want, sizeof(want), "spikestream knn: %s: line 3: 2 values, expected 3\n", ragged);
  assert_string_equal(se, want);
  free(so), free(se);
  assert_int_equal(ss_test_run_cli("knn --generate 10 5", &so, &se), 2);
  free(so), free(se);
  assert_int_equal(ss_test_run_cli("knn", &so, &se), 2);
  free(so), free(se);
  snprintf(args, sizeof(args), "knn '%s' --strategy fastest", small);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 1);
  assert_string_equal(se, "spikestream knn: --strategy: expected one of \"auto\", \"kmin\", \"bitonic\", "
                          "\"warp\", got \"fastest\"\n");
  free(so), free(se);
  snprintf(args, sizeof(args), "knn '%s' --k 0", small);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 1);
  assert_string_equal(se, "spikestream knn: --k: expected an integer in [1, 100000], got 0\n");
  free(so), free(se);
  snprintf(args, sizeof(args), "knn '%s' --k seven", small);
  assert_int_equal(ss_test_run_cli(args, &so, &se), 2);
  assert_string_equal(se, "spikestream knn: --k: cannot read \"seven\"\n");
  free(so), free(se);
  assert_int_equal(ss_test_run_cli("knn --help", &so, &se), 0);
  assert_non_null(strstr(so, "usage: spikestream knn"));
  free(so), free(se);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(search_matches_float64),
      cmocka_unit_test(ties_by_lower_index),
      cmocka_unit_test(vote_rules),
      cmocka_unit_test(bad_k),
      cmocka_unit_test(incremental_equals_serial),
      cmocka_unit_test(csv_errors),
      cmocka_unit_test(cli_round_trip),
      cmocka_unit_test(cli_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
