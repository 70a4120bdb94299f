/* match.c — the template bank and the CPU reference of template matching (match.h): scores by direct
 * correlation over each unit's footprint, rounds of non-overlapping acceptances, score updates through
 * the templates' cross-correlations. */
#include "stages/match/match.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Times per tile of the score loop. */
#define SS_MATCH_TILE 512

void ss_match_bank_free(ss_match_bank *b) {
  free(b->scale);
  free(b->tmpl);
  free(b->tmpl_uv);
  free(b->fp_start);
  free(b->fp);
  free(b->tmpl_fp);
  free(b->norm);
  free(b->nb_start);
  free(b->nb);
  free(b->cross);
  free(b->peak_chan);
  memset(b, 0, sizeof(*b));
}

void ss_match_list_clear(ss_match_list *l) { l->n = 0; }

void ss_match_list_free(ss_match_list *l) {
  free(l->row);
  free(l->unit);
  free(l->amp);
  free(l->gain);
  memset(l, 0, sizeof(*l));
}

void ss_match_work_free(ss_match_work *w) {
  free(w->xs);
  free(w->b);
  free(w->g);
  free(w->gather);
  free(w->dead);
  ss_match_list_free(&w->round);
  memset(w, 0, sizeof(*w));
}

/* --- the bank ---------------------------------------------------------------------------------- */

/* Footprints: the channels where the scaled template reaches `level`; CSR in b->fp_start / b->fp. */
static ss_status bank_footprints(ss_ctx *ctx, ss_match_bank *b, double level) {
  const int K = b->K, W = b->W, C = b->C;
  SS_TRY(SS_ALLOC(ctx, b->fp_start, (size_t)K + 1, "match footprints"));
  SS_TRY(SS_ALLOC(ctx, b->fp, (size_t)K * C + 1, "match footprints"));
  SS_TRY(SS_ALLOC(ctx, b->peak_chan, (size_t)K, "match peak channels"));
  int32_t n = 0;
  for (int u = 0; u < K; u++) {
    const float *t = b->tmpl + (size_t)u * W * C;
    b->fp_start[u] = n;
    float best = -1;
    b->peak_chan[u] = 0;
    for (int c = 0; c < C; c++) {
      float m = 0;
      for (int w = 0; w < W; w++) m = fmaxf(m, fabsf(t[w * C + c]));
      if (m > best) {
        best = m;
        b->peak_chan[u] = c;
      }
      if (b->scale[c] > 0 && m >= level) b->fp[n++] = c;
    }
  }
  b->fp_start[K] = n;
  return SS_OK;
}

/* Zero the templates off their footprints, the compact copies, the norms. */
static ss_status bank_compact(ss_ctx *ctx, ss_match_bank *b) {
  const int K = b->K, W = b->W, C = b->C;
  SS_TRY(SS_ALLOC(ctx, b->tmpl_fp, (size_t)b->fp_start[K] * W + 1, "match templates"));
  SS_TRY(SS_ALLOC(ctx, b->norm, (size_t)K, "match template norms"));
  uint8_t *on = NULL;
  SS_TRY(SS_ALLOC(ctx, on, (size_t)C, "match footprint"));
  for (int u = 0; u < K; u++) {
    const int32_t f0 = b->fp_start[u], nf = b->fp_start[u + 1] - f0;
    float *t = b->tmpl + (size_t)u * W * C, *tu = b->tmpl_uv + (size_t)u * W * C, *tc = b->tmpl_fp + (size_t)f0 * W;
    memset(on, 0, (size_t)C);
    for (int j = 0; j < nf; j++) on[b->fp[f0 + j]] = 1;
    double n2 = 0;
    for (int w = 0; w < W; w++)
      for (int c = 0; c < C; c++)
        if (!on[c]) t[w * C + c] = tu[w * C + c] = 0;
        else n2 += (double)t[w * C + c] * t[w * C + c];
    for (int w = 0; w < W; w++)
      for (int j = 0; j < nf; j++) tc[w * nf + j] = t[w * C + b->fp[f0 + j]];
    b->norm[u] = (float)n2;
    if (nf == 0 || n2 < b->min_gain) b->n_unusable++;
  }
  free(on);
  return SS_OK;
}

static int footprints_share(const ss_match_bank *b, int u, int v) {
  int i = b->fp_start[u], j = b->fp_start[v];
  while (i < b->fp_start[u + 1] && j < b->fp_start[v + 1]) {
    if (b->fp[i] == b->fp[j]) return 1;
    if (b->fp[i] < b->fp[j]) i++;
    else j++;
  }
  return 0;
}

/* Neighbours (footprints sharing a channel) and the cross-correlations K_vu(d) of neighbours. */
static ss_status bank_neighbours(ss_ctx *ctx, ss_match_bank *b) {
  const int K = b->K, W = b->W, C = b->C, D = 2 * W - 1;
  SS_TRY(SS_ALLOC(ctx, b->nb_start, (size_t)K + 1, "match neighbours"));
  SS_TRY(SS_ALLOC(ctx, b->nb, (size_t)K * K + 1, "match neighbours"));
  SS_TRY(SS_CALLOC(ctx, b->cross, (size_t)K * K * D, "match cross-correlations"));
  int32_t n = 0;
  for (int v = 0; v < K; v++) {
    b->nb_start[v] = n;
    for (int u = 0; u < K; u++)
      if (footprints_share(b, u, v)) b->nb[n++] = u;
  }
  b->nb_start[K] = n;
#pragma omp parallel for schedule(dynamic, 1)
  for (int v = 0; v < K; v++) {
    const float *tv = b->tmpl + (size_t)v * W * C;
    for (int32_t q = b->nb_start[v]; q < b->nb_start[v + 1]; q++) {
      const int u = b->nb[q];
      const float *tu = b->tmpl + (size_t)u * W * C;
      float *out = b->cross + ((size_t)v * K + u) * D;
      for (int d = -(W - 1); d <= W - 1; d++) {
        double s = 0;
        for (int w = d < 0 ? -d : 0; w < W && w + d < W; w++)
          for (int32_t j = b->fp_start[v]; j < b->fp_start[v + 1]; j++) {
            const int c = b->fp[j];
            s += (double)tv[w * C + c] * tu[(w + d) * C + c];
          }
        out[d + W - 1] = (float)s;
      }
    }
  }
  return SS_OK;
}

ss_status ss_match_bank_build(ss_ctx *ctx, const ss_params *p, double rate_hz, const float *templates_uv, int K, int W,
                              int C, int n_before, const float *sigma, ss_match_bank *out) {
  memset(out, 0, sizeof(*out));
  if (K < 0 || W < 1 || C < 1 || n_before < 0 || n_before >= W)
    return ss_fail(ctx, SS_ERR_USAGE, "match: bad bank shape (K %d, W %d, C %d, n_before %d)", K, W, C, n_before);
  ss_match_bank *b = out;
  b->K = K;
  b->W = W;
  b->C = C;
  b->n_before = n_before;
  b->amp_min = p->match.amp_min;
  b->amp_max = p->match.amp_max;
  b->min_gain = p->match.min_gain;
  b->dead = (int)llround(p->match.dead_ms * rate_hz / 1000.0);
  b->max_rounds = (int)p->match.max_rounds;
  const size_t tsz = (size_t)K * W * C + 1;
  ss_status st = SS_ALLOC(ctx, b->scale, (size_t)C, "match channel scales");
  if (st == SS_OK) st = SS_ALLOC(ctx, b->tmpl, tsz, "match templates");
  if (st == SS_OK) st = SS_ALLOC(ctx, b->tmpl_uv, tsz, "match templates");
  if (st == SS_OK) {
    for (int c = 0; c < C; c++) b->scale[c] = sigma[c] > 0 && isfinite(sigma[c]) ? 1.0f / sigma[c] : 0.0f;
    memcpy(b->tmpl_uv, templates_uv, (tsz - 1) * sizeof(float));
    for (size_t i = 0; i + 1 < tsz; i++) b->tmpl[i] = templates_uv[i] * b->scale[i % C];
    st = bank_footprints(ctx, b, p->match.footprint_sigma);
  }
  if (st == SS_OK) st = bank_compact(ctx, b);
  if (st == SS_OK) st = bank_neighbours(ctx, b);
  if (st != SS_OK) ss_match_bank_free(b);
  return st;
}

/* --- matching one chunk ------------------------------------------------------------------------ */

ss_status ss_match_list_reserve(ss_ctx *ctx, ss_match_list *l, int64_t n) {
  if (n <= l->cap) return SS_OK;
  size_t cap = l->cap ? 2 * (size_t)l->cap : 256;
  while (cap < (size_t)n) cap *= 2;
  SS_TRY(SS_REALLOC(ctx, l->row, cap, "matched spikes"));
  SS_TRY(SS_REALLOC(ctx, l->unit, cap, "matched spikes"));
  SS_TRY(SS_REALLOC(ctx, l->amp, cap, "matched spikes"));
  SS_TRY(SS_REALLOC(ctx, l->gain, cap, "matched spikes"));
  l->cap = (int64_t)cap;
  return SS_OK;
}

static ss_status list_push(ss_ctx *ctx, ss_match_list *l, int64_t row, int32_t unit, float amp, float gain) {
  SS_TRY(ss_match_list_reserve(ctx, l, l->n + 1));
  l->row[l->n] = row;
  l->unit[l->n] = unit;
  l->amp[l->n] = amp;
  l->gain[l->n] = gain;
  l->n++;
  return SS_OK;
}

static ss_status work_reserve(ss_ctx *ctx, ss_match_work *w, const ss_match_bank *b, int64_t rows) {
  const size_t need = (size_t)rows * (size_t)b->K;
  if ((size_t)rows > w->cap_rows || b->K > w->cap_k) {
    free(w->xs);
    free(w->b);
    free(w->g);
    free(w->dead);
    w->xs = NULL;
    w->b = w->g = NULL;
    w->dead = NULL;
    w->cap_rows = w->cap_k = 0;
    SS_TRY(SS_ALLOC(ctx, w->xs, (size_t)rows * b->C + 1, "match scaled chunk"));
    SS_TRY(SS_ALLOC(ctx, w->b, need + 1, "match scores"));
    SS_TRY(SS_ALLOC(ctx, w->g, need + 1, "match gains"));
    SS_TRY(SS_ALLOC(ctx, w->dead, need + 1, "match dead times"));
    w->cap_rows = (size_t)rows;
    w->cap_k = b->K;
  }
  size_t gsz = (size_t)rows * (size_t)(b->C) + 1;
  if (gsz > w->cap_gather) {
    free(w->gather);
    w->gather = NULL;
    w->cap_gather = 0;
    SS_TRY(SS_ALLOC(ctx, w->gather, gsz, "match footprint rows"));
    w->cap_gather = gsz;
  }
  return SS_OK;
}

/* b_u(t) for t in [t0, t1) by direct correlation over the footprint: the footprint channels are
 * gathered channel-major, so each template sample adds a scaled contiguous run of one channel. */
static void unit_scores(const ss_match_bank *b, const float *xs, int64_t t0, int64_t t1, int u, float *gather,
                        float *bu) {
  const int C = b->C, W = b->W;
  const int32_t f0 = b->fp_start[u], nf = b->fp_start[u + 1] - f0;
  const int64_t r0 = t0 - b->n_before, len = t1 - t0 + W - 1, n = t1 - t0;
  for (int j = 0; j < nf; j++) {
    const int c = b->fp[f0 + j];
    float *g = gather + (size_t)j * len;
    for (int64_t r = 0; r < len; r++) g[r] = xs[(r0 + r) * C + c];
  }
  const float *tc = b->tmpl_fp + (size_t)f0 * W;
  /* tiles of SS_MATCH_TILE times stay in L1 while every (w, j) adds its run */
  for (int64_t t0t = 0; t0t < n; t0t += SS_MATCH_TILE) {
    const int64_t m = n - t0t < SS_MATCH_TILE ? n - t0t : SS_MATCH_TILE;
    float *restrict out = bu + t0 + t0t;
    memset(out, 0, (size_t)m * sizeof(float));
    for (int w = 0; w < W; w++)
      for (int j = 0; j < nf; j++) {
        const float k = tc[w * nf + j];
        const float *restrict g = gather + (size_t)j * len + w + t0t;
#pragma omp simd
        for (int64_t t = 0; t < m; t++) out[t] += k * g[t];
      }
  }
}

/* The fit of score s for unit u: gain, and the amplitude in *a. */
static inline float fit_gain(const ss_match_bank *b, int u, float s, float *a) {
  const float n = b->norm[u];
  float x = s / n;
  x = x < (float)b->amp_min ? (float)b->amp_min : (x > (float)b->amp_max ? (float)b->amp_max : x);
  *a = x;
  return 2.0f * x * s - x * x * n;
}

static int usable(const ss_match_bank *b, int u) {
  return b->fp_start[u + 1] > b->fp_start[u] && b->norm[u] >= b->min_gain;
}

/* Gains of every usable unit at every searchable time; -inf where the unit is within its dead time
 * of an accepted spike (w->dead). */
static void all_gains(const ss_match_bank *b, ss_match_work *w, int64_t rows, int64_t t0, int64_t t1) {
  for (int u = 0; u < b->K; u++) {
    float *g = w->g + (size_t)u * rows;
    const float *s = w->b + (size_t)u * rows;
    if (!usable(b, u)) {
      for (int64_t t = t0; t < t1; t++) g[t] = -INFINITY;
      continue;
    }
    const uint8_t *dead = w->dead + (size_t)u * rows;
    for (int64_t t = t0; t < t1; t++) {
      float a;
      g[t] = dead[t] ? -INFINITY : fit_gain(b, u, s[t], &a);
    }
  }
}

/* (u, t) wins when no neighbour v at |t' − t| < W has a larger gain (ties: smaller t, then smaller u). */
static int wins(const ss_match_bank *b, const ss_match_work *w, int64_t rows, int64_t t0, int64_t t1, int u,
                int64_t t) {
  const float gu = w->g[(size_t)u * rows + t];
  const int64_t lo = t - b->W + 1 > t0 ? t - b->W + 1 : t0, hi = t + b->W < t1 ? t + b->W : t1;
  for (int32_t q = b->nb_start[u]; q < b->nb_start[u + 1]; q++) {
    const int v = b->nb[q];
    const float *gv = w->g + (size_t)v * rows;
    for (int64_t s = lo; s < hi; s++) {
      if (gv[s] < gu) continue;
      if (gv[s] > gu || s < t || (s == t && v < u)) return 0;
    }
  }
  return 1;
}

/* Subtract an accepted spike: from the scores of its neighbours, and from the chunk. */
static void subtract(const ss_match_bank *b, ss_match_work *w, float *x, int64_t rows, int64_t t0, int64_t t1, int u,
                     int64_t t, float a) {
  const int W = b->W, C = b->C, D = 2 * W - 1;
  for (int32_t q = b->nb_start[u]; q < b->nb_start[u + 1]; q++) {
    const int v = b->nb[q];
    const float *k = b->cross + ((size_t)v * b->K + u) * D;
    float *bv = w->b + (size_t)v * rows;
    for (int d = -(W - 1); d <= W - 1; d++) {
      const int64_t s = t + d; /* b_v(s) sees T_u shifted by d = s − t */
      if (s >= t0 && s < t1) bv[s] -= a * k[d + W - 1];
    }
  }
  const float *tu = b->tmpl_uv + (size_t)u * W * C;
  const int64_t r0 = t - b->n_before;
  for (int wi = 0; wi < W; wi++)
    for (int32_t j = b->fp_start[u]; j < b->fp_start[u + 1]; j++) {
      const int c = b->fp[j];
      x[(r0 + wi) * C + c] -= a * tu[wi * C + c];
    }
}

static int cmp_row_unit(const void *pa, const void *pb) {
  const int64_t *a = pa, *b = pb;
  if (a[0] != b[0]) return a[0] < b[0] ? -1 : 1;
  return (a[1] > b[1]) - (a[1] < b[1]);
}

/* Sort out's entries from `from` on by (row, unit). */
static ss_status sort_tail(ss_ctx *ctx, ss_match_list *out, int64_t from) {
  const int64_t n = out->n - from;
  if (n < 2) return SS_OK;
  int64_t *key = NULL;
  float *tmp = NULL;
  SS_TRY(SS_ALLOC(ctx, key, (size_t)n * 3, "matched spike order"));
  ss_status st = SS_ALLOC(ctx, tmp, (size_t)n * 2, "matched spike order");
  if (st == SS_OK) {
    for (int64_t i = 0; i < n; i++) {
      key[3 * i] = out->row[from + i];
      key[3 * i + 1] = out->unit[from + i];
      key[3 * i + 2] = i;
    }
    qsort(key, (size_t)n, 3 * sizeof(int64_t), cmp_row_unit);
    for (int64_t i = 0; i < n; i++) {
      tmp[2 * i] = out->amp[from + key[3 * i + 2]];
      tmp[2 * i + 1] = out->gain[from + key[3 * i + 2]];
    }
    for (int64_t i = 0; i < n; i++) {
      out->row[from + i] = key[3 * i];
      out->unit[from + i] = (int32_t)key[3 * i + 1];
      out->amp[from + i] = tmp[2 * i];
      out->gain[from + i] = tmp[2 * i + 1];
    }
  }
  free(key);
  free(tmp);
  return st;
}

/* Rounds of acceptance until none accepts: the accepted spikes of the owned rows go to out. */
static ss_status rounds(ss_ctx *ctx, const ss_match_bank *b, ss_match_chunk *ch, ss_match_work *w, int64_t t0,
                        int64_t t1, ss_match_list *out) {
  const int64_t rows = ch->n_rows;
  for (int r = 0; r < b->max_rounds; r++) {
    all_gains(b, w, rows, t0, t1);
    ss_match_list_clear(&w->round);
    for (int u = 0; u < b->K; u++) {
      const float *g = w->g + (size_t)u * rows;
      for (int64_t t = t0; t < t1; t++) {
        if (g[t] < b->min_gain) continue;
        /* the unit's own neighbours in time first: rejects all but local peaks cheaply */
        if ((t > t0 && g[t - 1] >= g[t]) || (t + 1 < t1 && g[t + 1] > g[t])) continue;
        if (wins(b, w, rows, t0, t1, u, t)) {
          float a;
          fit_gain(b, u, w->b[(size_t)u * rows + t], &a);
          SS_TRY(list_push(ctx, &w->round, t, u, a, g[t]));
        }
      }
    }
    if (w->round.n == 0) break;
    for (int64_t i = 0; i < w->round.n; i++) {
      const int u = w->round.unit[i];
      const int64_t t = w->round.row[i];
      subtract(b, w, ch->x, rows, t0, t1, u, t, w->round.amp[i]);
      uint8_t *dead = w->dead + (size_t)u * rows;
      for (int64_t s = t - b->dead; s <= t + b->dead; s++)
        if (s >= t0 && s < t1) dead[s] = 1;
      if (t >= ch->own_begin && t < ch->own_end) SS_TRY(list_push(ctx, out, t, u, w->round.amp[i], w->round.gain[i]));
    }
  }
  return SS_OK;
}

ss_status ss_match_chunk_cpu(ss_ctx *ctx, const ss_match_bank *b, ss_match_chunk *ch, ss_match_work *w,
                             ss_match_list *out) {
  const int C = b->C;
  const int64_t rows = ch->n_rows;
  int64_t t0 = ch->search_begin > b->n_before ? ch->search_begin : b->n_before;
  int64_t t1 = rows - (b->W - b->n_before) + 1;
  if (ch->search_end < t1) t1 = ch->search_end;
  if (b->K == 0 || t1 <= t0) return SS_OK;
  SS_TRY(work_reserve(ctx, w, b, rows));
  for (int64_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) w->xs[r * C + c] = ch->x[r * C + c] * b->scale[c];
  memset(w->dead, 0, (size_t)rows * b->K);
  for (int u = 0; u < b->K; u++) {
    if (usable(b, u)) unit_scores(b, w->xs, t0, t1, u, w->gather, w->b + (size_t)u * rows);
  }
  const int64_t from = out->n;
  SS_TRY(rounds(ctx, b, ch, w, t0, t1, out));
  return sort_tail(ctx, out, from);
}
