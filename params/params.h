/* params.h — every tunable parameter of spikestream, with documented defaults.
 *
 * One JSON file sets any subset ({"detect": {"strong_std": 5}}); unknown keys, wrong types and
 * out-of-range values are rejected with their JSON path. The table in params_table.c is the single
 * source of names, defaults, ranges and documentation: `spikestream params --defaults` and
 * `params --doc` print from it. This module is the only place that parses JSON. */
#ifndef SS_PARAMS_H
#define SS_PARAMS_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SS_POLARITY_NEGATIVE = 0, SS_POLARITY_POSITIVE, SS_POLARITY_BOTH } ss_polarity;
typedef enum { SS_CMR_NONE = 0, SS_CMR_MEDIAN } ss_common_ref;
typedef enum { SS_NOISE_PER_CHANNEL = 0, SS_NOISE_POOLED } ss_noise_mode;
typedef enum { SS_EM_START_MASKS = 0, SS_EM_START_KMEANS, SS_EM_START_CLU } ss_em_start;
typedef enum { SS_EM_PRESET_DEFAULT = 0, SS_EM_PRESET_FAST } ss_em_preset;
typedef enum { SS_KNN_AUTO = 0, SS_KNN_KMIN, SS_KNN_BITONIC, SS_KNN_WARP } ss_knn_strategy;
typedef enum { SS_KMEANS_INIT_PP = 0, SS_KMEANS_INIT_RANDOM } ss_kmeans_init;
typedef enum { SS_LIVE_ASSIGN_CENTROID = 0, SS_LIVE_ASSIGN_KNN } ss_live_assign;

typedef struct {
  int64_t seed;
  struct {
    double chunk_s;
    double margin_ms;
    double gpu_chunk_s; /* the CUDA front end's chunk (at most; less when device memory is short) */
  } io;
  struct {
    double low_hz;
    double high_nyquist_fraction;
    int64_t order;
    int common_reference; /* ss_common_ref */
    int causal;           /* forward only (live mode's filter) instead of zero-phase */
  } filter;
  struct {
    int noise; /* ss_noise_mode */
    int64_t n_excerpts;
    double excerpt_s;
    double weak_std;
    double strong_std;
    int polarity; /* ss_polarity */
    int64_t join_size;
  } detect;
  struct {
    double adjacency_radius_um;
  } probe;
  struct {
    double before_ms;
    double after_ms;
    double reference_rate_hz;
  } waveform;
  struct {
    int64_t n_pcs;
    int64_t pca_max_spikes;
  } features;
  struct {
    int enabled;         /* estimate rigid drift and, when it is large enough, register the recording */
    double bin_s;        /* time bin of the estimate */
    double max_um;       /* largest shift searched, either way */
    double min_range_um; /* register only when the estimate spans at least this */
  } motion;
  struct {
    double prior_point;
    double noise_point;
    double points_for_cluster_mask;
    double penalty_k;
    double penalty_k_log_n;
    int64_t max_deletions_per_iteration;
    int64_t split_first;
    int64_t split_every;
    int64_t max_possible_clusters;
    int64_t num_starting_clusters;
    int start; /* ss_em_start */
    int64_t max_iterations;
    int preset; /* ss_em_preset */
    int quick_steps;
    double dist_thresh;
    int64_t drop_last_n_features;
    double noise_var_floor_rel;
    double noise_var_floor_abs;
    double fast_change_fraction;
    double fast_score_delta;
    int64_t fast_starting_clusters;
  } mask_em;
  struct {
    int enabled;
    double waveform_corr;
    double refractory_ms;
    double max_violation_increase;
    double max_amp_ratio;       /* no merge of units further apart in amplitude than this (0: off) */
    double outlier_z2;          /* cleanup: outlier when z² > this · features (0: off) */
    double split_valley;        /* cleanup: split at a density valley below this fraction (0: off) */
    int64_t split_min_spikes;   /* cleanup: smallest part of a split */
    int64_t split_max_channels; /* cleanup: the split test looks at most at this many channels */
  } merge;
  struct {
    int64_t iterations;      /* template passes after the cleanup in `sort` (0: off) */
    double max_residual;     /* a cluster is a unit when its spikes' median residual is at most this */
    int64_t min_spikes;      /* ... and it holds at least this many spikes */
    double min_gain;         /* a spike joins its best unit when the gain is at least this, else noise */
    double amp_min, amp_max; /* amplitude range of a template fit */
    int64_t split_depth;     /* a cluster that fails the unit test is bisected up to this depth (0: off) */
    double join_residual;    /* a piece of such a split joins the unit whose template fits it within this */
    double join_ratio;       /* ... and within this multiple of its own template's fit */
    double move_residual;    /* a unit's spike moves to another unit only when that fit is within this */
    double move_fraction;    /* ... or leaves at most this fraction of the spike's energy */
  } templates;
  struct {
    int64_t max_rounds;      /* rounds of template matching in `sort` (0: off) */
    double before_ms;        /* template window before the spike time */
    double after_ms;         /* ... and after it */
    int64_t template_spikes; /* a unit's template averages at most this many of its spikes */
    double footprint_sigma;  /* a template's footprint: channels where it reaches this many noise σ */
    double min_gain;         /* least energy (noise variances) a matched spike removes */
    double amp_min, amp_max; /* amplitude range of a fit */
    double dead_ms;          /* no second spike of a unit this close to a matched one */
    int64_t refine;          /* template pass + matching again on the matched spikes, at most this often */
    double split_residual;   /* ... whose step 0 looks only at units with a median fit residual above this */
    double shadow_ms;        /* a weak fit this close to a larger spike of another unit is dropped */
    double shadow_scale;     /* ... weak: amplitude scale below this */
  } match;
  struct {
    double refractory_ms;         /* ISI violation ratio: refractory period */
    double censored_ms;           /* ... and the censored period below which no interval is seen */
    int64_t presence_bins;        /* presence ratio: equal time bins across the recording */
    int64_t amplitude_bins;       /* amplitude cutoff: histogram bins (at most) */
    double good_snr;              /* good: SNR at least this */
    double good_isi_ratio;        /* ... ISI violation ratio below this */
    double good_presence;         /* ... presence ratio at least this */
    double good_amplitude_cutoff; /* ... amplitude cutoff below this */
    double noise_snr;             /* noise: SNR below this (cluster 0 always) */
  } quality;
  struct {
    double penalty_k_log_n;    /* replaces mask_em.penalty_k_log_n in `sort` only */
    int live_model;            /* also fit the causal twin of the model (model.h5 /live) */
    int64_t live_filter_order; /* the twin's causal filter: Butterworth order of each band edge */
    double live_low_hz;        /* ... and its low corner (the high corner is the offline one) */
    double live_recall;        /* offline spikes that must get a causal partner (threshold calibration) */
    double live_min_factor;    /* lowest factor on the causal strong threshold the calibration may use */
    int64_t live_prototypes;   /* centroids per unit in the twin (k-means of its causal spikes) */
    double live_twin_seconds;  /* the twin is fitted on the recording's first this many seconds (0: all) */
    int64_t em_max_spikes;     /* masked EM on at most this many spikes (0: all); the rest by KNN */
    int64_t assign_k;          /* neighbours voting for a spike left out of masked EM */
  } sort;
  struct {
    int64_t k;
    int strategy; /* ss_knn_strategy */
    int64_t query_tile;
    int64_t ref_tile;
  } knn;
  struct {
    int64_t k;
    int init; /* ss_kmeans_init */
    int64_t max_iterations;
    double tol_change_fraction;
  } kmeans;
  struct {
    double block_ms;
    double train_seconds;
    int assign; /* ss_live_assign */
    double stats_every_s;
  } live;
} ss_params;

/* Fill every field with its documented default. */
void ss_params_defaults(ss_params *p);
/* Overlay a JSON document on *p (start from ss_params_defaults). Reports every problem, one line
 * each, prefixed with `origin` (a file name), and fails with SS_ERR_INPUT if there was any. */
ss_status ss_params_apply_json(ss_ctx *ctx, const char *json, const char *origin, ss_params *p);
/* Defaults, then the file's contents. */
ss_status ss_params_load_file(ss_ctx *ctx, const char *path, ss_params *p);
/* Set one field by its dotted path from text ("detect.weak_std", "3"); used for --param overrides. */
ss_status ss_params_set(ss_ctx *ctx, ss_params *p, const char *path, const char *value);
/* The same for a dedicated command-line option: messages name `option` instead of "--param <path>"
 * ("--k: expected an integer in [1, 100000], got 0"). ss_params_set passes SS_PARAMS_OPTION. */
#define SS_PARAMS_OPTION "--param"
ss_status ss_params_set_named(ss_ctx *ctx, ss_params *p, const char *path, const char *value, const char *option);
/* Relations between fields (weak < strong, ...); reports every violated one. */
ss_status ss_params_validate(ss_ctx *ctx, const ss_params *p);
/* The whole parameter set as a JSON document (malloc'd; free() it). NULL when out of memory. */
char *ss_params_to_json(const ss_params *p);
/* Markdown reference of every parameter (malloc'd; free() it). */
char *ss_params_doc_markdown(void);

/* Read a whole text file into a NUL-terminated buffer (malloc'd), with a clear error. */
ss_status ss_read_text_file(ss_ctx *ctx, const char *path, size_t max_bytes, char **out, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
