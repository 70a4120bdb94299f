/* stages/match/match.cu — the CUDA twin of stages/match/match.c: greedy matching pursuit of one chunk on
 * the device, giving the CPU's spikes and residual bit for bit.
 *
 * Device arrays over the search rows [t0, t1), R = t1 − t0, cell = u · R + (t − t0):
 *   scale    xs = x · scale[c]
 *   scores   b[cell]: one thread per (u, t), the CPU's sum (over w, then the footprint channels)
 *   then rounds, each ending in one synchronisation (the accepted count):
 *   gains    g[cell] = fit of b, −inf when dead or the unit is unusable
 *   winners  flag[cell]: the CPU's cheap local-peak test, then its neighbour scan (wins())
 *   scan     CUB exclusive sum of the flags: cell order is the CPU's round order (unit, then time)
 *   — the accepted count —
 *   compact  the round's spikes appended to the chunk's list (row, unit, amp, gain)
 *   ranges   each unit's run in the round's list
 *   scores   b_v(s) −= a · K_vu(s − t): one thread per (v, s) gathers the round's spikes of its
 *            neighbours u in the CPU's order (u ascending, then t), so the float sums are the CPU's
 *   residual x −= a · T_u: accepted spikes never share a (sample, channel), so no atomics
 *   dead     the unit's dead times around each accepted spike
 * Every float operation is an explicit round-to-nearest intrinsic in the CPU's order (match.c is
 * built without contraction), so nothing differs from the CPU; the list is sorted by (row, unit) on
 * the host as the CPU sorts it. */
#include <cub/cub.cuh>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "core/cuda_util.cuh"
#include "stages/match/match.h"

#define THREADS 256

struct ss_match_cuda {
  int device;
  cudaStream_t stream;
  int K, C, W, n_before, dead, max_rounds;
  float amp_min, amp_max; /* as the CPU uses them: (float)amp_min */
  double min_gain;
  /* the bank */
  float *scale, *tmpl_uv, *tmpl_fp, *norm, *cross;
  int32_t *fp_start, *fp, *nb_start, *nb;
  uint8_t *usable;
  int32_t *u_start, *u_end; /* [K]: a unit's run in the round's list */
  /* per chunk, grown */
  size_t cap_x, cap_cells;
  float *x, *xs, *b, *g;
  uint8_t *dead_mask;
  int *flag, *idx; /* [cells + 1] */
  void *scan_tmp;
  size_t scan_bytes;
  int64_t cap_acc;
  int64_t *acc_row;
  int32_t *acc_unit;
  float *acc_amp, *acc_gain;
  int *host_count; /* pinned */
};

/* What the kernels read: the handle's device pointers and one chunk's geometry. */
struct match_args {
  int K, C, W, n_before, dead;
  float amp_min, amp_max;
  double min_gain;
  int64_t t0, R;
  const float *scale, *tmpl_uv, *tmpl_fp, *norm, *cross;
  const int32_t *fp_start, *fp, *nb_start, *nb, *u_start, *u_end;
  const uint8_t *usable;
  float *x, *xs, *b, *g;
  uint8_t *dead_mask;
  int *flag, *idx;
  int64_t *row; /* the round's spikes: the list from the round's first entry */
  int32_t *unit;
  float *amp, *gain;
};

/* --- kernels ------------------------------------------------------------------------------------ */

__global__ void k_scale(match_args a, int64_t n) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a.xs[i] = __fmul_rn(a.x[i], a.scale[i % a.C]);
}

/* b_u(t) = Σ_w Σ_j T_u(w, j) · xs(t − n_before + w, fp_j), summed in that order from 0 as the CPU. */
__global__ void k_scores(match_args a) {
  const int64_t tt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int u = blockIdx.y;
  if (tt >= a.R) return;
  float acc = 0.0f;
  if (a.usable[u]) {
    const int32_t f0 = a.fp_start[u], nf = a.fp_start[u + 1] - f0;
    const float *tc = a.tmpl_fp + (size_t)f0 * a.W;
    const int32_t *fp = a.fp + f0;
    const float *xr = a.xs + (a.t0 + tt - a.n_before) * a.C;
    for (int w = 0; w < a.W; w++, xr += a.C)
      for (int j = 0; j < nf; j++) acc = __fadd_rn(acc, __fmul_rn(tc[w * nf + j], xr[fp[j]]));
  }
  a.b[(size_t)u * a.R + tt] = acc;
}

/* match.c's fit_gain with the same roundings. */
__device__ __forceinline__ float fit_gain(const match_args &a, int u, float s, float *amp) {
  const float n = a.norm[u];
  float x = __fdiv_rn(s, n);
  x = x < a.amp_min ? a.amp_min : (x > a.amp_max ? a.amp_max : x);
  *amp = x;
  return __fsub_rn(__fmul_rn(__fmul_rn(2.0f, x), s), __fmul_rn(__fmul_rn(x, x), n));
}

__global__ void k_gains(match_args a) {
  const int64_t tt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int u = blockIdx.y;
  if (tt >= a.R) return;
  const size_t cell = (size_t)u * a.R + tt;
  float amp;
  a.g[cell] = a.usable[u] && !a.dead_mask[cell] ? fit_gain(a, u, a.b[cell], &amp) : -INFINITY;
}

/* match.c's rounds() test and wins(): the same comparisons, so NaNs and ties fall the same way. */
__global__ void k_winners(match_args a) {
  const int64_t tt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int u = blockIdx.y;
  if (tt >= a.R) return;
  const float *gu_row = a.g + (size_t)u * a.R;
  const float gu = gu_row[tt];
  int win = !((double)gu < a.min_gain);
  if (win && ((tt > 0 && gu_row[tt - 1] >= gu) || (tt + 1 < a.R && gu_row[tt + 1] > gu))) win = 0;
  const int64_t lo = tt - a.W + 1 > 0 ? tt - a.W + 1 : 0, hi = tt + a.W < a.R ? tt + a.W : a.R;
  for (int32_t q = a.nb_start[u]; win && q < a.nb_start[u + 1]; q++) {
    const int v = a.nb[q];
    const float *gv = a.g + (size_t)v * a.R;
    for (int64_t s = lo; s < hi; s++) {
      if (gv[s] < gu) continue;
      if (gv[s] > gu || s < tt || (s == tt && v < u)) {
        win = 0;
        break;
      }
    }
  }
  a.flag[(size_t)u * a.R + tt] = win;
}

/* The flagged cells, in cell order, into the round's list. */
__global__ void k_compact(match_args a, int64_t cells) {
  const int64_t cell = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (cell >= cells || !a.flag[cell]) return;
  const int i = a.idx[cell], u = (int)(cell / a.R);
  float amp;
  fit_gain(a, u, a.b[cell], &amp);
  a.row[i] = a.t0 + cell % a.R;
  a.unit[i] = u;
  a.amp[i] = amp;
  a.gain[i] = a.g[cell];
}

/* u_start[u] .. u_end[u]: unit u's run in the round's list (both 0 when it has none). */
__global__ void k_ranges(match_args a, int n, int32_t *u_start, int32_t *u_end) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t u = a.unit[i];
  if (i == 0 || a.unit[i - 1] != u) u_start[u] = i;
  if (i == n - 1 || a.unit[i + 1] != u) u_end[u] = i + 1;
}

/* b_v(s) −= a · K_vu(s − t) for the round's spikes (u, t) with |s − t| < W, u ascending then t. */
__global__ void k_update_scores(match_args a) {
  const int64_t tt = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int v = blockIdx.y;
  if (tt >= a.R || !a.usable[v]) return;
  const int64_t s = a.t0 + tt;
  const int D = 2 * a.W - 1;
  const size_t cell = (size_t)v * a.R + tt;
  float bv = a.b[cell];
  int touched = 0;
  for (int32_t q = a.nb_start[v]; q < a.nb_start[v + 1]; q++) {
    const int u = a.nb[q];
    int lo = a.u_start[u], hi = a.u_end[u];
    if (lo == hi) continue;
    while (lo < hi) { /* first spike with t > s − W */
      const int mid = lo + (hi - lo) / 2;
      if (a.row[mid] <= s - a.W) lo = mid + 1;
      else hi = mid;
    }
    const float *k = a.cross + ((size_t)v * a.K + u) * D + a.W - 1;
    for (int i = lo; i < a.u_end[u] && a.row[i] < s + a.W; i++) {
      bv = __fsub_rn(bv, __fmul_rn(a.amp[i], k[s - a.row[i]]));
      touched = 1;
    }
  }
  if (touched) a.b[cell] = bv;
}

/* x −= a · T_u (µV) over the spike's footprint: one thread per (spike, template sample). */
__global__ void k_residual(match_args a, int n) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (int64_t)n * a.W) return;
  const int i = (int)(e / a.W), w = (int)(e % a.W), u = a.unit[i];
  const float amp = a.amp[i];
  float *xr = a.x + (a.row[i] - a.n_before + w) * a.C;
  const float *tu = a.tmpl_uv + ((size_t)u * a.W + w) * a.C;
  for (int32_t j = a.fp_start[u]; j < a.fp_start[u + 1]; j++) {
    const int c = a.fp[j];
    xr[c] = __fsub_rn(xr[c], __fmul_rn(amp, tu[c]));
  }
}

__global__ void k_dead(match_args a, int n) {
  const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t span = 2 * (int64_t)a.dead + 1;
  if (e >= (int64_t)n * span) return;
  const int i = (int)(e / span);
  const int64_t s = a.row[i] - a.dead + e % span - a.t0;
  if (s >= 0 && s < a.R) a.dead_mask[(size_t)a.unit[i] * a.R + s] = 1;
}

static unsigned blocks_of(int64_t n) { return (unsigned)((n + THREADS - 1) / THREADS); }

/* --- the handle --------------------------------------------------------------------------------- */

template <typename T>
static ss_status upload(ss_ctx *ctx, T **dst, const T *src, size_t n, const char *what) {
  SS_TRY(SS_CUDA_ALLOC(ctx, *dst, n + 1, what));
  if (n) SS_CUDA_TRY(ctx, cudaMemcpy(*dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
  return SS_OK;
}

static ss_status open_bank(ss_ctx *ctx, ss_match_cuda *h, const ss_match_bank *b) {
  const size_t K = (size_t)b->K, WC = (size_t)b->W * b->C, D = 2 * (size_t)b->W - 1;
  std::vector<uint8_t> usable(K + 1, 0);
  for (size_t u = 0; u < K; u++) usable[u] = b->fp_start[u + 1] > b->fp_start[u] && b->norm[u] >= b->min_gain;
  SS_TRY(upload(ctx, &h->scale, b->scale, (size_t)b->C, "match channel scales"));
  SS_TRY(upload(ctx, &h->tmpl_uv, b->tmpl_uv, K * WC, "match templates"));
  SS_TRY(upload(ctx, &h->tmpl_fp, b->tmpl_fp, (size_t)b->fp_start[K] * b->W, "match templates"));
  SS_TRY(upload(ctx, &h->norm, b->norm, K, "match template norms"));
  SS_TRY(upload(ctx, &h->cross, b->cross, K * K * D, "match cross-correlations"));
  SS_TRY(upload(ctx, &h->fp_start, b->fp_start, K + 1, "match footprints"));
  SS_TRY(upload(ctx, &h->fp, b->fp, (size_t)b->fp_start[K], "match footprints"));
  SS_TRY(upload(ctx, &h->nb_start, b->nb_start, K + 1, "match neighbours"));
  SS_TRY(upload(ctx, &h->nb, b->nb, (size_t)b->nb_start[K], "match neighbours"));
  SS_TRY(upload(ctx, &h->usable, usable.data(), K, "match usable units"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->u_start, K + 1, "match unit runs"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->u_end, K + 1, "match unit runs"));
  SS_CUDA_TRY(ctx, cudaMallocHost((void **)&h->host_count, sizeof(int)));
  return SS_OK;
}

extern "C" ss_status ss_match_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_match_bank *bank,
                                        ss_match_cuda **out) {
  *out = nullptr;
  if (!be || be->kind != SS_DEVICE_CUDA || !be->cuda)
    return ss_fail(ctx, SS_ERR_INTERNAL, "match on CUDA: the backend is not a CUDA backend");
  ss_match_cuda *h = new (std::nothrow) ss_match_cuda();
  if (!h) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: CUDA matching handle");
  h->device = ss_cuda_of(be)->device;
  h->K = bank->K, h->C = bank->C, h->W = bank->W, h->n_before = bank->n_before;
  h->dead = bank->dead, h->max_rounds = bank->max_rounds;
  h->amp_min = (float)bank->amp_min, h->amp_max = (float)bank->amp_max, h->min_gain = bank->min_gain;
  ss_status st = SS_OK;
  cudaError_t e = cudaSetDevice(h->device);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&h->stream, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: match stream on device %d: %s", h->device, cudaGetErrorString(e));
  if (st == SS_OK) st = open_bank(ctx, h, bank);
  if (st != SS_OK) {
    ss_match_cuda_close(h);
    return st;
  }
  *out = h;
  return SS_OK;
}

static void free_chunk(ss_match_cuda *h) {
  cudaFree(h->x), cudaFree(h->xs), cudaFree(h->b), cudaFree(h->g), cudaFree(h->dead_mask);
  cudaFree(h->flag), cudaFree(h->idx), cudaFree(h->scan_tmp);
  h->x = h->xs = h->b = h->g = nullptr;
  h->dead_mask = nullptr;
  h->flag = h->idx = nullptr;
  h->scan_tmp = nullptr;
  h->cap_x = h->cap_cells = h->scan_bytes = 0;
}

static void free_list(ss_match_cuda *h) {
  cudaFree(h->acc_row), cudaFree(h->acc_unit), cudaFree(h->acc_amp), cudaFree(h->acc_gain);
  h->acc_row = nullptr;
  h->acc_unit = nullptr;
  h->acc_amp = h->acc_gain = nullptr;
  h->cap_acc = 0;
}

extern "C" void ss_match_cuda_close(ss_match_cuda *h) {
  if (!h) return;
  cudaSetDevice(h->device);
  if (h->stream) cudaStreamSynchronize(h->stream);
  free_chunk(h);
  free_list(h);
  cudaFree(h->scale), cudaFree(h->tmpl_uv), cudaFree(h->tmpl_fp), cudaFree(h->norm), cudaFree(h->cross);
  cudaFree(h->fp_start), cudaFree(h->fp), cudaFree(h->nb_start), cudaFree(h->nb), cudaFree(h->usable);
  cudaFree(h->u_start), cudaFree(h->u_end);
  cudaFreeHost(h->host_count);
  if (h->stream) cudaStreamDestroy(h->stream);
  delete h;
}

/* --- one chunk ---------------------------------------------------------------------------------- */

static ss_status reserve_chunk(ss_ctx *ctx, ss_match_cuda *h, size_t xn, size_t cells) {
  if (xn <= h->cap_x && cells <= h->cap_cells) return SS_OK;
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(h->stream)); /* nothing in flight uses the old buffers */
  xn = std::max(xn, h->cap_x), cells = std::max(cells, h->cap_cells);
  free_chunk(h);
  SS_TRY(SS_CUDA_ALLOC(ctx, h->x, xn + 1, "match chunk"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->xs, xn + 1, "match scaled chunk"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->b, cells + 1, "match scores"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->g, cells + 1, "match gains"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->dead_mask, cells + 1, "match dead times"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->flag, cells + 1, "match winners"));
  SS_TRY(SS_CUDA_ALLOC(ctx, h->idx, cells + 1, "match winners"));
  size_t bytes = 0;
  SS_CUDA_TRY(ctx, cub::DeviceScan::ExclusiveSum(nullptr, bytes, h->flag, h->idx, (int)(cells + 1), h->stream));
  SS_TRY(ss_cuda_malloc(ctx, &h->scan_tmp, bytes + 1, "match winner scan"));
  h->scan_bytes = bytes;
  h->cap_x = xn, h->cap_cells = cells;
  return SS_OK;
}

/* Room for n spikes in the chunk's list, keeping the first `keep`. */
static ss_status reserve_list(ss_ctx *ctx, ss_match_cuda *h, int64_t n, int64_t keep) {
  if (n <= h->cap_acc) return SS_OK;
  int64_t cap = h->cap_acc ? h->cap_acc : 1024;
  while (cap < n) cap *= 2;
  ss_match_cuda old = *h;
  h->acc_row = nullptr, h->acc_unit = nullptr, h->acc_amp = h->acc_gain = nullptr;
  ss_status st = SS_CUDA_ALLOC(ctx, h->acc_row, cap, "matched spikes");
  if (st == SS_OK) st = SS_CUDA_ALLOC(ctx, h->acc_unit, cap, "matched spikes");
  if (st == SS_OK) st = SS_CUDA_ALLOC(ctx, h->acc_amp, cap, "matched spikes");
  if (st == SS_OK) st = SS_CUDA_ALLOC(ctx, h->acc_gain, cap, "matched spikes");
  cudaError_t e = cudaSuccess;
  if (st == SS_OK && keep > 0) {
    const size_t k = (size_t)keep;
    e = cudaMemcpyAsync(h->acc_row, old.acc_row, k * sizeof(int64_t), cudaMemcpyDeviceToDevice, h->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(h->acc_unit, old.acc_unit, k * sizeof(int32_t), cudaMemcpyDeviceToDevice, h->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(h->acc_amp, old.acc_amp, k * sizeof(float), cudaMemcpyDeviceToDevice, h->stream);
    if (e == cudaSuccess)
      e = cudaMemcpyAsync(h->acc_gain, old.acc_gain, k * sizeof(float), cudaMemcpyDeviceToDevice, h->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(h->stream);
  }
  free_list(&old);
  if (st == SS_OK && e != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: copying matched spikes: %s", cudaGetErrorString(e));
  if (st != SS_OK) {
    free_list(h);
    return st;
  }
  h->cap_acc = cap;
  return SS_OK;
}

static match_args args_of(const ss_match_cuda *h, int64_t t0, int64_t R, int64_t first) {
  match_args a;
  a.K = h->K, a.C = h->C, a.W = h->W, a.n_before = h->n_before, a.dead = h->dead;
  a.amp_min = h->amp_min, a.amp_max = h->amp_max, a.min_gain = h->min_gain;
  a.t0 = t0, a.R = R;
  a.scale = h->scale, a.tmpl_uv = h->tmpl_uv, a.tmpl_fp = h->tmpl_fp, a.norm = h->norm, a.cross = h->cross;
  a.fp_start = h->fp_start, a.fp = h->fp, a.nb_start = h->nb_start, a.nb = h->nb;
  a.u_start = h->u_start, a.u_end = h->u_end, a.usable = h->usable;
  a.x = h->x, a.xs = h->xs, a.b = h->b, a.g = h->g, a.dead_mask = h->dead_mask;
  a.flag = h->flag, a.idx = h->idx;
  a.row = h->acc_row ? h->acc_row + first : nullptr;
  a.unit = h->acc_unit ? h->acc_unit + first : nullptr;
  a.amp = h->acc_amp ? h->acc_amp + first : nullptr;
  a.gain = h->acc_gain ? h->acc_gain + first : nullptr;
  return a;
}

/* One round: gains, winners, their count (synchronises); then, when any, the list, the scores, the
 * residual and the dead times. *n_round: the accepted count. */
static ss_status one_round(ss_ctx *ctx, ss_match_cuda *h, int64_t t0, int64_t R, int64_t *total, int *n_round) {
  const int64_t cells = (int64_t)h->K * R;
  const dim3 grid(blocks_of(R), (unsigned)h->K);
  match_args a = args_of(h, t0, R, *total);
  cudaStream_t st = h->stream;
  k_gains<<<grid, THREADS, 0, st>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "match gains");
  k_winners<<<grid, THREADS, 0, st>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "match winners");
  size_t bytes = h->scan_bytes;
  SS_CUDA_TRY(ctx, cub::DeviceScan::ExclusiveSum(h->scan_tmp, bytes, h->flag, h->idx, (int)(cells + 1), st));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->host_count, h->idx + cells, sizeof(int), cudaMemcpyDeviceToHost, st));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  const int n = *h->host_count;
  *n_round = n;
  if (n == 0) return SS_OK;
  SS_TRY(reserve_list(ctx, h, *total + n, *total));
  a = args_of(h, t0, R, *total);
  k_compact<<<blocks_of(cells), THREADS, 0, st>>>(a, cells);
  SS_CUDA_TRY_LAUNCH(ctx, "match list");
  SS_CUDA_TRY(ctx, cudaMemsetAsync(h->u_start, 0, (size_t)h->K * sizeof(int32_t), st));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(h->u_end, 0, (size_t)h->K * sizeof(int32_t), st));
  k_ranges<<<blocks_of(n), THREADS, 0, st>>>(a, n, h->u_start, h->u_end);
  SS_CUDA_TRY_LAUNCH(ctx, "match unit runs");
  k_update_scores<<<grid, THREADS, 0, st>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "match score updates");
  k_residual<<<blocks_of((int64_t)n * h->W), THREADS, 0, st>>>(a, n);
  SS_CUDA_TRY_LAUNCH(ctx, "match residual");
  k_dead<<<blocks_of((int64_t)n * (2 * (int64_t)h->dead + 1)), THREADS, 0, st>>>(a, n);
  SS_CUDA_TRY_LAUNCH(ctx, "match dead times");
  *total += n;
  return SS_OK;
}

static ss_status list_reserve(ss_ctx *ctx, ss_match_list *l, int64_t n) { return ss_match_list_reserve(ctx, l, n); }

/* The chunk's spikes of the owned rows onto out, sorted by (row, unit) as the CPU leaves them. */
static ss_status append_owned(ss_ctx *ctx, const ss_match_cuda *h, const ss_match_chunk *ch, int64_t total,
                              ss_match_list *out) {
  if (total == 0) return SS_OK;
  const size_t n = (size_t)total;
  std::vector<int64_t> row(n);
  std::vector<int32_t> unit(n);
  std::vector<float> amp(n), gain(n);
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(row.data(), h->acc_row, n * sizeof(int64_t), cudaMemcpyDeviceToHost, h->stream));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(unit.data(), h->acc_unit, n * sizeof(int32_t), cudaMemcpyDeviceToHost, h->stream));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(amp.data(), h->acc_amp, n * sizeof(float), cudaMemcpyDeviceToHost, h->stream));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(gain.data(), h->acc_gain, n * sizeof(float), cudaMemcpyDeviceToHost, h->stream));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(h->stream));
  std::vector<size_t> order;
  for (size_t i = 0; i < n; i++)
    if (row[i] >= ch->own_begin && row[i] < ch->own_end) order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t p, size_t q) { return row[p] != row[q] ? row[p] < row[q] : unit[p] < unit[q]; });
  SS_TRY(list_reserve(ctx, out, out->n + (int64_t)order.size()));
  for (size_t i : order) {
    const int64_t k = out->n++;
    out->row[k] = row[i], out->unit[k] = unit[i], out->amp[k] = amp[i], out->gain[k] = gain[i];
  }
  return SS_OK;
}

static ss_status run_chunk(ss_ctx *ctx, ss_match_cuda *h, ss_match_chunk *ch, int64_t t0, int64_t R,
                           ss_match_list *out) {
  const size_t xn = (size_t)ch->n_rows * h->C, cells = (size_t)h->K * (size_t)R;
  if (cells + 1 > (size_t)INT_MAX)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "match on CUDA: %d units × %lld search rows is too large a chunk", h->K,
                   (long long)R);
  SS_TRY(reserve_chunk(ctx, h, xn, cells));
  cudaStream_t st = h->stream;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->x, ch->x, xn * sizeof(float), cudaMemcpyHostToDevice, st));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(h->dead_mask, 0, cells, st));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(h->flag + cells, 0, sizeof(int), st)); /* the scan's last term */
  const match_args a = args_of(h, t0, R, 0);
  k_scale<<<blocks_of((int64_t)xn), THREADS, 0, st>>>(a, (int64_t)xn);
  SS_CUDA_TRY_LAUNCH(ctx, "match scale");
  k_scores<<<dim3(blocks_of(R), (unsigned)h->K), THREADS, 0, st>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "match scores");
  int64_t total = 0;
  for (int r = 0; r < h->max_rounds; r++) {
    int n = 0;
    SS_TRY(one_round(ctx, h, t0, R, &total, &n));
    if (n == 0) break;
  }
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(ch->x, h->x, xn * sizeof(float), cudaMemcpyDeviceToHost, st));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(st));
  return append_owned(ctx, h, ch, total, out);
}

extern "C" ss_status ss_match_chunk_cuda(ss_ctx *ctx, ss_match_cuda *h, ss_match_chunk *ch, ss_match_list *out) {
  int64_t t0 = ch->search_begin > h->n_before ? ch->search_begin : h->n_before;
  int64_t t1 = ch->n_rows - (h->W - h->n_before) + 1;
  if (ch->search_end < t1) t1 = ch->search_end;
  if (h->K == 0 || t1 <= t0) return SS_OK;
  SS_CUDA_TRY(ctx, cudaSetDevice(h->device)); /* the caller's thread may not have chosen it */
  return run_chunk(ctx, h, ch, t0, t1 - t0, out);
}
