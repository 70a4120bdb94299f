/* test_acquisition_sort.c — one simulated recording written as a SpikeGLX pair, an Open Ephys binary
 * folder and an Intan .rhd, each sorted with no --rate, --channels or --uv-per-step: the same spikes
 * and clusters as the flat-binary sort of those samples with explicit options, at the right rate and
 * channel count. Every container gives the simulation's 0.195 µV per step exactly. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "acq_fixtures.h"
#include "build_config.h"
#include "ss_test.h"

#define RATE 30000
#define NCH 32 /* the simulator's default probe */
#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
/* SpikeGLX: imAiRangeMax / imMaxInt / gain * 1e6 = 0.04992 / 512 / 500 * 1e6 is 0.195 in double */
#define GLX_RANGE "0.04992"
#define GLX_GAIN 500
#define INTAN_BLOCK 60 /* samples per .rhd data block, major version 1 */

typedef struct {
  int16_t *x; /* [n * NCH] time-major, the simulation's int16 samples */
  int64_t n;
  char bin[600];
} rec_t;

static rec_t rec;

/* What a sort wrote: spike and cluster counts, rate and channels attributes, spike times and
 * amplitudes (µV: they show the scale the sort used). */
typedef struct {
  int64_t n_spikes, n_clusters;
  double rate;
  int n_channels;
  int64_t *times;
  float *amps;
} result_t;

static int64_t dim0(hid_t f, const char *name) {
  hid_t d = H5Dopen2(f, name, H5P_DEFAULT);
  if (d < 0) fail_msg("results.h5: %s missing", name);
  hid_t s = H5Dget_space(d);
  hsize_t dims[2] = {0, 0};
  H5Sget_simple_extent_dims(s, dims, NULL);
  H5Sclose(s);
  H5Dclose(d);
  return (int64_t)dims[0];
}

static result_t read_result(const char *dir) {
  char path[700];
  snprintf(path, sizeof(path), "%s/results.h5", dir);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail_msg("%s: cannot open", path);
  result_t r = {.n_spikes = dim0(f, "/spikes/time_samples"), .n_clusters = dim0(f, "/clusters/n_spikes")};
  hid_t a = H5Aopen(f, "sample_rate", H5P_DEFAULT);
  assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_DOUBLE, &r.rate) >= 0);
  H5Aclose(a);
  a = H5Aopen(f, "n_channels", H5P_DEFAULT);
  assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_INT, &r.n_channels) >= 0);
  H5Aclose(a);
  r.times = calloc((size_t)(r.n_spikes ? r.n_spikes : 1), sizeof(int64_t));
  r.amps = calloc((size_t)(r.n_spikes ? r.n_spikes : 1), sizeof(float));
  hid_t d = H5Dopen2(f, "/spikes/time_samples", H5P_DEFAULT);
  assert_true(H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, r.times) >= 0);
  H5Dclose(d);
  d = H5Dopen2(f, "/spikes/amplitude", H5P_DEFAULT);
  assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, r.amps) >= 0);
  H5Dclose(d);
  H5Fclose(f);
  return r;
}

/* `spikestream sort INPUT -o DIR --probe PROBE -q EXTRA`, exit 0 asserted; DIR is fresh. */
static result_t sort(const char *input, const char *name, const char *extra) {
  char dir[512], args[2048], *out, *err;
  ss_test_path(dir, sizeof(dir), name);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --probe '%s' -q %s", input, dir, PROBE, extra);
  int code = ss_test_run_cli(args, &out, &err);
  if (code != 0) fail_msg("%s: exit %d: %s", args, code, err);
  free(out), free(err);
  return read_result(dir);
}

/* The sort of a container agrees with the flat-binary sort `ref`: rate, channels, spikes, clusters,
 * and each spike's time and µV amplitude (the scales are equal in double, so exactly). */
static void same_sort(const result_t *ref, result_t got, const char *what) {
  if (got.rate != RATE || got.n_channels != NCH)
    fail_msg("%s: sample_rate %g, n_channels %d; want %d, %d", what, got.rate, got.n_channels, RATE, NCH);
  if (got.n_spikes != ref->n_spikes || got.n_clusters != ref->n_clusters)
    fail_msg("%s: %lld spikes in %lld clusters; the flat binary gave %lld in %lld", what, (long long)got.n_spikes,
             (long long)got.n_clusters, (long long)ref->n_spikes, (long long)ref->n_clusters);
  for (int64_t i = 0; i < got.n_spikes; i++)
    if (got.times[i] != ref->times[i])
      fail_msg("%s: spike %lld at sample %lld, the flat binary has %lld", what, (long long)i, (long long)got.times[i],
               (long long)ref->times[i]);
  for (int64_t i = 0; i < got.n_spikes; i++)
    if (got.amps[i] != ref->amps[i])
      fail_msg("%s: spike %lld amplitude %.9g uV, the flat binary has %.9g", what, (long long)i, got.amps[i],
               ref->amps[i]);
  free(got.times), free(got.amps);
}

/* ---------------------------------------------------------------- containers */

/* X.ap.bin with a sync channel after the 32 AP channels, and X.ap.meta. */
static void write_spikeglx(char *bin, size_t len) {
  char meta[512], text[8192];
  ss_test_path(bin, len, "glx_g0_t0.imec0.ap.bin");
  ss_test_path(meta, sizeof(meta), "glx_g0_t0.imec0.ap.meta");
  int16_t *d = malloc(sizeof(int16_t) * (size_t)rec.n * (NCH + 1));
  assert_non_null(d);
  for (int64_t t = 0; t < rec.n; t++) {
    memcpy(d + t * (NCH + 1), rec.x + t * NCH, sizeof(int16_t) * NCH);
    d[t * (NCH + 1) + NCH] = (int16_t)(t & 64); /* sync square wave */
  }
  size_t bytes = sizeof(int16_t) * (size_t)rec.n * (NCH + 1);
  write_bytes(bin, d, bytes);
  free(d);
  int k = snprintf(text, sizeof(text),
                   "typeThis=imec\nimSampRate=%d\nnSavedChans=%d\nsnsApLfSy=%d,0,1\nacqApLfSy=%d,%d,1\n"
                   "imAiRangeMax=" GLX_RANGE "\nimAiRangeMin=-" GLX_RANGE "\nimMaxInt=512\n"
                   "snsSaveChanSubset=all\nfileSizeBytes=%zu\n~imroTbl=(0,%d)",
                   RATE, NCH + 1, NCH, NCH, NCH, bytes, NCH);
  for (int c = 0; c < NCH; c++) k += snprintf(text + k, sizeof(text) - (size_t)k, "(%d 0 0 %d 250 1)", c, GLX_GAIN);
  snprintf(text + k, sizeof(text) - (size_t)k, "\n");
  write_bytes(meta, text, strlen(text));
}

/* A folder with structure.oebin: one stream of 32 µV channels (bit_volts 0.195) and an ADC channel. */
static void write_openephys(char *dir, size_t len) {
  char path[1024], json[8192];
  ss_test_path(dir, len, "oe_rec");
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/continuous", dir);
  mkdir(path, 0755);
  snprintf(path, sizeof(path), "%s/continuous/Rhythm_FPGA-100.0", dir);
  mkdir(path, 0755);
  int16_t *d = malloc(sizeof(int16_t) * (size_t)rec.n * (NCH + 1));
  assert_non_null(d);
  for (int64_t t = 0; t < rec.n; t++) {
    memcpy(d + t * (NCH + 1), rec.x + t * NCH, sizeof(int16_t) * NCH);
    d[t * (NCH + 1) + NCH] = 1234;
  }
  snprintf(path, sizeof(path), "%s/continuous/Rhythm_FPGA-100.0/continuous.dat", dir);
  write_bytes(path, d, sizeof(int16_t) * (size_t)rec.n * (NCH + 1));
  free(d);
  int k = snprintf(json, sizeof(json),
                   "{\"GUI version\": \"0.5.5\", \"continuous\": [{\"folder_name\": \"Rhythm_FPGA-100.0/\", "
                   "\"sample_rate\": %d.0, \"num_channels\": %d, \"channels\": [",
                   RATE, NCH + 1);
  for (int c = 0; c < NCH; c++)
    k += snprintf(json + k, sizeof(json) - (size_t)k,
                  "{\"channel_name\": \"CH%d\", \"bit_volts\": 0.195, \"units\": \"uV\"}, ", c + 1);
  snprintf(json + k, sizeof(json) - (size_t)k,
           "{\"channel_name\": \"ADC1\", \"bit_volts\": 0.00015, \"units\": \"V\"}]}], \"events\": [], "
           "\"spikes\": []}");
  snprintf(path, sizeof(path), "%s/structure.oebin", dir);
  write_bytes(path, json, strlen(json));
}

/* An .rhd (major version 1): 60-sample blocks of timestamps from 0 and offset-binary amplifier data.
 * Its fixed 0.195 µV per step is the simulation's, so the samples go in unchanged. */
static void write_intan_rhd(char *path, size_t len) {
  ss_test_path(path, len, "rec.rhd");
  assert_int_equal(rec.n % INTAN_BLOCK, 0);
  bytes_t o = {0};
  put_intan_header(&o, 0, 1, (float)RATE, NCH, 0);
  for (int64_t b = 0; b < rec.n / INTAN_BLOCK; b++) {
    for (int i = 0; i < INTAN_BLOCK; i++) put(&o, (uint32_t)(b * INTAN_BLOCK + i), 4);
    for (int c = 0; c < NCH; c++)
      for (int i = 0; i < INTAN_BLOCK; i++) put(&o, (uint16_t)(rec.x[(b * INTAN_BLOCK + i) * NCH + c] + 32768), 2);
  }
  write_bytes(path, o.b, o.n);
  free(o.b);
}

/* ---------------------------------------------------------------- tests */

static int setup(void **state) {
  (void)state;
  char base[512], args[1024], json[600], *out, *err;
  ss_test_path(base, sizeof(base), "sim");
  snprintf(args, sizeof(args), "simulate --preset easy --duration 4 --seed 2 --format binary -o '%s' -q", base);
  int code = ss_test_run_cli(args, &out, &err);
  if (code != 0) fprintf(stderr, "simulate: exit %d: %s\n", code, err);
  free(out), free(err);
  if (code != 0) return -1;
  snprintf(rec.bin, sizeof(rec.bin), "%s.bin", base);
  snprintf(json, sizeof(json), "%s.json", base);
  char *side = ss_test_slurp(json);
  int fits = strstr(side, "\"sample_rate\": 30000,") && strstr(side, "\"n_channels\": 32,") &&
             strstr(side, "\"conversion_uv\": 0.19500000000000001,");
  free(side);
  if (!fits) fprintf(stderr, "%s: not 32 channels at 30000 Hz and 0.195 uV per step\n", json);
  rec.x = fits ? ss_test_read_rows(rec.bin, NCH, &rec.n) : NULL;
  return rec.x ? 0 : -1;
}

static int teardown(void **state) {
  (void)state;
  free(rec.x);
  return 0;
}

static void containers_sort_alike(void **state) {
  (void)state;
  result_t ref = sort(rec.bin, "out_binary", "--rate 30000 --channels 32 --uv-per-step 0.195");
  assert_true(ref.n_spikes > 100 && ref.n_clusters > 2);
  assert_true(ref.rate == RATE && ref.n_channels == NCH);
  char path[512];
  write_spikeglx(path, sizeof(path));
  same_sort(&ref, sort(path, "out_spikeglx", ""), "spikeglx");
  write_openephys(path, sizeof(path));
  same_sort(&ref, sort(path, "out_openephys", ""), "openephys");
  write_intan_rhd(path, sizeof(path));
  same_sort(&ref, sort(path, "out_intan", ""), "intan");
  free(ref.times), free(ref.amps);
}

/* inspect reports what each container says: format, rate, channels, the exact scale. */
static void containers_inspect(void **state) {
  (void)state;
  char path[512], args[700], *out, *err;
  void (*writers[])(char *, size_t) = {write_spikeglx, write_openephys, write_intan_rhd};
  const char *formats[] = {"spikeglx", "openephys", "intan"};
  for (int i = 0; i < 3; i++) {
    writers[i](path, sizeof(path));
    snprintf(args, sizeof(args), "inspect '%s'", path);
    assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
    char want[64];
    snprintf(want, sizeof(want), "format:       %s\n", formats[i]);
    if (!strstr(out, want) || !strstr(out, "channels:     32\n") || !strstr(out, "rate:         30000 Hz\n") ||
        !strstr(out, "scale:        0.195 uV per step"))
      fail_msg("inspect %s:\n%s", formats[i], out);
    free(out), free(err);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(containers_inspect),
      cmocka_unit_test(containers_sort_alike),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
