/* kmeans.h — k-means clustering (docs/kmeans.md) on the CPU and on CUDA, behind one
 * interface: k-means++ / random / given initialisation, Lloyd iterations with a fused
 * score + argmin assignment, exact fixed-point centroid sums, deterministic empty-cluster
 * reseeding, and nearest-centroid assignment against a model (live mode).
 *
 * Determinism contract (both backends, any thread count, any GPU launch shape):
 *  - every point is centred by a shift vector s (the data mean for a fit) before any arithmetic;
 *  - the assignment score of point x to centroid c is  fmaf(-2, dot, ‖c‖²)  where dot and ‖c‖² are
 *    fmaf chains in dimension order 0..d−1 over x' = x − s and c (stages/kmeans/kmeans_math.h); the label is
 *    the lowest index of minimal score; the reported distance is the fmaf chain Σ (x' − c)²;
 *  - centroid sums are exact int64 fixed-point sums of x' · 2^F (order-independent), divided in
 *    double and rounded once to float;
 *  - k-means++ picks by a prefix over D² in a fixed order (blocks of SS_KMEANS_PP_BLOCK points
 *    tree-summed in double, blocks summed sequentially) driven by ss_rng purpose SS_RNG_KMEANS_INIT.
 * Hence the CPU and CUDA backends produce bit-identical labels, centroids and k-means++ picks;
 * only the reported inertia (a double sum in a backend-specific order) may differ in its last bits. */
#ifndef SS_KMEANS_H
#define SS_KMEANS_H

#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Points per k-means++ D² block (the tree-summed unit of the selection prefix). */
#define SS_KMEANS_PP_BLOCK 256

typedef struct {
  int64_t k;
  int init;                    /* ss_kmeans_init, used when init_centroids is NULL */
  const float *init_centroids; /* k × d starting centroids in data coordinates, or NULL */
  int64_t max_iterations;      /* cap on centroid updates */
  double tol_change_fraction;  /* stop when at most this fraction of labels changed */
  uint64_t seed;
  int quiet; /* 1: the per-fit summary line at debug level (callers that fit many small problems) */
} ss_kmeans_opts;

typedef struct {
  int64_t n, d, k;
  float *centroids;     /* k × d, data coordinates */
  int32_t *labels;      /* n: nearest centroid of each point (after the last update) */
  double *inertia;      /* n_iterations + 1: Σ squared distance of each assignment pass */
  int64_t n_iterations; /* centroid updates performed */
  double final_inertia; /* inertia[n_iterations]: labels against the final centroids */
  int converged;        /* 1: stopped on the label-change fraction, 0: iteration cap */
  int64_t n_reseeded;   /* empty clusters re-seeded over the run */
} ss_kmeans_result;

void ss_kmeans_opts_from_params(ss_kmeans_opts *o, const ss_params *p);

/* Cluster x (n × d, row-major, host memory). Fails on k < 1, k > n, n == 0, d == 0 and non-finite
 * values, naming the problem. The result is owned by the caller (ss_kmeans_result_free). */
ss_status ss_kmeans_fit(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d,
                        const ss_kmeans_opts *o, ss_kmeans_result *res);
void ss_kmeans_result_free(ss_kmeans_result *res);

/* Starting centroids alone (k × d, data coordinates) as ss_kmeans_fit would use them. */
ss_status ss_kmeans_init_centroids(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d,
                                   const ss_kmeans_opts *o, float *centroids);

/* Nearest-centroid assignment against a model (live mode): labels[n] (lowest index on ties) and,
 * when dist is not NULL, the squared distance to that centroid. The shift is the centroids' mean. */
ss_status ss_kmeans_assign(ss_ctx *ctx, const ss_backend *be, const float *centroids, int64_t k, int64_t d,
                           const float *x, int64_t n, int32_t *labels, float *dist);

/* Overlapping patch × patch × c patches of an h × w × c image (row-major, channel last), one row per
 * top-left corner in row-major order: (h − patch + 1)(w − patch + 1) rows of patch·patch·c values
 * ordered (row, column, channel). *out is malloc'd. */
ss_status ss_kmeans_patches(ss_ctx *ctx, const float *img, int64_t h, int64_t w, int64_t c, int64_t patch, float **out,
                            int64_t *n_out, int64_t *d_out);
/* Read an image as h × w × c float: binary PPM (P6, maxval ≤ 255, values kept in 0..255) or a .npy
 * array h × w × c (or h × w) of any numeric dtype. No compressed formats: convert them first. */
ss_status ss_kmeans_image_read(ss_ctx *ctx, const char *path, float **img, int64_t *h, int64_t *w, int64_t *c);

/* --- backend layer (called by the functions above; exposed for tests and benchmarks) ------------ */

/* A prepared problem: points, the shift every point is centred by, fixed-point scale, stopping. */
typedef struct {
  const float *x; /* n × d, host, data coordinates (borrowed) */
  int64_t n, d, k;
  float *shift;      /* d, owned */
  double scale;      /* 2^F: x' · scale fits int64 sums over n points */
  int64_t tol_count; /* stop when at most this many labels changed */
  int64_t max_iterations;
} ss_kmeans_problem;

/* Validate and prepare (shift = data mean, computed in a thread-independent order). */
ss_status ss_kmeans_prepare(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d,
                            const ss_kmeans_opts *o, ss_kmeans_problem *pb);
void ss_kmeans_problem_free(ss_kmeans_problem *pb);

/* CPU backend. Centroids here are centred (data coordinates minus the shift). */
ss_status ss_kmeans_cpu_pp(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, uint64_t seed,
                           float *centroids_c);
ss_status ss_kmeans_cpu_lloyd(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, const float *init_c,
                              ss_kmeans_result *res);
ss_status ss_kmeans_cpu_assign(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, const float *centroids_c,
                               int32_t *labels, float *dist);

/* CUDA backend: a device-resident problem (points uploaded once). */
typedef struct ss_kmeans_gpu ss_kmeans_gpu;
ss_status ss_kmeans_gpu_open(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, ss_kmeans_gpu **out);
ss_status ss_kmeans_gpu_pp(ss_ctx *ctx, ss_kmeans_gpu *g, uint64_t seed, float *centroids_c);
/* Lloyd from init_c (host, centred); fills res (centroids centred; the caller adds the shift). */
ss_status ss_kmeans_gpu_lloyd(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c, ss_kmeans_result *res);
ss_status ss_kmeans_gpu_assign(ss_ctx *ctx, ss_kmeans_gpu *g, const float *centroids_c, int32_t *labels, float *dist);
void ss_kmeans_gpu_close(ss_kmeans_gpu *g);
/* Where a pass's time goes: the Lloyd run from init_c launched kernel by kernel between CUDA
 * events (so slightly slower than the graph), mean milliseconds per pass of each kernel. */
typedef struct {
  int64_t passes;
  int fused;             /* 1: the assignment kernel also forms the partial sums */
  int64_t assign_blocks; /* persistent assignment blocks */
  int64_t partial_rows;  /* partial sums per cluster that the update kernel adds */
  double assign_ms;      /* assignment (and, when fused, the partial sums) */
  double partial_ms;     /* separate partial-sum kernel (0 when fused) */
  double update_ms;      /* reduction, division, ‖c‖², convergence test, reseeding */
} ss_kmeans_pass_profile;
ss_status ss_kmeans_gpu_profile(ss_ctx *ctx, ss_kmeans_gpu *g, const float *init_c, ss_kmeans_pass_profile *prof);

/* Allocate the result arrays for pb (labels, centroids, inertia of max_iterations + 1 passes). */
ss_status ss_kmeans_result_alloc(ss_ctx *ctx, const ss_kmeans_problem *pb, ss_kmeans_result *res);

#ifdef __cplusplus
}
#endif
#endif
