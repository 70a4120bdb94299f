/* test_acquisition.c — acquisition formats read through the chunked source: tiny SpikeGLX .bin +
 * .meta pairs, Open Ephys binary folders and Intan .rhd files written here byte by byte; rate,
 * channels, µV scale, positions and samples read back, and bad keys refused naming file and key. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acq_fixtures.h"
#include "io/source.h"
#include "ss_test.h"

#define T 1000 /* samples per fixture */

static void ok(ss_ctx *ctx, ss_status st) {
  if (st != SS_OK) fail_msg("%s", ss_error_message(ctx));
}

/* Open `spec`, read every sample in chunks of 333 and compare with want(t, c). */
static ss_source *open_ok(ss_source_spec *spec) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  ok(&ctx, ss_source_open(&ctx, spec, &src));
  return src;
}

static void check_samples(ss_source *src, int16_t (*want)(int64_t t, int c)) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ok(&ctx, ss_source_configure(&ctx, src, 333, 5, 7));
  const ss_source_info *in = ss_source_get_info(src);
  for (int64_t i = 0; i < ss_source_n_chunks(src); i++) {
    ss_chunk ch;
    ok(&ctx, ss_source_chunk(&ctx, src, i, &ch));
    for (int64_t r = 0; r < ch.n; r++)
      for (int c = 0; c < in->n_channels; c++) {
        int16_t got = ch.data[(ch.left + r) * in->n_channels + c], exp = want(ch.start + r, c);
        if (got != exp) fail_msg("sample %lld channel %d: got %d, want %d", (long long)(ch.start + r), c, got, exp);
      }
  }
}

static void expect_fail(ss_source_spec *spec, ss_status want_st, const char *want) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  ss_status st = ss_source_open(&ctx, spec, &src);
  if (st == SS_OK) ss_source_close(src);
  assert_int_equal(st, want_st);
  if (!strstr(ss_error_message(&ctx), want)) fail_msg("message \"%s\" lacks \"%s\"", ss_error_message(&ctx), want);
}

/* ---------------------------------------------------------------- SpikeGLX */

#define GLX_SAVED 5 /* 4 AP + sync */

static int16_t glx_value(int64_t t, int c) { return (int16_t)((t * 7 + c * 1000) % 30000 - 15000); }

static const char *glx_meta_fmt =
    "typeThis=imec\n"
    "imSampRate=30000\n"
    "nSavedChans=5\n"
    "snsApLfSy=4,0,1\n"
    "acqApLfSy=4,4,1\n"
    "imAiRangeMax=0.6\n"
    "imAiRangeMin=-0.6\n"
    "%s\n"
    "snsSaveChanSubset=all\n"
    "fileSizeBytes=%s\n"
    "~imroTbl=(0,4)(0 0 0 500 250 1)(1 0 0 500 250 1)(2 0 0 1000 250 1)(3 0 0 500 250 1)\n"
    "%s\n";

/* Write glx.bin and glx.meta; `max_int`, `size` and `map` fill the .meta's variable lines. */
static void write_glx(char *bin, size_t len, const char *max_int, const char *size, const char *map) {
  char meta[512], text[2048];
  ss_test_path(bin, len, "glx.bin");
  ss_test_path(meta, sizeof(meta), "glx.meta");
  int16_t *d = malloc(sizeof(int16_t) * T * GLX_SAVED);
  for (int64_t t = 0; t < T; t++) {
    for (int c = 0; c < 4; c++) d[t * GLX_SAVED + c] = glx_value(t, c);
    d[t * GLX_SAVED + 4] = 7777; /* sync */
  }
  write_bytes(bin, d, sizeof(int16_t) * T * GLX_SAVED);
  free(d);
  snprintf(text, sizeof(text), glx_meta_fmt, max_int, size, map);
  write_bytes(meta, text, strlen(text));
}

static void spikeglx_read(void **state) {
  (void)state;
  char bin[512], meta[512];
  write_glx(bin, sizeof(bin), "imMaxInt=512", "10000", "~snsShankMap=(1,2,480)(0:0:0:1)(0:1:0:1)(0:0:1:1)(0:1:1:1)");
  for (int via_meta = 0; via_meta < 2; via_meta++) {
    ss_test_path(meta, sizeof(meta), "glx.meta");
    ss_source_spec spec = {.path = via_meta ? meta : bin};
    ss_source *src = open_ok(&spec);
    const ss_source_info *in = ss_source_get_info(src);
    assert_int_equal(in->format, SS_FORMAT_SPIKEGLX);
    assert_true(in->rate_hz == 30000.0);
    assert_int_equal(in->n_channels, 4);
    assert_int_equal(in->n_samples, T);
    assert_int_equal(in->n_left_out, 1);
    assert_true(in->scale_known);
    double uv = 0.6 / 512 / 500 * 1e6;
    assert_true(fabs(in->uv_per_step[0] - uv) < 1e-12 && fabs(in->uv_per_step[2] - uv / 2) < 1e-12);
    assert_true(in->has_positions);
    const double x[4] = {0, 32, 0, 32}, y[4] = {0, 0, 20, 20};
    for (int c = 0; c < 4; c++) assert_true(in->x_um[c] == x[c] && in->y_um[c] == y[c]);
    check_samples(src, glx_value);
    ss_source_close(src);
  }
  /* the geometry map gives µm directly, shanks spaced by its header */
  write_glx(bin, sizeof(bin), "imMaxInt=512", "10000",
            "~snsGeomMap=(NP1000,2,250,70)(0:27:0:1)(0:59:0:1)(1:11:20:1)(1:43:20:1)");
  ss_source_spec spec = {.path = bin};
  ss_source *src = open_ok(&spec);
  const ss_source_info *in = ss_source_get_info(src);
  const double gx[4] = {27, 59, 261, 293}, gy[4] = {0, 0, 20, 20};
  for (int c = 0; c < 4; c++) assert_true(in->x_um[c] == gx[c] && in->y_um[c] == gy[c]);
  ss_source_close(src);
}

/* Other .meta variants over the same 5-channel .bin: NI-DAQ, NP 2.0, an LF file with a channel subset. */
static void spikeglx_variants(void **state) {
  (void)state;
  static const char *metas[] = {
      "typeThis=nidq\nniSampRate=25000\nnSavedChans=5\nsnsMnMaXaDw=2,1,1,1\nniAiRangeMax=5\nniMaxInt=32768\n"
      "niMNGain=200\nniMAGain=1\nfileSizeBytes=10000\n",
      "typeThis=imec\nimSampRate=30000\nnSavedChans=5\nsnsApLfSy=4,0,1\nimAiRangeMax=0.5\nfileSizeBytes=10000\n"
      "~imroTbl=(24,4)(0 0 0 0 0)(1 0 0 0 1)(2 0 0 0 2)(3 0 0 0 3)\n"
      "~snsShankMap=(1,2,640)(0:0:0:1)(0:1:0:1)(0:0:1:1)(0:1:1:1)\n",
      "typeThis=imec\nimSampRate=2500\nnSavedChans=5\nsnsApLfSy=0,4,1\nacqApLfSy=4,4,1\nsnsSaveChanSubset=4:8\n"
      "imAiRangeMax=0.6\nimMaxInt=512\nfileSizeBytes=10000\n"
      "~imroTbl=(0,4)(0 0 0 500 250 1)(1 0 0 500 250 1)(2 0 0 500 125 1)(3 0 0 500 250 1)\n",
  };
  const double rate[] = {25000, 30000, 2500},
               uv0[] = {5.0 / 32768 / 200 * 1e6, 0.5 / 8192 / 80 * 1e6, 0.6 / 512 / 250 * 1e6};
  const double uv2[] = {5.0 / 32768 * 1e6, uv0[1], uv0[2] * 2};
  const int channels[] = {3, 4, 4};
  char bin[512], meta[512];
  for (int v = 0; v < 3; v++) {
    write_glx(bin, sizeof(bin), "imMaxInt=512", "10000", "");
    ss_test_path(meta, sizeof(meta), "glx.meta");
    write_bytes(meta, metas[v], strlen(metas[v]));
    ss_source_spec spec = {.path = bin};
    ss_source *src = open_ok(&spec);
    const ss_source_info *in = ss_source_get_info(src);
    assert_true(in->rate_hz == rate[v]);
    assert_int_equal(in->n_channels, channels[v]);
    assert_true(fabs(in->uv_per_step[0] - uv0[v]) < 1e-9 && fabs(in->uv_per_step[2] - uv2[v]) < 1e-9);
    assert_int_equal(in->has_positions, v == 1);
    if (v == 1) assert_true(in->y_um[2] == 15.0 && in->x_um[1] == 32.0);
    check_samples(src, glx_value);
    ss_source_close(src);
  }
}

static void spikeglx_bad(void **state) {
  (void)state;
  char bin[512], meta[512], want[2048];
  ss_test_path(meta, sizeof(meta), "glx.meta");
  ss_source_spec spec = {.path = NULL};
  write_glx(bin, sizeof(bin), "imMaxInt=512", "9998", "");
  spec.path = bin;
  snprintf(want, sizeof(want), "%s: key fileSizeBytes: expected the size of %s (10000 bytes)", meta, bin);
  expect_fail(&spec, SS_ERR_INPUT, want);
  write_glx(bin, sizeof(bin), "imMaxInt=lots", "10000", "");
  snprintf(want, sizeof(want), "%s: key imMaxInt: expected a number, got \"lots\"", meta);
  expect_fail(&spec, SS_ERR_INPUT, want);
  write_glx(bin, sizeof(bin), "imMaxInt=512", "10000", "~snsShankMap=(1,2,480)(0:0:0:1)");
  snprintf(want, sizeof(want), "%s: key ~snsShankMap: expected one entry per neural channel, got \"1 entries\"", meta);
  expect_fail(&spec, SS_ERR_INPUT, want);
  write_glx(bin, sizeof(bin), "imMaxInt=512", "10000", "");
  spec.n_channels = 5;
  snprintf(want, sizeof(want), "%s: --channels does not apply to spikeglx input", bin);
  expect_fail(&spec, SS_ERR_USAGE, want);
}

/* ---------------------------------------------------------------- Open Ephys */

#define OE_TOTAL 4 /* CH1..CH3 + ADC1 */

static int16_t oe_value(int64_t t, int c) { return (int16_t)((t * 13 + c * 3000) % 20000 - 10000); }

static const char *oe_stream = "{\"folder_name\": \"%s/\", \"sample_rate\": 20000.0, \"num_channels\": 4, "
                               "\"channels\": [{\"channel_name\": \"CH1\", \"bit_volts\": 0.195, \"units\": \"uV\"}, "
                               "{\"channel_name\": \"CH2\", \"bit_volts\": 0.195, \"units\": \"uV\"}, "
                               "{\"channel_name\": \"ADC1\", \"bit_volts\": 0.00015, \"units\": \"V\"}, "
                               "{\"channel_name\": \"CH3\", \"bit_volts\": %s, \"units\": \"uV\"}]}";

/* An Open Ephys folder `name` with the given streams (each gets a continuous.dat). */
static void write_oe(char *dir, size_t len, const char *name, int n_streams, const char *bit_volts) {
  static const char *streams[] = {"Rhythm_FPGA-100.0", "Neuropix-PXI-101.0"};
  char path[1024], json[4096] = "{\"GUI version\": \"0.5.5\", \"continuous\": [";
  ss_test_path(dir, len, name);
  mkdir(dir, 0755);
  snprintf(path, sizeof(path), "%s/continuous", dir);
  mkdir(path, 0755);
  int16_t *d = malloc(sizeof(int16_t) * T * OE_TOTAL);
  for (int64_t t = 0; t < T; t++)
    for (int c = 0; c < OE_TOTAL; c++) d[t * OE_TOTAL + c] = c == 2 ? 555 : oe_value(t, c < 2 ? c : 2);
  for (int s = 0; s < n_streams; s++) {
    size_t used = strlen(json);
    snprintf(json + used, sizeof(json) - used, "%s", s ? ", " : "");
    used = strlen(json);
    snprintf(json + used, sizeof(json) - used, oe_stream, streams[s], bit_volts);
    snprintf(path, sizeof(path), "%s/continuous/%s", dir, streams[s]);
    mkdir(path, 0755);
    snprintf(path, sizeof(path), "%s/continuous/%s/continuous.dat", dir, streams[s]);
    write_bytes(path, d, sizeof(int16_t) * T * OE_TOTAL);
  }
  free(d);
  strcat(json, "], \"events\": [], \"spikes\": []}");
  snprintf(path, sizeof(path), "%s/structure.oebin", dir);
  write_bytes(path, json, strlen(json));
}

static void openephys_read(void **state) {
  (void)state;
  char dir[512], oebin[600], want[2048];
  write_oe(dir, sizeof(dir), "oe1", 1, "0.5");
  snprintf(oebin, sizeof(oebin), "%s/structure.oebin", dir);
  for (int via_file = 0; via_file < 2; via_file++) {
    ss_source_spec spec = {.path = via_file ? oebin : dir};
    ss_source *src = open_ok(&spec);
    const ss_source_info *in = ss_source_get_info(src);
    assert_int_equal(in->format, SS_FORMAT_OPENEPHYS);
    assert_true(in->rate_hz == 20000.0);
    assert_int_equal(in->n_channels, 3);
    assert_int_equal(in->n_samples, T);
    assert_int_equal(in->n_left_out, 1);
    assert_string_equal(in->left_out, "ADC1");
    assert_true(in->uv_per_step[0] == 0.195 && in->uv_per_step[2] == 0.5);
    assert_false(in->has_positions);
    check_samples(src, oe_value);
    ss_source_close(src);
  }
  /* every channel neural: whole frames go straight into the chunk */
  char json[600];
  snprintf(json, sizeof(json), "%s/structure.oebin", dir);
  char *text = ss_test_slurp(json), *adc = strstr(text, "\"units\": \"V\"");
  memcpy(adc, "\"units\":\"uV\"", 12); /* ADC1 in uV, renamed: it counts now */
  memcpy(strstr(text, "ADC1"), "CHX1", 4);
  write_bytes(json, text, strlen(text));
  free(text);
  ss_source_spec all = {.path = dir};
  ss_source *as = open_ok(&all);
  assert_int_equal(ss_source_get_info(as)->n_channels, 4);
  assert_int_equal(ss_source_get_info(as)->n_left_out, 0);
  ss_source_close(as);
  write_oe(dir, sizeof(dir), "oe2", 2, "0.195");
  ss_source_spec spec = {.path = dir};
  snprintf(want, sizeof(want),
           "%s/structure.oebin: 2 continuous streams: choose one with --series NAME (Rhythm_FPGA-100.0, "
           "Neuropix-PXI-101.0)",
           dir);
  expect_fail(&spec, SS_ERR_INPUT, want);
  spec.series = "Neuropix-PXI-101.0";
  ss_source *src = open_ok(&spec);
  assert_int_equal(ss_source_get_info(src)->n_channels, 3);
  ss_source_close(src);
  spec.series = "nope";
  expect_fail(&spec, SS_ERR_INPUT, "no continuous stream nope (available: Rhythm_FPGA-100.0, Neuropix-PXI-101.0)");
  write_oe(dir, sizeof(dir), "oe3", 1, "\"x\"");
  spec.series = NULL;
  snprintf(want, sizeof(want),
           "%s/structure.oebin: stream Rhythm_FPGA-100.0: channels[3]: key bit_volts: expected a number, got \"x\"",
           dir);
  expect_fail(&spec, SS_ERR_INPUT, want);
}

/* ---------------------------------------------------------------- Intan */

static int16_t intan_value(int64_t t, int c) { return (int16_t)((t * 11 + c * 5000) % 30000 - 15000); }

#define INTAN_BLOCKS 5

/* An .rhd (major version 1 or 3) or .rhs: 2 amplifier channels, 1 aux (rhd) and 1 ADC channel. */
static void write_intan(char *path, size_t len, int rhs, int major) {
  ss_test_path(path, len, rhs ? "tiny.rhs" : major == 3 ? "tiny3.rhd" : "tiny.rhd");
  bytes_t o = {0};
  put_intan_header(&o, rhs, major, 20000.0f, 2, 1);
  int n = rhs || major >= 3 ? 128 : 60;
  for (int b = 0; b < INTAN_BLOCKS; b++) {
    for (int i = 0; i < n; i++) put(&o, (uint32_t)(1000 + b * n + i), 4);
    for (int c = 0; c < 2; c++)
      for (int i = 0; i < n; i++) put(&o, (uint16_t)(intan_value(b * n + i, c) + 32768), 2);
    if (rhs)
      for (int i = 0; i < 2 * n; i++) put(&o, 1, 2); /* stimulation data */
    else
      for (int i = 0; i < n / 4; i++) put(&o, 7, 2); /* aux */
    for (int i = 0; i < n; i++) put(&o, 9, 2);       /* ADC */
  }
  write_bytes(path, o.b, o.n);
  free(o.b);
}

static void intan_read(void **state) {
  (void)state;
  char path[512];
  for (int v = 0; v < 3; v++) {
    write_intan(path, sizeof(path), v == 2, v == 1 ? 3 : 1);
    ss_source_spec spec = {.path = path};
    ss_source *src = open_ok(&spec);
    const ss_source_info *in = ss_source_get_info(src);
    int n = v ? 128 : 60;
    assert_int_equal(in->format, SS_FORMAT_INTAN);
    assert_true(in->rate_hz == 20000.0);
    assert_int_equal(in->n_channels, 2);
    assert_int_equal(in->n_samples, INTAN_BLOCKS * n);
    assert_int_equal(in->n_left_out, v == 2 ? 1 : 2);
    assert_true(in->uv_per_step[0] == 0.195 && in->uv_per_step[1] == 0.195);
    assert_true(fabs(in->start_time_s - 1000 / 20000.0) < 1e-12);
    check_samples(src, intan_value);
    ss_source_close(src);
  }
  /* cut inside a block; a wrong magic */
  FILE *f = fopen(path, "r+b");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fclose(f);
  assert_int_equal(truncate(path, size - 3), 0);
  ss_source_spec spec = {.path = path};
  expect_fail(&spec, SS_ERR_INPUT, "data bytes is not a whole number of");
  f = fopen(path, "r+b");
  fwrite("\x01\x02\x03\x04", 1, 4, f);
  fclose(f);
  char want[1024];
  snprintf(want, sizeof(want), "%s: header field magic: expected 0xD69127AC (RHS2000), got 0x04030201", path);
  expect_fail(&spec, SS_ERR_INPUT, want);
}

/* ---------------------------------------------------------------- CLI */

static void cli_formats(void **state) {
  (void)state;
  char bin[512], dir[512], args[1200];
  char *out, *err;
  write_glx(bin, sizeof(bin), "imMaxInt=512", "10000", "~snsShankMap=(1,2,480)(0:0:0:1)(0:1:0:1)(0:0:1:1)(0:1:1:1)");
  snprintf(args, sizeof(args), "inspect '%s'", bin);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "format:       spikeglx\n"));
  assert_non_null(strstr(out, "channels:     4\n"));
  assert_non_null(strstr(out, "scale:        1.171875 .. 2.34375 uV per step (per channel)"));
  assert_non_null(strstr(out, "positions:    yes"));
  assert_non_null(strstr(err, "1 channel left out: sync (SY)"));
  free(out), free(err);
  snprintf(args, sizeof(args), "inspect '%s' --rate 30000", bin);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 2);
  assert_non_null(strstr(err, "--rate does not apply to spikeglx input"));
  free(out), free(err);
  write_oe(dir, sizeof(dir), "oecli", 1, "0.195");
  snprintf(args, sizeof(args), "inspect '%s'", dir);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "format:       openephys\n"));
  assert_non_null(strstr(out, "channels:     3\n"));
  assert_non_null(strstr(err, "1 channel left out: ADC1"));
  free(out), free(err);
  write_intan(bin, sizeof(bin), 0, 1);
  snprintf(args, sizeof(args), "inspect '%s'", bin);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "format:       intan\n"));
  assert_non_null(strstr(out, "channels:     2\n"));
  assert_non_null(strstr(out, "scale:        0.195 uV per step"));
  assert_non_null(strstr(out, "left out:     2 channels"));
  free(out), free(err);
  snprintf(args, sizeof(args), "inspect '%s' --uv-per-step 0.2", bin);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 2);
  assert_non_null(strstr(err, "--uv-per-step does not apply to intan input"));
  free(out), free(err);
  snprintf(args, sizeof(args), "inspect '%s' --channels 3", dir);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 2);
  assert_non_null(strstr(err, "--channels does not apply to openephys input"));
  free(out), free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(spikeglx_read),  cmocka_unit_test(spikeglx_variants), cmocka_unit_test(spikeglx_bad),
      cmocka_unit_test(openephys_read), cmocka_unit_test(intan_read),        cmocka_unit_test(cli_formats),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
