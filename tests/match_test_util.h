/* match_test_util.h — synthetic template banks and chunks shared by test_match.c and gpu_test_match.c
 * (header-only: both programs are single files). */
#ifndef SS_MATCH_TEST_UTIL_H
#define SS_MATCH_TEST_UTIL_H

#include <math.h>
#include <stdlib.h>

#include "core/rng.h"
#include "stages/match/match.h"
#include "ss_test.h"

/* Unit u's template in µV, [W × C]: a trough of depth `depth` at n_before (width s1) and a rebound
 * of ratio `rebound` `lag` samples later (width s2), on channels falling off as a Gaussian of width
 * `spread` channels around `peak`, the trough arriving `skew` samples later per channel away. */
typedef struct {
  int peak;
  double depth, s1, s2, rebound, lag, spread, skew;
} unit_shape;

static inline void shape_template(const unit_shape *s, int W, int C, int n_before, float *t) {
  for (int w = 0; w < W; w++)
    for (int c = 0; c < C; c++) {
      const double dc = c - s->peak, sp = exp(-dc * dc / (2 * s->spread * s->spread));
      const double tw = w - n_before - s->skew * fabs(dc), tr = tw - s->lag;
      const double v = -exp(-tw * tw / (2 * s->s1 * s->s1)) + s->rebound * exp(-tr * tr / (2 * s->s2 * s->s2));
      t[w * C + c] = (float)(s->depth * sp * v);
    }
}

/* A random shape on C channels: depth 20–120 µV, widths, rebound and spread drawn at random. */
static inline unit_shape random_shape(ss_rng *r, int C) {
  unit_shape s;
  s.peak = (int)ss_rng_next_below(r, (uint64_t)C);
  s.depth = 20 + 100 * ss_rng_next_uniform(r);
  s.s1 = 0.8 + 2.0 * ss_rng_next_uniform(r);
  s.s2 = 2.0 + 4.0 * ss_rng_next_uniform(r);
  s.rebound = 0.1 + 0.5 * ss_rng_next_uniform(r);
  s.lag = 3 + 6 * ss_rng_next_uniform(r);
  s.spread = 0.7 + 2.0 * ss_rng_next_uniform(r);
  s.skew = 0.6 * ss_rng_next_uniform(r);
  return s;
}

/* Gaussian noise of σ `sigma` over [rows × C], stream `stream` of `seed`. */
static inline void fill_noise(float *x, int64_t rows, int C, double sigma, uint64_t seed, uint64_t stream) {
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, stream);
  for (int64_t i = 0; i < rows * C; i++) x[i] = (float)(sigma * ss_rng_next_normal(&r));
}

/* x += a · T_u with its spike time at row t (rows outside the chunk dropped). */
static inline void plant(float *x, int64_t rows, int C, const float *tmpl, int W, int n_before, int u, int64_t t,
                         double a) {
  const float *tu = tmpl + (size_t)u * W * C;
  for (int w = 0; w < W; w++) {
    const int64_t r = t - n_before + w;
    if (r < 0 || r >= rows) continue;
    for (int c = 0; c < C; c++) x[r * C + c] += (float)(a * tu[w * C + c]);
  }
}

#endif
