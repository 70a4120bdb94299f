/* test_merge.c — the automatic merge on hand-built units: two halves of one unit merge; two
 * different units do not; a merge that would add refractory violations is refused; greedy order and
 * renumbering; the noise cluster never merges; units of one shape and different amplitudes do not;
 * the correlation and violation counts by hand.
 * The cleanup after it: far spikes go to noise, another unit's spikes to that unit, two units in one
 * cluster split at the density valley, one unit does not, both rules can be switched off, the
 * valley rule by hand, and a bad label is reported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "core/rng.h"
#include "stages/cleanup/cleanup.h"
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

static void run_ratio(const units *u, double max_amp_ratio, ss_merge_result *r) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  if (max_amp_ratio >= 0) p.merge.max_amp_ratio = max_amp_ratio;
  ss_merge_input in = {.n = u->n,
                       .times = u->times,
                       .labels = u->labels,
                       .k = u->k,
                       .n_channels = C,
                       .n_wave = W,
                       .mean_waveform = u->wave,
                       .mean_mask = u->mask,
                       .rate_hz = RATE};
  if (ss_merge_run(&ctx, &p, &in, r) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

static void run(const units *u, ss_merge_result *r) { run_ratio(u, -1, r); }

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

/* One shape at 100 and 30 (a unit and a smaller one of the same shape): refused by merge.max_amp_ratio
 * (2) whatever the correlation; merged when the ratio test is off. */
static void amplitude_ratio_veto(void **state) {
  (void)state;
  units *u = new_units(3);
  unit_wave(u->wave + 1 * C * W, 0, 2, 100.0, 1.0);
  unit_wave(u->wave + 2 * C * W, 0, 2, 30.0, 1.0);
  unit_mask(u->mask + 1 * C, 0, 1);
  unit_mask(u->mask + 2 * C, 0, 1);
  add_train(u, 1, 1000, 600, 100);
  add_train(u, 2, 1300, 600, 100);
  ss_merge_result r;
  run(u, &r);
  assert_int_equal(r.n_decisions, 1);
  assert_false(r.decisions[0].accepted);
  assert_true(r.decisions[0].corr > 0.99);
  assert_true(r.decisions[0].amp_ratio > 3.0 && r.decisions[0].amp_ratio < 3.6);
  assert_int_equal(r.k_out, 3);
  ss_merge_result_free(&r);
  run_ratio(u, 0, &r);
  assert_int_equal(r.n_merges, 1);
  assert_int_equal(r.k_out, 2);
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
  double corr = ss_merge_waveform_corr(u->wave + C * W, u->mask + C, u->wave + 2 * C * W, u->mask + 2 * C, C, W,
                                       &shared);
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

/* Three pieces of one unit; 1 and 2 share an origin (a split separated them): the best pair (1, 2)
 * is skipped, 3 joins 1, and the union does not take 2 either. */
static void origins_never_merge(void **state) {
  (void)state;
  units *u = new_units(4);
  for (int k = 1; k < 4; k++) {
    unit_wave(u->wave + k * C * W, 0, 2, 100.0, 1.0);
    unit_mask(u->mask + k * C, 0, 1);
  }
  add_train(u, 1, 1000, 900, 60);
  add_train(u, 2, 1300, 900, 60);
  add_train(u, 3, 1600, 900, 60);
  const int32_t origin[4] = {0, 1, 1, 3};
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  ss_merge_input in = {.n = u->n,
                       .times = u->times,
                       .labels = u->labels,
                       .k = u->k,
                       .n_channels = C,
                       .n_wave = W,
                       .mean_waveform = u->wave,
                       .mean_mask = u->mask,
                       .rate_hz = RATE,
                       .origin = origin};
  ss_merge_result r;
  if (ss_merge_run(&ctx, &p, &in, &r) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(r.n_decisions, 1);
  assert_int_equal(r.decisions[0].a, 1);
  assert_int_equal(r.decisions[0].b, 3);
  int32_t want[4] = {0, 1, 2, 1};
  for (int c = 0; c < 4; c++) assert_int_equal(r.map[c], want[c]);
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

/* --- cleanup ----------------------------------------------------------------------------------- */

#define CP 3        /* components per channel */
#define CD (C * CP) /* features */
#define CN 1024     /* spikes at most */

typedef struct {
  int64_t n, k;
  float x[CN * CD];
  float m[CN * C];
  int32_t labels[CN];
} fset;

/* Append `count` spikes of a unit: features centre·scale + a bounded (uniform ±spread) draw, masks 1 on
 * channels lo..hi and 0 elsewhere (the masked channels give the noise spread). */
static void add_unit(fset *f, ss_rng *r, int32_t label, int64_t count, const double *centre, double scale,
                     double spread, int lo, int hi) {
  for (int64_t i = 0; i < count; i++, f->n++) {
    assert_true(f->n < CN);
    for (int j = 0; j < CD; j++)
      f->x[f->n * CD + j] = (float)(centre[j] * scale + spread * (2.0 * ss_rng_next_uniform(r) - 1.0));
    for (int c = 0; c < C; c++) f->m[f->n * C + c] = (c >= lo && c <= hi) ? 1.0f : 0.0f;
    f->labels[f->n] = label;
  }
}

static ss_status cleanup(fset *f, const ss_params *p, ss_cleanup_result *r, ss_ctx *ctx) {
  ss_cleanup_input in = {.n = f->n, .n_channels = C, .n_pcs = CP, .features = f->x, .masks = f->m, .k = f->k};
  return ss_merge_cleanup(ctx, p, &in, f->labels, r);
}

static void run_cleanup(fset *f, const ss_params *p, ss_cleanup_result *r) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (cleanup(f, p, r, &ctx) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

/* Unit A on channels 0–1 and unit B on channels 2–3, 200 spikes each; cluster 1 also holds 5 spikes far
 * from both units (they go to noise) and 5 of B's (they go to cluster 2). */
static const double centre_a[CD] = {-80, 20, 5, -40, 10, 3, 0, 0, 0, 0, 0, 0};
static const double centre_b[CD] = {0, 0, 0, 0, 0, 0, -70, 25, 4, -60, 15, 2};

static fset *two_units(void) {
  fset *f = calloc(1, sizeof(fset));
  assert_non_null(f);
  ss_rng r = ss_rng_make(11, SS_RNG_TEST, 0);
  f->k = 3;
  add_unit(f, &r, 1, 200, centre_a, 1.0, 5.0, 0, 1);
  add_unit(f, &r, 2, 200, centre_b, 1.0, 5.0, 2, 3);
  return f;
}

static void outliers_leave(void **state) {
  (void)state;
  fset *f = two_units();
  ss_rng r = ss_rng_make(12, SS_RNG_TEST, 0);
  double far[CD];
  for (int j = 0; j < CD; j++) far[j] = centre_a[j] + (j % 2 ? 120.0 : -150.0);
  add_unit(f, &r, 1, 5, far, 1.0, 5.0, 0, 3);
  add_unit(f, &r, 1, 5, centre_b, 1.0, 5.0, 2, 3);
  ss_params p;
  ss_params_defaults(&p);
  ss_cleanup_result res;
  run_cleanup(f, &p, &res);
  assert_int_equal(res.k_in, 3);
  assert_int_equal(res.k_out, 3);
  assert_int_equal(res.n_splits, 0);
  for (int c = 0; c < 3; c++) assert_int_equal(res.origin[c], c);
  ss_cleanup_result_free(&res);
  assert_int_equal(res.n_outliers, 10);
  assert_int_equal(res.n_reassigned, 5);
  for (int64_t i = 0; i < 400; i++) assert_int_equal(f->labels[i], i < 200 ? 1 : 2);
  for (int64_t i = 400; i < 405; i++) assert_int_equal(f->labels[i], 0);
  for (int64_t i = 405; i < 410; i++) assert_int_equal(f->labels[i], 2);
  /* switched off: nothing moves */
  fset *g = two_units();
  add_unit(g, &r, 1, 5, far, 1.0, 5.0, 0, 3);
  p.merge.outlier_z2 = 0;
  p.merge.split_valley = 0;
  run_cleanup(g, &p, &res);
  ss_cleanup_result_free(&res);
  assert_int_equal(res.k_out, 3);
  assert_int_equal(res.n_outliers, 0);
  for (int64_t i = 0; i < g->n; i++) assert_int_equal(g->labels[i], i < 200 || i >= 400 ? 1 : 2);
  free(f);
  free(g);
}

/* Cluster 1 holds 150 spikes of unit A and 150 of a unit at 0.4 of A's amplitude on the same channels:
 * it splits, one part per unit. Cluster 2 (unit B alone, 300 spikes) stays whole. */
static void two_units_split(void **state) {
  (void)state;
  fset *f = calloc(1, sizeof(fset));
  assert_non_null(f);
  ss_rng r = ss_rng_make(13, SS_RNG_TEST, 0);
  f->k = 3;
  add_unit(f, &r, 1, 150, centre_a, 1.0, 5.0, 0, 1);
  add_unit(f, &r, 1, 150, centre_a, 0.4, 5.0, 0, 1);
  add_unit(f, &r, 2, 300, centre_b, 1.0, 5.0, 2, 3);
  ss_params p;
  ss_params_defaults(&p);
  ss_cleanup_result res;
  run_cleanup(f, &p, &res);
  assert_int_equal(res.n_splits, 1);
  assert_int_equal(res.k_out, 4);
  assert_int_equal(res.n_outliers, 0);
  int32_t a = f->labels[0], a2 = f->labels[150];
  assert_true(a != a2 && a >= 1 && a2 >= 1 && a != 2 && a2 != 2);
  for (int64_t i = 0; i < 300; i++) assert_int_equal(f->labels[i], i < 150 ? a : a2);
  for (int64_t i = 300; i < 600; i++) assert_int_equal(f->labels[i], 2);
  const int32_t origin[4] = {0, 1, 2, 1}; /* the split-off part (new id 3) comes from cluster 1 */
  for (int c = 0; c < 4; c++) assert_int_equal(res.origin[c], origin[c]);
  ss_cleanup_result_free(&res);
  /* split_min_spikes above either part: no split */
  for (int64_t i = 0; i < 300; i++) f->labels[i] = 1;
  for (int64_t i = 300; i < 600; i++) f->labels[i] = 2;
  p.merge.split_min_spikes = 151;
  run_cleanup(f, &p, &res);
  ss_cleanup_result_free(&res);
  assert_int_equal(res.n_splits, 0);
  assert_int_equal(res.k_out, 3);
  free(f);
}

/* merge.split_max_channels: the split test looks only at the channels of highest mean mask. Two groups
 * masked on channels 0–1 that differ only on channels 2–3 (mask 0 there) split when every channel is
 * looked at, and stay together with the test capped at 2 channels; unit A and its 0.4-scaled twin
 * (which differ on channels 0–1) still split with the cap. Outliers off: only the split acts. */
static void split_channel_cap(void **state) {
  (void)state;
  double hidden[CD];
  for (int j = 0; j < CD; j++) hidden[j] = j < 2 * CP ? centre_a[j] : -90.0 + 7.0 * j;
  const double *second[2] = {hidden, centre_a};
  const double scale[2] = {1.0, 0.4};
  const int64_t max_ch[2] = {2, C}, splits[2][2] = {{0, 1}, {1, 1}}; /* [case][cap index] */
  for (int which = 0; which < 2; which++)
    for (int cap = 0; cap < 2; cap++) {
      fset *f = calloc(1, sizeof(fset));
      assert_non_null(f);
      ss_rng r = ss_rng_make(14, SS_RNG_TEST, 0);
      f->k = 2;
      add_unit(f, &r, 1, 150, centre_a, 1.0, 5.0, 0, 1);
      add_unit(f, &r, 1, 150, second[which], scale[which], 5.0, 0, 1);
      ss_params p;
      ss_params_defaults(&p);
      p.merge.outlier_z2 = 0;
      p.merge.split_max_channels = max_ch[cap];
      ss_cleanup_result res;
      run_cleanup(f, &p, &res);
      ss_cleanup_result_free(&res);
      assert_int_equal(res.n_splits, splits[which][cap]);
      free(f);
    }
}

/* The valley rule on hand-made projections: two clumps split between them; one smooth bump does not;
 * a minimum part larger than a clump forbids the split. */
static void valley_by_hand(void **state) {
  (void)state;
  enum { M = 200 };
  double p[M], cut;
  for (int i = 0; i < M; i++) p[i] = i < M / 2 ? i * 0.01 : 10.0 + (i - M / 2) * 0.01; /* [0, 1) and [10, 11) */
  double ratio = ss_merge_valley(p, M, 30, &cut);
  assert_true(ratio < 0.05); /* bandwidth 1.56: the tails meet at 1.4 % of a peak */
  assert_true(cut > 1.0 && cut < 10.0);
  ratio = ss_merge_valley(p, M, M / 2 + 1, &cut);
  assert_true(ratio == 1.0 && isnan(cut));
  for (int i = 0; i < M; i++) { /* Gaussian quantiles: one smooth mode */
    double u = (i + 0.5) / M, t = u < 0.5 ? u : 1 - u, w = sqrt(-2 * log(t));
    double z = w - (2.515517 + 0.802853 * w + 0.010328 * w * w) /
                       (1 + 1.432788 * w + 0.189269 * w * w + 0.001308 * w * w * w);
    p[i] = u < 0.5 ? -z : z; /* Abramowitz–Stegun 26.2.23, |error| < 4.5e-4 */
  }
  ratio = ss_merge_valley(p, M, 30, &cut);
  assert_true(ratio == 1.0);
  assert_true(ss_merge_valley(p, 1, 1, &cut) == 1.0); /* too few points: no density */
}

static void cleanup_bad_label(void **state) {
  (void)state;
  fset *f = two_units();
  f->labels[3] = 7;
  ss_params p;
  ss_params_defaults(&p);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_cleanup_result res;
  assert_int_equal(cleanup(f, &p, &res, &ctx), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "cleanup: spike 3: label 7 outside 0..2");
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(halves_merge),         cmocka_unit_test(different_units_stay),
      cmocka_unit_test(refractory_veto),      cmocka_unit_test(greedy_three_pieces),
      cmocka_unit_test(noise_never_merges),   cmocka_unit_test(by_hand),
      cmocka_unit_test(outliers_leave),       cmocka_unit_test(two_units_split),
      cmocka_unit_test(split_channel_cap),    cmocka_unit_test(valley_by_hand),
      cmocka_unit_test(cleanup_bad_label),    cmocka_unit_test(origins_never_merge),
      cmocka_unit_test(amplitude_ratio_veto),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
