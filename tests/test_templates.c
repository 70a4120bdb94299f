/* test_templates.c — the template pass on hand-built feature vectors: units keep and win back their spikes
 * from the noise cluster and from a catch-all cluster, which vanishes; pure noise stays noise; the gain
 * by hand; a unit keeps the spikes that a better-scoring unit does not explain; a cluster of two units split
 * in two; the pass switched off; a bad label is reported. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "core/rng.h"
#include "stages/templates/templates.h"
#include "ss_test.h"

#define C 6
#define P 2
#define D (C * P)
#define N_MAX 1200

/* Unit u (0..2) sits on channels 2u and 2u+1. */
static const float unit_t[3][D] = {
    {-20, 5, -10, 3, 0, 0, 0, 0, 0, 0, 0, 0},
    {0, 0, 0, 0, -14, -6, -25, 4, 0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0, 12, -18, -9, -7},
};

typedef struct {
  int64_t n;
  float x[N_MAX * D], m[N_MAX * C];
  int32_t peak[N_MAX], label[N_MAX], truth[N_MAX]; /* truth: unit + 1, 0 for noise, -1 for a collision */
} set;

/* A spike of the units in `which` (bit u: unit u), unit noise per feature, given initial label. */
static void add(set *s, ss_rng *r, int which, int32_t label, int32_t truth) {
  const int64_t i = s->n++;
  int peak = 0;
  double best = 0;
  for (int j = 0; j < D; j++) {
    double v = ss_rng_next_normal(r);
    for (int u = 0; u < 3; u++)
      if (which & (1 << u)) v += unit_t[u][j];
    s->x[i * D + j] = (float)v;
  }
  for (int c = 0; c < C; c++) {
    int on = 0;
    for (int u = 0; u < 3; u++) on |= (which & (1 << u)) && c / 2 == u;
    s->m[i * C + c] = on ? 1.0f : 0.0f;
    double e = fabs(s->x[i * D + c * P]);
    if (on && e > best) {
      best = e;
      peak = c;
    }
  }
  s->peak[i] = which ? peak : (int)ss_rng_next_below(r, C);
  s->label[i] = label;
  s->truth[i] = truth;
}

/* Units A, B, C in clusters 1–3; part of A in noise; a catch-all cluster 4 of B, C and A+B collisions; pure
 * noise detections in cluster 0. */
static set *build(void) {
  set *s = calloc(1, sizeof(set));
  ss_rng r = ss_rng_make(7, SS_RNG_TEST, 0);
  for (int i = 0; i < 160; i++) add(s, &r, 1, 1, 1);
  for (int i = 0; i < 160; i++) add(s, &r, 2, 2, 2);
  for (int i = 0; i < 150; i++) add(s, &r, 4, 3, 3);
  for (int i = 0; i < 40; i++) add(s, &r, 1, 0, 1);
  for (int i = 0; i < 40; i++) add(s, &r, 2, 4, 2);
  for (int i = 0; i < 50; i++) add(s, &r, 4, 4, 3);
  for (int i = 0; i < 30; i++) add(s, &r, 3, 4, -1);
  for (int i = 0; i < 20; i++) add(s, &r, 0, 0, 0);
  return s;
}

static ss_templates_input input_of(const set *s, int64_t k) {
  return (ss_templates_input){.n = s->n,
                              .n_channels = C,
                              .n_pcs = P,
                              .features = s->x,
                              .masks = s->m,
                              .peak_channel = s->peak,
                              .k = k,
                              .n_threads = 2};
}

static void units_win_back_spikes(void **state) {
  (void)state;
  set *s = build();
  ss_params p;
  ss_params_defaults(&p);
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ctx.quiet = 1;
  ss_templates_input in = input_of(s, 5);
  ss_templates_result r;
  assert_int_equal(ss_templates_assign(&ctx, &p, &in, s->label, &r), SS_OK);
  assert_int_equal(r.k_in, 5);
  assert_int_equal(r.k_out, 4); /* the catch-all is gone */
  assert_int_equal(r.n_units, 3);
  for (int64_t i = 0; i < s->n; i++) {
    if (s->truth[i] > 0) assert_int_equal(s->label[i], s->truth[i]);
    else if (s->truth[i] == 0) assert_int_equal(s->label[i], 0);
    else assert_true(s->label[i] == 1 || s->label[i] == 2);
  }
  assert_int_equal(r.n_noise_in, 60);
  assert_int_equal(r.n_noise_out, 20);
  free(s);
}

/* A spike x = t + unit noise on channels 0–1 (the rest noise), peak channel 0, given label. */
static void add_shape(set *s, ss_rng *r, const float *t, int32_t label) {
  const int64_t i = s->n++;
  for (int j = 0; j < D; j++) s->x[i * D + j] = (float)(ss_rng_next_normal(r) + (j < 2 * P ? t[j] : 0));
  for (int c = 0; c < C; c++) s->m[i * C + c] = c < 2 ? 1.0f : 0.0f;
  s->peak[i] = 0;
  s->label[i] = label;
  s->truth[i] = label;
}

/* Cluster 1: a small unit S and a few spikes of a large unit B (a unit: S is the majority); cluster 2: a
 * large unit L of B's size and a similar shape (correlation 0.86). L's fit removes more of a B spike than
 * S's clamped one but leaves ~70 noise variances per feature (a quarter of its energy): with the move rule
 * the B spikes stay in cluster 1, without it (templates.move_residual 0) they go to L. */
static void unit_keeps_unexplained_spikes(void **state) {
  (void)state;
  static const float ts[4] = {-10, 3, -2, 4}, tl[4] = {-32, 10, -14, 8}, tb[4] = {-26, 0, -20, -6};
  for (int move = 1; move >= 0; move--) {
    set *s = calloc(1, sizeof(set));
    ss_rng g = ss_rng_make(5, SS_RNG_TEST, 0);
    for (int i = 0; i < 200; i++) add_shape(s, &g, ts, 1);
    for (int i = 0; i < 60; i++) add_shape(s, &g, tb, 1);
    for (int i = 0; i < 200; i++) add_shape(s, &g, tl, 2);
    ss_params p;
    ss_params_defaults(&p);
    if (!move) p.templates.move_residual = 0;
    ss_ctx ctx;
    ss_ctx_init(&ctx);
    ctx.quiet = 1;
    ss_templates_input in = input_of(s, 3);
    ss_templates_result r;
    assert_int_equal(ss_templates_assign(&ctx, &p, &in, s->label, &r), SS_OK);
    assert_int_equal(r.k_out, 3);
    for (int64_t i = 0; i < 200; i++) assert_int_equal(s->label[i], 1);
    for (int64_t i = 200; i < 260; i++) assert_int_equal(s->label[i], move ? 1 : 2);
    for (int64_t i = 260; i < 460; i++) assert_int_equal(s->label[i], 2);
    free(s);
  }
}

/* Units A and C in one cluster, B alone, a few of A in a catch-all with B: the split makes A and C units
 * of their own; without it (split_depth 0) the two-unit cluster fails the unit test and its spikes are lost
 * to B or to noise. */
static void two_units_in_one_cluster_split(void **state) {
  (void)state;
  for (int depth = 4; depth >= 0; depth -= 4) {
    set *s = calloc(1, sizeof(set));
    ss_rng g = ss_rng_make(11, SS_RNG_TEST, 0);
    for (int i = 0; i < 200; i++) add(s, &g, 1, 1, 1);
    for (int i = 0; i < 200; i++) add(s, &g, 4, 1, 3);
    for (int i = 0; i < 200; i++) add(s, &g, 2, 2, 2);
    for (int i = 0; i < 30; i++) add(s, &g, 1, 3, 1);
    for (int i = 0; i < 30; i++) add(s, &g, 2, 3, 2);
    ss_params p;
    ss_params_defaults(&p);
    p.templates.split_depth = depth;
    ss_ctx ctx;
    ss_ctx_init(&ctx);
    ctx.quiet = 1;
    ss_templates_input in = input_of(s, 4);
    ss_templates_result r;
    assert_int_equal(ss_templates_assign(&ctx, &p, &in, s->label, &r), SS_OK);
    int32_t of[4] = {-1, -1, -1, -1}; /* the label of each unit's first spike */
    int64_t right = 0;
    for (int64_t i = 0; i < s->n; i++) {
      if (of[s->truth[i]] < 0) of[s->truth[i]] = s->label[i];
      right += s->label[i] == of[s->truth[i]];
    }
    if (depth > 0) {
      assert_int_equal(r.n_split, 2); /* the A+C cluster and the A/B catch-all */
      assert_int_equal(r.n_units, 3);
      assert_int_equal(r.k_out, 4);
      assert_int_equal(right, s->n);
      assert_true(of[1] > 0 && of[2] > 0 && of[3] > 0 && of[1] != of[2] && of[1] != of[3] && of[2] != of[3]);
    } else {
      assert_int_equal(r.n_split, 0);
      assert_true(of[1] == 0 || of[3] == 0 || of[1] == of[3]);
    }
    free(s);
  }
}

static void off_keeps_labels(void **state) {
  (void)state;
  set *s = build();
  int32_t before[N_MAX];
  memcpy(before, s->label, sizeof(before));
  ss_params p;
  ss_params_defaults(&p);
  p.templates.iterations = 0;
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ss_templates_input in = input_of(s, 5);
  ss_templates_result r;
  assert_int_equal(ss_templates_assign(&ctx, &p, &in, s->label, &r), SS_OK);
  assert_memory_equal(before, s->label, (size_t)s->n * sizeof(int32_t));
  assert_int_equal(r.k_out, 5);
  free(s);
}

static void gain_by_hand(void **state) {
  (void)state;
  const float t[4] = {3, 4, 0, 0};
  const uint8_t fp[2] = {1, 0};
  float x[4] = {3, 4, 100, 100}; /* channel 1 is outside the footprint */
  double a;
  assert_float_equal(ss_templates_gain(x, t, fp, 2, 2, 0.5, 1.5, &a), 25.0, 1e-9);
  assert_float_equal(a, 1.0, 1e-12);
  x[0] = 6;
  x[1] = 8; /* twice the template: the amplitude is clamped at 1.5, gain 2·1.5·50 − 2.25·25 */
  assert_float_equal(ss_templates_gain(x, t, fp, 2, 2, 0.5, 1.5, &a), 93.75, 1e-9);
  assert_float_equal(a, 1.5, 1e-12);
}

static void bad_label(void **state) {
  (void)state;
  set *s = build();
  s->label[3] = 9;
  ss_params p;
  ss_params_defaults(&p);
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ctx.quiet = 1;
  ss_templates_input in = input_of(s, 5);
  ss_templates_result r;
  assert_int_equal(ss_templates_assign(&ctx, &p, &in, s->label, &r), SS_ERR_INPUT);
  free(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(units_win_back_spikes),
      cmocka_unit_test(unit_keeps_unexplained_spikes),
      cmocka_unit_test(two_units_in_one_cluster_split),
      cmocka_unit_test(off_keeps_labels),
      cmocka_unit_test(gain_by_hand),
      cmocka_unit_test(bad_label),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
