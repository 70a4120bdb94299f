/* knn.h — k-nearest-neighbour search and classification (docs/knn.md), CPU and CUDA.
 *
 * Two stages, the same on both backends:
 *  1. candidates: squared L2 distances ‖x‖² + ‖y‖² − 2x·y in float on data centred by the
 *     reference mean (clamped at 0), tiled over queries and references; the K' = k + margin
 *     smallest by (approximate distance, index) are kept per query. On the GPU the cross term is
 *     a cuBLAS SGEMM per tile and the selection a warp queue (the tiled path), or tensor-core distances and
 *     the selection run fused, with no distance matrix in memory (the fused path; ss_knn_opts.path).
 *  2. exact re-rank: the candidates' distances are recomputed exactly as ss_knn_exact_dist()
 *     (double precision, fixed order, no fused multiply-add: bit-identical on CPU and GPU), sorted
 *     by (exact distance, index) and cut to k. A certificate — the K'-th approximate distance minus
 *     a rigorous bound on the float error exceeds the k-th exact distance — proves that no
 *     non-candidate can belong to the top k; a query without it is answered by an exact full scan
 *     (on the GPU by the device, in the same kernel).
 * Result contract: the k neighbours of a query are the first k references in the order
 * (ss_knn_exact_dist, reference index), ties included, on every backend and strategy. */
#ifndef SS_KNN_H
#define SS_KNN_H

#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__CUDACC__)
#define SS_KNN_HD static inline __host__ __device__
#else
#define SS_KNN_HD static inline
#endif

/* Candidate margin: K' = k + SS_KNN_MARGIN_MIN + k / SS_KNN_MARGIN_DIV (at most the reference count). */
#define SS_KNN_MARGIN_MIN 8
#define SS_KNN_MARGIN_DIV 8
/* The GPU keeps K' candidates per query in shared memory: K' is limited to this. */
#define SS_KNN_GPU_MAX_CANDIDATES 2048
/* Error bound of the float distance: SAFETY * (d + SLACK) * 2^-24 * (‖q'‖ + max ‖r'‖)². The
 * (d + SLACK) u term covers the dot product, the two norms, the final sum and the centring. */
#define SS_KNN_BOUND_SAFETY 2.0
#define SS_KNN_BOUND_SLACK 8
#define SS_KNN_FLT_UNIT_ROUNDOFF 5.9604644775390625e-08 /* 2^-24 */
/* Incremental mode: queries per dependency block. */
#define SS_KNN_INCREMENTAL_BLOCK 1024

/* Partial sums of ss_knn_exact_dist (on the GPU: a warp's lanes, one coordinate each). */
#define SS_KNN_EXACT_LANES 32
#define SS_KNN_EXACT_LEVELS 5 /* log2(SS_KNN_EXACT_LANES) */

/* The exact distance: the one definition every backend ranks by. Σ_j ((double)a_j − (double)b_j)², each
 * difference, square and sum one correctly rounded double operation, in a fixed order: SS_KNN_EXACT_LANES
 * partial sums (partial l: the coordinates j ≡ l mod SS_KNN_EXACT_LANES, in increasing j), then combined
 * pairwise, s_l = s_l + s_(l+o) for o = 16, 8, 4, 2, 1 (l < o); the result is s_0. A warp computes it with
 * one coordinate per lane and coalesced row loads (stages/knn/knn_common.cuh warp_exact_group); the chain of dependent
 * additions is d / 32 + 5 long instead of d. Partials beyond d are exact zeros (x + 0 = x for x >= +0), so
 * the C side skips them. Device code uses the _rn intrinsics so that nvcc cannot contract them into FMAs
 * (the C side is built as ISO C11, where GCC does not contract either). */
SS_KNN_HD double ss_knn_exact_dist(const float *a, const float *b, int64_t d) {
#if defined(__CUDA_ARCH__)
  /* One thread, few registers (the exact scans, the block finish): the partials in bit-reversed lane order,
   * where the tree's siblings are adjacent, folded like a binary counter (a stack of one partial per level);
   * each pairwise sum is the definition's (addition commutes exactly). Not unrolled: 32 interleaved copies
   * of the coordinate loop took 168 registers. */
  double st[SS_KNN_EXACT_LEVELS + 1];
#pragma unroll 1
  for (int i = 0; i < SS_KNN_EXACT_LANES; i++) {
    int l = (int)(__brev((unsigned)i) >> (32 - SS_KNN_EXACT_LEVELS)), top = __popc(i);
    double p = 0.0;
    for (int64_t j = l; j < d; j += SS_KNN_EXACT_LANES) {
      double t = __dsub_rn((double)a[j], (double)b[j]);
      p = __dadd_rn(p, __dmul_rn(t, t));
    }
#pragma unroll
    for (int c = i; c & 1; c >>= 1) p = __dadd_rn(st[--top], p);
    st[top] = p;
  }
  return st[0];
#else
  double s[SS_KNN_EXACT_LANES];
  int lanes = d < SS_KNN_EXACT_LANES ? (int)d : SS_KNN_EXACT_LANES;
  if (lanes <= 0) return 0.0;
  for (int l = 0; l < lanes; l++) s[l] = 0.0;
  for (int64_t j0 = 0; j0 < d; j0 += SS_KNN_EXACT_LANES)
    for (int l = 0; l < lanes && j0 + l < d; l++) {
      double t = (double)a[j0 + l] - (double)b[j0 + l];
      s[l] = s[l] + t * t;
    }
  for (int o = SS_KNN_EXACT_LANES / 2; o > 0; o >>= 1)
    for (int l = 0; l < o && l + o < lanes; l++) s[l] = s[l] + s[l + o];
  return s[0];
#endif
}

/* Rigorous bound on |approximate − exact| for a query of centred norm q_norm against references of
 * centred norm at most r_norm_max (both Euclidean norms, not squared). */
SS_KNN_HD double ss_knn_error_bound(int64_t d, double q_norm, double r_norm_max) {
  double s = q_norm + r_norm_max;
  return SS_KNN_BOUND_SAFETY * (double)(d + SS_KNN_BOUND_SLACK) * SS_KNN_FLT_UNIT_ROUNDOFF * s * s;
}

/* Candidates per query for k neighbours among n references. */
SS_KNN_HD int64_t ss_knn_candidates(int64_t k, int64_t n) {
  int64_t kc = k + SS_KNN_MARGIN_MIN + k / SS_KNN_MARGIN_DIV;
  return kc < n ? kc : n;
}

/* GPU path: the fused path (no distance matrix in memory: one kernel up to 2,048 references, beyond it the
 * filter path's seed, filter and list finish; tensor-core (TF32) distances with their own error bound; K' <=
 * SS_KNN_FUSED_MAX_CANDIDATES and d <= SS_KNN_FUSED_MAX_DIM, else the tiled path runs), the tiled path (cuBLAS
 * SGEMM tiles + the warp queue), or auto — where the fused path applies and n <= 65,536, the faster of the two,
 * timed on the index's first search of each size class and remembered by the index; the tiled path beyond
 * (docs/knn.md). */
typedef enum { SS_KNN_PATH_AUTO = 0, SS_KNN_PATH_FUSED, SS_KNN_PATH_GEMM } ss_knn_path;
#define SS_KNN_FUSED_MAX_CANDIDATES 64
#define SS_KNN_FUSED_MAX_DIM 256 /* the fused kernel keeps its queries' d coordinates in shared memory */

typedef struct {
  int64_t k;
  int path;           /* ss_knn_path (GPU) */
  int strategy;       /* ss_knn_strategy (GPU): auto, or a k-selection, which forces the tiled path when path is
                         auto; every k-selection runs the warp queue (kmin and bitonic are accepted as its
                         names). The CPU always selects with a heap */
  int64_t query_tile; /* queries per distance tile (GPU) */
  int64_t ref_tile;   /* references per distance tile (GPU) */
  int gemm_only;      /* benchmark hook: run only the tiled distance GEMM; outputs untouched
                         (SS_KNN_GEMM_ONLY_GRAPH: the same SGEMM calls replayed as one CUDA graph) */
  int64_t warp_chunk; /* benchmark hook (GPU warp queue): fewest references per chunk; 0 = the built-in
                         4096 (stages/knn/knn_tiled.cu kWarpMinChunk); for the one-tile selection-and-finish
                         kernel (K' <= 64) the references per warp, 0 = 4096 (kSfChunk). Not a parameter: it
                         only moves the speed */
} ss_knn_opts;
#define SS_KNN_GEMM_ONLY_GRAPH 2

typedef struct {
  int64_t candidates;           /* K' per query */
  int64_t fallbacks;            /* queries answered by the exact full scan (no certificate) */
  int strategy;                 /* the GPU k-selection that ran (SS_KNN_WARP); SS_KNN_AUTO on the CPU */
  int path;                     /* the GPU path that ran (ss_knn_path, auto resolved) */
  int64_t query_tile, ref_tile; /* GPU tiles used */
  int graph;                    /* 1: the GPU search was launched as a CUDA graph (repeated one-tile searches) */
} ss_knn_stats;

/* A reference set prepared for searches. `ref` is borrowed: it must outlive the index. The fields
 * are private to stages/knn/ (knn.c; the device state: knn_index.cu). An index serves one search at a
 * time: its work buffers, CUDA graphs and the `auto` path's choices are its own. */
typedef struct ss_knn_index {
  const ss_backend *be;
  int64_t n, d;
  const float *ref;    /* n × d, original coordinates (borrowed) */
  float *mean;         /* d: the reference mean the candidates stage centres by */
  float *ref_c;        /* CPU: n × d centred */
  float *ref_norm;     /* CPU: n squared centred norms */
  double ref_norm_max; /* max Euclidean centred norm */
  void *cuda;          /* device state (stages/knn/knn_common.cuh knn_dev) */
} ss_knn_index;

void ss_knn_opts_from_params(ss_knn_opts *o, const ss_params *p);
const char *ss_knn_strategy_name(int strategy);

ss_status ss_knn_index_create(ss_ctx *ctx, const ss_backend *be, const float *ref, int64_t n, int64_t d,
                              ss_knn_index **out);
void ss_knn_index_free(ss_knn_index *ix);

/* The k nearest references of each query: idx[m × k] (reference indices), dist[m × k] (exact squared
 * distances, may be NULL), sorted by (distance, index). stats may be NULL. Fails when k > n. */
ss_status ss_knn_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                        int64_t *idx, double *dist, ss_knn_stats *stats);

/* Majority vote over the labels of k neighbours given nearest first; a tie between classes goes to
 * the class whose nearest member comes first. */
int32_t ss_knn_vote(const int32_t *nb_labels, int64_t k);

/* Classify m queries: labels[m], and optionally their neighbours (idx, dist: m × k). With
 * `incremental`, query i is classified against the references plus queries 0..i−1 (reference index
 * n + j for query j, carrying its predicted label): the serial algorithm's answer, computed by a
 * bulk search plus blocks of SS_KNN_INCREMENTAL_BLOCK queries. */
ss_status ss_knn_classify(ss_ctx *ctx, ss_knn_index *ix, const int32_t *ref_labels, const ss_knn_opts *o,
                          const float *query, int64_t m, int incremental, int32_t *labels, int64_t *idx, double *dist,
                          ss_knn_stats *stats);

/* k-fold cross-validated accuracy over labelled points (fold of point i: its position in a seeded
 * shuffle modulo `folds`). *correct counts the points predicted right. */
ss_status ss_knn_cross_validate(ss_ctx *ctx, const ss_backend *be, const ss_knn_opts *o, const float *x,
                                const int32_t *labels, int64_t n, int64_t d, int64_t folds, uint64_t seed,
                                int64_t *correct);

/* Backends (called by the dispatchers above). The CUDA search fills the complete top k and a flag
 * per query: 1 = certified, 0 = answered by the exact full scan (done on the device). */
ss_status ss_knn_cpu_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                            int64_t *idx, double *dist, ss_knn_stats *stats);
/* Exact full scan of one query (the fallback and the tests' yardstick): the first k references in
 * (ss_knn_exact_dist, index) order. */
void ss_knn_exact_scan(const float *ref, int64_t n, int64_t d, const float *q, int64_t k, int64_t *idx, double *dist);
ss_status ss_knn_cuda_index_create(ss_ctx *ctx, ss_knn_index *ix);
void ss_knn_cuda_index_free(ss_knn_index *ix);
ss_status ss_knn_cuda_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                             int64_t *idx, double *dist, uint8_t *certified, ss_knn_stats *stats);
/* Device-resident search (the live-mode assignment stage's entry): d_query (m × d, original
 * coordinates) and the outputs d_idx (m × k), d_dist (m × k, may be NULL), d_certified (m: 1 =
 * certified, 0 = answered by the exact scan on the device) are device pointers. Everything is
 * queued on the backend stream with no host synchronisation, except on an index's first call of a size
 * (work-buffer growth; the `auto` path's measurement of the fused against the tiled path). The result
 * contract is the same as ss_knn_search's; stats->fallbacks is not filled (it would need the flags on the
 * host). With o->gemm_only (benchmark hook) only the distance SGEMM tiles run, on d_query as given.
 * An index serves one search at a time. */
ss_status ss_knn_cuda_search_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query,
                                    int64_t m, int32_t *d_idx, double *d_dist, uint8_t *d_certified,
                                    ss_knn_stats *stats);
/* Benchmark hook: the median over `repeats` (after one warm-up call) of the GPU time of one
 * ss_knn_cuda_search_device call, between CUDA events on the backend stream (host launch overhead
 * included wherever the GPU waits for it). */
ss_status ss_knn_cuda_time_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m,
                                  int32_t *d_idx, double *d_dist, uint8_t *d_certified, int repeats, double *median_s,
                                  ss_knn_stats *stats);

/* The CSV layout of the stand-alone tool: a first line "numels,newels,classes,dim" (four integers;
 * a line with those literal names before it is skipped), then numels + newels rows of dim
 * coordinates and a class in [0, classes), or −1 for a point to classify. The header's sizes are
 * bounded (also for --generate): numels and newels at most SS_KNN_MAX_POINTS, classes at most
 * SS_KNN_MAX_CLASSES (labels are int32), dim at most SS_KNN_MAX_DIM. */
#define SS_KNN_MAX_POINTS 1000000000000LL
#define SS_KNN_MAX_CLASSES 2147483647LL
#define SS_KNN_MAX_DIM 65536LL
typedef struct {
  int64_t n_points, dim, classes;
  int64_t n_labelled, n_new;
  float *x;       /* n_points × dim */
  int32_t *label; /* n_points; −1 = to classify */
} ss_knn_table;

ss_status ss_knn_csv_read(ss_ctx *ctx, const char *path, ss_knn_table *t);
/* Writes the header "n_points,0,classes,dim" when every row is labelled, else the counts. NULL
 * path or "-" writes to stdout. Atomic for files. */
ss_status ss_knn_csv_write(ss_ctx *ctx, const char *path, const ss_knn_table *t);
/* A random table: `classes` Gaussian blobs with centres and points in [−100, 100] (seeded, purpose
 * SS_RNG_KNN_GENERATE); n_train labelled rows, then n_new rows with class −1. */
ss_status ss_knn_generate(ss_ctx *ctx, int64_t n_train, int64_t n_new, int64_t classes, int64_t dim, uint64_t seed,
                          ss_knn_table *t);
void ss_knn_table_free(ss_knn_table *t);

#ifdef __cplusplus
}
#endif
#endif
