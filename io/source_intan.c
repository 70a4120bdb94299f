/* source_intan.c — Intan RHD2000 (.rhd) and RHS2000 (.rhs) recordings: the header is parsed, and
 * the amplifier channels of the data blocks become a tiled, channel-major uint16 store (one tile a
 * block), delivered as value − 32768 with 0.195 µV per step. Other signals are skipped. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/source_internal.h"

#define RHD_MAGIC 0xC6912702u
#define RHS_MAGIC 0xD69127ACu
#define AMP_UV_PER_STEP 0.195
#define QSTRING_NULL 0xFFFFFFFFu
#define QSTRING_MAX 65536 /* header strings are short notes and names */

typedef struct {
  FILE *f;
  const char *path;
  int rhs;
  int major, minor;
  int n_amp, n_aux, n_supply, n_adc, n_dac, n_din, n_dout, n_temp;
  int dc_saved;
  ss_status st;
} hdr_t;

/* ---------------------------------------------------------------- little-endian reads */

static int fail_eof(ss_ctx *ctx, hdr_t *h, const char *field) {
  if (h->st == SS_OK)
    h->st = ss_fail(ctx, SS_ERR_INPUT, "%s: header field %s: file ends inside the header", h->path, field);
  return 0;
}

static uint32_t u32(ss_ctx *ctx, hdr_t *h, const char *field) {
  unsigned char b[4];
  if (h->st != SS_OK || fread(b, 1, 4, h->f) != 4) return (uint32_t)fail_eof(ctx, h, field);
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static int i16(ss_ctx *ctx, hdr_t *h, const char *field) {
  unsigned char b[2];
  if (h->st != SS_OK || fread(b, 1, 2, h->f) != 2) return fail_eof(ctx, h, field);
  return (int16_t)(uint16_t)(b[0] | b[1] << 8);
}

static float f32(ss_ctx *ctx, hdr_t *h, const char *field) {
  uint32_t u = u32(ctx, h, field);
  float v;
  memcpy(&v, &u, sizeof(v));
  return v;
}

static void skip(ss_ctx *ctx, hdr_t *h, int n_i16, int n_f32, const char *field) {
  for (int i = 0; i < n_i16; i++) i16(ctx, h, field);
  for (int i = 0; i < n_f32; i++) f32(ctx, h, field);
}

/* A Qt QString: uint32 byte length (0xFFFFFFFF: null), then UTF-16; skipped. */
static void qstring(ss_ctx *ctx, hdr_t *h, const char *field) {
  uint32_t n = u32(ctx, h, field);
  if (h->st != SS_OK || n == QSTRING_NULL) return;
  if (n > QSTRING_MAX || n % 2) {
    h->st = ss_fail(ctx, SS_ERR_INPUT, "%s: header field %s: string of %u bytes: expected an even length <= %d",
                    h->path, field, n, QSTRING_MAX);
    return;
  }
  if (fseek(h->f, (long)n, SEEK_CUR) != 0) fail_eof(ctx, h, field);
}

/* ---------------------------------------------------------------- header */

static void count_channel(hdr_t *h, int type) {
  static const int rhd[] = {0, 1, 2, 3, 4, 5};      /* amplifier, aux, supply, ADC, digital in, digital out */
  static const int rhs[] = {0, -1, -1, 3, 6, 4, 5}; /* amplifier, -, -, ADC, DAC, digital in, digital out */
  int k = h->rhs ? (type >= 0 && type < 7 ? rhs[type] : -1) : (type >= 0 && type < 6 ? rhd[type] : -1);
  int *slot[] = {&h->n_amp, &h->n_aux, &h->n_supply, &h->n_adc, &h->n_din, &h->n_dout, &h->n_dac};
  if (k >= 0) (*slot[k])++;
}

static void groups(ss_ctx *ctx, hdr_t *h) {
  int n_groups = i16(ctx, h, "number_of_signal_groups");
  for (int g = 0; g < n_groups && h->st == SS_OK; g++) {
    qstring(ctx, h, "signal_group_name");
    qstring(ctx, h, "signal_group_prefix");
    int enabled = i16(ctx, h, "signal_group_enabled"), n = i16(ctx, h, "signal_group_num_channels");
    i16(ctx, h, "signal_group_num_amp_channels");
    for (int c = 0; enabled && c < n && h->st == SS_OK; c++) {
      qstring(ctx, h, "native_channel_name");
      qstring(ctx, h, "custom_channel_name");
      skip(ctx, h, 2, 0, "channel order");
      int type = i16(ctx, h, "signal_type"), on = i16(ctx, h, "channel_enabled");
      skip(ctx, h, h->rhs ? 3 : 2, 0, "chip_channel/board_stream");
      skip(ctx, h, 4, 2, "trigger and impedance fields");
      if (on) count_channel(h, type);
    }
  }
}

static void header(ss_ctx *ctx, hdr_t *h, double *rate) {
  uint32_t magic = u32(ctx, h, "magic");
  if (h->st == SS_OK && magic != (h->rhs ? RHS_MAGIC : RHD_MAGIC)) {
    h->st = ss_fail(ctx, SS_ERR_INPUT, "%s: header field magic: expected 0x%08X (%s), got 0x%08X", h->path,
                    h->rhs ? RHS_MAGIC : RHD_MAGIC, h->rhs ? "RHS2000" : "RHD2000", magic);
    return;
  }
  h->major = i16(ctx, h, "version");
  h->minor = i16(ctx, h, "version");
  if (h->st == SS_OK && (h->major < 1 || h->major > 3 || (h->rhs && h->major != 1))) {
    h->st = ss_fail(ctx, SS_ERR_INPUT, "%s: header field version: expected %s, got %d.%d", h->path,
                    h->rhs ? "1.x" : "1.x to 3.x", h->major, h->minor);
    return;
  }
  *rate = f32(ctx, h, "sample_rate");
  skip(ctx, h, 1, h->rhs ? 8 : 6, "bandwidth fields");
  i16(ctx, h, "notch_filter_mode");
  skip(ctx, h, 0, 2, "impedance test frequency");
  if (h->rhs) skip(ctx, h, 2, 3, "stimulation fields");
  for (int i = 0; i < 3; i++) qstring(ctx, h, "note");
  if (h->rhs) {
    h->dc_saved = i16(ctx, h, "dc_amplifier_data_saved");
    i16(ctx, h, "eval_board_mode");
    qstring(ctx, h, "reference_channel");
  } else {
    if (h->major > 1 || h->minor >= 1) h->n_temp = i16(ctx, h, "num_temp_sensor_channels");
    if (h->major > 1 || h->minor >= 3) i16(ctx, h, "eval_board_mode");
    if (h->major > 1) qstring(ctx, h, "reference_channel");
  }
  groups(ctx, h);
}

/* Samples per data block and bytes per block, from the channel counts. */
static int64_t block_bytes(const hdr_t *h, int *per_block) {
  int n = h->rhs || h->major >= 3 ? 128 : 60;
  *per_block = n;
  if (h->rhs)
    return (int64_t)n * 4 + (int64_t)n * 2 * (h->n_amp * (h->dc_saved ? 3 : 2) + h->n_adc + h->n_dac) +
           (h->n_din ? n * 2 : 0) + (h->n_dout ? n * 2 : 0);
  return (int64_t)n * 4 + (int64_t)n * 2 * (h->n_amp + h->n_adc) + (int64_t)(n / 4) * 2 * h->n_aux +
         2 * (h->n_supply + h->n_temp) + (h->n_din ? n * 2 : 0) + (h->n_dout ? n * 2 : 0);
}

/* ---------------------------------------------------------------- entry */

int ss_source_is_intan(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot && (strcmp(dot, ".rhd") == 0 || strcmp(dot, ".rhs") == 0);
}

static ss_status tiles(ss_ctx *ctx, const hdr_t *h, int64_t start, int64_t size, ss_source_info *info,
                       ss_store *store) {
  int n;
  int64_t block = block_bytes(h, &n), body = size - start, blocks = body / block;
  if (body <= 0)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: no data blocks after the %lld-byte header (a one-file-per-signal-type recording keeps the "
                   "samples in amplifier.dat: read that as flat binary)",
                   h->path, (long long)start);
  if (body % block)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %lld data bytes is not a whole number of %lld-byte blocks (%lld left over)",
                   h->path, (long long)body, (long long)block, (long long)(body % block));
  store->elem = SS_ELEM_I16;
  store->elem_size = 2;
  store->transposed = 1;
  store->offset_binary = 1;
  store->dims[0] = store->cdims[0] = h->n_amp;
  store->dims[1] = blocks * n;
  store->cdims[1] = n;
  store->grid[0] = 1;
  store->grid[1] = blocks;
  store->file_size = size;
  SS_TRY(SS_ALLOC(ctx, store->tile_off, (size_t)blocks, "Intan block offsets"));
  for (int64_t b = 0; b < blocks; b++) store->tile_off[b] = start + b * block + (int64_t)n * 4;
  info->n_samples = blocks * n;
  return SS_OK;
}

static ss_status open_header(ss_ctx *ctx, hdr_t *h, ss_source_info *info, ss_store *store) {
  double rate = 0;
  header(ctx, h, &rate);
  SS_TRY(h->st);
  SS_TRY(ss_source_check_rate(ctx, h->path, "header field sample_rate", rate));
  SS_TRY(ss_source_check_channels(ctx, h->path, "amplifier channels", h->n_amp, NULL));
  int64_t start = (int64_t)ftell(h->f), size;
  unsigned char ts[4] = {0};
  int first = fread(ts, 1, 4, h->f) == 4 ? (int32_t)(ts[0] | ts[1] << 8 | ts[2] << 16 | (uint32_t)ts[3] << 24) : 0;
  SS_TRY(ss_source_open_fd(ctx, h->path, &store->fd, &size));
  SS_TRY(tiles(ctx, h, start, size, info, store));
  info->format = SS_FORMAT_INTAN;
  snprintf(info->dtype, sizeof(info->dtype), "uint16");
  info->layout = SS_LAYOUT_CHANNEL_MAJOR;
  info->rate_hz = rate;
  info->start_time_s = first / rate;
  info->n_channels = h->n_amp;
  info->n_left_out = h->n_aux + h->n_supply + h->n_adc + h->n_dac + h->n_din + h->n_dout + h->n_temp;
  if (info->n_left_out) snprintf(info->left_out, sizeof(info->left_out), "auxiliary, ADC, DAC and digital signals");
  info->scale_known = 1;
  return ss_source_info_scale(ctx, info, AMP_UV_PER_STEP);
}

ss_status ss_source_open_intan(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  const char *dot = strrchr(spec->path, '.');
  hdr_t h = {.f = fopen(spec->path, "rb"), .path = spec->path, .rhs = dot && strcmp(dot, ".rhs") == 0};
  if (!h.f) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open", spec->path);
  ss_status st = open_header(ctx, &h, info, store);
  fclose(h.f);
  return st;
}
