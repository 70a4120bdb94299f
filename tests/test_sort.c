/* test_sort.c — `spikestream sort` end to end on a short simulation: every output exists and the phy
 * check passes; compare finds the units; `cluster` on the sort's own .fet/.fmask reproduces its raw
 * labels exactly; 1 and 2 threads give bit-identical outputs; units.nwb holds results.h5's spike times;
 * the phy checker names broken files; bad inputs fail with clear messages. */
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "build_config.h"
#include "drivers/sort_internal.h"
#include "tools/simulate.h"
#include "io/h5_util.h"
#include "io/npy.h"
#include "io/nwb_check.h"
#include "io/phy.h"
#include "params/params.h"
#include "params/probe.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define DURATION 20.0
#define UNITS 5
#define PATH_LEN 4096
#define ARGS_LEN (8 * PATH_LEN)

static char sim_path[PATH_LEN];

static int group_setup(void **state) {
  (void)state;
  const ss_sim_config c = ss_test_sim_units(DURATION, UNITS, 20, 3);
  return ss_test_simulate(PROBE, 40.0, &c, SS_SIM_FORMAT_NWB, "sim.nwb", sim_path, sizeof(sim_path), NULL);
}

/* Run the CLI; fail the test with its stderr unless it exits with `want`. Returns stdout (malloc'd)
 * and, when err_keep is not NULL, stderr. (noinline: GCC 12 reports a false dangling pointer otherwise.) */
__attribute__((noinline)) static char *cli(const char *args, int want, char **err_keep) {
  char *out, *err;
  int code = ss_test_run_cli(args, &out, &err);
  if (code != want)
    fail_msg("spikestream %s: exit %d (expected %d)\nstdout: %s\nstderr: %s", args, code, want, out, err);
  if (err_keep) *err_keep = err;
  else free(err);
  return out;
}

static int same_file(const char *a, const char *b) {
  FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
  int same = fa && fb;
  while (same) {
    int ca = fgetc(fa), cb = fgetc(fb);
    if (ca != cb) same = 0;
    if (ca == EOF || cb == EOF) break;
  }
  if (fa) fclose(fa);
  if (fb) fclose(fb);
  return same;
}

static void sort_into(const char *name, const char *extra) {
  char dir[PATH_LEN], args[ARGS_LEN];
  ss_test_path(dir, sizeof(dir), name);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q %s", sim_path, dir, extra);
  free(cli(args, 0, NULL));
}

static void out_file(char *buf, size_t len, const char *run, const char *file) {
  char dir[PATH_LEN];
  ss_test_path(dir, sizeof(dir), run);
  snprintf(buf, len, "%s/%s", dir, file);
}

/* sort.log holds the run's log lines although -q hid them, the live twin's k-means fits as one
 * summary line, and the manifest lists it. */
static void sort_log(void **state) {
  (void)state;
  char path[2 * PATH_LEN];
  sort_into("logged", "");
  out_file(path, sizeof(path), "logged", "sort.log");
  char *log = ss_test_slurp(path);
  assert_non_null(log);
  assert_non_null(strstr(log, "info: sort: [1/4] front end"));
  assert_non_null(strstr(log, "info: sort: [4/4] outputs under"));
  assert_non_null(strstr(log, "info: live twin: "));
  if (strstr(log, "info: kmeans: ")) fail_msg("the live twin's k-means fits are logged one by one:\n%s", log);
  free(log);
  out_file(path, sizeof(path), "logged", "manifest.txt");
  char *manifest = ss_test_slurp(path);
  assert_non_null(manifest);
  assert_non_null(strstr(manifest, "sort.log"));
  free(manifest);
}

/* Well detected units (compare, --exclude 0) of sort output `dir` against the simulation `sim`. */
static int well_detected(const char *dir, const char *sim, int *total) {
  char args[ARGS_LEN];
  snprintf(args, sizeof(args), "compare '%s/results.h5' '%s' --exclude 0", dir, sim);
  char *table = cli(args, 0, NULL);
  const char *line = strstr(table, "well detected");
  int found = 0;
  assert_int_equal(line ? sscanf(line, "well detected (accuracy >= 0.8): %d of %d", &found, total) : 0, 2);
  free(table);
  return found;
}

/* Outputs exist, phy check passes (in sort and alone), compare finds the units. */
static void end_to_end(void **state) {
  (void)state;
  char *out;
  char dir[PATH_LEN], args[ARGS_LEN], path[2 * PATH_LEN];
  ss_test_path(dir, sizeof(dir), "merged");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --check", sim_path, dir);
  out = cli(args, 0, NULL);
  assert_non_null(strstr(out, "phy check:         ok"));
  assert_non_null(strstr(out, "x real time"));
  assert_non_null(strstr(out, "   unit   spikes  rate_hz     snr  isi_viol  presence  amp_cutoff  label"));
  assert_non_null(strstr(out, "labels:            "));
  free(out);
  const char *files[] = {
      "results.h5",    "model.h5",          "sim.fet.1",           "sim.fmask.1",          "sim.clu.1",
      "phy/params.py", "phy/templates.npy", "phy/pc_features.npy", "phy/cluster_group.tsv"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
    if (access(path, R_OK) != 0) fail_msg("missing output %s", path);
  }
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  snprintf(path, sizeof(path), "%s/phy", dir);
  if (ss_phy_check(&ctx, path) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  int total = 0, found = well_detected(dir, sim_path, &total);
  assert_int_equal(total, UNITS);
  if (found < UNITS - 1) fail_msg("only %d of %d units well detected", found, total);
}

/* model.h5 and results.h5 hold their documented datasets with consistent shapes. */
static void h5_layouts(void **state) {
  (void)state;
  char path[2 * PATH_LEN];
  out_file(path, sizeof(path), "merged", "model.h5");
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  const char *model_sets[] = {"/filter/sos",
                              "/threshold/sigma",
                              "/threshold/weak",
                              "/threshold/strong",
                              "/probe/x_um",
                              "/probe/adjacency",
                              "/pca/basis",
                              "/pca/eigenvalues",
                              "/clusters/centroid",
                              "/clusters/variance",
                              "/clusters/mean_waveform",
                              "/knn/features",
                              "/knn/labels",
                              "/params"};
  for (size_t i = 0; i < sizeof(model_sets) / sizeof(model_sets[0]); i++)
    if (H5Lexists(f, model_sets[i], H5P_DEFAULT) <= 0) fail_msg("model.h5: %s missing", model_sets[i]);
  hid_t d = H5Dopen2(f, "/pca/basis", H5P_DEFAULT), s = H5Dget_space(d);
  hsize_t dims[3];
  assert_int_equal(H5Sget_simple_extent_dims(s, dims, NULL), 3);
  assert_int_equal(dims[0], 32);
  assert_int_equal(dims[1], 3);
  H5Sclose(s);
  H5Dclose(d);
  H5Fclose(f);
  out_file(path, sizeof(path), "merged", "results.h5");
  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  const char *result_sets[] = {
      "/spikes/time_samples",    "/spikes/cluster",    "/spikes/cluster_raw",  "/features", "/masks", "/params",
      "/clusters/mean_waveform", "/clusters/n_spikes", "/merges/waveform_corr"};
  for (size_t i = 0; i < sizeof(result_sets) / sizeof(result_sets[0]); i++)
    if (H5Lexists(f, result_sets[i], H5P_DEFAULT) <= 0) fail_msg("results.h5: %s missing", result_sets[i]);
  assert_true(H5Aexists(f, "input_crc32") > 0);
  assert_true(H5Aexists(f, "version") > 0);
  H5Fclose(f);
}

/* A phy cluster_<name>.tsv: checks the header "cluster_id<TAB>column" and that the ids run 0, 1, ...;
 * copies each row's value into values; returns the row count. */
static int read_cluster_tsv(const char *path, const char *column, char values[][32], int max) {
  FILE *f = fopen(path, "r");
  if (!f) fail_msg("missing %s", path);
  char line[256], want[128];
  snprintf(want, sizeof(want), "cluster_id\t%s\n", column);
  if (!fgets(line, sizeof(line), f) || strcmp(line, want) != 0) fail_msg("%s: header \"%s\"", path, line);
  int n = 0, id;
  while (n < max && fgets(line, sizeof(line), f)) {
    if (sscanf(line, "%d\t%31s", &id, values[n]) != 2 || id != n) fail_msg("%s: line %d: \"%s\"", path, n + 2, line);
    n++;
  }
  fclose(f);
  return n;
}

/* The quality metrics and labels: one row per cluster in every phy cluster_*.tsv (cluster 0 noise, the
 * same labels in cluster_group and cluster_KSLabel) and the /clusters datasets of results.h5. */
static void quality_outputs(void **state) {
  (void)state;
  char path[2 * PATH_LEN];
  static char groups[256][32], ks[256][32], vals[256][32];
  out_file(path, sizeof(path), "merged", "phy/cluster_group.tsv");
  int k = read_cluster_tsv(path, "group", groups, 256);
  out_file(path, sizeof(path), "merged", "phy/cluster_KSLabel.tsv");
  assert_int_equal(read_cluster_tsv(path, "KSLabel", ks, 256), k);
  assert_true(k >= UNITS);
  assert_string_equal(groups[0], "noise");
  int good = 0;
  for (int i = 0; i < k; i++) {
    assert_string_equal(groups[i], ks[i]);
    if (strcmp(groups[i], "good") && strcmp(groups[i], "mua") && strcmp(groups[i], "noise"))
      fail_msg("cluster %d: label %s", i, groups[i]);
    good += !strcmp(groups[i], "good");
  }
  if (good < UNITS - 2) fail_msg("only %d good units of %d simulated", good, UNITS);
  const char *metrics[] = {"firing_rate", "snr", "isi_violations_ratio", "presence_ratio", "amplitude_cutoff"};
  for (size_t m = 0; m < sizeof(metrics) / sizeof(metrics[0]); m++) {
    char name[64];
    snprintf(name, sizeof(name), "phy/cluster_%s.tsv", metrics[m]);
    out_file(path, sizeof(path), "merged", name);
    assert_int_equal(read_cluster_tsv(path, metrics[m], vals, 256), k);
  }
  out_file(path, sizeof(path), "merged", "results.h5");
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  const char *sets[] = {"/clusters/snr",
                        "/clusters/isi_violations_ratio",
                        "/clusters/isi_violations",
                        "/clusters/presence_ratio",
                        "/clusters/amplitude_cutoff",
                        "/clusters/label"};
  for (size_t i = 0; i < sizeof(sets) / sizeof(sets[0]); i++) {
    hid_t d = H5Dopen2(f, sets[i], H5P_DEFAULT);
    if (d < 0) fail_msg("results.h5: %s missing", sets[i]);
    hid_t s = H5Dget_space(d);
    hsize_t dim = 0;
    assert_int_equal(H5Sget_simple_extent_dims(s, &dim, NULL), 1);
    assert_int_equal((int)dim, k);
    H5Sclose(s);
    H5Dclose(d);
  }
  hid_t d = H5Dopen2(f, "/clusters/label", H5P_DEFAULT), t = H5Dget_type(d);
  size_t len = H5Tget_size(t);
  char *buf = calloc((size_t)k, len);
  assert_true(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  for (int i = 0; i < k; i++) {
    char one[32] = {0};
    memcpy(one, buf + (size_t)i * len, len < 31 ? len : 31);
    assert_string_equal(one, groups[i]);
  }
  free(buf);
  H5Tclose(t);
  H5Dclose(d);
  H5Fclose(f);
}

/* Acceptance 4: --threads 1 and --threads 2 write the same bytes. Acceptance 2: `cluster` on the
 * run's .fet/.fmask (copied to another BASE) writes the same .clu as the --no-merge sort. */
static void threads_and_cluster(void **state) {
  (void)state;
  sort_into("t1", "--threads 1 --no-merge");
  sort_into("t2", "--threads 2 --no-merge");
  const char *files[] = {"sim.fet.1",
                         "sim.fmask.1",
                         "sim.clu.1",
                         "phy/spike_times.npy",
                         "phy/spike_clusters.npy",
                         "phy/templates.npy",
                         "phy/pc_features.npy",
                         "phy/similar_templates.npy",
                         "phy/amplitudes.npy"};
  char a[2 * PATH_LEN], b[2 * PATH_LEN], args[ARGS_LEN];
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    out_file(a, sizeof(a), "t1", files[i]);
    out_file(b, sizeof(b), "t2", files[i]);
    if (!same_file(a, b)) fail_msg("%s differs between 1 and 2 threads", files[i]);
  }
  char base[PATH_LEN];
  ss_test_path(base, sizeof(base), "kk");
  out_file(a, sizeof(a), "t1", "sim.fet.1");
  snprintf(args, sizeof(args), "cp '%s' '%s.fet.1' && cp '%.*s.fmask.1' '%s.fmask.1'", a, base,
           (int)(strlen(a) - strlen(".fet.1")), a, base);
  assert_int_equal(system(args), 0);
  /* `sort` uses its own BIC weight (sort.penalty_k_log_n); `cluster` is told the same */
  ss_params dp;
  ss_params_defaults(&dp);
  snprintf(args, sizeof(args), "cluster '%s' 1 -q -PenaltyKLogN %.17g", base, dp.sort.penalty_k_log_n);
  free(cli(args, 0, NULL));
  snprintf(a, sizeof(a), "%s.clu.1", base);
  out_file(b, sizeof(b), "t1", "sim.clu.1");
  if (!same_file(a, b)) fail_msg("cluster on the sort's .fet/.fmask gave other labels than the sort");
}

/* sort.em_max_spikes below the spike count: masked EM on that many, the others labelled by the KNN
 * vote; the same bytes with 1 and 2 threads, and the units still found. */
static void em_subset(void **state) {
  (void)state;
  char a[2 * PATH_LEN], b[2 * PATH_LEN], args[ARGS_LEN];
  const char *params = ss_test_write_file("subset.json", "{\"sort\": {\"em_max_spikes\": 300, \"assign_k\": 5}}");
  for (int t = 1; t <= 2; t++) {
    char dir[PATH_LEN], name[16];
    snprintf(name, sizeof(name), "sub%d", t);
    ss_test_path(dir, sizeof(dir), name);
    snprintf(args, sizeof(args), "sort '%s' -o '%s' --params '%s' --threads %d", sim_path, dir, params, t);
    char *out = cli(args, 0, NULL);
    if (!strstr(out, "masked EM on:      300 of the detections")) fail_msg("no subset line in:\n%s", out);
    free(out);
  }
  out_file(a, sizeof(a), "sub1", "sim.clu.1");
  out_file(b, sizeof(b), "sub2", "sim.clu.1");
  if (!same_file(a, b)) fail_msg("the subset sort differs between 1 and 2 threads");
  char dir[PATH_LEN];
  ss_test_path(dir, sizeof(dir), "sub1");
  snprintf(args, sizeof(args), "compare '%s/results.h5' '%s' --exclude 0", dir, sim_path);
  char *table = cli(args, 0, NULL);
  int found = 0, total = 0;
  const char *line = strstr(table, "well detected");
  assert_int_equal(line ? sscanf(line, "well detected (accuracy >= 0.8): %d of %d", &found, &total) : 0, 2);
  if (found < UNITS - 1) fail_msg("only %d of %d units well detected with the subset:\n%s", found, total, table);
  free(table);
}

/* The checker reports a wrong length and a missing file, naming them. */
static void phy_check_errors(void **state) {
  (void)state;
  char dir[PATH_LEN], args[ARGS_LEN], path[2 * PATH_LEN];
  ss_test_path(dir, sizeof(dir), "broken");
  out_file(path, sizeof(path), "t1", "phy");
  snprintf(args, sizeof(args), "rm -rf '%s' && cp -r '%s' '%s' && rm '%s/similar_templates.npy'", dir, path, dir, dir);
  assert_int_equal(system(args), 0);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int32_t three[3] = {1, 2, 3};
  ss_array a3 = {.dtype = SS_DT_I32, .ndim = 1, .shape = {3}, .data = three};
  snprintf(path, sizeof(path), "%s/spike_clusters.npy", dir);
  assert_int_equal(ss_npy_write(&ctx, path, &a3), SS_OK);
  assert_int_equal(ss_phy_check(&ctx, dir), SS_ERR_INPUT);
  const char *msg = ss_error_message(&ctx);
  if (!strstr(msg, "similar_templates.npy") || !strstr(msg, "spike_clusters.npy: axis 0 has 3 entries"))
    fail_msg("unexpected message:\n%s", msg);
  assert_int_equal(ss_phy_check(&ctx, "/nonexistent/phy"), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "/nonexistent/phy: not a directory");
}

static void expect_error(const char *args, int code, const char *text) {
  char *err;
  free(cli(args, code, &err));
  if (!strstr(err, text)) fail_msg("spikestream %s: expected \"%s\" in:\n%s", args, text, err);
  free(err);
}

static void bad_inputs(void **state) {
  (void)state;
  char args[ARGS_LEN], raw[PATH_LEN], dir[PATH_LEN];
  ss_test_path(dir, sizeof(dir), "bad");
  snprintf(args, sizeof(args), "sort /nonexistent/rec.nwb -o '%s' -q", dir);
  expect_error(args, 1, "spikestream sort: /nonexistent/rec.nwb");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --probe '%s'", sim_path, dir,
           SS_SOURCE_DIR "/params/probes/tetrode.json");
  expect_error(args, 1, "tetrode.json: probe tetrode: has 4 channels, the recording 32");
  char why[256];
  if (ss_backend_gpu_count(why, sizeof(why)) == 0) { /* with a GPU this runs: see gpu_test_mask_em */
    snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --device cuda", sim_path, dir);
    expect_error(args, 3, "spikestream sort: --device cuda: no CUDA device available");
  }
  /* 8 channels of flat binary: no positions, not the default probe's 32 channels */
  ss_test_path(raw, sizeof(raw), "eight.bin");
  FILE *f = fopen(raw, "wb");
  assert_non_null(f);
  int16_t zeros[8 * 1000] = {0};
  fwrite(zeros, sizeof(zeros), 1, f);
  fclose(f);
  snprintf(args, sizeof(args), "sort '%s' --channels 8 --rate 30000 -o '%s' -q", raw, dir);
  char want[2 * PATH_LEN];
  snprintf(want, sizeof(want),
           "spikestream sort: %s: no probe: give --probe (the file has no electrode positions, and its 8 channels do "
           "not match the default probe's 32)",
           raw);
  expect_error(args, 1, want);
  expect_error("sort -q", 2, "spikestream sort: expected one input recording");
  expect_error("sort x.nwb -q", 2, "spikestream sort: -o DIR is required");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --threads 0", sim_path, dir);
  expect_error(args, 2, "--threads");
  char *out;
  out = cli("sort --help", 0, NULL);
  assert_non_null(strstr(out, "usage: spikestream sort INPUT -o DIR"));
  free(out);
}

/* A probeinterface probe with 32 wired contacts and two unwired ones (device channel -1): `probe`
 * and `sort` both count the 32 wired ones against the recording. */
static void unwired_contacts(void **state) {
  (void)state;
  char path[PATH_LEN], args[ARGS_LEN], dir[PATH_LEN];
  ss_test_path(path, sizeof(path), "unwired.json");
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "{\"specification\": \"probeinterface\", \"version\": \"0.3.2\", \"probes\": [{\"ndim\": 2, "
             "\"si_units\": \"um\", \"contact_positions\": [");
  for (int i = 0; i < 34; i++) fprintf(f, "%s[%d, %d]", i ? ", " : "", (i % 2) * 20, i * 10);
  fprintf(f, "], \"device_channel_indices\": [");
  for (int i = 0; i < 34; i++) fprintf(f, "%s%d", i ? ", " : "", i == 5 || i == 33 ? -1 : i < 5 ? i : i - 1);
  fprintf(f, "]}]}\n");
  fclose(f);
  snprintf(args, sizeof(args), "probe '%s' --channels 32", path);
  free(cli(args, 0, NULL));
  ss_test_path(dir, sizeof(dir), "unwired");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --probe '%s'", sim_path, dir, path);
  free(cli(args, 0, NULL));
}

/* units.nwb: passes the structural check (also through `inspect --check-nwb`), links the input's
 * series, and holds each cluster's spike times exactly as results.h5 has them. */
static void units_nwb(void **state) {
  (void)state;
  char path[2 * PATH_LEN], res[2 * PATH_LEN], args[ARGS_LEN];
  out_file(path, sizeof(path), "merged", "units.nwb");
  out_file(res, sizeof(res), "merged", "results.h5");
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_nwb_check(&ctx, path) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  snprintf(args, sizeof(args), "inspect '%s' --check-nwb", path);
  char *out = cli(args, 0, NULL);
  assert_non_null(strstr(out, "nwb check:    ok"));
  free(out);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), r = H5Fopen(res, H5F_ACC_RDONLY, H5P_DEFAULT);
  H5L_info_t li;
  assert_true(H5Lget_info(f, "/acquisition/ElectricalSeries", &li, H5P_DEFAULT) >= 0);
  assert_int_equal(li.type, H5L_TYPE_EXTERNAL);
  double *t = NULL, *ends = NULL, *ts = NULL, *cl = NULL, *ids = NULL;
  int64_t nt, K, n, nc, nk;
  ss_status st = ss_h5_read_f64_vector(&ctx, f, "/units/spike_times", path, &t, &nt);
  if (st == SS_OK) st = ss_h5_read_f64_vector(&ctx, f, "/units/spike_times_index", path, &ends, &K);
  if (st == SS_OK) st = ss_h5_read_f64_vector(&ctx, r, "/spikes/time_s", res, &ts, &n);
  if (st == SS_OK) st = ss_h5_read_f64_vector(&ctx, r, "/spikes/cluster", res, &cl, &nc);
  if (st == SS_OK) st = ss_h5_read_f64_vector(&ctx, r, "/clusters/id", res, &ids, &nk);
  if (st != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(K, nk);
  assert_int_equal(nt, n);
  for (int64_t k = 0, at = 0; k < K; k++) { /* spikes are in time order in both files */
    int64_t end = (int64_t)ends[k];
    for (int64_t i = 0; i < n; i++)
      if ((int64_t)cl[i] == k) {
        if (at >= end) fail_msg("unit %lld: more spikes in results.h5 than in units.nwb", (long long)k);
        if (t[at] != ts[i]) fail_msg("unit %lld: spike time %.17g, results.h5 has %.17g", (long long)k, t[at], ts[i]);
        at++;
      }
    if (at != end) fail_msg("unit %lld: fewer spikes in results.h5 than in units.nwb", (long long)k);
  }
  hid_t d = H5Dopen2(f, "/units/waveform_mean", H5P_DEFAULT);
  int64_t dims[8];
  assert_int_equal(ss_h5_shape(d, dims), 3);
  assert_true(dims[0] == K && dims[2] == 8);
  H5Dclose(d);
  free(t), free(ends), free(ts), free(cl), free(ids);
  H5Fclose(f), H5Fclose(r);
}

/* Matching's shadows: a weak fit next to a larger spike of another unit goes; a weak fit alone, a strong
 * fit beside a larger spike, and a weak fit beside a larger spike of its own unit stay. */
static void shadows(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int64_t time[] = {103, 100, 200, 105, 300, 304, 400, 420};
  const int32_t unit[] = {2, 1, 2, 3, 4, 4, 5, 6};
  const float amplitude[] = {-80, -300, -80, -150, -300, -90, -300, -50};
  const float scale[] = {0.6f, 1.0f, 0.6f, 0.9f, 1.0f, 0.6f, 1.0f, 0.6f};
  const uint8_t want[] = {1, 0, 0, 0, 0, 0, 0, 0};
  uint8_t drop[8];
  int64_t n_dropped = -1;
  assert_int_equal(ss_sort_shadows(&ctx, time, unit, amplitude, scale, 8, 10, 0.7, drop, &n_dropped), SS_OK);
  assert_memory_equal(drop, want, sizeof(want));
  assert_int_equal(n_dropped, 1);
  assert_int_equal(ss_sort_shadows(&ctx, time, unit, amplitude, scale, 8, 0, 0.7, drop, &n_dropped), SS_OK);
  assert_int_equal(n_dropped, 0);
}

/* results.h5's /motion attributes `registered` and `range_um`. */
static void motion_attrs(const char *path, int *registered, double *range) {
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  hid_t g = H5Gopen2(f, "/motion", H5P_DEFAULT);
  assert_true(g >= 0);
  hid_t a = H5Aopen(g, "registered", H5P_DEFAULT);
  assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_INT, registered) >= 0);
  H5Aclose(a);
  a = H5Aopen(g, "range_um", H5P_DEFAULT);
  assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_DOUBLE, range) >= 0);
  H5Aclose(a);
  H5Gclose(g);
  H5Fclose(f);
}

/* A probe drifting 1.5 um/s for 30 s (45 um, two rows of contacts): the motion is estimated (its
 * span within 20 % of the truth), the recording is registered and every unit is well detected; with
 * motion.enabled false the same sort loses units. The still recording of the group is not registered. */
static void drifting_probe(void **state) {
  (void)state;
  char drift_sim[PATH_LEN], dir[PATH_LEN], off[PATH_LEN], args[ARGS_LEN], path[2 * PATH_LEN];
  ss_sim_config c = ss_test_sim_units(30.0, 8, 20, 5);
  c.drift_um_per_s = 1.5;
  assert_int_equal(ss_test_simulate(PROBE, 40.0, &c, SS_SIM_FORMAT_NWB, "drift.nwb", drift_sim, sizeof(drift_sim),
                                    NULL),
                   0);
  ss_test_path(dir, sizeof(dir), "drift");
  ss_test_path(off, sizeof(off), "drift_off");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q", drift_sim, dir);
  free(cli(args, 0, NULL));
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --param motion.enabled=false", drift_sim, off);
  free(cli(args, 0, NULL));
  snprintf(path, sizeof(path), "%s/results.h5", dir);
  int registered = 0;
  double range = 0;
  motion_attrs(path, &registered, &range);
  print_message("drift 45 um: estimated span %.1f um, registered %d\n", range, registered);
  assert_int_equal(registered, 1);
  assert_true(range > 0.8 * 45.0 && range < 1.2 * 45.0);
  int total = 0, on = well_detected(dir, drift_sim, &total), without = well_detected(off, drift_sim, &total);
  print_message("well detected: %d of %d registered, %d of %d not\n", on, total, without, total);
  assert_int_equal(total, 8);
  if (on < total) fail_msg("only %d of %d units well detected on the registered recording", on, total);
  assert_true(without < on);
  /* the group's still recording */
  sort_into("still", "");
  out_file(path, sizeof(path), "still", "results.h5");
  motion_attrs(path, &registered, &range);
  assert_int_equal(registered, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(end_to_end),          cmocka_unit_test(h5_layouts),       cmocka_unit_test(quality_outputs),
      cmocka_unit_test(threads_and_cluster), cmocka_unit_test(phy_check_errors), cmocka_unit_test(bad_inputs),
      cmocka_unit_test(em_subset),           cmocka_unit_test(unwired_contacts), cmocka_unit_test(sort_log),
      cmocka_unit_test(units_nwb),           cmocka_unit_test(shadows),          cmocka_unit_test(drifting_probe),
  };
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
