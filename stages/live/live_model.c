/* live_model.c — the causal twin of a model (live_model.h): the builder `sort` uses (time offset,
 * label matching, per-unit centroids, reference set) and the loader of model.h5's /live group with
 * the root's filter, probe and scale, validating every field it reads. */
#include "stages/live/live_model.h"

#include <hdf5.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5_util.h"
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
                        const ss_detect_graph *g, double offset, double tolerance, int64_t *match,
                        int64_t *n_matched) {
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
    return ss_fail(ctx, SS_ERR_INTERNAL, "live calibration: recall %g, min_factor %g: expected both in (0, 1]",
                   recall, min_factor);
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
  if (SS_CALLOC(ctx, fs, (size_t)(K * D), "live centroid sums") || SS_CALLOC(ctx, ms, (size_t)(K * C), "live mask sums") ||
      SS_CALLOC(ctx, cnt, (size_t)K, "live counts") || SS_ALLOC(ctx, out->centroid, (size_t)(K * D), "live centroids") ||
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
  ss_kmeans_opts ko = {.k = P, .init = SS_KMEANS_INIT_PP, .max_iterations = SS_LIVE_PROTOTYPE_ITERATIONS,
                       .tol_change_fraction = 0, .seed = in->seed};
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
  int64_t *start = NULL, *members = NULL, *fill = NULL, R = 0;
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
  if (st == SS_OK && (SS_ALLOC(ctx, ids, (size_t)R, "live prototypes") || SS_ALLOC(ctx, cen, (size_t)(R * D), "live prototypes") ||
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
    }
  }
  if (st == SS_OK) {
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
      SS_ALLOC(ctx, out->ref_masks, m * C, "live reference set") || SS_ALLOC(ctx, out->ref_labels, m, "live reference set") ||
      SS_ALLOC(ctx, out->ref_times, m, "live reference set"))
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
    st = ss_fail(ctx, SS_ERR_INPUT, "live twin: none of the %" PRId64 " causal spikes matches one of the %" PRId64
                 " offline spikes", in->causal.n, in->offline.n);
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

/* Limits the loader accepts (beyond them a file is taken as corrupt). */
#define SS_LIVE_MAX_CHANNELS 100000
#define SS_LIVE_MAX_PCS 16
#define SS_LIVE_MAX_WAVE 100000
#define SS_LIVE_MAX_JOIN 1000
#define SS_LIVE_SOS_COLS 6
#define SS_LIVE_MAX_RANK 3
#define SS_LIVE_FREE_DIM (-1) /* a dimension the file decides (units, reference spikes, edges) */

typedef struct {
  ss_ctx *ctx;
  hid_t f;
  const char *file;
} reader;

typedef struct {
  H5T_class_t cls;   /* the file's type must be of this class and size */
  size_t size;
  const char *name;
} elem_type;

static const elem_type T_F32 = {H5T_FLOAT, 4, "float32"}, T_F64 = {H5T_FLOAT, 8, "float64"},
                       T_I32 = {H5T_INTEGER, 4, "int32"}, T_I64 = {H5T_INTEGER, 8, "int64"};

static hid_t mem_type(const elem_type *t) {
  if (t->cls == H5T_FLOAT) return t->size == 4 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
  return t->size == 4 ? H5T_NATIVE_INT32 : H5T_NATIVE_INT64;
}

/* "[3 × K]" from dims (free dims named by `free_name`). */
static void dims_text(char *buf, size_t len, int rank, const int64_t *dims, const char *free_name) {
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && at < len; i++) {
    const char *sep = i ? " × " : "";
    if (dims[i] == SS_LIVE_FREE_DIM)
      at += (size_t)snprintf(buf + at, len - at, "%s%s", sep, free_name);
    else
      at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, sep, dims[i]);
  }
  if (at < len) snprintf(buf + at, len - at, "]");
}

/* Read dataset `path` of the expected type and shape (free dims take the file's size and are written
 * back into want); *out is malloc'd (at least one element). */
static ss_status read_array(reader *r, const char *path, const elem_type *t, int rank, int64_t *want,
                            const char *free_name, void **out) {
  *out = NULL;
  if (!ss_h5_is_dataset(r->f, path)) return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: missing", r->file, path);
  hid_t d = H5Dopen2(r->f, path, H5P_DEFAULT), ft = H5Dget_type(d);
  int64_t dims[8] = {0};
  int got_rank = ss_h5_shape(d, dims);
  char tn[32];
  ss_h5_type_name(ft, tn, sizeof(tn));
  int ok = H5Tget_class(ft) == t->cls && H5Tget_size(ft) == t->size && got_rank == rank &&
           (t->cls != H5T_INTEGER || H5Tget_sign(ft) == H5T_SGN_2);
  for (int i = 0; ok && i < rank; i++) ok = want[i] == SS_LIVE_FREE_DIM || want[i] == dims[i];
  H5Tclose(ft);
  if (!ok) {
    char we[128], ge[128];
    dims_text(we, sizeof(we), rank, want, free_name);
    dims_text(ge, sizeof(ge), got_rank > 0 ? got_rank : 0, dims, "?");
    H5Dclose(d);
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected %s %s, got %s %s", r->file, path, we, t->name, ge, tn);
  }
  int64_t count = 1;
  for (int i = 0; i < rank; i++) count *= (want[i] = dims[i]);
  ss_status st = ss_alloc(r->ctx, out, (size_t)(count > 0 ? count : 1), t->size, path);
  if (st == SS_OK && count > 0 && H5Dread(d, mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0)
    st = ss_fail(r->ctx, SS_ERR_IO, "%s: %s: cannot read the dataset", r->file, path);
  H5Dclose(d);
  if (st != SS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

/* Element i of an array of `rank` dims as "[a, b, c]". */
static void index_text(char *buf, size_t len, int64_t i, int rank, const int64_t *dims) {
  int64_t idx[SS_LIVE_MAX_RANK] = {0};
  for (int k = rank - 1; k >= 0; k--) {
    idx[k] = dims[k] > 0 ? i % dims[k] : 0;
    i = dims[k] > 0 ? i / dims[k] : 0;
  }
  size_t at = (size_t)snprintf(buf, len, "[");
  for (int k = 0; k < rank && at < len; k++) at += (size_t)snprintf(buf + at, len - at, "%s%" PRId64, k ? ", " : "", idx[k]);
  if (at < len) snprintf(buf + at, len - at, "]");
}

static int64_t count_of(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int k = 0; k < rank; k++) n *= dims[k];
  return n;
}

/* Every value within [lo, hi] (NaN never; ±inf only when allow_inf and the bound admits it). */
static ss_status check_range(reader *r, const char *path, const double *v64, const float *v32, int rank,
                             const int64_t *dims, double lo, double hi, int allow_inf, const char *what) {
  int64_t n = count_of(rank, dims);
  for (int64_t i = 0; i < n; i++) {
    double x = v64 ? v64[i] : (double)v32[i];
    if ((!isnan(x) && (allow_inf || isfinite(x)) && x >= lo && x <= hi)) continue;
    char at[96];
    index_text(at, sizeof(at), i, rank, dims);
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected %s, got %g at %s", r->file, path, what, x, at);
  }
  return SS_OK;
}

static ss_status read_f32(reader *r, const char *path, int rank, int64_t *dims, const char *free_name, double lo,
                          double hi, int allow_inf, const char *what, float **out) {
  SS_TRY(read_array(r, path, &T_F32, rank, dims, free_name, (void **)out));
  ss_status st = check_range(r, path, NULL, *out, rank, dims, lo, hi, allow_inf, what);
  if (st != SS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

static ss_status read_f64(reader *r, const char *path, int rank, int64_t *dims, double lo, double hi, const char *what,
                          double **out) {
  SS_TRY(read_array(r, path, &T_F64, rank, dims, "n", (void **)out));
  ss_status st = check_range(r, path, *out, NULL, rank, dims, lo, hi, 0, what);
  if (st != SS_OK) {
    free(*out);
    *out = NULL;
  }
  return st;
}

/* A numeric attribute of `obj_path` ("/" for the root) that must be finite and in [lo, hi]
 * (integral when `integral`). */
static ss_status read_attr(reader *r, const char *obj_path, const char *name, double lo, double hi, int integral,
                           double *out) {
  hid_t o = H5Oopen(r->f, obj_path, H5P_DEFAULT);
  int ok = o >= 0 && ss_h5_read_attr_f64(o, name, out);
  if (o >= 0) H5Oclose(o);
  const char *sep = strcmp(obj_path, "/") ? "/" : "";
  if (!ok) return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute %s%s%s: missing or not a number", r->file, obj_path, sep, name);
  if (!isfinite(*out) || *out < lo || *out > hi || (integral && *out != floor(*out)))
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute %s%s%s: expected %s in [%g, %g], got %g", r->file, obj_path,
                   sep, name, integral ? "an integer" : "a number", lo, hi, *out);
  return SS_OK;
}

static ss_status read_int_attr(reader *r, const char *obj_path, const char *name, double lo, double hi, int *out) {
  double v;
  SS_TRY(read_attr(r, obj_path, name, lo, hi, 1, &v));
  *out = (int)v;
  return SS_OK;
}

static ss_status load_root(reader *r, ss_live_model *m) {
  SS_TRY(read_attr(r, "/", "sample_rate", 0, INFINITY, 0, &m->rate_hz));
  if (!(m->rate_hz > 0)) return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute sample_rate: expected > 0, got %g", r->file, m->rate_hz);
  SS_TRY(read_int_attr(r, "/", "n_channels", 1, SS_LIVE_MAX_CHANNELS, &m->n_channels));
  SS_TRY(read_int_attr(r, "/", "n_pcs", 1, SS_LIVE_MAX_PCS, &m->n_pcs));
  SS_TRY(read_int_attr(r, "/", "n_before", 0, SS_LIVE_MAX_WAVE, &m->n_before));
  SS_TRY(read_int_attr(r, "/", "n_after", 0, SS_LIVE_MAX_WAVE, &m->n_after));
  SS_TRY(read_int_attr(r, "/", "n_wave", 1, 2.0 * SS_LIVE_MAX_WAVE, &m->n_wave));
  if (m->n_wave != m->n_before + m->n_after)
    return ss_fail(r->ctx, SS_ERR_INPUT, "%s: attribute n_wave: expected n_before + n_after = %d, got %d", r->file,
                   m->n_before + m->n_after, m->n_wave);
  SS_TRY(read_int_attr(r, "/", "polarity", SS_POLARITY_NEGATIVE, SS_POLARITY_BOTH, &m->polarity));
  SS_TRY(read_int_attr(r, "/", "join_size", 0, SS_LIVE_MAX_JOIN, &m->join_size));
  int64_t dims[1] = {m->n_channels};
  SS_TRY(read_f64(r, "/uv_per_step", 1, dims, -INFINITY, INFINITY, "finite values", &m->uv_per_step));
  for (int c = 0; c < m->n_channels; c++)
    if (m->uv_per_step[c] == 0)
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /uv_per_step: expected a non-zero scale, got 0 at [%d]", r->file, c);
  return read_attr(r, "/", "offset_uv", -INFINITY, INFINITY, 0, &m->offset_uv);
}

/* The causal filter: /live/filter (the twin's own design), or the root's /filter in models written
 * before the twin had one. */
static ss_status load_filter(reader *r, ss_live_model *m) {
  const char *grp = ss_h5_is_group(r->f, "/live/filter") ? "/live/filter" : "/filter";
  char sos_path[32];
  snprintf(sos_path, sizeof(sos_path), "%s/sos", grp);
  int64_t dims[2] = {SS_LIVE_FREE_DIM, SS_LIVE_SOS_COLS};
  double *sos = NULL, v;
  SS_TRY(read_f64(r, sos_path, 2, dims, -INFINITY, INFINITY, "finite values", &sos));
  ss_filter *f = &m->filter;
  memset(f, 0, sizeof(*f));
  ss_status st = SS_OK;
  if (dims[0] < 1 || dims[0] > SS_FILTER_MAX_ORDER)
    st = ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected 1 to %d sections, got %" PRId64, r->file, sos_path,
                 SS_FILTER_MAX_ORDER, dims[0]);
  for (int64_t q = 0; st == SS_OK && q < dims[0]; q++) {
    const double *row = sos + q * SS_LIVE_SOS_COLS;
    if (row[3] != 1.0)
      st = ss_fail(r->ctx, SS_ERR_INPUT, "%s: %s: expected a0 = 1, got %g at [%" PRId64 ", 3]", r->file, sos_path,
                   row[3], q);
    f->sos[q] = (ss_biquad){row[0], row[1], row[2], row[4], row[5]};
  }
  free(sos);
  SS_TRY(st);
  f->n_sections = (int)dims[0];
  f->rate_hz = m->rate_hz;
  SS_TRY(read_attr(r, grp, "order", 1, SS_FILTER_MAX_ORDER, 1, &v));
  f->order = (int)v;
  SS_TRY(read_attr(r, grp, "low_hz", 0, m->rate_hz / 2, 0, &f->low_hz));
  return read_attr(r, grp, "high_hz", 0, m->rate_hz / 2, 0, &f->high_hz);
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* The detection graph: /probe/connected and the symmetric CSR of /probe/adjacency. */
static ss_status load_graph(reader *r, ss_live_model *m) {
  const int C = m->n_channels;
  int64_t cd[1] = {C}, ad[2] = {SS_LIVE_FREE_DIM, 2};
  int32_t *conn = NULL, *edges = NULL;
  SS_TRY(read_array(r, "/probe/connected", &T_I32, 1, cd, "C", (void **)&conn));
  ss_status st = read_array(r, "/probe/adjacency", &T_I32, 2, ad, "E", (void **)&edges);
  ss_detect_graph *g = &m->graph;
  memset(g, 0, sizeof(*g));
  g->n_channels = C;
  if (st == SS_OK && (SS_CALLOC(r->ctx, g->use, (size_t)C, "channel flags") || SS_CALLOC(r->ctx, g->adj_start, (size_t)C + 1, "adjacency") ||
                      SS_ALLOC(r->ctx, g->adj, (size_t)(2 * ad[0] > 0 ? 2 * ad[0] : 1), "adjacency")))
    st = SS_ERR_NOMEM;
  for (int c = 0; st == SS_OK && c < C; c++) {
    if (conn[c] != 0 && conn[c] != 1)
      st = ss_fail(r->ctx, SS_ERR_INPUT, "%s: /probe/connected: expected 0 or 1, got %d at [%d]", r->file, (int)conn[c], c);
    g->use[c] = conn[c];
  }
  for (int64_t e = 0; st == SS_OK && e < ad[0]; e++) {
    int a = edges[2 * e], b = edges[2 * e + 1];
    if (a < 0 || a >= C || b < 0 || b >= C || a == b)
      st = ss_fail(r->ctx, SS_ERR_INPUT, "%s: /probe/adjacency: expected two different channels in [0, %d), got (%d, %d) at [%" PRId64 "]",
                   r->file, C, a, b, e);
    else {
      g->adj_start[a + 1]++;
      g->adj_start[b + 1]++;
    }
  }
  for (int c = 0; st == SS_OK && c < C; c++) g->adj_start[c + 1] += g->adj_start[c];
  int *fill = NULL;
  if (st == SS_OK) st = SS_ALLOC(r->ctx, fill, (size_t)C, "adjacency");
  for (int c = 0; st == SS_OK && c < C; c++) fill[c] = g->adj_start[c];
  for (int64_t e = 0; st == SS_OK && e < ad[0]; e++) {
    g->adj[fill[edges[2 * e]]++] = edges[2 * e + 1];
    g->adj[fill[edges[2 * e + 1]]++] = edges[2 * e];
  }
  for (int c = 0; st == SS_OK && c < C; c++)
    qsort(g->adj + g->adj_start[c], (size_t)(g->adj_start[c + 1] - g->adj_start[c]), sizeof(int), cmp_int);
  free(fill);
  free(conn);
  free(edges);
  return st;
}

/* Causal noise levels (0 on excluded channels) and thresholds (+inf there). */
static ss_status load_thresholds(reader *r, ss_live_model *m) {
  ss_thresholds *t = &m->thresholds;
  memset(t, 0, sizeof(*t));
  t->n_channels = m->n_channels;
  t->polarity = m->polarity;
  int64_t d[3][1] = {{m->n_channels}, {m->n_channels}, {m->n_channels}};
  SS_TRY(read_f32(r, "/live/sigma", 1, d[0], "C", 0, INFINITY, 0, "finite values >= 0", &t->sigma));
  SS_TRY(read_f32(r, "/live/weak", 1, d[1], "C", 0, INFINITY, 1, "values >= 0 (+inf: excluded)", &t->weak));
  return read_f32(r, "/live/strong", 1, d[2], "C", 0, INFINITY, 1, "values >= 0 (+inf: excluded)", &t->strong);
}

static ss_status load_pca(reader *r, ss_live_model *m) {
  ss_pca *p = &m->pca;
  memset(p, 0, sizeof(*p));
  p->n_channels = m->n_channels;
  p->n_pcs = m->n_pcs;
  p->n_wave = m->n_wave;
  int64_t bd[3] = {m->n_channels, m->n_pcs, m->n_wave}, ed[2] = {m->n_channels, m->n_pcs};
  SS_TRY(read_f32(r, "/live/pca_basis", 3, bd, "?", -INFINITY, INFINITY, 0, "finite values", &p->basis));
  return read_f64(r, "/live/pca_eigenvalues", 2, ed, -INFINITY, INFINITY, "finite values", &p->eigenvalues);
}

static int cmp_i32(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x > y) - (x < y);
}

static ss_status load_units(reader *r, ss_live_model *m) {
  const int64_t C = m->n_channels, D = C * m->n_pcs;
  int64_t ud[1] = {SS_LIVE_FREE_DIM};
  SS_TRY(read_array(r, "/live/unit_id", &T_I32, 1, ud, "K", (void **)&m->unit_id));
  m->k = ud[0];
  if (m->k < 1) return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /live/unit_id: expected at least one unit, got 0", r->file);
  for (int64_t u = 0; u < m->k; u++)
    if (m->unit_id[u] < 0 || (u > 0 && m->unit_id[u] < m->unit_id[u - 1]))
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /live/unit_id: expected non-decreasing ids >= 0, got %d at [%" PRId64 "]",
                     r->file, (int)m->unit_id[u], u);
  int64_t cd[2] = {m->k, D}, md[2] = {m->k, C};
  SS_TRY(read_f32(r, "/live/centroid", 2, cd, "K", -INFINITY, INFINITY, 0, "finite values", &m->centroid));
  return read_f32(r, "/live/mean_mask", 2, md, "K", 0, 1, 0, "values in [0, 1]", &m->mean_mask);
}

static ss_status load_reference(reader *r, ss_live_model *m) {
  const int64_t C = m->n_channels, D = C * m->n_pcs;
  int64_t ld[1] = {SS_LIVE_FREE_DIM};
  SS_TRY(read_array(r, "/live/ref_labels", &T_I32, 1, ld, "M", (void **)&m->ref_labels));
  m->n_ref = ld[0];
  for (int64_t i = 0; i < m->n_ref; i++)
    if (!bsearch(&m->ref_labels[i], m->unit_id, (size_t)m->k, sizeof(int32_t), cmp_i32))
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /live/ref_labels: expected one of /live/unit_id, got %d at [%" PRId64 "]",
                     r->file, (int)m->ref_labels[i], i);
  int64_t fd[2] = {m->n_ref, D}, md[2] = {m->n_ref, C}, td[1] = {m->n_ref};
  SS_TRY(read_f32(r, "/live/ref_features", 2, fd, "M", -INFINITY, INFINITY, 0, "finite values", &m->ref_features));
  SS_TRY(read_f32(r, "/live/ref_masks", 2, md, "M", 0, 1, 0, "values in [0, 1]", &m->ref_masks));
  SS_TRY(read_array(r, "/live/ref_times", &T_I64, 1, td, "M", (void **)&m->ref_times));
  for (int64_t i = 0; i < m->n_ref; i++)
    if (m->ref_times[i] < 0)
      return ss_fail(r->ctx, SS_ERR_INPUT, "%s: /live/ref_times: expected >= 0, got %" PRId64 " at [%" PRId64 "]", r->file,
                     m->ref_times[i], i);
  return SS_OK;
}

static ss_status load_all(reader *r, ss_live_model *m) {
  if (!ss_h5_is_group(r->f, "/live"))
    return ss_fail(r->ctx, SS_ERR_INPUT,
                   "%s: /live: missing: the model has no causal twin for live mode (sort it again with "
                   "sort.live_model = true)",
                   r->file);
  SS_TRY(load_root(r, m));
  SS_TRY(load_filter(r, m));
  SS_TRY(load_graph(r, m));
  SS_TRY(load_thresholds(r, m));
  SS_TRY(load_pca(r, m));
  SS_TRY(load_units(r, m));
  return load_reference(r, m);
}

ss_status ss_live_model_load(ss_ctx *ctx, const char *path, ss_live_model *m) {
  memset(m, 0, sizeof(*m));
  ss_h5_quiet();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open as an HDF5 model file", path);
  reader r = {ctx, f, path};
  ss_status st = load_all(&r, m);
  H5Fclose(f);
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
