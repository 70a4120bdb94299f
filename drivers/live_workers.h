/* live_workers.h — interchangeable polling threads for the live loop (a hot standby).
 *
 * On a virtual machine the hypervisor stops a running virtual CPU now and then for 1–3 ms (steal time;
 * docs/live.md, "Platform stalls"). A single spinning thread that is stopped while it waits for the next
 * block leaves that block unread, and the engine is late although it has nothing to do. Here N workers
 * share one *turn*: each polls for work without the turn (`ready`) and takes it only to do the work
 * (`work`), so a worker stopped while idle holds nothing and another takes the next block. Work under the
 * turn is serialised — the source and the engine are used by one thread at a time, and the turn's mutex
 * orders their memory — so the result is the single-threaded result; only which thread ran a push
 * changes. A worker stopped while it holds the turn still delays the blocks behind it. */
#ifndef SS_LIVE_WORKERS_H
#define SS_LIVE_WORKERS_H

#include <stdint.h>

#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  /* Without the turn, from any worker at once: nonzero when there may be work (e.g. poll() on the
   * source). Must not block and must not read state that `work` changes (atomics aside); a false
   * positive is harmless: `work` is then called with nothing to do. */
  int (*ready)(void *user);
  /* With the turn: do the work that is there, without waiting for more. *done = 1 ends the run for
   * every worker; a failure ends it too (its message is in ctx). */
  ss_status (*work)(ss_ctx *ctx, void *user, int *done);
  void *user;
} ss_live_task;

/* Workers beyond this are refused: each one spins on a CPU of its own. */
#define SS_LIVE_MAX_WORKERS 16

typedef struct {
  int n_workers;   /* < 1 counts as 1; one worker may block in `work` (nobody waits for the turn) */
  const int *cpus; /* NULL, or per worker a CPU to pin it to (< 0: not pinned) */
  double stall_s;  /* a gap longer than this between two polls of an idle worker is an idle stall */
} ss_live_workers_opts;

/* What the workers saw while idle: the machine stopping a thread that ran no engine code. */
typedef struct {
  int64_t idle_stalls;   /* gaps longer than stall_s between two polls of one worker */
  double idle_gap_max_s; /* the longest */
} ss_live_workers_stats;

/* Run `task` on o->n_workers threads until it is done or fails: the caller is worker 0, workers 1..
 * are started here and joined before returning. Each worker is bound to be's device and, when cpus is
 * given, pinned (ss_live_pin; a refusal is logged as a warning, once per worker); the caller's own
 * affinity is restored afterwards. `stats` may be NULL. */
ss_status ss_live_workers_run(ss_ctx *ctx, const ss_backend *be, const ss_live_workers_opts *o,
                              const ss_live_task *task, ss_live_workers_stats *stats);

/* What every thread of a live runner (these workers, drivers/live_replicas.h) does first: `own` gets the
 * caller's logging settings, be's device is made current, and the thread is pinned to `cpu` when
 * cpu >= 0 (a refusal is a warning naming `what` and `index`; a grant is logged). A failure's message is
 * in `own`. */
ss_status ss_live_thread_setup(const ss_ctx *caller, const ss_backend *be, int cpu, const char *what, int index,
                               ss_ctx *own);

/* A comma list of CPU numbers ("3" or "3,7") for ss_live_workers_opts.cpus: at most `cap`, each
 * 0..CPU_SETSIZE-1; *n receives the count. A usage failure names `what` and the text. */
ss_status ss_live_cpu_list_parse(ss_ctx *ctx, const char *what, const char *text, int *cpus, int cap, int *n);

#ifdef __cplusplus
}
#endif
#endif
