/* phy.h — the phy folder (template-gui) that `sort` writes, and a checker of such folders.
 *
 * Files (shapes with N spikes, T templates, W samples, C channels, P PCs, F channels per spike):
 *   params.py              dat_path, n_channels_dat, dtype, offset, sample_rate, hp_filtered
 *   spike_times.npy        int64 [N]        samples, non-decreasing
 *   spike_clusters.npy     int32 [N]
 *   spike_templates.npy    int32 [N]        in [0, T)
 *   amplitudes.npy         float32 [N]
 *   templates.npy          float32 [T × W × C]
 *   channel_map.npy        int32 [C]        in [0, n_channels_dat)
 *   channel_positions.npy  float32 [C × 2]  distinct
 *   pc_features.npy        float32 [N × P × F]  spike i's PCs on pc_feature_ind[spike_templates[i]]
 *   pc_feature_ind.npy     int32 [T × F]    in [0, C)
 *   similar_templates.npy  float32 [T × T]
 *   cluster_group.tsv      "cluster_id\tgroup" then one line per cluster (noise | mua | good | unsorted)
 *   cluster_KSLabel.tsv    "cluster_id\tKSLabel" the same way (optional)
 *   cluster_NAME.tsv       "cluster_id\tNAME" then one number per cluster, one file per metric (optional;
 *                          phy shows each as a column of its cluster view)
 * Every file is written atomically. io/ knows nothing of the stages: the caller fills ss_phy_folder. */
#ifndef SS_PHY_H
#define SS_PHY_H

#include <stdint.h>

#include "io/source.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_PHY_PATH_MAX 4096

typedef struct {
  int64_t n_spikes;
  int n_templates, n_wave, n_channels, n_pcs, n_feat_channels;
  const int64_t *spike_times;        /* [N] */
  const int32_t *spike_clusters;     /* [N] */
  const int32_t *spike_templates;    /* [N] */
  const float *amplitudes;           /* [N] */
  const float *templates;            /* [T × W × C] */
  const int32_t *channel_map;        /* [C] */
  const float *channel_positions;    /* [C × 2] */
  const float *pc_features;          /* [N × P × F] */
  const int32_t *pc_feature_ind;     /* [T × F] */
  const float *similar_templates;    /* [T × T] */
  const int32_t *cluster_ids;        /* [n_groups] */
  const char *const *cluster_groups; /* [n_groups] */
  int n_groups;
  const char *const *cluster_ks_labels; /* [n_groups] cluster_KSLabel.tsv; NULL: not written */
  int n_metrics;
  const char *const *metric_names;    /* [n_metrics] cluster_NAME.tsv */
  const double *const *metric_values; /* [n_metrics][n_groups]; NaN is written "nan" */
  /* params.py */
  char dat_path[SS_PHY_PATH_MAX]; /* "" : no raw data (dat_path = []) */
  int n_channels_dat;
  const char *dtype; /* "int16" */
  int64_t offset;
  double sample_rate;
  int hp_filtered;
} ss_phy_folder;

/* Where phy can memory-map the raw int16 samples of a source: a flat binary file (at the spec's
 * byte offset), or an int16 time-major contiguous unfiltered HDF5 dataset (at its storage offset).
 * Fills dat_path/offset and returns 1, or returns 0 (phy then shows no raw traces). */
int ss_phy_raw_location(const ss_source_info *info, const ss_source_spec *spec, char *dat_path, size_t len,
                        int64_t *offset);

/* Write the folder `dir` (created if missing). */
ss_status ss_phy_write(ss_ctx *ctx, const char *dir, const ss_phy_folder *f);

/* Check that `dir` holds every file phy needs with consistent dtypes and shapes (table above):
 * reports every problem, one line each, naming the file, and fails with SS_ERR_INPUT if any. */
ss_status ss_phy_check(ss_ctx *ctx, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
