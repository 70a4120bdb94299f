/* sort_nwb.c — the sort's units.nwb (docs/formats.md): the final clusters as an NWB units table with
 * spike times, each unit's strongest electrodes and its mean waveform on them, the quality metrics and
 * labels, the probe as electrodes table, and the input's ElectricalSeries as an external link when
 * the input is NWB (else no acquisition). */
#define _DEFAULT_SOURCE /* realpath */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/nwb_write.h"
#include "drivers/sort_internal.h"

/* Electrodes (and waveform_mean channels) per unit: the strongest ones of its mean waveform. */
#define SS_SORT_NWB_UNIT_CHANNELS 8

typedef struct {
  double **times;      /* [K] per unit, seconds */
  int64_t *n;          /* [K] */
  int32_t *channels;   /* [K × E] */
  float *wave;         /* [K × W × E] µV */
  double *x, *y;       /* [C] µm */
  const char **labels; /* [K] */
  char link_file[PATH_MAX], link_path[SS_SOURCE_NAME_MAX], series[SS_SOURCE_NAME_MAX];
} nwb_buffers;

static void nwb_buffers_free(nwb_buffers *b, int64_t K) {
  for (int64_t k = 0; b->times && k < K; k++) free(b->times[k]);
  free(b->times);
  free(b->n);
  free(b->channels);
  free(b->wave);
  free(b->x);
  free(b->y);
  free(b->labels);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Spike times of each unit in the recording's time (start_time_s + sample / rate), ascending. */
static ss_status unit_times(ss_ctx *ctx, const ss_sort_state *s, int64_t K, nwb_buffers *b) {
  const ss_spikes *sp = &s->spikes;
  SS_TRY(SS_CALLOC(ctx, b->times, (size_t)(K > 0 ? K : 1), "unit spike times"));
  SS_TRY(SS_CALLOC(ctx, b->n, (size_t)(K > 0 ? K : 1), "unit spike counts"));
  for (int64_t i = 0; i < sp->n; i++) b->n[s->labels[i]]++;
  for (int64_t k = 0; k < K; k++)
    SS_TRY(SS_ALLOC(ctx, b->times[k], (size_t)(b->n[k] > 0 ? b->n[k] : 1), "unit spike times"));
  memset(b->n, 0, (size_t)K * sizeof(int64_t));
  for (int64_t i = 0; i < sp->n; i++) {
    int32_t k = s->labels[i];
    b->times[k][b->n[k]++] = s->info->start_time_s +
                             ((double)sp->time_samples[i] + (double)sp->time_fraction[i]) / sp->rate_hz;
  }
  for (int64_t k = 0; k < K; k++) qsort(b->times[k], (size_t)b->n[k], sizeof(double), cmp_double);
  return SS_OK;
}

/* Each unit's E channels by decreasing peak-to-peak of its mean waveform (ties: lower channel), and
 * the waveform on them, time-major. */
static ss_status unit_channels(ss_ctx *ctx, const ss_cluster_stats *c, int E, nwb_buffers *b) {
  const int C = c->C, W = c->W;
  double *ptp = NULL;
  SS_TRY(SS_ALLOC(ctx, ptp, (size_t)C, "unit channels"));
  ss_status st = SS_ALLOC(ctx, b->channels, (size_t)(c->k * E > 0 ? c->k * E : 1), "unit channels");
  if (st == SS_OK) st = SS_ALLOC(ctx, b->wave, (size_t)(c->k * E * W > 0 ? c->k * E * W : 1), "unit waveforms");
  for (int64_t k = 0; st == SS_OK && k < c->k; k++) {
    int32_t *ch = b->channels + k * E;
    for (int q = 0; q < C; q++) {
      const float *w = c->wave + ((size_t)k * C + q) * W;
      float lo = w[0], hi = w[0];
      for (int t = 1; t < W; t++) lo = w[t] < lo ? w[t] : lo, hi = w[t] > hi ? w[t] : hi;
      ptp[q] = (double)hi - lo >= 0 ? (double)hi - lo : 0; /* NaN ranks last, never below the taken marks */
    }
    for (int e = 0; e < E; e++) { /* selection: E is small */
      int best = -1;
      for (int q = 0; q < C; q++)
        if (ptp[q] >= 0 && (best < 0 || ptp[q] > ptp[best])) best = q;
      ch[e] = best;
      ptp[best] = -1;
    }
    for (int t = 0; t < W; t++)
      for (int e = 0; e < E; e++) b->wave[((size_t)k * W + t) * E + e] = c->wave[((size_t)k * C + ch[e]) * W + t];
  }
  free(ptp);
  return st;
}

static ss_status probe_positions(ss_ctx *ctx, const ss_sort_state *s, int C, nwb_buffers *b) {
  SS_TRY(SS_CALLOC(ctx, b->x, (size_t)C, "electrode positions"));
  SS_TRY(SS_CALLOC(ctx, b->y, (size_t)C, "electrode positions"));
  for (int q = 0; q < C; q++) {
    int contact = ss_probe_contact_of_channel(s->probe, q);
    b->x[q] = contact >= 0 ? s->probe->x[contact] : 0;
    b->y[q] = contact >= 0 ? s->probe->y[contact] : 0;
  }
  return SS_OK;
}

/* An NWB input's series: its group (the data's parent) in the input, by absolute path. */
static void acquisition_link(const ss_sort_state *s, ss_nwb_meta *m, nwb_buffers *b) {
  m->acquisition = SS_NWB_ACQ_NONE;
  const char *slash = strrchr(s->info->dataset, '/');
  if (s->info->format != SS_FORMAT_NWB || !slash || slash == s->info->dataset) return;
  if (!realpath(s->info->path, b->link_file)) return;
  snprintf(b->link_path, sizeof(b->link_path), "%.*s", (int)(slash - s->info->dataset), s->info->dataset);
  const char *name = strrchr(b->link_path, '/');
  snprintf(b->series, sizeof(b->series), "%s", name ? name + 1 : b->link_path);
  m->acquisition = SS_NWB_ACQ_LINK;
  m->link_file = b->link_file;
  m->link_path = b->link_path;
  m->series_name = b->series;
}

static ss_status write_file(ss_ctx *ctx, const char *path, const ss_nwb_meta *meta, const ss_nwb_units *u) {
  ss_nwb_writer *w = NULL;
  SS_TRY(ss_nwb_writer_open(ctx, path, meta, &w));
  ss_status st = ss_nwb_writer_set_units(ctx, w, u);
  if (st != SS_OK) {
    ss_nwb_writer_abort(w);
    return st;
  }
  return ss_nwb_writer_close(ctx, w);
}

ss_status ss_sort_write_nwb(ss_ctx *ctx, const ss_sort_state *s) {
  const ss_cluster_stats *c = &s->stats;
  const ss_quality *q = &s->sum->quality;
  const int64_t K = c->k;
  const int C = c->C, E = C < SS_SORT_NWB_UNIT_CHANNELS ? C : SS_SORT_NWB_UNIT_CHANNELS;
  char path[SS_SORT_PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/units.nwb", s->write_dir);
  nwb_buffers b;
  memset(&b, 0, sizeof(b));
  ss_status st = unit_times(ctx, s, K, &b);
  if (st == SS_OK) st = unit_channels(ctx, c, E, &b);
  if (st == SS_OK) st = probe_positions(ctx, s, C, &b);
  if (st == SS_OK) st = SS_ALLOC(ctx, b.labels, (size_t)(K > 0 ? K : 1), "unit labels");
  for (int64_t k = 0; st == SS_OK && k < K; k++) b.labels[k] = ss_quality_label_name(q->label[k]);
  ss_nwb_meta meta = {.session_description = "spike sorting by spikestream",
                      .rate_hz = s->spikes.rate_hz,
                      .n_channels = C,
                      .conversion = 1e-6,
                      .starting_time = s->info->start_time_s,
                      .channel_x = b.x,
                      .channel_y = b.y};
  acquisition_link(s, &meta, &b);
  const ss_nwb_column cols[] = {
      {"n_spikes", "spikes of the unit", SS_NWB_COL_I64, c->count},
      {"firing_rate_hz", "spikes over the recording's duration (Hz)", SS_NWB_COL_F64, q->firing_rate_hz},
      {"snr", "template peak on the peak channel over its noise level", SS_NWB_COL_F64, q->snr},
      {"isi_violations_ratio", "ISI violations over those of a random unit of the same rate", SS_NWB_COL_F64,
       q->isi_violation_ratio},
      {"isi_violations", "inter-spike intervals inside the refractory period", SS_NWB_COL_I64, q->n_violations},
      {"presence_ratio", "fraction of time bins holding a spike", SS_NWB_COL_F64, q->presence_ratio},
      {"amplitude_cutoff", "estimated fraction of spikes missed below the threshold", SS_NWB_COL_F64,
       q->amplitude_cutoff},
      {"label", "good, mua or noise (docs/quality.md)", SS_NWB_COL_STR, b.labels}};
  ss_nwb_units u = {.n_units = (int)K,
                    .description = "units of the sort (cluster 0 collects the noise)",
                    .n_spikes = b.n,
                    .spike_times = (const double *const *)b.times,
                    .peak_channel = c->peak_channel,
                    .n_unit_channels = E,
                    .unit_channels = b.channels,
                    .n_wave = c->W,
                    .waveform_mean_uv = b.wave,
                    .waveform_rate_hz = s->spikes.rate_hz,
                    .n_columns = (int)(sizeof(cols) / sizeof(cols[0])),
                    .columns = cols};
  if (st == SS_OK) st = write_file(ctx, path, &meta, &u);
  nwb_buffers_free(&b, K);
  return st;
}
