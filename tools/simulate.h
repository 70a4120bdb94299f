/* simulate.h — the ground-truth simulator: a probe-aware extracellular recording with known spikes.
 *
 * Model (details and constants in docs/simulate.md):
 *  - units at 3-D positions near the probe: x, y within the contacts' extent plus a margin, z (the
 *    distance off the probe plane) in [10, 60] µm, uniform at least 20 µm apart (or spread apart by
 *    best-candidate sampling);
 *  - by default 30 units per 32 channels (scaled with the channel count), so neighbours overlap;
 *  - a biphasic waveform per unit (narrow negative trough, slower positive repolarisation; a
 *    difference of Gaussians about 1–1.5 ms long) with a per-unit width, peak-to-trough amplitude
 *    decaying with distance as exp(-d/d0) (or 1/(1 + (d/d0)^2)) with a per-unit d0, and a small
 *    conduction delay per channel;
 *  - Poisson firing with an absolute refractory period, rates lognormal (clipped to [min, max] Hz)
 *    or log-uniform in [min, max]; some firing events are bursts of 2–4 spikes 3–8 ms apart;
 *  - per-spike amplitude variation, amplitude attenuation within bursts (each spike less than
 *    burst_isi_ms after the previous one is burst_attenuation times its amplitude) and a
 *    continuous (sub-sample) trough position;
 *  - noise correlated across neighbouring contacts (Gaussian spatial kernel) and band-limited in
 *    time (first-order low-pass and high-pass), of a given standard deviation in µV;
 *  - optional linear drift of every unit along the probe's y axis.
 * Unit SNRs (peak-to-trough of the mean template on the peak channel over that channel's measured
 * noise σ) are spread log-uniformly around a requested median.
 *
 * Everything is a function of (config, probe, seed) alone: every random draw comes from core/rng.h
 * (purpose SS_RNG_SIMULATE) keyed per unit, per spike and per channel with the absolute sample as
 * index, and the noise is computed in fixed blocks, so any chunking of ss_sim_render() gives the
 * same samples bit for bit. Memory is O(chunk) for the signal plus O(spikes) for the ground truth. */
#ifndef SS_SIMULATE_H
#define SS_SIMULATE_H

#include <stdint.h>

#include "params/probe.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How unit firing rates are drawn. */
typedef enum {
  SS_SIM_RATES_LOGNORMAL = 0, /* median_rate_hz · exp(rate_log_sd · N(0,1)), clipped to [min, max] */
  SS_SIM_RATES_LOGUNIFORM     /* log-uniform in [min_rate_hz, max_rate_hz] */
} ss_sim_rate_law;

/* How units are placed. */
typedef enum {
  SS_SIM_PLACE_UNIFORM = 0, /* uniform, redrawn while closer than min_unit_distance_um to a placed unit */
  SS_SIM_PLACE_SPREAD       /* best of 8 uniform candidates: the farthest from the units placed */
} ss_sim_placement;

/* How a unit's amplitude falls off with distance d from it (d0: the unit's decay length). */
typedef enum {
  SS_SIM_DECAY_EXPONENTIAL = 0, /* exp(-d / d0) */
  SS_SIM_DECAY_POWER            /* 1 / (1 + (d / d0)^2) */
} ss_sim_decay_law;

/* Named settings: REALISTIC is ss_sim_config_defaults(); EASY is the earlier default model (20
 * units spread apart, median SNR 10, log-uniform rates in 0.5–20 Hz, no bursts, power-law decay
 * with one decay length),
 * which the short tests use. */
typedef enum { SS_SIM_PRESET_REALISTIC = 0, SS_SIM_PRESET_EASY } ss_sim_preset;

#define SS_SIM_UNITS_AUTO (-1) /* n_units: SS_SIM_UNITS_PER_32_CHANNELS per 32 channels */
#define SS_SIM_UNITS_PER_32_CHANNELS 30

typedef struct {
  double duration_s;           /* default 60 */
  double rate_hz;              /* sampling rate, default 30000 */
  int n_units;                 /* default SS_SIM_UNITS_AUTO (30 for 32 channels) */
  ss_sim_placement placement;  /* default uniform */
  double min_unit_distance_um; /* uniform placement: least distance between units, default 20 */
  double median_snr;           /* median unit SNR asked for, default 20 */
  double snr_spread;           /* largest/smallest unit SNR (log-uniform around the median), default 10 */
  uint64_t seed;               /* default 1 */
  double noise_uv;             /* noise standard deviation in µV, default 10 */
  double drift_um_per_s;       /* linear drift of the units along y, default 0 */
  ss_sim_rate_law rate_law;    /* default lognormal */
  double median_rate_hz;       /* lognormal median, default 12 */
  double rate_log_sd;          /* lognormal s.d. of ln(rate), default 0.7 */
  double min_rate_hz;          /* rates clipped to (lognormal) or spread over (log-uniform) [min, max], */
  double max_rate_hz;          /* default 0.5 .. 30 */
  double refractory_ms;        /* absolute refractory period, default 2.5 */
  double amplitude_jitter;     /* relative s.d. of the per-spike amplitude, default 0.1 */
  double burst_prob;           /* per-unit burst probability per firing event: uniform in [0, this], default 0.3 */
  double burst_attenuation;    /* amplitude factor per spike within a burst, default 0.8 (1: none) */
  double burst_isi_ms;         /* intervals below this count as within a burst, default 10 */
  ss_sim_decay_law decay_law;  /* default exponential */
  double decay_min_um;         /* per-unit spatial decay length d0 uniform in [min, max] µm, */
  double decay_max_um;         /* default 10 .. 40 */
  double conversion_uv;        /* µV per int16 step, default 0.195 (Intan) */
} ss_sim_config;

/* The ground truth. Unit u's spikes are spike_samples[u][0 .. n_spikes[u]), ascending sample
 * indices of the trough on the unit's nearest contact (within half a sample). snr, peak_channel,
 * noise_sigma_uv and template_ptp_uv are measured by ss_sim_finish(). */
typedef struct {
  int n_units;
  int n_channels;
  int64_t *n_spikes;
  int64_t **spike_samples;
  double *x_um, *y_um, *z_um; /* positions at time 0 */
  double *rate_hz;            /* asked firing rate */
  double *target_snr;         /* asked SNR */
  double *amplitude_uv;       /* peak-to-trough on the nearest contact at time 0, per-spike scale 1 */
  double *width;              /* waveform time scale (1 = nominal) */
  double *decay_um;           /* spatial decay length d0 */
  double *burst_prob;         /* probability that a firing event is a burst */
  double *snr;                /* measured */
  int32_t *peak_channel;      /* measured: channel of the largest mean-template peak-to-trough */
  double *template_ptp_uv;    /* measured: that peak-to-trough */
  double *noise_sigma_uv;     /* measured, per channel */
} ss_sim_truth;

typedef struct ss_sim ss_sim;

void ss_sim_config_defaults(ss_sim_config *c);
/* ss_sim_config_defaults() and then the preset's settings. */
void ss_sim_config_preset(ss_sim_config *c, ss_sim_preset preset);
/* Every out-of-range field, one line each ("simulate: duration_s: expected ..., got ..."). */
ss_status ss_sim_config_validate(ss_ctx *ctx, const ss_sim_config *c);

/* Draw the units and their spike trains. The probe's channels must be 0 .. n-1, each once; the
 * recording has probe->n channels. The probe is copied. n_units SS_SIM_UNITS_AUTO becomes the
 * count for the probe (ss_sim_get_config() returns it resolved). */
ss_status ss_sim_create(ss_ctx *ctx, const ss_sim_config *c, const ss_probe *probe, ss_sim **out);
void ss_sim_free(ss_sim *s);

int64_t ss_sim_n_samples(const ss_sim *s);
/* The chunk length render is fastest with: whole noise blocks, a few million values. */
int64_t ss_sim_preferred_chunk(const ss_sim *s);
int ss_sim_n_channels(const ss_sim *s);
const ss_sim_config *ss_sim_get_config(const ss_sim *s);
/* The probe's x / y of recording channel c. */
void ss_sim_channel_position(const ss_sim *s, int c, double *x, double *y);

/* Samples [start, start + n) of every channel in µV, time-major out[t * n_channels + c]. Any
 * order and any chunking give identical values. */
ss_status ss_sim_render(ss_ctx *ctx, ss_sim *s, int64_t start, int64_t n, float *out);
/* µV to int16 steps of conversion_uv (rounded, saturated); returns how many samples saturated. */
int64_t ss_sim_quantize(const ss_sim *s, const float *uv, int64_t count, int16_t *out);

/* Measure the noise σ of every channel over the whole recording (computing whatever noise blocks
 * ss_sim_render() has not yet covered in order) and each unit's mean template, SNR and peak channel. */
ss_status ss_sim_finish(ss_ctx *ctx, ss_sim *s);
const ss_sim_truth *ss_sim_get_truth(const ss_sim *s);

/* --- writing: the whole recording, streamed chunk by chunk ------------------------------------- */
typedef enum { SS_SIM_FORMAT_NWB = 0, SS_SIM_FORMAT_BINARY } ss_sim_format;

/* NWB: `path` is the file. Binary: `path` is BASE or BASE.bin; writes BASE.bin (int16, time-major,
 * channel-interleaved) and BASE.json (the sidecar, docs/simulate.md). chunk_samples <= 0:
 * ss_sim_preferred_chunk().
 * On success *out (when not NULL) receives the finished simulation for inspection; free it. */
ss_status ss_sim_write(ss_ctx *ctx, const ss_sim_config *c, const ss_probe *probe, const char *path,
                       ss_sim_format format, int64_t chunk_samples, ss_sim **out);

#ifdef __cplusplus
}
#endif
#endif
