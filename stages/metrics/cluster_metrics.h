/* cluster_metrics.h — agreement between two labellings of the same points: the adjusted Rand index
 * (Hubert & Arabie) and the "merged" ARI of MASKED_EM.md §9, where every found cluster is first
 * mapped to its majority true cluster (so over-splitting a true unit costs nothing). Shared by the
 * masked EM tests and benchmarks on both backends. Labels are non-negative int32. */
#ifndef SS_CLUSTER_METRICS_H
#define SS_CLUSTER_METRICS_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Adjusted Rand index of labellings a and b (1 when identical up to renaming; 1 as well when both
 * put every point in one cluster). */
ss_status ss_cluster_ari(ss_ctx *ctx, const int32_t *a, const int32_t *b, int64_t n, double *ari);
/* mapped[p] = the true label most frequent in found[p]'s cluster (ties: the lowest true label);
 * purity (may be NULL) = the fraction of points whose true label is their cluster's majority. */
ss_status ss_cluster_majority_map(ss_ctx *ctx, const int32_t *found, const int32_t *truth, int64_t n,
                                  int32_t *mapped, double *purity);
/* ARI between the majority-mapped found labels and the truth. */
ss_status ss_cluster_merged_ari(ss_ctx *ctx, const int32_t *found, const int32_t *truth, int64_t n, double *ari);

#ifdef __cplusplus
}
#endif
#endif
