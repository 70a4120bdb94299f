/* simulate.c — the ground-truth simulator's model: units, spike trains, noise and rendering
 * (simulate.h describes the model; docs/simulate.md gives the constants and their reasons).
 * Writing the result to NWB or flat binary lives in simulate_write.c. */
#include "tools/simulate.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

/* --- model constants ------------------------------------------------------------------------- */
#define SIM_MARGIN_XY_UM 20.0 /* units may sit this far beyond the outermost contacts */
#define SIM_Z_MIN_UM 10.0     /* distance off the probe plane */
#define SIM_Z_MAX_UM 60.0
#define SIM_POSITION_CANDIDATES 8      /* best-candidate sampling: keeps units apart */
#define SIM_POSITION_TRIES 100         /* uniform placement: draws per unit before the farthest is kept */
#define SIM_CONDUCTION_UM_PER_MS 400.0 /* per-channel delay = (d - z) / speed ... */
#define SIM_MAX_DELAY_MS 0.5           /* ... capped */
#define SIM_TROUGH_SIGMA_MS 0.10       /* negative phase: Gaussian s.d. at width 1 */
#define SIM_REPOL_DELAY_MIN_MS 0.35    /* positive phase: centre after the trough */
#define SIM_REPOL_DELAY_MAX_MS 0.55
#define SIM_REPOL_SIGMA_MIN_MS 0.20 /* positive phase: Gaussian s.d. */
#define SIM_REPOL_SIGMA_MAX_MS 0.35
#define SIM_REPOL_RATIO_MIN 0.25 /* positive phase height / trough depth */
#define SIM_REPOL_RATIO_MAX 0.50
#define SIM_WIDTH_MIN 0.8 /* per-unit time scale of the whole waveform */
#define SIM_WIDTH_MAX 1.3
#define SIM_SUPPORT_TROUGH_SIGMAS 5.0 /* waveform support: from -5 trough s.d. ... */
#define SIM_SUPPORT_REPOL_SIGMAS 4.5  /* ... to 4.5 repolarisation s.d. after its centre */
#define SIM_OVERSAMPLE 16             /* waveform table points per sample (linear interpolation) */
#define SIM_NORM_GRID 4096            /* grid that finds the waveform's peak-to-trough */
#define SIM_AMP_CLIP_SD 3.0           /* per-spike amplitude: 1 + jitter * clip(N(0,1), ±3) */
#define SIM_BURST_MIN_SPIKES 2        /* a burst has 2 .. 4 spikes (uniform) ... */
#define SIM_BURST_MAX_SPIKES 4
#define SIM_BURST_ISI_MIN_MS 3.0 /* ... 3 .. 8 ms apart (uniform; at least the refractory period) */
#define SIM_BURST_ISI_MAX_MS 8.0
#define SIM_ATTENUATION_FLOOR 0.5     /* attenuation within a burst stops at half the amplitude */
#define SIM_EVENT_GAP_MIN 0.1         /* exponential part of an event interval: at least this share */
#define SIM_NEGLIGIBLE_UV 0.01        /* contributions below this (1/20 of a step) are skipped */
#define SIM_NOISE_KERNEL_UM 10.0      /* spatial noise correlation: Gaussian kernel s.d. ... */
#define SIM_NOISE_KERNEL_CUTOFF 3.0   /* ... truncated at 3 s.d. */
#define SIM_NOISE_HIGHPASS_HZ 300.0   /* noise band: first-order high-pass ... */
#define SIM_NOISE_LOWPASS_HZ 3000.0   /* ... and first-order low-pass */
#define SIM_NOISE_LOWPASS_MAX_NYQ 0.8 /* low-pass corner at most this fraction of Nyquist */
#define SIM_NOISE_BLOCK 8192          /* noise is computed in fixed blocks of samples ... */
#define SIM_NOISE_WARMUP_TAUS 30.0    /* ... each started this many filter time constants early */
#define SIM_TEMPLATE_MAX_SPIKES 500   /* spikes averaged into a unit's mean template */
#define SIM_MAX_SAMPLES ((int64_t)1 << 40)

/* Random streams of the SS_RNG_SIMULATE purpose: kind in the high 32 bits, index in the low. */
enum { STREAM_LAYOUT = 1, STREAM_UNIT, STREAM_TRAIN, STREAM_SPIKE, STREAM_NOISE, STREAM_BURST };
enum { LAYOUT_POSITIONS = 0, LAYOUT_SNR_ORDER = 1 };
#define SPIKE_DRAWS 3 /* per spike: two for the amplitude normal, one for the sub-sample offset */

static uint64_t stream_id(int kind, uint64_t index) { return ((uint64_t)kind << 32) | index; }

typedef struct {
  double width, repol_delay_ms, repol_sigma_ms, repol_ratio;
  double decay_um;  /* spatial decay length d0 */
  double a_ref;     /* spatial factor of the nearest contact at time 0 */
  double pre, post; /* support before / after the trough, in samples */
  float *table;     /* normalised waveform (peak-to-trough 1), SIM_OVERSAMPLE per sample */
  int64_t table_len;
  float *frac;  /* per spike: trough offset from its sample, in [-0.5, 0.5) */
  float *scale; /* per spike: amplitude factor */
} sim_unit;

struct ss_sim {
  ss_sim_config cfg;
  int n_channels;
  double *cx, *cy; /* per recording channel */
  int64_t n_samples;
  int64_t max_pre, max_post; /* reach of any spike around its sample, for chunk overlap */
  sim_unit *units;
  ss_sim_truth truth;
  /* noise */
  int *mix_start, *mix_idx; /* CSR: channel c mixes innovations of mix_idx[mix_start[c] ..] */
  double *mix_w;
  uint64_t *noise_key; /* per channel */
  double lp_a, hp_b, noise_gain;
  int64_t warmup, n_blocks, next_block;
  double *sumsq; /* per channel, over blocks 0 .. next_block-1, in order */
};

/* --- small helpers --------------------------------------------------------------------------- */

/* amplitude ∝ exp(-d / d0) (exponential law) or 1 / (1 + (d / d0)^2) (power law) */
static double spatial_factor(const ss_sim *s, const sim_unit *un, double d_um) {
  double r = d_um / un->decay_um;
  if (s->cfg.decay_law == SS_SIM_DECAY_EXPONENTIAL) return exp(-r);
  return 1.0 / (1.0 + r * r);
}

static double uniform_in(ss_rng *r, double lo, double hi) { return lo + (hi - lo) * ss_rng_next_uniform(r); }

/* Unit-variance, zero-mean noise innovation from one 64-bit draw: the sum of four 16-bit uniforms
 * (Irwin–Hall); the spatial and temporal filters that follow make the result Gaussian in practice,
 * at a quarter of the cost of Box–Muller. */
static double innovation(uint64_t key, uint64_t index) {
  static const double centre = 4.0 * 32767.5;
  static const double inv_sd = 1.0 / 37837.22879630948; /* 1 / sqrt(4 * (65536^2 - 1) / 12) */
  uint64_t u = ss_rng_u64(key, index);
  uint32_t s = (uint32_t)(u & 0xFFFF) + (uint32_t)((u >> 16) & 0xFFFF) + (uint32_t)((u >> 32) & 0xFFFF) +
               (uint32_t)(u >> 48);
  return ((double)s - centre) * inv_sd;
}

void ss_sim_config_defaults(ss_sim_config *c) {
  memset(c, 0, sizeof(*c));
  c->duration_s = 60.0;
  c->rate_hz = 30000.0;
  c->n_units = SS_SIM_UNITS_AUTO;
  c->placement = SS_SIM_PLACE_UNIFORM;
  c->min_unit_distance_um = 20.0;
  c->median_snr = 20.0;
  c->snr_spread = 10.0;
  c->seed = 1;
  c->noise_uv = 10.0;
  c->drift_um_per_s = 0.0;
  c->rate_law = SS_SIM_RATES_LOGNORMAL;
  c->median_rate_hz = 12.0;
  c->rate_log_sd = 0.7;
  c->min_rate_hz = 0.5;
  c->max_rate_hz = 30.0;
  c->refractory_ms = 2.5;
  c->amplitude_jitter = 0.1;
  c->burst_prob = 0.3;
  c->burst_attenuation = 0.8;
  c->burst_isi_ms = 10.0;
  c->decay_law = SS_SIM_DECAY_EXPONENTIAL;
  c->decay_min_um = 10.0;
  c->decay_max_um = 40.0;
  c->conversion_uv = 0.195;
}

void ss_sim_config_preset(ss_sim_config *c, ss_sim_preset preset) {
  ss_sim_config_defaults(c);
  if (preset != SS_SIM_PRESET_EASY) return;
  c->n_units = 20;
  c->median_snr = 10.0;
  c->placement = SS_SIM_PLACE_SPREAD;
  c->rate_law = SS_SIM_RATES_LOGUNIFORM;
  c->max_rate_hz = 20.0;
  c->burst_prob = 0.0;
  c->burst_attenuation = 1.0;
  c->decay_law = SS_SIM_DECAY_POWER;
  c->decay_min_um = c->decay_max_um = 30.0;
}

/* An enumeration field: 0 .. n-1. */
static void check_choice(ss_ctx *ctx, int *bad, const char *field, int v, int n, const char *expect) {
  if (v >= 0 && v < n) return;
  ss_problem(ctx, SS_ERR_INPUT, "simulate: %s: expected %s, got %d", field, expect, v);
  *bad = 1;
}

static void check_range(ss_ctx *ctx, int *bad, const char *field, double v, double lo, double hi, int lo_open,
                        const char *expect) {
  if (isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) return;
  ss_problem(ctx, SS_ERR_INPUT, "simulate: %s: expected %s, got %g", field, expect, v);
  *bad = 1;
}

ss_status ss_sim_config_validate(ss_ctx *ctx, const ss_sim_config *c) {
  int bad = 0;
  ss_ctx_clear(ctx);
  check_range(ctx, &bad, "duration_s", c->duration_s, 0, 1e7, 1, "a number of seconds > 0");
  check_range(ctx, &bad, "rate_hz", c->rate_hz, 1000, 1e6, 0, "a sampling rate in [1000, 1e6] Hz");
  if (c->n_units != SS_SIM_UNITS_AUTO)
    check_range(ctx, &bad, "n_units", c->n_units, 0, 100000, 0, "a unit count in [0, 100000] or -1 (auto)");
  check_choice(ctx, &bad, "placement", (int)c->placement, 2, "uniform (0) or spread (1)");
  check_range(ctx, &bad, "min_unit_distance_um", c->min_unit_distance_um, 0, 1000, 0, "a distance in [0, 1000] µm");
  check_range(ctx, &bad, "median_snr", c->median_snr, 0, 1000, 1, "a number in (0, 1000]");
  check_range(ctx, &bad, "snr_spread", c->snr_spread, 1, 1000, 0, "a ratio in [1, 1000]");
  check_range(ctx, &bad, "noise_uv", c->noise_uv, 0, 10000, 1, "a noise level in (0, 10000] µV");
  check_range(ctx, &bad, "drift_um_per_s", fabs(c->drift_um_per_s), 0, 1000, 0, "a drift in [-1000, 1000] µm/s");
  check_choice(ctx, &bad, "rate_law", (int)c->rate_law, 2, "lognormal (0) or loguniform (1)");
  check_range(ctx, &bad, "median_rate_hz", c->median_rate_hz, 0, 1000, 1, "a firing rate in (0, 1000] Hz");
  check_range(ctx, &bad, "rate_log_sd", c->rate_log_sd, 0, 5, 0, "a log s.d. in [0, 5]");
  check_range(ctx, &bad, "min_rate_hz", c->min_rate_hz, 0, 1000, 1, "a firing rate in (0, 1000] Hz");
  check_range(ctx, &bad, "max_rate_hz", c->max_rate_hz, c->min_rate_hz, 1000, 0,
              "a firing rate in [min_rate_hz, 1000] Hz");
  double max_ref = c->max_rate_hz > 0 ? 1000.0 / c->max_rate_hz : 1000.0;
  if (!(c->refractory_ms >= 0 && c->refractory_ms < max_ref)) {
    ss_problem(ctx, SS_ERR_INPUT,
               "simulate: refractory_ms: expected a number in [0, %g) (below the mean "
               "interval at max_rate_hz), got %g",
               max_ref, c->refractory_ms);
    bad = 1;
  }
  check_range(ctx, &bad, "amplitude_jitter", c->amplitude_jitter, 0, 0.3, 0, "a relative s.d. in [0, 0.3]");
  check_range(ctx, &bad, "burst_prob", c->burst_prob, 0, 1, 0, "a probability in [0, 1]");
  check_range(ctx, &bad, "burst_attenuation", c->burst_attenuation, 0, 1, 1, "a factor in (0, 1]");
  check_range(ctx, &bad, "burst_isi_ms", c->burst_isi_ms, 0, 1000, 0, "an interval in [0, 1000] ms");
  check_choice(ctx, &bad, "decay_law", (int)c->decay_law, 2, "exponential (0) or power (1)");
  check_range(ctx, &bad, "decay_min_um", c->decay_min_um, 0, 1000, 1, "a length in (0, 1000] µm");
  check_range(ctx, &bad, "decay_max_um", c->decay_max_um, c->decay_min_um, 1000, 0,
              "a length in [decay_min_um, 1000] µm");
  check_range(ctx, &bad, "conversion_uv", c->conversion_uv, 0, 1e6, 1, "µV per step > 0");
  if (!bad && (double)llround(c->duration_s * c->rate_hz) > (double)SIM_MAX_SAMPLES) {
    ss_problem(ctx, SS_ERR_INPUT, "simulate: duration_s: %g s at %g Hz is too many samples", c->duration_s, c->rate_hz);
    bad = 1;
  }
  if (!bad && llround(c->duration_s * c->rate_hz) < 1) {
    ss_problem(ctx, SS_ERR_INPUT, "simulate: duration_s: %g s is less than one sample", c->duration_s);
    bad = 1;
  }
  return bad ? SS_ERR_INPUT : SS_OK;
}

/* --- waveforms ------------------------------------------------------------------------------- */

/* The unit's waveform at `ms` after the trough, before normalisation. */
static double shape(const sim_unit *u, double ms) {
  double s1 = SIM_TROUGH_SIGMA_MS * u->width, s2 = u->repol_sigma_ms * u->width;
  double dp = ms - u->repol_delay_ms * u->width;
  return -exp(-ms * ms / (2 * s1 * s1)) + u->repol_ratio * exp(-dp * dp / (2 * s2 * s2));
}

/* Support in ms and a table normalised to peak-to-trough 1 (the trough stays near -1). */
static ss_status build_table(ss_ctx *ctx, sim_unit *u, double rate) {
  double pre_ms = SIM_SUPPORT_TROUGH_SIGMAS * SIM_TROUGH_SIGMA_MS * u->width;
  double post_ms = (u->repol_delay_ms + SIM_SUPPORT_REPOL_SIGMAS * u->repol_sigma_ms) * u->width;
  double lo = DBL_MAX, hi = -DBL_MAX;
  for (int i = 0; i <= SIM_NORM_GRID; i++) {
    double v = shape(u, -pre_ms + (pre_ms + post_ms) * i / SIM_NORM_GRID);
    lo = fmin(lo, v);
    hi = fmax(hi, v);
  }
  u->pre = pre_ms * rate / 1000.0;
  u->post = post_ms * rate / 1000.0;
  u->table_len = (int64_t)ceil((u->pre + u->post) * SIM_OVERSAMPLE) + 2;
  SS_TRY(SS_ALLOC(ctx, u->table, u->table_len, "simulated waveform"));
  for (int64_t j = 0; j < u->table_len; j++) {
    double ms = -pre_ms + (double)j / SIM_OVERSAMPLE * 1000.0 / rate;
    u->table[j] = (float)(shape(u, ms) / (hi - lo));
  }
  return SS_OK;
}

/* Add one spike of unit u (trough at sample ts + frac, amplitude factor scale) to channel c for the
 * samples [lo, hi), into dst[(t - lo) * stride]. A function of its arguments alone, so chunking
 * never changes a contribution; callers add spikes in (unit, spike) order. */
static void add_spike(const ss_sim *s, int u, int64_t ts, double frac, double scale, int c, int64_t lo, int64_t hi,
                      float *dst, int64_t stride) {
  const sim_unit *un = &s->units[u];
  double rate = s->cfg.rate_hz;
  double y = s->truth.y_um[u] + s->cfg.drift_um_per_s * ((double)ts / rate);
  double dx = s->cx[c] - s->truth.x_um[u], dy = s->cy[c] - y, z = s->truth.z_um[u];
  double d = sqrt(dx * dx + dy * dy + z * z);
  double amp = s->truth.amplitude_uv[u] * scale * spatial_factor(s, un, d) / un->a_ref;
  if (amp < SIM_NEGLIGIBLE_UV) return;
  double delay = fmin((d - z) / SIM_CONDUCTION_UM_PER_MS, SIM_MAX_DELAY_MS) * rate / 1000.0;
  double trough = (double)ts + frac + delay;
  int64_t t0 = (int64_t)ceil(trough - un->pre), t1 = (int64_t)floor(trough + un->post) + 1;
  if (t0 < lo) t0 = lo;
  if (t1 > hi) t1 = hi;
  for (int64_t t = t0; t < t1; t++) {
    double pos = ((double)t - trough + un->pre) * SIM_OVERSAMPLE;
    int64_t j = (int64_t)floor(pos);
    if (j < 0 || j + 1 >= un->table_len) continue;
    double f = pos - (double)j;
    double v = un->table[j] + f * ((double)un->table[j + 1] - un->table[j]);
    dst[(t - lo) * stride] += (float)(amp * v);
  }
}

/* --- creation -------------------------------------------------------------------------------- */

static ss_status alloc_truth(ss_ctx *ctx, ss_sim_truth *t, int n_units, int n_channels) {
  int n = n_units > 0 ? n_units : 1;
  t->n_units = n_units;
  t->n_channels = n_channels;
  if (SS_CALLOC(ctx, t->n_spikes, n, "ground truth") || SS_CALLOC(ctx, t->spike_samples, n, "ground truth") ||
      SS_CALLOC(ctx, t->x_um, n, "ground truth") || SS_CALLOC(ctx, t->y_um, n, "ground truth") ||
      SS_CALLOC(ctx, t->z_um, n, "ground truth") || SS_CALLOC(ctx, t->rate_hz, n, "ground truth") ||
      SS_CALLOC(ctx, t->target_snr, n, "ground truth") || SS_CALLOC(ctx, t->amplitude_uv, n, "ground truth") ||
      SS_CALLOC(ctx, t->width, n, "ground truth") || SS_CALLOC(ctx, t->decay_um, n, "ground truth") ||
      SS_CALLOC(ctx, t->burst_prob, n, "ground truth") || SS_CALLOC(ctx, t->snr, n, "ground truth") ||
      SS_CALLOC(ctx, t->peak_channel, n, "ground truth") || SS_CALLOC(ctx, t->template_ptp_uv, n, "ground truth") ||
      SS_CALLOC(ctx, t->noise_sigma_uv, n_channels, "ground truth"))
    return SS_ERR_NOMEM;
  return SS_OK;
}

/* Positions within the probe's extent plus a margin: best-candidate sampling (SPREAD: of
 * SIM_POSITION_CANDIDATES draws, the farthest from the units already placed), or UNIFORM: the first
 * draw at least min_unit_distance_um from every placed unit (after SIM_POSITION_TRIES draws, the
 * farthest of them), so neighbours may sit as close as real cells do. */
static void place_units(ss_sim *s) {
  double x0 = DBL_MAX, x1 = -DBL_MAX, y0 = DBL_MAX, y1 = -DBL_MAX;
  for (int c = 0; c < s->n_channels; c++) {
    x0 = fmin(x0, s->cx[c]), x1 = fmax(x1, s->cx[c]);
    y0 = fmin(y0, s->cy[c]), y1 = fmax(y1, s->cy[c]);
  }
  int spread = s->cfg.placement == SS_SIM_PLACE_SPREAD;
  int tries = spread ? SIM_POSITION_CANDIDATES : SIM_POSITION_TRIES;
  double enough = s->cfg.min_unit_distance_um * s->cfg.min_unit_distance_um;
  ss_rng r = ss_rng_make(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_LAYOUT, LAYOUT_POSITIONS));
  ss_sim_truth *t = &s->truth;
  for (int u = 0; u < t->n_units; u++) {
    double best = -1;
    for (int k = 0; k < tries && (spread || best < enough); k++) {
      double x = uniform_in(&r, x0 - SIM_MARGIN_XY_UM, x1 + SIM_MARGIN_XY_UM);
      double y = uniform_in(&r, y0 - SIM_MARGIN_XY_UM, y1 + SIM_MARGIN_XY_UM);
      double z = uniform_in(&r, SIM_Z_MIN_UM, SIM_Z_MAX_UM);
      double nearest = DBL_MAX;
      for (int v = 0; v < u; v++) {
        double dx = x - t->x_um[v], dy = y - t->y_um[v], dz = z - t->z_um[v];
        nearest = fmin(nearest, dx * dx + dy * dy + dz * dz);
      }
      if (nearest > best) {
        best = nearest;
        t->x_um[u] = x, t->y_um[u] = y, t->z_um[u] = z;
      }
    }
  }
}

/* SNRs log-uniformly spaced over [median / sqrt(spread), median * sqrt(spread)], in random order,
 * so that the median is exactly what was asked. */
static ss_status assign_snrs(ss_ctx *ctx, ss_sim *s) {
  int n = s->truth.n_units;
  if (n == 0) return SS_OK;
  int64_t *order;
  SS_TRY(SS_ALLOC(ctx, order, n, "simulated units"));
  for (int u = 0; u < n; u++) order[u] = u;
  ss_rng r = ss_rng_make(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_LAYOUT, LAYOUT_SNR_ORDER));
  ss_rng_shuffle(&r, order, (size_t)n);
  for (int u = 0; u < n; u++) {
    double q = ((double)order[u] + 0.5) / n - 0.5;
    s->truth.target_snr[u] = s->cfg.median_snr * pow(s->cfg.snr_spread, q);
  }
  free(order);
  return SS_OK;
}

static ss_status init_unit(ss_ctx *ctx, ss_sim *s, int u) {
  ss_rng r = ss_rng_make(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_UNIT, (uint64_t)u));
  sim_unit *un = &s->units[u];
  ss_sim_truth *t = &s->truth;
  const ss_sim_config *c = &s->cfg;
  double log_uniform_rate = exp(uniform_in(&r, log(c->min_rate_hz), log(c->max_rate_hz)));
  un->width = t->width[u] = uniform_in(&r, SIM_WIDTH_MIN, SIM_WIDTH_MAX);
  un->repol_delay_ms = uniform_in(&r, SIM_REPOL_DELAY_MIN_MS, SIM_REPOL_DELAY_MAX_MS);
  un->repol_sigma_ms = uniform_in(&r, SIM_REPOL_SIGMA_MIN_MS, SIM_REPOL_SIGMA_MAX_MS);
  un->repol_ratio = uniform_in(&r, SIM_REPOL_RATIO_MIN, SIM_REPOL_RATIO_MAX);
  /* drawn after the parameters above, so that settings without them give the same units as before */
  double lognormal_rate = c->median_rate_hz * exp(c->rate_log_sd * ss_rng_next_normal(&r));
  un->decay_um = t->decay_um[u] = uniform_in(&r, c->decay_min_um, c->decay_max_um);
  t->burst_prob[u] = uniform_in(&r, 0.0, c->burst_prob);
  t->rate_hz[u] = c->rate_law == SS_SIM_RATES_LOGUNIFORM ? log_uniform_rate
                                                         : fmin(c->max_rate_hz, fmax(c->min_rate_hz, lognormal_rate));
  t->amplitude_uv[u] = t->target_snr[u] * c->noise_uv;
  double dmin = DBL_MAX;
  for (int c = 0; c < s->n_channels; c++) {
    double dx = s->cx[c] - t->x_um[u], dy = s->cy[c] - t->y_um[u], z = t->z_um[u];
    dmin = fmin(dmin, sqrt(dx * dx + dy * dy + z * z));
  }
  un->a_ref = spatial_factor(s, un, dmin);
  return build_table(ctx, un, s->cfg.rate_hz);
}

/* Append spike time t to the train, growing it when full. */
static ss_status push_spike(ss_ctx *ctx, int64_t **times, int64_t *n, int64_t *cap, int64_t t) {
  if (*n == *cap) {
    SS_TRY(SS_REALLOC(ctx, *times, (size_t)(*cap * 2), "spike train"));
    *cap *= 2;
  }
  (*times)[(*n)++] = t;
  return SS_OK;
}

/* Intervals within a burst, in samples: uniform in [3, 8] ms, never below the refractory period. */
static void burst_isi_range(const ss_sim *s, double *lo, double *hi) {
  double ms_lo = fmax(SIM_BURST_ISI_MIN_MS, s->cfg.refractory_ms), ms_hi = fmax(SIM_BURST_ISI_MAX_MS, ms_lo);
  *lo = ms_lo * s->cfg.rate_hz / 1000.0;
  *hi = ms_hi * s->cfg.rate_hz / 1000.0;
}

/* Poisson firing events with an absolute refractory period, in samples; an event is a burst with
 * the unit's probability. Event interval = the previous burst's length + refractory + exponential,
 * with the mean that keeps the asked spike rate (bursts included). Spikes whose waveform would leave
 * the recording are dropped, so every ground-truth spike is complete. */
static ss_status draw_times(ss_ctx *ctx, ss_sim *s, int u, int64_t **out, int64_t *n_out) {
  double rate = s->cfg.rate_hz, p = s->truth.burst_prob[u], isi_lo, isi_hi;
  burst_isi_range(s, &isi_lo, &isi_hi);
  int64_t ref = (int64_t)ceil(s->cfg.refractory_ms * rate / 1000.0 - 1e-9);
  double mean_len = 0.5 * (SIM_BURST_MIN_SPIKES + SIM_BURST_MAX_SPIKES);
  double spikes_per_event = 1.0 + p * (mean_len - 1.0);
  double mean_isi = rate / s->truth.rate_hz[u], mean_event = mean_isi * spikes_per_event;
  double burst_extent = p * (mean_len - 1.0) * 0.5 * (isi_lo + isi_hi);
  double exp_mean = fmax(mean_event - (double)ref - burst_extent, SIM_EVENT_GAP_MIN * mean_event);
  ss_rng r = ss_rng_make(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_TRAIN, (uint64_t)u));
  ss_rng b = ss_rng_make(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_BURST, (uint64_t)u));
  int64_t cap = (int64_t)(s->n_samples / mean_isi * 1.2) + 16, n = 0;
  int64_t *times;
  SS_TRY(SS_ALLOC(ctx, times, cap, "spike train"));
  double end = (double)(s->n_samples - s->max_post);
  /* the first event: an exponential wait from time 0 at the mean interval */
  double t = floor(-log(1.0 - ss_rng_next_uniform(&r)) * mean_event);
  while (t < end) {
    int len = 1; /* no burst draws for a unit that never bursts: its train stays as without bursts */
    if (p > 0 && ss_rng_next_uniform(&b) < p)
      len = SIM_BURST_MIN_SPIKES + (int)ss_rng_next_below(&b, SIM_BURST_MAX_SPIKES - SIM_BURST_MIN_SPIKES + 1);
    for (int i = 0; i < len && t < end; i++) {
      if (i > 0) t += floor(uniform_in(&b, isi_lo, isi_hi));
      if (t >= (double)s->max_pre && t < end && push_spike(ctx, &times, &n, &cap, (int64_t)t) != SS_OK) {
        free(times);
        return SS_ERR_NOMEM;
      }
    }
    t += (double)ref + floor(-log(1.0 - ss_rng_next_uniform(&r)) * exp_mean);
  }
  *out = times;
  *n_out = n;
  return SS_OK;
}

/* The unit's train and its per-spike draws: amplitude factor (jitter, times the attenuation of a
 * spike within a burst: each spike less than burst_isi_ms after the previous one has
 * burst_attenuation times its amplitude, down to SIM_ATTENUATION_FLOOR (or burst_attenuation when
 * lower); the next longer interval restores it) and sub-sample offset. The unit's amplitude is
 * divided by its mean attenuation, so that the mean spike keeps the asked SNR. */
static ss_status draw_train(ss_ctx *ctx, ss_sim *s, int u) {
  int64_t n, *times;
  SS_TRY(draw_times(ctx, s, u, &times, &n));
  s->truth.spike_samples[u] = times;
  s->truth.n_spikes[u] = n;
  sim_unit *un = &s->units[u];
  SS_TRY(SS_ALLOC(ctx, un->frac, n ? n : 1, "spike offsets"));
  SS_TRY(SS_ALLOC(ctx, un->scale, n ? n : 1, "spike amplitudes"));
  double burst_isi = s->cfg.burst_isi_ms * s->cfg.rate_hz / 1000.0, att = 1.0, att_sum = 0;
  double floor_att = fmin(SIM_ATTENUATION_FLOOR, s->cfg.burst_attenuation);
  ss_rng a = ss_rng_make(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_SPIKE, (uint64_t)u));
  for (int64_t k = 0; k < n; k++) {
    if (k > 0 && (double)(times[k] - times[k - 1]) < burst_isi) att = fmax(floor_att, att * s->cfg.burst_attenuation);
    else att = 1.0;
    att_sum += att;
    a.index = (uint64_t)k * SPIKE_DRAWS;
    double g = ss_rng_next_normal(&a);
    g = fmax(-SIM_AMP_CLIP_SD, fmin(SIM_AMP_CLIP_SD, g));
    un->scale[k] = (float)(att * (1.0 + s->cfg.amplitude_jitter * g));
    un->frac[k] = (float)(ss_rng_next_uniform(&a) - 0.5);
  }
  /* the unit's mean spike, attenuated ones included, keeps the asked SNR */
  if (n > 0) s->truth.amplitude_uv[u] /= att_sum / (double)n;
  return SS_OK;
}

/* Spatial mixing rows (unit L2 norm, so each channel keeps unit variance) and the band filter with
 * the gain that makes its output s.d. exactly noise_uv. */
static ss_status init_noise(ss_ctx *ctx, ss_sim *s) {
  int C = s->n_channels;
  double cut = SIM_NOISE_KERNEL_CUTOFF * SIM_NOISE_KERNEL_UM;
  SS_TRY(SS_CALLOC(ctx, s->mix_start, C + 1, "noise kernel"));
  SS_TRY(SS_ALLOC(ctx, s->mix_idx, (size_t)C * C, "noise kernel"));
  SS_TRY(SS_ALLOC(ctx, s->mix_w, (size_t)C * C, "noise kernel"));
  SS_TRY(SS_ALLOC(ctx, s->noise_key, C, "noise keys"));
  SS_TRY(SS_CALLOC(ctx, s->sumsq, C, "noise statistics"));
  int k = 0;
  for (int c = 0; c < C; c++) {
    s->mix_start[c] = k;
    double norm = 0;
    for (int j = 0; j < C; j++) {
      double dx = s->cx[c] - s->cx[j], dy = s->cy[c] - s->cy[j], d2 = dx * dx + dy * dy;
      if (d2 > cut * cut) continue;
      double w = exp(-d2 / (2 * SIM_NOISE_KERNEL_UM * SIM_NOISE_KERNEL_UM));
      s->mix_idx[k] = j, s->mix_w[k] = w, norm += w * w, k++;
    }
    for (int i = s->mix_start[c]; i < k; i++) s->mix_w[i] /= sqrt(norm);
    s->noise_key[c] = ss_rng_key(s->cfg.seed, SS_RNG_SIMULATE, stream_id(STREAM_NOISE, (uint64_t)c));
  }
  s->mix_start[C] = k;

  double rate = s->cfg.rate_hz, two_pi = 2.0 * acos(-1.0);
  double lp_hz = fmin(SIM_NOISE_LOWPASS_HZ, SIM_NOISE_LOWPASS_MAX_NYQ * rate / 2);
  s->lp_a = exp(-two_pi * lp_hz / rate);
  s->hp_b = exp(-two_pi * SIM_NOISE_HIGHPASS_HZ / rate);
  double tau = -1.0 / log(s->hp_b); /* the slower of the two poles, in samples */
  s->warmup = (int64_t)ceil(SIM_NOISE_WARMUP_TAUS * tau);
  /* output variance per unit input variance: the impulse response's energy */
  double lp = 0, lp_prev = 0, hp = 0, energy = 0;
  for (int64_t i = 0; i < 4 * s->warmup; i++) {
    double x = i == 0 ? 1.0 : 0.0;
    lp = s->lp_a * lp + (1 - s->lp_a) * x;
    hp = s->hp_b * (hp + lp - lp_prev);
    lp_prev = lp;
    energy += hp * hp;
  }
  s->noise_gain = s->cfg.noise_uv / sqrt(energy);
  s->n_blocks = (s->n_samples + SIM_NOISE_BLOCK - 1) / SIM_NOISE_BLOCK;
  return SS_OK;
}

ss_status ss_sim_create(ss_ctx *ctx, const ss_sim_config *c, const ss_probe *probe, ss_sim **out) {
  *out = NULL;
  SS_TRY(ss_sim_config_validate(ctx, c));
  if (probe->n < 1) return ss_fail(ctx, SS_ERR_INPUT, "simulate: probe %s has no contacts", probe->name);
  SS_TRY(ss_probe_check_recording(ctx, probe, ss_probe_n_wired(probe)));
  ss_sim *s;
  SS_TRY(SS_CALLOC(ctx, s, 1, "simulation"));
  s->cfg = *c;
  int C = ss_probe_n_wired(probe);
  s->n_channels = C;
  if (c->n_units == SS_SIM_UNITS_AUTO)
    s->cfg.n_units = (int)fmax(1.0, floor(SS_SIM_UNITS_PER_32_CHANNELS * C / 32.0 + 0.5));
  c = &s->cfg;
  s->n_samples = llround(c->duration_s * c->rate_hz);
  ss_status st = SS_OK;
  if ((st = SS_ALLOC(ctx, s->cx, C, "probe positions")) || (st = SS_ALLOC(ctx, s->cy, C, "probe positions")) ||
      (st = alloc_truth(ctx, &s->truth, c->n_units, C)) ||
      (st = SS_CALLOC(ctx, s->units, c->n_units > 0 ? c->n_units : 1, "simulated units")))
    goto fail;
  for (int i = 0; i < probe->n; i++) {
    if (probe->channel[i] < 0) continue; /* unwired */
    s->cx[probe->channel[i]] = probe->x[i];
    s->cy[probe->channel[i]] = probe->y[i];
  }
  place_units(s);
  if ((st = assign_snrs(ctx, s)) != SS_OK) goto fail;
  double max_pre = 0, max_post = 0;
  for (int u = 0; u < c->n_units; u++) {
    if ((st = init_unit(ctx, s, u)) != SS_OK) goto fail;
    max_pre = fmax(max_pre, s->units[u].pre);
    max_post = fmax(max_post, s->units[u].post);
  }
  /* +2: the sub-sample offset and the rounding of the support ends */
  s->max_pre = (int64_t)ceil(max_pre) + 2;
  s->max_post = (int64_t)ceil(max_post + SIM_MAX_DELAY_MS * c->rate_hz / 1000.0) + 2;
  for (int u = 0; u < c->n_units; u++)
    if ((st = draw_train(ctx, s, u)) != SS_OK) goto fail;
  if ((st = init_noise(ctx, s)) != SS_OK) goto fail;
  *out = s;
  return SS_OK;
fail:
  ss_sim_free(s);
  return st;
}

void ss_sim_free(ss_sim *s) {
  if (!s) return;
  ss_sim_truth *t = &s->truth;
  for (int u = 0; u < t->n_units; u++) {
    if (t->spike_samples) free(t->spike_samples[u]);
    if (s->units) free(s->units[u].table), free(s->units[u].frac), free(s->units[u].scale);
  }
  free(t->n_spikes), free(t->spike_samples), free(t->x_um), free(t->y_um), free(t->z_um), free(t->rate_hz);
  free(t->target_snr), free(t->amplitude_uv), free(t->width), free(t->decay_um), free(t->burst_prob);
  free(t->snr), free(t->peak_channel);
  free(t->template_ptp_uv), free(t->noise_sigma_uv);
  free(s->units), free(s->cx), free(s->cy);
  free(s->mix_start), free(s->mix_idx), free(s->mix_w), free(s->noise_key), free(s->sumsq);
  free(s);
}

int64_t ss_sim_n_samples(const ss_sim *s) { return s->n_samples; }

/* Whole noise blocks (a chunk edge inside a block makes two chunks compute it), enough of them
 * to keep the threads busy, within a budget of values per chunk. */
#define SIM_CHUNK_VALUES (4 << 20)
#define SIM_CHUNK_MAX_BLOCKS 16
int64_t ss_sim_preferred_chunk(const ss_sim *s) {
  int64_t blocks = SIM_CHUNK_VALUES / ((int64_t)SIM_NOISE_BLOCK * s->n_channels);
  if (blocks < 1) blocks = 1;
  if (blocks > SIM_CHUNK_MAX_BLOCKS) blocks = SIM_CHUNK_MAX_BLOCKS;
  return blocks * SIM_NOISE_BLOCK;
}
int ss_sim_n_channels(const ss_sim *s) { return s->n_channels; }
const ss_sim_config *ss_sim_get_config(const ss_sim *s) { return &s->cfg; }
const ss_sim_truth *ss_sim_get_truth(const ss_sim *s) { return &s->truth; }
void ss_sim_channel_position(const ss_sim *s, int c, double *x, double *y) {
  *x = s->cx[c];
  *y = s->cy[c];
}

/* --- rendering ------------------------------------------------------------------------------- */

/* Noise block kb: innovations -> spatial mixing -> low-pass -> high-pass, started `warmup` samples
 * before the block from zero state (the filters forget it to ~1e-13), so the block depends on
 * nothing else. Writes the samples inside [start, start + n) to out (when out is not NULL) and the
 * block's per-channel sum of squares to sumsq. scratch: 4 × n_channels doubles. */
static void noise_block(const ss_sim *s, int64_t kb, int64_t start, int64_t n, float *out, double *sumsq,
                        double *scratch) {
  const int C = s->n_channels;
  const double a = s->lp_a, b = s->hp_b, gain = s->noise_gain;
  const int *restrict mix_start = s->mix_start, *restrict mix_idx = s->mix_idx;
  const double *restrict mix_w = s->mix_w;
  const uint64_t *restrict keys = s->noise_key;
  double *restrict e = scratch, *restrict lp = e + C, *restrict hp = lp + C, *restrict acc = hp + C;
  memset(lp, 0, 3 * (size_t)C * sizeof(double));
  int64_t b0 = kb * SIM_NOISE_BLOCK, b1 = b0 + SIM_NOISE_BLOCK;
  if (b1 > s->n_samples) b1 = s->n_samples;
  for (int64_t t = b0 - s->warmup; t < b1; t++) {
    uint64_t index = (uint64_t)(t + s->warmup); /* >= 0: the first block's warm-up too */
    for (int j = 0; j < C; j++) e[j] = innovation(keys[j], index);
    float *row = out && t >= start && t < start + n ? out + (t - start) * C : NULL;
    for (int c = 0; c < C; c++) {
      double m = 0;
      for (int i = mix_start[c]; i < mix_start[c + 1]; i++) m += mix_w[i] * e[mix_idx[i]];
      double l = a * lp[c] + (1 - a) * m;
      hp[c] = b * (hp[c] + l - lp[c]);
      lp[c] = l;
    }
    if (t < b0) continue;
    for (int c = 0; c < C; c++) {
      double v = gain * hp[c];
      acc[c] += v * v;
      if (row) row[c] = (float)v;
    }
  }
  memcpy(sumsq, acc, (size_t)C * sizeof(double));
}

/* Compute blocks [k0, k1) (in parallel), writing into out, and fold their sums of squares into
 * the running total when they are the next ones in order. */
static ss_status noise_blocks(ss_ctx *ctx, ss_sim *s, int64_t k0, int64_t k1, int64_t start, int64_t n, float *out) {
  int C = s->n_channels;
  int64_t nb = k1 - k0;
  if (nb <= 0) return SS_OK;
  double *sums, *scratch;
  SS_TRY(SS_ALLOC(ctx, sums, (size_t)nb * C, "noise statistics"));
  if (SS_ALLOC(ctx, scratch, (size_t)nb * 4 * C, "noise scratch")) {
    free(sums);
    return SS_ERR_NOMEM;
  }
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < nb; i++) noise_block(s, k0 + i, start, n, out, sums + i * C, scratch + i * 4 * C);
  for (int64_t i = 0; i < nb; i++) {
    if (k0 + i != s->next_block) continue;
    for (int c = 0; c < C; c++) s->sumsq[c] += sums[i * C + c];
    s->next_block++;
  }
  free(sums);
  free(scratch);
  return SS_OK;
}

/* First spike of unit u whose sample is >= t. */
static int64_t first_spike_at(const ss_sim *s, int u, int64_t t) {
  const int64_t *v = s->truth.spike_samples[u];
  int64_t lo = 0, hi = s->truth.n_spikes[u];
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (v[mid] < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

ss_status ss_sim_render(ss_ctx *ctx, ss_sim *s, int64_t start, int64_t n, float *out) {
  if (start < 0 || n < 0 || start > s->n_samples - n)
    return ss_fail(ctx, SS_ERR_INTERNAL, "simulate: samples [%lld, %lld) outside the recording's %lld",
                   (long long)start, (long long)(start + n), (long long)s->n_samples);
  if (n == 0) return SS_OK;
  int C = s->n_channels;
  SS_TRY(noise_blocks(ctx, s, start / SIM_NOISE_BLOCK, (start + n - 1) / SIM_NOISE_BLOCK + 1, start, n, out));
#pragma omp parallel for schedule(static)
  for (int c = 0; c < C; c++) {
    for (int u = 0; u < s->truth.n_units; u++) {
      const int64_t *ts = s->truth.spike_samples[u];
      const sim_unit *un = &s->units[u];
      for (int64_t k = first_spike_at(s, u, start - s->max_post);
           k < s->truth.n_spikes[u] && ts[k] < start + n + s->max_pre; k++)
        add_spike(s, u, ts[k], un->frac[k], un->scale[k], c, start, start + n, out + c, C);
    }
  }
  return SS_OK;
}

int64_t ss_sim_quantize(const ss_sim *s, const float *uv, int64_t count, int16_t *out) {
  double inv = 1.0 / s->cfg.conversion_uv;
  int64_t clipped = 0;
  for (int64_t i = 0; i < count; i++) {
    double v = (double)uv[i] * inv;
    clipped += v > INT16_MAX || v < INT16_MIN;
    v = v > INT16_MAX ? INT16_MAX : v < INT16_MIN ? INT16_MIN : v;
    /* round half away from zero, without a libm call per sample */
    out[i] = (int16_t)(v >= 0 ? (int32_t)(v + 0.5) : -(int32_t)(0.5 - v));
  }
  return clipped;
}

/* --- measurement ----------------------------------------------------------------------------- */

/* Mean noiseless waveform of unit u over up to SIM_TEMPLATE_MAX_SPIKES evenly spread spikes,
 * aligned on the ground-truth samples (a unit without spikes gets one nominal spike at time 0):
 * its peak-to-trough per channel gives the peak channel and the SNR. */
static ss_status measure_unit(ss_ctx *ctx, ss_sim *s, int u) {
  int C = s->n_channels;
  int64_t L = s->max_pre + s->max_post + 1;
  float *one;
  double *mean;
  SS_TRY(SS_ALLOC(ctx, one, (size_t)L * C, "template"));
  if (SS_CALLOC(ctx, mean, (size_t)L * C, "template")) {
    free(one);
    return SS_ERR_NOMEM;
  }
  int64_t n = s->truth.n_spikes[u], use = n < SIM_TEMPLATE_MAX_SPIKES ? n : SIM_TEMPLATE_MAX_SPIKES;
  for (int64_t i = 0; i < (use ? use : 1); i++) {
    int64_t k = use ? i * n / use : 0;
    int64_t ts = use ? s->truth.spike_samples[u][k] : 0;
    double frac = use ? s->units[u].frac[k] : 0, scale = use ? s->units[u].scale[k] : 1;
    memset(one, 0, (size_t)L * C * sizeof(float));
    for (int c = 0; c < C; c++) add_spike(s, u, ts, frac, scale, c, ts - s->max_pre, ts + s->max_post + 1, one + c, C);
    for (int64_t j = 0; j < L * C; j++) mean[j] += one[j];
  }
  double best = -1;
  for (int c = 0; c < C; c++) {
    double lo = DBL_MAX, hi = -DBL_MAX;
    for (int64_t j = 0; j < L; j++) lo = fmin(lo, mean[j * C + c]), hi = fmax(hi, mean[j * C + c]);
    double ptp = (hi - lo) / (double)(use ? use : 1);
    if (ptp > best) best = ptp, s->truth.peak_channel[u] = c;
  }
  s->truth.template_ptp_uv[u] = best;
  s->truth.snr[u] = best / s->truth.noise_sigma_uv[s->truth.peak_channel[u]];
  free(one);
  free(mean);
  return SS_OK;
}

/* Blocks computed per batch while catching up on the noise statistics. */
#define SIM_FINISH_BATCH 64

ss_status ss_sim_finish(ss_ctx *ctx, ss_sim *s) {
  while (s->next_block < s->n_blocks) {
    int64_t k1 = s->next_block + SIM_FINISH_BATCH;
    SS_TRY(noise_blocks(ctx, s, s->next_block, k1 < s->n_blocks ? k1 : s->n_blocks, 0, 0, NULL));
  }
  for (int c = 0; c < s->n_channels; c++) s->truth.noise_sigma_uv[c] = sqrt(s->sumsq[c] / (double)s->n_samples);
  for (int u = 0; u < s->truth.n_units; u++) SS_TRY(measure_unit(ctx, s, u));
  return SS_OK;
}
