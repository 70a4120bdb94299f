/* test_live_workers.c — the live loop's hot-standby workers (drivers/live_workers.h): work runs under the
 * turn only (never two workers at once), every item is done exactly once whichever worker takes it, the
 * first failure ends every worker and is returned with its message, and the CPU-list parser's errors. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "drivers/live_workers.h"
#include "ss_test.h"

enum { ITEMS = 20000 };

typedef struct {
  atomic_int in_turn;   /* workers inside work() right now */
  atomic_int overlaps;  /* times a second worker found itself there */
  atomic_long produced; /* items "arrived" (advanced by ready(), as a source fills without the turn) */
  long consumed;        /* items done: written under the turn only */
  long fail_at;         /* fail when this many are done (0: never) */
} counter_task;

static int ready(void *user) {
  counter_task *t = user;
  long p = atomic_load(&t->produced);
  if (p < ITEMS) atomic_compare_exchange_strong(&t->produced, &p, p + 1);
  return 1;
}

static ss_status work(ss_ctx *ctx, void *user, int *done) {
  counter_task *t = user;
  if (atomic_fetch_add(&t->in_turn, 1) != 0) atomic_fetch_add(&t->overlaps, 1);
  ss_status st = SS_OK;
  while (t->consumed < atomic_load(&t->produced)) {
    t->consumed++;
    if (t->fail_at && t->consumed == t->fail_at) {
      st = ss_fail(ctx, SS_ERR_INPUT, "item %ld: bad", t->consumed);
      break;
    }
  }
  *done = t->consumed == ITEMS;
  atomic_fetch_sub(&t->in_turn, 1);
  return st;
}

static void run(int n_workers, const int *cpus, counter_task *t, ss_status *st, ss_ctx *ctx) {
  ss_backend be;
  ss_test_ctx(ctx);
  assert_int_equal(ss_backend_open(ctx, SS_DEVICE_CPU, 0, 1, &be), SS_OK);
  ss_live_task task = {ready, work, t};
  ss_live_workers_opts o = {n_workers, cpus, 1.0};
  ss_live_workers_stats stats;
  *st = ss_live_workers_run(ctx, &be, &o, &task, &stats);
  assert_true(stats.idle_gap_max_s >= 0);
  ss_backend_close(&be);
}

static void every_item_once_one_at_a_time(void **state) {
  (void)state;
  const int counts[] = {1, 2, 4};
  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    counter_task t = {0};
    ss_ctx ctx;
    ss_status st;
    run(counts[i], NULL, &t, &st, &ctx);
    assert_int_equal(st, SS_OK);
    assert_int_equal(t.consumed, ITEMS);
    assert_int_equal(atomic_load(&t.overlaps), 0);
  }
}

static void first_failure_ends_all(void **state) {
  (void)state;
  counter_task t = {.fail_at = ITEMS / 2};
  ss_ctx ctx;
  ss_status st;
  run(3, NULL, &t, &st, &ctx);
  assert_int_equal(st, SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "item 10000: bad");
  assert_int_equal(t.consumed, ITEMS / 2);
}

/* A pin the system refuses (a CPU outside the allowed set) is a warning; the work still runs. */
static void refused_pin_is_a_warning(void **state) {
  (void)state;
  const int cpus[] = {0, 1023};
  counter_task t = {0};
  ss_ctx ctx;
  ss_status st;
  run(2, cpus, &t, &st, &ctx);
  assert_int_equal(st, SS_OK);
  assert_int_equal(t.consumed, ITEMS);
}

static void cpu_lists(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int cpus[4], n = 0;
  assert_int_equal(ss_live_cpu_list_parse(&ctx, "--pin", "3", cpus, 4, &n), SS_OK);
  assert_int_equal(n, 1);
  assert_int_equal(cpus[0], 3);
  assert_int_equal(ss_live_cpu_list_parse(&ctx, "--pin", "3,7,0", cpus, 4, &n), SS_OK);
  assert_int_equal(n, 3);
  assert_int_equal(cpus[1], 7);
  const char *bad[] = {"", "x", "3,", ",3", "-1", "1,2,3,4,5", "3;4", "99999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    assert_int_equal(ss_live_cpu_list_parse(&ctx, "--pin", bad[i], cpus, 4, &n), SS_ERR_USAGE);
    char want[128];
    snprintf(want, sizeof(want), "--pin %s: expected at most 4 CPU numbers 0..1023 separated by commas", bad[i]);
    assert_string_equal(ss_error_message(&ctx), want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(every_item_once_one_at_a_time),
      cmocka_unit_test(first_failure_ends_all),
      cmocka_unit_test(refused_pin_is_a_warning),
      cmocka_unit_test(cpu_lists),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
