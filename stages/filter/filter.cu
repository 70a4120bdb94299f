/* stages/filter/filter.cu — the CUDA twin of stages/filter/filter.c: the zero-phase filter parallel over channels and
 * sub-blocks of time, the causal filter with its state on the device, the common median reference,
 * and the host-array wrappers that the dispatchers in stages/filter/filter.c call with a CUDA backend.
 *
 * Exactness: every section does the CPU's double operations in the CPU's order through explicitly
 * rounded intrinsics (__dmul_rn, __dadd_rn, ...), which nvcc never contracts into FMAs, and converts
 * with round-to-nearest like the CPU. A recursion that starts where the CPU's starts is therefore
 * bit-identical to it. The zero-phase passes cut time into sub-blocks of `sub` rows; each
 * (channel, sub-block) thread first runs the cascade over the `warm` rows before its sub-block from the
 * steady state of the first of them and discards that stretch: what is left of the difference from
 * the CPU's state (which saw the whole past) is below SETTLE_FACTOR of it, far below float rounding.
 * Sub-blocks within `warm` rows of the pass's start begin at the start itself: exactly the CPU. */
#include <type_traits>

#include "core/cuda_util.cuh"
#include "stages/filter/filter.h"

namespace {

/* Warm-up length: the slowest pole decays by this factor (1e-9 left ~500 of 240,000 samples one
 * float ulp off on a 30 kHz test signal, 1e-12 none; 531 rows at 30 kHz). */
constexpr double SETTLE_FACTOR = 1e-12;
/* Sub-blocks are at least as long as the warm-up (so the warm-up at most doubles the work) and at
 * least this long; beyond THREADS_WANTED threads (about what an H100 keeps in flight at the occupancy
 * these register-heavy threads reach) they grow instead, since more threads would only add warm-ups. */
constexpr int64_t SUB_MIN = 256;
constexpr int64_t THREADS_WANTED = 65536;
constexpr int PASS_THREADS = 128;
constexpr int CAUSAL_THREADS = 64;
/* common median: one warp per row, MEDIAN_WARPS rows per block, the row's used values in shared memory */
constexpr int WARP = 32;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int MEDIAN_WARPS = 8;
constexpr size_t MEDIAN_SMEM = 48 * 1024; /* the default dynamic shared-memory limit of a block */

template <int S>
struct sections {
  ss_biquad sos[S];
};

/* The transposed direct form II cascade of stages/filter/filter.c (steady_state and run_cascade), one channel. */
template <int S>
struct cascade {
  double z[2 * S];

  /* The state a constant input u would have settled to. */
  __device__ __forceinline__ void steady(const sections<S> &f, double u) {
#pragma unroll
    for (int s = 0; s < S; s++) {
      const ss_biquad &b = f.sos[s];
      double y = __ddiv_rn(__dmul_rn(u, __dadd_rn(__dadd_rn(b.b0, b.b1), b.b2)), __dadd_rn(__dadd_rn(1.0, b.a1), b.a2));
      double z2 = __dsub_rn(__dmul_rn(b.b2, u), __dmul_rn(b.a2, y));
      z[2 * s + 1] = z2;
      z[2 * s] = __dadd_rn(__dsub_rn(__dmul_rn(b.b1, u), __dmul_rn(b.a1, y)), z2);
      u = y;
    }
  }

  __device__ __forceinline__ double step(const sections<S> &f, double v) {
#pragma unroll
    for (int s = 0; s < S; s++) {
      const ss_biquad &b = f.sos[s];
      double y = __dadd_rn(__dmul_rn(b.b0, v), z[2 * s]);
      z[2 * s] = __dadd_rn(__dsub_rn(__dmul_rn(b.b1, v), __dmul_rn(b.a1, y)), z[2 * s + 1]);
      z[2 * s + 1] = __dsub_rn(__dmul_rn(b.b2, v), __dmul_rn(b.a2, y));
      v = y;
    }
    return v;
  }
};

/* One pass of the zero-phase filter. Thread = (channel c, sub-block b) with c fastest, so that a warp
 * reads consecutive channels of one row (time-major data: coalesced). Position p counts rows in the
 * direction of the pass: row p forward, row n − 1 − p backward. */
template <int S>
__global__ void k_pass(sections<S> f, const float *__restrict__ in, float *__restrict__ out, int64_t n, int C,
                       int64_t sub, int64_t warm, bool backward) {
  const int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (tid >= (n + sub - 1) / sub * C) return;
  const int c = (int)(tid % C);
  const int64_t p0 = tid / C * sub, p1 = min(p0 + sub, n);
  int64_t p = max((int64_t)0, p0 - warm);
  const int64_t first = backward ? (n - 1) * C + c : c, stride = backward ? -(int64_t)C : C;
  cascade<S> k;
  k.steady(f, (double)in[first + p * stride]);
  for (; p < p0; p++) k.step(f, (double)in[first + p * stride]);
  for (; p < p1; p++) out[first + p * stride] = __double2float_rn(k.step(f, (double)in[first + p * stride]));
}

/* Causal filter: one thread per channel, sequential in time; state [section][2][channel] on the device.
 * in may equal out (each thread reads a sample before writing it). */
template <int S>
__global__ void k_causal(sections<S> f, double *z, bool start, const float *in, float *out, int64_t n, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  cascade<S> k;
  if (start) {
    k.steady(f, (double)in[c]);
  } else {
#pragma unroll
    for (int i = 0; i < 2 * S; i++) k.z[i] = z[(int64_t)i * C + c];
  }
  for (int64_t t = 0; t < n; t++) out[t * C + c] = __double2float_rn(k.step(f, (double)in[t * C + c]));
#pragma unroll
  for (int i = 0; i < 2 * S; i++) z[(int64_t)i * C + c] = k.z[i];
}

/* Common median reference: one warp per row. The lower and upper middle order statistics are found by
 * counting, for each used value, the values below and equal to it (exact, no sort; m² / 32 comparisons
 * per lane); the median rule is the CPU's: the middle value for an odd count, the float mean of the
 * two middle ones for an even count. */
__global__ void k_median(float *x, int64_t n, int C, const int *__restrict__ idx, int m) {
  extern __shared__ float vals[];
  const int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  const int64_t t = blockIdx.x * (int64_t)(blockDim.x / WARP) + warp;
  if (t >= n) return; /* the whole warp leaves together */
  float *v = vals + (size_t)warp * m, *row = x + t * C;
  for (int i = lane; i < m; i += WARP) v[i] = row[idx[i]];
  __syncwarp();
  const int klo = (m - 1) / 2, khi = m / 2;
  float lo = 0, hi = 0;
  bool has_lo = false, has_hi = false;
  for (int i = lane; i < m; i += WARP) {
    const float a = v[i];
    int less = 0, equal = 0;
    for (int j = 0; j < m; j++) {
      less += v[j] < a;
      equal += v[j] == a;
    }
    if (less <= klo && klo < less + equal) {
      lo = a;
      has_lo = true;
    }
    if (less <= khi && khi < less + equal) {
      hi = a;
      has_hi = true;
    }
  }
  lo = __shfl_sync(FULL_MASK, lo, __ffs(__ballot_sync(FULL_MASK, has_lo)) - 1);
  hi = __shfl_sync(FULL_MASK, hi, __ffs(__ballot_sync(FULL_MASK, has_hi)) - 1);
  const float med = (m % 2) ? lo : __fmul_rn(0.5f, __fadd_rn(lo, hi));
  for (int i = lane; i < m; i += WARP) row[idx[i]] = __fsub_rn(v[i], med);
}

/* Call fn(std::integral_constant<int, S>) for S = n_sections (1 .. SS_FILTER_MAX_ORDER): the kernels
 * keep the state in registers, which needs S at compile time. */
template <typename Fn>
void with_sections(int n_sections, Fn &&fn) {
  static_assert(SS_FILTER_MAX_ORDER == 8, "with_sections covers 1 to 8 sections");
  switch (n_sections) {
    case 1: fn(std::integral_constant<int, 1>{}); break;
    case 2: fn(std::integral_constant<int, 2>{}); break;
    case 3: fn(std::integral_constant<int, 3>{}); break;
    case 4: fn(std::integral_constant<int, 4>{}); break;
    case 5: fn(std::integral_constant<int, 5>{}); break;
    case 6: fn(std::integral_constant<int, 6>{}); break;
    case 7: fn(std::integral_constant<int, 7>{}); break;
    default: fn(std::integral_constant<int, 8>{}); break;
  }
}

template <int S>
sections<S> sections_of(const ss_filter *f) {
  sections<S> s;
  for (int i = 0; i < S; i++) s.sos[i] = f->sos[i];
  return s;
}

ss_status check_filter(ss_ctx *ctx, const ss_filter *f) {
  if (f->n_sections < 1 || f->n_sections > SS_FILTER_MAX_ORDER)
    return ss_fail(ctx, SS_ERR_INPUT, "filter: sections: expected 1 to %d, got %d", SS_FILTER_MAX_ORDER, f->n_sections);
  return SS_OK;
}

cudaStream_t stream_of(const ss_backend *be, ss_stream stream) { return stream ? stream : ss_cuda_stream(be); }

/* Stream-ordered allocation with the out-of-memory message of ss_cuda_malloc. */
ss_status alloc_async(ss_ctx *ctx, void **ptr, size_t bytes, const char *what, cudaStream_t s) {
  *ptr = nullptr;
  if (cudaMallocAsync(ptr, bytes, s) == cudaSuccess) return SS_OK;
  cudaGetLastError(); /* not sticky: clear it so that later calls are not blamed */
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  return ss_fail(ctx, SS_ERR_DEVICE, "GPU out of memory: %s needs %.1f MiB, %.1f MiB free of %.1f MiB", what,
                 bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
}

/* Sub-block length for n rows of C channels (see SUB_MIN and THREADS_WANTED). */
int64_t sub_block_rows(int64_t n, int C, int64_t warm) {
  int64_t sub = warm > SUB_MIN ? warm : SUB_MIN;
  int64_t spread = (n * C + THREADS_WANTED - 1) / THREADS_WANTED;
  return spread > sub ? spread : sub;
}

unsigned blocks_for(int64_t threads, int per_block) { return (unsigned)((threads + per_block - 1) / per_block); }

} // namespace

/* The blocked passes: forward (into a temporary when the backward pass follows), then backward. */
static ss_status run_passes(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in, int64_t n_rows,
                            int n_channels, float *d_out, ss_stream stream, bool zero_phase) {
  SS_TRY(check_filter(ctx, f));
  if (n_rows <= 0 || n_channels <= 0) return SS_OK;
  if (!zero_phase && d_in == d_out)
    return ss_fail(ctx, SS_ERR_INTERNAL, "filter: the blocked causal pass needs distinct input and output");
  const cudaStream_t s = stream_of(be, stream);
  const int64_t warm = ss_filter_settle_samples(f, SETTLE_FACTOR), sub = sub_block_rows(n_rows, n_channels, warm);
  const unsigned grid = blocks_for((n_rows + sub - 1) / sub * n_channels, PASS_THREADS);
  float *tmp = nullptr; /* the forward pass's output: also what lets d_in equal d_out */
  if (zero_phase)
    SS_TRY(alloc_async(ctx, (void **)&tmp, sizeof(float) * (size_t)(n_rows * n_channels), "filter forward pass", s));
  with_sections(f->n_sections, [&](auto k) {
    constexpr int S = decltype(k)::value;
    const sections<S> sec = sections_of<S>(f);
    k_pass<S><<<grid, PASS_THREADS, 0, s>>>(sec, d_in, zero_phase ? tmp : d_out, n_rows, n_channels, sub, warm, false);
    if (zero_phase) k_pass<S><<<grid, PASS_THREADS, 0, s>>>(sec, tmp, d_out, n_rows, n_channels, sub, warm, true);
  });
  const cudaError_t launch = cudaGetLastError();
  if (tmp) cudaFreeAsync(tmp, s);
  if (launch != cudaSuccess) return ss_fail(ctx, SS_ERR_DEVICE, "CUDA: filter passes: %s", cudaGetErrorString(launch));
  return SS_OK;
}

extern "C" ss_status ss_filter_zero_phase_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in,
                                               int64_t n_rows, int n_channels, float *d_out, ss_stream stream) {
  return run_passes(ctx, be, f, d_in, n_rows, n_channels, d_out, stream, true);
}

extern "C" ss_status ss_filter_forward_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in,
                                            int64_t n_rows, int n_channels, float *d_out, ss_stream stream) {
  return run_passes(ctx, be, f, d_in, n_rows, n_channels, d_out, stream, false);
}

extern "C" ss_status ss_filter_causal_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, double *d_state,
                                           int *started, const float *d_in, int64_t n_rows, int n_channels,
                                           float *d_out, ss_stream stream) {
  SS_TRY(check_filter(ctx, f));
  if (n_rows <= 0 || n_channels <= 0) return SS_OK;
  const cudaStream_t s = stream_of(be, stream);
  const bool start = !*started;
  with_sections(f->n_sections, [&](auto k) {
    constexpr int S = decltype(k)::value;
    k_causal<S><<<blocks_for(n_channels, CAUSAL_THREADS), CAUSAL_THREADS, 0, s>>>(sections_of<S>(f), d_state, start,
                                                                                  d_in, d_out, n_rows, n_channels);
  });
  SS_CUDA_TRY_LAUNCH(ctx, "causal filter");
  *started = 1;
  return SS_OK;
}

extern "C" ss_status ss_filter_common_median_cuda(ss_ctx *ctx, const ss_backend *be, float *d_x, int64_t n_rows,
                                                  int n_channels, const int *use, ss_stream stream) {
  if (n_rows <= 0 || n_channels <= 0) return SS_OK;
  int *idx = nullptr;
  SS_TRY(SS_ALLOC(ctx, idx, (size_t)n_channels, "median channel list"));
  int m = 0;
  for (int c = 0; c < n_channels; c++)
    if (!use || use[c]) idx[m++] = c;
  const int max_m = (int)(MEDIAN_SMEM / sizeof(float));
  ss_status st = SS_OK;
  if (m > max_m)
    st = ss_fail(ctx, SS_ERR_UNSUPPORTED, "filter: common median over %d channels: the GPU version takes at most %d", m,
                 max_m);
  if (m == 0 || st != SS_OK) { /* no used channel: nothing to subtract, as on the CPU */
    free(idx);
    return st;
  }
  const cudaStream_t s = stream_of(be, stream);
  int *d_idx = nullptr;
  st = alloc_async(ctx, (void **)&d_idx, sizeof(int) * (size_t)m, "median channel list", s);
  /* from pageable memory: staged before the call returns, so idx may be freed right after */
  if (st == SS_OK && cudaMemcpyAsync(d_idx, idx, sizeof(int) * (size_t)m, cudaMemcpyHostToDevice, s) != cudaSuccess)
    st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: median channel list upload: %s", cudaGetErrorString(cudaGetLastError()));
  free(idx);
  if (st == SS_OK) {
    int warps = (int)(MEDIAN_SMEM / (sizeof(float) * (size_t)m));
    if (warps > MEDIAN_WARPS) warps = MEDIAN_WARPS;
    k_median<<<blocks_for(n_rows, warps), warps * WARP, sizeof(float) * (size_t)warps * m, s>>>(d_x, n_rows, n_channels,
                                                                                                d_idx, m);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) st = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: common median: %s", cudaGetErrorString(e));
  }
  if (d_idx) cudaFreeAsync(d_idx, s);
  return st;
}

/* --- host arrays: upload, run, download -------------------------------------------------------- */

namespace {

ss_status upload(ss_ctx *ctx, void *d, const void *h, size_t bytes, cudaStream_t s) {
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
  return SS_OK;
}

ss_status download_sync(ss_ctx *ctx, void *h, const void *d, size_t bytes, cudaStream_t s) {
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h, d, bytes, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}

} // namespace

extern "C" ss_status ss_filter_zero_phase_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_filter *f,
                                                    const float *in, int64_t n_rows, int n_channels, float *out) {
  SS_TRY(check_filter(ctx, f));
  if (n_rows <= 0 || n_channels <= 0) return SS_OK;
  const size_t count = (size_t)(n_rows * n_channels);
  const cudaStream_t s = ss_cuda_stream(be);
  ss_dbuf<float> d_x; /* in place on the device: the forward pass has its own temporary */
  SS_TRY(d_x.alloc(ctx, count, "filter samples"));
  SS_TRY(upload(ctx, d_x, in, sizeof(float) * count, s));
  SS_TRY(ss_filter_zero_phase_cuda(ctx, be, f, d_x, n_rows, n_channels, d_x, nullptr));
  return download_sync(ctx, out, d_x, sizeof(float) * count, s);
}

extern "C" ss_status ss_filter_causal_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_filter *f,
                                                ss_filter_state *st, const float *in, int64_t n_rows, float *out) {
  SS_TRY(check_filter(ctx, f));
  const int C = st->n_channels;
  if (n_rows <= 0 || C <= 0) return SS_OK;
  const size_t count = (size_t)(n_rows * C), n_state = (size_t)2 * f->n_sections * C;
  const cudaStream_t s = ss_cuda_stream(be);
  ss_dbuf<float> d_x;
  ss_dbuf<double> d_z;
  SS_TRY(d_x.alloc(ctx, count, "filter samples"));
  SS_TRY(d_z.alloc(ctx, n_state, "filter state"));
  SS_TRY(upload(ctx, d_x, in, sizeof(float) * count, s));
  SS_TRY(upload(ctx, d_z, st->z, sizeof(double) * n_state, s));
  SS_TRY(ss_filter_causal_cuda(ctx, be, f, d_z, &st->started, d_x, n_rows, C, d_x, nullptr));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(st->z, d_z, sizeof(double) * n_state, cudaMemcpyDeviceToHost, s));
  return download_sync(ctx, out, d_x, sizeof(float) * count, s);
}

extern "C" ss_status ss_filter_common_median_cuda_host(ss_ctx *ctx, const ss_backend *be, float *x, int64_t n_rows,
                                                       int n_channels, const int *use) {
  if (n_rows <= 0 || n_channels <= 0) return SS_OK;
  const size_t count = (size_t)(n_rows * n_channels);
  const cudaStream_t s = ss_cuda_stream(be);
  ss_dbuf<float> d_x;
  SS_TRY(d_x.alloc(ctx, count, "median samples"));
  SS_TRY(upload(ctx, d_x, x, sizeof(float) * count, s));
  SS_TRY(ss_filter_common_median_cuda(ctx, be, d_x, n_rows, n_channels, use, nullptr));
  return download_sync(ctx, x, d_x, sizeof(float) * count, s);
}
