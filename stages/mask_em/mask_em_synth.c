/* mask_em_synth.c — synthetic masked features (see mask_em_synth.h), from core/rng.h (SS_RNG_TEST
 * purpose: stream 0 for the units, stream 1 for the spikes). */
#include "stages/mask_em/mask_em_synth.h"

#include <math.h>
#include <stdlib.h>

#include "core/rng.h"

void ss_synth_defaults(ss_synth_opts *o, int64_t n, uint64_t seed) {
  *o = (ss_synth_opts){.n = n,
                       .channels = 32,
                       .per_channel = 3,
                       .units = 20,
                       .amp_min = 7.0,
                       .amp_max = 16.0,
                       .width = 1.6,
                       .jitter = 0.1,
                       .weak = 2.0,
                       .strong = 4.5,
                       .peak_noise = 1.0,
                       .seed = seed};
}

/* Unit templates: centre channel, peak amplitude per channel, unit-norm direction per channel. */
static void units(const ss_synth_opts *o, double *peak, double *dir) {
  ss_rng r = ss_rng_make(o->seed, SS_RNG_TEST, 0);
  int64_t C = o->channels, P = o->per_channel;
  for (int64_t u = 0; u < o->units; u++) {
    double centre = ss_rng_next_uniform(&r) * (double)(C - 1);
    double amp = o->amp_min + (o->amp_max - o->amp_min) * ss_rng_next_uniform(&r);
    for (int64_t c = 0; c < C; c++) {
      double dist = (double)c - centre, norm = 0.0;
      peak[u * C + c] = amp * exp(-dist * dist / (2.0 * o->width * o->width));
      double *v = dir + (u * C + c) * P;
      for (int64_t k = 0; k < P; k++) v[k] = ss_rng_next_normal(&r), norm += v[k] * v[k];
      for (int64_t k = 0; k < P; k++) v[k] /= sqrt(norm);
    }
  }
}

ss_status ss_synth_generate(ss_ctx *ctx, const ss_synth_opts *o, float **xo, float **mo, int32_t **truth) {
  int64_t C = o->channels, P = o->per_channel, D = C * P, n = o->n;
  double *peak = NULL, *dir = NULL;
  float *x = NULL, *m = NULL;
  int32_t *t = NULL;
  ss_status s = SS_ALLOC(ctx, peak, (size_t)(o->units * C), "synthetic templates");
  if (s == SS_OK) s = SS_ALLOC(ctx, dir, (size_t)(o->units * D), "synthetic templates");
  if (s == SS_OK) s = SS_ALLOC(ctx, x, (size_t)(n * D), "synthetic features");
  if (s == SS_OK) s = SS_ALLOC(ctx, m, (size_t)(n * D), "synthetic masks");
  if (s == SS_OK) s = SS_ALLOC(ctx, t, (size_t)n, "synthetic truth");
  if (s == SS_OK) {
    units(o, peak, dir);
    ss_rng r = ss_rng_make(o->seed, SS_RNG_TEST, 1);
    for (int64_t p = 0; p < n; p++) {
      int64_t u = (int64_t)ss_rng_next_below(&r, (uint64_t)o->units);
      double scale = 1.0 + o->jitter * ss_rng_next_normal(&r);
      t[p] = (int32_t)u;
      for (int64_t c = 0; c < C; c++) {
        double a = peak[u * C + c] * scale;
        double seen = a + o->peak_noise * ss_rng_next_normal(&r); /* the detector sees a noisy peak */
        double mask = fmin(fmax((seen - o->weak) / (o->strong - o->weak), 0.0), 1.0);
        for (int64_t k = 0; k < P; k++) {
          double signal = mask > 0.0 ? a * dir[(u * C + c) * P + k] : 0.0; /* masked: noise only */
          x[p * D + c * P + k] = (float)(signal + ss_rng_next_normal(&r));
          m[p * D + c * P + k] = (float)mask;
        }
      }
    }
    *xo = x, *mo = m, *truth = t;
    x = NULL, m = NULL, t = NULL;
  }
  free(peak);
  free(dir);
  free(x);
  free(m);
  free(t);
  return s;
}
