/* test_npy.c — .npy round trips for every dtype and rank, the writer's exact header bytes, Fortran
 * order, versions 2.0/3.0, every rejection message, and the atomic-write guarantees. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "io/atomic_file.h"
#include "io/npy.h"
#include "core/rng.h"
#include "ss_test.h"

static uint64_t seed;

/* Write raw bytes to a test file and return its path (static buffer per call slot). */
static const char *write_bytes(const char *name, const void *bytes, size_t n) {
  static char paths[4][512];
  static int slot;
  char *path = paths[slot++ % 4];
  ss_test_path(path, 512, name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(bytes, 1, n, f), n);
  fclose(f);
  return path;
}

/* A .npy file from a header dict (padded like numpy, version `major`) and data bytes. */
static const char *write_npy_raw(const char *name, int major, const char *dict, const void *data, size_t n) {
  unsigned char buf[4096];
  size_t prefix = major == 1 ? 10 : 12;
  size_t hlen = strlen(dict) + 1;
  size_t pad = (64 - (prefix + hlen) % 64) % 64;
  memcpy(buf, "\x93NUMPY", 6);
  buf[6] = (unsigned char)major;
  buf[7] = 0;
  size_t total = hlen + pad;
  for (size_t i = 0; i < prefix - 8; i++) buf[8 + i] = (unsigned char)(total >> (8 * i));
  memcpy(buf + prefix, dict, strlen(dict));
  memset(buf + prefix + strlen(dict), ' ', pad);
  buf[prefix + total - 1] = '\n';
  memcpy(buf + prefix + total, data, n);
  return write_bytes(name, buf, prefix + total + n);
}

static void fill_random(ss_array *a, ss_rng *r) {
  size_t bytes = (size_t)ss_array_count(a) * ss_dtype_size(a->dtype);
  unsigned char *p = a->data;
  for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)ss_rng_next_u64(r);
  if (a->dtype == SS_DT_F32)
    for (int64_t i = 0; i < ss_array_count(a); i++) ((float *)a->data)[i] = (float)(ss_rng_next_normal(r) * 100);
  if (a->dtype == SS_DT_F64)
    for (int64_t i = 0; i < ss_array_count(a); i++) ((double *)a->data)[i] = ss_rng_next_normal(r) * 1e10;
}

static void round_trip_every_dtype_and_rank(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, 1);
  const int64_t shapes[4][4] = {{17}, {5, 3}, {2, 3, 4}, {2, 1, 3, 2}};
  char path[512];
  ss_test_path(path, sizeof(path), "rt.npy");
  for (int t = SS_DT_U8; t <= SS_DT_F64; t++) {
    for (int nd = 1; nd <= 4; nd++) {
      ss_array a, b;
      assert_int_equal(ss_array_alloc(&ctx, &a, (ss_dtype)t, nd, shapes[nd - 1]), SS_OK);
      fill_random(&a, &r);
      assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
      assert_int_equal(ss_npy_read(&ctx, path, &b), SS_OK);
      assert_int_equal(b.dtype, t);
      assert_int_equal(b.ndim, nd);
      for (int d = 0; d < nd; d++) assert_int_equal(b.shape[d], a.shape[d]);
      assert_memory_equal(a.data, b.data, (size_t)ss_array_count(&a) * ss_dtype_size(a.dtype));
      /* the header is numpy's: data starts at a multiple of 64 */
      struct stat sb;
      assert_int_equal(stat(path, &sb), 0);
      assert_int_equal(((size_t)sb.st_size - (size_t)ss_array_count(&a) * ss_dtype_size(a.dtype)) % 64, 0);
      ss_array_free(&a);
      ss_array_free(&b);
    }
  }
}

static char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  char *buf = malloc(1 << 16);
  *n = fread(buf, 1, 1 << 16, f);
  fclose(f);
  return buf;
}

/* The exact bytes numpy.save writes (numpy >= 1.24: 21 − digits spare spaces, 64-byte alignment). */
static void writer_header_is_numpys(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char path[512];
  ss_test_path(path, sizeof(path), "hdr.npy");
  float vals[12];
  for (int i = 0; i < 12; i++) vals[i] = (float)i;
  ss_array a = {.dtype = SS_DT_F32, .ndim = 2, .shape = {3, 4}, .data = vals};
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_OK);
  /* 10 prefix + 79 dict + 20 spare + 38 pad + newline = 128 */
  static const char expected[] = "\x93NUMPY\x01\x00\x76\x00"
                                 "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"
                                 "                    "                      /* 21 - len("3") = 20 */
                                 "                                      \n"; /* 38 spaces */
  size_t n;
  char *got = slurp(path, &n);
  assert_int_equal(sizeof(expected) - 1, 128);
  assert_int_equal(n, 128 + sizeof(vals));
  assert_memory_equal(got, expected, 128);
  assert_memory_equal(got + 128, vals, sizeof(vals));
  free(got);

  unsigned char bytes[5] = {1, 2, 3, 250, 255};
  ss_array u = {.dtype = SS_DT_U8, .ndim = 1, .shape = {5}, .data = bytes};
  assert_int_equal(ss_npy_write(&ctx, path, &u), SS_OK);
  static const char expected_u8[] = "\x93NUMPY\x01\x00\x76\x00"
                                    "{'descr': '|u1', 'fortran_order': False, 'shape': (5,), }"
                                    "                    "
                                    "                                        \n"; /* 40 spaces */
  got = slurp(path, &n);
  assert_int_equal(n, 128 + 5);
  assert_memory_equal(got, expected_u8, 128);
  free(got);
}

static void reads_fortran_order(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  /* C-order [[0,1,2],[3,4,5]] stored column-major */
  const double f2[6] = {0, 3, 1, 4, 2, 5};
  const char *p = write_npy_raw("f2.npy", 1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }", f2,
                                sizeof(f2));
  ss_array a;
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_OK);
  for (int i = 0; i < 6; i++) assert_true(((double *)a.data)[i] == (double)i);
  ss_array_free(&a);
  /* 3-D: element [i][j][k] = 100i + 10j + k, shape (2, 3, 4), Fortran: i fastest, then j, then k */
  int16_t f3[24];
  int n = 0;
  for (int k = 0; k < 4; k++)
    for (int j = 0; j < 3; j++)
      for (int i = 0; i < 2; i++) f3[n++] = (int16_t)(100 * i + 10 * j + k);
  p = write_npy_raw("f3.npy", 1, "{'descr': '<i2', 'fortran_order': True, 'shape': (2, 3, 4), }", f3, sizeof(f3));
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_OK);
  n = 0;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 4; k++) assert_int_equal(((int16_t *)a.data)[n++], 100 * i + 10 * j + k);
  ss_array_free(&a);
}

static void reads_versions_and_header_variants(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int64_t v[4] = {-1, 2, -3, 40000000000};
  for (int major = 1; major <= 3; major++) {
    const char *p = write_npy_raw("v.npy", major, "{\"shape\":(4,),\"fortran_order\":False , \"descr\":\"<i8\"}", v,
                                  sizeof(v));
    ss_array a;
    assert_int_equal(ss_npy_read(&ctx, p, &a), SS_OK);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 4);
    assert_memory_equal(a.data, v, sizeof(v));
    ss_array_free(&a);
  }
  /* '=' native order, '>u1' (byte order irrelevant), empty arrays, Python 2 long dims */
  const char *p = write_npy_raw("n.npy", 1, "{'descr': '=u4', 'fortran_order': False, 'shape': (1L, 1L), }", v, 4);
  ss_array a;
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_OK);
  assert_int_equal(a.dtype, SS_DT_U32);
  ss_array_free(&a);
  p = write_npy_raw("b.npy", 1, "{'descr': '>u1', 'fortran_order': False, 'shape': (2,), }", v, 2);
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_OK);
  ss_array_free(&a);
  p = write_npy_raw("e.npy", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }", v, 0);
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_OK);
  assert_int_equal(ss_array_count(&a), 0);
  ss_array_free(&a);
}

static void expect_reject(const char *name, const char *dict, size_t data_bytes, ss_status st, const char *msg_tail) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  static const unsigned char zeros[256];
  const char *p = write_npy_raw(name, 1, dict, zeros, data_bytes);
  ss_array a;
  assert_int_equal(ss_npy_read(&ctx, p, &a), st);
  char expected[1024];
  snprintf(expected, sizeof(expected), "%s: %s", p, msg_tail);
  assert_string_equal(ss_error_message(&ctx), expected);
  assert_null(a.data);
}

static void rejects_bad_headers(void **state) {
  (void)state;
  expect_reject("be.npy", "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, SS_ERR_INPUT,
                "header: descr: big-endian dtype '>f4' is not supported");
  expect_reject("obj.npy", "{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", 16, SS_ERR_INPUT,
                "header: descr: object dtype '|O' is not supported");
  expect_reject("st.npy", "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, SS_ERR_INPUT,
                "header: descr: structured dtypes are not supported");
  expect_reject("c8.npy", "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", 16, SS_ERR_INPUT,
                "header: descr: unsupported dtype '<c8' (supported: u1 i2 i4 i8 u4 u8 f4 f8, little-endian)");
  expect_reject("z.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 4, SS_ERR_INPUT,
                "header: shape: 0-d arrays (shape ()) are not supported");
  expect_reject("5d.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1), }", 4, SS_ERR_INPUT,
                "header: shape: more than 4 dimensions");
  expect_reject("tr.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 40, SS_ERR_INPUT,
                "data: shape (3, 4) of float32 needs 48 bytes, the file holds 40 (truncated)");
  expect_reject("long.npy", "{'descr': '<i2', 'fortran_order': False, 'shape': (3,), }", 8, SS_ERR_INPUT,
                "data: shape (3,) of int16 needs 6 bytes, the file holds 8");
  /* the declared size is checked against the file before anything is allocated */
  expect_reject("huge.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000), }", 0, SS_ERR_INPUT,
                "data: shape (1000000, 1000000) of float64 needs 8000000000000 bytes, the file holds 0 "
                "(truncated)");
  /* a zero dimension does not excuse an element count or byte size that overflows */
  expect_reject("ovf0.npy", "{'descr': '|u1', 'fortran_order': True, 'shape': (0, 4294967296, 2147483648), }", 0,
                SS_ERR_INPUT, "header: shape (0, 4294967296, 2147483648) of uint8: the size in bytes overflows");
  expect_reject("ovf1.npy", "{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 2147483648, 0), }", 0,
                SS_ERR_INPUT, "header: shape (4294967296, 2147483648, 0) of uint8: the size in bytes overflows");
  expect_reject("ovf2.npy", "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 536870912), }", 0,
                SS_ERR_INPUT, "header: shape (4294967296, 536870912) of float64: the size in bytes overflows");
  expect_reject("fo.npy", "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }", 8, SS_ERR_INPUT,
                "header: fortran_order: expected True or False, got \"Maybe, 'shape': (2,)\"");
  expect_reject("mk.npy", "{'descr': '<f4', 'shape': (2,), }", 8, SS_ERR_INPUT, "header: missing key 'fortran_order'");
  expect_reject("uk.npy", "{'descr': '<f4', 'colour': 'red', }", 8, SS_ERR_INPUT, "header: unknown key 'colour'");
  expect_reject("gb.npy", "hello world", 8, SS_ERR_INPUT, "header: expected '{', got \"hello world\"");
  expect_reject("neg.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", 8, SS_ERR_INPUT,
                "header: expected a non-negative integer in 'shape', got \"-2,), }\"");
  expect_reject("tail.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x", 8, SS_ERR_INPUT,
                "header: expected the end of the header after '}', got \"x\"");
}

static void rejects_bad_files(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_array a;
  char msg[1024];
  const char *p = write_bytes("magic.npy", "PK\x03\x04 not numpy", 15);
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: not a .npy file (no \\x93NUMPY magic)", p);
  assert_string_equal(ss_error_message(&ctx), msg);
  p = write_bytes("ver.npy", "\x93NUMPY\x04\x00\x10\x00{}", 12);
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: version: unsupported .npy format version 4.0", p);
  assert_string_equal(ss_error_message(&ctx), msg);
  p = write_bytes("short.npy", "\x93NUMPY\x01\x00\x40\x00{'descr'", 17);
  assert_int_equal(ss_npy_read(&ctx, p, &a), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: header: truncated (expected 64 header bytes)", p);
  assert_string_equal(ss_error_message(&ctx), msg);
  char missing[512];
  ss_test_path(missing, sizeof(missing), "missing.npy");
  assert_int_equal(ss_npy_read(&ctx, missing, &a), SS_ERR_IO);
  snprintf(msg, sizeof(msg), "%s: cannot open: No such file or directory", missing);
  assert_string_equal(ss_error_message(&ctx), msg);
}

/* Names in the test directory that start with `prefix`. */
static int count_entries(const char *dir, const char *prefix) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (!strncmp(e->d_name, prefix, strlen(prefix))) n++;
  closedir(d);
  return n;
}

static void atomic_write_never_leaves_partial_files(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float vals[4096] = {0};
  ss_array a = {.dtype = SS_DT_F32, .ndim = 1, .shape = {4096}, .data = vals};
  char path[512], msg[1024];
  /* nonexistent directory: clean failure, nothing created */
  ss_test_path(path, sizeof(path), "no/such/dir/x.npy");
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_ERR_IO);
  snprintf(msg, sizeof(msg), "%s: cannot create: No such file or directory", path);
  assert_string_equal(ss_error_message(&ctx), msg);
  assert_int_equal(count_entries(ss_test_tmpdir(), "no"), 0);

  /* a write that fails half-way (file size limit): neither the final name nor a temporary remains */
  ss_test_path(path, sizeof(path), "big.npy");
  struct rlimit old, small;
  assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
  small = old;
  small.rlim_cur = 1024;
  void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
  ss_status st = ss_npy_write(&ctx, path, &a);
  assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
  signal(SIGXFSZ, prev);
  assert_int_equal(st, SS_ERR_IO);
  assert_non_null(strstr(ss_error_message(&ctx), "big.npy: write failed: "));
  assert_int_equal(count_entries(ss_test_tmpdir(), "big.npy"), 0);
  assert_int_equal(count_entries(ss_test_tmpdir(), ".big.npy"), 0);

  /* the rename fails (the final name is a directory): the temporary is removed */
  ss_test_path(path, sizeof(path), "isdir.npy");
  assert_int_equal(mkdir(path, 0700), 0);
  char inner[600];
  snprintf(inner, sizeof(inner), "%s/keep", path);
  fclose(fopen(inner, "w"));
  assert_int_equal(ss_npy_write(&ctx, path, &a), SS_ERR_IO);
  assert_non_null(strstr(ss_error_message(&ctx), "isdir.npy: cannot rename the temporary file into place: "));
  assert_int_equal(count_entries(ss_test_tmpdir(), ".isdir.npy"), 0);

  /* abort removes the temporary; commit makes exactly the final name */
  ss_atomic_file af;
  ss_test_path(path, sizeof(path), "ab.txt");
  assert_int_equal(ss_atomic_begin(&ctx, &af, path, 1), SS_OK);
  assert_non_null(strstr(af.tmp_path, "/.ab.txt.tmp."));
  fputs("partial", af.f);
  ss_atomic_abort(&af);
  assert_int_equal(count_entries(ss_test_tmpdir(), ".ab.txt"), 0);
  assert_int_equal(count_entries(ss_test_tmpdir(), "ab.txt"), 0);
  assert_int_equal(ss_atomic_begin(&ctx, &af, path, 1), SS_OK);
  fputs("done", af.f);
  assert_int_equal(count_entries(ss_test_tmpdir(), "ab.txt"), 0);
  assert_int_equal(ss_atomic_commit(&ctx, &af), SS_OK);
  assert_int_equal(count_entries(ss_test_tmpdir(), "ab.txt"), 1);
  assert_int_equal(count_entries(ss_test_tmpdir(), ".ab.txt"), 0);
}

static void array_shape_overflow(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t n = -1;
  const int64_t zero_first[3] = {0, INT64_C(1) << 40, INT64_C(1) << 40};
  assert_false(ss_shape_count(3, zero_first, 1, &n));
  const int64_t fits[2] = {3, 5};
  assert_true(ss_shape_count(2, fits, 8, &n));
  assert_int_equal(n, 15);
  const int64_t bytes[1] = {INT64_C(1) << 61};
  assert_false(ss_shape_count(1, bytes, 8, &n));
  ss_array a;
  assert_int_not_equal(ss_array_alloc(&ctx, &a, SS_DT_U8, 3, zero_first), SS_OK);
}

static void array_conversions(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double d[6] = {1, 2, 3, 4, 1.0 / 0.0, 6};
  ss_array a = {.dtype = SS_DT_F64, .ndim = 2, .shape = {2, 3}, .data = d};
  float *f;
  assert_int_equal(ss_array_to_f32(&ctx, &a, 1, "m.npy", &f), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "m.npy: row 1, column 1: not finite: inf");
  assert_null(f);
  assert_int_equal(ss_array_to_f32(&ctx, &a, 0, "m.npy", &f), SS_OK);
  assert_true(f[5] == 6.0f);
  free(f);
  d[4] = 1e300;
  assert_int_equal(ss_array_to_f32(&ctx, &a, 1, "m.npy", &f), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "m.npy: row 1, column 1: out of float32 range: 1e+300");
  a.ndim = 1;
  a.shape[0] = 6;
  d[4] = 0.0 / 0.0;
  assert_int_equal(ss_array_to_f32(&ctx, &a, 1, "v", &f), SS_ERR_INPUT);
  assert_non_null(strstr(ss_error_message(&ctx), "v: element 4: not finite: "));

  int64_t *i;
  d[4] = 2.5;
  assert_int_equal(ss_array_to_i64(&ctx, &a, "v", &i), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "v: element 4: not an integer: 2.5");
  d[4] = 1e19;
  assert_int_equal(ss_array_to_i64(&ctx, &a, "v", &i), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "v: element 4: out of int64 range: 1e+19");
  d[4] = -5;
  assert_int_equal(ss_array_to_i64(&ctx, &a, "v", &i), SS_OK);
  assert_int_equal(i[4], -5);
  free(i);
  uint64_t u[2] = {7, UINT64_MAX};
  ss_array ua = {.dtype = SS_DT_U64, .ndim = 1, .shape = {2}, .data = u};
  assert_int_equal(ss_array_to_i64(&ctx, &ua, "u", &i), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "u: element 1: out of int64 range: 18446744073709551615");
  int16_t s[3] = {-32768, 0, 32767};
  ss_array sa = {.dtype = SS_DT_I16, .ndim = 1, .shape = {3}, .data = s};
  assert_int_equal(ss_array_to_i64(&ctx, &sa, "s", &i), SS_OK);
  assert_int_equal(i[0], -32768);
  assert_int_equal(i[2], 32767);
  free(i);
  assert_string_equal(ss_dtype_name(SS_DT_U32), "uint32");
  assert_int_equal(ss_dtype_size(SS_DT_I16), 2);
}

int main(void) {
  seed = (uint64_t)time(NULL);
  printf("test_npy: seed %llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(round_trip_every_dtype_and_rank),
      cmocka_unit_test(writer_header_is_numpys),
      cmocka_unit_test(reads_fortran_order),
      cmocka_unit_test(reads_versions_and_header_variants),
      cmocka_unit_test(rejects_bad_headers),
      cmocka_unit_test(rejects_bad_files),
      cmocka_unit_test(atomic_write_never_leaves_partial_files),
      cmocka_unit_test(array_shape_overflow),
      cmocka_unit_test(array_conversions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
