/* filter.c — Butterworth band-pass design (no DSP library) and its CPU application: zero-phase
 * forward–backward offline, causal with carried state live, and the common median reference.
 *
 * Design: the order-n analog low-pass prototype has poles p_k = exp(jπ(2k + n + 1)/(2n)). The
 * low-pass to band-pass map s → (s² + Ω0²)/(s B) turns each into the two roots of s² − p B s + Ω0²,
 * with zeros at s = 0 and s = ∞; the band edges are prewarped (Ω = 2 fs tan(π f / fs)) so that the
 * bilinear transform z = (2 fs + s)/(2 fs − s) puts them exactly at low_hz and high_hz. Every
 * section gets one zero at z = 1 and one at z = −1 and a pole pair (a conjugate pair, or the two real
 * poles); its gain makes |H| = 1 at the centre frequency, so the cascade has unit gain there. */
#include "stages/filter/filter.h"

#include <complex.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define SS_FILTER_PI 3.14159265358979323846
/* Poles closer than this to the real axis are treated as real when pairing sections. */
#define SS_FILTER_REAL_TOL 1e-9

ss_status ss_filter_design(ss_ctx *ctx, int order, double low_hz, double high_hz, double rate_hz, ss_filter *out) {
  memset(out, 0, sizeof(*out));
  if (order < 1 || order > SS_FILTER_MAX_ORDER)
    return ss_fail(ctx, SS_ERR_INPUT, "filter: order: expected 1 to %d, got %d", SS_FILTER_MAX_ORDER, order);
  if (!(rate_hz > 0) || !isfinite(rate_hz))
    return ss_fail(ctx, SS_ERR_INPUT, "filter: sample rate: expected a finite number > 0, got %g", rate_hz);
  if (!(low_hz > 0) || !(high_hz > low_hz) || !(high_hz < rate_hz / 2))
    return ss_fail(ctx, SS_ERR_INPUT,
                   "filter: band %g-%g Hz: expected 0 < low < high < Nyquist (%g Hz at %g Hz sampling)", low_hz,
                   high_hz, rate_hz / 2, rate_hz);
  const double k2 = 2.0 * rate_hz;
  const double wl = k2 * tan(SS_FILTER_PI * low_hz / rate_hz), wh = k2 * tan(SS_FILTER_PI * high_hz / rate_hz);
  const double w0sq = wl * wh, bw = wh - wl;
  const double omega0 = 2.0 * atan(sqrt(w0sq) / k2); /* digital centre frequency, rad/sample */

  double complex z[2 * SS_FILTER_MAX_ORDER];
  int nz = 0;
  for (int k = 0; k < order; k++) {
    double ang = SS_FILTER_PI * (2.0 * k + order + 1) / (2.0 * order);
    /* the middle pole of an odd order is exactly −1: keep it real so its band-pass roots pair up */
    double complex p = (2 * k + 1 == order) ? -1.0 : cos(ang) + I * sin(ang);
    double complex disc = csqrt(p * p * bw * bw - 4.0 * w0sq);
    double complex s[2] = {(p * bw + disc) / 2.0, (p * bw - disc) / 2.0};
    for (int r = 0; r < 2; r++) z[nz++] = (k2 + s[r]) / (k2 - s[r]);
  }
  /* pair: each upper-half pole with its conjugate; the (at most two) real poles together */
  double complex real_pole[2];
  int n_real = 0;
  double complex e1 = cexp(-I * omega0), e2 = cexp(-2.0 * I * omega0);
  for (int i = 0; i < nz; i++) {
    double complex z1, z2;
    if (fabs(cimag(z[i])) <= SS_FILTER_REAL_TOL) {
      if (n_real >= 2) return ss_fail(ctx, SS_ERR_INTERNAL, "filter: design produced more than two real poles");
      real_pole[n_real++] = creal(z[i]);
      if (n_real < 2) continue;
      z1 = real_pole[0];
      z2 = real_pole[1];
    } else if (cimag(z[i]) > 0) {
      z1 = z[i];
      z2 = conj(z[i]);
    } else {
      continue;
    }
    ss_biquad *b = &out->sos[out->n_sections++];
    b->a1 = -creal(z1 + z2);
    b->a2 = creal(z1 * z2);
    double complex h = (1.0 - e2) / (1.0 + b->a1 * e1 + b->a2 * e2);
    double g = 1.0 / cabs(h);
    b->b0 = g;
    b->b1 = 0.0;
    b->b2 = -g;
  }
  if (out->n_sections != order || n_real == 1)
    return ss_fail(ctx, SS_ERR_INTERNAL, "filter: design produced %d sections for order %d", out->n_sections, order);
  out->order = order;
  out->rate_hz = rate_hz;
  out->low_hz = low_hz;
  out->high_hz = high_hz;
  return SS_OK;
}

ss_status ss_filter_design_params(ss_ctx *ctx, const ss_params *p, double rate_hz, ss_filter *out) {
  return ss_filter_design(ctx, (int)p->filter.order, p->filter.low_hz, p->filter.high_nyquist_fraction * rate_hz / 2,
                          rate_hz, out);
}

double ss_filter_magnitude(const ss_filter *f, double freq_hz) {
  double w = 2.0 * SS_FILTER_PI * freq_hz / f->rate_hz;
  double complex e1 = cexp(-I * w), e2 = cexp(-2.0 * I * w), h = 1.0;
  for (int s = 0; s < f->n_sections; s++) {
    const ss_biquad *b = &f->sos[s];
    h *= (b->b0 + b->b1 * e1 + b->b2 * e2) / (1.0 + b->a1 * e1 + b->a2 * e2);
  }
  return cabs(h);
}

double ss_filter_butterworth_magnitude(int order, double low_hz, double high_hz, double rate_hz, double freq_hz) {
  const double k2 = 2.0 * rate_hz;
  const double wl = k2 * tan(SS_FILTER_PI * low_hz / rate_hz), wh = k2 * tan(SS_FILTER_PI * high_hz / rate_hz);
  const double w = k2 * tan(SS_FILTER_PI * freq_hz / rate_hz);
  if (w <= 0) return 0.0;
  double x = (w * w - wl * wh) / (w * (wh - wl));
  return 1.0 / sqrt(1.0 + pow(x * x, order));
}

int64_t ss_filter_settle_samples(const ss_filter *f, double factor) {
  double rmax = 0;
  for (int s = 0; s < f->n_sections; s++) {
    double a1 = f->sos[s].a1, a2 = f->sos[s].a2, disc = a1 * a1 - 4 * a2, r;
    if (disc < 0) {
      r = sqrt(a2);
    } else {
      double q = sqrt(disc);
      r = fmax(fabs((-a1 + q) / 2), fabs((-a1 - q) / 2));
    }
    rmax = fmax(rmax, r);
  }
  if (rmax <= 0) return 1;
  return (int64_t)ceil(log(factor) / log(rmax));
}

/* --- application -------------------------------------------------------------------------------- */

/* Per-section state for every channel: z[(2 s + 0) * C + c] and z[(2 s + 1) * C + c]. */
static void steady_state(const ss_filter *f, const float *row, int n_channels, double *z) {
  for (int c = 0; c < n_channels; c++) {
    double u = row[c];
    for (int s = 0; s < f->n_sections; s++) {
      const ss_biquad *b = &f->sos[s];
      double y = u * (b->b0 + b->b1 + b->b2) / (1.0 + b->a1 + b->a2);
      double z2 = b->b2 * u - b->a2 * y;
      z[(2 * s + 1) * n_channels + c] = z2;
      z[(2 * s) * n_channels + c] = b->b1 * u - b->a1 * y + z2;
      u = y;
    }
  }
}

/* Channels are filtered SS_FILTER_LANES at a time in one vector (GCC/Clang vector extensions: AVX
 * or SSE2 pairs, whatever the target has). A row's channel groups are independent, so the inner loop
 * over groups keeps the pipeline full although each channel's recursion is a serial chain. Every
 * lane does the same IEEE operations in the same order as scalar code (no contraction in ISO C
 * mode), so results do not depend on the vector width. */
#define SS_FILTER_LANES 4
typedef double ss_v4d __attribute__((vector_size(SS_FILTER_LANES * sizeof(double))));
typedef float ss_v4f __attribute__((vector_size(SS_FILTER_LANES * sizeof(float))));

/* (by pointer: 32-byte vectors by value would change the ABI on targets without AVX) */
static inline void load_lanes(ss_v4d *v, const float *x, int lanes) {
  if (lanes == SS_FILTER_LANES) {
    ss_v4f w;
    memcpy(&w, x, sizeof(w));
    *v = __builtin_convertvector(w, ss_v4d);
    return;
  }
  *v = (ss_v4d){0, 0, 0, 0};
  for (int l = 0; l < lanes; l++) (*v)[l] = x[l];
}

static inline void store_lanes(float *y, const ss_v4d *v, int lanes) {
  if (lanes == SS_FILTER_LANES) {
    ss_v4f w = __builtin_convertvector(*v, ss_v4f);
    memcpy(y, &w, sizeof(w));
    return;
  }
  for (int l = 0; l < lanes; l++) y[l] = (float)(*v)[l];
}

/* AVX2 doubles the vector width where the CPU has it (chosen at load time); the "avx2" clone has no
 * FMA, so both clones round identically. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SS_FILTER_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SS_FILTER_CLONES
#endif

/* Run the cascade over rows first, first+step, ... (step ±1), n rows, from state z (updated; layout
 * [section][2][channel]). Transposed direct form II. */
SS_FILTER_CLONES static ss_status run_cascade(ss_ctx *ctx, const ss_filter *f, const float *in, float *out, int64_t n,
                                              int64_t first, int step, int n_channels, double *z) {
  const int C = n_channels, S = f->n_sections, nb = (C + SS_FILTER_LANES - 1) / SS_FILTER_LANES;
  const int last = C - (nb - 1) * SS_FILTER_LANES; /* lanes of the last group */
  size_t bytes = sizeof(ss_v4d) * (size_t)nb * (2 * S + 1);
  ss_v4d *zv = aligned_alloc(sizeof(ss_v4d), bytes);
  if (!zv) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: filter state (%zu bytes)", bytes);
  ss_v4d *row = zv + (size_t)2 * S * nb;
  for (int k = 0; k < 2 * S; k++)
    for (int b = 0; b < nb; b++) {
      zv[k * nb + b] = (ss_v4d){0, 0, 0, 0};
      for (int l = 0; l < (b == nb - 1 ? last : SS_FILTER_LANES); l++)
        zv[k * nb + b][l] = z[k * C + b * SS_FILTER_LANES + l];
    }
  for (int64_t i = 0; i < n; i++) {
    int64_t t = first + i * step;
    const float *x = in + t * C;
    for (int b = 0; b < nb; b++) load_lanes(&row[b], x + b * SS_FILTER_LANES, b == nb - 1 ? last : SS_FILTER_LANES);
    for (int s = 0; s < S; s++) {
      const double b0 = f->sos[s].b0, b1 = f->sos[s].b1, b2 = f->sos[s].b2, a1 = f->sos[s].a1, a2 = f->sos[s].a2;
      ss_v4d *restrict z1 = zv + (2 * s) * nb, *restrict z2 = zv + (2 * s + 1) * nb;
      for (int b = 0; b < nb; b++) {
        ss_v4d v = row[b], y = b0 * v + z1[b];
        z1[b] = b1 * v - a1 * y + z2[b];
        z2[b] = b2 * v - a2 * y;
        row[b] = y;
      }
    }
    float *y = out + t * C;
    for (int b = 0; b < nb; b++) store_lanes(y + b * SS_FILTER_LANES, &row[b], b == nb - 1 ? last : SS_FILTER_LANES);
  }
  for (int k = 0; k < 2 * S; k++)
    for (int b = 0; b < nb; b++)
      for (int l = 0; l < (b == nb - 1 ? last : SS_FILTER_LANES); l++)
        z[k * C + b * SS_FILTER_LANES + l] = zv[k * nb + b][l];
  free(zv);
  return SS_OK;
}

ss_status ss_filter_zero_phase_cpu(ss_ctx *ctx, const ss_filter *f, const float *in, int64_t n_rows, int n_channels,
                                   float *out) {
  if (n_rows <= 0) return SS_OK;
  double *z = NULL;
  SS_TRY(SS_ALLOC(ctx, z, (size_t)2 * f->n_sections * n_channels, "filter state"));
  steady_state(f, in, n_channels, z);
  ss_status st = run_cascade(ctx, f, in, out, n_rows, 0, 1, n_channels, z);
  if (st == SS_OK) {
    steady_state(f, out + (n_rows - 1) * n_channels, n_channels, z);
    st = run_cascade(ctx, f, out, out, n_rows, n_rows - 1, -1, n_channels, z);
  }
  free(z);
  return st;
}

ss_status ss_filter_zero_phase(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *in, int64_t n_rows,
                               int n_channels, float *out) {
  if (be && be->kind == SS_DEVICE_CUDA) return ss_filter_zero_phase_cuda_host(ctx, be, f, in, n_rows, n_channels, out);
  return ss_filter_zero_phase_cpu(ctx, f, in, n_rows, n_channels, out);
}

ss_status ss_filter_state_init(ss_ctx *ctx, const ss_filter *f, int n_channels, ss_filter_state *st) {
  memset(st, 0, sizeof(*st));
  if (n_channels <= 0) return ss_fail(ctx, SS_ERR_INPUT, "filter: channels: expected > 0, got %d", n_channels);
  SS_TRY(SS_CALLOC(ctx, st->z, (size_t)2 * f->n_sections * n_channels, "filter state"));
  st->n_channels = n_channels;
  return SS_OK;
}

void ss_filter_state_free(ss_filter_state *st) {
  free(st->z);
  memset(st, 0, sizeof(*st));
}

ss_status ss_filter_causal_cpu(ss_ctx *ctx, const ss_filter *f, ss_filter_state *st, const float *in, int64_t n_rows,
                               float *out) {
  if (n_rows <= 0) return SS_OK;
  if (!st->started) steady_state(f, in, st->n_channels, st->z);
  st->started = 1;
  return run_cascade(ctx, f, in, out, n_rows, 0, 1, st->n_channels, st->z);
}

ss_status ss_filter_causal(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, ss_filter_state *st, const float *in,
                           int64_t n_rows, float *out) {
  if (be && be->kind == SS_DEVICE_CUDA) return ss_filter_causal_cuda_host(ctx, be, f, st, in, n_rows, out);
  return ss_filter_causal_cpu(ctx, f, st, in, n_rows, out);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

ss_status ss_filter_common_median_cpu(ss_ctx *ctx, float *x, int64_t n_rows, int n_channels, const int *use) {
  float *buf = NULL;
  SS_TRY(SS_ALLOC(ctx, buf, (size_t)n_channels, "median row"));
  for (int64_t t = 0; t < n_rows; t++) {
    float *row = x + t * n_channels;
    int m = 0;
    for (int c = 0; c < n_channels; c++)
      if (!use || use[c]) buf[m++] = row[c];
    if (m == 0) break;
    qsort(buf, (size_t)m, sizeof(float), cmp_float);
    float med = (m % 2) ? buf[m / 2] : 0.5f * (buf[m / 2 - 1] + buf[m / 2]);
    for (int c = 0; c < n_channels; c++)
      if (!use || use[c]) row[c] -= med;
  }
  free(buf);
  return SS_OK;
}

ss_status ss_filter_common_median(ss_ctx *ctx, const ss_backend *be, float *x, int64_t n_rows, int n_channels,
                                  const int *use) {
  if (be && be->kind == SS_DEVICE_CUDA) return ss_filter_common_median_cuda_host(ctx, be, x, n_rows, n_channels, use);
  return ss_filter_common_median_cpu(ctx, x, n_rows, n_channels, use);
}
