/* knn_common.cuh — what every GPU KNN file shares: constants, the device index (knn_dev: buffers, streams, CUDA
 * graphs, the auto path's remembered choices), the interface between the chooser (knn.cu) and the path families, and
 * the device building blocks of every finish (sorted lists, seeds, exact distances, certificate, exact scan). */
#ifndef SS_KNN_COMMON_CUH
#define SS_KNN_COMMON_CUH

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/cuda_util.cuh"
#include "core/log.h"
#include "stages/knn/knn.h"

namespace knn_cuda {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;              /* block size of the merge, the block finish, the centring */
constexpr unsigned kInfBits = 0x7f800000u; /* +inf as float bits: the empty shared threshold */
constexpr int kNoIndex = INT_MAX;          /* padding entries: (+inf, kNoIndex) sort last */
constexpr int kPathSlots = 64;             /* auto path: the size classes an index remembers */
/* The fused views' padding (k_fused_refs): references to a multiple of kFr (the filter kernel's tile), d to a
 * multiple of kFdimStep (the filter kernel's slice, one k8 MMA step). */
constexpr int kFr = 128;
constexpr int kFdimStep = 8;
static_assert(SS_KNN_FUSED_MAX_DIM % kFdimStep == 0, "fused dimension padding");

/* ---- host state ------------------------------------------------------------------------------------ */

/* A grow-only device buffer kept by the index between searches. */
struct ws_buf {
  void *p = nullptr;
  size_t bytes = 0;
};

struct search_plan {
  int64_t Q, R;
  int Kc, k;
  int64_t part_chunks;
  int64_t wchunk;  /* warp queue: fewest references per chunk (ss_knn_opts.warp_chunk, else kWarpMinChunk) */
  int64_t sfchunk; /* k_select_finish: references per warp (ss_knn_opts.warp_chunk, else kSfChunk) */
};

struct plan_key {
  int64_t m, query_tile, ref_tile, k, warp_chunk;
};

/* A CUDA graph of one fixed launch sequence, replayed while its key (the shape and every pointer the
 * launches bake in) is unchanged. It is captured on the second consecutive call with the
 * same key, so a caller whose shapes change every call (live mode) never pays for a capture it cannot
 * reuse; a failed capture turns graphs off for the index (plain launches, same results). */
struct graph_key {
  const void *ptr[12];
  int64_t val[8];
};

struct graph_cache {
  graph_key key = {}, last = {};
  cudaGraphExec_t exec = nullptr;
  bool off = false;
};

/* The auto path's choice for one size class (log2 classes of n, d, m and K'). */
struct path_choice {
  int n_class, d_class, m_class, kc_class, path;
};

/* The device side of an index: everything a search touches. An index serves one search at a time (its workspace,
 * graphs and remembered path choices are its own); separate indices never share state. */
struct knn_dev {
  float *ref = nullptr, *ref_c = nullptr, *ref_norm = nullptr, *mean = nullptr;
  cudaStream_t sel = nullptr;
  cudaEvent_t gemm_done[2] = {nullptr, nullptr}, sel_done[2] = {nullptr, nullptr}, t0 = nullptr, t1 = nullptr;
  cudaEvent_t start = nullptr, done = nullptr; /* join the selection stream to the caller's stream */
  int sm_count = 0;
  size_t fs_smem = 0; /* the dynamic shared memory k_fused_small may take (fused_setup) */
  ws_buf q, qc, qn, dist_tile[2], run_v, run_i, part_v, part_i, out_i, out_d, cert, tau;
  float *ref_t = nullptr, *ref_tn = nullptr; /* the fused kernel's reference view (k_fused_refs), built on first use */
  float *samp_t = nullptr, *samp_tn = nullptr; /* the filter path's sample view (k_fused_refs), built on first use */
  ws_buf fl_qt, fl_qn, fl_tau, fl_cnt, fl_lv, fl_li; /* the filter path's queries, thresholds, sample rows, lists */
  graph_cache graph, gemm_graph, fgraph;             /* one-tile search; the benchmark's graph GEMM; fused */
  bool plan_valid = false;                           /* the tiled path's last plan (its workspace is allocated) */
  plan_key plan_key_ = {0, 0, 0, 0, 0};
  search_plan plan = {0, 0, 0, 0, 0, 0, 0};
  path_choice paths[kPathSlots] = {}; /* auto: the measured choices, first come first kept */
  int n_paths = 0;
};

/* Outputs of a finish: the neighbours, their distances (may be NULL), a flag per query. */
struct finish_out {
  int *idx;
  double *dist;
  uint8_t *cert;
};

/* What every finish reads and writes. The query's candidates are re-ranked by ss_knn_exact_dist and sorted by
 * (exact, index); every reference outside them has an approximate value above a threshold, and the query is
 * certified when that threshold minus the values' error bound exceeds the k-th exact distance; otherwise its block
 * scans every reference exactly, so that the answer is always the contract's, with no host involvement. */
struct finish_args {
  const float *q, *mean, *ref, *cand_v;
  const int *cand_i;
  int64_t n;
  int d, L, Kc, k;
  int P1, Ps, P2; /* candidate sort (>= L), exact sort (>= K'), exact buffer (>= Ps, scan size) */
  double ref_norm_max;
  bool tc;             /* the values come from TF32 MMAs (the fused path): tc_error_bound, not ss_knn_error_bound */
  unsigned *reset_tau; /* may be NULL: shared thresholds set back to +inf for the next search (fused) */
  int *out_i;
  double *out_d;
  uint8_t *cert;
};

inline int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline int log2_floor(int64_t x) {
  int l = 0;
  while (x > 1) x >>= 1, l++;
  return l;
}

/* The exact scan's buffer: the k best and two rounds of a block's insertions, a power of two. */
constexpr int finish_scan_size(int k) {
  int p = 1;
  while (p < k + 2 * kThreads) p <<= 1;
  return p;
}

constexpr size_t finish_warp_smem(int P2) { return (size_t)P2 * (sizeof(double) + sizeof(int)); }

/* The finish's arguments for m queries with L candidates each (lists of K'). */
inline finish_args make_finish_args(const ss_knn_index *ix, const knn_dev *dv, const float *d_query,
                                    const float *cand_v, const int *cand_i, int L, int Kc, int k, unsigned *reset_tau,
                                    const finish_out &out) {
  finish_args a;
  a.q = d_query, a.mean = dv->mean, a.ref = dv->ref, a.cand_v = cand_v, a.cand_i = cand_i;
  a.n = ix->n, a.d = (int)ix->d, a.L = L, a.Kc = Kc, a.k = k;
  a.P1 = next_pow2(L), a.Ps = next_pow2(Kc);
  a.P2 = a.Ps > finish_scan_size(k) ? a.Ps : finish_scan_size(k);
  a.ref_norm_max = ix->ref_norm_max, a.tc = false, a.reset_tau = reset_tau;
  a.out_i = out.idx, a.out_d = out.dist, a.cert = out.cert;
  return a;
}

inline bool same_key(const graph_key &a, const graph_key &b) { return !memcmp(&a, &b, sizeof(a)); }

/* Run `launch` on stream s through the cache's graph (see graph_cache); *graphed: it ran as a graph. */
template <typename F>
ss_status graph_run(ss_ctx *ctx, graph_cache &g, const graph_key &key, cudaStream_t s, F launch, bool *graphed) {
  *graphed = false;
  if (!g.off && g.exec && same_key(key, g.key)) {
    SS_CUDA_TRY(ctx, cudaGraphLaunch(g.exec, s));
    *graphed = true;
    return SS_OK;
  }
  cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  SS_CUDA_TRY(ctx, cudaStreamIsCapturing(s, &cs));
  bool capture = !g.off && cs == cudaStreamCaptureStatusNone && same_key(key, g.last);
  g.last = key;
  if (!capture) return launch();            /* a caller capturing us gets plain launches in its own graph */
  if (g.exec) cudaGraphExecDestroy(g.exec); /* an in-flight launch completes first */
  g.exec = nullptr;
  SS_CUDA_TRY(ctx, cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  ss_status st = launch();
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &graph);
  if (st == SS_OK && e == cudaSuccess) e = cudaGraphInstantiate(&g.exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (st != SS_OK || e != cudaSuccess) {
    (void)cudaGetLastError();
    g.exec = nullptr;
    g.off = true;
    ss_log_info(ctx, "knn: CUDA graph capture failed (%s); launching directly from now on",
                e != cudaSuccess ? cudaGetErrorString(e) : ss_error_message(ctx));
    return launch();
  }
  g.key = key;
  SS_CUDA_TRY(ctx, cudaGraphLaunch(g.exec, s));
  *graphed = true;
  return SS_OK;
}

/* ---- the families' entry points (the chooser and the index call these) ----------------------------- */

/* knn_index.cu */
ss_status ws_ensure(ss_ctx *ctx, ws_buf *b, size_t bytes, const char *what);
size_t ws_held(const knn_dev *dv);
/* knn_tiled.cu: the block finish's shared-memory opt-in (once per index); rows centred by the mean with their squared
 * norms (optionally their maximum, as float bits, and a reset of their shared thresholds; `what` names the launch in
 * errors); the tiled path. */
ss_status tiled_setup(ss_ctx *ctx);
ss_status centre_rows(ss_ctx *ctx, cudaStream_t s, const float *x, const float *mean, int64_t n, int64_t d, float *xc,
                      float *norm, unsigned *norm_max_bits, unsigned *tau_bits, const char *what);
ss_status tiled_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                       const finish_out &out, ss_knn_stats *stats);
/* knn_fused.cu: the fused kernels' shared-memory opt-ins (once per index), the reference views, the one-kernel
 * form (n <= 2,048 references) */
ss_status fused_setup(ss_ctx *ctx, int device, size_t *fs_smem);
bool fused_small_applies(int64_t n);
ss_status fused_view(ss_ctx *ctx, const ss_knn_index *ix, const knn_dev *dv, int dpad, int64_t count, int64_t npad,
                     bool frag, float **view, float **norms, cudaStream_t s);
ss_status fused_small_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m,
                             int Kc, int dpad, int64_t npad, const finish_out &out, ss_knn_stats *stats);
/* knn_filter.cu: the filter path (the fused path beyond fused_small_applies) */
ss_status filter_setup(ss_ctx *ctx);
ss_status filter_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                        int dpad, int64_t npad, const finish_out &out, ss_knn_stats *stats);

/* ---- device building blocks, compiled into each file that uses them ------------------------------- */
namespace {

template <typename V>
__device__ __forceinline__ bool kv_less(V av, int ai, V bv, int bi) {
  return av < bv || (av == bv && ai < bi);
}

/* In-place ascending bitonic sort of P (a power of two) pairs by (value, index), by `nthreads`
 * cooperating threads of a warp (kWarpOnly) or of the block. */
template <typename V, bool kWarpOnly>
__device__ void bitonic_sort(V *sv, int *si, int P, int tid, int nthreads) {
  for (int k = 2; k <= P; k <<= 1)
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = tid; t < P / 2; t += nthreads) {
        int i = ((t & ~(j - 1)) << 1) | (t & (j - 1)), l = i + j;
        bool up = (i & k) == 0;
        V vi = sv[i], vl = sv[l];
        int ii = si[i], il = si[l];
        if (kv_less(vl, il, vi, ii) == up) sv[i] = vl, sv[l] = vi, si[i] = il, si[l] = ii;
      }
      if (kWarpOnly) __syncwarp();
      else __syncthreads();
    }
}

/* ---- 64-entry lists in registers: entry e = lane + kWarp h of a warp is (v[h], ix[h]) --------------
 * Bitonic compare-exchange stages by shuffles (partner lane ^ j; partner distance kWarp swaps a lane's
 * own two entries): no shared memory and no __syncwarp on the critical path. Entries are distinct by
 * index except (+inf, kNoIndex) padding, so both partners of a pair take the same decision. */
constexpr int kRegList = 2 * kWarp;

/* One compare-exchange of a bitonic stage: this lane's entry with lane ^ j's, ascending where `up`. */
template <typename V>
__device__ __forceinline__ void reg_cx(V &v, int &ix, int j, bool up, int lane) {
  bool lower = (lane & j) == 0;
  V ov = __shfl_xor_sync(kFull, v, j);
  int oi = __shfl_xor_sync(kFull, ix, j);
  bool take = lower == up ? kv_less(ov, oi, v, ix) : kv_less(v, ix, ov, oi);
  if (take) v = ov, ix = oi;
}

template <typename V>
__device__ __forceinline__ void reg_stage(V (&v)[2], int (&ix)[2], int k, int j, int lane) {
  if (j == kWarp) { /* only in the last merge (k = kRegList): ascending */
    if (kv_less(v[1], ix[1], v[0], ix[0])) {
      V tv = v[0];
      int ti = ix[0];
      v[0] = v[1], ix[0] = ix[1], v[1] = tv, ix[1] = ti;
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; h++) reg_cx(v[h], ix[h], j, ((lane + kWarp * h) & k) == 0, lane);
}

/* Sort the 64 entries ascending by (value, index). */
template <typename V>
__device__ __forceinline__ void reg_sort64(V (&v)[2], int (&ix)[2], int lane) {
#pragma unroll
  for (int k = 2; k <= kRegList; k <<= 1)
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) reg_stage(v, ix, k, j, lane);
}

/* List (sorted) and buffer (sorted): the list becomes the 64 smallest of both, sorted — the half-cleaner
 * against the reversed buffer (entry 63 − e sits in lane 31 − lane, the other half) leaves a bitonic
 * sequence, which log2(64) stages sort. */
template <typename V>
__device__ __forceinline__ void reg_merge64(V (&lv)[2], int (&li)[2], const V (&bv)[2], const int (&bi)[2], int lane) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    V ov = __shfl_xor_sync(kFull, bv[1 - h], kWarp - 1);
    int oi = __shfl_xor_sync(kFull, bi[1 - h], kWarp - 1);
    if (kv_less(ov, oi, lv[h], li[h])) lv[h] = ov, li[h] = oi;
  }
#pragma unroll
  for (int j = kWarp; j > 0; j >>= 1) reg_stage(lv, li, kRegList, j, lane);
}

/* Entry e of a register list, for every lane (e uniform). */
template <typename V>
__device__ __forceinline__ V reg_get(const V (&v)[2], int e) {
  return __shfl_sync(kFull, e < kWarp ? v[0] : v[1], e % kWarp);
}

/* m[0] <= ... <= m[S-1]: a lane's S smallest values so far (an insertion network) */
template <int S>
__device__ __forceinline__ void seed_insert(float (&m)[S], float v) {
#pragma unroll
  for (int s = 0; s < S; s++) {
    float lo = fminf(m[s], v);
    v = fmaxf(m[s], v);
    m[s] = lo;
  }
}

/* x from every lane's S smallest (m ascending): the K-th smallest of the warp's S × 32 values by rank counts
 * (+inf when fewer than K are finite). */
template <int S>
__device__ float seed_kth(const float (&m)[S], int K) {
  int c[S] = {}; /* how many of the S × 32 values are <= m[t] */
#pragma unroll
  for (int src = 0; src < kWarp; src++) {
#pragma unroll
    for (int s = 0; s < S; s++) {
      float b = __shfl_sync(kFull, m[s], src);
#pragma unroll
      for (int t = 0; t < S; t++) c[t] += b <= m[t];
    }
  }
  float x = INFINITY; /* K-th = smallest with >= K below */
#pragma unroll
  for (int t = 0; t < S; t++) x = fminf(x, c[t] >= K ? m[t] : INFINITY);
  for (int o = kWarp / 2; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(kFull, x, o));
  return x;
}

/* x rounded to the nearest TF32 (ties away from zero), as a float: what the MMAs read exactly. Every reference view
 * is stored rounded (all its readers are MMAs under tc_error_bound), so that no inner loop converts anything
 * (cvt.rna.tf32 is several instructions on sm_90). */
__device__ __forceinline__ float round_tf32(float x) {
  unsigned u;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(u) : "f"(x));
  return __uint_as_float(u);
}

/* c += a b for one m16n8k8 TF32 tile (float accumulators) */
__device__ __forceinline__ void mma_tf32(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared without registers (sm_80+), and the waits on them */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

/* ---- the finish's device parts ---------------------------------------------------------------------- */

/* Exact full scan by the block into (sd, si)[0, k); P >= k + 2 × blockDim. */
__device__ void finish_exact_scan(const finish_args &a, const float *qrow, double *sd, int *si, int P) {
  __shared__ int s_cnt;
  __shared__ double s_tv;
  __shared__ int s_ti;
  for (int t = threadIdx.x; t < P; t += blockDim.x) sd[t] = (double)INFINITY, si[t] = kNoIndex;
  if (threadIdx.x == 0) s_cnt = 0, s_tv = (double)INFINITY, s_ti = kNoIndex;
  __syncthreads();
  for (int64_t base = 0; base < a.n; base += blockDim.x) {
    int64_t r = base + threadIdx.x;
    if (r < a.n) {
      double e = ss_knn_exact_dist(qrow, a.ref + r * a.d, a.d);
      if (kv_less(e, (int)r, s_tv, s_ti)) {
        int pos = a.k + atomicAdd(&s_cnt, 1);
        sd[pos] = e, si[pos] = (int)r;
      }
    }
    __syncthreads();
    int c = s_cnt;
    bool last = base + blockDim.x >= a.n;
    if (c > P - a.k - (int)blockDim.x || (last && c > 0)) {
      for (int t = a.k + c + threadIdx.x; t < P; t += blockDim.x) sd[t] = (double)INFINITY, si[t] = kNoIndex;
      __syncthreads();
      bitonic_sort<double, false>(sd, si, P, threadIdx.x, blockDim.x);
      if (threadIdx.x == 0) s_cnt = 0, s_tv = sd[a.k - 1], s_ti = si[a.k - 1];
    }
    __syncthreads();
  }
}

/* ss_knn_exact_dist of kExGroup candidates (entries c0 .. c0 + kExGroup − 1 of a warp's 64-entry index list
 * li; kNoIndex or entries >= nc: none) to one query row, by the whole warp: lane l takes the coordinates j ≡ l
 * (mod 32), so that each load instruction reads one contiguous row segment (one candidate per lane touches 32
 * rows per instruction: the finish's cost then grew with d, ~20 us from d 32 to d 256 at 2^10 on the grid), its
 * kExGroup rows' loads in flight at once; then the pairwise combination of the 32 partials,
 * the definition's tree: levels 16 .. kExGroup as butterflies (lanes l and l ^ o hold the same sums), the
 * levels below by recursive halving (a lane keeps the candidates whose bit o matches its own and receives its
 * partner's partial of them), so that lane l ends with candidate c0 + (l mod kExGroup). A lane without a
 * coordinate adds exact zeros. Groups of 8: groups of 16 with the row indices shuffled inside the coordinate loop
 * were slower at d 128 and 256, groups of 32 spilled registers. */
constexpr int kExGroup = 8;
/* coordinate blocks of 32 loaded per round trip (one block per round trip made the per-warp finish 2-5 % slower
 * than per-lane loads at d 128 and 256); k_fused_small's lean finish loads kExBlocksLean (H100, 1,200 queries,
 * k 25: 2^10 exact phase (clock64) d 128 14.5 k -> 13.3 k cycles, d 256 24.7 k -> 22.0 k; 2^10 d 256 38 -> 36.6 us).
 * Not in k_select_finish (it spills there) nor k_list_finish (2^12 d 32, which never takes the groups, 1.53 -> 1.56
 * in the same runs); with kFsBatch the wide k_fused_small spills 4-12 bytes. */
constexpr int kExBlocks = 2, kExBlocksLean = 4;
static_assert(SS_KNN_EXACT_LANES == kWarp && kWarp % kExGroup == 0, "a warp's lanes are the partials");

template <int EB>
__device__ double warp_exact_group(const float *qrow, const float *ref, int d, const int (&li)[2], int c0, int nc,
                                   int lane) {
  int r[kExGroup]; /* the rows, uniform: loaded without a shuffle in the coordinate loop */
#pragma unroll
  for (int c = 0; c < kExGroup; c++) {
    int e = c0 + c;
    int ix = reg_get(li, e < kRegList ? e : 0);
    r[c] = e < nc ? ix : kNoIndex;
  }
  double p[kExGroup];
#pragma unroll
  for (int c = 0; c < kExGroup; c++) p[c] = 0.0;
  for (int j0 = 0; j0 < d; j0 += EB * kWarp) { /* EB coordinate blocks' loads in flight at once */
    float qx[EB], x[EB][kExGroup];
#pragma unroll
    for (int u = 0; u < EB; u++) {
      int j = j0 + u * kWarp + lane;
      bool in = j < d;
      qx[u] = in ? __ldg(qrow + j) : 0.0f;
#pragma unroll
      for (int c = 0; c < kExGroup; c++) x[u][c] = in && r[c] != kNoIndex ? __ldg(ref + (int64_t)r[c] * d + j) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < EB; u++) /* in coordinate order: each partial's sequence of additions */
#pragma unroll
      for (int c = 0; c < kExGroup; c++) {
        double t = __dsub_rn((double)qx[u], (double)x[u][c]);
        p[c] = __dadd_rn(p[c], __dmul_rn(t, t));
      }
  }
#pragma unroll
  for (int lv = 1; (kWarp >> lv) >= kExGroup; lv++) /* butterflies: constant trip counts, p in registers */
#pragma unroll
    for (int c = 0; c < kExGroup; c++) p[c] = __dadd_rn(p[c], __shfl_xor_sync(kFull, p[c], kWarp >> lv));
#pragma unroll
  for (int lv = 1; (kExGroup >> lv) > 0; lv++) { /* halving */
    const int o = kExGroup >> lv;
    bool upper = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < kExGroup / 2; i++) {
      if (i >= o) continue;
      double send = upper ? p[i] : p[i + o], keep = upper ? p[i + o] : p[i];
      p[i] = __dadd_rn(keep, __shfl_xor_sync(kFull, send, o));
    }
  }
  return p[0];
}

/* ‖q'‖² of query qq as k_finish computes it (for the certificate's bound), by its warp. Callers compute it
 * before their selection or list merges, so that its loads are off the finish's dependent chain. */
__device__ double finish_query_norm(const finish_args &a, int64_t qq, int lane) {
  const float *qrow = a.q + qq * a.d;
  double qn = 0.0;
#pragma unroll 4
  for (int j = lane; j < a.d; j += kWarp) {
    double c = (double)(qrow[j] - a.mean[j]);
    qn += c * c;
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) qn += __shfl_xor_sync(kFull, qn, o);
  return qn;
}

/* The exact distances of groups g0, g0 + gstep, ... of query qq's nc candidates (warp_exact_group<EB>; li: their
 * indices, entry e = lane + kWarp h) into the lanes that hold their entries (sd[h]); entries of other groups
 * and beyond nc are left as they are. */
template <int EB = kExBlocks>
__device__ void finish_exact_groups(const finish_args &a, int64_t qq, const int (&li)[2], int nc, int g0, int gstep,
                                    int lane, double (&sd)[2]) {
  const float *qrow = a.q + qq * a.d;
  for (int g = g0; g * kExGroup < nc; g += gstep) { /* entry g kExGroup + lane mod kExGroup */
    double e = warp_exact_group<EB>(qrow, a.ref, a.d, li, g * kExGroup, nc, lane);
    if (lane / kExGroup != g % (kWarp / kExGroup) || g * kExGroup + lane % kExGroup >= nc) continue;
    if (g * kExGroup < kWarp) sd[0] = e;
    else sd[1] = e;
  }
}

/* A certified query's answer: its first k sorted entries (entry e = lane + kWarp h), flag 1. */
__device__ void finish_warp_write(const finish_args &a, int64_t qq, const double (&sd)[2], const int (&si)[2],
                                  int lane) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int t = lane + kWarp * h;
    if (t >= a.k) continue;
    a.out_i[qq * a.k + t] = si[h];
    if (a.out_d) a.out_d[qq * a.k + t] = sd[h];
  }
  if (lane == 0) a.cert[qq] = 1;
}

/* The finish of query qq by its warp from its candidates (si: indices, entry e = lane + kWarp h; sd: their
 * exact distances, finish_exact_groups; kNoIndex / +inf beyond the candidates), every reference outside
 * them having an approximate value >= thr (all: there is none), and qn = finish_query_norm: the sort, the
 * certificate thr − E > the k-th exact distance; a certified query's outputs are written. Returns true when
 * the query needs the exact scan (finish_block_scans). */
__device__ bool finish_warp_cert(const finish_args &a, int64_t qq, double qn, double thr, bool all, double (&sd)[2],
                                 int (&si)[2], int lane) {
  reg_sort64(sd, si, lane);
  double bound = ss_knn_error_bound(a.d, sqrt(qn), a.ref_norm_max);
  bool scan = !(all || thr - bound > reg_get(sd, a.k - 1));
  if (!scan) finish_warp_write(a, qq, sd, si, lane);
  if (a.reset_tau && lane == 0) a.reset_tau[qq] = kInfBits;
  return scan;
}

/* Called by every thread once its warp has flagged its query or not (need_scan[v]; flagged: this thread's), it
 * ends a finish kernel: a block barrier that also tells whether any query of the block is flagged (the usual case:
 * none, and the block is done — a loop over need_scan after a plain barrier took ~0.9 k cycles at the end of every
 * k_fused_small block, ncu's samples); then the whole block scans the flagged queries q_first + v
 * (v < nq) one after another with finish_exact_scan, in smem (P2 doubles and ints). blockDim.x must be the kThreads
 * that finish_scan_size assumes at most. */
__device__ void finish_block_scans(const finish_args &a, int64_t q_first, const int *need_scan, int nq, bool flagged,
                                   unsigned char *smem) {
  if (!__syncthreads_or(flagged)) return;
  double *bd = (double *)smem;
  int *bi = (int *)(bd + a.P2);
  for (int v = 0; v < nq; v++) {
    if (!need_scan[v]) continue; /* uniform across the block */
    int64_t q = q_first + v;
    finish_exact_scan(a, a.q + q * a.d, bd, bi, a.P2);
    for (int t = threadIdx.x; t < a.k; t += blockDim.x) {
      a.out_i[q * a.k + t] = bi[t];
      if (a.out_d) a.out_d[q * a.k + t] = bd[t];
    }
    if (threadIdx.x == 0) a.cert[q] = 0;
    __syncthreads(); /* the next scan reuses the buffer */
  }
}

} // namespace
} // namespace knn_cuda
#endif
