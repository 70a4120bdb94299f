/* live_cuda.h — the CUDA stages of the live engine (stages/live/live.cu; built only with SS_HAVE_CUDA).
 * stages/live/live.c keeps the engine's logic (regions, exactly-once bookkeeping, latency accounting) and
 * calls these stages instead of its CPU ones when the backend is CUDA:
 *  - append: raw int16 rows → µV → causal filter (state on the device) → the device buffer of
 *    filtered rows, plus the "a sample above the strong threshold arrived" flag; the fixed part
 *    (upload, scale, filter, flag) is a CUDA graph captured per push size;
 *  - detect: ONE detection over the device buffer answers everything a push asks: the spikes
 *    first-noded in the owned rows, each one's last node row (completeness), the end of the rows
 *    whose components are all final (where the owned region moves), and every spike's label
 *    (waveforms → PCA features → nearest centroid or KNN vote on the device); the small tables come
 *    back in one copy to pinned memory.
 * Round trips: a push that needs no detection waits for the device once (the strong flag); one that
 * detects, at most three times (flag, spike count, tables). Waits spin on an event by default.
 * Everything is pre-allocated at open and grows only when a larger push or table arrives. */
#ifndef SS_LIVE_CUDA_H
#define SS_LIVE_CUDA_H

#include <stdint.h>

#include "core/backend.h"
#include "stages/detect/detect.h"
#include "stages/knn/knn.h"
#include "stages/live/live.h"
#include "stages/live/live_model.h"
#include "core/log.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_live_cuda ss_live_cuda;

/* The push's phase clock (ss_live_opts.trace): tr NULL when tracing is off. ss_live_lap charges the
 * time since the last lap to `phase`; the engine and these stages share one clock per push. */
typedef struct {
  ss_live_push_trace *tr;
  double t;
} ss_live_laps;

static inline void ss_live_lap(ss_live_laps *l, int phase) {
  if (!l || !l->tr) return;
  double now = ss_now();
  l->tr->phase_s[phase] += now - l->t;
  l->t = now;
}

/* What one detection tells the engine. The arrays are pinned host memory, valid until the next
 * ss_live_cuda_detect; the spikes are in first-node order (ss_detect_block_cpu's). */
typedef struct {
  int64_t n;
  const int64_t *time_samples;
  const float *time_fraction;
  const int32_t *peak_channel;
  const float *amplitude;
  const int64_t *last_row; /* block row of the spike's last node */
  const int32_t *label;    /* the spike's unit */
  int64_t first_open;      /* block row: the first row of the first owned component (any) whose last
                            * node lies at or after open_row; blk->own_end when none does */
} ss_live_found;

/* knn: the engine's index (created on the CUDA backend) for knn assignment, else NULL. laps: the
 * engine's phase clock (borrowed; its tr may be NULL). */
ss_status ss_live_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m, const ss_detect_config *cfg,
                            int masked_distance, ss_knn_index *knn, ss_live_wait wait, ss_live_laps *laps,
                            ss_live_cuda **out);
/* Drop the device buffer's first `drop` rows, then append n raw rows (scaled, filtered causally).
 * want_flag: wait for the device and set *strong = 1 when one of the n rows holds a sample above the
 * strong threshold on a used channel; else nothing is waited for (a detection follows anyway). */
ss_status ss_live_cuda_append(ss_ctx *ctx, ss_live_cuda *g, int64_t drop, const int16_t *rows, int64_t n, int want_flag,
                              int *strong);
/* Detection with the model's thresholds over the device buffer (blk->x is ignored; blk->n_rows must be
 * its row count), labels of every spike found (ko: KNN options, NULL for nearest centroid). */
ss_status ss_live_cuda_detect(ss_ctx *ctx, ss_live_cuda *g, const ss_detect_block *blk, int64_t open_row,
                              const ss_knn_opts *ko, ss_live_found *out);
/* A new stream: the filter restarts from the steady state of its first row; the buffer empties. */
void ss_live_cuda_reset(ss_live_cuda *g);
/* Pushes that ran as a graph launch / directly (the first push of a stream, or a size past the cache),
 * and the host's waits for the device. */
void ss_live_cuda_counts(const ss_live_cuda *g, int64_t *graphed, int64_t *direct, int64_t *waits);
void ss_live_cuda_close(ss_live_cuda *g);

#ifdef __cplusplus
}
#endif
#endif
