/* kmeans.c — k-means: input checks, problem preparation, initialisation, the CPU reference
 * (OpenMP; results independent of the thread count) and the backend dispatch. The arithmetic that
 * must match the CUDA backend bit for bit lives in stages/kmeans/kmeans_math.h; see stages/kmeans/kmeans.h for the
 * determinism contract and docs/kmeans.md for the algorithm. */
#include "stages/kmeans/kmeans.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/kmeans/kmeans_math.h"
#include "core/log.h"
#include "core/rng.h"

#ifdef _OPENMP
#define SS_KM_PARALLEL_FOR _Pragma("omp parallel for schedule(static) num_threads(nt)")
#else
#define SS_KM_PARALLEL_FOR
#endif

/* Points per CPU work block: partial sums (mean, inertia) are formed per block and combined in
 * block order, so the thread count never changes a result. */
#define SS_KM_CPU_BLOCK 4096
/* Random initialisation draws from its own stream of SS_RNG_KMEANS_INIT (k-means++ uses stream 0). */
#define SS_KM_STREAM_PP 0
#define SS_KM_STREAM_RANDOM 1

static int64_t n_blocks(int64_t n, int64_t b) { return (n + b - 1) / b; }

void ss_kmeans_opts_from_params(ss_kmeans_opts *o, const ss_params *p) {
  memset(o, 0, sizeof(*o));
  o->k = p->kmeans.k;
  o->init = p->kmeans.init;
  o->max_iterations = p->kmeans.max_iterations;
  o->tol_change_fraction = p->kmeans.tol_change_fraction;
  o->seed = (uint64_t)p->seed;
}

/* --- checks and preparation ---------------------------------------------------------------------- */

static ss_status check_shape(ss_ctx *ctx, int64_t n, int64_t d, int64_t k) {
  if (n <= 0) return ss_fail(ctx, SS_ERR_INPUT, "kmeans: no points (empty input)");
  if (d <= 0) return ss_fail(ctx, SS_ERR_INPUT, "kmeans: the points have no dimensions");
  if (k < 1) return ss_fail(ctx, SS_ERR_INPUT, "kmeans: k must be at least 1, got %" PRId64, k);
  if (k > n)
    return ss_fail(ctx, SS_ERR_INPUT, "kmeans: k = %" PRId64 " exceeds the number of points (%" PRId64 ")", k, n);
  return SS_OK;
}

/* The first non-finite value in row order, or SS_OK. `what` names the array in the message. */
static ss_status check_finite(ss_ctx *ctx, const char *what, const float *x, int64_t n, int64_t d) {
  for (int64_t i = 0; i < n * d; i++)
    if (!isfinite(x[i]))
      return ss_fail(ctx, SS_ERR_INPUT, "kmeans: %s: row %" PRId64 ", column %" PRId64 " is not finite (%g)", what,
                     i / d, i % d, (double)x[i]);
  return SS_OK;
}

/* Column means in double: per-block sums in row order, blocks added in order. */
static ss_status column_mean(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d, float *mean) {
  int64_t nb = n_blocks(n, SS_KM_CPU_BLOCK);
  double *part;
  SS_TRY(SS_CALLOC(ctx, part, (size_t)(nb * d), "k-means column sums"));
  int nt = be->n_threads;
  (void)nt;
  SS_KM_PARALLEL_FOR
  for (int64_t b = 0; b < nb; b++) {
    double *p = part + b * d;
    int64_t hi = (b + 1) * SS_KM_CPU_BLOCK < n ? (b + 1) * SS_KM_CPU_BLOCK : n;
    for (int64_t i = b * SS_KM_CPU_BLOCK; i < hi; i++)
      for (int64_t j = 0; j < d; j++) p[j] += (double)x[i * d + j];
  }
  for (int64_t j = 0; j < d; j++) {
    double s = 0.0;
    for (int64_t b = 0; b < nb; b++) s += part[b * d + j];
    mean[j] = (float)(s / (double)n);
  }
  free(part);
  return SS_OK;
}

ss_status ss_kmeans_prepare(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d,
                            const ss_kmeans_opts *o, ss_kmeans_problem *pb) {
  memset(pb, 0, sizeof(*pb));
  SS_TRY(check_shape(ctx, n, d, o->k));
  if (o->max_iterations < 0)
    return ss_fail(ctx, SS_ERR_INPUT, "kmeans: max_iterations must be >= 0, got %" PRId64, o->max_iterations);
  if (!(o->tol_change_fraction >= 0.0 && o->tol_change_fraction <= 1.0))
    return ss_fail(ctx, SS_ERR_INPUT, "kmeans: tol_change_fraction must lie in [0, 1], got %g", o->tol_change_fraction);
  SS_TRY(check_finite(ctx, "points", x, n, d));
  pb->x = x;
  pb->n = n;
  pb->d = d;
  pb->k = o->k;
  pb->max_iterations = o->max_iterations;
  pb->tol_count = (int64_t)floor(o->tol_change_fraction * (double)n);
  SS_TRY(SS_ALLOC(ctx, pb->shift, (size_t)d, "k-means shift"));
  ss_status st = column_mean(ctx, be, x, n, d, pb->shift);
  if (st != SS_OK) {
    ss_kmeans_problem_free(pb);
    return st;
  }
  double max_abs = 0.0;
  for (int64_t i = 0; i < n * d; i++) {
    double a = fabs((double)ss_km_centred(x[i], pb->shift[i % d]));
    if (a > max_abs) max_abs = a;
  }
  pb->scale = ss_km_scale(max_abs, n);
  return SS_OK;
}

void ss_kmeans_problem_free(ss_kmeans_problem *pb) {
  free(pb->shift);
  pb->shift = NULL;
}

ss_status ss_kmeans_result_alloc(ss_ctx *ctx, const ss_kmeans_problem *pb, ss_kmeans_result *res) {
  memset(res, 0, sizeof(*res));
  res->n = pb->n;
  res->d = pb->d;
  res->k = pb->k;
  if (SS_ALLOC(ctx, res->centroids, (size_t)(pb->k * pb->d), "k-means centroids") != SS_OK ||
      SS_ALLOC(ctx, res->labels, (size_t)pb->n, "k-means labels") != SS_OK ||
      SS_ALLOC(ctx, res->inertia, (size_t)(pb->max_iterations + 1), "k-means inertia") != SS_OK) {
    ss_kmeans_result_free(res);
    return ctx->status;
  }
  return SS_OK;
}

void ss_kmeans_result_free(ss_kmeans_result *res) {
  free(res->centroids);
  free(res->labels);
  free(res->inertia);
  memset(res, 0, sizeof(*res));
}

/* --- CPU backend ----------------------------------------------------------------------------------- */

static void copy_centred_point(const ss_kmeans_problem *pb, int64_t i, float *c) {
  for (int64_t j = 0; j < pb->d; j++) c[j] = ss_km_centred(pb->x[i * pb->d + j], pb->shift[j]);
}

/* Centroids scored together by the CPU: independent fmaf chains that the core overlaps. */
#define SS_KM_CPU_GROUP 4

/* Compiled twice (FMA instructions, and the libm call elsewhere): both round fmaf correctly. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SS_KM_FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define SS_KM_FMA_CLONES
#endif

/* The nearest centroid of point xi: the lowest index of minimal ss_km_score. */
SS_KM_FMA_CLONES static int32_t nearest(const float *xi, const float *shift, const float *cent, const float *cnorm,
                                        int64_t k, int64_t d) {
  float best = INFINITY;
  int32_t arg = 0;
  for (int64_t c0 = 0; c0 < k; c0 += SS_KM_CPU_GROUP) {
    int64_t g = k - c0 < SS_KM_CPU_GROUP ? k - c0 : SS_KM_CPU_GROUP;
    float dot[SS_KM_CPU_GROUP] = {0};
    const float *cc = cent + c0 * d;
    for (int64_t j = 0; j < d; j++) { /* each chain runs in dimension order, as on the GPU */
      float xj = ss_km_centred(xi[j], shift[j]);
      for (int64_t q = 0; q < g; q++) dot[q] = fmaf(xj, cc[q * d + j], dot[q]);
    }
    for (int64_t q = 0; q < g; q++) {
      float sc = ss_km_score(dot[q], cnorm[c0 + q]);
      if (sc < best) {
        best = sc;
        arg = (int32_t)(c0 + q);
      }
    }
  }
  return arg;
}

SS_KM_FMA_CLONES static float sqdist(const float *x, const float *s, const float *c, int64_t d) {
  return ss_km_sqdist(x, s, c, d);
}

/* The tree sum of one k-means++ block, in the order of the GPU's shared-memory reduction. */
static double pp_block_sum(const float *d2, int64_t lo, int64_t n) {
  double buf[SS_KMEANS_PP_BLOCK];
  for (int t = 0; t < SS_KMEANS_PP_BLOCK; t++) buf[t] = lo + t < n ? (double)d2[lo + t] : 0.0;
  for (int s = SS_KMEANS_PP_BLOCK / 2; s > 0; s >>= 1)
    for (int t = 0; t < s; t++) buf[t] += buf[t + s];
  return buf[0];
}

ss_status ss_kmeans_cpu_pp(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, uint64_t seed,
                           float *centroids_c) {
  int64_t n = pb->n, d = pb->d, nb = n_blocks(n, SS_KMEANS_PP_BLOCK);
  uint64_t key = ss_rng_key(seed, SS_RNG_KMEANS_INIT, SS_KM_STREAM_PP);
  float *d2;
  double *bsum;
  SS_TRY(SS_ALLOC(ctx, d2, (size_t)n, "k-means++ distances"));
  if (SS_ALLOC(ctx, bsum, (size_t)nb, "k-means++ block sums") != SS_OK) {
    free(d2);
    return ctx->status;
  }
  for (int64_t i = 0; i < n; i++) d2[i] = INFINITY;
  copy_centred_point(pb, (int64_t)ss_rng_below(key, 0, (uint64_t)n), centroids_c);
  int nt = be->n_threads;
  (void)nt;
  for (int64_t c = 1; c < pb->k; c++) {
    const float *prev = centroids_c + (c - 1) * d;
    SS_KM_PARALLEL_FOR
    for (int64_t b = 0; b < nb; b++) {
      int64_t lo = b * SS_KMEANS_PP_BLOCK, hi = lo + SS_KMEANS_PP_BLOCK < n ? lo + SS_KMEANS_PP_BLOCK : n;
      for (int64_t i = lo; i < hi; i++) {
        float v = sqdist(pb->x + i * d, pb->shift, prev, d);
        if (v < d2[i]) d2[i] = v;
      }
      bsum[b] = pp_block_sum(d2, lo, n);
    }
    int64_t pick = ss_km_pp_select(bsum, nb, d2, n, ss_rng_uniform(key, (uint64_t)c));
    copy_centred_point(pb, pick, centroids_c + c * d);
  }
  free(d2);
  free(bsum);
  return SS_OK;
}

/* One assignment pass: labels (previous labels in, new out), dist (may be NULL), the number of
 * changed labels and the inertia (block sums in block order). */
static void cpu_assign_pass(const ss_backend *be, const ss_kmeans_problem *pb, const float *cent, const float *cnorm,
                            int32_t *labels, float *dist, int64_t *changed, double *inertia) {
  int64_t n = pb->n, d = pb->d, k = pb->k, nb = n_blocks(n, SS_KM_CPU_BLOCK);
  /* per-block partials live on the stack in chunks so that the pass needs no allocation */
  enum { CHUNK = 256 };
  double in_part[CHUNK];
  int64_t ch_part[CHUNK];
  int nt = be->n_threads;
  (void)nt;
  *changed = 0;
  *inertia = 0.0;
  for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
    int64_t b1 = b0 + CHUNK < nb ? b0 + CHUNK : nb;
    SS_KM_PARALLEL_FOR
    for (int64_t b = b0; b < b1; b++) {
      int64_t lo = b * SS_KM_CPU_BLOCK, hi = lo + SS_KM_CPU_BLOCK < n ? lo + SS_KM_CPU_BLOCK : n, ch = 0;
      double in = 0.0;
      for (int64_t i = lo; i < hi; i++) {
        const float *xi = pb->x + i * d;
        int32_t arg = nearest(xi, pb->shift, cent, cnorm, k, d);
        float dd = sqdist(xi, pb->shift, cent + (int64_t)arg * d, d);
        ch += labels[i] != arg;
        labels[i] = arg;
        if (dist) dist[i] = dd;
        in += (double)dd;
      }
      in_part[b - b0] = in;
      ch_part[b - b0] = ch;
    }
    for (int64_t b = b0; b < b1; b++) {
      *inertia += in_part[b - b0];
      *changed += ch_part[b - b0];
    }
  }
}

static void centroid_norms(const float *cent, int64_t k, int64_t d, float *cnorm) {
  for (int64_t c = 0; c < k; c++) cnorm[c] = ss_km_norm2(cent + c * d, d);
}

/* Empty clusters, in index order, take the farthest point (lowest index on ties) of a cluster that
 * keeps at least one point; dist[i] = -1 marks a point already taken. Returns the number reseeded. */
static int64_t cpu_reseed(const ss_kmeans_problem *pb, int32_t *labels, float *dist, long long *sums,
                          long long *counts) {
  int64_t n = pb->n, d = pb->d, reseeded = 0;
  for (int64_t c = 0; c < pb->k; c++) {
    if (counts[c] > 0) continue;
    int64_t far = -1;
    float fd = -1.0f;
    for (int64_t i = 0; i < n; i++)
      if (dist[i] > fd && counts[labels[i]] > 1) {
        fd = dist[i];
        far = i;
      }
    if (far < 0) break; /* impossible while k <= n: some cluster holds two points */
    int32_t donor = labels[far];
    for (int64_t j = 0; j < d; j++) {
      long long v = ss_km_fixed(ss_km_centred(pb->x[far * d + j], pb->shift[j]), pb->scale);
      sums[donor * d + j] -= v;
      sums[c * d + j] = v;
    }
    counts[donor]--;
    counts[c] = 1;
    labels[far] = (int32_t)c;
    dist[far] = -1.0f;
    reseeded++;
  }
  return reseeded;
}

/* Centroid update: exact fixed-point sums (any order), reseeding, one division per coordinate. */
static ss_status cpu_update(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, int32_t *labels,
                            float *dist, float *cent, float *cnorm, int64_t *reseeded) {
  int64_t n = pb->n, d = pb->d, k = pb->k;
  long long *sums, *counts;
  SS_TRY(SS_CALLOC(ctx, sums, (size_t)(k * d), "k-means sums"));
  if (SS_CALLOC(ctx, counts, (size_t)k, "k-means counts") != SS_OK) {
    free(sums);
    return ctx->status;
  }
  int nt = be->n_threads;
  (void)nt;
  /* each thread owns whole columns: no shared accumulator, and integer sums need no order */
  SS_KM_PARALLEL_FOR
  for (int64_t j = 0; j < d; j++)
    for (int64_t i = 0; i < n; i++)
      sums[(int64_t)labels[i] * d + j] += ss_km_fixed(ss_km_centred(pb->x[i * d + j], pb->shift[j]), pb->scale);
  for (int64_t i = 0; i < n; i++) counts[labels[i]]++;
  *reseeded += cpu_reseed(pb, labels, dist, sums, counts);
  double inv = 1.0 / pb->scale;
  for (int64_t c = 0; c < k; c++)
    for (int64_t j = 0; j < d; j++) cent[c * d + j] = ss_km_mean(sums[c * d + j], inv, counts[c]);
  centroid_norms(cent, k, d, cnorm);
  free(sums);
  free(counts);
  return SS_OK;
}

ss_status ss_kmeans_cpu_lloyd(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, const float *init_c,
                              ss_kmeans_result *res) {
  int64_t n = pb->n, k = pb->k, d = pb->d;
  float *dist, *cnorm;
  SS_TRY(SS_ALLOC(ctx, dist, (size_t)n, "k-means distances"));
  if (SS_ALLOC(ctx, cnorm, (size_t)k, "k-means centroid norms") != SS_OK) {
    free(dist);
    return ctx->status;
  }
  memcpy(res->centroids, init_c, sizeof(float) * (size_t)(k * d));
  centroid_norms(res->centroids, k, d, cnorm);
  for (int64_t i = 0; i < n; i++) res->labels[i] = -1;
  ss_status st = SS_OK;
  int64_t it = 0;
  for (;; it++) {
    int64_t changed;
    cpu_assign_pass(be, pb, res->centroids, cnorm, res->labels, dist, &changed, &res->inertia[it]);
    ss_log_debug(ctx, "kmeans: pass %" PRId64 ": inertia %.9g, %" PRId64 " labels changed", it, res->inertia[it],
                 changed);
    if (it > 0 && changed <= pb->tol_count) {
      res->converged = 1;
      break;
    }
    if (it == pb->max_iterations) break;
    st = cpu_update(ctx, be, pb, res->labels, dist, res->centroids, cnorm, &res->n_reseeded);
    if (st != SS_OK) break;
  }
  res->n_iterations = it;
  res->final_inertia = res->inertia[it];
  free(dist);
  free(cnorm);
  return st;
}

ss_status ss_kmeans_cpu_assign(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, const float *centroids_c,
                               int32_t *labels, float *dist) {
  float *cnorm;
  SS_TRY(SS_ALLOC(ctx, cnorm, (size_t)pb->k, "k-means centroid norms"));
  centroid_norms(centroids_c, pb->k, pb->d, cnorm);
  for (int64_t i = 0; i < pb->n; i++) labels[i] = -1;
  int64_t changed;
  double inertia;
  cpu_assign_pass(be, pb, centroids_c, cnorm, labels, dist, &changed, &inertia);
  free(cnorm);
  return SS_OK;
}

/* --- initialisation and dispatch ------------------------------------------------------------------ */

/* k distinct points drawn uniformly (rejection against a mark per point). */
static ss_status random_init(ss_ctx *ctx, const ss_kmeans_problem *pb, uint64_t seed, float *centroids_c) {
  unsigned char *taken;
  SS_TRY(SS_CALLOC(ctx, taken, (size_t)pb->n, "k-means random init"));
  ss_rng r = ss_rng_make(seed, SS_RNG_KMEANS_INIT, SS_KM_STREAM_RANDOM);
  for (int64_t c = 0; c < pb->k;) {
    int64_t i = (int64_t)ss_rng_next_below(&r, (uint64_t)pb->n);
    if (taken[i]) continue;
    taken[i] = 1;
    copy_centred_point(pb, i, centroids_c + c * pb->d);
    c++;
  }
  free(taken);
  return SS_OK;
}

/* Starting centroids, centred. With CUDA, k-means++ runs on the device problem g. */
static ss_status init_centred(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, const ss_kmeans_opts *o,
                              ss_kmeans_gpu *g, float *centroids_c) {
  int64_t kd = pb->k * pb->d;
  if (o->init_centroids) {
    SS_TRY(check_finite(ctx, "initial centroids", o->init_centroids, pb->k, pb->d));
    for (int64_t e = 0; e < kd; e++) centroids_c[e] = ss_km_centred(o->init_centroids[e], pb->shift[e % pb->d]);
    return SS_OK;
  }
  if (o->init == SS_KMEANS_INIT_RANDOM) return random_init(ctx, pb, o->seed, centroids_c);
  if (be->kind == SS_DEVICE_CUDA) return ss_kmeans_gpu_pp(ctx, g, o->seed, centroids_c);
  return ss_kmeans_cpu_pp(ctx, be, pb, o->seed, centroids_c);
}

static void uncentre(const ss_kmeans_problem *pb, float *cent) {
  for (int64_t e = 0; e < pb->k * pb->d; e++) cent[e] += pb->shift[e % pb->d];
}

/* The shared body of fit and init_centroids: res == NULL stops after the initialisation. */
static ss_status run(ss_ctx *ctx, const ss_backend *be, const ss_kmeans_problem *pb, const ss_kmeans_opts *o,
                     float *init_out, ss_kmeans_result *res) {
  float *init_c;
  SS_TRY(SS_ALLOC(ctx, init_c, (size_t)(pb->k * pb->d), "k-means initial centroids"));
  ss_kmeans_gpu *g = NULL;
  ss_status st = SS_OK;
  if (be->kind == SS_DEVICE_CUDA) st = ss_kmeans_gpu_open(ctx, be, pb, &g);
  if (st == SS_OK) st = init_centred(ctx, be, pb, o, g, init_c);
  if (st == SS_OK && init_out) {
    memcpy(init_out, init_c, sizeof(float) * (size_t)(pb->k * pb->d));
    uncentre(pb, init_out);
  }
  if (st == SS_OK && res) {
    st = ss_kmeans_result_alloc(ctx, pb, res);
    if (st == SS_OK) {
      st = be->kind == SS_DEVICE_CUDA ? ss_kmeans_gpu_lloyd(ctx, g, init_c, res)
                                      : ss_kmeans_cpu_lloyd(ctx, be, pb, init_c, res);
      if (st == SS_OK) uncentre(pb, res->centroids);
      else ss_kmeans_result_free(res);
    }
  }
  ss_kmeans_gpu_close(g);
  free(init_c);
  return st;
}

ss_status ss_kmeans_fit(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d,
                        const ss_kmeans_opts *o, ss_kmeans_result *res) {
  memset(res, 0, sizeof(*res));
  ss_kmeans_problem pb;
  SS_TRY(ss_kmeans_prepare(ctx, be, x, n, d, o, &pb));
  double t0 = ss_now();
  ss_status st = run(ctx, be, &pb, o, NULL, res);
  if (st == SS_OK)
    ss_log(ctx, o->quiet ? SS_LOG_DEBUG : SS_LOG_INFO,
           "kmeans: %" PRId64 " points, d = %" PRId64 ", k = %" PRId64 " on %s: %" PRId64
           " iterations (%s), inertia %.9g, %.3f s",
           n, d, o->k, ss_device_kind_name(be->kind), res->n_iterations, res->converged ? "converged" : "iteration cap",
           res->final_inertia, ss_now() - t0);
  ss_kmeans_problem_free(&pb);
  return st;
}

ss_status ss_kmeans_init_centroids(ss_ctx *ctx, const ss_backend *be, const float *x, int64_t n, int64_t d,
                                   const ss_kmeans_opts *o, float *centroids) {
  ss_kmeans_problem pb;
  SS_TRY(ss_kmeans_prepare(ctx, be, x, n, d, o, &pb));
  ss_status st = run(ctx, be, &pb, o, centroids, NULL);
  ss_kmeans_problem_free(&pb);
  return st;
}

ss_status ss_kmeans_assign(ss_ctx *ctx, const ss_backend *be, const float *centroids, int64_t k, int64_t d,
                           const float *x, int64_t n, int32_t *labels, float *dist) {
  if (k < 1) return ss_fail(ctx, SS_ERR_INPUT, "kmeans: the model has no centroids");
  if (n == 0) return SS_OK;
  if (d <= 0) return ss_fail(ctx, SS_ERR_INPUT, "kmeans: the points have no dimensions");
  SS_TRY(check_finite(ctx, "points", x, n, d));
  SS_TRY(check_finite(ctx, "centroids", centroids, k, d));
  ss_kmeans_problem pb = {.x = x, .n = n, .d = d, .k = k};
  float *cent_c;
  SS_TRY(SS_ALLOC(ctx, pb.shift, (size_t)d, "k-means shift"));
  if (SS_ALLOC(ctx, cent_c, (size_t)(k * d), "k-means centred centroids") != SS_OK) {
    free(pb.shift);
    return ctx->status;
  }
  for (int64_t j = 0; j < d; j++) {
    double s = 0.0;
    for (int64_t c = 0; c < k; c++) s += (double)centroids[c * d + j];
    pb.shift[j] = (float)(s / (double)k);
  }
  for (int64_t e = 0; e < k * d; e++) cent_c[e] = ss_km_centred(centroids[e], pb.shift[e % d]);
  ss_status st;
  if (be->kind == SS_DEVICE_CUDA) {
    ss_kmeans_gpu *g = NULL;
    st = ss_kmeans_gpu_open(ctx, be, &pb, &g);
    if (st == SS_OK) st = ss_kmeans_gpu_assign(ctx, g, cent_c, labels, dist);
    ss_kmeans_gpu_close(g);
  } else {
    st = ss_kmeans_cpu_assign(ctx, be, &pb, cent_c, labels, dist);
  }
  free(cent_c);
  free(pb.shift);
  return st;
}
