/* bench_live.c — live-mode latency and throughput on a simulated 32-channel 30 kHz recording with the
 * model of an in-process `sort` of it (model.h5, /live), CPU and CUDA engines.
 *
 * Per block size B (ms):
 *  - paced: a sender thread writes B-ms blocks over a UNIX socket (io/link.h) on an absolute real-time
 *    schedule; the live runner (drivers/live_run.h) reads whole frames and pushes each read into the
 *    engine. Reported: the engine's latency (label ready − arrival of the read holding the spike's last
 *    waveform sample) p50/p99/max, the end-to-end latency from the send time of that block, overruns,
 *    and the fraction of wall time the engine was busy;
 *  - unpaced: the recording (or its first --unpaced-seconds) pushed in B-ms blocks as fast as
 *    possible: × real time. It runs first, so that the paced run finds the device warm (CUDA
 *    context, cuBLAS, the push graphs).
 * --speed X (or a case's fifth field) sends the paced blocks X times faster than real time while the
 * overrun threshold stays one block duration (B ms): X > 1 is strictly harder than real time, and lets
 * a 10-minute replay fit a shorter wall-clock budget.
 * Channel counts other than 32 use a generated two-column linear probe (10 µm pitch) and 20 units
 * per 32 channels. A paced replay longer than the recording loops it (--cases C:B:D:S with S above
 * --seconds): the model stays the one of the recording's sort. Writes bench/results/live.json
 * (bench/README.md): case names end in _cpu / _gpu; summary p99_ms_32ch_5ms_cpu, p50_ms_32ch_1ms_gpu,
 * p99_ms_32ch_1ms_gpu, overruns_32ch_1ms_gpu, seconds_32ch_1ms_gpu, speed_32ch_1ms_gpu.
 *
 * usage: bench_live [--seconds S] [--blocks 1,2,5,10] [--channels 32,128] [--device cpu[,cuda]]
 *                   [--cases C:B:D[:S[:X]],...] [--speed X] [--unpaced-seconds S] [--gpu-wait spin|sync]
 *                   [--sort-device D] [--out FILE] [--tmpdir DIR] [--realtime PRIORITY] [--reader block|spin]
 *                   [--sender sleep|spin] [--workers N] [--pin CPU[,CPU...]] [--sender-workers N]
 *                   [--sender-pin CPU[,CPU...]] [--replicas R]
 * --cases lists the cases (channels : block ms : cpu|cuda : paced seconds : speed) instead of the
 * product of --channels × --device × --blocks; consecutive cases with one channel count share a
 * workload. --gpu-wait: how the CUDA engine waits for the device (ss_live_wait; default spin).
 * --realtime P: the main thread runs SCHED_FIFO at P (0 = lowest), ss_live_realtime; each case records
 * whether it was granted. --reader block (default): one thread reads inline, sleeping in read();
 * --reader spin: the runner's workers poll the socket without sleeping (--workers N take turns, as
 * `spikestream live --spin`); --replicas R: R engine replicas push every block (the runner's counters,
 * no per-push trace). --pin CPU[,CPU...] pins worker (or replica) i to the i-th CPU for the paced loop.
 * --sender spin: the sender spins until each block is due (default sleep); --sender-workers N sending
 * threads take turns, --sender-pin pins them. Each case records the idle workers' longest gap between
 * two polls and the gaps longer than a block (`idle_stalls_over_block`: the machine stopping a thread
 * that runs no engine code). A channel count whose model cannot be made (e.g. the sort runs out of
 * device memory) is recorded as a case with an `error` and skipped; the other cases run, and the exit
 * status is 1. Paced runs trace every push (ss_live_opts.trace): each case records the per-phase mean
 * and max, the N_SLOWEST slowest pushes split by phase, and the worst overruns split into engine busy /
 * read wait. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "build_config.h"
#include "core/log.h"
#include "drivers/live_replicas.h"
#include "drivers/live_run.h"
#include "drivers/live_workers.h"
#include "drivers/sort.h"
#include "io/link.h"
#include "params/params.h"
#include "params/probe.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"
#include "tools/simulate.h"

#define MAX_CHANNEL_COUNTS 8
#define PROBE_32 SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define PITCH_UM 10.0 /* generated probes: two columns 20 µm apart, a contact every 10 µm in y */
#define COLUMN_UM 20.0
#define UNITS_PER_32 20 /* simulated units per 32 channels */
#define ADJACENCY_RADIUS_UM 40.0
#define RATE 30000.0
#define UV_PER_STEP 0.195
#define DEFAULT_SECONDS 30.0
#define MAX_BLOCKS 16
#define MS_PER_S 1000.0
#define CONNECT_TIMEOUT_S 10.0
#define READ_BLOCKS 4 /* a read delivers at most this many blocks (when the engine lags) */
#define MAX_CASES 64
#define MAX_DEVICES 2
#define N_SLOWEST 10 /* pushes (and overruns) whose breakdown each case records */
#define MAX_STEAL_CPUS 256
#define MAX_WORKERS SS_LIVE_MAX_WORKERS
/* what a --replicas case does not measure: R engines push every block, so one engine's busy time and
 * per-push phases would describe a replica whose results may have been dropped */
#define UNTRACED_NOTE \
  "off (replicas: the runner counts blocks, overruns and latencies; no engine phases, busy time or idle gaps)"

typedef struct {
  int channels;
  double block_ms;
  ss_device_kind device;
  double seconds; /* paced replay (recorded seconds) */
  double speed;   /* paced blocks sent this many times faster than real time */
} bench_case;

typedef struct {
  double seconds; /* the recording */
  double blocks_ms[MAX_BLOCKS];
  int n_blocks;
  int channels[MAX_CHANNEL_COUNTS];
  int n_channel_counts;
  ss_device_kind devices[MAX_DEVICES];
  int n_devices;
  bench_case cases[MAX_CASES];
  int n_cases;
  const char *out, *tmpdir;
  ss_device_kind sort_device;
  double speed;           /* default of the cases */
  double unpaced_seconds; /* 0: the whole recording */
  int gpu_wait;           /* ss_live_wait */
  int realtime;           /* --realtime PRIORITY given: SCHED_FIFO for the pushing thread */
  int realtime_priority;
  char realtime_note[160]; /* what the cases record: "SCHED_FIFO", "off" or why it was refused */
  int spin_reader;         /* --reader spin: poll the socket without sleeping between blocks */
  int spin_sender;         /* --sender spin: the sender spins until a block is due instead of sleeping */
  int pins[MAX_WORKERS];   /* --pin CPU[,CPU...]: worker i pinned to pins[i] */
  int n_pins;
  int workers;  /* --workers N: pushing threads taking turns (ss_live_workers_run; --reader spin) */
  int replicas; /* --replicas R: engines pushing every block (ss_live_replicas_run; --reader spin) */
  char pin_note[160];
  int sender_pins[MAX_WORKERS]; /* --sender-pin CPU[,CPU...]: sending thread i pinned to sender_pins[i] */
  int n_sender_pins;
  int sender_workers; /* --sender-workers N: sending threads taking turns (with --sender spin) */
} bench_args;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double percentile(double *v, int64_t n, double pct) {
  if (n == 0) return 0;
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  int64_t i = (int64_t)(pct / 100.0 * (double)(n - 1) + 0.5);
  return v[i];
}

/* --- the recording and its model ----------------------------------------------------------------- */

typedef struct {
  int C;
  int16_t *raw;
  int64_t n_rows;
  ss_live_model model;
  char bin[4096], dir[4096], probe[4096];
} workload;

/* The probe file: the repository's 32-channel probe, else a generated two-column linear probe. */
static ss_status probe_file(ss_ctx *ctx, const bench_args *a, workload *w) {
  if (w->C == 32) {
    snprintf(w->probe, sizeof(w->probe), "%s", PROBE_32);
    return SS_OK;
  }
  snprintf(w->probe, sizeof(w->probe), "%s/bench_live_%d_probe%d.json", a->tmpdir, (int)getpid(), w->C);
  FILE *f = fopen(w->probe, "w");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create", w->probe);
  fprintf(f, "{\"channels\": [");
  for (int c = 0; c < w->C; c++) fprintf(f, "%s%d", c ? ", " : "", c);
  fprintf(f, "], \"positions\": [");
  for (int c = 0; c < w->C; c++) fprintf(f, "%s[%g, %g]", c ? ", " : "", (c % 2) * COLUMN_UM, c * PITCH_UM);
  fprintf(f, "]}\n");
  return fclose(f) == 0 ? SS_OK : ss_fail(ctx, SS_ERR_IO, "%s: write failed", w->probe);
}

static ss_status make_workload(ss_ctx *ctx, const bench_args *a, workload *w) {
  ss_probe probe;
  SS_TRY(probe_file(ctx, a, w));
  SS_TRY(ss_probe_load_file(ctx, w->probe, ADJACENCY_RADIUS_UM, &probe));
  ss_sim_config c;
  ss_sim_config_preset(&c, SS_SIM_PRESET_EASY); /* the recorded results' workload */
  c.duration_s = a->seconds;
  c.rate_hz = RATE;
  c.seed = 7;
  c.n_units = UNITS_PER_32 * w->C / 32;
  snprintf(w->bin, sizeof(w->bin), "%s/bench_live_%d_%d.bin", a->tmpdir, (int)getpid(), w->C);
  snprintf(w->dir, sizeof(w->dir), "%s/bench_live_%d_%d", a->tmpdir, (int)getpid(), w->C);
  ss_status st = ss_sim_write(ctx, &c, &probe, w->bin, SS_SIM_FORMAT_BINARY, 0, NULL);
  ss_probe_free(&probe);
  SS_TRY(st);
  ss_sort_opts o;
  ss_sort_opts_defaults(&o);
  o.spec.path = w->bin;
  o.spec.format = SS_FORMAT_BINARY;
  o.spec.n_channels = w->C;
  o.spec.rate_hz = RATE;
  o.spec.uv_per_step = UV_PER_STEP;
  o.probe_path = w->probe;
  o.out_dir = w->dir;
  o.device = a->sort_device;
  ss_sort_summary sum;
  memset(&sum, 0, sizeof(sum));
  double t0 = ss_now();
  SS_TRY(ss_sort_run(ctx, &o, &sum));
  fprintf(stderr, "bench_live: %d channels: sorted %.0f s in %.1f s: %lld spikes, %lld clusters\n", w->C, a->seconds,
          ss_now() - t0, (long long)sum.n_spikes, (long long)sum.n_clusters);
  ss_sort_summary_free(&sum);
  char model[4200];
  snprintf(model, sizeof(model), "%s/model.h5", w->dir);
  SS_TRY(ss_live_model_load(ctx, model, &w->model));
  FILE *f = fopen(w->bin, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open", w->bin);
  w->n_rows = (int64_t)(a->seconds * RATE);
  size_t n = (size_t)w->n_rows * w->C;
  st = SS_ALLOC(ctx, w->raw, n, "recording");
  if (st == SS_OK && fread(w->raw, sizeof(int16_t), n, f) != n) st = ss_fail(ctx, SS_ERR_IO, "%s: short read", w->bin);
  fclose(f);
  return st;
}

/* --- the sender ------------------------------------------------------------------------------------ */

typedef struct {
  const workload *w;
  const char *uri;
  int64_t block_rows;
  int64_t total_rows;        /* rows sent: the recording looped when longer */
  double speed;              /* schedule: × real time */
  int spin;                  /* --sender spin */
  int workers;               /* --sender-workers: sending threads taking turns (with --sender spin) */
  const int *cpus;           /* --sender-pin: per sending thread a CPU, or NULL */
  int16_t *tmp;              /* a block that wraps around the recording's end */
  double *t_send;            /* per block: just before its write */
  double *t_written;         /* per block: when its write returned */
  atomic_llong rows_written; /* rows whose write returned */
  ss_link *l;
  double t0;
  ss_status st;
  char msg[512];
} sender;

/* Until t: sleep, or spin (--sender spin: no wake-up of a sleeping thread, as a device streaming
 * samples would not have one). */
static void sleep_until(double t, int spin) {
  if (spin) {
    while (ss_now() < t) {
    }
    return;
  }
  double d = t - ss_now();
  if (d <= 0) return;
  struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
  nanosleep(&ts, NULL);
}

/* The next block: its first row, length, and when it is due (once its last sample exists). */
static int64_t next_block(const sender *s, int64_t *n, double *due) {
  int64_t r = atomic_load(&s->rows_written);
  *n = s->total_rows - r < s->block_rows ? s->total_rows - r : s->block_rows;
  *due = s->t0 + (double)(r + *n) / (RATE * s->speed);
  return r;
}

/* The sender is a task of the live workers too (drivers/live_workers.h): with --sender spin several
 * sending threads may take turns (--sender-workers), so that the VM stopping one of them does not make
 * a block leave late — the rig's stall, which the strict arrival would charge to the engine. */
static int send_ready(void *user) {
  sender *s = user;
  int64_t n;
  double due;
  int64_t r = next_block(s, &n, &due);
  return !s->spin || r >= s->total_rows || ss_now() >= due;
}

static ss_status send_work(ss_ctx *ctx, void *user, int *done) {
  sender *s = user;
  int64_t n;
  double due;
  const int64_t r = next_block(s, &n, &due), b = r / s->block_rows, C = s->w->C, R = s->w->n_rows;
  if (r >= s->total_rows) {
    *done = 1;
    return SS_OK;
  }
  if (s->spin && ss_now() < due) return SS_OK; /* another sending thread was faster */
  const int16_t *p = s->w->raw + (r % R) * C;
  if (r % R + n > R) { /* wraps: assemble it */
    for (int64_t k = 0; k < n; k++) memcpy(s->tmp + k * C, s->w->raw + ((r + k) % R) * C, (size_t)C * sizeof(int16_t));
    p = s->tmp;
  }
  sleep_until(due, s->spin);
  s->t_send[b] = ss_now();
  SS_TRY(ss_link_write(ctx, s->l, p, (size_t)(n * C) * sizeof(int16_t)));
  s->t_written[b] = ss_now();
  atomic_store(&s->rows_written, r + n);
  return SS_OK;
}

static void *sender_main(void *arg) {
  sender *s = arg;
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ctx.quiet = 1;
  ctx.log_level = SS_LOG_WARN;
  ss_backend cpu;
  s->st = ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 1, &cpu);
  if (s->st == SS_OK) s->st = ss_link_open(&ctx, s->uri, SS_LINK_WRITE, CONNECT_TIMEOUT_S, &s->l);
  s->t0 = ss_now();
  ss_live_task task = {send_ready, send_work, s};
  ss_live_workers_opts o = {s->spin ? s->workers : 1, s->cpus, INFINITY};
  if (s->st == SS_OK) s->st = ss_live_workers_run(&ctx, &cpu, &o, &task, NULL);
  if (s->st != SS_OK) snprintf(s->msg, sizeof(s->msg), "%s", ss_error_message(&ctx));
  ss_link_close(s->l);
  ss_backend_close(&cpu);
  return NULL;
}

/* --- runs ------------------------------------------------------------------------------------------ */

/* Rows of the unpaced pass: the recording, or its first --unpaced-seconds. */
static int64_t unpaced_rows(const bench_args *a, const workload *w) {
  int64_t n = a->unpaced_seconds > 0 ? (int64_t)(a->unpaced_seconds * RATE + 0.5) : w->n_rows;
  return n < w->n_rows ? n : w->n_rows;
}

typedef struct {
  const sender *snd; /* paced runs: send times for the end-to-end latency */
  int n_after;
  double *e2e_us;
  int64_t n, cap;
} counter;

static ss_status count_spike(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  counter *c = user;
  if (!c->snd) return SS_OK;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 4096;
    double *p = realloc(c->e2e_us, (size_t)c->cap * sizeof(double));
    if (!p) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: latencies");
    c->e2e_us = p;
  }
  int64_t last = s->t + c->n_after - 1, b = last / c->snd->block_rows;
  int64_t n_blocks = (c->snd->total_rows + c->snd->block_rows - 1) / c->snd->block_rows;
  if (b >= n_blocks) b = n_blocks - 1;
  c->e2e_us[c->n++] = (ss_now() - c->snd->t_send[b]) * 1e6;
  return SS_OK;
}

/* An overrun, split: the engine still busy with earlier pushes after the block arrived, the read
 * returning late after the data was there and the engine free (wake-up, preemption), the gap from the
 * read to the push. */
typedef struct {
  int64_t push;
  double behind_s, engine_busy_s, read_wait_s, gap_s, prev_push_s;
  double write_s; /* the sender's write of the push's first block (a stalled sender looks like a late read) */
} overrun_note;

/* Paced runs: the per-push breakdown (ss_live_opts.trace) summarised. */
typedef struct {
  ss_live_push_trace slowest[N_SLOWEST];
  int n_slowest;
  overrun_note worst[N_SLOWEST];
  int n_worst;
  double phase_sum[SS_LIVE_PHASES], phase_max[SS_LIVE_PHASES];
  int64_t pushes, detecting, with_setup, preempted, blocked, overruns_busy, overruns_reader, overruns_sender;
  double offcpu_sum_s, offcpu_max_s, read_wait_max_s;
  double steal_s, steal_max_cpu_s; /* /proc/stat steal time over the paced loop: all CPUs, the largest one */
  /* --reader spin: the longest gap between two polls of the idle pushing thread, and the gaps longer
   * than a block — the machine stopping a thread that runs no engine code (a platform stall) */
  double idle_gap_max_s;
  int64_t idle_stalls;
} push_log;

typedef struct {
  ss_live_stats stats;
  double busy_s, wall_s, e2e_p50_us, e2e_p99_us, e2e_max_us;
  push_log log;
  double prev_push_s; /* paced loop: the previous push's processing time */
} run_result;

static void log_push(push_log *g, const ss_live_push_trace *t) {
  g->pushes++;
  g->detecting += t->detected;
  g->with_setup += t->setups > 0;
  g->preempted += t->involuntary_switches > 0;
  g->blocked += t->voluntary_switches > 0;
  for (int p = 0; p < SS_LIVE_PHASES; p++) {
    g->phase_sum[p] += t->phase_s[p];
    if (t->phase_s[p] > g->phase_max[p]) g->phase_max[p] = t->phase_s[p];
  }
  double off = t->total_s - t->cpu_s;
  g->offcpu_sum_s += off > 0 ? off : 0;
  if (off > g->offcpu_max_s) g->offcpu_max_s = off;
  if (g->n_slowest == N_SLOWEST && t->total_s <= g->slowest[N_SLOWEST - 1].total_s) return;
  int i = g->n_slowest < N_SLOWEST ? g->n_slowest++ : N_SLOWEST - 1;
  for (; i > 0 && g->slowest[i - 1].total_s < t->total_s; i--) g->slowest[i] = g->slowest[i - 1];
  g->slowest[i] = *t;
}

/* Counted once, by the largest of: engine busy, read wait (with a sender whose write took longer than
 * a block: the sender's stall). */
static void log_overrun(push_log *g, const overrun_note *o, double block_s) {
  if (o->engine_busy_s >= o->read_wait_s) g->overruns_busy++;
  else if (o->write_s > block_s) g->overruns_sender++;
  else g->overruns_reader++;
  if (g->n_worst == N_SLOWEST && o->behind_s <= g->worst[N_SLOWEST - 1].behind_s) return;
  int i = g->n_worst < N_SLOWEST ? g->n_worst++ : N_SLOWEST - 1;
  for (; i > 0 && g->worst[i - 1].behind_s < o->behind_s; i--) g->worst[i] = g->worst[i - 1];
  g->worst[i] = *o;
}

static void steal_since(push_log *g, const double *before, int n) {
  double now[MAX_STEAL_CPUS + 1];
  int m = ss_bench_read_steal(now, MAX_STEAL_CPUS + 1);
  if (m < n) n = m;
  if (n > 0) g->steal_s = now[0] - before[0];
  for (int i = 1; i < n; i++)
    if (now[i] - before[i] > g->steal_max_cpu_s) g->steal_max_cpu_s = now[i] - before[i];
}

/* Arrival of a read whose first row is row `first` of the replay: the send time of that row's block.
 * The read's own time would hide how long the data waited in the socket while the engine was busy
 * (inline and spin reads happen only between pushes), which `spikestream live` sees through its reader
 * thread; the send time counts it: overruns and latencies are those of a reader that never waits.
 * t_send[b] is written before block b is written to the socket, so it is set once its rows were read. */
static double arrival(const sender *s, int64_t first, double t_read) {
  double t = s->t_send[first / s->block_rows];
  return t > 0 && t < t_read ? t : t_read;
}

/* The paced loop is the live runner's (drivers/live_run.h), as `spikestream live` runs it: --reader spin
 * polls with the runner's workers (--workers N) or its replicas (--replicas R), --reader block reads
 * inline (one thread sleeping in read(): its wake-up is then on the critical path). The runner's hooks
 * give the engine the send time as arrival, hand over every push's trace and count the spikes. */
typedef struct {
  sender *snd;
  double block_s;
  counter *cnt;
  run_result *res;
  double busy, prev_end;
  int64_t index;
} paced_loop;

static double paced_arrival(void *user, int64_t first_row, double t_read) {
  return arrival(((paced_loop *)user)->snd, first_row, t_read);
}

static ss_status paced_emit(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  return count_spike(ctx, ((paced_loop *)user)->cnt, s);
}

/* After each push: its trace, and an overrun's breakdown. */
static void paced_pushed(void *user, const ss_live_engine *e, const ss_live_run_push *pp) {
  paced_loop *p = user;
  const sender *snd = p->snd;
  run_result *res = p->res;
  const double t1 = pp->t_start, arr = pp->t_arrival;
  p->busy += pp->t_end - t1;
  ss_live_push_trace tr;
  ss_live_last_push(e, &tr);
  log_push(&res->log, &tr);
  double free_at = p->prev_end > arr ? p->prev_end : arr, read_wait = pp->t_read - free_at;
  if (read_wait > res->log.read_wait_max_s) res->log.read_wait_max_s = read_wait;
  if (tr.behind_s > p->block_s) {
    double busy_until = p->prev_end < t1 ? p->prev_end : t1;
    int64_t b = pp->first_row / snd->block_rows;
    overrun_note on = {p->index,
                       tr.behind_s,
                       busy_until > arr ? busy_until - arr : 0,
                       read_wait > 0 ? read_wait : 0,
                       t1 - pp->t_read,
                       res->log.pushes > 1 ? res->prev_push_s : 0,
                       snd->t_written[b] > snd->t_send[b] ? snd->t_written[b] - snd->t_send[b] : 0};
    log_overrun(&res->log, &on, p->block_s);
  }
  res->prev_push_s = tr.total_s;
  p->prev_end = pp->t_end;
  p->index++;
}

/* The runner's options for a paced case: the socket, the recording's model, the engine with the
 * trace (replicas: the runner counts, no per-push trace), the reading mode. */
static void paced_opts(const ss_backend *be, const bench_args *a, const workload *w, const char *uri,
                       int64_t block_rows, paced_loop *pl, ss_live_run_opts *o) {
  ss_live_run_opts_defaults(o);
  o->source = uri;
  o->connect_timeout_s = CONNECT_TIMEOUT_S;
  o->raw = 1; /* the sender thread writes bare frames */
  o->read_max_rows = READ_BLOCKS * block_rows;
  o->model = &w->model;
  o->backend = be;
  o->engine.block_s = pl->block_s; /* the overrun threshold stays one block at any speed */
  o->engine.gpu_wait = a->gpu_wait;
  o->engine.trace = !a->replicas;
  o->spin = a->spin_reader || a->replicas;
  o->inline_read = !o->spin;
  o->workers = a->workers;
  o->replicas = a->replicas;
  o->pins = a->n_pins ? a->pins : NULL;
  o->n_pins = a->n_pins;
  o->hooks = (ss_live_run_hooks){paced_arrival, a->replicas ? NULL : paced_pushed, paced_emit, pl};
}

static ss_status paced_run(ss_ctx *ctx, const ss_backend *be, bench_args *a, const workload *w, const bench_case *bc,
                           run_result *res) {
  const double block_ms = bc->block_ms, seconds = bc->seconds;
  char path[4200], listen_uri[4300], connect_uri[4300];
  snprintf(path, sizeof(path), "%s/bench_live_%d.sock", a->tmpdir, (int)getpid());
  snprintf(listen_uri, sizeof(listen_uri), "unix-listen://%s", path);
  snprintf(connect_uri, sizeof(connect_uri), "unix://%s", path);
  sender snd = {.w = w,
                .uri = listen_uri,
                .block_rows = (int64_t)(block_ms * RATE / MS_PER_S + 0.5),
                .total_rows = (int64_t)(seconds * RATE + 0.5),
                .speed = bc->speed,
                .spin = a->spin_sender,
                .workers = a->sender_workers,
                .cpus = a->n_sender_pins ? a->sender_pins : NULL};
  int64_t n_blocks = (snd.total_rows + snd.block_rows - 1) / snd.block_rows;
  ss_status st = SS_CALLOC(ctx, snd.t_send, (size_t)n_blocks, "send times");
  if (st == SS_OK) st = SS_CALLOC(ctx, snd.t_written, (size_t)n_blocks, "send times");
  if (st == SS_OK) st = SS_ALLOC(ctx, snd.tmp, (size_t)(snd.block_rows * w->C), "send block");
  pthread_t th;
  int started = st == SS_OK && pthread_create(&th, NULL, sender_main, &snd) == 0;
  counter cnt = {.snd = &snd, .n_after = w->model.n_after};
  paced_loop pl = {.snd = &snd, .block_s = block_ms / MS_PER_S, .cnt = &cnt, .res = res};
  ss_live_run_opts o;
  paced_opts(be, a, w, connect_uri, snd.block_rows, &pl, &o);
  ss_live_run_stats rs;
  memset(&rs, 0, sizeof(rs));
  double steal0[MAX_STEAL_CPUS + 1];
  int n_steal = ss_bench_read_steal(steal0, MAX_STEAL_CPUS + 1);
  if (started) st = ss_live_run(ctx, &o, &rs);
  res->stats = rs.stats;
  res->busy_s = pl.busy;
  res->log.idle_stalls = rs.idle.idle_stalls;
  res->log.idle_gap_max_s = rs.idle.idle_gap_max_s;
  steal_since(&res->log, steal0, n_steal);
  if (started) pthread_join(th, NULL);
  res->wall_s = rs.t_end - (started ? snd.t0 : rs.t_start); /* from the sender's schedule start */
  if (st == SS_OK && snd.st != SS_OK) st = ss_fail(ctx, snd.st, "sender: %s", snd.msg);
  res->e2e_p50_us = percentile(cnt.e2e_us, cnt.n, 50);
  res->e2e_p99_us = percentile(cnt.e2e_us, cnt.n, 99);
  res->e2e_max_us = percentile(cnt.e2e_us, cnt.n, 100);
  free(cnt.e2e_us);
  free(snd.t_send);
  free(snd.t_written);
  free(snd.tmp);
  return st;
}

/* The recording's first `seconds` (all of it when 0 or longer) pushed as fast as possible. */
static ss_status unpaced_run(ss_ctx *ctx, const ss_backend *be, const bench_args *a, const workload *w, double block_ms,
                             run_result *res) {
  ss_live_opts o;
  ss_live_opts_defaults(&o);
  o.gpu_wait = a->gpu_wait;
  ss_live_engine *e = NULL;
  SS_TRY(ss_live_engine_open(ctx, be, &w->model, &o, &e));
  int64_t rows = (int64_t)(block_ms * RATE / MS_PER_S + 0.5), total = unpaced_rows(a, w);
  counter cnt = {0};
  ss_status st = SS_OK;
  double t0 = ss_now();
  for (int64_t r = 0; r < total && st == SS_OK; r += rows) {
    int64_t n = total - r < rows ? total - r : rows;
    st = ss_live_push(ctx, e, w->raw + r * w->C, n, ss_now(), count_spike, &cnt);
  }
  if (st == SS_OK) st = ss_live_flush(ctx, e, count_spike, &cnt);
  res->wall_s = res->busy_s = ss_now() - t0;
  ss_live_get_stats(e, &res->stats);
  ss_live_engine_close(e);
  return st;
}

/* --realtime: the main thread pushes, so it is the one that gets SCHED_FIFO; a refusal is recorded and
 * said, and the run goes on at normal priority. */
static ss_status set_realtime(ss_ctx *ctx, bench_args *a) {
  snprintf(a->realtime_note, sizeof(a->realtime_note), "off");
  if (!a->realtime) return SS_OK;
  int applied = 0;
  char why[128];
  SS_TRY(ss_live_realtime(ctx, a->realtime_priority, &applied, why, sizeof(why)));
  if (applied) snprintf(a->realtime_note, sizeof(a->realtime_note), "SCHED_FIFO");
  else {
    snprintf(a->realtime_note, sizeof(a->realtime_note), "refused: %s", why);
    fprintf(stderr, "bench_live: --realtime: %s; running at normal priority\n", why);
  }
  return SS_OK;
}

/* --- driver ---------------------------------------------------------------------------------------- */

static const char usage[] =
    "usage: bench_live [--seconds S] [--blocks 1,2,5,10] [--channels 32,128] [--device cpu[,cuda]]\n"
    "                  [--cases C:B:D[:S[:X]],...] [--speed X] [--unpaced-seconds S] [--gpu-wait spin|sync]\n"
    "                  [--sort-device D] [--out FILE] [--tmpdir DIR] [--realtime PRIORITY]\n"
    "                  [--reader block|spin] [--sender sleep|spin] [--workers N]\n"
    "                  [--pin CPU[,CPU...]] [--sender-workers N] [--sender-pin CPU[,CPU...]] [--replicas R]\n";

static int parse_device(const char *text, ss_device_kind *out) {
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  return ss_device_kind_parse(&ctx, text, out) == SS_OK && *out != SS_DEVICE_AUTO;
}

/* "C:B:D[:S]" cases, comma-separated. */
static int parse_cases(const char *v, bench_args *a) {
  a->n_cases = 0;
  for (const char *p = v; *p; p += strcspn(p, ","), p += *p == ',') {
    char item[64], dev[16] = "";
    size_t len = strcspn(p, ",");
    if (len >= sizeof(item) || a->n_cases == MAX_CASES) return 0;
    memcpy(item, p, len);
    item[len] = 0;
    bench_case *c = &a->cases[a->n_cases];
    c->seconds = 0;
    c->speed = 0;
    int got = sscanf(item, "%d:%lf:%15[a-z]:%lf:%lf", &c->channels, &c->block_ms, dev, &c->seconds, &c->speed);
    if (got < 3 || !parse_device(dev, &c->device) || c->channels < 2 || c->channels % 2 || !(c->block_ms > 0) ||
        (got == 5 && !(c->speed > 0)))
      return 0;
    a->n_cases++;
  }
  return a->n_cases > 0;
}

static int parse_args(int argc, char **argv, bench_args *a) {
  memset(a, 0, sizeof(*a));
  a->seconds = DEFAULT_SECONDS;
  a->out = "bench/results/live.json";
  a->tmpdir = "/tmp";
  a->devices[0] = SS_DEVICE_CPU;
  a->n_devices = 1;
  a->sort_device = SS_DEVICE_CPU;
  a->speed = 1;
  a->gpu_wait = SS_LIVE_WAIT_SPIN;
  a->workers = 1;
  for (int i = 0; i < MAX_WORKERS; i++) a->pins[i] = -1;
  a->sender_workers = 1;
  for (int i = 0; i < MAX_WORKERS; i++) a->sender_pins[i] = -1;
  const double defaults[] = {1, 2, 5, 10};
  a->n_blocks = 4;
  memcpy(a->blocks_ms, defaults, sizeof(defaults));
  a->channels[0] = 32;
  a->n_channel_counts = 1;
  const char *cases = NULL;
  for (int i = 1; i < argc; i++) {
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) return fprintf(stderr, "bench_live: %s needs a value\n", argv[i]), 2;
    if (strcmp(argv[i], "--seconds") == 0) a->seconds = atof(v);
    else if (strcmp(argv[i], "--out") == 0) a->out = v;
    else if (strcmp(argv[i], "--tmpdir") == 0) a->tmpdir = v;
    else if (strcmp(argv[i], "--cases") == 0) cases = v;
    else if (strcmp(argv[i], "--speed") == 0) a->speed = atof(v);
    else if (strcmp(argv[i], "--unpaced-seconds") == 0) a->unpaced_seconds = atof(v);

    else if (strcmp(argv[i], "--sender-pin") == 0 || strcmp(argv[i], "--pin") == 0) {
      int sender_side = strcmp(argv[i], "--sender-pin") == 0;
      ss_ctx pc;
      ss_ctx_init(&pc);
      if (ss_live_cpu_list_parse(&pc, argv[i], v, sender_side ? a->sender_pins : a->pins, MAX_WORKERS,
                                 sender_side ? &a->n_sender_pins : &a->n_pins) != SS_OK)
        return fprintf(stderr, "bench_live: %s\n", ss_error_message(&pc)), 2;
    } else if (strcmp(argv[i], "--replicas") == 0) {
      a->replicas = atoi(v);
      if (a->replicas < 1 || a->replicas > SS_LIVE_MAX_REPLICAS)
        return fprintf(stderr, "bench_live: --replicas %s: expected 1..%d\n", v, SS_LIVE_MAX_REPLICAS), 2;
    } else if (strcmp(argv[i], "--workers") == 0 || strcmp(argv[i], "--sender-workers") == 0) {
      int n = atoi(v);
      if (n < 1 || n > MAX_WORKERS)
        return fprintf(stderr, "bench_live: %s %s: expected 1..%d\n", argv[i], v, MAX_WORKERS), 2;
      *(strcmp(argv[i], "--workers") == 0 ? &a->workers : &a->sender_workers) = n;
    } else if (strcmp(argv[i], "--sender") == 0) {
      if (strcmp(v, "spin") && strcmp(v, "sleep"))
        return fprintf(stderr, "bench_live: --sender %s: expected spin or sleep\n", v), 2;
      a->spin_sender = strcmp(v, "spin") == 0;
    } else if (strcmp(argv[i], "--reader") == 0) {
      if (strcmp(v, "spin") && strcmp(v, "block"))
        return fprintf(stderr, "bench_live: --reader %s: expected spin or block\n", v), 2;
      a->spin_reader = strcmp(v, "spin") == 0;
    } else if (strcmp(argv[i], "--realtime") == 0) {
      a->realtime = 1;
      a->realtime_priority = atoi(v);
    } else if (strcmp(argv[i], "--gpu-wait") == 0) {
      if (strcmp(v, "spin") && strcmp(v, "sync"))
        return fprintf(stderr, "bench_live: --gpu-wait %s: expected spin or sync\n", v), 2;
      a->gpu_wait = strcmp(v, "spin") == 0 ? SS_LIVE_WAIT_SPIN : SS_LIVE_WAIT_SYNC;
    } else if (strcmp(argv[i], "--sort-device") == 0) {
      if (!parse_device(v, &a->sort_device)) return fprintf(stderr, "bench_live: --sort-device %s\n", v), 2;
    } else if (strcmp(argv[i], "--device") == 0) {
      a->n_devices = 0;
      for (const char *p = v; *p && a->n_devices < MAX_DEVICES; p += strcspn(p, ","), p += *p == ',') {
        char dev[16];
        snprintf(dev, sizeof(dev), "%.*s", (int)strcspn(p, ","), p);
        if (!parse_device(dev, &a->devices[a->n_devices++])) return fprintf(stderr, "bench_live: --device %s\n", v), 2;
      }
    } else if (strcmp(argv[i], "--blocks") == 0) {
      a->n_blocks = 0;
      for (const char *p = v; *p && a->n_blocks < MAX_BLOCKS; p += strcspn(p, ","), p += *p == ',')
        a->blocks_ms[a->n_blocks++] = atof(p);
    } else if (strcmp(argv[i], "--channels") == 0) {
      a->n_channel_counts = 0;
      for (const char *p = v; *p && a->n_channel_counts < MAX_CHANNEL_COUNTS; p += strcspn(p, ","), p += *p == ',')
        a->channels[a->n_channel_counts++] = atoi(p);
    } else {
      return fprintf(stderr, "%s", usage), 2;
    }
    i++;
  }
  if (!(a->seconds >= 1)) return fprintf(stderr, "bench_live: --seconds: expected >= 1\n"), 2;
  if (!(a->speed > 0)) return fprintf(stderr, "bench_live: --speed: expected > 0\n"), 2;
  if (!(a->unpaced_seconds >= 0)) return fprintf(stderr, "bench_live: --unpaced-seconds: expected >= 0\n"), 2;
  for (int i = 0; i < a->n_channel_counts; i++)
    if (a->channels[i] < 2 || a->channels[i] % 2)
      return fprintf(stderr, "bench_live: --channels: expected even counts >= 2\n"), 2;
  if (cases) {
    if (!parse_cases(cases, a))
      return fprintf(stderr, "bench_live: --cases %s: expected C:B:cpu|cuda[:S],...\n", cases), 2;
  } else {
    for (int ci = 0; ci < a->n_channel_counts; ci++)
      for (int d = 0; d < a->n_devices; d++)
        for (int b = 0; b < a->n_blocks && a->n_cases < MAX_CASES; b++)
          a->cases[a->n_cases++] = (bench_case){a->channels[ci], a->blocks_ms[b], a->devices[d], 0, 0};
  }
  for (int i = 0; i < a->n_cases; i++) {
    if (!(a->cases[i].seconds > 0)) a->cases[i].seconds = a->seconds;
    if (!(a->cases[i].speed > 0)) a->cases[i].speed = a->speed;
  }
  return 0;
}

static const char *device_tag(ss_device_kind d) { return d == SS_DEVICE_CUDA ? "gpu" : "cpu"; }

/* The paced run's breakdown: per-phase mean (over all pushes) and max, the slowest pushes split by
 * phase, and the worst overruns split by cause (ms). */
static void add_breakdown(cJSON *c, const push_log *g, int traced) {
  cJSON_AddNumberToObject(c, "steal_ms_all_cpus", 1e3 * g->steal_s);
  cJSON_AddNumberToObject(c, "steal_ms_max_cpu", 1e3 * g->steal_max_cpu_s);
  if (!traced) {
    cJSON_AddStringToObject(c, "per_push_trace", UNTRACED_NOTE);
    return;
  }
  cJSON *ph = cJSON_AddObjectToObject(c, "phase_ms");
  for (int p = 0; p < SS_LIVE_PHASES; p++) {
    cJSON *o = cJSON_AddObjectToObject(ph, ss_live_phase_name(p));
    cJSON_AddNumberToObject(o, "mean", g->pushes ? 1e3 * g->phase_sum[p] / (double)g->pushes : 0);
    cJSON_AddNumberToObject(o, "max", 1e3 * g->phase_max[p]);
  }
  cJSON_AddNumberToObject(c, "pushes_detecting", (double)g->detecting);
  cJSON_AddNumberToObject(c, "pushes_with_setup", (double)g->with_setup);
  cJSON_AddNumberToObject(c, "pushes_preempted", (double)g->preempted);
  cJSON_AddNumberToObject(c, "pushes_blocked", (double)g->blocked);
  cJSON_AddNumberToObject(c, "push_offcpu_ms_total", 1e3 * g->offcpu_sum_s);
  cJSON_AddNumberToObject(c, "push_offcpu_ms_max", 1e3 * g->offcpu_max_s);
  cJSON_AddNumberToObject(c, "read_wait_ms_max", 1e3 * g->read_wait_max_s);
  cJSON_AddNumberToObject(c, "idle_gap_ms_max", 1e3 * g->idle_gap_max_s);
  cJSON_AddNumberToObject(c, "idle_stalls_over_block", (double)g->idle_stalls);
  cJSON_AddNumberToObject(c, "overruns_engine_busy", (double)g->overruns_busy);
  cJSON_AddNumberToObject(c, "overruns_reader", (double)g->overruns_reader);
  cJSON_AddNumberToObject(c, "overruns_sender", (double)g->overruns_sender);
  cJSON *sl = cJSON_AddArrayToObject(c, "slowest_pushes");
  for (int i = 0; i < g->n_slowest; i++) {
    const ss_live_push_trace *t = &g->slowest[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "total_ms", 1e3 * t->total_s);
    cJSON_AddNumberToObject(o, "cpu_ms", 1e3 * t->cpu_s);
    cJSON_AddNumberToObject(o, "involuntary_switches", (double)t->involuntary_switches);
    cJSON_AddNumberToObject(o, "voluntary_switches", (double)t->voluntary_switches);
    cJSON_AddNumberToObject(o, "behind_ms", 1e3 * t->behind_s);
    cJSON_AddNumberToObject(o, "rows", (double)t->rows);
    cJSON_AddNumberToObject(o, "buffer_rows", (double)t->buffer_rows);
    cJSON_AddNumberToObject(o, "detected", t->detected);
    cJSON_AddNumberToObject(o, "found", (double)t->found);
    cJSON_AddNumberToObject(o, "emitted", (double)t->emitted);
    cJSON_AddNumberToObject(o, "setups", t->setups);
    for (int p = 0; p < SS_LIVE_PHASES; p++) cJSON_AddNumberToObject(o, ss_live_phase_name(p), 1e3 * t->phase_s[p]);
    cJSON_AddItemToArray(sl, o);
  }
  cJSON *wo = cJSON_AddArrayToObject(c, "worst_overruns");
  for (int i = 0; i < g->n_worst; i++) {
    const overrun_note *n = &g->worst[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "push", (double)n->push);
    cJSON_AddNumberToObject(o, "behind_ms", 1e3 * n->behind_s);
    cJSON_AddNumberToObject(o, "engine_busy_ms", 1e3 * n->engine_busy_s);
    cJSON_AddNumberToObject(o, "read_wait_ms", 1e3 * n->read_wait_s);
    cJSON_AddNumberToObject(o, "read_to_push_ms", 1e3 * n->gap_s);
    cJSON_AddNumberToObject(o, "prev_push_ms", 1e3 * n->prev_push_s);
    cJSON_AddNumberToObject(o, "write_ms", 1e3 * n->write_s);
    cJSON_AddItemToArray(wo, o);
  }
}

/* One line per case: the phases' mean / max and the slowest push (stdout, next to the case line). */
static void print_breakdown(const push_log *g, int traced) {
  if (!traced) {
    printf("    steal %.1f ms (all CPUs; max one CPU %.1f); per-push trace: %s\n", 1e3 * g->steal_s,
           1e3 * g->steal_max_cpu_s, UNTRACED_NOTE);
    return;
  }
  printf("    phases (mean / max ms):");
  for (int p = 0; p < SS_LIVE_PHASES; p++)
    printf(" %s %.3f/%.3f", ss_live_phase_name(p), g->pushes ? 1e3 * g->phase_sum[p] / (double)g->pushes : 0,
           1e3 * g->phase_max[p]);
  printf("; %lld detecting, %lld with setup, %lld preempted, %lld blocked; off-CPU in pushes %.1f ms (max %.2f); steal "
         "%.1f ms (all CPUs; max one CPU %.1f); read wait max %.2f ms; idle gaps max %.2f ms, %lld over a block; "
         "overruns: %lld engine busy, %lld reader, %lld "
         "sender\n",
         (long long)g->detecting, (long long)g->with_setup, (long long)g->preempted, (long long)g->blocked,
         1e3 * g->offcpu_sum_s, 1e3 * g->offcpu_max_s, 1e3 * g->steal_s, 1e3 * g->steal_max_cpu_s,
         1e3 * g->read_wait_max_s, 1e3 * g->idle_gap_max_s, (long long)g->idle_stalls, (long long)g->overruns_busy,
         (long long)g->overruns_reader, (long long)g->overruns_sender);
  for (int i = 0; i < g->n_slowest && i < 3; i++) {
    const ss_live_push_trace *t = &g->slowest[i];
    printf("    slow push %d: %.3f ms (cpu %.3f, %lld preemptions, %lld blocks), %lld rows, buffer %lld, found %lld, "
           "setups %d:",
           i + 1, 1e3 * t->total_s, 1e3 * t->cpu_s, (long long)t->involuntary_switches,
           (long long)t->voluntary_switches, (long long)t->rows, (long long)t->buffer_rows, (long long)t->found,
           t->setups);
    for (int p = 0; p < SS_LIVE_PHASES; p++)
      if (t->phase_s[p] > 0) printf(" %s %.3f", ss_live_phase_name(p), 1e3 * t->phase_s[p]);
    printf("\n");
  }
  for (int i = 0; i < g->n_worst && i < 3; i++) {
    const overrun_note *n = &g->worst[i];
    printf("    overrun %d: push %lld %.3f ms behind: engine busy %.3f, read wait %.3f (sender's write %.3f), read to "
           "push "
           "%.3f, previous push %.3f ms\n",
           i + 1, (long long)n->push, 1e3 * n->behind_s, 1e3 * n->engine_busy_s, 1e3 * n->read_wait_s, 1e3 * n->write_s,
           1e3 * n->gap_s, 1e3 * n->prev_push_s);
  }
}

static double per_push(int64_t count, const ss_live_stats *s) {
  return s->blocks ? (double)count / (double)s->blocks : 0;
}

static void add_case(ss_bench_doc *doc, const bench_args *a, const workload *w, const bench_case *bc,
                     const run_result *p, const run_result *u) {
  const double seconds = (double)unpaced_rows(a, w) / RATE; /* the unpaced pass */
  char name[64];
  const double block_ms = bc->block_ms;
  snprintf(name, sizeof(name), "%dch_%gms_%s", w->C, block_ms, device_tag(bc->device));
  cJSON *c = ss_bench_case(doc, name);
  cJSON_AddStringToObject(c, "device", device_tag(bc->device));
  cJSON_AddNumberToObject(c, "channels", w->C);
  cJSON_AddNumberToObject(c, "rate_hz", RATE);
  cJSON_AddNumberToObject(c, "block_ms", block_ms);
  cJSON_AddNumberToObject(c, "seconds", bc->seconds);
  cJSON_AddNumberToObject(c, "speed", bc->speed);
  cJSON_AddNumberToObject(c, "paced_wall_s", p->wall_s);
  cJSON_AddNumberToObject(c, "recording_seconds", (double)w->n_rows / RATE);
  cJSON_AddNumberToObject(c, "unpaced_seconds", seconds);
  cJSON_AddStringToObject(c, "realtime", a->realtime_note);
  cJSON_AddStringToObject(c, "reader", a->spin_reader ? "spin" : "block");
  cJSON_AddStringToObject(c, "sender", a->spin_sender ? "spin" : "sleep");
  cJSON_AddStringToObject(c, "pin", a->pin_note);
  if (a->replicas) cJSON_AddNumberToObject(c, "replicas", a->replicas);
  else cJSON_AddNumberToObject(c, "workers", a->spin_reader ? a->workers : 1);
  cJSON_AddNumberToObject(c, "sender_workers", a->spin_sender ? a->sender_workers : 1);
  if (a->n_sender_pins) {
    cJSON *sp = cJSON_AddArrayToObject(c, "sender_cpus");
    for (int i = 0; i < a->n_sender_pins; i++) cJSON_AddItemToArray(sp, cJSON_CreateNumber(a->sender_pins[i]));
  }
  if (bc->device == SS_DEVICE_CUDA)
    cJSON_AddStringToObject(c, "gpu_wait", a->gpu_wait == SS_LIVE_WAIT_SPIN ? "spin" : "sync");
  cJSON_AddNumberToObject(c, "units", (double)w->model.k);
  cJSON_AddNumberToObject(c, "spikes", (double)p->stats.spikes);
  cJSON_AddNumberToObject(c, "blocks", (double)p->stats.blocks);
  cJSON_AddNumberToObject(c, "p50_ms", 1e-3 * ss_live_stats_percentile_us(&p->stats, 50));
  cJSON_AddNumberToObject(c, "p99_ms", 1e-3 * ss_live_stats_percentile_us(&p->stats, 99));
  cJSON_AddNumberToObject(c, "max_ms", 1e-3 * p->stats.latency_max_us);
  cJSON_AddNumberToObject(c, "e2e_p50_ms", 1e-3 * p->e2e_p50_us);
  cJSON_AddNumberToObject(c, "e2e_p99_ms", 1e-3 * p->e2e_p99_us);
  cJSON_AddNumberToObject(c, "e2e_max_ms", 1e-3 * p->e2e_max_us);
  cJSON_AddNumberToObject(c, "overruns", (double)p->stats.overruns);
  cJSON_AddNumberToObject(c, "max_behind_ms", 1e3 * p->stats.max_behind_s);
  cJSON_AddStringToObject(c, "arrival", "send time of the push's first block");
  cJSON_AddNumberToObject(c, "slow_pushes", (double)p->stats.slow_pushes);
  cJSON_AddNumberToObject(c, "max_push_ms", 1e3 * p->stats.max_push_s);
  cJSON_AddNumberToObject(c, "graph_pushes", (double)p->stats.graph_pushes);
  cJSON_AddNumberToObject(c, "detections_per_push", per_push(p->stats.detections, &p->stats));
  cJSON_AddNumberToObject(c, "device_waits_per_push", per_push(p->stats.device_waits, &p->stats));
  char busy[32] = "not traced";
  if (!a->replicas) {
    cJSON_AddNumberToObject(c, "busy_fraction", p->busy_s / p->wall_s);
    snprintf(busy, sizeof(busy), "%.1f%%", 100.0 * p->busy_s / p->wall_s);
  }
  cJSON_AddNumberToObject(c, "unpaced_s", u->wall_s);
  cJSON_AddNumberToObject(c, "unpaced_x_realtime", seconds / u->wall_s);
  cJSON_AddNumberToObject(c, "unpaced_spikes", (double)u->stats.spikes);
  add_breakdown(c, &p->log, !a->replicas);
  printf("%4d ch, %4g ms blocks, %s, %g s paced at %gx in %.1f s: latency p50 %.3f ms, p99 %.3f ms, max %.3f ms "
         "(end to end p50 %.3f, p99 %.3f ms); %lld overruns of %lld blocks (at most %.2f ms behind); %lld pushes "
         "longer than a block (longest %.2f ms); busy %s; "
         "%.2f detections and %.2f device waits per push; unpaced %.1fx real time (%lld spikes in %g s, %lld paced)\n",
         w->C, block_ms, device_tag(bc->device), bc->seconds, bc->speed, p->wall_s,
         1e-3 * ss_live_stats_percentile_us(&p->stats, 50), 1e-3 * ss_live_stats_percentile_us(&p->stats, 99),
         1e-3 * p->stats.latency_max_us, 1e-3 * p->e2e_p50_us, 1e-3 * p->e2e_p99_us, (long long)p->stats.overruns,
         (long long)p->stats.blocks, 1e3 * p->stats.max_behind_s, (long long)p->stats.slow_pushes,
         1e3 * p->stats.max_push_s, busy, per_push(p->stats.detections, &p->stats),
         per_push(p->stats.device_waits, &p->stats), seconds / u->wall_s, (long long)u->stats.spikes, seconds,
         (long long)p->stats.spikes);
  print_breakdown(&p->log, !a->replicas);
  fflush(stdout);
  if (w->C == 32 && block_ms == 5.0 && bc->device == SS_DEVICE_CPU)
    ss_bench_summary_number(doc, "p99_ms_32ch_5ms_cpu", 1e-3 * ss_live_stats_percentile_us(&p->stats, 99));
  if (w->C == 32 && block_ms == 1.0 && bc->device == SS_DEVICE_CUDA) {
    ss_bench_summary_number(doc, "p50_ms_32ch_1ms_gpu", 1e-3 * ss_live_stats_percentile_us(&p->stats, 50));
    ss_bench_summary_number(doc, "p99_ms_32ch_1ms_gpu", 1e-3 * ss_live_stats_percentile_us(&p->stats, 99));
    ss_bench_summary_number(doc, "overruns_32ch_1ms_gpu", (double)p->stats.overruns);
    ss_bench_summary_number(doc, "seconds_32ch_1ms_gpu", bc->seconds);
    ss_bench_summary_number(doc, "speed_32ch_1ms_gpu", bc->speed);
  }
}

/* A channel count whose model could not be made: a case with the error, said on stderr; the run goes on. */
static ss_status record_failure(ss_ctx *ctx, ss_bench_doc *doc, int channels, int *failed) {
  char name[64];
  snprintf(name, sizeof(name), "%dch_model", channels);
  cJSON *c = ss_bench_case(doc, name);
  cJSON_AddNumberToObject(c, "channels", channels);
  cJSON_AddStringToObject(c, "error", ss_error_message(ctx));
  fprintf(stderr, "bench_live: %d channels: no model: %s; its cases are skipped\n", channels, ss_error_message(ctx));
  (*failed)++;
  ss_ctx_clear(ctx);
  return SS_OK;
}

/* The backend of a device, opened once (cuda without a device fails: no silent CPU fallback). */
static ss_status backend_for(ss_ctx *ctx, ss_device_kind d, ss_backend *bes, int *open, const ss_backend **out) {
  int i = d == SS_DEVICE_CUDA;
  if (!open[i]) {
    SS_TRY(ss_backend_open(ctx, d, 0, 1, &bes[i]));
    open[i] = 1;
  }
  *out = &bes[i];
  return SS_OK;
}

int main(int argc, char **argv) {
  bench_args a;
  int code = parse_args(argc, argv, &a);
  if (code) return code;
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ctx.quiet = 1;
  ctx.log_level = SS_LOG_WARN;
  ss_backend bes[2];
  int open[2] = {0, 0};
  const ss_backend *be = NULL;
  ss_bench_doc doc = {NULL, NULL, NULL};
  char device[512];
  int any_cuda = 0;
  for (int i = 0; i < a.n_cases; i++) any_cuda |= a.cases[i].device == SS_DEVICE_CUDA;
  ss_status st = set_realtime(&ctx, &a);
  snprintf(a.pin_note, sizeof(a.pin_note), "off");
  for (int i = 0, k = 0; i < a.n_pins; i++)
    k += snprintf(a.pin_note + k, sizeof(a.pin_note) - (size_t)k, "%s%d", i ? "," : "CPU ", a.pins[i]);
  if (st == SS_OK) st = backend_for(&ctx, any_cuda ? SS_DEVICE_CUDA : SS_DEVICE_CPU, bes, open, &be);
  if (st == SS_OK) ss_bench_device_string(be, device, sizeof(device));
  if (st == SS_OK) st = ss_bench_doc_init(&ctx, &doc, "live", device);
  workload w;
  memset(&w, 0, sizeof(w));
  int failed = 0, w_failed = 0;
  for (int i = 0; i < a.n_cases && st == SS_OK; i++) {
    const bench_case *bc = &a.cases[i];
    if (w.C != bc->channels) {
      free(w.raw);
      ss_live_model_free(&w.model);
      if (w.bin[0]) unlink(w.bin);
      memset(&w, 0, sizeof(w));
      w.C = bc->channels;
      w_failed = make_workload(&ctx, &a, &w) != SS_OK;
      if (w_failed) st = record_failure(&ctx, &doc, bc->channels, &failed);
    }
    if (w_failed) continue;
    run_result p, u;
    memset(&p, 0, sizeof(p));
    memset(&u, 0, sizeof(u));
    if (st == SS_OK) st = backend_for(&ctx, bc->device, bes, open, &be);
    if (st == SS_OK) st = unpaced_run(&ctx, be, &a, &w, bc->block_ms, &u);
    if (st == SS_OK) st = paced_run(&ctx, be, &a, &w, bc, &p);
    if (st == SS_OK) add_case(&doc, &a, &w, bc, &p, &u);
    /* each case's figures are on disk as soon as it ends (a long run may be cut short): a copy of
     * the document is written (ss_bench_doc_write frees what it writes) */
    if (st == SS_OK) {
      ss_bench_doc part = {cJSON_Duplicate(doc.root, 1), NULL, NULL};
      st = part.root ? ss_bench_doc_write(&ctx, &part, a.out) : ss_fail(&ctx, SS_ERR_NOMEM, "out of memory: results");
    }
  }
  if (st == SS_OK) st = ss_bench_doc_write(&ctx, &doc, a.out);
  else if (doc.root) ss_bench_doc_free(&doc);
  free(w.raw);
  ss_live_model_free(&w.model);
  if (w.bin[0]) unlink(w.bin);
  if (st != SS_OK) fprintf(stderr, "bench_live: %s\n", ss_error_message(&ctx));
  else printf("-> %s%s\n", a.out, failed ? " (with failed cases)" : "");
  for (int i = 0; i < 2; i++)
    if (open[i]) ss_backend_close(&bes[i]);
  return st == SS_OK && !failed ? 0 : 1;
}
