/* gpu_test_live.c — the CUDA path of the live engine (GPU group), on a simulated recording
 * and the model of an offline `sort` of it:
 *  1. the GPU engine fed pushes of 30 rows gives the CPU engine's spikes: times, channels and
 *     amplitudes identical, labels (nearest centroid, plain and masked; KNN vote) >= 99.9 % identical;
 *     the GPU engine waits for the device at most 3 times per push (one detection per push that looks
 *     at spikes: completeness, finality and labels from one run);
 *  1b. the same for other push sizes (7, 317 rows) and another join_size (3);
 *  2. a stream restart (ss_live_reset) gives the same spikes again, and pushes ran as graph launches;
 *  3. agreement with the offline sort: sort → replay → `live --device cuda`: >= 95 % of the offline
 *     spikes that have a live twin have one of the same unit, and >= 85 % have one (the criteria of
 *     tests/test_live.c);
 *  4. `live --device auto` logs its choice;
 *  5. `live --device cuda --spin --workers 3` (pushes from several threads) and `--spin --replicas 2`
 *     (two CUDA engines at once) give the spikes of the plain run. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"
#include "core/log.h"
#include "live_test_util.h"
#include "ss_test.h"

#define DURATION 30.0
#define PUSH_ROWS 30
#define SOURCE_ARGS "--format binary --channels 32 --rate 30000 --uv-per-step 0.195"
#define MATCH_TOLERANCE 3 /* samples between an offline spike (offset-corrected) and its live twin */
#define MIN_LABEL_AGREEMENT 0.999
#define MIN_OFFLINE_AGREEMENT 0.95
#define MIN_OFFLINE_PARTNERED 0.85 /* offline spikes with a live twin (docs/live.md) */
#define MAX_WAITS_PER_PUSH 3       /* strong flag, spike count, tables */
#define FLUSH_WAITS 2              /* the end of a stream: spike count, tables */
#define PATH_LEN LIVE_PATH_LEN

static live_fixture fx; /* the recording, its sort and the socket */
static int16_t *raw;
static int64_t n_rows;
static ss_live_model model;

static int group_setup(void **state) {
  (void)state;
  ss_test_require_gpu();
  if (live_fixture_make(&fx, "gpu_live", DURATION, 5, SOURCE_ARGS) != 0) return -1;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  memset(&model, 0, sizeof(model));
  if (ss_live_model_load(&ctx, fx.model, &model) != SS_OK) {
    fprintf(stderr, "%s\n", ss_error_message(&ctx));
    return -1;
  }
  raw = ss_test_read_rows(fx.bin, model.n_channels, &n_rows);
  return raw ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  free(raw);
  ss_live_model_free(&model);
  return 0;
}

/* --- engine runs --------------------------------------------------------------------------------- */

/* Rows [0, rows) in pushes of `push` rows, `streams` times (ss_live_reset between them); the spikes
 * sorted by (time, channel). */
static void run_pushes(ss_device_kind dev, const ss_live_opts *o, int64_t rows, int64_t push, int streams,
                       collected *out, ss_live_stats *stats) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  if (ss_backend_open(&ctx, dev, 0, 1, &be) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_live_engine *e;
  if (ss_live_engine_open(&ctx, &be, &model, o, &e) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  memset(out, 0, sizeof(*out));
  for (int k = 0; k < streams; k++) {
    if (k > 0) ss_live_reset(e);
    for (int64_t r = 0; r < rows; r += push) {
      int64_t m = rows - r < push ? rows - r : push;
      if (ss_live_push(&ctx, e, raw + r * model.n_channels, m, ss_now(), collect, out) != SS_OK)
        fail_msg("%s", ss_error_message(&ctx));
    }
    if (ss_live_flush(&ctx, e, collect, out) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  }
  ss_live_get_stats(e, stats);
  ss_live_engine_close(e);
  ss_backend_close(&be);
  qsort(out->s, (size_t)out->n, sizeof(*out->s), cmp_spike);
}

/* The whole recording in pushes of PUSH_ROWS rows. */
static void run_engine(ss_device_kind dev, const ss_live_opts *o, int streams, collected *out, ss_live_stats *stats) {
  run_pushes(dev, o, n_rows, PUSH_ROWS, streams, out, stats);
}

/* The GPU engine's round trips: at most MAX_WAITS_PER_PUSH per push (plus a flush per stream), at most
 * one detection per push. */
static void check_round_trips(const char *what, const ss_live_stats *sc, const ss_live_stats *sg) {
  printf("%s: GPU %.3f device waits and %.3f detections per push; CPU %.3f detections per push\n", what,
         (double)sg->device_waits / (double)sg->blocks, (double)sg->detections / (double)sg->blocks,
         (double)sc->detections / (double)sc->blocks);
  assert_true(sg->device_waits <= MAX_WAITS_PER_PUSH * sg->blocks + FLUSH_WAITS * sg->streams);
  assert_true(sg->detections <= sg->blocks + sg->streams);
  assert_true(sg->device_waits >= sg->blocks); /* every push waits once (for its flag or its detection) */
}

/* 1. GPU = CPU: identical spikes, labels >= 99.9 % identical. */
static void compare(const char *what, const ss_live_opts *o) {
  collected cpu, gpu;
  ss_live_stats sc, sg;
  double t0 = ss_now();
  run_engine(SS_DEVICE_CPU, o, 1, &cpu, &sc);
  double t1 = ss_now();
  run_engine(SS_DEVICE_CUDA, o, 1, &gpu, &sg);
  double t2 = ss_now();
  printf("%s: CPU %lld spikes in %.2f s (p50 %.3f ms, p99 %.3f ms), GPU %lld spikes in %.2f s (p50 %.3f ms, p99 "
         "%.3f ms), %lld of %lld pushes as graph launches\n",
         what, (long long)cpu.n, t1 - t0, 1e-3 * ss_live_stats_percentile_us(&sc, 50),
         1e-3 * ss_live_stats_percentile_us(&sc, 99), (long long)gpu.n, t2 - t1,
         1e-3 * ss_live_stats_percentile_us(&sg, 50), 1e-3 * ss_live_stats_percentile_us(&sg, 99),
         (long long)sg.graph_pushes, (long long)sg.blocks);
  assert_true(cpu.n > 100);
  assert_int_equal(gpu.n, cpu.n);
  int64_t same = 0, amp_diff = 0;
  for (int64_t i = 0; i < cpu.n; i++) {
    assert_int_equal(gpu.s[i].t, cpu.s[i].t);
    assert_int_equal(gpu.s[i].channel, cpu.s[i].channel);
    amp_diff += gpu.s[i].amp != cpu.s[i].amp;
    same += gpu.s[i].unit == cpu.s[i].unit;
  }
  printf("%s: times and channels identical; %lld amplitudes differ; labels %lld of %lld identical (%.4f%%)\n", what,
         (long long)amp_diff, (long long)same, (long long)cpu.n, 100.0 * (double)same / (double)cpu.n);
  assert_int_equal(amp_diff, 0);
  assert_true((double)same >= MIN_LABEL_AGREEMENT * (double)cpu.n);
  assert_int_equal(sg.spikes, gpu.n);
  assert_int_equal(sg.samples, n_rows);
  assert_true(sg.graph_pushes > sg.blocks / 2);
  check_round_trips(what, &sc, &sg);
  free(cpu.s);
  free(gpu.s);
}

static void gpu_equals_cpu(void **state) {
  (void)state;
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  compare("centroid", &o);
  o.masked_distance = 1;
  compare("centroid, masked distance", &o);
  ss_live_opts_defaults(&o);
  o.assign = SS_LIVE_KNN;
  compare("knn k=5", &o);
}

/* 1b. Other push sizes and join_size 3 (components join across two empty rows): the GPU's
 * finality from one detection still gives the CPU engine's spikes and labels exactly. */
static void gpu_equals_cpu_other_pushes(void **state) {
  (void)state;
  const int64_t rows = n_rows / 4, pushes[] = {7, 317, 64};
  const int saved = model.join_size;
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  for (int k = 0; k < 3; k++) {
    if (k == 2) model.join_size = 3;
    collected cpu, gpu;
    ss_live_stats sc, sg;
    run_pushes(SS_DEVICE_CPU, &o, rows, pushes[k], 1, &cpu, &sc);
    run_pushes(SS_DEVICE_CUDA, &o, rows, pushes[k], 1, &gpu, &sg);
    char what[64];
    snprintf(what, sizeof(what), "push %lld rows, join_size %d", (long long)pushes[k], model.join_size);
    printf("%s: CPU %lld spikes, GPU %lld\n", what, (long long)cpu.n, (long long)gpu.n);
    assert_true(cpu.n > 100);
    assert_int_equal(gpu.n, cpu.n);
    int64_t same = 0;
    for (int64_t i = 0; i < cpu.n; i++) {
      assert_int_equal(gpu.s[i].t, cpu.s[i].t);
      assert_int_equal(gpu.s[i].channel, cpu.s[i].channel);
      assert_true(gpu.s[i].amp == cpu.s[i].amp);
      same += gpu.s[i].unit == cpu.s[i].unit;
    }
    printf("%s: times, channels and amplitudes identical; labels %lld of %lld identical\n", what, (long long)same,
           (long long)cpu.n);
    assert_true((double)same >= MIN_LABEL_AGREEMENT * (double)cpu.n);
    check_round_trips(what, &sc, &sg);
    free(cpu.s);
    free(gpu.s);
  }
  model.join_size = saved;
}

/* 2. A restarted stream gives the same spikes again (filter state and buffer restart on the device). */
static void restart_gives_same_spikes(void **state) {
  (void)state;
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  collected one, two;
  ss_live_stats s1, s2;
  run_engine(SS_DEVICE_CUDA, &o, 1, &one, &s1);
  run_engine(SS_DEVICE_CUDA, &o, 2, &two, &s2);
  assert_int_equal(two.n, 2 * one.n);
  assert_int_equal(s2.streams, 2);
  for (int64_t i = 0; i < one.n; i++) /* sorted by (time, channel): each spike twice in a row */
    for (int k = 0; k < 2; k++) {
      assert_int_equal(two.s[2 * i + k].t, one.s[i].t);
      assert_int_equal(two.s[2 * i + k].channel, one.s[i].channel);
      assert_true(two.s[2 * i + k].amp == one.s[i].amp);
      assert_int_equal(two.s[2 * i + k].unit, one.s[i].unit);
    }
  printf("restart: %lld spikes in each of 2 streams, identical\n", (long long)one.n);
  free(one.s);
  free(two.s);
}

/* --- the command line -------------------------------------------------------------------------- */

/* `live LIVE_ARGS` while `replay` sends the recording; stdout and stderr returned. */
static int run_live(const char *live_args, char **out, char **err) {
  char replay[4 * LIVE_PATH_LEN], live[4 * LIVE_PATH_LEN];
  snprintf(replay, sizeof(replay), "'%s' " SOURCE_ARGS " --speed 0 --to 'unix-listen://%s'", fx.bin, fx.sock);
  snprintf(live, sizeof(live), "--source 'unix://%s' --model '%s' %s", fx.sock, fx.model, live_args);
  return live_cli_run("gpu_live", replay, live, out, err);
}

/* 3. sort → replay → live --device cuda: the offline spikes' live twins carry the same unit. */
static void agreement_with_offline_sort(void **state) {
  (void)state;
  char *out, *err;
  int code = run_live("--device cuda", &out, &err);
  if (code != 0) fail_msg("live: exit %d: %s", code, err);
  collected got;
  parse_lines(out, &got);
  char results[PATH_LEN + 16];
  snprintf(results, sizeof(results), "%s/results.h5", fx.dir);
  offline_sort off;
  offline_sort_read(results, fx.model, &off);
  const int64_t edge = (int64_t)(0.002 * 30000.0), end = (int64_t)(DURATION * 30000.0) - edge;
  int64_t n, matched, same;
  offline_agreement_all(&off, &got, MATCH_TOLERANCE, edge, end, &n, &matched, &same);
  /* of the partnered offline spikes (overlaps found by the offline template matching have no live twin) */
  double agree = matched ? (double)same / (double)matched : 0;
  const char *summary = strstr(err, "live: done: ");
  printf("live --device cuda: offline sort %lld spikes, live %lld (%lld without an offline spike within %d samples); "
         "%lld have a live twin, %.2f%% of those with the same unit\n%s",
         (long long)n, (long long)got.n, (long long)live_without_partner(&off, &got, MATCH_TOLERANCE), MATCH_TOLERANCE,
         (long long)matched, 100.0 * agree, summary ? summary : err);
  assert_true(agree >= MIN_OFFLINE_AGREEMENT);
  assert_true(n > 0 && (double)matched / (double)n >= MIN_OFFLINE_PARTNERED);
  offline_sort_free(&off);
  free(got.s);
  free(out);
  free(err);
}

/* 5. --spin's workers (drivers/live_workers.h) push from several threads, each bound to the device, and
 * --replicas (drivers/live_replicas.h) runs two CUDA engines on two streams at once: the spikes of the
 * single-threaded CUDA run. */
static void spin_workers_on_the_device(void **state) {
  (void)state;
  static const char *modes[] = {"--device cuda", "--device cuda --spin --workers 3",
                                "--device cuda --spin --replicas 2"};
  enum { N_MODES = sizeof(modes) / sizeof(modes[0]) };
  char *out[N_MODES], *err[N_MODES];
  collected got[N_MODES];
  for (int m = 0; m < N_MODES; m++) {
    int code = run_live(modes[m], &out[m], &err[m]);
    if (code != 0) fail_msg("live %s: exit %d: %s", modes[m], code, err[m]);
    parse_lines(out[m], &got[m]);
    printf("live %s: %lld spikes\n", modes[m], (long long)got[m].n);
  }
  assert_true(got[0].n > 0);
  for (int m = 1; m < N_MODES; m++) {
    int64_t diff = 0, first = -1;
    for (int64_t i = 0; i < got[0].n && i < got[m].n; i++)
      if (got[0].s[i].t != got[m].s[i].t || got[0].s[i].unit != got[m].s[i].unit ||
          got[0].s[i].channel != got[m].s[i].channel || got[0].s[i].amp != got[m].s[i].amp) {
        if (first < 0) first = i;
        diff++;
      }
    if (first >= 0)
      printf("live %s: %lld spikes differ from the plain run; first #%lld: t %lld/%lld ch %d/%d unit %d/%d amp %g/%g\n",
             modes[m], (long long)diff, (long long)first, (long long)got[0].s[first].t, (long long)got[m].s[first].t,
             (int)got[0].s[first].channel, (int)got[m].s[first].channel, (int)got[0].s[first].unit,
             (int)got[m].s[first].unit, (double)got[0].s[first].amp, (double)got[m].s[first].amp);
    assert_true(same_spikes(&got[0], &got[m]));
  }
  cli_runs_free(out, err, got, N_MODES);
}

/* 4. --device auto picks the GPU here and says so. */
static void auto_logs_its_choice(void **state) {
  (void)state;
  char *out, *err;
  int code = run_live("--device auto", &out, &err);
  if (code != 0) fail_msg("live: exit %d: %s", code, err);
  printf("--device auto: %.200s\n", err);
  assert_non_null(strstr(err, "device auto: using CUDA device"));
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpu_equals_cpu),
      cmocka_unit_test(gpu_equals_cpu_other_pushes),
      cmocka_unit_test(restart_gives_same_spikes),
      cmocka_unit_test(agreement_with_offline_sort),
      cmocka_unit_test(auto_logs_its_choice),
      cmocka_unit_test(spin_workers_on_the_device),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
