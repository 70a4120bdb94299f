/* live.c — the live engine (live.h): scale, causal filter, rolling buffer, exactly-once detection of
 * final components, features, assignment (nearest centroid or KNN vote), emission, and the counters
 * (samples, blocks, spikes, overruns, latency histogram). With a CUDA backend the bookkeeping stays
 * here and two stages switch to stages/live/live_cuda.h: append (the buffer lives on the device) and the
 * push's detection, which there is ONE run answering completeness (each spike's last node row), the
 * end of the final rows and the labels, instead of the CPU's several detections (round trips are
 * what costs on the device; detections over a few hundred rows are what is cheap on the CPU).
 * With opts.trace every push is also split into phases (ss_live_last_push) for the benchmark; and the
 * opt-in scheduling helpers (ss_live_realtime, ss_live_pin) live here. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET, RUSAGE_THREAD (opt-in pinning and the push trace) */
#include "stages/live/live.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "params/params.h"
#include "stages/detect/detect.h"
#include "stages/features/features_pca.h"
#include "stages/filter/filter.h"
#include "stages/knn/knn.h"
#include "stages/live/live_cuda.h"
#include "core/log.h"

/* Cubic interpolation reads this many rows past the last waveform sample (Catmull–Rom support). */
#define SS_LIVE_INTERP_SUPPORT 2
/* Growth floor of the engine's arrays. */
#define SS_LIVE_MIN_ROWS 1024
#define SS_LIVE_MIN_ARRIVALS 64
#define SS_LIVE_DEFAULT_K 5
/* Without a spike in sight, the unreported rows are still cut down once they exceed this (ms). */
#define SS_LIVE_MAX_PENDING_MS 20.0

typedef struct {
  int64_t end; /* first sample after the push */
  double t;    /* its arrival time */
} arrival;

typedef struct {
  int64_t t;
  int32_t ch;
  float amp;
} done_key;

struct ss_live_engine {
  const ss_backend *be;
  const ss_live_model *m;
  ss_live_opts o;
  int C, F; /* channels, feature dims (C · n_pcs) */
  ss_detect_config cfg;
  int64_t Q;    /* own_from passes components with no node in the last Q rows */
  int64_t lead; /* rows kept before own_from */
  ss_filter_state fst;
  float *scaled; /* the push in µV, then filtered */
  int64_t scaled_cap;
  float *buf; /* filtered rows [buf0, buf0 + buf_n) */
  int64_t buf_cap, buf0, buf_n;
  int64_t own_from;       /* every component first-noded before it has been handled */
  int64_t strong_scanned; /* rows before it have been looked at for samples above the strong threshold */
  int64_t pending;        /* spikes seen but not final at the last report */
  done_key *done;         /* spikes reported whose time is not before own_from */
  int64_t n_done, done_cap;
  int64_t max_pending; /* rows after own_from beyond which own_from is moved on without a spike */
  arrival *arr;        /* pushes whose samples may still be needed, oldest first */
  int64_t arr_n, arr_cap;
  ss_detect_work work;
  ss_spike_list spikes;       /* CPU: the last detection's spikes (over all rows) */
  ss_spike_list view;         /* CUDA: the last detection's tables (pinned host memory, no masks) */
  const ss_spike_list *found; /* the spikes of the last report: &spikes, or &view */
  uint8_t *complete;          /* per found spike: no later node can join its component */
  int64_t complete_cap;
  const int32_t *found_label; /* CUDA: every found spike's unit */
  int64_t final_x;            /* the end of the final rows, from the last detection */
  int64_t *sel;               /* the found spikes to report */
  float *wsel;                /* their waveforms */
  int64_t sel_cap, wsel_cap;
  float *features;
  int32_t *labels;
  int64_t *order;
  int64_t feat_cap, labels_cap, order_cap;
  double *best; /* CPU centroid assignment: each selected spike's smallest distance so far */
  int64_t best_cap;
  ss_knn_index *knn;
  ss_knn_opts knn_opts;
  ss_live_stats stats;
  int fresh;                /* no row of the current stream yet */
  ss_live_push_trace trace; /* the last push (opts.trace) */
  ss_live_laps laps;        /* its phase clock, shared with the CUDA stages */
  ss_live_cuda *gpu;        /* the CUDA stages (NULL on the CPU): buf, wsel and spikes unused */
};

void ss_live_opts_defaults(ss_live_opts *o) {
  memset(o, 0, sizeof(*o));
  o->assign = SS_LIVE_CENTROID;
  o->k = SS_LIVE_DEFAULT_K;
}

static ss_status grow(ss_ctx *ctx, void **p, int64_t *cap, int64_t need, int64_t floor_, size_t size,
                      const char *what) {
  if (need <= *cap) return SS_OK;
  int64_t c = *cap > floor_ ? *cap : floor_;
  while (c < need) c *= 2;
  SS_TRY(ss_realloc(ctx, p, (size_t)c, size, what));
  *cap = c;
  return SS_OK;
}

/* --- open / close ------------------------------------------------------------------------------ */

static ss_status check_model(ss_ctx *ctx, const ss_live_model *m, const ss_live_opts *o) {
  if (m->n_channels < 1 || m->n_pcs < 1 || m->n_wave != m->n_before + m->n_after || !(m->rate_hz > 0))
    return ss_fail(ctx, SS_ERR_INPUT, "live: model: inconsistent shape (%d channels, %d PCs, window %d = %d + %d)",
                   m->n_channels, m->n_pcs, m->n_wave, m->n_before, m->n_after);
  if (o->assign == SS_LIVE_KNN && (o->k < 1 || o->k > m->n_ref))
    return ss_fail(ctx, SS_ERR_INPUT, "live: --k: expected 1 .. %lld (the model's reference spikes), got %lld",
                   (long long)m->n_ref, (long long)o->k);
  if (o->assign == SS_LIVE_CENTROID && m->k < 1) return ss_fail(ctx, SS_ERR_INPUT, "live: model: no unit centroids");
  return SS_OK;
}

ss_status ss_live_engine_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m, const ss_live_opts *o,
                              ss_live_engine **out) {
  *out = NULL;
  SS_TRY(check_model(ctx, m, o));
  ss_live_engine *e = NULL;
  SS_TRY(SS_CALLOC(ctx, e, 1, "live engine"));
  e->be = be;
  e->m = m;
  e->o = *o;
  e->C = m->n_channels;
  e->F = m->n_channels * m->n_pcs;
  e->cfg = (ss_detect_config){.join_size = m->join_size, .n_before = m->n_before, .n_after = m->n_after};
  int64_t ready = m->n_after + SS_LIVE_INTERP_SUPPORT;
  e->Q = m->join_size > ready ? m->join_size : ready;
  e->lead = llround(SS_LIVE_LEAD_MS * m->rate_hz / 1000.0) + m->n_before + SS_LIVE_INTERP_SUPPORT + m->join_size;
  ss_status st = ss_filter_state_init(ctx, &m->filter, e->C, &e->fst);
  const int on_gpu = be->kind == SS_DEVICE_CUDA;
  ss_spike_list_init(ctx, &e->spikes, e->C, m->n_wave, !on_gpu);
  if (st == SS_OK && o->assign == SS_LIVE_KNN) {
    ss_params p;
    ss_params_defaults(&p);
    ss_knn_opts_from_params(&e->knn_opts, &p);
    e->knn_opts.k = o->k;
    st = ss_knn_index_create(ctx, be, m->ref_features, m->n_ref, e->F, &e->knn);
  }
  if (st == SS_OK && on_gpu)
    st = ss_live_cuda_open(ctx, be, m, &e->cfg, o->masked_distance, e->knn, (ss_live_wait)o->gpu_wait, &e->laps,
                           &e->gpu);
  e->fresh = 1;
  e->max_pending = llround(SS_LIVE_MAX_PENDING_MS * m->rate_hz / 1000.0);
  if (st != SS_OK) {
    ss_live_engine_close(e);
    return st;
  }
  *out = e;
  return SS_OK;
}

void ss_live_engine_close(ss_live_engine *e) {
  if (!e) return;
  ss_filter_state_free(&e->fst);
  free(e->scaled);
  free(e->buf);
  free(e->arr);
  ss_detect_work_free(&e->work);
  free(e->sel);
  free(e->wsel);
  free(e->done);
  free(e->complete);
  ss_spike_list_free(&e->spikes);
  free(e->features);
  free(e->labels);
  free(e->best);
  free(e->order);
  ss_live_cuda_close(e->gpu);
  if (e->knn) ss_knn_index_free(e->knn);
  free(e);
}

void ss_live_reset(ss_live_engine *e) {
  e->fst.started = 0;
  e->buf0 = e->buf_n = e->own_from = e->strong_scanned = e->pending = e->n_done = 0;
  e->arr_n = 0;
  e->fresh = 1;
  if (e->gpu) ss_live_cuda_reset(e->gpu);
}

void ss_live_get_stats(const ss_live_engine *e, ss_live_stats *out) {
  *out = e->stats;
  int64_t direct;
  if (e->gpu) ss_live_cuda_counts(e->gpu, &out->graph_pushes, &direct, &out->device_waits);
}

void ss_live_last_push(const ss_live_engine *e, ss_live_push_trace *out) { *out = e->trace; }

const char *ss_live_phase_name(int phase) {
  static const char *const names[SS_LIVE_PHASES] = {"append", "flag_wait",  "find",  "count_wait",
                                                    "label",  "table_wait", "setup", "emit"};
  return phase >= 0 && phase < SS_LIVE_PHASES ? names[phase] : "?";
}

/* --- counters ----------------------------------------------------------------------------------- */

void ss_live_stats_add_latency(ss_live_stats *s, double us) {
  int bin;
  if (!(us >= 1.0)) {
    bin = 0;
  } else {
    double b = floor((log10(us) - SS_LIVE_HIST_MIN_DECADE) * SS_LIVE_HIST_PER_DECADE) + 1;
    bin = b >= SS_LIVE_HIST_BINS - 1 ? SS_LIVE_HIST_BINS - 1 : (int)b;
  }
  s->hist[bin]++;
  if (us > s->latency_max_us) s->latency_max_us = us;
  s->latency_sum_us += us;
}

double ss_live_stats_percentile_us(const ss_live_stats *s, double pct) {
  int64_t n = 0;
  for (int i = 0; i < SS_LIVE_HIST_BINS; i++) n += s->hist[i];
  if (n == 0) return 0.0;
  if (pct >= 100.0) return s->latency_max_us;
  double want = pct / 100.0 * (double)n;
  int64_t cum = 0;
  for (int i = 0; i < SS_LIVE_HIST_BINS; i++) {
    cum += s->hist[i];
    if ((double)cum >= want && cum > 0) {
      double edge = pow(10.0, SS_LIVE_HIST_MIN_DECADE + (double)i / SS_LIVE_HIST_PER_DECADE);
      return edge < s->latency_max_us ? edge : s->latency_max_us;
    }
  }
  return s->latency_max_us;
}

void ss_live_stats_print(FILE *f, const char *label, const ss_live_stats *s, double rate_hz) {
  fprintf(f,
          "%s: %lld samples (%.1f s), %lld blocks, %lld spikes, %lld overruns (at most %.2f ms behind), %lld "
          "stream%s; latency p50 %.3f ms, p99 %.3f ms, max %.3f ms\n",
          label, (long long)s->samples, rate_hz > 0 ? (double)s->samples / rate_hz : 0.0, (long long)s->blocks,
          (long long)s->spikes, (long long)s->overruns, 1e3 * s->max_behind_s, (long long)s->streams,
          s->streams == 1 ? "" : "s", 1e-3 * ss_live_stats_percentile_us(s, 50),
          1e-3 * ss_live_stats_percentile_us(s, 99), 1e-3 * s->latency_max_us);
  fflush(f);
}

/* --- the rolling buffer ------------------------------------------------------------------------- */

/* Drop the rows before own_from − lead and the arrivals no spike can need any more; returns the
 * number of rows dropped (the device buffer drops as many). */
static int64_t buffer_trim(ss_live_engine *e) {
  int64_t keep = e->own_from - e->lead, drop = keep - e->buf0;
  if (drop > e->buf_n) drop = e->buf_n;
  if (drop > 0) {
    if (!e->gpu) memmove(e->buf, e->buf + drop * e->C, (size_t)(e->buf_n - drop) * e->C * sizeof(float));
    e->buf0 += drop;
    e->buf_n -= drop;
  }
  int64_t a = 0;
  while (a < e->arr_n - 1 && e->arr[a].end <= keep) a++;
  if (a > 0) {
    memmove(e->arr, e->arr + a, (size_t)(e->arr_n - a) * sizeof(arrival));
    e->arr_n -= a;
  }
  return drop > 0 ? drop : 0;
}

static int new_strong(ss_live_engine *e);

/* Scale, filter causally and append n rows; *strong = 1 when one of them holds a sample above the
 * strong threshold on a used channel (on the device only when want_flag: else a detection follows
 * anyway and the flag's round trip is skipped). */
static ss_status buffer_append(ss_ctx *ctx, ss_live_engine *e, const int16_t *rows, int64_t n, double t_arrival,
                               int want_flag, int *strong) {
  const int C = e->C;
  const ss_live_model *m = e->m;
  SS_TRY(
      grow(ctx, (void **)&e->arr, &e->arr_cap, e->arr_n + 1, SS_LIVE_MIN_ARRIVALS, sizeof(arrival), "live arrivals"));
  if (e->gpu) {
    SS_TRY(ss_live_cuda_append(ctx, e->gpu, buffer_trim(e), rows, n, want_flag, strong));
    e->buf_n += n;
    e->strong_scanned = e->buf0 + e->buf_n;
    e->arr[e->arr_n++] = (arrival){e->buf0 + e->buf_n, t_arrival};
    return SS_OK;
  }
  SS_TRY(grow(ctx, (void **)&e->scaled, &e->scaled_cap, n * C, SS_LIVE_MIN_ROWS * C, sizeof(float), "live block"));
  for (int64_t t = 0; t < n; t++)
    for (int c = 0; c < C; c++) e->scaled[t * C + c] = (float)(rows[t * C + c] * m->uv_per_step[c] + m->offset_uv);
  SS_TRY(ss_filter_causal(ctx, e->be, &m->filter, &e->fst, e->scaled, n, e->scaled));
  buffer_trim(e);
  SS_TRY(
      grow(ctx, (void **)&e->buf, &e->buf_cap, (e->buf_n + n) * C, SS_LIVE_MIN_ROWS * C, sizeof(float), "live buffer"));
  memcpy(e->buf + e->buf_n * C, e->scaled, (size_t)(n * C) * sizeof(float));
  e->buf_n += n;
  e->arr[e->arr_n++] = (arrival){e->buf0 + e->buf_n, t_arrival};
  *strong = new_strong(e);
  (void)want_flag; /* the CPU's scan costs nothing worth skipping */
  ss_live_lap(&e->laps, SS_LIVE_PH_APPEND);
  return SS_OK;
}

/* The buffer's rows as a detection block: every row searched, the components first-noded in
 * [own_from, R) reported. */
static ss_detect_block buffer_block(const ss_live_engine *e) {
  return (ss_detect_block){.x = e->buf,
                           .n_rows = e->buf_n,
                           .row0_sample = e->buf0,
                           .search_begin = 0,
                           .search_end = e->buf_n,
                           .own_begin = e->own_from - e->buf0,
                           .own_end = e->buf_n};
}

/* 1 when a sample above the strong threshold lies in the rows not scanned yet (they are now). */
static int new_strong(ss_live_engine *e) {
  const ss_thresholds *th = &e->m->thresholds;
  const int C = e->C;
  const int64_t R = e->buf0 + e->buf_n;
  int found = 0;
  for (int64_t t = e->strong_scanned > e->buf0 ? e->strong_scanned : e->buf0; t < R && !found; t++) {
    const float *x = e->buf + (t - e->buf0) * C;
    for (int c = 0; c < C && !found; c++)
      found = e->m->graph.use[c] && ss_detect_signal(th->polarity, x[c]) > th->strong[c];
  }
  e->strong_scanned = R;
  return found;
}

/* --- the spikes reported while own_from still lies before them ----------------------------------- */

/* A spike is known by its time sample, peak channel and amplitude (the value at its best node:
 * two components never share a best node). */
static int is_done(const ss_live_engine *e, const ss_spike_list *l, int64_t i) {
  for (int64_t k = 0; k < e->n_done; k++)
    if (e->done[k].t == l->time_samples[i] && e->done[k].ch == l->peak_channel[i] && e->done[k].amp == l->amplitude[i])
      return 1;
  return 0;
}

static ss_status mark_done(ss_ctx *ctx, ss_live_engine *e, const ss_spike_list *l, int64_t i) {
  SS_TRY(grow(ctx, (void **)&e->done, &e->done_cap, e->n_done + 1, SS_LIVE_MIN_ARRIVALS, sizeof(done_key),
              "live reported spikes"));
  e->done[e->n_done++] = (done_key){l->time_samples[i], l->peak_channel[i], l->amplitude[i]};
  return SS_OK;
}

/* A spike at time t was first-noded at or before t: once own_from passes t it is never seen again. */
static void prune_done(ss_live_engine *e) {
  int64_t k = 0;
  for (int64_t i = 0; i < e->n_done; i++)
    if (e->done[i].t >= e->own_from) e->done[k++] = e->done[i];
  e->n_done = k;
}

/* --- features, assignment, emission ------------------------------------------------------------- */

static float sq(float v) { return v * v; }

/* The squared distance of features f (masks `mask`) to centroid row u: plain Euclidean, or over the
 * channels with mask > 0 on either side; float squares summed in double in (channel, pc) order
 * (stages/live/live.cu's k_nearest sums the same way, so both backends give the same labels). */
static double centroid_distance(const ss_live_engine *e, int64_t u, const float *f, const float *mask) {
  const ss_live_model *m = e->m;
  const int P = m->n_pcs;
  const float *mu = m->centroid + u * e->F, *mm = m->mean_mask + u * e->C;
  double d = 0;
  for (int c = 0; c < e->C; c++) {
    if (e->o.masked_distance && !(mask[c] > 0) && !(mm[c] > 0)) continue;
    for (int p = 0; p < P; p++) d += sq(f[c * P + p] - mu[c * P + p]);
  }
  return d;
}

/* Labels of the n selected spikes (e->sel) from their features (e->features, in selection order):
 * the KNN vote, or each spike's nearest centroid row (the first smallest distance, rows in order).
 * Rows outer, spikes inner: each centroid row is read once per push, not once per spike (at 384
 * channels the rows are megabytes, and reading them per spike made the label phase ~50 ms a push). */
static ss_status assign(ss_ctx *ctx, ss_live_engine *e, int64_t n) {
  if (e->o.assign == SS_LIVE_KNN)
    return ss_knn_classify(ctx, e->knn, e->m->ref_labels, &e->knn_opts, e->features, n, 0, e->labels, NULL, NULL, NULL);
  SS_TRY(grow(ctx, (void **)&e->best, &e->best_cap, n, SS_LIVE_MIN_ROWS, sizeof(double), "live distances"));
  for (int64_t k = 0; k < n; k++) e->best[k] = INFINITY, e->labels[k] = 0; /* the best row, then its unit */
  for (int64_t u = 0; u < e->m->k; u++)
    for (int64_t k = 0; k < n; k++) {
      double d = centroid_distance(e, u, e->features + k * e->F, e->spikes.masks + e->sel[k] * e->C);
      if (d < e->best[k]) e->best[k] = d, e->labels[k] = (int32_t)u;
    }
  for (int64_t k = 0; k < n; k++) e->labels[k] = e->m->unit_id[e->labels[k]];
  return SS_OK;
}

/* Arrival time of the push holding sample s (the last push when s lies beyond the stream). */
static double arrival_of(const ss_live_engine *e, int64_t s) {
  for (int64_t a = 0; a < e->arr_n; a++)
    if (e->arr[a].end > s) return e->arr[a].t;
  return e->arr_n > 0 ? e->arr[e->arr_n - 1].t : ss_now();
}

static int later(const ss_spike_list *l, int64_t i, int64_t j) {
  if (l->time_samples[i] != l->time_samples[j]) return l->time_samples[i] > l->time_samples[j];
  if (l->time_fraction[i] != l->time_fraction[j]) return l->time_fraction[i] > l->time_fraction[j];
  return i > j;
}

/* The emission order of the selected spikes: by time (insertion: few, nearly sorted). */
static void order_by_time(ss_live_engine *e, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = i, j = i;
    while (j > 0 && later(e->found, e->sel[e->order[j - 1]], e->sel[v])) {
      e->order[j] = e->order[j - 1];
      j--;
    }
    e->order[j] = v;
  }
}

/* Features, labels and emission of the n found spikes listed in e->sel. */
static ss_status emit_selected(ss_ctx *ctx, ss_live_engine *e, int64_t n, ss_live_emit_fn emit, void *user) {
  if (n == 0) return SS_OK;
  const int64_t per = (int64_t)e->C * e->m->n_wave;
  SS_TRY(grow(ctx, (void **)&e->labels, &e->labels_cap, n, SS_LIVE_MIN_ROWS, sizeof(int32_t), "live labels"));
  SS_TRY(grow(ctx, (void **)&e->order, &e->order_cap, n, SS_LIVE_MIN_ROWS, sizeof(int64_t), "live order"));
  if (e->gpu) {
    for (int64_t k = 0; k < n; k++) e->labels[k] = e->found_label[e->sel[k]];
  } else {
    SS_TRY(grow(ctx, (void **)&e->wsel, &e->wsel_cap, n * per, SS_LIVE_MIN_ROWS, sizeof(float), "live waveforms"));
    SS_TRY(grow(ctx, (void **)&e->features, &e->feat_cap, n * e->F, SS_LIVE_MIN_ROWS, sizeof(float), "live features"));
    ss_live_lap(&e->laps, SS_LIVE_PH_EMIT);
    for (int64_t k = 0; k < n; k++)
      memcpy(e->wsel + k * per, e->spikes.waveforms + e->sel[k] * per, (size_t)per * sizeof(float));
    SS_TRY(ss_pca_project(ctx, e->be, &e->m->pca, e->wsel, n, e->features));
    SS_TRY(assign(ctx, e, n));
    ss_live_lap(&e->laps, SS_LIVE_PH_LABEL);
  }
  order_by_time(e, n);
  const ss_spike_list *l = e->found;
  for (int64_t k = 0; k < n; k++) {
    int64_t j = e->order[k], i = e->sel[j];
    ss_live_spike s = {.t = l->time_samples[i],
                       .unit = e->labels[j],
                       .channel = l->peak_channel[i],
                       .amp = l->amplitude[i]};
    double us = (ss_now() - arrival_of(e, s.t + e->m->n_after - 1)) * 1e6;
    s.latency_us = (float)us;
    ss_live_stats_add_latency(&e->stats, us);
    e->stats.spikes++;
    SS_TRY(mark_done(ctx, e, l, i));
    SS_TRY(emit(ctx, user, &s));
  }
  return SS_OK;
}

/* The last row the spike's waveform reads: the last window sample (time + n_after − 1) plus the
 * Catmull–Rom support (floor of the sub-sample position + 2). */
static int64_t last_row_needed(const ss_live_engine *e, const ss_spike_list *l, int64_t i) {
  return l->time_samples[i] + e->m->n_after + (l->time_fraction[i] < 0 ? 0 : 1);
}

/* The spikes first-noded in [own_from, R) (e->found), which of them are complete (e->complete) and the
 * end of the final rows (e->final_x), from one detection — the device's rules (find_gpu): a component
 * is the same in a search over all rows and in one that stops s rows before the end exactly when all
 * its nodes lie before that cut (its nodes and their links are all there). So a spike is complete when
 * its last node lies before R − join_size, and the components first-noded before X are final when
 * none has a node in the last Q rows: X = the first row of the first owned component (strong or not)
 * with a node there, R when there is none. At the end of the stream (final_only = 0) every component
 * is complete. */
static ss_status find_cpu(ss_ctx *ctx, ss_live_engine *e, int final_only) {
  const int64_t R = e->buf0 + e->buf_n, cut_end = e->buf_n - e->m->join_size, open_row = e->buf_n - e->Q;
  ss_spike_list_clear(&e->spikes);
  ss_detect_block blk = buffer_block(e);
  e->stats.detections++;
  SS_TRY(ss_detect_block_run(ctx, e->be, &e->cfg, &e->m->graph, &e->m->thresholds, &blk, &e->work, &e->spikes));
  e->found = &e->spikes;
  const ss_detect_work *w = &e->work;
  SS_TRY(grow(ctx, (void **)&e->complete, &e->complete_cap, e->spikes.n, SS_LIVE_MIN_ROWS, 1, "live completeness"));
  for (int64_t i = 0; i < e->spikes.n; i++) e->complete[i] = !final_only || w->last_row[i] < cut_end;
  int64_t c = 0;
  while (c < w->n_owned && w->comp_last[c] < open_row) c++;
  e->final_x = c < w->n_owned ? e->buf0 + w->comp_first[c] : R;
  ss_live_lap(&e->laps, SS_LIVE_PH_FIND);
  return SS_OK;
}

/* The same from the device's one detection (the rules of find_cpu), which also gives every spike's
 * label. */
static ss_status find_gpu(ss_ctx *ctx, ss_live_engine *e, int final_only) {
  ss_detect_block blk = buffer_block(e);
  ss_live_found f;
  e->stats.detections++;
  SS_TRY(ss_live_cuda_detect(ctx, e->gpu, &blk, e->buf_n - e->Q, e->o.assign == SS_LIVE_KNN ? &e->knn_opts : NULL, &f));
  e->view = (ss_spike_list){.n = f.n,
                            .n_channels = e->C,
                            .n_wave = e->m->n_wave,
                            .time_samples = (int64_t *)f.time_samples,
                            .time_fraction = (float *)f.time_fraction,
                            .peak_channel = (int32_t *)f.peak_channel,
                            .amplitude = (float *)f.amplitude};
  e->found = &e->view;
  e->found_label = f.label;
  e->final_x = e->buf0 + f.first_open;
  SS_TRY(grow(ctx, (void **)&e->complete, &e->complete_cap, f.n, SS_LIVE_MIN_ROWS, 1, "live completeness"));
  for (int64_t i = 0; i < f.n; i++) e->complete[i] = !final_only || f.last_row[i] < e->buf_n - e->m->join_size;
  return SS_OK;
}

/* Report every spike first-noded after own_from that is final and not reported yet: its component
 * is complete and the rows its waveform reads have arrived. At the end of the stream (final_only = 0)
 * every component is final. e->pending counts the spikes left for later. */
static ss_status emit_final(ss_ctx *ctx, ss_live_engine *e, int final_only, ss_live_emit_fn emit, void *user) {
  const int64_t R = e->buf0 + e->buf_n;
  if (e->gpu) SS_TRY(find_gpu(ctx, e, final_only));
  if (!e->gpu) SS_TRY(find_cpu(ctx, e, final_only));
  const ss_spike_list *l = e->found;
  if (e->laps.tr) {
    e->trace.detected = 1;
    e->trace.found = l->n;
    e->trace.buffer_rows = e->buf_n;
  }
  SS_TRY(grow(ctx, (void **)&e->sel, &e->sel_cap, l->n, SS_LIVE_MIN_ROWS, sizeof(int64_t), "live selection"));
  int64_t n = 0;
  e->pending = 0;
  for (int64_t i = 0; i < l->n; i++) {
    if (is_done(e, l, i)) continue;
    if (e->complete[i] && (!final_only || last_row_needed(e, l, i) < R)) e->sel[n++] = i;
    else e->pending++;
  }
  return emit_selected(ctx, e, n, emit, user);
}

/* --- push / flush ------------------------------------------------------------------------------- */

/* A push's work once it is accounted: append, and report what became final. */
static ss_status push_rows(ss_ctx *ctx, ss_live_engine *e, const int16_t *rows, int64_t n, double t_arrival,
                           ss_live_emit_fn emit, void *user) {
  /* Only a component with a strong node is a spike: nothing new can be reported unless a strong
   * sample arrived or a spike seen before is still pending. own_from then waits (the buffer grows)
   * until the pending rows reach max_pending. */
  int fresh_strong = 0;
  const int must = e->pending > 0 || e->buf0 + e->buf_n + n - e->own_from >= e->max_pending;
  SS_TRY(buffer_append(ctx, e, rows, n, t_arrival, !must, &fresh_strong));
  if (!must && !fresh_strong) return SS_OK;
  SS_TRY(emit_final(ctx, e, 1, emit, user));
  ss_live_lap(&e->laps, SS_LIVE_PH_EMIT);
  e->own_from = e->final_x;
  prune_done(e);
  return SS_OK;
}

/* The calling thread's CPU time (user + system) and involuntary context switches. */
static void thread_usage(double *cpu_s, int64_t *preempted, int64_t *blocked) {
  struct timespec ts;
  struct rusage ru;
  *cpu_s = clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0 ? (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec : 0;
  int ok = getrusage(RUSAGE_THREAD, &ru) == 0;
  *preempted = ok ? (int64_t)ru.ru_nivcsw : 0;
  *blocked = ok ? (int64_t)ru.ru_nvcsw : 0;
}

/* opts.trace: start the push's breakdown (the phase clock runs from t_start). */
static void trace_begin(ss_live_engine *e, int64_t n, double t_start, double behind) {
  if (!e->o.trace) return;
  memset(&e->trace, 0, sizeof(e->trace));
  e->trace.t_start = t_start;
  e->trace.behind_s = behind;
  e->trace.rows = n;
  thread_usage(&e->trace.cpu_s, &e->trace.involuntary_switches, &e->trace.voluntary_switches);
  e->laps = (ss_live_laps){&e->trace, t_start};
}

static void trace_end(ss_live_engine *e, double t_end, int64_t emitted) {
  if (!e->o.trace) return;
  e->trace.phase_s[SS_LIVE_PH_EMIT] += t_end - e->laps.t; /* what is left: emission and bookkeeping */
  double cpu;
  int64_t preempted, blocked;
  thread_usage(&cpu, &preempted, &blocked);
  e->trace.total_s = t_end - e->trace.t_start;
  e->trace.cpu_s = cpu - e->trace.cpu_s;
  e->trace.involuntary_switches = preempted - e->trace.involuntary_switches;
  e->trace.voluntary_switches = blocked - e->trace.voluntary_switches;
  e->trace.emitted = emitted;
  e->laps.tr = NULL;
}

ss_status ss_live_push(ss_ctx *ctx, ss_live_engine *e, const int16_t *rows, int64_t n, double t_arrival,
                       ss_live_emit_fn emit, void *user) {
  if (n <= 0) return SS_OK;
  e->stats.streams += e->fresh;
  e->fresh = 0;
  const double t_start = ss_now();
  double behind = t_start - t_arrival, block = e->o.block_s > 0 ? e->o.block_s : (double)n / e->m->rate_hz;
  e->stats.overruns += behind > block;
  if (behind > e->stats.max_behind_s) e->stats.max_behind_s = behind;
  e->stats.samples += n;
  e->stats.blocks++;
  const int64_t spikes_before = e->stats.spikes;
  trace_begin(e, n, t_start, behind);
  ss_status st = push_rows(ctx, e, rows, n, t_arrival, emit, user);
  const double t_end = ss_now(), took = t_end - t_start;
  trace_end(e, t_end, e->stats.spikes - spikes_before);
  e->stats.slow_pushes += took > block;
  if (took > e->stats.max_push_s) e->stats.max_push_s = took;
  return st;
}

ss_status ss_live_flush(ss_ctx *ctx, ss_live_engine *e, ss_live_emit_fn emit, void *user) {
  SS_TRY(emit_final(ctx, e, 0, emit, user));
  e->own_from = e->buf0 + e->buf_n;
  e->n_done = 0;
  e->pending = 0;
  return SS_OK;
}

/* --- real-time scheduling and pinning ------------------------------------------------------------ */

ss_status ss_live_pin(ss_ctx *ctx, int cpu, int *applied, char *why, size_t why_len) {
  if (cpu < 0 || cpu >= CPU_SETSIZE)
    return ss_fail(ctx, SS_ERR_USAGE, "pin CPU %d: expected 0..%d", cpu, CPU_SETSIZE - 1);
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  int rc = sched_setaffinity(0, sizeof(set), &set) == 0 ? 0 : errno; /* 0: the calling thread */
  *applied = rc == 0;
  if (why_len) why[0] = 0;
  if (rc != 0) snprintf(why, why_len, "pinning to CPU %d refused: %s", cpu, strerror(rc));
  return SS_OK;
}

ss_status ss_live_realtime(ss_ctx *ctx, int priority, int *applied, char *why, size_t why_len) {
  int lo = sched_get_priority_min(SCHED_FIFO), hi = sched_get_priority_max(SCHED_FIFO);
  if (priority < 0 || (priority > 0 && (priority < lo || priority > hi)))
    return ss_fail(ctx, SS_ERR_USAGE, "real-time priority %d: expected 0 or %d..%d", priority, lo, hi);
  struct sched_param sp = {.sched_priority = priority > 0 ? priority : lo};
  int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
  *applied = rc == 0;
  if (why_len) why[0] = 0;
  if (rc != 0) snprintf(why, why_len, "SCHED_FIFO priority %d not permitted: %s", sp.sched_priority, strerror(rc));
  return SS_OK;
}
