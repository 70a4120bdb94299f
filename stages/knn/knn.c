/* knn.c — KNN: the CPU reference (candidates by the centred GEMM formula, exact re-rank with a
 * certificate), the backend dispatch, the vote, the incremental (serial-equivalent) mode and
 * cross-validation. See knn.h for the result contract and docs/knn.md for the algorithms. */
#include "stages/knn/knn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/rng.h"

#if defined(_OPENMP)
#include <omp.h>
#define SS_OMP(x) _Pragma(#x)
#define KNN_THREAD() omp_get_thread_num()
#else
#define SS_OMP(x)
#define KNN_THREAD() 0
#endif

/* Queries a CPU thread scores together, so that each reference row is read once per block. */
#define KNN_CPU_QUERY_BLOCK 8

typedef struct {
  double v;
  int64_t i;
} knn_item;

static int item_less(knn_item a, knn_item b) { return a.v < b.v || (a.v == b.v && a.i < b.i); }

static int item_cmp(const void *pa, const void *pb) {
  knn_item a = *(const knn_item *)pa, b = *(const knn_item *)pb;
  return item_less(a, b) ? -1 : item_less(b, a) ? 1 : 0;
}

/* Bounded max-heap keeping the `cap` smallest items seen (by value, then index). */
static void heap_push(knn_item *h, int64_t *size, int64_t cap, knn_item x) {
  int64_t c;
  if (*size < cap) {
    c = (*size)++;
    while (c > 0 && item_less(h[(c - 1) / 2], x)) {
      h[c] = h[(c - 1) / 2];
      c = (c - 1) / 2;
    }
    h[c] = x;
    return;
  }
  if (!item_less(x, h[0])) return;
  c = 0;
  for (;;) { /* sift x down from the root: swap with the larger child while it exceeds x */
    int64_t l = 2 * c + 1, big = c;
    knn_item top = x;
    if (l < cap && item_less(top, h[l])) big = l, top = h[l];
    if (l + 1 < cap && item_less(top, h[l + 1])) big = l + 1;
    if (big == c) break;
    h[c] = h[big];
    c = big;
  }
  h[c] = x;
}

static void items_sort(knn_item *a, int64_t n) { qsort(a, (size_t)n, sizeof(*a), item_cmp); }

void ss_knn_opts_from_params(ss_knn_opts *o, const ss_params *p) {
  memset(o, 0, sizeof(*o));
  o->k = p->knn.k;
  o->strategy = p->knn.strategy;
  o->query_tile = p->knn.query_tile;
  o->ref_tile = p->knn.ref_tile;
}

const char *ss_knn_strategy_name(int strategy) {
  static const char *const names[] = {"auto", "kmin", "bitonic", "warp"};
  return strategy >= 0 && strategy <= SS_KNN_WARP ? names[strategy] : "unknown";
}

/* ---- index ------------------------------------------------------------------------------------ */

static ss_status index_mean(ss_ctx *ctx, ss_knn_index *ix) {
  double *acc;
  SS_CALLOC(ctx, acc, (size_t)ix->d, "KNN reference mean");
  for (int64_t r = 0; r < ix->n; r++)
    for (int64_t j = 0; j < ix->d; j++) acc[j] += ix->ref[r * ix->d + j];
  for (int64_t j = 0; j < ix->d; j++) ix->mean[j] = (float)(acc[j] / (double)ix->n);
  free(acc);
  return SS_OK;
}

static ss_status index_cpu_prepare(ss_ctx *ctx, ss_knn_index *ix) {
  int64_t n = ix->n, d = ix->d;
  SS_TRY(SS_ALLOC(ctx, ix->ref_c, (size_t)(n * d), "KNN centred references"));
  SS_TRY(SS_ALLOC(ctx, ix->ref_norm, (size_t)n, "KNN reference norms"));
  double mx = 0.0;
  SS_OMP(omp parallel for reduction(max : mx) schedule(static))
  for (int64_t r = 0; r < n; r++) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; j++) {
      float c = ix->ref[r * d + j] - ix->mean[j];
      ix->ref_c[r * d + j] = c;
      s += c * c;
    }
    ix->ref_norm[r] = s;
    if (s > mx) mx = s;
  }
  ix->ref_norm_max = sqrt(mx);
  return SS_OK;
}

ss_status ss_knn_index_create(ss_ctx *ctx, const ss_backend *be, const float *ref, int64_t n, int64_t d,
                              ss_knn_index **out) {
  *out = NULL;
  if (n < 1 || d < 1)
    return ss_fail(ctx, SS_ERR_INPUT, "knn: expected at least one reference point and one dimension, got %lld x %lld",
                   (long long)n, (long long)d);
  ss_knn_index *ix;
  SS_TRY(SS_CALLOC(ctx, ix, 1, "KNN index"));
  ix->be = be;
  ix->n = n;
  ix->d = d;
  ix->ref = ref;
  ss_status st = SS_ALLOC(ctx, ix->mean, (size_t)d, "KNN reference mean");
  if (st == SS_OK) st = index_mean(ctx, ix);
  if (st == SS_OK) {
    if (be->kind == SS_DEVICE_CUDA) {
      st = ss_knn_cuda_index_create(ctx, ix);
    } else {
      st = index_cpu_prepare(ctx, ix);
    }
  }
  if (st != SS_OK) {
    ss_knn_index_free(ix);
    return st;
  }
  *out = ix;
  return SS_OK;
}

void ss_knn_index_free(ss_knn_index *ix) {
  if (!ix) return;
  if (ix->cuda) ss_knn_cuda_index_free(ix);
  free(ix->mean);
  free(ix->ref_c);
  free(ix->ref_norm);
  free(ix);
}

/* ---- CPU search ------------------------------------------------------------------------------- */

/* The exact scan with the caller's heap of min(k, n) items. */
static void exact_scan_into(const float *ref, int64_t n, int64_t d, const float *q, int64_t k, int64_t *idx,
                            double *dist, knn_item *h) {
  int64_t size = 0;
  for (int64_t r = 0; r < n; r++) heap_push(h, &size, k, (knn_item){ss_knn_exact_dist(q, ref + r * d, d), r});
  items_sort(h, size);
  for (int64_t c = 0; c < k; c++) {
    idx[c] = h[c].i;
    if (dist) dist[c] = h[c].v;
  }
}

void ss_knn_exact_scan(const float *ref, int64_t n, int64_t d, const float *q, int64_t k, int64_t *idx, double *dist) {
  knn_item stack_heap[64];
  /* Deliberately outside ss_alloc (no context here): the search itself uses exact_scan_into with
   * scratch made up front; this entry point serves the device tests. */
  knn_item *h = k <= 64 ? stack_heap : malloc(sizeof(knn_item) * (size_t)k);
  if (!h) abort(); /* k items: the caller already holds m × k outputs of this size */
  exact_scan_into(ref, n, d, q, k, idx, dist, h);
  if (h != stack_heap) free(h);
}

/* Exact re-rank of kc candidates sorted by approximate distance; writes the first k and returns 1
 * when the certificate holds (no reference outside the candidates can be among the first k). */
static int rerank_certify(const ss_knn_index *ix, const float *q, double q_norm, knn_item *cand, int64_t kc, int64_t k,
                          int64_t *idx, double *dist) {
  double approx_last = cand[kc - 1].v;
  for (int64_t c = 0; c < kc; c++) cand[c].v = ss_knn_exact_dist(q, ix->ref + cand[c].i * ix->d, ix->d);
  items_sort(cand, kc);
  for (int64_t c = 0; c < k; c++) {
    idx[c] = cand[c].i;
    if (dist) dist[c] = cand[c].v;
  }
  if (kc >= ix->n) return 1;
  return approx_last - ss_knn_error_bound(ix->d, q_norm, ix->ref_norm_max) > cand[k - 1].v;
}

/* One block of up to KNN_CPU_QUERY_BLOCK queries; heaps and qc are per-thread scratch. Returns
 * the number of queries that needed the exact full scan. */
static int64_t cpu_query_block(const ss_knn_index *ix, const float *query, int64_t q0, int64_t nq, int64_t k,
                               int64_t kc, knn_item *heaps, float *qc, int64_t *idx, double *dist) {
  int64_t d = ix->d, n = ix->n, fallbacks = 0;
  float qn[KNN_CPU_QUERY_BLOCK];
  int64_t size[KNN_CPU_QUERY_BLOCK] = {0};
  for (int64_t b = 0; b < nq; b++) {
    float s = 0.0f;
    for (int64_t j = 0; j < d; j++) {
      float c = query[(q0 + b) * d + j] - ix->mean[j];
      qc[b * d + j] = c;
      s += c * c;
    }
    qn[b] = s;
  }
  for (int64_t r = 0; r < n; r++) {
    const float *rc = ix->ref_c + r * d;
    for (int64_t b = 0; b < nq; b++) {
      const float *qb = qc + b * d;
      float dot = 0.0f;
      SS_OMP(omp simd reduction(+ : dot))
      for (int64_t j = 0; j < d; j++) dot += qb[j] * rc[j];
      float v = qn[b] + ix->ref_norm[r] - 2.0f * dot;
      heap_push(heaps + b * kc, &size[b], kc, (knn_item){v > 0.0f ? v : 0.0f, r});
    }
  }
  for (int64_t b = 0; b < nq; b++) {
    knn_item *cand = heaps + b * kc;
    int64_t qi = q0 + b;
    items_sort(cand, kc);
    if (!rerank_certify(ix, query + qi * d, sqrt((double)qn[b]), cand, kc, k, idx + qi * k,
                        dist ? dist + qi * k : NULL)) {
      /* cand is spent; a fallback happens only when kc < n, so kc > k and it holds the scan's heap */
      exact_scan_into(ix->ref, n, d, query + qi * d, k, idx + qi * k, dist ? dist + qi * k : NULL, cand);
      fallbacks++;
    }
  }
  return fallbacks;
}

ss_status ss_knn_cpu_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                            int64_t *idx, double *dist, ss_knn_stats *stats) {
  int64_t k = o->k, kc = ss_knn_candidates(k, ix->n), d = ix->d;
  int64_t n_blocks = (m + KNN_CPU_QUERY_BLOCK - 1) / KNN_CPU_QUERY_BLOCK, fallbacks = 0;
  int threads = ss_threads_resolve(ix->be->n_threads);
  const size_t heap_per = (size_t)(KNN_CPU_QUERY_BLOCK * kc), qc_per = (size_t)(KNN_CPU_QUERY_BLOCK * d);
  knn_item *heaps = NULL; /* per-thread scratch, made before the threads start */
  float *qcs = NULL;
  ss_status st = SS_ALLOC(ctx, heaps, (size_t)threads * heap_per, "knn: per-thread candidate heaps");
  if (st == SS_OK) st = SS_ALLOC(ctx, qcs, (size_t)threads * qc_per, "knn: per-thread centred queries");
  if (st != SS_OK) {
    free(heaps);
    return st;
  }
  SS_OMP(omp parallel num_threads(threads) reduction(+ : fallbacks)) {
    knn_item *h = heaps + (size_t)KNN_THREAD() * heap_per;
    float *qc = qcs + (size_t)KNN_THREAD() * qc_per;
    SS_OMP(omp for schedule(dynamic, 1))
    for (int64_t b = 0; b < n_blocks; b++) {
      int64_t q0 = b * KNN_CPU_QUERY_BLOCK, nq = m - q0 < KNN_CPU_QUERY_BLOCK ? m - q0 : KNN_CPU_QUERY_BLOCK;
      fallbacks += cpu_query_block(ix, query, q0, nq, k, kc, h, qc, idx, dist);
    }
  }
  free(heaps);
  free(qcs);
  if (stats) {
    stats->candidates = kc;
    stats->fallbacks = fallbacks;
    stats->strategy = SS_KNN_AUTO;
  }
  return SS_OK;
}

/* ---- dispatch --------------------------------------------------------------------------------- */

static ss_status cuda_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                             int64_t *idx, double *dist, ss_knn_stats *stats) {
  uint8_t *cert;
  SS_TRY(SS_ALLOC(ctx, cert, (size_t)(m > 0 ? m : 1), "KNN certificates"));
  ss_status st = ss_knn_cuda_search(ctx, ix, o, query, m, idx, dist, cert, stats);
  if (st == SS_OK && !o->gemm_only && stats) {
    int64_t fallbacks = 0; /* the device already answered these by the exact scan */
    for (int64_t i = 0; i < m; i++) fallbacks += !cert[i];
    stats->fallbacks = fallbacks;
  }
  free(cert);
  return st;
}

ss_status ss_knn_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query, int64_t m,
                        int64_t *idx, double *dist, ss_knn_stats *stats) {
  if (o->k < 1) return ss_fail(ctx, SS_ERR_INPUT, "knn: k: expected an integer >= 1, got %lld", (long long)o->k);
  if (o->k > ix->n)
    return ss_fail(ctx, SS_ERR_INPUT, "knn: k = %lld exceeds the number of reference points (%lld)", (long long)o->k,
                   (long long)ix->n);
  if (stats) memset(stats, 0, sizeof(*stats));
  if (m == 0) return SS_OK;
  if (ix->be->kind == SS_DEVICE_CUDA) return cuda_search(ctx, ix, o, query, m, idx, dist, stats);
  return ss_knn_cpu_search(ctx, ix, o, query, m, idx, dist, stats);
}

/* ---- vote and classification ------------------------------------------------------------------ */

int32_t ss_knn_vote(const int32_t *nb_labels, int64_t k) {
  /* Classes in order of their first (= nearest) member; a strict > keeps the earliest on a tie.
   * O(k × classes), no allocation. */
  int32_t best = nb_labels[0];
  int64_t best_count = 0;
  for (int64_t i = 0; i < k; i++) {
    int seen = 0;
    for (int64_t j = 0; j < i && !seen; j++) seen = nb_labels[j] == nb_labels[i];
    if (seen) continue;
    int64_t count = 0;
    for (int64_t j = i; j < k; j++) count += nb_labels[j] == nb_labels[i];
    if (count > best_count) best = nb_labels[i], best_count = count;
  }
  return best;
}

/* Merge extra (index, distance) items into a row's sorted k-list. */
static void row_merge(int64_t *row_idx, double *row_dist, int64_t k, const knn_item *extra, int64_t n_extra,
                      knn_item *heap) {
  int64_t size = 0;
  for (int64_t c = 0; c < k; c++) heap_push(heap, &size, k, (knn_item){row_dist[c], row_idx[c]});
  for (int64_t e = 0; e < n_extra; e++) heap_push(heap, &size, k, extra[e]);
  items_sort(heap, size);
  for (int64_t c = 0; c < k; c++) row_idx[c] = heap[c].i, row_dist[c] = heap[c].v;
}

/* Neighbours among earlier queries of earlier blocks: a search against those queries. */
static ss_status merge_previous_blocks(ss_ctx *ctx, const ss_knn_index *ix, const ss_knn_opts *o, const float *query,
                                       int64_t s, int64_t e, int64_t *idx, double *dist) {
  int64_t k = o->k, d = ix->d, nb = e - s;
  ss_knn_opts po = *o;
  po.k = k < s ? k : s;
  ss_knn_index *prev = NULL;
  int64_t *pi = NULL;
  double *pd = NULL;
  knn_item *tmp = NULL;
  ss_status st = ss_knn_index_create(ctx, ix->be, query, s, d, &prev);
  if (st == SS_OK) st = SS_ALLOC(ctx, pi, (size_t)(nb * po.k), "KNN incremental neighbours");
  if (st == SS_OK) st = SS_ALLOC(ctx, pd, (size_t)(nb * po.k), "KNN incremental distances");
  if (st == SS_OK) st = SS_ALLOC(ctx, tmp, (size_t)(nb * (po.k + k)), "KNN incremental merge");
  if (st == SS_OK) st = ss_knn_search(ctx, prev, &po, query + s * d, nb, pi, pd, NULL);
  if (st == SS_OK) {
    SS_OMP(omp parallel for schedule(static))
    for (int64_t b = 0; b < nb; b++) {
      knn_item *extra = tmp + b * (po.k + k), *heap = extra + po.k;
      for (int64_t c = 0; c < po.k; c++) extra[c] = (knn_item){pd[b * po.k + c], ix->n + pi[b * po.k + c]};
      row_merge(idx + (s + b) * k, dist + (s + b) * k, k, extra, po.k, heap);
    }
  }
  ss_knn_index_free(prev);
  free(pi);
  free(pd);
  free(tmp);
  return st;
}

/* Neighbours among earlier queries of the same block: the exact lower triangle, row by row. */
static ss_status merge_within_block(ss_ctx *ctx, const ss_knn_index *ix, int64_t k, const float *query, int64_t s,
                                    int64_t e, int64_t *idx, double *dist) {
  int64_t d = ix->d, nb = e - s;
  const int threads = ss_threads_resolve(ix->be->n_threads);
  const size_t per = (size_t)(nb + k);
  knn_item *extras = NULL; /* per-thread scratch, made before the threads start */
  SS_TRY(SS_ALLOC(ctx, extras, (size_t)threads * per, "knn: incremental block merge"));
  SS_OMP(omp parallel num_threads(threads)) {
    knn_item *extra = extras + (size_t)KNN_THREAD() * per;
    SS_OMP(omp for schedule(dynamic, 16))
    for (int64_t i = s; i < e; i++) {
      int64_t n_extra = 0;
      knn_item kth = {dist[i * k + k - 1], idx[i * k + k - 1]};
      for (int64_t j = s; j < i; j++) {
        knn_item it = {ss_knn_exact_dist(query + i * d, query + j * d, d), ix->n + j};
        if (item_less(it, kth)) extra[n_extra++] = it;
      }
      if (n_extra) row_merge(idx + i * k, dist + i * k, k, extra, n_extra, extra + n_extra);
    }
  }
  free(extras);
  return SS_OK;
}

ss_status ss_knn_classify(ss_ctx *ctx, ss_knn_index *ix, const int32_t *ref_labels, const ss_knn_opts *o,
                          const float *query, int64_t m, int incremental, int32_t *labels, int64_t *idx, double *dist,
                          ss_knn_stats *stats) {
  int64_t k = o->k;
  int64_t *I = idx;
  double *D = dist;
  int32_t *nb = NULL;
  ss_status st = SS_OK;
  if (!I) st = SS_ALLOC(ctx, I, (size_t)(m * k > 0 ? m * k : 1), "KNN neighbour indices");
  if (st == SS_OK && !D) st = SS_ALLOC(ctx, D, (size_t)(m * k > 0 ? m * k : 1), "KNN neighbour distances");
  if (st == SS_OK) st = SS_ALLOC(ctx, nb, (size_t)k, "KNN vote");
  if (st == SS_OK) st = ss_knn_search(ctx, ix, o, query, m, I, D, stats);
  /* The neighbour lists never depend on labels: resolve the "earlier queries" part in bulk, block by
   * block, then vote serially (cheap) so that each vote sees the labels of earlier queries. */
  for (int64_t s = 0; incremental && st == SS_OK && s < m; s += SS_KNN_INCREMENTAL_BLOCK) {
    int64_t e = s + SS_KNN_INCREMENTAL_BLOCK < m ? s + SS_KNN_INCREMENTAL_BLOCK : m;
    if (s > 0) st = merge_previous_blocks(ctx, ix, o, query, s, e, I, D);
    if (st == SS_OK) st = merge_within_block(ctx, ix, k, query, s, e, I, D);
  }
  for (int64_t i = 0; st == SS_OK && i < m; i++) {
    for (int64_t c = 0; c < k; c++) {
      int64_t r = I[i * k + c];
      nb[c] = r < ix->n ? ref_labels[r] : labels[r - ix->n];
    }
    labels[i] = ss_knn_vote(nb, k);
  }
  if (I != idx) free(I);
  if (D != dist) free(D);
  free(nb);
  return st;
}

/* ---- cross-validation ------------------------------------------------------------------------- */

static ss_status cv_fold(ss_ctx *ctx, const ss_backend *be, const ss_knn_opts *o, const float *x, const int32_t *labels,
                         int64_t n, int64_t d, const int64_t *fold_of, int64_t f, float *train, int32_t *train_lab,
                         float *test, int32_t *test_lab, int32_t *pred, int64_t *correct) {
  int64_t nt = 0, ne = 0;
  for (int64_t i = 0; i < n; i++) {
    if (fold_of[i] == f) {
      memcpy(test + ne * d, x + i * d, sizeof(float) * (size_t)d);
      test_lab[ne++] = labels[i];
    } else {
      memcpy(train + nt * d, x + i * d, sizeof(float) * (size_t)d);
      train_lab[nt++] = labels[i];
    }
  }
  ss_knn_index *ix;
  SS_TRY(ss_knn_index_create(ctx, be, train, nt, d, &ix));
  ss_status st = ss_knn_classify(ctx, ix, train_lab, o, test, ne, 0, pred, NULL, NULL, NULL);
  for (int64_t i = 0; st == SS_OK && i < ne; i++) *correct += pred[i] == test_lab[i];
  ss_knn_index_free(ix);
  return st;
}

ss_status ss_knn_cross_validate(ss_ctx *ctx, const ss_backend *be, const ss_knn_opts *o, const float *x,
                                const int32_t *labels, int64_t n, int64_t d, int64_t folds, uint64_t seed,
                                int64_t *correct) {
  *correct = 0;
  if (folds < 2 || folds > n)
    return ss_fail(ctx, SS_ERR_INPUT, "knn: --cv: expected between 2 and %lld folds (the labelled points), got %lld",
                   (long long)n, (long long)folds);
  int64_t *perm = NULL, *fold_of = NULL;
  float *buf = NULL;
  int32_t *lab = NULL;
  ss_status st = SS_ALLOC(ctx, perm, (size_t)n, "KNN folds");
  if (st == SS_OK) st = SS_ALLOC(ctx, fold_of, (size_t)n, "KNN folds");
  if (st == SS_OK) st = SS_ALLOC(ctx, buf, (size_t)(2 * n * d), "KNN fold data");
  if (st == SS_OK) st = SS_ALLOC(ctx, lab, (size_t)(3 * n), "KNN fold labels");
  if (st == SS_OK) {
    ss_rng rng = ss_rng_make(seed, SS_RNG_KNN_GENERATE, 1); /* stream 1: folds; stream 0: --generate */
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    ss_rng_shuffle(&rng, perm, (size_t)n);
    for (int64_t p = 0; p < n; p++) fold_of[perm[p]] = p % folds;
  }
  for (int64_t f = 0; st == SS_OK && f < folds; f++)
    st = cv_fold(ctx, be, o, x, labels, n, d, fold_of, f, buf, lab, buf + n * d, lab + n, lab + 2 * n, correct);
  free(perm);
  free(fold_of);
  free(buf);
  free(lab);
  return st;
}
