/* test_live.c — the live engine and `spikestream live`, CPU:
 *  1. exactness: any push size gives the spikes of one causal pass over the whole recording, bit
 *     for bit, and the CPU front end run causally (filter.causal) finds the same spikes;
 *  2. agreement with the offline sort: sort → replay → live, labels vs the offline clusters;
 *  3. the stream end: partial frames, mid-frame end (exit 1), disconnect (exit 0), --reconnect;
 *  4. overruns are counted when the engine falls behind, and nothing is dropped;
 *  plus the CLI's usage errors. */
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "io/link.h"
#include "io/source.h"
#include "params/params.h"
#include "params/probe.h"
#include "stages/detect/detect.h"
#include "stages/filter/filter.h"
#include "drivers/frontend.h"
#include "stages/live/live.h"
#include "core/log.h"
#include "stages/live/live_model.h"
#include "live_test_util.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define RATE 30000.0
#define DURATION 20.0
#define N_CH 32
#define N_UNITS 4 /* centroids of the hand-made model */

static char bin_path[4096];
static ss_probe probe;
static int16_t *raw; /* the whole recording */
static int64_t n_rows;
static ss_live_model model; /* built here from a causal front-end run */
static ss_spikes fe;        /* that run's spikes */
static ss_sim_config sim;   /* the recording's simulation */

/* --- a live model from the CPU front end run causally -------------------------------------------- */

static void build_model(ss_ctx *ctx) {
  ss_params p;
  ss_params_defaults(&p);
  p.filter.causal = 1;
  ss_source_spec spec = ss_test_binary_spec(bin_path, &sim, N_CH);
  ss_source *src;
  ss_backend be;
  ss_frontend_model fm;
  if (ss_source_open(ctx, &spec, &src) != SS_OK) fail_msg("%s", ss_error_message(ctx));
  assert_int_equal(ss_backend_open(ctx, SS_DEVICE_CPU, 0, 2, &be), SS_OK);
  if (ss_frontend_run(ctx, &be, &p, src, &probe, NULL, &fe, &fm) != SS_OK) fail_msg("%s", ss_error_message(ctx));
  const ss_source_info *info = ss_source_get_info(src);
  memset(&model, 0, sizeof(model));
  model.rate_hz = RATE;
  model.n_channels = N_CH;
  model.n_pcs = fm.pca.n_pcs;
  model.n_before = fm.detect.n_before;
  model.n_after = fm.detect.n_after;
  model.n_wave = model.n_before + model.n_after;
  model.polarity = fm.thresholds.polarity;
  model.join_size = fm.detect.join_size;
  model.uv_per_step = malloc(N_CH * sizeof(double));
  memcpy(model.uv_per_step, info->uv_per_step, N_CH * sizeof(double));
  model.offset_uv = info->offset_uv;
  model.filter = fm.filter;
  model.thresholds = fm.thresholds;
  model.pca = fm.pca;
  assert_int_equal(ss_detect_graph_from_probe(ctx, &probe, N_CH, &model.graph), SS_OK);
  /* units: N_UNITS centroids taken from spikes spread over the run; the reference set is every
   * front-end spike labelled by its peak channel's group of four */
  const int F = N_CH * model.n_pcs;
  model.k = N_UNITS;
  model.unit_id = malloc(N_UNITS * sizeof(int32_t));
  model.centroid = malloc((size_t)N_UNITS * F * sizeof(float));
  model.mean_mask = calloc((size_t)N_UNITS * N_CH, sizeof(float));
  for (int u = 0; u < N_UNITS; u++) {
    int64_t i = fe.n * u / N_UNITS;
    model.unit_id[u] = 10 + u;
    memcpy(model.centroid + u * F, fe.features + i * F, F * sizeof(float));
    memcpy(model.mean_mask + u * N_CH, fe.masks + i * N_CH, N_CH * sizeof(float));
  }
  model.n_ref = fe.n;
  model.ref_features = fe.features;
  model.ref_masks = fe.masks;
  model.ref_labels = malloc((size_t)fe.n * sizeof(int32_t));
  for (int64_t i = 0; i < fe.n; i++) model.ref_labels[i] = fe.peak_channel[i] / 4;
  /* the model owns the front end's thresholds and basis from here (freed in group_teardown) */
  ss_backend_close(&be);
  ss_source_close(src);
}

static int group_setup(void **state) {
  (void)state;
  sim = ss_test_sim_config(DURATION, RATE, 11);
  if (ss_test_simulate(PROBE, 40.0, &sim, SS_SIM_FORMAT_BINARY, "sim.bin", bin_path, sizeof(bin_path), &probe))
    return -1;
  if (!(raw = ss_test_read_rows(bin_path, N_CH, &n_rows))) return -1;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  build_model(&ctx);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  free(raw);
  free(model.uv_per_step);
  ss_thresholds_free(&model.thresholds);
  ss_detect_graph_free(&model.graph);
  ss_pca_free(&model.pca);
  free(model.unit_id);
  free(model.centroid);
  free(model.mean_mask);
  free(model.ref_labels);
  ss_spikes_free(&fe);
  ss_probe_free(&probe);
  return 0;
}

/* --- engine runs --------------------------------------------------------------------------------- */

/* Push rows [0, n) in pushes of `push` rows; the spikes sorted by (time, channel). */
static void run_engine(int64_t n, int64_t push, int assign, collected *out, ss_live_stats *stats) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  o.assign = assign;
  ss_live_engine *e;
  live_open_cpu(&ctx, &model, &o, &be, &e);
  memset(out, 0, sizeof(*out));
  for (int64_t r = 0; r < n; r += push) {
    int64_t m = n - r < push ? n - r : push;
    if (ss_live_push(&ctx, e, raw + r * N_CH, m, ss_now(), collect, out) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
  }
  if (ss_live_flush(&ctx, e, collect, out) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  if (stats) ss_live_get_stats(e, stats);
  ss_live_engine_close(e);
  ss_backend_close(&be);
  qsort(out->s, (size_t)out->n, sizeof(*out->s), cmp_spike);
}

/* The reference: one causal pass over rows [0, n) and one detection over all of them. */
static void whole_pass(int64_t n, ss_spike_list *ref) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float *x = malloc((size_t)n * N_CH * sizeof(float));
  for (int64_t t = 0; t < n; t++)
    for (int c = 0; c < N_CH; c++)
      x[t * N_CH + c] = (float)(raw[t * N_CH + c] * model.uv_per_step[c] + model.offset_uv);
  ss_filter_state st;
  assert_int_equal(ss_filter_state_init(&ctx, &model.filter, N_CH, &st), SS_OK);
  assert_int_equal(ss_filter_causal_cpu(&ctx, &model.filter, &st, x, n, x), SS_OK);
  ss_filter_state_free(&st);
  ss_detect_config cfg = {.join_size = model.join_size, .n_before = model.n_before, .n_after = model.n_after};
  ss_detect_block blk =
      {.x = x, .n_rows = n, .row0_sample = 0, .search_begin = 0, .search_end = n, .own_begin = 0, .own_end = n};
  ss_detect_work w = {0};
  ss_spike_list_init(&ctx, ref, N_CH, model.n_wave, 0);
  assert_int_equal(ss_detect_block_cpu(&ctx, &cfg, &model.graph, &model.thresholds, &blk, &w, ref), SS_OK);
  ss_detect_work_free(&w);
  free(x);
}

/* 1. Exactness: pushes of 1, 7, 30 and 317 rows give the whole pass's spikes bit for bit. */
static void exact_any_push_size(void **state) {
  (void)state;
  const int64_t pushes[] = {317, 30, 7, 1};
  collected first = {0};
  for (int k = 0; k < 4; k++) {
    /* one-row pushes cost a detection per row: a quarter of the recording keeps the test short */
    int64_t n = pushes[k] == 1 ? n_rows / 4 : n_rows;
    ss_spike_list ref;
    whole_pass(n, &ref);
    assert_true(ref.n > 100);
    collected want = {0};
    for (int64_t i = 0; i < ref.n; i++) {
      ss_live_spike s = {.t = ref.time_samples[i], .channel = ref.peak_channel[i], .amp = ref.amplitude[i]};
      collect(NULL, &want, &s);
    }
    qsort(want.s, (size_t)want.n, sizeof(*want.s), cmp_spike);
    collected got;
    ss_live_stats stats;
    double t0 = ss_now();
    run_engine(n, pushes[k], SS_LIVE_CENTROID, &got, &stats);
    double secs = ss_now() - t0;
    printf("push %lld rows: %lld spikes (whole pass %lld) in %.2f s for %.1f s of signal; latency p50 %.1f us\n",
           (long long)pushes[k], (long long)got.n, (long long)want.n, secs, (double)n / RATE,
           ss_live_stats_percentile_us(&stats, 50));
    assert_int_equal(got.n, want.n);
    for (int64_t i = 0; i < got.n; i++) {
      assert_int_equal(got.s[i].t, want.s[i].t);
      assert_int_equal(got.s[i].channel, want.s[i].channel);
      assert_true(got.s[i].amp == want.s[i].amp);
      if (k > 0 && got.s[i].t + 2 * model.n_wave < n) assert_int_equal(got.s[i].unit, first.s[i].unit);
    }
    assert_int_equal(stats.spikes, got.n);
    assert_int_equal(stats.samples, n);
    if (k == 0) first = got;
    else free(got.s);
    free(want.s);
    ss_spike_list_free(&ref);
  }
  free(first.s);
}

/* The finality rules do not depend on join_size = 1: with join_size 3 (components join across two
 * empty rows) pushes of 7 and 64 rows still give the whole pass's spikes. */
static void exact_other_join_size(void **state) {
  (void)state;
  const int saved = model.join_size;
  model.join_size = 3;
  const int64_t n = n_rows / 4, pushes[] = {64, 7};
  ss_spike_list ref;
  whole_pass(n, &ref);
  collected want = {0};
  for (int64_t i = 0; i < ref.n; i++) {
    ss_live_spike sp = {.t = ref.time_samples[i], .channel = ref.peak_channel[i], .amp = ref.amplitude[i]};
    collect(NULL, &want, &sp);
  }
  qsort(want.s, (size_t)want.n, sizeof(*want.s), cmp_spike);
  for (int k = 0; k < 2; k++) {
    collected got;
    run_engine(n, pushes[k], SS_LIVE_CENTROID, &got, NULL);
    assert_int_equal(got.n, want.n);
    for (int64_t i = 0; i < got.n; i++) {
      assert_int_equal(got.s[i].t, want.s[i].t);
      assert_int_equal(got.s[i].channel, want.s[i].channel);
      assert_true(got.s[i].amp == want.s[i].amp);
    }
    free(got.s);
  }
  printf("join_size 3: %lld spikes, as the whole pass\n", (long long)want.n);
  free(want.s);
  ss_spike_list_free(&ref);
  model.join_size = saved;
}

/* 1b. The CPU front end run causally on the whole file (chunks with margins, thresholds of the
 * model): its spikes match the engine's within one sample on the same channel. */
static void agrees_with_causal_front_end(void **state) {
  (void)state;
  collected got;
  run_engine(n_rows, 300, SS_LIVE_CENTROID, &got, NULL);
  int64_t matched = 0, j = 0;
  for (int64_t i = 0; i < fe.n; i++) {
    while (j < got.n && got.s[j].t < fe.time_samples[i] - 1) j++;
    int hit = 0;
    for (int64_t q = j; q < got.n && got.s[q].t <= fe.time_samples[i] + 1 && !hit; q++)
      hit = got.s[q].channel == fe.peak_channel[i];
    matched += hit;
  }
  double frac = (double)matched / (double)fe.n;
  printf("causal front end: %lld spikes, engine %lld; %.4f%% of the front end's within 1 sample on the same channel\n",
         (long long)fe.n, (long long)got.n, 100.0 * frac);
  assert_true(frac >= 0.999);
  assert_true(llabs(got.n - fe.n) <= fe.n / 1000 + 1);
  free(got.s);
}

/* KNN assignment gives the same labels for any push size, and labels from the reference set. */
static void knn_assignment(void **state) {
  (void)state;
  collected a, b;
  run_engine(n_rows / 4, 1000, SS_LIVE_KNN, &a, NULL);
  run_engine(n_rows / 4, 37, SS_LIVE_KNN, &b, NULL);
  assert_int_equal(a.n, b.n);
  int64_t same_group = 0;
  for (int64_t i = 0; i < a.n; i++) {
    assert_int_equal(a.s[i].unit, b.s[i].unit);
    assert_true(a.s[i].unit >= 0 && a.s[i].unit < N_CH / 4);
    same_group += a.s[i].unit == a.s[i].channel / 4;
  }
  /* the reference labels are the peak channel's group: the vote mostly finds it */
  printf("knn: %lld of %lld spikes labelled with their own channel group\n", (long long)same_group, (long long)a.n);
  assert_true(same_group >= a.n * 8 / 10);
  free(a.s);
  free(b.s);
}

/* The work counters: detections on the CPU (several per push that looks at spikes, none for the
 * others), no device waits, and the push durations (slow_pushes counts pushes longer than a block). */
static void work_counters(void **state) {
  (void)state;
  collected got;
  ss_live_stats st;
  run_engine(n_rows / 4, 30, SS_LIVE_CENTROID, &got, &st);
  printf("counters: %lld pushes, %lld detections, %lld longer than a block (longest %.3f ms)\n", (long long)st.blocks,
         (long long)st.detections, (long long)st.slow_pushes, 1e3 * st.max_push_s);
  assert_true(st.detections > 0);
  assert_int_equal(st.device_waits, 0);
  assert_true(st.max_push_s > 0);
  assert_true(st.slow_pushes >= 0 && st.slow_pushes <= st.blocks);
  free(got.s);
}

/* Bad options of the engine: k beyond the reference set. */
static void engine_errors(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 1, &be), SS_OK);
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  o.assign = SS_LIVE_KNN;
  o.k = model.n_ref + 1;
  ss_live_engine *e;
  assert_int_equal(ss_live_engine_open(&ctx, &be, &model, &o, &e), SS_ERR_INPUT);
  char want[256];
  snprintf(want, sizeof(want), "live: --k: expected 1 .. %lld (the model's reference spikes), got %lld",
           (long long)model.n_ref, (long long)o.k);
  assert_string_equal(ss_error_message(&ctx), want);
  ss_backend_close(&be);
}

/* --- the command line: sort → replay → live ------------------------------------------------------ */

#define CLI_DURATION 30.0
#define CLI_SOURCE "--format binary --channels 32 --rate 30000 --uv-per-step 0.195"
#define MATCH_TOLERANCE 3 /* samples between an offline spike (offset-corrected) and its live twin */
#define PATH_LEN LIVE_PATH_LEN
#define EDGE_S 0.002 /* spikes this close to a stream end may differ (their window reaches past it) */

static live_fixture fx; /* the recording, its sort and the socket */

static int cli_setup(void **state) {
  (void)state;
  return live_fixture_make(&fx, "cli", CLI_DURATION, 3, CLI_SOURCE);
}

static int cli_teardown(void **state) {
  (void)state;
  return 0;
}

/* `live LIVE_ARGS` with its stdout and stderr, while `replay REPLAY_ARGS` (if not NULL) sends. */
static int run_live(const char *replay_args, const char *live_args, char **out, char **err) {
  return live_cli_run("live", replay_args, live_args, out, err);
}

/* 2. Agreement with the offline sort: of the offline spikes (but those within EDGE_S of the ends) that
 * have a live twin — the nearest live spike within MATCH_TOLERANCE of its time + the model's causal −
 * offline offset — the fraction whose twin carries the same unit; and the fraction that has a twin at
 * all. The offline sort's template matching finds overlapping spikes that one detection covers; the
 * live engine detects without matching, so those have no twin (docs/live.md). */
typedef struct {
  double same;      /* same unit, of the partnered offline spikes */
  double partnered; /* partnered, of all offline spikes */
} agreement_figures;

static agreement_figures agreement(const char *assign) {
  char replay[16384], live[16384], *out, *err;
  snprintf(replay, sizeof(replay), "'%s' " CLI_SOURCE " --speed 0 --to 'unix-listen://%s'", fx.bin, fx.sock);
  snprintf(live, sizeof(live), "--source 'unix://%s' --model '%s' %s", fx.sock, fx.model, assign);
  int code = run_live(replay, live, &out, &err);
  if (code != 0) fail_msg("live: exit %d: %s", code, err);
  collected got;
  parse_lines(out, &got);
  char results[PATH_LEN + 16];
  snprintf(results, sizeof(results), "%s/results.h5", fx.dir);
  offline_sort off;
  offline_sort_read(results, fx.model, &off);
  const int64_t edge = (int64_t)(EDGE_S * RATE), end = (int64_t)(CLI_DURATION * RATE) - edge;
  /* the figure at a few tolerances (the asserted one: MATCH_TOLERANCE) */
  static const int tolerances[] = {1, 2, MATCH_TOLERANCE, 5, 10, 20};
  int64_t n = 0, partnered = 0, same = 0;
  for (size_t k = 0; k < sizeof(tolerances) / sizeof(tolerances[0]); k++) {
    int64_t na, m, sm;
    offline_agreement_all(&off, &got, tolerances[k], edge, end, &na, &m, &sm);
    printf(
        "within %2d samples: %lld of %lld offline spikes have a live twin, %lld (%.2f%% of all) with the same unit\n",
        tolerances[k], (long long)m, (long long)na, (long long)sm, na ? 100.0 * sm / na : 0.0);
    if (tolerances[k] == MATCH_TOLERANCE) {
      n = na;
      partnered = m;
      same = sm;
    }
  }
  agreement_figures a = {.same = partnered ? (double)same / (double)partnered : 0,
                         .partnered = n ? (double)partnered / (double)n : 0};
  int64_t extra = live_without_partner(&off, &got, MATCH_TOLERANCE);
  printf("live %s: offline sort %lld spikes, live %lld (%lld without an offline spike within %d samples); %lld offline "
         "spikes (%.2f%%) have a live twin (offset %+g samples), %.2f%% of those with the same unit\n",
         assign, (long long)n, (long long)got.n, (long long)extra, MATCH_TOLERANCE, (long long)partnered,
         100.0 * a.partnered, off.offset, 100.0 * a.same);
  offline_sort_free(&off);
  free(got.s);
  free(out);
  free(err);
  return a;
}

/* --spin and --pin change only how the threads wait: the same spikes as without them, and the pin is
 * said (or, where CPU 0 is not allowed, its refusal). */
static void parse_summary(const char *err, long long *samples, long long *spikes, long long *overruns);

static void spin_and_pin(void **state) {
  (void)state;
  static const char *modes[] = {"", " --spin --pin 0", " --spin --workers 3 --pin 0,1", " --spin --replicas 2",
                                " --spin --replicas 3 --pin 0,1"};
  enum { N_MODES = sizeof(modes) / sizeof(modes[0]) };
  char replay[16384], live[16384], *out[N_MODES], *err[N_MODES];
  collected got[N_MODES];
  snprintf(replay, sizeof(replay), "'%s' " CLI_SOURCE " --speed 0 --duration 5 --to 'unix-listen://%s'", fx.bin,
           fx.sock);
  for (int m = 0; m < N_MODES; m++) {
    snprintf(live, sizeof(live), "--source 'unix://%s' --model '%s'%s", fx.sock, fx.model, modes[m]);
    int code = run_live(replay, live, &out[m], &err[m]);
    if (code != 0) fail_msg("live%s: exit %d: %s", modes[m], code, err[m]);
    parse_lines(out[m], &got[m]);
    printf("live%s: %lld spikes\n", modes[m], (long long)got[m].n);
    assert_true(got[m].n > 0);
    assert_true(same_spikes(&got[0], &got[m]));
    if (strstr(modes[m], "--pin"))
      assert_true(strstr(err[m], "pinned to CPU 0") || strstr(err[m], "--pin:") || strstr(err[m], "not pinned"));
    if (strstr(modes[m], "--replicas")) { /* the runner's counters: every row, every spike, once */
      long long samples, spikes, overruns;
      parse_summary(err[m], &samples, &spikes, &overruns);
      assert_int_equal(samples, (long long)(5.0 * RATE));
      assert_int_equal(spikes, got[m].n);
    }
  }
  cli_runs_free(out, err, got, N_MODES);
}

/* The default assignment (nearest centroid, plain distance) must give >= 95 % of the partnered offline
 * spikes their unit, and >= 85 % of all offline spikes must have a twin; the others are printed for
 * the record (docs/live.md). */
static void agreement_with_offline_sort(void **state) {
  (void)state;
  agreement_figures a = agreement("");
  assert_true(a.same >= 0.95);
  assert_true(a.partnered >= 0.85);
  agreement("--distance masked");
  agreement("--assign knn --k 5");
}

/* The counters of the summary line ("live: done: S samples (...), B blocks, N spikes, O overruns"). */
static void parse_summary(const char *err, long long *samples, long long *spikes, long long *overruns) {
  const char *p = strstr(err, "live: done: ");
  if (!p) fail_msg("no summary in: %s", err);
  long long blocks;
  double secs;
  if (sscanf(p, "live: done: %lld samples (%lf s), %lld blocks, %lld spikes, %lld overruns", samples, &secs, &blocks,
             spikes, overruns) != 5)
    fail_msg("bad summary: %s", p);
}

static collected file_ref; /* `live --source FILE` on the whole recording */

static void live_on_file(const char *path, const char *extra, collected *c, int want_code, char **err_out) {
  char live[8192], *out, *err;
  snprintf(live, sizeof(live), "--source '%s' --raw --model '%s' %s", path, fx.model, extra); /* bare frames */
  int code = run_live(NULL, live, &out, &err);
  if (code != want_code) fail_msg("live: exit %d: %s", code, err);
  parse_lines(out, c);
  free(out);
  if (err_out) *err_out = err;
  else free(err);
}

typedef struct {
  const char *uri;
  const unsigned char *bytes;
  size_t n;
  ss_status st;
} odd_writer;

/* Send the recording in writes of odd sizes (a frame is 64 bytes). */
static void *odd_writer_main(void *arg) {
  odd_writer *w = arg;
  static const size_t sizes[] = {1, 3, 64, 7, 1001, 2, 129, 63, 4099};
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l;
  w->st = ss_link_open(&ctx, w->uri, SS_LINK_WRITE, 10.0, &l);
  if (w->st != SS_OK) return NULL;
  for (size_t off = 0, k = 0; off < w->n && w->st == SS_OK; k++) {
    size_t m = sizes[k % (sizeof(sizes) / sizeof(sizes[0]))];
    if (m > w->n - off) m = w->n - off;
    w->st = ss_link_write(&ctx, l, w->bytes + off, m);
    off += m;
  }
  ss_link_close(l);
  return NULL;
}

/* 3. The same spikes from a file, from stdin, from replay over a UNIX socket and from writes of odd
 * sizes (partial frames) over a socket; a disconnect ends with exit 0 and the summary. */
static void sources_and_partial_frames(void **state) {
  (void)state;
  live_on_file(fx.bin, "", &file_ref, 0, NULL);
  assert_true(file_ref.n > 1000);
  char live[16384], replay[16384], uri[PATH_LEN + 16], *out, *err;
  collected got;
  int code;
  for (int spin = 0; spin < 2; spin++) { /* stdin: the reader thread, then --spin's workers */
    snprintf(live, sizeof(live), "--source - --raw --model '%s' --stats-every 0.05%s < '%s'", fx.model,
             spin ? " --spin" : "", fx.bin);
    code = run_live(NULL, live, &out, &err);
    if (code != 0) fail_msg("live: exit %d: %s", code, err);
    parse_lines(out, &got);
    assert_true(same_spikes(&got, &file_ref));
    /* counter lines while it ran (it takes well over 0.05 s), then the summary */
    int periodic = 0;
    for (const char *line = err; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
      periodic += strncmp(line, "live: ", 6) == 0 && line[6] >= '0' && line[6] <= '9';
    if (periodic < 1) fail_msg("no counter line in: %s", err);
    assert_non_null(strstr(err, "live: done: "));
    free(got.s);
    free(out);
    free(err);
  }
  /* replay over a UNIX socket, 2 ms blocks at full speed; the disconnect ends the run */
  snprintf(replay, sizeof(replay), "'%s' " CLI_SOURCE " --speed 0 --block-ms 2 --to 'unix-listen://%s'", fx.bin,
           fx.sock);
  snprintf(live, sizeof(live), "--source 'unix://%s' --model '%s'", fx.sock, fx.model);
  code = run_live(replay, live, &out, &err);
  if (code != 0) fail_msg("live: exit %d: %s", code, err);
  parse_lines(out, &got);
  assert_true(same_spikes(&got, &file_ref));
  long long samples, spikes, overruns;
  parse_summary(err, &samples, &spikes, &overruns);
  assert_int_equal(samples, (long long)(CLI_DURATION * RATE));
  assert_int_equal(spikes, file_ref.n);
  free(got.s);
  free(out);
  free(err);
  /* odd write sizes */
  size_t n_bytes = (size_t)(CLI_DURATION * RATE) * N_CH * sizeof(int16_t);
  FILE *f = fopen(fx.bin, "rb");
  unsigned char *bytes = malloc(n_bytes);
  assert_true(f && fread(bytes, 1, n_bytes, f) == n_bytes);
  fclose(f);
  snprintf(uri, sizeof(uri), "unix-listen://%s", fx.sock);
  static const char *modes[] = {"", " --spin", " --spin --replicas 2"}; /* the reader thread, workers, replicas */
  for (int mode = 0; mode < 3; mode++) {
    odd_writer w = {.uri = uri, .bytes = bytes, .n = n_bytes};
    pthread_t th;
    snprintf(live, sizeof(live), "--source 'unix://%s' --raw --model '%s'%s", fx.sock, fx.model, modes[mode]);
    assert_int_equal(pthread_create(&th, NULL, odd_writer_main, &w), 0);
    code = run_live(NULL, live, &out, &err);
    pthread_join(th, NULL);
    assert_int_equal(w.st, SS_OK);
    if (code != 0) fail_msg("live%s: exit %d: %s", modes[mode], code, err);
    parse_lines(out, &got);
    assert_true(same_spikes(&got, &file_ref));
    free(got.s);
    free(out);
    free(err);
  }
  free(bytes);
}

/* A stream that ends mid-frame: every whole row is processed (the spikes of the whole rows alone),
 * the message names the partial frame, exit 1. */
static void mid_frame_end(void **state) {
  (void)state;
  const int64_t rows = 123457;
  const size_t extra = 5, frame = N_CH * sizeof(int16_t);
  char whole[PATH_LEN], cut[PATH_LEN];
  ss_test_path(whole, sizeof(whole), "whole.bin");
  ss_test_path(cut, sizeof(cut), "cut.bin");
  FILE *in = fopen(fx.bin, "rb"), *a = fopen(whole, "wb"), *b = fopen(cut, "wb");
  assert_true(in && a && b);
  unsigned char *buf = malloc((size_t)rows * frame + extra);
  assert_true(fread(buf, 1, (size_t)rows * frame + extra, in) == (size_t)rows * frame + extra);
  assert_true(fwrite(buf, 1, (size_t)rows * frame, a) == (size_t)rows * frame);
  assert_true(fwrite(buf, 1, (size_t)rows * frame + extra, b) == (size_t)rows * frame + extra);
  fclose(in);
  fclose(a);
  fclose(b);
  free(buf);
  collected want, got;
  char *err;
  live_on_file(whole, "", &want, 0, NULL);
  assert_true(want.n > 100);
  static const char *modes[] = {"", "--spin", "--spin --replicas 2"}; /* the queue, the workers, replicas */
  for (int mode = 0; mode < 3; mode++) {
    live_on_file(cut, modes[mode], &got, 1, &err);
    assert_true(same_spikes(&got, &want));
    char msg[PATH_LEN + 256];
    snprintf(msg, sizeof(msg),
             "spikestream live: %s: stream ended mid-frame: %zu of %zu bytes of a frame (%lld rows received)\n", cut,
             extra, frame, (long long)rows);
    if (!strstr(err, msg)) fail_msg("expected \"%s\" in: %s", msg, err);
    if (!strstr(err, "live: stopped: ")) fail_msg("no summary in: %s", err);
    free(err);
    free(got.s);
  }
  free(want.s);
}

/* --reconnect: a second connection is accepted after the first disconnects; counters go on. `extra`:
 * more live options (--spin: the workers open the next connection themselves). */
static void reconnect_with(const char *extra) {
  char out_path[PATH_LEN], err_path[PATH_LEN], rc_path[PATH_LEN], cmd[65536];
  ss_test_path(out_path, sizeof(out_path), "rec.out");
  ss_test_path(err_path, sizeof(err_path), "rec.err");
  ss_test_path(rc_path, sizeof(rc_path), "rec.rc");
  const double second_s = 5.0;
  snprintf(cmd, sizeof(cmd),
           "'%s' live --reconnect %s --source 'unix-listen://%s' --model '%s' >'%s' 2>'%s' & pid=$!; "
           "'%s' replay '%s' " CLI_SOURCE " --speed 0 --to 'unix://%s' 2>/dev/null && "
           "'%s' replay '%s' " CLI_SOURCE " --speed 0 --duration %g --to 'unix://%s' 2>/dev/null; "
           "sleep 2; kill -TERM $pid; wait $pid; echo $? >'%s'",
           SS_CLI_PATH, extra, fx.sock, fx.model, out_path, err_path, SS_CLI_PATH, fx.bin, fx.sock, SS_CLI_PATH, fx.bin,
           second_s, fx.sock, rc_path);
  if (system(cmd) == -1) fail_msg("cannot run %s", cmd);
  char *out = ss_test_slurp(out_path), *err = ss_test_slurp(err_path), *rc = ss_test_slurp(rc_path);
  if (atoi(rc) != 0) fail_msg("live --reconnect %s: exit %s: %s", extra, rc, err);
  collected got;
  parse_lines(out, &got);
  long long samples, spikes, overruns;
  parse_summary(err, &samples, &spikes, &overruns);
  assert_int_equal(samples, (long long)((CLI_DURATION + second_s) * RATE));
  assert_int_equal(spikes, got.n);
  /* the first stream gives the file's spikes, the second (times from 0 again) those of its 5 s */
  int64_t early = 0;
  for (int64_t i = 0; i < file_ref.n; i++) early += file_ref.s[i].t < (int64_t)((second_s - EDGE_S) * RATE);
  printf("reconnect %s: %lld spikes over two connections (%lld + about %lld)\n", extra, (long long)got.n,
         (long long)file_ref.n, (long long)early);
  assert_true(got.n >= file_ref.n + early && got.n <= file_ref.n + early + 2);
  free(got.s);
  free(out);
  free(err);
  free(rc);
}

static void reconnect(void **state) {
  (void)state;
  reconnect_with("");
  reconnect_with("--spin");
  reconnect_with("--spin --replicas 2");
}

/* 4. Replay at full speed in 1 ms blocks: the engine falls behind, overruns are counted, and every
 * spike still comes out. */
static void overruns_counted_nothing_dropped(void **state) {
  (void)state;
  char replay[16384], live[16384], *out, *err;
  snprintf(replay, sizeof(replay), "'%s' " CLI_SOURCE " --speed 0 --block-ms 1 --to 'unix-listen://%s'", fx.bin,
           fx.sock);
  snprintf(live, sizeof(live), "--source 'unix://%s' --model '%s' --block-ms 1 --format binary", fx.sock, fx.model);
  int code = run_live(replay, live, &out, &err);
  if (code != 0) fail_msg("live: exit %d: %s", code, err);
  long long samples, spikes, overruns;
  parse_summary(err, &samples, &spikes, &overruns);
  printf("%s", err);
  assert_true(overruns > 0);
  assert_int_equal(spikes, file_ref.n);
  free(out);
  free(err);
}

/* --train-seconds: a short recording replayed at real time; the model is fitted on its first
 * TRAIN_S seconds while the rest keeps arriving. Every row is accounted for (trained on, arrived while
 * fitting, or labelled), times count from the stream start, the fitted model is kept in --train-dir,
 * and the labelled spikes are those of `live --model` with that model on the same rows. */
#define TRAIN_DURATION 18.0
#define TRAIN_S 6.0
#define TRAIN_SPEED "1"
#define TRAIN_SETTLE_S 0.02 /* the engine starts its filter on the first labelled row: skip its settling */
static void train_seconds(void **state) {
  (void)state;
  char base[PATH_LEN], bin[PATH_LEN + 8], dir[PATH_LEN], model[PATH_LEN + 32], args[16384], replay[16384], live[16384],
      *out, *err;
  ss_test_path(base, sizeof(base), "train_sim");
  snprintf(bin, sizeof(bin), "%s.bin", base);
  ss_test_path(dir, sizeof(dir), "train_dir");
  snprintf(model, sizeof(model), "%s/sort/model.h5", dir);
  snprintf(args, sizeof(args),
           "simulate -o '%s' --preset easy --format binary --duration %g --units 4 --snr 15 --seed 7 -q", base,
           TRAIN_DURATION);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  free(out);
  free(err);
  snprintf(replay, sizeof(replay), "'%s' " CLI_SOURCE " --speed " TRAIN_SPEED " --to 'unix-listen://%s'", bin, fx.sock);
  snprintf(live, sizeof(live),
           "--source 'unix://%s' --train-seconds %g --channels 32 --rate 30000 --uv-per-step 0.195 "
           "--train-dir '%s'",
           fx.sock, TRAIN_S, dir);
  double t0 = ss_now();
  int code = run_live(replay, live, &out, &err);
  if (code != 0) fail_msg("live --train-seconds: exit %d: %s", code, err);
  long long trained, skipped, samples, spikes, overruns;
  double secs, fit_s;
  const char *p = strstr(err, "live: training: ");
  if (!p ||
      sscanf(p,
             "live: training: %lld samples (%lf s) fitted in %lf s; %lld samples arrived while fitting, not labelled",
             &trained, &secs, &fit_s, &skipped) != 4)
    fail_msg("no training line in: %s", err);
  if (!strstr(err, "live: done: ")) fail_msg("nothing labelled: the fit (%.1f s) outlasted the stream", fit_s);
  parse_summary(err, &samples, &spikes, &overruns);
  printf("train %g s: fitted in %.1f s, %lld samples arrived meanwhile, %lld labelled (%lld spikes); %.1f s in all\n",
         TRAIN_S, fit_s, skipped, samples, spikes, ss_now() - t0);
  assert_int_equal(trained, (long long)(TRAIN_S * RATE));
  assert_int_equal(trained + skipped + samples, (long long)(TRAIN_DURATION * RATE));
  assert_true(samples > 0); /* the fit of 6 s takes less than the 12 s of stream left at real time */
  collected got;
  parse_lines(out, &got);
  assert_int_equal(got.n, spikes);
  /* the same rows through `live --model` with the fitted model (whole file: the filter has settled) */
  collected ref;
  snprintf(live, sizeof(live), "--source '%s' --raw --model '%s'", bin, model);
  char *out2, *err2;
  if (run_live(NULL, live, &out2, &err2) != 0) fail_msg("live --model: %s", err2);
  parse_lines(out2, &ref);
  const int64_t from = trained + skipped + (int64_t)(TRAIN_SETTLE_S * RATE),
                to = (int64_t)((TRAIN_DURATION - EDGE_S) * RATE);
  int64_t want = 0, found = 0;
  for (int64_t i = 0; i < got.n; i++) assert_true(got.s[i].t >= trained + skipped);
  for (int64_t i = 0, j = 0; i < ref.n; i++) {
    if (ref.s[i].t < from || ref.s[i].t >= to) continue;
    want++;
    while (j < got.n && got.s[j].t < ref.s[i].t) j++;
    found += j < got.n && got.s[j].t == ref.s[i].t && got.s[j].unit == ref.s[i].unit;
  }
  printf("train: %lld of %lld spikes of `live --model` on the labelled rows, same time and unit\n", (long long)found,
         (long long)want);
  assert_true(want > 0 && found == want);
  free(got.s);
  free(ref.s);
  free(out);
  free(err);
  free(out2);
  free(err2);
}

/* Usage errors and the parts not built yet. */
static void cli_errors(void **state) {
  (void)state;
  static const struct {
    const char *args;
    int code;
    const char *msg;
  } cases[] = {
      {"live --model m.h5", 2, "spikestream live: --source URI is required\n"},
      {"live --source -", 2, "spikestream live: --model M (or --train-seconds S) is required\n"},
      {"live --source - --model m.h5 --format xml", 2,
       "spikestream live: --format: expected json or binary, got \"xml\"\n"},
      {"live --source - --model m.h5 --assign vote", 2,
       "spikestream live: --assign: expected centroid or knn, got \"vote\"\n"},
      {"live --source - --model m.h5 --k 0", 2,
       "spikestream live: --k: expected an integer in [1, 2147483647], got \"0\"\n"},
      {"live --source - --model m.h5 --block-ms 0", 2,
       "spikestream live: --block-ms: expected a number in (0, 60000], got \"0\"\n"},
      {"live --source - --train-seconds 60", 2,
       "spikestream live: --train-seconds needs --channels N and --rate HZ (the stream header is checked against "
       "them)\n"},
      {"live --source - --train-seconds 0 --channels 32 --rate 30000", 2,
       "spikestream live: --train-seconds: expected a number > 0, got \"0\"\n"},
      {"live --source - --model m.h5 --workers 2", 2,
       "spikestream live: --workers goes with --spin (the polling threads)\n"},
      {"live --source - --model m.h5 --spin --workers 17", 2,
       "spikestream live: --workers: expected an integer in [1, 16], got \"17\"\n"},
      {"live --source - --model m.h5 --replicas 2", 2,
       "spikestream live: --replicas goes with --spin, without --workers and --train-seconds\n"},
      {"live --source - --model m.h5 --spin --workers 2 --replicas 2", 2,
       "spikestream live: --replicas goes with --spin, without --workers and --train-seconds\n"},
      {"live --source - --model m.h5 --spin --replicas 9", 2,
       "spikestream live: --replicas: expected an integer in [1, 8], got \"9\"\n"},
      {"live --source - --model m.h5 --pin 0,1", 2,
       "spikestream live: --pin: one CPU (the engine thread); a list goes with --spin's workers\n"},
      {"live --source - --model m.h5 --spin --pin 0,x", 2,
       "spikestream live: --pin 0,x: expected at most 16 CPU numbers 0..1023 separated by commas\n"},
      {"live --source - --model m.h5 --channels 32", 2,
       "spikestream live: --channels, --rate, --uv-per-step, --probe, --params and --train-dir go with --train-seconds "
       "(a model gives them)\n"},
      /* no silent CPU fallback: checked where there is no device (gpu_test_live runs the GPU path) */
      {"live --source - --model m.h5 --device cuda", 3, "spikestream live: --device cuda: no CUDA device available ("},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (strstr(cases[i].args, "--device cuda") && ss_backend_gpu_count(NULL, 0) > 0) continue;
    char *out, *err;
    int code = ss_test_run_cli(cases[i].args, &out, &err);
    if (code != cases[i].code || strncmp(err, cases[i].msg, strlen(cases[i].msg)) != 0)
      fail_msg("%s: exit %d, stderr: %s (expected %d, %s)", cases[i].args, code, err, cases[i].code, cases[i].msg);
    free(out);
    free(err);
  }
  /* a missing model file, a missing source file: exit 1 naming the file */
  char args[2 * PATH_LEN + 128], want[2 * PATH_LEN + 128], missing[PATH_LEN], *out, *err;
  ss_test_path(missing, sizeof(missing), "missing.bin");
  snprintf(args, sizeof(args), "live --source - --model '%s'", missing);
  snprintf(want, sizeof(want), "spikestream live: %s: cannot open as an HDF5 model file\n", missing);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  if (strncmp(err, want, strlen(want)) != 0) fail_msg("stderr: %s (expected %s)", err, want);
  free(out);
  free(err);
  /* a stream shorter than the training: exit 1 naming it */
  snprintf(args, sizeof(args), "live --source '%s' --raw --train-seconds 100 --channels 32 --rate 30000 -q", fx.bin);
  snprintf(want, sizeof(want),
           "spikestream live: %s: the stream ended after %.3f s, before the 100 s of --train-seconds\n", fx.bin,
           CLI_DURATION);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  if (!strstr(err, want)) fail_msg("stderr: %s (expected %s)", err, want);
  free(out);
  free(err);
  snprintf(args, sizeof(args), "live --source '%s' --model '%s'", missing, fx.model);
  snprintf(want, sizeof(want), "spikestream live: %s: cannot open for reading: No such file or directory\n", missing);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  if (!strstr(err, want)) fail_msg("stderr: %s (expected %s)", err, want);
  free(out);
  free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exact_any_push_size),
      cmocka_unit_test(exact_other_join_size),
      cmocka_unit_test(agrees_with_causal_front_end),
      cmocka_unit_test(knn_assignment),
      cmocka_unit_test(engine_errors),
      cmocka_unit_test(work_counters),
  };
  const struct CMUnitTest cli_tests[] = {
      cmocka_unit_test(agreement_with_offline_sort),
      cmocka_unit_test(sources_and_partial_frames),
      cmocka_unit_test(mid_frame_end),
      cmocka_unit_test(reconnect),
      cmocka_unit_test(overruns_counted_nothing_dropped),
      cmocka_unit_test(train_seconds),
      cmocka_unit_test(spin_and_pin),
      cmocka_unit_test(cli_errors),
  };
  int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
  return failed + cmocka_run_group_tests(cli_tests, cli_setup, cli_teardown);
}
