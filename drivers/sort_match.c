/* sort_match.c — the sort driver's matching stage: the units' templates from the filtered recording at
 * their spikes' times, then a pass that matches them over the whole recording (stages/match) and
 * replaces the spike table by the matched spikes, each with features and masks cut from its own
 * waveform (the residual plus its fitted template). With a CUDA backend the chunks are matched on the
 * GPU through a few handles that the pass's threads share (same spikes as the CPU). */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/order.h"
#include "drivers/sort_internal.h"
#include "stages/match/match.h"
#include "stages/templates/templates.h"

typedef struct {
  float *buf; /* template pass: cut windows [m × W × C]; match pass: clean waveforms [m × C × n_wave] */
  int32_t *unit;
  size_t cap_buf, cap_n;
  int64_t m;
  ss_match_work work;
  ss_match_list list;
  float *feat, *mask, *ampl, *resid;
  size_t cap_feat, cap_mask, cap_ampl, cap_resid;
} match_slot;

/* GPU handles kept by the pass: each holds a chunk's scratch on the device, so there are fewer of them
 * than CPU threads; a thread takes its slot's handle under the handle's lock. */
#define MATCH_GPU_HANDLES 4

typedef struct {
  ss_match_cuda *h;
  pthread_mutex_t lock;
} gpu_handle;

typedef struct {
  const ss_sort_state *s;
  int C, W, n_before, K;
  int32_t *unit_of;    /* [k]: cluster → unit, −1 when the cluster is not one */
  int32_t *cluster_of; /* [K] */
  uint8_t *pick;       /* [n spikes]: spike used for its unit's template */
  double *sum;         /* [K × W × C] */
  int64_t *count;      /* [K] */
  match_slot *slots;
  int n_slots;
  gpu_handle *gpu; /* NULL: matching on the CPU */
  int n_gpu;
  ss_match_bank bank;
  ss_spikes out; /* the matched spikes */
  int32_t *labels;
  float *resid; /* [matched spikes]: residual energy per footprint sample, noise variances */
  float *scale; /* [matched spikes]: the fit's amplitude scale */
  int64_t cap_out;
} match_job;

static ss_status grow(ss_ctx *ctx, void **p, size_t *cap, size_t count, size_t size, const char *what) {
  if (count <= *cap) return SS_OK;
  size_t n = *cap ? *cap : 64;
  while (n < count) n *= 2;
  SS_TRY(ss_realloc(ctx, p, n, size, what));
  *cap = n;
  return SS_OK;
}

/* --- units and the spikes their templates average ------------------------------------------------ */

static ss_status choose_units(ss_ctx *ctx, match_job *j) {
  const ss_sort_state *s = j->s;
  const int64_t n = s->spikes.n, k = s->k, max_per = s->o->params.match.template_spikes;
  int64_t *size = NULL, *seen = NULL;
  SS_TRY(SS_CALLOC(ctx, size, (size_t)k + 1, "cluster sizes"));
  ss_status st = SS_CALLOC(ctx, seen, (size_t)k + 1, "cluster sizes");
  if (st == SS_OK) st = SS_ALLOC(ctx, j->unit_of, (size_t)k + 1, "units");
  if (st == SS_OK) st = SS_ALLOC(ctx, j->cluster_of, (size_t)k + 1, "units");
  if (st == SS_OK) st = SS_CALLOC(ctx, j->pick, (size_t)n + 1, "template spikes");
  for (int64_t i = 0; st == SS_OK && i < n; i++) size[s->labels[i]]++;
  j->K = 0;
  for (int64_t c = 0; st == SS_OK && c < k; c++) {
    j->unit_of[c] = c > 0 && size[c] >= s->o->params.templates.min_spikes ? j->K : -1;
    if (j->unit_of[c] >= 0) j->cluster_of[j->K++] = (int32_t)c;
  }
  /* spike q of a unit of m spikes is picked when it is the floor(r·m/p)-th for some r < p */
  for (int64_t i = 0; st == SS_OK && i < n; i++) {
    const int32_t c = s->labels[i];
    if (j->unit_of[c] < 0) continue;
    const int64_t m = size[c], p = m < max_per ? m : max_per, q = seen[c]++;
    /* q is picked when some r has floor(r·m/p) == q: r = ceil(q·p/m), check it */
    const int64_t r = (q * p + m - 1) / m;
    j->pick[i] = r < p && (r * m) / p == q;
  }
  free(size);
  free(seen);
  return st;
}

/* Spikes of the table whose time lies in [t0, t1): their index range. */
static void spike_range(const ss_spikes *sp, int64_t t0, int64_t t1, int64_t *i0, int64_t *i1) {
  int64_t lo = 0, hi = sp->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (sp->time_samples[mid] < t0) lo = mid + 1;
    else hi = mid;
  }
  *i0 = lo;
  hi = sp->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (sp->time_samples[mid] < t1) lo = mid + 1;
    else hi = mid;
  }
  *i1 = lo;
}

static ss_status cut_chunk(ss_ctx *ctx, void *user, int slot, ss_fe_view *v) {
  match_job *j = user;
  match_slot *sl = &j->slots[slot];
  const int C = j->C, W = j->W;
  int64_t i0, i1;
  spike_range(&j->s->spikes, v->row0_sample + v->own_begin, v->row0_sample + v->own_end, &i0, &i1);
  sl->m = 0;
  for (int64_t i = i0; i < i1; i++) {
    if (!j->pick[i]) continue;
    const int64_t r0 = j->s->spikes.time_samples[i] - v->row0_sample - j->n_before;
    if (r0 < 0 || r0 + W > v->n_rows) continue; /* the pass's margins make this rare: the chunk ends */
    SS_TRY(grow(ctx, (void **)&sl->buf, &sl->cap_buf, (size_t)(sl->m + 1) * W * C, sizeof(float), "template cuts"));
    SS_TRY(grow(ctx, (void **)&sl->unit, &sl->cap_n, (size_t)sl->m + 1, sizeof(int32_t), "template cuts"));
    memcpy(sl->buf + (size_t)sl->m * W * C, v->x + r0 * C, (size_t)W * C * sizeof(float));
    sl->unit[sl->m++] = j->unit_of[j->s->labels[i]];
  }
  return SS_OK;
}

/* Summed in chunk order, so the templates do not depend on the thread count. */
static ss_status cut_collect(ss_ctx *ctx, void *user, int slot, const ss_fe_view *v) {
  (void)ctx;
  (void)v;
  match_job *j = user;
  match_slot *sl = &j->slots[slot];
  const size_t WC = (size_t)j->W * j->C;
  for (int64_t q = 0; q < sl->m; q++) {
    double *acc = j->sum + (size_t)sl->unit[q] * WC;
    const float *x = sl->buf + (size_t)q * WC;
    for (size_t e = 0; e < WC; e++) acc[e] += x[e];
    j->count[sl->unit[q]]++;
  }
  return SS_OK;
}

static ss_status build_templates(ss_ctx *ctx, const ss_backend *be, ss_source *src, match_job *j, float **tmpl) {
  const ss_sort_state *s = j->s;
  const size_t WC = (size_t)j->W * j->C;
  SS_TRY(SS_CALLOC(ctx, j->sum, (size_t)j->K * WC + 1, "template sums"));
  SS_TRY(SS_CALLOC(ctx, j->count, (size_t)j->K + 1, "template counts"));
  const ss_fe_pass pass = {.name = "templates",
                           .reach = 3 * j->W,
                           .chunk = cut_chunk,
                           .collect = cut_collect,
                           .user = j};
  SS_TRY(ss_frontend_pass(ctx, be, &s->o->params, src, s->probe, &s->fe, &pass));
  SS_TRY(SS_ALLOC(ctx, *tmpl, (size_t)j->K * WC + 1, "templates"));
  for (int u = 0; u < j->K; u++)
    for (size_t e = 0; e < WC; e++)
      (*tmpl)[u * WC + e] = j->count[u] ? (float)(j->sum[u * WC + e] / (double)j->count[u]) : 0.0f;
  return SS_OK;
}

/* --- the matching pass ------------------------------------------------------------------------- */

/* Waveform of matched spike q over the detection window, channel-major: residual + a·T_u. */
static void clean_wave(const match_job *j, const ss_fe_view *v, int64_t t, int u, float a, float *wave) {
  const ss_detect_config *cfg = &j->s->fe.detect;
  const int C = j->C, nw = cfg->n_before + cfg->n_after;
  const float *tu = j->bank.tmpl_uv + (size_t)u * j->W * C;
  for (int c = 0; c < C; c++)
    for (int k = 0; k < nw; k++) {
      const int64_t r = t - cfg->n_before + k, w = k - cfg->n_before + j->n_before;
      float x = r >= 0 && r < v->n_rows ? v->x[r * C + c] : 0.0f;
      if (w >= 0 && w < j->W) x += a * tu[w * C + c];
      wave[(size_t)c * nw + k] = x;
    }
}

/* The detection stage's mask rule on a clean waveform (1 on the unit's peak channel). */
static void wave_masks(const match_job *j, const float *wave, int peak, float *mask) {
  const ss_thresholds *th = &j->s->fe.thresholds;
  const int nw = j->s->fe.detect.n_before + j->s->fe.detect.n_after;
  for (int c = 0; c < j->C; c++) {
    float m = -INFINITY;
    for (int k = 0; k < nw; k++) m = fmaxf(m, ss_detect_signal(th->polarity, wave[(size_t)c * nw + k]));
    const float span = th->strong[c] - th->weak[c];
    float q = isfinite(th->weak[c]) && span > 0 ? (m - th->weak[c]) / span : 0.0f;
    mask[c] = q < 0 ? 0.0f : (q > 1 ? 1.0f : q);
  }
  mask[peak] = 1.0f;
}

/* What a matched spike leaves: the residual's energy over the unit's template window and footprint,
 * per sample, in noise variances (1 for a spike its template explains down to the noise). */
static float fit_residual(const ss_match_bank *b, const ss_fe_view *v, int64_t t, int u) {
  const int64_t r0 = t - b->n_before;
  double e = 0;
  int64_t m = 0;
  for (int w = 0; w < b->W; w++) {
    if (r0 + w < 0 || r0 + w >= v->n_rows) continue;
    for (int32_t q = b->fp_start[u]; q < b->fp_start[u + 1]; q++) {
      const int c = b->fp[q];
      const double x = v->x[(r0 + w) * b->C + c] * b->scale[c];
      e += x * x;
      m++;
    }
  }
  return m ? (float)(e / (double)m) : 0.0f;
}

static ss_status match_chunk(ss_ctx *ctx, void *user, int slot, ss_fe_view *v) {
  match_job *j = user;
  match_slot *sl = &j->slots[slot];
  const int C = j->C, W = j->W, P = j->s->fe.pca.n_pcs;
  const int nw = j->s->fe.detect.n_before + j->s->fe.detect.n_after;
  ss_match_chunk ch = {.x = v->x,
                       .n_rows = v->n_rows,
                       .search_begin = v->own_begin - W > v->valid_begin ? v->own_begin - W : v->valid_begin,
                       .search_end = v->own_end + W < v->valid_end ? v->own_end + W : v->valid_end,
                       .own_begin = v->own_begin,
                       .own_end = v->own_end};
  ss_match_list_clear(&sl->list);
  if (j->n_gpu) {
    gpu_handle *g = &j->gpu[slot % j->n_gpu];
    pthread_mutex_lock(&g->lock);
    const ss_status st = ss_match_chunk_cuda(ctx, g->h, &ch, &sl->list);
    pthread_mutex_unlock(&g->lock);
    SS_TRY(st);
  } else {
    SS_TRY(ss_match_chunk_cpu(ctx, &j->bank, &ch, &sl->work, &sl->list));
  }
  const int64_t m = sl->list.n;
  const size_t mm = (size_t)(m > 0 ? m : 1);
  SS_TRY(grow(ctx, (void **)&sl->buf, &sl->cap_buf, mm * C * nw, sizeof(float), "matched waveforms"));
  SS_TRY(grow(ctx, (void **)&sl->feat, &sl->cap_feat, mm * C * P, sizeof(float), "matched features"));
  SS_TRY(grow(ctx, (void **)&sl->mask, &sl->cap_mask, mm * C, sizeof(float), "matched masks"));
  SS_TRY(grow(ctx, (void **)&sl->ampl, &sl->cap_ampl, mm, sizeof(float), "matched amplitudes"));
  SS_TRY(grow(ctx, (void **)&sl->resid, &sl->cap_resid, mm, sizeof(float), "matched residuals"));
  for (int64_t q = 0; q < m; q++) {
    const int u = sl->list.unit[q];
    float *wave = sl->buf + (size_t)q * C * nw;
    clean_wave(j, v, sl->list.row[q], u, sl->list.amp[q], wave);
    wave_masks(j, wave, j->bank.peak_chan[u], sl->mask + (size_t)q * C);
    sl->ampl[q] = wave[(size_t)j->bank.peak_chan[u] * nw + j->s->fe.detect.n_before];
    sl->resid[q] = fit_residual(&j->bank, v, sl->list.row[q], u);
  }
  sl->m = m;
  return ss_pca_project_cpu(ctx, &j->s->fe.pca, sl->buf, m, sl->feat);
}

static ss_status out_reserve(ss_ctx *ctx, match_job *j, int64_t n) {
  if (n <= j->cap_out) return SS_OK;
  int64_t cap = j->cap_out ? j->cap_out : 1024;
  while (cap < n) cap *= 2;
  const size_t F = (size_t)j->C * j->s->fe.pca.n_pcs, c = (size_t)cap;
  ss_spikes *o = &j->out;
  size_t k0 = 0, k1 = 0, k2 = 0, k3 = 0, k4 = 0, k5 = 0, k6 = 0;
  SS_TRY(grow(ctx, (void **)&o->time_samples, &k0, c, sizeof(int64_t), "matched spikes"));
  SS_TRY(grow(ctx, (void **)&o->time_fraction, &k1, c, sizeof(float), "matched spikes"));
  SS_TRY(grow(ctx, (void **)&o->peak_channel, &k2, c, sizeof(int32_t), "matched spikes"));
  SS_TRY(grow(ctx, (void **)&o->amplitude, &k3, c, sizeof(float), "matched spikes"));
  SS_TRY(grow(ctx, (void **)&o->features, &k4, c * F, sizeof(float), "matched features"));
  SS_TRY(grow(ctx, (void **)&o->masks, &k5, c * j->C, sizeof(float), "matched masks"));
  SS_TRY(grow(ctx, (void **)&j->labels, &k6, c, sizeof(int32_t), "matched labels"));
  size_t k7 = 0;
  SS_TRY(grow(ctx, (void **)&j->resid, &k7, c, sizeof(float), "matched residuals"));
  size_t k8 = 0;
  SS_TRY(grow(ctx, (void **)&j->scale, &k8, c, sizeof(float), "matched scales"));
  j->cap_out = cap;
  return SS_OK;
}

static ss_status match_collect(ss_ctx *ctx, void *user, int slot, const ss_fe_view *v) {
  match_job *j = user;
  match_slot *sl = &j->slots[slot];
  const size_t F = (size_t)j->C * j->s->fe.pca.n_pcs;
  SS_TRY(out_reserve(ctx, j, j->out.n + sl->m));
  ss_spikes *o = &j->out;
  for (int64_t q = 0; q < sl->m; q++) {
    const int64_t i = o->n++;
    const int u = sl->list.unit[q];
    o->time_samples[i] = v->row0_sample + sl->list.row[q];
    o->time_fraction[i] = 0.0f;
    o->peak_channel[i] = j->bank.peak_chan[u];
    o->amplitude[i] = sl->ampl[q];
    memcpy(o->features + i * F, sl->feat + q * F, F * sizeof(float));
    memcpy(o->masks + i * j->C, sl->mask + q * j->C, (size_t)j->C * sizeof(float));
    j->labels[i] = u + 1;
    j->resid[i] = sl->resid[q];
    j->scale[i] = sl->list.amp[q];
  }
  return SS_OK;
}

typedef struct {
  int64_t t, i;
} timed_spike;

static int timed_cmp(const void *a, const void *b) {
  const timed_spike *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

/* Keep the matched spikes whose flag in drop[] is 0, in order. */
static void keep_unflagged(match_job *j, const uint8_t *drop) {
  ss_spikes *o = &j->out;
  const size_t F = (size_t)j->C * j->s->fe.pca.n_pcs, C = (size_t)j->C;
  int64_t m = 0;
  for (int64_t i = 0; i < o->n; i++) {
    if (drop[i]) continue;
    o->time_samples[m] = o->time_samples[i];
    o->time_fraction[m] = o->time_fraction[i];
    o->peak_channel[m] = o->peak_channel[i];
    o->amplitude[m] = o->amplitude[i];
    memmove(o->features + m * F, o->features + i * F, F * sizeof(float));
    memmove(o->masks + m * C, o->masks + i * C, C * sizeof(float));
    j->labels[m] = j->labels[i];
    j->resid[m] = j->resid[i];
    j->scale[m] = j->scale[i];
    m++;
  }
  o->n = m;
}

static int casts_shadow(const int32_t *unit, const float *amplitude, int64_t i, int64_t q) {
  return unit[q] != unit[i] && fabsf(amplitude[q]) > fabsf(amplitude[i]);
}

ss_status ss_sort_shadows(ss_ctx *ctx, const int64_t *time, const int32_t *unit, const float *amplitude,
                          const float *scale, int64_t n, int64_t window, double min_scale, uint8_t *drop,
                          int64_t *n_dropped) {
  *n_dropped = 0;
  memset(drop, 0, (size_t)n);
  if (n <= 0 || window <= 0) return SS_OK;
  timed_spike *ord = NULL;
  SS_TRY(SS_ALLOC(ctx, ord, (size_t)n, "shadow check"));
  for (int64_t i = 0; i < n; i++) ord[i] = (timed_spike){time[i], i};
  qsort(ord, (size_t)n, sizeof(*ord), timed_cmp);
  for (int64_t r = 0; r < n; r++) {
    const int64_t i = ord[r].i;
    if (scale[i] >= min_scale) continue;
    for (int64_t q = r - 1; q >= 0 && ord[r].t - ord[q].t <= window && !drop[i]; q--)
      drop[i] = (uint8_t)casts_shadow(unit, amplitude, i, ord[q].i);
    for (int64_t q = r + 1; q < n && ord[q].t - ord[r].t <= window && !drop[i]; q++)
      drop[i] = (uint8_t)casts_shadow(unit, amplitude, i, ord[q].i);
    *n_dropped += drop[i];
  }
  free(ord);
  return SS_OK;
}

/* Drop the shadows (ss_sort_shadows): a large spike's fit leaves part of it behind (timing and shape
 * jitter), and a smaller unit of similar shape on the same channels matches that rest at a low scale.
 * On simulate's seed 2, the spikes within 10 samples of another unit's spike and fitted below 0.6 of
 * their unit's median amplitude were 9 in 10 false. */
static ss_status drop_shadows(ss_ctx *ctx, match_job *j, int64_t *n_dropped) {
  const ss_params *p = &j->s->o->params;
  const int64_t n = j->out.n, w = llround(p->match.shadow_ms * j->s->spikes.rate_hz / 1000.0);
  uint8_t *drop = NULL;
  *n_dropped = 0;
  if (n == 0 || w <= 0) return SS_OK;
  SS_TRY(SS_ALLOC(ctx, drop, (size_t)n, "shadow check"));
  const ss_status st = ss_sort_shadows(ctx, j->out.time_samples, j->labels, j->out.amplitude, j->scale, n, w,
                                       p->match.shadow_scale, drop, n_dropped);
  if (st == SS_OK) keep_unflagged(j, drop);
  free(drop);
  return st;
}

/* The raw (masked-EM) label of each matched spike: that of the nearest detected spike, 0 when none is
 * within the template's window. */
static ss_status raw_labels(ss_ctx *ctx, const match_job *j, int32_t **out) {
  const ss_spikes *d = &j->s->spikes, *m = &j->out;
  SS_TRY(SS_ALLOC(ctx, *out, (size_t)m->n + 1, "raw labels"));
  int64_t k = 0;
  for (int64_t i = 0; i < m->n; i++) {
    const int64_t t = m->time_samples[i];
    while (k + 1 < d->n && d->time_samples[k + 1] <= t) k++;
    int64_t best = -1, dist = j->W;
    for (int64_t q = k; q <= k + 1 && q < d->n; q++) {
      const int64_t e = llabs(d->time_samples[q] - t);
      if (e < dist) dist = e, best = q;
    }
    (*out)[i] = best >= 0 ? j->s->labels_raw[best] : 0;
  }
  return SS_OK;
}

/* With a CUDA backend: the handles the pass's threads share. */
static ss_status open_gpu(ss_ctx *ctx, const ss_backend *be, match_job *j) {
  if (be->kind != SS_DEVICE_CUDA) return SS_OK;
  const int n = j->n_slots < MATCH_GPU_HANDLES ? j->n_slots : MATCH_GPU_HANDLES;
  SS_TRY(SS_CALLOC(ctx, j->gpu, (size_t)n, "match GPU handles"));
  for (; j->n_gpu < n; j->n_gpu++) {
    gpu_handle *g = &j->gpu[j->n_gpu];
    SS_TRY(ss_match_cuda_open(ctx, be, &j->bank, &g->h));
    pthread_mutex_init(&g->lock, NULL);
  }
  return SS_OK;
}

static void job_free(match_job *j) {
  for (int q = 0; q < j->n_gpu; q++) {
    ss_match_cuda_close(j->gpu[q].h);
    pthread_mutex_destroy(&j->gpu[q].lock);
  }
  free(j->gpu);
  for (int q = 0; j->slots && q < j->n_slots; q++) {
    match_slot *sl = &j->slots[q];
    free(sl->buf);
    free(sl->unit);
    free(sl->feat);
    free(sl->mask);
    free(sl->ampl);
    free(sl->resid);
    ss_match_work_free(&sl->work);
    ss_match_list_free(&sl->list);
  }
  free(j->slots);
  free(j->unit_of);
  free(j->cluster_of);
  free(j->pick);
  free(j->sum);
  free(j->count);
  ss_match_bank_free(&j->bank);
  ss_spikes_free(&j->out);
  free(j->labels);
  free(j->resid);
  free(j->scale);
}

/* Swap the matched table in: the spikes, labels 1..K (0, noise, is empty), the raw labels. */
static ss_status adopt(ss_ctx *ctx, match_job *j, ss_sort_state *s) {
  int32_t *raw = NULL;
  SS_TRY(raw_labels(ctx, j, &raw));
  j->out.n_channels = s->spikes.n_channels;
  j->out.n_pcs = s->spikes.n_pcs;
  j->out.rate_hz = s->spikes.rate_hz;
  ss_spikes_free(&s->spikes);
  s->spikes = j->out;
  memset(&j->out, 0, sizeof(j->out));
  free(s->labels);
  s->labels = j->labels;
  j->labels = NULL;
  free(s->labels_raw);
  s->labels_raw = raw;
  s->k = j->K + 1;
  return SS_OK;
}

/* may_split[c] for the matched units (labels 1..K): the median fit residual of the unit's spikes is
 * above match.split_residual, so its template does not explain them (two units, or a catch-all). */
static ss_status poor_fits(ss_ctx *ctx, const match_job *j, const ss_sort_state *s, uint8_t **may_split) {
  const int64_t n = s->spikes.n, k = s->k;
  int64_t *start = NULL, *fill = NULL;
  double *v = NULL;
  ss_status st = SS_CALLOC(ctx, start, (size_t)k + 1, "fit residuals");
  if (st == SS_OK) st = SS_ALLOC(ctx, fill, (size_t)k + 1, "fit residuals");
  if (st == SS_OK) st = SS_ALLOC(ctx, v, (size_t)n + 1, "fit residuals");
  if (st == SS_OK) st = SS_CALLOC(ctx, *may_split, (size_t)k + 1, "units to split");
  if (st == SS_OK) {
    for (int64_t i = 0; i < n; i++) start[s->labels[i] + 1]++;
    for (int64_t c = 0; c < k; c++) start[c + 1] += start[c];
    memcpy(fill, start, (size_t)k * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) v[fill[s->labels[i]]++] = j->resid[i];
    int64_t n_poor = 0;
    for (int64_t c = 1; c < k; c++) {
      const int64_t m = start[c + 1] - start[c];
      const double med = m ? ss_order_median(v + start[c], m) : 0;
      (*may_split)[c] = med > s->o->params.match.split_residual;
      n_poor += (*may_split)[c];
      ss_log_debug(ctx, "match: unit %" PRId64 ": %" PRId64 " spikes, median fit residual %.3f", c, m, med);
    }
    ss_log_info(ctx, "sort: match: %" PRId64 " of %" PRId64 " units fit their spikes worse than %g noise variances",
                n_poor, k - 1, s->o->params.match.split_residual);
  }
  free(start);
  free(fill);
  free(v);
  return st;
}

/* The units' templates for the writers (phy's templates.npy): [k × W × C] µV, cluster 0 all zero. */
static ss_status keep_templates(ss_ctx *ctx, const match_job *j, const float *tmpl, ss_sort_state *s) {
  const size_t WC = (size_t)j->W * j->C;
  float *t = NULL;
  SS_TRY(SS_CALLOC(ctx, t, (size_t)(j->K + 1) * WC, "unit templates"));
  memcpy(t + WC, tmpl, (size_t)j->K * WC * sizeof(float));
  free(s->unit_tmpl);
  s->unit_tmpl = t;
  s->unit_tmpl_w = j->W;
  return SS_OK;
}

/* One round: templates of the current labels' units, matching, the matched table adopted; the units
 * whose template fits poorly flagged in *may_split. */
static ss_status match_once(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s, int *done,
                            uint8_t **may_split) {
  const ss_params *p = &s->o->params;
  const double t0 = ss_now();
  match_job j = {.s = s, .C = s->spikes.n_channels};
  j.n_before = (int)llround(p->match.before_ms * s->spikes.rate_hz / 1000.0);
  j.W = j.n_before + (int)llround(p->match.after_ms * s->spikes.rate_hz / 1000.0);
  j.n_slots = ss_frontend_pass_slots(be);
  float *tmpl = NULL;
  const int64_t n_before = s->spikes.n;
  ss_status st = SS_CALLOC(ctx, j.slots, (size_t)j.n_slots, "match slots");
  if (st == SS_OK) st = choose_units(ctx, &j);
  if (st == SS_OK && j.K == 0) {
    ss_log_warn(ctx, "match: no cluster holds %" PRId64 " spikes (templates.min_spikes): matching skipped",
                p->templates.min_spikes);
    job_free(&j);
    *done = 1;
    return SS_OK;
  }
  if (st == SS_OK) st = build_templates(ctx, be, src, &j, &tmpl);
  if (st == SS_OK)
    st = ss_match_bank_build(ctx, p, s->spikes.rate_hz, tmpl, j.K, j.W, j.C, j.n_before, s->fe.thresholds.sigma,
                             &j.bank);
  if (st == SS_OK) st = open_gpu(ctx, be, &j);
  const double t1 = ss_now();
  if (st == SS_OK) {
    char where[96];
    if (j.n_gpu) snprintf(where, sizeof(where), "on the GPU (%d streams for %d CPU threads)", j.n_gpu, j.n_slots);
    else snprintf(where, sizeof(where), "on %d CPU threads", j.n_slots);
    ss_log_info(ctx, "sort: match: %d unit templates of %d samples (%.2f s; %d can never be matched), matching %s", j.K,
                j.W, t1 - t0, j.bank.n_unusable, where);
    const ss_fe_pass pass = {.name = "match",
                             .reach = 3 * j.W,
                             .chunk = match_chunk,
                             .collect = match_collect,
                             .user = &j};
    st = ss_frontend_pass(ctx, be, p, src, s->probe, &s->fe, &pass);
  }
  int64_t n_shadows = 0;
  if (st == SS_OK) st = drop_shadows(ctx, &j, &n_shadows);
  if (st == SS_OK && n_shadows > 0)
    ss_log_info(ctx, "sort: match: %" PRId64 " spikes dropped as shadows of larger spikes (match.shadow_ms)",
                n_shadows);
  if (st == SS_OK) st = adopt(ctx, &j, s);
  if (st == SS_OK) st = keep_templates(ctx, &j, tmpl, s);
  free(tmpl);
  if (st == SS_OK) st = poor_fits(ctx, &j, s, may_split);
  if (st == SS_OK)
    ss_log_info(ctx, "sort: match: %" PRId64 " spikes from %" PRId64 " before, %d units, %.2f s", s->spikes.n, n_before,
                j.K, ss_now() - t1);
  job_free(&j);
  return st;
}

/* The template pass's split (step 0, with its joins) again, on the matched spikes and only for the
 * units that fit poorly: their features come from clean waveforms (no collisions), so a unit that holds
 * two units fails its own template there and is bisected. No rounds of reassignment: the matched labels
 * of the other units stand (they are finer than a fit in feature space). Reports whether labels
 * changed. */
static ss_status refine(ss_ctx *ctx, ss_sort_state *s, const uint8_t *may_split, int *changed) {
  *changed = 0;
  int any = 0;
  for (int64_t c = 1; c < s->k; c++) any |= may_split[c];
  if (!any) return SS_OK;
  int32_t *keep = NULL;
  SS_TRY(SS_ALLOC(ctx, keep, (size_t)s->spikes.n + 1, "matched labels"));
  memcpy(keep, s->labels, (size_t)s->spikes.n * sizeof(int32_t));
  const ss_templates_input in = {.n = s->spikes.n,
                                 .n_channels = s->spikes.n_channels,
                                 .n_pcs = s->spikes.n_pcs,
                                 .features = s->spikes.features,
                                 .masks = s->spikes.masks,
                                 .peak_channel = s->spikes.peak_channel,
                                 .k = s->k,
                                 .n_threads = s->sum->n_threads,
                                 .may_split = may_split,
                                 .split_only = 1};
  ss_templates_result r;
  ss_status st = ss_templates_assign(ctx, &s->o->params, &in, s->labels, &r);
  if (st != SS_OK) {
    free(keep);
    return st;
  }
  ss_log_info(ctx,
              "sort: match: template pass on the matched spikes: %" PRId64 " units bisected (%" PRId64
              " parts joined a unit), %" PRId64 " -> %" PRId64 " clusters, %" PRId64 " spikes moved",
              r.n_split, r.n_joined, r.k_in, r.k_out, r.n_moved);
  *changed = r.n_moved > 0;
  if (*changed) s->k = r.k_out;
  else memcpy(s->labels, keep, (size_t)s->spikes.n * sizeof(int32_t));
  free(keep);
  return SS_OK;
}

/* Matching, then up to match.refine rounds of: the split of poorly fitting units, templates again from
 * the matched spikes' times, matching again. The first round always rematches: templates cut at the
 * detections' rounded times are blurred by their ±1 sample of timing noise, and the blur's residual of
 * a large unit is what a small unit's template then matches; cut at the matched times they are sharp. */
ss_status ss_sort_match(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s) {
  const ss_params *p = &s->o->params;
  if (!s->o->merge || p->match.max_rounds == 0) return SS_OK;
  int done = 0;
  uint8_t *may_split = NULL;
  ss_status st = match_once(ctx, be, src, s, &done, &may_split);
  for (int64_t r = 0; st == SS_OK && !done && r < p->match.refine; r++) {
    int changed = 0;
    st = refine(ctx, s, may_split, &changed);
    free(may_split);
    may_split = NULL;
    if (st != SS_OK || (!changed && r > 0)) break;
    st = match_once(ctx, be, src, s, &done, &may_split);
  }
  free(may_split);
  return st;
}
