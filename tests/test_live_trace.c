/* test_live_trace.c — the live engine's per-push trace (ss_live_opts.trace, ss_live_last_push) and the
 * opt-in pinning (ss_live_pin), on the CPU engine with the model of a `sort` of a short simulation.
 * The CUDA phases are exercised by bench_live on the device (docs/live.md, "Latency and accounting"). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_* */
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "live_test_util.h"
#include "ss_test_sim.h"
#include "params/probe.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"
#include "core/log.h"
#include "drivers/sort.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define RATE 30000.0
#define DURATION 4.0
#define N_CH 32
#define PUSH_ROWS 30
#define SUM_TOLERANCE_S 1e-9 /* phases vs. total: the same clock readings, summed in a different order */

static ss_live_model model;
static int16_t *raw;
static int64_t n_rows;

static int group_setup(void **state) {
  (void)state;
  const ss_sim_config c = ss_test_sim_config(DURATION, RATE, 23);
  char bin[4096], dir[4096], path[4200];
  if (ss_test_simulate(PROBE, 40.0, &c, SS_SIM_FORMAT_BINARY, "trace.bin", bin, sizeof(bin), NULL)) return -1;
  ss_test_path(dir, sizeof(dir), "trace_sort");
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_sort_opts o;
  ss_sort_opts_defaults(&o);
  o.spec = ss_test_binary_spec(bin, &c, N_CH);
  o.probe_path = PROBE;
  o.out_dir = dir;
  o.device = SS_DEVICE_CPU;
  ss_sort_summary sum;
  memset(&sum, 0, sizeof(sum));
  if (ss_sort_run(&ctx, &o, &sum) != SS_OK) return fprintf(stderr, "%s\n", ss_error_message(&ctx)), -1;
  ss_sort_summary_free(&sum);
  snprintf(path, sizeof(path), "%s/model.h5", dir);
  if (ss_live_model_load(&ctx, path, &model) != SS_OK) return fprintf(stderr, "%s\n", ss_error_message(&ctx)), -1;
  raw = ss_test_read_rows(bin, N_CH, &n_rows);
  return raw && n_rows == (int64_t)(DURATION * RATE) ? 0 : -1;
}

static int group_teardown(void **state) {
  (void)state;
  free(raw);
  ss_live_model_free(&model);
  return 0;
}

/* Every push's phases add up to its processing time; the push's counts are consistent; detections
 * happen, spikes are emitted, and the emitted count of the traces is the engine's. */
static void trace_accounts_every_push(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  o.trace = 1;
  ss_live_engine *e;
  live_open_cpu(&ctx, &model, &o, &be, &e);
  collected got = {0};
  int64_t detecting = 0, emitted = 0, found = 0;
  double worst_gap = 0;
  for (int64_t r = 0; r < n_rows; r += PUSH_ROWS) {
    int64_t m = n_rows - r < PUSH_ROWS ? n_rows - r : PUSH_ROWS;
    const double t_arrival = ss_now();
    if (ss_live_push(&ctx, e, raw + r * N_CH, m, t_arrival, collect, &got) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
    ss_live_push_trace t;
    ss_live_last_push(e, &t);
    double sum = 0;
    for (int p = 0; p < SS_LIVE_PHASES; p++) {
      assert_true(t.phase_s[p] >= 0);
      sum += t.phase_s[p];
    }
    if (fabs(sum - t.total_s) > worst_gap) worst_gap = fabs(sum - t.total_s);
    assert_true(t.total_s > 0);
    assert_true(t.t_start >= t_arrival);
    assert_true(t.behind_s >= 0);
    assert_int_equal(t.rows, m);
    assert_true(t.cpu_s >= 0);
    assert_true(t.involuntary_switches >= 0 && t.voluntary_switches >= 0);
    assert_true(t.emitted <= t.found);
    assert_true(!t.detected ? t.found == 0 && t.phase_s[SS_LIVE_PH_FIND] == 0 : t.buffer_rows > 0);
    /* the CUDA-only phases stay empty on the CPU */
    assert_true(t.phase_s[SS_LIVE_PH_FLAG_WAIT] == 0 && t.phase_s[SS_LIVE_PH_COUNT_WAIT] == 0 &&
                t.phase_s[SS_LIVE_PH_TABLE_WAIT] == 0 && t.phase_s[SS_LIVE_PH_SETUP] == 0 && t.setups == 0);
    detecting += t.detected;
    emitted += t.emitted;
    found += t.found;
  }
  ss_live_stats st;
  ss_live_get_stats(e, &st);
  printf(
      "trace: %lld pushes, %lld detecting, %lld spikes found, %lld emitted (engine %lld before the flush); phases vs "
      "total at most %.2g s apart\n",
      (long long)st.blocks, (long long)detecting, (long long)found, (long long)emitted, (long long)st.spikes,
      worst_gap);
  assert_true(worst_gap <= SUM_TOLERANCE_S);
  assert_true(detecting > 0 && detecting < st.blocks);
  assert_true(emitted > 0);
  assert_int_equal(emitted, st.spikes);
  ss_live_engine_close(e);
  ss_backend_close(&be);
  free(got.s);
}

/* Without opts.trace the breakdown stays zero. */
static void trace_off_is_zero(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  ss_live_engine *e;
  live_open_cpu(&ctx, &model, &o, &be, &e);
  collected got = {0};
  for (int64_t r = 0; r < RATE / 10; r += PUSH_ROWS)
    assert_int_equal(ss_live_push(&ctx, e, raw + r * N_CH, PUSH_ROWS, ss_now(), collect, &got), SS_OK);
  ss_live_push_trace t, zero;
  memset(&zero, 0, sizeof(zero));
  ss_live_last_push(e, &t);
  assert_memory_equal(&t, &zero, sizeof(t));
  ss_live_engine_close(e);
  ss_backend_close(&be);
  free(got.s);
}

static void phase_names(void **state) {
  (void)state;
  const char *want[SS_LIVE_PHASES] = {"append", "flag_wait",  "find",  "count_wait",
                                      "label",  "table_wait", "setup", "emit"};
  for (int p = 0; p < SS_LIVE_PHASES; p++) assert_string_equal(ss_live_phase_name(p), want[p]);
  assert_string_equal(ss_live_phase_name(SS_LIVE_PHASES), "?");
  assert_string_equal(ss_live_phase_name(-1), "?");
}

/* Pinning: a CPU of the allowed set is applied (then the set is restored); a negative CPU is a usage
 * error; a CPU outside the allowed set is refused with the system's reason, SS_OK. */
static void pinning(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  cpu_set_t saved;
  assert_int_equal(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int allowed = -1, outside = -1;
  for (int c = 0; c < CPU_SETSIZE; c++) {
    if (CPU_ISSET(c, &saved) && allowed < 0) allowed = c;
    if (!CPU_ISSET(c, &saved) && outside < 0) outside = c;
  }
  assert_true(allowed >= 0);
  int applied = -1;
  char why[128] = "x";
  assert_int_equal(ss_live_pin(&ctx, allowed, &applied, why, sizeof(why)), SS_OK);
  assert_int_equal(applied, 1);
  assert_string_equal(why, "");
  assert_int_equal(sched_getcpu(), allowed);
  assert_int_equal(sched_setaffinity(0, sizeof(saved), &saved), 0);
  assert_int_equal(ss_live_pin(&ctx, -1, &applied, why, sizeof(why)), SS_ERR_USAGE);
  char want[96];
  snprintf(want, sizeof(want), "pin CPU -1: expected 0..%d", CPU_SETSIZE - 1);
  assert_string_equal(ss_error_message(&ctx), want);
  if (outside >= 0) {
    assert_int_equal(ss_live_pin(&ctx, outside, &applied, why, sizeof(why)), SS_OK);
    assert_int_equal(applied, 0);
    snprintf(want, sizeof(want), "pinning to CPU %d refused: Invalid argument", outside);
    assert_string_equal(why, want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(trace_accounts_every_push),
      cmocka_unit_test(trace_off_is_zero),
      cmocka_unit_test(phase_names),
      cmocka_unit_test(pinning),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
