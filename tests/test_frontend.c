/* test_frontend.c — the front-end driver and `spikestream detect` on a simulated recording:
 * chunk-size independence (acceptance 3), masks 1 on the peak channel and 0 on dead channels
 * (acceptance 4 at the driver level; the exact component rule is tested in test_detect), thread
 * independence, results.h5 layout, KlustaKwik files and CLI error messages. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "io/source.h"
#include "params/params.h"
#include "params/probe.h"
#include "drivers/frontend.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define RATE 20000.0
#define DURATION 8.0
#define DEAD_CHANNEL 5

static char bin_path[4096];
static ss_probe probe; /* channel DEAD_CHANNEL marked dead */

static ss_sim_config sim;

static int group_setup(void **state) {
  (void)state;
  sim = ss_test_sim_config(DURATION, RATE, 5);
  if (ss_test_simulate(PROBE, 40.0, &sim, SS_SIM_FORMAT_BINARY, "sim.bin", bin_path, sizeof(bin_path), &probe))
    return -1;
  probe.connected[ss_probe_contact_of_channel(&probe, DEAD_CHANNEL)] = 0;
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  ss_probe_free(&probe);
  return 0;
}

static void run_frontend(double chunk_s, int threads, ss_spikes *out) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  p.io.chunk_s = chunk_s;
  ss_source_spec spec = ss_test_binary_spec(bin_path, &sim, 32);
  ss_source *src;
  ss_backend be;
  ss_frontend_model model;
  if (ss_source_open(&ctx, &spec, &src) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_CPU, 0, threads, &be), SS_OK);
  if (ss_frontend_run(&ctx, &be, &p, src, &probe, NULL, out, &model) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(model.n_truncated, 0);
  assert_int_equal(model.pca.n_wave, 20); /* 0.5 + 0.5 ms at 20 kHz */
  ss_frontend_model_free(&model);
  ss_backend_close(&be);
  ss_source_close(src);
}

static double rel_diff(float a, float b) { return fabs((double)a - b) / (1.0 + fmax(fabs(a), fabs(b))); }

/* Acceptance 3: 0.25 s, 1 s and 4 s chunks (and 1 or 2 threads) give the same spikes and features. */
static void chunk_size_independence(void **state) {
  (void)state;
  ss_spikes ref, other;
  run_frontend(1.0, 1, &ref);
  assert_true(ref.n > 100);
  const double chunks[] = {0.25, 4.0, 1.0};
  const int threads[] = {1, 1, 2};
  for (int k = 0; k < 3; k++) {
    run_frontend(chunks[k], threads[k], &other);
    assert_int_equal(other.n, ref.n);
    const int F = ref.n_channels * ref.n_pcs;
    double worst = 0;
    for (int64_t i = 0; i < ref.n; i++) {
      assert_int_equal(other.time_samples[i], ref.time_samples[i]);
      assert_true(fabs(other.time_fraction[i] - ref.time_fraction[i]) <= 1e-5);
      assert_int_equal(other.peak_channel[i], ref.peak_channel[i]);
      for (int j = 0; j < F; j++) worst = fmax(worst, rel_diff(other.features[i * F + j], ref.features[i * F + j]));
      for (int c = 0; c < ref.n_channels; c++)
        assert_true(fabs(other.masks[i * ref.n_channels + c] - ref.masks[i * ref.n_channels + c]) <= 1e-5);
    }
    if (worst > 1e-5) fail_msg("chunk %g s: features differ by %g", chunks[k], worst);
    ss_spikes_free(&other);
  }
  /* acceptance 4 at the driver level: 1 on the peak channel, 0 on the dead one, within [0, 1];
   * times sorted and inside the recording */
  for (int64_t i = 0; i < ref.n; i++) {
    const float *m = ref.masks + i * ref.n_channels;
    assert_true(m[ref.peak_channel[i]] == 1.0f);
    assert_true(m[DEAD_CHANNEL] == 0.0f);
    assert_int_not_equal(ref.peak_channel[i], DEAD_CHANNEL);
    for (int c = 0; c < ref.n_channels; c++) assert_true(m[c] >= 0.0f && m[c] <= 1.0f);
    assert_true(ref.time_fraction[i] >= -0.5f && ref.time_fraction[i] < 0.5f);
    assert_true(ref.amplitude[i] < 0);
    if (i > 0) assert_true(ref.time_samples[i] >= ref.time_samples[i - 1]);
  }
  assert_true(ref.time_samples[0] >= 0 && ref.time_samples[ref.n - 1] < (int64_t)(DURATION * RATE));
  ss_spikes_free(&ref);
}

static int64_t h5_len(hid_t f, const char *path, int64_t *cols) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  if (d < 0) return -1;
  hid_t s = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  int rank = H5Sget_simple_extent_dims(s, dims, NULL);
  H5Sclose(s);
  H5Dclose(d);
  if (cols) *cols = rank == 2 ? (int64_t)dims[1] : 0;
  return (int64_t)dims[0];
}

static void cli_detect(void **state) {
  (void)state;
  char dir[4096], args[12000], path[4200];
  ss_test_path(dir, sizeof(dir), "out");
  snprintf(args, sizeof(args),
           "detect '%s' --format binary --channels 32 --rate 20000 --probe '%s' --threads 2 -q -o '%s'", bin_path,
           PROBE, dir);
  char *out, *err;
  int code = ss_test_run_cli(args, &out, &err);
  if (code != 0) fail_msg("exit %d: %s", code, err);
  free(out);
  free(err);
  snprintf(path, sizeof(path), "%s/results.h5", dir);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  int64_t cols = 0, n = h5_len(f, "/spikes/time_samples", NULL);
  assert_true(n > 100);
  assert_int_equal(h5_len(f, "/spikes/time_fraction", NULL), n);
  assert_int_equal(h5_len(f, "/spikes/peak_channel", NULL), n);
  assert_int_equal(h5_len(f, "/spikes/amplitude", NULL), n);
  assert_int_equal(h5_len(f, "/features", &cols), n);
  assert_int_equal(cols, 96);
  assert_int_equal(h5_len(f, "/masks", &cols), n);
  assert_int_equal(cols, 32);
  hid_t d = H5Dopen2(f, "/spikes/time_samples", H5P_DEFAULT);
  hid_t t = H5Dget_type(d);
  assert_true(H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 8);
  H5Tclose(t);
  H5Dclose(d);
  double rate = 0;
  hid_t a = H5Aopen(f, "sample_rate", H5P_DEFAULT);
  H5Aread(a, H5T_NATIVE_DOUBLE, &rate);
  H5Aclose(a);
  assert_true(rate == RATE);
  assert_true(H5Aexists(f, "n_channels") > 0 && H5Aexists(f, "version") > 0);
  assert_true(H5Lexists(f, "/params", H5P_DEFAULT) > 0);
  H5Fclose(f);
  /* KlustaKwik: header 96, n rows; fmask repeats each channel's mask over its 3 features */
  snprintf(path, sizeof(path), "%s/sim.fmask.1", dir);
  FILE *fm = fopen(path, "r");
  assert_non_null(fm);
  int header = 0;
  assert_int_equal(fscanf(fm, "%d", &header), 1);
  assert_int_equal(header, 96);
  int64_t rows = 0;
  float v[96];
  for (;;) {
    int got = 0;
    for (int j = 0; j < 96 && fscanf(fm, "%f", &v[j]) == 1; j++) got++;
    if (got == 0) break;
    assert_int_equal(got, 96);
    for (int c = 0; c < 32; c++) assert_true(v[3 * c] == v[3 * c + 1] && v[3 * c] == v[3 * c + 2]);
    rows++;
  }
  fclose(fm);
  assert_int_equal(rows, n);
}

static void cli_errors(void **state) {
  (void)state;
  char *out, *err;
  assert_int_equal(ss_test_run_cli("detect /nonexistent.nwb", &out, &err), 2);
  assert_non_null(strstr(err, "spikestream detect: -o DIR is required"));
  free(out);
  free(err);
  assert_int_equal(ss_test_run_cli("detect -o /tmp/x", &out, &err), 2);
  assert_non_null(strstr(err, "expected one input recording"));
  free(out);
  free(err);
  assert_int_equal(ss_test_run_cli("detect a b --threads 0 -o /tmp/x", &out, &err), 2);
  assert_non_null(strstr(err, "--threads: expected an integer in [1, 1024], got \"0\""));
  free(out);
  free(err);
  char args[8300];
  snprintf(args, sizeof(args), "detect '%s' --format binary --channels 32 --rate 20000 --probe '%s' -q -o /tmp/x",
           bin_path, SS_SOURCE_DIR "/params/probes/tetrode.json");
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  assert_non_null(strstr(err, "spikestream detect: probe tetrode: has 4 channels, the recording 32"));
  free(out);
  free(err);
  assert_int_equal(ss_test_run_cli("detect --help", &out, &err), 0);
  assert_non_null(strstr(out, "usage: spikestream detect INPUT -o DIR"));
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(chunk_size_independence),
      cmocka_unit_test(cli_detect),
      cmocka_unit_test(cli_errors),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
