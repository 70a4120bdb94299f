/* test_bad_input.c — the command line on malformed or hostile inputs: each case spawns the binary and
 * checks the promised exit code (1 bad input, 2 usage) and the one line naming the file or option,
 * the field and the offending value as written. Inputs are generated here, small. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "io/nwb_write.h"
#include "ss_test.h"

#define NWB_C 4
#define NWB_N 3000

/* Run `args`; assert the exit code and that stderr holds `want` (a substring). */
static void expect_cli(const char *args, int code, const char *want) {
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != code || !strstr(err, want))
    fail_msg("spikestream %s: exit %d (expected %d), stderr:\n%s\nexpected to contain:\n%s", args, rc, code, err, want);
  free(out), free(err);
}

static void knn_header_sizes(void **state) {
  (void)state;
  char args[1024], want[1024];
  const char *big = ss_test_write_file("dim_max.csv", "2,0,2,9223372036854775807\n1,2,0\n3,4,1\n");
  snprintf(args, sizeof(args), "knn '%s' -o -", big);
  snprintf(want, sizeof(want),
           "spikestream knn: %s: line 1: header: dim: expected an integer in [1, 65536], got "
           "\"9223372036854775807\"\n",
           big);
  expect_cli(args, 1, want);
  const char *digits = ss_test_write_file("digits.csv", "2,12345678901234567890123,2,2\n1,2,0\n3,4,1\n");
  snprintf(args, sizeof(args), "knn '%s' -o -", digits);
  snprintf(want, sizeof(want),
           "%s: line 1: header: newels: expected an integer in [0, 1000000000000], got "
           "\"12345678901234567890123\"",
           digits);
  expect_cli(args, 1, want);
}

static void knn_generate_sizes(void **state) {
  (void)state;
  expect_cli("knn --generate 1 0 1 9223372036854775807 -o -", 2,
             "spikestream knn: --generate: DIM: expected an integer in [1, 65536], got \"9223372036854775807\"\n");
  expect_cli("knn --generate 12345678901234567890123 0 1 2 -o -", 2,
             "--generate: N_TRAIN: expected an integer in [1, 1000000000000], got \"12345678901234567890123\"");
  expect_cli("knn --generate 4611686018427387904 4611686018427387904 1 2 -o -", 2, "--generate: N_TRAIN");
}

/* Non-finite numbers are refused by the shared option parser, for every command that uses it. */
static void numbers_finite(void **state) {
  (void)state;
  expect_cli("replay x.nwb --to - --speed inf", 2,
             "spikestream replay: --speed: expected a number >= 0, got \"inf\"\n");
  expect_cli("sort x.bin --format binary --channels 4 --rate inf -o o", 2,
             "spikestream sort: --rate: expected a number >= 1e-09, got \"inf\"\n");
}

static void compare_window(void **state) {
  (void)state;
  const char *bad[] = {"1e300", "nan", "inf", "-0.5", "1000.5"};
  for (int i = 0; i < 5; i++) {
    char args[256], want[256];
    snprintf(args, sizeof(args), "compare a.h5 b.h5 --window-ms %s", bad[i]);
    snprintf(want, sizeof(want), "spikestream compare: --window-ms: expected a number in [0, 1000] (ms), got \"%s\"\n",
             bad[i]);
    expect_cli(args, 2, want);
  }
}

/* A small valid NWB recording (4 channels with positions, 0.1 s at 30 kHz). */
static void write_nwb(const char *path) {
  static int16_t samples[NWB_N * NWB_C];
  static const double x[NWB_C] = {0, 20, 0, 20}, y[NWB_C] = {0, 0, 20, 20};
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_nwb_meta m = {.rate_hz = 30000, .n_channels = NWB_C, .conversion = 1e-6, .channel_x = x, .channel_y = y};
  ss_nwb_writer *w;
  assert_int_equal(ss_nwb_writer_open(&ctx, path, &m, &w), SS_OK);
  assert_int_equal(ss_nwb_writer_append(&ctx, w, samples, NWB_N), SS_OK);
  assert_int_equal(ss_nwb_writer_close(&ctx, w), SS_OK);
}

static void nwb_rate_out_of_range(void **state) {
  (void)state;
  char path[512], args[2048], want[1024];
  ss_test_path(path, sizeof(path), "rate.nwb");
  write_nwb(path);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/acquisition/ElectricalSeries/starting_time", H5P_DEFAULT),
        a = H5Aopen(d, "rate", H5P_DEFAULT);
  double rate = 1e300;
  assert_true(H5Awrite(a, H5T_NATIVE_DOUBLE, &rate) >= 0);
  H5Aclose(a), H5Dclose(d), H5Fclose(f);
  char out[512];
  ss_test_path(out, sizeof(out), "rate_out");
  snprintf(args, sizeof(args), "sort -q '%s' -o '%s'", path, out);
  snprintf(want, sizeof(want),
           "spikestream sort: %s: /acquisition/ElectricalSeries/starting_time: attribute rate: "
           "expected a sampling rate in [1, 1e+06] Hz, got 1e+300\n",
           path);
  expect_cli(args, 1, want);
}

static void nwb_electrodes_not_fitting(void **state) {
  (void)state;
  char path[512], args[2048], want[1024];
  ss_test_path(path, sizeof(path), "electrodes.nwb");
  write_nwb(path);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/acquisition/ElectricalSeries/electrodes", H5P_DEFAULT);
  int64_t rows[NWB_C] = {0, 1, 2, 40};
  assert_true(H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
  H5Dclose(d), H5Fclose(f);
  char out[512];
  ss_test_path(out, sizeof(out), "electrodes_out");
  snprintf(args, sizeof(args), "sort -q '%s' -o '%s'", path, out);
  snprintf(want, sizeof(want),
           "spikestream sort: %s: /acquisition/ElectricalSeries/electrodes: channel 3: row 40 is "
           "outside the electrodes table (4 rows)\n",
           path);
  expect_cli(args, 1, want);
}

/* A global heap object whose size was mutated (a fuzzing reproducer) crashes libhdf5 1.10 inside
 * H5Aread; the file is read first in a child process, so the command refuses it with one line. */
static void nwb_corrupt_global_heap(void **state) {
  (void)state;
  char args[1024], want[600];
  snprintf(args, sizeof(args), "inspect '%s'", SS_SOURCE_DIR "/fuzz/corpus/nwb/global-heap-object-size.nwb");
  snprintf(want, sizeof(want),
           "spikestream inspect: %s: ", SS_SOURCE_DIR "/fuzz/corpus/nwb/global-heap-object-size.nwb");
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  int lines = 0;
  for (const char *c = err; *c; c++) lines += *c == '\n';
  if (rc != 1 || lines != 1 || strncmp(err, want, strlen(want)) != 0) fail_msg("exit %d, stderr:\n%s", rc, err);
  free(out), free(err);
}

/* Every computing command bounds --threads to [1, 1024] (0 is refused: leaving the option out means
 * all cores); an unbounded value overflowed libgomp's stack or was truncated to int. */
static void threads_bounded(void **state) {
  (void)state;
  const char *cmds[] = {"cluster in", "kmeans in.npy -o out", "knn in.csv -o -", "sort in.nwb -o out",
                        "detect in.nwb -o out"};
  const char *bad[] = {"100000", "4294967295", "-1", "0", "2x", ""};
  for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++)
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
      char name[16], args[256], want[256];
      sscanf(cmds[c], "%15s", name);
      snprintf(args, sizeof(args), "%s --threads '%s'", cmds[c], bad[i]);
      snprintf(want, sizeof(want), "spikestream %s: --threads: expected an integer in [1, 1024], got \"%s\"\n", name,
               bad[i]);
      expect_cli(args, 2, want);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(knn_header_sizes),      cmocka_unit_test(knn_generate_sizes),
      cmocka_unit_test(numbers_finite),        cmocka_unit_test(compare_window),
      cmocka_unit_test(nwb_rate_out_of_range), cmocka_unit_test(nwb_electrodes_not_fitting),
      cmocka_unit_test(threads_bounded),       cmocka_unit_test(nwb_corrupt_global_heap),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
