/* motion.c — the rigid motion estimate from spike depths and the registration of filtered chunks (the CPU
 * reference of motion.cu); motion.h states the method. */
#include "stages/motion/motion.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/order.h"

#define MIN_SPIKES_PER_BIN 20 /* a bin with fewer spikes takes its shift from its neighbours in time */
#define DEPTH_SMOOTH_BINS 2.0 /* σ of the histograms' Gaussian smoothing along depth, in depth bins */

void ss_motion_free(ss_motion *m) {
  free(m->shift_um);
  memset(m, 0, sizeof(*m));
}

void ss_motion_reg_free(ss_motion_reg *r) {
  free(r->src);
  free(r->w);
  memset(r, 0, sizeof(*r));
}

static double range_of(const ss_motion *m) {
  double lo = INFINITY, hi = -INFINITY;
  for (int64_t b = 0; b < m->n_bins; b++) {
    lo = fmin(lo, m->shift_um[b]);
    hi = fmax(hi, m->shift_um[b]);
  }
  return m->n_bins > 0 ? hi - lo : 0.0;
}

void ss_motion_add(ss_motion *m, const ss_motion *more) {
  for (int64_t b = 0; b < m->n_bins; b++) m->shift_um[b] += more->shift_um[b];
  m->range_um = range_of(m);
}

void ss_motion_spike_depth(int64_t n, int C, int P, const float *features, const float *masks,
                           const int32_t *peak_channel, const double *y_of_channel, double *depth) {
  for (int64_t i = 0; i < n; i++) {
    double sw = 0, sy = 0;
    for (int c = 0; c < C; c++) {
      const float m = masks[i * C + c];
      if (m <= 0) continue;
      const float *f = features + (i * C + c) * P;
      double e = 0;
      for (int p = 0; p < P; p++) e += (double)f[p] * f[p];
      sw += m * e;
      sy += m * e * y_of_channel[c];
    }
    depth[i] = sw > 0 ? sy / sw : y_of_channel[peak_channel[i]];
  }
}

/* The q-quantile of v[0..n) (selected in the copy tmp). */
static double quantile(const double *v, int64_t n, double q, double *tmp) {
  memcpy(tmp, v, (size_t)n * sizeof(double));
  return ss_order_kth(tmp, n, (int64_t)floor(q * (double)(n - 1)));
}

typedef struct {
  int64_t T, Y;   /* time bins, depth bins */
  int S;          /* shifts searched: −S .. S depth bins */
  int threads;    /* CPU threads of the shift search (each time bin apart: the result does not depend on them) */
  float *h;       /* [T × A × Y] */
  int64_t *count; /* spikes per time bin */
  double *ref;    /* [A × Y] */
} hist;

static void hist_free(hist *g) {
  free(g->h);
  free(g->count);
  free(g->ref);
}

/* Smooth each (time bin, band) row along depth in place (tmp: Y floats). */
static void smooth_depth(hist *g, float *tmp) {
  const int R = (int)ceil(3 * DEPTH_SMOOTH_BINS);
  double k[64];
  for (int d = 0; d <= R; d++) k[d] = exp(-0.5 * d * d / (DEPTH_SMOOTH_BINS * DEPTH_SMOOTH_BINS));
  for (int64_t row = 0; row < g->T * SS_MOTION_AMP_BANDS; row++) {
    float *v = g->h + row * g->Y;
    for (int64_t y = 0; y < g->Y; y++) {
      double s = 0;
      for (int d = -R; d <= R; d++)
        if (y + d >= 0 && y + d < g->Y) s += k[abs(d)] * v[y + d];
      tmp[y] = (float)s;
    }
    memcpy(v, tmp, (size_t)g->Y * sizeof(float));
  }
}

/* Correlation of time bin t shifted by s with the reference: Σ h_t[a][y + s]·ref[a][y]. */
static double corr(const hist *g, int64_t t, int s) {
  double sum = 0;
  for (int a = 0; a < SS_MOTION_AMP_BANDS; a++) {
    const float *v = g->h + (t * SS_MOTION_AMP_BANDS + a) * g->Y;
    const double *r = g->ref + a * g->Y;
    int64_t lo = s < 0 ? -s : 0, hi = s > 0 ? g->Y - s : g->Y;
    for (int64_t y = lo; y < hi; y++) sum += v[y + s] * r[y];
  }
  return sum;
}

/* The reference: mean over the time bins with spikes of their histograms shifted by shift[t]. */
static void make_ref(hist *g, const int *shift) {
  memset(g->ref, 0, (size_t)SS_MOTION_AMP_BANDS * g->Y * sizeof(double));
  for (int64_t t = 0; t < g->T; t++) {
    if (g->count[t] < MIN_SPIKES_PER_BIN) continue;
    for (int a = 0; a < SS_MOTION_AMP_BANDS; a++) {
      const float *v = g->h + (t * SS_MOTION_AMP_BANDS + a) * g->Y;
      double *r = g->ref + a * g->Y;
      for (int64_t y = 0; y < g->Y; y++) {
        int64_t ys = y + shift[t];
        if (ys >= 0 && ys < g->Y) r[y] += v[ys];
      }
    }
  }
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Subtract the median shift of the bins with spikes (the reference frame is the recording's typical
 * position, so most of it is left as recorded). */
static void center_shifts(const hist *g, int *shift, int *tmp) {
  int m = 0;
  for (int64_t t = 0; t < g->T; t++)
    if (g->count[t] >= MIN_SPIKES_PER_BIN) tmp[m++] = shift[t];
  if (m == 0) return;
  qsort(tmp, (size_t)m, sizeof(int), cmp_int);
  int med = tmp[m / 2];
  for (int64_t t = 0; t < g->T; t++) shift[t] -= med;
}

/* Best integer shift of bin t and its sub-bin refinement (parabola through the peak). */
static double best_shift(const hist *g, int64_t t, int *best) {
  double c[2 * 64 + 3];
  int S = g->S;
  double *cs = c + 1; /* cs[s + S], s = −S−1 .. S+1 */
  for (int s = -S - 1; s <= S + 1; s++) cs[s + S] = corr(g, t, s);
  int b = 0;
  for (int s = -S; s <= S; s++)
    if (cs[s + S] > cs[b + S]) b = s;
  *best = b;
  double l = cs[b - 1 + S], m = cs[b + S], r = cs[b + 1 + S], den = l - 2 * m + r;
  double d = den < 0 ? 0.5 * (l - r) / den : 0.0;
  if (d > 0.5) d = 0.5;
  if (d < -0.5) d = -0.5;
  return b + d;
}

static ss_status hist_build(ss_ctx *ctx, int64_t n, const int64_t *ts, const float *amp, const double *depth, double y0,
                            int64_t bin_samples, hist *g) {
  double *la = NULL, *tmp = NULL;
  SS_TRY(SS_ALLOC(ctx, la, (size_t)n, "motion amplitudes"));
  ss_status st = SS_ALLOC(ctx, tmp, (size_t)n, "motion amplitudes");
  if (st != SS_OK) {
    free(la);
    return st;
  }
  for (int64_t i = 0; i < n; i++) la[i] = log(fabs((double)amp[i]) + 1e-3);
  const double lo = quantile(la, n, 0.01, tmp), hi = quantile(la, n, 0.99, tmp);
  const double span = hi > lo ? hi - lo : 1.0;
  for (int64_t i = 0; i < n; i++) {
    int64_t t = ts[i] / bin_samples;
    if (t < 0) t = 0;
    if (t >= g->T) t = g->T - 1;
    int a = (int)floor((la[i] - lo) / span * SS_MOTION_AMP_BANDS);
    a = a < 0 ? 0 : a >= SS_MOTION_AMP_BANDS ? SS_MOTION_AMP_BANDS - 1 : a;
    int64_t y = (int64_t)floor((depth[i] - y0) / SS_MOTION_DEPTH_BIN_UM);
    if (y < 0 || y >= g->Y) continue;
    g->h[(t * SS_MOTION_AMP_BANDS + a) * g->Y + y] += 1.0f;
    g->count[t]++;
  }
  free(la);
  free(tmp);
  return SS_OK;
}

/* Bins with too few spikes take the shift of the nearest bin that has enough (0 when none has). */
static void fill_sparse(const hist *g, double *shift) {
  int64_t last = -1;
  for (int64_t t = 0; t < g->T; t++) {
    if (g->count[t] >= MIN_SPIKES_PER_BIN) {
      for (int64_t u = last + 1; u < t; u++) shift[u] = (last < 0 || t - u <= u - last) ? shift[t] : shift[last];
      last = t;
    }
  }
  for (int64_t u = last + 1; u < g->T; u++) shift[u] = last < 0 ? 0.0 : shift[last];
}

/* Gaussian of one bin over time (renormalised at the ends). */
static void smooth_time(double *v, int64_t T, double *tmp) {
  for (int64_t t = 0; t < T; t++) {
    double s = 0, w = 0;
    for (int64_t d = -3; d <= 3; d++) {
      if (t + d < 0 || t + d >= T) continue;
      double k = exp(-0.5 * (double)(d * d));
      s += k * v[t + d];
      w += k;
    }
    tmp[t] = s / w;
  }
  memcpy(v, tmp, (size_t)T * sizeof(double));
}

static ss_status register_bins(ss_ctx *ctx, hist *g, double *shift_um) {
  int *s = NULL, *tmp = NULL;
  ss_status st = SS_CALLOC(ctx, s, (size_t)g->T, "motion shifts");
  if (st == SS_OK) st = SS_ALLOC(ctx, tmp, (size_t)g->T, "motion shifts");
  for (int it = 0; st == SS_OK && it < SS_MOTION_ITERATIONS; it++) {
    make_ref(g, s);
#pragma omp parallel for num_threads(g->threads) schedule(static)
    for (int64_t t = 0; t < g->T; t++)
      if (g->count[t] >= MIN_SPIKES_PER_BIN) best_shift(g, t, &s[t]);
    center_shifts(g, s, tmp);
  }
  if (st == SS_OK) {
    make_ref(g, s);
#pragma omp parallel for num_threads(g->threads) schedule(static)
    for (int64_t t = 0; t < g->T; t++) {
      int b;
      shift_um[t] = g->count[t] >= MIN_SPIKES_PER_BIN ? best_shift(g, t, &b) * SS_MOTION_DEPTH_BIN_UM : 0.0;
    }
  }
  free(s);
  free(tmp);
  return st;
}

ss_status ss_motion_estimate(ss_ctx *ctx, const ss_params *p, int64_t n, const int64_t *time_samples,
                             const float *amplitude, const double *depth, double depth_lo, double depth_hi,
                             int64_t n_samples, double rate_hz, int n_threads, ss_motion *out) {
  memset(out, 0, sizeof(*out));
  const double max_um = p->motion.max_um;
  int64_t bin_samples = llround(p->motion.bin_s * rate_hz);
  if (bin_samples < 1) bin_samples = 1;
  hist g = {0};
  g.threads = n_threads > 0 ? n_threads : 1;
  g.S = (int)ceil(max_um / SS_MOTION_DEPTH_BIN_UM);
  if (g.S > 64) g.S = 64; /* max_um's range in the params table keeps S at most 64 */
  const double y0 = depth_lo - (g.S + 2) * SS_MOTION_DEPTH_BIN_UM;
  g.Y = (int64_t)ceil((depth_hi - y0) / SS_MOTION_DEPTH_BIN_UM) + g.S + 3;
  if (g.Y > SS_MOTION_MAX_CELLS / SS_MOTION_AMP_BANDS) { /* out->n_bins 0: not estimated */
    ss_log_warn(ctx, "motion: the probe spans %.0f um, too long for 2 um depth bins: motion not estimated",
                depth_hi - depth_lo);
    return SS_OK;
  }
  /* long recordings on long probes: wider time bins keep the histograms within SS_MOTION_MAX_CELLS */
  int64_t max_bins = SS_MOTION_MAX_CELLS / (SS_MOTION_AMP_BANDS * g.Y);
  if (max_bins < 1) max_bins = 1;
  if ((n_samples + bin_samples - 1) / bin_samples > max_bins) {
    bin_samples = (n_samples + max_bins - 1) / max_bins;
    ss_log_info(ctx, "motion: time bins of %.3g s (motion.bin_s = %g s would need more than %d M histogram cells)",
                bin_samples / rate_hz, p->motion.bin_s, SS_MOTION_MAX_CELLS >> 20);
  }
  g.T = (n_samples + bin_samples - 1) / bin_samples;
  if (g.T < 1) g.T = 1;
  ss_status st = SS_CALLOC(ctx, g.h, (size_t)(g.T * SS_MOTION_AMP_BANDS * g.Y), "motion histograms");
  if (st == SS_OK) st = SS_CALLOC(ctx, g.count, (size_t)g.T, "motion histograms");
  if (st == SS_OK) st = SS_ALLOC(ctx, g.ref, (size_t)(SS_MOTION_AMP_BANDS * g.Y), "motion reference");
  if (st == SS_OK) st = SS_CALLOC(ctx, out->shift_um, (size_t)g.T, "motion shifts");
  if (st == SS_OK && n > 0) st = hist_build(ctx, n, time_samples, amplitude, depth, y0, bin_samples, &g);
  float *ftmp = NULL;
  double *dtmp = NULL;
  if (st == SS_OK) st = SS_ALLOC(ctx, ftmp, (size_t)g.Y, "motion scratch");
  if (st == SS_OK) st = SS_ALLOC(ctx, dtmp, (size_t)g.T, "motion scratch");
  if (st == SS_OK) {
    smooth_depth(&g, ftmp);
    st = register_bins(ctx, &g, out->shift_um);
  }
  if (st == SS_OK) {
    fill_sparse(&g, out->shift_um);
    smooth_time(out->shift_um, g.T, dtmp);
    out->n_bins = g.T;
    out->bin_samples = bin_samples;
    out->range_um = range_of(out);
  }
  free(ftmp);
  free(dtmp);
  hist_free(&g);
  if (st != SS_OK) ss_motion_free(out);
  return st;
}

/* --- registration ------------------------------------------------------------------------------- */

typedef struct {
  int m;
  int32_t *ch; /* the column's channels by increasing y */
  double *y;
} column;

static int usable(const ss_probe *probe, int k) {
  return k >= 0 && probe->channel[k] >= 0 && (!probe->connected || probe->connected[k]);
}

/* The column of contact k: usable contacts of its shank at its x (within 0.5 µm), by increasing y. */
static void column_of(const ss_probe *probe, int k, column *col) {
  col->m = 0;
  for (int j = 0; j < probe->n; j++) {
    if (!usable(probe, j) || fabs(probe->x[j] - probe->x[k]) > 0.5) continue;
    if (probe->shank && probe->shank[j] != probe->shank[k]) continue;
    int i = col->m++;
    while (i > 0 && col->y[i - 1] > probe->y[j]) { /* insertion by y */
      col->y[i] = col->y[i - 1];
      col->ch[i] = col->ch[i - 1];
      i--;
    }
    col->y[i] = probe->y[j];
    col->ch[i] = probe->channel[j];
  }
}

/* Weights of the signal at depth q in the column: Catmull–Rom through the four contacts around q (the
 * column's ends repeated past them), which follows a spike's peak between two contacts more closely
 * than a straight line. Past the column's ends, the end contact: a channel of zeros would have a noise
 * level of 0 in the excerpts' share of time it spends there, and its threshold would then take every
 * sample of the rest of the recording as a spike. */
static void interpolate(const column *col, double q, int32_t self, int32_t *src, float *w) {
  for (int k = 0; k < SS_MOTION_TAPS; k++) {
    src[k] = self;
    w[k] = 0.0f;
  }
  w[0] = 1.0f;
  if (col->m == 0) return;
  const double first = col->y[0], last = col->y[col->m - 1];
  if (q <= first || q >= last) {
    src[0] = q <= first ? col->ch[0] : col->ch[col->m - 1];
    return;
  }
  int j = 0;
  while (j + 1 < col->m && col->y[j + 1] <= q) j++;
  const double f = (q - col->y[j]) / (col->y[j + 1] - col->y[j]), f2 = f * f, f3 = f2 * f;
  const double cw[4] = {0.5 * (-f + 2 * f2 - f3), 0.5 * (2 - 5 * f2 + 3 * f3), 0.5 * (f + 4 * f2 - 3 * f3),
                        0.5 * (f3 - f2)};
  for (int k = 0; k < 4; k++) {
    int at = j - 1 + k;
    at = at < 0 ? 0 : at >= col->m ? col->m - 1 : at;
    src[k] = col->ch[at];
    w[k] = (float)cw[k];
  }
}

ss_status ss_motion_reg_build(ss_ctx *ctx, const ss_motion *m, const ss_probe *probe, int n_channels,
                              ss_motion_reg *out) {
  memset(out, 0, sizeof(*out));
  const size_t cells = (size_t)m->n_bins * n_channels * SS_MOTION_TAPS;
  column col = {0};
  ss_status st = SS_ALLOC(ctx, out->src, cells, "registration weights");
  if (st == SS_OK) st = SS_ALLOC(ctx, out->w, cells, "registration weights");
  if (st == SS_OK) st = SS_ALLOC(ctx, col.ch, (size_t)probe->n + 1, "probe column");
  if (st == SS_OK) st = SS_ALLOC(ctx, col.y, (size_t)probe->n + 1, "probe column");
  for (int c = 0; st == SS_OK && c < n_channels; c++) {
    int k = ss_probe_contact_of_channel(probe, c);
    if (usable(probe, k)) column_of(probe, k, &col);
    else col.m = 0;
    for (int64_t b = 0; b < m->n_bins; b++) {
      size_t at = ((size_t)b * n_channels + c) * SS_MOTION_TAPS;
      /* a channel detection does not use keeps its signal (an empty column gives the identity) */
      if (!usable(probe, k)) col.m = 0;
      interpolate(&col, probe->y[k] + m->shift_um[b], c, out->src + at, out->w + at);
    }
  }
  free(col.ch);
  free(col.y);
  if (st != SS_OK) {
    ss_motion_reg_free(out);
    return st;
  }
  out->n_bins = m->n_bins;
  out->bin_samples = m->bin_samples;
  out->n_channels = n_channels;
  return SS_OK;
}

ss_status ss_motion_apply(ss_ctx *ctx, const ss_motion_reg *r, float *x, int64_t n_rows, int64_t row0_sample) {
  const int C = r->n_channels;
  float *row = NULL;
  SS_TRY(SS_ALLOC(ctx, row, (size_t)C, "registration row"));
  for (int64_t t = 0; t < n_rows; t++) {
    int64_t b = (row0_sample + t) / r->bin_samples;
    b = b < 0 ? 0 : b >= r->n_bins ? r->n_bins - 1 : b;
    const int32_t *src = r->src + (size_t)b * C * SS_MOTION_TAPS;
    const float *w = r->w + (size_t)b * C * SS_MOTION_TAPS;
    float *v = x + t * C;
    for (int c = 0; c < C; c++) {
      const int32_t *sc = src + c * SS_MOTION_TAPS;
      const float *wc = w + c * SS_MOTION_TAPS;
      /* a fixed order of rounded products and sums, which the CUDA kernel repeats */
      row[c] = ((wc[0] * v[sc[0]] + wc[1] * v[sc[1]]) + wc[2] * v[sc[2]]) + wc[3] * v[sc[3]];
    }
    memcpy(v, row, (size_t)C * sizeof(float));
  }
  free(row);
  return SS_OK;
}
