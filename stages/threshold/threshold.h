/* threshold.h — the noise level and detection thresholds: σ = median(|x|)/0.6745 of the filtered
 * signal per channel (or pooled over channels) from excerpts spread evenly over the recording;
 * weak = detect.weak_std·σ, strong = detect.strong_std·σ; the polarity decides which sign counts.
 * The CUDA twin (stages/threshold/threshold.cu) is declared at the end; the dispatching entry point takes the
 * backend. */
#ifndef SS_THRESHOLD_H
#define SS_THRESHOLD_H

#include <math.h>
#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* median(|x|)/σ for Gaussian noise */
#define SS_MAD_TO_SIGMA 0.6745

typedef struct {
  int n_channels;
  int polarity;  /* ss_polarity */
  float *sigma;  /* [n_channels]; 0 for a channel that is not used */
  float *weak;   /* [n_channels]; +inf where the channel is excluded (dead, or flat) */
  float *strong; /* [n_channels] */
} ss_thresholds;

/* A block of filtered samples: n_rows rows of n_channels, time-major, row stride n_channels. */
typedef struct {
  const float *x;
  int64_t n_rows;
} ss_sample_block;

/* The signed sample as detection sees it: larger = more spike-like. */
static inline float ss_detect_signal(int polarity, float x) {
  return polarity == SS_POLARITY_NEGATIVE ? -x : (polarity == SS_POLARITY_POSITIVE ? x : fabsf(x));
}

/* Which excerpts to read: the recording is cut into pieces of *excerpt_len samples (the last may be
 * shorter); *n_out pieces, indices ascending in out_index (caller frees), spread evenly from the
 * first to the last piece; all of them when detect.n_excerpts is not smaller than their number. */
ss_status ss_threshold_plan(ss_ctx *ctx, const ss_params *p, int64_t n_samples, double rate_hz, int64_t *excerpt_len,
                            int64_t **out_index, int64_t *n_out);

/* Noise levels and thresholds from the blocks. use[c] == 0 (dead channel) excludes a channel from
 * detection and from the pooled median; use NULL: all channels are used. */
ss_status ss_threshold_compute(ss_ctx *ctx, const ss_backend *be, const ss_params *p, const ss_sample_block *blocks,
                               int n_blocks, int n_channels, const int *use, ss_thresholds *out);
ss_status ss_threshold_compute_cpu(ss_ctx *ctx, const ss_params *p, const ss_sample_block *blocks, int n_blocks,
                                   int n_channels, const int *use, int n_threads, ss_thresholds *out);
/* Thresholds from given noise levels (e.g. a saved model); sigma <= 0 excludes the channel. */
ss_status ss_thresholds_from_sigma(ss_ctx *ctx, const ss_params *p, int n_channels, const float *sigma,
                                   ss_thresholds *out);
void ss_thresholds_free(ss_thresholds *t);

/* The backend-independent frame of ss_threshold_compute_*: checks the input (the same messages on
 * every backend), forms the noise groups (group[c]: one per channel, or 0 for all when pooled; −1 for
 * a dead channel; count[g] samples each), asks `medians` for median(|x|) of each of the G groups and
 * turns them into noise levels and thresholds. */
typedef ss_status (*ss_threshold_medians_fn)(ss_ctx *ctx, void *arg, const ss_sample_block *blocks, int n_blocks,
                                             int n_channels, const int *group, int G, const int64_t *count,
                                             float *median);
ss_status ss_threshold_compute_with(ss_ctx *ctx, const ss_params *p, const ss_sample_block *blocks, int n_blocks,
                                    int n_channels, const int *use, ss_threshold_medians_fn medians, void *arg,
                                    ss_thresholds *out);

/* --- CUDA, device-resident (stages/threshold/threshold.cu; only in builds with CUDA) -------------------------
 * As ss_threshold_compute_cpu, but blocks[i].x are DEVICE pointers; out's arrays are host. The
 * medians are exact order statistics found by radix selection on the device, so σ is bit-identical
 * to the CPU's on the same samples. Runs on the backend's stream and synchronises it. */
ss_status ss_threshold_compute_cuda(ss_ctx *ctx, const ss_backend *be, const ss_params *p,
                                    const ss_sample_block *blocks, int n_blocks, int n_channels, const int *use,
                                    ss_thresholds *out);
/* The same with HOST blocks (uploaded to the device first): what ss_threshold_compute does with a CUDA
 * backend. */
ss_status ss_threshold_compute_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_params *p,
                                         const ss_sample_block *blocks, int n_blocks, int n_channels, const int *use,
                                         ss_thresholds *out);

#ifdef __cplusplus
}
#endif
#endif
