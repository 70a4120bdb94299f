/* test_phy.c — the phy folder's raw data, shanks, whitening files and amplitude scale: `sort` of a
 * simulated NWB copies the samples into recording.dat, of a flat binary points params.py at the file,
 * and `inspect --check-phy` catches a truncated or missing raw file and unusable params.py values. */
#define _XOPEN_SOURCE 700 /* realpath, truncate */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "build_config.h"
#include "io/npy.h"
#include "io/phy.h"
#include "io/source.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define C 32
#define PATH_LEN 4096
#define ARGS_LEN (8 * PATH_LEN)

static char nwb_path[PATH_LEN], bin_path[PATH_LEN], shank_probe[PATH_LEN];
static ss_sim_config sim;

/* The two-column probe's positions on two shanks of 16 channels. */
static void write_two_shank_probe(void) {
  ss_test_path(shank_probe, sizeof(shank_probe), "two_shanks.json");
  FILE *f = fopen(shank_probe, "w");
  fputs("{\"name\": \"two shanks\", \"channels\": [", f);
  for (int c = 0; c < C; c++) fprintf(f, "%s%d", c ? ", " : "", c);
  fputs("], \"positions\": [", f);
  for (int c = 0; c < C; c++) fprintf(f, "%s[%d, %d]", c ? ", " : "", (c % 2) * 20, c * 10);
  fputs("], \"shanks\": [", f);
  for (int c = 0; c < C; c++) fprintf(f, "%s%d", c ? ", " : "", c / 16);
  fputs("]}\n", f);
  fclose(f);
}

static int group_setup(void **state) {
  (void)state;
  sim = ss_test_sim_units(8.0, 3, 20, 5);
  write_two_shank_probe();
  if (ss_test_simulate(PROBE, 40.0, &sim, SS_SIM_FORMAT_NWB, "sim.nwb", nwb_path, sizeof(nwb_path), NULL)) return -1;
  return ss_test_simulate(PROBE, 40.0, &sim, SS_SIM_FORMAT_BINARY, "simb.bin", bin_path, sizeof(bin_path), NULL);
}

static char *cli(const char *args, int want, char **err_keep) {
  char *out, *err;
  int code = ss_test_run_cli(args, &out, &err);
  if (code != want)
    fail_msg("spikestream %s: exit %d (expected %d)\nstdout: %s\nstderr: %s", args, code, want, out, err);
  if (err_keep) *err_keep = err;
  else free(err);
  return out;
}

static void sort_into(const char *input, const char *name, const char *extra, char *dir, size_t len) {
  char args[ARGS_LEN];
  ss_test_path(dir, len, name);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --check %s", input, dir, extra);
  free(cli(args, 0, NULL));
}

static void load_npy(const char *dir, const char *name, ss_array *a) {
  char path[2 * PATH_LEN];
  snprintf(path, sizeof(path), "%s/phy/%s", dir, name);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_npy_read(&ctx, path, a) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

static int64_t file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

/* Rows [start, start + n) of `raw` (n_rows × C) equal the source's core samples of that chunk. */
static void expect_chunk(ss_source *src, int64_t i, const int16_t *raw, int64_t n_rows) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_chunk c;
  if (ss_source_chunk(&ctx, src, i, &c) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_true(c.start + c.n <= n_rows);
  if (memcmp(raw + c.start * C, c.data + (size_t)c.left * C, (size_t)c.n * C * sizeof(int16_t)) != 0)
    fail_msg("recording.dat differs from the source in chunk %lld", (long long)i);
}

/* recording.dat holds the source's samples: whole size, first and last chunk. */
static void expect_recording(const char *dir, const ss_source_spec *spec) {
  char path[2 * PATH_LEN];
  snprintf(path, sizeof(path), "%s/phy/recording.dat", dir);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  if (ss_source_open(&ctx, spec, &src) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  const int64_t S = ss_source_get_info(src)->n_samples;
  assert_int_equal(file_size(path), S * C * 2);
  int64_t rows = 0;
  int16_t *raw = ss_test_read_rows(path, C, &rows);
  assert_non_null(raw);
  assert_int_equal(rows, S);
  assert_int_equal(ss_source_configure(&ctx, src, 30000, 0, 0), SS_OK);
  expect_chunk(src, 0, raw, rows);
  expect_chunk(src, ss_source_n_chunks(src) - 1, raw, rows);
  free(raw);
  ss_source_close(src);
}

static void expect_params(const char *dir, const char *dat_line) {
  char path[2 * PATH_LEN];
  snprintf(path, sizeof(path), "%s/phy/params.py", dir);
  char *text = ss_test_slurp(path);
  const char *want[] = {dat_line,         "\nn_channels_dat = 32\n", "\ndtype = 'int16'\n",
                        "\noffset = 0\n", "\nsample_rate = 30000\n", "\nhp_filtered = False\n"};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
    if (!strstr(text, want[i])) fail_msg("params.py lacks \"%s\":\n%s", want[i], text);
  free(text);
}

/* whitening_mat(_inv).npy: float64 identity [C × C]. */
static void expect_whitening(const char *dir) {
  const char *names[] = {"whitening_mat.npy", "whitening_mat_inv.npy"};
  for (int i = 0; i < 2; i++) {
    ss_array a;
    load_npy(dir, names[i], &a);
    assert_int_equal(a.dtype, SS_DT_F64);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], C);
    assert_int_equal(a.shape[1], C);
    const double *m = a.data;
    for (int r = 0; r < C; r++)
      for (int c = 0; c < C; c++) assert_true(m[r * C + c] == (r == c ? 1.0 : 0.0));
    ss_array_free(&a);
  }
}

/* /spikes/amplitude of results.h5 (n floats, malloc'd). */
static float *results_amplitudes(const char *dir, int64_t n) {
  char path[2 * PATH_LEN];
  snprintf(path, sizeof(path), "%s/results.h5", dir);
  float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, "/spikes/amplitude", H5P_DEFAULT);
  assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

/* phylib's get_amplitudes_true with identity whitening: amplitude × peak-to-peak of the spike's template
 * on its largest channel; it must give |/spikes/amplitude| in µV. */
static void expect_true_amplitudes(const char *dir) {
  ss_array am, tp, st;
  load_npy(dir, "amplitudes.npy", &am);
  load_npy(dir, "templates.npy", &tp);
  load_npy(dir, "spike_templates.npy", &st);
  const int64_t N = am.shape[0], W = tp.shape[1];
  assert_int_equal(tp.shape[2], C);
  float *uv = results_amplitudes(dir, N);
  const float *a = am.data, *t = tp.data;
  const int32_t *k = st.data;
  for (int64_t i = 0; i < N; i++) {
    double ptp = 0;
    for (int c = 0; c < C; c++) {
      double lo = INFINITY, hi = -INFINITY;
      for (int64_t w = 0; w < W; w++) {
        double v = t[((size_t)k[i] * W + w) * C + c];
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
      }
      ptp = hi - lo > ptp ? hi - lo : ptp;
    }
    if (fabs(a[i] * ptp - fabs(uv[i])) > 1e-4 * fabs(uv[i]) + 1e-6)
      fail_msg("spike %lld: amplitude %g × template ptp %g != %g µV", (long long)i, a[i], ptp, fabs(uv[i]));
  }
  free(uv);
  ss_array_free(&am);
  ss_array_free(&tp);
  ss_array_free(&st);
}

/* NWB (chunked, as simulate writes it): raw copy in the folder; shanks from the probe. */
static void nwb_input(void **state) {
  (void)state;
  char dir[PATH_LEN], extra[PATH_LEN + 16];
  snprintf(extra, sizeof(extra), "--probe '%s'", shank_probe);
  sort_into(nwb_path, "nwb", extra, dir, sizeof(dir));
  ss_source_spec spec = {.path = nwb_path};
  expect_recording(dir, &spec);
  expect_params(dir, "\ndat_path = 'recording.dat'\n");
  ss_array sh;
  load_npy(dir, "channel_shanks.npy", &sh);
  assert_int_equal(sh.dtype, SS_DT_I32);
  assert_int_equal(sh.shape[0], C);
  for (int c = 0; c < C; c++) assert_int_equal(((int32_t *)sh.data)[c], c / 16);
  ss_array_free(&sh);
  expect_whitening(dir);
  expect_true_amplitudes(dir);
}

/* Flat binary: params.py names the file itself (absolute), no copy; an extension phylib does not map
 * gets the copy, which then holds the file's samples. */
static void binary_input(void **state) {
  (void)state;
  char dir[PATH_LEN], line[2 * PATH_LEN], path[2 * PATH_LEN];
  sort_into(bin_path, "bin", "--channels 32 --rate 30000", dir, sizeof(dir));
  char *abs = realpath(bin_path, NULL);
  snprintf(line, sizeof(line), "\ndat_path = '%s'\n", abs);
  free(abs);
  expect_params(dir, line);
  snprintf(path, sizeof(path), "%s/phy/recording.dat", dir);
  assert_int_equal(access(path, F_OK), -1);
  expect_whitening(dir);
  expect_true_amplitudes(dir);
  char odd[PATH_LEN], args[ARGS_LEN];
  ss_test_path(odd, sizeof(odd), "simb.i16");
  snprintf(args, sizeof(args), "cp '%s' '%s'", bin_path, odd);
  assert_int_equal(system(args), 0);
  sort_into(odd, "odd", "--format binary --channels 32 --rate 30000", dir, sizeof(dir));
  expect_params(dir, "\ndat_path = 'recording.dat'\n");
  ss_source_spec spec = ss_test_binary_spec(odd, &sim, C);
  expect_recording(dir, &spec);
}

static void expect_check_error(const char *dir, const char *text) {
  char args[ARGS_LEN], *err;
  snprintf(args, sizeof(args), "inspect --check-phy '%s'", dir);
  free(cli(args, 1, &err));
  if (!strstr(err, text)) fail_msg("inspect --check-phy: expected \"%s\" in:\n%s", text, err);
  free(err);
}

/* A truncated or missing recording.dat and a bad params.py value fail the check, naming the file. */
static void check_catches(void **state) {
  (void)state;
  char src[PATH_LEN], dir[PATH_LEN], args[ARGS_LEN], dat[2 * PATH_LEN];
  ss_test_path(src, sizeof(src), "nwb");
  ss_test_path(dir, sizeof(dir), "broken_phy");
  snprintf(args, sizeof(args), "rm -rf '%s' && cp -r '%s/phy' '%s'", dir, src, dir);
  assert_int_equal(system(args), 0);
  snprintf(dat, sizeof(dat), "%s/recording.dat", dir);
  int64_t size = file_size(dat);
  assert_int_equal(truncate(dat, size - 2 * C), 0); /* one frame short */
  expect_check_error(dir, "recording.dat: ");
  expect_check_error(dir, "expected offset 0 + 240000 frames × 64 bytes (params.py)");
  assert_int_equal(truncate(dat, size / 2 + 1), 0);
  expect_check_error(dir, "not offset 0 + whole frames of n_channels_dat 32");
  expect_check_error(dir, "but spike_times.npy reaches sample");
  assert_int_equal(unlink(dat), 0);
  expect_check_error(dir, "dat_path: ");
  snprintf(args, sizeof(args), "sed -i 's/^sample_rate = .*/sample_rate = fast/' '%s/params.py'", dir);
  assert_int_equal(system(args), 0);
  expect_check_error(dir, "params.py: line 7: sample_rate: cannot use the value fast");
}

/* Which inputs phylib maps in place, with which frame and offset. */
static void raw_locations(void **state) {
  (void)state;
  ss_source_info in = {.format = SS_FORMAT_SPIKEGLX, .dtype = "int16", .n_channels = 384, .n_left_out = 1};
  snprintf(in.path, sizeof(in.path), "/data/run_g0_t0.imec0.ap.meta");
  snprintf(in.data_path, sizeof(in.data_path), "/data/run_g0_t0.imec0.ap.bin");
  ss_source_spec spec = {.byte_offset = 0};
  char dat[PATH_LEN];
  int64_t offset = -1;
  int frame = 0;
  assert_int_equal(ss_phy_raw_location(&in, &spec, dat, sizeof(dat), &offset, &frame), 1);
  assert_string_equal(dat, "/data/run_g0_t0.imec0.ap.bin");
  assert_int_equal(frame, 385);
  assert_int_equal(offset, 0);
  in.format = SS_FORMAT_OPENEPHYS; /* ADC channels left out: their place in the frame is not known here */
  snprintf(in.data_path, sizeof(in.data_path), "/data/continuous.dat");
  assert_int_equal(ss_phy_raw_location(&in, &spec, dat, sizeof(dat), &offset, &frame), 0);
  in.n_left_out = 0;
  assert_int_equal(ss_phy_raw_location(&in, &spec, dat, sizeof(dat), &offset, &frame), 1);
  assert_int_equal(frame, 384);
  in.format = SS_FORMAT_BINARY;
  spec.byte_offset = 512;
  snprintf(in.path, sizeof(in.path), "/data/rec.raw");
  assert_int_equal(ss_phy_raw_location(&in, &spec, dat, sizeof(dat), &offset, &frame), 1);
  assert_string_equal(dat, "/data/rec.raw");
  assert_int_equal(offset, 512);
  snprintf(in.path, sizeof(in.path), "/data.d/rec");
  assert_int_equal(ss_phy_raw_location(&in, &spec, dat, sizeof(dat), &offset, &frame), 0);
  in.format = SS_FORMAT_NWB;
  snprintf(in.path, sizeof(in.path), "/data/rec.nwb");
  assert_int_equal(ss_phy_raw_location(&in, &spec, dat, sizeof(dat), &offset, &frame), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(raw_locations), cmocka_unit_test(nwb_input),
                                     cmocka_unit_test(binary_input), cmocka_unit_test(check_catches)};
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
