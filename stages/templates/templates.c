/* templates.c — the template pass (templates.h): noise-scaled per-cluster median templates, the choice
 * of the clusters that are units, and the assignment of every spike to the unit of largest gain. */
#include "stages/templates/templates.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#define SS_TEMPLATES_MAD_TO_SD 1.4826

/* The k-th smallest of a[0..n) (0-based); reorders a so that a[0..k) <= a[k] <= a[k+1..n). */
static double kth(double *a, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (hi > lo) {
    double piv = a[lo + (hi - lo) / 2];
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (a[i] < piv) i++;
      while (a[j] > piv) j--;
      if (i <= j) {
        double t = a[i];
        a[i++] = a[j];
        a[j--] = t;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else break;
  }
  return a[k];
}

/* Median of a[0..n), n >= 1 (the mean of the two middle values when n is even); reorders a. */
static double median(double *a, int64_t n) {
  double hi = kth(a, n, n / 2);
  if (n % 2) return hi;
  double lo = a[0];
  for (int64_t i = 1; i < n / 2; i++)
    if (a[i] > lo) lo = a[i];
  return 0.5 * (lo + hi);
}

/* Gain of template t (noise-scaled) for spike x scaled by inv_nu (NULL: x is scaled already) over the
 * footprint fp; *amp the clamped amplitude, *res the residual ‖x − a·t‖² there. */
static double gain_scaled(const float *x, const float *inv_nu, const float *t, const uint8_t *fp, int C, int P,
                          double amp_min, double amp_max, double *amp, double *res) {
  double xt = 0, tt = 0, xx = 0;
  for (int c = 0; c < C; c++) {
    if (!fp[c]) continue;
    for (int q = 0; q < P; q++) {
      const int j = c * P + q;
      const double xs = inv_nu ? (double)x[j] * inv_nu[j] : (double)x[j];
      xt += xs * t[j];
      tt += (double)t[j] * t[j];
      xx += xs * xs;
    }
  }
  double a = tt > 0 ? xt / tt : 0, g = 0;
  if (tt > 0) {
    a = a < amp_min ? amp_min : a > amp_max ? amp_max : a;
    g = 2 * a * xt - a * a * tt;
  }
  if (amp) *amp = a;
  if (res) *res = xx - g;
  return g;
}

double ss_templates_gain(const float *x, const float *t, const uint8_t *fp, int n_channels, int n_pcs, double amp_min,
                         double amp_max, double *amp) {
  return gain_scaled(x, NULL, t, fp, n_channels, n_pcs, amp_min, amp_max, amp, NULL);
}

/* Step 1: 1/ν per feature. */
static ss_status noise_scale(ss_ctx *ctx, const ss_templates_input *in, float *inv_nu) {
  const int C = in->n_channels, P = in->n_pcs, D = C * P;
  const int64_t n = in->n;
  double *buf = NULL, *nu = NULL;
  SS_TRY(SS_ALLOC(ctx, buf, (size_t)(n > 0 ? n : 1), "template noise sample"));
  ss_status st = SS_ALLOC(ctx, nu, (size_t)D, "template noise spread");
  for (int c = 0; st == SS_OK && c < C; c++) {
    int64_t e = 0;
    for (int64_t i = 0; i < n; i++) e += in->masks[i * C + c] == 0;
    const int64_t stride = e > SS_TEMPLATES_NOISE_SAMPLE ? e / SS_TEMPLATES_NOISE_SAMPLE : 1;
    for (int q = 0; q < P; q++) {
      const int j = c * P + q;
      int64_t m = 0, seen = 0;
      for (int64_t i = 0; i < n; i++)
        if (in->masks[i * C + c] == 0 && seen++ % stride == 0) buf[m++] = in->features[i * D + j];
      nu[j] = 0;
      if (m < SS_TEMPLATES_MIN_NOISE_SPIKES) continue;
      const double med = median(buf, m);
      for (int64_t i = 0; i < m; i++) buf[i] = fabs(buf[i] - med);
      nu[j] = SS_TEMPLATES_MAD_TO_SD * median(buf, m);
    }
  }
  if (st == SS_OK) {
    int64_t m = 0;
    for (int j = 0; j < D; j++)
      if (nu[j] > 0) buf[m++] = nu[j];
    const double fill = m > 0 ? median(buf, m) : 1.0;
    for (int j = 0; j < D; j++) inv_nu[j] = (float)(1.0 / (nu[j] > 0 ? nu[j] : fill));
  }
  free(buf);
  free(nu);
  return st;
}

typedef struct {
  int C, P, D;
  int64_t k;
  float *tmpl;      /* [k × D] noise-scaled medians */
  uint8_t *fp;      /* [k × C] footprints */
  uint8_t *is_unit; /* [k] */
  int64_t *count;   /* [k] */
} templ_set;

/* Steps 2 and 4 for every cluster of labels. order/start: the spikes of each cluster (counting sort). */
static ss_status build_templates(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, const float *inv_nu,
                                 const int32_t *labels, templ_set *ts) {
  const int C = ts->C, P = ts->P, D = ts->D;
  const int64_t n = in->n, k = ts->k;
  int64_t *start = NULL, *order = NULL;
  SS_TRY(SS_CALLOC(ctx, start, (size_t)k + 1, "template members"));
  ss_status st = SS_ALLOC(ctx, order, (size_t)(n > 0 ? n : 1), "template members");
  if (st != SS_OK) {
    free(start);
    return st;
  }
  for (int64_t i = 0; i < n; i++) start[labels[i] + 1]++;
  for (int64_t c = 0; c < k; c++) start[c + 1] += start[c];
  for (int64_t c = 0; c < k; c++) ts->count[c] = start[c + 1] - start[c];
  {
    int64_t *pos = NULL;
    st = SS_ALLOC(ctx, pos, (size_t)k, "template members");
    if (st == SS_OK) {
      memcpy(pos, start, (size_t)k * sizeof(int64_t));
      for (int64_t i = 0; i < n; i++) order[pos[labels[i]]++] = i;
      free(pos);
    }
  }
  const int T = in->n_threads > 0 ? in->n_threads : 1;
  const double amp_min = p->templates.amp_min, amp_max = p->templates.amp_max;
  int failed = 0;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1) reduction(|| : failed)
  for (int64_t c = 1; c < k; c++) {
    float *t = ts->tmpl + c * D;
    uint8_t *fp = ts->fp + c * C;
    memset(t, 0, (size_t)D * sizeof(float));
    memset(fp, 0, (size_t)C);
    ts->is_unit[c] = 0;
    const int64_t cnt = ts->count[c];
    if (cnt == 0) continue;
    const int64_t m = cnt < SS_TEMPLATES_SAMPLE ? cnt : SS_TEMPLATES_SAMPLE;
    double *buf = malloc((size_t)m * sizeof(double));
    if (!buf) {
      failed = 1;
      continue;
    }
    const int64_t *mem = order + start[c];
    for (int j = 0; j < D; j++) {
      for (int64_t r = 0; r < m; r++) {
        const int64_t i = mem[(int64_t)((__int128)r * cnt / m)];
        buf[r] = (double)in->features[i * D + j] * inv_nu[j];
      }
      t[j] = (float)median(buf, m);
    }
    double emax = 0;
    for (int ch = 0; ch < C; ch++) {
      double e = 0;
      for (int q = 0; q < P; q++) e += (double)t[ch * P + q] * t[ch * P + q];
      if (e > emax) emax = e;
    }
    int nfp = 0;
    for (int ch = 0; ch < C; ch++) {
      double e = 0;
      for (int q = 0; q < P; q++) e += (double)t[ch * P + q] * t[ch * P + q];
      const double floor = SS_TEMPLATES_FOOTPRINT_REL * emax > P ? SS_TEMPLATES_FOOTPRINT_REL * emax : P;
      fp[ch] = emax > 0 && e >= floor;
      nfp += fp[ch];
    }
    if (nfp > 0 && cnt >= p->templates.min_spikes) {
      for (int64_t r = 0; r < m; r++) {
        const int64_t i = mem[(int64_t)((__int128)r * cnt / m)];
        double res;
        gain_scaled(in->features + i * D, inv_nu, t, fp, C, P, amp_min, amp_max, NULL, &res);
        buf[r] = res / ((double)nfp * P);
      }
      ts->is_unit[c] = median(buf, m) <= p->templates.max_residual;
    }
    free(buf);
  }
  free(start);
  free(order);
  if (failed) return ss_fail(ctx, SS_ERR_NOMEM, "templates: out of memory for a cluster's median");
  return SS_OK;
}

/* Step 5: the new label of every spike. units_of[ch]: the units whose footprint holds channel ch. */
static ss_status assign_all(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, const float *inv_nu,
                            const templ_set *ts, int32_t *next) {
  const int C = ts->C, P = ts->P, D = ts->D;
  const int64_t k = ts->k, n = in->n;
  int64_t *ustart = NULL;
  int32_t *ulist = NULL;
  SS_TRY(SS_CALLOC(ctx, ustart, (size_t)C + 1, "units per channel"));
  ss_status st = SS_ALLOC(ctx, ulist, (size_t)(k * C > 0 ? k * C : 1), "units per channel");
  if (st != SS_OK) {
    free(ustart);
    return st;
  }
  for (int ch = 0; ch < C; ch++) {
    ustart[ch + 1] = ustart[ch];
    for (int64_t c = 1; c < k; c++)
      if (ts->is_unit[c] && ts->fp[c * C + ch]) ulist[ustart[ch + 1]++] = (int32_t)c;
  }
  const int T = in->n_threads > 0 ? in->n_threads : 1;
  const double amp_min = p->templates.amp_min, amp_max = p->templates.amp_max, gmin = p->templates.min_gain;
#pragma omp parallel for num_threads(T) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    const int ch = in->peak_channel[i] >= 0 && in->peak_channel[i] < C ? in->peak_channel[i] : 0;
    double best = -INFINITY;
    int32_t lab = 0;
    for (int64_t u = ustart[ch]; u < ustart[ch + 1]; u++) {
      const int32_t c = ulist[u];
      const double g = gain_scaled(in->features + i * D, inv_nu, ts->tmpl + (int64_t)c * D, ts->fp + (int64_t)c * C, C,
                                   P, amp_min, amp_max, NULL, NULL);
      if (g > best) {
        best = g;
        lab = c;
      }
    }
    next[i] = best >= gmin ? lab : 0;
  }
  free(ustart);
  free(ulist);
  return SS_OK;
}

static void templ_set_free(templ_set *ts) {
  free(ts->tmpl);
  free(ts->fp);
  free(ts->is_unit);
  free(ts->count);
}

ss_status ss_templates_assign(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, int32_t *labels,
                              ss_templates_result *out) {
  memset(out, 0, sizeof(*out));
  const int C = in->n_channels, P = in->n_pcs, D = C * P;
  const int64_t n = in->n, k = in->k;
  out->k_in = out->k_out = k;
  for (int64_t i = 0; i < n; i++) {
    if (labels[i] < 0 || labels[i] >= k)
      return ss_fail(ctx, SS_ERR_INPUT, "templates: label %" PRId32 " of spike %" PRId64 " outside 0..%" PRId64,
                     labels[i], i, k - 1);
    out->n_noise_in += labels[i] == 0;
  }
  out->n_noise_out = out->n_noise_in;
  if (n == 0 || k < 2 || p->templates.iterations == 0) return SS_OK;
  templ_set ts = {.C = C, .P = P, .D = D, .k = k};
  float *inv_nu = NULL;
  int32_t *next = NULL, *first = NULL;
  ss_status st = SS_ALLOC(ctx, inv_nu, (size_t)D, "template noise scale");
  if (st == SS_OK) st = SS_ALLOC(ctx, ts.tmpl, (size_t)k * D, "templates");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.fp, (size_t)k * C, "template footprints");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.is_unit, (size_t)k, "template units");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.count, (size_t)k, "template counts");
  if (st == SS_OK) st = SS_ALLOC(ctx, next, (size_t)n, "template labels");
  if (st == SS_OK) st = SS_ALLOC(ctx, first, (size_t)n, "template labels");
  if (st == SS_OK) {
    memcpy(first, labels, (size_t)n * sizeof(int32_t));
    st = noise_scale(ctx, in, inv_nu);
  }
  for (int64_t it = 0; st == SS_OK && it < p->templates.iterations; it++) {
    st = build_templates(ctx, p, in, inv_nu, labels, &ts);
    if (st != SS_OK) break;
    int64_t units = 0;
    for (int64_t c = 1; c < k; c++) units += ts.is_unit[c];
    if (units == 0) {
      ss_log_warn(ctx, "templates: no cluster fits its template (templates.max_residual = %g); labels kept",
                  p->templates.max_residual);
      break;
    }
    out->n_units = units;
    st = assign_all(ctx, p, in, inv_nu, &ts, next);
    if (st == SS_OK) memcpy(labels, next, (size_t)n * sizeof(int32_t));
  }
  if (st == SS_OK) {
    /* renumber: 0 stays 0, surviving clusters keep their order */
    int64_t *cnt = ts.count;
    memset(cnt, 0, (size_t)k * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) cnt[labels[i]]++;
    int32_t *map = NULL;
    st = SS_ALLOC(ctx, map, (size_t)k, "template renumbering");
    if (st == SS_OK) {
      int32_t id = 1;
      map[0] = 0;
      for (int64_t c = 1; c < k; c++) map[c] = cnt[c] > 0 ? id++ : 0;
      out->k_out = id;
      out->n_noise_out = 0;
      for (int64_t i = 0; i < n; i++) {
        out->n_moved += labels[i] != first[i];
        labels[i] = map[labels[i]];
        out->n_noise_out += labels[i] == 0;
      }
      free(map);
    }
  }
  templ_set_free(&ts);
  free(inv_nu);
  free(next);
  free(first);
  return st;
}
