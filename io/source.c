/* source.c — the chunked source front: format detection, validation common to every format
 * (probe, float scan), chunks with zero-padded margins, and the prefetching reader thread
 * (interface and conventions: source.h). */
#include "io/source.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/log.h"
#include "io/source_internal.h"

#define FLOAT_SCAN_ROWS 65536    /* rows per block of the float scan */
#define INT16_FULL_SCALE 32767.0 /* float peak maps to this */

struct ss_source {
  ss_source_info info;
  int64_t full_samples; /* the recording's length; info.n_samples may be limited (ss_source_limit) */
  ss_store store;
  /* chunking */
  int64_t chunk, n_chunks;
  int left, right;
  int16_t *buf[2];
  void *stage; /* float rows before conversion */
  /* reader thread: it fills buf[1 - front] with chunk `pending`; the consumer owns buf[front] */
  int threaded, running, stop;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int front;
  int64_t pending, filling, ready;
  ss_status ready_st;
  ss_ctx tctx;
};

const char *ss_source_format_name(ss_source_format f) {
  static const char *names[] = {"auto", "nwb", "kwik", "hdf5", "binary", "spikeglx", "openephys", "intan"};
  return (unsigned)f < sizeof(names) / sizeof(names[0]) ? names[f] : "?";
}

ss_status ss_source_format_parse(ss_ctx *ctx, const char *text, ss_source_format *out) {
  for (int f = SS_FORMAT_AUTO; f <= SS_FORMAT_INTAN; f++)
    if (strcmp(text, ss_source_format_name((ss_source_format)f)) == 0) {
      *out = (ss_source_format)f;
      return SS_OK;
    }
  return ss_fail(ctx, SS_ERR_USAGE,
                 "format: expected auto, nwb, kwik, hdf5, binary, spikeglx, openephys or intan, got \"%s\"", text);
}

ss_status ss_source_layout_parse(ss_ctx *ctx, const char *text, ss_layout *out) {
  if (strcmp(text, "time-major") == 0) *out = SS_LAYOUT_TIME_MAJOR;
  else if (strcmp(text, "channel-major") == 0) *out = SS_LAYOUT_CHANNEL_MAJOR;
  else return ss_fail(ctx, SS_ERR_USAGE, "layout: expected time-major or channel-major, got \"%s\"", text);
  return SS_OK;
}

ss_status ss_source_info_scale(ss_ctx *ctx, ss_source_info *info, double value) {
  free(info->uv_per_step);
  info->uv_per_step = NULL;
  SS_TRY(SS_ALLOC(ctx, info->uv_per_step, (size_t)info->n_channels, "channel scales"));
  for (int c = 0; c < info->n_channels; c++) info->uv_per_step[c] = value;
  return SS_OK;
}

ss_status ss_source_check_rate(ss_ctx *ctx, const char *file, const char *field, double rate_hz) {
  if (rate_hz >= SS_SOURCE_MIN_RATE_HZ && rate_hz <= SS_SOURCE_MAX_RATE_HZ) return SS_OK;
  return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected a sampling rate in [%g, %g] Hz, got %.9g", file, field,
                 SS_SOURCE_MIN_RATE_HZ, SS_SOURCE_MAX_RATE_HZ, rate_hz);
}

ss_status ss_source_check_channels(ss_ctx *ctx, const char *file, const char *field, int64_t n, const char *detail) {
  if (n >= 1 && n <= SS_SOURCE_MAX_CHANNELS) return SS_OK;
  return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: expected 1 to %d channels, got %lld%s", file, field,
                 SS_SOURCE_MAX_CHANNELS, (long long)n, detail ? detail : "");
}

ss_status ss_source_check_scales(ss_ctx *ctx, const char *file, const char *field, const double *scale, int n) {
  for (int c = 0; c < n; c++)
    if (!isfinite(scale[c]) || scale[c] == 0.0)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: %s: channel %d: expected a finite non-zero scale, got %.9g", file, field,
                     c, scale[c]);
  return SS_OK;
}

static int binary_extension(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot && (!strcmp(dot, ".bin") || !strcmp(dot, ".dat") || !strcmp(dot, ".raw"));
}

/* The options each format reads (the others are refused rather than silently ignored). */
enum { OPT_SERIES = 1, OPT_DATASET = 2, OPT_RATE = 4, OPT_LAYOUT = 8, OPT_CHANNELS = 16, OPT_OFFSET = 32, OPT_UV = 64 };

static ss_status check_options(ss_ctx *ctx, const ss_source_spec *spec, ss_source_format f) {
  static const int takes[] = {
      [SS_FORMAT_NWB] = OPT_SERIES,
      [SS_FORMAT_KWIK] = OPT_SERIES | OPT_RATE | OPT_UV,
      [SS_FORMAT_HDF5] = OPT_DATASET | OPT_RATE | OPT_LAYOUT | OPT_UV,
      [SS_FORMAT_BINARY] = OPT_RATE | OPT_CHANNELS | OPT_OFFSET | OPT_UV,
      [SS_FORMAT_SPIKEGLX] = 0,
      [SS_FORMAT_OPENEPHYS] = OPT_SERIES,
      [SS_FORMAT_INTAN] = 0,
  };
  struct {
    int bit, given;
    const char *name;
  } opts[] = {
      {OPT_SERIES, spec->series && *spec->series, "--series"},
      {OPT_DATASET, spec->dataset && *spec->dataset, "--dataset"},
      {OPT_RATE, spec->rate_hz > 0, "--rate"},
      {OPT_LAYOUT, spec->layout != SS_LAYOUT_TIME_MAJOR, "--layout"},
      {OPT_CHANNELS, spec->n_channels > 0, "--channels"},
      {OPT_OFFSET, spec->byte_offset > 0, "--offset"},
      {OPT_UV, spec->uv_per_step > 0, "--uv-per-step"},
  };
  for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
    if (opts[i].given && !(takes[f] & opts[i].bit))
      return ss_fail(ctx, SS_ERR_USAGE, "%s: %s does not apply to %s input (the file gives it or has no such choice)",
                     spec->path, opts[i].name, ss_source_format_name(f));
  return SS_OK;
}

static ss_status detect_format(ss_ctx *ctx, const ss_source_spec *spec, ss_source_format *f) {
  *f = spec->format;
  if (*f != SS_FORMAT_AUTO) return SS_OK;
  if (ss_source_is_openephys(spec->path)) *f = SS_FORMAT_OPENEPHYS;
  else if (ss_source_is_intan(spec->path)) *f = SS_FORMAT_INTAN;
  else if (ss_source_is_spikeglx(spec->path)) *f = SS_FORMAT_SPIKEGLX;
  else if (ss_source_is_hdf5(spec->path)) *f = SS_FORMAT_AUTO; /* the HDF5 back-end tells NWB, Kwik, plain */
  else if (binary_extension(spec->path) || spec->n_channels > 0) *f = SS_FORMAT_BINARY;
  else
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: not a recognised recording (HDF5, SpikeGLX .bin/.meta, Open Ephys folder, Intan .rhd/.rhs); "
                   "for flat int16 binary name it .bin/.dat/.raw or give --channels N",
                   spec->path);
  return SS_OK;
}

/* A missing input or a folder is named as such, before any reader guesses at its format; a folder
 * is read only as an Open Ephys recording. */
static ss_status check_path(ss_ctx *ctx, const ss_source_spec *spec) {
  struct stat sb;
  if (stat(spec->path, &sb) != 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %s", spec->path, errno == ENOENT ? "no such file" : strerror(errno));
  if (!S_ISDIR(sb.st_mode) || spec->format == SS_FORMAT_OPENEPHYS || ss_source_is_openephys(spec->path)) return SS_OK;
  return ss_fail(ctx, SS_ERR_INPUT,
                 "%s: is a directory, not a recording (a folder is read only as an Open Ephys recording, with "
                 "structure.oebin)",
                 spec->path);
}

static ss_status open_backend(ss_ctx *ctx, const ss_source_spec *spec, ss_source *s) {
  SS_TRY(check_path(ctx, spec));
  ss_source_format f;
  SS_TRY(detect_format(ctx, spec, &f));
  if (f != SS_FORMAT_AUTO) SS_TRY(check_options(ctx, spec, f));
  ss_status st;
  switch (f) {
    case SS_FORMAT_BINARY: st = ss_source_open_binary(ctx, spec, &s->info, &s->store); break;
    case SS_FORMAT_SPIKEGLX: st = ss_source_open_spikeglx(ctx, spec, &s->info, &s->store); break;
    case SS_FORMAT_OPENEPHYS: st = ss_source_open_openephys(ctx, spec, &s->info, &s->store); break;
    case SS_FORMAT_INTAN: st = ss_source_open_intan(ctx, spec, &s->info, &s->store); break;
    default: st = ss_source_open_hdf5(ctx, spec, &s->info, &s->store); break;
  }
  return st == SS_OK ? check_options(ctx, spec, s->info.format) : st;
}

/* Convert `rows` float rows in s->stage to int16 with the scan's step; NaN/Inf fail (row0 names them). */
static ss_status float_rows(ss_ctx *ctx, ss_source *s, int64_t row0, int64_t rows, int16_t *out, double *peak) {
  int C = s->info.n_channels;
  const float *f32 = s->stage;
  const double *f64 = s->stage;
  double inv = s->info.float_step > 0 ? 1.0 / s->info.float_step : 0.0;
  for (int64_t i = 0; i < rows * C; i++) {
    double v = s->store.elem == SS_ELEM_F32 ? (double)f32[i] : f64[i];
    if (!isfinite(v))
      return ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: sample %lld, channel %lld is %s", s->info.path,
                     s->info.dataset, (long long)(row0 + i / C), (long long)(i % C), isnan(v) ? "NaN" : "infinite");
    if (peak) {
      if (fabs(v) > *peak) *peak = fabs(v);
    } else {
      double q = nearbyint(v * inv);
      out[i] = (int16_t)(q > INT16_FULL_SCALE ? INT16_FULL_SCALE : q < -INT16_FULL_SCALE ? -INT16_FULL_SCALE : q);
    }
  }
  return SS_OK;
}

static ss_status stage_alloc(ss_ctx *ctx, ss_source *s, int64_t rows) {
  free(s->stage);
  s->stage = NULL;
  if (s->store.elem == SS_ELEM_I16) return SS_OK;
  return ss_alloc(ctx, &s->stage, (size_t)(rows * s->info.n_channels), s->store.elem_size, "float staging buffer");
}

/* Float data: one pass over the file for NaN/Inf and the peak, which fixes the int16 step. */
static ss_status float_scan(ss_ctx *ctx, ss_source *s) {
  SS_TRY(stage_alloc(ctx, s, FLOAT_SCAN_ROWS));
  double peak = 0.0;
  for (int64_t t = 0; t < s->info.n_samples; t += FLOAT_SCAN_ROWS) {
    int64_t n = s->info.n_samples - t < FLOAT_SCAN_ROWS ? s->info.n_samples - t : FLOAT_SCAN_ROWS;
    SS_TRY(ss_store_read(ctx, &s->store, s->info.path, t, n, s->stage));
    SS_TRY(float_rows(ctx, s, t, n, NULL, &peak));
  }
  s->info.float_step = peak > 0 ? peak / INT16_FULL_SCALE : 1.0;
  for (int c = 0; c < s->info.n_channels; c++) s->info.uv_per_step[c] *= s->info.float_step;
  return SS_OK;
}

ss_status ss_source_open(ss_ctx *ctx, const ss_source_spec *spec, ss_source **out) {
  *out = NULL;
  if (!spec->path || !*spec->path) return ss_fail(ctx, SS_ERR_USAGE, "source: no input file given");
  ss_source *s = NULL;
  SS_TRY(SS_CALLOC(ctx, s, 1, "source"));
  ss_store_init(&s->store);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  snprintf(s->info.path, sizeof(s->info.path), "%s", spec->path);
  ss_status st = open_backend(ctx, spec, s);
  if (st == SS_OK && spec->probe) st = ss_probe_check_recording(ctx, spec->probe, s->info.n_channels);
  if (st == SS_OK && s->store.elem != SS_ELEM_I16) st = float_scan(ctx, s);
  if (st != SS_OK) {
    ss_source_close(s);
    return st;
  }
  if (s->info.n_left_out)
    ss_log_info(ctx, "%s: %d channel%s left out: %s", spec->path, s->info.n_left_out, s->info.n_left_out > 1 ? "s" : "",
                s->info.left_out);
  s->full_samples = s->info.n_samples;
  s->info.duration_s = (double)s->info.n_samples / s->info.rate_hz;
  hbool_t ts = 0;
  H5is_library_threadsafe(&ts);
  s->info.threaded = s->store.fd >= 0 || ts; /* HDF5 reads stay on the caller's thread unless thread-safe */
  *out = s;
  return SS_OK;
}

const ss_source_info *ss_source_get_info(const ss_source *src) { return &src->info; }
int64_t ss_source_n_chunks(const ss_source *src) { return src->n_chunks; }

/* Fill `buf` with chunk i and its margins (zeros outside the recording). Runs on the reader thread. */
static ss_status fill(ss_ctx *ctx, ss_source *s, int16_t *buf, int64_t i) {
  int C = s->info.n_channels;
  int64_t N = s->info.n_samples, start = i * s->chunk;
  int64_t n = N - start < s->chunk ? N - start : s->chunk;
  int64_t lo = start - s->left, hi = start + n + s->right;
  int64_t r0 = lo > 0 ? lo : 0, r1 = hi < N ? hi : N;
  memset(buf, 0, (size_t)((r0 - lo) * C) * sizeof(int16_t));
  memset(buf + (r1 - lo) * C, 0, (size_t)((hi - r1) * C) * sizeof(int16_t));
  int16_t *dst = buf + (r0 - lo) * C;
  if (s->store.elem == SS_ELEM_I16) return ss_store_read(ctx, &s->store, s->info.path, r0, r1 - r0, dst);
  SS_TRY(ss_store_read(ctx, &s->store, s->info.path, r0, r1 - r0, s->stage));
  return float_rows(ctx, s, r0, r1 - r0, dst, NULL);
}

static void *reader(void *arg) {
  ss_source *s = arg;
  pthread_mutex_lock(&s->mu);
  while (!s->stop) {
    if (s->pending < 0) {
      pthread_cond_wait(&s->cv, &s->mu);
      continue;
    }
    int64_t i = s->pending;
    int16_t *buf = s->buf[1 - s->front];
    s->pending = -1;
    s->filling = i;
    pthread_mutex_unlock(&s->mu);
    ss_ctx_clear(&s->tctx);
    ss_status st = fill(&s->tctx, s, buf, i);
    pthread_mutex_lock(&s->mu);
    s->filling = -1;
    s->ready = i;
    s->ready_st = st;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static void stop_thread(ss_source *s) {
  if (!s->running) return;
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  s->running = 0;
  s->stop = 0;
}

ss_status ss_source_configure(ss_ctx *ctx, ss_source *s, int64_t chunk_samples, int left, int right) {
  if (chunk_samples <= 0 || left < 0 || right < 0)
    return ss_fail(ctx, SS_ERR_INPUT, "source: chunk %lld samples, margins %d/%d: expected chunk > 0, margins >= 0",
                   (long long)chunk_samples, left, right);
  stop_thread(s);
  free(s->buf[0]);
  free(s->buf[1]);
  s->buf[0] = s->buf[1] = NULL;
  s->chunk = chunk_samples;
  s->left = left;
  s->right = right;
  s->n_chunks = (s->info.n_samples + chunk_samples - 1) / chunk_samples;
  int64_t rows = chunk_samples + left + right;
  SS_TRY(SS_ALLOC(ctx, s->buf[0], (size_t)(rows * s->info.n_channels), "chunk buffer"));
  SS_TRY(SS_ALLOC(ctx, s->buf[1], (size_t)(rows * s->info.n_channels), "chunk buffer"));
  SS_TRY(stage_alloc(ctx, s, rows));
  s->front = 0;
  s->pending = s->filling = s->ready = -1;
  ss_ctx_init(&s->tctx);
  s->tctx.quiet = 1;
  if (!s->info.threaded) return SS_OK;
  if (pthread_create(&s->thread, NULL, reader, s) != 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: cannot start the reader thread", s->info.path);
  s->running = 1;
  return SS_OK;
}

/* Threaded: have the reader produce chunk i into the back buffer, swap it to the front, and
 * start prefetching i + 1. */
static ss_status fetch_threaded(ss_ctx *ctx, ss_source *s, int64_t i) {
  pthread_mutex_lock(&s->mu);
  if (s->ready != i && s->filling != i && s->pending != i) {
    while (s->filling >= 0) pthread_cond_wait(&s->cv, &s->mu); /* let a stale prefetch finish */
    s->ready = -1;
    s->pending = i;
    pthread_cond_broadcast(&s->cv);
  }
  while (s->ready != i) pthread_cond_wait(&s->cv, &s->mu);
  ss_status st = s->ready_st;
  if (st != SS_OK) ss_fail(ctx, st, "%s", ss_error_message(&s->tctx));
  s->front = 1 - s->front;
  s->ready = -1;
  if (st == SS_OK && i + 1 < s->n_chunks) {
    s->pending = i + 1;
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return st;
}

ss_status ss_source_limit(ss_ctx *ctx, ss_source *s, int64_t n_samples) {
  if (n_samples < 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: limit %lld samples: expected >= 0", s->info.path, (long long)n_samples);
  stop_thread(s);
  s->chunk = s->n_chunks = 0; /* configure again */
  s->info.n_samples = n_samples > 0 && n_samples < s->full_samples ? n_samples : s->full_samples;
  s->info.duration_s = (double)s->info.n_samples / s->info.rate_hz;
  return SS_OK;
}

ss_status ss_source_chunk(ss_ctx *ctx, ss_source *s, int64_t i, ss_chunk *out) {
  if (s->chunk <= 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "%s: ss_source_chunk before ss_source_configure", s->info.path);
  if (i < 0 || i >= s->n_chunks)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: chunk %lld: expected 0..%lld", s->info.path, (long long)i,
                   (long long)s->n_chunks - 1);
  if (s->running) SS_TRY(fetch_threaded(ctx, s, i));
  else SS_TRY(fill(ctx, s, s->buf[s->front], i));
  int64_t N = s->info.n_samples;
  out->index = i;
  out->start = i * s->chunk;
  out->n = N - out->start < s->chunk ? N - out->start : s->chunk;
  out->left = s->left;
  out->right = s->right;
  out->left_valid = (int)(out->start < s->left ? out->start : s->left);
  int64_t after = N - (out->start + out->n);
  out->right_valid = (int)(after < s->right ? after : s->right);
  out->n_channels = s->info.n_channels;
  out->data = s->buf[s->front];
  return SS_OK;
}

void ss_source_close(ss_source *s) {
  if (!s) return;
  stop_thread(s);
  ss_store_close(&s->store);
  free(s->buf[0]);
  free(s->buf[1]);
  free(s->stage);
  free(s->info.uv_per_step);
  free(s->info.x_um);
  free(s->info.y_um);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}
