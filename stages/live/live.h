/* live.h — the live engine: raw int16 rows in, labelled spikes out, one push at a time.
 *
 * Per push: int16 → µV with the model's scale, causal filter with carried state, append to a rolling
 * buffer of filtered rows, detection over the buffer (stages/detect/detect.h) reporting each component exactly
 * once and as soon as no later sample can change it, waveforms, features with the model's causal PCA
 * basis, masks, and assignment: nearest unit centroid or majority vote of the K nearest reference
 * spikes. With a CUDA backend the same logic runs the stages of stages/live/live_cuda.h (buffer, detection,
 * features and assignment on the device; only the small spike tables come back).
 *
 * Exactly once, as soon as final (docs/live.md). detect.c's rules are untouched; the engine picks
 * the regions each call searches and owns. own_from: every component first-noded before it has
 * been handled.
 *  - Reporting: one detection over all rows finds the spikes first-noded in [own_from, R); a spike
 *    whose last node lies before R − join_size is complete (a component is the same in a search that
 *    stops there exactly when all its nodes lie before it, so no later node can join it); it is
 *    reported when, in addition, the rows its waveform reads (time + n_after − 1 plus the
 *    cubic interpolation's support) have arrived. Spikes reported while own_from lies before them
 *    are remembered (time, channel, amplitude) so that no spike is reported twice.
 *  - Moving own_from: every component counts (with or without a strong node yet); the components
 *    with no node in the last Q = max(join_size, n_after + 2) rows are final (a prefix of the
 *    first-node order), and own_from moves to the first row of the first owned component with a node
 *    there (R when there is none). One detection per push answers both rules, on the CPU
 *    (ss_detect_work's component rows) and on the GPU (stages/live/live_cuda.h), with the same results.
 *  - Work is skipped while no sample above the strong threshold arrived and no spike is pending.
 * Nothing is lost: a component still growing only holds own_from back. The buffer keeps a lead-in of
 * SS_LIVE_LEAD_MS plus the waveform window before own_from (a longer component starting before it
 * would be seen cut: the offline front end's chunk margins make the same assumption).
 *
 * Latency of a spike: ss_now() when its label is ready (just before the emit callback) minus the
 * arrival time of the push that held its sample time + n_after − 1 (the last waveform sample). */
#ifndef SS_LIVE_H
#define SS_LIVE_H

#include <stdint.h>
#include <stdio.h>

#include "core/backend.h"
#include "stages/live/live_model.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Rows of lead-in the buffer keeps before the first unreported row, in ms (a component longer than
 * this that starts before the lead-in would be seen cut; the offline front end's slack is the same). */
#define SS_LIVE_LEAD_MS 2.0

/* Latency histogram: log-spaced bins from 10^MIN_DECADE to 10^MAX_DECADE µs. */
#define SS_LIVE_HIST_MIN_DECADE 0
#define SS_LIVE_HIST_MAX_DECADE 7
#define SS_LIVE_HIST_PER_DECADE 40
#define SS_LIVE_HIST_BINS ((SS_LIVE_HIST_MAX_DECADE - SS_LIVE_HIST_MIN_DECADE) * SS_LIVE_HIST_PER_DECADE + 2)

typedef enum { SS_LIVE_CENTROID = 0, SS_LIVE_KNN } ss_live_assign_kind;

/* CUDA: how the host waits for the device. Spinning on an event (the default) keeps the sleep and
 * wake-up of a blocking wait off the critical path, at the price of one CPU core busy while the
 * device works (tens of µs per wait); SYNC is cudaStreamSynchronize (the process's device flags
 * decide: the runtime's default spins or yields depending on the number of contexts and cores). */
typedef enum { SS_LIVE_WAIT_SPIN = 0, SS_LIVE_WAIT_SYNC } ss_live_wait;

typedef struct {
  int assign;          /* ss_live_assign_kind */
  int64_t k;           /* neighbours for SS_LIVE_KNN */
  int masked_distance; /* centroid: distance only over channels with mask > 0 on either side */
  double block_s;      /* overrun threshold: > 0 a fixed block duration, else each push's n / rate */
  int gpu_wait;        /* ss_live_wait (CUDA backend only) */
  int trace;           /* per-push breakdown (ss_live_last_push): phase times, thread CPU time, context switches */
} ss_live_opts;

/* Phases of a push (ss_live_push_trace), exclusive: each moment of a push counts in exactly one.
 * CPU path: append, find (every detection), label (waveforms, PCA, assignment), emit. CUDA path:
 * append (host copy, graph launch), the waits for the device (flag, spike count, tables), find and
 * label (queueing the detection / the labelling), setup (a growth of device arrays or a graph capture:
 * work that synchronises the device), emit (selection, ordering, callbacks, bookkeeping). */
typedef enum {
  SS_LIVE_PH_APPEND = 0,
  SS_LIVE_PH_FLAG_WAIT,
  SS_LIVE_PH_FIND,
  SS_LIVE_PH_COUNT_WAIT,
  SS_LIVE_PH_LABEL,
  SS_LIVE_PH_TABLE_WAIT,
  SS_LIVE_PH_SETUP,
  SS_LIVE_PH_EMIT,
  SS_LIVE_PHASES
} ss_live_phase;

/* The phase's name ("append", "flag_wait", ...). */
const char *ss_live_phase_name(int phase);

/* One push, as measured with ss_live_opts.trace (all zero otherwise). */
typedef struct {
  double t_start;                 /* ss_now() when its processing started */
  double behind_s;                /* processing start − arrival */
  double total_s;                 /* processing time (emission included) */
  double phase_s[SS_LIVE_PHASES]; /* total_s split by phase */
  double cpu_s;                   /* the pushing thread's CPU time over the push (user + system) */
  int64_t involuntary_switches;   /* the thread was preempted this many times during the push */
  int64_t voluntary_switches;     /* ... or blocked (slept in a system call) this many times */
  int64_t rows, buffer_rows;      /* rows pushed; rows the detection searched (the buffer after append) */
  int64_t found, emitted;         /* spikes found by the push's detection; spikes emitted */
  int detected;                   /* 1 when the push ran a detection */
  int setups;                     /* device-array growths and graph captures during the push */
} ss_live_push_trace;

void ss_live_opts_defaults(ss_live_opts *o);

/* One labelled spike. */
typedef struct {
  int64_t t;       /* sample of the spike (nearest sample of its sub-sample time) since the stream start */
  int32_t unit;    /* the offline sort's cluster id */
  int32_t channel; /* peak channel */
  float amp;       /* filtered value at the peak, µV (signed) */
  float latency_us;
} ss_live_spike;

/* Called for each spike in time order within a push; a failing status stops the push. */
typedef ss_status (*ss_live_emit_fn)(ss_ctx *ctx, void *user, const ss_live_spike *s);

typedef struct {
  int64_t samples;                 /* rows pushed */
  int64_t blocks;                  /* pushes */
  int64_t spikes;                  /* spikes emitted */
  int64_t overruns;                /* pushes whose processing started more than one block duration after arrival */
  int64_t streams;                 /* streams started (ss_live_reset starts a new one) */
  double max_behind_s;             /* largest processing start − arrival */
  int64_t hist[SS_LIVE_HIST_BINS]; /* latency counts: bin 0 below the range, the last above */
  double latency_max_us;
  double latency_sum_us;
  int64_t graph_pushes; /* CUDA: pushes whose upload + scale + filter ran as a captured graph */
  int64_t detections;   /* detection runs over the buffer (CPU: several per push that looks at spikes) */
  int64_t device_waits; /* CUDA: host waits for the device (round trips) */
  int64_t slow_pushes;  /* pushes whose processing (emission included) took longer than one block duration */
  double max_push_s;    /* the longest push processing */
} ss_live_stats;

typedef struct ss_live_engine ss_live_engine;

/* The model is borrowed and must outlive the engine. */
ss_status ss_live_engine_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m, const ss_live_opts *o,
                              ss_live_engine **out);
/* n rows of n_channels int16 (channel-interleaved) that arrived at t_arrival (ss_now()). */
ss_status ss_live_push(ss_ctx *ctx, ss_live_engine *e, const int16_t *rows, int64_t n, double t_arrival,
                       ss_live_emit_fn emit, void *user);
/* End of stream: report every component still pending (rows after the end read as 0, as offline). */
ss_status ss_live_flush(ss_ctx *ctx, ss_live_engine *e, ss_live_emit_fn emit, void *user);
/* A new stream (after ss_live_flush): filter state, buffer and sample clock restart; counters stay. */
void ss_live_reset(ss_live_engine *e);
void ss_live_get_stats(const ss_live_engine *e, ss_live_stats *out);
/* The last push's breakdown (ss_live_opts.trace; zeros without it). */
void ss_live_last_push(const ss_live_engine *e, ss_live_push_trace *out);
void ss_live_engine_close(ss_live_engine *e);

/* Opt-in real-time scheduling of the calling thread (the one that pushes), for closed-loop use: SCHED_FIFO
 * at `priority` (0 = the lowest real-time priority), so that ordinary threads cannot preempt a push. Pages
 * are not locked (mlockall would also lock the CUDA runtime's large host mappings). Without the privilege
 * nothing changes: *applied = 0 and `why` says why (the caller warns); SS_OK either way. */
ss_status ss_live_realtime(ss_ctx *ctx, int priority, int *applied, char *why, size_t why_len);
/* Opt-in: pin the calling thread to CPU `cpu` (sched_setaffinity), so that the scheduler does not
 * migrate it between pushes (cold caches, a wake-up on another core). Refused (a CPU outside the
 * process's allowed set): *applied = 0 and `why` says why; SS_OK either way. */
ss_status ss_live_pin(ss_ctx *ctx, int cpu, int *applied, char *why, size_t why_len);

/* One spike's latency into the histogram, the max and the sum. */
void ss_live_stats_add_latency(ss_live_stats *s, double us);
/* Latency percentile (0..100) from the histogram, in µs (the upper edge of the bin; max for 100). */
double ss_live_stats_percentile_us(const ss_live_stats *s, double pct);
/* One line: "live: S samples (T s), B blocks, N spikes, O overruns; latency p50 … p99 … max … ms". */
void ss_live_stats_print(FILE *f, const char *label, const ss_live_stats *s, double rate_hz);

#ifdef __cplusplus
}
#endif
#endif
