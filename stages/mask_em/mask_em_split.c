/* mask_em_split.c — the split round of masked EM (docs/mask_em.md): for every Gaussian cluster, a
 * sub-problem on its points fitted with 1 cluster (S1) and with 2 clusters from a random 50/50
 * assignment (S2); then, in cluster order, the promising splits are tried on the whole data (full
 * M/E/C step) and accepted when they beat the reference score.
 *
 * Sub-problems are independent: large ones run one after the other with all threads inside, the
 * rest concurrently with one thread each. Either way each sub-problem is computed the same way, so
 * the thread count never changes the result. */
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "stages/mask_em/mask_em_internal.h"
#include "core/rng.h"

#define SUB_CYCLE_WINDOW 64 /* labellings remembered for cycle detection inside a sub-problem */
#define BIG_SHARE 4         /* a sub-problem is "big" when n_c · threads · BIG_SHARE ≥ N */

typedef struct {
  double s1, s2;
  int valid; /* S2 has two non-empty halves and finite scores */
  ss_status st;
  char msg[256];
} sub_result;

/* Hard EM on the sub-problem to convergence (no change, a repeated labelling or max_iterations). */
static ss_status sub_converge(ss_ctx *ctx, ss_mask_em_state *sub, int *valid) {
  uint64_t seen[SUB_CYCLE_WINDOW];
  int64_t n_seen = 0;
  for (int64_t it = 0; it < sub->opts->max_iterations; it++) {
    SS_TRY(ss_mask_em_mstep(ctx, sub));
    if (sub->model.count[1] == 0 || sub->model.count[2] == 0) return *valid = 0, SS_OK;
    SS_TRY(ss_mask_em_estep(ctx, sub));
    for (int64_t j = 0; j < sub->n; j++)
      if (sub->best[j] < 0) return *valid = 0, SS_OK; /* both clusters removed */
    if (ss_mask_em_cstep(sub) == 0) break;
    uint64_t h = ss_em_labels_hash(sub);
    int repeat = 0;
    for (int64_t s = 0; s < n_seen && s < SUB_CYCLE_WINDOW; s++) repeat |= seen[s] == h;
    if (repeat) break;
    seen[n_seen++ % SUB_CYCLE_WINDOW] = h;
  }
  int64_t n2 = 0;
  for (int64_t j = 0; j < sub->n; j++) n2 += sub->labels[j] == 2;
  *valid = n2 > 0 && n2 < sub->n;
  return SS_OK;
}

/* S1 and S2 of one cluster whose points are pts[0..n_c); half[j] = 1 for the second half. */
static ss_status fit_sub(ss_ctx *ctx, const ss_mask_em_state *main, const int64_t *pts, int64_t n_c, uint64_t key,
                         int n_threads, sub_result *res, int8_t *half) {
  ss_mask_em_state sub;
  SS_TRY(ss_mask_em_state_init(ctx, &sub, main->data, main->opts, pts, n_c, 0, 3, n_threads));
  ss_status s = ss_mask_em_state_set_k(ctx, &sub, 2);
  res->valid = 0;
  res->s1 = res->s2 = INFINITY;
  for (int64_t j = 0; j < n_c; j++) sub.labels[j] = 1;
  if (s == SS_OK) s = ss_mask_em_mstep(ctx, &sub);
  if (s == SS_OK) s = ss_mask_em_estep(ctx, &sub);
  if (s == SS_OK && sub.model.alive[1]) {
    ss_mask_em_cstep(&sub);
    res->s1 = ss_mask_em_score(&sub);
  }
  if (s == SS_OK) s = ss_mask_em_state_set_k(ctx, &sub, 3);
  for (int64_t j = 0; j < n_c; j++) sub.labels[j] = (int32_t)(1 + (ss_rng_u64(key, (uint64_t)j) >> 63));
  if (s == SS_OK) s = sub_converge(ctx, &sub, &res->valid);
  if (s == SS_OK && res->valid) {
    res->s2 = ss_mask_em_score(&sub);
    for (int64_t j = 0; j < n_c; j++) half[j] = sub.labels[j] == 2;
  }
  ss_mask_em_state_free(&sub);
  return s;
}

/* Fit the sub-problems of every candidate (clusters with ≥ 2 points). by_size: candidates, largest
 * first; grp/pts: the clusters' points as grouped before the round. */
static ss_status fit_all(ss_ctx *ctx, const ss_mask_em_state *st, const int64_t *by_size, int64_t n_cand,
                         const int64_t *grp, const int64_t *pts, int64_t round, sub_result *res, int8_t *half) {
  int nt = st->n_threads;
  int64_t first_small = 0;
  for (; first_small < n_cand; first_small++) {
    int64_t c = by_size[first_small], n_c = grp[c + 1] - grp[c];
    if (n_c * nt * BIG_SHARE < st->n) break;
    uint64_t key = ss_rng_key(st->opts->seed, SS_RNG_MASK_EM_SPLIT, ((uint64_t)round << 32) | (uint64_t)c);
    SS_TRY(fit_sub(ctx, st, pts + grp[c], n_c, key, nt, &res[c], half + grp[c]));
  }
  SS_OMP(omp parallel for schedule(dynamic, 1) num_threads(nt))
  for (int64_t i = first_small; i < n_cand; i++) {
    int64_t c = by_size[i], n_c = grp[c + 1] - grp[c];
    uint64_t key = ss_rng_key(st->opts->seed, SS_RNG_MASK_EM_SPLIT, ((uint64_t)round << 32) | (uint64_t)c);
    ss_ctx local;
    ss_ctx_init(&local);
    res[c].st = fit_sub(&local, st, pts + grp[c], n_c, key, 1, &res[c], half + grp[c]);
    if (res[c].st != SS_OK) snprintf(res[c].msg, sizeof(res[c].msg), "%s", ss_error_message(&local));
  }
  for (int64_t i = first_small; i < n_cand; i++)
    if (res[by_size[i]].st != SS_OK) return ss_fail(ctx, res[by_size[i]].st, "%s", res[by_size[i]].msg);
  return SS_OK;
}

/* Whole-data test of splitting cluster c: trial = st with half 2 moved to a new cluster, one full
 * step; returns the trial's score in *score. */
static ss_status try_split(ss_ctx *ctx, const ss_mask_em_state *st, ss_mask_em_state *trial, int64_t c,
                           const int64_t *pts, int64_t n_c, const int8_t *half, double *score) {
  int64_t k = st->model.k, changed;
  memcpy(trial->labels, st->labels, sizeof(int32_t) * (size_t)st->n);
  trial->model.k = 0;
  SS_TRY(ss_mask_em_state_set_k(ctx, trial, k + 1));
  for (int64_t j = 0; j < n_c; j++)
    if (half[j] && trial->labels[pts[j]] == c) trial->labels[pts[j]] = (int32_t)k;
  SS_TRY(ss_em_full_step(ctx, trial, &changed));
  *score = ss_mask_em_score(trial);
  return SS_OK;
}

/* Candidates (clusters with at least 2 points) ordered by size, largest first, ties by index. */
static int64_t candidates_by_size(const int64_t *grp, int64_t k, int64_t *out) {
  int64_t n = 0;
  for (int64_t c = 1; c < k; c++)
    if (grp[c + 1] - grp[c] >= 2) out[n++] = c;
  for (int64_t i = 1; i < n; i++) { /* insertion sort: k is small next to the E-step */
    int64_t c = out[i], sz = grp[c + 1] - grp[c], j = i;
    while (j > 0 && grp[out[j - 1] + 1] - grp[out[j - 1]] < sz) out[j] = out[j - 1], j--;
    out[j] = c;
  }
  return n;
}

ss_status ss_mask_em_split_round(ss_ctx *ctx, ss_mask_em_state *st, ss_mask_em_state *trial, int64_t round,
                                 double *reference, int64_t *tried, int64_t *accepted) {
  *tried = *accepted = 0;
  int64_t k = st->model.k, n = st->n;
  if (k >= st->opts->max_possible_clusters - 1) return SS_OK;
  ss_mask_em_group(st);
  int64_t *grp = NULL, *pts = NULL, *by_size = NULL;
  int8_t *half = NULL;
  sub_result *res = NULL;
  ss_status s = SS_ALLOC(ctx, grp, (size_t)(k + 1), "split groups");
  if (s == SS_OK) s = SS_ALLOC(ctx, pts, (size_t)n, "split points");
  if (s == SS_OK) s = SS_ALLOC(ctx, by_size, (size_t)k, "split candidates");
  if (s == SS_OK) s = SS_CALLOC(ctx, half, (size_t)n, "split halves");
  if (s == SS_OK) s = SS_CALLOC(ctx, res, (size_t)k, "split results");
  if (s == SS_OK) {
    memcpy(grp, st->group, sizeof(int64_t) * (size_t)(k + 1));
    for (int64_t j = 0; j < n; j++) pts[j] = ss_em_point(st, st->order[j]);
    int64_t n_cand = candidates_by_size(grp, k, by_size);
    s = fit_all(ctx, st, by_size, n_cand, grp, pts, round, res, half);
  }
  for (int64_t c = 1; s == SS_OK && c < k; c++) {
    if (!res[c].valid || !(res[c].s2 < res[c].s1)) continue;
    if (st->model.k >= st->opts->max_possible_clusters - 1) break;
    double score;
    (*tried)++;
    s = try_split(ctx, st, trial, c, pts + grp[c], grp[c + 1] - grp[c], half + grp[c], &score);
    if (s == SS_OK && score < *reference) {
      ss_mask_em_state tmp = *st;
      *st = *trial;
      *trial = tmp;
      *reference = score;
      (*accepted)++;
      ss_log_debug(ctx, "masked EM: split of cluster %lld accepted (S1 %.6f, S2 %.6f, score %.6f)", (long long)c,
                   res[c].s1, res[c].s2, score);
    }
  }
  free(grp);
  free(pts);
  free(by_size);
  free(half);
  free(res);
  return s;
}
