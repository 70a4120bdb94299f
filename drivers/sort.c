/* sort.c — the offline pipeline driver (sort.h): backend and probe resolution, the input checksum
 * (in a thread, alongside the front end), then front end, masked EM, merge and cleanup, per-cluster
 * statistics, the causal twin (sort_live_twin.c) and the outputs (sort_write.c), with the stage
 * timings and summary. */
#include "io/atomic_file.h"
#include "drivers/sort.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "io/checksum.h"
#include "io/outset.h"
#include "core/log.h"
#include "stages/knn/knn.h"
#include "stages/mask_em/mask_em.h"
#include "stages/templates/templates.h"
#include "drivers/sort_internal.h"

void ss_sort_opts_defaults(ss_sort_opts *o) {
  memset(o, 0, sizeof(*o));
  ss_params_defaults(&o->params);
  o->device = SS_DEVICE_AUTO;
  o->merge = o->params.merge.enabled;
}

void ss_sort_summary_free(ss_sort_summary *s) {
  free(s->labels_raw);
  free(s->labels);
  ss_quality_free(&s->quality);
  memset(s, 0, sizeof(*s));
}

/* --- setup ------------------------------------------------------------------------------------- */

static ss_status open_backend(ss_ctx *ctx, const ss_sort_opts *o, ss_backend *be, const char **device) {
  SS_TRY(ss_backend_open(ctx, o->device, 0, o->n_threads, be));
  *device = be->kind == SS_DEVICE_CUDA ? "cuda" : "cpu";
  return SS_OK;
}

/* The probe: the file given, else the recording's electrode positions, else the shipped two-column
 * probe when the channel count is its own. */
static ss_status resolve_probe(ss_ctx *ctx, const ss_sort_opts *o, const ss_source_info *info, ss_probe *probe) {
  double radius = o->params.probe.adjacency_radius_um;
  if (o->probe_path) {
    SS_TRY(ss_probe_load_file(ctx, o->probe_path, radius, probe));
  } else if (info->has_positions) {
    SS_TRY(ss_probe_from_positions(ctx, info->n_channels, info->x_um, info->y_um, radius, probe));
    ss_log_info(ctx, "sort: probe from the electrode positions of %s", info->path);
  } else if (info->n_channels == SS_SORT_DEFAULT_PROBE_CHANNELS) {
    SS_TRY(ss_probe_load_file(ctx, SS_SOURCE_DIR "/" SS_SORT_DEFAULT_PROBE, radius, probe));
    ss_log_info(ctx, "sort: no --probe and no electrode positions: using %s", SS_SORT_DEFAULT_PROBE);
  } else {
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: no probe: give --probe (the file has no electrode positions, and its %d channels do not "
                   "match the default probe's %d)",
                   info->path, info->n_channels, SS_SORT_DEFAULT_PROBE_CHANNELS);
  }
  ss_status st = ss_probe_check_recording(ctx, probe, info->n_channels);
  if (st != SS_OK) {
    ss_ctx_prefix(ctx, "%s", o->probe_path ? o->probe_path : info->path);
    ss_probe_free(probe);
  }
  return st;
}

/* --- the checksum thread ------------------------------------------------------------------------ */

typedef struct {
  const char *path;
  uint32_t crc;
  ss_ctx ctx;
  ss_status st;
  double seconds;
} crc_job;

static void *crc_main(void *arg) {
  crc_job *j = arg;
  double t0 = ss_now();
  j->st = ss_file_crc32(&j->ctx, j->path, &j->crc);
  j->seconds = ss_now() - t0;
  return NULL;
}

/* --- stages ------------------------------------------------------------------------------------ */

/* The spikes masked EM runs on: all, or sort.em_max_spikes of them evenly spaced in time (KlustaKwik's
 * Subset), spike floor(k·n/m) for k < m. */
static ss_status em_subset(ss_ctx *ctx, const ss_sort_state *s, int64_t **idx, int64_t *m) {
  const int64_t n = s->spikes.n, max = s->o->params.sort.em_max_spikes;
  *m = max > 0 && max < n ? max : n;
  SS_TRY(SS_ALLOC(ctx, *idx, (size_t)*m, "masked-EM subset"));
  for (int64_t k = 0; k < *m; k++) (*idx)[k] = (int64_t)((__int128)k * n / *m);
  return SS_OK;
}

/* Rows idx[0..m) of the features, and their masks spread over each channel's P features exactly as
 * the .fmask file spells them. */
static ss_status gather_rows(ss_ctx *ctx, const ss_spikes *sp, const int64_t *idx, int64_t m, float **x, float **mk) {
  const int64_t C = sp->n_channels, P = sp->n_pcs, D = C * P;
  SS_TRY(SS_ALLOC(ctx, *x, (size_t)(m > 0 ? m : 1) * D, "masked-EM features"));
  SS_TRY(SS_ALLOC(ctx, *mk, (size_t)(m > 0 ? m : 1) * D, "feature masks"));
  for (int64_t i = 0; i < m; i++) {
    memcpy(*x + i * D, sp->features + idx[i] * D, (size_t)D * sizeof(float));
    for (int64_t j = 0; j < D; j++) (*mk)[i * D + j] = sp->masks[idx[i] * C + j / P];
  }
  return SS_OK;
}

/* The progress line of masked EM (its per-iteration log lines are hidden in `sort`). */
static void em_progress(void *user, const ss_mask_em_iter_log *e) {
  ss_progress_note(user, "iteration %" PRId64 ", %" PRId64 " clusters (noise included)", e->iteration, e->n_clusters);
}

static ss_status fit_subset(ss_ctx *ctx, const ss_backend *be, ss_sort_state *s, const float *x, const float *mk,
                            int64_t m, ss_mask_em_result *r) {
  const int64_t D = (int64_t)s->spikes.n_channels * s->spikes.n_pcs;
  ss_mask_em_opts opts;
  ss_mask_em_opts_from_params(&opts, &s->o->params);
  /* detector masks are wider than KlustaKwik's defaults assume: `sort` has its own BIC weight */
  opts.penalty_k_log_n = s->o->params.sort.penalty_k_log_n;
  ss_params def;
  ss_params_defaults(&def);
  if (s->o->params.mask_em.penalty_k_log_n != def.mask_em.penalty_k_log_n) /* set, but not the knob sort reads */
    ss_log_warn(ctx, "sort: mask_em.penalty_k_log_n = %g is ignored here; sort uses sort.penalty_k_log_n = %g",
                s->o->params.mask_em.penalty_k_log_n, opts.penalty_k_log_n);
  /* the per-iteration log (info in `cluster`) is shown here only at --log-level debug */
  ss_ctx em_ctx;
  ss_ctx_init(&em_ctx);
  em_ctx.quiet = ctx->quiet;
  em_ctx.log_stream = ctx->log_stream;
  em_ctx.progress_tty = ctx->progress_tty;
  em_ctx.log_level = ctx->log_level >= SS_LOG_DEBUG ? ctx->log_level : SS_LOG_WARN;
  ss_progress prog;
  ss_progress_start_open(&prog, ctx, "masked EM");
  snprintf(prog.note, sizeof(prog.note), "starting");
  opts.on_iteration = em_progress;
  opts.on_iteration_user = &prog;
  ss_status st = ss_mask_em_fit(&em_ctx, be, x, mk, m, D, &opts, r);
  ss_progress_finish(&prog);
  if (st != SS_OK) return ss_fail(ctx, st, "%s", ss_error_message(&em_ctx));
  return SS_OK;
}

/* Label the spikes left out of masked EM (in[k] == 0) by the majority label of their nearest subset
 * spikes (ss_knn_classify: a tie goes to the label whose nearest member comes first). */
static ss_status assign_rest(ss_ctx *ctx, const ss_backend *be, const ss_sort_state *s, const float *ref,
                             const int32_t *ref_labels, int64_t m, const uint8_t *in, int32_t *labels) {
  const ss_spikes *sp = &s->spikes;
  const int64_t n = sp->n, D = (int64_t)sp->n_channels * sp->n_pcs, q = n - m;
  if (q == 0) return SS_OK;
  ss_knn_opts o;
  ss_knn_opts_from_params(&o, &s->o->params);
  o.k = s->o->params.sort.assign_k < m ? s->o->params.sort.assign_k : m;
  int64_t *rows = NULL;
  float *xq = NULL;
  int32_t *lq = NULL;
  ss_knn_index *ix = NULL;
  ss_status st = SS_ALLOC(ctx, rows, (size_t)q, "assigned spikes");
  if (st == SS_OK) st = SS_ALLOC(ctx, xq, (size_t)q * D, "assigned spikes");
  if (st == SS_OK) st = SS_ALLOC(ctx, lq, (size_t)q, "assigned labels");
  for (int64_t i = 0, j = 0; st == SS_OK && i < n; i++)
    if (!in[i]) {
      rows[j] = i;
      memcpy(xq + j++ * D, sp->features + i * D, (size_t)D * sizeof(float));
    }
  if (st == SS_OK) st = ss_knn_index_create(ctx, be, ref, m, D, &ix);
  if (st == SS_OK) st = ss_knn_classify(ctx, ix, ref_labels, &o, xq, q, 0, lq, NULL, NULL, NULL);
  for (int64_t j = 0; st == SS_OK && j < q; j++) labels[rows[j]] = lq[j];
  if (ix) ss_knn_index_free(ix);
  free(rows);
  free(xq);
  free(lq);
  return st;
}

/* The rigid motion of the probe from the current spike table (stages/motion/motion.h); out->n_bins 0
 * when there is none to estimate (no spikes, no contact on a recording channel). */
static ss_status motion_of_spikes(ss_ctx *ctx, const ss_sort_state *s, ss_motion *out) {
  const ss_params *p = &s->o->params;
  const ss_probe *probe = s->probe;
  const int C = s->spikes.n_channels;
  double *y = NULL, *depth = NULL, lo = INFINITY, hi = -INFINITY;
  memset(out, 0, sizeof(*out));
  if (s->spikes.n == 0) return SS_OK;
  ss_status st = SS_ALLOC(ctx, y, (size_t)C, "channel depths");
  for (int c = 0; st == SS_OK && c < C; c++) {
    int k = ss_probe_contact_of_channel(probe, c);
    y[c] = k >= 0 ? probe->y[k] : 0.0;
    if (k >= 0) {
      lo = fmin(lo, y[c]);
      hi = fmax(hi, y[c]);
    }
  }
  if (st == SS_OK) st = SS_ALLOC(ctx, depth, (size_t)s->spikes.n, "spike depths");
  if (st == SS_OK && lo <= hi) {
    const ss_spikes *sp = &s->spikes;
    ss_motion_spike_depth(sp->n, C, sp->n_pcs, sp->features, sp->masks, sp->peak_channel, y, depth);
    st = ss_motion_estimate(ctx, p, sp->n, sp->time_samples, sp->amplitude, depth, lo, hi, s->info->n_samples,
                            sp->rate_hz, s->sum->n_threads, out);
  }
  free(y);
  free(depth);
  return st;
}

/* s->motion from the front end's spikes; *moved: it spans at least motion.min_range_um. */
static ss_status estimate_motion(ss_ctx *ctx, ss_sort_state *s, int *moved) {
  const ss_params *p = &s->o->params;
  *moved = 0;
  if (!p->motion.enabled || !s->probe) return SS_OK;
  SS_TRY(motion_of_spikes(ctx, s, &s->motion));
  if (s->motion.n_bins == 0) return SS_OK;
  *moved = s->motion.range_um >= p->motion.min_range_um;
  ss_log_info(ctx, "sort: motion: rigid shifts over %.1f um in %" PRId64 " bins of %g s: %s", s->motion.range_um,
              s->motion.n_bins, s->motion.bin_samples / s->spikes.rate_hz,
              *moved ? "registering the recording" : "below motion.min_range_um, not registered");
  return SS_OK;
}

/* Register with s->motion and run the front end again; then estimate what motion is left in the
 * registered recording's spikes and add it to s->motion (the depth estimate shrinks shifts by a
 * fifth or so, so each round leaves about a fifth of the last one's motion). Stops after
 * SS_MOTION_ROUNDS or when what is left spans under a quarter of motion.min_range_um. */
static ss_status register_recording(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s) {
  for (int round = 1;; round++) {
    ss_motion_reg_free(&s->reg);
    SS_TRY(ss_motion_reg_build(ctx, &s->motion, s->probe, s->spikes.n_channels, &s->reg));
    ss_spikes_free(&s->spikes);
    ss_frontend_model_free(&s->fe);
    SS_TRY(ss_frontend_run(ctx, be, &s->o->params, src, s->probe, &s->reg, &s->spikes, &s->fe));
    ss_motion left;
    SS_TRY(motion_of_spikes(ctx, s, &left));
    ss_log_info(ctx, "sort: motion: round %d: the registered recording's own estimate spans %.1f um", round,
                left.range_um);
    const int done = round >= SS_MOTION_ROUNDS || left.range_um < 0.25 * s->o->params.motion.min_range_um ||
                     left.n_bins != s->motion.n_bins;
    if (!done) ss_motion_add(&s->motion, &left);
    ss_motion_free(&left);
    if (done) return SS_OK;
  }
}

/* The front end, and again on the registered recording when the probe moved. */
static ss_status run_frontend(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s) {
  if (be->kind == SS_DEVICE_CUDA)
    ss_log_info(ctx, "sort: [1/4] front end on %s (excerpts on %d CPU threads): filter, detect, features", be->gpu.name,
                be->n_threads);
  else ss_log_info(ctx, "sort: [1/4] front end on the CPU (%d threads): filter, detect, features", be->n_threads);
  SS_TRY(ss_frontend_run(ctx, be, &s->o->params, src, s->probe, NULL, &s->spikes, &s->fe));
  int moved = 0;
  SS_TRY(estimate_motion(ctx, s, &moved));
  if (moved) SS_TRY(register_recording(ctx, be, src, s));
  s->sum->n_spikes = s->sum->n_detected = s->spikes.n;
  return SS_OK;
}

/* Masked EM on a subset of the spikes, the others labelled by their nearest subset spikes. */
static ss_status run_mask_em(ss_ctx *ctx, const ss_backend *be, ss_sort_state *s) {
  const ss_spikes *sp = &s->spikes;
  const int64_t n = sp->n;
  ss_log_info(ctx, "sort: [2/4] masked EM on %s: %" PRId64 " spikes x %d features", s->device, n,
              sp->n_channels * sp->n_pcs);
  if (n == 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: no spikes detected (detect.strong_std = %g): nothing to sort", s->info->path,
                   s->o->params.detect.strong_std);
  int64_t *sub = NULL, m = 0;
  float *x = NULL, *mk = NULL;
  uint8_t *in = NULL;
  ss_mask_em_result r = {0};
  ss_status st = em_subset(ctx, s, &sub, &m);
  if (st == SS_OK) st = gather_rows(ctx, sp, sub, m, &x, &mk);
  if (st == SS_OK && m < n)
    ss_log_info(ctx,
                "sort: masked EM on %" PRId64 " of %" PRId64 " spikes (sort.em_max_spikes), the others by a "
                "vote of their %" PRId64 " nearest",
                m, n, s->o->params.sort.assign_k);
  if (st == SS_OK) st = fit_subset(ctx, be, s, x, mk, m, &r);
  free(mk);
  if (st == SS_OK)
    ss_log_info(ctx, "sort: masked EM: %" PRId64 " clusters (noise included) after %" PRId64 " iterations (%s), %.2f s",
                r.n_clusters, r.n_iterations, ss_mask_em_stop_name(r.stop), r.t_total_s);
  if (st == SS_OK) st = SS_CALLOC(ctx, in, (size_t)n, "masked-EM subset");
  if (st == SS_OK) st = SS_ALLOC(ctx, s->labels_raw, (size_t)n, "labels");
  for (int64_t k = 0; st == SS_OK && k < m; k++) {
    in[sub[k]] = 1;
    s->labels_raw[sub[k]] = r.labels[k];
  }
  double t0 = ss_now();
  if (st == SS_OK) st = assign_rest(ctx, be, s, x, r.labels, m, in, s->labels_raw);
  s->sum->t_assign_s = ss_now() - t0;
  if (st == SS_OK) {
    s->k_raw = r.n_clusters;
    s->sum->em_iterations = r.n_iterations;
    s->sum->em_spikes = m;
  }
  ss_mask_em_result_free(&r);
  free(sub);
  free(x);
  free(in);
  return st;
}

/* Per-cluster statistics of the current labels (k clusters). */
static ss_status cluster_stats(ss_ctx *ctx, const ss_sort_state *s, int64_t k, ss_cluster_stats *out) {
  const ss_spikes *sp = &s->spikes;
  const ss_cluster_spikes cs = {.n = sp->n,
                                .n_channels = sp->n_channels,
                                .n_pcs = sp->n_pcs,
                                .rate_hz = sp->rate_hz,
                                .time_samples = sp->time_samples,
                                .amplitude = sp->amplitude,
                                .features = sp->features,
                                .masks = sp->masks};
  return ss_cluster_stats_compute(ctx, &cs, &s->fe.pca, s->labels, k, s->o->params.merge.refractory_ms, out);
}

/* One merge pass over labels (k clusters, mapped in place): the clusters' mean waveforms, then the
 * merge (cleanup.h). */
static ss_status merge_pass(ss_ctx *ctx, ss_sort_state *s, int64_t *k, const int32_t *origin, ss_merge_result *r) {
  ss_cluster_stats st_k;
  SS_TRY(cluster_stats(ctx, s, *k, &st_k));
  ss_merge_input in = {.n = s->spikes.n,
                       .times = s->spikes.time_samples,
                       .labels = s->labels,
                       .k = *k,
                       .n_channels = st_k.C,
                       .n_wave = st_k.W,
                       .mean_waveform = st_k.wave,
                       .mean_mask = st_k.mean_mask,
                       .rate_hz = s->spikes.rate_hz,
                       .origin = origin};
  ss_status st = ss_merge_run(ctx, &s->o->params, &in, r);
  ss_cluster_stats_free(&st_k);
  SS_TRY(st);
  for (int64_t i = 0; i < s->spikes.n; i++) s->labels[i] = r->map[s->labels[i]];
  *k = r->k_out;
  return SS_OK;
}

/* Merge, clean up (cleanup.h: the merge only joins; the cleanup removes what masked EM put in the wrong
 * cluster), and merge again: cleaned clusters have truer mean waveforms, and pieces the cleanup split
 * apart (same origin) are never joined back. results.h5's merge log holds the first pass. */
static ss_status run_merge(ss_ctx *ctx, ss_sort_state *s) {
  const int64_t n = s->spikes.n;
  ss_log_info(ctx, "sort: [3/4] merge of over-split units (%" PRId64 " clusters, noise included)", s->k_raw);
  SS_TRY(SS_ALLOC(ctx, s->labels, (size_t)n, "final labels"));
  memcpy(s->labels, s->labels_raw, (size_t)n * sizeof(int32_t));
  s->k = s->k_raw;
  if (!s->o->merge) {
    ss_log_info(ctx, "sort: merge off (--no-merge or merge.enabled = false): %" PRId64 " raw clusters kept", s->k_raw);
    return SS_OK;
  }
  SS_TRY(merge_pass(ctx, s, &s->k, NULL, &s->merge));
  s->merged = 1;
  ss_cleanup_input ci = {.n = n,
                         .n_channels = s->spikes.n_channels,
                         .n_pcs = s->spikes.n_pcs,
                         .features = s->spikes.features,
                         .masks = s->spikes.masks,
                         .k = s->k,
                         .n_threads = s->sum->n_threads};
  ss_cleanup_result cr;
  SS_TRY(ss_merge_cleanup(ctx, &s->o->params, &ci, s->labels, &cr));
  s->k = cr.k_out;
  ss_merge_result again;
  ss_status st = merge_pass(ctx, s, &s->k, cr.origin, &again);
  ss_cleanup_result_free(&cr);
  SS_TRY(st);
  s->n_merges_after_cleanup = again.n_merges;
  ss_merge_result_free(&again);
  return SS_OK;
}

/* The template pass (templates.h): every spike, noise cluster included, to the unit whose template explains
 * it best; clusters that are not units (catch-alls, small pieces) vanish. */
static ss_status run_templates(ss_ctx *ctx, ss_sort_state *s) {
  if (!s->o->merge || s->o->params.templates.iterations == 0) return SS_OK;
  if (s->reg.n_bins > 0) {
    /* registration leaves a unit's waveform varying with the drift's phase (interpolated between
     * contacts): one fixed template per cluster then misjudges units and moves their spikes
     * (docs/motion.md); the matching's templates, cut from the recording, take over */
    ss_log_info(ctx, "sort: templates: skipped on a registered recording");
    return SS_OK;
  }
  const ss_templates_input in = {.n = s->spikes.n,
                                 .n_channels = s->spikes.n_channels,
                                 .n_pcs = s->spikes.n_pcs,
                                 .features = s->spikes.features,
                                 .masks = s->spikes.masks,
                                 .peak_channel = s->spikes.peak_channel,
                                 .k = s->k,
                                 .n_threads = s->sum->n_threads};
  ss_templates_result r;
  double t0 = ss_now();
  SS_TRY(ss_templates_assign(ctx, &s->o->params, &in, s->labels, &r));
  ss_log_info(ctx,
              "sort: templates: %" PRId64 " clusters bisected (%" PRId64 " parts joined a unit), %" PRId64
              " units of %" PRId64 " clusters, %" PRId64 " spikes moved, noise %" PRId64 " -> %" PRId64
              " spikes, %.2f s",
              r.n_split, r.n_joined, r.n_units, r.k_in - 1, r.n_moved, r.n_noise_in, r.n_noise_out, ss_now() - t0);
  s->k = r.k_out;
  return SS_OK;
}

/* On a registered recording, the merge rule once more over the matched units: a unit near the probe
 * leaves a waveform between two contacts that the interpolation renders a little lower or higher
 * with the drift's phase, and masked EM and matching can keep two such pieces of one unit apart
 * (docs/motion.md). The match templates follow: a merged unit keeps its largest piece's. */
static ss_status merge_matched(ss_ctx *ctx, ss_sort_state *s) {
  const int64_t k_in = s->k, n = s->spikes.n;
  int64_t *count = NULL, *best = NULL;
  SS_TRY(SS_CALLOC(ctx, count, (size_t)k_in, "unit sizes"));
  for (int64_t i = 0; i < n; i++) count[s->labels[i]]++;
  ss_merge_result r = {0};
  ss_status st = merge_pass(ctx, s, &s->k, NULL, &r);
  if (st == SS_OK && r.n_merges > 0 && s->unit_tmpl) {
    const size_t per = (size_t)s->unit_tmpl_w * s->spikes.n_channels;
    st = SS_ALLOC(ctx, best, (size_t)s->k, "merged templates");
    for (int64_t j = 0; st == SS_OK && j < s->k; j++) best[j] = -1;
    for (int64_t c = 0; st == SS_OK && c < k_in; c++) {
      int64_t j = r.map[c];
      if (best[j] < 0 || count[c] > count[best[j]]) best[j] = c;
    }
    for (int64_t j = 0; st == SS_OK && j < s->k; j++) /* best[j] >= j: the copies never overwrite a source */
      if (best[j] >= 0 && best[j] != j)
        memmove(s->unit_tmpl + j * per, s->unit_tmpl + best[j] * per, per * sizeof(float));
  }
  if (st == SS_OK)
    ss_log_info(ctx,
                "sort: merge of the matched units on the registered recording: %" PRId64 " -> %" PRId64 " clusters",
                k_in, s->k);
  if (st == SS_OK) s->n_merges_after_cleanup += r.n_merges;
  ss_merge_result_free(&r);
  free(count);
  free(best);
  return st;
}

/* Front end, masked EM, merge and cleanup, the final clusters' statistics, and the causal twin. */
static ss_status pipeline(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s) {
  ss_sort_summary *sum = s->sum;
  double t0 = ss_now();
  SS_TRY(run_frontend(ctx, be, src, s));
  double t1 = ss_now();
  SS_TRY(run_mask_em(ctx, be, s));
  double t2 = ss_now();
  SS_TRY(run_merge(ctx, s));
  SS_TRY(run_templates(ctx, s));
  const double t_match = ss_now();
  SS_TRY(ss_sort_match(ctx, be, src, s));
  if (s->reg.n_bins > 0 && s->merged) SS_TRY(merge_matched(ctx, s));
  sum->t_match_s = ss_now() - t_match;
  sum->n_spikes = s->spikes.n;
  SS_TRY(cluster_stats(ctx, s, s->k, &s->stats));
  SS_TRY(ss_sort_quality(ctx, s));
  double t3 = ss_now();
  if (s->o->params.sort.live_model) SS_TRY(ss_sort_live_twin(ctx, be, src, s));
  double t4 = ss_now();
  sum->t_frontend_s = (t1 - t0) + (t4 - t3); /* the twin is a front-end pass */
  sum->t_cluster_s = t2 - t1;
  sum->t_merge_s = t3 - t2 - sum->t_match_s;
  sum->n_clusters_raw = s->k_raw;
  sum->n_clusters = s->k;
  sum->n_merges = s->merged ? s->merge.n_merges + s->n_merges_after_cleanup : 0;
  return SS_OK;
}

static void state_free(ss_sort_state *s) {
  ss_spikes_free(&s->spikes);
  ss_frontend_model_free(&s->fe);
  ss_motion_free(&s->motion);
  ss_motion_reg_free(&s->reg);
  free(s->labels_raw);
  free(s->labels);
  ss_merge_result_free(&s->merge);
  ss_cluster_stats_free(&s->stats);
  ss_frontend_model_free(&s->live_fe);
  ss_live_twin_free(&s->live);
  free(s->unit_tmpl);
}

/* Hand the labels to the summary (they outlive the state). */
static void keep_labels(ss_sort_state *s) {
  s->sum->labels_raw = s->labels_raw;
  s->sum->labels = s->labels;
  s->labels_raw = NULL;
  s->labels = NULL;
}

static ss_status run_all(ss_ctx *ctx, const ss_sort_opts *o, const ss_backend *be, ss_source *src, ss_sort_state *s,
                         double t_start) {
  const ss_source_info *in = ss_source_get_info(src);
  crc_job job = {.path = in->data_path[0] ? in->data_path : o->spec.path}; /* the samples' file, not a folder */
  ss_ctx_init(&job.ctx);
  pthread_t th;
  int threaded = pthread_create(&th, NULL, crc_main, &job) == 0;
  if (!threaded) crc_main(&job);
  ss_status st = pipeline(ctx, be, src, s);
  if (threaded) pthread_join(th, NULL);
  if (st == SS_OK && job.st != SS_OK) st = ss_fail(ctx, job.st, "%s", ss_error_message(&job.ctx));
  if (st != SS_OK) return st;
  s->crc = job.crc;
  s->sum->input_crc32 = job.crc;
  ss_log_debug(ctx, "sort: input CRC-32 %08x (%.2f s, alongside the front end)", job.crc, job.seconds);
  double t3 = ss_now();
  ss_log_info(ctx, "sort: [4/4] outputs under %s", o->out_dir);
  st = ss_sort_write_outputs(ctx, s);
  s->sum->t_output_s = ss_now() - t3;
  s->sum->t_total_s = ss_now() - t_start;
  return st;
}

static ss_status sort_run(ss_ctx *ctx, const ss_sort_opts *o, ss_sort_summary *sum, const ss_log_memory *log) {
  double t_start = ss_now();
  if (!o->out_dir || !o->spec.path)
    return ss_fail(ctx, SS_ERR_USAGE, "sort: an input and an output directory are needed");
  SS_TRY(ss_outset_check(ctx, o->out_dir, o->overwrite)); /* before any work */
  ss_backend be;
  const char *device = NULL;
  SS_TRY(open_backend(ctx, o, &be, &device));
  ss_source *src = NULL;
  ss_status st = ss_source_open(ctx, &o->spec, &src);
  if (st != SS_OK) {
    ss_backend_close(&be);
    return st;
  }
  const ss_source_info *info = ss_source_get_info(src);
  ss_probe probe;
  st = resolve_probe(ctx, o, info, &probe);
  if (st == SS_OK) {
    ss_sort_state s = {.o = o, .info = info, .probe = &probe, .device = device, .sum = sum, .log = log};
    sum->duration_s = info->duration_s;
    sum->n_channels = info->n_channels;
    sum->n_threads = be.n_threads;
    ss_path_base_name(o->spec.path, sum->base, sizeof(sum->base));
    st = run_all(ctx, o, &be, src, &s, t_start);
    if (st == SS_OK) keep_labels(&s);
    state_free(&s);
    ss_probe_free(&probe);
  }
  ss_source_close(src);
  ss_backend_close(&be);
  if (st != SS_OK) ss_sort_summary_free(sum);
  return st;
}

/* Every log line of the run is also kept for sort.log (ss_sort_write_outputs), --quiet or not. */
ss_status ss_sort_run(ss_ctx *ctx, const ss_sort_opts *o, ss_sort_summary *sum) {
  memset(sum, 0, sizeof(*sum));
  ss_log_memory log;
  ss_log_memory_init(&log);
  log.next = ctx->log_sink;
  log.next_user = ctx->log_sink_user;
  ctx->log_sink = ss_log_memory_sink;
  ctx->log_sink_user = &log;
  ss_status st = sort_run(ctx, o, sum, &log);
  ctx->log_sink = log.next;
  ctx->log_sink_user = log.next_user;
  ss_log_memory_free(&log);
  return st;
}

void ss_sort_print_summary(FILE *f, const ss_sort_summary *s, const char *out_dir) {
  double total = s->t_total_s > 0 ? s->t_total_s : 1e-9;
  fprintf(f, "sorted %.1f s of %d channels -> %s\n", s->duration_s, s->n_channels, out_dir);
  if (s->n_spikes != s->n_detected)
    fprintf(f, "spikes:            %" PRId64 " (template matching; %" PRId64 " detections)\n", s->n_spikes,
            s->n_detected);
  else fprintf(f, "spikes:            %" PRId64 "\n", s->n_spikes);
  fprintf(f,
          "clusters:          %" PRId64 " from masked EM (%" PRId64 " iterations), %" PRId64 " after %" PRId64
          " merges (noise cluster 0 included)\n",
          s->n_clusters_raw, s->em_iterations, s->n_clusters, s->n_merges);
  if (s->em_spikes < s->n_detected)
    fprintf(f,
            "masked EM on:      %" PRId64 " of the detections (sort.em_max_spikes); the other %" PRId64
            " labelled by nearest-neighbour vote in %.2f s\n",
            s->em_spikes, s->n_detected - s->em_spikes, s->t_assign_s);
  fprintf(f, "time per stage:    front end %.2f s, masked EM %.2f s, merge %.2f s, match %.2f s, outputs %.2f s\n",
          s->t_frontend_s, s->t_cluster_s, s->t_merge_s, s->t_match_s, s->t_output_s);
  fprintf(f, "total:             %.2f s on %d CPU threads = %.1fx real time\n", s->t_total_s, s->n_threads,
          s->duration_s / total);
  ss_sort_print_units(f, s);
}
