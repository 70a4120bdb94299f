/* templates.c — the template pass (templates.h): noise-scaled per-cluster median templates, the choice
 * of the clusters that are units, and the assignment of every spike to the unit of largest gain. */
#include "stages/templates/templates.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/order.h"

#ifdef _OPENMP
#include <omp.h>
#define TPL_THREAD() omp_get_thread_num()
#else
#define TPL_THREAD() 0
#endif

#define SS_TEMPLATES_MAD_TO_SD 1.4826

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
      const double med = ss_order_median(buf, m);
      for (int64_t i = 0; i < m; i++) buf[i] = fabs(buf[i] - med);
      nu[j] = SS_TEMPLATES_MAD_TO_SD * ss_order_median(buf, m);
    }
  }
  if (st == SS_OK) {
    int64_t m = 0;
    for (int j = 0; j < D; j++)
      if (nu[j] > 0) buf[m++] = nu[j];
    const double fill = m > 0 ? ss_order_median(buf, m) : 1.0;
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
  double *res;      /* [k] median residual per footprint feature of the cluster's own fit */
  int *nfp;         /* [k] footprint channels */
} templ_set;

/* Median over (at most SS_TEMPLATES_SAMPLE, evenly spaced of) the spikes mem[0..cnt) of the residual of
 * template t's fit over footprint fp (nfp channels), per footprint feature; buf holds the sample. */
static double median_residual(const ss_params *p, const ss_templates_input *in, const float *inv_nu, const int64_t *mem,
                              int64_t cnt, const float *t, const uint8_t *fp, int nfp, double *buf) {
  const int C = in->n_channels, P = in->n_pcs, D = C * P;
  const int64_t m = cnt < SS_TEMPLATES_SAMPLE ? cnt : SS_TEMPLATES_SAMPLE;
  for (int64_t r = 0; r < m; r++) {
    const int64_t i = mem[(int64_t)((__int128)r * cnt / m)];
    double res;
    gain_scaled(in->features + i * D, inv_nu, t, fp, C, P, p->templates.amp_min, p->templates.amp_max, NULL, &res);
    buf[r] = res / ((double)nfp * P);
  }
  return ss_order_median(buf, m);
}

/* Steps 2 and 4 for the cnt spikes mem[0..cnt): the template t[0..D), the footprint fp[0..C) and in *res the
 * median residual per footprint feature (INFINITY when the cluster is too small or has no footprint).
 * buf: scratch of SS_TEMPLATES_SAMPLE values. */
static void fit_cluster(const ss_params *p, const ss_templates_input *in, const float *inv_nu, const int64_t *mem,
                        int64_t cnt, float *t, uint8_t *fp, double *res, double *buf) {
  const int C = in->n_channels, P = in->n_pcs, D = C * P;
  memset(t, 0, (size_t)D * sizeof(float));
  memset(fp, 0, (size_t)C);
  *res = INFINITY;
  if (cnt <= 0) return;
  const int64_t m = cnt < SS_TEMPLATES_SAMPLE ? cnt : SS_TEMPLATES_SAMPLE;
  for (int j = 0; j < D; j++) {
    for (int64_t r = 0; r < m; r++) {
      const int64_t i = mem[(int64_t)((__int128)r * cnt / m)];
      buf[r] = (double)in->features[i * D + j] * inv_nu[j];
    }
    t[j] = (float)ss_order_median(buf, m);
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
  if (nfp > 0 && cnt >= p->templates.min_spikes) *res = median_residual(p, in, inv_nu, mem, cnt, t, fp, nfp, buf);
}

/* Squared distance between the scaled spike x (scaled by inv_nu) and the point c, over all D features. */
static double dist2(const float *x, const float *inv_nu, const double *c, int D) {
  double d = 0;
  for (int j = 0; j < D; j++) {
    const double v = (double)x[j] * inv_nu[j] - c[j];
    d += v * v;
  }
  return d;
}

/* Scratch of step 0, sized for the largest cluster (n spikes) and made before it starts. */
typedef struct {
  double *buf;    /* [SS_TEMPLATES_SAMPLE] the median's sample */
  double *centre; /* [2 × D] the two 2-means centres */
  uint8_t *side;  /* [n] */
  int64_t *tmp;   /* [n] */
} split_work;

/* Step 0's bisection of mem[0..m) (noise-scaled, all features): 2-means seeded by the spike farthest from
 * the template t and the spike farthest from that one; mem is reordered so that the first part comes first
 * (each part in its old order). Returns the size of the first part (0 or m: no split). */
static int64_t bisect(const ss_templates_input *in, const float *inv_nu, const float *t, int64_t *mem, int64_t m,
                      const split_work *w) {
  const int D = in->n_channels * in->n_pcs;
  double *ca = w->centre, *cb = ca + D;
  uint8_t *side = w->side;
  int64_t *tmp = w->tmp;
  int64_t na = 0;
  for (int j = 0; j < D; j++) ca[j] = t[j];
  int64_t ia = 0, ib = 0;
  double best = -1;
  for (int64_t r = 0; r < m; r++) {
    const double d = dist2(in->features + mem[r] * D, inv_nu, ca, D);
    if (d > best) best = d, ia = r;
  }
  for (int j = 0; j < D; j++) ca[j] = (double)in->features[mem[ia] * D + j] * inv_nu[j];
  best = -1;
  for (int64_t r = 0; r < m; r++) {
    const double d = dist2(in->features + mem[r] * D, inv_nu, ca, D);
    if (d > best) best = d, ib = r;
  }
  for (int j = 0; j < D; j++) cb[j] = (double)in->features[mem[ib] * D + j] * inv_nu[j];
  for (int it = 0; it < SS_TEMPLATES_BISECT_ITERATIONS; it++) {
    na = 0;
    for (int64_t r = 0; r < m; r++) {
      const float *x = in->features + mem[r] * D;
      side[r] = dist2(x, inv_nu, ca, D) <= dist2(x, inv_nu, cb, D);
      na += side[r];
    }
    if (na == 0 || na == m) break;
    memset(ca, 0, (size_t)D * 2 * sizeof(double));
    for (int64_t r = 0; r < m; r++) {
      double *c = side[r] ? ca : cb;
      for (int j = 0; j < D; j++) c[j] += (double)in->features[mem[r] * D + j] * inv_nu[j];
    }
    for (int j = 0; j < D; j++) ca[j] /= (double)na, cb[j] /= (double)(m - na);
  }
  int64_t a = 0, b = na;
  for (int64_t r = 0; r < m; r++) tmp[side[r] ? a++ : b++] = mem[r];
  memcpy(mem, tmp, (size_t)m * sizeof(int64_t));
  return na;
}

typedef struct {
  int64_t off, len;
  int depth;
} segment;

/* Step 0 for cluster c (its spikes mem[0..cnt), reordered): when it fails the unit test, bisect it and each
 * failing part, up to templates.split_depth; every final part gets a new label *next_id, *next_id + 1, ....
 * t/fp: scratch for one template. Returns the number of parts (0: kept). */
static int64_t split_cluster(const ss_params *p, const ss_templates_input *in, const float *inv_nu, int64_t *mem,
                             int64_t cnt, float *t, uint8_t *fp, const split_work *w, int32_t *labels,
                             int32_t *next_id) {
  const int64_t min_part = p->templates.min_spikes;
  segment stack[2 * 16 + 2];
  int top = 0;
  int64_t parts = 0;
  stack[top++] = (segment){0, cnt, 0};
  while (top > 0) {
    const segment g = stack[--top];
    double res;
    fit_cluster(p, in, inv_nu, mem + g.off, g.len, t, fp, &res, w->buf);
    const int final = res <= p->templates.max_residual || g.depth >= p->templates.split_depth || g.len < 2 * min_part;
    const int64_t na = final ? 0 : bisect(in, inv_nu, t, mem + g.off, g.len, w);
    if (final || na == 0 || na == g.len) {
      if (g.depth == 0) return 0;
      for (int64_t r = 0; r < g.len; r++) labels[mem[g.off + r]] = *next_id;
      ++*next_id;
      parts++;
      continue;
    }
    stack[top++] = (segment){g.off + na, g.len - na, g.depth + 1};
    stack[top++] = (segment){g.off, na, g.depth + 1};
  }
  return parts;
}

/* Step 0 over every cluster, in id order: labels get the parts' new ids from k on; *k_out the new count. */
static ss_status split_failing(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, const float *inv_nu,
                               int32_t *labels, int64_t k, int64_t *k_out, int64_t *n_split) {
  const int C = in->n_channels, D = C * in->n_pcs;
  const int64_t n = in->n;
  int64_t *start = NULL, *order = NULL;
  float *t = NULL;
  uint8_t *fp = NULL;
  *k_out = k;
  *n_split = 0;
  if (p->templates.split_depth <= 0) return SS_OK;
  ss_status st = SS_CALLOC(ctx, start, (size_t)k + 1, "template split");
  if (st == SS_OK) st = SS_ALLOC(ctx, order, (size_t)(n > 0 ? n : 1), "template split");
  if (st == SS_OK) st = SS_ALLOC(ctx, t, (size_t)D, "template split");
  if (st == SS_OK) st = SS_ALLOC(ctx, fp, (size_t)C, "template split");
  int64_t *fill = NULL;
  if (st == SS_OK) st = SS_ALLOC(ctx, fill, (size_t)k, "template split");
  split_work w = {0};
  if (st == SS_OK) st = SS_ALLOC(ctx, w.buf, SS_TEMPLATES_SAMPLE, "template split");
  if (st == SS_OK) st = SS_ALLOC(ctx, w.centre, (size_t)D * 2, "template split");
  if (st == SS_OK) st = SS_ALLOC(ctx, w.side, (size_t)(n > 0 ? n : 1), "template split");
  if (st == SS_OK) st = SS_ALLOC(ctx, w.tmp, (size_t)(n > 0 ? n : 1), "template split");
  if (st == SS_OK) {
    for (int64_t i = 0; i < n; i++) start[labels[i] + 1]++;
    for (int64_t c = 0; c < k; c++) start[c + 1] += start[c];
    memcpy(fill, start, (size_t)k * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) order[fill[labels[i]]++] = i;
  }
  int32_t next_id = (int32_t)k;
  for (int64_t c = 1; st == SS_OK && c < k; c++) {
    if (in->may_split && !in->may_split[c]) continue;
    const int64_t parts = split_cluster(p, in, inv_nu, order + start[c], start[c + 1] - start[c], t, fp, &w, labels,
                                        &next_id);
    *n_split += parts > 0;
  }
  *k_out = next_id;
  free(w.buf);
  free(w.centre);
  free(w.side);
  free(w.tmp);
  free(start);
  free(order);
  free(t);
  free(fp);
  free(fill);
  return st;
}

/* Steps 2 and 4 for every cluster of labels. order/start: the spikes of each cluster (counting sort). */
static ss_status build_templates(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, const float *inv_nu,
                                 const int32_t *labels, templ_set *ts) {
  const int C = ts->C, D = ts->D;
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
  if (st != SS_OK) {
    free(start);
    free(order);
    return st;
  }
  const int T = in->n_threads > 0 ? in->n_threads : 1;
  double *bufs = NULL; /* one median sample per thread */
  st = SS_ALLOC(ctx, bufs, (size_t)T * SS_TEMPLATES_SAMPLE, "template medians");
  if (st == SS_OK) {
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
    for (int64_t c = 1; c < k; c++) {
      double res, *buf = bufs + (size_t)TPL_THREAD() * SS_TEMPLATES_SAMPLE;
      fit_cluster(p, in, inv_nu, order + start[c], ts->count[c], ts->tmpl + c * D, ts->fp + c * C, &res, buf);
      ts->is_unit[c] = res <= p->templates.max_residual;
      ts->res[c] = res;
      ts->nfp[c] = 0;
      for (int ch = 0; ch < C; ch++) ts->nfp[c] += ts->fp[c * C + ch];
    }
  }
  free(bufs);
  free(start);
  free(order);
  for (int64_t c = 1; st == SS_OK && c < k; c++)
    ss_log_debug(ctx, "templates: cluster %" PRId64 ": %" PRId64 " spikes, median residual %.3f on %d channels%s", c,
                 ts->count[c], ts->res[c], ts->nfp[c], ts->is_unit[c] ? "" : " (not a unit)");
  return st;
}

/* Whether the fit (amplitude a, gain g, residual res over nfp footprint channels) explains its spike
 * (step 5): the residual is within the noise bound or a small fraction of the spike's energy there
 * (g + res), which a large unit's timing jitter alone exceeds in absolute terms. */
static int explains(const ss_params *p, double a, double g, double res, int nfp, int P) {
  return a < p->templates.amp_max &&
         (res <= p->templates.move_residual * nfp * P || res <= p->templates.move_fraction * (g + res));
}

/* Step 5: the new label of every spike from its current one, cur. units_of[ch]: the units whose footprint
 * holds channel ch. */
static ss_status assign_all(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, const float *inv_nu,
                            const templ_set *ts, const int32_t *cur, int32_t *next) {
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
  const int keep = p->templates.move_residual > 0;
#pragma omp parallel for num_threads(T) schedule(static)
  for (int64_t i = 0; i < n; i++) {
    const int ch = in->peak_channel[i] >= 0 && in->peak_channel[i] < C ? in->peak_channel[i] : 0;
    double best = -INFINITY, best_a = 0, best_res = 0;
    int32_t lab = 0;
    for (int64_t u = ustart[ch]; u < ustart[ch + 1]; u++) {
      const int32_t c = ulist[u];
      double a, res;
      const double g = gain_scaled(in->features + i * D, inv_nu, ts->tmpl + (int64_t)c * D, ts->fp + (int64_t)c * C, C,
                                   P, amp_min, amp_max, &a, &res);
      if (g > best) {
        best = g, best_a = a, best_res = res;
        lab = c;
      }
    }
    next[i] = best >= gmin ? lab : 0;
    const int32_t own = cur[i];
    if (keep && own > 0 && ts->is_unit[own] && next[i] != own && !explains(p, best_a, best, best_res, ts->nfp[lab], P))
      next[i] = own;
  }
  free(ustart);
  free(ulist);
  return SS_OK;
}

/* Step 0's join: each part (id >= k_parts) that passed the unit test in ts goes to the other unit whose
 * template fits its spikes with the lowest median residual, when that is at most templates.join_residual and
 * templates.join_ratio times the part's own median residual. */
static ss_status join_parts(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, const float *inv_nu,
                            templ_set *ts, int64_t k_parts, int32_t *labels, int64_t *n_joined) {
  const int C = ts->C;
  const int64_t n = in->n, k = ts->k;
  int64_t *mem = NULL;
  double *buf = NULL;
  *n_joined = 0;
  if (k_parts >= k) return SS_OK;
  ss_status st = SS_ALLOC(ctx, mem, (size_t)(n > 0 ? n : 1), "template join");
  if (st == SS_OK) st = SS_ALLOC(ctx, buf, SS_TEMPLATES_SAMPLE, "template join");
  for (int64_t c = k_parts; st == SS_OK && c < k; c++) {
    if (!ts->is_unit[c]) continue;
    int64_t cnt = 0;
    for (int64_t i = 0; i < n; i++)
      if (labels[i] == c) mem[cnt++] = i;
    double best = INFINITY;
    int64_t to = 0;
    for (int64_t u = 1; u < k; u++) {
      if (u == c || !ts->is_unit[u]) continue;
      int nfp = 0;
      for (int ch = 0; ch < C; ch++) nfp += ts->fp[u * C + ch];
      const double r = median_residual(p, in, inv_nu, mem, cnt, ts->tmpl + u * ts->D, ts->fp + u * C, nfp, buf);
      if (r < best) best = r, to = u;
    }
    ss_log_debug(ctx, "templates: part %" PRId64 " (%" PRId64 " spikes) fits unit %" PRId64 " at %.3f (own %.3f)", c,
                 cnt, to, best, ts->res[c]);
    if (to > 0 && best <= p->templates.join_residual && best <= p->templates.join_ratio * ts->res[c]) {
      for (int64_t r = 0; r < cnt; r++) labels[mem[r]] = (int32_t)to;
      ts->is_unit[c] = 0;
      ++*n_joined;
    }
  }
  free(mem);
  free(buf);
  return st;
}

static void templ_set_free(templ_set *ts) {
  free(ts->tmpl);
  free(ts->fp);
  free(ts->is_unit);
  free(ts->count);
  free(ts->res);
  free(ts->nfp);
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
  if (st == SS_OK) st = SS_ALLOC(ctx, next, (size_t)n, "template labels");
  if (st == SS_OK) st = SS_ALLOC(ctx, first, (size_t)n, "template labels");
  if (st == SS_OK) {
    memcpy(first, labels, (size_t)n * sizeof(int32_t));
    st = noise_scale(ctx, in, inv_nu);
  }
  if (st == SS_OK) st = split_failing(ctx, p, in, inv_nu, labels, k, &ts.k, &out->n_split);
  const int64_t k2 = ts.k;
  if (st == SS_OK) st = SS_ALLOC(ctx, ts.tmpl, (size_t)k2 * D, "templates");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.fp, (size_t)k2 * C, "template footprints");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.is_unit, (size_t)k2, "template units");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.count, (size_t)k2, "template counts");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.res, (size_t)k2, "template residuals");
  if (st == SS_OK) st = SS_CALLOC(ctx, ts.nfp, (size_t)k2, "template footprints");
  if (st == SS_OK && k2 > k) st = build_templates(ctx, p, in, inv_nu, labels, &ts);
  if (st == SS_OK && k2 > k) st = join_parts(ctx, p, in, inv_nu, &ts, k, labels, &out->n_joined);
  for (int64_t it = 0; st == SS_OK && !in->split_only && it < p->templates.iterations; it++) {
    st = build_templates(ctx, p, in, inv_nu, labels, &ts);
    if (st != SS_OK) break;
    int64_t units = 0;
    for (int64_t c = 1; c < k2; c++) units += ts.is_unit[c];
    if (units == 0) {
      ss_log_warn(ctx, "templates: no cluster fits its template (templates.max_residual = %g); labels kept",
                  p->templates.max_residual);
      break;
    }
    out->n_units = units;
    st = assign_all(ctx, p, in, inv_nu, &ts, labels, next);
    if (st == SS_OK) memcpy(labels, next, (size_t)n * sizeof(int32_t));
  }
  if (st == SS_OK) {
    /* renumber: 0 stays 0, surviving clusters keep their order */
    int64_t *cnt = ts.count;
    memset(cnt, 0, (size_t)k2 * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) cnt[labels[i]]++;
    int32_t *map = NULL;
    st = SS_ALLOC(ctx, map, (size_t)k2, "template renumbering");
    if (st == SS_OK) {
      int32_t id = 1;
      map[0] = 0;
      for (int64_t c = 1; c < k2; c++) map[c] = cnt[c] > 0 ? id++ : 0;
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
