/* detect.h — spike detection by flood fill over (time × probe adjacency), alignment and waveforms.
 *
 * Nodes are samples whose polarity-signed value exceeds the channel's weak threshold; two nodes join
 * when their channels are equal or adjacent on the probe and their samples at most join_size apart.
 * A connected component is one spike when it holds a node above the strong threshold. Dead channels
 * (probe `connected: false`) make no nodes. For each spike:
 *  - time: centre of mass of the component's sample indices with weights (value/strong)², a
 *    fraction of a sample; reported as the nearest sample plus a fraction in [−0.5, 0.5);
 *  - peak channel: the channel of the node with the largest (value − weak)/(strong − weak);
 *    amplitude: the filtered value there (signed, in the data's units);
 *  - masks: per channel clip((peak − weak)/(strong − weak), 0, 1) with the channel's largest value in
 *    the component, 0 on channels the component never touched (1 on the peak channel);
 *  - waveform: every channel at the spike time − n_before … + n_after − 1 samples, cut by cubic
 *    (Catmull–Rom) interpolation at the sub-sample time; samples outside the block read as 0.
 * Exactly once across chunks: a component belongs to the block region that holds its first sample
 * (the `own` rows); the driver gives each chunk margins wider than any component.
 * The CUDA twin (stages/detect/detect.cu) gives the same spikes; the dispatching entry point takes the backend. */
#ifndef SS_DETECT_H
#define SS_DETECT_H

#include <stdint.h>

#include "params/params.h"
#include "params/probe.h"
#include "core/backend.h"
#include "core/status.h"
#include "stages/threshold/threshold.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The probe graph over recording channels (columns). */
typedef struct {
  int n_channels;
  int *use;       /* [n_channels]: 1 = connected */
  int *adj_start; /* CSR over channels */
  int *adj;
} ss_detect_graph;

ss_status ss_detect_graph_from_probe(ss_ctx *ctx, const ss_probe *probe, int n_channels, ss_detect_graph *g);
void ss_detect_graph_free(ss_detect_graph *g);

typedef struct {
  int join_size;
  int n_before, n_after; /* waveform window in samples; n_before + n_after samples per channel */
} ss_detect_config;

/* detect.join_size and the waveform window scaled to rate_hz: round(before_ms · rate / 1000), ... */
ss_status ss_detect_config_from_params(ss_ctx *ctx, const ss_params *p, double rate_hz, ss_detect_config *cfg);

/* A growing table of detected spikes. waveforms are kept only when keep_waveforms is set. */
typedef struct {
  int64_t n, cap;
  int n_channels;
  int n_wave; /* samples per channel in a waveform */
  int keep_waveforms;
  int64_t *time_samples;
  float *time_fraction;
  int32_t *peak_channel;
  float *amplitude;
  float *masks;        /* [n × n_channels] */
  float *waveforms;    /* [n × n_channels × n_wave] (channel-major inside a spike) when kept */
  int64_t n_truncated; /* owned components that touched the end of the search region (margin too small) */
} ss_spike_list;

ss_status ss_spike_list_init(ss_ctx *ctx, ss_spike_list *l, int n_channels, int n_wave, int keep_waveforms);
/* Append `src` to `dst` (same shape). */
ss_status ss_spike_list_append(ss_ctx *ctx, ss_spike_list *dst, const ss_spike_list *src);
void ss_spike_list_clear(ss_spike_list *l);
void ss_spike_list_free(ss_spike_list *l);

/* A filtered block and the rows detection looks at. */
typedef struct {
  const float *x; /* [n_rows × n_channels], time-major */
  int64_t n_rows;
  int64_t row0_sample;              /* recording sample index of row 0 */
  int64_t search_begin, search_end; /* rows where nodes are collected */
  int64_t own_begin, own_end;       /* a component is reported when its first row lies here */
} ss_detect_block;

/* Scratch reused between calls (one per thread). Zero-initialise; free with ss_detect_work_free. */
typedef struct {
  int64_t cap;
  int32_t *row;
  int32_t *chan;
  float *value;
  int32_t *parent;
  int32_t *order;
  int32_t *start;
  int32_t *ring;
  float *peak; /* [n_channels] */
  int ring_cap;
  /* What the last CPU run saw of its owned rows (the live engine's completeness and finality rules):
   * every component first-noded there, with or without a strong node, in first-node order, by its first
   * and last node rows (block rows); and for the i-th spike it appended, its component's last node row. */
  int32_t *comp_first, *comp_last, *last_row;
  int64_t n_owned, n_reported;
} ss_detect_work;
void ss_detect_work_free(ss_detect_work *w);

/* Detect the spikes of one block and append them to out (in order of their first node). */
ss_status ss_detect_block_run(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg, const ss_detect_graph *g,
                              const ss_thresholds *th, const ss_detect_block *blk, ss_detect_work *w,
                              ss_spike_list *out);
ss_status ss_detect_block_cpu(ss_ctx *ctx, const ss_detect_config *cfg, const ss_detect_graph *g,
                              const ss_thresholds *th, const ss_detect_block *blk, ss_detect_work *w,
                              ss_spike_list *out);

/* Catmull–Rom cubic interpolation of column `c` of x at fractional row u (rows outside read 0). */
float ss_detect_interp(const float *x, int64_t n_rows, int n_channels, int c, double u);

/* The argument checks of ss_detect_block_cpu (channel counts, waveform length, search rows), shared
 * with the CUDA paths so that both give the same messages; g, th and out may be NULL (not checked). */
ss_status ss_detect_block_check(ss_ctx *ctx, const ss_detect_config *cfg, const ss_detect_graph *g,
                                const ss_thresholds *th, const ss_detect_block *blk, const ss_spike_list *out);

/* --- CUDA, device-resident (stages/detect/detect.cu; built only with SS_HAVE_CUDA) ------------------------
 * Same spikes as ss_detect_block_cpu, in the same order: identical times, peak channels, amplitudes
 * and masks, and waveforms from the same double-precision interpolation. */

/* One block's spikes on the device, in the CPU's order (by first node); pointers valid until the next
 * run on the same handle. n and n_truncated are host values. */
typedef struct {
  int64_t n, n_truncated;
  int64_t *time_samples; /* device */
  float *time_fraction;
  int32_t *peak_channel;
  float *amplitude;
  float *masks;     /* [n × n_channels] */
  float *waveforms; /* [n × n_channels × n_wave], channel-major inside a spike as the CPU */
} ss_spike_dev;

/* Device copies of the graph and thresholds, scratch and outputs. One per stream: handles share no
 * device state, so several may run concurrently on different streams from one host thread. */
typedef struct ss_detect_cuda ss_detect_cuda;
ss_status ss_detect_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg, const ss_detect_graph *g,
                              const ss_thresholds *th, ss_detect_cuda **out);
/* blk->x is a DEVICE pointer; everything else as ss_detect_block_cpu. Runs on `stream` (NULL: the
 * backend's); it synchronises that stream once (to learn the spike count) and grows its buffers as
 * needed. The last kernels (statistics, waveforms) are still in flight on `stream` when it returns. */
ss_status ss_detect_cuda_run(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, ss_stream stream,
                             ss_spike_dev *out);
/* ss_detect_cuda_run split at its synchronisation, which the caller does (the live engine spins on an
 * event), for a streaming caller that decides finality from this one detection:
 *  - ss_detect_cuda_find queues the search and the copy of the counts to pinned host memory, plus the
 *    first row of the first owned component — any, with or without a strong node — whose last node
 *    lies at or after block row open_row;
 *  - after the caller has synchronised `stream`, ss_detect_cuda_finish reads them and queues the
 *    spikes' statistics and waveforms: out as ss_detect_cuda_run gives it (same spikes, same order);
 *    *first_open that row (blk->own_end when no owned component reaches open_row); *last_rows
 *    (device, [out->n], valid as out's arrays) the block row of each spike's last node.
 * blk must be the same for both calls. */
ss_status ss_detect_cuda_find(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, int64_t open_row,
                              ss_stream stream);
/* Grow the handle's buffers now for searches of up to `rows` rows and `spikes` spikes, so that runs up
 * to that size allocate nothing (an allocation synchronises the device: a latency spike mid-stream). */
ss_status ss_detect_cuda_reserve(ss_ctx *ctx, ss_detect_cuda *d, int64_t rows, int64_t spikes, ss_stream stream);
ss_status ss_detect_cuda_finish(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, ss_stream stream,
                                ss_spike_dev *out, int64_t *first_open, const int64_t **last_rows);
void ss_detect_cuda_close(ss_detect_cuda *d);
/* Host block in, host table out (what ss_detect_block_run does with a CUDA backend): uploads the
 * block, runs a temporary handle on the backend's stream and appends the spikes to out. */
ss_status ss_detect_block_cuda(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg, const ss_detect_graph *g,
                               const ss_thresholds *th, const ss_detect_block *blk, ss_spike_list *out);

#ifdef __cplusplus
}
#endif
#endif
