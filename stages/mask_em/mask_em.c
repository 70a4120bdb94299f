/* mask_em.c — the masked EM driver (docs/mask_em.md): starts, the iteration loop (full step,
 * deletion, scheduled split rounds), convergence and cycle detection, the per-iteration log, and
 * the backend dispatch. The steps themselves live in mask_em_step.c, mask_em_state.c and
 * mask_em_split.c; preprocessing in mask_em_prep.c. */
#include "stages/mask_em/mask_em.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/kmeans/kmeans.h"
#include "core/log.h"
#include "stages/mask_em/mask_em_internal.h"

#define MAX_HISTORY 1000000 /* labellings remembered for cycle detection */

const char *ss_mask_em_stop_name(int stop) {
  switch (stop) {
    case SS_EM_STOP_CONVERGED: return "converged";
    case SS_EM_STOP_CYCLE: return "cycle";
    case SS_EM_STOP_MAX_ITER: return "max_iterations";
    case SS_EM_STOP_FAST: return "fast preset criterion";
    default: return "?";
  }
}

void ss_mask_em_result_free(ss_mask_em_result *res) {
  free(res->labels);
  free(res->log);
  memset(res, 0, sizeof(*res));
}

/* ---- starts ------------------------------------------------------------------------------------ */

static ss_status start_clu(ss_ctx *ctx, const ss_mask_em_opts *o, ss_mask_em_state *st, int64_t *k) {
  if (!o->start_labels) return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM: start = clu without starting labels");
  int64_t mx = 0;
  for (int64_t j = 0; j < st->n; j++) {
    if (o->start_labels[j] < 0)
      return ss_fail(ctx, SS_ERR_INPUT, "masked EM: starting label of point %" PRId64 ": %d is negative", j + 1,
                     (int)o->start_labels[j]);
    st->labels[j] = o->start_labels[j];
    if (o->start_labels[j] > mx) mx = o->start_labels[j];
  }
  *k = mx + 1;
  return SS_OK;
}

/* k-means on the dense corrected data (y = ν on masked features), k = K0 − 1 Gaussian clusters. */
static ss_status start_kmeans(ss_ctx *ctx, const ss_mask_em_data *dt, const ss_mask_em_opts *o, int n_threads,
                              ss_mask_em_state *st, int64_t *k) {
  float *y = NULL;
  int64_t n = dt->n, d = dt->d;
  SS_TRY(SS_ALLOC(ctx, y, (size_t)(n * d), "k-means start data"));
  for (int64_t p = 0; p < n; p++) {
    for (int64_t i = 0; i < d; i++) y[p * d + i] = (float)dt->nu[i];
    for (int64_t e = dt->row[p]; e < dt->row[p + 1]; e++) y[p * d + dt->feat[e]] = dt->y[e];
  }
  ss_params p;
  ss_params_defaults(&p);
  ss_kmeans_opts ko;
  ss_kmeans_opts_from_params(&ko, &p);
  ko.k = o->num_starting_clusters - 1 < n ? o->num_starting_clusters - 1 : n;
  ko.seed = o->seed;
  ss_backend be = {.kind = SS_DEVICE_CPU, .n_threads = n_threads};
  ss_kmeans_result r;
  ss_status s = ss_kmeans_fit(ctx, &be, y, n, d, &ko, &r);
  free(y);
  SS_TRY(s);
  for (int64_t j = 0; j < n; j++) st->labels[j] = r.labels[j] + 1;
  *k = ko.k + 1;
  ss_kmeans_result_free(&r);
  return SS_OK;
}

ss_status ss_em_start_labels(ss_ctx *ctx, const ss_mask_em_data *dt, const ss_mask_em_opts *o, int n_threads,
                             ss_mask_em_state *st) {
  int64_t k = 0;
  switch (o->start) {
    case SS_EM_START_CLU: SS_TRY(start_clu(ctx, o, st, &k)); break;
    case SS_EM_START_KMEANS: SS_TRY(start_kmeans(ctx, dt, o, n_threads, st, &k)); break;
    default: SS_TRY(ss_mask_em_start_masks(ctx, dt, o->num_starting_clusters, o->seed, st->labels, &k)); break;
  }
  if (k < 2) k = 2; /* at least one Gaussian slot */
  return ss_mask_em_state_set_k(ctx, st, k);
}

/* ---- the loop ------------------------------------------------------------------------------------ */

typedef struct {
  ss_mask_em_state st, trial;
  ss_mask_em_data data;
  int32_t *prev;
  uint64_t *hashes;
  int64_t n_hashes, hash_cap;
  ss_mask_em_result *res;
  int64_t log_cap, split_rounds;
} em_run;

static ss_status log_push(ss_ctx *ctx, em_run *r, const ss_mask_em_iter_log *e) {
  ss_mask_em_result *res = r->res;
  if (res->n_log == r->log_cap) {
    int64_t cap = r->log_cap ? 2 * r->log_cap : 64;
    SS_TRY(SS_REALLOC(ctx, res->log, (size_t)cap, "masked EM: iteration log"));
    r->log_cap = cap;
  }
  res->log[res->n_log++] = *e;
  if (e->step == SS_EM_STEP_FULL)
    ss_log_info(ctx,
                "masked EM: iteration %" PRId64 ": score %.6f, %" PRId64 " clusters, %" PRId64 " changed, %" PRId64
                " deleted, %" PRId64 " Cholesky failures, %.3f s",
                e->iteration, e->score, e->n_clusters, e->changed, e->deletions, e->chol_failures, e->seconds);
  else
    ss_log_info(ctx,
                "masked EM: iteration %" PRId64 ": split round: %" PRId64 " tried, %" PRId64
                " accepted, score %.6f, %" PRId64 " clusters, %.3f s",
                e->iteration, e->splits_tried, e->splits_accepted, e->score, e->n_clusters, e->seconds);
  return SS_OK;
}

/* Non-empty Gaussian clusters of the current labelling, plus the noise cluster. */
static int64_t live_clusters(ss_mask_em_state *st) {
  ss_mask_em_group(st);
  int64_t live = 1;
  for (int64_t c = 1; c < st->model.k; c++) live += st->model.count[c] > 0;
  return live;
}

/* Did this labelling occur before? Records it. */
static int seen_before(em_run *r) {
  uint64_t h = ss_em_labels_hash(&r->st);
  int seen = 0;
  for (int64_t i = 0; i < r->n_hashes; i++) seen |= r->hashes[i] == h;
  if (r->n_hashes < r->hash_cap) r->hashes[r->n_hashes++] = h;
  return seen;
}

/* One full iteration: compaction, M, E, C, deletion, score. */
static ss_status full_iteration(ss_ctx *ctx, em_run *r, int64_t it, ss_mask_em_iter_log *e) {
  ss_mask_em_state *st = &r->st;
  ss_mask_em_result *res = r->res;
  double t0 = ss_now();
  ss_mask_em_compact(st);
  memcpy(r->prev, st->labels, sizeof(int32_t) * (size_t)st->n);
  SS_TRY(ss_mask_em_mstep(ctx, st));
  double t1 = ss_now();
  SS_TRY(ss_mask_em_estep(ctx, st));
  double t2 = ss_now();
  ss_mask_em_cstep(st);
  int64_t deleted = 0, changed = 0;
  SS_TRY(ss_mask_em_delete(ctx, st, NULL, &deleted));
  for (int64_t j = 0; j < st->n; j++) changed += st->labels[j] != r->prev[j];
  double score = ss_mask_em_score(st), t3 = ss_now();
  if (!isfinite(score))
    return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM: iteration %" PRId64 ": the score is not finite (%g)", it, score);
  res->t_mstep_s += t1 - t0;
  res->t_estep_s += t2 - t1;
  res->t_cstep_s += t3 - t2;
  res->n_deletions += deleted;
  res->n_chol_failures += st->n_chol_fail;
  *e = (ss_mask_em_iter_log){.iteration = it,
                             .step = SS_EM_STEP_FULL,
                             .score = score,
                             .n_clusters = live_clusters(st),
                             .changed = changed,
                             .deletions = deleted,
                             .chol_failures = st->n_chol_fail,
                             .seconds = t3 - t0};
  return log_push(ctx, r, e);
}

/* A split round after iteration `it`; a refit on the current labels first gives the reference
 * (unless the last full step changed nothing: then its score is exactly that). */
static ss_status split_step(ss_ctx *ctx, em_run *r, int64_t it, const ss_mask_em_iter_log *full, int64_t *accepted,
                            double *score) {
  double t0 = ss_now(), ref = full->score;
  int64_t tried = 0, changed;
  *accepted = 0;
  if (r->st.model.k >= r->st.opts->max_possible_clusters - 1) return SS_OK;
  if (full->changed != 0) {
    SS_TRY(ss_em_full_step(ctx, &r->st, &changed));
    ref = ss_mask_em_score(&r->st);
  }
  SS_TRY(ss_mask_em_split_round(ctx, &r->st, &r->trial, r->split_rounds++, &ref, &tried, accepted));
  *score = ref;
  ss_mask_em_result *res = r->res;
  res->t_split_s += ss_now() - t0;
  res->n_splits_tried += tried;
  res->n_splits_accepted += *accepted;
  ss_mask_em_iter_log e = {.iteration = it,
                           .step = SS_EM_STEP_SPLIT,
                           .score = ref,
                           .n_clusters = live_clusters(&r->st),
                           .splits_tried = tried,
                           .splits_accepted = *accepted,
                           .seconds = ss_now() - t0};
  return log_push(ctx, r, &e);
}

static int split_due(const ss_mask_em_opts *o, int64_t it, int64_t changed) {
  if (changed == 0 || it == o->split_first) return 1;
  return it > o->split_first && (it - o->split_first) % o->split_every == 0;
}

ss_status ss_em_drive(ss_ctx *ctx, const ss_mask_em_opts *o, const ss_em_driver *d, ss_mask_em_result *res) {
  double prev_score = NAN;
  for (int64_t it = 1;; it++) {
    if (it > o->max_iterations) {
      res->stop = SS_EM_STOP_MAX_ITER;
      return SS_OK;
    }
    ss_mask_em_iter_log e;
    SS_TRY(d->full_iteration(ctx, d->self, it, &e));
    if (o->on_iteration) o->on_iteration(o->on_iteration_user, &e);
    res->n_iterations = it;
    res->score = e.score;
    int cycle = 0;
    if (e.changed != 0) SS_TRY(d->seen_before(ctx, d->self, &cycle));
    if (o->fast && ((double)e.changed < o->fast_change_fraction * (double)d->n ||
                    fabs(e.score - prev_score) < o->fast_score_delta)) {
      res->stop = SS_EM_STOP_FAST;
      return SS_OK;
    }
    prev_score = e.score;
    int64_t accepted = 0;
    if (split_due(o, it, e.changed) || cycle) SS_TRY(d->split_step(ctx, d->self, it, &e, &accepted, &res->score));
    if (e.changed == 0 && accepted == 0) {
      res->stop = SS_EM_STOP_CONVERGED;
      return SS_OK;
    }
    if (cycle) {
      res->stop = SS_EM_STOP_CYCLE;
      return SS_OK;
    }
  }
}

static ss_status cpu_full_iteration(ss_ctx *ctx, void *self, int64_t it, ss_mask_em_iter_log *e) {
  return full_iteration(ctx, self, it, e);
}
static ss_status cpu_seen_before(ss_ctx *ctx, void *self, int *seen) {
  (void)ctx;
  *seen = seen_before(self);
  return SS_OK;
}
static ss_status cpu_split_step(ss_ctx *ctx, void *self, int64_t it, const ss_mask_em_iter_log *full, int64_t *accepted,
                                double *score) {
  return split_step(ctx, self, it, full, accepted, score);
}

static ss_status iterate(ss_ctx *ctx, em_run *r) {
  ss_em_driver d = {.self = r,
                    .full_iteration = cpu_full_iteration,
                    .seen_before = cpu_seen_before,
                    .split_step = cpu_split_step,
                    .n = r->st.n};
  return ss_em_drive(ctx, r->st.opts, &d, r->res);
}

static ss_status run_alloc(ss_ctx *ctx, em_run *r, const ss_mask_em_opts *o, int n_threads) {
  int64_t n = r->data.n, k0 = o->num_starting_clusters;
  SS_TRY(ss_mask_em_state_init(ctx, &r->st, &r->data, o, NULL, n, 1, k0, n_threads));
  SS_TRY(ss_mask_em_state_init(ctx, &r->trial, &r->data, o, NULL, n, 1, k0, n_threads));
  SS_TRY(SS_ALLOC(ctx, r->prev, (size_t)n, "masked EM previous labels"));
  r->hash_cap = o->max_iterations < MAX_HISTORY ? o->max_iterations + 1 : MAX_HISTORY;
  SS_TRY(SS_ALLOC(ctx, r->hashes, (size_t)r->hash_cap, "masked EM labelling history"));
  return SS_ALLOC(ctx, r->res->labels, (size_t)n, "masked EM result labels");
}

ss_status ss_mask_em_fit_cpu(ss_ctx *ctx, int n_threads, const float *x, const float *m, int64_t n, int64_t d,
                             const ss_mask_em_opts *o, ss_mask_em_result *res) {
  memset(res, 0, sizeof(*res));
  if (o->quick_steps)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "mask_em.quick_steps: not implemented in this version (leave it off)");
  double t0 = ss_now();
  n_threads = ss_threads_resolve(n_threads);
  em_run r;
  memset(&r, 0, sizeof(r));
  r.res = res;
  ss_status s = ss_mask_em_prepare(ctx, x, m, n, d, o, n_threads, &r.data);
  if (s != SS_OK) return s;
  res->t_prepare_s = ss_now() - t0;
  res->n = n;
  res->d = d;
  res->n_constant_features = r.data.n_constant;
  res->n_floored_features = r.data.n_floored;
  s = run_alloc(ctx, &r, o, n_threads);
  if (s == SS_OK) s = ss_em_start_labels(ctx, &r.data, o, n_threads, &r.st);
  if (s == SS_OK) {
    ss_mask_em_compact(&r.st);
    res->start_clusters = r.st.model.k;
    ss_log_info(ctx, "masked EM: %" PRId64 " points x %" PRId64 " features, %" PRId64 " starting clusters, %d threads",
                n, d, res->start_clusters, n_threads);
    s = iterate(ctx, &r);
  }
  if (s == SS_OK) {
    ss_mask_em_compact(&r.st);
    memcpy(res->labels, r.st.labels, sizeof(int32_t) * (size_t)n);
    res->n_clusters = r.st.model.k;
    res->t_total_s = ss_now() - t0;
    ss_log_info(ctx, "masked EM: %s after %" PRId64 " iterations: %" PRId64 " clusters, score %.6f, %.2f s",
                ss_mask_em_stop_name(res->stop), res->n_iterations, res->n_clusters, res->score, res->t_total_s);
  }
  ss_mask_em_state_free(&r.st);
  ss_mask_em_state_free(&r.trial);
  ss_mask_em_data_free(&r.data);
  free(r.prev);
  free(r.hashes);
  if (s != SS_OK) ss_mask_em_result_free(res);
  return s;
}

ss_status ss_mask_em_fit(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, int64_t n, int64_t d,
                         const ss_mask_em_opts *o, ss_mask_em_result *res) {
  if (be->kind == SS_DEVICE_CUDA) return ss_mask_em_fit_cuda(ctx, be, x, m, n, d, o, res);
  return ss_mask_em_fit_cpu(ctx, be->n_threads, x, m, n, d, o, res);
}

void ss_mask_em_snapshot_free(ss_mask_em_snapshot *s) {
  free(s->count);
  free(s->weight);
  free(s->mean);
  free(s->diag);
  free(s->n_u);
  free(s->u_feat);
  free(s->block);
  memset(s, 0, sizeof(*s));
}
