/* motion.h — rigid probe motion (drift): its estimate from the detected spikes' depths and amplitudes,
 * and the registration that resamples every filtered chunk at the drifted contact positions, so the
 * later stages see each unit on the same channels all through the recording (docs/motion.md).
 *
 * Estimate (host, small): per time bin of motion.bin_s, a histogram of spike depth (bins of
 * SS_MOTION_DEPTH_BIN_UM) × log-amplitude band (SS_MOTION_AMP_BANDS); each bin's shift is the one, within
 * ±motion.max_um, whose shifted histogram correlates best with a reference (the mean of the shifted
 * histograms, SS_MOTION_ITERATIONS rounds, the median shift 0), refined below a bin by a parabola through
 * the correlation's peak and smoothed over time by a Gaussian of one bin.
 * Registration: channel c at (x_c, y_c) becomes the signal at (x_c, y_c + d(t)), d the shift of t's bin,
 * interpolated (Catmull–Rom) from the four contacts of c's column (same x, same shank) around it; past
 * the column's ends, the end contact. The
 * CUDA twin (motion.cu) applies the same weights on the device. */
#ifndef SS_MOTION_H
#define SS_MOTION_H

#include <stdint.h>

#include "core/backend.h"
#include "core/status.h"
#include "params/params.h"
#include "params/probe.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_MOTION_DEPTH_BIN_UM 2.0
#define SS_MOTION_AMP_BANDS 8
#define SS_MOTION_ITERATIONS 6
#define SS_MOTION_MAX_CELLS (1 << 27) /* histogram floats at most (512 MiB); wider time bins beyond */
#define SS_MOTION_TAPS 4              /* source channels per registered channel */
#define SS_MOTION_ROUNDS 3            /* registrations in `sort`, each correcting what the last one left */

/* The estimate: shift_um[b] for samples [b·bin_samples, (b+1)·bin_samples). */
typedef struct {
  int64_t n_bins;
  int64_t bin_samples;
  double *shift_um;
  double range_um; /* max − min of shift_um */
} ss_motion;

/* The registration: per bin and channel, SS_MOTION_TAPS (source channel, weight) pairs. */
typedef struct {
  int64_t n_bins;
  int64_t bin_samples;
  int n_channels;
  int32_t *src; /* [n_bins × n_channels × SS_MOTION_TAPS] */
  float *w;     /* [n_bins × n_channels × SS_MOTION_TAPS] */
} ss_motion_reg;

void ss_motion_free(ss_motion *m);
/* m += more, bin by bin (the same bins), and m's range again. */
void ss_motion_add(ss_motion *m, const ss_motion *more);
void ss_motion_reg_free(ss_motion_reg *r);

/* Depth (µm) of each spike: the y of its channels weighted by their feature energy Σ_p f²_{c,p} times
 * the mask, over the channels with a mask > 0 (the peak channel's y when none). y_of_channel: [C]. */
void ss_motion_spike_depth(int64_t n, int C, int P, const float *features, const float *masks,
                           const int32_t *peak_channel, const double *y_of_channel, double *depth);

/* The estimate over a recording of n_samples at rate_hz from n spikes (times, amplitudes, depths);
 * depth_lo/hi bound the probe's contacts; n_threads CPU threads search the shifts. out->n_bins 0: not estimated (a probe too long for the
 * histograms, logged). */
ss_status ss_motion_estimate(ss_ctx *ctx, const ss_params *p, int64_t n, const int64_t *time_samples,
                             const float *amplitude, const double *depth, double depth_lo, double depth_hi,
                             int64_t n_samples, double rate_hz, int n_threads, ss_motion *out);

/* The registration weights of `m` for the probe's channels (n_channels recording channels). */
ss_status ss_motion_reg_build(ss_ctx *ctx, const ss_motion *m, const ss_probe *probe, int n_channels,
                              ss_motion_reg *out);

/* x [n_rows × C], row 0 at recording sample row0_sample, registered in place (CPU). */
ss_status ss_motion_apply(ss_ctx *ctx, const ss_motion_reg *r, float *x, int64_t n_rows, int64_t row0_sample);

/* --- CUDA (stages/motion/motion.cu) ------------------------------------------------------------- */
typedef struct ss_motion_cuda ss_motion_cuda;
ss_status ss_motion_cuda_open(ss_ctx *ctx, const ss_motion_reg *r, ss_motion_cuda **out);
void ss_motion_cuda_close(ss_motion_cuda *h);
/* d_in → d_out (device arrays [n_rows × C], distinct), asynchronous on `stream`. */
ss_status ss_motion_apply_cuda(ss_ctx *ctx, const ss_motion_cuda *h, const float *d_in, float *d_out, int64_t n_rows,
                               int64_t row0_sample, ss_stream stream);

#ifdef __cplusplus
}
#endif
#endif
