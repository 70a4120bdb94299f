/* test_merge.c — the automatic merge on hand-built units: two halves of one unit merge; two
 * different units do not; a merge that would add refractory violations is refused; greedy order and
 * renumbering; the noise cluster never merges; the correlation and violation counts by hand. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "src/merge.h"
#include "ss_test.h"

#define C 4
#define W 8
#define RATE 30000.0
#define MAX_SPIKES 4096

/* A unit's mean waveform: a trough on channels lo..hi (amplitude halving per channel away from lo). */
static void unit_wave(float *w, int lo, int hi, double amp, double width) {
  for (int c = 0; c < C; c++)
    for (int t = 0; t < W; t++) {
      double on = (c >= lo && c <= hi) ? amp / (1 << (c - lo)) : 0.0;
      w[c * W + t] = (float)(-on * exp(-((t - 3.5) * (t - 3.5)) / (2 * width * width)) + 0.01 * (c + 1) * t);
    }
}

static void unit_mask(float *m, int lo, int hi) {
  for (int c = 0; c < C; c++) m[c] = (c >= lo && c <= hi) ? 1.0f : 0.0f;
}

typedef struct {
  int64_t n, k;
  int64_t times[MAX_SPIKES];
  int32_t labels[MAX_SPIKES];
  float wave[8 * C * W];
  float mask[8 * C];
} units;

/* Append spikes of `label` at start, start + period, ... (count spikes), then sort by time. */
static void add_train(units *u, int32_t label, int64_t start, int64_t period, int64_t count) {
  for (int64_t i = 0; i < count; i++) {
    u->times[u->n] = start + i * period;
    u->labels[u->n++] = label;
  }
  for (int64_t i = 1; i < u->n; i++) /* insertion sort, stable */
    for (int64_t j = i; j > 0 && u->times[j] < u->times[j - 1]; j--) {
      int64_t t = u->times[j];
      u->times[j] = u->times[j - 1];
      u->times[j - 1] = t;
      int32_t l = u->labels[j];
      u->labels[j] = u->labels[j - 1];
      u->labels[j - 1] = l;
    }
}

static void run(const units *u, ss_merge_result *r) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  ss_merge_input in = {.n = u->n, .times = u->times, .labels = u->labels, .k = u->k, .n_channels = C, .n_wave = W,
                       .mean_waveform = u->wave, .mean_mask = u->mask, .rate_hz = RATE};
  if (ss_merge_run(&ctx, &p, &in, r) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

static units *new_units(int64_t k) {
  units *u = calloc(1, sizeof(units));
  assert_non_null(u);
  u->k = k;
  unit_wave(u->wave, 0, 0, 0.0, 1.0); /* noise: flat */
  return u;
}

/* One unit firing every 300 samples (10 ms), its spikes dealt alternately to clusters 1 and 2. */
static void halves_merge(void **state) {
  (void)state;
  units *u = new_units(3);
  unit_wave(u->wave + 1 * C * W, 0, 2, 100.0, 1.0);
  unit_wave(u->wave + 2 * C * W, 0, 2, 90.0, 1.0); /* the smaller-amplitude half */
  unit_mask(u->mask + 1 * C, 0, 1);
  unit_mask(u->mask + 2 * C, 0, 1);
  add_train(u, 1, 1000, 600, 100);
  add_train(u, 2, 1300, 600, 100);
  add_train(u, 0, 1010, 7000, 10);
  ss_merge_result r;
  run(u, &r);
  assert_int_equal(r.k_in, 3);
  assert_int_equal(r.k_out, 2);
  assert_int_equal(r.n_merges, 1);
  assert_int_equal(r.n_decisions, 1);
  assert_int_equal(r.map[0], 0);
  assert_int_equal(r.map[1], 1);
  assert_int_equal(r.map[2], 1);
  assert_int_equal(r.decisions[0].a, 1);
  assert_int_equal(r.decisions[0].b, 2);
  assert_true(r.decisions[0].accepted);
  assert_true(r.decisions[0].corr > 0.999);
  assert_int_equal(r.decisions[0].n_shared, 2);
  assert_true(r.decisions[0].viol_before == 0.0 && r.decisions[0].viol_after == 0.0);
  ss_merge_result_free(&r);
  free(u);
}

/* Different footprints (channels 0–1 against 2–3): the correlation is far below 0.9, no decision. */
static void different_units_stay(void **state) {
  (void)state;
  units *u = new_units(3);
  unit_wave(u->wave + 1 * C * W, 0, 1, 100.0, 1.0);
  unit_wave(u->wave + 2 * C * W, 2, 3, 100.0, 1.0);
  unit_mask(u->mask + 1 * C, 0, 1);
  unit_mask(u->mask + 2 * C, 2, 3);
  add_train(u, 1, 1000, 600, 100);
  add_train(u, 2, 1300, 600, 100);
  ss_merge_result r;
  run(u, &r);
  assert_int_equal(r.k_out, 3);
  assert_int_equal(r.n_merges, 0);
  assert_int_equal(r.n_decisions, 0);
  for (int c = 0; c < 3; c++) assert_int_equal(r.map[c], c);
  int shared;
  double corr = ss_merge_waveform_corr(u->wave + C * W, u->mask + C, u->wave + 2 * C * W, u->mask + 2 * C, C, W, &shared);
  assert_int_equal(shared, 4);
  assert_true(corr < 0.5);
  ss_merge_result_free(&r);
  free(u);
}

/* Same waveform, but cluster 2 fires 10 samples (0.33 ms) after every spike of cluster 1: the union
 * would violate the 1.5 ms refractory period at every pair, so the merge is refused. */
static void refractory_veto(void **state) {
  (void)state;
  units *u = new_units(3);
  unit_wave(u->wave + 1 * C * W, 0, 2, 100.0, 1.0);
  unit_wave(u->wave + 2 * C * W, 0, 2, 100.0, 1.0);
  unit_mask(u->mask + 1 * C, 0, 1);
  unit_mask(u->mask + 2 * C, 0, 1);
  add_train(u, 1, 1000, 600, 100);
  add_train(u, 2, 1010, 600, 100);
  ss_merge_result r;
  run(u, &r);
  assert_int_equal(r.k_out, 3);
  assert_int_equal(r.n_merges, 0);
  assert_int_equal(r.n_decisions, 1);
  assert_false(r.decisions[0].accepted);
  assert_true(r.decisions[0].corr > 0.999);
  assert_true(r.decisions[0].viol_before == 0.0);
  assert_true(fabs(r.decisions[0].viol_after - 100.0 / 200.0) < 1e-12); /* 100 short intervals / 200 spikes */
  ss_merge_result_free(&r);
  free(u);
}

/* Three pieces of one unit and a distinct unit in between: greedy merges 1, 3, 4 into 1; the
 * outputs are renumbered contiguously (0, 1, 2) in the order of their smallest input id. */
static void greedy_three_pieces(void **state) {
  (void)state;
  units *u = new_units(5);
  unit_wave(u->wave + 1 * C * W, 0, 2, 100.0, 1.0);
  unit_wave(u->wave + 2 * C * W, 2, 3, 100.0, 2.0);
  unit_wave(u->wave + 3 * C * W, 0, 2, 95.0, 1.0);
  unit_wave(u->wave + 4 * C * W, 0, 2, 80.0, 1.05);
  for (int k = 1; k < 5; k++) unit_mask(u->mask + k * C, k == 2 ? 2 : 0, k == 2 ? 3 : 1);
  add_train(u, 1, 1000, 900, 60);
  add_train(u, 3, 1300, 900, 60);
  add_train(u, 4, 1600, 900, 60);
  add_train(u, 2, 1100, 900, 60);
  ss_merge_result r;
  run(u, &r);
  assert_int_equal(r.k_out, 3);
  assert_int_equal(r.n_merges, 2);
  int32_t want[5] = {0, 1, 2, 1, 1};
  for (int c = 0; c < 5; c++) assert_int_equal(r.map[c], want[c]);
  assert_true(r.decisions[0].corr >= r.decisions[1].corr - 0.01); /* the best pair first */
  ss_merge_result_free(&r);
  free(u);
}

/* The noise cluster has the same waveform as unit 1, yet never merges. */
static void noise_never_merges(void **state) {
  (void)state;
  units *u = new_units(2);
  unit_wave(u->wave, 0, 2, 100.0, 1.0);
  unit_wave(u->wave + C * W, 0, 2, 100.0, 1.0);
  unit_mask(u->mask, 0, 1);
  unit_mask(u->mask + C, 0, 1);
  add_train(u, 0, 1000, 600, 50);
  add_train(u, 1, 1300, 600, 50);
  ss_merge_result r;
  run(u, &r);
  assert_int_equal(r.k_out, 2);
  assert_int_equal(r.n_decisions, 0);
  ss_merge_result_free(&r);
  free(u);
}

static void by_hand(void **state) {
  (void)state;
  /* union of {0, 100, 200} and {50, 260}: intervals 50 50 100 60 → 2 below 55, 4 below 101 */
  int64_t a[] = {0, 100, 200}, b[] = {50, 260};
  assert_int_equal(ss_merge_violations(a, 3, b, 2, 55), 2);
  assert_int_equal(ss_merge_violations(a, 3, b, 2, 101), 4);
  assert_int_equal(ss_merge_violations(a, 3, NULL, 0, 101), 2);
  assert_int_equal(ss_merge_violations(NULL, 0, NULL, 0, 10), 0);
  /* Pearson of (1, 2, 3, 4) and (2, 4, 6, 9) on one shared channel of 4 samples:
   * means 2.5, 5.25; cov 11.5/4... r = 11.5 / sqrt(5 · 26.75) */
  float wa[2 * 4] = {1, 2, 3, 4, 0, 0, 0, 0}, wb[2 * 4] = {2, 4, 6, 9, 0, 0, 0, 0};
  float ma[2] = {1, 0}, mb[2] = {0.6f, 0.2f};
  int shared;
  double r = ss_merge_waveform_corr(wa, ma, wb, mb, 2, 4, &shared);
  assert_int_equal(shared, 1);
  assert_true(fabs(r - 11.5 / sqrt(5.0 * 26.75)) < 1e-12);
  /* no channel at or above SS_MERGE_CHANNEL_MASK: the two peak channels (here both channel 0) */
  float lo[2] = {0.1f, 0.2f};
  r = ss_merge_waveform_corr(wa, lo, wb, lo, 2, 4, &shared);
  assert_int_equal(shared, 1);
  assert_true(fabs(r - 11.5 / sqrt(5.0 * 26.75)) < 1e-12);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(halves_merge),       cmocka_unit_test(different_units_stay), cmocka_unit_test(refractory_veto),
      cmocka_unit_test(greedy_three_pieces), cmocka_unit_test(noise_never_merges), cmocka_unit_test(by_hand),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
