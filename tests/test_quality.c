/* test_quality.c — the quality metrics (stages/metrics/quality.h) on synthetic spike trains and
 * amplitude distributions with known answers, the labels from the quality.* thresholds, and the
 * per-cluster pass over a labelling. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "params/params.h"
#include "ss_test.h"
#include "stages/metrics/quality.h"

#define RATE 30000.0

/* A train with intervals refractory + exponential(mean) samples over duration_s; returns its length. */
static int64_t poisson_train(uint64_t seed, double rate_hz, double refractory_ms, double duration_s, int64_t *t,
                             int64_t cap) {
  ss_rng r = ss_rng_make(seed, 0, 0);
  const double end = duration_s * RATE, dead = refractory_ms * 1e-3 * RATE;
  double mean = RATE / rate_hz - dead, x = 0;
  int64_t n = 0;
  for (;;) {
    x += dead - mean * log(1.0 - ss_rng_next_uniform(&r));
    if (x >= end || n == cap) break;
    t[n++] = (int64_t)x;
  }
  return n;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* A train with a 2 ms refractory period has no violations; each spike injected 0.5 ms after another
 * adds one, and the ratio is exactly v·T / (2·n²·t_r). Intervals inside the censored period do not count. */
static void isi_injected(void **state) {
  (void)state;
  const double T = 600.0;
  int64_t *t = malloc(sizeof(int64_t) * 20000);
  int64_t n = poisson_train(7, 10.0, 2.0, T, t, 19000), v;
  assert_true(n > 5000);
  assert_float_equal(ss_quality_isi_violation_ratio(t, n, RATE, T, 1.5, 0.0, &v), 0.0, 0);
  assert_int_equal(v, 0);
  const int64_t inject = 50;
  for (int64_t j = 0; j < inject; j++) t[n + j] = t[j * 100] + 15; /* 0.5 ms */
  int64_t m = n + inject;
  qsort(t, (size_t)m, sizeof(int64_t), cmp_i64);
  double ratio = ss_quality_isi_violation_ratio(t, m, RATE, T, 1.5, 0.0, &v);
  assert_int_equal(v, inject);
  assert_float_equal(ratio, inject * T / (2.0 * (double)m * m * 1.5e-3), 1e-12);
  /* censored at 0.6 ms: the injected 0.5 ms intervals are unseen */
  assert_float_equal(ss_quality_isi_violation_ratio(t, m, RATE, T, 1.5, 0.6, &v), 0.0, 0);
  assert_int_equal(v, 0);
  assert_float_equal(ss_quality_isi_violation_ratio(t, 1, RATE, T, 1.5, 0.0, NULL), 0.0, 0);
  free(t);
}

/* Spike times with no refractory period at all (a Poisson train): the ratio is 1/2 on average. */
static void isi_poisson(void **state) {
  (void)state;
  const double T = 1000.0;
  int64_t *t = malloc(sizeof(int64_t) * 40000);
  int64_t n = poisson_train(11, 20.0, 0.0, T, t, 40000), v;
  double ratio = ss_quality_isi_violation_ratio(t, n, RATE, T, 1.5, 0.0, &v);
  assert_true(v > 400);
  if (fabs(ratio - 0.5) > 0.06) fail_msg("Poisson train: ratio %g, expected about 0.5", ratio);
  free(t);
}

/* Spikes only in the first half of the recording: presence 1/2; a steady unit: 1; no spikes: 0. */
static void presence(void **state) {
  (void)state;
  const int64_t ns = (int64_t)(600 * RATE);
  int64_t *t = malloc(sizeof(int64_t) * 10000);
  int64_t n = poisson_train(3, 5.0, 2.0, 300.0, t, 10000);
  assert_float_equal(ss_quality_presence_ratio(t, n, ns, 60), 0.5, 1e-12);
  n = poisson_train(3, 5.0, 2.0, 600.0, t, 10000);
  assert_float_equal(ss_quality_presence_ratio(t, n, ns, 60), 1.0, 1e-12);
  assert_float_equal(ss_quality_presence_ratio(t, 0, ns, 60), 0.0, 0);
  /* one spike in bin 0 and one in the last: 2 of 4 */
  int64_t two[2] = {0, ns - 1};
  assert_float_equal(ss_quality_presence_ratio(two, 2, ns, 4), 0.5, 1e-12);
  free(t);
}

/* n amplitudes ~ −N(100, 20²) µV (negative peaks) whose magnitude is above `cut`. */
static int64_t gaussian_amps(uint64_t seed, int64_t n, double cut, float *a) {
  ss_rng r = ss_rng_make(seed, 0, 1);
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = 100.0 + 20.0 * ss_rng_next_normal(&r);
    if (x > cut) a[m++] = (float)-x;
  }
  return m;
}

/* A Gaussian cut one sd below its mean misses Φ(−1) = 15.9 % of it; an uncut one about nothing; one
 * cut at its mean, the cap of 0.5; too few spikes: undefined. */
static void amplitude_cutoff(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float *a = malloc(sizeof(float) * 40000);
  double c;
  int64_t m = gaussian_amps(5, 40000, 80.0, a);
  assert_int_equal(ss_quality_amplitude_cutoff(&ctx, a, m, 100, &c), SS_OK);
  if (fabs(c - 0.1587 / 0.8413) > 0.04) fail_msg("cut at mean - sd: cutoff %g, expected about 0.189", c);
  m = gaussian_amps(5, 40000, 0.0, a);
  assert_int_equal(ss_quality_amplitude_cutoff(&ctx, a, m, 100, &c), SS_OK);
  if (c > 0.02) fail_msg("uncut: cutoff %g, expected about 0", c);
  m = gaussian_amps(5, 40000, 100.0, a);
  assert_int_equal(ss_quality_amplitude_cutoff(&ctx, a, m, 100, &c), SS_OK);
  assert_float_equal(c, 0.5, 0);
  assert_int_equal(ss_quality_amplitude_cutoff(&ctx, a, 49, 100, &c), SS_OK);
  assert_true(isnan(c));
  free(a);
}

/* Cluster 0 and low SNR: noise; every bound met: good; any bound missed (or a NaN metric): mua. */
static void classify(void **state) {
  (void)state;
  ss_params p;
  ss_params_defaults(&p);
  assert_int_equal(ss_quality_classify(&p, 0, 50, 0, 1, 0), SS_QUALITY_NOISE);
  assert_int_equal(ss_quality_classify(&p, 1, p.quality.noise_snr - 0.1, 0, 1, 0), SS_QUALITY_NOISE);
  assert_int_equal(ss_quality_classify(&p, 1, p.quality.good_snr, 0.1, 0.95, 0.05), SS_QUALITY_GOOD);
  assert_int_equal(ss_quality_classify(&p, 1, p.quality.good_snr - 0.1, 0.1, 0.95, 0.05), SS_QUALITY_MUA);
  assert_int_equal(ss_quality_classify(&p, 1, 10, p.quality.good_isi_ratio, 0.95, 0.05), SS_QUALITY_MUA);
  assert_int_equal(ss_quality_classify(&p, 1, 10, 0.1, p.quality.good_presence - 0.01, 0.05), SS_QUALITY_MUA);
  assert_int_equal(ss_quality_classify(&p, 1, 10, 0.1, 0.95, p.quality.good_amplitude_cutoff), SS_QUALITY_MUA);
  assert_int_equal(ss_quality_classify(&p, 1, 10, 0.1, 0.95, NAN), SS_QUALITY_MUA);
  assert_int_equal(ss_quality_classify(&p, 1, NAN, 0.1, 0.95, 0.05), SS_QUALITY_MUA);
  assert_string_equal(ss_quality_label_name(SS_QUALITY_GOOD), "good");
  assert_string_equal(ss_quality_label_name(SS_QUALITY_MUA), "mua");
  assert_string_equal(ss_quality_label_name(SS_QUALITY_NOISE), "noise");
}

/* Three clusters interleaved in time: counts, rates and SNRs (template peak over the peak channel's
 * noise) per cluster, and their labels. */
static void per_cluster(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  const double T = 100.0;
  const int64_t n = 3000;
  int64_t *t = malloc(sizeof(int64_t) * n);
  float *a = malloc(sizeof(float) * n);
  int32_t *lab = malloc(sizeof(int32_t) * n);
  ss_rng r = ss_rng_make(9, 0, 2);
  for (int64_t i = 0; i < n; i++) {
    t[i] = (int64_t)((double)i * T * RATE / n); /* 33 ms apart overall: no unit has a violation */
    lab[i] = (int32_t)(i % 3);
    a[i] = (float)-(lab[i] == 2 ? 20.0 : 100.0 + 10.0 * ss_rng_next_normal(&r));
  }
  /* C = 2 channels, W = 4 samples: cluster 1 peaks at −80 µV on channel 1 (σ 10), cluster 2 at −20 */
  int64_t count[3] = {1000, 1000, 1000};
  int32_t peak[3] = {0, 1, 1};
  float wave[3 * 2 * 4] = {0};
  wave[(1 * 2 + 1) * 4 + 1] = -80.0f;
  wave[(2 * 2 + 1) * 4 + 2] = -20.0f;
  wave[(0 * 2 + 0) * 4 + 0] = 60.0f;
  float sigma[2] = {10.0f, 10.0f};
  ss_cluster_stats st = {.k = 3, .C = 2, .P = 1, .W = 4, .count = count, .wave = wave, .peak_channel = peak};
  ss_quality_input in = {.n = n,
                         .rate_hz = RATE,
                         .duration_s = T,
                         .n_samples = (int64_t)(T * RATE),
                         .time_samples = t,
                         .amplitude = a,
                         .labels = lab,
                         .stats = &st,
                         .sigma = sigma};
  ss_quality q;
  assert_int_equal(ss_quality_compute(&ctx, &p, &in, &q), SS_OK);
  assert_int_equal(q.k, 3);
  for (int c = 0; c < 3; c++) {
    assert_int_equal(q.n_spikes[c], 1000);
    assert_float_equal(q.firing_rate_hz[c], 10.0, 1e-12);
    assert_float_equal(q.presence_ratio[c], 1.0, 0);
    assert_float_equal(q.isi_violation_ratio[c], 0.0, 0);
  }
  assert_float_equal(q.snr[0], 6.0, 1e-6);
  assert_float_equal(q.snr[1], 8.0, 1e-6);
  assert_float_equal(q.snr[2], 2.0, 1e-6);
  assert_true(isnan(q.amplitude_cutoff[2]) || q.amplitude_cutoff[2] >= 0); /* identical amplitudes */
  assert_int_equal(q.label[0], SS_QUALITY_NOISE);
  assert_int_equal(q.label[1], SS_QUALITY_GOOD);
  assert_int_equal(q.label[2], SS_QUALITY_NOISE);
  ss_quality_free(&q);
  free(t);
  free(a);
  free(lab);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(isi_injected), cmocka_unit_test(isi_poisson),
                                     cmocka_unit_test(presence),     cmocka_unit_test(amplitude_cutoff),
                                     cmocka_unit_test(classify),     cmocka_unit_test(per_cluster)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
