/* test_detect.c — hand-built detection cases: spikes on non-adjacent channels at the same time,
 * weak-only components, join_size, a component straddling a chunk boundary counted once, dead
 * channels, polarity, the centre-of-mass time, masks (acceptance 4 on hand-made data) and the
 * cubic interpolation of waveforms. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "params/probe.h"
#include "stages/detect/detect.h"
#include "core/rng.h"
#include "ss_test.h"

#define C 4
#define ROWS 100

/* Four channels in a line: 0–1–2–3 (0 and 2 are not adjacent); `dead` lists a dead channel or −1. */
static void make_graph(int dead, ss_detect_graph *g) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char json[512];
  snprintf(json, sizeof(json),
           "{\"channels\": [0,1,2,3], \"positions\": [[0,0],[0,100],[0,200],[0,300]],"
           " \"adjacency\": [[0,1],[1,2],[2,3]], \"connected\": [%s,%s,%s,%s]}",
           dead == 0 ? "false" : "true", dead == 1 ? "false" : "true", dead == 2 ? "false" : "true",
           dead == 3 ? "false" : "true");
  ss_probe p;
  if (ss_probe_load_json(&ctx, json, "line.json", 1.0, &p) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(ss_detect_graph_from_probe(&ctx, &p, C, g), SS_OK);
  ss_probe_free(&p);
}

typedef struct {
  float x[ROWS * C];
  ss_detect_graph g;
  ss_thresholds th;
  ss_detect_config cfg;
  ss_spike_list out;
  ss_detect_work w;
} fixture;

/* σ = 1 everywhere: weak 2, strong 4.5; negative spikes; window 3 + 3 samples. */
static void setup(fixture *f, int dead, int join, int polarity) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  memset(f, 0, sizeof(*f));
  make_graph(dead, &f->g);
  ss_params p;
  ss_params_defaults(&p);
  p.detect.polarity = polarity;
  p.detect.weak_std = 2.0; /* the hand-built cases below are written for these thresholds */
  p.detect.strong_std = 4.5;
  float sigma[C] = {1, 1, 1, 1};
  if (dead >= 0) sigma[dead] = 0;
  assert_int_equal(ss_thresholds_from_sigma(&ctx, &p, C, sigma, &f->th), SS_OK);
  f->cfg.join_size = join;
  f->cfg.n_before = 3;
  f->cfg.n_after = 3;
  ss_spike_list_init(&ctx, &f->out, C, 6, 1);
}

static int64_t run_rows(fixture *f, int64_t own_begin, int64_t own_end) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_detect_block blk = {f->x, ROWS, 1000, 0, ROWS, own_begin, own_end};
  ss_spike_list_clear(&f->out);
  if (ss_detect_block_run(&ctx, NULL, &f->cfg, &f->g, &f->th, &blk, &f->w, &f->out) != SS_OK)
    fail_msg("%s", ss_error_message(&ctx));
  return f->out.n;
}
static int64_t run(fixture *f) { return run_rows(f, 0, ROWS); }

static void teardown(fixture *f) {
  ss_detect_graph_free(&f->g);
  ss_thresholds_free(&f->th);
  ss_spike_list_free(&f->out);
  ss_detect_work_free(&f->w);
}

static void put(fixture *f, int t, int c, float v) { f->x[t * C + c] = v; }

static void non_adjacent_same_time_two_spikes(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_NEGATIVE);
  put(f, 20, 0, -10);
  put(f, 20, 2, -10);
  assert_int_equal(run(f), 2);
  put(f, 20, 1, -3); /* a weak node on the channel between joins them */
  assert_int_equal(run(f), 1);
  assert_int_equal(f->out.peak_channel[0], 0); /* equal peaks: the first node wins */
  teardown(f);
  free(f);
}

static void weak_only_is_no_spike(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_NEGATIVE);
  for (int t = 30; t < 40; t++)
    for (int c = 0; c < C; c++) put(f, t, c, -4.4f);
  assert_int_equal(run(f), 0);
  assert_int_equal(f->w.n_owned, 1); /* a component without a strong node still counts for finality */
  assert_int_equal(f->w.comp_first[0], 30);
  assert_int_equal(f->w.comp_last[0], 39);
  put(f, 35, 3, -4.6f);
  assert_int_equal(run(f), 1);
  teardown(f);
  free(f);
}

static void join_size(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_NEGATIVE);
  put(f, 10, 1, -6);
  put(f, 12, 1, -6); /* one sample gap */
  put(f, 50, 1, -6);
  put(f, 51, 2, -6); /* adjacent channel, next sample */
  assert_int_equal(run(f), 3);
  f->cfg.join_size = 2;
  assert_int_equal(run(f), 2);
  /* the owned components' first and last node rows, and each spike's last (the live engine's rules) */
  assert_int_equal(f->w.n_owned, 2);
  assert_int_equal(f->w.comp_first[0], 10);
  assert_int_equal(f->w.comp_last[0], 12);
  assert_int_equal(f->w.comp_first[1], 50);
  assert_int_equal(f->w.comp_last[1], 51);
  assert_int_equal(f->w.n_reported, 2);
  assert_int_equal(f->w.last_row[1], 51);
  f->cfg.join_size = 0;
  assert_int_equal(run(f), 4);
  teardown(f);
  free(f);
}

/* The same data split at row 50 into two owned regions: a component over rows 48..53 is reported
 * by the first region only, and at the same time as over the whole. */
static void straddling_component_once(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_NEGATIVE);
  for (int t = 48; t <= 53; t++) put(f, t, 1, -3);
  put(f, 51, 2, -9);
  assert_int_equal(run(f), 1);
  assert_int_equal(f->w.comp_first[0], 48); /* the first node, not the spike time */
  assert_int_equal(f->w.comp_last[0], 53);
  assert_int_equal(f->w.last_row[0], 53);
  int64_t t_whole = f->out.time_samples[0];
  float frac = f->out.time_fraction[0];
  assert_int_equal(run_rows(f, 0, 50), 1);
  assert_int_equal(f->out.time_samples[0], t_whole);
  assert_true(f->out.time_fraction[0] == frac);
  assert_int_equal(run_rows(f, 50, ROWS), 0);
  assert_int_equal(f->w.n_reported, 0);
  /* starting exactly at the boundary it belongs to the second region */
  memset(f->x, 0, sizeof(f->x));
  put(f, 50, 1, -9);
  put(f, 51, 1, -3);
  assert_int_equal(run_rows(f, 0, 50), 0);
  assert_int_equal(run_rows(f, 50, ROWS), 1);
  teardown(f);
  free(f);
}

static void dead_channel_ignored(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, 1, 1, SS_POLARITY_NEGATIVE);
  put(f, 20, 1, -50);
  assert_int_equal(run(f), 0);
  put(f, 20, 0, -10);
  put(f, 20, 2, -10); /* 0 and 2 meet only through the dead channel */
  assert_int_equal(run(f), 2);
  for (int64_t i = 0; i < f->out.n; i++) assert_true(f->out.masks[i * C + 1] == 0.0f);
  teardown(f);
  free(f);
}

static void polarity(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_POSITIVE);
  put(f, 20, 0, -10);
  put(f, 60, 3, 10);
  assert_int_equal(run(f), 1);
  assert_int_equal(f->out.time_samples[0], 1060);
  assert_true(f->out.amplitude[0] == 10.0f);
  teardown(f);
  setup(f, -1, 1, SS_POLARITY_BOTH);
  put(f, 20, 0, -10);
  put(f, 60, 3, 10);
  assert_int_equal(run(f), 2);
  teardown(f);
  free(f);
}

/* time = Σ w t / Σ w with w = (value/strong)²; masks = clip((peak − weak)/(strong − weak), 0, 1). */
static void time_masks_and_amplitude(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_NEGATIVE);
  put(f, 40, 1, -9);
  put(f, 41, 1, -4.5f);
  put(f, 41, 2, -3); /* channel 2 peak 3 → mask 0.4 */
  assert_int_equal(run(f), 1);
  double w0 = 4.0, w1 = 1.0, w2 = (3 / 4.5) * (3 / 4.5);
  double tc = (40 * w0 + 41 * w1 + 41 * w2) / (w0 + w1 + w2);
  double t = f->out.time_samples[0] - 1000 + (double)f->out.time_fraction[0];
  assert_true(fabs(t - tc) < 1e-5);
  assert_int_equal(f->out.time_samples[0], 1000 + 40);
  assert_true(f->out.time_fraction[0] >= -0.5f && f->out.time_fraction[0] < 0.5f);
  assert_int_equal(f->out.peak_channel[0], 1);
  assert_true(f->out.amplitude[0] == -9.0f);
  const float *m = f->out.masks;
  assert_true(m[0] == 0.0f && m[1] == 1.0f && fabsf(m[2] - 0.4f) < 1e-6f && m[3] == 0.0f);
  /* the waveform on channel 1 is cut around the sub-sample time (window 3 + 3) */
  const float *wf = f->out.waveforms + 1 * 6;
  for (int k = 0; k < 6; k++) assert_true(fabsf(wf[k] - ss_detect_interp(f->x, ROWS, C, 1, tc - 3 + k)) < 1e-6f);
  teardown(f);
  free(f);
}

/* Acceptance 4 against a brute-force reference: on random data every component found by breadth-
 * first search with a strong node is one spike, in first-node order, whose mask is exactly 0 on the
 * channels it never touched, 1 on its peak channel and clip((peak − weak)/(strong − weak)) elsewhere. */
static int adjacent(int a, int b) { return a == b || a - b == 1 || b - a == 1; }

static void random_blocks_match_reference(void **state) {
  (void)state;
  fixture *f = malloc(sizeof(*f));
  int *comp = malloc(sizeof(int) * ROWS * C), *queue = malloc(sizeof(int) * ROWS * C);
  for (int trial = 0; trial < 30; trial++) {
    int join = trial % 3;
    setup(f, trial % 5 == 4 ? 2 : -1, join, SS_POLARITY_NEGATIVE);
    ss_rng r = ss_rng_make(99, SS_RNG_TEST, (uint64_t)trial);
    for (int i = 0; i < ROWS * C; i++) f->x[i] = (float)(2.0 * ss_rng_next_normal(&r));
    int64_t n = run(f);
    /* reference flood fill */
    for (int i = 0; i < ROWS * C; i++) comp[i] = -1;
    int64_t k = 0;
    for (int start = 0; start < ROWS * C; start++) {
      int c0 = start % C;
      if (comp[start] >= 0 || !(-f->x[start] > f->th.weak[c0])) continue;
      int head = 0, tail = 0, strong = 0;
      float peak[C] = {0, 0, 0, 0};
      queue[tail++] = start;
      comp[start] = start;
      while (head < tail) {
        int id = queue[head++], t = id / C, c = id % C;
        float v = -f->x[id];
        strong |= v > f->th.strong[c];
        if (v > peak[c]) peak[c] = v;
        for (int t2 = t - join; t2 <= t + join; t2++)
          for (int c2 = 0; c2 < C; c2++) {
            int id2 = t2 * C + c2;
            if (t2 < 0 || t2 >= ROWS || !adjacent(c, c2) || comp[id2] >= 0) continue;
            if (!(-f->x[id2] > f->th.weak[c2])) continue;
            comp[id2] = start;
            queue[tail++] = id2;
          }
      }
      if (!strong) continue;
      assert_true(k < n);
      const float *m = f->out.masks + k * C;
      for (int c = 0; c < C; c++) {
        if (peak[c] == 0) {
          assert_true(m[c] == 0.0f);
          continue;
        }
        double want = (peak[c] - f->th.weak[c]) / (f->th.strong[c] - f->th.weak[c]);
        want = want > 1 ? 1 : want;
        assert_true(fabs(m[c] - want) < 1e-6);
      }
      assert_true(m[f->out.peak_channel[k]] == 1.0f);
      k++;
    }
    assert_int_equal(k, n);
    teardown(f);
  }
  free(comp);
  free(queue);
  free(f);
}

static void interpolation(void **state) {
  (void)state;
  float x[10];
  for (int i = 0; i < 10; i++) x[i] = 3.0f * i - 7.0f;
  /* Catmull–Rom reproduces samples and straight lines */
  for (int i = 1; i < 8; i++) assert_true(fabsf(ss_detect_interp(x, 10, 1, 0, i) - x[i]) < 1e-6f);
  assert_true(fabsf(ss_detect_interp(x, 10, 1, 0, 4.25) - (3.0f * 4.25f - 7.0f)) < 1e-5f);
  /* outside the block reads 0 */
  assert_true(ss_detect_interp(x, 10, 1, 0, -3.0) == 0.0f);
}

static void config_and_errors(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  ss_detect_config cfg;
  assert_int_equal(ss_detect_config_from_params(&ctx, &p, 20000, &cfg), SS_OK);
  assert_int_equal(cfg.n_before, 10);
  assert_int_equal(cfg.n_after, 10);
  assert_int_equal(ss_detect_config_from_params(&ctx, &p, 30000, &cfg), SS_OK);
  assert_int_equal(cfg.n_before, 15);
  assert_int_equal(cfg.join_size, 1);
  p.waveform.before_ms = 0.01;
  p.waveform.after_ms = 0.01;
  assert_int_equal(ss_detect_config_from_params(&ctx, &p, 20000, &cfg), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "waveform: before_ms + after_ms = 0.02 ms is less than one sample at 20000 Hz");
  fixture *f = malloc(sizeof(*f));
  setup(f, -1, 1, SS_POLARITY_NEGATIVE);
  ss_detect_block blk = {f->x, ROWS, 0, 0, ROWS + 1, 0, ROWS};
  assert_int_equal(ss_detect_block_cpu(&ctx, &f->cfg, &f->g, &f->th, &blk, &f->w, &f->out), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "detect: search rows [0, 101) outside the block of 100 rows");
  teardown(f);
  free(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(non_adjacent_same_time_two_spikes),
      cmocka_unit_test(weak_only_is_no_spike),
      cmocka_unit_test(join_size),
      cmocka_unit_test(straddling_component_once),
      cmocka_unit_test(dead_channel_ignored),
      cmocka_unit_test(polarity),
      cmocka_unit_test(time_masks_and_amplitude),
      cmocka_unit_test(random_blocks_match_reference),
      cmocka_unit_test(interpolation),
      cmocka_unit_test(config_and_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
