/* mask_em.h — masked EM clustering (KlustaKwik's algorithm; docs/mask_em.md): the CPU
 * reference implementation and the backend-dispatching entry point, plus the per-step functions
 * (preprocessing, M-step, E-step, C-step, penalty, deletion, split round) exposed so that tests and
 * the CUDA twin (mask_em*.cu) can compare the state after every step.
 *
 * Conventions: N points, D features, cluster 0 is the noise cluster, Gaussian clusters 1..K−1.
 * Labels are int32 cluster indices (0 = noise). The input x, m are N × D row-major float32.
 * Everything accumulated (sums over points, covariances, costs, scores) is double.
 *
 * Data layout (shared with the CUDA twin): after preprocessing, each point keeps only its
 * unmasked entries (m > 0) in CSR form — feature id, corrected value y and excess variance η, as
 * float32. A masked entry (m = 0) has y = ν_i and η = σ_i² exactly, so it is implicit. Per-cluster
 * parameters are double: mean μ_c [D], the diagonal δ_c on M_c, and the dense block B_c on U_c
 * (u_c × u_c, packed one cluster after the other).
 *
 * Determinism: every reduction runs in a fixed order (per cluster in point order, or sequential
 * over points); threads split independent work only, so labels and scores are bit-identical for
 * any thread count. Randomness comes from core/rng.h (purposes SS_RNG_MASK_EM_START, keyed by the
 * seed, and SS_RNG_MASK_EM_SPLIT, keyed by the seed and (split round, cluster id)). */
#ifndef SS_MASK_EM_H
#define SS_MASK_EM_H

#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- options ---------------------------------------------------------------------------------- */

struct ss_mask_em_iter_log; /* below */

/* Which kernel computes the GPU E-step's block part: chosen from shared memory (auto), or forced
 * (tests compare the three with the CPU). */
typedef enum { SS_EM_BLOCK_AUTO = 0, SS_EM_BLOCK_SPARSE, SS_EM_BLOCK_UNION, SS_EM_BLOCK_GLOBAL } ss_em_block_kernel;

typedef struct {
  double prior_point;             /* P */
  double noise_point;             /* Q */
  double points_for_cluster_mask; /* T */
  double penalty_k, penalty_k_log_n;
  int64_t max_deletions_per_iteration;
  int64_t split_first, split_every;
  int64_t max_possible_clusters;
  int64_t num_starting_clusters; /* K0, noise included (the fast preset's value when fast) */
  int start;                     /* ss_em_start */
  int64_t max_iterations;
  int fast; /* the fast preset's stopping rule */
  double fast_change_fraction, fast_score_delta;
  int quick_steps;
  double dist_thresh;
  double noise_var_floor_rel, noise_var_floor_abs;
  uint64_t seed;
  int gpu_block_kernel;        /* ss_em_block_kernel: the GPU E-step's block-part kernel (tests) */
  const int32_t *start_labels; /* start == SS_EM_START_CLU: N labels, 0 = noise, c ≥ 1 Gaussian */
  /* Called after every full iteration with its log entry, on the caller's thread (NULL: none); lets
   * a caller that hides the per-iteration log lines show progress instead. */
  void (*on_iteration)(void *user, const struct ss_mask_em_iter_log *e);
  void *on_iteration_user;
} ss_mask_em_opts;

/* Copy the mask_em section and the seed; resolve the preset (fast: K0 = fast_starting_clusters). */
void ss_mask_em_opts_from_params(ss_mask_em_opts *o, const ss_params *p);

/* ---- preprocessed data ----------------------------------------------------------------------------- */

typedef struct {
  int64_t n, d, nnz;
  int64_t *row;            /* [n + 1]: point p's unmasked entries are row[p] .. row[p + 1] − 1 */
  int32_t *feat;           /* [nnz] feature ids, increasing within a point */
  float *y;                /* [nnz] corrected data m·x + (1 − m)·ν, x normalised to [0, 1] */
  float *eta;              /* [nnz] excess variance m(1 − m)(x − ν)² + (1 − m)σ² */
  float *mask;             /* [nnz] m (> 0) */
  double *kp;              /* [n] penalty parameter count k_p = n_p(n_p + 1)/2 + n_p + 1, n_p = Σ_i m_pi */
  double *nu;              /* [d] noise mean ν_i */
  double *sigma2;          /* [d] noise variance σ_i² (floored) */
  double *x_min, *x_range; /* [d] normalisation (x − min)/range; range 0 maps to 0 */
  int64_t n_constant;      /* features with zero range */
  int64_t n_floored;       /* features whose noise variance was floored */
} ss_mask_em_data;

/* Validate (finite x, masks in [0, 1], n, d ≥ 1), normalise, compute the noise statistics and the
 * sparse corrected data. Warns (ctx log) for constant features and floored variances. */
ss_status ss_mask_em_prepare(ss_ctx *ctx, const float *x, const float *m, int64_t n, int64_t d,
                             const ss_mask_em_opts *o, int n_threads, ss_mask_em_data *data);
void ss_mask_em_data_free(ss_mask_em_data *data);

/* ---- per-cluster model ------------------------------------------------------------------------ */

/* E-step coefficients of (cluster, feature): on M_c, a = 1/δ and b = 2(ν − μ); on U_c, a = 2(B⁻¹e)_q
 * with e = ν_U − μ_U and pos = q (the feature's position in U_c). h = (Σ⁻¹)_ii. */
typedef struct {
  double h, a, b;
  int32_t pos; /* −1 on M_c */
  int32_t pad;
} ss_mask_em_coef;

typedef struct {
  int64_t k, k_cap, d;
  int64_t *count;     /* [k] N_c */
  int8_t *alive;      /* [k] 1: fitted and its Cholesky succeeded; noise: 1 when it takes part */
  double *weight;     /* [k] π_c */
  double *kp_sum;     /* [k] Σ k_p over the cluster's points */
  double *mean;       /* [k × d] μ_c (noise row: ν) */
  double *diag;       /* [k × d] δ_c on M_c; B_c,ii on U_c */
  int32_t *n_u;       /* [k] u_c = |U_c| */
  int32_t *u_feat;    /* [k × d] U_c's features, increasing (first n_u valid) */
  int64_t *block_off; /* [k] offset of cluster c's u_c × u_c matrices in block / block_inv */
  double *block;      /* B_c, row-major, packed */
  double *block_inv;  /* B_c⁻¹ (after the E-step's Cholesky) */
  int64_t block_cap;
  double *offset;        /* [k × d] a = μ_c − ν = (Σ_p (y_p − ν))/(N_c + P), kept exactly */
  double *log_det;       /* [k] log det Σ_c */
  double *base;          /* [k] 2 × the part of cost(p, c) that does not depend on p */
  ss_mask_em_coef *coef; /* [k × d] */
} ss_mask_em_model;

/* ---- a problem: the main one (all points, with noise) or a split sub-problem --------------------- */

typedef struct {
  const ss_mask_em_data *data;
  const ss_mask_em_opts *opts;
  const int64_t *points; /* problem point j → data point; NULL: the identity (main problem) */
  int64_t n;
  int has_noise; /* 0 in split sub-problems: no noise cluster, Q not counted */
  double log_n;  /* ln(n) of the penalty */
  int n_threads; /* for the OpenMP regions of this problem */
  /* state */
  int32_t *labels;        /* [n] current class */
  double *cost;           /* [n] cost of the current class (C-step: best; deletion: second best) */
  int32_t *best, *second; /* [n] C-step output (second = −1 when no finite second) */
  double *cost1, *cost2;  /* [n] */
  int64_t *order;         /* [n] points grouped by label (stable), for the per-cluster passes */
  int64_t *group;         /* [k_cap + 1] group starts in order */
  double *score_kp;       /* [k_cap] scratch of the score: Σ k_p per cluster */
  int64_t *score_n;       /* [k_cap] scratch of the score: points per cluster */
  ss_mask_em_model model;
  double *scratch; /* per-thread scratch */
  size_t scratch_per_thread;
  int32_t *iscratch; /* per-thread integer scratch */
  size_t iscratch_per_thread;
  int64_t n_chol_fail; /* clusters removed by the last E-step (Cholesky or variance failure) */
} ss_mask_em_state;

/* A problem over `points` (NULL: all data points); k_cap: initial cluster capacity (grows). */
ss_status ss_mask_em_state_init(ss_ctx *ctx, ss_mask_em_state *st, const ss_mask_em_data *data,
                                const ss_mask_em_opts *o, const int64_t *points, int64_t n, int has_noise,
                                int64_t k_cap, int n_threads);
void ss_mask_em_state_free(ss_mask_em_state *st);
/* Make room for k clusters (labels may then use 0..k−1) and set model.k = k. */
ss_status ss_mask_em_state_set_k(ss_ctx *ctx, ss_mask_em_state *st, int64_t k);
/* Drop Gaussian clusters with no points, renumbering the rest in order (labels updated). */
void ss_mask_em_compact(ss_mask_em_state *st);

/* M-step on st->labels: counts, weights with pseudo-counts, cluster masks, means,
 * blocks and diagonals. Empty Gaussian clusters are marked not alive (compact them first to drop
 * them). */
ss_status ss_mask_em_mstep(ss_ctx *ctx, ss_mask_em_state *st);
/* E-step: Cholesky of every block (failure: the cluster is marked not alive and counted in
 * st->n_chol_fail), the per-cluster coefficients, and for every point its best and second-best
 * cluster and costs (ties to the lower index). */
ss_status ss_mask_em_estep(ss_ctx *ctx, ss_mask_em_state *st);
/* cost(p, c) of problem point j for one cluster (after ss_mask_em_estep); +inf when c is not alive. */
double ss_mask_em_point_cost(const ss_mask_em_state *st, int64_t j, int64_t c);
/* C-step: labels = best, cost = cost1; returns how many labels changed. */
int64_t ss_mask_em_cstep(ss_mask_em_state *st);
/* Penalty of a cluster with `count` points whose k_p sum to kp_sum (0 when empty). */
double ss_mask_em_penalty(const ss_mask_em_state *st, double kp_sum, int64_t count);
/* Score of the current labelling: Σ_p cost[p] + Σ_c penalty (sequential sums: deterministic). */
double ss_mask_em_score(const ss_mask_em_state *st);
/* Deletion (after a C-step): exact score change of moving each Gaussian cluster's points to their
 * second best; deletes the best candidates that improve the score (at most
 * max_deletions_per_iteration). delta (may be NULL) receives the k score changes (+inf: not a
 * candidate). Returns the number deleted in *n_deleted. */
ss_status ss_mask_em_delete(ss_ctx *ctx, ss_mask_em_state *st, double *delta, int64_t *n_deleted);
/* Group the points by label (st->order, st->group). */
void ss_mask_em_group(ss_mask_em_state *st);

/* ---- starts ------------------------------------------------------------------------------------ */

/* Mask-pattern start (distinct mask patterns in a seeded order): labels[n] in 1..K−1, *k = K (noise included). */
ss_status ss_mask_em_start_masks(ss_ctx *ctx, const ss_mask_em_data *data, int64_t k0, uint64_t seed, int32_t *labels,
                                 int64_t *k);

/* ---- the whole fit ----------------------------------------------------------------------------- */

typedef enum { SS_EM_STEP_FULL = 'F', SS_EM_STEP_SPLIT = 'S' } ss_mask_em_step_kind;

typedef struct ss_mask_em_iter_log {
  int64_t iteration;
  char step; /* ss_mask_em_step_kind */
  double score;
  int64_t n_clusters; /* noise included */
  int64_t changed;    /* points whose label changed (C-step + deletion) */
  int64_t deletions, chol_failures;
  int64_t splits_tried, splits_accepted;
  double seconds; /* wall time of the step */
} ss_mask_em_iter_log;

typedef enum {
  SS_EM_STOP_CONVERGED = 0, /* no change and no split accepted */
  SS_EM_STOP_CYCLE,         /* a labelling repeated */
  SS_EM_STOP_MAX_ITER,
  SS_EM_STOP_FAST /* the fast preset's criterion */
} ss_mask_em_stop;

typedef struct {
  int64_t n, d;
  int32_t *labels;    /* [n]: 0 = noise, Gaussian clusters 1..n_clusters−1 (all non-empty) */
  int64_t n_clusters; /* noise included */
  double score;
  int64_t n_iterations;
  int stop; /* ss_mask_em_stop */
  int64_t start_clusters;
  ss_mask_em_iter_log *log;
  int64_t n_log;
  int64_t n_deletions, n_splits_tried, n_splits_accepted, n_chol_failures;
  double t_prepare_s, t_mstep_s, t_estep_s, t_cstep_s, t_split_s, t_total_s;
  int64_t n_constant_features, n_floored_features;
} ss_mask_em_result;

/* Cluster x with masks m on the backend (CPU: ss_mask_em_fit_cpu; CUDA: ss_mask_em_fit_cuda). */
ss_status ss_mask_em_fit(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, int64_t n, int64_t d,
                         const ss_mask_em_opts *o, ss_mask_em_result *res);
ss_status ss_mask_em_fit_cpu(ss_ctx *ctx, int n_threads, const float *x, const float *m, int64_t n, int64_t d,
                             const ss_mask_em_opts *o, ss_mask_em_result *res);
void ss_mask_em_result_free(ss_mask_em_result *res);

/* ---- the CUDA twin (stages/mask_em/mask_em*.cu; without CUDA, ss_cuda_not_built) ---------------------------- */

/* The whole fit on the device: preprocessing and the start on the host (once), then every step on
 * the device with the data resident; per-iteration scalars and per-cluster vectors come back. */
ss_status ss_mask_em_fit_cuda(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, int64_t n, int64_t d,
                              const ss_mask_em_opts *o, ss_mask_em_result *res);

/* The model after an M-step, copied from the device, for comparison with the CPU's model. */
typedef struct {
  int64_t k, d;
  int64_t *count;  /* [k] */
  double *weight;  /* [k] */
  double *mean;    /* [k × d] */
  double *diag;    /* [k × d] */
  int32_t *n_u;    /* [k] */
  int32_t *u_feat; /* [k × d] */
  double *block;   /* [k × d × d]: cluster c's u_c × u_c block (row-major) at c·d·d */
  double score;    /* score after the iteration (C-step and deletion) */
  int64_t changed, deletions;
} ss_mask_em_snapshot;
void ss_mask_em_snapshot_free(ss_mask_em_snapshot *s);

/* `iterations` full iterations (compaction, M, E, C, deletion, score; no split rounds) on the device
 * from `start` (k clusters, noise included), recording snap[it] after each; the final labels go to
 * labels_out (may be NULL, else data->n entries). */
ss_status ss_mask_em_cuda_trace(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                const ss_mask_em_opts *o, const int32_t *start, int64_t k, int64_t iterations,
                                ss_mask_em_snapshot *snap, int32_t *labels_out);

/* Event-timed phases of one full iteration from `start` (k clusters), median over `reps` repeats
 * of the same iteration (benchmarks). */
typedef struct {
  double group_s, mstep_s, chol_s, gemm_s, block_s, select_s, cstep_s, delete_s, score_s, total_s;
  int64_t clusters;
} ss_mask_em_cuda_profile;
ss_status ss_mask_em_cuda_profile_iteration(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                            const ss_mask_em_opts *o, const int32_t *start, int64_t k, int reps,
                                            ss_mask_em_cuda_profile *prof);

/* The split round on the main problem st (docs/mask_em.md). `round` keys the random halves;
 * `reference` is the score to beat (updated on acceptance); returns tried/accepted counts. */
ss_status ss_mask_em_split_round(ss_ctx *ctx, ss_mask_em_state *st, ss_mask_em_state *trial, int64_t round,
                                 double *reference, int64_t *tried, int64_t *accepted);

const char *ss_mask_em_stop_name(int stop);

#ifdef __cplusplus
}
#endif
#endif
