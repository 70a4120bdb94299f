/* live_model.c — the causal twin of a model (live_model.h): the builder `sort` uses (time offset,
 * label matching, per-unit centroids, reference set) and the loader, which turns what io/model_h5.c
 * reads from model.h5 (/live, the root's probe and scale) into an ss_live_model. */
#include "stages/live/live_model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "io/model_h5.h"
#include "stages/kmeans/kmeans.h"

/* --- matching ---------------------------------------------------------------------------------- */

int ss_live_channels_near(const ss_detect_graph *g, int a, int b) {
  if (a == b) return 1;
  if (!g || a < 0 || a >= g->n_channels) return 0;
  for (int k = g->adj_start[a]; k < g->adj_start[a + 1]; k++)
    if (g->adj[k] == b) return 1;
  return 0;
}

static double spike_time(const ss_live_spike_times *s, int64_t i) {
  return (double)s->time_samples[i] + (s->time_fraction ? s->time_fraction[i] : 0.0);
}

/* The offline spike nearest to time t within ±window on a channel near `ch`, or −1. *lo is the
 * first offline index that may still be in a window (the queries come in ascending time). Ties
 * (equal distance) keep the earlier spike. */
static int64_t nearest_offline(const ss_live_spike_times *off, const ss_detect_graph *g, double t, int ch,
                               double window, int64_t *lo) {
  while (*lo < off->n && spike_time(off, *lo) < t - window) (*lo)++;
  int64_t best = -1;
  double best_d = INFINITY;
  for (int64_t j = *lo; j < off->n; j++) {
    double tj = spike_time(off, j);
    if (tj > t + window) break;
    double d = fabs(tj - t);
    if (d < best_d && ss_live_channels_near(g, ch, off->peak_channel[j])) {
      best_d = d;
      best = j;
    }
  }
  return best;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

ss_status ss_live_time_offset(ss_ctx *ctx, const ss_live_spike_times *causal, const ss_live_spike_times *offline,
                              const ss_detect_graph *g, int64_t max_lag, double *offset, int64_t *n_pairs) {
  *offset = 0;
  double *lag = NULL;
  SS_TRY(SS_ALLOC(ctx, lag, (size_t)(causal->n > 0 ? causal->n : 1), "time offsets"));
  int64_t n = 0, lo = 0;
  for (int64_t i = 0; i < causal->n; i++) {
    double t = spike_time(causal, i);
    int64_t j = nearest_offline(offline, g, t, causal->peak_channel[i], (double)max_lag, &lo);
    if (j >= 0) lag[n++] = t - spike_time(offline, j);
  }
  if (n > 0) {
    qsort(lag, (size_t)n, sizeof(double), cmp_double);
    *offset = n % 2 ? lag[n / 2] : 0.5 * (lag[n / 2 - 1] + lag[n / 2]);
  }
  if (n_pairs) *n_pairs = n;
  free(lag);
  return SS_OK;
}

ss_status ss_live_match(ss_ctx *ctx, const ss_live_spike_times *causal, const ss_live_spike_times *offline,
                        const ss_detect_graph *g, double offset, double tolerance, int64_t *match, int64_t *n_matched) {
  if (!(tolerance >= 0))
    return ss_fail(ctx, SS_ERR_INTERNAL, "live twin: matching tolerance: expected >= 0, got %g", tolerance);
  int64_t lo = 0, m = 0;
  for (int64_t i = 0; i < causal->n; i++) {
    double t = spike_time(causal, i) - offset;
    match[i] = nearest_offline(offline, g, t, causal->peak_channel[i], tolerance, &lo);
    m += match[i] >= 0;
  }
  *n_matched = m;
  return SS_OK;
}

/* --- threshold calibration ---------------------------------------------------------------------- */

static int cmp_float_desc(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x < y) - (x > y);
}

/* The strongest candidate near offline time t (within ±window, channel near ch); 0 when none.
 * *lo: first candidate that may still be in a window (queries ascend in time). */
static float strongest_near(const ss_live_spike_times *c, const float *strength, const ss_detect_graph *g, double t,
                            int ch, double window, int64_t *lo) {
  while (*lo < c->n && spike_time(c, *lo) < t - window) (*lo)++;
  float best = 0;
  for (int64_t j = *lo; j < c->n && spike_time(c, j) <= t + window; j++)
    if (strength[j] > best && ss_live_channels_near(g, ch, c->peak_channel[j])) best = strength[j];
  return best;
}

ss_status ss_live_calibrate(ss_ctx *ctx, const ss_live_spike_times *candidates, const float *strength,
                            const ss_live_spike_times *offline, const ss_detect_graph *g, double offset,
                            double tolerance, double recall, double min_factor, ss_live_calibration *out) {
  if (!(recall > 0 && recall <= 1) || !(min_factor > 0 && min_factor <= 1))
    return ss_fail(ctx, SS_ERR_INTERNAL, "live calibration: recall %g, min_factor %g: expected both in (0, 1]", recall,
                   min_factor);
  out->factor = 1;
  out->achieved = out->at_one = 0;
  const int64_t n = offline->n;
  if (n == 0) return SS_OK;
  float *best = NULL;
  SS_TRY(SS_ALLOC(ctx, best, (size_t)n, "live calibration"));
  int64_t lo = 0, at_one = 0;
  for (int64_t i = 0; i < n; i++) {
    best[i] = strongest_near(candidates, strength, g, spike_time(offline, i) + offset, offline->peak_channel[i],
                             tolerance, &lo);
    at_one += best[i] >= 1.0f;
  }
  qsort(best, (size_t)n, sizeof(float), cmp_float_desc);
  /* the need-th strongest partner decides: at that factor `need` offline spikes have one */
  int64_t need = (int64_t)ceil(recall * (double)n);
  if (need < 1) need = 1;
  double f = best[need - 1];
  out->factor = f > 1 ? 1 : (f < min_factor ? min_factor : f);
  int64_t got = 0;
  while (got < n && best[got] >= out->factor) got++;
  out->achieved = (double)got / (double)n;
  out->at_one = (double)at_one / (double)n;
  free(best);
  return SS_OK;
}

/* --- the twin ---------------------------------------------------------------------------------- */

void ss_live_twin_free(ss_live_twin *t) {
  free(t->unit_id);
  free(t->centroid);
  free(t->mean_mask);
  free(t->ref_features);
  free(t->ref_masks);
  free(t->ref_labels);
  free(t->ref_times);
  memset(t, 0, sizeof(*t));
}

/* Units with matched spikes, ascending; slot[id] = their row (−1: none). */
static ss_status twin_units(ss_ctx *ctx, const ss_live_twin_input *in, const int64_t *match, int32_t max_id,
                            int64_t *slot, ss_live_twin *out) {
  for (int32_t u = 0; u <= max_id; u++) slot[u] = -1;
  for (int64_t i = 0; i < in->causal.n; i++)
    if (match[i] >= 0) slot[in->offline_labels[match[i]]] = 0;
  out->k = 0;
  for (int32_t u = 0; u <= max_id; u++)
    if (slot[u] >= 0) slot[u] = out->k++;
  SS_TRY(SS_ALLOC(ctx, out->unit_id, (size_t)(out->k > 0 ? out->k : 1), "live unit ids"));
  for (int32_t u = 0; u <= max_id; u++)
    if (slot[u] >= 0) out->unit_id[slot[u]] = u;
  return SS_OK;
}

/* Mean feature vector and mask of each unit over its matched causal spikes (sequential double sums). */
static ss_status twin_means(ss_ctx *ctx, const ss_live_twin_input *in, const int64_t *match, const int64_t *slot,
                            ss_live_twin *out) {
  const int64_t C = in->n_channels, D = C * in->n_pcs, K = out->k;
  double *fs = NULL, *ms = NULL;
  int64_t *cnt = NULL;
  ss_status st = SS_OK;
  if (SS_CALLOC(ctx, fs, (size_t)(K * D), "live centroid sums") ||
      SS_CALLOC(ctx, ms, (size_t)(K * C), "live mask sums") || SS_CALLOC(ctx, cnt, (size_t)K, "live counts") ||
      SS_ALLOC(ctx, out->centroid, (size_t)(K * D), "live centroids") ||
      SS_ALLOC(ctx, out->mean_mask, (size_t)(K * C), "live mean masks"))
    st = SS_ERR_NOMEM;
  for (int64_t i = 0; st == SS_OK && i < in->causal.n; i++) {
    if (match[i] < 0) continue;
    int64_t u = slot[in->offline_labels[match[i]]];
    cnt[u]++;
    for (int64_t j = 0; j < D; j++) fs[u * D + j] += in->causal_features[i * D + j];
    for (int64_t c = 0; c < C; c++) ms[u * C + c] += in->causal_masks[i * C + c];
  }
  for (int64_t u = 0; st == SS_OK && u < K; u++) {
    for (int64_t j = 0; j < D; j++) out->centroid[u * D + j] = (float)(fs[u * D + j] / (double)cnt[u]);
    for (int64_t c = 0; c < C; c++) out->mean_mask[u * C + c] = (float)(ms[u * C + c] / (double)cnt[u]);
  }
  free(fs);
  free(ms);
  free(cnt);
  return st;
}

/* k-means of one unit's matched causal spikes (rows `members`; at most SS_LIVE_PROTOTYPE_MAX_SPIKES per
 * prototype of them, evenly spaced in time, so that the cost does not grow with the recording) into P
 * prototypes: centroids and the mean mask of each one's members (the unit's mean mask for a prototype
 * left empty). */
static ss_status unit_prototypes(ss_ctx *ctx, const ss_live_twin_input *in, const int64_t *all, int64_t n_all,
                                 int64_t P, const float *unit_mask, float *centroid, float *mean_mask) {
  const int64_t C = in->n_channels, D = C * in->n_pcs, cap = P * SS_LIVE_PROTOTYPE_MAX_SPIKES;
  const int64_t n = n_all < cap ? n_all : cap;
  int64_t *members = NULL;
  SS_TRY(SS_ALLOC(ctx, members, (size_t)n, "live prototypes"));
  for (int64_t i = 0; i < n; i++) members[i] = all[(int64_t)((__int128)i * n_all / n)];
  float *x = NULL;
  double *ms = NULL;
  int64_t *cnt = NULL;
  ss_status st = SS_OK;
  if (SS_ALLOC(ctx, x, (size_t)(n * D), "live prototypes") || SS_CALLOC(ctx, ms, (size_t)(P * C), "live prototypes") ||
      SS_CALLOC(ctx, cnt, (size_t)P, "live prototypes"))
    st = SS_ERR_NOMEM;
  for (int64_t i = 0; st == SS_OK && i < n; i++)
    memcpy(x + i * D, in->causal_features + members[i] * D, (size_t)D * sizeof(float));
  ss_kmeans_opts ko = {.k = P,
                       .init = SS_KMEANS_INIT_PP,
                       .max_iterations = SS_LIVE_PROTOTYPE_ITERATIONS,
                       .tol_change_fraction = 0,
                       .seed = in->seed,
                       .quiet = 1}; /* one line per unit would bury the sort's log: twin_prototypes sums up */
  ss_kmeans_result kr;
  memset(&kr, 0, sizeof(kr));
  if (st == SS_OK) st = ss_kmeans_fit(ctx, in->be, x, n, D, &ko, &kr);
  for (int64_t i = 0; st == SS_OK && i < n; i++) {
    cnt[kr.labels[i]]++;
    for (int64_t c = 0; c < C; c++) ms[kr.labels[i] * C + c] += in->causal_masks[members[i] * C + c];
  }
  for (int64_t p = 0; st == SS_OK && p < P; p++) {
    memcpy(centroid + p * D, kr.centroids + p * D, (size_t)D * sizeof(float));
    for (int64_t c = 0; c < C; c++)
      mean_mask[p * C + c] = cnt[p] > 0 ? (float)(ms[p * C + c] / (double)cnt[p]) : unit_mask[c];
  }
  ss_kmeans_result_free(&kr);
  free(x);
  free(ms);
  free(cnt);
  free(members);
  return st;
}

/* A unit whose causal spikes spread (a catch-all of collisions, two shapes in one unit) is badly
 * represented by its mean: each unit gets up to max_prototypes centroids, one per
 * SS_LIVE_SPIKES_PER_PROTOTYPE matched spikes, so that nearest-centroid assignment follows its shape.
 * The rows out->k (one mean per unit, from twin_means) become the prototypes, in unit order. */
static ss_status twin_prototypes(ss_ctx *ctx, const ss_live_twin_input *in, const int64_t *match, const int64_t *slot,
                                 ss_live_twin *out) {
  const int64_t C = in->n_channels, D = C * in->n_pcs, K = out->k;
  out->n_units = K;
  if (in->max_prototypes <= 1 || !in->be) return SS_OK;
  int64_t *start = NULL, *members = NULL, *fill = NULL, R = 0, n_fits = 0;
  int32_t *ids = NULL;
  float *cen = NULL, *msk = NULL;
  ss_status st = SS_OK;
  if (SS_CALLOC(ctx, start, (size_t)K + 1, "live prototypes") || SS_ALLOC(ctx, fill, (size_t)K, "live prototypes") ||
      SS_ALLOC(ctx, members, (size_t)(out->n_matched > 0 ? out->n_matched : 1), "live prototypes"))
    st = SS_ERR_NOMEM;
  /* the matched spikes grouped by unit row, in time order within each */
  for (int64_t i = 0; st == SS_OK && i < in->causal.n; i++)
    if (match[i] >= 0) start[slot[in->offline_labels[match[i]]] + 1]++;
  for (int64_t u = 0; st == SS_OK && u < K; u++) {
    start[u + 1] += start[u];
    fill[u] = start[u];
  }
  for (int64_t i = 0; st == SS_OK && i < in->causal.n; i++)
    if (match[i] >= 0) members[fill[slot[in->offline_labels[match[i]]]]++] = i;
  for (int64_t u = 0; st == SS_OK && u < K; u++) {
    int64_t p = (start[u + 1] - start[u]) / SS_LIVE_SPIKES_PER_PROTOTYPE;
    fill[u] = p < 1 ? 1 : (p > in->max_prototypes ? in->max_prototypes : p);
    R += fill[u];
  }
  if (st == SS_OK &&
      (SS_ALLOC(ctx, ids, (size_t)R, "live prototypes") || SS_ALLOC(ctx, cen, (size_t)(R * D), "live prototypes") ||
       SS_ALLOC(ctx, msk, (size_t)(R * C), "live prototypes")))
    st = SS_ERR_NOMEM;
  for (int64_t u = 0, r = 0; st == SS_OK && u < K; r += fill[u], u++) {
    for (int64_t p = 0; p < fill[u]; p++) ids[r + p] = out->unit_id[u];
    if (fill[u] == 1) {
      memcpy(cen + r * D, out->centroid + u * D, (size_t)D * sizeof(float));
      memcpy(msk + r * C, out->mean_mask + u * C, (size_t)C * sizeof(float));
    } else {
      st = unit_prototypes(ctx, in, members + start[u], start[u + 1] - start[u], fill[u], out->mean_mask + u * C,
                           cen + r * D, msk + r * C);
      n_fits++;
    }
  }
  if (st == SS_OK) {
    ss_log_info(ctx, "live twin: %" PRId64 " prototypes for %" PRId64 " units (%" PRId64 " k-means fits)", R, K,
                n_fits);
    free(out->unit_id);
    free(out->centroid);
    free(out->mean_mask);
    out->unit_id = ids;
    out->centroid = cen;
    out->mean_mask = msk;
    out->k = R;
    ids = NULL;
    cen = msk = NULL;
  }
  free(start);
  free(fill);
  free(members);
  free(ids);
  free(cen);
  free(msk);
  return st;
}

/* Every matched spike, or every stride-th of them beyond ref_cap (as the offline /knn set). */
static ss_status twin_reference(ss_ctx *ctx, const ss_live_twin_input *in, const int64_t *match, ss_live_twin *out) {
  const int64_t C = in->n_channels, D = C * in->n_pcs, cap = in->ref_cap > 0 ? in->ref_cap : 1;
  out->ref_stride = (out->n_matched + cap - 1) / cap;
  if (out->ref_stride < 1) out->ref_stride = 1;
  out->n_ref = (out->n_matched + out->ref_stride - 1) / out->ref_stride;
  size_t m = (size_t)(out->n_ref > 0 ? out->n_ref : 1);
  if (SS_ALLOC(ctx, out->ref_features, m * D, "live reference set") ||
      SS_ALLOC(ctx, out->ref_masks, m * C, "live reference set") ||
      SS_ALLOC(ctx, out->ref_labels, m, "live reference set") || SS_ALLOC(ctx, out->ref_times, m, "live reference set"))
    return SS_ERR_NOMEM;
  int64_t seen = 0, r = 0;
  for (int64_t i = 0; i < in->causal.n && r < out->n_ref; i++) {
    if (match[i] < 0) continue;
    if (seen++ % out->ref_stride) continue;
    memcpy(out->ref_features + r * D, in->causal_features + i * D, (size_t)D * sizeof(float));
    memcpy(out->ref_masks + r * C, in->causal_masks + i * C, (size_t)C * sizeof(float));
    out->ref_labels[r] = in->offline_labels[match[i]];
    out->ref_times[r] = in->causal.time_samples[i];
    r++;
  }
  return SS_OK;
}

static ss_status twin_check_input(ss_ctx *ctx, const ss_live_twin_input *in, int32_t *max_id) {
  *max_id = 0;
  if (in->n_channels <= 0 || in->n_pcs <= 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "live twin: shape: %d channels, %d PCs", in->n_channels, in->n_pcs);
  for (int64_t i = 0; i < in->offline.n; i++) {
    if (in->offline_labels[i] < 0)
      return ss_fail(ctx, SS_ERR_INTERNAL, "live twin: offline label %" PRId64 ": expected >= 0, got %d", i,
                     (int)in->offline_labels[i]);
    if (in->offline_labels[i] > *max_id) *max_id = in->offline_labels[i];
  }
  return SS_OK;
}

ss_status ss_live_twin_build(ss_ctx *ctx, const ss_live_twin_input *in, ss_live_twin *out) {
  memset(out, 0, sizeof(*out));
  int32_t max_id;
  SS_TRY(twin_check_input(ctx, in, &max_id));
  int64_t *match = NULL, *slot = NULL;
  SS_TRY(SS_ALLOC(ctx, match, (size_t)(in->causal.n > 0 ? in->causal.n : 1), "live matches"));
  ss_status st = SS_ALLOC(ctx, slot, (size_t)max_id + 1, "live units");
  out->n_causal = in->causal.n;
  if (st == SS_OK) st = ss_live_time_offset(ctx, &in->causal, &in->offline, in->graph, in->max_lag, &out->offset, NULL);
  if (st == SS_OK)
    st = ss_live_match(ctx, &in->causal, &in->offline, in->graph, out->offset, in->tolerance, match, &out->n_matched);
  if (st == SS_OK && out->n_matched == 0)
    st = ss_fail(ctx, SS_ERR_INPUT,
                 "live twin: none of the %" PRId64 " causal spikes matches one of the %" PRId64 " offline spikes",
                 in->causal.n, in->offline.n);
  if (st == SS_OK) st = twin_units(ctx, in, match, max_id, slot, out);
  if (st == SS_OK) st = twin_means(ctx, in, match, slot, out);
  if (st == SS_OK) st = twin_prototypes(ctx, in, match, slot, out);
  if (st == SS_OK) st = twin_reference(ctx, in, match, out);
  free(match);
  free(slot);
  if (st != SS_OK) ss_live_twin_free(out);
  return st;
}

/* --- the loader -------------------------------------------------------------------------------- */

/* io/model_h5.c reads and validates the file; here its arrays become the stage's types. */
_Static_assert(SS_MODEL_MAX_SECTIONS <= SS_FILTER_MAX_ORDER, "a model's filter fits in ss_filter");

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The detection graph: /probe/connected and the symmetric CSR of /probe/adjacency. */
static ss_status graph_from_model(ss_ctx *ctx, const ss_model_live_data *d, ss_detect_graph *g) {
  const int C = d->n_channels;
  const int32_t *edges = d->adjacency;
  memset(g, 0, sizeof(*g));
  g->n_channels = C;
  if (SS_CALLOC(ctx, g->use, (size_t)C, "channel flags") || SS_CALLOC(ctx, g->adj_start, (size_t)C + 1, "adjacency") ||
      SS_ALLOC(ctx, g->adj, (size_t)(2 * d->n_edges > 0 ? 2 * d->n_edges : 1), "adjacency"))
    return SS_ERR_NOMEM;
  for (int c = 0; c < C; c++) g->use[c] = d->connected[c];
  for (int64_t e = 0; e < d->n_edges; e++) {
    g->adj_start[edges[2 * e] + 1]++;
    g->adj_start[edges[2 * e + 1] + 1]++;
  }
  for (int c = 0; c < C; c++) g->adj_start[c + 1] += g->adj_start[c];
  int *fill = NULL;
  SS_TRY(SS_ALLOC(ctx, fill, (size_t)C, "adjacency"));
  for (int c = 0; c < C; c++) fill[c] = g->adj_start[c];
  for (int64_t e = 0; e < d->n_edges; e++) {
    g->adj[fill[edges[2 * e]]++] = edges[2 * e + 1];
    g->adj[fill[edges[2 * e + 1]]++] = edges[2 * e];
  }
  for (int c = 0; c < C; c++)
    qsort(g->adj + g->adj_start[c], (size_t)(g->adj_start[c + 1] - g->adj_start[c]), sizeof(int), cmp_int);
  free(fill);
  return SS_OK;
}

/* The causal filter from its rows b0 b1 b2 1 a1 a2. */
static void filter_from_model(const ss_model_live_data *d, ss_filter *f) {
  memset(f, 0, sizeof(*f));
  for (int q = 0; q < d->n_sections; q++) {
    const double *row = d->sos + (size_t)q * 6;
    f->sos[q] = (ss_biquad){row[0], row[1], row[2], row[4], row[5]};
  }
  f->n_sections = d->n_sections;
  f->rate_hz = d->rate_hz;
  f->order = d->filter_order;
  f->low_hz = d->low_hz;
  f->high_hz = d->high_hz;
}

/* Move the arrays the model keeps as they are from d into m (they are cleared in d). */
static void take_arrays(ss_model_live_data *d, ss_live_model *m) {
  m->rate_hz = d->rate_hz;
  m->n_channels = d->n_channels;
  m->n_pcs = d->n_pcs;
  m->n_wave = d->n_wave;
  m->n_before = d->n_before;
  m->n_after = d->n_after;
  m->polarity = d->polarity;
  m->join_size = d->join_size;
  m->uv_per_step = d->uv_per_step;
  m->offset_uv = d->offset_uv;
  m->thresholds = (ss_thresholds){.n_channels = d->n_channels,
                                  .polarity = d->polarity,
                                  .sigma = d->sigma,
                                  .weak = d->weak,
                                  .strong = d->strong};
  m->pca = (ss_pca){.n_channels = d->n_channels,
                    .n_wave = d->n_wave,
                    .n_pcs = d->n_pcs,
                    .basis = d->pca_basis,
                    .eigenvalues = d->pca_eigenvalues};
  m->k = d->k;
  m->unit_id = d->unit_id;
  m->centroid = d->centroid;
  m->mean_mask = d->mean_mask;
  m->n_ref = d->n_ref;
  m->ref_features = d->ref_features;
  m->ref_masks = d->ref_masks;
  m->ref_labels = d->ref_labels;
  m->ref_times = d->ref_times;
  d->uv_per_step = NULL;
  d->sigma = d->weak = d->strong = NULL;
  d->pca_basis = NULL;
  d->pca_eigenvalues = NULL;
  d->unit_id = d->ref_labels = NULL;
  d->centroid = d->mean_mask = d->ref_features = d->ref_masks = NULL;
  d->ref_times = NULL;
}

ss_status ss_live_model_load(ss_ctx *ctx, const char *path, ss_live_model *m) {
  memset(m, 0, sizeof(*m));
  ss_model_live_data d;
  SS_TRY(ss_model_read_live(ctx, path, &d));
  filter_from_model(&d, &m->filter);
  take_arrays(&d, m);
  ss_status st = graph_from_model(ctx, &d, &m->graph);
  ss_model_live_data_free(&d);
  if (st != SS_OK) ss_live_model_free(m);
  return st;
}

void ss_live_model_free(ss_live_model *m) {
  free(m->uv_per_step);
  ss_thresholds_free(&m->thresholds);
  ss_detect_graph_free(&m->graph);
  ss_pca_free(&m->pca);
  free(m->unit_id);
  free(m->centroid);
  free(m->mean_mask);
  free(m->ref_features);
  free(m->ref_masks);
  free(m->ref_labels);
  free(m->ref_times);
  memset(m, 0, sizeof(*m));
}
