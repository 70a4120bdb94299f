/* templates.h — the template pass after the cleanup: per-unit templates in feature space and the
 * assignment of every spike (noise cluster and impure clusters included) to the unit that explains it best.
 *
 * Units are clusters, impure ones are not: after masked EM, merge and cleanup, some clusters are
 * catch-alls of collided spikes of many units, and the cleanup has sent part of every unit's spikes to
 * the noise cluster 0 (docs/accuracy.md, "On third-party ground truth"). The pass:
 *  0. Split (after step 1, with its noise scale): a cluster that fails the unit test of step 4 (two
 *     units in one cluster, or a catch-all) is bisected by 2-means over all noise-scaled features (seeds:
 *     the spike farthest from its template, then the spike farthest from that one;
 *     SS_TEMPLATES_BISECT_ITERATIONS Lloyd steps), and so is each part that fails again, down to
 *     templates.split_depth levels or parts under 2·templates.min_spikes. The final parts get new labels.
 *     A part that passes the test joins the other unit whose template fits its spikes best (median
 *     residual per footprint feature, as in step 4) when that fit is at most templates.join_residual and
 *     at most templates.join_ratio times the part's residual against its own template: a catch-all's
 *     collided spikes of one unit would otherwise become a second copy of that unit and take half its
 *     spikes, while a part that its own template explains much better is another unit (without the ratio,
 *     parts of several units joined one broad unit whose template fits them all near the bound). Without this step, a cluster of two units fails the test, its spikes go to the
 *     units that share its channels, and those fail the test in the next round in turn.
 *  1. Noise spread ν_j of each feature j: 1.4826·MAD of x_j over the spikes whose mask on j's channel
 *     is 0 (at most SS_TEMPLATES_NOISE_SAMPLE of them, evenly spaced); with fewer than
 *     SS_TEMPLATES_MIN_NOISE_SPIKES, the median ν of the features that have them (1 when none has).
 *     Features are scaled by 1/ν from here on.
 *  2. Template of cluster c: the per-feature median of its scaled spikes (at most SS_TEMPLATES_SAMPLE,
 *     evenly spaced). Footprint F_c: the channels whose template energy Σ_p t²_{ch,p} is at least
 *     max(SS_TEMPLATES_FOOTPRINT_REL · the largest channel energy, P), P features per channel (a
 *     channel at least as strong as the noise).
 *  3. A spike x and a unit c: amplitude a = clamp(⟨x,t⟩/⟨t,t⟩, templates.amp_min, templates.amp_max)
 *     over F_c, gain g = 2a⟨x,t⟩ − a²⟨t,t⟩ = ‖x‖² − ‖x − a·t‖² over F_c (so gains of units with
 *     different footprints compare: a channel outside F_c adds the same ‖x_ch‖² to both norms).
 *  4. Cluster c is a unit when it holds at least templates.min_spikes spikes, its footprint is not
 *     empty and the median over its spikes of ‖x − a·t‖² / |F_c|·P is at most templates.max_residual
 *     (a catch-all's template is a blur that fits few of its spikes: median residuals of 2–200 against
 *     0.5–0.8 for units).
 *  5. Every spike goes to the unit of largest gain among the units whose footprint holds its peak
 *     channel (ties: the lower id) when that gain is at least templates.min_gain, else to noise (0);
 *     except that a spike of a unit (a cluster that passed step 4) keeps its unit when the winner's fit
 *     does not explain it: amplitude clamped at templates.amp_max, or residual above
 *     templates.move_residual per footprint feature (0: no exception). A large unit's spikes would
 *     otherwise go to another unit of similar shape that fits them poorly; that unit then fails step 4
 *     and its spikes, its own included, spread over its neighbours in the next round.
 *  6. Steps 2–5 repeat templates.iterations times on the new labels; the labels are then renumbered
 *     contiguously in the order of their first id (0 stays 0), so clusters that are not units vanish.
 * Deterministic: no randomness, the result does not depend on the thread count. */
#ifndef SS_TEMPLATES_H
#define SS_TEMPLATES_H

#include <stdint.h>

#include "params/params.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_TEMPLATES_SAMPLE 4096
#define SS_TEMPLATES_NOISE_SAMPLE 20000
#define SS_TEMPLATES_MIN_NOISE_SPIKES 20
#define SS_TEMPLATES_FOOTPRINT_REL 0.05
#define SS_TEMPLATES_BISECT_ITERATIONS 20

typedef struct {
  int64_t n;
  int n_channels, n_pcs;
  const float *features;       /* [n × n_channels·n_pcs] */
  const float *masks;          /* [n × n_channels] */
  const int32_t *peak_channel; /* [n] */
  int64_t k;                   /* clusters, noise included; labels in 0..k−1 */
  int n_threads;               /* OpenMP threads (<= 0: one); the labels do not depend on it */
  const uint8_t *may_split;    /* [k]: step 0 looks only at clusters flagged here (NULL: at all) */
  int split_only;              /* step 0 and its joins, then the renumbering: no rounds of steps 2–5 */
} ss_templates_input;

typedef struct {
  int64_t k_in, k_out;             /* clusters before and after, noise included */
  int64_t n_units;                 /* clusters that passed step 4 in the last iteration */
  int64_t n_moved;                 /* spikes whose label changed (before renumbering) */
  int64_t n_noise_in, n_noise_out; /* spikes in cluster 0 before and after */
  int64_t n_split;                 /* clusters that step 0 bisected */
  int64_t n_joined;                /* parts of those that joined an existing unit */
} ss_templates_result;

/* Assign labels[0..n) in place by the rules above with the templates section's parameters. */
ss_status ss_templates_assign(ss_ctx *ctx, const ss_params *p, const ss_templates_input *in, int32_t *labels,
                              ss_templates_result *out);

/* Step 3 for one spike x and one template t over the channels flagged in fp[0..n_channels) (P features
 * each): the gain, and the clamped amplitude in *amp when amp is not NULL. */
double ss_templates_gain(const float *x, const float *t, const uint8_t *fp, int n_channels, int n_pcs, double amp_min,
                         double amp_max, double *amp);

#ifdef __cplusplus
}
#endif
#endif
