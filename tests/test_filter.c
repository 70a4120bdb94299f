/* test_filter.c — Butterworth design against the analytic response (acceptance 1), zero-phase over
 * chunk + margins against the whole signal (acceptance 1), causal state carry, sinusoid gain and
 * phase, common median reference, noise-level estimate and every design error message. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "stages/filter/filter.h"
#include "core/rng.h"
#include "stages/threshold/threshold.h"
#include "ss_test.h"

#define PI 3.14159265358979323846

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The median by sorting: the reference for the radix selection. */
static float sorted_median(float *v, int n) {
  qsort(v, (size_t)n, sizeof(float), cmp_float);
  return (n % 2) ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static void design_ok(int order, double lo, double hi, double rate, ss_filter *f) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_filter_design(&ctx, order, lo, hi, rate, f) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

/* Acceptance 1a: |H| from the sections equals the analytic Butterworth response within 1e-6 at 50
 * frequencies spread log-uniformly from 5 Hz to 0.999 Nyquist, for the defaults and other orders. */
static void magnitude_matches_analytic(void **state) {
  (void)state;
  const double rates[] = {20000.0, 30000.0};
  for (int r = 0; r < 2; r++)
    for (int order = 1; order <= 6; order++) {
      double rate = rates[r], lo = 500.0, hi = 0.95 * rate / 2;
      ss_filter f;
      design_ok(order, lo, hi, rate, &f);
      assert_int_equal(f.n_sections, order);
      double worst = 0;
      for (int k = 0; k < 50; k++) {
        double fr = 5.0 * pow(0.999 * rate / 2 / 5.0, k / 49.0);
        double a = ss_filter_magnitude(&f, fr), b = ss_filter_butterworth_magnitude(order, lo, hi, rate, fr);
        worst = fmax(worst, fabs(a - b));
      }
      if (worst > 1e-6) fail_msg("order %d at %g Hz: worst |H| error %g", order, rate, worst);
      /* band edges at −3 dB, unit gain in the middle of the band */
      assert_true(fabs(ss_filter_magnitude(&f, lo) - sqrt(0.5)) < 1e-6);
      assert_true(fabs(ss_filter_magnitude(&f, hi) - sqrt(0.5)) < 1e-6);
      assert_true(fabs(ss_filter_magnitude(&f, sqrt(lo * hi) * 1.3) - 1.0) < 2e-2);
    }
  /* a narrow band has complex pole pairs only: pairing must still give `order` sections */
  ss_filter f;
  design_ok(3, 900, 1100, 20000, &f);
  double worst = 0;
  for (int k = 0; k < 50; k++) {
    double fr = 100.0 + k * 150.0;
    worst = fmax(worst, fabs(ss_filter_magnitude(&f, fr) - ss_filter_butterworth_magnitude(3, 900, 1100, 20000, fr)));
  }
  assert_true(worst < 1e-6);
}

static void noise(float *x, int64_t n, uint64_t stream, double scale, double dc) {
  ss_rng r = ss_rng_make(7, SS_RNG_TEST, stream);
  for (int64_t i = 0; i < n; i++) x[i] = (float)(dc + scale * ss_rng_next_normal(&r));
}

/* Acceptance 1b: zero-phase filtering of each chunk with 15 ms margins equals zero-phase filtering of
 * the whole signal at the chunk's samples to 1e-5 (relative to the signal's scale), with a DC offset
 * and spikes in the data. */
static void chunk_with_margins_equals_whole(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const double rate = 30000;
  const int C = 4;
  const int64_t n = 3 * 30000, chunk = 7500, margin = (int64_t)(0.015 * rate);
  ss_filter f;
  design_ok(3, 500, 0.95 * rate / 2, rate, &f);
  float *x = malloc(sizeof(float) * n * C), *whole = malloc(sizeof(float) * n * C);
  float *part = malloc(sizeof(float) * (chunk + 2 * margin) * C);
  noise(x, n * C, 1, 20.0, 300.0);
  for (int64_t t = 1000; t < n; t += 2777) /* spikes of −200 */
    for (int c = 0; c < C; c++) x[(t + c) * C + c] -= 200.0f;
  assert_int_equal(ss_filter_zero_phase(&ctx, NULL, &f, x, n, C, whole), SS_OK);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < n * C; i++) scale = fmax(scale, fabs(whole[i]));
  for (int64_t s = chunk; s + chunk <= n - chunk; s += chunk) {
    int64_t a = s - margin, rows = chunk + 2 * margin;
    assert_int_equal(ss_filter_zero_phase_cpu(&ctx, &f, x + a * C, rows, C, part), SS_OK);
    for (int64_t t = 0; t < chunk; t++)
      for (int c = 0; c < C; c++) worst = fmax(worst, fabs(part[(margin + t) * C + c] - whole[(s + t) * C + c]));
  }
  if (worst > 1e-5 * scale) fail_msg("chunk vs whole: worst %g (scale %g)", worst, scale);
  /* and the margin matters: without it the seams are far off */
  assert_int_equal(ss_filter_zero_phase_cpu(&ctx, &f, x + chunk * C, chunk, C, part), SS_OK);
  double seam = 0;
  for (int c = 0; c < C; c++) seam = fmax(seam, fabs(part[c] - whole[chunk * C + c]));
  assert_true(seam > 1e-3 * scale);
  free(x);
  free(whole);
  free(part);
}

/* A sinusoid in the pass band comes out of the zero-phase filter with gain |H|² and no phase shift;
 * out of the causal filter with gain |H|. */
static void sinusoid_gain_and_phase(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const double rate = 20000, fr = 700;
  const int64_t n = 20000;
  ss_filter f;
  design_ok(3, 500, 9500, rate, &f);
  float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
  for (int64_t t = 0; t < n; t++) x[t] = (float)sin(2 * PI * fr * t / rate);
  assert_int_equal(ss_filter_zero_phase(&ctx, NULL, &f, x, n, 1, y), SS_OK);
  double h = ss_filter_magnitude(&f, fr), worst = 0;
  for (int64_t t = n / 4; t < 3 * n / 4; t++) worst = fmax(worst, fabs(y[t] - h * h * x[t]));
  assert_true(worst < 1e-5);
  ss_filter_state st;
  assert_int_equal(ss_filter_state_init(&ctx, &f, 1, &st), SS_OK);
  assert_int_equal(ss_filter_causal(&ctx, NULL, &f, &st, x, n, y), SS_OK);
  double peak = 0;
  for (int64_t t = n / 2; t < n; t++) peak = fmax(peak, fabs(y[t]));
  assert_true(fabs(peak - h) < 1e-3);
  ss_filter_state_free(&st);
  free(x);
  free(y);
}

/* Live mode: causal filtering chunk by chunk with carried state equals one call over everything. */
static void causal_state_carries(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int C = 3;
  const int64_t n = 10000;
  ss_filter f;
  design_ok(3, 500, 14250, 30000, &f);
  float *x = malloc(sizeof(float) * n * C), *a = malloc(sizeof(float) * n * C), *b = malloc(sizeof(float) * n * C);
  noise(x, n * C, 2, 5.0, -50.0);
  ss_filter_state s1, s2;
  assert_int_equal(ss_filter_state_init(&ctx, &f, C, &s1), SS_OK);
  assert_int_equal(ss_filter_state_init(&ctx, &f, C, &s2), SS_OK);
  assert_int_equal(ss_filter_causal(&ctx, NULL, &f, &s1, x, n, a), SS_OK);
  const int64_t sizes[] = {1, 17, 1000, 333, 4096};
  int64_t done = 0;
  for (int k = 0; done < n; k = (k + 1) % 5) {
    int64_t m = sizes[k] < n - done ? sizes[k] : n - done;
    assert_int_equal(ss_filter_causal_cpu(&ctx, &f, &s2, x + done * C, m, b + done * C), SS_OK);
    done += m;
  }
  assert_memory_equal(a, b, sizeof(float) * n * C);
  /* a DC offset makes no start-up transient: the first outputs are ~0 */
  for (int c = 0; c < C; c++) assert_true(fabs(a[c]) < 20.0);
  ss_filter_state_free(&s1);
  ss_filter_state_free(&s2);
  free(x);
  free(a);
  free(b);
}

static void common_median(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float x[2 * 4] = {1, 2, 10, 100, /* */ -1, -2, -3, 7};
  int use[4] = {1, 1, 1, 0};
  assert_int_equal(ss_filter_common_median(&ctx, NULL, x, 2, 4, use), SS_OK);
  float want[8] = {-1, 0, 8, 100, 1, 0, -1, 7};
  for (int i = 0; i < 8; i++) assert_true(x[i] == want[i]);
  float y[4] = {1, 2, 3, 4};
  assert_int_equal(ss_filter_common_median(&ctx, NULL, y, 1, 4, NULL), SS_OK);
  assert_true(y[0] == -1.5f && y[3] == 1.5f);
}

static void design_errors(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_filter f;
  assert_int_equal(ss_filter_design(&ctx, 3, 500, 12000, 20000, &f), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "filter: band 500-12000 Hz: expected 0 < low < high < Nyquist (10000 Hz at 20000 Hz sampling)");
  assert_int_equal(ss_filter_design(&ctx, 9, 500, 5000, 20000, &f), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "filter: order: expected 1 to 8, got 9");
  assert_int_equal(ss_filter_design(&ctx, 3, 500, 5000, NAN, &f), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "filter: sample rate: expected a finite number > 0, got nan");
  ss_params p;
  ss_params_defaults(&p);
  p.filter.low_hz = 20000;
  assert_int_equal(ss_filter_design_params(&ctx, &p, 30000, &f), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "filter: band 20000-14250 Hz: expected 0 < low < high < Nyquist (15000 Hz at 30000 Hz sampling)");
  /* the slowest pole of the default design decays to 1e-7 in about 10 ms at any rate */
  design_ok(3, 500, 14250, 30000, &f);
  int64_t s30 = ss_filter_settle_samples(&f, 1e-7);
  design_ok(3, 500, 9500, 20000, &f);
  int64_t s20 = ss_filter_settle_samples(&f, 1e-7);
  assert_true(s30 > 250 && s30 < 360);
  assert_true(fabs(s30 / 30000.0 - s20 / 20000.0) < 0.001);
}

/* σ = median(|x|)/0.6745 recovers a Gaussian's standard deviation; pooled and per channel; dead
 * channels get infinite thresholds; the excerpt plan is spread and deterministic. */
static void noise_level(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int C = 3;
  const int64_t n = 200000;
  float *x = malloc(sizeof(float) * n * C);
  ss_rng r = ss_rng_make(3, SS_RNG_TEST, 0);
  for (int64_t t = 0; t < n; t++)
    for (int c = 0; c < C; c++) x[t * C + c] = (float)((c + 1) * 10.0 * ss_rng_next_normal(&r));
  ss_params p;
  ss_params_defaults(&p);
  ss_sample_block blocks[2] = {{x, n / 2}, {x + (n / 2) * C, n / 2}};
  int use[3] = {1, 1, 0};
  ss_thresholds th;
  assert_int_equal(ss_threshold_compute(&ctx, NULL, &p, blocks, 2, C, use, &th), SS_OK);
  assert_true(fabs(th.sigma[0] - 10.0) < 0.1 && fabs(th.sigma[1] - 20.0) < 0.2);
  assert_true(th.sigma[2] == 0 && isinf(th.weak[2]) && isinf(th.strong[2]));
  assert_true(fabs(th.weak[0] - 2.0 * th.sigma[0]) < 1e-4 &&
              fabs(th.strong[1] - p.detect.strong_std * th.sigma[1]) < 1e-3);
  ss_thresholds_free(&th);
  p.detect.noise = SS_NOISE_POOLED;
  assert_int_equal(ss_threshold_compute(&ctx, NULL, &p, blocks, 2, C, use, &th), SS_OK);
  assert_true(th.sigma[0] == th.sigma[1] && th.sigma[0] > 10.5 && th.sigma[0] < 19.5);
  ss_thresholds_free(&th);
  int none[3] = {0, 0, 0};
  assert_int_equal(ss_threshold_compute(&ctx, NULL, &p, blocks, 2, C, none, &th), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "threshold: every channel is marked dead");
  free(x);
  /* exact medians (radix selection) against sorting, odd and even counts, ties, both signs */
  for (int rows = 999; rows <= 1000; rows++) {
    float *y = malloc(sizeof(float) * rows * 2), *col = malloc(sizeof(float) * rows);
    for (int t = 0; t < rows * 2; t++) y[t] = (float)((int)(ss_rng_next_normal(&r) * 8)) * 0.37f;
    ss_sample_block one = {y, rows};
    p.detect.noise = SS_NOISE_PER_CHANNEL;
    assert_int_equal(ss_threshold_compute(&ctx, NULL, &p, &one, 1, 2, NULL, &th), SS_OK);
    for (int c = 0; c < 2; c++) {
      for (int t = 0; t < rows; t++) col[t] = fabsf(y[t * 2 + c]);
      float med = sorted_median(col, rows);
      assert_true(th.sigma[c] == (float)(med / SS_MAD_TO_SIGMA));
    }
    ss_thresholds_free(&th);
    free(y);
    free(col);
  }
  /* excerpt plan: 50 of 1 s over 60 s → 50 distinct pieces from the first to the last */
  int64_t len, *idx, m;
  assert_int_equal(ss_threshold_plan(&ctx, &p, 60 * 30000 + 5, 30000, &len, &idx, &m), SS_OK);
  assert_int_equal(len, 30000);
  assert_int_equal(m, 50);
  assert_int_equal(idx[0], 0);
  assert_int_equal(idx[49], 60);
  for (int k = 1; k < 50; k++) assert_true(idx[k] > idx[k - 1]);
  free(idx);
  assert_int_equal(ss_threshold_plan(&ctx, &p, 10 * 30000, 30000, &len, &idx, &m), SS_OK);
  assert_int_equal(m, 10);
  free(idx);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(magnitude_matches_analytic),
      cmocka_unit_test(chunk_with_margins_equals_whole),
      cmocka_unit_test(sinusoid_gain_and_phase),
      cmocka_unit_test(causal_state_carries),
      cmocka_unit_test(common_median),
      cmocka_unit_test(design_errors),
      cmocka_unit_test(noise_level),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
