/* test_source.c — the chunked sources: one random recording written as NWB (rate and timestamps),
 * Kwik, plain HDF5 (time- and channel-major, contiguous, chunked, compressed, float) and flat
 * binary reads back identically through every reader for several chunk sizes and margins; every
 * bad input with its exact message; `spikestream inspect`; bounded memory on a 10-minute file. */
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/h5_util.h"
#include "io/nwb_write.h"
#include "io/source.h"
#include "core/log.h"
#include "core/rng.h"
#include "ss_test.h"

#define C 7 /* odd on purpose: no tile lines up with anything */
#define N (2 * 30000 + 1234)
#define RATE 30000.0
#define UV 0.195

static int16_t *rec; /* [N × C] */
static double xs[C], ys[C];

static void make_recording(void) {
  rec = malloc(sizeof(int16_t) * N * C);
  ss_rng r = ss_rng_make(42, SS_RNG_TEST, 1);
  for (int64_t i = 0; i < (int64_t)N * C; i++) rec[i] = (int16_t)(ss_rng_next_u64(&r) & 0xffff);
  rec[5 * C + 3] = 32767; /* the peak: float variants then map back exactly */
  for (int64_t i = 0; i < (int64_t)N * C; i++)
    if (rec[i] == -32768) rec[i] = -32767;
  for (int c = 0; c < C; c++) xs[c] = 20.0 * (c % 2), ys[c] = 10.0 * c;
}

static void ok(ss_ctx *ctx, ss_status st) {
  if (st != SS_OK) fail_msg("%s", ss_error_message(ctx));
}

/* ---------------------------------------------------------------- fixtures */

static void write_nwb(const char *path, int timestamps) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_nwb_meta m = {0};
  m.rate_hz = RATE;
  m.n_channels = C;
  m.conversion = UV * 1e-6;
  m.channel_x = xs;
  m.channel_y = ys;
  m.write_timestamps = timestamps;
  m.starting_time = 2.5;
  ss_nwb_writer *w;
  ok(&ctx, ss_nwb_writer_open(&ctx, path, &m, &w));
  for (int64_t t = 0, step = 777; t < N; t += step, step = step * 3 % 40000 + 1) /* uneven appends */
    ok(&ctx, ss_nwb_writer_append(&ctx, w, rec + t * C, t + step > N ? N - t : step));
  ok(&ctx, ss_nwb_writer_close(&ctx, w));
}

/* A dataset at `name` from `buf` (memory type mtype, dims d0 × d1), with optional chunking/deflate. */
static hid_t dataset(hid_t f, const char *name, hid_t ftype, hid_t mtype, const void *buf, int rank, hsize_t d0,
                     hsize_t d1, hsize_t c0, hsize_t c1, int deflate) {
  hsize_t dims[2] = {d0, d1}, chunk[2] = {c0, c1};
  hid_t sp = H5Screate_simple(rank, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (c0) H5Pset_chunk(dcpl, rank, chunk);
  if (deflate) H5Pset_deflate(dcpl, 1);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  hid_t d = H5Dcreate2(f, name, ftype, sp, lcpl, dcpl, H5P_DEFAULT);
  assert_true(d >= 0);
  if (buf && d0 * d1 > 0) assert_true(H5Dwrite(d, mtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  H5Pclose(lcpl);
  H5Pclose(dcpl);
  H5Sclose(sp);
  return d;
}

static void attr_f64(hid_t obj, const char *name, double v) {
  hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, H5T_IEEE_F64LE, s, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  H5Sclose(s);
}

typedef enum { PLAIN_CONTIGUOUS, PLAIN_CHUNKED, PLAIN_DEFLATE, PLAIN_FLOAT } plain_kind;

static void write_plain(const char *path, int channel_major, plain_kind kind) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  int16_t *t = malloc(sizeof(int16_t) * N * C);
  float *fl = malloc(sizeof(float) * N * C);
  for (int64_t i = 0; i < N; i++)
    for (int c = 0; c < C; c++) {
      int64_t dst = channel_major ? c * (int64_t)N + i : i * C + c;
      t[dst] = rec[i * C + c];
      fl[dst] = 0.5f * (float)rec[i * C + c];
    }
  hsize_t d0 = channel_major ? C : N, d1 = channel_major ? N : C;
  hsize_t c0 = kind == PLAIN_CONTIGUOUS ? 0 : channel_major ? 3 : 4096, c1 = channel_major ? 5000 : 3;
  hid_t d = kind == PLAIN_FLOAT
                ? dataset(f, "/g/float", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, fl, 2, d0, d1, 0, 0, 0)
                : dataset(f, "/g/data", H5T_STD_I16LE, H5T_NATIVE_INT16, t, 2, d0, d1, c0, c1, kind == PLAIN_DEFLATE);
  H5Dclose(d);
  H5Fclose(f);
  free(t);
  free(fl);
}

static void write_kwik(const char *path) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t d = dataset(f, "/recordings/0/data", H5T_STD_I16LE, H5T_NATIVE_INT16, rec, 2, N, C, 32768, C, 0);
  H5Dclose(d);
  hid_t g = H5Gopen2(f, "/recordings/0", H5P_DEFAULT);
  attr_f64(g, "sample_rate", RATE);
  H5Gclose(g);
  H5Fclose(f);
}

#define BIN_HEADER 100

static void write_binary(const char *path) {
  FILE *f = fopen(path, "wb");
  char header[BIN_HEADER] = {0};
  fwrite(header, 1, BIN_HEADER, f);
  fwrite(rec, sizeof(int16_t), (size_t)N * C, f);
  fclose(f);
}

/* ---------------------------------------------------------------- round trips */

/* The chunks of a source showing the first `total` samples of rec (N, or less after ss_source_limit). */
static void check_chunks_of(ss_source *src, int64_t total, int64_t chunk, int left, int right, int reverse) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ok(&ctx, ss_source_configure(&ctx, src, chunk, left, right));
  int64_t n = ss_source_n_chunks(src);
  assert_int_equal(n, (total + chunk - 1) / chunk);
  for (int64_t k = 0; k < n; k++) {
    int64_t i = reverse ? n - 1 - k : k;
    ss_chunk ch;
    ok(&ctx, ss_source_chunk(&ctx, src, i, &ch));
    assert_int_equal(ch.start, i * chunk);
    assert_int_equal(ch.n, i == n - 1 ? total - i * chunk : chunk);
    assert_int_equal(ch.left_valid, ch.start < left ? ch.start : left);
    int64_t after = total - ch.start - ch.n;
    assert_int_equal(ch.right_valid, after < right ? after : right);
    for (int64_t r = 0; r < left + ch.n + right; r++) {
      int64_t t = ch.start - left + r;
      for (int c = 0; c < C; c++) {
        int16_t want = t >= 0 && t < total ? rec[t * C + c] : 0;
        if (ch.data[r * C + c] != want)
          fail_msg("chunk %lld (size %lld, margins %d/%d) row %lld channel %d: got %d, want %d", (long long)i,
                   (long long)chunk, left, right, (long long)r, c, ch.data[r * C + c], want);
      }
    }
  }
}

static void check_chunks(ss_source *src, int64_t chunk, int left, int right, int reverse) {
  check_chunks_of(src, N, chunk, left, right, reverse);
}

static ss_source *open_spec(const ss_source_spec *spec) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src;
  ok(&ctx, ss_source_open(&ctx, spec, &src));
  const ss_source_info *in = ss_source_get_info(src);
  assert_int_equal(in->n_channels, C);
  assert_int_equal(in->n_samples, N);
  assert_true(in->rate_hz > RATE * (1 - 1e-9) && in->rate_hz < RATE * (1 + 1e-9));
  return src;
}

static void round_trip(const ss_source_spec *spec) {
  ss_source *src = open_spec(spec);
  static const int64_t chunks[] = {1000, 30000, 7777, N, N + 5};
  static const int margins[][2] = {{0, 0}, {64, 128}, {3000, 17}};
  for (size_t a = 0; a < sizeof(chunks) / sizeof(chunks[0]); a++)
    for (size_t b = 0; b < 3; b++) check_chunks(src, chunks[a], margins[b][0], margins[b][1], 0);
  check_chunks(src, 5000, 100, 100, 1); /* random access: back to front */
  ss_source_close(src);
}

static void nwb_rate_and_timestamps(void **state) {
  (void)state;
  char path[512];
  for (int ts = 0; ts < 2; ts++) {
    ss_test_path(path, sizeof(path), ts ? "ts.nwb" : "rate.nwb");
    write_nwb(path, ts);
    ss_source_spec spec = {.path = path};
    round_trip(&spec);
    ss_source *src = open_spec(&spec);
    const ss_source_info *in = ss_source_get_info(src);
    assert_int_equal(in->format, SS_FORMAT_NWB);
    assert_string_equal(in->dataset, "/acquisition/ElectricalSeries/data");
    assert_string_equal(in->dtype, "int16");
    assert_int_equal(in->from_timestamps, ts);
    assert_true(in->start_time_s > 2.5 - 1e-12 && in->start_time_s < 2.5 + 1e-12);
    assert_true(in->scale_known && in->uv_per_step[C - 1] > UV * (1 - 1e-12) &&
                in->uv_per_step[C - 1] < UV * (1 + 1e-12));
    assert_true(in->has_positions);
    for (int c = 0; c < C; c++) assert_true(in->x_um[c] == xs[c] && in->y_um[c] == ys[c]);
    assert_true(in->threaded);
    ss_source_close(src);
  }
}

static void kwik_plain_binary(void **state) {
  (void)state;
  char path[512];
  ss_test_path(path, sizeof(path), "rec.raw.kwd");
  write_kwik(path);
  ss_source_spec kw = {.path = path};
  round_trip(&kw);
  /* Open Ephys writes start_time as a sample count (an integer attribute), the Kwik layout seconds */
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), g = H5Gopen2(f, "/recordings/0", H5P_DEFAULT);
  hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(g, "start_time", H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  uint64_t start = 2340000;
  assert_true(H5Awrite(a, H5T_NATIVE_UINT64, &start) >= 0);
  H5Aclose(a), H5Sclose(sp), H5Gclose(g), H5Fclose(f);
  ss_source *ks = open_spec(&kw);
  assert_true(ss_source_get_info(ks)->start_time_s == 2340000 / RATE);
  ss_source_close(ks);
  /* a .kwik is followed to its .raw.kwd: by hdf5_path, or to the one STEM_*.raw.kwd */
  char kwik[512];
  ss_test_path(kwik, sizeof(kwik), "rec.kwik");
  for (int named = 1; named >= 0; named--) {
    if (!named) {
      ss_test_path(kwik, sizeof(kwik), "exp1.kwik");
      ss_test_path(path, sizeof(path), "exp1_100.raw.kwd");
      write_kwik(path);
    }
    f = H5Fcreate(kwik, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t r = H5Gcreate2(f, "/recordings", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t r0 = H5Gcreate2(r, "0", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    hid_t raw = H5Gcreate2(r0, "raw", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    ss_ctx hctx;
    ss_test_ctx(&hctx);
    if (named) ok(&hctx, ss_h5_attr_str(&hctx, raw, "hdf5_path", "{raw.kwd}/recordings/0", kwik));
    H5Gclose(raw), H5Gclose(r0), H5Gclose(r), H5Fclose(f);
    ss_source_spec kk = {.path = kwik};
    ks = open_spec(&kk);
    assert_int_equal(ss_source_get_info(ks)->n_samples, N);
    assert_string_equal(ss_source_get_info(ks)->data_path, path);
    ss_source_close(ks);
  }
  ss_test_path(path, sizeof(path), "rec.raw.kwd");
  static const char *names[] = {"contig", "chunked", "deflate"};
  for (int cm = 0; cm < 2; cm++)
    for (int k = PLAIN_CONTIGUOUS; k <= PLAIN_DEFLATE; k++) {
      char name[64];
      snprintf(name, sizeof(name), "plain_%s_%d.h5", names[k], cm);
      ss_test_path(path, sizeof(path), name);
      write_plain(path, cm, (plain_kind)k);
      ss_source_spec sp = {.path = path,
                           .dataset = "/g/data",
                           .rate_hz = RATE,
                           .layout = cm ? SS_LAYOUT_CHANNEL_MAJOR : SS_LAYOUT_TIME_MAJOR};
      round_trip(&sp);
      ss_source *src = open_spec(&sp);
      /* compressed data go through the HDF5 library (no prefetch thread in a serial build) */
      hbool_t safe = 0;
      H5is_library_threadsafe(&safe);
      assert_int_equal(ss_source_get_info(src)->threaded, k == PLAIN_DEFLATE ? (int)safe : 1);
      ss_source_close(src);
    }
  ss_test_path(path, sizeof(path), "rec.bin");
  write_binary(path);
  ss_source_spec bin = {.path = path, .n_channels = C, .rate_hz = RATE, .byte_offset = BIN_HEADER};
  round_trip(&bin);
}

/* ss_source_limit: the first samples only, as if the recording ended there (margins past it are
 * zeros), then all of it again; a negative limit is refused. */
static void limited_view(void **state) {
  (void)state;
  char path[512];
  ss_test_path(path, sizeof(path), "rec_limit.bin");
  write_binary(path);
  ss_source_spec bin = {.path = path, .n_channels = C, .rate_hz = RATE, .byte_offset = BIN_HEADER};
  ss_source *src = open_spec(&bin);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int64_t part = 20000 + 17;
  ok(&ctx, ss_source_limit(&ctx, src, part));
  assert_int_equal(ss_source_get_info(src)->n_samples, part);
  assert_true(fabs(ss_source_get_info(src)->duration_s - part / RATE) < 1e-12);
  check_chunks_of(src, part, 7777, 64, 128, 0);
  ok(&ctx, ss_source_limit(&ctx, src, 10 * (int64_t)N)); /* beyond the end: all of it */
  check_chunks(src, 30000, 100, 100, 0);
  ok(&ctx, ss_source_limit(&ctx, src, part));
  ok(&ctx, ss_source_limit(&ctx, src, 0));
  check_chunks(src, 7777, 64, 128, 1);
  assert_int_equal(ss_source_limit(&ctx, src, -1), SS_ERR_INTERNAL);
  ss_source_close(src);
}

static void float_data(void **state) {
  (void)state;
  char path[512];
  ss_test_path(path, sizeof(path), "float.h5");
  write_plain(path, 0, PLAIN_FLOAT);
  ss_source_spec sp = {.path = path, .dataset = "/g/float", .rate_hz = RATE, .uv_per_step = 2.0};
  round_trip(&sp); /* peak 0.5 × 32767 → step 0.5: the int16 values come back exactly */
  ss_source *src = open_spec(&sp);
  const ss_source_info *in = ss_source_get_info(src);
  assert_string_equal(in->dtype, "float32");
  assert_true(in->float_step == 0.5 && in->uv_per_step[0] == 1.0);
  ss_source_close(src);
}

/* ---------------------------------------------------------------- bad inputs */

static void expect_error(const ss_source_spec *spec, const char *want) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  assert_int_not_equal(ss_source_open(&ctx, spec, &src), SS_OK);
  assert_null(src);
  assert_string_equal(ss_error_message(&ctx), want);
}

static void bad_hdf5(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "bad.h5");
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  int32_t i32[20] = {0};
  float fl[30] = {0};
  fl[7 * 3 + 2] = 0.0f / 0.0f;
  H5Dclose(dataset(f, "/one_d", H5T_STD_I16LE, H5T_NATIVE_INT32, i32, 1, 20, 1, 0, 0, 0));
  H5Dclose(dataset(f, "/i32", H5T_STD_I32LE, H5T_NATIVE_INT32, i32, 2, 10, 2, 0, 0, 0));
  H5Dclose(dataset(f, "/nan", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, fl, 2, 10, 3, 0, 0, 0));
  H5Dclose(dataset(f, "/zero", H5T_STD_I16LE, H5T_NATIVE_INT16, NULL, 2, 100, 0, 0, 0, 0));
  H5Fclose(f);
  ss_source_spec s = {.path = path, .rate_hz = RATE};
  s.dataset = "/nope";
  snprintf(want, sizeof(want), "%s: dataset /nope: missing", path);
  expect_error(&s, want);
  s.dataset = "/one_d";
  snprintf(want, sizeof(want), "%s: dataset /one_d: expected rank 2 (time x channels), got rank 1", path);
  expect_error(&s, want);
  s.dataset = "/i32";
  snprintf(want, sizeof(want), "%s: dataset /i32: expected int16, float32 or float64 samples, got int32", path);
  expect_error(&s, want);
  s.dataset = "/nan";
  snprintf(want, sizeof(want), "%s: dataset /nan: sample 7, channel 2 is NaN", path);
  expect_error(&s, want);
  s.dataset = "/zero";
  snprintf(want, sizeof(want), "%s: dataset /zero: zero channels (shape 100 x 0, time x channels)", path);
  expect_error(&s, want);
  s.dataset = NULL;
  snprintf(want, sizeof(want),
           "%s: neither NWB (no ElectricalSeries under /acquisition) nor Kwik (no /recordings): name the data with "
           "--dataset PATH",
           path);
  expect_error(&s, want);
  s.format = SS_FORMAT_HDF5;
  s.dataset = NULL;
  snprintf(want, sizeof(want), "%s: a plain HDF5 file needs the dataset path (--dataset PATH)", path);
  expect_error(&s, want);
}

static void bad_binary(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "trunc.dat");
  FILE *f = fopen(path, "wb");
  int16_t x[2 * 4 + 1] = {0};
  fwrite(x, 1, sizeof(x) - 1, f); /* 17 bytes: 2 frames of 4 channels and one stray byte */
  fclose(f);
  ss_source_spec s = {.path = path, .n_channels = 4, .rate_hz = RATE};
  snprintf(want, sizeof(want),
           "%s: truncated: 17 bytes after the 0-byte header is not a whole number of 4-channel int16 frames (1 bytes "
           "left over)",
           path);
  expect_error(&s, want);
  s.n_channels = 0;
  snprintf(want, sizeof(want), "%s: flat binary needs the channel count (--channels N), got 0", path);
  expect_error(&s, want);
  s.n_channels = 4;
  s.rate_hz = 0;
  snprintf(want, sizeof(want), "%s: flat binary needs the sampling rate (--rate HZ), got 0", path);
  expect_error(&s, want);
  ss_test_path(path, sizeof(path), "mystery.xyz");
  fclose(fopen(path, "wb"));
  ss_source_spec m = {.path = path};
  snprintf(want, sizeof(want),
           "%s: not a recognised recording (HDF5, SpikeGLX .bin/.meta, Open Ephys folder, Intan .rhd/.rhs); for "
           "flat int16 binary name it .bin/.dat/.raw or give --channels N",
           path);
  expect_error(&m, want);
}

static void set_timestamp(const char *path, int64_t index, double value) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/acquisition/ElectricalSeries/timestamps", H5P_DEFAULT), fs = H5Dget_space(d);
  hsize_t start = (hsize_t)index, one = 1;
  hid_t ms = H5Screate_simple(1, &one, NULL);
  H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &one, NULL);
  assert_true(H5Dwrite(d, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, &value) >= 0);
  H5Sclose(ms);
  H5Sclose(fs);
  H5Dclose(d);
  H5Fclose(f);
}

/* A second ElectricalSeries (an LFP beside the raw data): refused with the list unless --series names
 * one. */
static void several_series(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "two_series.nwb");
  write_nwb(path, 0);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  assert_true(f >= 0);
  assert_true(H5Ocopy(f, "/acquisition/ElectricalSeries", f, "/acquisition/LFP", H5P_DEFAULT, H5P_DEFAULT) >= 0);
  H5Fclose(f);
  ss_source_spec s = {.path = path};
  snprintf(want, sizeof(want),
           "%s: /acquisition holds 2 ElectricalSeries (ElectricalSeries, LFP): name one with --series", path);
  expect_error(&s, want);
  ss_source_spec named = {.path = path, .series = "LFP"};
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  assert_int_equal(ss_source_open(&ctx, &named, &src), SS_OK);
  assert_string_equal(ss_source_get_info(src)->dataset, "/acquisition/LFP/data");
  ss_source_close(src);
}

/* The isolated first read of an HDF5 file is bounded in time: at the limit the child is killed and
 * the file refused with one line (a limit no child can meet stands in for a library that loops). */
static void hdf5_read_limit(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "limit.nwb");
  write_nwb(path, 0);
  ss_source_spec s = {.path = path, .hdf5_limit_s = 1e-9};
  snprintf(want, sizeof(want),
           "%s: the HDF5 library did not finish reading the metadata in 1e-09 s: a corrupt file (or a very slow disk)",
           path);
  expect_error(&s, want);
  s.hdf5_limit_s = 0; /* the default limit */
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  ok(&ctx, ss_source_open(&ctx, &s, &src));
  ss_source_close(src);
}

static void bad_nwb(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "badts.nwb");
  write_nwb(path, 1);
  double t5 = 2.5 + 5.0 / RATE;
  set_timestamp(path, 5, 2.5 + 3.0 / RATE); /* goes back */
  ss_source_spec s = {.path = path};
  /* t5 < t4: index 5 is reported */
  snprintf(want, sizeof(want),
           "%s: /acquisition/ElectricalSeries/timestamps: not strictly increasing at index 5 (%.9g after %.9g)", path,
           2.5 + 3.0 / RATE, 2.5 + 4.0 / RATE);
  expect_error(&s, want);
  set_timestamp(path, 5, t5 + 0.5 / RATE); /* half a sample late */
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  assert_int_equal(ss_source_open(&ctx, &s, &src), SS_ERR_INPUT);
  /* the expected interval comes from the stored endpoints: compare the stable prefix exactly */
  char prefix[2048];
  snprintf(prefix, sizeof(prefix),
           "%s: /acquisition/ElectricalSeries/timestamps: irregular sampling at index 5: "
           "interval %.9g s, expected ",
           path, (t5 + 0.5 / RATE) - (2.5 + 4.0 / RATE));
  assert_true(strncmp(ss_error_message(&ctx), prefix, strlen(prefix)) == 0);
  assert_non_null(strstr(ss_error_message(&ctx), "Hz from the first and last timestamps, tolerance 1%)"));

  ss_test_path(path, sizeof(path), "good.nwb");
  write_nwb(path, 0);
  ss_source_spec named = {.path = path, .series = "LFP"};
  snprintf(want, sizeof(want), "%s: /acquisition/LFP: no such ElectricalSeries (available: ElectricalSeries)", path);
  expect_error(&named, want);
  /* channel count against a probe */
  ss_ctx ctx2;
  ss_test_ctx(&ctx2);
  ss_probe probe;
  ok(&ctx2, ss_probe_from_positions(&ctx2, C - 2, xs, ys, 40.0, &probe));
  ss_source_spec withprobe = {.path = path, .probe = &probe};
  snprintf(want, sizeof(want), "probe %s: has %d channels, the recording %d", probe.name, C - 2, C);
  expect_error(&withprobe, want);
  ss_probe_free(&probe);
}

static void bad_kwik(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "norate.raw.kwd");
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(dataset(f, "/recordings/0/data", H5T_STD_I16LE, H5T_NATIVE_INT16, rec, 2, 100, C, 0, 0, 0));
  H5Fclose(f);
  ss_source_spec s = {.path = path};
  snprintf(want, sizeof(want),
           "%s: /recordings/0: attribute sample_rate: expected a number > 0, got none (give --rate HZ)", path);
  expect_error(&s, want);
  s.rate_hz = RATE; /* the fallback */
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src;
  ok(&ctx, ss_source_open(&ctx, &s, &src));
  assert_int_equal(ss_source_get_info(src)->n_samples, 100);
  ss_source_close(src);
  s.series = "3";
  snprintf(want, sizeof(want), "%s: /recordings/3: no such recording (available: 0)", path);
  expect_error(&s, want);
}

/* ---------------------------------------------------------------- metadata out of range */

/* Replace (or create) a float64 attribute of the object at `obj_path`. */
static void set_attr(const char *path, const char *obj_path, const char *name, hid_t type, const void *v) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), o = H5Oopen(f, obj_path, H5P_DEFAULT);
  assert_true(o >= 0);
  if (H5Aexists(o, name) > 0) H5Adelete(o, name);
  hid_t s = H5Screate(H5S_SCALAR), a = H5Acreate2(o, name, type, s, H5P_DEFAULT, H5P_DEFAULT);
  assert_true(H5Awrite(a, type, v) >= 0);
  H5Aclose(a), H5Sclose(s), H5Oclose(o), H5Fclose(f);
}

/* Replace (or create) the 1-D dataset `name` with n values of v (memory type mtype). */
static void set_vector(const char *path, const char *name, hid_t ftype, hid_t mtype, const void *v, hsize_t n) {
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (H5Lexists(f, name, H5P_DEFAULT) > 0) H5Ldelete(f, name, H5P_DEFAULT);
  H5Dclose(dataset(f, name, ftype, mtype, v, 1, n, 1, 0, 0, 0));
  H5Fclose(f);
}

static void bad_rate_and_channels(void **state) {
  (void)state;
  char path[512], want[1024];
  const char *st_path = "/acquisition/ElectricalSeries/starting_time";
  ss_test_path(path, sizeof(path), "rate.nwb");
  write_nwb(path, 0);
  ss_source_spec s = {.path = path};
  double v = 1e300;
  set_attr(path, st_path, "rate", H5T_NATIVE_DOUBLE, &v);
  snprintf(want, sizeof(want), "%s: %s: attribute rate: expected a sampling rate in [1, 1e+06] Hz, got 1e+300", path,
           st_path);
  expect_error(&s, want);
  v = NAN;
  set_attr(path, st_path, "rate", H5T_NATIVE_DOUBLE, &v);
  snprintf(want, sizeof(want), "%s: %s: attribute rate: expected a sampling rate in [1, 1e+06] Hz, got nan", path,
           st_path);
  expect_error(&s, want);
  long double huge = 1e400L; /* beyond double: read back as infinite */
  set_attr(path, st_path, "rate", H5T_NATIVE_LDOUBLE, &huge);
  snprintf(want, sizeof(want), "%s: %s: attribute rate: expected a sampling rate in [1, 1e+06] Hz, got ", path,
           st_path);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source *src = NULL;
  assert_int_equal(ss_source_open(&ctx, &s, &src), SS_ERR_INPUT);
  assert_true(strncmp(ss_error_message(&ctx), want, strlen(want)) == 0);

  ss_test_path(path, sizeof(path), "rate.raw.kwd");
  write_kwik(path);
  v = 0.5;
  set_attr(path, "/recordings/0", "sample_rate", H5T_NATIVE_DOUBLE, &v);
  ss_source_spec k = {.path = path};
  snprintf(want, sizeof(want),
           "%s: /recordings/0: attribute sample_rate: expected a sampling rate in [1, 1e+06] Hz, "
           "got 0.5",
           path);
  expect_error(&k, want);

  /* 2^31 channels, declared only (chunked, nothing written) */
  ss_test_path(path, sizeof(path), "wide.h5");
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(dataset(f, "/wide", H5T_STD_I16LE, H5T_NATIVE_INT16, NULL, 2, 2, (hsize_t)1 << 31, 1, 1024, 0));
  H5Fclose(f);
  ss_source_spec w = {.path = path, .dataset = "/wide", .rate_hz = RATE};
  snprintf(want, sizeof(want),
           "%s: dataset /wide: expected 1 to 4096 channels, got 2147483648 (shape 2 x 2147483648, "
           "time x channels)",
           path);
  expect_error(&w, want);
  w.rate_hz = 2e6;
  ss_test_path(path, sizeof(path), "rate.dat");
  write_binary(path);
  ss_source_spec b = {.path = path, .n_channels = C, .rate_hz = 2e6};
  snprintf(want, sizeof(want), "%s: --rate: expected a sampling rate in [1, 1e+06] Hz, got 2000000", path);
  expect_error(&b, want);
  b.rate_hz = RATE;
  b.n_channels = 5000;
  snprintf(want, sizeof(want), "%s: --channels: expected 1 to 4096 channels, got 5000", path);
  expect_error(&b, want);
}

static void bad_scales_and_electrodes(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "scale.nwb");
  write_nwb(path, 0);
  ss_source_spec s = {.path = path};
  double cc[C] = {1, 1, 1, NAN, 1, 1, 1};
  const char *cc_path = "/acquisition/ElectricalSeries/channel_conversion";
  set_vector(path, cc_path, H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE, cc, C);
  snprintf(want, sizeof(want), "%s: %s: channel 3: expected a finite non-zero scale, got nan", path, cc_path);
  expect_error(&s, want);
  cc[3] = 1, cc[5] = 0;
  set_vector(path, cc_path, H5T_IEEE_F32LE, H5T_NATIVE_DOUBLE, cc, C);
  snprintf(want, sizeof(want), "%s: %s: channel 5: expected a finite non-zero scale, got 0", path, cc_path);
  expect_error(&s, want);

  /* the electrodes table: a region row outside it, then a column of the wrong length */
  ss_test_path(path, sizeof(path), "electrodes.nwb");
  write_nwb(path, 0);
  int64_t rows[C] = {0, 1, 2, 3, 4, 99, 6};
  set_vector(path, "/acquisition/ElectricalSeries/electrodes", H5T_STD_I64LE, H5T_NATIVE_INT64, rows, C);
  snprintf(want, sizeof(want),
           "%s: /acquisition/ElectricalSeries/electrodes: channel 5: row 99 is outside the "
           "electrodes table (7 rows)",
           path);
  expect_error(&s, want);
  write_nwb(path, 0);
  set_vector(path, "/general/extracellular_ephys/electrodes/rel_x", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, xs, C - 2);
  snprintf(want, sizeof(want),
           "%s: general/extracellular_ephys/electrodes/rel_x: 5 values, expected 7 like "
           "general/extracellular_ephys/electrodes/rel_y",
           path);
  expect_error(&s, want);

  ss_test_path(path, sizeof(path), "scale.raw.kwd");
  write_kwik(path);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT),
        g = H5Gcreate2(f, "/recordings/0/application_data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  double bv[C] = {0.195, 0, 0.195, 0.195, 0.195, 0.195, 0.195};
  hsize_t n = C;
  hid_t sp = H5Screate_simple(1, &n, NULL),
        a = H5Acreate2(g, "channel_bit_volts", H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_DOUBLE, bv);
  H5Aclose(a), H5Sclose(sp), H5Gclose(g), H5Fclose(f);
  ss_source_spec k = {.path = path};
  snprintf(want, sizeof(want),
           "%s: /recordings/0/application_data: attribute channel_bit_volts: channel 1: expected a "
           "finite non-zero scale, got 0",
           path);
  expect_error(&k, want);
}

/* Declared sizes the file cannot back: refused at open, not read as zeros for minutes. */
static void storage_smaller_than_declared(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "hollow.h5");
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Dclose(dataset(f, "/contig", H5T_STD_I16LE, H5T_NATIVE_INT16, NULL, 2, (hsize_t)1 << 40, 4, 0, 0, 0));
  H5Dclose(dataset(f, "/chunked", H5T_STD_I16LE, H5T_NATIVE_INT16, NULL, 2, (hsize_t)1 << 40, 4, 65536, 4, 0));
  H5Fclose(f);
  ss_source_spec s = {.path = path, .dataset = "/contig", .rate_hz = RATE};
  snprintf(want, sizeof(want),
           "%s: dataset /contig: declares 1099511627776 x 4 int16 samples (8796093022208 bytes), "
           "the file stores 0 bytes of them (contiguous)",
           path);
  expect_error(&s, want);
  s.dataset = "/chunked";
  snprintf(want, sizeof(want),
           "%s: dataset /chunked: declares 1099511627776 x 4 int16 samples (8796093022208 bytes), "
           "the file stores no chunk of them (chunked)",
           path);
  expect_error(&s, want);
}

/* A flat binary cut short after it was opened: the read that finds the end says where. */
static void binary_truncated_while_read(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "shrinks.dat");
  write_binary(path);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source_spec s = {.path = path, .n_channels = C, .rate_hz = RATE, .byte_offset = BIN_HEADER};
  ss_source *src = NULL;
  ok(&ctx, ss_source_open(&ctx, &s, &src));
  ok(&ctx, ss_source_configure(&ctx, src, 10000, 16, 16));
  ss_chunk ch;
  ok(&ctx, ss_source_chunk(&ctx, src, 0, &ch));
  assert_int_equal(truncate(path, BIN_HEADER + (off_t)35000 * C * 2), 0);
  ss_status st = SS_OK;
  for (int64_t i = 1; i < ss_source_n_chunks(src) && st == SS_OK; i++) st = ss_source_chunk(&ctx, src, i, &ch);
  assert_int_equal(st, SS_ERR_INPUT);
  snprintf(want, sizeof(want),
           "%s: truncated while being read: the data end at sample 35000 of %d (file size %d "
           "bytes, %d when opened)",
           path, N, BIN_HEADER + 35000 * C * 2, BIN_HEADER + N * C * 2);
  assert_string_equal(ss_error_message(&ctx), want);
  ss_source_close(src);
}

/* ---------------------------------------------------------------- CLI */

static void cli_inspect(void **state) {
  (void)state;
  char path[512], args[1024];
  char *out, *err;
  ss_test_path(path, sizeof(path), "cli.nwb");
  write_nwb(path, 0);
  snprintf(args, sizeof(args), "inspect '%s'", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "format:       nwb\n"));
  assert_non_null(strstr(out, "rate:         30000 Hz\n"));
  assert_non_null(strstr(out, "channels:     7\n"));
  assert_non_null(strstr(out, "samples:      61234\n"));
  assert_non_null(strstr(out, "duration:     2.041 s (starting at 2.5 s)\n"));
  assert_non_null(strstr(out, "scale:        0.195 uV per step, offset 0 uV\n"));
  assert_non_null(strstr(out, "positions:    yes"));
  free(out), free(err);
  snprintf(args, sizeof(args), "inspect '%s' --channels 7", path); /* the file gives the channels */
  assert_int_equal(ss_test_run_cli(args, &out, &err), 2);
  assert_non_null(strstr(err, "--channels does not apply to nwb input"));
  free(out), free(err);
  ss_test_path(path, sizeof(path), "cli.bin");
  write_binary(path);
  snprintf(args, sizeof(args), "inspect '%s' --channels 7 --rate 30000 --offset 100", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "format:       binary\n"));
  assert_non_null(strstr(out, "scale:        unknown"));
  assert_non_null(strstr(out, "positions:    no"));
  free(out), free(err);
  snprintf(args, sizeof(args), "inspect '%s' --channels 7 --rate 30000 --offset 101", path);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  assert_non_null(strstr(err, "spikestream inspect: "));
  assert_non_null(strstr(err, ": truncated: "));
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("inspect --help", &out, &err), 0);
  assert_non_null(strstr(out, "usage: spikestream inspect"));
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("inspect x --layout sideways", &out, &err), 2);
  assert_non_null(strstr(err, "--layout: expected time-major or channel-major, got \"sideways\""));
  free(out), free(err);
}

/* ---------------------------------------------------------------- bounded memory */

static long vm_hwm_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "VmHWM: %ld kB", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

#define BIG_C 32
#define BIG_RATE 30000
#define BIG_SECONDS 600
#define RSS_GROWTH_LIMIT_KIB (64 * 1024)

/* 10 minutes × 32 channels × 30 kHz = 1.15 GB, created sparse (holes read as zeros), with a marker
 * written into each second so that the stream is also checked for the right content. */
static void constant_memory(void **state) {
  (void)state;
  char path[512];
  ss_test_path(path, sizeof(path), "big.bin");
  int64_t n = (int64_t)BIG_RATE * BIG_SECONDS, bytes = n * BIG_C * 2;
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  assert_true(fd >= 0 && ftruncate(fd, bytes) == 0);
  for (int64_t s = 0; s < BIG_SECONDS; s++) {
    int16_t v = (int16_t)(s + 1);
    assert_int_equal(pwrite(fd, &v, 2, (s * BIG_RATE + 17) * BIG_C * 2 + 2 * (s % BIG_C)), 2);
  }
  close(fd);
  long before = vm_hwm_kib();
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_source_spec spec = {.path = path, .n_channels = BIG_C, .rate_hz = BIG_RATE};
  ss_source *src;
  ok(&ctx, ss_source_open(&ctx, &spec, &src));
  ok(&ctx, ss_source_configure(&ctx, src, BIG_RATE, 1000, 1000));
  double t0 = ss_now();
  int64_t markers = 0;
  for (int64_t i = 0; i < ss_source_n_chunks(src); i++) {
    ss_chunk ch;
    ok(&ctx, ss_source_chunk(&ctx, src, i, &ch));
    const int16_t *core = ch.data + (int64_t)ch.left * BIG_C;
    markers += core[17 * BIG_C + i % BIG_C] == (int16_t)(i + 1);
  }
  double dt = ss_now() - t0;
  ss_source_close(src);
  long growth = vm_hwm_kib() - before;
  printf("streamed %.2f GB in %.2f s (%.0fx real time), peak RSS growth %ld KiB\n", (double)bytes / 1e9, dt,
         BIG_SECONDS / dt, growth);
  assert_int_equal(markers, BIG_SECONDS);
  assert_true(growth < RSS_GROWTH_LIMIT_KIB);
  remove(path);
}

int main(void) {
  make_recording();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(nwb_rate_and_timestamps),
      cmocka_unit_test(kwik_plain_binary),
      cmocka_unit_test(float_data),
      cmocka_unit_test(limited_view),
      cmocka_unit_test(bad_hdf5),
      cmocka_unit_test(bad_binary),
      cmocka_unit_test(bad_nwb),
      cmocka_unit_test(hdf5_read_limit),
      cmocka_unit_test(bad_kwik),
      cmocka_unit_test(bad_rate_and_channels),
      cmocka_unit_test(bad_scales_and_electrodes),
      cmocka_unit_test(storage_smaller_than_declared),
      cmocka_unit_test(binary_truncated_while_read),
      cmocka_unit_test(cli_inspect),
      cmocka_unit_test(several_series),
      cmocka_unit_test(constant_memory),
  };
  int r = cmocka_run_group_tests(tests, NULL, NULL);
  free(rec);
  return r;
}
