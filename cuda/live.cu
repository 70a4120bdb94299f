/* cuda/live.cu — the CUDA stages of the live engine (src/live_cuda.h): the device buffer of filtered
 * rows, the captured graph of a push's fixed part, detection handles per slot, and labelling.
 *
 * One stream (the backend's). A push's fixed part — raw rows from pinned staging to the device, scale
 * to µV, causal filter (state on the device), strong-sample flag back to pinned memory — reads and
 * writes fixed addresses, so it is captured once per push size into a CUDA graph and relaunched; the
 * filtered block is then copied to the end of the rolling buffer (whose address moves) and the stream
 * synchronised once to read the flag. The first push of a stream runs directly: the filter then starts
 * from the steady state of its first row, a different kernel argument. The buffer is a pair of
 * equal allocations: trimming moves a start offset; when the end would pass the capacity the live rows
 * are copied to the front of the other one (device copies may not overlap) and the two swap. */
#include <cmath>
#include <cstring>

#include "cuda/cuda_util.cuh"
#include "src/features_pca.h"
#include "src/filter.h"
#include "src/live_cuda.h"

namespace {

constexpr int THREADS = 256;
constexpr int64_t MIN_ROWS = 8192;   /* buffer rows at open (grows by doubling) */
constexpr int64_t MIN_PUSH = 1024;   /* push rows at open */
constexpr int64_t MIN_SPIKES = 256;  /* spike table rows at open */
constexpr int MAX_GRAPHS = 8;        /* push sizes with a captured graph; others run directly */

unsigned blocks_for(int64_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

/* µV = int16 × uv_per_step[c] + offset: the CPU's double operations, no contraction. */
__global__ void k_scale(const int16_t *raw, int64_t count, int C, const double *uv, double off, float *out) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) out[i] = (float)__dadd_rn(__dmul_rn((double)raw[i], uv[i % C]), off);
}

/* flag = 1 when a used channel holds a sample above its strong threshold (ss_detect_signal). */
__global__ void k_strong(const float *x, int64_t count, int C, int polarity, const float *strong, const int *use,
                         int *flag) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  int c = (int)(i % C);
  float v = x[i];
  float s = polarity == SS_POLARITY_NEGATIVE ? -v : (polarity == SS_POLARITY_POSITIVE ? v : fabsf(v));
  if (use[c] && s > strong[c]) *flag = 1;
}

/* Waveforms and masks of the selected spikes, in selection order. */
__global__ void k_gather(const float *wave, const float *masks, const int64_t *sel, int64_t n, int64_t per, int C,
                         float *wout, float *mout) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n * per) return;
  int64_t k = i / per, j = i % per, s = sel[k];
  wout[i] = wave[s * per + j];
  if (j < C) mout[k * C + j] = masks[s * C + j];
}

/* Nearest unit centroid: live.c's nearest_centroid (float squares summed in double, first minimum). */
__global__ void k_nearest(const float *feat, const float *masks, int64_t n, const float *centroid,
                          const float *mean_mask, const int32_t *unit_id, int64_t K, int C, int P, int masked,
                          int32_t *labels) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t F = (int64_t)C * P;
  const float *f = feat + i * F, *mask = masks + i * C;
  double best = INFINITY;
  int64_t arg = 0;
  for (int64_t u = 0; u < K; u++) {
    const float *mu = centroid + u * F, *mm = mean_mask + u * C;
    double d = 0;
    for (int c = 0; c < C; c++) {
      if (masked && !(mask[c] > 0) && !(mm[c] > 0)) continue;
      for (int p = 0; p < P; p++) {
        float t = __fsub_rn(f[c * P + p], mu[c * P + p]);
        d = __dadd_rn(d, (double)__fmul_rn(t, t));
      }
    }
    if (d < best) {
      best = d;
      arg = u;
    }
  }
  labels[i] = unit_id[arg];
}

/* ss_knn_vote over each query's k neighbours (nearest first): majority, ties to the earliest class. */
__global__ void k_vote(const int32_t *idx, int64_t n, int64_t k, const int32_t *ref_labels, int32_t *labels) {
  int64_t q = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= n) return;
  const int32_t *nb = idx + q * k;
  int32_t best = ref_labels[nb[0]];
  int64_t best_count = 0;
  for (int64_t i = 0; i < k; i++) {
    int32_t li = ref_labels[nb[i]];
    int seen = 0;
    for (int64_t j = 0; j < i && !seen; j++) seen = ref_labels[nb[j]] == li;
    if (seen) continue;
    int64_t count = 0;
    for (int64_t j = i; j < k; j++) count += ref_labels[nb[j]] == li;
    if (count > best_count) best = li, best_count = count;
  }
  labels[q] = best;
}

template <typename T>
ss_status upload(ss_ctx *ctx, T **d, const T *h, size_t count, const char *what) {
  SS_TRY(ss_cuda_malloc(ctx, (void **)d, count * sizeof(T), what));
  SS_CUDA_TRY(ctx, cudaMemcpy(*d, h, count * sizeof(T), cudaMemcpyHostToDevice));
  return SS_OK;
}

/* Capacity doubling from a floor: the new count, or `cap` when it already suffices. */
int64_t grown(int64_t cap, int64_t need, int64_t floor_) {
  if (need <= cap) return cap;
  int64_t c = cap > floor_ ? cap : floor_;
  while (c < need) c *= 2;
  return c;
}

struct graph_entry {
  int64_t n;
  cudaGraphExec_t exec;
};

} // namespace

struct ss_live_cuda {
  const ss_backend *be;
  const ss_live_model *m;
  cudaStream_t s;
  int C, F, masked;
  /* model on the device */
  double *d_uv, *d_state;
  int *d_use, started;
  float *d_strong, *d_basis, *d_centroid, *d_mean_mask;
  int32_t *d_unit_id, *d_ref_labels;
  ss_knn_index *knn;
  /* a push */
  int16_t *h_raw, *d_raw;
  float *d_scaled, *d_block;
  int64_t push_cap;
  int *h_flag, *d_flag;
  graph_entry graphs[MAX_GRAPHS];
  int n_graphs;
  int64_t graphed, direct;
  /* the rolling buffer: rows [head, head + rows) of d_buf; d_spare of the same capacity */
  float *d_buf, *d_spare;
  int64_t buf_cap, head, rows;
  /* detection */
  ss_detect_cuda *det[SS_LIVE_SLOTS];
  ss_spike_dev last; /* the last SS_LIVE_SLOT_SPIKES detection */
  /* spike tables: pinned host staging and device selection */
  void *h_tab;
  int64_t tab_cap;
  int64_t *h_sel, *d_sel;
  int32_t *h_labels, *d_labels, *d_idx;
  uint8_t *d_cert;
  float *d_wsel, *d_msel, *d_feat;
  int64_t sel_cap, idx_cap;
};

/* --- open / close ------------------------------------------------------------------------------ */

static void drop_graphs(ss_live_cuda *g) {
  for (int i = 0; i < g->n_graphs; i++) cudaGraphExecDestroy(g->graphs[i].exec);
  g->n_graphs = 0;
}

static ss_status push_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t n) {
  int64_t cap = grown(g->push_cap, n, MIN_PUSH);
  if (cap == g->push_cap) return SS_OK;
  drop_graphs(g); /* they hold the old addresses */
  cudaStreamSynchronize(g->s);
  cudaFreeHost(g->h_raw);
  cudaFree(g->d_raw);
  cudaFree(g->d_scaled);
  cudaFree(g->d_block);
  g->h_raw = nullptr;
  g->d_raw = nullptr;
  g->d_scaled = g->d_block = nullptr;
  g->push_cap = 0;
  const size_t cells = (size_t)(cap * g->C);
  SS_CUDA_TRY(ctx, cudaMallocHost((void **)&g->h_raw, cells * sizeof(int16_t)));
  SS_TRY(SS_CUDA_ALLOC(ctx, g->d_raw, cells, "live raw rows"));
  SS_TRY(SS_CUDA_ALLOC(ctx, g->d_scaled, cells, "live scaled rows"));
  SS_TRY(SS_CUDA_ALLOC(ctx, g->d_block, cells, "live filtered rows"));
  g->push_cap = cap;
  return SS_OK;
}

/* Room for `need` rows from the buffer's start: compact into the spare or grow both. */
static ss_status buffer_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t need) {
  const size_t C = (size_t)g->C;
  if (g->head + need <= g->buf_cap) return SS_OK;
  int64_t cap = grown(g->buf_cap, need, MIN_ROWS);
  if (cap != g->buf_cap) {
    float *a = nullptr, *b = nullptr;
    SS_TRY(SS_CUDA_ALLOC(ctx, a, (size_t)cap * C, "live buffer"));
    if (SS_CUDA_ALLOC(ctx, b, (size_t)cap * C, "live buffer") != SS_OK) {
      cudaFree(a);
      return SS_ERR_NOMEM;
    }
    cudaStreamSynchronize(g->s);
    cudaFree(g->d_spare);
    g->d_spare = b;
    if (g->rows > 0)
      SS_CUDA_TRY(ctx, cudaMemcpyAsync(a, g->d_buf + g->head * C, (size_t)g->rows * C * sizeof(float),
                                       cudaMemcpyDeviceToDevice, g->s));
    cudaStreamSynchronize(g->s);
    cudaFree(g->d_buf);
    g->d_buf = a;
    g->buf_cap = cap;
  } else {
    if (g->rows > 0)
      SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->d_spare, g->d_buf + g->head * C, (size_t)g->rows * C * sizeof(float),
                                       cudaMemcpyDeviceToDevice, g->s));
    float *t = g->d_buf;
    g->d_buf = g->d_spare;
    g->d_spare = t;
  }
  g->head = 0;
  return SS_OK;
}

static ss_status model_upload(ss_ctx *ctx, ss_live_cuda *g, const ss_live_model *m) {
  const int C = m->n_channels;
  SS_TRY(upload(ctx, &g->d_uv, m->uv_per_step, (size_t)C, "live scale"));
  SS_TRY(upload(ctx, &g->d_use, m->graph.use, (size_t)C, "live channel use"));
  SS_TRY(upload(ctx, &g->d_strong, m->thresholds.strong, (size_t)C, "live strong thresholds"));
  SS_TRY(upload(ctx, &g->d_basis, m->pca.basis, (size_t)C * m->n_pcs * m->n_wave, "live PCA basis"));
  SS_TRY(SS_CUDA_ALLOC(ctx, g->d_state, (size_t)2 * m->filter.n_sections * C, "live filter state"));
  SS_CUDA_TRY(ctx, cudaMemset(g->d_state, 0, sizeof(double) * 2 * m->filter.n_sections * C));
  if (m->k > 0) {
    SS_TRY(upload(ctx, &g->d_centroid, m->centroid, (size_t)(m->k * g->F), "live centroids"));
    SS_TRY(upload(ctx, &g->d_mean_mask, m->mean_mask, (size_t)(m->k * C), "live mean masks"));
    SS_TRY(upload(ctx, &g->d_unit_id, m->unit_id, (size_t)m->k, "live unit ids"));
  }
  if (g->knn) SS_TRY(upload(ctx, &g->d_ref_labels, m->ref_labels, (size_t)m->n_ref, "live reference labels"));
  return SS_OK;
}

extern "C" ss_status ss_live_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m,
                                       const ss_detect_config *cfg, const ss_thresholds *every, int masked_distance,
                                       ss_knn_index *knn, ss_live_cuda **out) {
  *out = nullptr;
  ss_live_cuda *g = nullptr;
  SS_TRY(SS_CALLOC(ctx, g, 1, "live CUDA state"));
  g->be = be;
  g->m = m;
  g->s = ss_cuda_stream(be);
  g->C = m->n_channels;
  g->F = m->n_channels * m->n_pcs;
  g->masked = masked_distance;
  g->knn = knn;
  ss_status st = model_upload(ctx, g, m);
  if (st == SS_OK) st = ss_detect_cuda_open(ctx, be, cfg, &m->graph, &m->thresholds, &g->det[SS_LIVE_SLOT_SPIKES]);
  if (st == SS_OK) st = ss_detect_cuda_open(ctx, be, cfg, &m->graph, &m->thresholds, &g->det[SS_LIVE_SLOT_CUT]);
  if (st == SS_OK) st = ss_detect_cuda_open(ctx, be, cfg, &m->graph, every, &g->det[SS_LIVE_SLOT_EVERY]);
  if (st == SS_OK && cudaMallocHost((void **)&g->h_flag, sizeof(int)) != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: pinned flag: %s", cudaGetErrorString(cudaGetLastError()));
  if (st == SS_OK) st = SS_CUDA_ALLOC(ctx, g->d_flag, 1, "live flag");
  if (st == SS_OK) st = push_reserve(ctx, g, MIN_PUSH);
  if (st == SS_OK) st = buffer_reserve(ctx, g, MIN_ROWS);
  if (st != SS_OK) {
    ss_live_cuda_close(g);
    return st;
  }
  *out = g;
  return SS_OK;
}

/* The selection's arrays (host staging and device). */
static void free_selection(ss_live_cuda *g) {
  cudaFreeHost(g->h_sel);
  cudaFreeHost(g->h_labels);
  cudaFree(g->d_sel);
  cudaFree(g->d_labels);
  cudaFree(g->d_wsel);
  cudaFree(g->d_msel);
  cudaFree(g->d_feat);
  cudaFree(g->d_idx);
  cudaFree(g->d_cert);
}

extern "C" void ss_live_cuda_close(ss_live_cuda *g) {
  if (!g) return;
  cudaStreamSynchronize(g->s);
  drop_graphs(g);
  for (int i = 0; i < SS_LIVE_SLOTS; i++) ss_detect_cuda_close(g->det[i]);
  free_selection(g);
  cudaFreeHost(g->h_tab);
  cudaFreeHost(g->h_raw);
  cudaFreeHost(g->h_flag);
  void *dev[] = {g->d_uv,     g->d_state,     g->d_use,       g->d_strong, g->d_basis, g->d_centroid, g->d_mean_mask,
                 g->d_unit_id, g->d_ref_labels, g->d_raw,      g->d_scaled, g->d_block, g->d_flag,     g->d_buf,
                 g->d_spare};
  for (void *p : dev) cudaFree(p);
  free(g);
}

extern "C" void ss_live_cuda_reset(ss_live_cuda *g) {
  g->started = 0;
  g->head = g->rows = 0;
}

extern "C" void ss_live_cuda_graph_counts(const ss_live_cuda *g, int64_t *graphed, int64_t *direct) {
  *graphed = g->graphed;
  *direct = g->direct;
}

/* --- append ------------------------------------------------------------------------------------ */

/* The fixed part of a push of n rows, queued on the stream (what a graph captures). */
static ss_status push_kernels(ss_ctx *ctx, ss_live_cuda *g, int64_t n) {
  const ss_live_model *m = g->m;
  const int64_t count = n * g->C;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->d_raw, g->h_raw, (size_t)count * sizeof(int16_t), cudaMemcpyHostToDevice, g->s));
  k_scale<<<blocks_for(count), THREADS, 0, g->s>>>(g->d_raw, count, g->C, g->d_uv, m->offset_uv, g->d_scaled);
  SS_CUDA_TRY_LAUNCH(ctx, "live scale");
  SS_TRY(ss_filter_causal_cuda(ctx, g->be, &m->filter, g->d_state, &g->started, g->d_scaled, n, g->C, g->d_block,
                               g->s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(g->d_flag, 0, sizeof(int), g->s));
  k_strong<<<blocks_for(count), THREADS, 0, g->s>>>(g->d_block, count, g->C, m->thresholds.polarity, g->d_strong,
                                                    g->d_use, g->d_flag);
  SS_CUDA_TRY_LAUNCH(ctx, "live strong flag");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->h_flag, g->d_flag, sizeof(int), cudaMemcpyDeviceToHost, g->s));
  return SS_OK;
}

/* The graph for pushes of n rows, captured on first use (NULL: the cache is full, run directly). */
static ss_status graph_for(ss_ctx *ctx, ss_live_cuda *g, int64_t n, cudaGraphExec_t *exec) {
  *exec = nullptr;
  for (int i = 0; i < g->n_graphs; i++)
    if (g->graphs[i].n == n) {
      *exec = g->graphs[i].exec;
      return SS_OK;
    }
  if (g->n_graphs == MAX_GRAPHS) return SS_OK;
  cudaGraph_t graph = nullptr;
  SS_CUDA_TRY(ctx, cudaStreamBeginCapture(g->s, cudaStreamCaptureModeThreadLocal));
  ss_status st = push_kernels(ctx, g, n);
  cudaError_t e = cudaStreamEndCapture(g->s, &graph);
  if (st != SS_OK) {
    if (graph) cudaGraphDestroy(graph);
    return st;
  }
  if (e != cudaSuccess) return ss_fail(ctx, SS_ERR_DEVICE, "CUDA: live push graph capture: %s", cudaGetErrorString(e));
  e = cudaGraphInstantiate(exec, graph, 0);
  cudaGraphDestroy(graph);
  if (e != cudaSuccess) return ss_fail(ctx, SS_ERR_DEVICE, "CUDA: live push graph: %s", cudaGetErrorString(e));
  g->graphs[g->n_graphs++] = (graph_entry){n, *exec};
  return SS_OK;
}

extern "C" ss_status ss_live_cuda_append(ss_ctx *ctx, ss_live_cuda *g, int64_t drop, const int16_t *rows, int64_t n,
                                         int *strong) {
  *strong = 0;
  if (drop > g->rows) drop = g->rows;
  g->head += drop;
  g->rows -= drop;
  if (n <= 0) return SS_OK;
  SS_TRY(push_reserve(ctx, g, n));
  SS_TRY(buffer_reserve(ctx, g, g->rows + n));
  /* the previous push's graph may still read h_raw only until its synchronisation, which is done */
  memcpy(g->h_raw, rows, (size_t)(n * g->C) * sizeof(int16_t));
  cudaGraphExec_t exec = nullptr;
  if (g->started) SS_TRY(graph_for(ctx, g, n, &exec));
  if (exec) {
    SS_CUDA_TRY(ctx, cudaGraphLaunch(exec, g->s));
    g->graphed++;
  } else {
    SS_TRY(push_kernels(ctx, g, n));
    g->direct++;
  }
  const size_t C = (size_t)g->C;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->d_buf + (size_t)(g->head + g->rows) * C, g->d_block, (size_t)n * C * sizeof(float),
                                   cudaMemcpyDeviceToDevice, g->s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(g->s));
  g->rows += n;
  *strong = *g->h_flag != 0;
  return SS_OK;
}

/* --- detection ---------------------------------------------------------------------------------- */

/* Pinned host tables for n spikes: times, fractions, channels, amplitudes, masks. */
static ss_status tables_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t n) {
  int64_t cap = grown(g->tab_cap, n, MIN_SPIKES);
  if (cap == g->tab_cap) return SS_OK;
  cudaFreeHost(g->h_tab);
  g->h_tab = nullptr;
  g->tab_cap = 0;
  size_t per = sizeof(int64_t) + sizeof(float) + sizeof(int32_t) + sizeof(float) + (size_t)g->C * sizeof(float);
  SS_CUDA_TRY(ctx, cudaMallocHost(&g->h_tab, (size_t)cap * per));
  g->tab_cap = cap;
  return SS_OK;
}

extern "C" ss_status ss_live_cuda_detect(ss_ctx *ctx, ss_live_cuda *g, ss_live_slot slot, const ss_detect_block *blk,
                                         ss_spike_list *out) {
  if (blk->n_rows != g->rows)
    return ss_fail(ctx, SS_ERR_INTERNAL, "live: device buffer holds %lld rows, detection asked for %lld",
                   (long long)g->rows, (long long)blk->n_rows);
  if (out->keep_waveforms) return ss_fail(ctx, SS_ERR_INTERNAL, "live: device detection keeps no host waveforms");
  ss_detect_block b = *blk;
  b.x = g->d_buf + (size_t)g->head * g->C;
  ss_spike_dev d;
  SS_TRY(ss_detect_cuda_run(ctx, g->det[slot], &b, g->s, &d));
  if (slot == SS_LIVE_SLOT_SPIKES) g->last = d;
  out->n_truncated += d.n_truncated;
  if (d.n == 0) return SS_OK;
  SS_TRY(tables_reserve(ctx, g, d.n));
  const size_t n = (size_t)d.n, C = (size_t)g->C;
  ss_spike_list h = *out; /* the shape; its arrays point into the pinned tables */
  h.n = d.n;
  h.n_truncated = 0;
  h.time_samples = (int64_t *)g->h_tab;
  h.time_fraction = (float *)(h.time_samples + n);
  h.peak_channel = (int32_t *)(h.time_fraction + n);
  h.amplitude = (float *)(h.peak_channel + n);
  h.masks = h.amplitude + n;
  h.waveforms = nullptr;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h.time_samples, d.time_samples, n * sizeof(int64_t), cudaMemcpyDeviceToHost, g->s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h.time_fraction, d.time_fraction, n * sizeof(float), cudaMemcpyDeviceToHost, g->s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h.peak_channel, d.peak_channel, n * sizeof(int32_t), cudaMemcpyDeviceToHost, g->s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h.amplitude, d.amplitude, n * sizeof(float), cudaMemcpyDeviceToHost, g->s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h.masks, d.masks, n * C * sizeof(float), cudaMemcpyDeviceToHost, g->s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(g->s));
  return ss_spike_list_append(ctx, out, &h);
}

/* --- labels ------------------------------------------------------------------------------------- */

static ss_status select_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t n, int64_t k) {
  const int64_t per = (int64_t)g->C * g->m->n_wave;
  if (n > g->sel_cap) {
    int64_t cap = grown(g->sel_cap, n, MIN_SPIKES);
    free_selection(g);
    g->h_sel = nullptr;
    g->h_labels = nullptr;
    g->sel_cap = g->idx_cap = 0;
    g->d_sel = nullptr;
    g->d_labels = g->d_idx = nullptr;
    g->d_cert = nullptr;
    g->d_wsel = g->d_msel = g->d_feat = nullptr;
    SS_CUDA_TRY(ctx, cudaMallocHost((void **)&g->h_sel, (size_t)cap * sizeof(int64_t)));
    SS_CUDA_TRY(ctx, cudaMallocHost((void **)&g->h_labels, (size_t)cap * sizeof(int32_t)));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_sel, cap, "live selection"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_labels, cap, "live labels"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_wsel, cap * per, "live waveforms"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_msel, cap * g->C, "live masks"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_feat, cap * g->F, "live features"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_cert, cap, "live KNN flags"));
    g->sel_cap = cap;
  }
  if (n * k > g->idx_cap) {
    cudaFree(g->d_idx);
    g->d_idx = nullptr;
    g->idx_cap = 0;
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_idx, g->sel_cap * k, "live neighbours"));
    g->idx_cap = g->sel_cap * k;
  }
  return SS_OK;
}

extern "C" ss_status ss_live_cuda_label(ss_ctx *ctx, ss_live_cuda *g, const int64_t *sel, int64_t n,
                                        const ss_knn_opts *ko, int32_t *labels) {
  if (n <= 0) return SS_OK;
  const ss_live_model *m = g->m;
  const int64_t per = (int64_t)g->C * m->n_wave, k = ko ? ko->k : 1;
  SS_TRY(select_reserve(ctx, g, n, k));
  memcpy(g->h_sel, sel, (size_t)n * sizeof(int64_t));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->d_sel, g->h_sel, (size_t)n * sizeof(int64_t), cudaMemcpyHostToDevice, g->s));
  k_gather<<<blocks_for(n * per), THREADS, 0, g->s>>>(g->last.waveforms, g->last.masks, g->d_sel, n, per, g->C,
                                                      g->d_wsel, g->d_msel);
  SS_CUDA_TRY_LAUNCH(ctx, "live gather");
  SS_TRY(ss_pca_project_cuda(ctx, g->be, g->C, m->n_wave, m->n_pcs, g->d_basis, g->d_wsel, n, g->d_feat, g->s));
  if (ko) {
    SS_TRY(ss_knn_cuda_search_device(ctx, g->knn, ko, g->d_feat, n, g->d_idx, nullptr, g->d_cert, nullptr));
    k_vote<<<blocks_for(n), THREADS, 0, g->s>>>(g->d_idx, n, k, g->d_ref_labels, g->d_labels);
  } else {
    k_nearest<<<blocks_for(n), THREADS, 0, g->s>>>(g->d_feat, g->d_msel, n, g->d_centroid, g->d_mean_mask,
                                                   g->d_unit_id, m->k, g->C, m->n_pcs, g->masked, g->d_labels);
  }
  SS_CUDA_TRY_LAUNCH(ctx, "live assignment");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->h_labels, g->d_labels, (size_t)n * sizeof(int32_t), cudaMemcpyDeviceToHost, g->s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(g->s));
  memcpy(labels, g->h_labels, (size_t)n * sizeof(int32_t));
  return SS_OK;
}
