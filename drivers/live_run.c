/* live_run.c — the live runner (drivers/live_run.h): the reader thread and its queue, the engine loop,
 * the polling workers and engine replicas over the source, fitting the model from the stream's first
 * seconds, and the records written to the output. */
#include "drivers/live_run.h"

#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "drivers/live_replicas.h"
#include "drivers/live_train.h"
#include "io/link.h"
#include "params/params.h"

#define CONNECT_TIMEOUT_S 10.0 /* default wait for the source and the output */
#define STATS_EVERY_S 10.0     /* default seconds between counter lines */
#define IDLE_WAIT_S 0.1        /* how often the engine loop looks at the clock while idle */
#define IDLE_TIMEOUT_S 10.0    /* default: a source silent this long is a failed input */

static const volatile sig_atomic_t never_stop = 0;

void ss_live_run_opts_defaults(ss_live_run_opts *o) {
  memset(o, 0, sizeof(*o));
  o->connect_timeout_s = CONNECT_TIMEOUT_S;
  o->idle_timeout_s = IDLE_TIMEOUT_S;
  ss_live_opts_defaults(&o->engine);
  o->device = SS_DEVICE_CPU;
  o->stats_every_s = STATS_EVERY_S;
}

/* --- the source: link options and the frame reader's header check ----------------------------- */

/* What opening the source needs; the reader thread keeps its own copy. */
typedef struct {
  char *uri;
  ss_link_opts link;
  char *token; /* link.token points here */
  ss_frame_reader_opts frames;
  int n_channels;
  int64_t read_max_rows;
} source_spec;

static ss_status source_spec_make(ss_ctx *ctx, const ss_live_run_opts *o, int trains, int n_channels, double rate_hz,
                                  int64_t read_max_rows, source_spec *s) {
  memset(s, 0, sizeof(*s));
  s->uri = strdup(o->source);
  s->token = o->token ? malloc(o->token_len ? o->token_len : 1) : NULL;
  if (!s->uri || (o->token && !s->token)) {
    free(s->uri);
    free(s->token);
    return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: live source");
  }
  if (s->token) memcpy(s->token, o->token, o->token_len);
  s->link = (ss_link_opts){.timeout_s = o->connect_timeout_s,
                           .token = s->token,
                           .token_len = o->token_len,
                           .idle_timeout_s = o->idle_timeout_s};
  s->frames = (ss_frame_reader_opts){.raw = o->raw,
                                     .rate_hz = rate_hz,
                                     .expected_by = trains ? "--channels, --rate" : "the model"};
  s->n_channels = n_channels;
  s->read_max_rows = read_max_rows;
  return SS_OK;
}

/* A deep copy (for the reader thread, which may outlive the run). */
static ss_status source_spec_copy(ss_ctx *ctx, const source_spec *from, source_spec *to) {
  *to = *from;
  to->uri = strdup(from->uri);
  to->token = from->token ? malloc(from->link.token_len ? from->link.token_len : 1) : NULL;
  if (!to->uri || (from->token && !to->token)) {
    free(to->uri);
    free(to->token);
    return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: live source");
  }
  if (to->token) memcpy(to->token, from->token, from->link.token_len);
  to->link.token = to->token;
  return SS_OK;
}

static void source_spec_free(source_spec *s) {
  free(s->uri);
  free(s->token);
}

/* Open the source (cancellable by `cancel`) and its frame reader. */
static ss_status source_open(ss_ctx *ctx, const source_spec *s, const volatile sig_atomic_t *cancel, ss_link **l,
                             ss_frame_reader **r) {
  ss_link_opts lo = s->link;
  lo.cancel = cancel;
  *r = NULL;
  SS_TRY(ss_link_open_with(ctx, s->uri, SS_LINK_READ, &lo, l));
  ss_status st = ss_frame_reader_open_opts(ctx, *l, s->n_channels, s->read_max_rows, &s->frames, r);
  if (st != SS_OK) {
    ss_link_close(*l);
    *l = NULL;
  }
  return st;
}

/* --- the queue between the reader thread and the engine ----------------------------------------- */

typedef enum { ITEM_ROWS, ITEM_END, ITEM_ERROR } item_kind;

typedef struct item {
  struct item *next;
  item_kind kind;
  int64_t n, first_row;
  double t_read, t_arrival;
  ss_status st;   /* ITEM_ERROR */
  char *msg;      /* ITEM_ERROR */
  int16_t rows[]; /* ITEM_ROWS */
} item;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  item *head, *tail;
  size_t bytes;
  int refs;        /* the runner and the reader thread: the last one to let go frees the queue */
  int abandoned;   /* the runner returned without the reader's end: what the reader reads is dropped */
  int reader_done; /* the engine loop took the reader's last item */
  /* the reader's side: copies, so that a reader left behind needs nothing of the caller's */
  source_spec src;
  ss_ctx log; /* the caller's logging settings (refused connections are logged) */
  int spin, reconnect, n_channels;
  const volatile sig_atomic_t *stop;
  ss_live_run_hooks hooks;
} queue;

static void free_items(item *it) {
  while (it) {
    item *next = it->next;
    free(it->msg);
    free(it);
    it = next;
  }
}

static void queue_release(queue *q) {
  pthread_mutex_lock(&q->mu);
  int last = --q->refs == 0;
  pthread_mutex_unlock(&q->mu);
  if (!last) return;
  free_items(q->head);
  source_spec_free(&q->src);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
  free(q);
}

/* Queue an item (a row item gets its arrival time here, while the runner is there to answer), waiting
 * while the queue is full. 0: the queue was abandoned and the item dropped. */
static int queue_put(queue *q, item *it, size_t bytes) {
  pthread_mutex_lock(&q->mu);
  if (!q->abandoned && it->kind == ITEM_ROWS)
    it->t_arrival = q->hooks.arrival ? q->hooks.arrival(q->hooks.user, it->first_row, it->t_read) : it->t_read;
  while (!q->abandoned && q->bytes > 0 && q->bytes + bytes > SS_LIVE_RUN_QUEUE_MAX_BYTES)
    pthread_cond_wait(&q->cv, &q->mu);
  int kept = !q->abandoned;
  if (kept) {
    it->next = NULL;
    if (q->tail) q->tail->next = it;
    else q->head = it;
    q->tail = it;
    q->bytes += bytes;
    pthread_cond_broadcast(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  if (!kept) free_items(it);
  return kept;
}

/* The next item, or NULL after waiting `wait_s` for one (0: no wait, as spin polls). */
static item *queue_get(queue *q, double wait_s) {
  pthread_mutex_lock(&q->mu);
  if (!q->head && wait_s > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t = ts.tv_sec + ts.tv_nsec * 1e-9 + wait_s;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&q->cv, &q->mu, &ts);
  }
  item *it = q->head;
  if (it) {
    q->head = it->next;
    if (!q->head) q->tail = NULL;
    q->bytes -= it->kind == ITEM_ROWS ? (size_t)it->n * q->n_channels * sizeof(int16_t) : 0;
    pthread_cond_broadcast(&q->cv);
  }
  pthread_mutex_unlock(&q->mu);
  return it;
}

static int put_status(queue *q, item_kind kind, ss_status st, const char *msg) {
  item *it = calloc(1, sizeof(*it));
  if (!it) abort(); /* a few bytes: nothing sensible is left to do */
  it->kind = kind;
  it->st = st;
  it->msg = msg ? strdup(msg) : NULL;
  return queue_put(q, it, 0);
}

/* spin: poll the source without sleeping until a read will not block, a stop is requested, or the source
 * has been silent for its idle timeout (the read then reports it). */
static void spin_until_readable(const queue *q, const ss_link *l, const ss_frame_reader *r) {
  struct pollfd pfd = {.fd = ss_link_fd(l), .events = POLLIN};
  const double idle_due = ss_link_idle_deadline(l);
  while (!ss_frame_reader_buffered(r) && !*q->stop && poll(&pfd, 1, 0) == 0 && ss_now() < idle_due) {
  }
}

/* Read one connection to its end: rows are queued as they come. */
static ss_status read_stream(ss_ctx *ctx, queue *q) {
  ss_link *l = NULL;
  ss_frame_reader *r = NULL;
  SS_TRY(source_open(ctx, &q->src, NULL, &l, &r));
  ss_status st = SS_OK;
  int64_t first = 0;
  for (;;) {
    const int16_t *rows;
    int64_t n = 0;
    double t;
    if (st == SS_OK && q->spin) spin_until_readable(q, l, r);
    if (st == SS_OK) st = ss_frame_reader_next(ctx, r, &rows, &n, &t);
    if (st != SS_OK || n == 0) break;
    size_t bytes = (size_t)n * q->n_channels * sizeof(int16_t);
    item *it = malloc(sizeof(item) + bytes);
    if (!it) {
      st = ss_fail(ctx, SS_ERR_NOMEM, "out of memory: live queue (%zu bytes)", bytes);
      break;
    }
    *it = (item){.kind = ITEM_ROWS, .n = n, .first_row = first, .t_read = t};
    memcpy(it->rows, rows, bytes);
    first += n;
    if (!queue_put(q, it, bytes)) break;
  }
  ss_frame_reader_close(r);
  ss_link_close(l);
  return st;
}

static void *reader_main(void *arg) {
  queue *q = arg;
  ss_ctx ctx;
  ss_ctx_init_child(&ctx, &q->log);
  for (;;) {
    ss_status st = read_stream(&ctx, q);
    if (st != SS_OK) {
      put_status(q, ITEM_ERROR, st, ss_error_message(&ctx));
      break;
    }
    if (!put_status(q, ITEM_END, SS_OK, NULL) || !q->reconnect) break;
  }
  queue_release(q);
  return NULL;
}

static ss_status reader_start(ss_ctx *ctx, const ss_live_run_opts *o, const volatile sig_atomic_t *stop,
                              const source_spec *src, queue **out, pthread_t *th, int *started) {
  queue *q = calloc(1, sizeof(*q));
  if (!q) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: live queue");
  if (source_spec_copy(ctx, src, &q->src) != SS_OK) {
    free(q);
    return ctx->status;
  }
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->cv, NULL);
  q->refs = 2;
  ss_ctx_init_child(&q->log, ctx);
  q->spin = o->spin;
  q->reconnect = o->reconnect;
  q->n_channels = src->n_channels;
  q->stop = stop;
  q->hooks = o->hooks;
  *out = q;
  *started = pthread_create(th, NULL, reader_main, q) == 0;
  if (*started) return SS_OK;
  q->refs = 1;
  return ss_fail(ctx, SS_ERR_INTERNAL, "live: cannot start the reader thread");
}

/* The reader has finished when the loop saw its end or its error: joined. Otherwise (a stop, a failed
 * output) it may wait on the source: left behind, detached, its reads dropped. */
static void reader_finish(queue *q, pthread_t th) {
  pthread_mutex_lock(&q->mu);
  int done = q->reader_done;
  if (!done) q->abandoned = 1;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  if (done) pthread_join(th, NULL);
  else pthread_detach(th);
  queue_release(q);
}

/* --- output ------------------------------------------------------------------------------------- */

typedef struct {
  ss_link *out;
  int binary;
  int64_t t_offset; /* rows of the current connection before the engine's first (train) */
  ss_live_emit_fn emit;
  void *user;
} sink;

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static ss_status write_spike(ss_ctx *ctx, void *user, const ss_live_spike *spike) {
  sink *k = user;
  ss_live_spike shifted = *spike, *s = &shifted;
  shifted.t += k->t_offset;
  if (k->emit) return k->emit(ctx, k->user, s);
  if (k->binary) {
    unsigned char rec[SS_LIVE_RUN_RECORD_BYTES];
    uint32_t amp, lat;
    memcpy(&amp, &s->amp, 4);
    memcpy(&lat, &s->latency_us, 4);
    put_le(rec, (uint64_t)s->t, 8);
    put_le(rec + 8, (uint32_t)s->unit, 4);
    put_le(rec + 12, (uint32_t)s->channel, 4);
    put_le(rec + 16, amp, 4);
    put_le(rec + 20, lat, 4);
    return ss_link_write(ctx, k->out, rec, sizeof(rec));
  }
  char line[256];
  int len = snprintf(line, sizeof(line),
                     "{\"t\": %lld, \"unit\": %d, \"amp\": %.2f, \"channel\": %d, \"latency_us\": %.1f}\n",
                     (long long)s->t, (int)s->unit, (double)s->amp, (int)s->channel, (double)s->latency_us);
  return ss_link_write(ctx, k->out, line, (size_t)len);
}

/* --- the engine loop ---------------------------------------------------------------------------- */

typedef struct {
  const ss_live_run_opts *o;
  const volatile sig_atomic_t *stop;
  int n_channels;
  double rate_hz;
  int64_t read_max_rows;
  source_spec src;
  ss_live_engine *e;
  sink k;
} runner;

static void print_stats(const runner *run, const char *label) {
  ss_live_stats s;
  ss_live_get_stats(run->e, &s);
  ss_live_stats_print(run->o->stats_out, label, &s, run->rate_hz);
}

/* The counters every stats_every_s. */
static void stats_tick(const runner *run, double *next_stats) {
  double now = ss_now();
  if (now < *next_stats) return;
  print_stats(run, "live");
  while (*next_stats <= now) *next_stats += run->o->stats_every_s;
}

static double first_stats(const runner *run) {
  return run->o->stats_out && run->o->stats_every_s > 0 ? ss_now() + run->o->stats_every_s : INFINITY;
}

static double arrival_of(const runner *run, int64_t first_row, double t_read) {
  const ss_live_run_hooks *h = &run->o->hooks;
  return h->arrival ? h->arrival(h->user, first_row, t_read) : t_read;
}

static ss_status push_rows(ss_ctx *ctx, runner *run, const int16_t *rows, int64_t n, int64_t first_row, double t_read,
                           double t_arrival) {
  const ss_live_run_hooks *h = &run->o->hooks;
  if (!h->pushed) return ss_live_push(ctx, run->e, rows, n, t_arrival, write_spike, &run->k);
  ss_live_run_push p = {first_row, n, t_read, t_arrival, ss_now(), 0};
  SS_TRY(ss_live_push(ctx, run->e, rows, n, t_arrival, write_spike, &run->k));
  p.t_end = ss_now();
  h->pushed(h->user, run->e, &p);
  return SS_OK;
}

/* The source ended: flush; *over = 1 unless reconnect, which resets the engine for the next
 * connection (the filter state restarts, the counters go on). */
static ss_status stream_ended(ss_ctx *ctx, runner *run, int *over) {
  SS_TRY(ss_live_flush(ctx, run->e, write_spike, &run->k));
  *over = !run->o->reconnect;
  if (*over) return SS_OK;
  ss_log_info(ctx, "live: the source disconnected; waiting for the next connection");
  ss_live_reset(run->e);
  run->k.t_offset = 0;
  return SS_OK;
}

/* The source failed (e.g. it ended mid-frame): the whole rows before were pushed; report every
 * pending spike, then the failure `msg`. */
static ss_status stream_failed(ss_ctx *ctx, runner *run, ss_status st, const char *msg) {
  SS_TRY(ss_live_flush(ctx, run->e, write_spike, &run->k));
  return ss_fail(ctx, st, "%s", msg ? msg : ss_strerror(st));
}

/* Push queued blocks until the stream ends (or, with reconnect, a stop). */
static ss_status engine_loop(ss_ctx *ctx, runner *run, queue *q) {
  double next_stats = first_stats(run);
  for (;;) {
    /* a stop request still processes what was already received */
    item *it = queue_get(q, *run->stop || run->o->spin ? 0 : IDLE_WAIT_S);
    if (!it && *run->stop) return ss_live_flush(ctx, run->e, write_spike, &run->k);
    ss_status st = SS_OK;
    if (it && it->kind == ITEM_ROWS) {
      st = push_rows(ctx, run, it->rows, it->n, it->first_row, it->t_read, it->t_arrival);
    } else if (it && it->kind == ITEM_END) {
      int over = 0;
      st = stream_ended(ctx, run, &over);
      if (st == SS_OK && over) {
        q->reader_done = 1;
        free(it);
        return SS_OK;
      }
    } else if (it) {
      q->reader_done = 1;
      st = stream_failed(ctx, run, it->st, it->msg);
      free(it->msg);
    }
    free(it);
    if (st != SS_OK) return st;
    stats_tick(run, &next_stats);
  }
}

/* --- spin and inline: the workers' task (drivers/live_workers.h); the source and the engine are used
 * under the turn ---------------------------------------------------------------------------------- */

typedef struct {
  runner *run;
  double next_stats;
  ss_link *l;
  ss_frame_reader *rd;
  int64_t rows;           /* rows of the current connection read so far */
  atomic_int fd;          /* the source's descriptor for the idle polls; -1 while none is open */
  atomic_llong stats_due; /* next_stats in ns, for the idle polls (a silent source still gets its lines) */
  atomic_llong idle_due;  /* when the open source will have been silent for its idle timeout, in ns */
} spin_loop;

static long long due_ns(double t) { return isfinite(t) ? (long long)(t * 1e9) : LLONG_MAX; }

static int readable(int fd) {
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  return poll(&pfd, 1, 0) != 0;
}

/* Without the turn: a block may be there, the source must be opened, a stop was requested, or the
 * counters are due (inline: always; the worker then sleeps in read()). */
static int spin_ready(void *user) {
  spin_loop *p = user;
  int fd = atomic_load(&p->fd);
  long long now = (long long)(ss_now() * 1e9);
  return p->run->o->inline_read || fd < 0 || *p->run->stop || readable(fd) || now >= atomic_load(&p->stats_due) ||
         now >= atomic_load(&p->idle_due);
}

static void spin_close(spin_loop *p) {
  atomic_store(&p->fd, -1);
  atomic_store(&p->idle_due, LLONG_MAX);
  ss_frame_reader_close(p->rd);
  ss_link_close(p->l);
  p->rd = NULL;
  p->l = NULL;
}

/* A stop request while waiting for the source ends the wait (the turn is held meanwhile) without a
 * failure: the source stays closed and the caller's next turn sees the request. */
static ss_status spin_open(ss_ctx *ctx, spin_loop *p) {
  const runner *run = p->run;
  ss_status st = source_open(ctx, &run->src, run->stop, &p->l, &p->rd);
  if (st != SS_OK && !*run->stop) return st;
  if (st != SS_OK) {
    ss_ctx_clear(ctx);
    return SS_OK;
  }
  p->rows = 0;
  atomic_store(&p->idle_due, due_ns(ss_link_idle_deadline(p->l)));
  atomic_store(&p->fd, ss_link_fd(p->l));
  return SS_OK;
}

/* Nothing to read: a failure once the source has been silent for its idle timeout. */
static ss_status spin_idle(ss_ctx *ctx, spin_loop *p) {
  if (ss_link_idle_check(ctx, p->l) == SS_OK) return SS_OK;
  spin_close(p);
  return ctx->status;
}

/* With the turn: open the source, or push what it holds (nothing when another worker took it). */
static ss_status spin_work(ss_ctx *ctx, void *user, int *done) {
  spin_loop *p = user;
  runner *run = p->run;
  if (*run->stop) {
    *done = 1;
    return ss_live_flush(ctx, run->e, write_spike, &run->k);
  }
  if (!p->l) return spin_open(ctx, p);
  if (run->o->inline_read || ss_frame_reader_buffered(p->rd) || readable(atomic_load(&p->fd))) {
    do {
      const int16_t *rows;
      int64_t n = 0;
      double t;
      ss_status st = ss_frame_reader_next(ctx, p->rd, &rows, &n, &t);
      if (st != SS_OK) {
        char msg[SS_CTX_MSG_MAX];
        snprintf(msg, sizeof(msg), "%s", ss_error_message(ctx));
        spin_close(p);
        return stream_failed(ctx, run, st, msg);
      }
      if (n == 0) {
        spin_close(p);
        return stream_ended(ctx, run, done);
      }
      SS_TRY(push_rows(ctx, run, rows, n, p->rows, t, arrival_of(run, p->rows, t)));
      p->rows += n;
    } while (ss_frame_reader_buffered(p->rd));
    atomic_store(&p->idle_due, due_ns(ss_link_idle_deadline(p->l)));
  } else {
    ss_status st = spin_idle(ctx, p);
    if (st != SS_OK) {
      char msg[SS_CTX_MSG_MAX];
      snprintf(msg, sizeof(msg), "%s", ss_error_message(ctx));
      return stream_failed(ctx, run, st, msg);
    }
  }
  stats_tick(run, &p->next_stats);
  atomic_store(&p->stats_due, due_ns(p->next_stats));
  return SS_OK;
}

static ss_status spin_run(ss_ctx *ctx, runner *run, const ss_backend *be, ss_live_workers_stats *idle) {
  const ss_live_run_opts *o = run->o;
  spin_loop p = {.run = run, .next_stats = first_stats(run)};
  atomic_init(&p.fd, -1);
  atomic_init(&p.stats_due, due_ns(p.next_stats));
  atomic_init(&p.idle_due, LLONG_MAX);
  ss_live_task task = {spin_ready, spin_work, &p};
  int n = o->inline_read ? 1 : o->workers > 0 ? o->workers : SS_LIVE_RUN_SPIN_WORKERS;
  ss_live_workers_opts wo = {n, o->n_pins ? o->pins : NULL, o->engine.block_s > 0 ? o->engine.block_s : INFINITY};
  ss_status st = ss_live_workers_run(ctx, be, &wo, &task, idle);
  spin_close(&p);
  return st;
}

/* --- replicas: R engines push every block (drivers/live_replicas.h) from spin_loop's source ------- */

static ss_status replica_read(ss_ctx *ctx, void *user, const int16_t **rows, int64_t *n, double *t, int *kind) {
  spin_loop *p = user;
  const runner *run = p->run;
  *n = 0;
  *kind = SS_LIVE_READ_ROWS;
  if (*run->stop) {
    *kind = SS_LIVE_READ_DONE;
    return SS_OK;
  }
  if (!p->l) return spin_open(ctx, p);
  if (!ss_frame_reader_buffered(p->rd) && !readable(atomic_load(&p->fd))) return spin_idle(ctx, p);
  double t_read;
  ss_status st = ss_frame_reader_next(ctx, p->rd, rows, n, &t_read);
  if (st == SS_OK && *n > 0) {
    *t = arrival_of(run, p->rows, t_read);
    p->rows += *n;
    atomic_store(&p->idle_due, due_ns(ss_link_idle_deadline(p->l)));
    return SS_OK;
  }
  spin_close(p); /* the end of the stream, or its failure (the whole rows before were delivered) */
  if (st != SS_OK) return st;
  *kind = run->o->reconnect ? SS_LIVE_READ_END : SS_LIVE_READ_DONE;
  if (run->o->reconnect) ss_log_info(ctx, "live: the source disconnected; waiting for the next connection");
  return SS_OK;
}

static ss_status replica_emit(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  return write_spike(ctx, &((spin_loop *)user)->run->k, s);
}

/* Engines 1..R-1 beside the runner's engine 0, the run, the engines closed. */
static ss_status replicas_run(ss_ctx *ctx, runner *run, const ss_backend *be0, const ss_live_model *m,
                              ss_live_stats *stats) {
  const ss_live_run_opts *o = run->o;
  ss_live_replica_set set;
  SS_TRY(ss_live_replica_set_open(ctx, be0, run->e, m, &o->engine, o->replicas, &set));
  spin_loop p = {.run = run, .next_stats = INFINITY};
  atomic_init(&p.fd, -1);
  atomic_init(&p.stats_due, LLONG_MAX);
  atomic_init(&p.idle_due, LLONG_MAX);
  ss_live_replica_io io = {spin_ready, replica_read, replica_emit, &p};
  ss_live_replicas_opts ro = {
      set.n, set.es, set.bp, o->n_pins ? o->pins : NULL, m->n_channels, m->rate_hz, o->engine.block_s, 0};
  ss_status st = ss_live_replicas_run(ctx, &ro, &io, stats);
  spin_close(&p);
  ss_live_replica_set_close(&set);
  return st;
}

/* --- train: the model fitted on the stream's first seconds ----------------------------------------- */

typedef struct {
  int64_t conn_rows; /* rows of the current connection before the engine's first */
  int ended;         /* the stream ended (or a stop was requested) before labelling began */
} train_state;

/* The first seconds of the stream go to train.bin; an end or an error of the stream before that
 * is an error (the first connection must carry them). */
static ss_status buffer_training(ss_ctx *ctx, const runner *run, queue *q, ss_live_trainer *tr, ss_live_run_stats *r,
                                 train_state *ts) {
  const ss_live_run_train *t = &run->o->train;
  const int64_t need = (int64_t)llround(t->seconds * t->rate_hz);
  ss_log_info(ctx, "live: buffering the stream's first %g s (%lld rows) to fit the model", t->seconds, (long long)need);
  while (r->train_rows < need) {
    item *it = queue_get(q, IDLE_WAIT_S);
    if (!it && *run->stop)
      return ss_fail(ctx, SS_ERR_INPUT, "--train-seconds %g: stopped after %.3f s of training data", t->seconds,
                     (double)r->train_rows / t->rate_hz);
    if (!it) continue;
    ss_status st = SS_OK;
    if (it->kind == ITEM_ROWS) {
      int64_t take = it->n < need - r->train_rows ? it->n : need - r->train_rows;
      st = ss_live_train_append(ctx, tr, it->rows, take);
      r->train_rows += take;
      r->skipped_rows += it->n - take;
      ts->conn_rows += it->n;
    } else {
      q->reader_done = it->kind == ITEM_ERROR || !run->o->reconnect;
      st = it->kind == ITEM_ERROR
               ? ss_fail(ctx, it->st, "%s", it->msg ? it->msg : ss_strerror(it->st))
               : ss_fail(ctx, SS_ERR_INPUT, "%s: the stream ended after %.3f s, before the %g s of --train-seconds",
                         run->o->source, (double)r->train_rows / t->rate_hz, t->seconds);
      free(it->msg);
    }
    free(it);
    SS_TRY(st);
  }
  return SS_OK;
}

/* While the model is fitted: count what arrives. An end of the stream (without reconnect) or a stop
 * request leaves nothing to label; a stream error is returned once the fit is over. */
static ss_status wait_for_fit(ss_ctx *ctx, const runner *run, queue *q, ss_live_trainer *tr, ss_live_run_stats *r,
                              train_state *ts) {
  ss_status err = SS_OK;
  char *msg = NULL;
  while (!ss_live_train_done(tr)) {
    item *it = queue_get(q, IDLE_WAIT_S);
    if (!it) continue;
    if (it->kind == ITEM_ROWS) {
      r->skipped_rows += it->n;
      ts->conn_rows += it->n;
    } else if (it->kind == ITEM_END) {
      ts->conn_rows = 0; /* a new connection's clock starts at 0 */
      if (!run->o->reconnect) ts->ended = q->reader_done = 1;
    } else if (err == SS_OK) {
      err = it->st;
      msg = it->msg;
      it->msg = NULL;
      q->reader_done = 1;
    }
    if (it->kind == ITEM_ERROR) free(it->msg);
    free(it);
  }
  if (*run->stop) ts->ended = 1;
  if (err != SS_OK) {
    ss_fail(ctx, err, "%s", msg ? msg : ss_strerror(err));
    free(msg);
  }
  return err;
}

static ss_status train(ss_ctx *ctx, const runner *run, queue *q, ss_live_trainer **tr, ss_live_model *m,
                       ss_live_run_stats *r, train_state *ts) {
  const ss_live_run_train *t = &run->o->train;
  ss_live_train_opts o = {.n_channels = t->n_channels,
                          .rate_hz = t->rate_hz,
                          .uv_per_step = t->uv_per_step,
                          .probe_path = t->probe_path,
                          .dir = t->dir,
                          .device = run->o->device};
  ss_params_defaults(&o.params);
  if (t->params_path) SS_TRY(ss_params_load_file(ctx, t->params_path, &o.params));
  SS_TRY(ss_params_validate(ctx, &o.params));
  SS_TRY(ss_live_train_begin(ctx, &o, tr));
  SS_TRY(buffer_training(ctx, run, q, *tr, r, ts));
  SS_TRY(ss_live_train_start(ctx, *tr));
  ss_log_info(ctx, "live: fitting the model on %.1f s in the background (--device %s)",
              (double)r->train_rows / t->rate_hz, ss_device_kind_name(run->o->device));
  ss_status st = wait_for_fit(ctx, run, q, *tr, r, ts);
  ss_ctx fctx = *ctx; /* the stream's error, if any, wins over the fit's */
  ss_ctx_clear(&fctx);
  ss_status fst = ss_live_train_finish(&fctx, *tr, m, &r->fit_s, &r->n_units);
  if (st != SS_OK) return st;
  if (fst != SS_OK) return ss_fail(ctx, fst, "%s", ss_error_message(&fctx));
  ss_log_info(ctx, "live: model fitted in %.1f s (%lld units, noise included; %s)", r->fit_s, (long long)r->n_units,
              t->dir ? ss_live_train_model_path(*tr) : "temporary");
  return SS_OK;
}

/* --- the run ------------------------------------------------------------------------------------- */

/* pins: the calling thread runs the engine loop; a refusal is a warning, not an error. */
static ss_status pin(ss_ctx *ctx, int cpu) {
  int applied = 0;
  char why[128];
  SS_TRY(ss_live_pin(ctx, cpu, &applied, why, sizeof(why)));
  if (applied) ss_log_info(ctx, "live: the engine thread is pinned to CPU %d", cpu);
  else ss_log_warn(ctx, "live: --pin: %s; not pinned", why);
  return SS_OK;
}

/* realtime: the calling thread runs the engine loop; a refusal is a warning, not an error. */
static ss_status realtime(ss_ctx *ctx, int priority) {
  int applied = 0;
  char why[128];
  SS_TRY(ss_live_realtime(ctx, priority, &applied, why, sizeof(why)));
  if (applied) ss_log_info(ctx, "live: the engine thread runs SCHED_FIFO");
  else ss_log_warn(ctx, "live: --realtime: %s; normal scheduling", why);
  return SS_OK;
}

static ss_status check_opts(ss_ctx *ctx, const ss_live_run_opts *o) {
  const int trains = o->train.seconds > 0;
  if (!o->source) return ss_fail(ctx, SS_ERR_USAGE, "live: no source");
  if (!trains && !o->model && !o->model_path) return ss_fail(ctx, SS_ERR_USAGE, "live: no model");
  if (trains && (o->train.n_channels <= 0 || !(o->train.rate_hz > 0)))
    return ss_fail(ctx, SS_ERR_USAGE, "live: training needs the stream's channels and rate");
  if (o->replicas && (!o->spin || trains || o->inline_read))
    return ss_fail(ctx, SS_ERR_USAGE, "live: replicas go with spin, without training and inline reads");
  if (o->inline_read && (o->spin || trains))
    return ss_fail(ctx, SS_ERR_USAGE, "live: inline reads go without spin and training");
  /* a listener reachable from other machines without a token is refused before anything listens */
  SS_TRY(ss_link_check(ctx, o->source, SS_LINK_READ, o->token != NULL));
  if (!o->hooks.emit && o->output) SS_TRY(ss_link_check(ctx, o->output, SS_LINK_WRITE, o->token != NULL));
  return SS_OK;
}

/* Push until the stream ends: the replicas, the workers (spin, inline) or the queue's engine loop. */
static ss_status run_loop(ss_ctx *ctx, runner *run, const ss_backend *be, const ss_live_model *m, queue *q, int workers,
                          ss_live_run_stats *out) {
  if (run->o->replicas) return replicas_run(ctx, run, be, m, &out->stats);
  if (workers) return spin_run(ctx, run, be, &out->idle);
  return engine_loop(ctx, run, q);
}

/* The counters at the end: the engine's (replicas: the runner's), and the lines on stats_out. */
static void report(const runner *run, ss_status st, int trains, ss_live_run_stats *out) {
  const ss_live_run_opts *o = run->o;
  out->rate_hz = run->rate_hz;
  out->n_channels = run->n_channels;
  if (run->e) {
    out->labelled = 1;
    if (!o->replicas) ss_live_get_stats(run->e, &out->stats);
    if (o->stats_out)
      ss_live_stats_print(o->stats_out, st == SS_OK ? "live: done" : "live: stopped", &out->stats, run->rate_hz);
  }
  if (trains && o->stats_out)
    fprintf(
        o->stats_out,
        "live: training: %lld samples (%.1f s) fitted in %.1f s; %lld samples arrived while fitting, not labelled\n",
        (long long)out->train_rows, (double)out->train_rows / run->rate_hz, out->fit_s, (long long)out->skipped_rows);
}

ss_status ss_live_run(ss_ctx *ctx, const ss_live_run_opts *o, ss_live_run_stats *out) {
  ss_live_run_stats local;
  if (!out) out = &local;
  memset(out, 0, sizeof(*out));
  SS_TRY(check_opts(ctx, o));
  const int trains = o->train.seconds > 0;
  /* The device first: cuda without a device fails before anything is read, no CPU fallback; auto
   * logs its choice (core/backend.h). One CPU thread: the engine's blocks are small. */
  ss_backend own_be;
  const ss_backend *be = o->backend;
  if (!be) SS_TRY(ss_backend_open(ctx, o->device, 0, 1, &own_be));
  if (!be) be = &own_be;
  ss_live_model own_m;
  memset(&own_m, 0, sizeof(own_m));
  const ss_live_model *m = trains || !o->model ? &own_m : o->model;
  ss_status st = trains || o->model ? SS_OK : ss_live_model_load(ctx, o->model_path, &own_m);
  if (st != SS_OK) {
    if (!o->backend) ss_backend_close(&own_be);
    return st;
  }
  runner run = {.o = o, .stop = o->stop ? o->stop : &never_stop};
  run.n_channels = trains ? o->train.n_channels : m->n_channels;
  run.rate_hz = trains ? o->train.rate_hz : m->rate_hz;
  run.read_max_rows = o->read_max_rows > 0 ? o->read_max_rows : (int64_t)(run.rate_hz * SS_LIVE_RUN_READ_MAX_S) + 1;
  st = source_spec_make(ctx, o, trains, run.n_channels, run.rate_hz, run.read_max_rows, &run.src);
  if (st != SS_OK) {
    if (!o->backend) ss_backend_close(&own_be);
    ss_live_model_free(&own_m);
    return st;
  }
  run.k.emit = o->hooks.emit;
  run.k.user = o->hooks.user;
  run.k.binary = o->binary;
  if (!trains) st = ss_live_engine_open(ctx, be, m, &o->engine, &run.e);
  if (st == SS_OK && !o->hooks.emit) {
    ss_link_opts lo = {.timeout_s = o->connect_timeout_s, .token = o->token, .token_len = o->token_len};
    st = ss_link_open_with(ctx, o->output ? o->output : "stdout", SS_LINK_WRITE, &lo, &run.k.out);
  }
  const int workers = (o->spin && !trains) || o->inline_read; /* the workers read the source themselves */
  queue *q = NULL;
  pthread_t reader;
  int started = 0;
  if (st == SS_OK && !workers) st = reader_start(ctx, o, run.stop, &run.src, &q, &reader, &started);
  ss_live_trainer *tr = NULL;
  train_state ts = {0, 0};
  if (st == SS_OK && trains) {
    st = train(ctx, &run, q, &tr, &own_m, out, &ts);
    if (st == SS_OK && own_m.n_channels != run.n_channels)
      st = ss_fail(ctx, SS_ERR_INTERNAL, "live: the fitted model has %d channels, the stream %d", own_m.n_channels,
                   run.n_channels);
    if (st == SS_OK && !ts.ended) st = ss_live_engine_open(ctx, be, &own_m, &o->engine, &run.e);
  }
  run.k.t_offset = ts.conn_rows;
  if (st == SS_OK && o->realtime) st = realtime(ctx, o->realtime_priority);
  if (st == SS_OK && o->n_pins && !workers) st = pin(ctx, o->pins[0]);
  out->t_start = ss_now();
  if (st == SS_OK && !ts.ended) st = run_loop(ctx, &run, be, m, q, workers, out);
  out->t_end = ss_now();
  report(&run, st, trains, out);
  if (started) reader_finish(q, reader);
  else if (q) queue_release(q);
  ss_link_close(run.k.out);
  ss_live_engine_close(run.e);
  ss_live_train_close(tr);
  if (!o->backend) ss_backend_close(&own_be);
  ss_live_model_free(&own_m);
  source_spec_free(&run.src);
  return st;
}
