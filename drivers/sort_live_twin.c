/* sort_live_twin.c — the causal twin of a sort's model (model.h5 /live): the front end run again with
 * the causal filter, its strong threshold calibrated against the offline spikes, and the twin built
 * from the causal spikes matched to the offline units (live_model.h). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "drivers/sort_internal.h"

/* Causal and zero-phase sub-sample times of one spike differ by up to about 1.5 samples around their
 * median offset (the filters shape the trough differently): matching allows this much beyond
 * detect.join_size, in samples. */
#define SS_SORT_LIVE_MATCH_SLACK 1

static ss_live_spike_times spike_times_of(const ss_spikes *sp) {
  return (ss_live_spike_times){sp->n, sp->time_samples, sp->time_fraction, sp->peak_channel};
}

/* The causal front end's parameters: the twin's filter (a low order and corner keep the spike's
 * trough when run causally, docs/live.md) and a strong threshold `factor` times the offline one. */
static ss_params causal_params(const ss_params *p, double factor) {
  ss_params c = *p;
  c.filter.causal = 1;
  c.filter.order = p->sort.live_filter_order;
  c.filter.low_hz = p->sort.live_low_hz;
  c.detect.strong_std = p->detect.strong_std * factor;
  return c;
}

/* Pass 1 of the twin: causal candidates at the lowest strong threshold allowed; the offset and the
 * calibrated factor from them (live_model.h). */
static ss_status calibrate_live(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s,
                                const ss_detect_graph *g, ss_live_spike_times ot, ss_spikes *cand,
                                ss_frontend_model *cfe) {
  const ss_params *p = &s->o->params;
  const double min_factor = p->sort.live_min_factor;
  if (!(p->detect.strong_std * min_factor > p->detect.weak_std))
    return ss_fail(ctx, SS_ERR_INPUT,
                   "sort.live_min_factor: %g x detect.strong_std %g: expected above detect.weak_std %g", min_factor,
                   p->detect.strong_std, p->detect.weak_std);
  ss_params cp = causal_params(p, min_factor);
  SS_TRY(ss_frontend_run(ctx, be, &cp, src, s->probe, NULL, cand, cfe));
  float *strength = NULL;
  SS_TRY(SS_ALLOC(ctx, strength, (size_t)(cand->n > 0 ? cand->n : 1), "live calibration"));
  for (int64_t i = 0; i < cand->n; i++) {
    double unscaled = p->detect.strong_std * cfe->thresholds.sigma[cand->peak_channel[i]];
    strength[i] = (float)(ss_detect_signal(cfe->thresholds.polarity, cand->amplitude[i]) / unscaled);
  }
  const ss_detect_config *cfg = &s->fe.detect;
  ss_live_spike_times ct = spike_times_of(cand);
  double offset;
  ss_status st = ss_live_time_offset(ctx, &ct, &ot, g, cfg->n_before + cfg->n_after, &offset, NULL);
  if (st == SS_OK)
    st = ss_live_calibrate(ctx, &ct, strength, &ot, g, offset, cfg->join_size + SS_SORT_LIVE_MATCH_SLACK,
                           p->sort.live_recall, min_factor, &s->live.calibration);
  free(strength);
  return st;
}

/* The offline spikes the twin is matched with: those of the first `limit` samples (0: all), less one
 * waveform window and the join before its end (their causal partners may lie past it). The table is
 * sorted by time (drivers/frontend.h). */
static ss_live_spike_times offline_in_window(const ss_sort_state *s, int64_t limit) {
  ss_live_spike_times t = spike_times_of(&s->spikes);
  if (limit <= 0) return t;
  const ss_detect_config *cfg = &s->fe.detect;
  const int64_t end = limit - (cfg->n_before + cfg->n_after + cfg->join_size);
  int64_t lo = 0, hi = t.n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (t.time_samples[mid] < end) lo = mid + 1;
    else hi = mid;
  }
  t.n = lo;
  return t;
}

static ss_status fit_live_twin(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s) {
  const double twin_s = s->o->params.sort.live_twin_seconds;
  const int64_t limit = twin_s > 0 ? (int64_t)llround(twin_s * ss_source_get_info(src)->rate_hz) : 0;
  const ss_live_spike_times ot = offline_in_window(s, limit);
  ss_detect_graph g;
  SS_TRY(ss_detect_graph_from_probe(ctx, s->probe, s->spikes.n_channels, &g));
  ss_spikes cs;
  memset(&cs, 0, sizeof(cs));
  ss_status st = ss_source_limit(ctx, src, limit);
  if (st == SS_OK) st = calibrate_live(ctx, be, src, s, &g, ot, &cs, &s->live_fe);
  const ss_live_calibration cal = s->live.calibration; /* ss_live_twin_build clears s->live */
  /* pass 2 at the chosen factor (pass 1 is the twin when the factor is its own) */
  if (st == SS_OK && cal.factor != s->o->params.sort.live_min_factor) {
    ss_spikes_free(&cs);
    ss_frontend_model_free(&s->live_fe);
    ss_params cp = causal_params(&s->o->params, cal.factor);
    st = ss_frontend_run(ctx, be, &cp, src, s->probe, NULL, &cs, &s->live_fe);
  }
  /* the prototypes' k-means on one CPU thread: small, and the same on every backend */
  ss_backend cpu;
  if (st == SS_OK) st = ss_backend_open(ctx, SS_DEVICE_CPU, 0, 1, &cpu);
  const int cpu_open = st == SS_OK;
  if (st == SS_OK) {
    const ss_detect_config *cfg = &s->fe.detect;
    ss_live_twin_input in = {.offline = ot,
                             .offline_labels = s->labels,
                             .causal = spike_times_of(&cs),
                             .causal_features = cs.features,
                             .causal_masks = cs.masks,
                             .n_channels = cs.n_channels,
                             .n_pcs = cs.n_pcs,
                             .graph = &g,
                             .max_lag = cfg->n_before + cfg->n_after,
                             .tolerance = cfg->join_size + SS_SORT_LIVE_MATCH_SLACK,
                             .ref_cap = SS_SORT_MODEL_KNN_MAX,
                             .max_prototypes = s->o->params.sort.live_prototypes,
                             .be = &cpu,
                             .seed = (uint64_t)s->o->params.seed};
    st = ss_live_twin_build(ctx, &in, &s->live);
    s->live.calibration = cal;
  }
  if (cpu_open) ss_backend_close(&cpu);
  ss_status rs = ss_source_limit(ctx, src, 0); /* the whole recording again */
  if (st == SS_OK) st = rs;
  ss_detect_graph_free(&g);
  ss_spikes_free(&cs);
  return st;
}

ss_status ss_sort_live_twin(ss_ctx *ctx, const ss_backend *be, ss_source *src, ss_sort_state *s) {
  const double twin_s = s->o->params.sort.live_twin_seconds, dur = ss_source_get_info(src)->duration_s;
  if (twin_s > 0 && twin_s < dur)
    ss_log_info(ctx,
                "sort: live twin: the front end again with the causal filter over the first %g of %g s "
                "(sort.live_twin_seconds), calibrating its threshold (sort.live_model)",
                twin_s, dur);
  else
    ss_log_info(
        ctx,
        "sort: live twin: the front end again with the causal filter, calibrating its threshold (sort.live_model)");
  ss_ctx tctx = *ctx; /* a failure here is a warning, not the sort's error */
  ss_ctx_clear(&tctx);
  ss_status st = fit_live_twin(&tctx, be, src, s);
  if (st == SS_ERR_NOMEM) { /* out of host memory is the run's failure, as anywhere else */
    ss_frontend_model_free(&s->live_fe);
    ss_live_twin_free(&s->live);
    return ss_fail(ctx, st, "%s", ss_error_message(&tctx));
  }
  if (st != SS_OK) {
    ss_log_warn(ctx, "sort: live twin failed, model.h5 is written without /live (live mode will refuse it): %s",
                ss_error_message(&tctx));
    ss_frontend_model_free(&s->live_fe);
    ss_live_twin_free(&s->live);
    return SS_OK;
  }
  const ss_live_twin *t = &s->live;
  const ss_filter *f = &s->live_fe.filter;
  ss_log_info(ctx,
              "live twin: causal filter order %d, %g-%g Hz; strong threshold x%.3f: %.1f %% of the offline spikes "
              "have a causal partner (%.1f %% at x1)",
              f->order, f->low_hz, f->high_hz, t->calibration.factor, 100.0 * t->calibration.achieved,
              100.0 * t->calibration.at_one);
  ss_log_info(ctx,
              "live twin: %" PRId64 " causal spikes, %" PRId64 " matched to units (%.1f %%), offset %.2f samples; "
              "%" PRId64 " centroids for %" PRId64 " units",
              t->n_causal, t->n_matched, t->n_causal > 0 ? 100.0 * (double)t->n_matched / (double)t->n_causal : 0.0,
              t->offset, t->k, t->n_units);
  s->has_live = 1;
  return SS_OK;
}
