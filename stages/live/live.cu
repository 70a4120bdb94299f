/* stages/live/live.cu — the CUDA stages of the live engine (stages/live/live_cuda.h): the device buffer of filtered
 * rows, the captured graph of a push's fixed part, the push's one detection and the labels of its
 * spikes.
 *
 * One stream (the backend's). A push's fixed part — raw rows from pinned staging to the device, scale
 * to µV, causal filter (state on the device), strong-sample flag back to pinned memory — reads and
 * writes fixed addresses, so it is captured once per push size into a CUDA graph and relaunched; the
 * filtered block is then copied to the end of the rolling buffer (whose address moves). The first
 * push of a stream runs directly: the filter then starts from the steady state of its first row, a
 * different kernel argument. The buffer is a pair of equal allocations: trimming moves a start
 * offset; when the end would pass the capacity the live rows are copied to the front of the other
 * one (device copies may not overlap) and the two swap.
 *
 * Round trips are the cost at 32 channels (each is a launch queue drained and a wake-up), so a push
 * waits for the device at most three times: the strong flag (skipped when a detection follows
 * anyway), the spike count of its one detection (ss_detect_cuda_find), and the packed tables of the
 * spikes with their labels (every spike found is labelled: cheaper than a fourth round trip for the
 * selection). Waits spin on an event unless the engine was opened with SS_LIVE_WAIT_SYNC.
 * With the engine's trace on (ss_live_opts.trace) each stage charges its time to a phase of the push
 * (ss_live_lap): queueing, each wait, and any growth or graph capture (setup), which would otherwise
 * hide inside the phase that triggered it. */
#include <cmath>
#include <cstring>

#include "core/cuda_util.cuh"
#include "stages/features/features_pca.h"
#include "stages/filter/filter.h"
#include "stages/live/live_cuda.h"

namespace {

constexpr int THREADS = 256;
constexpr int64_t MIN_ROWS = 8192;        /* buffer rows at open (grows by doubling) */
constexpr int64_t MIN_PUSH = 1024;        /* push rows at open */
constexpr int64_t MIN_SPIKES = 256;       /* spike table rows at open */
constexpr int64_t MIN_DETECT_ROWS = 2048; /* detection rows at open: lead-in + 20 ms pending + a push at 30 kHz */
constexpr int MAX_GRAPHS = 8;             /* push sizes with a captured graph; others run directly */
constexpr int NEAREST_THREADS = 128;      /* nearest centroid: threads per spike (a power of two) */
/* one packed table row: time, last node row (int64), fraction, channel, amplitude, label (32-bit) */
constexpr size_t PACK_BYTES = 2 * sizeof(int64_t) + 4 * sizeof(int32_t);

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

/* The tables of n spikes packed as consecutive arrays (the layout of ss_live_found, n-strided) for
 * one copy to the host. */
__global__ void k_pack(int64_t n, const int64_t *t, const int64_t *last, const float *frac, const int32_t *ch,
                       const float *amp, const int32_t *label, unsigned char *out) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int64_t *o64 = (int64_t *)out;
  o64[i] = t[i];
  o64[n + i] = last[i];
  float *of = (float *)(o64 + 2 * n);
  of[i] = frac[i];
  ((int32_t *)of)[n + i] = ch[i];
  of[2 * n + i] = amp[i];
  ((int32_t *)of)[3 * n + i] = label[i];
}

/* Nearest unit centroid: live.c's nearest_centroid (float squares summed in double in its order).
 * One block per spike, thread j scanning rows j, j + NEAREST_THREADS, ...: with up to 16 prototypes
 * per unit (K = 217 rows at 128 channels in bench_live) one thread per spike scanning every row made
 * the assignment a serial chain of K·C·P dependent double additions, each after a global load
 * (milliseconds per push at 128 channels, about 0.3 ms at 32).
 * Each distance is still summed by one thread in the CPU's order; the block then takes the smallest
 * distance, ties to the smallest row — the serial scan's first minimum (row 0 when none is finite). */
__global__ void k_nearest(const float *feat, const float *masks, int64_t n, const float *centroid,
                          const float *mean_mask, const int32_t *unit_id, int64_t K, int C, int P, int masked,
                          int32_t *labels) {
  __shared__ double s_best[NEAREST_THREADS];
  __shared__ int64_t s_arg[NEAREST_THREADS];
  const int64_t i = blockIdx.x;
  const int tid = threadIdx.x;
  const int64_t F = (int64_t)C * P;
  const float *f = feat + i * F, *mask = masks + i * C;
  double best = INFINITY;
  int64_t arg = K; /* none yet */
  for (int64_t u = tid; u < K; u += NEAREST_THREADS) {
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
  s_best[tid] = best;
  s_arg[tid] = arg;
  __syncthreads();
  for (int half = NEAREST_THREADS / 2; half > 0; half /= 2) {
    if (tid < half) {
      const double ob = s_best[tid + half];
      const int64_t oa = s_arg[tid + half];
      if (ob < s_best[tid] || (ob == s_best[tid] && oa < s_arg[tid])) {
        s_best[tid] = ob;
        s_arg[tid] = oa;
      }
    }
    __syncthreads();
  }
  if (tid == 0) labels[i] = unit_id[s_arg[0] < K ? s_arg[0] : 0];
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
  int C, F, masked, spin;
  cudaEvent_t ev;               /* the spin wait's marker */
  ss_live_laps *laps;           /* the engine's phase clock */
  int64_t det_rows, det_spikes; /* the detection's reserved rows and spikes (growth is timed as setup) */
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
  int64_t graphed, direct, waits;
  /* the rolling buffer: rows [head, head + rows) of d_buf; d_spare of the same capacity */
  float *d_buf, *d_spare;
  int64_t buf_cap, head, rows;
  /* detection (model thresholds) */
  ss_detect_cuda *det;
  /* labels of the spikes found and their packed tables (device, pinned host) */
  int32_t *d_labels, *d_idx;
  uint8_t *d_cert;
  float *d_feat;
  unsigned char *d_pack, *h_pack;
  int64_t lab_cap, idx_cap;
};

/* --- open / close ------------------------------------------------------------------------------ */

/* A growth or a graph capture starts: the time so far goes to `before`, the growth's to SETUP. */
static void setup_begin(ss_live_cuda *g, int before) {
  ss_live_lap(g->laps, before);
  if (g->laps && g->laps->tr) g->laps->tr->setups++;
}

static void drop_graphs(ss_live_cuda *g) {
  for (int i = 0; i < g->n_graphs; i++) cudaGraphExecDestroy(g->graphs[i].exec);
  g->n_graphs = 0;
}

static ss_status push_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t n) {
  int64_t cap = grown(g->push_cap, n, MIN_PUSH);
  if (cap == g->push_cap) return SS_OK;
  setup_begin(g, SS_LIVE_PH_APPEND);
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
  ss_live_lap(g->laps, SS_LIVE_PH_SETUP);
  return SS_OK;
}

/* Room for `need` rows from the buffer's start: compact into the spare or grow both. */
static ss_status buffer_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t need) {
  const size_t C = (size_t)g->C;
  if (g->head + need <= g->buf_cap) return SS_OK;
  int64_t cap = grown(g->buf_cap, need, MIN_ROWS);
  if (cap != g->buf_cap) {
    setup_begin(g, SS_LIVE_PH_APPEND);
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
    ss_live_lap(g->laps, SS_LIVE_PH_SETUP);
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

static ss_status labels_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t n, int64_t k);

extern "C" ss_status ss_live_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_live_model *m,
                                       const ss_detect_config *cfg, int masked_distance, ss_knn_index *knn,
                                       ss_live_wait wait, ss_live_laps *laps, ss_live_cuda **out) {
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
  g->spin = wait == SS_LIVE_WAIT_SPIN;
  g->laps = laps;
  ss_status st = model_upload(ctx, g, m);
  if (st == SS_OK) st = ss_detect_cuda_open(ctx, be, cfg, &m->graph, &m->thresholds, &g->det);
  if (st == SS_OK && cudaEventCreateWithFlags(&g->ev, cudaEventDisableTiming) != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: live wait event: %s", cudaGetErrorString(cudaGetLastError()));
  if (st == SS_OK && cudaMallocHost((void **)&g->h_flag, sizeof(int)) != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: pinned flag: %s", cudaGetErrorString(cudaGetLastError()));
  if (st == SS_OK) st = SS_CUDA_ALLOC(ctx, g->d_flag, 1, "live flag");
  if (st == SS_OK) st = push_reserve(ctx, g, MIN_PUSH);
  if (st == SS_OK) st = buffer_reserve(ctx, g, MIN_ROWS);
  /* the detection's and the labels' arrays at their working size now: growing them mid-stream
   * (cudaFree / cudaMalloc synchronise the device) would stall the first pushes by milliseconds */
  if (st == SS_OK) st = ss_detect_cuda_reserve(ctx, g->det, MIN_DETECT_ROWS, MIN_SPIKES, g->s);
  g->det_rows = MIN_DETECT_ROWS;
  g->det_spikes = MIN_SPIKES;
  if (st == SS_OK) st = labels_reserve(ctx, g, MIN_SPIKES, 1);
  if (st != SS_OK) {
    ss_live_cuda_close(g);
    return st;
  }
  *out = g;
  return SS_OK;
}

/* The labelling and table arrays. */
static void free_labels(ss_live_cuda *g) {
  cudaFreeHost(g->h_pack);
  cudaFree(g->d_pack);
  cudaFree(g->d_labels);
  cudaFree(g->d_feat);
  cudaFree(g->d_idx);
  cudaFree(g->d_cert);
}

extern "C" void ss_live_cuda_close(ss_live_cuda *g) {
  if (!g) return;
  cudaStreamSynchronize(g->s);
  drop_graphs(g);
  ss_detect_cuda_close(g->det);
  free_labels(g);
  if (g->ev) cudaEventDestroy(g->ev);
  cudaFreeHost(g->h_raw);
  cudaFreeHost(g->h_flag);
  void *dev[] = {g->d_uv,       g->d_state,     g->d_use,     g->d_strong,     g->d_basis,
                 g->d_centroid, g->d_mean_mask, g->d_unit_id, g->d_ref_labels, g->d_raw,
                 g->d_scaled,   g->d_block,     g->d_flag,    g->d_buf,        g->d_spare};
  for (void *p : dev) cudaFree(p);
  free(g);
}

extern "C" void ss_live_cuda_reset(ss_live_cuda *g) {
  g->started = 0;
  g->head = g->rows = 0;
}

extern "C" void ss_live_cuda_counts(const ss_live_cuda *g, int64_t *graphed, int64_t *direct, int64_t *waits) {
  *graphed = g->graphed;
  *direct = g->direct;
  *waits = g->waits;
}

/* --- waiting ----------------------------------------------------------------------------------- */

/* Until the stream's queued work is done: spin on an event, or cudaStreamSynchronize. The time so far
 * is charged to `before` (the queueing), the wait to `phase`. */
static ss_status wait_device(ss_ctx *ctx, ss_live_cuda *g, int before, int phase) {
  ss_live_lap(g->laps, before);
  g->waits++;
  if (!g->spin) {
    SS_CUDA_TRY(ctx, cudaStreamSynchronize(g->s));
    ss_live_lap(g->laps, phase);
    return SS_OK;
  }
  SS_CUDA_TRY(ctx, cudaEventRecord(g->ev, g->s));
  cudaError_t e;
  while ((e = cudaEventQuery(g->ev)) == cudaErrorNotReady) {
  }
  if (e != cudaSuccess) return ss_fail(ctx, SS_ERR_DEVICE, "CUDA: live wait: %s", cudaGetErrorString(e));
  ss_live_lap(g->laps, phase);
  return SS_OK;
}

/* --- append ------------------------------------------------------------------------------------ */

/* The fixed part of a push of n rows, queued on the stream (what a graph captures). */
static ss_status push_kernels(ss_ctx *ctx, ss_live_cuda *g, int64_t n) {
  const ss_live_model *m = g->m;
  const int64_t count = n * g->C;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->d_raw, g->h_raw, (size_t)count * sizeof(int16_t), cudaMemcpyHostToDevice, g->s));
  k_scale<<<blocks_for(count), THREADS, 0, g->s>>>(g->d_raw, count, g->C, g->d_uv, m->offset_uv, g->d_scaled);
  SS_CUDA_TRY_LAUNCH(ctx, "live scale");
  SS_TRY(
      ss_filter_causal_cuda(ctx, g->be, &m->filter, g->d_state, &g->started, g->d_scaled, n, g->C, g->d_block, g->s));
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
  setup_begin(g, SS_LIVE_PH_APPEND);
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
  ss_live_lap(g->laps, SS_LIVE_PH_SETUP);
  return SS_OK;
}

extern "C" ss_status ss_live_cuda_append(ss_ctx *ctx, ss_live_cuda *g, int64_t drop, const int16_t *rows, int64_t n,
                                         int want_flag, int *strong) {
  *strong = 0;
  if (drop > g->rows) drop = g->rows;
  g->head += drop;
  g->rows -= drop;
  if (n <= 0) return SS_OK;
  SS_TRY(push_reserve(ctx, g, n));
  SS_TRY(buffer_reserve(ctx, g, g->rows + n));
  /* the previous push's graph read h_raw before the wait that ended that push (every push waits:
   * for its flag, or in the detection that follows) */
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
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->d_buf + (size_t)(g->head + g->rows) * C, g->d_block,
                                   (size_t)n * C * sizeof(float), cudaMemcpyDeviceToDevice, g->s));
  g->rows += n;
  if (!want_flag) {
    ss_live_lap(g->laps, SS_LIVE_PH_APPEND);
    return SS_OK;
  }
  SS_TRY(wait_device(ctx, g, SS_LIVE_PH_APPEND, SS_LIVE_PH_FLAG_WAIT));
  *strong = *g->h_flag != 0;
  return SS_OK;
}

/* --- detection and labels ---------------------------------------------------------------------- */

/* Labelling arrays and packed tables for n spikes (k neighbours each with KNN). */
static ss_status labels_reserve(ss_ctx *ctx, ss_live_cuda *g, int64_t n, int64_t k) {
  if (n <= g->lab_cap && n * k <= g->idx_cap) return SS_OK;
  setup_begin(g, SS_LIVE_PH_LABEL);
  if (n > g->lab_cap) {
    int64_t cap = grown(g->lab_cap, n, MIN_SPIKES);
    cudaStreamSynchronize(g->s); /* queued work may still use the old arrays */
    free_labels(g);
    g->h_pack = g->d_pack = nullptr;
    g->d_labels = g->d_idx = nullptr;
    g->d_cert = nullptr;
    g->d_feat = nullptr;
    g->lab_cap = g->idx_cap = 0;
    SS_CUDA_TRY(ctx, cudaMallocHost((void **)&g->h_pack, (size_t)cap * PACK_BYTES));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_pack, (size_t)cap * PACK_BYTES, "live spike tables"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_labels, cap, "live labels"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_feat, cap * g->F, "live features"));
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_cert, cap, "live KNN flags"));
    g->lab_cap = cap;
  }
  if (n * k > g->idx_cap) {
    cudaStreamSynchronize(g->s);
    cudaFree(g->d_idx);
    g->d_idx = nullptr;
    g->idx_cap = 0;
    SS_TRY(SS_CUDA_ALLOC(ctx, g->d_idx, g->lab_cap * k, "live neighbours"));
    g->idx_cap = g->lab_cap * k;
  }
  ss_live_lap(g->laps, SS_LIVE_PH_SETUP);
  return SS_OK;
}

/* Labels of the n spikes of a detection (queued): PCA features of their waveforms, then nearest
 * centroid (live.c's arithmetic) or the KNN vote (ss_knn_vote's rule). */
static ss_status queue_labels(ss_ctx *ctx, ss_live_cuda *g, const ss_spike_dev *d, const ss_knn_opts *ko) {
  const ss_live_model *m = g->m;
  const int64_t n = d->n, k = ko ? ko->k : 1;
  SS_TRY(ss_pca_project_cuda(ctx, g->be, g->C, m->n_wave, m->n_pcs, g->d_basis, d->waveforms, n, g->d_feat, g->s));
  if (ko) {
    SS_TRY(ss_knn_cuda_search_device(ctx, g->knn, ko, g->d_feat, n, g->d_idx, nullptr, g->d_cert, nullptr));
    k_vote<<<blocks_for(n), THREADS, 0, g->s>>>(g->d_idx, n, k, g->d_ref_labels, g->d_labels);
  } else {
    k_nearest<<<(unsigned)n, NEAREST_THREADS, 0, g->s>>>(g->d_feat, d->masks, n, g->d_centroid, g->d_mean_mask,
                                                         g->d_unit_id, m->k, g->C, m->n_pcs, g->masked, g->d_labels);
  }
  SS_CUDA_TRY_LAUNCH(ctx, "live assignment");
  return SS_OK;
}

/* The host view of n packed rows (k_pack's layout). */
static void unpack(const ss_live_cuda *g, int64_t n, ss_live_found *out) {
  const int64_t *t = (const int64_t *)g->h_pack;
  const float *f = (const float *)(t + 2 * n);
  out->time_samples = t;
  out->last_row = t + n;
  out->time_fraction = f;
  out->peak_channel = (const int32_t *)(f + n);
  out->amplitude = f + 2 * n;
  out->label = (const int32_t *)(f + 3 * n);
}

extern "C" ss_status ss_live_cuda_detect(ss_ctx *ctx, ss_live_cuda *g, const ss_detect_block *blk, int64_t open_row,
                                         const ss_knn_opts *ko, ss_live_found *out) {
  memset(out, 0, sizeof(*out));
  if (blk->n_rows != g->rows)
    return ss_fail(ctx, SS_ERR_INTERNAL, "live: device buffer holds %lld rows, detection asked for %lld",
                   (long long)g->rows, (long long)blk->n_rows);
  ss_detect_block b = *blk;
  b.x = g->d_buf + (size_t)g->head * g->C;
  if (b.n_rows > g->det_rows) { /* grow the detection's cells here, timed as setup, not inside the find */
    setup_begin(g, SS_LIVE_PH_FIND);
    g->det_rows = grown(g->det_rows, b.n_rows, MIN_DETECT_ROWS);
    SS_TRY(ss_detect_cuda_reserve(ctx, g->det, g->det_rows, 0, g->s));
    ss_live_lap(g->laps, SS_LIVE_PH_SETUP);
  }
  SS_TRY(ss_detect_cuda_find(ctx, g->det, &b, open_row, g->s));
  SS_TRY(wait_device(ctx, g, SS_LIVE_PH_FIND, SS_LIVE_PH_COUNT_WAIT)); /* the spike count and the first open row */
  ss_spike_dev d;
  const int64_t *d_last = nullptr;
  SS_TRY(ss_detect_cuda_finish(ctx, g->det, &b, g->s, &d, &out->first_open, &d_last));
  out->n = d.n;
  if (d.n > g->det_spikes) { /* finish grew the spike tables (a synchronisation): timed as setup */
    g->det_spikes = grown(g->det_spikes, d.n, MIN_SPIKES);
    setup_begin(g, SS_LIVE_PH_SETUP);
  }
  if (d.n == 0) {
    ss_live_lap(g->laps, SS_LIVE_PH_LABEL);
    return SS_OK;
  }
  SS_TRY(labels_reserve(ctx, g, d.n, ko ? ko->k : 1));
  SS_TRY(queue_labels(ctx, g, &d, ko));
  k_pack<<<blocks_for(d.n), THREADS, 0, g->s>>>(d.n, d.time_samples, d_last, d.time_fraction, d.peak_channel,
                                                d.amplitude, g->d_labels, g->d_pack);
  SS_CUDA_TRY_LAUNCH(ctx, "live pack");
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(g->h_pack, g->d_pack, (size_t)d.n * PACK_BYTES, cudaMemcpyDeviceToHost, g->s));
  SS_TRY(wait_device(ctx, g, SS_LIVE_PH_LABEL, SS_LIVE_PH_TABLE_WAIT));
  unpack(g, d.n, out);
  return SS_OK;
}
