/* test_simulate.c — the ground-truth simulator: bit-for-bit reproducibility and chunk independence,
 * measured SNR / noise / rates against what was asked, refractoriness, noise correlation and colour,
 * waveform shape, drift, the realistic defaults (unit count per channel, lognormal rates, bursts and
 * their amplitude attenuation) and the easy preset, NWB and binary output (structure checked,
 * samples identical), and the `simulate` command line. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "io/nwb_check.h"
#include "params/params.h"
#include "ss_test.h"

#define PROBE_PATH SS_SOURCE_DIR "/params/probes/two_column_32.json"

static ss_probe load_probe(void) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  assert_int_equal(ss_probe_load_file(&ctx, PROBE_PATH, 40.0, &p), SS_OK);
  return p;
}

static ss_sim *make(const ss_sim_config *c) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p = load_probe();
  ss_sim *s = NULL;
  ss_status st = ss_sim_create(&ctx, c, &p, &s);
  if (st != SS_OK) fprintf(stderr, "%s\n", ss_error_message(&ctx));
  assert_int_equal(st, SS_OK);
  ss_probe_free(&p);
  return s;
}

/* The whole recording rendered with chunks of `chunk` samples. */
static float *render_all(ss_sim *s, int64_t chunk) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t n = ss_sim_n_samples(s);
  int C = ss_sim_n_channels(s);
  float *out = malloc((size_t)n * C * sizeof(float));
  for (int64_t t = 0; t < n; t += chunk)
    assert_int_equal(ss_sim_render(&ctx, s, t, n - t < chunk ? n - t : chunk, out + t * C), SS_OK);
  return out;
}

static void short_config(ss_sim_config *c) {
  ss_sim_config_defaults(c);
  c->duration_s = 1.5;
  c->n_units = 8;
  c->min_rate_hz = 10;
  c->max_rate_hz = 40;
  c->seed = 42;
}

static void reproducible_and_chunk_independent(void **state) {
  (void)state;
  ss_sim_config c;
  short_config(&c);
  ss_sim *a = make(&c), *b = make(&c);
  int64_t n = ss_sim_n_samples(a);
  size_t bytes = (size_t)n * ss_sim_n_channels(a) * sizeof(float);
  float *whole = render_all(a, n), *small = render_all(b, 1000), *odd = render_all(b, 7777);
  assert_memory_equal(whole, small, bytes);
  assert_memory_equal(whole, odd, bytes);
  /* the measured truth does not depend on how (or whether) the recording was rendered */
  ss_sim *fresh = make(&c);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_sim_finish(&ctx, a), SS_OK);
  assert_int_equal(ss_sim_finish(&ctx, b), SS_OK);
  assert_int_equal(ss_sim_finish(&ctx, fresh), SS_OK);
  const ss_sim_truth *ta = ss_sim_get_truth(a), *tb = ss_sim_get_truth(b), *tf = ss_sim_get_truth(fresh);
  assert_memory_equal(ta->snr, tb->snr, c.n_units * sizeof(double));
  assert_memory_equal(ta->snr, tf->snr, c.n_units * sizeof(double));
  assert_memory_equal(ta->noise_sigma_uv, tf->noise_sigma_uv, 32 * sizeof(double));
  for (int u = 0; u < c.n_units; u++) {
    assert_int_equal(ta->n_spikes[u], tf->n_spikes[u]);
    assert_memory_equal(ta->spike_samples[u], tf->spike_samples[u], ta->n_spikes[u] * sizeof(int64_t));
  }
  /* another seed gives another recording */
  c.seed = 43;
  ss_sim *other = make(&c);
  float *diff = render_all(other, n);
  assert_true(memcmp(whole, diff, bytes) != 0);
  free(whole), free(small), free(odd), free(diff);
  ss_sim_free(a), ss_sim_free(b), ss_sim_free(fresh), ss_sim_free(other);
}

static double median(double *v, int n) {
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
      double t = v[j];
      v[j] = v[j - 1], v[j - 1] = t;
    }
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void snr_noise_and_rates_as_asked(void **state) {
  (void)state;
  ss_sim_config c;
  ss_sim_config_defaults(&c);
  c.duration_s = 20;
  c.n_units = 20;
  c.median_snr = 12;
  c.noise_uv = 8;
  c.seed = 7;
  ss_sim *s = make(&c);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_sim_finish(&ctx, s), SS_OK);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  for (int ch = 0; ch < 32; ch++) assert_true(fabs(t->noise_sigma_uv[ch] / c.noise_uv - 1) < 0.03);
  double snrs[20], lo = 1e9, hi = 0;
  for (int u = 0; u < 20; u++) {
    snrs[u] = t->snr[u];
    lo = fmin(lo, t->snr[u]), hi = fmax(hi, t->snr[u]);
    assert_true(fabs(t->snr[u] / t->target_snr[u] - 1) < 0.1);
    assert_true(t->rate_hz[u] >= c.min_rate_hz && t->rate_hz[u] <= c.max_rate_hz);
    double expect = t->rate_hz[u] * c.duration_s;
    assert_true(fabs((double)t->n_spikes[u] - expect) < 5 * sqrt(expect) + 3);
    assert_true(t->peak_channel[u] >= 0 && t->peak_channel[u] < 32);
  }
  assert_true(fabs(median(snrs, 20) / c.median_snr - 1) < 0.1);
  assert_true(hi / lo > 5); /* spread over about a decade */
  ss_sim_free(s);
}

static void refractory_period_respected(void **state) {
  (void)state;
  ss_sim_config c;
  short_config(&c);
  c.duration_s = 10;
  c.min_rate_hz = 100; /* dense trains: the refractory period is what limits them */
  c.max_rate_hz = 200;
  c.refractory_ms = 3;
  ss_sim *s = make(&c);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  int64_t ref = (int64_t)ceil(3.0 * c.rate_hz / 1000.0), min_isi = INT64_MAX;
  for (int u = 0; u < c.n_units; u++)
    for (int64_t k = 1; k < t->n_spikes[u]; k++) {
      int64_t isi = t->spike_samples[u][k] - t->spike_samples[u][k - 1];
      if (isi < min_isi) min_isi = isi;
    }
  assert_true(min_isi >= ref);
  assert_true(min_isi < ref + 30); /* and it is reached: the trains are not just sparse */
  ss_sim_free(s);
}

static double corr(const float *x, int C, int64_t n, int a, int b, int lag) {
  double sab = 0, saa = 0, sbb = 0;
  for (int64_t t = lag; t < n; t++) {
    double va = x[t * C + a], vb = x[(t - lag) * C + b];
    sab += va * vb, saa += va * va, sbb += vb * vb;
  }
  return sab / sqrt(saa * sbb);
}

static void noise_correlated_and_coloured(void **state) {
  (void)state;
  ss_sim_config c;
  ss_sim_config_defaults(&c);
  c.duration_s = 4;
  c.n_units = 0;
  ss_sim *s = make(&c);
  int64_t n = ss_sim_n_samples(s);
  float *x = render_all(s, n);
  /* channels 10 and 12 are 20 µm apart in one column; 10 and 30 are 200 µm apart */
  double near = corr(x, 32, n, 10, 12, 0), far = corr(x, 32, n, 10, 30, 0), lag1 = corr(x, 32, n, 5, 5, 1);
  assert_true(near > 0.15 && near < 0.45);
  assert_true(fabs(far) < 0.05);
  assert_true(lag1 > 0.3 && lag1 < 0.8); /* coloured, yet not a slow drift */
  free(x);
  ss_sim_free(s);
}

static void waveform_trough_then_slower_peak(void **state) {
  (void)state;
  ss_sim_config c;
  short_config(&c);
  c.n_units = 1;
  c.noise_uv = 0.05; /* the signal is the waveform: 50 µV against 0.05 µV of noise */
  c.median_snr = 1000;
  c.snr_spread = 1;
  c.amplitude_jitter = 0;
  ss_sim *s = make(&c);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  assert_true(t->n_spikes[0] > 0);
  int64_t n = ss_sim_n_samples(s);
  float *x = render_all(s, n);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_sim_finish(&ctx, s), SS_OK);
  int pc = t->peak_channel[0];
  int64_t ts = t->spike_samples[0][0], tmin = ts, tmax = ts;
  for (int64_t k = ts - 15; k < ts + 60 && k < n; k++) {
    if (x[k * 32 + pc] < x[tmin * 32 + pc]) tmin = k;
    if (x[k * 32 + pc] > x[tmax * 32 + pc]) tmax = k;
  }
  double trough = -x[tmin * 32 + pc], peak = x[tmax * 32 + pc];
  assert_true(llabs(tmin - ts) <= 1);                 /* the GT time is the trough */
  assert_true(tmax - tmin >= 8 && tmax - tmin <= 25); /* repolarisation 0.3–0.8 ms later */
  assert_true(peak > 0.15 * trough && peak < 0.6 * trough);
  assert_true(fabs((trough + peak) / t->amplitude_uv[0] - 1) < 0.1);
  /* spatial decay: a channel 100 µm further along sees much less */
  int far = pc >= 16 ? pc - 10 : pc + 10;
  double far_min = 0;
  for (int64_t k = ts - 15; k < ts + 60 && k < n; k++) far_min = fmin(far_min, x[k * 32 + far]);
  assert_true(-far_min < 0.25 * trough);
  free(x);
  ss_sim_free(s);
}

static void drift_moves_units(void **state) {
  (void)state;
  ss_sim_config c;
  short_config(&c);
  c.duration_s = 3;
  ss_sim *still = make(&c);
  c.drift_um_per_s = 20;
  ss_sim *moving = make(&c);
  const ss_sim_truth *a = ss_sim_get_truth(still), *b = ss_sim_get_truth(moving);
  for (int u = 0; u < c.n_units; u++) assert_int_equal(a->n_spikes[u], b->n_spikes[u]);
  int64_t n = ss_sim_n_samples(still);
  float *x = render_all(still, n), *y = render_all(moving, n);
  /* the start (little drift yet) nearly agrees, the end does not */
  double d_start = 0, d_end = 0, e_start = 0, e_end = 0;
  for (int64_t i = 0; i < 3000 * 32; i++) d_start += fabs(x[i] - y[i]), e_start += fabs(x[i]);
  for (int64_t i = (n - 3000) * 32; i < n * 32; i++) d_end += fabs(x[i] - y[i]), e_end += fabs(x[i]);
  assert_true(d_end / e_end > 5 * (d_start / e_start));
  free(x), free(y);
  ss_sim_free(still), ss_sim_free(moving);
}

static void config_rejected_with_reasons(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_sim_config c;
  ss_sim_config_defaults(&c);
  assert_int_equal(ss_sim_config_validate(&ctx, &c), SS_OK);
  c.duration_s = -1;
  c.n_units = -2;
  c.noise_uv = 0;
  c.max_rate_hz = 0.1;
  c.refractory_ms = 60;
  assert_int_equal(ss_sim_config_validate(&ctx, &c), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "simulate: duration_s: expected a number of seconds > 0, got -1\n"
                      "simulate: n_units: expected a unit count in [0, 100000] or -1 (auto), got -2\n"
                      "simulate: noise_uv: expected a noise level in (0, 10000] µV, got 0\n"
                      "simulate: max_rate_hz: expected a firing rate in [min_rate_hz, 1000] Hz, got 0.1");
  ss_sim_config_defaults(&c);
  c.refractory_ms = 60;
  assert_int_equal(ss_sim_config_validate(&ctx, &c), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "simulate: refractory_ms: expected a number in [0, 33.3333) (below the "
                                              "mean interval at max_rate_hz), got 60");
  ss_sim_config_defaults(&c);
  c.burst_prob = 2;
  c.burst_attenuation = 0;
  c.decay_max_um = 5;
  c.rate_law = (ss_sim_rate_law)7;
  assert_int_equal(ss_sim_config_validate(&ctx, &c), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "simulate: rate_law: expected lognormal (0) or loguniform (1), got 7\n"
                      "simulate: burst_prob: expected a probability in [0, 1], got 2\n"
                      "simulate: burst_attenuation: expected a factor in (0, 1], got 0\n"
                      "simulate: decay_max_um: expected a length in [decay_min_um, 1000] µm, got 5");
  ss_sim_config_defaults(&c);
  c.duration_s = 1e-6;
  assert_int_equal(ss_sim_config_validate(&ctx, &c), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "simulate: duration_s: 1e-06 s is less than one sample");
  /* a probe whose channels do not cover 0..n-1 */
  ss_probe p;
  assert_int_equal(ss_probe_load_json(&ctx, "{\"channels\": [0, 2], \"positions\": [[0, 0], [0, 20]]}", "p.json", 40,
                                      &p),
                   SS_OK);
  ss_sim_config_defaults(&c);
  ss_sim *s = NULL;
  assert_int_equal(ss_sim_create(&ctx, &c, &p, &s), SS_ERR_INPUT);
  assert_null(s);
  assert_non_null(strstr(ss_error_message(&ctx), "channel"));
  ss_probe_free(&p);
}

/* int16 samples of an NWB file's ElectricalSeries, read with HDF5 directly. */
static int16_t *read_nwb_data(const char *path, int64_t *n_values) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  hid_t d = H5Dopen2(f, "/acquisition/ElectricalSeries/data", H5P_DEFAULT);
  assert_true(d >= 0);
  hid_t sp = H5Dget_space(d);
  hsize_t dims[2];
  assert_int_equal(H5Sget_simple_extent_ndims(sp), 2);
  H5Sget_simple_extent_dims(sp, dims, NULL);
  *n_values = (int64_t)(dims[0] * dims[1]);
  int16_t *v = malloc((size_t)*n_values * sizeof(int16_t));
  assert_true(H5Dread(d, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
  H5Sclose(sp), H5Dclose(d), H5Fclose(f);
  return v;
}

static void nwb_and_binary_outputs_agree(void **state) {
  (void)state;
  ss_sim_config c;
  short_config(&c);
  ss_probe p = load_probe();
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char nwb[512], base[512], bin[600], json[600];
  ss_test_path(nwb, sizeof(nwb), "sim.nwb");
  ss_test_path(base, sizeof(base), "simb");
  snprintf(bin, sizeof(bin), "%s.bin", base);
  snprintf(json, sizeof(json), "%s.json", base);
  ss_sim *s = NULL;
  assert_int_equal(ss_sim_write(&ctx, &c, &p, nwb, SS_SIM_FORMAT_NWB, 4000, &s), SS_OK);
  assert_int_equal(ss_nwb_check(&ctx, nwb), SS_OK);
  assert_int_equal(ss_sim_write(&ctx, &c, &p, bin, SS_SIM_FORMAT_BINARY, 0, NULL), SS_OK);
  int64_t n_values, n = ss_sim_n_samples(s);
  int16_t *from_nwb = read_nwb_data(nwb, &n_values);
  assert_int_equal(n_values, n * 32);
  /* the binary file holds the same samples (and is exactly that long) */
  FILE *f = fopen(bin, "rb");
  assert_non_null(f);
  int16_t *from_bin = malloc((size_t)n_values * sizeof(int16_t) + 2);
  assert_int_equal(fread(from_bin, sizeof(int16_t), (size_t)n_values + 1, f), (size_t)n_values);
  fclose(f);
  assert_memory_equal(from_nwb, from_bin, (size_t)n_values * sizeof(int16_t));
  /* and both are the quantised render */
  ss_sim *again = make(&c);
  float *uv = render_all(again, n);
  int16_t *q = malloc((size_t)n_values * sizeof(int16_t));
  assert_int_equal(ss_sim_quantize(again, uv, n_values, q), 0);
  assert_memory_equal(q, from_nwb, (size_t)n_values * sizeof(int16_t));
  /* the sidecar names the data and carries the ground truth */
  char *text = NULL;
  size_t len = 0;
  assert_int_equal(ss_read_text_file(&ctx, json, 1 << 24, &text, &len), SS_OK);
  assert_non_null(strstr(text, "\"data_file\": \"simb.bin\""));
  assert_non_null(strstr(text, "\"n_channels\": 32"));
  assert_non_null(strstr(text, "\"conversion_uv\": 0.195"));
  char first[64];
  snprintf(first, sizeof(first), "\"spike_samples\": [%lld", (long long)ss_sim_get_truth(s)->spike_samples[0][0]);
  assert_non_null(strstr(text, first));
  free(text), free(from_nwb), free(from_bin), free(uv), free(q);
  ss_sim_free(s), ss_sim_free(again);
  ss_probe_free(&p);
}

static void command_line(void **state) {
  (void)state;
  char *out, *err, args[2048], path[512];
  ss_test_path(path, sizeof(path), "cli.nwb");
  snprintf(args, sizeof(args), "simulate -o '%s' --duration 2 --units 4 --seed 3 --snr 15 --quiet", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "32 channels, 2 s at 30000 Hz, 4 units"));
  free(out), free(err);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_nwb_check(&ctx, path), SS_OK);
  snprintf(args, sizeof(args), "inspect --check-nwb '%s'", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "nwb check:    ok"));
  free(out), free(err);
  ss_test_path(path, sizeof(path), "clib");
  snprintf(args, sizeof(args), "simulate -o '%s' --format binary --duration 1 --units 2 --rate 20000 --quiet", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  free(out), free(err);
  /* the defaults scale the unit count with the probe; a preset's settings yield to the options */
  snprintf(args, sizeof(args), "simulate -o '%s' --format binary --duration 1 --quiet", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "32 channels, 1 s at 30000 Hz, 30 units"));
  free(out), free(err);
  snprintf(args, sizeof(args), "simulate -o '%s' --format binary --duration 1 --quiet --seed 5 --preset easy", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "32 channels, 1 s at 30000 Hz, 20 units"));
  assert_non_null(strstr(out, "seed 5"));
  free(out), free(err);
  struct {
    const char *args, *err;
  } bad[] = {
      {"simulate --duration 1", "spikestream simulate: give the output file with -o FILE\n"},
      {"simulate -o x.nwb --duration abc", "spikestream simulate: --duration: expected a number, got \"abc\"\n"},
      {"simulate -o x.nwb --units -3", "spikestream simulate: --units: expected an integer >= 0 or auto, got \"-3\"\n"},
      {"simulate -o x.nwb --preset hard", "spikestream simulate: --preset: expected realistic or easy, got \"hard\"\n"},
      {"simulate -o x.nwb --format csv", "spikestream simulate: --format: expected nwb or binary, got \"csv\"\n"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(ss_test_run_cli(bad[i].args, &out, &err), 2);
    assert_non_null(strstr(err, bad[i].err));
    free(out), free(err);
  }
  assert_int_equal(ss_test_run_cli("simulate -o x.nwb --noise-uv -1", &out, &err), 1);
  assert_string_equal(err,
                      "spikestream simulate: simulate: noise_uv: expected a noise level in (0, 10000] µV, got -1\n");
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("simulate -o x.nwb --burst-prob 2", &out, &err), 1);
  assert_string_equal(err, "spikestream simulate: simulate: burst_prob: expected a probability in [0, 1], got 2\n");
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("simulate -o x.nwb --probe /nonexistent/probe.json", &out, &err), 1);
  assert_non_null(strstr(err, "/nonexistent/probe.json"));
  free(out), free(err);
}

/* Defaults: 30 units per 32 channels (scaled with the channels), lognormal rates clipped to
 * [0.5, 30] Hz around a 12 Hz median; the easy preset keeps 20 units at log-uniform rates. */
static void realistic_defaults(void **state) {
  (void)state;
  ss_sim_config c;
  ss_sim_config_defaults(&c);
  c.duration_s = 0.5;
  ss_sim *s = make(&c);
  assert_int_equal(ss_sim_get_config(s)->n_units, 30);
  assert_int_equal(ss_sim_get_truth(s)->n_units, 30);
  ss_sim_free(s);
  c.n_units = 400;
  s = make(&c);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  double rates[400];
  int clipped = 0;
  for (int u = 0; u < 400; u++) {
    rates[u] = t->rate_hz[u];
    assert_true(rates[u] >= 0.5 && rates[u] <= 30);
    clipped += rates[u] == 30;
  }
  assert_true(fabs(median(rates, 400) / 12 - 1) < 0.15);
  assert_true(clipped > 10 && clipped < 80); /* about 10 % above 30 Hz before clipping */
  ss_sim_free(s);
  ss_sim_config_preset(&c, SS_SIM_PRESET_EASY);
  assert_int_equal(c.n_units, 20);
  assert_int_equal(c.rate_law, SS_SIM_RATES_LOGUNIFORM);
  assert_true(c.burst_prob == 0 && c.burst_attenuation == 1);
}

/* The amplitude of unit u's spike k on channel pc: minus the trough near its sample. */
static double trough_at(const float *x, int64_t n, int pc, int64_t ts) {
  double lo = 0;
  for (int64_t t = ts - 3; t <= ts + 3 && t < n; t++) lo = fmin(lo, x[t * 32 + pc]);
  return -lo;
}

/* Bursts: spikes 3-8 ms apart in runs of 2-4; within a run each spike is 0.8 times the previous
 * one, and the first spike after a longer interval is back at full amplitude. */
static void bursts_attenuate(void **state) {
  (void)state;
  ss_sim_config c;
  short_config(&c);
  c.duration_s = 20;
  c.n_units = 1;
  c.median_rate_hz = c.min_rate_hz = c.max_rate_hz = 5;
  c.burst_prob = 1; /* the unit's own probability is drawn in [0, 1] */
  c.noise_uv = 0.05;
  c.median_snr = 1000;
  c.snr_spread = 1;
  c.amplitude_jitter = 0;
  ss_sim *s = make(&c);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  int64_t n = ss_sim_n_samples(s), within = 0, after_gap = 0, ns = t->n_spikes[0];
  const int64_t *ts = t->spike_samples[0];
  assert_true(t->burst_prob[0] > 0.1);
  float *x = render_all(s, n);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_sim_finish(&ctx, s), SS_OK);
  int pc = t->peak_channel[0];
  for (int64_t k = 1; k < ns; k++) {
    int64_t isi = ts[k] - ts[k - 1];
    double r = trough_at(x, n, pc, ts[k]) / trough_at(x, n, pc, ts[k - 1]);
    if (isi < 300) {                        /* within a burst (10 ms) */
      assert_true(isi >= 90 && isi <= 240); /* 3-8 ms */
      if (k >= 2 && ts[k - 1] - ts[k - 2] >= 300) {
        if (fabs(r - 0.8) > 0.04) fail_msg("spike %lld: %.3f of the previous one, not 0.8", (long long)k, r);
        within++;
      }
    } else if (k >= 2 && ts[k - 1] - ts[k - 2] < 300) {
      if (r < 1.15) fail_msg("spike %lld after a burst: %.3f of the previous one, not recovered", (long long)k, r);
      after_gap++;
    }
  }
  assert_true(within >= 5 && after_gap >= 5);
  /* the mean spike keeps the asked amplitude (SNR 1000 at noise 0.05: 50 µV) */
  assert_true(fabs(t->template_ptp_uv[0] / 50.0 - 1) < 0.05);
  free(x);
  ss_sim_free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(reproducible_and_chunk_independent),
      cmocka_unit_test(snr_noise_and_rates_as_asked),
      cmocka_unit_test(refractory_period_respected),
      cmocka_unit_test(noise_correlated_and_coloured),
      cmocka_unit_test(waveform_trough_then_slower_peak),
      cmocka_unit_test(drift_moves_units),
      cmocka_unit_test(config_rejected_with_reasons),
      cmocka_unit_test(realistic_defaults),
      cmocka_unit_test(bursts_attenuate),
      cmocka_unit_test(nwb_and_binary_outputs_agree),
      cmocka_unit_test(command_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
