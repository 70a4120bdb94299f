/* mask_em_synth.h — synthetic spike features with realistic masks for the masked EM tests and
 * benchmarks (CPU and GPU): units sit along a linear probe of C channels, each spike carries P
 * features per channel (unit template × amplitude jitter + unit-variance noise), and its mask per
 * channel follows the front end's rule clip((peak − weak)/(strong − weak), 0, 1) on the template's
 * peak there, so a spike is unmasked on the few channels near its unit (~6 of 32 by default). */
#ifndef SS_MASK_EM_SYNTH_H
#define SS_MASK_EM_SYNTH_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int64_t n;           /* spikes */
  int64_t channels;    /* C */
  int64_t per_channel; /* P features per channel: D = C·P */
  int64_t units;
  double amp_min, amp_max; /* peak amplitude range of the units, in noise σ */
  double width;            /* spatial decay of a unit's amplitude (channels, Gaussian σ) */
  double jitter;           /* relative amplitude jitter per spike */
  double weak, strong;     /* mask thresholds in noise σ */
  double peak_noise;       /* noise σ of the peak the mask is computed from */
  uint64_t seed;
} ss_synth_opts;

/* Defaults: 32 channels × 3, 20 units, amplitudes 7–16 σ, width 1.6, jitter 0.1, weak 2, strong 4.5,
 * peak noise 1. */
void ss_synth_defaults(ss_synth_opts *o, int64_t n, uint64_t seed);
/* x, m: n × C·P (malloc'd); truth: n unit ids 0..units−1. */
ss_status ss_synth_generate(ss_ctx *ctx, const ss_synth_opts *o, float **x, float **m, int32_t **truth);

#ifdef __cplusplus
}
#endif
#endif
