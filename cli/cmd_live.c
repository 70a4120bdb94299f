/* cmd_live.c — `spikestream live --source URI --model M | --train-seconds S`: label spikes as they
 * arrive (issue #10).
 *
 * A reader thread reads whole int16 frames from the source (io/link.h) and queues each read with its
 * arrival time, so that arrival times are real even when the engine is busy; the main thread pushes
 * the queued blocks into the live engine (stages/live/live.h) and writes one record per spike to the output.
 * The queue never drops data: when it holds SS_LIVE_QUEUE_MAX_BYTES the reader waits (the sender is
 * then held back by the socket), and the engine's overrun counter shows it fell behind.
 * --spin: no queue; N interchangeable workers (drivers/live_workers.h) poll the source without sleeping
 * and the one that takes the turn reads and pushes, so that a worker the machine stops while it is idle
 * does not hold up the next block (docs/live.md, "Platform stalls").
 * --train-seconds: the first S seconds go to drivers/live_train.h, which fits a model with `sort`'s code
 * in the background; the rows that arrive meanwhile are counted and reported, not labelled (the reader
 * thread and the queue then run with --spin too: the stream is buffered while the model is fitted). */
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/link.h"
#include "core/backend.h"
#include "cli/cli.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"
#include "drivers/live_train.h"
#include "drivers/live_replicas.h"
#include "drivers/live_workers.h"
#include "core/log.h"

#define SS_LIVE_QUEUE_MAX_BYTES ((size_t)256 << 20)
#define SS_LIVE_READ_MAX_S 0.1          /* at most this much signal per read */
#define SS_LIVE_CONNECT_TIMEOUT_S 10.0  /* default wait for the source */
#define SS_LIVE_WAIT_S 0.1              /* how often the main thread looks at the clock while idle */
#define SS_LIVE_RECORD_BYTES 24         /* the binary record */
#define SS_LIVE_MAX_BLOCK_MS 60000.0
#define SS_MS_PER_S 1000.0
#define SS_LIVE_MAX_CHANNELS 100000     /* --channels (the model loader's limit) */
#define SS_LIVE_MAX_RT_PRIORITY 99      /* Linux's highest SCHED_FIFO priority */
#define SS_LIVE_SPIN_WORKERS 2          /* --spin: default workers (a second one stands by) */

static const char usage[] =
    "usage: spikestream live --source URI (--model M | --train-seconds S --channels N --rate HZ\n"
    "                        [--uv-per-step U] [--probe P] [--params J] [--train-dir DIR])\n"
    "                        [--output URI] [--format json|binary]\n"
    "                        [--assign centroid|knn] [--k K] [--distance D] [--block-ms B] [--reconnect]\n"
    "                        [--stats-every S] [--device cpu|cuda|auto] [--connect-timeout S]\n"
    "                        [--realtime P] [--spin [--workers N | --replicas R]] [--pin CPU[,CPU...]]\n\n"
    "Label spikes as they arrive on a stream of raw little-endian int16 frames (channel-interleaved,\n"
    "any number of samples per read), with the causal twin of a model that `spikestream sort` wrote.\n"
    "Each spike is written as soon as no later sample can change it (docs/live.md):\n"
    "  json:   {\"t\": sample, \"unit\": id, \"amp\": uV, \"channel\": c, \"latency_us\": L} one per line\n"
    "  binary: 24 bytes little-endian {int64 t; int32 unit; int32 channel; float amp; float latency_us}\n"
    "Counters (samples, blocks, spikes, overruns, latency p50/p99/max) go to stderr every --stats-every\n"
    "seconds and at the end. The end of the stream flushes and exits 0; a stream ending mid-frame is\n"
    "processed up to its last whole frame, reported, and exits 1.\n\n"
    "  --source URI         stdin, -, a file, tcp://host:port, tcp-listen://host:port, unix:///path,\n"
    "                       unix-listen:///path\n"
    "  --model M            model.h5 from `spikestream sort` (its /live group)\n"
    "  --train-seconds S    fit the model on the stream's first S seconds (`sort`'s pipeline, in the\n"
    "                       background on --device), then label; samples arriving while it is fitted\n"
    "                       are counted and reported, not labelled; times count from the stream start\n"
    "  --channels N         with --train-seconds: channels per frame\n"
    "  --rate HZ            with --train-seconds: sampling rate\n"
    "  --uv-per-step U      with --train-seconds: microvolts per int16 step (default 1)\n"
    "  --probe P            with --train-seconds: probe JSON (default as `sort`: the 32-channel probe\n"
    "                       for 32 channels)\n"
    "  --params J           with --train-seconds: parameter JSON for the fit (docs/params.md)\n"
    "  --train-dir DIR      with --train-seconds: keep the training data and the fit's outputs\n"
    "                       (DIR/sort/model.h5) there (default: a temporary directory, removed)\n"
    "  -o, --output URI     where the records go (default stdout; same URI forms)\n"
    "  --format F           json (default) or binary\n"
    "  --assign A           centroid (default: nearest unit centroid) or knn (vote of the --k nearest\n"
    "                       reference spikes, ties to the nearest)\n"
    "  --k K                neighbours for --assign knn (default 5)\n"
    "  --distance D         centroid distance: plain (default: Euclidean over all features) or masked\n"
    "                       (only the channels with mask > 0 in the spike or the unit's mean mask)\n"
    "  --block-ms B         the sender's block length: a block is an overrun when its processing starts\n"
    "                       more than B ms after it arrived (default: each read's own duration)\n"
    "  --reconnect          after the source disconnects, wait for the next connection (filter state\n"
    "                       restarts, counters go on); stop with SIGINT or SIGTERM\n"
    "  --stats-every S      seconds between counter lines on stderr (default 10; 0: only at the end)\n"
    "  --device D           cpu (default), cuda or auto\n"
    "  --connect-timeout S  how long to wait for the source (default 10; 0 = no limit)\n"
    "  --realtime P         run the engine thread SCHED_FIFO at priority P (0 = the lowest) so that\n"
    "                       ordinary threads cannot preempt a block; when not permitted, a warning and\n"
    "                       normal scheduling (docs/live.md)\n"
    "  --spin               poll the source without sleeping: a sleeping thread's wake-up is on every\n"
    "                       block's critical path, and on a VM it may be late by milliseconds. --workers\n"
    "                       threads take turns reading and pushing, each on a core of its own, so that\n"
    "                       one the machine stops while idle does not delay the next block (docs/live.md);\n"
    "                       with --train-seconds: a polling reader thread and engine thread instead\n"
    "  --workers N          with --spin: the polling threads (default 2; 1 = no standby)\n"
    "  --replicas R         with --spin, instead of --workers: R engines (each its own thread and, with\n"
    "                       CUDA, stream) push every block; the first to finish a block emits it, so a\n"
    "                       thread the machine stops even inside a block does not delay the stream.\n"
    "                       Counter lines only at the end (docs/live.md)\n"
    "  --pin CPU[,CPU...]   pin the engine thread (--spin: worker i to the i-th CPU) with\n"
    "                       sched_setaffinity; when refused, a warning\n"
    "\noptions:\n" SS_CLI_COMMON_HELP;

enum {
  OPT_SOURCE = 0x3101, OPT_MODEL, OPT_TRAIN, OPT_FORMAT, OPT_ASSIGN, OPT_K, OPT_BLOCK_MS, OPT_RECONNECT,
  OPT_STATS_EVERY, OPT_DEVICE, OPT_CONNECT_TIMEOUT, OPT_DISTANCE, OPT_CHANNELS, OPT_RATE, OPT_UV_PER_STEP,
  OPT_PROBE, OPT_PARAMS, OPT_TRAIN_DIR, OPT_REALTIME, OPT_SPIN, OPT_PIN, OPT_WORKERS, OPT_REPLICAS
};

typedef struct {
  const char *source, *model, *output;
  int binary, reconnect, train;
  int64_t realtime; /* --realtime P: P + 1 (0 = not asked) */
  int spin;         /* --spin */
  int64_t workers;  /* --workers N (0: not given) */
  int64_t replicas; /* --replicas R (0: not given) */
  int pins[SS_LIVE_MAX_WORKERS]; /* --pin: the CPU of worker i (the engine thread: pins[0]); -1 none */
  int n_pins;
  /* --train-seconds */
  double train_s, rate_hz, uv_per_step;
  int64_t channels;
  const char *probe, *params_path, *train_dir;
  int train_only_option; /* one of the options above was given */
  ss_live_opts opts;
  double stats_every_s, connect_timeout_s;
  ss_device_kind device;
  ss_ctx *ctx;
} live_args;

static int on_option(int opt, const char *arg, void *user) {
  live_args *a = user;
  double v = 0;
  int code = 0;
  switch (opt) {
    case OPT_SOURCE: a->source = arg; break;
    case OPT_MODEL: a->model = arg; break;
    case 'o': a->output = arg; break;
    case OPT_TRAIN:
      code = ss_cli_number("live", "train-seconds", arg, 0, &a->train_s);
      if (!code && !(a->train_s > 0)) return ss_cli_usage_error("live", "--train-seconds: expected a number > 0, got \"%s\"", arg);
      a->train = 1;
      break;
    case OPT_CHANNELS: code = ss_cli_integer("live", "channels", arg, 1, SS_LIVE_MAX_CHANNELS, &a->channels); a->train_only_option = 1; break;
    case OPT_RATE:
      code = ss_cli_number("live", "rate", arg, 0, &a->rate_hz);
      if (!code && !(a->rate_hz > 0)) return ss_cli_usage_error("live", "--rate: expected a number > 0, got \"%s\"", arg);
      a->train_only_option = 1;
      break;
    case OPT_UV_PER_STEP:
      code = ss_cli_number("live", "uv-per-step", arg, 0, &a->uv_per_step);
      if (!code && !(a->uv_per_step > 0)) return ss_cli_usage_error("live", "--uv-per-step: expected a number > 0, got \"%s\"", arg);
      a->train_only_option = 1;
      break;
    case OPT_PROBE: a->probe = arg; a->train_only_option = 1; break;
    case OPT_PARAMS: a->params_path = arg; a->train_only_option = 1; break;
    case OPT_TRAIN_DIR: a->train_dir = arg; a->train_only_option = 1; break;
    case OPT_SPIN: a->spin = 1; break;
    case OPT_PIN:
      if (ss_live_cpu_list_parse(a->ctx, "--pin", arg, a->pins, SS_LIVE_MAX_WORKERS, &a->n_pins) != SS_OK)
        return ss_cli_usage_error("live", "%s", ss_error_message(a->ctx));
      break;
    case OPT_WORKERS: code = ss_cli_integer("live", "workers", arg, 1, SS_LIVE_MAX_WORKERS, &a->workers); break;
    case OPT_REPLICAS: code = ss_cli_integer("live", "replicas", arg, 1, SS_LIVE_MAX_REPLICAS, &a->replicas); break;
    case OPT_REALTIME:
      code = ss_cli_integer("live", "realtime", arg, 0, SS_LIVE_MAX_RT_PRIORITY, &a->realtime);
      a->realtime++;
      break;
    case OPT_RECONNECT: a->reconnect = 1; break;
    case OPT_FORMAT:
      if (strcmp(arg, "json") && strcmp(arg, "binary"))
        return ss_cli_usage_error("live", "--format: expected json or binary, got \"%s\"", arg);
      a->binary = strcmp(arg, "binary") == 0;
      break;
    case OPT_ASSIGN:
      if (strcmp(arg, "centroid") && strcmp(arg, "knn"))
        return ss_cli_usage_error("live", "--assign: expected centroid or knn, got \"%s\"", arg);
      a->opts.assign = strcmp(arg, "knn") == 0 ? SS_LIVE_KNN : SS_LIVE_CENTROID;
      break;
    case OPT_DISTANCE:
      if (strcmp(arg, "plain") && strcmp(arg, "masked"))
        return ss_cli_usage_error("live", "--distance: expected plain or masked, got \"%s\"", arg);
      a->opts.masked_distance = strcmp(arg, "masked") == 0;
      break;
    case OPT_K: code = ss_cli_integer("live", "k", arg, 1, INT32_MAX, &a->opts.k); break;
    case OPT_BLOCK_MS:
      code = ss_cli_number("live", "block-ms", arg, 0, &v);
      if (!code && !(v > 0 && v <= SS_LIVE_MAX_BLOCK_MS))
        return ss_cli_usage_error("live", "--block-ms: expected a number in (0, %g], got \"%s\"", SS_LIVE_MAX_BLOCK_MS, arg);
      a->opts.block_s = v / SS_MS_PER_S;
      break;
    case OPT_STATS_EVERY: code = ss_cli_number("live", "stats-every", arg, 0, &a->stats_every_s); break;
    case OPT_CONNECT_TIMEOUT: code = ss_cli_number("live", "connect-timeout", arg, 0, &a->connect_timeout_s); break;
    case OPT_DEVICE:
      if (ss_device_kind_parse(a->ctx, arg, &a->device) != SS_OK)
        return ss_cli_usage_error("live", "--device: %s", ss_error_message(a->ctx));
      break;
    default: return ss_cli_usage_error("live", "unknown option");
  }
  return code;
}

/* SIGINT/SIGTERM: stop after what was received (the engine loop; --spin's polls) */
static volatile sig_atomic_t stop_requested;

/* --- the queue between the reader thread and the engine ----------------------------------------- */

typedef enum { ITEM_ROWS, ITEM_END, ITEM_ERROR } item_kind;

typedef struct item {
  struct item *next;
  item_kind kind;
  int64_t n;
  double t_arrival;
  ss_status st;      /* ITEM_ERROR */
  char *msg;         /* ITEM_ERROR */
  int16_t rows[];    /* ITEM_ROWS */
} item;

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  item *head, *tail;
  size_t bytes;
  /* the reader's side */
  const live_args *a;
  int n_channels;
  double rate_hz;
  int reader_done; /* the engine loop took the reader's last item */
} queue;

static void queue_put(queue *q, item *it, size_t bytes) {
  pthread_mutex_lock(&q->mu);
  while (q->bytes > 0 && q->bytes + bytes > SS_LIVE_QUEUE_MAX_BYTES) pthread_cond_wait(&q->cv, &q->mu);
  it->next = NULL;
  if (q->tail) q->tail->next = it;
  else q->head = it;
  q->tail = it;
  q->bytes += bytes;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
}

/* The next item, or NULL after waiting `wait_s` for one (0: no wait, as --spin polls). */
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

static void put_status(queue *q, item_kind kind, ss_status st, const char *msg) {
  item *it = calloc(1, sizeof(*it));
  if (!it) abort(); /* a few bytes: nothing sensible is left to do */
  it->kind = kind;
  it->st = st;
  it->msg = msg ? strdup(msg) : NULL;
  queue_put(q, it, 0);
}

/* --spin: poll the source without sleeping until a read will not block (or a stop is requested). */
static void spin_until_readable(const ss_link *l, const ss_frame_reader *r) {
  struct pollfd pfd = {.fd = ss_link_fd(l), .events = POLLIN};
  while (!ss_frame_reader_buffered(r) && !stop_requested && poll(&pfd, 1, 0) == 0) {
  }
}

/* Read one connection to its end: rows are queued as they come. */
static ss_status read_stream(ss_ctx *ctx, queue *q) {
  ss_link *l = NULL;
  double timeout = q->a->connect_timeout_s;
  SS_TRY(ss_link_open(ctx, q->a->source, SS_LINK_READ, timeout, &l));
  ss_frame_reader *r = NULL;
  int64_t max_rows = (int64_t)(q->rate_hz * SS_LIVE_READ_MAX_S) + 1;
  ss_status st = ss_frame_reader_open(ctx, l, q->n_channels, max_rows, &r);
  for (;;) {
    const int16_t *rows;
    int64_t n = 0;
    double t;
    if (st == SS_OK && q->a->spin) spin_until_readable(l, r);
    if (st == SS_OK) st = ss_frame_reader_next(ctx, r, &rows, &n, &t);
    if (st != SS_OK || n == 0) break;
    size_t bytes = (size_t)n * q->n_channels * sizeof(int16_t);
    item *it = malloc(sizeof(item) + bytes);
    if (!it) {
      st = ss_fail(ctx, SS_ERR_NOMEM, "out of memory: live queue (%zu bytes)", bytes);
      break;
    }
    it->kind = ITEM_ROWS;
    it->n = n;
    it->t_arrival = t;
    memcpy(it->rows, rows, bytes);
    queue_put(q, it, bytes);
  }
  ss_frame_reader_close(r);
  ss_link_close(l);
  return st;
}

static void *reader_main(void *arg) {
  queue *q = arg;
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  do {
    ss_status st = read_stream(&ctx, q);
    if (st != SS_OK) {
      put_status(q, ITEM_ERROR, st, ss_error_message(&ctx));
      return NULL;
    }
    put_status(q, ITEM_END, SS_OK, NULL);
  } while (q->a->reconnect);
  return NULL;
}

/* --- output ------------------------------------------------------------------------------------- */

typedef struct {
  ss_link *out;
  int binary;
  int64_t t_offset; /* rows of the current connection before the engine's first (--train-seconds) */
} sink;

static void put_le(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static ss_status write_spike(ss_ctx *ctx, void *user, const ss_live_spike *spike) {
  sink *k = user;
  ss_live_spike shifted = *spike, *s = &shifted;
  shifted.t += k->t_offset;
  if (k->binary) {
    unsigned char rec[SS_LIVE_RECORD_BYTES];
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
  int len = snprintf(line, sizeof(line), "{\"t\": %lld, \"unit\": %d, \"amp\": %.2f, \"channel\": %d, \"latency_us\": %.1f}\n",
                     (long long)s->t, (int)s->unit, (double)s->amp, (int)s->channel, (double)s->latency_us);
  return ss_link_write(ctx, k->out, line, (size_t)len);
}

/* --- the engine loop ---------------------------------------------------------------------------- */

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void print_stats(const ss_live_engine *e, const char *label, double rate_hz) {
  ss_live_stats s;
  ss_live_get_stats(e, &s);
  ss_live_stats_print(stderr, label, &s, rate_hz);
}

/* The counters every --stats-every seconds. */
static void stats_tick(const live_args *a, const ss_live_engine *e, double rate_hz, double *next_stats) {
  double now = ss_now();
  if (now < *next_stats) return;
  print_stats(e, "live", rate_hz);
  while (*next_stats <= now) *next_stats += a->stats_every_s;
}

static double first_stats(const live_args *a) { return a->stats_every_s > 0 ? ss_now() + a->stats_every_s : INFINITY; }

/* The source ended: flush; *over = 1 unless --reconnect, which resets the engine for the next
 * connection (the filter state restarts, the counters go on). */
static ss_status stream_ended(ss_ctx *ctx, const live_args *a, ss_live_engine *e, sink *k, int *over) {
  SS_TRY(ss_live_flush(ctx, e, write_spike, k));
  *over = !a->reconnect;
  if (*over) return SS_OK;
  ss_log_info(ctx, "live: the source disconnected; waiting for the next connection");
  ss_live_reset(e);
  k->t_offset = 0;
  return SS_OK;
}

/* The source failed (e.g. it ended mid-frame): the whole rows before were pushed; report every
 * pending spike, then the failure `msg`. */
static ss_status stream_failed(ss_ctx *ctx, ss_live_engine *e, sink *k, ss_status st, const char *msg) {
  SS_TRY(ss_live_flush(ctx, e, write_spike, k));
  return ss_fail(ctx, st, "%s", msg ? msg : ss_strerror(st));
}

/* Push queued blocks until the stream ends (or, with --reconnect, a signal). */
static ss_status engine_loop(ss_ctx *ctx, const live_args *a, queue *q, ss_live_engine *e, sink *k, double rate_hz) {
  double next_stats = first_stats(a);
  for (;;) {
    /* a stop request (signal) still processes what was already received */
    item *it = queue_get(q, stop_requested || a->spin ? 0 : SS_LIVE_WAIT_S);
    if (!it && stop_requested) return ss_live_flush(ctx, e, write_spike, k);
    ss_status st = SS_OK;
    if (it && it->kind == ITEM_ROWS) {
      st = ss_live_push(ctx, e, it->rows, it->n, it->t_arrival, write_spike, k);
    } else if (it && it->kind == ITEM_END) {
      int over = 0;
      st = stream_ended(ctx, a, e, k, &over);
      if (st == SS_OK && over) {
        q->reader_done = 1;
        free(it);
        return SS_OK;
      }
    } else if (it) {
      q->reader_done = 1;
      st = stream_failed(ctx, e, k, it->st, it->msg);
      free(it->msg);
    }
    free(it);
    if (st != SS_OK) return st;
    stats_tick(a, e, rate_hz, &next_stats);
  }
}

/* --- --spin: the workers' task (drivers/live_workers.h); the source and the engine are used under the turn */

typedef struct {
  const live_args *a;
  ss_live_engine *e;
  sink *k;
  double rate_hz, next_stats;
  int n_channels;
  ss_link *l;
  ss_frame_reader *r;
  atomic_int fd;           /* the source's descriptor for the idle polls; -1 while none is open */
  atomic_llong stats_due;  /* next_stats in ns, for the idle polls (a silent source still gets its lines) */
} spin_loop;

static long long due_ns(double t) { return isfinite(t) ? (long long)(t * 1e9) : LLONG_MAX; }

static int readable(int fd) {
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  return poll(&pfd, 1, 0) != 0;
}

/* Without the turn: a block may be there, the source must be opened, a stop was requested, or the
 * counters are due. */
static int spin_ready(void *user) {
  spin_loop *p = user;
  int fd = atomic_load(&p->fd);
  return fd < 0 || stop_requested || readable(fd) || (long long)(ss_now() * 1e9) >= atomic_load(&p->stats_due);
}

static void spin_close(spin_loop *p) {
  atomic_store(&p->fd, -1);
  ss_frame_reader_close(p->r);
  ss_link_close(p->l);
  p->r = NULL;
  p->l = NULL;
}

/* A stop request while waiting for the source ends the wait (the turn is held meanwhile) without a
 * failure: the source stays closed and the caller's next turn sees the request. */
static ss_status spin_open(ss_ctx *ctx, spin_loop *p) {
  ss_status st = ss_link_open_cancellable(ctx, p->a->source, SS_LINK_READ, p->a->connect_timeout_s, &stop_requested, &p->l);
  if (st != SS_OK && !stop_requested) return st;
  if (st != SS_OK) {
    ss_ctx_clear(ctx);
    return SS_OK;
  }
  st = ss_frame_reader_open(ctx, p->l, p->n_channels, (int64_t)(p->rate_hz * SS_LIVE_READ_MAX_S) + 1, &p->r);
  if (st != SS_OK) spin_close(p);
  else atomic_store(&p->fd, ss_link_fd(p->l));
  return st;
}

/* With the turn: open the source, or push what it holds (nothing when another worker took it). */
static ss_status spin_work(ss_ctx *ctx, void *user, int *done) {
  spin_loop *p = user;
  if (stop_requested) {
    *done = 1;
    return ss_live_flush(ctx, p->e, write_spike, p->k);
  }
  if (!p->l) return spin_open(ctx, p);
  while (ss_frame_reader_buffered(p->r) || readable(atomic_load(&p->fd))) {
    const int16_t *rows;
    int64_t n = 0;
    double t;
    ss_status st = ss_frame_reader_next(ctx, p->r, &rows, &n, &t);
    if (st != SS_OK) {
      char msg[SS_CTX_MSG_MAX];
      snprintf(msg, sizeof(msg), "%s", ss_error_message(ctx));
      spin_close(p);
      return stream_failed(ctx, p->e, p->k, st, msg);
    }
    if (n == 0) {
      spin_close(p);
      return stream_ended(ctx, p->a, p->e, p->k, done);
    }
    SS_TRY(ss_live_push(ctx, p->e, rows, n, t, write_spike, p->k));
    if (!ss_frame_reader_buffered(p->r)) break;
  }
  stats_tick(p->a, p->e, p->rate_hz, &p->next_stats);
  atomic_store(&p->stats_due, due_ns(p->next_stats));
  return SS_OK;
}

static ss_status spin_run(ss_ctx *ctx, const ss_backend *be, const live_args *a, ss_live_engine *e, sink *k,
                          const ss_live_model *m) {
  spin_loop p = {.a = a, .e = e, .k = k, .rate_hz = m->rate_hz, .next_stats = first_stats(a),
                 .n_channels = m->n_channels};
  atomic_init(&p.fd, -1);
  atomic_init(&p.stats_due, due_ns(p.next_stats));
  ss_live_task task = {spin_ready, spin_work, &p};
  ss_live_workers_opts o = {a->workers > 0 ? (int)a->workers : SS_LIVE_SPIN_WORKERS, a->n_pins ? a->pins : NULL,
                            a->opts.block_s > 0 ? a->opts.block_s : INFINITY};
  ss_status st = ss_live_workers_run(ctx, be, &o, &task, NULL);
  spin_close(&p);
  return st;
}

/* --- --spin --replicas: R engines push every block (drivers/live_replicas.h) from spin_loop's source ---- */

static ss_status replica_read(ss_ctx *ctx, void *user, const int16_t **rows, int64_t *n, double *t, int *kind) {
  spin_loop *p = user;
  *n = 0;
  *kind = SS_LIVE_READ_ROWS;
  if (stop_requested) {
    *kind = SS_LIVE_READ_DONE;
    return SS_OK;
  }
  if (!p->l) return spin_open(ctx, p);
  if (!ss_frame_reader_buffered(p->r) && !readable(atomic_load(&p->fd))) return SS_OK;
  ss_status st = ss_frame_reader_next(ctx, p->r, rows, n, t);
  if (st == SS_OK && *n > 0) return SS_OK;
  spin_close(p); /* the end of the stream, or its failure (the whole rows before were delivered) */
  if (st != SS_OK) return st;
  *kind = p->a->reconnect ? SS_LIVE_READ_END : SS_LIVE_READ_DONE;
  if (p->a->reconnect) ss_log_info(ctx, "live: the source disconnected; waiting for the next connection");
  return SS_OK;
}

static ss_status replica_emit(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  return write_spike(ctx, ((spin_loop *)user)->k, s);
}

/* Engines 1..R-1 beside the caller's engine 0 (drivers/live_replicas.h), the run, the engines closed. */
static ss_status replicas_run(ss_ctx *ctx, const live_args *a, const ss_backend *be0, ss_live_engine *e0, sink *k,
                              const ss_live_model *m, ss_live_stats *stats) {
  ss_live_replica_set set;
  SS_TRY(ss_live_replica_set_open(ctx, be0, e0, m, &a->opts, (int)a->replicas, &set));
  spin_loop p = {.a = a, .e = e0, .k = k, .rate_hz = m->rate_hz, .next_stats = INFINITY, .n_channels = m->n_channels};
  atomic_init(&p.fd, -1);
  atomic_init(&p.stats_due, LLONG_MAX);
  ss_live_replica_io io = {spin_ready, replica_read, replica_emit, &p};
  ss_live_replicas_opts o = {set.n, set.es, set.bp, a->n_pins ? a->pins : NULL, m->n_channels, m->rate_hz,
                             a->opts.block_s, 0};
  ss_status st = ss_live_replicas_run(ctx, &o, &io, stats);
  spin_close(&p);
  ss_live_replica_set_close(&set);
  return st;
}

/* --- --train-seconds --------------------------------------------------------------------------- */

typedef struct {
  int64_t train_rows;   /* rows the model was fitted on */
  int64_t skipped_rows; /* rows that arrived while it was fitted (or beyond the training rows of the
                           read that completed them): counted, not labelled */
  int64_t conn_rows;    /* rows of the current connection before the engine's first */
  int ended;            /* the stream ended (or a stop was requested) before labelling began */
  double fit_s;
  int64_t n_units;
} train_result;

/* The first S seconds of the stream go to train.bin; an end or an error of the stream before that
 * is an error (the first connection must carry them). */
static ss_status buffer_training(ss_ctx *ctx, const live_args *a, queue *q, ss_live_trainer *tr, train_result *r) {
  const int64_t need = (int64_t)llround(a->train_s * a->rate_hz);
  ss_log_info(ctx, "live: buffering the stream's first %g s (%lld rows) to fit the model", a->train_s, (long long)need);
  while (r->train_rows < need) {
    item *it = queue_get(q, SS_LIVE_WAIT_S);
    if (!it && stop_requested)
      return ss_fail(ctx, SS_ERR_INPUT, "--train-seconds %g: stopped after %.3f s of training data", a->train_s,
                     (double)r->train_rows / a->rate_hz);
    if (!it) continue;
    ss_status st = SS_OK;
    if (it->kind == ITEM_ROWS) {
      int64_t take = it->n < need - r->train_rows ? it->n : need - r->train_rows;
      st = ss_live_train_append(ctx, tr, it->rows, take);
      r->train_rows += take;
      r->skipped_rows += it->n - take;
      r->conn_rows += it->n;
    } else {
      q->reader_done = it->kind == ITEM_ERROR || !a->reconnect;
      st = it->kind == ITEM_ERROR
               ? ss_fail(ctx, it->st, "%s", it->msg ? it->msg : ss_strerror(it->st))
               : ss_fail(ctx, SS_ERR_INPUT, "%s: the stream ended after %.3f s, before the %g s of --train-seconds",
                         a->source, (double)r->train_rows / a->rate_hz, a->train_s);
      free(it->msg);
    }
    free(it);
    SS_TRY(st);
  }
  return SS_OK;
}

/* While the model is fitted: count what arrives. An end of the stream (without --reconnect) or a
 * stop request leaves nothing to label; a stream error is returned once the fit is over. */
static ss_status wait_for_fit(ss_ctx *ctx, const live_args *a, queue *q, ss_live_trainer *tr, train_result *r) {
  ss_status err = SS_OK;
  char *msg = NULL;
  while (!ss_live_train_done(tr)) {
    item *it = queue_get(q, SS_LIVE_WAIT_S);
    if (!it) continue;
    if (it->kind == ITEM_ROWS) {
      r->skipped_rows += it->n;
      r->conn_rows += it->n;
    } else if (it->kind == ITEM_END) {
      r->conn_rows = 0; /* a new connection's clock starts at 0 */
      if (!a->reconnect) r->ended = q->reader_done = 1;
    } else if (err == SS_OK) {
      err = it->st;
      msg = it->msg;
      it->msg = NULL;
      q->reader_done = 1;
    }
    if (it->kind == ITEM_ERROR) free(it->msg);
    free(it);
  }
  if (stop_requested) r->ended = 1;
  if (err != SS_OK) {
    ss_fail(ctx, err, "%s", msg ? msg : ss_strerror(err));
    free(msg);
  }
  return err;
}

static ss_status train(ss_ctx *ctx, const live_args *a, queue *q, ss_live_trainer **tr, ss_live_model *m,
                       train_result *r) {
  ss_live_train_opts o = {.n_channels = (int)a->channels,
                          .rate_hz = a->rate_hz,
                          .uv_per_step = a->uv_per_step,
                          .probe_path = a->probe,
                          .dir = a->train_dir,
                          .device = a->device};
  ss_params_defaults(&o.params);
  if (a->params_path) SS_TRY(ss_params_load_file(ctx, a->params_path, &o.params));
  SS_TRY(ss_params_validate(ctx, &o.params));
  SS_TRY(ss_live_train_begin(ctx, &o, tr));
  SS_TRY(buffer_training(ctx, a, q, *tr, r));
  SS_TRY(ss_live_train_start(ctx, *tr));
  ss_log_info(ctx, "live: fitting the model on %.1f s in the background (--device %s)",
              (double)r->train_rows / a->rate_hz, ss_device_kind_name(a->device));
  ss_status st = wait_for_fit(ctx, a, q, *tr, r);
  ss_ctx fctx = *ctx; /* the stream's error, if any, wins over the fit's */
  ss_ctx_clear(&fctx);
  ss_status fst = ss_live_train_finish(&fctx, *tr, m, &r->fit_s, &r->n_units);
  if (st != SS_OK) return st;
  if (fst != SS_OK) return ss_fail(ctx, fst, "%s", ss_error_message(&fctx));
  ss_log_info(ctx, "live: model fitted in %.1f s (%lld units, noise included; %s)", r->fit_s, (long long)r->n_units,
              a->train_dir ? ss_live_train_model_path(*tr) : "temporary");
  return SS_OK;
}

/* The line every --train-seconds run ends with, next to the engine's counters. */
static void print_training(const train_result *r, double rate_hz) {
  fprintf(stderr, "live: training: %lld samples (%.1f s) fitted in %.1f s; %lld samples arrived while fitting, not labelled\n",
          (long long)r->train_rows, (double)r->train_rows / rate_hz, r->fit_s, (long long)r->skipped_rows);
}

/* --- the command -------------------------------------------------------------------------------- */

/* --pin: this thread runs the engine loop; a refusal is a warning, not an error. */
static ss_status pin(ss_ctx *ctx, int cpu) {
  int applied = 0;
  char why[128];
  SS_TRY(ss_live_pin(ctx, cpu, &applied, why, sizeof(why)));
  if (applied) ss_log_info(ctx, "live: the engine thread is pinned to CPU %d", cpu);
  else ss_log_warn(ctx, "live: --pin: %s; not pinned", why);
  return SS_OK;
}

/* --realtime: this thread runs the engine loop; a refusal is a warning, not an error. */
static ss_status realtime(ss_ctx *ctx, int priority) {
  int applied = 0;
  char why[128];
  SS_TRY(ss_live_realtime(ctx, priority, &applied, why, sizeof(why)));
  if (applied) ss_log_info(ctx, "live: the engine thread runs SCHED_FIFO");
  else ss_log_warn(ctx, "live: --realtime: %s; normal scheduling", why);
  return SS_OK;
}

static ss_status run(ss_ctx *ctx, live_args *a) {
  /* The device first: cuda without a device fails before anything is read, no CPU fallback; auto
   * logs its choice (core/backend.h). One CPU thread: the engine's blocks are small. */
  ss_backend be;
  SS_TRY(ss_backend_open(ctx, a->device, 0, 1, &be));
  ss_live_model m;
  memset(&m, 0, sizeof(m));
  ss_live_engine *e = NULL;
  ss_link *out = NULL;
  ss_live_trainer *tr = NULL;
  train_result tres;
  memset(&tres, 0, sizeof(tres));
  ss_status st = a->train ? SS_OK : ss_live_model_load(ctx, a->model, &m);
  if (st != SS_OK) {
    ss_backend_close(&be);
    return st;
  }
  if (!a->train) st = ss_live_engine_open(ctx, &be, &m, &a->opts, &e);
  if (st == SS_OK) st = ss_link_open(ctx, a->output ? a->output : "stdout", SS_LINK_WRITE, a->connect_timeout_s, &out);
  /* static: after a signal the reader may still sit in accept() when run() returns */
  static queue q = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
  q.a = a;
  q.n_channels = a->train ? (int)a->channels : m.n_channels;
  q.rate_hz = a->train ? a->rate_hz : m.rate_hz;
  const int workers = a->spin && !a->train; /* --spin: the workers read the source themselves */
  pthread_t reader;
  int started = st == SS_OK && !workers && pthread_create(&reader, NULL, reader_main, &q) == 0;
  if (st == SS_OK && !workers && !started) st = ss_fail(ctx, SS_ERR_INTERNAL, "live: cannot start the reader thread");
  if (st == SS_OK && a->train) {
    st = train(ctx, a, &q, &tr, &m, &tres);
    if (st == SS_OK && m.n_channels != q.n_channels)
      st = ss_fail(ctx, SS_ERR_INTERNAL, "live: the fitted model has %d channels, the stream %d", m.n_channels, q.n_channels);
    if (st == SS_OK && !tres.ended) st = ss_live_engine_open(ctx, &be, &m, &a->opts, &e);
  }
  sink k = {out, a->binary, tres.conn_rows};
  if (st == SS_OK && a->realtime) st = realtime(ctx, (int)a->realtime - 1);
  if (st == SS_OK && a->n_pins && !workers) st = pin(ctx, a->pins[0]);
  ss_live_stats rstats;
  memset(&rstats, 0, sizeof(rstats));
  if (st == SS_OK && !tres.ended) {
    if (a->replicas) st = replicas_run(ctx, a, &be, e, &k, &m, &rstats);
    else if (workers) st = spin_run(ctx, &be, a, e, &k, &m);
    else st = engine_loop(ctx, a, &q, e, &k, q.rate_hz);
  }
  if (e && a->replicas) ss_live_stats_print(stderr, st == SS_OK ? "live: done" : "live: stopped", &rstats, q.rate_hz);
  else if (e) print_stats(e, st == SS_OK ? "live: done" : "live: stopped", q.rate_hz);
  if (a->train) print_training(&tres, q.rate_hz);
  /* the reader has finished when the loop saw its end or its error; otherwise (a signal, a failed
   * output) it may wait on the source: the process ends without it */
  if (started && q.reader_done) pthread_join(reader, NULL);
  ss_link_close(out);
  ss_live_engine_close(e);
  ss_live_train_close(tr);
  ss_backend_close(&be);
  ss_live_model_free(&m);
  return st;
}

int ss_cmd_live(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"source", required_argument, NULL, OPT_SOURCE},
                                       {"model", required_argument, NULL, OPT_MODEL},
                                       {"train-seconds", required_argument, NULL, OPT_TRAIN},
                                       {"output", required_argument, NULL, 'o'},
                                       {"format", required_argument, NULL, OPT_FORMAT},
                                       {"assign", required_argument, NULL, OPT_ASSIGN},
                                       {"k", required_argument, NULL, OPT_K},
                                       {"distance", required_argument, NULL, OPT_DISTANCE},
                                       {"block-ms", required_argument, NULL, OPT_BLOCK_MS},
                                       {"reconnect", no_argument, NULL, OPT_RECONNECT},
                                       {"stats-every", required_argument, NULL, OPT_STATS_EVERY},
                                       {"device", required_argument, NULL, OPT_DEVICE},
                                       {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
                                       {"channels", required_argument, NULL, OPT_CHANNELS},
                                       {"rate", required_argument, NULL, OPT_RATE},
                                       {"uv-per-step", required_argument, NULL, OPT_UV_PER_STEP},
                                       {"probe", required_argument, NULL, OPT_PROBE},
                                       {"params", required_argument, NULL, OPT_PARAMS},
                                       {"train-dir", required_argument, NULL, OPT_TRAIN_DIR},
                                       {"realtime", required_argument, NULL, OPT_REALTIME},
                                       {"spin", no_argument, NULL, OPT_SPIN},
                                       {"pin", required_argument, NULL, OPT_PIN},
                                       {"workers", required_argument, NULL, OPT_WORKERS},
                                       {"replicas", required_argument, NULL, OPT_REPLICAS},
                                       {0, 0, 0, 0}};
  static live_args a; /* static: the reader thread reads it (see run()) */
  memset(&a, 0, sizeof(a));
  for (int i = 0; i < SS_LIVE_MAX_WORKERS; i++) a.pins[i] = -1; /* beyond the --pin list: not pinned */
  a.ctx = ctx;
  ss_live_opts_defaults(&a.opts);
  a.stats_every_s = 10.0;
  a.connect_timeout_s = SS_LIVE_CONNECT_TIMEOUT_S;
  a.device = SS_DEVICE_CPU;
  int first, code = ss_cli_parse(argc, argv, "live", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc) return ss_cli_usage_error("live", "unexpected argument \"%s\"", argv[first]);
  if (!a.source) return ss_cli_usage_error("live", "--source URI is required");
  if (!a.model && !a.train) return ss_cli_usage_error("live", "--model M (or --train-seconds S) is required");
  if (a.model && a.train) return ss_cli_usage_error("live", "--model and --train-seconds exclude each other");
  if (a.train && (a.channels <= 0 || !(a.rate_hz > 0)))
    return ss_cli_usage_error("live", "--train-seconds needs --channels N and --rate HZ (the stream has no header)");
  if (a.workers && !a.spin) return ss_cli_usage_error("live", "--workers goes with --spin (the polling threads)");
  if (a.replicas && (!a.spin || a.workers || a.train))
    return ss_cli_usage_error("live", "--replicas goes with --spin, without --workers and --train-seconds");
  if (a.n_pins > 1 && !(a.spin && !a.train))
    return ss_cli_usage_error("live", "--pin: one CPU (the engine thread); a list goes with --spin's workers");
  if (!a.train && a.train_only_option)
    return ss_cli_usage_error("live", "--channels, --rate, --uv-per-step, --probe, --params and --train-dir go with "
                              "--train-seconds (a model gives them)");
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  return ss_cli_finish("live", ctx, run(ctx, &a));
}
