/* test_nwb_write.c — the NWB writer: the structure it writes (checked by ss_nwb_check and read back
 * attribute by attribute), the cached schema, the units table (ground truth; a sort's with
 * electrodes, waveforms and further columns, without or with a linked acquisition), atomic output,
 * determinism, bad arguments, and the checker's own messages on broken files. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/h5_util.h"
#include "io/nwb_check.h"
#include "io/nwb_write.h"
#include "ss_test.h"

#define C 4
#define N 70001 /* more than two writer chunks */

static void ok(ss_ctx *ctx, ss_status st) {
  if (st != SS_OK) fail_msg("%s", ss_error_message(ctx));
}

static const double t0[] = {0.1, 0.5, 0.9}, t1[] = {0.2}, t2[1] = {0};
static const double *const times[] = {t0, t1, t2};
static const int64_t counts[] = {3, 1, 0};
static const int32_t peaks[] = {2, 0, 3};
static const double snrs[] = {9.5, 4.25, 12.0};

static void write_file(const char *path, int timestamps, int with_units) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double x[C] = {0, 20, 0, 20}, y[C] = {0, 10, 20, 30};
  ss_nwb_meta m = {0};
  m.rate_hz = 30000.0;
  m.n_channels = C;
  m.conversion = 1.95e-7;
  m.channel_x = x;
  m.channel_y = y;
  m.write_timestamps = timestamps;
  m.series_name = "raw";
  ss_nwb_writer *w;
  ok(&ctx, ss_nwb_writer_open(&ctx, path, &m, &w));
  int16_t *buf = malloc(sizeof(int16_t) * N * C);
  for (int64_t i = 0; i < (int64_t)N * C; i++) buf[i] = (int16_t)(i % 1000 - 500);
  ok(&ctx, ss_nwb_writer_append(&ctx, w, buf, 12345));
  ok(&ctx, ss_nwb_writer_append(&ctx, w, buf + 12345 * C, N - 12345));
  free(buf);
  if (with_units) {
    ss_nwb_units u = {.n_units = 3, .n_spikes = counts, .spike_times = times, .peak_channel = peaks, .snr = snrs};
    ok(&ctx, ss_nwb_writer_set_units(&ctx, w, &u));
  }
  ok(&ctx, ss_nwb_writer_close(&ctx, w));
}

static void attr_is(hid_t f, const char *obj, const char *name, const char *want) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  assert_true(o >= 0);
  char v[256];
  assert_true(ss_h5_read_attr_str(o, name, v, sizeof(v)));
  if (strcmp(v, want) != 0) fail_msg("%s@%s: got \"%s\", want \"%s\"", obj, name, v, want);
  H5Oclose(o);
}

static int is_unsigned(hid_t f, const char *path) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT), t = H5Dget_type(d);
  int yes = H5Tget_class(t) == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
  H5Tclose(t);
  H5Dclose(d);
  return yes;
}

static double attr_num(hid_t f, const char *obj, const char *name) {
  hid_t o = H5Oopen(f, obj, H5P_DEFAULT);
  double v = 0;
  assert_true(ss_h5_read_attr_f64(o, name, &v));
  H5Oclose(o);
  return v;
}

static void structure(void **state) {
  (void)state;
  char path[512];
  ss_test_path(path, sizeof(path), "a.nwb");
  write_file(path, 0, 1);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ok(&ctx, ss_nwb_check(&ctx, path));
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  attr_is(f, "/", "neurodata_type", "NWBFile");
  attr_is(f, "/", "namespace", "core");
  attr_is(f, "/", "nwb_version", "2.6.0");
  attr_is(f, "/acquisition/raw", "neurodata_type", "ElectricalSeries");
  attr_is(f, "/acquisition/raw/data", "unit", "volts");
  assert_true(attr_num(f, "/acquisition/raw/data", "conversion") == 1.95e-7);
  assert_true(attr_num(f, "/acquisition/raw/data", "resolution") == -1.0);
  assert_true(attr_num(f, "/acquisition/raw/starting_time", "rate") == 30000.0);
  attr_is(f, "/acquisition/raw/starting_time", "unit", "seconds");
  attr_is(f, "/acquisition/raw/electrodes", "neurodata_type", "DynamicTableRegion");
  attr_is(f, "/acquisition/raw/electrodes", "namespace", "hdmf-common");
  attr_is(f, "/general/extracellular_ephys/electrodes", "neurodata_type", "DynamicTable");
  attr_is(f, "/general/extracellular_ephys/electrodes/id", "neurodata_type", "ElementIdentifiers");
  attr_is(f, "/general/extracellular_ephys/electrodes/x", "neurodata_type", "VectorData");
  attr_is(f, "/general/extracellular_ephys/shank0", "neurodata_type", "ElectrodeGroup");
  attr_is(f, "/general/devices/probe", "neurodata_type", "Device");
  attr_is(f, "/units", "neurodata_type", "Units");
  attr_is(f, "/units/spike_times_index", "neurodata_type", "VectorIndex");
  /* the region's table reference leads to the electrodes table */
  hid_t d = H5Dopen2(f, "/acquisition/raw/electrodes", H5P_DEFAULT), a = H5Aopen(d, "table", H5P_DEFAULT);
  hobj_ref_t ref;
  assert_true(H5Aread(a, H5T_STD_REF_OBJ, &ref) >= 0);
  hid_t t = H5Rdereference2(d, H5P_DEFAULT, H5R_OBJECT, &ref);
  char name[256];
  H5Iget_name(t, name, sizeof(name));
  assert_string_equal(name, "/general/extracellular_ephys/electrodes");
  H5Oclose(t);
  H5Aclose(a);
  H5Dclose(d);
  /* data shape, chunking and contents */
  d = H5Dopen2(f, "/acquisition/raw/data", H5P_DEFAULT);
  int64_t dims[8];
  assert_int_equal(ss_h5_shape(d, dims), 2);
  assert_int_equal(dims[0], N);
  assert_int_equal(dims[1], C);
  hid_t dcpl = H5Dget_create_plist(d);
  hsize_t chunk[2];
  assert_int_equal(H5Pget_layout(dcpl), H5D_CHUNKED);
  H5Pget_chunk(dcpl, 2, chunk);
  assert_int_equal(chunk[0], 30000);
  H5Pclose(dcpl);
  int16_t *back = malloc(sizeof(int16_t) * N * C);
  assert_true(H5Dread(d, H5T_NATIVE_INT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0);
  for (int64_t i = 0; i < (int64_t)N * C; i++) assert_int_equal(back[i], (int16_t)(i % 1000 - 500));
  free(back);
  H5Dclose(d);
  /* units: ragged spike times */
  double *st = NULL, *idx = NULL, *pc = NULL, *snr = NULL;
  int64_t n_st, n_idx, n_pc, n_snr;
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/spike_times", path, &st, &n_st));
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/spike_times_index", path, &idx, &n_idx));
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/peak_channel", path, &pc, &n_pc));
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/snr", path, &snr, &n_snr));
  assert_int_equal(n_st, 4);
  assert_int_equal(n_idx, 3);
  assert_true(idx[0] == 3 && idx[1] == 4 && idx[2] == 4);
  assert_true(st[0] == 0.1 && st[2] == 0.9 && st[3] == 0.2);
  assert_true(pc[0] == 2 && pc[2] == 3 && snr[1] == 4.25);
  free(st), free(idx), free(pc), free(snr);
  assert_true(is_unsigned(f, "/units/spike_times_index"));
  /* the cached schema, found through .specloc */
  assert_true(ss_h5_is_dataset(f, "/specifications/core/2.6.0-alpha/namespace"));
  assert_true(ss_h5_is_dataset(f, "/specifications/core/2.6.0-alpha/nwb.misc"));
  assert_true(ss_h5_is_dataset(f, "/specifications/hdmf-common/1.5.1/table"));
  hid_t root = H5Oopen(f, "/", H5P_DEFAULT);
  a = H5Aopen(root, ".specloc", H5P_DEFAULT);
  assert_true(H5Aread(a, H5T_STD_REF_OBJ, &ref) >= 0);
  t = H5Rdereference2(root, H5P_DEFAULT, H5R_OBJECT, &ref);
  H5Iget_name(t, name, sizeof(name));
  assert_string_equal(name, "/specifications");
  H5Oclose(t), H5Aclose(a), H5Oclose(root);
  d = H5Dopen2(f, "/specifications/core/2.6.0-alpha/namespace", H5P_DEFAULT);
  hid_t vt = H5Tcopy(H5T_C_S1);
  H5Tset_size(vt, H5T_VARIABLE);
  char *doc = NULL;
  assert_true(H5Dread(d, vt, H5S_ALL, H5S_ALL, H5P_DEFAULT, &doc) >= 0);
  assert_non_null(strstr(doc, "\"name\":\"core\""));
  H5free_memory(doc), H5Tclose(vt), H5Dclose(d);
  H5Fclose(f);
}

/* ---- a sort's units table: no acquisition or a linked one, electrodes, waveforms, columns ---- */

#define K 3 /* units */
#define E 2 /* electrodes per unit */
#define W 5 /* waveform samples */

static void write_units_file(const char *path, ss_nwb_acquisition acq, const char *link_file) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double x[C] = {0, 20, 0, 20}, y[C] = {0, 10, 20, 30};
  ss_nwb_meta m = {.rate_hz = 30000, .n_channels = C, .channel_x = x, .channel_y = y, .acquisition = acq};
  m.link_file = link_file;
  m.link_path = "/acquisition/raw";
  m.series_name = "raw";
  static const int32_t chans[K * E] = {1, 0, 3, 2, 2, 1};
  float wave[K * W * E];
  for (int i = 0; i < K * W * E; i++) wave[i] = (float)(i - 10);
  static const double rate[K] = {1.5, 2.5, 0};
  static const int64_t viol[K] = {0, 7, 1};
  static const char *const labels[K] = {"noise", "good", "mua"};
  const ss_nwb_column cols[] = {{"firing_rate_hz", "rate", SS_NWB_COL_F64, rate},
                                {"isi_violations", "count", SS_NWB_COL_I64, viol},
                                {"label", "label", SS_NWB_COL_STR, labels}};
  ss_nwb_units u = {.n_units = K,
                    .n_spikes = counts,
                    .spike_times = times,
                    .peak_channel = peaks,
                    .description = "sorted units",
                    .n_unit_channels = E,
                    .unit_channels = chans,
                    .n_wave = W,
                    .waveform_mean_uv = wave,
                    .waveform_rate_hz = 30000,
                    .n_columns = 3,
                    .columns = cols};
  ss_nwb_writer *w;
  ok(&ctx, ss_nwb_writer_open(&ctx, path, &m, &w));
  ok(&ctx, ss_nwb_writer_set_units(&ctx, w, &u));
  ok(&ctx, ss_nwb_writer_close(&ctx, w));
}

static void units_table(void **state) {
  (void)state;
  char path[512], raw[512];
  ss_test_path(path, sizeof(path), "units.nwb");
  write_units_file(path, SS_NWB_ACQ_NONE, NULL);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ok(&ctx, ss_nwb_check(&ctx, path));
  assert_true(ss_nwb_units_only(path));
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  attr_is(f, "/units", "description", "sorted units");
  attr_is(f, "/units/electrodes", "neurodata_type", "DynamicTableRegion");
  attr_is(f, "/units/electrodes_index", "neurodata_type", "VectorIndex");
  attr_is(f, "/units/waveform_mean", "unit", "volts");
  assert_true(attr_num(f, "/units/waveform_mean", "sampling_rate") == 30000);
  assert_true(is_unsigned(f, "/units/electrodes_index"));
  double *v = NULL;
  int64_t n;
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/electrodes_index", path, &v, &n));
  assert_true(n == K && v[0] == 2 && v[1] == 4 && v[2] == 6);
  free(v);
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/electrodes", path, &v, &n));
  assert_true(n == K * E && v[0] == 1 && v[2] == 3 && v[5] == 1);
  free(v);
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/units/isi_violations", path, &v, &n));
  assert_true(n == K && v[1] == 7);
  free(v);
  hid_t d = H5Dopen2(f, "/units/waveform_mean", H5P_DEFAULT);
  int64_t dims[8];
  assert_int_equal(ss_h5_shape(d, dims), 3);
  assert_true(dims[0] == K && dims[1] == W && dims[2] == E);
  float back[K * W * E];
  assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, back) >= 0);
  assert_float_equal(back[13], 3e-6f, 1e-12); /* µV in, volts out */
  H5Dclose(d);
  d = H5Dopen2(f, "/units/label", H5P_DEFAULT);
  hid_t vt = H5Tcopy(H5T_C_S1);
  H5Tset_size(vt, H5T_VARIABLE);
  char *lab[K];
  assert_true(H5Dread(d, vt, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab) >= 0);
  assert_string_equal(lab[1], "good");
  for (int k = 0; k < K; k++) H5free_memory(lab[k]);
  H5Tclose(vt), H5Dclose(d);
  hid_t g = H5Oopen(f, "/units", H5P_DEFAULT);
  assert_int_equal(ss_h5_attr_len(g, "colnames"), 7);
  H5Oclose(g), H5Fclose(f);
  /* a linked acquisition: checked through the link; a dangling link is reported */
  ss_test_path(raw, sizeof(raw), "linked_raw.nwb");
  write_file(raw, 0, 0);
  ss_test_path(path, sizeof(path), "units_linked.nwb");
  write_units_file(path, SS_NWB_ACQ_LINK, raw);
  ok(&ctx, ss_nwb_check(&ctx, path));
  assert_false(ss_nwb_units_only(path));
  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  attr_is(f, "/acquisition/raw", "neurodata_type", "ElectricalSeries");
  H5Fclose(f);
  unlink(raw);
  assert_int_equal(ss_nwb_check(&ctx, path), SS_ERR_INPUT);
  char want[1024];
  snprintf(want, sizeof(want),
           "%s: /acquisition/raw: external link does not resolve (the linked file or object is missing)", path);
  assert_string_equal(ss_error_message(&ctx), want);
}

static void units_bad_arguments(void **state) {
  (void)state;
  char path[512], want[1024];
  ss_test_path(path, sizeof(path), "units_bad.nwb");
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_nwb_meta m = {.rate_hz = 1000, .n_channels = 2, .acquisition = SS_NWB_ACQ_NONE};
  ss_nwb_writer *w;
  ok(&ctx, ss_nwb_writer_open(&ctx, path, &m, &w));
  int16_t x[2] = {1, 2};
  assert_int_equal(ss_nwb_writer_append(&ctx, w, x, 1), SS_ERR_INTERNAL);
  static const int32_t chans[] = {0, 2};
  ss_nwb_units u = {.n_units = 1,
                    .n_spikes = counts,
                    .spike_times = times,
                    .n_unit_channels = 2,
                    .unit_channels = chans};
  assert_int_equal(ss_nwb_writer_set_units(&ctx, w, &u), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: unit 0: electrode 2: expected a channel in [0, 2)", path);
  assert_string_equal(ss_error_message(&ctx), want);
  ss_nwb_writer_abort(w);
  m.acquisition = SS_NWB_ACQ_LINK;
  assert_int_equal(ss_nwb_writer_open(&ctx, path, &m, &w), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: acquisition link: expected a file and a path", path);
  assert_string_equal(ss_error_message(&ctx), want);
}

static void timestamps_and_determinism(void **state) {
  (void)state;
  char a[512], b[512];
  ss_test_path(a, sizeof(a), "ts1.nwb");
  ss_test_path(b, sizeof(b), "ts2.nwb");
  write_file(a, 1, 0);
  write_file(b, 1, 0);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ok(&ctx, ss_nwb_check(&ctx, a));
  hid_t f = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT);
  double *ts;
  int64_t n;
  ok(&ctx, ss_h5_read_f64_vector(&ctx, f, "/acquisition/raw/timestamps", a, &ts, &n));
  assert_int_equal(n, N);
  assert_true(ts[30000] == 1.0 && ts[N - 1] == (double)(N - 1) / 30000.0);
  free(ts);
  assert_false(ss_h5_exists(f, "/acquisition/raw/starting_time"));
  assert_false(ss_h5_exists(f, "/units"));
  H5Fclose(f);
  /* same content, same identifier and object ids */
  char ida[64], idb[64];
  hid_t fa = H5Fopen(a, H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(b, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t ra = H5Oopen(fa, "/acquisition/raw", H5P_DEFAULT), rb = H5Oopen(fb, "/acquisition/raw", H5P_DEFAULT);
  assert_true(ss_h5_read_attr_str(ra, "object_id", ida, sizeof(ida)));
  assert_true(ss_h5_read_attr_str(rb, "object_id", idb, sizeof(idb)));
  assert_string_equal(ida, idb);
  H5Oclose(ra), H5Oclose(rb), H5Fclose(fa), H5Fclose(fb);
}

static void atomic_and_bad_arguments(void **state) {
  (void)state;
  char path[512];
  ss_test_path(path, sizeof(path), "never.nwb");
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_nwb_meta m = {0};
  m.rate_hz = 1000;
  m.n_channels = 2;
  m.conversion = 1e-6;
  ss_nwb_writer *w;
  ok(&ctx, ss_nwb_writer_open(&ctx, path, &m, &w));
  int16_t x[4] = {1, 2, 3, 4};
  ok(&ctx, ss_nwb_writer_append(&ctx, w, x, 2));
  assert_int_not_equal(access(path, F_OK), 0); /* nothing under the final name until close */
  ss_nwb_writer_abort(w);
  assert_int_not_equal(access(path, F_OK), 0);
  char want[1024];
  m.n_channels = 0;
  assert_int_equal(ss_nwb_writer_open(&ctx, path, &m, &w), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: n_channels: expected > 0, got 0", path);
  assert_string_equal(ss_error_message(&ctx), want);
  m.n_channels = 2;
  m.rate_hz = -1;
  assert_int_equal(ss_nwb_writer_open(&ctx, path, &m, &w), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: rate_hz: expected > 0, got -1", path);
  assert_string_equal(ss_error_message(&ctx), want);
  m.rate_hz = 1000;
  ok(&ctx, ss_nwb_writer_open(&ctx, path, &m, &w));
  static const double bad[] = {0.5, 0.4};
  static const double *const bt[] = {bad};
  static const int64_t bn[] = {2};
  static const int32_t bp[] = {0};
  static const double bs[] = {1};
  ss_nwb_units u = {.n_units = 1, .n_spikes = bn, .spike_times = bt, .peak_channel = bp, .snr = bs};
  assert_int_equal(ss_nwb_writer_set_units(&ctx, w, &u), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: unit 0: spike_times[1] = 0.4 is before the previous one (0.5)", path);
  assert_string_equal(ss_error_message(&ctx), want);
  ok(&ctx, ss_nwb_writer_close(&ctx, w));
  assert_int_equal(access(path, F_OK), 0);
}

static void checker_finds_problems(void **state) {
  (void)state;
  char path[512], want[4096];
  ss_test_path(path, sizeof(path), "broken.nwb");
  write_file(path, 0, 1);
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t o = H5Oopen(f, "/units/snr", H5P_DEFAULT);
  H5Adelete(o, "object_id");
  H5Oclose(o);
  o = H5Oopen(f, "/acquisition/raw/starting_time", H5P_DEFAULT);
  H5Adelete(o, "rate");
  H5Oclose(o);
  H5Ldelete(f, "/units/peak_channel", H5P_DEFAULT);
  H5Ldelete(f, "/session_start_time", H5P_DEFAULT);
  H5Fclose(f);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_nwb_check(&ctx, path), SS_ERR_INPUT);
  snprintf(want, sizeof(want),
           "%s: session_start_time: required dataset is missing\n"
           "%s: /acquisition/raw/starting_time: missing numeric attribute rate\n"
           "%s: /units/peak_channel: column named in colnames is missing\n"
           "%s: /units/snr: object_id: missing or not a UUID",
           path, path, path, path);
  assert_string_equal(ss_error_message(&ctx), want);
  /* what pynwb's validator refuses: a signed index, no cached schema */
  f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  H5Ldelete(f, "/specifications", H5P_DEFAULT);
  static const int64_t ends[3] = {3, 4, 4};
  hsize_t three = 3;
  hid_t sp = H5Screate_simple(1, &three, NULL);
  H5Ldelete(f, "/units/spike_times_index", H5P_DEFAULT);
  hid_t d = H5Dcreate2(f, "/units/spike_times_index", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, ends);
  ss_ctx wctx;
  ss_test_ctx(&wctx);
  ok(&wctx, ss_h5_attr_str(&wctx, d, "neurodata_type", "VectorIndex", "index"));
  ok(&wctx, ss_h5_attr_str(&wctx, d, "namespace", "hdmf-common", "index"));
  ok(&wctx, ss_h5_attr_str(&wctx, d, "description", "index", "index"));
  ok(&wctx, ss_h5_attr_str(&wctx, d, "object_id", "01234567-89ab-4cde-8f01-23456789abcd", "index"));
  ok(&wctx, ss_h5_attr_ref(&wctx, d, "target", f, "/units/spike_times", "index"));
  H5Dclose(d), H5Sclose(sp), H5Fclose(f);
  assert_int_equal(ss_nwb_check(&ctx, path), SS_ERR_INPUT);
  snprintf(want, sizeof(want),
           "%s: /specifications: missing: no cached namespace (the schema the file was written with)\n"
           "%s: session_start_time: required dataset is missing\n"
           "%s: /acquisition/raw/starting_time: missing numeric attribute rate\n"
           "%s: /units/peak_channel: column named in colnames is missing\n"
           "%s: /units/snr: object_id: missing or not a UUID\n"
           "%s: /units/spike_times_index: VectorIndex: expected an unsigned integer type, got int64",
           path, path, path, path, path, path);
  assert_string_equal(ss_error_message(&ctx), want);
  snprintf(want, sizeof(want), "%s: not an HDF5 file", ss_test_write_file("plain.txt", "hello"));
  assert_int_equal(ss_nwb_check(&ctx, ss_test_write_file("plain.txt", "hello")), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), want);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(structure),
      cmocka_unit_test(timestamps_and_determinism),
      cmocka_unit_test(atomic_and_bad_arguments),
      cmocka_unit_test(checker_finds_problems),
      cmocka_unit_test(units_table),
      cmocka_unit_test(units_bad_arguments),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
