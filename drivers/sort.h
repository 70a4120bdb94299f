/* sort.h — the offline pipeline driver behind `spikestream sort`, usable without the CLI:
 * source → front end → masked EM (KNN vote for the spikes beyond its subset) → merge, cleanup and a
 * second merge → outputs, timing each stage (docs/architecture.md, "The pipeline").
 *
 * Outputs under out_dir, swapped in as one set with a manifest (io/outset.h; layouts in docs/formats.md):
 *   results.h5          the stable core with /spikes/cluster, per-cluster statistics and quality
 *                       metrics and labels, the merge log, parameters, software version, input checksum
 *   phy/                a phy folder (templates = per-cluster mean waveforms; cluster_group.tsv holds
 *                       the quality labels, cluster_<metric>.tsv the metrics)
 *   BASE.fet.1, BASE.fmask.1, BASE.clu.1   KlustaKwik text files (BASE: the input's name); .clu
 *                       holds the final (merged) labels in KlustaKwik numbering (1 = noise)
 *   model.h5            what labelling new spikes needs (filter, thresholds, PCA, clusters, KNN set)
 *   report.html         a self-contained page of the units (sort_report.c)
 *   sort.log            the run's log lines
 *
 * Mean waveforms are rebuilt from the PCA features (the front end keeps no waveforms): for each
 * cluster and channel, Σ_k mean(feature_k) · basis_k — the projection of the cluster's mean waveform
 * onto the channel's PCA basis (exact for the mean, since projection is linear).
 *
 * Backends: one backend, opened from opts.device, runs the front end's chunk pass, masked EM and the
 * KNN vote (CUDA when the build has it and a device answers; `auto` logs its choice, `cuda` without a
 * device is an error). The noise excerpts, the merge, the cleanup and the outputs run on CPU threads. */
#ifndef SS_SORT_H
#define SS_SORT_H

#include <stdint.h>
#include <stdio.h>

#include "io/source.h"
#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"
#include "stages/metrics/quality.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_SORT_PATH_MAX 4096

/* The default probe for recordings without electrode positions, when they have its channel count. */
#define SS_SORT_DEFAULT_PROBE_CHANNELS 32
#define SS_SORT_DEFAULT_PROBE "params/probes/two_column_32.json" /* relative to the source tree */

typedef struct {
  ss_source_spec spec;    /* spec.path: the recording */
  const char *probe_path; /* NULL: the file's electrode positions, else the default 32-channel probe */
  const char *out_dir;
  ss_params params; /* resolved (defaults + file) and validated by the caller */
  ss_device_kind device;
  int n_threads;    /* <= 0: all */
  int merge;        /* 1: merge (default when params.merge.enabled), 0: keep raw clusters */
  int check_phy;    /* run ss_phy_check on the written folder */
  int overwrite;    /* replace an earlier output set in out_dir (ss_outset_check) */
  int test_kill_at; /* test hook, 0: off: SIGKILL at this output-set step (ss_outset.kill_at) */
} ss_sort_opts;

/* Fill opts with defaults (params defaults, AUTO device, all threads, merge per params). */
void ss_sort_opts_defaults(ss_sort_opts *o);

typedef struct {
  int64_t n_spikes;       /* the output's: matched spikes when template matching ran, else detections */
  int64_t n_detected;     /* the front end's detections */
  int64_t n_clusters_raw; /* masked EM clusters, noise included */
  int64_t n_clusters;     /* after the merge, noise included */
  int64_t n_merges;
  int64_t em_iterations;
  int64_t em_spikes; /* spikes masked EM ran on (the others were assigned by KNN) */
  double t_assign_s; /* of those assignments (inside t_cluster_s) */
  double duration_s; /* of the recording */
  int n_channels;
  int n_threads;
  double t_frontend_s, t_cluster_s, t_merge_s, t_match_s, t_output_s, t_total_s;
  uint32_t input_crc32;
  int32_t *labels_raw;         /* [n_spikes] masked EM labels, 0 = noise (caller frees) */
  int32_t *labels;             /* [n_spikes] final labels, 0 = noise (caller frees) */
  char base[SS_SORT_PATH_MAX]; /* BASE of the KlustaKwik files */
  ss_quality quality;          /* per-cluster quality metrics and labels (docs/quality.md) */
} ss_sort_summary;

/* Run the whole pipeline. */
ss_status ss_sort_run(ss_ctx *ctx, const ss_sort_opts *o, ss_sort_summary *summary);
void ss_sort_summary_free(ss_sort_summary *s);
/* The summary, human-readable (spikes, clusters before/after merge, time per stage, × real time), then
 * the per-unit table of quality metrics and labels. */
void ss_sort_print_summary(FILE *f, const ss_sort_summary *s, const char *out_dir);

#ifdef __cplusplus
}
#endif
#endif
