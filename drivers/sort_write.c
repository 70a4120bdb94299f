/* sort_write.c — the outputs of a sort (sort.h) through the io/ writers: results.h5 with the clusters
 * and the merge log, the phy folder, the KlustaKwik files and model.h5. Everything here is sequential
 * over spikes, so the outputs do not depend on the thread count. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"
#include "io/klustakwik.h"
#include "io/model_h5.h"
#include "io/outset.h"
#include "io/phy.h"
#include "io/results_h5.h"
#include "io/h5_util.h"
#include "core/log.h"
#include "drivers/sort_internal.h"

/* phy's feature view: each spike's PCs on its template's strongest channels. */
#define SS_SORT_PHY_FEATURE_CHANNELS 8

/* --- paths ------------------------------------------------------------------------------------- */

static void out_path(char *buf, size_t len, const ss_sort_state *s, const char *name) {
  snprintf(buf, len, "%s/%s", s->write_dir, name);
}

/* --- results.h5 -------------------------------------------------------------------------------- */

/* The quality metrics and labels of /clusters (docs/quality.md). */
static ss_status write_quality(ss_ctx *ctx, hid_t g, const ss_quality *q, const char *path) {
  const int64_t K = q->k;
  const char **names = NULL;
  SS_TRY(SS_ALLOC(ctx, names, (size_t)(K > 0 ? K : 1), "cluster labels"));
  for (int64_t i = 0; i < K; i++) names[i] = ss_quality_label_name(q->label[i]);
  ss_status st = ss_results_dataset(ctx, g, "snr", H5T_NATIVE_DOUBLE, K, 0, q->snr, path);
  if (st == SS_OK)
    st = ss_results_dataset(ctx, g, "isi_violations_ratio", H5T_NATIVE_DOUBLE, K, 0, q->isi_violation_ratio, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "isi_violations", H5T_NATIVE_INT64, K, 0, q->n_violations, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "presence_ratio", H5T_NATIVE_DOUBLE, K, 0, q->presence_ratio, path);
  if (st == SS_OK)
    st = ss_results_dataset(ctx, g, "amplitude_cutoff", H5T_NATIVE_DOUBLE, K, 0, q->amplitude_cutoff, path);
  if (st == SS_OK) st = ss_results_dataset_strs(ctx, g, "label", names, K, path);
  free(names);
  return st;
}

static ss_status write_clusters_group(ss_ctx *ctx, hid_t f, const ss_sort_state *s, const char *path) {
  const ss_cluster_stats *c = &s->stats;
  const int64_t K = c->k, D = (int64_t)c->C * c->P;
  int32_t *ids = NULL;
  double *rate = NULL;
  SS_TRY(SS_ALLOC(ctx, ids, (size_t)K, "cluster ids"));
  ss_status st = SS_ALLOC(ctx, rate, (size_t)K, "firing rates");
  for (int64_t i = 0; st == SS_OK && i < K; i++) {
    ids[i] = (int32_t)i;
    rate[i] = s->info->duration_s > 0 ? (double)c->count[i] / s->info->duration_s : 0;
  }
  hid_t g = -1;
  if (st == SS_OK) st = ss_results_group(ctx, f, "clusters", path, &g);
  int64_t wd[3] = {K, c->C, c->W};
  if (st == SS_OK) st = ss_h5_attr_i32(ctx, g, "noise_cluster", 0, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "id", H5T_NATIVE_INT32, K, 0, ids, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "n_spikes", H5T_NATIVE_INT64, K, 0, c->count, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "firing_rate_hz", H5T_NATIVE_DOUBLE, K, 0, rate, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "peak_channel", H5T_NATIVE_INT32, K, 0, c->peak_channel, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "amplitude_mean", H5T_NATIVE_FLOAT, K, 0, c->amp_mean, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "amplitude_sd", H5T_NATIVE_FLOAT, K, 0, c->amp_sd, path);
  if (st == SS_OK)
    st = ss_results_dataset(ctx, g, "refractory_violation_fraction", H5T_NATIVE_DOUBLE, K, 0, c->viol_fraction, path);
  if (st == SS_OK) st = write_quality(ctx, g, &s->sum->quality, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "mean_features", H5T_NATIVE_FLOAT, K, D, c->centroid, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "feature_variance", H5T_NATIVE_FLOAT, K, D, c->variance, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "mean_mask", H5T_NATIVE_FLOAT, K, c->C, c->mean_mask, path);
  if (st == SS_OK) st = ss_results_dataset_nd(ctx, g, "mean_waveform", H5T_NATIVE_FLOAT, 3, wd, c->wave, path);
  if (g >= 0) H5Gclose(g);
  free(ids);
  free(rate);
  return st;
}

/* /motion: the rigid motion estimate (shift_um per bin of bin_s seconds; empty when not estimated) and
 * whether the recording was registered with it. */
static ss_status write_motion_group(ss_ctx *ctx, hid_t f, const ss_sort_state *s, const char *path) {
  const ss_motion *m = &s->motion;
  const double none = 0.0; /* the buffer of an empty dataset */
  hid_t g = -1;
  ss_status st = ss_results_group(ctx, f, "motion", path, &g);
  if (st == SS_OK) st = ss_h5_attr_i32(ctx, g, "registered", s->reg.n_bins > 0, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "bin_s", m->n_bins ? m->bin_samples / s->spikes.rate_hz : 0.0, path);
  if (st == SS_OK) st = ss_h5_attr_f64(ctx, g, "range_um", m->range_um, path);
  if (st == SS_OK)
    st = ss_results_dataset(ctx, g, "shift_um", H5T_NATIVE_DOUBLE, m->n_bins, 0, m->n_bins ? m->shift_um : &none, path);
  if (g >= 0) H5Gclose(g);
  return st;
}

static ss_status write_merges_group(ss_ctx *ctx, hid_t f, const ss_sort_state *s, const char *path) {
  const int64_t M = s->merged ? s->merge.n_decisions : 0;
  size_t m = (size_t)(M > 0 ? M : 1);
  int32_t *a = NULL, *b = NULL, *ns = NULL, *acc = NULL;
  double *corr = NULL, *vb = NULL, *va = NULL;
  ss_status st = SS_OK;
  if (SS_ALLOC(ctx, a, m, "merge log") || SS_ALLOC(ctx, b, m, "merge log") || SS_ALLOC(ctx, ns, m, "merge log") ||
      SS_ALLOC(ctx, acc, m, "merge log") || SS_ALLOC(ctx, corr, m, "merge log") || SS_ALLOC(ctx, vb, m, "merge log") ||
      SS_ALLOC(ctx, va, m, "merge log"))
    st = SS_ERR_NOMEM;
  for (int64_t i = 0; st == SS_OK && i < M; i++) {
    const ss_merge_decision *d = &s->merge.decisions[i];
    a[i] = d->a;
    b[i] = d->b;
    ns[i] = d->n_shared;
    acc[i] = d->accepted;
    corr[i] = d->corr;
    vb[i] = d->viol_before;
    va[i] = d->viol_after;
  }
  hid_t g = -1;
  if (st == SS_OK) st = ss_results_group(ctx, f, "merges", path, &g);
  if (st == SS_OK) st = ss_h5_attr_i32(ctx, g, "enabled", s->merged, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "cluster_a", H5T_NATIVE_INT32, M, 0, a, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "cluster_b", H5T_NATIVE_INT32, M, 0, b, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "waveform_corr", H5T_NATIVE_DOUBLE, M, 0, corr, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "shared_channels", H5T_NATIVE_INT32, M, 0, ns, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "violations_before", H5T_NATIVE_DOUBLE, M, 0, vb, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "violations_after", H5T_NATIVE_DOUBLE, M, 0, va, path);
  if (st == SS_OK) st = ss_results_dataset(ctx, g, "accepted", H5T_NATIVE_INT32, M, 0, acc, path);
  if (st == SS_OK && s->merged)
    st = ss_results_dataset(ctx, g, "map", H5T_NATIVE_INT32, s->merge.k_in, 0, s->merge.map, path);
  if (g >= 0) H5Gclose(g);
  free(a);
  free(b);
  free(ns);
  free(acc);
  free(corr);
  free(vb);
  free(va);
  return st;
}

static ss_status write_run_attrs(ss_ctx *ctx, hid_t f, const ss_sort_state *s, const char *path) {
  char crc[16];
  snprintf(crc, sizeof(crc), "%08x", s->crc);
  SS_TRY(ss_h5_attr_str(ctx, f, "input_path", s->info->path, path));
  SS_TRY(ss_h5_attr_str(ctx, f, "input_crc32", crc, path));
  SS_TRY(ss_h5_attr_f64(ctx, f, "duration_s", s->info->duration_s, path));
  SS_TRY(ss_h5_attr_str(ctx, f, "device", s->device, path));
  SS_TRY(ss_h5_attr_i32(ctx, f, "n_clusters", (int)s->k, path));
  return ss_h5_attr_i32(ctx, f, "n_clusters_raw", (int)s->k_raw, path);
}

static ss_status write_results(ss_ctx *ctx, const ss_sort_state *s) {
  char path[SS_SORT_PATH_MAX + 64];
  out_path(path, sizeof(path), s, "results.h5");
  char *json = ss_params_to_json(&s->o->params);
  if (!json) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: parameter JSON");
  const ss_spikes *sp = &s->spikes;
  ss_results_core core = {.sample_rate = sp->rate_hz,
                          .n_channels = sp->n_channels,
                          .n_pcs = sp->n_pcs,
                          .n = sp->n,
                          .time_samples = sp->time_samples,
                          .time_fraction = sp->time_fraction,
                          .peak_channel = sp->peak_channel,
                          .amplitude = sp->amplitude,
                          .features = sp->features,
                          .masks = sp->masks,
                          .cluster = s->labels,
                          .params_json = json};
  ss_results_file rf;
  ss_status st = ss_results_begin(ctx, path, &core, &rf);
  free(json);
  SS_TRY(st);
  st = ss_results_dataset(ctx, rf.file, "spikes/cluster_raw", H5T_NATIVE_INT32, sp->n, 0, s->labels_raw, path);
  if (st == SS_OK) st = write_run_attrs(ctx, rf.file, s, path);
  if (st == SS_OK) st = write_clusters_group(ctx, rf.file, s, path);
  if (st == SS_OK) st = write_merges_group(ctx, rf.file, s, path);
  if (st == SS_OK) st = write_motion_group(ctx, rf.file, s, path);
  if (st != SS_OK) {
    ss_results_abort(&rf);
    return st;
  }
  return ss_results_commit(ctx, &rf);
}

/* --- KlustaKwik files -------------------------------------------------------------------------- */

static ss_status write_klustakwik(ss_ctx *ctx, const ss_sort_state *s) {
  const ss_spikes *sp = &s->spikes;
  const int64_t n = sp->n, P = sp->n_pcs, F = (int64_t)sp->n_channels * P;
  char fet[2 * SS_SORT_PATH_MAX + 64], fmask[2 * SS_SORT_PATH_MAX + 64], clu[2 * SS_SORT_PATH_MAX + 64],
      name[SS_SORT_PATH_MAX + 16];
  snprintf(name, sizeof(name), "%s.fet.1", s->sum->base);
  out_path(fet, sizeof(fet), s, name);
  snprintf(name, sizeof(name), "%s.fmask.1", s->sum->base);
  out_path(fmask, sizeof(fmask), s, name);
  snprintf(name, sizeof(name), "%s.clu.1", s->sum->base);
  out_path(clu, sizeof(clu), s, name);
  ss_matrix fm = {n, F, sp->features}, mm = {n, F, NULL};
  int32_t *kk = NULL;
  SS_TRY(SS_ALLOC(ctx, mm.data, (size_t)(n > 0 ? n : 1) * F, "feature masks"));
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < F; j++) mm.data[i * F + j] = sp->masks[i * sp->n_channels + j / P];
  ss_status st = ss_kk_write_features_threads(ctx, fet, fmask, &fm, &mm, s->sum->n_threads);
  free(mm.data);
  if (st == SS_OK) st = SS_ALLOC(ctx, kk, (size_t)(n > 0 ? n : 1), "KlustaKwik labels");
  for (int64_t i = 0; st == SS_OK && i < n; i++) kk[i] = s->labels[i] + 1; /* 1 = noise */
  if (st == SS_OK) st = ss_kk_write_clu(ctx, clu, n, kk);
  free(kk);
  return st;
}

/* --- phy folder -------------------------------------------------------------------------------- */

/* Channels of each template by decreasing peak-to-peak (ties: lower channel), the first F. */
static ss_status template_channels(ss_ctx *ctx, const ss_cluster_stats *c, int F, int32_t *ind) {
  const int C = c->C, W = c->W;
  double *ptp = NULL;
  int32_t *order = NULL;
  SS_TRY(SS_ALLOC(ctx, ptp, (size_t)C, "template channels"));
  if (SS_ALLOC(ctx, order, (size_t)C, "template channels") != SS_OK) {
    free(ptp);
    return SS_ERR_NOMEM;
  }
  for (int64_t k = 0; k < c->k; k++) {
    for (int ch = 0; ch < C; ch++) {
      const float *w = c->wave + ((size_t)k * C + ch) * W;
      double lo = w[0], hi = w[0];
      for (int t = 1; t < W; t++) {
        lo = w[t] < lo ? w[t] : lo;
        hi = w[t] > hi ? w[t] : hi;
      }
      ptp[ch] = hi - lo;
      int j = ch; /* insertion: stable, so equal values keep channel order */
      while (j > 0 && ptp[order[j - 1]] < ptp[ch]) {
        order[j] = order[j - 1];
        j--;
      }
      order[j] = ch;
    }
    memcpy(ind + k * F, order, (size_t)F * sizeof(int32_t));
  }
  free(ptp);
  free(order);
  return SS_OK;
}

typedef struct {
  float *amplitudes, *templates, *positions, *pc_features, *similar;
  int32_t *channel_map, *shanks, *pc_ind, *ids;
  const char **groups;
  const double *metrics[5];
} phy_buffers;

static void phy_buffers_free(phy_buffers *b) {
  free(b->amplitudes);
  free(b->templates);
  free(b->positions);
  free(b->pc_features);
  free(b->similar);
  free(b->channel_map);
  free(b->shanks);
  free(b->pc_ind);
  free(b->ids);
  free(b->groups);
}

static ss_status phy_fill(ss_ctx *ctx, const ss_sort_state *s, int F, phy_buffers *b) {
  const ss_spikes *sp = &s->spikes;
  const ss_cluster_stats *c = &s->stats;
  const int64_t N = sp->n, K = c->k;
  /* the match stage's templates when it ran (the mean filtered waveforms over its wider window), else
     the clusters' mean waveforms from their features */
  const int C = c->C, W = s->unit_tmpl ? s->unit_tmpl_w : c->W, P = c->P;
  size_t n1 = (size_t)(N > 0 ? N : 1);
  if (SS_ALLOC(ctx, b->amplitudes, n1, "phy amplitudes") ||
      SS_ALLOC(ctx, b->templates, (size_t)K * W * C, "phy templates") ||
      SS_ALLOC(ctx, b->positions, (size_t)C * 2, "phy positions") ||
      SS_ALLOC(ctx, b->pc_features, n1 * P * F, "phy pc_features") ||
      SS_ALLOC(ctx, b->similar, (size_t)K * K, "phy similar") ||
      SS_ALLOC(ctx, b->channel_map, (size_t)C, "phy channel map") ||
      SS_ALLOC(ctx, b->shanks, (size_t)C, "phy shanks") ||
      SS_ALLOC(ctx, b->pc_ind, (size_t)K * F, "phy pc_feature_ind") ||
      SS_ALLOC(ctx, b->ids, (size_t)K, "phy cluster ids") || SS_ALLOC(ctx, b->groups, (size_t)K, "phy cluster groups"))
    return SS_ERR_NOMEM;
  if (s->unit_tmpl) memcpy(b->templates, s->unit_tmpl, (size_t)K * W * C * sizeof(float));
  else
    for (int64_t k = 0; k < K; k++)
      for (int t = 0; t < W; t++)
        for (int ch = 0; ch < C; ch++)
          b->templates[((size_t)k * W + t) * C + ch] = c->wave[((size_t)k * C + ch) * W + t];
  SS_TRY(ss_phy_amplitudes(ctx, b->templates, (int)K, W, C, s->labels, sp->amplitude, N, b->amplitudes));
  for (int ch = 0; ch < C; ch++) {
    int contact = ss_probe_contact_of_channel(s->probe, ch);
    b->channel_map[ch] = ch;
    b->shanks[ch] = contact >= 0 ? s->probe->shank[contact] : 0;
    b->positions[2 * ch] = (float)(contact >= 0 ? s->probe->x[contact] : 0);
    b->positions[2 * ch + 1] = (float)(contact >= 0 ? s->probe->y[contact] : 0);
  }
  SS_TRY(template_channels(ctx, c, F, b->pc_ind));
  for (int64_t i = 0; i < N; i++)
    for (int p = 0; p < P; p++)
      for (int j = 0; j < F; j++) {
        int ch = b->pc_ind[(int64_t)s->labels[i] * F + j];
        b->pc_features[((size_t)i * P + p) * F + j] = sp->features[(size_t)i * C * P + (size_t)ch * P + p];
      }
  for (int64_t a = 0; a < K; a++) {
    b->ids[a] = (int32_t)a;
    b->groups[a] = ss_quality_label_name(s->sum->quality.label[a]);
    for (int64_t q = 0; q < K; q++) {
      int shared;
      /* the clusters' mean waveforms (c->W samples), whatever templates.npy holds */
      double r = a == q
                     ? 1.0
                     : ss_merge_waveform_corr(c->wave + (size_t)a * C * c->W, c->mean_mask + a * C,
                                              c->wave + (size_t)q * C * c->W, c->mean_mask + q * C, C, c->W, &shared);
      b->similar[a * K + q] = isfinite(r) ? (float)r : 0.0f;
    }
  }
  return SS_OK;
}

/* cluster_<name>.tsv files of the phy folder, in the order of phy_buffers.metrics. */
static const char *const phy_metric_names[] = {"firing_rate", "snr", "isi_violations_ratio", "presence_ratio",
                                               "amplitude_cutoff"};

/* params.py's raw data: the input itself when phy can map it, else a copy in the folder. */
static ss_status phy_raw(ss_ctx *ctx, const ss_sort_state *s, const char *dir, ss_phy_folder *ph) {
  ph->n_channels_dat = s->info->n_channels;
  ph->n_samples_dat = s->info->n_samples;
  if (ss_phy_raw_location(s->info, &s->o->spec, ph->dat_path, sizeof(ph->dat_path), &ph->offset, &ph->n_channels_dat))
    return SS_OK;
  ss_source *src = NULL;
  SS_TRY(ss_source_open(ctx, &s->o->spec, &src));
  ss_status st = ss_phy_write_recording(ctx, dir, src);
  ss_source_close(src);
  snprintf(ph->dat_path, sizeof(ph->dat_path), "%s", SS_PHY_RECORDING);
  ph->offset = 0;
  return st;
}

static ss_status write_phy(ss_ctx *ctx, const ss_sort_state *s) {
  char dir[SS_SORT_PATH_MAX + 64];
  out_path(dir, sizeof(dir), s, "phy");
  const int C = s->stats.C, F = C < SS_SORT_PHY_FEATURE_CHANNELS ? C : SS_SORT_PHY_FEATURE_CHANNELS;
  phy_buffers b;
  memset(&b, 0, sizeof(b));
  ss_status st = phy_fill(ctx, s, F, &b);
  const ss_quality *q = &s->sum->quality;
  const double *metrics[5] = {q->firing_rate_hz, q->snr, q->isi_violation_ratio, q->presence_ratio,
                              q->amplitude_cutoff};
  memcpy(b.metrics, metrics, sizeof(metrics));
  ss_phy_folder ph = {.n_spikes = s->spikes.n,
                      .n_templates = (int)s->stats.k,
                      .n_wave = s->unit_tmpl ? s->unit_tmpl_w : s->stats.W,
                      .n_channels = C,
                      .n_pcs = s->stats.P,
                      .n_feat_channels = F,
                      .spike_times = s->spikes.time_samples,
                      .spike_clusters = s->labels,
                      .spike_templates = s->labels,
                      .amplitudes = b.amplitudes,
                      .templates = b.templates,
                      .channel_map = b.channel_map,
                      .channel_positions = b.positions,
                      .channel_shanks = b.shanks,
                      .pc_features = b.pc_features,
                      .pc_feature_ind = b.pc_ind,
                      .similar_templates = b.similar,
                      .cluster_ids = b.ids,
                      .cluster_groups = b.groups,
                      .n_groups = (int)s->stats.k,
                      .cluster_ks_labels = b.groups,
                      .n_metrics = 5,
                      .metric_names = phy_metric_names,
                      .metric_values = b.metrics,
                      .dtype = "int16",
                      .sample_rate = s->spikes.rate_hz,
                      .hp_filtered = 0};
  if (st == SS_OK) st = phy_raw(ctx, s, dir, &ph);
  if (st == SS_OK) st = ss_phy_write(ctx, dir, &ph);
  phy_buffers_free(&b);
  if (st == SS_OK && s->o->check_phy) st = ss_phy_check(ctx, dir);
  return st;
}

/* --- model.h5 ---------------------------------------------------------------------------------- */

typedef struct {
  double *sos, *live_sos, *x, *y;
  int32_t *adj, *conn;
  float *ref_feat, *ref_mask;
  int32_t *ref_lab, *ids;
  int64_t *ref_t;
} model_buffers;

static void model_buffers_free(model_buffers *b) {
  free(b->sos);
  free(b->live_sos);
  free(b->x);
  free(b->y);
  free(b->adj);
  free(b->conn);
  free(b->ref_feat);
  free(b->ref_mask);
  free(b->ref_lab);
  free(b->ids);
  free(b->ref_t);
}

static ss_status model_probe(ss_ctx *ctx, const ss_probe *pr, int C, model_buffers *b, int64_t *n_edges) {
  SS_TRY(SS_CALLOC(ctx, b->x, (size_t)C, "model probe"));
  SS_TRY(SS_CALLOC(ctx, b->y, (size_t)C, "model probe"));
  SS_TRY(SS_CALLOC(ctx, b->conn, (size_t)C, "model probe"));
  SS_TRY(SS_ALLOC(ctx, b->adj, (size_t)(pr->adj_start[pr->n] > 0 ? pr->adj_start[pr->n] : 1) * 2, "model adjacency"));
  int64_t e = 0;
  for (int i = 0; i < pr->n; i++) {
    if (pr->channel[i] < 0 || pr->channel[i] >= C) continue;
    b->x[pr->channel[i]] = pr->x[i];
    b->y[pr->channel[i]] = pr->y[i];
    b->conn[pr->channel[i]] = pr->connected[i] != 0;
    for (int q = pr->adj_start[i]; q < pr->adj_start[i + 1]; q++) {
      int a = pr->channel[i], c = pr->channel[pr->adj[q]];
      if (c < 0 || a >= c) continue; /* each edge once, a < b */
      b->adj[2 * e] = a;
      b->adj[2 * e + 1] = c;
      e++;
    }
  }
  *n_edges = e;
  return SS_OK;
}

static ss_status model_reference(ss_ctx *ctx, const ss_sort_state *s, model_buffers *b, int64_t *m, int64_t *stride) {
  const ss_spikes *sp = &s->spikes;
  const int64_t C = sp->n_channels, D = C * sp->n_pcs;
  *stride = (sp->n + SS_SORT_MODEL_KNN_MAX - 1) / SS_SORT_MODEL_KNN_MAX;
  if (*stride < 1) *stride = 1;
  *m = (sp->n + *stride - 1) / *stride;
  size_t mm = (size_t)(*m > 0 ? *m : 1);
  SS_TRY(SS_ALLOC(ctx, b->ref_feat, mm * D, "model reference set"));
  SS_TRY(SS_ALLOC(ctx, b->ref_mask, mm * C, "model reference set"));
  SS_TRY(SS_ALLOC(ctx, b->ref_lab, mm, "model reference set"));
  SS_TRY(SS_ALLOC(ctx, b->ref_t, mm, "model reference set"));
  for (int64_t j = 0; j < *m; j++) {
    int64_t i = j * *stride;
    memcpy(b->ref_feat + j * D, sp->features + i * D, (size_t)D * sizeof(float));
    memcpy(b->ref_mask + j * C, sp->masks + i * C, (size_t)C * sizeof(float));
    b->ref_lab[j] = s->labels[i];
    b->ref_t[j] = sp->time_samples[i];
  }
  return SS_OK;
}

/* A filter's sections as model.h5 rows: b0 b1 b2 1 a1 a2. */
static ss_status sos_rows(ss_ctx *ctx, const ss_filter *f, double **out) {
  SS_TRY(SS_ALLOC(ctx, *out, (size_t)f->n_sections * 6, "model filter"));
  for (int q = 0; q < f->n_sections; q++) {
    const ss_biquad *bq = &f->sos[q];
    double row[6] = {bq->b0, bq->b1, bq->b2, 1.0, bq->a1, bq->a2};
    memcpy(*out + 6 * q, row, sizeof(row));
  }
  return SS_OK;
}

static ss_status write_model(ss_ctx *ctx, const ss_sort_state *s) {
  char path[SS_SORT_PATH_MAX + 64];
  out_path(path, sizeof(path), s, "model.h5");
  const ss_frontend_model *fe = &s->fe;
  const ss_cluster_stats *c = &s->stats;
  model_buffers b;
  memset(&b, 0, sizeof(b));
  int64_t n_edges = 0, m = 0, stride = 1;
  ss_status st = sos_rows(ctx, &fe->filter, &b.sos);
  if (st == SS_OK && s->has_live) st = sos_rows(ctx, &s->live_fe.filter, &b.live_sos);
  if (st == SS_OK) st = model_probe(ctx, s->probe, c->C, &b, &n_edges);
  if (st == SS_OK) st = model_reference(ctx, s, &b, &m, &stride);
  if (st == SS_OK) st = SS_ALLOC(ctx, b.ids, (size_t)c->k, "model cluster ids");
  for (int64_t k = 0; st == SS_OK && k < c->k; k++) b.ids[k] = (int32_t)k;
  char *json = st == SS_OK ? ss_params_to_json(&s->o->params) : NULL;
  if (st == SS_OK && !json) st = ss_fail(ctx, SS_ERR_NOMEM, "out of memory: parameter JSON");
  ss_model_file mf = {.sample_rate = s->spikes.rate_hz,
                      .n_channels = c->C,
                      .n_pcs = c->P,
                      .n_wave = c->W,
                      .n_before = fe->detect.n_before,
                      .n_after = fe->detect.n_after,
                      .polarity = fe->thresholds.polarity,
                      .join_size = fe->detect.join_size,
                      .input_path = s->info->path,
                      .input_crc32 = s->crc,
                      .n_sections = fe->filter.n_sections,
                      .filter_order = fe->filter.order,
                      .sos = b.sos,
                      .low_hz = fe->filter.low_hz,
                      .high_hz = fe->filter.high_hz,
                      .sigma = fe->thresholds.sigma,
                      .weak = fe->thresholds.weak,
                      .strong = fe->thresholds.strong,
                      .x_um = b.x,
                      .y_um = b.y,
                      .adjacency = b.adj,
                      .n_edges = n_edges,
                      .connected = b.conn,
                      .uv_per_step = s->info->uv_per_step,
                      .offset_uv = s->info->offset_uv,
                      .pca_basis = fe->pca.basis,
                      .pca_eigenvalues = fe->pca.eigenvalues,
                      .k = c->k,
                      .cluster_id = b.ids,
                      .cluster_count = c->count,
                      .centroid = c->centroid,
                      .variance = c->variance,
                      .mean_mask = c->mean_mask,
                      .mean_waveform = c->wave,
                      .n_ref = m,
                      .ref_stride = stride,
                      .ref_features = b.ref_feat,
                      .ref_masks = b.ref_mask,
                      .ref_labels = b.ref_lab,
                      .ref_times = b.ref_t,
                      .params_json = json};
  const ss_live_twin *t = &s->live;
  ss_model_live live = {.sigma = s->live_fe.thresholds.sigma,
                        .weak = s->live_fe.thresholds.weak,
                        .strong = s->live_fe.thresholds.strong,
                        .pca_basis = s->live_fe.pca.basis,
                        .pca_eigenvalues = s->live_fe.pca.eigenvalues,
                        .k = t->k,
                        .unit_id = t->unit_id,
                        .centroid = t->centroid,
                        .mean_mask = t->mean_mask,
                        .n_ref = t->n_ref,
                        .ref_stride = t->ref_stride,
                        .ref_features = t->ref_features,
                        .ref_masks = t->ref_masks,
                        .ref_labels = t->ref_labels,
                        .ref_times = t->ref_times,
                        .time_offset_samples = t->offset,
                        .n_matched = t->n_matched,
                        .n_causal = t->n_causal,
                        .filter_sections = s->live_fe.filter.n_sections,
                        .filter_order = s->live_fe.filter.order,
                        .filter_sos = b.live_sos,
                        .filter_low_hz = s->live_fe.filter.low_hz,
                        .filter_high_hz = s->live_fe.filter.high_hz,
                        .threshold_factor = t->calibration.factor,
                        .partner_fraction = t->calibration.achieved,
                        .partner_fraction_at_one = t->calibration.at_one};
  if (s->has_live) mf.live = &live;
  if (st == SS_OK) st = ss_model_write(ctx, path, &mf);
  free(json);
  model_buffers_free(&b);
  return st;
}

/* sort.log: the run's log lines so far (written last, so that it has the other outputs' lines). */
static ss_status write_log(ss_ctx *ctx, const ss_sort_state *s) {
  if (!s->log) return SS_OK;
  char path[SS_OUTSET_PATH_MAX + 16];
  snprintf(path, sizeof(path), "%s/sort.log", s->write_dir);
  FILE *f = fopen(path, "w");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  ss_log_memory *m = (ss_log_memory *)s->log; /* the lock is the only thing changed */
  pthread_mutex_lock(&m->lock);
  int bad = m->len > 0 && fwrite(m->text, 1, m->len, f) != m->len;
  if (m->n_dropped > 0) bad |= fprintf(f, "(%" PRId64 " more lines not kept)\n", m->n_dropped) < 0;
  pthread_mutex_unlock(&m->lock);
  bad |= fclose(f) != 0;
  return bad ? ss_fail(ctx, SS_ERR_IO, "%s: write failed", path) : SS_OK;
}

ss_status ss_sort_write_outputs(ss_ctx *ctx, const ss_sort_state *s) {
  /* one output a line */
  /* clang-format off */
  static const struct {
    const char *name;
    ss_status (*write)(ss_ctx *, const ss_sort_state *);
  } outputs[] = {{"results.h5", write_results},
                 {"phy folder", write_phy},
                 {"KlustaKwik files", write_klustakwik},
                 {"model.h5", write_model},
                 {"units.nwb", ss_sort_write_nwb},
                 {"report.html", ss_sort_write_report},
                 {"sort.log", write_log}};
  /* clang-format on */
  ss_outset os;
  SS_TRY(ss_outset_begin(ctx, &os, s->o->out_dir, s->o->overwrite, s->o->test_kill_at));
  ss_sort_state w = *s;
  w.write_dir = os.tmp_dir;
  for (size_t i = 0; i < sizeof(outputs) / sizeof(outputs[0]); i++) {
    double t0 = ss_now();
    ss_status st = outputs[i].write(ctx, &w);
    if (st != SS_OK) return ss_outset_fail(ctx, &os);
    ss_log_info(ctx, "sort: wrote the %s in %.2f s", outputs[i].name, ss_now() - t0);
    ss_outset_step(&os);
  }
  return ss_outset_commit(ctx, &os, "sort");
}
