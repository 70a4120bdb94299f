/* simulate_write.c — streams a simulation into an NWB 2.x file (with the ground-truth units table)
 * or into flat int16 binary plus a JSON sidecar (layout in docs/simulate.md), one chunk at a time. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/simulate.h"
#include "io/atomic_file.h"
#include "io/nwb_write.h"
#include "core/log.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the flat binary output is little-endian int16; this writer assumes a little-endian host"
#endif

#define SIM_UV_PER_V 1e6
#define SIM_PATH_MAX 4096

/* Chunk sink: one for each format. */
typedef ss_status (*chunk_sink)(ss_ctx *ctx, void *dst, const int16_t *samples, int64_t n, int n_channels);

static ss_status nwb_sink(ss_ctx *ctx, void *dst, const int16_t *samples, int64_t n, int n_channels) {
  (void)n_channels;
  return ss_nwb_writer_append(ctx, (ss_nwb_writer *)dst, samples, n);
}

static ss_status binary_sink(ss_ctx *ctx, void *dst, const int16_t *samples, int64_t n, int n_channels) {
  ss_atomic_file *af = dst;
  size_t count = (size_t)n * (size_t)n_channels;
  if (fwrite(samples, sizeof(int16_t), count, af->f) != count)
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed (disk full?)", af->final_path);
  return SS_OK;
}

/* Render, quantise and hand every chunk to the sink, then measure the ground truth. */
static ss_status stream_all(ss_ctx *ctx, ss_sim *s, int64_t chunk, chunk_sink sink, void *dst) {
  int C = ss_sim_n_channels(s);
  int64_t total = ss_sim_n_samples(s), clipped = 0;
  double rate = ss_sim_get_config(s)->rate_hz;
  float *uv;
  int16_t *q;
  SS_TRY(SS_ALLOC(ctx, uv, (size_t)chunk * C, "simulation chunk"));
  if (SS_ALLOC(ctx, q, (size_t)chunk * C, "simulation chunk")) {
    free(uv);
    return SS_ERR_NOMEM;
  }
  ss_progress prog;
  ss_progress_start(&prog, ctx, "simulate", (double)total / rate);
  ss_status st = SS_OK;
  for (int64_t t = 0; t < total && st == SS_OK; t += chunk) {
    int64_t n = total - t < chunk ? total - t : chunk;
    st = ss_sim_render(ctx, s, t, n, uv);
    if (st == SS_OK) {
      clipped += ss_sim_quantize(s, uv, n * C, q);
      st = sink(ctx, dst, q, n, C);
    }
    ss_progress_update(&prog, (double)(t + n) / rate);
  }
  ss_progress_finish(&prog);
  free(uv);
  free(q);
  SS_TRY(st);
  if (clipped)
    ss_log_warn(ctx, "simulate: %" PRId64 " samples saturated the int16 range (lower --snr or --noise-uv)", clipped);
  return ss_sim_finish(ctx, s);
}

static ss_status write_nwb(ss_ctx *ctx, ss_sim *s, const char *path, int64_t chunk) {
  const ss_sim_config *c = ss_sim_get_config(s);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  int C = ss_sim_n_channels(s), U = t->n_units;
  double *xy, **times = NULL;
  SS_TRY(SS_ALLOC(ctx, xy, 2 * (size_t)C, "channel positions"));
  for (int ch = 0; ch < C; ch++) ss_sim_channel_position(s, ch, &xy[ch], &xy[C + ch]);
  char desc[256];
  snprintf(desc, sizeof(desc),
           "spikestream simulate: seed %" PRIu64 ", %d units, median SNR %g, noise %g uV, drift %g um/s", c->seed, U,
           c->median_snr, c->noise_uv, c->drift_um_per_s);
  ss_nwb_meta meta = {.session_description = desc,
                      .rate_hz = c->rate_hz,
                      .n_channels = C,
                      .conversion = c->conversion_uv / SIM_UV_PER_V,
                      .channel_x = xy,
                      .channel_y = xy + C};
  ss_nwb_writer *w = NULL;
  ss_status st = ss_nwb_writer_open(ctx, path, &meta, &w);
  if (st == SS_OK) st = stream_all(ctx, s, chunk, nwb_sink, w);
  if (st == SS_OK) st = SS_CALLOC(ctx, times, U > 0 ? U : 1, "spike times");
  for (int u = 0; u < U && st == SS_OK; u++) {
    st = SS_ALLOC(ctx, times[u], t->n_spikes[u] ? t->n_spikes[u] : 1, "spike times");
    for (int64_t k = 0; st == SS_OK && k < t->n_spikes[u]; k++)
      times[u][k] = (double)t->spike_samples[u][k] / c->rate_hz;
  }
  if (st == SS_OK) {
    ss_nwb_units units = {.n_units = U,
                          .n_spikes = t->n_spikes,
                          .spike_times = (const double *const *)times,
                          .peak_channel = t->peak_channel,
                          .snr = t->snr,
                          .description = "ground-truth units"};
    st = ss_nwb_writer_set_units(ctx, w, &units);
  }
  if (st == SS_OK) st = ss_nwb_writer_close(ctx, w);
  else if (w) ss_nwb_writer_abort(w);
  if (times)
    for (int u = 0; u < U; u++) free(times[u]);
  free(times);
  free(xy);
  return st;
}

/* BASE from BASE or BASE.bin. */
static ss_status binary_paths(ss_ctx *ctx, const char *path, char *bin, char *json) {
  size_t len = strlen(path);
  if (len >= 4 && strcmp(path + len - 4, ".bin") == 0) len -= 4;
  if (len == 0 || len + 6 > SIM_PATH_MAX)
    return ss_fail(ctx, SS_ERR_INPUT, "simulate: output \"%s\": expected a base name (BASE or BASE.bin)", path);
  snprintf(bin, SIM_PATH_MAX, "%.*s.bin", (int)len, path);
  snprintf(json, SIM_PATH_MAX, "%.*s.json", (int)len, path);
  return SS_OK;
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? slash + 1 : path;
}

static void json_doubles(FILE *f, const double *v, int64_t n) {
  fputc('[', f);
  for (int64_t i = 0; i < n; i++) fprintf(f, "%s%.17g", i ? ", " : "", v[i]);
  fputc(']', f);
}

static void write_sidecar(FILE *f, const ss_sim *s, const char *bin_path) {
  const ss_sim_config *c = ss_sim_get_config(s);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  int C = ss_sim_n_channels(s);
  fprintf(f, "{\n  \"format\": \"spikestream-simulate-binary\",\n  \"format_version\": 1,\n");
  fprintf(f, "  \"data_file\": \"%s\",\n  \"dtype\": \"int16\",\n  \"byte_order\": \"little\",\n", base_name(bin_path));
  fprintf(f, "  \"layout\": \"time-major\",\n  \"sample_rate\": %.17g,\n  \"n_channels\": %d,\n", c->rate_hz, C);
  fprintf(f, "  \"n_samples\": %" PRId64 ",\n  \"conversion_uv\": %.17g,\n  \"conversion\": %.17g,\n",
          ss_sim_n_samples(s), c->conversion_uv, c->conversion_uv / SIM_UV_PER_V);
  fprintf(f,
          "  \"simulation\": {\"seed\": %" PRIu64 ", \"duration_s\": %.17g, \"n_units\": %d, \"median_snr\": %.17g, "
          "\"snr_spread\": %.17g, \"noise_uv\": %.17g, \"drift_um_per_s\": %.17g, \"min_rate_hz\": %.17g, "
          "\"max_rate_hz\": %.17g, \"rate_law\": \"%s\", \"median_rate_hz\": %.17g, \"rate_log_sd\": %.17g, "
          "\"refractory_ms\": %.17g, \"amplitude_jitter\": %.17g, \"burst_prob\": %.17g, "
          "\"burst_attenuation\": %.17g, \"burst_isi_ms\": %.17g, \"decay_law\": \"%s\", "
          "\"decay_min_um\": %.17g, \"decay_max_um\": %.17g},\n",
          c->seed, c->duration_s, c->n_units, c->median_snr, c->snr_spread, c->noise_uv, c->drift_um_per_s,
          c->min_rate_hz, c->max_rate_hz, c->rate_law == SS_SIM_RATES_LOGUNIFORM ? "loguniform" : "lognormal",
          c->median_rate_hz, c->rate_log_sd, c->refractory_ms, c->amplitude_jitter, c->burst_prob, c->burst_attenuation,
          c->burst_isi_ms, c->decay_law == SS_SIM_DECAY_POWER ? "power" : "exponential", c->decay_min_um,
          c->decay_max_um);
  fprintf(f, "  \"channel_x_um\": [");
  for (int ch = 0; ch < C; ch++) {
    double x, y;
    ss_sim_channel_position(s, ch, &x, &y);
    fprintf(f, "%s%.17g", ch ? ", " : "", x);
  }
  fprintf(f, "],\n  \"channel_y_um\": [");
  for (int ch = 0; ch < C; ch++) {
    double x, y;
    ss_sim_channel_position(s, ch, &x, &y);
    fprintf(f, "%s%.17g", ch ? ", " : "", y);
  }
  fprintf(f, "],\n  \"noise_sigma_uv\": ");
  json_doubles(f, t->noise_sigma_uv, C);
  fprintf(f, ",\n  \"units\": [");
  for (int u = 0; u < t->n_units; u++) {
    fprintf(f,
            "%s\n    {\"id\": %d, \"x_um\": %.17g, \"y_um\": %.17g, \"z_um\": %.17g, \"rate_hz\": %.17g, "
            "\"target_snr\": %.17g, \"snr\": %.17g, \"peak_channel\": %d, \"template_ptp_uv\": %.17g, "
            "\"decay_um\": %.17g, \"burst_prob\": %.17g, \"n_spikes\": %" PRId64 ",\n     \"spike_samples\": [",
            u ? "," : "", u, t->x_um[u], t->y_um[u], t->z_um[u], t->rate_hz[u], t->target_snr[u], t->snr[u],
            (int)t->peak_channel[u], t->template_ptp_uv[u], t->decay_um[u], t->burst_prob[u], t->n_spikes[u]);
    for (int64_t k = 0; k < t->n_spikes[u]; k++) fprintf(f, "%s%" PRId64, k ? ", " : "", t->spike_samples[u][k]);
    fprintf(f, "]}");
  }
  fprintf(f, "%s]\n}\n", t->n_units ? "\n  " : "");
}

static ss_status write_binary(ss_ctx *ctx, ss_sim *s, const char *path, int64_t chunk) {
  char bin[SIM_PATH_MAX], json[SIM_PATH_MAX];
  SS_TRY(binary_paths(ctx, path, bin, json));
  ss_atomic_file data, side;
  SS_TRY(ss_atomic_begin(ctx, &data, bin, 1));
  ss_status st = stream_all(ctx, s, chunk, binary_sink, &data);
  if (st != SS_OK) {
    ss_atomic_abort(&data);
    return st;
  }
  if ((st = ss_atomic_begin(ctx, &side, json, 1)) != SS_OK) {
    ss_atomic_abort(&data);
    return st;
  }
  write_sidecar(side.f, s, bin);
  if (ferror(side.f)) {
    ss_atomic_abort(&data);
    ss_atomic_abort(&side);
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed (disk full?)", json);
  }
  if ((st = ss_atomic_commit(ctx, &data)) != SS_OK) {
    ss_atomic_abort(&side);
    return st;
  }
  return ss_atomic_commit(ctx, &side);
}

ss_status ss_sim_write(ss_ctx *ctx, const ss_sim_config *c, const ss_probe *probe, const char *path,
                       ss_sim_format format, int64_t chunk_samples, ss_sim **out) {
  if (out) *out = NULL;
  ss_sim *s;
  SS_TRY(ss_sim_create(ctx, c, probe, &s));
  int64_t chunk = chunk_samples > 0 ? chunk_samples : ss_sim_preferred_chunk(s);
  ss_status st = format == SS_SIM_FORMAT_NWB ? write_nwb(ctx, s, path, chunk) : write_binary(ctx, s, path, chunk);
  if (st != SS_OK || !out) ss_sim_free(s);
  else *out = s;
  return st;
}
