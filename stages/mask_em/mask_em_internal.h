/* mask_em_internal.h — helpers shared by the mask_em_*.c files only (not a public interface). */
#ifndef SS_MASK_EM_INTERNAL_H
#define SS_MASK_EM_INTERNAL_H

#include <math.h>
#include <stdint.h>

#include "stages/mask_em/mask_em.h"

#ifdef _OPENMP
#include <omp.h>
#define SS_OMP(x) _Pragma(#x)
static inline int ss_em_thread(void) { return omp_get_thread_num(); }
#else
#define SS_OMP(x)
static inline int ss_em_thread(void) { return 0; }
#endif

#ifdef __cplusplus
extern "C" { /* stages/mask_em/mask_em.cu uses the start helper */
#endif

/* log(2π): the Gaussian normalisation constant per dimension. */
#define SS_EM_LOG_2PI 1.8378770664093454836

/* Data point of problem point j. */
static inline int64_t ss_em_point(const ss_mask_em_state *st, int64_t j) { return st->points ? st->points[j] : j; }

/* Scratch doubles per thread that the per-cluster and per-point passes need for dimension d. */
size_t ss_em_scratch_doubles(int64_t d);
static inline double *ss_em_scratch(const ss_mask_em_state *st) {
  return st->scratch + (size_t)ss_em_thread() * st->scratch_per_thread;
}

/* One full step on the current labels: M-step, E-step, C-step; returns the changed count. */
ss_status ss_em_full_step(ss_ctx *ctx, ss_mask_em_state *st, int64_t *changed);
/* Starting labels (mask patterns, .clu or k-means) into st->labels and st->model.k (mask_em.c). */
ss_status ss_em_start_labels(ss_ctx *ctx, const ss_mask_em_data *dt, const ss_mask_em_opts *o, int n_threads,
                             ss_mask_em_state *st);
/* 64-bit hash of (k, labels) for cycle detection. */
uint64_t ss_em_labels_hash(const ss_mask_em_state *st);

/* The iteration driver both backends share (stop rules, cycle check, split
 * schedule); each backend supplies its steps. */
typedef struct {
  void *self;
  /* one full iteration (M, E, C, deletion, score), logged by the backend */
  ss_status (*full_iteration)(ss_ctx *ctx, void *self, int64_t it, ss_mask_em_iter_log *e);
  /* did the current labelling occur before? (records it) */
  ss_status (*seen_before)(ss_ctx *ctx, void *self, int *seen);
  /* a split round after iteration `it`; *score receives the new reference score */
  ss_status (*split_step)(ss_ctx *ctx, void *self, int64_t it, const ss_mask_em_iter_log *full, int64_t *accepted,
                          double *score);
  int64_t n; /* points of the problem (the fast preset's change fraction) */
} ss_em_driver;
ss_status ss_em_drive(ss_ctx *ctx, const ss_mask_em_opts *o, const ss_em_driver *d, ss_mask_em_result *res);

#ifdef __cplusplus
}
#endif

#endif
