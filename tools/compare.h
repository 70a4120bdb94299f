/* compare.h — scoring a sorting against ground truth with the SpikeInterface conventions
 * (GroundTruthComparison, exhaustive ground truth; definitions in docs/compare.md):
 *  - spike trains in samples; a GT spike and a sorted spike match when |Δt| <= window (0.4 ms,
 *    floor(window · rate) samples); within each (GT unit, sorted unit) pair every spike matches at
 *    most once, pairs taken greedily by increasing |Δt|;
 *  - agreement = n_match / (n_gt + n_sorted − n_match);
 *  - Hungarian assignment maximising total agreement, pairs below 0.5 dropped; per GT unit,
 *    accuracy (= agreement), precision, recall of its matched sorted unit (0 when unmatched);
 *  - best matches per unit at agreement >= 0.1 (chance score);
 *  - well detected: matched GT units with accuracy >= 0.8; false positive: unmatched sorted units
 *    whose best GT agreement is < 0.2 (or none); redundant: unmatched sorted units whose best GT
 *    unit has another best sorted match, at agreement >= 0.2; over-merged: sorted units with
 *    agreement > 0.2 to two or more GT units; mean accuracy over GT units with SNR > 8.
 * Spike trains load from results files (results.h5), NWB units tables, phy folders and KlustaKwik
 * .clu + sample-index files (compare_load.c). */
#ifndef SS_COMPARE_H
#define SS_COMPARE_H

#include <stdint.h>
#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Spike trains of one sorting: unit u has times[start[u] .. start[u+1]) (sample indices, ascending). */
typedef struct {
  int n_units;
  int64_t *unit_id; /* label of each unit (cluster id, NWB id) */
  int64_t *start;   /* [n_units + 1] */
  int64_t *times;   /* samples */
  double rate_hz;   /* 0 = unknown */
  int rate_assumed; /* 1: rate_hz is a stand-in time base (NWB file without an ElectricalSeries) */
  double *snr;      /* per unit or NULL (NaN: unknown) */
  char source[256]; /* what it was read from, for messages and the table header */
} ss_spike_trains;

/* The match window is at most this long (a window of seconds matches unrelated spikes), and at most
 * SS_COMPARE_MAX_WINDOW_SAMPLES samples at the ground truth's rate (times stay far from overflow). */
#define SS_COMPARE_MAX_WINDOW_MS 1000.0
#define SS_COMPARE_MAX_WINDOW_SAMPLES 1e12

typedef struct {
  double window_ms;        /* 0.4, in [0, SS_COMPARE_MAX_WINDOW_MS] */
  double match_score;      /* 0.5: Hungarian pairs below are dropped */
  double chance_score;     /* 0.1: best matches below are none */
  double well_detected;    /* 0.8 */
  double redundant_score;  /* 0.2 */
  double overmerged_score; /* 0.2 */
  double snr_threshold;    /* 8 */
} ss_compare_opts;

typedef struct {
  int n_gt, n_sorted;
  int64_t window_samples;
  int64_t *n_match;                             /* [n_gt × n_sorted] */
  double *agreement;                            /* [n_gt × n_sorted] */
  int *match_gt;                                /* per GT unit: Hungarian-matched sorted unit index, or -1 */
  int *match_sorted;                            /* per sorted unit: matched GT unit index, or -1 */
  int *best_gt;                                 /* per GT unit: best sorted unit at >= chance score, or -1 */
  int *best_sorted;                             /* per sorted unit: best GT unit at >= chance score, or -1 */
  double *accuracy, *precision, *recall;        /* per GT unit */
  int *false_positive, *redundant, *overmerged; /* per sorted unit, 0/1 */
  int well_detected, n_false_positive, n_redundant, n_overmerged;
  int n_snr_above;                /* GT units with known SNR > threshold */
  double mean_accuracy_snr_above; /* NaN when there are none */
  double mean_accuracy;           /* over all GT units */
} ss_comparison;

void ss_compare_opts_defaults(ss_compare_opts *o);

/* Build trains from per-spike (time, label) pairs, in any order; units sorted by label. `source`
 * names the input in messages. Times must be >= 0. */
ss_status ss_spike_trains_from_labels(ss_ctx *ctx, int64_t n, const int64_t *times, const int64_t *labels,
                                      double rate_hz, const char *source, ss_spike_trains *out);
void ss_spike_trains_free(ss_spike_trains *t);

/* Options of the loaders. */
typedef struct {
  const char *times_path; /* KlustaKwik: the sample-index file (default: .clu -> .res) */
  double rate_hz;         /* rate for inputs without one (0 = unknown) */
  const int64_t *exclude; /* unit labels to leave out (e.g. a noise cluster) */
  int n_exclude;
} ss_trains_load_opts;

/* Load by content and name: a directory is a phy folder (spike_times.npy, spike_clusters.npy,
 * params.py); an HDF5 file with /units is NWB (spike_times, spike_times_index, id, snr), one with
 * /spikes a results file (/spikes/time_samples, /spikes/cluster, attribute sample_rate); a name
 * containing ".clu" is a KlustaKwik cluster file. */
ss_status ss_spike_trains_load(ss_ctx *ctx, const char *path, const ss_trains_load_opts *opts, ss_spike_trains *out);

/* Number of matches between two ascending trains (each spike used once, greedy by |Δt|). */
ss_status ss_compare_count_matches(ss_ctx *ctx, const int64_t *a, int64_t na, const int64_t *b, int64_t nb,
                                   int64_t window, int64_t *n_match);

/* Maximum-weight assignment on a rows × cols weight matrix (O(n^3) Kuhn–Munkres with potentials):
 * row_to_col[r] = assigned column or -1 (when rows > cols some rows stay unassigned). */
ss_status ss_hungarian_max(ss_ctx *ctx, int rows, int cols, const double *weight, int *row_to_col);

/* Compare `sorted` with ground truth `gt`. Both must have a rate, or share the one given. Times of
 * `sorted` are rescaled to the GT rate when the two differ. */
ss_status ss_compare_run(ss_ctx *ctx, const ss_spike_trains *gt, const ss_spike_trains *sorted,
                         const ss_compare_opts *opts, ss_comparison *out);
void ss_comparison_free(ss_comparison *c);

/* The per-GT-unit table and the summary, human-readable. */
void ss_compare_print(FILE *f, const ss_spike_trains *gt, const ss_spike_trains *sorted, const ss_compare_opts *opts,
                      const ss_comparison *c);
/* {"units": [...], "summary": {...}} written atomically (docs/compare.md). */
ss_status ss_compare_write_json(ss_ctx *ctx, const char *path, const ss_spike_trains *gt, const ss_spike_trains *sorted,
                                const ss_compare_opts *opts, const ss_comparison *c);

#ifdef __cplusplus
}
#endif
#endif
