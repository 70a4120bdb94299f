/* live_replicas.h — engine replicas for the live loop (hot-hot redundancy).
 *
 * The workers of live_workers.h keep the stream on time when the machine stops an *idle* thread; a
 * thread stopped in the middle of a push still delays every block behind it, because a push cannot
 * move to another thread. Replicas remove that case: R engines (each with its own backend, so its own
 * CUDA stream, and its own pinned thread) push every block independently. The blocks come from one
 * ring, filled by whichever replica holds a short read turn; a replica emits a push's spikes only if
 * it is the first to finish that push (the engines are deterministic, so every replica's spikes are
 * the same and the later ones are dropped), in push order. A block's processing starts when the
 * first replica starts it: the runner keeps the counters (overruns from that first start, latencies
 * of the spikes emitted). A replica the machine stops falls behind and catches up while another
 * keeps the stream on time; only all of them stopped at once delays it. docs/live.md. */
#ifndef SS_LIVE_REPLICAS_H
#define SS_LIVE_REPLICAS_H

#include <stdint.h>

#include "core/backend.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_LIVE_MAX_REPLICAS 8

typedef enum {
  SS_LIVE_READ_ROWS = 0, /* *rows / *n hold whole rows (n may be 0: nothing there yet) */
  SS_LIVE_READ_END,      /* the stream ended and another may follow (the engines restart) */
  SS_LIVE_READ_DONE      /* the stream ended and the run is over */
} ss_live_read_kind;

typedef struct {
  /* Without a turn, from any replica at once: nonzero when read() may have something to do. Must not
   * block nor read what read() changes (atomics aside). */
  int (*readable)(void *user);
  /* With the read turn: what the source holds now, without waiting for more (it may wait to open the
   * source). The rows stay valid until the next call. A failure ends the stream like DONE, after the
   * rows before it; run() then returns it. */
  ss_status (*read)(ss_ctx *ctx, void *user, const int16_t **rows, int64_t *n, double *t_arrival, int *kind);
  /* With the output turn, in push order, once per spike: from the replica that finished the push first. */
  ss_live_emit_fn emit;
  void *user;
} ss_live_replica_io;

typedef struct {
  int n;                          /* replicas, 1..SS_LIVE_MAX_REPLICAS */
  ss_live_engine *const *engines; /* one per replica, opened on the same model with the same options */
  const ss_backend *const *bes;   /* each engine's backend (bound by its replica's thread) */
  const int *cpus;                /* NULL, or per replica a CPU to pin its thread to (< 0: not pinned) */
  int n_channels;
  double rate_hz;
  double block_s; /* overrun threshold after arrival (> 0), else each read's own n / rate */
  int64_t ring;   /* reads the ring holds (0: SS_LIVE_REPLICA_RING) */
} ss_live_replicas_opts;

#define SS_LIVE_REPLICA_RING 4096

/* Engines 1..n-1 beside the caller's engine 0 (on be0), each on a backend of its own (so its own CUDA
 * stream) with the same model and options; the arrays ss_live_replicas_opts takes. */
typedef struct {
  int n;
  ss_backend bes[SS_LIVE_MAX_REPLICAS];
  const ss_backend *bp[SS_LIVE_MAX_REPLICAS];
  ss_live_engine *es[SS_LIVE_MAX_REPLICAS];
} ss_live_replica_set;
ss_status ss_live_replica_set_open(ss_ctx *ctx, const ss_backend *be0, ss_live_engine *e0, const ss_live_model *m,
                                   const ss_live_opts *o, int n, ss_live_replica_set *set);
/* Closes engines and backends 1..n-1 (engine 0 and be0 stay the caller's). */
void ss_live_replica_set_close(ss_live_replica_set *set);

/* Run until the source is done or fails. *stats: samples and blocks pushed, spikes emitted and their
 * latencies, overruns and max_behind_s from each push's first start, streams; the per-engine counters
 * (detections, device waits, slow pushes, graph pushes) are replica 0's. */
ss_status ss_live_replicas_run(ss_ctx *ctx, const ss_live_replicas_opts *o, const ss_live_replica_io *io,
                               ss_live_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
