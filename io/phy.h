/* phy.h — the phy folder (template-gui) that `sort` writes, and a checker of such folders.
 *
 * Files (shapes with N spikes, T templates, W samples, C channels, P PCs, F channels per spike):
 *   params.py              dat_path, n_channels_dat, dtype, offset, sample_rate, hp_filtered
 *   recording.dat          int16 [S × C]    the raw samples, when phy cannot map the input itself
 *   spike_times.npy        int64 [N]        samples, non-decreasing
 *   spike_clusters.npy     int32 [N]
 *   spike_templates.npy    int32 [N]        in [0, T)
 *   amplitudes.npy         float32 [N]      template scaling: × the template's peak-to-peak gives µV
 *   templates.npy          float32 [T × W × C]
 *   channel_map.npy        int32 [C]        in [0, n_channels_dat)
 *   channel_positions.npy  float32 [C × 2]  distinct
 *   channel_shanks.npy     int32 [C]
 *   whitening_mat.npy, whitening_mat_inv.npy  float64 [C × C]  identity (the templates are not whitened)
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
  const int32_t *channel_shanks;     /* [C] */
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
  char dat_path[SS_PHY_PATH_MAX]; /* absolute, or SS_PHY_RECORDING inside the folder; "": dat_path = [] */
  int n_channels_dat;
  int64_t n_samples_dat; /* frames in dat_path, noted in params.py for the checker's size test */
  const char *dtype;     /* "int16" */
  int64_t offset;
  double sample_rate;
  int hp_filtered;
} ss_phy_folder;

/* The copy of the raw samples that the folder holds when phy cannot map the input (params.py names it
 * relative to the folder, so it moves with it). */
#define SS_PHY_RECORDING "recording.dat"

/* Where phy (phylib's flat reader: .dat, .bin, .raw or .mda files of int16 frames after `offset`
 * bytes) can memory-map the input's samples in place: a flat binary file at the spec's byte offset,
 * a SpikeGLX .bin (the delivered channels are the first of each frame), an Open Ephys continuous.dat
 * with every channel delivered. Fills the absolute dat_path, the offset and the channels per frame
 * and returns 1; returns 0 otherwise (NWB, HDF5, Kwik, Intan, float data...). */
int ss_phy_raw_location(const ss_source_info *info, const ss_source_spec *spec, char *dat_path, size_t len,
                        int64_t *offset, int *n_channels_dat);

/* Write dir/SS_PHY_RECORDING: the source's int16 samples, time-major, chunk by chunk (two chunks in
 * memory whatever the length); float data as the int16 steps the source delivers. */
ss_status ss_phy_write_recording(ss_ctx *ctx, const char *dir, ss_source *src);

/* amplitudes.npy from the spikes' amplitudes (µV, any sign) so that phylib's get_amplitudes_true
 * (amplitude × peak-to-peak of the unwhitened template on its largest channel) gives |amplitude| in
 * µV: out[i] = |amp_uv[i]| / ptp(template spike_templates[i]); 0 where that template is flat.
 * templates: [n_templates × n_wave × n_channels] in µV, as templates.npy. */
ss_status ss_phy_amplitudes(ss_ctx *ctx, const float *templates, int n_templates, int n_wave, int n_channels,
                            const int32_t *spike_templates, const float *amp_uv, int64_t n_spikes, float *out);

/* Write the folder `dir` (created if missing). */
ss_status ss_phy_write(ss_ctx *ctx, const char *dir, const ss_phy_folder *f);

/* Check that `dir` holds every file phy needs with consistent dtypes and shapes (table above), and
 * that params.py parses and its dat_path (when not []) exists with n_channels_dat × samples × 2 +
 * offset bytes: reports every problem, one line each, naming the file, and fails with SS_ERR_INPUT
 * if any. */
ss_status ss_phy_check(ss_ctx *ctx, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
