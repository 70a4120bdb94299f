/* params_table.c — names, defaults, ranges and documentation of every parameter.
 *
 * Defaults follow Klusta/SpikeDetekt and KlustaKwik (docs/architecture.md, docs/mask_em.md), except
 * where docs/architecture.md's decisions say why not. Add a field to
 * ss_params and a row here; nothing else needs to change for it to be loaded, validated, printed
 * and documented. */
#include "params/params_table.h"

#include <math.h>

#include "params/params.h"

#define OFF(field) offsetof(ss_params, field)
#define NUM(path, field, def, lo, hi, lo_open, hi_open, doc) \
  { path, SS_PT_NUMBER, OFF(field), def, lo, hi, lo_open, hi_open, NULL, doc }
#define INT(path, field, def, lo, hi, doc) \
  { path, SS_PT_INT, OFF(field), def, lo, hi, 0, 0, NULL, doc }
#define BOOL(path, field, def, doc) \
  { path, SS_PT_BOOL, OFF(field), def, 0, 1, 0, 0, NULL, doc }
#define ENUM(path, field, def, opts, doc) \
  { path, SS_PT_ENUM, OFF(field), def, 0, 0, 0, 0, opts, doc }
#define INF INFINITY
#define I64_MAX 9.0e15 /* largest integer a JSON double carries exactly, rounded down */

static const char *const polarity_opts[] = {"negative", "positive", "both", NULL};
static const char *const cmr_opts[] = {"none", "median", NULL};
static const char *const noise_opts[] = {"per_channel", "pooled", NULL};
static const char *const em_start_opts[] = {"mask_patterns", "kmeans", "clu", NULL};
static const char *const em_preset_opts[] = {"default", "fast", NULL};
static const char *const knn_strategy_opts[] = {"auto", "kmin", "bitonic", "warp", NULL};
static const char *const kmeans_init_opts[] = {"kmeanspp", "random", NULL};
static const char *const live_assign_opts[] = {"centroid", "knn", NULL};

const ss_param_spec ss_param_table[] = {
    INT("seed", seed, 1, 0, I64_MAX, "Seed of every random choice (counter-based generator)."),

    NUM("io.chunk_s", io.chunk_s, 1.0, 0, 3600, 1, 0, "Chunk length in seconds streamed through the pipeline."),
    NUM("io.gpu_chunk_s", io.gpu_chunk_s, 10.0, 0, 3600, 1, 0,
        "Chunk length in seconds on the CUDA front end (shortened when device memory is short)."),
    NUM("io.margin_ms", io.margin_ms, 25.0, 0, 10000, 0, 0,
        "Margin on each side of a chunk, so filtering and detection see no seams (Klusta: 15 ms; "
        "a 300 Hz band edge needs about 17 ms to settle)."),

    NUM("filter.low_hz", filter.low_hz, 300.0, 0, INF, 1, 0,
        "Band-pass low corner in Hz (Klusta: 500; see docs/architecture.md)."),
    NUM("filter.high_nyquist_fraction", filter.high_nyquist_fraction, 0.95, 0, 1, 1, 1,
        "Band-pass high corner as a fraction of the Nyquist frequency."),
    INT("filter.order", filter.order, 3, 1, 8, "Butterworth order of each band edge."),
    ENUM("filter.common_reference", filter.common_reference, SS_CMR_NONE, cmr_opts,
         "Common reference subtracted across channels after filtering."),
    BOOL("filter.causal", filter.causal, 0,
         "Filter causally (live mode's filter) instead of zero-phase; sort uses it for the model's live twin."),

    ENUM("detect.noise", detect.noise, SS_NOISE_PER_CHANNEL, noise_opts,
         "Noise level per channel, or one pooled over all channels."),
    INT("detect.n_excerpts", detect.n_excerpts, 50, 1, 100000, "Excerpts used to estimate the noise level."),
    NUM("detect.excerpt_s", detect.excerpt_s, 1.0, 0, 3600, 1, 0, "Length of each noise excerpt in seconds."),
    NUM("detect.weak_std", detect.weak_std, 2.0, 0, INF, 1, 0,
        "Weak threshold in noise standard deviations (median(|x|)/0.6745)."),
    NUM("detect.strong_std", detect.strong_std, 4.0, 0, INF, 1, 0,
        "Strong threshold in noise standard deviations (Klusta: 4.5; see docs/architecture.md)."),
    ENUM("detect.polarity", detect.polarity, SS_POLARITY_NEGATIVE, polarity_opts, "Sign of the spikes to detect."),
    INT("detect.join_size", detect.join_size, 1, 0, 1000,
        "Samples apart that threshold crossings on adjacent channels may be and still join."),

    NUM("probe.adjacency_radius_um", probe.adjacency_radius_um, 40.0, 0, INF, 1, 0,
        "Contacts closer than this are adjacent when the probe gives no adjacency list."),

    NUM("waveform.before_ms", waveform.before_ms, 0.5, 0, 100, 1, 0, "Waveform window before the peak, in ms."),
    NUM("waveform.after_ms", waveform.after_ms, 0.5, 0, 100, 1, 0, "Waveform window after the peak, in ms."),
    NUM("waveform.reference_rate_hz", waveform.reference_rate_hz, 20000.0, 0, INF, 1, 0,
        "Rate at which the window is 10+10 samples (Klusta); other rates scale the sample counts."),

    INT("features.n_pcs", features.n_pcs, 3, 1, 16, "Principal components per channel."),
    INT("features.pca_max_spikes", features.pca_max_spikes, 10000, 10, I64_MAX,
        "Most spikes used to fit the PCA basis (chosen from the seed)."),

    BOOL("motion.enabled", motion.enabled, 1,
         "In `sort`: estimate the probe's rigid motion from the detected spikes' depths and, when it spans at least "
         "motion.min_range_um, register the recording (every filtered chunk resampled at the drifted contact "
         "positions) and run the front end again (stages/motion/motion.h; docs/motion.md)."),
    NUM("motion.bin_s", motion.bin_s, 2.0, 0.1, 3600, 0, 0,
        "Time bin of the motion estimate (s): each bin gets one shift, smoothed over neighbouring bins."),
    NUM("motion.max_um", motion.max_um, 50.0, 2, 128, 0, 0,
        "Largest shift (µm) the motion estimate searches, either way from the recording's median position."),
    NUM("motion.min_range_um", motion.min_range_um, 8.0, 0, INF, 0, 0,
        "The recording is registered only when the estimated shifts span at least this (µm): on a still probe the "
        "estimate moves by a few µm, and resampling would only blur the data."),

    NUM("mask_em.prior_point", mask_em.prior_point, 1.0, 0, INF, 0, 0, "Pseudo-count P of every Gaussian cluster."),
    NUM("mask_em.noise_point", mask_em.noise_point, 1.0, 0, INF, 0, 0, "Pseudo-count Q of the noise cluster."),
    NUM("mask_em.points_for_cluster_mask", mask_em.points_for_cluster_mask, 100.0, 0, INF, 0, 0,
        "Summed mask T at which a feature joins a cluster's dense covariance block."),
    NUM("mask_em.penalty_k", mask_em.penalty_k, 0.0, 0, INF, 0, 0, "AIC-style penalty weight."),
    NUM("mask_em.penalty_k_log_n", mask_em.penalty_k_log_n, 1.0, 0, INF, 0, 0, "BIC-style penalty weight."),
    INT("mask_em.max_deletions_per_iteration", mask_em.max_deletions_per_iteration, 1, 0, 100000,
        "Cluster deletions per iteration (>1 is faster and changes results)."),
    INT("mask_em.split_first", mask_em.split_first, 20, 0, I64_MAX, "Iteration of the first split round."),
    INT("mask_em.split_every", mask_em.split_every, 40, 1, I64_MAX, "Iterations between split rounds."),
    INT("mask_em.max_possible_clusters", mask_em.max_possible_clusters, 1000, 2, 1000000,
        "No splits once this many clusters (minus one) exist."),
    INT("mask_em.num_starting_clusters", mask_em.num_starting_clusters, 500, 2, 1000000,
        "Starting clusters, noise included."),
    ENUM("mask_em.start", mask_em.start, SS_EM_START_MASKS, em_start_opts, "How clusters start."),
    INT("mask_em.max_iterations", mask_em.max_iterations, 1000, 1, I64_MAX, "Iteration cap."),
    ENUM("mask_em.preset", mask_em.preset, SS_EM_PRESET_DEFAULT, em_preset_opts,
         "\"fast\" stops early and starts from fewer clusters (the published GPU settings)."),
    BOOL("mask_em.quick_steps", mask_em.quick_steps, 0, "Recompute only clusters near each point's best."),
    NUM("mask_em.dist_thresh", mask_em.dist_thresh, 9.210340371976184, 0, INF, 1, 0, "Quick-step distance: ln(1e4)."),
    INT("mask_em.drop_last_n_features", mask_em.drop_last_n_features, 0, 0, 1000000,
        "Trailing .fet columns to ignore (e.g. a time column)."),
    NUM("mask_em.noise_var_floor_rel", mask_em.noise_var_floor_rel, 1e-6, 0, INF, 0, 0,
        "Noise variance floor, relative to the feature's variance."),
    NUM("mask_em.noise_var_floor_abs", mask_em.noise_var_floor_abs, 1e-12, 0, INF, 1, 0,
        "Absolute noise variance floor."),
    NUM("mask_em.fast_change_fraction", mask_em.fast_change_fraction, 0.05, 0, 1, 0, 0,
        "fast preset: stop when fewer than this fraction of points changed."),
    NUM("mask_em.fast_score_delta", mask_em.fast_score_delta, 0.01, 0, INF, 0, 0,
        "fast preset: stop when the score changed by less than this."),
    INT("mask_em.fast_starting_clusters", mask_em.fast_starting_clusters, 50, 2, 1000000,
        "fast preset: starting clusters."),

    BOOL("merge.enabled", merge.enabled, 1, "Merge over-split units after masked EM in `sort`."),
    NUM("merge.waveform_corr", merge.waveform_corr, 0.97, -1, 1, 0, 0,
        "Mean-waveform correlation on shared channels above which two units may merge."),
    NUM("merge.refractory_ms", merge.refractory_ms, 1.5, 0, 1000, 0, 0, "Refractory period for violation counts."),
    NUM("merge.max_violation_increase", merge.max_violation_increase, 0.005, 0, 1, 0, 0,
        "Largest allowed rise of the refractory-violation fraction caused by a merge."),
    NUM("merge.max_amp_ratio", merge.max_amp_ratio, 2.0, 0, INF, 0, 0,
        "Two units merge only when the larger of their mean waveforms' peak-to-peak amplitudes is at most this "
        "multiple of the smaller: a unit and another of the same shape and a third of its amplitude correlate like "
        "two pieces of one unit. 0: off."),
    NUM("merge.outlier_z2", merge.outlier_z2, 4.0, 0, INF, 0, 1,
        "After the merge, a spike leaves its cluster when its squared robust z-distance to the cluster's median, "
        "summed over the features, exceeds this many times the feature count; it joins the cluster that fits it "
        "within that bound, else noise (0: keep every spike; see docs/accuracy.md)."),
    NUM("merge.split_valley", merge.split_valley, 0.5, 0, 1, 0, 0,
        "After the merge, a cluster splits where the density of its first principal component dips below this "
        "fraction of the lower of two peaks (0: never split; see docs/accuracy.md)."),
    INT("merge.split_min_spikes", merge.split_min_spikes, 30, 1, I64_MAX,
        "Smallest part a cluster may split into (spikes of the cluster's robust core)."),
    INT("merge.split_max_channels", merge.split_max_channels, 32, 1, I64_MAX,
        "The split test's principal component uses the features of at most this many channels of the cluster: those "
        "of highest mean mask (ties: lower channel). Bounds its cost on wide probes (the test's covariance grows "
        "with the square of the features) to that of a 32-channel probe, where it looks at every channel."),

    INT("templates.iterations", templates.iterations, 3, 0, 1000,
        "Template passes after the cleanup in `sort`: each takes per-cluster median templates in noise-scaled "
        "feature space, keeps the clusters whose spikes fit their template as units and gives every spike (noise "
        "cluster included) to the unit that explains most of its energy (stages/templates/templates.h; "
        "docs/accuracy.md). 0: off."),
    NUM("templates.max_residual", templates.max_residual, 1.5, 0, INF, 0, 0,
        "A cluster is a unit when the median residual of its spikes after the amplitude-scaled template fit, per "
        "footprint feature in units of the noise variance, is at most this (units 0.5-0.8, catch-alls 2-200)."),
    INT("templates.min_spikes", templates.min_spikes, 20, 1, I64_MAX,
        "Smallest cluster the template pass keeps as a unit."),
    NUM("templates.min_gain", templates.min_gain, 50.0, 0, INF, 0, 0,
        "Least energy (noise-variance units) a unit's template must remove from a spike for the spike to join it; "
        "a spike no unit reaches goes to the noise cluster."),
    NUM("templates.amp_min", templates.amp_min, 0.75, 0, INF, 0, 0,
        "Smallest amplitude scale of a template fit (a wider range lets a large unit's template, scaled down, take a "
        "small unit's spikes on the same channels; see docs/accuracy.md)."),
    NUM("templates.amp_max", templates.amp_max, 1.33, 0, INF, 0, 0, "Largest amplitude scale of a template fit."),
    INT("templates.split_depth", templates.split_depth, 4, 0, 16,
        "A cluster that fails the unit test (two units in one cluster, or a catch-all) is bisected by 2-means in "
        "noise-scaled feature space, and each part that fails again, up to this depth; the parts that pass become "
        "units (docs/accuracy.md). 0: off, such a cluster's spikes go to other units or to noise."),
    NUM("templates.join_residual", templates.join_residual, 3.0, 0, INF, 0, 0,
        "A part of a split that passes the unit test joins the existing unit whose template fits its spikes with a "
        "median residual per footprint feature of at most this (the lowest such), so that a catch-all's collided "
        "spikes of one unit do not become a second copy of that unit."),
    NUM("templates.join_ratio", templates.join_ratio, 1.5, 0, INF, 0, 0,
        "... and only when that residual is at most this multiple of the part's residual against its own template: "
        "a part that its own template explains much better than the unit's is another unit (its spikes would "
        "otherwise join a broad unit whose template fits many units' spikes near the join bound)."),
    NUM("templates.move_residual", templates.move_residual, 3.0, 0, INF, 0, 0,
        "In the assignment, a spike of a unit moves to another unit only when that unit's fit explains it: residual "
        "per footprint feature at most this (noise variances) and an amplitude below templates.amp_max; otherwise "
        "it keeps its unit. A large unit's spikes would otherwise go to a unit of similar shape that fits them "
        "poorly, and that unit then fails the unit test and spreads its spikes over its neighbours. 0: off."),
    NUM("templates.move_fraction", templates.move_fraction, 0.1, 0, 1, 0, 0,
        "A fit also explains a spike when its residual is at most this fraction of the spike's energy on the "
        "footprint (a large unit's timing jitter leaves more than templates.move_residual on its own spikes)."),

    INT("match.max_rounds", match.max_rounds, 30, 0, 1000,
        "Rounds of template matching after the template pass in `sort`: the units' mean filtered waveforms are "
        "matched over the whole recording by greedy matching pursuit, so overlapping spikes are found and each "
        "spike gets its unit and amplitude from the best template fit (stages/match/match.h; docs/accuracy.md). "
        "0: off, the detected spikes and their clusters are the output."),
    NUM("match.before_ms", match.before_ms, 1.5, 0, 100, 1, 0, "Template window before the spike time, in ms."),
    NUM("match.after_ms", match.after_ms, 2.5, 0, 100, 1, 0, "Template window after the spike time, in ms."),
    INT("match.template_spikes", match.template_spikes, 1000, 1, I64_MAX,
        "A unit's template is the mean filtered waveform of at most this many of its spikes, evenly spaced in "
        "time."),
    NUM("match.footprint_sigma", match.footprint_sigma, 1.0, 0, INF, 1, 0,
        "A template's footprint: the channels where its peak reaches this many noise standard deviations; the "
        "template is zero elsewhere."),
    NUM("match.min_gain", match.min_gain, 60.0, 0, INF, 1, 0,
        "Least energy, in noise variances, a matched spike must remove from the data (a template fit on its "
        "footprint: 2ab - a^2 |T|^2)."),
    NUM("match.amp_min", match.amp_min, 0.6, 0, INF, 1, 0, "Smallest amplitude scale of a template fit."),
    NUM("match.amp_max", match.amp_max, 1.6, 0, INF, 1, 0, "Largest amplitude scale of a template fit."),
    NUM("match.dead_ms", match.dead_ms, 1.0, 0, 100, 0, 0,
        "No second spike of a unit is matched this close to one of its matched spikes."),
    INT("match.refine", match.refine, 1, 0, 10,
        "Rounds after the first matching: the split of poorly fitting units (match.split_residual), then templates "
        "again from the matched spikes' times and matching again; the first round always runs (templates cut at "
        "matched times are sharper than at detected ones), later ones only when the split changes labels "
        "(0: match once)."),
    NUM("match.shadow_ms", match.shadow_ms, 0.33, 0, 100, 0, 0,
        "A matched spike whose fit has an amplitude scale below match.shadow_scale is dropped when a larger "
        "matched spike (peak-channel amplitude) of another unit lies within this many ms: what a large spike's "
        "fit leaves behind is matched by a smaller unit's template at a low scale (0: keep every spike)."),
    NUM("match.shadow_scale", match.shadow_scale, 0.7, 0, INF, 0, 0,
        "Amplitude scale of a fit below which a matched spike near a larger spike of another unit is dropped "
        "(match.shadow_ms)."),
    NUM("match.split_residual", match.split_residual, 1.5, 0, INF, 0, 0,
        "In that template pass, only units whose matched spikes leave a median residual above this (energy per "
        "footprint sample over the template window, in noise variances; 1 when the template explains its spikes "
        "down to the noise) may be bisected."),

    NUM("quality.refractory_ms", quality.refractory_ms, 1.5, 0, 1000, 1, 0,
        "Refractory period of the ISI violation ratio (Hill et al. 2011): intervals shorter than this violate it "
        "(docs/quality.md)."),
    NUM("quality.censored_ms", quality.censored_ms, 0.0, 0, 1000, 0, 0,
        "Censored period of the ISI violation ratio: intervals shorter than this cannot be seen (detector dead "
        "time) and do not count; must be below quality.refractory_ms."),
    INT("quality.presence_bins", quality.presence_bins, 60, 1, 1000000,
        "The presence ratio is the fraction of this many equal time bins across the recording that hold a spike "
        "of the unit."),
    INT("quality.amplitude_bins", quality.amplitude_bins, 100, 10, 1000000,
        "Bins of the amplitude histogram behind the amplitude cutoff (fewer when the unit has under 5 spikes a "
        "bin; below 10 bins the cutoff is undefined, NaN)."),
    NUM("quality.good_snr", quality.good_snr, 5.0, 0, INF, 0, 0,
        "A unit is labelled good when its SNR (template peak over the channel's noise level) is at least this, and "
        "the three quality.good_* bounds below hold too; else mua."),
    NUM("quality.good_isi_ratio", quality.good_isi_ratio, 0.5, 0, INF, 1, 0,
        "Good units have an ISI violation ratio below this."),
    NUM("quality.good_presence", quality.good_presence, 0.9, 0, 1, 0, 0,
        "Good units have a presence ratio of at least this."),
    NUM("quality.good_amplitude_cutoff", quality.good_amplitude_cutoff, 0.1, 0, 1, 1, 0,
        "Good units have an amplitude cutoff (estimated fraction of spikes lost below threshold) below this."),
    NUM("quality.noise_snr", quality.noise_snr, 3.0, 0, INF, 0, 0,
        "Clusters with an SNR below this are labelled noise (cluster 0, the noise cluster, always is)."),

    NUM("sort.penalty_k_log_n", sort.penalty_k_log_n, 0.2, 0, INF, 0, 0,
        "BIC-style penalty weight of masked EM in `sort` (replaces mask_em.penalty_k_log_n, which `cluster` "
        "keeps at KlustaKwik's 1): the spike detector's masks span many channels, and each unmasked "
        "channel adds covariance terms to a cluster's penalty (see docs/architecture.md)."),
    BOOL("sort.live_model", sort.live_model, 1,
         "Also fit the causal twin of the model for live mode (a second front-end pass)."),
    INT("sort.live_filter_order", sort.live_filter_order, 1, 1, 8,
        "Butterworth order of each band edge of the live twin's causal filter: a low order keeps the spike trough "
        "(order 3 at 300 Hz, run causally, keeps 72 % of the zero-phase peak SNR and rings; see docs/live.md)."),
    NUM("sort.live_low_hz", sort.live_low_hz, 150.0, 0, INF, 1, 0,
        "Low corner in Hz of the live twin's causal filter (its high corner is the offline filter's)."),
    NUM("sort.live_recall", sort.live_recall, 0.99, 0, 1, 1, 0,
        "Fraction of the offline spikes that must get a causal partner: the live twin's strong threshold is "
        "lowered (not below sort.live_min_factor times the offline factor) until they do."),
    NUM("sort.live_min_factor", sort.live_min_factor, 0.8, 0, 1, 1, 0,
        "Lowest factor on the causal strong threshold (detect.strong_std) the live twin's calibration may use; "
        "it must keep the strong threshold above detect.weak_std."),
    NUM("sort.live_twin_seconds", sort.live_twin_seconds, 300.0, 0, INF, 1, 0,
        "The live twin (its two causal front-end passes, calibration, centroids and reference spikes) is fitted on "
        "the recording's first this many seconds (0: all of it), so that its cost does not grow with the recording."),
    INT("sort.live_prototypes", sort.live_prototypes, 16, 1, 1000,
        "Centroids per unit in the live twin: k-means of the unit's matched causal spikes, one per 20 of them, at "
        "most this many (1: the unit's mean), so that nearest-centroid assignment follows a unit that is not one "
        "compact cloud (docs/live.md)."),
    INT("sort.em_max_spikes", sort.em_max_spikes, 100000, 0, I64_MAX,
        "Masked EM runs on at most this many spikes, evenly spaced in time (KlustaKwik's Subset); the others take "
        "the majority label of their sort.assign_k nearest neighbours among them. 0: all spikes."),
    INT("sort.assign_k", sort.assign_k, 10, 1, 1000,
        "Neighbours (in feature space, among the masked-EM spikes) that vote for a spike's label."),

    INT("knn.k", knn.k, 10, 1, 100000, "Neighbours per query."),
    ENUM("knn.strategy", knn.strategy, SS_KNN_AUTO, knn_strategy_opts,
         "GPU k-selection: auto, or warp (the warp queue; kmin and bitonic are aliases of it), which forces "
         "the tiled path."),
    INT("knn.query_tile", knn.query_tile, 4096, 1, I64_MAX, "Queries per distance tile."),
    INT("knn.ref_tile", knn.ref_tile, 65536, 1, I64_MAX, "References per distance tile."),

    INT("kmeans.k", kmeans.k, 8, 1, I64_MAX, "Clusters."),
    ENUM("kmeans.init", kmeans.init, SS_KMEANS_INIT_PP, kmeans_init_opts, "Initialisation."),
    INT("kmeans.max_iterations", kmeans.max_iterations, 300, 1, I64_MAX, "Iteration cap."),
    NUM("kmeans.tol_change_fraction", kmeans.tol_change_fraction, 0.0, 0, 1, 0, 0,
        "Stop when at most this fraction of labels changed (0: only when none changed)."),

    NUM("live.block_ms", live.block_ms, 1.0, 0, 10000, 1, 0, "Processing block length in ms."),
    NUM("live.train_seconds", live.train_seconds, 60.0, 0, INF, 1, 0, "Seconds buffered to fit a model."),
    ENUM("live.assign", live.assign, SS_LIVE_ASSIGN_CENTROID, live_assign_opts, "Assignment of live spikes."),
    NUM("live.stats_every_s", live.stats_every_s, 10.0, 0, INF, 0, 0,
        "Counter report period on stderr (0: at exit only)."),
};

const size_t ss_param_table_len = sizeof(ss_param_table) / sizeof(ss_param_table[0]);
