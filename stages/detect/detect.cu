/* stages/detect/detect.cu — the CUDA twin of stages/detect/detect.c: flood-fill detection, spike statistics and
 * Catmull–Rom waveforms on the device, giving the CPU's spikes in the CPU's order.
 *
 * Everything works on the "cell image" of the search region: cell = (row − search_begin) · C + c,
 * so cell order is the CPU's node order (row, then channel) and no compaction is needed.
 *   init      parent[cell] = cell for a node (use[c] and signal > weak[c]), −1 otherwise
 *   hook      each node looks back exactly as the CPU's flood() (rows t − join_size … t, same channel
 *             for earlier rows, adjacent channels of its own list) and unites with what it finds:
 *             lock-free union–find (ECL-CC style) that always hangs the larger root under the smaller,
 *             so a component's root is its first node, as on the CPU
 *   flatten   parent[cell] = root (each thread writes only its own entry)
 *   reduce    per root: the last cell of the component (atomicMax) and whether a node is strong
 *   mark      spike = root with a strong node whose row is owned; truncated count as the CPU's
 *   scan      spike index of each root (CUB exclusive sum over the cells): first-node order
 *   — one synchronisation: the spike count —
 *   stats     one warp per spike walks the rows of its component in cell order: the centre-of-mass
 *             sums are added in exactly the CPU's order and with its roundings (double, no FMA), the
 *             peak node by (largest norm, first cell), per-channel peaks into the mask row
 *   waves     one thread per (spike, channel, sample): ss_detect_interp's arithmetic in double
 * All values are integers or exact IEEE operations in a fixed order: the result is the CPU's bit for
 * bit and identical run to run. */
#include <cub/cub.cuh>

#include <climits>
#include <cstring>
#include <new>

#include "core/cuda_util.cuh"
#include "stages/detect/detect.h"

namespace {

constexpr int THREADS = 256;
constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int STATS_WARPS = THREADS / WARP;
/* cell indices are int32 (as the CPU's node ids); one more for the scan's total */
constexpr int64_t MAX_CELLS = (int64_t)INT_MAX - 1;
/* device counters of a run: spikes, truncated, first open row */
constexpr int SMALL_COUNTS = 3;
/* memset byte giving the first-open counter a value above every row (0x7f7f7f7f) before atomicMin */
constexpr int NO_ROW_BYTE = 0x7f;

/* ss_detect_signal (threshold.h) for the device. */
__device__ __forceinline__ float signal_of(int polarity, float x) {
  return polarity == SS_POLARITY_NEGATIVE ? -x : (polarity == SS_POLARITY_POSITIVE ? x : fabsf(x));
}

/* Read-only per-run view of the block and the handle's device arrays, passed by value. */
struct det_args {
  const float *x; /* row search_begin of the block */
  int n_cells, C, J, polarity;
  const int *use, *adj_start, *adj;
  const float *weak, *strong;
  int32_t *parent, *last, *flag, *idx;
};

__global__ void k_init(det_args a) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= a.n_cells) return;
  int c = cell % a.C;
  float s = signal_of(a.polarity, a.x[cell]);
  bool node = s > a.weak[c] && a.use[c];
  a.parent[cell] = node ? cell : -1;
  a.last[cell] = cell;
  a.flag[cell] = node && s > a.strong[c];
}

/* Root of x with path halving (ECL-CC's representative): parents only ever point to smaller
 * ancestors, so concurrent halving keeps every entry an ancestor; roots change only by CAS. */
__device__ int find_root(volatile int32_t *parent, int x) {
  int cur = parent[x];
  if (cur != x) {
    int prev = x, next;
    while (cur > (next = parent[cur])) {
      parent[prev] = next;
      prev = cur;
      cur = next;
    }
  }
  return cur;
}

__device__ void unite(int32_t *parent, int a, int b) {
  volatile int32_t *vp = parent;
  a = find_root(vp, a);
  b = find_root(vp, b);
  while (a != b) {
    if (a > b) {
      int t = a;
      a = b;
      b = t;
    }
    int old = atomicCAS(&parent[b], b, a); /* hang the larger root under the smaller */
    if (old == b) return;
    a = find_root(vp, a);
    b = find_root(vp, old);
  }
}

__global__ void k_hook(det_args a) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= a.n_cells || a.parent[cell] < 0) return; /* the sign of an entry never changes here */
  const int C = a.C, t = cell / C, c = cell % C;
  for (int dt = 0; dt <= a.J && t - dt >= 0; dt++) {
    const int base = (t - dt) * C;
    if (dt > 0 && a.parent[base + c] >= 0) unite(a.parent, cell, base + c);
    for (int k = a.adj_start[c]; k < a.adj_start[c + 1]; k++)
      if (a.parent[base + a.adj[k]] >= 0) unite(a.parent, cell, base + a.adj[k]);
  }
}

/* Only each thread's own entry is written, so no entry can be moved off its root afterwards. */
__global__ void k_flatten(det_args a) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= a.n_cells) return;
  int cur = a.parent[cell];
  if (cur < 0 || cur == cell) return;
  int next;
  while (cur > (next = a.parent[cur])) cur = next;
  a.parent[cell] = cur;
}

__global__ void k_reduce(det_args a) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= a.n_cells) return;
  int root = a.parent[cell];
  if (root < 0 || root == cell) return;
  atomicMax(&a.last[root], cell);
  if (a.flag[cell]) a.flag[root] = 1; /* the same value from every writer */
}

/* Own-region and truncation rule of ss_detect_block_cpu, in cells (rows relative to search_begin). */
struct own_rule {
  int64_t own_begin, own_end; /* relative rows */
  int64_t end_row;            /* search_end − 1, relative */
  int count_truncated;        /* search_end < n_rows */
};

__global__ void k_mark(det_args a, own_rule o, int *n_truncated) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell == 0) a.flag[a.n_cells] = 0; /* the scan's extra element: its output is the total */
  if (cell >= a.n_cells) return;
  int64_t row = cell / a.C;
  int spike = a.parent[cell] == cell && a.flag[cell] && row >= o.own_begin && row < o.own_end;
  a.flag[cell] = spike;
  if (spike && o.count_truncated && a.last[cell] / a.C == o.end_row) atomicAdd(n_truncated, 1);
}

__global__ void k_counts(det_args a, int *small) { small[0] = a.idx[a.n_cells]; }

/* The first row of the first owned component — any, the strong flag is not looked at — whose last
 * node lies at or after row open_row (relative rows): a root is its component's first node. */
__global__ void k_first_open(det_args a, own_rule o, int64_t open_row, int *first) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= a.n_cells || a.parent[cell] != cell) return;
  int row = cell / a.C;
  if (row >= o.own_begin && row < o.own_end && a.last[cell] / a.C >= open_row) atomicMin(first, row);
}

__global__ void k_roots(det_args a, int32_t *roots) {
  int cell = blockIdx.x * blockDim.x + threadIdx.x;
  if (cell < a.n_cells && a.flag[cell]) roots[a.idx[cell]] = cell;
}

/* Block row of each spike's last node. */
__global__ void k_last_rows(det_args a, const int32_t *roots, int64_t n, int64_t search_begin, int64_t *rows) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) rows[i] = search_begin + a.last[roots[i]] / a.C;
}

struct spike_out {
  int64_t n;
  const int32_t *roots;
  double *tc; /* centre of mass in block rows, for the waveforms */
  int64_t *time_samples;
  float *time_fraction;
  int32_t *peak_channel;
  float *amplitude;
  float *masks;
  float *waveforms;
};

/* One warp per spike. Lanes take 32 consecutive channels of a row at a time, so a lane always owns
 * the same channels (its mask entries are private); the centre-of-mass terms of the matching lanes
 * are added by every lane in lane order, which is the CPU's node order. */
__global__ void k_stats(det_args a, spike_out s, int64_t search_begin, int64_t row0_sample) {
  const int lane = threadIdx.x % WARP;
  const int64_t i = (int64_t)blockIdx.x * STATS_WARPS + threadIdx.x / WARP;
  if (i >= s.n) return;
  const int C = a.C, root = s.roots[i], r_first = root / C, r_last = a.last[root] / C;
  float *peak = s.masks + i * C;
  for (int c = lane; c < C; c += WARP) peak[c] = -INFINITY;
  double sw = 0, swt = 0;
  float best = -INFINITY;
  int best_cell = root;
  for (int r = r_first; r <= r_last; r++) {
    const double row = (double)(search_begin + r);
    for (int c0 = 0; c0 < C; c0 += WARP) {
      const int c = c0 + lane, cell = r * C + c;
      const bool in = c < C && a.parent[cell] == root;
      float v = 0, norm = -INFINITY;
      double w = 0, wt = 0;
      if (in) {
        v = signal_of(a.polarity, a.x[cell]);
        double q = (double)(v / a.strong[c]); /* float division, as the CPU's value / strong */
        w = __dmul_rn(q, q);
        wt = __dmul_rn(w, row);
        norm = (v - a.weak[c]) / (a.strong[c] - a.weak[c]);
        if (norm > best) { /* strict: the first cell of a lane keeps a tie */
          best = norm;
          best_cell = cell;
        }
        if (v > peak[c]) peak[c] = v;
      }
      for (unsigned m = __ballot_sync(FULL_MASK, in); m; m &= m - 1) {
        const int src = __ffs(m) - 1;
        sw = __dadd_rn(sw, __shfl_sync(FULL_MASK, w, src));
        swt = __dadd_rn(swt, __shfl_sync(FULL_MASK, wt, src));
      }
    }
  }
  /* the CPU's first node with the largest norm: largest norm, then smallest cell */
  for (int off = WARP / 2; off > 0; off /= 2) {
    float ob = __shfl_xor_sync(FULL_MASK, best, off);
    int oc = __shfl_xor_sync(FULL_MASK, best_cell, off);
    if (ob > best || (ob == best && oc < best_cell)) {
      best = ob;
      best_cell = oc;
    }
  }
  for (int c = lane; c < C; c += WARP) {
    float pk = peak[c];
    if (pk == -INFINITY) {
      peak[c] = 0.0f;
      continue;
    }
    double m = (double)((pk - a.weak[c]) / (a.strong[c] - a.weak[c]));
    peak[c] = (float)(m < 0 ? 0 : (m > 1 ? 1 : m));
  }
  if (lane != 0) return;
  const double tc = swt / sw, rounded = floor(tc + 0.5);
  s.tc[i] = tc;
  s.time_samples[i] = row0_sample + (int64_t)rounded;
  s.time_fraction[i] = (float)(tc - rounded);
  s.peak_channel[i] = best_cell % C;
  s.amplitude[i] = a.x[best_cell];
}

/* ss_detect_interp with the same double operations in the same order (no contraction into FMA). */
__device__ float interp(const float *x, int64_t n_rows, int C, int c, double u) {
  const double fl = floor(u), f = __dsub_rn(u, fl);
  const int64_t i0 = (int64_t)fl;
  double p[4];
#pragma unroll
  for (int k = 0; k < 4; k++) {
    int64_t r = i0 - 1 + k;
    p[k] = (r >= 0 && r < n_rows) ? (double)x[r * C + c] : 0.0;
  }
  double a = __dadd_rn(__dsub_rn(__dadd_rn(__dmul_rn(-0.5, p[0]), __dmul_rn(1.5, p[1])), __dmul_rn(1.5, p[2])),
                       __dmul_rn(0.5, p[3]));
  double b = __dsub_rn(__dadd_rn(__dsub_rn(p[0], __dmul_rn(2.5, p[1])), __dmul_rn(2.0, p[2])), __dmul_rn(0.5, p[3]));
  double cc = __dadd_rn(__dmul_rn(-0.5, p[0]), __dmul_rn(0.5, p[2]));
  double y = __dadd_rn(__dmul_rn(__dadd_rn(__dmul_rn(__dadd_rn(__dmul_rn(a, f), b), f), cc), f), p[1]);
  return (float)y;
}

__global__ void k_waves(const float *x, int64_t n_rows, int C, int n_before, int W, spike_out s) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, per = (int64_t)C * W;
  if (e >= s.n * per) return;
  const int64_t i = e / per;
  const int c = (int)(e % per) / W, k = (int)(e % W);
  const double u = __dadd_rn(__dsub_rn(s.tc[i], (double)n_before), (double)k);
  s.waveforms[e] = interp(x, n_rows, C, c, u);
}

unsigned blocks_for(int64_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

} // namespace

struct ss_detect_cuda {
  const ss_backend *be;
  ss_detect_config cfg;
  int C, polarity;
  int *use, *adj_start, *adj;
  float *weak, *strong;
  int64_t cell_cap;
  int32_t *parent, *last, *flag, *idx;
  void *scan_tmp;
  size_t scan_bytes;
  int *small;      /* device: [0] spike count, [1] truncated count, [2] first open row (split runs) */
  int *host_small; /* pinned */
  int64_t spike_cap;
  int32_t *roots;
  int64_t *last_rows; /* split runs: block row of each spike's last node */
  double *tc;
  int64_t *time_samples;
  float *time_fraction;
  int32_t *peak_channel;
  float *amplitude, *masks, *waveforms;
};

namespace {

void free_cells(ss_detect_cuda *d) {
  cudaFree(d->parent);
  cudaFree(d->last);
  cudaFree(d->flag);
  cudaFree(d->idx);
  cudaFree(d->scan_tmp);
  d->parent = d->last = d->flag = d->idx = nullptr;
  d->scan_tmp = nullptr;
  d->cell_cap = 0;
  d->scan_bytes = 0;
}

void free_spikes(ss_detect_cuda *d) {
  cudaFree(d->roots);
  cudaFree(d->tc);
  cudaFree(d->time_samples);
  cudaFree(d->time_fraction);
  cudaFree(d->peak_channel);
  cudaFree(d->amplitude);
  cudaFree(d->masks);
  cudaFree(d->waveforms);
  cudaFree(d->last_rows);
  d->last_rows = nullptr;
  d->roots = nullptr;
  d->tc = nullptr;
  d->time_samples = nullptr;
  d->time_fraction = d->amplitude = d->masks = d->waveforms = nullptr;
  d->peak_channel = nullptr;
  d->spike_cap = 0;
}

/* Buffers grow geometrically; the old ones may still be read by this stream's queued work, hence
 * the synchronisation before freeing (growth is rare: it stops once the largest block was seen). */
ss_status reserve_cells(ss_ctx *ctx, ss_detect_cuda *d, int64_t cells, cudaStream_t st) {
  if (cells <= d->cell_cap) return SS_OK;
  int64_t cap = d->cell_cap ? d->cell_cap : cells;
  while (cap < cells) cap = cap * 2 < MAX_CELLS ? cap * 2 : MAX_CELLS;
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  free_cells(d);
  SS_TRY(SS_CUDA_ALLOC(ctx, d->parent, cap, "detection cells"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->last, cap, "detection cells"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->flag, cap + 1, "detection cells"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->idx, cap + 1, "detection cells"));
  size_t bytes = 0;
  SS_CUDA_TRY(ctx, cub::DeviceScan::ExclusiveSum(nullptr, bytes, d->flag, d->idx, (int)(cap + 1), st));
  SS_TRY(ss_cuda_malloc(ctx, &d->scan_tmp, bytes, "detection scan"));
  d->scan_bytes = bytes;
  d->cell_cap = cap;
  return SS_OK;
}

ss_status reserve_spikes(ss_ctx *ctx, ss_detect_cuda *d, int64_t n, cudaStream_t st) {
  if (n <= d->spike_cap) return SS_OK;
  int64_t cap = d->spike_cap ? d->spike_cap : n;
  while (cap < n) cap *= 2;
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  free_spikes(d);
  const size_t C = (size_t)d->C, W = (size_t)(d->cfg.n_before + d->cfg.n_after);
  SS_TRY(SS_CUDA_ALLOC(ctx, d->roots, cap, "spike table"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->tc, cap, "spike table"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->time_samples, cap, "spike table"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->time_fraction, cap, "spike table"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->peak_channel, cap, "spike table"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->amplitude, cap, "spike table"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->masks, (size_t)cap * C, "spike masks"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->waveforms, (size_t)cap * C * W, "spike waveforms"));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->last_rows, cap, "spike table"));
  d->spike_cap = cap;
  return SS_OK;
}

/* Copies are ordered on the stream `st` (the backend's is non-blocking: a plain cudaMemcpy would
 * not order against it). */
template <typename T>
ss_status upload(ss_ctx *ctx, T **dst, const T *src, size_t count, const char *what, cudaStream_t st) {
  SS_TRY(SS_CUDA_ALLOC(ctx, *dst, count ? count : 1, what));
  if (count) SS_CUDA_TRY(ctx, cudaMemcpyAsync(*dst, src, count * sizeof(T), cudaMemcpyHostToDevice, st));
  return SS_OK;
}

/* Uploads on the backend's stream, complete when this returns (runs may use other streams). */
ss_status open_arrays(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_graph *g, const ss_thresholds *th) {
  const size_t C = (size_t)g->n_channels;
  cudaStream_t st = ss_cuda_stream(d->be);
  SS_TRY(upload(ctx, &d->use, g->use, C, "probe graph", st));
  SS_TRY(upload(ctx, &d->adj_start, g->adj_start, C + 1, "probe graph", st));
  SS_TRY(upload(ctx, &d->adj, g->adj, (size_t)g->adj_start[C], "probe graph", st));
  SS_TRY(upload(ctx, &d->weak, th->weak, C, "thresholds", st));
  SS_TRY(upload(ctx, &d->strong, th->strong, C, "thresholds", st));
  SS_TRY(SS_CUDA_ALLOC(ctx, d->small, SMALL_COUNTS, "detection counts"));
  SS_CUDA_TRY(ctx, cudaMallocHost((void **)&d->host_small, SMALL_COUNTS * sizeof(int)));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  return SS_OK;
}

det_args args_of(const ss_detect_cuda *d, const ss_detect_block *blk, int n_cells) {
  det_args a;
  a.x = blk->x + blk->search_begin * d->C;
  a.n_cells = n_cells;
  a.C = d->C;
  a.J = d->cfg.join_size;
  a.polarity = d->polarity;
  a.use = d->use;
  a.adj_start = d->adj_start;
  a.adj = d->adj;
  a.weak = d->weak;
  a.strong = d->strong;
  a.parent = d->parent;
  a.last = d->last;
  a.flag = d->flag;
  a.idx = d->idx;
  return a;
}

spike_out outputs_of(const ss_detect_cuda *d, int64_t n) {
  spike_out s = {n,        d->roots,    d->tc, d->time_samples, d->time_fraction, d->peak_channel, d->amplitude,
                 d->masks, d->waveforms};
  return s;
}

/* Components of the search region up to the spike count, queued on st; the counts are copied to
 * host_small. open_row >= 0 (relative rows) also queues the first-open search into small[2]. */
ss_status queue_find(ss_ctx *ctx, ss_detect_cuda *d, const det_args &a, const ss_detect_block *blk, cudaStream_t st,
                     int64_t open_row) {
  const unsigned nb = blocks_for(a.n_cells);
  const int64_t sb = blk->search_begin;
  own_rule o = {blk->own_begin - sb, blk->own_end - sb, blk->search_end - 1 - sb, blk->search_end < blk->n_rows};
  const int counts = open_row >= 0 ? SMALL_COUNTS : 2;
  SS_CUDA_TRY(ctx, cudaMemsetAsync(d->small, 0, 2 * sizeof(int), st));
  if (open_row >= 0) SS_CUDA_TRY(ctx, cudaMemsetAsync(d->small + 2, NO_ROW_BYTE, sizeof(int), st));
  k_init<<<nb, THREADS, 0, st>>>(a);
  k_hook<<<nb, THREADS, 0, st>>>(a);
  k_flatten<<<nb, THREADS, 0, st>>>(a);
  k_reduce<<<nb, THREADS, 0, st>>>(a);
  k_mark<<<nb, THREADS, 0, st>>>(a, o, d->small + 1);
  if (open_row >= 0) k_first_open<<<nb, THREADS, 0, st>>>(a, o, open_row, d->small + 2);
  SS_CUDA_TRY(ctx, cudaGetLastError());
  size_t bytes = d->scan_bytes;
  SS_CUDA_TRY(ctx, cub::DeviceScan::ExclusiveSum(d->scan_tmp, bytes, a.flag, a.idx, a.n_cells + 1, st));
  k_counts<<<1, 1, 0, st>>>(a, d->small);
  SS_CUDA_TRY(ctx, cudaGetLastError());
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(d->host_small, d->small, counts * sizeof(int), cudaMemcpyDeviceToHost, st));
  return SS_OK;
}

/* Components of the search region up to the spike count (the one synchronisation). */
ss_status find_spikes(ss_ctx *ctx, ss_detect_cuda *d, const det_args &a, const ss_detect_block *blk, cudaStream_t st,
                      int64_t *n, int64_t *n_truncated) {
  SS_TRY(queue_find(ctx, d, a, blk, st, -1));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  *n = d->host_small[0];
  *n_truncated = d->host_small[1];
  return SS_OK;
}

/* The n spikes' statistics and waveforms (queued on st) into out. */
ss_status queue_spikes(ss_ctx *ctx, ss_detect_cuda *d, const det_args &a, const ss_detect_block *blk, cudaStream_t st,
                       int64_t n, ss_spike_dev *out) {
  SS_TRY(reserve_spikes(ctx, d, n, st));
  const int64_t cells = a.n_cells;
  const spike_out s = outputs_of(d, n);
  const int W = d->cfg.n_before + d->cfg.n_after;
  k_roots<<<blocks_for(cells), THREADS, 0, st>>>(a, d->roots);
  k_stats<<<(unsigned)((n + STATS_WARPS - 1) / STATS_WARPS), THREADS, 0, st>>>(a, s, blk->search_begin,
                                                                               blk->row0_sample);
  k_waves<<<blocks_for(n * d->C * W), THREADS, 0, st>>>(blk->x, blk->n_rows, d->C, d->cfg.n_before, W, s);
  SS_CUDA_TRY(ctx, cudaGetLastError());
  out->time_samples = d->time_samples;
  out->time_fraction = d->time_fraction;
  out->peak_channel = d->peak_channel;
  out->amplitude = d->amplitude;
  out->masks = d->masks;
  out->waveforms = d->waveforms;
  return SS_OK;
}

/* The search region's cells, checked as ss_detect_cuda_run checks them (0 when empty). */
ss_status search_cells(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, int64_t *cells) {
  SS_TRY(ss_detect_block_check(ctx, &d->cfg, NULL, NULL, blk, NULL));
  *cells = (blk->search_end - blk->search_begin) * d->C;
  if (*cells > MAX_CELLS)
    return ss_fail(ctx, SS_ERR_INPUT, "detect: %lld search rows × %d channels is more than %lld cells in one block",
                   (long long)(blk->search_end - blk->search_begin), d->C, (long long)MAX_CELLS);
  return SS_OK;
}

} // namespace

extern "C" ss_status ss_detect_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg,
                                         const ss_detect_graph *g, const ss_thresholds *th, ss_detect_cuda **out) {
  *out = nullptr;
  if (th->n_channels != g->n_channels)
    return ss_fail(ctx, SS_ERR_INTERNAL, "detect: channel counts differ (graph %d, thresholds %d)", g->n_channels,
                   th->n_channels);
  ss_detect_cuda *d = new (std::nothrow) ss_detect_cuda();
  if (!d) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: CUDA detection handle");
  d->be = be;
  d->cfg = *cfg;
  d->C = g->n_channels;
  d->polarity = th->polarity;
  ss_status st = open_arrays(ctx, d, g, th);
  if (st != SS_OK) {
    ss_detect_cuda_close(d);
    return st;
  }
  *out = d;
  return SS_OK;
}

extern "C" void ss_detect_cuda_close(ss_detect_cuda *d) {
  if (!d) return;
  free_cells(d);
  free_spikes(d);
  cudaFree(d->use);
  cudaFree(d->adj_start);
  cudaFree(d->adj);
  cudaFree(d->weak);
  cudaFree(d->strong);
  cudaFree(d->small);
  cudaFreeHost(d->host_small);
  delete d;
}

extern "C" ss_status ss_detect_cuda_run(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, ss_stream stream,
                                        ss_spike_dev *out) {
  memset(out, 0, sizeof(*out));
  cudaStream_t st = stream ? (cudaStream_t)stream : ss_cuda_stream(d->be);
  int64_t cells;
  SS_TRY(search_cells(ctx, d, blk, &cells));
  if (cells == 0) return SS_OK;
  SS_TRY(reserve_cells(ctx, d, cells, st));
  const det_args a = args_of(d, blk, (int)cells);
  int64_t n = 0, n_truncated = 0;
  SS_TRY(find_spikes(ctx, d, a, blk, st, &n, &n_truncated));
  out->n = n;
  out->n_truncated = n_truncated;
  if (n == 0) return SS_OK;
  return queue_spikes(ctx, d, a, blk, st, n, out);
}

extern "C" ss_status ss_detect_cuda_reserve(ss_ctx *ctx, ss_detect_cuda *d, int64_t rows, int64_t spikes,
                                            ss_stream stream) {
  cudaStream_t st = stream ? (cudaStream_t)stream : ss_cuda_stream(d->be);
  const int64_t cells = rows * d->C;
  if (cells > 0) SS_TRY(reserve_cells(ctx, d, cells < MAX_CELLS ? cells : MAX_CELLS, st));
  if (spikes > 0) SS_TRY(reserve_spikes(ctx, d, spikes, st));
  return SS_OK;
}

extern "C" ss_status ss_detect_cuda_find(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, int64_t open_row,
                                         ss_stream stream) {
  cudaStream_t st = stream ? (cudaStream_t)stream : ss_cuda_stream(d->be);
  int64_t cells;
  SS_TRY(search_cells(ctx, d, blk, &cells));
  if (cells == 0) { /* nothing to queue: the counts a run would give */
    d->host_small[0] = d->host_small[1] = 0;
    d->host_small[2] = INT_MAX;
    return SS_OK;
  }
  SS_TRY(reserve_cells(ctx, d, cells, st));
  const int64_t rel = open_row - blk->search_begin;
  return queue_find(ctx, d, args_of(d, blk, (int)cells), blk, st, rel > 0 ? rel : 0);
}

extern "C" ss_status ss_detect_cuda_finish(ss_ctx *ctx, ss_detect_cuda *d, const ss_detect_block *blk, ss_stream stream,
                                           ss_spike_dev *out, int64_t *first_open, const int64_t **last_rows) {
  memset(out, 0, sizeof(*out));
  cudaStream_t st = stream ? (cudaStream_t)stream : ss_cuda_stream(d->be);
  const int64_t first = blk->search_begin + (int64_t)d->host_small[2];
  *first_open = first < blk->own_end ? first : blk->own_end;
  *last_rows = nullptr;
  out->n = d->host_small[0];
  out->n_truncated = d->host_small[1];
  if (out->n == 0) return SS_OK;
  const int64_t cells = (blk->search_end - blk->search_begin) * d->C;
  const det_args a = args_of(d, blk, (int)cells);
  SS_TRY(queue_spikes(ctx, d, a, blk, st, out->n, out));
  k_last_rows<<<blocks_for(out->n), THREADS, 0, st>>>(a, d->roots, out->n, blk->search_begin, d->last_rows);
  SS_CUDA_TRY(ctx, cudaGetLastError());
  *last_rows = d->last_rows;
  return SS_OK;
}

/* --- host arrays in and out ------------------------------------------------------------------- */

namespace {

/* Host copies of one block's device spikes, freed together. */
struct host_spikes {
  ss_spike_list l;
  host_spikes() { memset(&l, 0, sizeof(l)); }
  ~host_spikes() {
    free(l.time_samples);
    free(l.time_fraction);
    free(l.peak_channel);
    free(l.amplitude);
    free(l.masks);
    free(l.waveforms);
  }
};

/* Into pageable memory: cudaMemcpyAsync returns once the copy is done, in stream order. */
template <typename T>
ss_status download(ss_ctx *ctx, T **dst, const T *src, size_t count, const char *what, cudaStream_t st) {
  SS_TRY(ss_alloc(ctx, (void **)dst, count ? count : 1, sizeof(T), what));
  if (count) SS_CUDA_TRY(ctx, cudaMemcpyAsync(*dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, st));
  return SS_OK;
}

/* Shaped as `out` (its n_wave matters only when it keeps waveforms, and then equals the window). */
ss_status download_spikes(ss_ctx *ctx, const ss_spike_dev *s, const ss_spike_list *out, cudaStream_t st,
                          host_spikes *h) {
  const int C = out->n_channels, W = out->n_wave, keep_waveforms = out->keep_waveforms;
  const size_t n = (size_t)s->n;
  h->l.n = h->l.cap = s->n;
  h->l.n_truncated = s->n_truncated;
  h->l.n_channels = C;
  h->l.n_wave = W;
  h->l.keep_waveforms = keep_waveforms;
  SS_TRY(download(ctx, &h->l.time_samples, s->time_samples, n, "spike times", st));
  SS_TRY(download(ctx, &h->l.time_fraction, s->time_fraction, n, "spike times", st));
  SS_TRY(download(ctx, &h->l.peak_channel, s->peak_channel, n, "peak channels", st));
  SS_TRY(download(ctx, &h->l.amplitude, s->amplitude, n, "amplitudes", st));
  SS_TRY(download(ctx, &h->l.masks, s->masks, n * C, "masks", st));
  if (keep_waveforms) SS_TRY(download(ctx, &h->l.waveforms, s->waveforms, n * C * W, "waveforms", st));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  return SS_OK;
}

ss_status block_cuda(ss_ctx *ctx, const ss_backend *be, ss_detect_cuda *d, const ss_detect_block *blk,
                     ss_spike_list *out) {
  const int C = d->C;
  cudaStream_t st = ss_cuda_stream(be);
  const size_t count = (size_t)blk->n_rows * C;
  ss_dbuf<float> x;
  SS_TRY(x.alloc(ctx, count ? count : 1, "detection block"));
  if (count) SS_CUDA_TRY(ctx, cudaMemcpyAsync(x.p, blk->x, count * sizeof(float), cudaMemcpyHostToDevice, st));
  ss_detect_block dblk = *blk;
  dblk.x = x.p;
  ss_spike_dev s;
  ss_status status = ss_detect_cuda_run(ctx, d, &dblk, NULL, &s);
  cudaStreamSynchronize(st); /* x is freed on return: nothing may still read it */
  SS_TRY(status);
  host_spikes h;
  SS_TRY(download_spikes(ctx, &s, out, st, &h));
  return ss_spike_list_append(ctx, out, &h.l);
}

} // namespace

extern "C" ss_status ss_detect_block_cuda(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg,
                                          const ss_detect_graph *g, const ss_thresholds *th, const ss_detect_block *blk,
                                          ss_spike_list *out) {
  SS_TRY(ss_detect_block_check(ctx, cfg, g, th, blk, out));
  ss_detect_cuda *d = nullptr;
  SS_TRY(ss_detect_cuda_open(ctx, be, cfg, g, th, &d));
  ss_status st = block_cuda(ctx, be, d, blk, out);
  ss_detect_cuda_close(d);
  return st;
}
