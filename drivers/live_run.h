/* live_run.h — the live runner: a source link in, labelled spikes out, until the stream ends. It owns
 * the loop behind `spikestream live` (the reader thread and its queue, the polling workers, the engine
 * replicas, fitting the model from the stream's first seconds) so that the library runs live mode
 * without the command line; bench_live drives the same loop through its hooks.
 *
 * Three ways to read (docs/live.md, "The runner"):
 *  - queue (default): a reader thread reads whole frames and queues each read with its arrival time,
 *    so that arrival times are real while the engine is busy; the calling thread pushes. The queue
 *    never drops data: at SS_LIVE_RUN_QUEUE_MAX_BYTES the reader waits and the sender is held back by
 *    the socket (the engine's overrun counter shows it fell behind);
 *  - spin: N interchangeable workers (drivers/live_workers.h) poll the source without sleeping and the
 *    one that takes the turn reads and pushes; with `replicas`, R engines push every block instead
 *    (drivers/live_replicas.h). While a model is fitted (train) the stream must be buffered, so there
 *    spin keeps the reader thread and the queue, both polling;
 *  - inline: no reader thread; the calling thread reads (sleeping in read()) and pushes. */
#ifndef SS_LIVE_RUN_H
#define SS_LIVE_RUN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "core/backend.h"
#include "core/status.h"
#include "drivers/live_workers.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_LIVE_RUN_QUEUE_MAX_BYTES ((size_t)256 << 20)
#define SS_LIVE_RUN_READ_MAX_S 0.1  /* default: at most this much signal per read */
#define SS_LIVE_RUN_SPIN_WORKERS 2  /* spin: default workers (a second one stands by) */
#define SS_LIVE_RUN_RECORD_BYTES 24 /* a binary record */

/* One push, for ss_live_run_hooks.pushed. */
typedef struct {
  int64_t first_row;     /* the push's first row, counted from the start of its connection */
  int64_t n;             /* rows pushed */
  double t_read;         /* ss_now() when the read that brought them returned */
  double t_arrival;      /* the arrival time the engine was given */
  double t_start, t_end; /* ss_now() just before and just after ss_live_push */
} ss_live_run_push;

typedef struct {
  /* NULL: a push arrives when its read returned. Else the arrival time the engine is given for rows
   * whose first row is `first_row` of the connection, read at t_read (e.g. the send time of a paced
   * replay's block). Called from the thread that reads, while ss_live_run runs. */
  double (*arrival)(void *user, int64_t first_row, double t_read);
  /* NULL: nothing. Else after each push (not with replicas), from the pushing thread. */
  void (*pushed)(void *user, const ss_live_engine *e, const ss_live_run_push *p);
  /* NULL: records go to ss_live_run_opts.output. Else every spike comes here instead, and no output
   * link is opened. */
  ss_live_emit_fn emit;
  void *user;
} ss_live_run_hooks;

/* Fitting the model on the stream's first seconds (drivers/live_train.h). */
typedef struct {
  double seconds; /* > 0: train; the rows that arrive while the model is fitted are counted, not labelled */
  int n_channels; /* channels per frame (the stream header must agree, unless raw) */
  double rate_hz;
  double uv_per_step;      /* µV per int16 step */
  const char *probe_path;  /* NULL: `sort`'s default */
  const char *params_path; /* NULL: the defaults */
  const char *dir;         /* working directory, kept (NULL: a temporary one, removed) */
} ss_live_run_train;

typedef struct {
  const char *source;       /* URI (io/link.h) */
  double connect_timeout_s; /* the wait for the source and the output (<= 0: no limit) */
  double idle_timeout_s;    /* a source silent this long (from its open, or its last byte) fails (<= 0: no limit) */
  int raw;                  /* the source has no stream header (io/link.h): channels and rate are trusted */
  const char *token;        /* shared token of the source and output links (NULL: none; io/link.h) */
  size_t token_len;
  int reconnect;         /* after a disconnect wait for the next connection (the engine restarts, the
                               counters go on) until *stop */
  int64_t read_max_rows; /* rows per read at most (0: SS_LIVE_RUN_READ_MAX_S of signal) */
  /* the model: model (borrowed), else model_path (model.h5 of `sort`), else train.seconds > 0 */
  const ss_live_model *model;
  const char *model_path;
  ss_live_run_train train;
  ss_live_opts engine;
  const ss_backend *backend; /* NULL: one is opened on `device` with one CPU thread */
  ss_device_kind device;     /* the backend's, and the fit's */
  const char *output;        /* URI for the records (NULL: stdout); unused with hooks.emit */
  int binary;                /* 24-byte little-endian records instead of JSON lines */
  int spin;                  /* poll without sleeping (above) */
  int workers;               /* spin without train: polling threads (0: SS_LIVE_RUN_SPIN_WORKERS) */
  int replicas;              /* spin without train: R engines instead of workers (0: none) */
  int inline_read;           /* no reader thread: the calling thread reads and pushes (not with spin, train) */
  const int *pins;           /* NULL, or per worker / replica a CPU (queue mode: pins[0], the engine thread) */
  int n_pins;
  int realtime; /* run the calling thread SCHED_FIFO at realtime_priority (a refusal warns) */
  int realtime_priority;
  double stats_every_s;              /* seconds between counter lines on stats_out (0, and replicas: only at the end) */
  FILE *stats_out;                   /* NULL: no counter lines */
  const volatile sig_atomic_t *stop; /* NULL, or a flag (a signal handler's) that outlives the run: stop
                                        after what was received */
  ss_live_run_hooks hooks;
} ss_live_run_opts;

/* Defaults: stdout, JSON, no reconnect, a 10-s connect timeout, a 10-s idle timeout, a stream header, the engine's defaults, the CPU, the
 * queue, counters every 10 s (when stats_out is set). */
void ss_live_run_opts_defaults(ss_live_run_opts *o);

typedef struct {
  int labelled;               /* an engine ran: `stats` holds its counters */
  ss_live_stats stats;        /* the engine's (replicas: the runner's, drivers/live_replicas.h) */
  ss_live_workers_stats idle; /* spin and inline: the workers' idle gaps */
  double t_start, t_end;      /* ss_now() when the reading loop started and when it ended (after the last flush) */
  double rate_hz;
  int n_channels;
  /* train */
  int64_t train_rows;   /* rows the model was fitted on */
  int64_t skipped_rows; /* rows that arrived while it was fitted: counted, not labelled */
  double fit_s;
  int64_t n_units;
} ss_live_run_stats;

/* Run until the stream ends (flushed: SS_OK), fails (every whole row before the failure is pushed
 * and flushed, then its error), or *stop is set (what was received is pushed and flushed: SS_OK).
 * The counter lines go to stats_out: every stats_every_s and, at the end, "live: done: …" (or
 * "live: stopped: …" after a failure) and with train "live: training: …". `out` may be NULL. A reader
 * thread still waiting for its source when this returns (after a stop or a failed output) is left
 * behind, detached; it frees what it holds when it ends. */
ss_status ss_live_run(ss_ctx *ctx, const ss_live_run_opts *o, ss_live_run_stats *out);

#ifdef __cplusplus
}
#endif
#endif
