/* live_replicas.c — engine replicas for the live loop (drivers/live_replicas.h): a ring of received reads,
 * one thread per replica pushing every read into its own engine, the first to finish a push emitting it. */
#define _GNU_SOURCE /* sched_getaffinity, sched_setaffinity */
#include "drivers/live_replicas.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/live_workers.h"
#include "core/log.h"

enum { SLOT_ROWS = 0, SLOT_END, SLOT_DONE, SLOT_ERROR };

typedef struct {
  int16_t *rows;
  int64_t cap, n; /* rows allocated, rows held */
  double t_arrival;
  int kind;     /* SLOT_* */
  ss_status st; /* SLOT_ERROR */
  char msg[512];
  atomic_llong first_ns; /* when the first replica started it (0: none yet) */
} slot;

/* A push's spikes, held until the push is known to be the first: each with when the engine gave it, so
 * that its latency can include the wait until it is emitted. */
typedef struct {
  ss_live_spike s;
  double t;
} held_spike;

typedef struct {
  held_spike *s;
  int64_t n, cap;
} spike_buf;

typedef struct shared shared;

typedef struct {
  shared *sh;
  int index;
  spike_buf out;
  ss_ctx ctx; /* its engine's failures */
  pthread_t thread;
} replica;

struct shared {
  const ss_live_replicas_opts *o;
  const ss_live_replica_io *io;
  ss_ctx *ctx;     /* the caller's: under the output turn (failures, io->emit) */
  ss_ctx read_ctx; /* io->read's, under the read turn (its failure travels in the slot) */
  slot *ring;
  int64_t cap;
  atomic_llong tail;                         /* reads published */
  atomic_llong cursor[SS_LIVE_MAX_REPLICAS]; /* reads each replica is done with */
  int reading_over;                          /* under the read turn: DONE or ERROR published */
  int64_t claimed;                           /* under the output turn: pushes emitted */
  pthread_mutex_t read_turn, out_turn;
  atomic_int stop;
  ss_status st;        /* the first failure, under the output turn */
  ss_live_stats stats; /* under the output turn */
};

static double now_ns(void) { return ss_now() * 1e9; }

/* A failure that ends the run (the first one is kept, with its message). */
static void fail(shared *sh, ss_status st, const char *msg) {
  pthread_mutex_lock(&sh->out_turn);
  if (sh->st == SS_OK) {
    sh->st = st;
    ss_fail(sh->ctx, st, "%s", msg);
  }
  atomic_store(&sh->stop, 1);
  pthread_mutex_unlock(&sh->out_turn);
}

static ss_status collect(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  spike_buf *b = user;
  if (b->n == b->cap) {
    int64_t cap = b->cap ? 2 * b->cap : 64;
    held_spike *p = realloc(b->s, (size_t)cap * sizeof(*p));
    if (!p) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: live replica spikes (%lld)", (long long)cap);
    b->s = p;
    b->cap = cap;
  }
  b->s[b->n++] = (held_spike){*s, ss_now()};
  return SS_OK;
}

static int64_t min_cursor(shared *sh) {
  int64_t m = INT64_MAX;
  for (int r = 0; r < sh->o->n; r++) {
    int64_t c = atomic_load(&sh->cursor[r]);
    if (c < m) m = c;
  }
  return m;
}

/* With the read turn: one read into the next free slot, published. */
static void read_one(shared *sh) {
  int64_t t = atomic_load(&sh->tail);
  if (sh->reading_over || t - min_cursor(sh) >= sh->cap) return; /* over, or the ring is full: back-pressure */
  slot *s = &sh->ring[t % sh->cap];
  const int16_t *rows = NULL;
  int64_t n = 0;
  double t_arr = 0;
  int kind = SS_LIVE_READ_ROWS;
  ss_status st = sh->io->read(&sh->read_ctx, sh->io->user, &rows, &n, &t_arr, &kind);
  if (st == SS_OK && kind == SS_LIVE_READ_ROWS && n == 0) return;
  s->kind = st != SS_OK                 ? SLOT_ERROR
            : kind == SS_LIVE_READ_END  ? SLOT_END
            : kind == SS_LIVE_READ_DONE ? SLOT_DONE
                                        : SLOT_ROWS;
  s->st = st;
  s->n = 0;
  atomic_store(&s->first_ns, 0);
  if (st != SS_OK) {
    snprintf(s->msg, sizeof(s->msg), "%s", ss_error_message(&sh->read_ctx));
    ss_ctx_clear(&sh->read_ctx);
  }
  if (s->kind == SLOT_ROWS) {
    if (n > s->cap) {
      int16_t *p = realloc(s->rows, (size_t)(n * sh->o->n_channels) * sizeof(int16_t));
      if (!p) {
        s->kind = SLOT_ERROR;
        s->st = SS_ERR_NOMEM;
        snprintf(s->msg, sizeof(s->msg), "out of memory: live replica ring (%lld rows)", (long long)n);
      } else {
        s->rows = p;
        s->cap = n;
      }
    }
    if (s->kind == SLOT_ROWS) {
      memcpy(s->rows, rows, (size_t)(n * sh->o->n_channels) * sizeof(int16_t));
      s->n = n;
      s->t_arrival = t_arr;
    }
  }
  sh->reading_over = s->kind == SLOT_DONE || s->kind == SLOT_ERROR;
  atomic_store(&sh->tail, t + 1);
}

/* The first replica to start a push counts it and its lateness (a push starts when its first replica does). */
static void first_start(shared *sh, slot *s, int64_t t_ns) {
  long long zero = 0;
  if (!atomic_compare_exchange_strong(&s->first_ns, &zero, t_ns)) return;
  double behind = (double)t_ns * 1e-9 - s->t_arrival;
  pthread_mutex_lock(&sh->out_turn);
  sh->stats.samples += s->n;
  sh->stats.blocks++;
  if (behind > sh->stats.max_behind_s) sh->stats.max_behind_s = behind;
  sh->stats.overruns += behind > (sh->o->block_s > 0 ? sh->o->block_s : (double)s->n / sh->o->rate_hz);
  pthread_mutex_unlock(&sh->out_turn);
}

/* Push c's spikes, emitted if this replica is the first to finish it (in push order: every replica
 * that finished c has emitted or dropped c − 1 before). */
static ss_status emit_first(shared *sh, replica *r, int64_t c, int new_stream) {
  ss_status st = SS_OK;
  pthread_mutex_lock(&sh->out_turn);
  if (sh->claimed == c) {
    sh->claimed = c + 1;
    sh->stats.streams += new_stream;
    const double t = ss_now();
    for (int64_t i = 0; i < r->out.n && st == SS_OK; i++) {
      ss_live_spike sp = r->out.s[i].s;
      sp.latency_us += (float)((t - r->out.s[i].t) * 1e6);
      st = sh->io->emit(sh->ctx, sh->io->user, &sp);
      sh->stats.spikes += st == SS_OK;
      ss_live_stats_add_latency(&sh->stats, sp.latency_us);
    }
    if (st != SS_OK) { /* the output failed: its message is in the caller's context already */
      if (sh->st == SS_OK) sh->st = st;
      atomic_store(&sh->stop, 1);
    }
  }
  pthread_mutex_unlock(&sh->out_turn);
  r->out.n = 0;
  return st;
}

/* Read c into this replica's engine. *over: the run is over for this replica. */
static ss_status process(shared *sh, replica *r, int64_t c, int *over) {
  slot *s = &sh->ring[c % sh->cap];
  ss_live_engine *e = sh->o->engines[r->index];
  ss_status st = SS_OK;
  if (s->kind == SLOT_ROWS) {
    int64_t t = (int64_t)now_ns();
    first_start(sh, s, t);
    st = ss_live_push(&r->ctx, e, s->rows, s->n, s->t_arrival, collect, &r->out);
  } else {
    st = ss_live_flush(&r->ctx, e, collect, &r->out); /* the spikes of the rows before the end or the error */
    if (s->kind == SLOT_END) ss_live_reset(e);
  }
  if (st != SS_OK) fail(sh, st, ss_error_message(&r->ctx));
  else st = emit_first(sh, r, c, s->kind == SLOT_END);
  *over = s->kind == SLOT_DONE || s->kind == SLOT_ERROR;
  if (s->kind == SLOT_ERROR && st == SS_OK) fail(sh, s->st, s->msg);
  return st;
}

static void run_replica(replica *r) {
  shared *sh = r->sh;
  const int cpu = sh->o->cpus ? sh->o->cpus[r->index] : -1;
  if (ss_live_thread_setup(sh->ctx, sh->o->bes[r->index], cpu, "replica", r->index, &r->ctx) != SS_OK) {
    fail(sh, r->ctx.status, ss_error_message(&r->ctx));
    return;
  }
  int64_t c = 0;
  for (int over = 0; !over && !atomic_load_explicit(&sh->stop, memory_order_relaxed);) {
    if (c < atomic_load(&sh->tail)) {
      if (process(sh, r, c, &over) != SS_OK) return;
      atomic_store(&sh->cursor[r->index], ++c);
    } else if (sh->io->readable(sh->io->user) && pthread_mutex_trylock(&sh->read_turn) == 0) {
      read_one(sh);
      pthread_mutex_unlock(&sh->read_turn);
    }
  }
}

static void *replica_main(void *arg) {
  run_replica(arg);
  return NULL;
}

/* The per-engine counters the runner does not keep: replica 0's. */
static void engine_counters(const ss_live_replicas_opts *o, ss_live_stats *s) {
  ss_live_stats e;
  ss_live_get_stats(o->engines[0], &e);
  s->graph_pushes = e.graph_pushes;
  s->detections = e.detections;
  s->device_waits = e.device_waits;
  s->slow_pushes = e.slow_pushes;
  s->max_push_s = e.max_push_s;
}

ss_status ss_live_replicas_run(ss_ctx *ctx, const ss_live_replicas_opts *o, const ss_live_replica_io *io,
                               ss_live_stats *stats) {
  if (o->n < 1 || o->n > SS_LIVE_MAX_REPLICAS)
    return ss_fail(ctx, SS_ERR_USAGE, "live replicas: %d: expected 1..%d", o->n, SS_LIVE_MAX_REPLICAS);
  shared sh = {.o = o, .io = io, .ctx = ctx, .cap = o->ring > 0 ? o->ring : SS_LIVE_REPLICA_RING, .st = SS_OK};
  sh.stats.streams = 1;
  ss_ctx_init_child(&sh.read_ctx, ctx);
  SS_TRY(SS_CALLOC(ctx, sh.ring, (size_t)sh.cap, "live replica ring"));
  atomic_init(&sh.tail, 0);
  atomic_init(&sh.stop, 0);
  for (int r = 0; r < SS_LIVE_MAX_REPLICAS; r++) atomic_init(&sh.cursor[r], r < o->n ? 0 : INT64_MAX);
  pthread_mutex_init(&sh.read_turn, NULL);
  pthread_mutex_init(&sh.out_turn, NULL);
  replica rs[SS_LIVE_MAX_REPLICAS];
  memset(rs, 0, sizeof(rs));
  cpu_set_t saved;
  int restore = o->cpus && o->cpus[0] >= 0 && sched_getaffinity(0, sizeof(saved), &saved) == 0;
  int started = 1;
  for (int r = 0; r < o->n; r++) {
    rs[r].sh = &sh;
    rs[r].index = r;
  }
  while (started < o->n && pthread_create(&rs[started].thread, NULL, replica_main, &rs[started]) == 0) started++;
  if (started < o->n) fail(&sh, SS_ERR_INTERNAL, "live replicas: cannot start a replica thread");
  else run_replica(&rs[0]);
  for (int r = 1; r < started; r++) pthread_join(rs[r].thread, NULL);
  if (restore) sched_setaffinity(0, sizeof(saved), &saved);
  for (int r = 0; r < o->n; r++) free(rs[r].out.s);
  for (int64_t i = 0; i < sh.cap; i++) free(sh.ring[i].rows);
  free(sh.ring);
  pthread_mutex_destroy(&sh.read_turn);
  pthread_mutex_destroy(&sh.out_turn);
  engine_counters(o, &sh.stats);
  if (stats) *stats = sh.stats;
  return sh.st;
}

ss_status ss_live_replica_set_open(ss_ctx *ctx, const ss_backend *be0, ss_live_engine *e0, const ss_live_model *m,
                                   const ss_live_opts *o, int n, ss_live_replica_set *set) {
  memset(set, 0, sizeof(*set));
  if (n < 1 || n > SS_LIVE_MAX_REPLICAS)
    return ss_fail(ctx, SS_ERR_USAGE, "live replicas: %d: expected 1..%d", n, SS_LIVE_MAX_REPLICAS);
  set->n = 1;
  set->bp[0] = be0;
  set->es[0] = e0;
  ss_status st = SS_OK;
  while (st == SS_OK && set->n < n) {
    ss_backend *be = &set->bes[set->n];
    st = ss_backend_open(ctx, be0->kind, be0->kind == SS_DEVICE_CUDA ? be0->gpu.index : 0, 1, be);
    if (st == SS_OK && (st = ss_live_engine_open(ctx, be, m, o, &set->es[set->n])) != SS_OK) ss_backend_close(be);
    if (st == SS_OK) set->bp[set->n] = be, set->n++;
  }
  if (st != SS_OK) ss_live_replica_set_close(set);
  return st;
}

void ss_live_replica_set_close(ss_live_replica_set *set) {
  for (int i = 1; i < set->n; i++) {
    ss_live_engine_close(set->es[i]);
    ss_backend_close(&set->bes[i]);
  }
  set->n = 1;
}
