/* live_cuda.h — the CUDA stages of the live engine (cuda/live.cu; built only with SS_HAVE_CUDA).
 * src/live.c keeps the engine's logic (regions, exactly-once bookkeeping, latency accounting) and
 * calls these four stages instead of its CPU ones when the backend is CUDA:
 *  - append: raw int16 rows → µV → causal filter (state on the device) → the device buffer of
 *    filtered rows, plus the "a sample above the strong threshold arrived" flag; the fixed part
 *    (upload, scale, filter, flag) is a CUDA graph captured per push size;
 *  - detect: over the device buffer with a persistent ss_detect_cuda handle per slot; the small
 *    spike tables come back to a host ss_spike_list (no waveforms: they stay on the device);
 *  - label: waveforms of the selected spikes of the last SS_LIVE_SLOT_SPIKES detection → PCA
 *    features → nearest centroid or KNN vote, on the device; the labels come back.
 * Everything is pre-allocated at open and grows only when a larger push or table arrives. */
#ifndef SS_LIVE_CUDA_H
#define SS_LIVE_CUDA_H

#include <stdint.h>

#include "src/backend.h"
#include "src/detect.h"
#include "src/knn.h"
#include "src/live_model.h"
#include "src/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Detection slots, one device handle each: the spikes to report (their waveforms stay on the device
 * until the next detection in that slot), the completeness check with the model's thresholds, and
 * the every-component searches (strong = weak) that move the owned region. */
typedef enum { SS_LIVE_SLOT_SPIKES = 0, SS_LIVE_SLOT_CUT, SS_LIVE_SLOT_EVERY, SS_LIVE_SLOTS } ss_live_slot;

typedef struct ss_live_cuda ss_live_cuda;

/* knn: the engine's index (created on the CUDA backend) for knn assignment, else NULL. */
ss_status ss_live_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m, const ss_detect_config *cfg,
                            const ss_thresholds *every, int masked_distance, ss_knn_index *knn,
                            ss_live_cuda **out);
/* Drop the device buffer's first `drop` rows, then append n raw rows (scaled, filtered causally).
 * *strong = 1 when one of the n rows holds a sample above the strong threshold on a used channel. */
ss_status ss_live_cuda_append(ss_ctx *ctx, ss_live_cuda *g, int64_t drop, const int16_t *rows, int64_t n,
                              int *strong);
/* ss_detect_block_run over the device buffer (blk->x is ignored; blk->n_rows must be its row count);
 * the spikes are appended to out (host; out->keep_waveforms must be 0). */
ss_status ss_live_cuda_detect(ss_ctx *ctx, ss_live_cuda *g, ss_live_slot slot, const ss_detect_block *blk,
                              ss_spike_list *out);
/* Labels of spikes sel[0..n) of the last SS_LIVE_SLOT_SPIKES detection (unit ids). ko: KNN options
 * (NULL for nearest centroid). */
ss_status ss_live_cuda_label(ss_ctx *ctx, ss_live_cuda *g, const int64_t *sel, int64_t n, const ss_knn_opts *ko,
                             int32_t *labels);
/* A new stream: the filter restarts from the steady state of its first row; the buffer empties. */
void ss_live_cuda_reset(ss_live_cuda *g);
/* Pushes that ran as a graph launch / directly (the first push of a stream, or a size past the cache). */
void ss_live_cuda_graph_counts(const ss_live_cuda *g, int64_t *graphed, int64_t *direct);
void ss_live_cuda_close(ss_live_cuda *g);

#ifdef __cplusplus
}
#endif
#endif
