/* test_match.c — template matching on the CPU (stages/match/match.c): a hand-made bank of five units with
 * overlapping footprints, spikes planted at known rows in unit noise (overlapping pairs included),
 * every one found with its unit and amplitude and nothing else; spikes outside the owned rows matched
 * but not reported; the residual is the noise; the bank's shapes, unusable units and channels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "match_test_util.h"

#define NK 5
#define NC 12
#define NW 32
#define NB 10
#define ROWS 6000
#define RATE 30000.0
#define OWN_BEGIN 400
#define OWN_END 5600
#define AMP_TOL 0.1
#define MAX_PLANTED 128

static const unit_shape shapes[NK] = {
    {.peak = 1, .depth = 90, .s1 = 1.0, .s2 = 3, .rebound = 0.3, .lag = 5, .spread = 1.2, .skew = 0.3},
    {.peak = 4, .depth = 70, .s1 = 1.6, .s2 = 4, .rebound = 0.5, .lag = 7, .spread = 1.5, .skew = 0},
    {.peak = 7, .depth = 110, .s1 = 0.9, .s2 = 2.5, .rebound = 0.2, .lag = 4, .spread = 1.0, .skew = 0.5},
    {.peak = 10, .depth = 60, .s1 = 2.2, .s2 = 5, .rebound = 0.4, .lag = 8, .spread = 1.8, .skew = 0.2},
    {.peak = 6, .depth = -50, .s1 = 1.3, .s2 = 3, .rebound = 0.6, .lag = 6, .spread = 1.1, .skew = 0.4},
};

typedef struct {
  int64_t n;
  int64_t t[MAX_PLANTED];
  int u[MAX_PLANTED];
  double a[MAX_PLANTED];
} planted;

static void bank_of(const float *tmpl, const float *sigma, ss_match_bank *bank) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  if (ss_match_bank_build(&ctx, &p, RATE, tmpl, NK, NW, NC, NB, sigma, bank) != SS_OK)
    fail_msg("bank: %s", ss_error_message(&ctx));
}

static void make_templates(float *tmpl) {
  for (int u = 0; u < NK; u++) shape_template(&shapes[u], NW, NC, NB, tmpl + (size_t)u * NW * NC);
}

/* How much a spike of u at amplitude a, d samples after one of v, moves v's amplitude estimate. */
static double leak(const ss_match_bank *b, int v, int u, int d, double a) {
  if (d <= -NW || d >= NW) return 0;
  return fabs(a * b->cross[((size_t)v * NK + u) * (2 * NW - 1) + d + NW - 1]) / b->norm[v];
}

static void add(planted *pl, int64_t t, int u, double a) {
  assert_true(pl->n < MAX_PLANTED);
  pl->t[pl->n] = t;
  pl->u[pl->n] = u;
  pl->a[pl->n] = a;
  pl->n++;
}

/* Isolated spikes every 150 rows cycling through the units, and overlapping pairs (units sharing
 * channels, 3–15 samples apart) whose templates barely correlate at that lag, so greedy pursuit can
 * recover both amplitudes; one spike before and one after the owned rows. */
static void plan(const ss_match_bank *b, planted *pl) {
  ss_rng r = ss_rng_make(11, SS_RNG_TEST, 1);
  pl->n = 0;
  add(pl, 200, 2, 1.0);
  add(pl, 5800, 0, 1.1);
  int pairs = 0;
  for (int64_t t = OWN_BEGIN + 100; t + 200 < OWN_END; t += 150) {
    const int u = (int)((t / 150) % NK);
    const double a = 0.75 + 0.6 * ss_rng_next_uniform(&r);
    add(pl, t, u, a);
    if ((t / 150) % 3 != 0) continue;
    /* a partner v sharing a channel, d samples later */
    for (int tries = 0; tries < 40; tries++) {
      const int v = (int)ss_rng_next_below(&r, NK), d = 3 + (int)ss_rng_next_below(&r, 13);
      const double av = 0.75 + 0.6 * ss_rng_next_uniform(&r);
      int share = 0;
      for (int32_t q = b->nb_start[u]; q < b->nb_start[u + 1]; q++) share |= b->nb[q] == v;
      if (v == u || !share || leak(b, u, v, d, av) > 0.02 || leak(b, v, u, -d, a) > 0.02) continue;
      add(pl, t + d, v, av);
      pairs++;
      break;
    }
  }
  assert_true(pairs >= 5); /* the fixture does plant overlaps */
}

static void matched_planted(void **state) {
  (void)state;
  float tmpl[NK * NW * NC], sigma[NC];
  for (int c = 0; c < NC; c++) sigma[c] = 1.0f;
  make_templates(tmpl);
  ss_match_bank bank;
  bank_of(tmpl, sigma, &bank);
  assert_int_equal(bank.n_unusable, 0);
  planted pl;
  plan(&bank, &pl);
  float *x = malloc(sizeof(float) * ROWS * NC);
  fill_noise(x, ROWS, NC, 1.0, 7, 0);
  for (int64_t i = 0; i < pl.n; i++) plant(x, ROWS, NC, tmpl, NW, NB, pl.u[i], pl.t[i], pl.a[i]);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_match_chunk ch =
      {.x = x, .n_rows = ROWS, .search_begin = 0, .search_end = ROWS, .own_begin = OWN_BEGIN, .own_end = OWN_END};
  ss_match_work w = {0};
  ss_match_list out = {0};
  assert_int_equal(ss_match_chunk_cpu(&ctx, &bank, &ch, &w, &out), SS_OK);
  int64_t owned = 0;
  for (int64_t i = 0; i < pl.n; i++) {
    const int own = pl.t[i] >= OWN_BEGIN && pl.t[i] < OWN_END;
    owned += own;
    int64_t hit = -1;
    for (int64_t q = 0; q < out.n; q++)
      if (out.row[q] == pl.t[i] && out.unit[q] == pl.u[i]) hit = q;
    if (!own) {
      if (hit >= 0) fail_msg("spike at row %lld outside the owned rows was reported", (long long)pl.t[i]);
      continue;
    }
    if (hit < 0) fail_msg("planted spike of unit %d at row %lld not found", pl.u[i], (long long)pl.t[i]);
    if (fabs(out.amp[hit] - pl.a[i]) > AMP_TOL)
      fail_msg("unit %d at row %lld: amplitude %.3f, planted %.3f", pl.u[i], (long long)pl.t[i], out.amp[hit], pl.a[i]);
  }
  if (out.n != owned)
    fail_msg("%lld spikes reported, %lld planted in the owned rows", (long long)out.n, (long long)owned);
  for (int64_t q = 1; q < out.n; q++)
    assert_true(out.row[q - 1] < out.row[q] || (out.row[q - 1] == out.row[q] && out.unit[q - 1] < out.unit[q]));
  /* the residual is the noise: every planted spike (owned or not) was subtracted */
  double e = 0;
  for (int64_t i = 0; i < (int64_t)ROWS * NC; i++) e += (double)x[i] * x[i];
  e /= (double)ROWS * NC;
  if (e < 0.95 || e > 1.05) fail_msg("residual energy %.4f per sample, noise alone gives 1", e);
  for (int64_t i = 0; i < pl.n; i++) {
    double ew = 0;
    for (int k = 0; k < NW; k++)
      for (int c = 0; c < NC; c++) {
        const float v = x[(pl.t[i] - NB + k) * NC + c];
        ew += (double)v * v;
      }
    ew /= (double)NW * NC;
    if (ew > 2.0) fail_msg("residual energy %.2f around the spike at row %lld", ew, (long long)pl.t[i]);
  }
  free(x);
  ss_match_list_free(&out);
  ss_match_work_free(&w);
  ss_match_bank_free(&bank);
}

/* Noise alone: nothing is matched and the chunk is left as it was. */
static void noise_alone(void **state) {
  (void)state;
  float tmpl[NK * NW * NC], sigma[NC];
  for (int c = 0; c < NC; c++) sigma[c] = 1.0f;
  make_templates(tmpl);
  ss_match_bank bank;
  bank_of(tmpl, sigma, &bank);
  float *x = malloc(sizeof(float) * ROWS * NC), *x0 = malloc(sizeof(float) * ROWS * NC);
  fill_noise(x, ROWS, NC, 1.0, 8, 0);
  memcpy(x0, x, sizeof(float) * ROWS * NC);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_match_chunk ch = {.x = x, .n_rows = ROWS, .search_begin = 0, .search_end = ROWS, .own_begin = 0, .own_end = ROWS};
  ss_match_work w = {0};
  ss_match_list out = {0};
  assert_int_equal(ss_match_chunk_cpu(&ctx, &bank, &ch, &w, &out), SS_OK);
  assert_int_equal(out.n, 0);
  assert_memory_equal(x, x0, sizeof(float) * ROWS * NC);
  free(x);
  free(x0);
  ss_match_list_free(&out);
  ss_match_work_free(&w);
  ss_match_bank_free(&bank);
}

/* NK = 0 builds an empty bank that matches nothing; bad shapes are refused. */
static void bank_shapes(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  float sigma[NC], tmpl[NK * NW * NC];
  for (int c = 0; c < NC; c++) sigma[c] = 1.0f;
  make_templates(tmpl);
  ss_match_bank b;
  assert_int_equal(ss_match_bank_build(&ctx, &p, RATE, tmpl, 0, NW, NC, NB, sigma, &b), SS_OK);
  assert_int_equal(b.K, 0);
  assert_int_equal(b.n_unusable, 0);
  float x[64 * NC];
  fill_noise(x, 64, NC, 1.0, 9, 0);
  ss_match_chunk ch = {.x = x, .n_rows = 64, .search_begin = 0, .search_end = 64, .own_begin = 0, .own_end = 64};
  ss_match_work w = {0};
  ss_match_list out = {0};
  assert_int_equal(ss_match_chunk_cpu(&ctx, &b, &ch, &w, &out), SS_OK);
  assert_int_equal(out.n, 0);
  ss_match_bank_free(&b);
  const int bad[][4] = {{-1, NW, NC, NB}, {NK, 0, NC, NB}, {NK, NW, 0, NB}, {NK, NW, NC, -1}, {NK, NW, NC, NW}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    ss_test_ctx(&ctx);
    assert_int_equal(ss_match_bank_build(&ctx, &p, RATE, tmpl, bad[i][0], bad[i][1], bad[i][2], bad[i][3], sigma, &b),
                     SS_ERR_USAGE);
    assert_non_null(strstr(ss_error_message(&ctx), "bad bank shape"));
  }
  ss_match_list_free(&out);
  ss_match_work_free(&w);
}

/* Units that can never be matched: a flat template (empty footprint), one of a few µV (below the
 * footprint level), one on a single sample whose energy is below match.min_gain; a channel without a
 * noise level is never part of a footprint. None of them is reported, the others still are. */
static void unusable_units(void **state) {
  (void)state;
  float tmpl[NK * NW * NC], sigma[NC];
  for (int c = 0; c < NC; c++) sigma[c] = 1.0f;
  make_templates(tmpl);
  memset(tmpl + 1 * NW * NC, 0, sizeof(float) * NW * NC);            /* unit 1: flat */
  for (int e = 0; e < NW * NC; e++) tmpl[2 * NW * NC + e] *= 0.005f; /* unit 2: under 1 µV */
  memset(tmpl + 3 * NW * NC, 0, sizeof(float) * NW * NC);
  tmpl[3 * NW * NC + NB * NC + 10] = 5.0f; /* unit 3: n = 25 < min_gain 60 */
  sigma[1] = 0.0f;                         /* unit 0's peak channel: not used */
  ss_match_bank b;
  bank_of(tmpl, sigma, &b);
  assert_int_equal(b.n_unusable, 3);
  assert_int_equal(b.fp_start[2] - b.fp_start[1], 0);
  assert_int_equal(b.fp_start[3] - b.fp_start[2], 0);
  assert_int_equal(b.fp_start[4] - b.fp_start[3], 1);
  assert_true(b.norm[3] < 60.0f);
  for (int32_t j = b.fp_start[0]; j < b.fp_start[1]; j++) assert_int_not_equal(b.fp[j], 1);
  assert_float_equal(b.scale[1], 0.0f, 0.0);
  float *x = malloc(sizeof(float) * ROWS * NC);
  fill_noise(x, ROWS, NC, 1.0, 10, 0);
  for (int u = 0; u < NK; u++) plant(x, ROWS, NC, tmpl, NW, NB, u, 500 + 200 * u, 1.0);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_match_chunk ch = {.x = x, .n_rows = ROWS, .search_begin = 0, .search_end = ROWS, .own_begin = 0, .own_end = ROWS};
  ss_match_work w = {0};
  ss_match_list out = {0};
  assert_int_equal(ss_match_chunk_cpu(&ctx, &b, &ch, &w, &out), SS_OK);
  assert_int_equal(out.n, 2);
  assert_int_equal(out.unit[0], 0);
  assert_int_equal(out.row[0], 500);
  assert_int_equal(out.unit[1], 4);
  assert_int_equal(out.row[1], 1300);
  free(x);
  ss_match_list_free(&out);
  ss_match_work_free(&w);
  ss_match_bank_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matched_planted),
      cmocka_unit_test(noise_alone),
      cmocka_unit_test(bank_shapes),
      cmocka_unit_test(unusable_units),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
