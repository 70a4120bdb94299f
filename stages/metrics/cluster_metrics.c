/* cluster_metrics.c — adjusted Rand index and majority mapping from a sorted list of label pairs
 * (no dense contingency table, so any label range works). */
#include "stages/metrics/cluster_metrics.h"

#include <inttypes.h>
#include <stdlib.h>

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static double pairs(double m) { return m * (m - 1.0) / 2.0; }

/* Sorted (a << 32 | b) codes of the n points. */
static ss_status pair_codes(ss_ctx *ctx, const int32_t *a, const int32_t *b, int64_t n, uint64_t **out) {
  if (n < 1) return ss_fail(ctx, SS_ERR_INPUT, "cluster metrics: no points");
  for (int64_t p = 0; p < n; p++)
    if (a[p] < 0 || b[p] < 0)
      return ss_fail(ctx, SS_ERR_INPUT, "cluster metrics: point %" PRId64 ": negative label (%d, %d)", p + 1, (int)a[p],
                     (int)b[p]);
  uint64_t *c = NULL;
  SS_TRY(SS_ALLOC(ctx, c, (size_t)n, "label pairs"));
  for (int64_t p = 0; p < n; p++) c[p] = (uint64_t)(uint32_t)a[p] << 32 | (uint32_t)b[p];
  qsort(c, (size_t)n, sizeof(uint64_t), cmp_u64);
  *out = c;
  return SS_OK;
}

/* Σ C(size, 2) over the clusters of one labelling (sorted copy of the labels). */
static ss_status sum_pairs(ss_ctx *ctx, const int32_t *a, int64_t n, double *out) {
  uint64_t *c = NULL;
  SS_TRY(SS_ALLOC(ctx, c, (size_t)n, "labels"));
  for (int64_t p = 0; p < n; p++) c[p] = (uint32_t)a[p];
  qsort(c, (size_t)n, sizeof(uint64_t), cmp_u64);
  double s = 0.0;
  for (int64_t i = 0, j; i < n; i = j) {
    for (j = i; j < n && c[j] == c[i]; j++) {
    }
    s += pairs((double)(j - i));
  }
  free(c);
  *out = s;
  return SS_OK;
}

ss_status ss_cluster_ari(ss_ctx *ctx, const int32_t *a, const int32_t *b, int64_t n, double *ari) {
  uint64_t *c = NULL;
  SS_TRY(pair_codes(ctx, a, b, n, &c));
  double index = 0.0, sa, sb;
  for (int64_t i = 0, j; i < n; i = j) {
    for (j = i; j < n && c[j] == c[i]; j++) {
    }
    index += pairs((double)(j - i));
  }
  free(c);
  SS_TRY(sum_pairs(ctx, a, n, &sa));
  SS_TRY(sum_pairs(ctx, b, n, &sb));
  double expected = n > 1 ? sa * sb / pairs((double)n) : 0.0, max = (sa + sb) / 2.0;
  *ari = max == expected ? 1.0 : (index - expected) / (max - expected);
  return SS_OK;
}

ss_status ss_cluster_majority_map(ss_ctx *ctx, const int32_t *found, const int32_t *truth, int64_t n, int32_t *mapped,
                                  double *purity) {
  uint64_t *c = NULL;
  SS_TRY(pair_codes(ctx, found, truth, n, &c));
  int32_t max_found = 0;
  for (int64_t p = 0; p < n; p++)
    if (found[p] > max_found) max_found = found[p];
  int32_t *major = NULL;
  ss_status st = SS_ALLOC(ctx, major, (size_t)max_found + 1, "cluster metrics: majority labels");
  if (st != SS_OK) {
    free(c);
    return st;
  }
  int64_t kept = 0;
  for (int64_t i = 0, j; i < n; i = j) { /* runs of one found cluster, true labels increasing */
    uint32_t f = (uint32_t)(c[i] >> 32);
    int64_t best = 0;
    for (j = i; j < n && (uint32_t)(c[j] >> 32) == f;) {
      int64_t k = j;
      while (k < n && c[k] == c[j]) k++;
      if (k - j > best) best = k - j, major[f] = (int32_t)(uint32_t)c[j]; /* strict: lowest label on ties */
      j = k;
    }
    kept += best;
  }
  for (int64_t p = 0; p < n; p++) mapped[p] = major[found[p]];
  if (purity) *purity = (double)kept / (double)n;
  free(major);
  free(c);
  return SS_OK;
}

ss_status ss_cluster_merged_ari(ss_ctx *ctx, const int32_t *found, const int32_t *truth, int64_t n, double *ari) {
  int32_t *mapped = NULL;
  SS_TRY(SS_ALLOC(ctx, mapped, (size_t)(n > 0 ? n : 1), "mapped labels"));
  ss_status s = ss_cluster_majority_map(ctx, found, truth, n, mapped, NULL);
  if (s == SS_OK) s = ss_cluster_ari(ctx, mapped, truth, n, ari);
  free(mapped);
  return s;
}
