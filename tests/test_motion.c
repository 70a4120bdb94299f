/* test_motion.c — the rigid motion estimate on synthetic spike tables with a known drift (a zigzag,
 * recovered within 2 µm RMS, the same for any thread count; a still probe stays under
 * motion.min_range_um), the spike depth rule, and the registration weights: a field linear in depth is
 * reproduced inside a column, a constant one everywhere (gaps included), past the column's ends the end
 * contact, unconnected channels keep their signal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/order.h"
#include "core/rng.h"
#include "params/params.h"
#include "stages/motion/motion.h"
#include "ss_test.h"

#define RATE_HZ 30000.0
#define DURATION_S 300.0
#define UNITS 20

static uint64_t seed;

/* The drift (µm) at time t: a zigzag of ±amp with period 100 s from 30 s on. */
static double zigzag(double t, double amp) {
  if (t < 30) return amp;
  double ph = fmod((t - 30) / 100.0, 1.0);
  return ph < 0.5 ? amp * (1 - 4 * ph) : amp * (-3 + 4 * ph);
}

typedef struct {
  int64_t n;
  int64_t *t;
  float *amp;
  double *depth;
} table;

/* Spikes of UNITS units at random depths on a 300 µm probe, ~10 Hz each, depth jitter 3 µm. */
static table make_table(double amp_um, uint64_t stream) {
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, stream);
  double y[UNITS], a[UNITS];
  for (int u = 0; u < UNITS; u++) {
    y[u] = 20 + 260 * ss_rng_next_uniform(&r);
    a[u] = -(40 + 300 * ss_rng_next_uniform(&r));
  }
  int64_t cap = (int64_t)(UNITS * 10 * DURATION_S * 1.2) + 16;
  table tb = {0, malloc(sizeof(int64_t) * cap), malloc(sizeof(float) * cap), malloc(sizeof(double) * cap)};
  for (int64_t s = 0; s < (int64_t)(DURATION_S * RATE_HZ) && tb.n < cap; s += 1 + (int64_t)ss_rng_next_below(&r, 300)) {
    int u = (int)ss_rng_next_below(&r, UNITS);
    tb.t[tb.n] = s;
    tb.amp[tb.n] = (float)(a[u] * (0.9 + 0.2 * ss_rng_next_uniform(&r)));
    tb.depth[tb.n] = y[u] + zigzag(s / RATE_HZ, amp_um) + 3 * ss_rng_next_normal(&r);
    tb.n++;
  }
  return tb;
}

static void table_free(table *tb) {
  free(tb->t);
  free(tb->amp);
  free(tb->depth);
}

/* RMS error of the estimate against the truth, both taken relative to their medians. */
static double rms_error(const ss_motion *m, double amp_um) {
  double *e = malloc(sizeof(double) * m->n_bins), *truth = malloc(sizeof(double) * m->n_bins);
  for (int64_t b = 0; b < m->n_bins; b++) truth[b] = zigzag((b + 0.5) * m->bin_samples / RATE_HZ, amp_um);
  for (int64_t b = 0; b < m->n_bins; b++) e[b] = m->shift_um[b] - truth[b];
  double *s = malloc(sizeof(double) * m->n_bins);
  memcpy(s, e, sizeof(double) * m->n_bins);
  double med = ss_order_median(s, m->n_bins), sum = 0;
  for (int64_t b = 0; b < m->n_bins; b++) sum += (e[b] - med) * (e[b] - med);
  free(e);
  free(truth);
  free(s);
  return sqrt(sum / m->n_bins);
}

static void estimate_case(double amp_um, uint64_t stream, int threads, ss_motion *m) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  table tb = make_table(amp_um, stream);
  if (ss_motion_estimate(&ctx, &p, tb.n, tb.t, tb.amp, tb.depth, 0, 300, (int64_t)(DURATION_S * RATE_HZ), RATE_HZ,
                         threads, m) != SS_OK)
    fail_msg("%s", ss_error_message(&ctx));
  table_free(&tb);
}

static void recovers_zigzag(void **state) {
  (void)state;
  ss_motion m, one;
  estimate_case(20.0, 1, 3, &m);
  double err = rms_error(&m, 20.0);
  print_message("zigzag ±20 µm: range %.1f µm, rms error %.2f µm\n", m.range_um, err);
  assert_true(err < 2.0);
  assert_true(m.range_um > 35 && m.range_um < 45);
  estimate_case(20.0, 1, 1, &one); /* the thread count does not change the estimate */
  assert_int_equal(one.n_bins, m.n_bins);
  assert_memory_equal(one.shift_um, m.shift_um, sizeof(double) * (size_t)m.n_bins);
  ss_motion_free(&one);
  ss_motion_free(&m);
}

static void still_probe_not_registered(void **state) {
  (void)state;
  ss_motion m;
  estimate_case(0.0, 2, 2, &m);
  ss_params p;
  ss_params_defaults(&p);
  print_message("still probe: range %.2f µm\n", m.range_um);
  assert_true(m.range_um < p.motion.min_range_um);
  ss_motion_free(&m);
}

static void depth_is_energy_weighted(void **state) {
  (void)state;
  const int C = 3, P = 2;
  const double y[3] = {0, 20, 40};
  const float f[2 * 3 * 2] = {3, 4, 0, 0, 3, 4, /* spike 0: energy 25 on channels 0 and 2 */
                              1, 0, 0, 0, 0, 0};
  const float mk[2 * 3] = {1, 1, 1, 0, 0, 0};
  const int32_t peak[2] = {1, 2};
  double d[2];
  ss_motion_spike_depth(2, C, P, f, mk, peak, y, d);
  assert_float_equal(d[0], 20.0, 1e-9);
  assert_float_equal(d[1], 40.0, 1e-9); /* no unmasked channel: the peak channel's depth */
}

/* 2 columns × 8 rows at 20 µm, channel c at column c % 2, row c / 2; channel 5 unconnected. */
static void make_probe(ss_probe *probe) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double x[16], y[16];
  for (int c = 0; c < 16; c++) {
    x[c] = 20.0 * (c % 2);
    y[c] = 20.0 * (c / 2);
  }
  if (ss_probe_from_positions(&ctx, 16, x, y, 40.0, probe) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  probe->connected[5] = 0;
}

/* Column 0 holds a field linear in depth, column 1 a constant, channel 5 (unconnected) 777. */
static float field(const ss_probe *probe, int c) {
  return c == 5 ? 777.0f : c % 2 ? 1500.0f : (float)(100 + 2 * probe->y[c]);
}

static void registration_interpolates(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe probe;
  make_probe(&probe);
  double shifts[5] = {0.0, 7.5, -13.0, 25.0, 200.0};
  ss_motion m = {.n_bins = 5, .bin_samples = 10, .shift_um = shifts};
  ss_motion_reg reg;
  if (ss_motion_reg_build(&ctx, &m, &probe, 16, &reg) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  float x[50 * 16];
  for (int t = 0; t < 50; t++)
    for (int c = 0; c < 16; c++) x[t * 16 + c] = field(&probe, c);
  if (ss_motion_apply(&ctx, &reg, x, 50, 0) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  for (int t = 0; t < 50; t++) {
    const double d = shifts[t / 10];
    for (int c = 0; c < 16; c++) {
      const double q = probe.y[c] + d;
      double want = field(&probe, c);
      if (c % 2 == 0 && q <= 0) want = 100; /* past the ends: the end contact */
      else if (c % 2 == 0 && q >= 140) want = 100 + 2 * 140;
      else if (c % 2 == 0 && q >= 20 && q <= 120) want = 100 + 2 * q; /* Catmull–Rom keeps a line */
      else if (c % 2 == 0) continue; /* the end intervals repeat the end contact: not a line there */
      assert_float_equal(x[t * 16 + c], want, 1e-3);
    }
  }
  ss_motion_reg_free(&reg);
  ss_probe_free(&probe);
}

int main(void) {
  seed = (uint64_t)time(NULL);
  printf("test_motion: seed %llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(recovers_zigzag),
      cmocka_unit_test(still_probe_not_registered),
      cmocka_unit_test(depth_is_energy_weighted),
      cmocka_unit_test(registration_interpolates),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
