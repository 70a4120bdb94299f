/* quality.h — quality metrics of every unit of a sort and the label they earn (docs/quality.md): firing
 * rate, SNR (template peak over the noise level), ISI violation ratio (Hill et al. 2011), presence
 * ratio, amplitude cutoff (the missing fraction of a cut amplitude distribution), and good / mua / noise.
 * CPU only: O(spikes) bookkeeping, cheaper than moving the spikes to a device. */
#ifndef SS_QUALITY_H
#define SS_QUALITY_H

#include <stdint.h>

#include "core/status.h"
#include "params/params.h"
#include "stages/metrics/cluster_metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SS_QUALITY_NOISE = 0, SS_QUALITY_MUA = 1, SS_QUALITY_GOOD = 2 } ss_quality_label;

/* "noise", "mua", "good" (phy's group names). */
const char *ss_quality_label_name(int label);

/* --- one unit ---------------------------------------------------------------------------------- */

/* ISI violation ratio of ascending spike times t[0..n) (samples at rate_hz, over duration_s): the
 * violations v (intervals in [censored, refractory)) over those a unit firing at the same rate with
 * spikes placed at random would have: v·T / (2·n²·(t_r − t_c)). 0 for n < 2. *n_violations may be NULL. */
double ss_quality_isi_violation_ratio(const int64_t *t, int64_t n, double rate_hz, double duration_s,
                                      double refractory_ms, double censored_ms, int64_t *n_violations);
/* Fraction of `bins` equal bins of [0, n_samples) that hold at least one of the ascending times t[0..n). */
double ss_quality_presence_ratio(const int64_t *t, int64_t n, int64_t n_samples, int64_t bins);
/* Amplitude cutoff of the amplitudes a[0..n) (their magnitudes are used): the histogram (at most
 * max_bins bins, at least 5 spikes a bin on average), smoothed; the mass of the upper tail beyond the
 * point where the density falls back to that of the lowest bin estimates the mass cut off below the
 * lowest bin. At most 0.5; NaN when fewer than 10 bins are possible. */
ss_status ss_quality_amplitude_cutoff(ss_ctx *ctx, const float *a, int64_t n, int64_t max_bins, double *cutoff);
/* The label of cluster `id` from its metrics (cluster 0 is the noise cluster). */
int ss_quality_classify(const ss_params *p, int64_t id, double snr, double isi_ratio, double presence, double cutoff);

/* --- every unit of a labelling ----------------------------------------------------------------- */

typedef struct {
  int64_t n;
  double rate_hz, duration_s;
  int64_t n_samples;             /* of the recording */
  const int64_t *time_samples;   /* [n] ascending */
  const float *amplitude;        /* [n] signed peak amplitude, µV */
  const int32_t *labels;         /* [n] in [0, k) */
  const ss_cluster_stats *stats; /* of these labels: k, count, mean waveforms, peak channels */
  const float *sigma;            /* [C] noise level per channel, µV (0: channel unused) */
} ss_quality_input;

typedef struct {
  int64_t k;
  int64_t *n_spikes;
  int64_t *n_violations;
  double *firing_rate_hz, *snr, *isi_violation_ratio, *presence_ratio, *amplitude_cutoff;
  int32_t *label; /* ss_quality_label */
} ss_quality;

ss_status ss_quality_compute(ss_ctx *ctx, const ss_params *p, const ss_quality_input *in, ss_quality *out);
void ss_quality_free(ss_quality *q);

#ifdef __cplusplus
}
#endif
#endif
