/* compare.c — ground-truth comparison (compare.h): spike matching, agreement, Hungarian assignment,
 * unit categories, the printed table and the JSON document. Loading spike trains: compare_load.c. */
#include "tools/compare.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"

void ss_compare_opts_defaults(ss_compare_opts *o) {
  o->window_ms = 0.4;
  o->match_score = 0.5;
  o->chance_score = 0.1;
  o->well_detected = 0.8;
  o->redundant_score = 0.2;
  o->overmerged_score = 0.2;
  o->snr_threshold = 8.0;
}

void ss_spike_trains_free(ss_spike_trains *t) {
  free(t->unit_id);
  free(t->start);
  free(t->times);
  free(t->snr);
  memset(t, 0, sizeof(*t));
}

/* --- building trains from labelled spikes ------------------------------------------------------ */

typedef struct {
  int64_t label, time;
} labelled;

static int cmp_labelled(const void *pa, const void *pb) {
  const labelled *a = pa, *b = pb;
  if (a->label != b->label) return a->label < b->label ? -1 : 1;
  return (a->time > b->time) - (a->time < b->time);
}

ss_status ss_spike_trains_from_labels(ss_ctx *ctx, int64_t n, const int64_t *times, const int64_t *labels,
                                      double rate_hz, const char *source, ss_spike_trains *out) {
  memset(out, 0, sizeof(*out));
  snprintf(out->source, sizeof(out->source), "%s", source);
  out->rate_hz = rate_hz;
  for (int64_t i = 0; i < n; i++)
    if (times[i] < 0)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: spike %" PRId64 ": expected a sample index >= 0, got %" PRId64, source, i,
                     times[i]);
  labelled *v;
  SS_TRY(SS_ALLOC(ctx, v, n > 0 ? n : 1, "spike list"));
  for (int64_t i = 0; i < n; i++) v[i].label = labels[i], v[i].time = times[i];
  qsort(v, (size_t)n, sizeof(*v), cmp_labelled);
  int units = 0;
  for (int64_t i = 0; i < n; i++) units += i == 0 || v[i].label != v[i - 1].label;
  ss_status st = SS_OK;
  if ((st = SS_ALLOC(ctx, out->unit_id, units > 0 ? units : 1, "units")) ||
      (st = SS_ALLOC(ctx, out->start, units + 1, "units")) ||
      (st = SS_ALLOC(ctx, out->times, n > 0 ? n : 1, "spikes"))) {
    free(v);
    ss_spike_trains_free(out);
    return st;
  }
  int u = -1;
  for (int64_t i = 0; i < n; i++) {
    if (i == 0 || v[i].label != v[i - 1].label) {
      out->unit_id[++u] = v[i].label;
      out->start[u] = i;
    }
    out->times[i] = v[i].time;
  }
  out->n_units = units;
  out->start[units] = n;
  free(v);
  return SS_OK;
}

/* --- spike matching -------------------------------------------------------------------------- */

typedef struct {
  int64_t dt, i, j;
} candidate;

static int cmp_candidate(const void *pa, const void *pb) {
  const candidate *a = pa, *b = pb;
  if (a->dt != b->dt) return a->dt < b->dt ? -1 : 1;
  if (a->i != b->i) return a->i < b->i ? -1 : 1;
  return (a->j > b->j) - (a->j < b->j);
}

ss_status ss_compare_count_matches(ss_ctx *ctx, const int64_t *a, int64_t na, const int64_t *b, int64_t nb,
                                   int64_t window, int64_t *n_match) {
  *n_match = 0;
  /* candidate pairs within the window, found with a sliding lower bound over b */
  int64_t nc = 0, cap = 0, lo = 0;
  candidate *c = NULL;
  for (int64_t i = 0; i < na; i++) {
    while (lo < nb && b[lo] < a[i] - window) lo++;
    for (int64_t j = lo; j < nb && b[j] <= a[i] + window; j++) {
      if (nc == cap) {
        int64_t grown_cap = cap ? 2 * cap : 256;
        ss_status st = SS_REALLOC(ctx, c, (size_t)grown_cap, "matching spikes: candidate pairs");
        if (st != SS_OK) {
          free(c);
          return st;
        }
        cap = grown_cap;
      }
      c[nc].dt = llabs(b[j] - a[i]), c[nc].i = i, c[nc].j = j, nc++;
    }
  }
  if (nc == 0) return SS_OK;
  unsigned char *used_a = NULL;
  ss_status st = SS_CALLOC(ctx, used_a, (size_t)na + (size_t)nb, "matching spikes: flags");
  if (st != SS_OK) {
    free(c);
    return st;
  }
  unsigned char *used_b = used_a + na;
  qsort(c, (size_t)nc, sizeof(*c), cmp_candidate);
  for (int64_t k = 0; k < nc; k++) {
    if (used_a[c[k].i] || used_b[c[k].j]) continue;
    used_a[c[k].i] = used_b[c[k].j] = 1;
    ++*n_match;
  }
  free(used_a);
  free(c);
  return SS_OK;
}

/* --- Hungarian assignment -------------------------------------------------------------------- */

/* Minimum-cost assignment of every row of an n × m cost matrix (n <= m) to distinct columns:
 * Kuhn–Munkres with row/column potentials and shortest augmenting paths, O(n^2 m). 1-based work
 * arrays; column 0 is the virtual start of each augmenting path. */
static ss_status hungarian_min(ss_ctx *ctx, int n, int m, const double *cost, int *row_to_col) {
  double *u = NULL, *v = NULL, *minv = NULL;
  int *p = NULL, *way = NULL;
  unsigned char *used = NULL;
  if (SS_CALLOC(ctx, u, n + 1, "assignment") || SS_CALLOC(ctx, v, m + 1, "assignment") ||
      SS_CALLOC(ctx, minv, m + 1, "assignment") || SS_CALLOC(ctx, p, m + 1, "assignment") ||
      SS_CALLOC(ctx, way, m + 1, "assignment") || SS_CALLOC(ctx, used, m + 1, "assignment")) {
    free(u), free(v), free(minv), free(p), free(way), free(used);
    return SS_ERR_NOMEM;
  }
  for (int i = 1; i <= n; i++) {
    p[0] = i;
    int j0 = 0;
    for (int j = 0; j <= m; j++) minv[j] = DBL_MAX, used[j] = 0;
    do {
      used[j0] = 1;
      int i0 = p[j0], j1 = 0;
      double delta = DBL_MAX;
      for (int j = 1; j <= m; j++) {
        if (used[j]) continue;
        double cur = cost[(size_t)(i0 - 1) * m + (j - 1)] - u[i0] - v[j];
        if (cur < minv[j]) minv[j] = cur, way[j] = j0;
        if (minv[j] < delta) delta = minv[j], j1 = j;
      }
      for (int j = 0; j <= m; j++) {
        if (used[j]) u[p[j]] += delta, v[j] -= delta;
        else minv[j] -= delta;
      }
      j0 = j1;
    } while (p[j0] != 0);
    do {
      int j1 = way[j0];
      p[j0] = p[j1];
      j0 = j1;
    } while (j0);
  }
  for (int i = 0; i < n; i++) row_to_col[i] = -1;
  for (int j = 1; j <= m; j++)
    if (p[j]) row_to_col[p[j] - 1] = j - 1;
  free(u), free(v), free(minv), free(p), free(way), free(used);
  return SS_OK;
}

ss_status ss_hungarian_max(ss_ctx *ctx, int rows, int cols, const double *weight, int *row_to_col) {
  for (int r = 0; r < rows; r++) row_to_col[r] = -1;
  if (rows == 0 || cols == 0) return SS_OK;
  int transpose = rows > cols, n = transpose ? cols : rows, m = transpose ? rows : cols;
  double *cost;
  int *assign;
  SS_TRY(SS_ALLOC(ctx, cost, (size_t)n * m, "assignment"));
  if (SS_ALLOC(ctx, assign, n, "assignment")) {
    free(cost);
    return SS_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++)
    for (int j = 0; j < m; j++)
      cost[(size_t)i * m + j] = -(transpose ? weight[(size_t)j * cols + i] : weight[(size_t)i * cols + j]);
  ss_status st = hungarian_min(ctx, n, m, cost, assign);
  if (st == SS_OK)
    for (int i = 0; i < n; i++) {
      if (assign[i] < 0) continue;
      if (transpose) row_to_col[assign[i]] = i;
      else row_to_col[i] = assign[i];
    }
  free(cost);
  free(assign);
  return st;
}

/* --- the comparison -------------------------------------------------------------------------- */

void ss_comparison_free(ss_comparison *c) {
  free(c->n_match), free(c->agreement), free(c->match_gt), free(c->match_sorted), free(c->best_gt);
  free(c->best_sorted), free(c->accuracy), free(c->precision), free(c->recall), free(c->false_positive);
  free(c->redundant), free(c->overmerged);
  memset(c, 0, sizeof(*c));
}

static int64_t n_spikes(const ss_spike_trains *t, int u) { return t->start[u + 1] - t->start[u]; }

static ss_status alloc_comparison(ss_ctx *ctx, ss_comparison *c, int G, int S) {
  size_t gs = (size_t)(G > 0 ? G : 1) * (size_t)(S > 0 ? S : 1), g = G > 0 ? (size_t)G : 1, s = S > 0 ? (size_t)S : 1;
  c->n_gt = G, c->n_sorted = S;
  if (SS_CALLOC(ctx, c->n_match, gs, "comparison") || SS_CALLOC(ctx, c->agreement, gs, "comparison") ||
      SS_CALLOC(ctx, c->match_gt, g, "comparison") || SS_CALLOC(ctx, c->best_gt, g, "comparison") ||
      SS_CALLOC(ctx, c->accuracy, g, "comparison") || SS_CALLOC(ctx, c->precision, g, "comparison") ||
      SS_CALLOC(ctx, c->recall, g, "comparison") || SS_CALLOC(ctx, c->match_sorted, s, "comparison") ||
      SS_CALLOC(ctx, c->best_sorted, s, "comparison") || SS_CALLOC(ctx, c->false_positive, s, "comparison") ||
      SS_CALLOC(ctx, c->redundant, s, "comparison") || SS_CALLOC(ctx, c->overmerged, s, "comparison")) {
    ss_comparison_free(c);
    return SS_ERR_NOMEM;
  }
  return SS_OK;
}

/* The sorted times on the GT's time base (a copy; identical when the rates agree). */
static ss_status rescaled_times(ss_ctx *ctx, const ss_spike_trains *gt, const ss_spike_trains *sorted, int64_t **out) {
  int64_t n = sorted->start[sorted->n_units];
  SS_TRY(SS_ALLOC(ctx, *out, n > 0 ? n : 1, "rescaled spike times"));
  double f = gt->rate_hz / sorted->rate_hz;
  for (int64_t i = 0; i < n; i++) (*out)[i] = f == 1.0 ? sorted->times[i] : llround((double)sorted->times[i] * f);
  return SS_OK;
}

static ss_status agreement_matrix(ss_ctx *ctx, const ss_spike_trains *gt, const ss_spike_trains *sorted,
                                  const int64_t *stimes, ss_comparison *c) {
  int S = c->n_sorted;
  for (int i = 0; i < c->n_gt; i++)
    for (int j = 0; j < S; j++) {
      int64_t na = n_spikes(gt, i), nb = n_spikes(sorted, j), m;
      SS_TRY(ss_compare_count_matches(ctx, gt->times + gt->start[i], na, stimes + sorted->start[j], nb,
                                      c->window_samples, &m));
      c->n_match[(size_t)i * S + j] = m;
      int64_t denom = na + nb - m;
      c->agreement[(size_t)i * S + j] = denom > 0 ? (double)m / (double)denom : 0.0;
    }
  return SS_OK;
}

/* Hungarian on the agreement with pairs below match_score zeroed, then such pairs dropped. */
static ss_status assign_units(ss_ctx *ctx, const ss_compare_opts *o, ss_comparison *c) {
  int G = c->n_gt, S = c->n_sorted;
  for (int j = 0; j < S; j++) c->match_sorted[j] = -1;
  if (G == 0 || S == 0) {
    for (int i = 0; i < G; i++) c->match_gt[i] = -1;
    return SS_OK;
  }
  double *w;
  SS_TRY(SS_ALLOC(ctx, w, (size_t)G * S, "assignment"));
  for (size_t k = 0; k < (size_t)G * S; k++) w[k] = c->agreement[k] >= o->match_score ? c->agreement[k] : 0.0;
  ss_status st = ss_hungarian_max(ctx, G, S, w, c->match_gt);
  free(w);
  SS_TRY(st);
  for (int i = 0; i < G; i++) {
    int j = c->match_gt[i];
    if (j >= 0 && c->agreement[(size_t)i * S + j] < o->match_score) j = c->match_gt[i] = -1;
    if (j >= 0) c->match_sorted[j] = i;
  }
  return SS_OK;
}

/* Best match of every unit on each side at >= chance score (first maximum, as numpy's argmax). */
static void best_matches(const ss_compare_opts *o, ss_comparison *c) {
  int G = c->n_gt, S = c->n_sorted;
  for (int i = 0; i < G; i++) {
    int best = -1;
    for (int j = 0; j < S; j++)
      if (best < 0 || c->agreement[(size_t)i * S + j] > c->agreement[(size_t)i * S + best]) best = j;
    c->best_gt[i] = best >= 0 && c->agreement[(size_t)i * S + best] >= o->chance_score ? best : -1;
  }
  for (int j = 0; j < S; j++) {
    int best = -1;
    for (int i = 0; i < G; i++)
      if (best < 0 || c->agreement[(size_t)i * S + j] > c->agreement[(size_t)best * S + j]) best = i;
    c->best_sorted[j] = best >= 0 && c->agreement[(size_t)best * S + j] >= o->chance_score ? best : -1;
  }
}

static void performance(const ss_spike_trains *gt, const ss_spike_trains *sorted, const ss_compare_opts *o,
                        ss_comparison *c) {
  int S = c->n_sorted;
  double sum_all = 0, sum_snr = 0;
  for (int i = 0; i < c->n_gt; i++) {
    int j = c->match_gt[i];
    c->accuracy[i] = c->precision[i] = c->recall[i] = 0;
    if (j >= 0) {
      double tp = (double)c->n_match[(size_t)i * S + j];
      double fn = (double)n_spikes(gt, i) - tp, fp = (double)n_spikes(sorted, j) - tp;
      if (tp > 0) {
        c->accuracy[i] = tp / (tp + fn + fp);
        c->recall[i] = tp / (tp + fn);
        c->precision[i] = tp / (tp + fp);
      }
      c->well_detected += c->agreement[(size_t)i * S + j] >= o->well_detected;
    }
    sum_all += c->accuracy[i];
    if (gt->snr && !isnan(gt->snr[i]) && gt->snr[i] > o->snr_threshold) {
      c->n_snr_above++;
      sum_snr += c->accuracy[i];
    }
  }
  c->mean_accuracy = c->n_gt ? sum_all / c->n_gt : NAN;
  c->mean_accuracy_snr_above = c->n_snr_above ? sum_snr / c->n_snr_above : NAN;
}

static void categories(const ss_compare_opts *o, ss_comparison *c) {
  int G = c->n_gt, S = c->n_sorted;
  for (int j = 0; j < S; j++) {
    int b = c->best_sorted[j];
    double score = b >= 0 ? c->agreement[(size_t)b * S + j] : 0.0;
    if (c->match_sorted[j] < 0) {
      c->false_positive[j] = b < 0 || score < o->redundant_score;
      c->redundant[j] = b >= 0 && c->best_gt[b] != j && score >= o->redundant_score;
    }
    int above = 0;
    for (int i = 0; i < G; i++) above += c->agreement[(size_t)i * S + j] > o->overmerged_score;
    c->overmerged[j] = above > 1;
    c->n_false_positive += c->false_positive[j];
    c->n_redundant += c->redundant[j];
    c->n_overmerged += c->overmerged[j];
  }
}

ss_status ss_compare_run(ss_ctx *ctx, const ss_spike_trains *gt, const ss_spike_trains *sorted,
                         const ss_compare_opts *o, ss_comparison *out) {
  memset(out, 0, sizeof(*out));
  if (!(gt->rate_hz > 0) || !(sorted->rate_hz > 0))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: no sample rate known (give --rate HZ)",
                   gt->rate_hz > 0 ? sorted->source : gt->source);
  if (!(o->window_ms >= 0) || !(o->window_ms <= SS_COMPARE_MAX_WINDOW_MS))
    return ss_fail(ctx, SS_ERR_INPUT, "window_ms: expected a number in [0, %g], got %g", SS_COMPARE_MAX_WINDOW_MS,
                   o->window_ms);
  double window = o->window_ms / 1000.0 * gt->rate_hz;
  if (!(window <= SS_COMPARE_MAX_WINDOW_SAMPLES))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: sample rate %g Hz: a %g ms window is %g samples (at most %g)", gt->source,
                   gt->rate_hz, o->window_ms, window, SS_COMPARE_MAX_WINDOW_SAMPLES);
  SS_TRY(alloc_comparison(ctx, out, gt->n_units, sorted->n_units));
  /* SpikeInterface: delta_frames = int(delta_time / 1000 * rate); the epsilon absorbs 0.4e-3 * 3e4 = 11.999... */
  out->window_samples = (int64_t)floor(window + 1e-9);
  int64_t *stimes = NULL;
  ss_status st = rescaled_times(ctx, gt, sorted, &stimes);
  if (st == SS_OK) st = agreement_matrix(ctx, gt, sorted, stimes, out);
  free(stimes);
  if (st == SS_OK) st = assign_units(ctx, o, out);
  if (st != SS_OK) {
    ss_comparison_free(out);
    return st;
  }
  best_matches(o, out);
  performance(gt, sorted, o, out);
  categories(o, out);
  return SS_OK;
}

/* --- output ---------------------------------------------------------------------------------- */

void ss_compare_print(FILE *f, const ss_spike_trains *gt, const ss_spike_trains *sorted, const ss_compare_opts *o,
                      const ss_comparison *c) {
  fprintf(f,
          "ground truth: %s (%d units)\nsorted:       %s (%d units)\nwindow:       %g ms (%" PRId64
          " samples at %g Hz)\n\n",
          gt->source, gt->n_units, sorted->source, sorted->n_units, o->window_ms, c->window_samples, gt->rate_hz);
  fprintf(f, "%8s %8s %9s %9s %9s %7s %8s %8s\n", "gt_unit", "sorted", "accuracy", "precision", "recall", "snr", "n_gt",
          "n_sorted");
  for (int i = 0; i < c->n_gt; i++) {
    int j = c->match_gt[i];
    char sorted_id[32] = "-", snr[32] = "-";
    if (j >= 0) snprintf(sorted_id, sizeof(sorted_id), "%" PRId64, sorted->unit_id[j]);
    if (gt->snr && !isnan(gt->snr[i])) snprintf(snr, sizeof(snr), "%.2f", gt->snr[i]);
    fprintf(f, "%8" PRId64 " %8s %9.4f %9.4f %9.4f %7s %8" PRId64 " %8" PRId64 "\n", gt->unit_id[i], sorted_id,
            c->accuracy[i], c->precision[i], c->recall[i], snr, n_spikes(gt, i), j >= 0 ? n_spikes(sorted, j) : 0);
  }
  fprintf(f, "\nwell detected (accuracy >= %g): %d of %d\n", o->well_detected, c->well_detected, c->n_gt);
  fprintf(f, "false positive units: %d, redundant: %d, over-merged: %d\n", c->n_false_positive, c->n_redundant,
          c->n_overmerged);
  if (c->n_snr_above)
    fprintf(f, "mean accuracy over %d units with SNR > %g: %.4f\n", c->n_snr_above, o->snr_threshold,
            c->mean_accuracy_snr_above);
  else
    fprintf(f, "mean accuracy over units with SNR > %g: n/a (no such unit, or no SNR in the ground truth)\n",
            o->snr_threshold);
  fprintf(f, "mean accuracy over all %d units: %.4f\n", c->n_gt, c->n_gt ? c->mean_accuracy : 0.0);
}

static void json_number(FILE *f, double v) {
  if (isnan(v) || isinf(v)) fputs("null", f);
  else fprintf(f, "%.10g", v);
}

static void json_id_list(FILE *f, const char *key, const ss_spike_trains *sorted, const int *flag, int n) {
  fprintf(f, "    \"%s\": [", key);
  int first = 1;
  for (int j = 0; j < n; j++)
    if (flag[j]) fprintf(f, "%s%" PRId64, first ? "" : ", ", sorted->unit_id[j]), first = 0;
  fprintf(f, "]");
}

static void write_json(FILE *f, const ss_spike_trains *gt, const ss_spike_trains *sorted, const ss_compare_opts *o,
                       const ss_comparison *c) {
  fprintf(f, "{\n  \"units\": [");
  for (int i = 0; i < c->n_gt; i++) {
    int j = c->match_gt[i];
    fprintf(f, "%s\n    {\"gt_unit\": %" PRId64 ", \"sorted_unit\": ", i ? "," : "", gt->unit_id[i]);
    if (j >= 0) fprintf(f, "%" PRId64, sorted->unit_id[j]);
    else fputs("null", f);
    fputs(", \"accuracy\": ", f);
    json_number(f, c->accuracy[i]);
    fputs(", \"precision\": ", f);
    json_number(f, c->precision[i]);
    fputs(", \"recall\": ", f);
    json_number(f, c->recall[i]);
    fputs(", \"snr\": ", f);
    json_number(f, gt->snr ? gt->snr[i] : NAN);
    fprintf(f, ", \"n_gt\": %" PRId64 ", \"n_sorted\": %" PRId64 "}", n_spikes(gt, i),
            j >= 0 ? n_spikes(sorted, j) : 0);
  }
  fprintf(f, "%s],\n  \"summary\": {\n", c->n_gt ? "\n  " : "");
  fprintf(f, "    \"n_gt_units\": %d,\n    \"n_sorted_units\": %d,\n", c->n_gt, c->n_sorted);
  fprintf(f,
          "    \"well_detected\": %d,\n    \"false_positive\": %d,\n    \"redundant\": %d,\n    \"overmerged\": %d,\n",
          c->well_detected, c->n_false_positive, c->n_redundant, c->n_overmerged);
  fputs("    \"mean_accuracy_snr_gt_8\": ", f);
  json_number(f, c->mean_accuracy_snr_above);
  fprintf(f, ",\n    \"n_units_snr_gt_8\": %d,\n    \"mean_accuracy\": ", c->n_snr_above);
  json_number(f, c->mean_accuracy);
  fprintf(f, ",\n    \"window_ms\": %.10g,\n    \"window_samples\": %" PRId64 ",\n    \"sample_rate\": %.10g,\n",
          o->window_ms, c->window_samples, gt->rate_hz);
  json_id_list(f, "false_positive_units", sorted, c->false_positive, c->n_sorted);
  fputs(",\n", f);
  json_id_list(f, "redundant_units", sorted, c->redundant, c->n_sorted);
  fputs(",\n", f);
  json_id_list(f, "overmerged_units", sorted, c->overmerged, c->n_sorted);
  fputs("\n  }\n}\n", f);
}

ss_status ss_compare_write_json(ss_ctx *ctx, const char *path, const ss_spike_trains *gt, const ss_spike_trains *sorted,
                                const ss_compare_opts *opts, const ss_comparison *c) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  write_json(af.f, gt, sorted, opts, c);
  if (ferror(af.f)) {
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed (disk full?)", path);
  }
  return ss_atomic_commit(ctx, &af);
}
