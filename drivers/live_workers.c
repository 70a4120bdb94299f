/* live_workers.c — the hot-standby workers of the live loop (drivers/live_workers.h): N threads that poll
 * for work without a lock and do it under one turn (a mutex taken with trylock, so that no worker ever
 * sleeps on it). */
#define _GNU_SOURCE /* sched_getaffinity, sched_setaffinity */
#include "drivers/live_workers.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages/live/live.h"
#include "core/log.h"

typedef struct {
  const ss_live_task *task;
  ss_ctx *ctx; /* the caller's: used under the turn only */
  const ss_backend *be;
  double stall_s;
  pthread_mutex_t turn;
  atomic_int done;
  ss_status st;                /* the first failure (written under the turn) */
  ss_live_workers_stats stats; /* merged under the turn as workers finish */
} shared;

typedef struct {
  shared *s;
  int index, cpu;
  pthread_t thread;
} worker;

/* A failure outside `work` (binding the device, pinning): recorded under the turn like work's own. */
static void fail_under_turn(shared *s, const ss_ctx *own) {
  pthread_mutex_lock(&s->turn);
  if (s->st == SS_OK) {
    s->st = own->status;
    ss_fail(s->ctx, own->status, "%s", ss_error_message(own));
  }
  atomic_store(&s->done, 1);
  pthread_mutex_unlock(&s->turn);
}

ss_status ss_live_thread_setup(const ss_ctx *caller, const ss_backend *be, int cpu, const char *what, int index,
                               ss_ctx *own) {
  ss_ctx_init_child(own, caller);
  SS_TRY(ss_backend_bind_thread(own, be));
  if (cpu < 0) return SS_OK;
  int applied = 0;
  char why[160];
  SS_TRY(ss_live_pin(own, cpu, &applied, why, sizeof(why)));
  if (!applied) ss_log_warn(own, "live: %s %d: %s; not pinned", what, index, why);
  else ss_log_info(own, "live: %s %d is pinned to CPU %d", what, index, cpu);
  return SS_OK;
}

static int prepare(worker *w) {
  ss_ctx own;
  if (ss_live_thread_setup(w->s->ctx, w->s->be, w->cpu, "worker", w->index, &own) == SS_OK) return 1;
  fail_under_turn(w->s, &own);
  return 0;
}

/* Poll, take the turn when there is work, do it; the gaps between two polls of this worker while
 * it is idle are its idle stalls. */
static void loop(shared *s) {
  const ss_live_task *t = s->task;
  ss_live_workers_stats mine = {0, 0};
  double last = ss_now();
  while (!atomic_load_explicit(&s->done, memory_order_relaxed)) {
    int ready = t->ready(t->user);
    double now = ss_now(), gap = now - last;
    last = now;
    if (gap > mine.idle_gap_max_s) mine.idle_gap_max_s = gap;
    mine.idle_stalls += gap > s->stall_s;
    if (!ready || pthread_mutex_trylock(&s->turn) != 0) continue;
    if (!atomic_load(&s->done)) {
      int done = 0;
      ss_status st = t->work(s->ctx, t->user, &done);
      if (st != SS_OK && s->st == SS_OK) s->st = st;
      if (st != SS_OK || done) atomic_store(&s->done, 1);
    }
    pthread_mutex_unlock(&s->turn);
    last = ss_now();
  }
  pthread_mutex_lock(&s->turn);
  s->stats.idle_stalls += mine.idle_stalls;
  if (mine.idle_gap_max_s > s->stats.idle_gap_max_s) s->stats.idle_gap_max_s = mine.idle_gap_max_s;
  pthread_mutex_unlock(&s->turn);
}

static void *worker_main(void *arg) {
  worker *w = arg;
  if (prepare(w)) loop(w->s);
  return NULL;
}

ss_status ss_live_workers_run(ss_ctx *ctx, const ss_backend *be, const ss_live_workers_opts *o,
                              const ss_live_task *task, ss_live_workers_stats *stats) {
  const int n = o->n_workers < 1 ? 1 : o->n_workers;
  if (n > SS_LIVE_MAX_WORKERS)
    return ss_fail(ctx, SS_ERR_USAGE, "live workers: %d: expected at most %d", n, SS_LIVE_MAX_WORKERS);
  shared s = {.task = task, .ctx = ctx, .be = be, .stall_s = o->stall_s, .st = SS_OK};
  if (pthread_mutex_init(&s.turn, NULL) != 0) return ss_fail(ctx, SS_ERR_INTERNAL, "live workers: mutex");
  atomic_init(&s.done, 0);
  worker w[SS_LIVE_MAX_WORKERS];
  for (int i = 0; i < n; i++) w[i] = (worker){&s, i, o->cpus ? o->cpus[i] : -1, 0};
  cpu_set_t saved;
  int restore = o->cpus && o->cpus[0] >= 0 && sched_getaffinity(0, sizeof(saved), &saved) == 0;
  int started = 1;
  while (started < n && pthread_create(&w[started].thread, NULL, worker_main, &w[started]) == 0) started++;
  if (started < n) {
    pthread_mutex_lock(&s.turn);
    s.st = ss_fail(ctx, SS_ERR_INTERNAL, "live workers: cannot start worker %d of %d", started, n);
    atomic_store(&s.done, 1);
    pthread_mutex_unlock(&s.turn);
  } else {
    worker_main(&w[0]);
  }
  for (int i = 1; i < started; i++) pthread_join(w[i].thread, NULL);
  if (restore) sched_setaffinity(0, sizeof(saved), &saved);
  pthread_mutex_destroy(&s.turn);
  if (stats) *stats = s.stats;
  return s.st;
}

ss_status ss_live_cpu_list_parse(ss_ctx *ctx, const char *what, const char *text, int *cpus, int cap, int *n) {
  *n = 0;
  const char *p = text;
  for (;;) {
    char *end = NULL;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v >= CPU_SETSIZE || (*end != ',' && *end != '\0') || *n == cap)
      return ss_fail(ctx, SS_ERR_USAGE, "%s %s: expected at most %d CPU numbers 0..%d separated by commas", what, text,
                     cap, CPU_SETSIZE - 1);
    cpus[(*n)++] = (int)v;
    if (*end == '\0') return SS_OK;
    p = end + 1;
  }
}
