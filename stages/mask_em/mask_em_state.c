/* mask_em_state.c — the state of one masked EM problem (main or split sub-problem): allocation,
 * cluster bookkeeping (grouping, compaction), C-step, penalty, score and the exact deletion move
 * (docs/mask_em.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/mask_em/mask_em_internal.h"
#include "core/rng.h"

#define EM_BLOCK_POINTS 32 /* points per E-step block (must match mask_em_step.c) */

size_t ss_em_scratch_doubles(int64_t d) {
  size_t dd = (size_t)d;
  size_t mstep = 5 * dd + dd * dd, estep_prep = 2 * dd * dd + 2 * dd, estep = 2 * EM_BLOCK_POINTS * dd + 2 * dd;
  size_t m = mstep > estep_prep ? mstep : estep_prep;
  return m > estep ? m : estep;
}

static void model_free(ss_mask_em_model *m) {
  free(m->count);
  free(m->alive);
  free(m->weight);
  free(m->kp_sum);
  free(m->mean);
  free(m->diag);
  free(m->offset);
  free(m->n_u);
  free(m->u_feat);
  free(m->block_off);
  free(m->block);
  free(m->block_inv);
  free(m->log_det);
  free(m->base);
  free(m->coef);
  memset(m, 0, sizeof(*m));
}

#define GROW(ptr, count, what) SS_TRY(SS_REALLOC(ctx, ptr, (size_t)(count), "masked EM: " what))

/* Capacity for k clusters (per-cluster arrays; the block pools grow in the M-step). */
static ss_status model_reserve(ss_ctx *ctx, ss_mask_em_model *m, int64_t k, int64_t d) {
  if (k <= m->k_cap) return SS_OK;
  int64_t cap = m->k_cap ? m->k_cap : 4;
  while (cap < k) cap *= 2;
  GROW(m->count, cap, "cluster sizes");
  GROW(m->alive, cap, "cluster flags");
  GROW(m->weight, cap, "cluster weights");
  GROW(m->kp_sum, cap, "cluster penalties");
  GROW(m->mean, cap * d, "cluster means");
  GROW(m->diag, cap * d, "cluster variances");
  GROW(m->offset, cap * d, "cluster offsets");
  GROW(m->n_u, cap, "cluster masks");
  GROW(m->u_feat, cap * d, "cluster masks");
  GROW(m->block_off, cap + 1, "cluster blocks");
  GROW(m->log_det, cap, "cluster determinants");
  GROW(m->base, cap, "cluster constants");
  GROW(m->coef, cap * d, "cluster coefficients");
  m->k_cap = cap;
  m->d = d;
  return SS_OK;
}

ss_status ss_mask_em_state_set_k(ss_ctx *ctx, ss_mask_em_state *st, int64_t k) {
  int64_t old = st->model.k_cap;
  SS_TRY(model_reserve(ctx, &st->model, k, st->data->d));
  if (st->model.k_cap != old) {
    GROW(st->group, st->model.k_cap + 1, "cluster groups");
    GROW(st->score_kp, st->model.k_cap, "score sums");
    GROW(st->score_n, st->model.k_cap, "score counts");
  }
  for (int64_t c = st->model.k; c < k; c++) {
    st->model.count[c] = 0;
    st->model.alive[c] = 0;
    st->model.n_u[c] = 0;
  }
  st->model.k = k;
  return SS_OK;
}

void ss_mask_em_state_free(ss_mask_em_state *st) {
  free(st->labels);
  free(st->cost);
  free(st->best);
  free(st->second);
  free(st->cost1);
  free(st->cost2);
  free(st->order);
  free(st->group);
  free(st->score_kp);
  free(st->score_n);
  free(st->scratch);
  free(st->iscratch);
  model_free(&st->model);
  memset(st, 0, sizeof(*st));
}

ss_status ss_mask_em_state_init(ss_ctx *ctx, ss_mask_em_state *st, const ss_mask_em_data *data,
                                const ss_mask_em_opts *o, const int64_t *points, int64_t n, int has_noise,
                                int64_t k_cap, int n_threads) {
  memset(st, 0, sizeof(*st));
  st->data = data;
  st->opts = o;
  st->points = points;
  st->n = n;
  st->has_noise = has_noise;
  st->log_n = log((double)n);
  st->n_threads = n_threads < 1 ? 1 : n_threads;
  size_t nn = n > 0 ? (size_t)n : 1;
  st->scratch_per_thread = ss_em_scratch_doubles(data->d);
  st->iscratch_per_thread = 2 * (size_t)data->d;
  ss_status s = SS_ALLOC(ctx, st->labels, nn, "masked EM labels");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->cost, nn, "masked EM costs");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->best, nn, "masked EM best clusters");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->second, nn, "masked EM second clusters");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->cost1, nn, "masked EM best costs");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->cost2, nn, "masked EM second costs");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->order, nn, "masked EM point order");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->scratch, st->scratch_per_thread * (size_t)st->n_threads, "masked EM scratch");
  if (s == SS_OK) s = SS_ALLOC(ctx, st->iscratch, st->iscratch_per_thread * (size_t)st->n_threads, "masked EM scratch");
  if (s == SS_OK) s = ss_mask_em_state_set_k(ctx, st, k_cap);
  if (s != SS_OK) {
    ss_mask_em_state_free(st);
    return s;
  }
  for (int64_t j = 0; j < n; j++) st->labels[j] = 0, st->cost[j] = 0.0;
  return SS_OK;
}

void ss_mask_em_group(ss_mask_em_state *st) {
  int64_t k = st->model.k, *g = st->group;
  memset(g, 0, sizeof(int64_t) * (size_t)(k + 1));
  for (int64_t j = 0; j < st->n; j++) g[st->labels[j] + 1]++;
  for (int64_t c = 0; c < k; c++) g[c + 1] += g[c];
  for (int64_t c = 0; c < k; c++) st->model.count[c] = g[c + 1] - g[c];
  /* stable counting sort, using count as a cursor temporarily */
  int64_t *cursor = st->model.count;
  for (int64_t c = 0; c < k; c++) cursor[c] = g[c];
  for (int64_t j = 0; j < st->n; j++) st->order[cursor[st->labels[j]]++] = j;
  for (int64_t c = 0; c < k; c++) st->model.count[c] = g[c + 1] - g[c];
}

void ss_mask_em_compact(ss_mask_em_state *st) {
  int64_t k = st->model.k;
  int64_t *count = st->model.count;
  memset(count, 0, sizeof(int64_t) * (size_t)k);
  for (int64_t j = 0; j < st->n; j++) count[st->labels[j]]++;
  int64_t *newid = st->group, next = 1; /* group (k_cap + 1 entries) doubles as the id map */
  newid[0] = 0;
  for (int64_t c = 1; c < k; c++) newid[c] = count[c] > 0 ? next++ : -1;
  for (int64_t j = 0; j < st->n; j++) st->labels[j] = (int32_t)newid[st->labels[j]];
  st->model.k = next;
  for (int64_t c = 0; c < next; c++) st->model.alive[c] = 0;
}

int64_t ss_mask_em_cstep(ss_mask_em_state *st) {
  int64_t changed = 0;
  for (int64_t j = 0; j < st->n; j++) {
    if (st->best[j] < 0) { /* every cluster removed (only possible without a noise cluster) */
      st->cost[j] = INFINITY;
      continue;
    }
    changed += st->labels[j] != st->best[j];
    st->labels[j] = st->best[j];
    st->cost[j] = st->cost1[j];
  }
  return changed;
}

double ss_mask_em_penalty(const ss_mask_em_state *st, double kp_sum, int64_t count) {
  if (count <= 0) return 0.0;
  const ss_mask_em_opts *o = st->opts;
  double kbar = kp_sum / (double)count;
  return 2.0 * o->penalty_k * kbar + o->penalty_k_log_n * kbar * st->log_n / 2.0;
}

/* Σ k_p and counts of the current labelling into kp[k], cnt[k] (sequential: deterministic). */
static void label_sums(const ss_mask_em_state *st, double *kp, int64_t *cnt) {
  int64_t k = st->model.k;
  for (int64_t c = 0; c < k; c++) kp[c] = 0.0, cnt[c] = 0;
  for (int64_t j = 0; j < st->n; j++) {
    kp[st->labels[j]] += st->data->kp[ss_em_point(st, j)];
    cnt[st->labels[j]]++;
  }
}

double ss_mask_em_score(const ss_mask_em_state *st) {
  int64_t k = st->model.k;
  double *kp = st->score_kp; /* sized with the clusters (ss_mask_em_state_set_k): nothing to allocate here */
  int64_t *cnt = st->score_n;
  label_sums(st, kp, cnt);
  double s = 0.0;
  for (int64_t j = 0; j < st->n; j++) s += st->cost[j];
  for (int64_t c = 0; c < k; c++) s += ss_mask_em_penalty(st, kp[c], cnt[c]);
  return s;
}

uint64_t ss_em_labels_hash(const ss_mask_em_state *st) {
  uint64_t h = ss_rng_mix64((uint64_t)st->model.k + SS_RNG_GOLDEN);
  for (int64_t j = 0; j < st->n; j++) h = ss_rng_mix64(h ^ (uint64_t)(uint32_t)st->labels[j]) + (uint64_t)j;
  return h;
}

/* ---- deletion ----------------------------------------------------------------------------------- */

/* Exact score change of deleting Gaussian cluster c (its points go to their second best), given
 * the labelling's per-cluster k_p sums and counts. acc_kp/acc_n/touched: k-sized scratch, zero on
 * entry and on return. +inf when some point has no finite second best. */
static double deletion_delta(const ss_mask_em_state *st, int64_t c, const double *kp, const int64_t *cnt,
                             double *acc_kp, int64_t *acc_n, int64_t *touched) {
  double delta = -ss_mask_em_penalty(st, kp[c], cnt[c]);
  int64_t n_touched = 0;
  int finite = 1;
  for (int64_t g = st->group[c]; g < st->group[c + 1]; g++) {
    int64_t j = st->order[g];
    int32_t to = st->second[j];
    if (to < 0 || !isfinite(st->cost2[j])) {
      finite = 0;
      continue;
    }
    delta += st->cost2[j] - st->cost[j];
    if (acc_n[to] == 0) touched[n_touched++] = to;
    acc_n[to]++;
    acc_kp[to] += st->data->kp[ss_em_point(st, j)];
  }
  for (int64_t t = 0; t < n_touched; t++) {
    int64_t to = touched[t];
    delta += ss_mask_em_penalty(st, kp[to] + acc_kp[to], cnt[to] + acc_n[to]) - ss_mask_em_penalty(st, kp[to], cnt[to]);
    acc_kp[to] = 0.0;
    acc_n[to] = 0;
  }
  return finite ? delta : INFINITY;
}

/* Candidates sorted by (delta, index); delete improving ones that do not interact with an earlier
 * deletion (a deleted cluster's receivers and senders are frozen). */
static int64_t apply_deletions(ss_mask_em_state *st, const double *delta, int8_t *frozen) {
  int64_t k = st->model.k, done = 0;
  int64_t max_del = st->opts->max_deletions_per_iteration;
  while (done < max_del) {
    int64_t c_best = -1;
    for (int64_t c = 1; c < k; c++)
      if (!frozen[c] && delta[c] < 0.0 && (c_best < 0 || delta[c] < delta[c_best])) c_best = c;
    if (c_best < 0) break;
    int ok = 1;
    for (int64_t g = st->group[c_best]; g < st->group[c_best + 1] && ok; g++) ok = !frozen[st->second[st->order[g]]];
    frozen[c_best] = 1;
    if (!ok) continue;
    for (int64_t g = st->group[c_best]; g < st->group[c_best + 1]; g++) {
      int64_t j = st->order[g];
      st->labels[j] = st->second[j];
      st->cost[j] = st->cost2[j];
      frozen[st->labels[j]] = 1;
    }
    done++;
  }
  return done;
}

ss_status ss_mask_em_delete(ss_ctx *ctx, ss_mask_em_state *st, double *delta_out, int64_t *n_deleted) {
  int64_t k = st->model.k;
  int nt = st->n_threads;
  *n_deleted = 0;
  double *kp = NULL, *delta = NULL, *acc_kp = NULL;
  int64_t *cnt = NULL, *acc_n = NULL, *touched = NULL;
  int8_t *frozen = NULL;
  ss_status s = SS_ALLOC(ctx, kp, (size_t)k, "deletion sums");
  if (s == SS_OK) s = SS_ALLOC(ctx, cnt, (size_t)k, "deletion counts");
  if (s == SS_OK) s = SS_ALLOC(ctx, delta, (size_t)k, "deletion deltas");
  if (s == SS_OK) s = SS_CALLOC(ctx, acc_kp, (size_t)(k * nt), "deletion scratch");
  if (s == SS_OK) s = SS_CALLOC(ctx, acc_n, (size_t)(k * nt), "deletion scratch");
  if (s == SS_OK) s = SS_ALLOC(ctx, touched, (size_t)(k * nt), "deletion scratch");
  if (s == SS_OK) s = SS_CALLOC(ctx, frozen, (size_t)k, "deletion flags");
  if (s == SS_OK) {
    label_sums(st, kp, cnt);
    ss_mask_em_group(st);
    delta[0] = INFINITY;
    SS_OMP(omp parallel for schedule(dynamic, 1) num_threads(nt))
    for (int64_t c = 1; c < k; c++) {
      int t = ss_em_thread();
      delta[c] = cnt[c] > 0 ? deletion_delta(st, c, kp, cnt, acc_kp + t * k, acc_n + t * k, touched + t * k) : INFINITY;
    }
    if (delta_out) memcpy(delta_out, delta, sizeof(double) * (size_t)k);
    *n_deleted = apply_deletions(st, delta, frozen);
  }
  free(kp);
  free(cnt);
  free(delta);
  free(acc_kp);
  free(acc_n);
  free(touched);
  free(frozen);
  return s;
}
