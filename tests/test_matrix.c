/* test_matrix.c — ss_matrix / labels through .npy, HDF5 and CSV/TXT: round trips, conversions,
 * CSV dialects, every rejection message, atomic writes. */
#include <dirent.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "io/matrix.h"
#include "io/npy.h"
#include "core/rng.h"
#include "ss_test.h"

static uint64_t seed;

static ss_matrix random_matrix(int64_t rows, int64_t cols, uint64_t stream) {
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, stream);
  ss_matrix m = {rows, cols, malloc((size_t)(rows * cols) * sizeof(float))};
  for (int64_t i = 0; i < rows * cols; i++) m.data[i] = (float)(ss_rng_next_normal(&r) * 1000.0);
  return m;
}

static void expect_msg(const ss_ctx *ctx, const char *path, const char *tail) {
  char expected[2048];
  snprintf(expected, sizeof(expected), "%s: %s", path, tail);
  assert_string_equal(ss_error_message(ctx), expected);
}

static void matrix_round_trip_every_format(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *names[] = {"m.npy", "m.h5", "m.hdf5", "m.csv", "m.txt", "M.CSV"};
  ss_matrix m = random_matrix(37, 5, 1);
  for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
    char path[512];
    ss_test_path(path, sizeof(path), names[k]);
    assert_int_equal(ss_matrix_write(&ctx, path, NULL, &m), SS_OK);
    ss_matrix r;
    assert_int_equal(ss_matrix_read(&ctx, path, NULL, &r), SS_OK);
    assert_int_equal(r.rows, 37);
    assert_int_equal(r.cols, 5);
    assert_memory_equal(r.data, m.data, sizeof(float) * 37 * 5); /* %.9g is exact for float32 */
    ss_matrix_free(&r);
  }
  /* named and nested HDF5 datasets */
  char path[512];
  ss_test_path(path, sizeof(path), "named.h5");
  assert_int_equal(ss_matrix_write(&ctx, path, "/group/sub/x", &m), SS_OK);
  ss_matrix r;
  assert_int_equal(ss_matrix_read(&ctx, path, "/group/sub/x", &r), SS_OK);
  assert_memory_equal(r.data, m.data, sizeof(float) * 37 * 5);
  ss_matrix_free(&r);
  assert_int_equal(ss_matrix_read(&ctx, path, "nope", &r), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'nope': not found");
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &r), SS_ERR_INPUT);
  expect_msg(&ctx, path, "no dataset at the root (name one with --dataset)");
  ss_matrix_free(&m);
}

static void labels_round_trip_every_format(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, 2);
  int32_t labels[101];
  for (int i = 0; i < 101; i++) labels[i] = (int32_t)((int64_t)ss_rng_next_below(&r, 4000000000u) - 2000000000);
  const char *names[] = {"l.npy", "l.h5", "l.csv", "l.txt"};
  for (size_t k = 0; k < 4; k++) {
    char path[512];
    ss_test_path(path, sizeof(path), names[k]);
    assert_int_equal(ss_labels_write(&ctx, path, NULL, 101, labels), SS_OK);
    int64_t n;
    int32_t *got;
    assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &got), SS_OK);
    assert_int_equal(n, 101);
    assert_memory_equal(got, labels, sizeof(labels));
    free(got);
  }
}

static void npy_dtypes_and_shapes(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char path[512];
  ss_test_path(path, sizeof(path), "i16.npy");
  int16_t v[6] = {-3, 0, 7, 32767, -32768, 1};
  ss_array a = {.dtype = SS_DT_I16, .ndim = 2, .shape = {3, 2}, .data = v};
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
  ss_matrix m;
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_OK);
  assert_int_equal(m.rows, 3);
  assert_int_equal(m.cols, 2);
  for (int i = 0; i < 6; i++) assert_true(m.data[i] == (float)v[i]);
  ss_matrix_free(&m);
  /* a 1-D array is one column; and integer labels read from it */
  a.ndim = 1;
  a.shape[0] = 6;
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_OK);
  assert_int_equal(m.rows, 6);
  assert_int_equal(m.cols, 1);
  ss_matrix_free(&m);
  int64_t n;
  int32_t *l;
  assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &l), SS_OK);
  assert_int_equal(n, 6);
  assert_int_equal(l[3], 32767);
  free(l);
  /* 3-D rejected, empty rejected, NaN rejected with row and column */
  a.ndim = 3;
  a.shape[0] = 1;
  a.shape[1] = 2;
  a.shape[2] = 3;
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "expected a 2-D matrix, got 3 dimensions");
  assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, path, "expected a 1-D vector of labels, got 3 dimensions");
  a.ndim = 2;
  a.shape[0] = 0;
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "empty matrix (0 x 2)");
  a.ndim = 1;
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
  assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, path, "no labels");
  ss_test_path(path, sizeof(path), "nan.npy");
  float f[6] = {1, 2, 3, 4, 5, 0};
  f[5] = strtof("nan", NULL);
  ss_array fa = {.dtype = SS_DT_F32, .ndim = 2, .shape = {2, 3}, .data = f};
  assert_int_equal(ss_npy_write(&ctx, path, &fa), SS_OK);
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "row 1, column 2: not finite: nan");
  /* labels: non-integral and out-of-range values */
  f[5] = 2.5f;
  fa.ndim = 1;
  fa.shape[0] = 6;
  assert_int_equal(ss_npy_write(&ctx, path, &fa), SS_OK);
  assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, path, "element 5: not an integer: 2.5");
  int64_t big[2] = {1, 3000000000};
  ss_array ba = {.dtype = SS_DT_I64, .ndim = 1, .shape = {2}, .data = big};
  assert_int_equal(ss_npy_write(&ctx, path, &ba), SS_OK);
  assert_int_equal(ss_labels_read(&ctx, path, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, path, "element 1: out of int32 range: 3000000000");
}

static void csv_dialects(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *texts[] = {
      "x,y,z\n1,2,3\n4,5,6\n",
      "1 2 3\n\n4\t5   6\n",
      "# comment\n  1, 2 ,3\r\n4 ,5,  6\r\n\r\n",
      "\"a\" \"b\" \"c\"\n1.0e0 2 3\n4 5 6.000",
      "1,2 3\n4 5,6\n",
  };
  for (size_t k = 0; k < sizeof(texts) / sizeof(texts[0]); k++) {
    const char *p = ss_test_write_file("d.csv", texts[k]);
    ss_matrix m;
    assert_int_equal(ss_matrix_read(&ctx, p, NULL, &m), SS_OK);
    assert_int_equal(m.rows, 2);
    assert_int_equal(m.cols, 3);
    for (int i = 0; i < 6; i++) assert_true(m.data[i] == (float)(i + 1));
    ss_matrix_free(&m);
  }
  const char *p = ss_test_write_file("lab.csv", "cluster\n3\n-1\n  7  \n");
  int64_t n;
  int32_t *l;
  assert_int_equal(ss_labels_read(&ctx, p, NULL, &n, &l), SS_OK);
  assert_int_equal(n, 3);
  assert_int_equal(l[0], 3);
  assert_int_equal(l[1], -1);
  assert_int_equal(l[2], 7);
  free(l);
}

static void expect_csv_error(const char *text, const char *tail) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *p = ss_test_write_file("bad.csv", text);
  ss_matrix m;
  assert_int_equal(ss_matrix_read(&ctx, p, NULL, &m), SS_ERR_INPUT);
  expect_msg(&ctx, p, tail);
  assert_null(m.data);
}

static void csv_rejections(void **state) {
  (void)state;
  expect_csv_error("a,b,c,d\n1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3,4\n1,2,3\n", "line 7: 3 values, expected 4");
  expect_csv_error("1,2\n3,4\n5,abc\n", "line 3, column 2: not a number: \"abc\"");
  expect_csv_error("1,2\n3,4x\n", "line 2, column 2: not a number: \"4x\"");
  expect_csv_error("1,2\nnan,4\n", "line 2, column 1: not finite: \"nan\"");
  expect_csv_error("1,2\n3,-inf\n", "line 2, column 2: not finite: \"-inf\"");
  expect_csv_error("1,2\n3,1e50\n", "line 2, column 2: out of float32 range: \"1e50\"");
  expect_csv_error("1,,2\n", "line 1, column 2: empty value");
  expect_csv_error("1,2,\n", "line 1, column 3: empty value");
  expect_csv_error("", "no data rows");
  expect_csv_error("x,y\n\n", "no data rows");
  expect_csv_error("x,y\nu,v\n", "line 2, column 1: not a number: \"u\"");
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *p = ss_test_write_file("lab.csv", "1\n2.0\n");
  int64_t n;
  int32_t *l;
  assert_int_equal(ss_labels_read(&ctx, p, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 2, column 1: not an integer: \"2.0\"");
  p = ss_test_write_file("lab.csv", "1\n2 3\n");
  assert_int_equal(ss_labels_read(&ctx, p, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 2: 2 values, expected 1");
  p = ss_test_write_file("lab.csv", "1\n4000000000\n");
  assert_int_equal(ss_labels_read(&ctx, p, NULL, &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, p, "line 2, column 1: out of int32 range: \"4000000000\"");
  ss_matrix m;
  p = ss_test_write_file("m.xlsx", "1\n");
  assert_int_equal(ss_matrix_read(&ctx, p, NULL, &m), SS_ERR_USAGE);
  expect_msg(&ctx, p, "unknown file type (expected .npy, .h5, .hdf5, .csv or .txt)");
  char missing[512];
  ss_test_path(missing, sizeof(missing), "missing.csv");
  assert_int_equal(ss_matrix_read(&ctx, missing, NULL, &m), SS_ERR_IO);
  expect_msg(&ctx, missing, "cannot open: No such file or directory");
}

/* A file with the datasets the HDF5 tests need, made with the HDF5 API directly. */
static void make_h5(const char *path) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t d2[2] = {2, 3}, d3[3] = {1, 2, 3}, d1[1] = {2};
  int16_t iv[6] = {1, -2, 3, -4, 5, -6};
  double dv[6] = {1, 2, 3, 4, 5, 1.0 / 0.0};
  hid_t s2 = H5Screate_simple(2, d2, NULL), s3 = H5Screate_simple(3, d3, NULL), s1 = H5Screate_simple(1, d1, NULL);
  hid_t ds = H5Dcreate2(f, "ints", H5T_STD_I16LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, iv);
  H5Dclose(ds);
  ds = H5Dcreate2(f, "doubles", H5T_IEEE_F64LE, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, dv);
  H5Dclose(ds);
  ds = H5Dcreate2(f, "cube", H5T_IEEE_F32LE, s3, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(ds);
  hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, 8);
  ds = H5Dcreate2(f, "names", str, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(ds);
  H5Tclose(str);
  H5Gclose(H5Gcreate2(f, "group", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  H5Sclose(s1);
  H5Sclose(s2);
  H5Sclose(s3);
  H5Fclose(f);
}

static void hdf5_reads_and_rejections(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char path[512];
  ss_test_path(path, sizeof(path), "many.h5");
  make_h5(path);
  ss_matrix m;
  assert_int_equal(ss_matrix_read(&ctx, path, "ints", &m), SS_OK);
  assert_int_equal(m.rows, 2);
  assert_int_equal(m.cols, 3);
  assert_true(m.data[5] == -6.0f);
  ss_matrix_free(&m);
  int64_t n;
  int32_t *l;
  assert_int_equal(ss_labels_read(&ctx, path, "ints", &n, &l), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'ints': expected a 1-D vector of labels, got 2 dimensions");
  assert_int_equal(ss_matrix_read(&ctx, path, "doubles", &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'doubles': row 1, column 2: not finite: inf");
  assert_int_equal(ss_matrix_read(&ctx, path, "cube", &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'cube': expected 1 or 2 dimensions, got 3");
  assert_int_equal(ss_matrix_read(&ctx, path, "names", &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'names': not numeric (HDF5 string type)");
  assert_int_equal(ss_matrix_read(&ctx, path, "group", &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'group': not found");
  assert_int_equal(ss_matrix_read(&ctx, path, "missing", &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "dataset 'missing': not found");
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &m), SS_ERR_INPUT);
  expect_msg(&ctx, path, "4 datasets at the root ('cube', 'doubles', 'ints', 'names'): name one with --dataset");
  const char *p = ss_test_write_file("fake.h5", "not hdf5 at all");
  assert_int_equal(ss_matrix_read(&ctx, p, NULL, &m), SS_ERR_INPUT);
  expect_msg(&ctx, p, "not an HDF5 file");
}

static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
  closedir(d);
  return n;
}

static void writes_are_atomic(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char dir[512], path[600];
  ss_test_path(dir, sizeof(dir), "out");
  assert_int_equal(mkdir(dir, 0700), 0);
  ss_matrix m = random_matrix(4, 3, 3);
  const char *names[] = {"x.npy", "x.h5", "x.csv"};
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof(path), "%s/missing/%s", dir, names[k]);
    assert_int_equal(ss_matrix_write(&ctx, path, NULL, &m), SS_ERR_IO);
    assert_int_equal(dir_entries(dir), 0);
    int32_t l[2] = {1, 2};
    assert_int_equal(ss_labels_write(&ctx, path, NULL, 2, l), SS_ERR_IO);
    assert_int_equal(dir_entries(dir), 0);
  }
  snprintf(path, sizeof(path), "%s/missing/x.h5", dir);
  assert_int_equal(ss_matrix_write(&ctx, path, NULL, &m), SS_ERR_IO);
  expect_msg(&ctx, path, "cannot create the HDF5 file");
  /* a successful write leaves exactly the final name */
  for (int k = 0; k < 3; k++) {
    snprintf(path, sizeof(path), "%s/%s", dir, names[k]);
    assert_int_equal(ss_matrix_write(&ctx, path, NULL, &m), SS_OK);
    assert_int_equal(dir_entries(dir), k + 1);
  }
  ss_matrix_free(&m);
}

/* The streaming CSV reader on a moderately large file (growing buffers, many lines). */
static void csv_large(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_matrix m = random_matrix(20000, 40, 4);
  char path[512];
  ss_test_path(path, sizeof(path), "large.csv");
  assert_int_equal(ss_matrix_write(&ctx, path, NULL, &m), SS_OK);
  ss_matrix r;
  assert_int_equal(ss_matrix_read(&ctx, path, NULL, &r), SS_OK);
  assert_int_equal(r.rows, 20000);
  assert_int_equal(r.cols, 40);
  assert_memory_equal(r.data, m.data, sizeof(float) * 20000 * 40);
  ss_matrix_free(&r);
  ss_matrix_free(&m);
}

int main(void) {
  seed = (uint64_t)time(NULL);
  printf("test_matrix: seed %llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matrix_round_trip_every_format),
      cmocka_unit_test(labels_round_trip_every_format),
      cmocka_unit_test(npy_dtypes_and_shapes),
      cmocka_unit_test(csv_dialects),
      cmocka_unit_test(csv_rejections),
      cmocka_unit_test(hdf5_reads_and_rejections),
      cmocka_unit_test(writes_are_atomic),
      cmocka_unit_test(csv_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
