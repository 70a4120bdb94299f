/* knn.cu — KNN on the GPU: centred references resident on the device. Two candidate paths:
 *  - tiled: per (query tile, reference tile) a cuBLAS SGEMM writes −2 q·r, a selection kernel
 *    (k-pass minimum, bitonic sort or warp queue) adds the norms and keeps each chunk's K' best, a
 *    merge kernel folds the chunks into the running K' list of each query. With several reference
 *    tiles, GEMMs run on the backend stream and selections on a second stream, double-buffered; with
 *    one reference tile everything runs on the backend stream and the chunks' lists go straight to
 *    the finish kernel (no list fill, no merge), and repeated calls replay one CUDA graph. The warp
 *    queue shares a per-query threshold between all warps of a search; in a one-tile search with K' <= 64
 *    it starts from a seed threshold (warp_seed) instead of warming up. A one-tile search with K' <= 64 and
 *    n <= kSfMaxRefs (warp queue or auto) selects AND finishes in one kernel (k_select_finish: the lean
 *    selection, lean_select_finish: k-th seed, every value within 2E of it a candidate, no certificate
 *    test needed). `auto` strategy otherwise:
 *    the three timed on the first tile of the first search of each (GPU, n class, K' class), remembered
 *    for the process.
 *  - fused (K' <= 64, d <= 256; forced by ss_knn_opts.path): up to 2,048 references one kernel
 *    (k_fused_small: 8 queries a block, up to 12 where that keeps every SM to one block: balanced_queries;
 *    tensor-core distances into shared memory, lean selection and finish; fused_small_applies); beyond,
 *    the filter path: a seed threshold per query from a strided sample of the references, a tensor-core
 *    (TF32) kernel that appends every value within the threshold to the query's list (the distance matrix is
 *    never written), and the lean finish over the lists: three to five launches. Both are replayed as a CUDA
 *    graph.
 * `auto` path: where the fused path applies and n <= 65,536, every applicable path is timed on the first
 * search of each size class and the fastest is remembered (calibrate_path); the tiled path beyond.
 * Both end in the finish: exact re-rank, certificate, and the exact full scan for uncertified queries,
 * all on the device (k_finish_warp, a warp per query, when K' <= 64; else k_finish, a block per
 * query). ss_knn_cuda_search_device is the device-resident entry (no host sync); ss_knn_cuda_search
 * wraps it with the upload and download. */
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "core/cuda_util.cuh"
#include "stages/knn/knn.h"
#include "core/log.h"

namespace {

constexpr int kWarp = 32;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;           /* block size of kmin, bitonic, merge, re-rank, centring */
constexpr int kChunk = 4096;            /* references per block for kmin / bitonic (shared memory) */
constexpr int kWarpBuf = 64;            /* warp queue: pending insertions before a merge */
constexpr int kWarpsPerBlock = 4;       /* warp queue: independent warps per block */
/* warp queue: fewest references per warp. Every chunk pays a warm-up (its first K' ln(chunk / K')
 * insertions and their merges; ~10 us per extra chunk per query on the 1,200-query grid, inferred from
 * the H100 timings in docs/knn.md): fewer, longer chunks win while kWarpUnroll keeps enough loads in
 * flight per warp. */
constexpr int kWarpMinChunk = 4096;
constexpr int kWarpUnroll = 8;          /* warp queue: loads per lane in flight (memory-level parallelism) */
constexpr unsigned kInfBits = 0x7f800000u; /* +inf as float bits: the empty shared threshold */
constexpr int64_t kTargetWarps = 16384; /* warp queue: work items per tile that fill an H100 */
constexpr int64_t kMinRefTile = 4096, kMinQueryTile = 128;
constexpr double kMemFraction = 0.8;    /* of the free device memory a search may take */
constexpr int kNoIndex = INT_MAX;       /* padding entries: (+inf, kNoIndex) sort last */
constexpr int kCalibRepeats = 2;        /* auto: runs per strategy; the fastest counts */
constexpr int kCalibSlots = 64;
constexpr size_t kSmemDefault = 48 * 1024;

/* A grow-only device buffer kept by the index between searches. */
struct ws_buf {
  void *p = nullptr;
  size_t bytes = 0;
};

struct search_plan {
  int64_t Q, R;
  int Kc, k;
  int64_t part_chunks;
  int64_t wchunk; /* warp queue: fewest references per chunk (ss_knn_opts.warp_chunk, else kWarpMinChunk) */
  int64_t sfchunk; /* k_select_finish: references per warp (ss_knn_opts.warp_chunk, else kSfChunk) */
};

struct plan_key {
  int64_t m, query_tile, ref_tile, k, warp_chunk;
};

/* A CUDA graph of one fixed launch sequence, replayed while its key (shape, strategy and every
 * pointer the launches bake in) is unchanged. It is captured on the second consecutive call with the
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

struct knn_dev {
  float *ref = nullptr, *ref_c = nullptr, *ref_norm = nullptr, *mean = nullptr;
  cudaStream_t sel = nullptr;
  cudaEvent_t gemm_done[2] = {nullptr, nullptr}, sel_done[2] = {nullptr, nullptr}, t0 = nullptr, t1 = nullptr;
  cudaEvent_t start = nullptr, done = nullptr; /* join the selection stream to the caller's stream */
  int sm_count = 0;
  size_t fs_smem = 0; /* the dynamic shared memory k_fused_small may take (set_fused_smem) */
  ws_buf q, qc, qn, dist_tile[2], run_v, run_i, part_v, part_i, out_i, out_d, cert, tau;
  float *ref_t = nullptr, *ref_tn = nullptr; /* the fused kernel's reference view (k_fused_refs), built on first use */
  float *samp_t = nullptr, *samp_tn = nullptr; /* the filter path's sample view (k_fused_refs), built on first use */
  ws_buf fl_qt, fl_qn, fl_tau, fl_cnt, fl_lv, fl_li; /* the filter path's queries, thresholds, sample rows, lists */
  graph_cache graph, gemm_graph, fgraph; /* one-tile search; the benchmark's graph GEMM; fused */
  bool plan_valid = false; /* the tiled path's last plan (its workspace is allocated) */
  plan_key plan_key_ = {0, 0, 0, 0, 0};
  search_plan plan = {0, 0, 0, 0, 0, 0, 0};
};

ss_status ws_ensure(ss_ctx *ctx, ws_buf *b, size_t bytes, const char *what) {
  if (bytes <= b->bytes) return SS_OK;
  cudaFree(b->p);
  b->p = nullptr;
  b->bytes = 0;
  SS_TRY(ss_cuda_malloc(ctx, &b->p, bytes, what));
  b->bytes = bytes;
  return SS_OK;
}

template <typename V>
__device__ __forceinline__ bool kv_less(V av, int ai, V bv, int bi) {
  return av < bv || (av == bv && ai < bi);
}

__device__ __forceinline__ void warp_argmin(float &v, int &i) {
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    float ov = __shfl_xor_sync(kFull, v, o);
    int oi = __shfl_xor_sync(kFull, i, o);
    if (kv_less(ov, oi, v, i)) v = ov, i = oi;
  }
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

/* Centre rows by the mean and take their squared norms; one warp per row. With tau_bits (queries),
 * also reset each row's shared selection threshold to +inf: this kernel runs first in every search. */
__global__ void k_center(const float *x, const float *mean, int64_t n, int64_t d, float *xc, float *norm,
                         unsigned *norm_max_bits, unsigned *tau_bits) {
  int64_t r = (int64_t)blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (r >= n) return;
  float s = 0.0f;
  for (int64_t j = lane; j < d; j += kWarp) {
    float c = x[r * d + j] - mean[j];
    xc[r * d + j] = c;
    s += c * c;
  }
  for (int o = kWarp / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
  if (lane == 0) {
    norm[r] = s;
    if (tau_bits) tau_bits[r] = kInfBits;
    if (norm_max_bits) atomicMax(norm_max_bits, __float_as_uint(s)); /* non-negative floats order as ints */
  }
}

__global__ void k_reset_tau(unsigned *tau_bits, int64_t count) {
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < count; t += (int64_t)gridDim.x * blockDim.x)
    tau_bits[t] = kInfBits;
}

__global__ void k_fill(float *v, int *i, int64_t count) {
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < count; t += (int64_t)gridDim.x * blockDim.x)
    v[t] = INFINITY, i[t] = kNoIndex;
}

/* What every selection kernel reads: the tile of −2 q·r (query rows of length ld), the norms. */
struct tile_args {
  const float *dist;  /* Qt rows × ld */
  int64_t ld;         /* = Rt */
  const float *qnorm; /* Qt, this query tile */
  const float *rnorm; /* Rt, this reference tile */
  int r0, Rt, nch, chunk, Kc;
  float *pv;          /* (Qt × nch) × Kc partial lists */
  int *pi;
};

__device__ __forceinline__ float tile_value(const tile_args &a, int qq, float qn, int r) {
  return fmaxf(qn + a.rnorm[r] + a.dist[(int64_t)qq * a.ld + r], 0.0f);
}

/* k-pass minimum: the chunk in shared memory, K' block-wide minimum searches, each for the
 * smallest (value, position) after the previous one. One block per (query, chunk). */
__global__ void k_select_kmin(tile_args a) {
  extern __shared__ float sm_f[];
  __shared__ float red_v[kThreads / kWarp];
  __shared__ int red_i[kThreads / kWarp];
  __shared__ float last_v;
  __shared__ int last_i;
  int item = blockIdx.x, qq = item / a.nch, c = item % a.nch, begin = c * a.chunk;
  int len = min(a.chunk, a.Rt - begin), lane = threadIdx.x % kWarp, w = threadIdx.x / kWarp;
  float qn = a.qnorm[qq];
  for (int t = threadIdx.x; t < len; t += blockDim.x) sm_f[t] = tile_value(a, qq, qn, begin + t);
  if (threadIdx.x == 0) last_v = -INFINITY, last_i = -1;
  __syncthreads();
  float *outv = a.pv + (int64_t)item * a.Kc;
  int *outi = a.pi + (int64_t)item * a.Kc;
  for (int p = 0; p < a.Kc; p++) {
    float lv = last_v, bv = INFINITY;
    int li = last_i, bi = kNoIndex;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
      float v = sm_f[t];
      if (kv_less(lv, li, v, t) && kv_less(v, t, bv, bi)) bv = v, bi = t;
    }
    warp_argmin(bv, bi);
    if (lane == 0) red_v[w] = bv, red_i[w] = bi;
    __syncthreads();
    if (w == 0) {
      bool have = lane < (int)(blockDim.x / kWarp);
      bv = have ? red_v[lane] : INFINITY;
      bi = have ? red_i[lane] : kNoIndex;
      warp_argmin(bv, bi);
      if (lane == 0) {
        outv[p] = bv;
        outi[p] = bi == kNoIndex ? kNoIndex : a.r0 + begin + bi;
        last_v = bv, last_i = bi;
      }
    }
    __syncthreads();
  }
}

/* Bitonic: the chunk as (value, index) pairs in shared memory, fully sorted, the first K' kept. */
__global__ void k_select_bitonic(tile_args a, int P) {
  extern __shared__ unsigned char sm_b[];
  float *sv = (float *)sm_b;
  int *si = (int *)(sv + P);
  int item = blockIdx.x, qq = item / a.nch, c = item % a.nch, begin = c * a.chunk;
  int len = min(a.chunk, a.Rt - begin);
  float qn = a.qnorm[qq];
  for (int t = threadIdx.x; t < P; t += blockDim.x) {
    bool in = t < len;
    sv[t] = in ? tile_value(a, qq, qn, begin + t) : INFINITY;
    si[t] = in ? a.r0 + begin + t : kNoIndex;
  }
  __syncthreads();
  bitonic_sort<float, false>(sv, si, P, threadIdx.x, blockDim.x);
  for (int t = threadIdx.x; t < a.Kc; t += blockDim.x) {
    a.pv[(int64_t)item * a.Kc + t] = sv[t];
    a.pi[(int64_t)item * a.Kc + t] = si[t];
  }
}

/* The list [0, PL) and the upper half [PL, P), both sorted ascending (P = 2 PL): the PL smallest of
 * the two, sorted, into the list (one half-cleaner pass, log2(PL) merge stages); one warp. */
__device__ void warp_merge_sorted(float *sv, int *si, int P, int lane) {
  int PL = P / 2;
  for (int t = lane; t < PL; t += kWarp) { /* half-cleaner against the upper half read backwards */
    int u = P - 1 - t;
    if (kv_less(sv[u], si[u], sv[t], si[t])) sv[t] = sv[u], si[t] = si[u];
  }
  __syncwarp();
  for (int j = PL / 2; j > 0; j >>= 1) { /* bitonic merge of the list */
    for (int t = lane; t < PL / 2; t += kWarp) {
      int i = ((t & ~(j - 1)) << 1) | (t & (j - 1)), l = i + j;
      float vi = sv[i], vl = sv[l];
      int ii = si[i], il = si[l];
      if (kv_less(vl, il, vi, ii)) sv[i] = vl, sv[l] = vi, si[i] = il, si[l] = ii;
    }
    __syncwarp();
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

/* Warp queue layout (P = 2 PL entries, PL = next_pow2(max(K', kWarpBuf))): [0, PL) the sorted list,
 * whose first K' entries are the warp's best; [PL, PL + kWarpBuf) the pending buffer; the rest +inf,
 * never written. A merge sorts only the buffer, then the list followed by the reversed upper half is
 * a bitonic sequence: one half-cleaner pass keeps the PL smallest in the list (the upper half is not
 * written) and log2(PL) merge stages sort them — about half the work of sorting all P entries. */
__device__ void warp_queue_merge(float *sv, int *si, int nb, int P, int lane) {
  int PL = P / 2;
  __syncwarp();
  for (int t = nb + lane; t < kWarpBuf; t += kWarp) sv[PL + t] = INFINITY, si[PL + t] = kNoIndex;
  __syncwarp();
  bitonic_sort<float, true>(sv + PL, si + PL, kWarpBuf, lane, kWarp);
  warp_merge_sorted(sv, si, P, lane);
}

/* Publish a warp's K'-th best into the query's shared threshold. Values are >= 0 (clamped), so their
 * bits order as unsigned integers; an unfilled list (+inf) changes nothing. */
__device__ __forceinline__ void publish_tau(unsigned *tau_bits, float kth, int lane) {
  if (tau_bits && lane == 0 && kth < INFINITY) atomicMin(tau_bits, __float_as_uint(kth));
}

/* One element of a warp's chunk (k_select_warp, k_select_finish): the tiled path's value. */
__device__ __forceinline__ float warp_value(const float *row, const float *rn, float qn, int t, int len) {
  return t < len ? fmaxf(qn + rn[t] + row[t], 0.0f) : INFINITY;
}

/* The seed of a warp queue with K' <= kSeedPerLane × 32 (k_select_warp, k_select_finish, the fused kernel): every
 * lane keeps the kSeedPerLane (2) smallest of its values; the K'-th smallest of those 64 values, x, is the
 * value of an element, and at least K' distinct elements are <= x. Filtering by v <= x therefore keeps the K'
 * best of those values (and the final K'-th value A <= x, so a rejected element, > x, is > A: what the
 * certificate needs), while the queue no longer has to warm up through ~K' ln(len / K') insertions and their
 * merges: about K' + a few elements pass. +inf when fewer than K' values are finite (no filter). */
constexpr int kSeedPerLane = 2;
static_assert(SS_KNN_FUSED_MAX_CANDIDATES <= kSeedPerLane * kWarp, "a seed ranks K' of its samples");
/* k_select_warp's seed pass reads only the chunk's first kSeedPrefix elements (all of a short chunk): on
 * long chunks a full extra pass would double the selection's memory traffic (the chunks of a grid search
 * do not stay in L2), while the prefix is still in cache when the second pass reads it again. */
constexpr int kSeedPrefix = 1024;
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

__device__ __forceinline__ void seed_push(float &m0, float &m1, float v) {
  float m[2] = {m0, m1};
  seed_insert<2>(m, v);
  m0 = m[0], m1 = m[1];
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

/* x from every lane's two smallest (m0 <= m1): the K'-th smallest of the warp's 64 values (+inf when
 * fewer than K' are finite). The same for the warp queue and the fused kernel. */
__device__ float seed_from_pairs(float m0, float m1, int Kc) {
  const float m[2] = {m0, m1};
  return seed_kth<2>(m, Kc);
}

__device__ float warp_seed(const float *row, const float *rn, float qn, int len, int Kc, int lane) {
  float m0 = INFINITY, m1 = INFINITY;
  for (int base = 0; base < len; base += kWarp * kWarpUnroll) {
    float v[kWarpUnroll];
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) v[u] = warp_value(row, rn, qn, base + u * kWarp + lane, len);
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) seed_push(m0, m1, v[u]);
  }
  return seed_from_pairs(m0, m1, Kc);
}

/* Warp queue: each warp streams its chunk once, kWarpUnroll loads per lane in flight. An element
 * enters the pending buffer only when it beats the threshold: the smallest of the warp's own K'-th
 * best, the query's running K'-th from earlier reference tiles, and the query's shared threshold
 * (tau_bits, may be NULL: the smallest K'-th any warp of this search has published for the query).
 * A full buffer is merged into the sorted list and its new K'-th published. Every published value is
 * the K'-th of a list that ends among the finish kernel's inputs (directly, or through the running
 * list, which only improves), so it bounds the final K'-th candidate value from above: a rejected
 * element is >= that value, which is all the certificate needs (ties included: it compares values).
 * After warm-up nearly every element is rejected by one comparison: the kernel runs at memory speed.
 * With `seed` (one-tile searches with K' <= 64 and n > kSfMaxRefs; smaller ones select in k_select_finish)
 * the warm-up is skipped: warp_seed's x is applied inclusively from the first element (it is never
 * published: other warps compare strictly). */
__global__ void k_select_warp(tile_args a, int P, int n_items, const float *run_v, unsigned *tau_bits, int seed) {
  extern __shared__ unsigned char sm_w[];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int item = blockIdx.x * (blockDim.x / kWarp) + w;
  if (item >= n_items) return;
  float *sv = (float *)(sm_w + (size_t)w * P * (sizeof(float) + sizeof(int)));
  int *si = (int *)(sv + P);
  int qq = item / a.nch, c = item % a.nch, begin = c * a.chunk, len = min(a.chunk, a.Rt - begin);
  const float *row = a.dist + (int64_t)qq * a.ld + begin, *rn = a.rnorm + begin;
  unsigned *shared_tau = tau_bits ? tau_bits + qq : nullptr;
  float qn = a.qnorm[qq], tau = run_v ? run_v[(int64_t)qq * a.Kc + a.Kc - 1] : INFINITY;
  for (int t = lane; t < P; t += kWarp) sv[t] = INFINITY, si[t] = kNoIndex;
  /* v < nextafter(x) is v <= x: the seed keeps elements equal to it (see warp_seed) */
  if (seed && a.Kc <= kSeedPerLane * kWarp) {
    float x = warp_seed(row, rn, qn, len < kSeedPrefix ? len : kSeedPrefix, a.Kc, lane);
    tau = fminf(tau, nextafterf(x, INFINITY));
  }
  int nb = 0;
  for (int base = 0; base < len; base += kWarp * kWarpUnroll) {
    float v[kWarpUnroll];
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) /* independent loads first, then the filter */
      v[u] = warp_value(row, rn, qn, base + u * kWarp + lane, len);
    if (shared_tau) tau = fminf(tau, __uint_as_float(*(volatile unsigned *)shared_tau));
#pragma unroll
    for (int u = 0; u < kWarpUnroll; u++) {
      bool pass = v[u] < tau; /* v == tau loses: the certificate only needs rejected values >= tau */
      unsigned mask = __ballot_sync(kFull, pass);
      if (!mask) continue;
      int cnt = __popc(mask);
      if (nb + cnt > kWarpBuf) {
        warp_queue_merge(sv, si, nb, P, lane);
        nb = 0;
        tau = fminf(tau, sv[a.Kc - 1]);
        publish_tau(shared_tau, sv[a.Kc - 1], lane);
        pass = v[u] < tau; /* the tighter threshold applies at once */
        mask = __ballot_sync(kFull, pass);
        cnt = __popc(mask);
      }
      if (pass) {
        int pos = P / 2 + nb + __popc(mask & ((1u << lane) - 1u));
        sv[pos] = v[u];
        si[pos] = a.r0 + begin + base + u * kWarp + lane;
      }
      nb += cnt;
    }
  }
  if (nb) {
    warp_queue_merge(sv, si, nb, P, lane);
    publish_tau(shared_tau, sv[a.Kc - 1], lane);
  }
  __syncwarp();
  for (int t = lane; t < a.Kc; t += kWarp) {
    a.pv[(int64_t)item * a.Kc + t] = sv[t];
    a.pi[(int64_t)item * a.Kc + t] = si[t];
  }
}

template <typename V>
__device__ __forceinline__ int count_less(const V *lv, const int *li, int n, V v, int i) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = (lo + hi) >> 1;
    if (kv_less(lv[mid], li[mid], v, i)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Fold the nch partial lists of each query into its running list (merge by rank: an element's
 * place is its rank in its own list plus the number of smaller elements in the other). */
__global__ void k_merge(float *run_v, int *run_i, const float *pv, const int *pi, int nch, int Kc) {
  extern __shared__ unsigned char sm_m[];
  float *av = (float *)sm_m;
  int *ai = (int *)(av + Kc);
  float *bv = (float *)(ai + Kc);
  int *bi = (int *)(bv + Kc);
  float *cv = (float *)(bi + Kc);
  int *ci = (int *)(cv + Kc);
  int qq = blockIdx.x;
  for (int t = threadIdx.x; t < Kc; t += blockDim.x) av[t] = run_v[(int64_t)qq * Kc + t], ai[t] = run_i[(int64_t)qq * Kc + t];
  __syncthreads();
  for (int c = 0; c < nch; c++) {
    const float *qv = pv + ((int64_t)qq * nch + c) * Kc;
    const int *qi = pi + ((int64_t)qq * nch + c) * Kc;
    if (!kv_less(qv[0], qi[0], av[Kc - 1], ai[Kc - 1])) continue; /* nothing in it can enter */
    for (int t = threadIdx.x; t < Kc; t += blockDim.x) bv[t] = qv[t], bi[t] = qi[t];
    __syncthreads();
    for (int t = threadIdx.x; t < Kc; t += blockDim.x) {
      int pa = t + count_less(bv, bi, Kc, av[t], ai[t]);
      if (pa < Kc) cv[pa] = av[t], ci[pa] = ai[t];
      int pb = t + count_less(av, ai, Kc, bv[t], bi[t]);
      if (pb < Kc) cv[pb] = bv[t], ci[pb] = bi[t];
    }
    __syncthreads();
    float *tv = av;
    int *ti = ai;
    av = cv, ai = ci, cv = tv, ci = ti;
  }
  for (int t = threadIdx.x; t < Kc; t += blockDim.x) run_v[(int64_t)qq * Kc + t] = av[t], run_i[(int64_t)qq * Kc + t] = ai[t];
}

/* ---- fused path: the references' transposed view -------------------------------------------------
 * The fused kernels (k_fused_small, k_filter) read the centred references through ref_t: transposed and
 * zero-padded (dpad = d rounded up to kFdimStep, npad = n rounded up to kFr), so that their loads are
 * coalesced float4s and need no bounds checks (padding references have norm +inf: they never pass). */
constexpr int kFr = 128;      /* reference padding: the filter kernel's tile */
constexpr int kFdimStep = 8;  /* dpad: d rounded up to this (the filter kernel's slice) */
static_assert(SS_KNN_FUSED_MAX_DIM % kFdimStep == 0, "fused dimension padding");

/* ref_t (dpad × npad cells: centred references, transposed or in fragment order (below), zeros beyond d and count)
 * and rn (npad norms, +inf beyond count): the fused kernels' coalesced, bounds-free view of `count` of the n
 * references, its reference c being reference c n / count (all of them in order when count = n; the filter path's
 * strided sample). */
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

/* The small kernels' layout (k_fused_small, k_filter_seed_fused): the same values in the order of the TF32 MMA's A
 * fragments (m16n8k8, references as the 16 rows), so that a lane's fragment for one k8 step of one m16 tile is a
 * float4 and a warp's load of it 512 contiguous bytes: float4 (mt dpad / 8 + ks) 32 + lane holds, for g = lane / 4
 * and t = lane % 4, references 16 mt + g (+ 8) at coordinates 8 ks + t (+ 4) in the order (g, t), (g + 8, t),
 * (g, t + 4), (g + 8, t + 4). */
constexpr int kTcM = 16; /* references per m16 tile */
__device__ __forceinline__ void frag_cell(int64_t t, int dpad, int64_t *c, int *k) {
  int e = (int)(t % 4), lane = (int)(t / 4 % kWarp);
  int64_t tile = t / (4 * kWarp);
  int ks = (int)(tile % (dpad / kFdimStep));
  *c = tile / (dpad / kFdimStep) * kTcM + lane / 4 + 8 * (e & 1);
  *k = ks * kFdimStep + lane % 4 + 4 * (e >> 1);
}

__global__ void k_fused_refs(const float *ref_c, const float *norm, int64_t n, int64_t count, int d, int dpad,
                             int64_t npad, bool frag, float *ref_t, float *rn) {
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < (int64_t)dpad * npad;
       t += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = t % npad;
    int k = (int)(t / npad);
    if (frag) frag_cell(t, dpad, &c, &k);
    int64_t r = c * n / count;
    float v = k < d && c < count ? ref_c[r * d + k] : 0.0f;
    ref_t[t] = round_tf32(v);
    if (k == 0) rn[c] = c < count ? norm[r] : INFINITY;
  }
}

/* ---- finish: candidates → exact top k, certificate, device fallback ------------------------------
 * One block per query. The query's L approximate (value, index) entries (the fused path: one list
 * per split; the tiled path: its running list) are sorted and cut to K'; their threshold T is the
 * K'-th value (every reference outside the K' has an approximate value >= T). The K' are re-ranked
 * by ss_knn_exact_dist and sorted by (exact, index). Certified when T − E > the k-th exact
 * distance; otherwise the block scans every reference exactly (a filtered insertion buffer merged
 * by bitonic sort), so the answer is always the contract's, with no host involvement. */
struct finish_args {
  const float *q, *mean, *ref, *cand_v;
  const int *cand_i;
  int64_t n;
  int d, L, Kc, k;
  int P1, Ps, P2;      /* candidate sort (>= L), exact sort (>= K'), exact buffer (>= Ps, scan size) */
  double ref_norm_max;
  bool tc;             /* the values come from k_filter's TF32 MMAs: tc_error_bound, not ss_knn_error_bound */
  unsigned *reset_tau; /* may be NULL: shared thresholds set back to +inf for the next search (fused) */
  int *out_i;
  double *out_d;
  uint8_t *cert;
};

size_t finish_smem(int P1, int P2) {
  return (size_t)P1 * (sizeof(float) + sizeof(int)) + (size_t)P2 * (sizeof(double) + sizeof(int));
}

constexpr int finish_scan_size(int k) {
  int p = 1;
  while (p < k + 2 * kThreads) p <<= 1;
  return p;
}

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

__global__ void k_finish(finish_args a) {
  extern __shared__ unsigned char sm_fin[];
  float *cv = (float *)sm_fin;
  int *ci = (int *)(cv + a.P1);
  double *sd = (double *)(ci + a.P1 + (a.P1 & 1)); /* 8-byte aligned */
  int *si = (int *)(sd + a.P2);
  __shared__ double s_qn;
  int qq = blockIdx.x;
  const float *qrow = a.q + (int64_t)qq * a.d;
  for (int t = threadIdx.x; t < a.P1; t += blockDim.x) {
    bool in = t < a.L;
    cv[t] = in ? a.cand_v[(int64_t)qq * a.L + t] : INFINITY;
    ci[t] = in ? a.cand_i[(int64_t)qq * a.L + t] : kNoIndex;
  }
  if (threadIdx.x < kWarp) { /* ‖q'‖² of the centred query (as the candidates stage centres it) */
    double s = 0.0;
    for (int j = threadIdx.x; j < a.d; j += kWarp) {
      double c = (double)(qrow[j] - a.mean[j]);
      s += c * c;
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
    if (threadIdx.x == 0) s_qn = s;
  }
  __syncthreads();
  if (a.L > a.Kc) bitonic_sort<float, false>(cv, ci, a.P1, threadIdx.x, blockDim.x);
  for (int t = threadIdx.x; t < a.Ps; t += blockDim.x) {
    int r = t < a.Kc ? ci[t] : kNoIndex;
    sd[t] = r == kNoIndex ? (double)INFINITY : ss_knn_exact_dist(qrow, a.ref + (int64_t)r * a.d, a.d);
    si[t] = r;
  }
  __syncthreads();
  bitonic_sort<double, false>(sd, si, a.Ps, threadIdx.x, blockDim.x);
  double approx_last = (double)cv[a.Kc - 1];
  double bound = ss_knn_error_bound(a.d, sqrt(s_qn), a.ref_norm_max);
  bool ok = (int64_t)a.Kc >= a.n || approx_last - bound > sd[a.k - 1];
  if (!ok) finish_exact_scan(a, qrow, sd, si, a.P2);
  for (int t = threadIdx.x; t < a.k; t += blockDim.x) {
    a.out_i[(int64_t)qq * a.k + t] = si[t];
    if (a.out_d) a.out_d[(int64_t)qq * a.k + t] = sd[t];
  }
  if (threadIdx.x == 0) {
    a.cert[qq] = ok;
    if (a.reset_tau) a.reset_tau[qq] = kInfBits;
  }
}

/* ss_knn_exact_dist of kExGroup candidates (entries c0 .. c0 + kExGroup − 1 of a warp's 64-entry index list
 * li; kNoIndex or entries >= nc: none) to one query row, by the whole warp: lane l takes the coordinates j ≡ l
 * (mod 32), so that each load instruction reads one contiguous row segment (the former one-candidate-per-lane
 * loads touched 32 rows per instruction: the finish's cost grew with d, ~20 us from d 32 to d 256 at 2^10 on
 * the grid), its kExGroup rows' loads in flight at once; then the pairwise combination of the 32 partials,
 * the definition's tree: levels 16 .. kExGroup as butterflies (lanes l and l ^ o hold the same sums), the
 * levels below by recursive halving (a lane keeps the candidates whose bit o matches its own and receives its
 * partner's partial of them), so that lane l ends with candidate c0 + (l mod kExGroup). A lane without a
 * coordinate adds exact zeros. Groups of 8 (device runs 1-2 of brief K5: groups of 16 with the row indices
 * shuffled inside the coordinate loop were slower at d 128 and 256, groups of 32 spilled registers). */
constexpr int kExGroup = 8;
/* coordinate blocks of 32 loaded per round trip (brief K5 run 3: one block per round trip made the per-warp
 * finish 2-5 % slower than the former per-lane loads at d 128 and 256); k_fused_small's lean finish loads
 * kExBlocksLean (H100, 1,200 queries, k 25, session 11: 2^10 exact phase (clock64) d 128 14.5 k -> 13.3 k cycles,
 * d 256 24.7 k -> 22.0 k; 2^10 d 256 38 -> 36.6 us). Not in k_select_finish (it spills there) nor k_list_finish
 * (2^12 d 32, which never takes the groups, 1.53 -> 1.56 in the same runs); with kFsBatch the wide k_fused_small
 * spills 4-12 bytes. */
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

/* Lane's entries (lane, lane + kWarp) of sorted list c of a query's candidate lists (K' <= 2 kWarp). */
__device__ __forceinline__ void fetch_list(const float *gv, const int *gi, int c, int Kc, int lane, float (&v)[2],
                                           int (&ix)[2]) {
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int t = lane + h * kWarp;
    v[h] = t < Kc ? gv[(int64_t)c * Kc + t] : INFINITY;
    ix[h] = t < Kc ? gi[(int64_t)c * Kc + t] : kNoIndex;
  }
}

/* ---- finish, one warp per query (K' <= kFinList) -------------------------------------------------
 * The same answer as k_finish, without block-wide sorts and without shared memory: every input list (a
 * chunk's, a split's or the running list) is already sorted by (value, index), so the warp folds them
 * into one 64-entry list held in registers (reg_merge64, skipping lists whose best cannot enter; the
 * next list's loads are in flight during a merge); the K' exact distances (lane t: candidates t and
 * t + 32, computed by the warp in groups of kExGroup: warp_exact_group) are sorted in registers
 * (reg_sort64). A query without the certificate is flagged, and after a block barrier the block's four
 * warps scan the flagged queries one after another with finish_exact_scan (the fallback of k_finish, in
 * shared memory). */
constexpr int kFinList = kRegList; /* the merged list's length; K' <= this */
constexpr int kFinWarps = 4;       /* queries per block */

constexpr size_t finish_warp_smem(int P2) { return (size_t)P2 * (sizeof(double) + sizeof(int)); }

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

/* finish_warp_cert from a merged candidate list (lv, li: sorted, K' <= kFinList): thr = its K'-th value. */
__device__ bool finish_warp_query(const finish_args &a, int64_t qq, double qn, const float (&lv)[2],
                                  const int (&li)[2], double (&sd)[2], int lane) {
  int si[2] = {lane < a.Kc ? li[0] : kNoIndex, lane + kWarp < a.Kc ? li[1] : kNoIndex};
  return finish_warp_cert(a, qq, qn, (double)reg_get(lv, a.Kc - 1), (int64_t)a.Kc >= a.n, sd, si, lane);
}

/* Called by every thread once its warp has flagged its query or not (need_scan[v]; flagged: this thread's), it
 * ends a finish kernel: a block barrier that also tells whether any query of the block is flagged (the usual case:
 * none, and the block is done — a loop over need_scan after a plain barrier took ~0.9 k cycles at the end of every
 * k_fused_small block, ncu's samples, session 12); then the whole block scans the flagged queries q_first + v
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

__global__ void __launch_bounds__(kFinWarps * kWarp) k_finish_warp(finish_args a, int64_t m) {
  extern __shared__ __align__(16) unsigned char sm_fw[];
  __shared__ int need_scan[kFinWarps];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t qq = (int64_t)blockIdx.x * kFinWarps + w;
  bool scan = false;
  if (qq < m) { /* the whole warp: qq is uniform */
    const float *gv = a.cand_v + qq * a.L;
    const int *gi = a.cand_i + qq * a.L;
    int nl = a.L / a.Kc;
    float lv[2], cv[2], nv[2]; /* the merged list, the list being merged, the next one (registers) */
    int li[2], ci[2], ni[2];
    double qn = finish_query_norm(a, qq, lane);
    fetch_list(gv, gi, 0, a.Kc, lane, lv, li);
    fetch_list(gv, gi, nl > 1 ? 1 : 0, a.Kc, lane, nv, ni); /* one list ahead: its loads overlap a merge */
    for (int c = 1; c < nl; c++) {
      cv[0] = nv[0], cv[1] = nv[1], ci[0] = ni[0], ci[1] = ni[1];
      if (c + 1 < nl) fetch_list(gv, gi, c + 1, a.Kc, lane, nv, ni);
      if (!kv_less(reg_get(cv, 0), reg_get(ci, 0), reg_get(lv, a.Kc - 1), reg_get(li, a.Kc - 1)))
        continue; /* nothing in it can enter */
      reg_merge64(lv, li, cv, ci, lane);
    }
    double sd[2] = {(double)INFINITY, (double)INFINITY};
    finish_exact_groups(a, qq, li, a.Kc, 0, 1, lane, sd);
    scan = finish_warp_query(a, qq, qn, lv, li, sd, lane);
  }
  if (lane == 0) need_scan[w] = scan;
  int64_t q_first = (int64_t)blockIdx.x * kFinWarps;
  finish_block_scans(a, q_first, need_scan, (int)(m - q_first < kFinWarps ? m - q_first : kFinWarps), scan, sm_fw);
}

/* ---- one-tile selection and finish in one kernel (K' <= kRegList, n <= kSfMaxRefs) ----------------
 * The tiled path's one-reference-tile search with K' <= 64, n <= kSfMaxRefs and the warp queue (the grid's
 * 2^10..2^12) selects AND finishes in one kernel (k_select_finish), and so does the fused path there
 * (k_fused_small, which computes the rows itself): no list leaves the SM, no finish launch. A query gets
 * W warps (W a power of two <= kSfWarps, about `chunk` references each; W = 1 with the default chunk), a
 * block of kSfThreads threads kSfWarps / W queries.
 * Lean candidates (lean_select_finish), two passes over each warp's part, PL values per lane at a time:
 *  1. every lane keeps its S smallest values and the next one (kSeedChains independent insertion chains,
 *     merged); W = 1: the seed x = the K'-th smallest of the warp's (S + 1) × 32 of them (warp_kth_select: >= K'
 *     values of the part are <= x); W > 1: x_w from the S × 32 smallest alone (seed_kth_union), after one barrier
 *     every warp of the query takes x = min_w x_w;
 *  2. every value within the band of x and its index is appended to the query's candidate slots in shared
 *     memory, placed by ballots (lean_filter; W = 1: no block barrier at all, so that a block's queries run
 *     on independently; W > 1: one atomicAdd per warp and pass reserves its slots). A part of at most PL kWarp
 *     references keeps its values in registers between the passes.
 * What depends on the query alone (its norm and band bound E, its coordinates as doubles) is loaded before the
 * values exist (lean_prepare), off the selection's chain.
 * There is no approximate sort and no queue: all P (>= K') passing references are candidates, and every
 * other one has an approximate value > x, so x is the certificate's threshold (x − E > the k-th exact
 * distance), at least as strong as the K'-th value's. On random rows (k 25, the bench's rows, 2,000 simulated
 * queries each at 2^10 d 32 / 64, 2^11 and 2^12 d 32) the band holds P = 26.1-26.4 candidates on average, 99th
 * percentile 29-30, more than 32 in at most 0.05 % of the queries (x from the S × 32 smallest alone: 27.7-28.2,
 * 33-34 and 2-2.9 %); more than kRegList (ties at x) sends the query to the block's exact scan
 * (finish_block_scans), as a failed certificate does. With W = 1 and d <= kLaneMaxDim a lane computes
 * the exact distances of its candidates (two at most) alone; otherwise the query's W warps compute those of its
 * candidate groups in turn (finish_exact_groups, through shared memory); its first warp
 * sorts them and checks the certificate (finish_warp_cert). Measured against the former seeded warp queue
 * (sorted list + pending buffer merges, K' cut by an approximate sort): docs/knn.md. */
constexpr int kSfThreads = kThreads;       /* finish_block_scans' scan buffer assumes kThreads at most */
constexpr int kSfWarps = kSfThreads / kWarp;
constexpr int kSfMinPerLane = 8, kSfMaxPerLane = 32; /* values per lane per pass (registers): PL */
/* references per warp (ss_knn_opts.warp_chunk overrides; W = next_pow2(n / chunk) <= kSfWarps): each warp
 * pays a seed, so fewer, longer parts win while there are enough warps (device run 1 of brief K5, with the
 * warp queue: chunks of 256 or 512 were slower than 1024 everywhere) */
constexpr int64_t kSfChunk = 4096;
constexpr int64_t kSfMinChunk = 2 * kRegList; /* a part then has more than K' references */
/* The size rule: one-kernel selection and finish for n <= kSfMaxRefs, beyond it k_select_warp + k_finish_warp
 * (device runs 1-2 of brief K5: from 2^13 references one block holding a query's warps through its barriers
 * and finish streams the rows slower than the independent warps of k_select_warp, 109 vs 93 us at 2^13, d 32) */
constexpr int64_t kSfMaxRefs = 4096;
/* blocks per SM the registers must allow: 3 capped them at 80 and spilled (device run 1 of brief K5: no
 * faster than 2) */
constexpr int kSfMinBlocks = 2;
constexpr int kLeanCap = kRegList; /* candidate slots per query: the register lists of the finish */
/* Balanced launches of the one-warp-per-query kernels (k_fused_small, k_filter_seed_fused, k_list_finish): with
 * blocks of kSfWarps queries, a query count just above kSfWarps × SMs puts a second block on some SMs, and those
 * finish last (H100, 1,200 queries = 150 blocks on 132 SMs, clock64 / globaltimer phases: blocks sharing an SM
 * took 13.8 us against 10.9 us alone at 2^10, d 32, 32.9 against 22.8 at d 128). Up to kQbMax × SMs queries the
 * blocks take ceil(m / SMs) queries instead (at most kQbMax warps, one block per SM). */
constexpr int kQbMax = 12;
int balanced_queries(int64_t m, int sm_count) {
  int64_t sms = sm_count > 0 ? sm_count : 1;
  if ((m + kSfWarps - 1) / kSfWarps <= sms || m > kQbMax * sms) return kSfWarps;
  return (int)((m + sms - 1) / sms);
}
static_assert(kSfMinPerLane * kWarp >= kRegList, "a first pass can seed K'");
static_assert(kSfMaxPerLane == 4 * kSfMinPerLane, "the three pass widths of launch_select_finish");

constexpr int kLeanMaxS = 4; /* seed values per lane: 2 or 4 (lean_s_class) */
/* independent insertion chains of a lane's seed values (merged at the end): a pass's values are inserted four
 * at a time instead of one after another */
constexpr int kSeedChains = 4;

/* x from the S smallest values of every lane of a query's W warps (nw = W rows of `mins`, S kWarp values used
 * in each): the smallest of this warp's m[t] with >= K of the union <= it, +inf if none — so that the minimum
 * over the W warps is the K-th smallest of the union (each warp's own K-th would admit ~W K candidates). */
template <int S, int N>
__device__ float seed_kth_union(const float (&m)[N], int K, const float (*mins)[kLeanMaxS * kWarp], int nw) {
  int c[S] = {};
  for (int p = 0; p < nw; p++)
    for (int i = 0; i < S * kWarp; i++) { /* the same address across the warp: a broadcast */
      float b = mins[p][i];
#pragma unroll
      for (int t = 0; t < S; t++) c[t] += b <= m[t];
    }
  float x = INFINITY;
#pragma unroll
  for (int t = 0; t < S; t++) x = fminf(x, c[t] >= K ? m[t] : INFINITY);
  for (int o = kWarp / 2; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(kFull, x, o));
  return x;
}

/* x: the K-th smallest of the warp's N × 32 values m (each lane's ascending; non-negative, +inf for none), +inf when
 * fewer than K are finite. Bisection on pivots drawn from the values: the answer stays in (lo, hi], with
 * count(<= hi) >= K unless hi = +inf; a round takes the first lane's smallest value inside as the pivot and counts
 * the values <= it by N ballots. The lean seed (W = 1) takes N = S + 1: each lane's S smallest and its next one,
 * because the K-th of the S × 32 smallest alone (seed_kth) overshoots the part's K-th value by one rank for every
 * lane holding more than S of the part's K smallest (25 of 1,024 values in 32 lanes: ~2.3 lanes hold three); that
 * widened the band to P > 32 candidates in ~2 % of the queries (k 25, simulated on the bench's rows) — about one
 * balanced block in five, and the slowest block sets the kernel's time. Rounds: ~8 on average for N = 3 (at most
 * 17 in 3,000 simulated rows), each a chain of ~15 instructions, where seed_kth's rank count over 96 values would
 * issue ~700 a warp — all the block's warps rank at once, so the counts were issue-bound (ncu, 2^10 d 32). H100,
 * 1,200 queries, k 25, session 14, against seed_kth over 64 values plus a correction for the next values below its
 * x (the same x; medians of two runs): 2^10 d 32 13.10 -> 12.74 / 13.06 -> 12.83 us, d 64 15.92 -> 15.57 / 15.71 ->
 * 15.71, 2^11 d 32 17.28 -> 17.55 / 17.34 -> 17.18, 2^12 d 32 28.99 -> 29.31 / 29.28 -> 28.61. */
template <int N>
__device__ float warp_kth_select(const float (&m)[N], int K) {
  float lo = -1.0f, hi = INFINITY;
  for (;;) {
    float cand = INFINITY;
#pragma unroll
    for (int t = N - 1; t >= 0; t--)
      if (m[t] > lo && m[t] < hi) cand = m[t];
    unsigned bal = __ballot_sync(kFull, cand < INFINITY);
    if (!bal) return hi; /* uniform */
    float p = __shfl_sync(kFull, cand, __ffs(bal) - 1);
    int c = 0;
#pragma unroll
    for (int t = 0; t < N; t++) c += __popc(__ballot_sync(kFull, m[t] <= p));
    if (c >= K) hi = p;
    else lo = p;
  }
}

/* the lean finish computes a candidate's exact distance in one lane (exact_dist_short, exact_dist_lane) up to this
 * d, by warp-cooperative groups beyond (H100, 1,200 queries, k 25: at d 32 and 64 the lane was faster, 2^10 d 32:
 * 21 -> 19 us, 2^11 d 64: 37 -> 35; at d 128 slower, 2^10: 39 -> 41 us) */
constexpr int kLaneMaxDim = 2 * kWarp;

/* A block's lean selection state: per query of the block (at most NQ: kSfWarps, or kQbMax in a balanced launch). */
template <int NQ>
struct lean_shared_t {
  int ci[NQ][kLeanCap];    /* candidate indices (the finish needs no approximate value) */
  int cnt[NQ];             /* candidates found (may exceed kLeanCap: the exact scan) */
  float seed[NQ];          /* per warp: x_w */
  double qd[NQ][kLaneMaxDim]; /* d <= kLaneMaxDim: the query as doubles, zeros to a multiple of 32 */
  double ex[NQ][kRegList]; /* W > 1: the candidates' exact distances, gathered for the first warp */
  int need_scan[NQ];
  float mins[NQ][kLeanMaxS * kWarp]; /* W > 1: every lane's S smallest values, for the query's seed */
  double E[NQ]; /* k_fused_small: the bound E, kept here across the distance phase (in registers it spilled) */
};
using lean_shared = lean_shared_t<kSfWarps>;

/* Row sources of the lean selection: element t of a warp's part (+inf beyond len) and its reference index —
 * computed from t (operator(), id), or loaded together (kPaired: pair, so that no index load waits in the
 * filter). */
struct gemm_row { /* the tiled path: the SGEMM's −2 q'·r' plus the norms */
  static constexpr bool kPaired = false;
  const float *row, *rn;
  float qn;
  int i0; /* the part's first reference */
  __device__ float operator()(int t, int len) const { return warp_value(row, rn, qn, t, len); }
  __device__ int id(int t) const { return i0 + t; }
};
struct value_row { /* k_fused_small: the values themselves */
  static constexpr bool kPaired = false;
  const float *row;
  __device__ float operator()(int t, int len) const { return t < len ? row[t] : INFINITY; }
  __device__ int id(int t) const { return t; }
};
struct list_row { /* the filter path: a query's candidate list, (value bits, reference index) pairs */
  static constexpr bool kPaired = true;
  const int2 *p;
  __device__ int2 pair(int t, int len) const { return t < len ? p[t] : make_int2(__float_as_int(INFINITY), kNoIndex); }
};

template <int PL, typename Src>
__device__ __forceinline__ void lean_load(const Src &src, int base, int len, int lane, float (&v)[PL], int (&ids)[PL]) {
#pragma unroll
  for (int c = 0; c < PL; c++) {
    int t = base + c * kWarp + lane;
    if constexpr (Src::kPaired) {
      int2 e = src.pair(t, len);
      v[c] = __int_as_float(e.x), ids[c] = e.y;
    } else {
      v[c] = src(t, len);
    }
  }
}

/* Pass 2 of one warp: the indices of its part's values <= y into the query's slots ci, placed by ballots in the
 * warp's order; v holds pass 1's values when the part is a single pass. cnt: the query's shared counter when its W > 1
 * warps append together (one atomicAdd reserves a pass's slots), nullptr for a query's only warp (no shared state).
 * Returns the warp's count (all lanes). */
template <int PL, typename Src>
__device__ int lean_filter(const Src &src, int len, float y, float (&v)[PL], int (&ids)[PL], int *cnt, int *ci,
                           int lane) {
  const unsigned below = (1u << lane) - 1u;
  int total = 0;
  for (int base = 0; base < len; base += PL * kWarp) {
    if (len > PL * kWarp) lean_load<PL>(src, base, len, lane, v, ids); /* uniform */
    int pos0 = total;
    if (cnt) { /* uniform */
      int pass = 0;
#pragma unroll
      for (int c = 0; c < PL; c++) pass += __popc(__ballot_sync(kFull, v[c] <= y));
      int start = lane == 0 && pass ? atomicAdd(cnt, pass) : 0;
      pos0 = __shfl_sync(kFull, start, 0);
    }
    int off = 0;
#pragma unroll
    for (int c = 0; c < PL; c++) {
      bool hit = v[c] <= y;
      unsigned mk = __ballot_sync(kFull, hit);
      int pos = pos0 + off + __popc(mk & below);
      if (hit && pos < kLeanCap) {
        if constexpr (Src::kPaired) ci[pos] = ids[c];
        else ci[pos] = src.id(base + c * kWarp + lane);
      }
      off += __popc(mk);
    }
    total += off;
  }
  return total;
}

/* 16 bytes global -> shared without registers (sm_80+), and the waits on them */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

constexpr int bitrev5(int i) {
  return ((i & 1) << 4) | ((i & 2) << 2) | (i & 4) | ((i & 8) >> 2) | ((i & 16) >> 4);
}
constexpr int popc5(int i) { return (i & 1) + ((i >> 1) & 1) + ((i >> 2) & 1) + ((i >> 3) & 1) + ((i >> 4) & 1); }

/* ss_knn_exact_dist of one reference row with d <= kWarp by one thread (the lean finish: a lane per candidate,
 * no shuffles): the row in registers (float4 loads when rows are 16-byte aligned), the 32 partials — one
 * coordinate each, exact zeros beyond d — folded in bit-reversed order like the one-thread definition, fully
 * unrolled so that the stack stays in registers. qd: the query as doubles, zeros beyond d. */
__device__ double exact_dist_short(const double *qd, const float *row, int d) {
  float x[kWarp];
  if (d % 4 == 0) {
#pragma unroll
    for (int j = 0; j < kWarp; j += 4) {
      float4 t = j < d ? __ldg((const float4 *)(row + j)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      x[j] = t.x, x[j + 1] = t.y, x[j + 2] = t.z, x[j + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kWarp; j++) x[j] = j < d ? __ldg(row + j) : 0.0f;
  }
  double st[SS_KNN_EXACT_LEVELS + 1];
#pragma unroll
  for (int i = 0; i < kWarp; i++) {
    const int l = bitrev5(i);
    double t = __dsub_rn(qd[l], (double)x[l]);
    double p = __dmul_rn(t, t);
    int top = popc5(i);
#pragma unroll
    for (int c = i; c & 1; c >>= 1) p = __dadd_rn(st[--top], p);
    st[top] = p;
  }
  return st[0];
}

/* ss_knn_exact_dist of one reference row with d <= kLaneMaxDim (ls.qd's length) by one thread: the 32 partials in
 * registers, the row read kLaneSlice coordinates at a time (float4 loads when rows are 16-byte aligned) from global
 * memory or, kShared, from the warp's staged copy (stage_rows), then the definition's pairwise combination. qd: the
 * query as doubles, zeros beyond d up to a multiple of 32. */
constexpr int kLaneSlice = 16; /* no spills at the lean kernels' register limits; 32 spilled */
template <bool kShared>
__device__ __forceinline__ float4 row_ld4(const float *p) {
  return kShared ? *(const float4 *)p : __ldg((const float4 *)p);
}
template <bool kShared>
__device__ __forceinline__ float row_ld1(const float *p) { return kShared ? *p : __ldg(p); }
template <bool kShared = false>
__device__ __forceinline__ double exact_dist_lane(const double *qd, const float *row, int d) {
  double p[kWarp];
#pragma unroll
  for (int l = 0; l < kWarp; l++) p[l] = 0.0;
  for (int j0 = 0; j0 < d; j0 += kWarp) {
#pragma unroll
    for (int h = 0; h < kWarp; h += kLaneSlice) {
      float x[kLaneSlice];
      if (d % 4 == 0) {
#pragma unroll
        for (int j = 0; j < kLaneSlice; j += 4) {
          float4 t = j0 + h + j < d ? row_ld4<kShared>(row + j0 + h + j) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          x[j] = t.x, x[j + 1] = t.y, x[j + 2] = t.z, x[j + 3] = t.w;
        }
      } else {
#pragma unroll
        for (int j = 0; j < kLaneSlice; j++) x[j] = j0 + h + j < d ? row_ld1<kShared>(row + j0 + h + j) : 0.0f;
      }
#pragma unroll
      for (int l = 0; l < kLaneSlice; l++) {
        double t = __dsub_rn(qd[j0 + h + l], (double)x[l]);
        p[h + l] = __dadd_rn(p[h + l], __dmul_rn(t, t));
      }
    }
  }
  /* the levels written out: a loop over them was rolled into local memory */
#pragma unroll
  for (int l = 0; l < 16; l++) p[l] = __dadd_rn(p[l], p[l + 16]);
#pragma unroll
  for (int l = 0; l < 8; l++) p[l] = __dadd_rn(p[l], p[l + 8]);
#pragma unroll
  for (int l = 0; l < 4; l++) p[l] = __dadd_rn(p[l], p[l + 4]);
  p[0] = __dadd_rn(p[0], p[2]), p[1] = __dadd_rn(p[1], p[3]);
  return __dadd_rn(p[0], p[1]);
}

/* The lean finish's staged candidate rows (k_fused_small's balanced blocks, kWarp < d <= kLaneMaxDim, d % 4 == 0):
 * a warp's kWarp rows at a stride of a multiple of 32 floats plus 4, so that the lanes' 16-byte reads of eight rows
 * at a time fall in distinct banks. A row per lane read from global memory touched 32 lines with every 16-byte load
 * and requested each sector twice (ncu, 2^10 d 64: the lean finish waited on those loads for ~14 % of the block's
 * time); copied by the warp, each load is a contiguous 256 bytes. H100, 1,200 queries, k 25, session 13, medians of
 * three or four rounds against the previous commit in seven runs: 2^10 d 64 -0.9 to +0.05 us (17.2 -> 16.9
 * typical), 2^11 d 64 -0.2 to -1.1; at d 32 (one round trip of eight loads a lane) it was slower in both runs that
 * staged it (13.8 -> 13.9 and 13.5 -> 14.0 us), so it stays off there. Staging the distance phase's first batch
 * of A fragments the same way during the query preparation was much slower (2^10 d 32 13.6 -> 15.9 us, d 64 17.4
 * -> 19.0). */
__host__ __device__ constexpr int stage_stride(int d) { return (d + kWarp - 1) / kWarp * kWarp + 4; }
__host__ __device__ constexpr bool stage_applies(int d) { return d > kWarp && d <= kLaneMaxDim && d % 4 == 0; }
/* np <= kWarp candidate rows (ids) copied into stage by 16-byte cp.async, half a warp a row (two rows an
 * instruction), then visible to the warp. */
__device__ void stage_rows(const float *ref, int d, const int *ids, int np, float *stage, int lane) {
  const int stride = stage_stride(d), c = lane % (kWarp / 2);
  if (4 * c < d)
    for (int r = lane / (kWarp / 2); r < np; r += 2)
      cp_async16(stage + r * stride + 4 * c, ref + (int64_t)ids[r] * d + 4 * c);
  cp_async_commit();
  cp_async_wait_all();
  __syncwarp();
}

/* Sort 32 entries (one per lane) ascending by (value, index): reg_sort64's network for one register. */
template <typename V>
__device__ __forceinline__ void reg_sort32(V &v, int &ix, int lane) {
#pragma unroll
  for (int k = 2; k <= kWarp; k <<= 1)
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) reg_cx(v, ix, j, (lane & k) == 0, lane);
}

/* The bound on |value − exact| of k_filter's values: ss_knn_error_bound (the float pipeline: norms, final sum,
 * centring, the dot's float accumulation in any order) plus what the tensor cores add to the dot product q'·r':
 * each input rounded to nearest TF32 (unit roundoff 2^-11) puts at most (2u + u²) |q_i r_i| on a product; the
 * MMA's float accumulation, whose rounding NVIDIA does not document, is allowed kTcAccUlps units of 2^-24 of the
 * magnitudes summed per k8 step (published measurements of TF32 MMAs show truncation to float, i.e. a unit or
 * two). By Cauchy–Schwarz the dot's extra error is at most (2u + u² + steps kTcAccUlps 2^-24) ‖q'‖ ‖r'‖; the
 * value's, through −2 q'·r', twice that. An absolute term covers inputs or products below FLT_MIN, should the
 * tensor cores flush them (each flushed input moves the dot by at most FLT_MIN times the other's norm). It also
 * bounds the float values of the fused seed, whose references alone are rounded (it only adds terms). */
constexpr double kTf32Unit = 1.0 / 2048.0, kTcAccUlps = 16.0;
constexpr double kFltMin = 1.1754943508222875e-38; /* 2^-126 */
__device__ __forceinline__ double tc_error_bound(int d, double q_norm, double r_norm_max) {
  double steps = (double)((d + kFdimStep - 1) / kFdimStep + 1);
  double rel = 2.0 * kTf32Unit + kTf32Unit * kTf32Unit + steps * kTcAccUlps * SS_KNN_FLT_UNIT_ROUNDOFF;
  double flushed = 4.0 * (double)(d + SS_KNN_BOUND_SLACK) * kFltMin * (q_norm + r_norm_max + 1.0);
  return ss_knn_error_bound(d, q_norm, r_norm_max) + 2.0 * rel * q_norm * r_norm_max + flushed;
}

/* The bound on the values a finish reads for a query of squared centred norm qn. */
__device__ __forceinline__ double value_error_bound(const finish_args &f, double qn) {
  return f.tc ? tc_error_bound(f.d, sqrt(qn), f.ref_norm_max) : ss_knn_error_bound(f.d, sqrt(qn), f.ref_norm_max);
}

/* The lean band of a seed x for values within E of the exact distances: x + 2E rounded down to a float, so that a
 * value v is <= it exactly when v <= x + 2E; +inf when x is. */
__device__ __forceinline__ float lean_band(float x, double E) {
  return x < INFINITY ? __double2float_rd((double)x + 2.0 * E) : INFINITY;
}

/* The exact finish takes a candidate per lane (exact_dist_short, exact_dist_lane: the query as doubles in
 * ls.qd) rather than warp-cooperative groups: the same for the query's W warps. */
__device__ __forceinline__ bool lean_lane_rows(const finish_args &f, int W) {
  return W == 1 && f.d <= kLaneMaxDim;
}

/* What the lean finish of query qq needs of the query alone, prepared by each of its warps before the values exist
 * (the loads off the selection's chain): the bound E of its values (value_error_bound) returned, its candidate
 * count reset and its coordinates as doubles in ls.qd[ql] (zeros to a multiple of 32) where the finish takes a
 * candidate per lane or d <= 32. Visible to the query's warps after lean_select_finish's first barrier (W = 1: its
 * __syncwarp). */
template <typename LS>
__device__ double lean_prepare(const finish_args &f, int64_t qq, bool valid, int W, int ql, int part, LS &ls,
                               int lane) {
  if (part == 0 && lane == 0) ls.cnt[ql] = 0;
  if (part == 0 && (lean_lane_rows(f, W) || f.d <= kWarp))
    for (int j = lane; j < min(kLaneMaxDim, (f.d + kWarp - 1) / kWarp * kWarp); j += kWarp)
      ls.qd[ql][j] = valid && j < f.d ? (double)f.q[qq * f.d + j] : 0.0;
  return valid ? value_error_bound(f, finish_query_norm(f, qq, lane)) : 0.0;
}

/* The lean selection and finish (above) of query qq (block-local ql) by its W warps; `part` is this warp's
 * part (len values read through src); S: seed values per lane; EB: the exact groups' coordinate blocks per round
 * trip (warp_exact_group); E: lean_prepare's bound; stage: the warp's kWarp staged rows (stage_stride floats
 * each) where stage_applies, nullptr to read the candidates' rows from global memory. Called by every thread of
 * the block (barriers); leaves ls.need_scan[ql] for finish_block_scans and returns it (the same in the query's
 * warps). */
template <int PL, int S, int EB, typename Src, typename LS>
__device__ bool lean_select_finish(const finish_args &f, const Src &src, int len, int W, int ql, int part, int64_t qq,
                                   bool valid, double E, LS &ls, int w, int lane, float *stage = nullptr) {
  const bool lane_rows = lean_lane_rows(f, W);
  constexpr int S1 = S + 1; /* and the next value: warp_kth_select (W = 1) */
  float v[PL], m[S1], mc[kSeedChains][S1]; /* independent insertion chains, merged after the passes */
  int ids[PL]; /* paired sources only: the values' reference indices */
#pragma unroll
  for (int h = 0; h < kSeedChains; h++)
#pragma unroll
    for (int t = 0; t < S1; t++) mc[h][t] = INFINITY;
  for (int base = 0; base < len; base += PL * kWarp) {
    lean_load<PL>(src, base, len, lane, v, ids);
#pragma unroll
    for (int c = 0; c < PL; c++) seed_insert<S1>(mc[c % kSeedChains], v[c]);
  }
#pragma unroll
  for (int t = 0; t < S1; t++) m[t] = mc[0][t];
#pragma unroll
  for (int h = 1; h < kSeedChains; h++)
#pragma unroll
    for (int t = 0; t < S1; t++) seed_insert<S1>(m, mc[h][t]);
  static_assert(S <= kLeanMaxS, "lean_shared.mins holds S values per lane");
  float x;
  if (W == 1) {
    x = warp_kth_select<S1>(m, f.k);
  } else { /* W is uniform across the block: so is the barrier */
#pragma unroll
    for (int t = 0; t < S; t++) ls.mins[w][t * kWarp + lane] = m[t];
    __syncthreads();
    x = seed_kth_union<S>(m, f.k, &ls.mins[ql * W], W);
  }
  /* W = 1: the warp alone reads what it wrote (no block barrier, so its warps run on independently) */
  if (W > 1) {
    if (lane == 0) ls.seed[w] = x;
    __syncthreads(); /* seeds, counters and query copies visible */
    for (int p = 0; p < W; p++) x = fminf(x, ls.seed[ql * W + p]);
  } else {
    __syncwarp();
  }
  float y = lean_band(x, E);
  int P = valid && x < INFINITY ? lean_filter<PL>(src, len, y, v, ids, W > 1 ? &ls.cnt[ql] : nullptr, ls.ci[ql], lane)
                                 : 0;
  if (W > 1) {
    __syncthreads(); /* the query's candidates are complete */
    P = ls.cnt[ql];
  } else {
    __syncwarp();
  }
  bool over = !(x < INFINITY) || P > kLeanCap, one = P <= kWarp; /* one: a candidate per lane */
  int li[2];
#pragma unroll
  for (int h = 0; h < 2; h++) {
    int e = lane + kWarp * h;
    li[h] = valid && !over && e < P ? ls.ci[ql][e] : kNoIndex;
  }
  double sd[2] = {(double)INFINITY, (double)INFINITY};
  /* the same for the query's W warps */
  bool short_rows = lane_rows || (one && f.d <= kWarp);
  if (short_rows && stage) { /* lane_rows and stage_applies */
    if (valid && !over) /* uniform */
#pragma unroll
      for (int h = 0; h < 2; h++) {
        if (P <= h * kWarp) break; /* uniform */
        if (h) __syncwarp();       /* the first half's reads are done */
        stage_rows(f.ref, f.d, ls.ci[ql] + h * kWarp, min(P - h * kWarp, kWarp), stage, lane);
        const float *row = stage + lane * stage_stride(f.d);
        if (li[h] != kNoIndex) sd[h] = exact_dist_lane<true>(ls.qd[ql], row, f.d);
      }
  } else if (short_rows) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      if (!(valid && !over && part == 0 && li[h] != kNoIndex)) continue;
      const float *row = f.ref + (int64_t)li[h] * f.d;
      sd[h] = f.d <= kWarp ? exact_dist_short(ls.qd[ql], row, f.d) : exact_dist_lane(ls.qd[ql], row, f.d);
    }
  } else {
    if (valid && !over) finish_exact_groups<EB>(f, qq, li, P, part, W, lane, sd);
  }
  if (W > 1 && !short_rows) { /* W is uniform across the block, so the barrier below is too */
    if (valid && !over)
#pragma unroll
      for (int h = 0; h < 2; h++)
        if (sd[h] < INFINITY) ls.ex[ql][lane + kWarp * h] = sd[h];
  }
  if (W > 1) __syncthreads();
  if (W > 1 && !short_rows && valid && !over && part == 0)
#pragma unroll
    for (int h = 0; h < 2; h++) sd[h] = lane + kWarp * h < P ? ls.ex[ql][lane + kWarp * h] : (double)INFINITY;
  if (valid && !over && part == 0) { /* every reference outside the candidates is beaten by k of them: done */
    if (one) reg_sort32(sd[0], li[0], lane);
    else reg_sort64(sd, li, lane);
    finish_warp_write(f, qq, sd, li, lane);
  }
  if (lane == 0 && part == 0) ls.need_scan[ql] = valid && over;
  return valid && over;
}

struct sf_args {
  tile_args t;  /* the rows of one query tile against the single reference tile; t.Kc = K' */
  finish_args f; /* that query tile's queries and outputs */
  int64_t m;    /* queries in the tile */
  int W, chunk; /* warps per query (power of two), references per warp */
};

template <int PL, int S>
__global__ void __launch_bounds__(kSfThreads, kSfMinBlocks) k_select_finish(sf_args a) {
  extern __shared__ __align__(16) unsigned char sm_sf[]; /* the fallback scan's buffer */
  __shared__ lean_shared ls;
  const tile_args &t = a.t;
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, qpb = kSfWarps / a.W;
  int ql = w / a.W, part = w % a.W;
  int64_t q0 = (int64_t)blockIdx.x * qpb, qq = q0 + ql;
  bool valid = qq < a.m; /* uniform across the query's warps */
  int begin = part * a.chunk, len = valid ? max(0, min(a.chunk, t.Rt - begin)) : 0;
  gemm_row src = {t.dist + qq * t.ld + begin, t.rnorm + begin, valid ? t.qnorm[qq] : 0.0f, t.r0 + begin};
  double E = lean_prepare(a.f, qq, valid, a.W, ql, part, ls, lane);
  bool flagged = lean_select_finish<PL, S, kExBlocks>(a.f, src, len, a.W, ql, part, qq, valid, E, ls, w, lane);
  finish_block_scans(a.f, q0, ls.need_scan, (int)(a.m - q0 < qpb ? a.m - q0 : qpb), flagged, sm_sf);
}

/* The lean kernels' template arguments: PL from the longest part (kSfMinPerLane, twice that or kSfMaxPerLane
 * values per lane per pass), S from k (2 seed values per lane up to kLeanSeed2MaxK, else 4: the K-th of 64
 * values passes ~K + 2 on random rows for K <= 32, but ~K + 20 for K = 50, over the kLeanCap slots). */
constexpr int kLeanSeed2MaxK = 32;
int lean_pl_class(int64_t len) { return len <= kSfMinPerLane * kWarp ? 0 : len <= 2 * kSfMinPerLane * kWarp ? 1 : 2; }
int lean_s_class(int64_t k) { return k <= kLeanSeed2MaxK ? 0 : 1; }
using sf_kernel = void (*)(sf_args);
const sf_kernel kSelectFinish[2][3] = {
    {k_select_finish<kSfMinPerLane, 2>, k_select_finish<2 * kSfMinPerLane, 2>, k_select_finish<kSfMaxPerLane, 2>},
    {k_select_finish<kSfMinPerLane, 4>, k_select_finish<2 * kSfMinPerLane, 4>, k_select_finish<kSfMaxPerLane, 4>}};

/* ---- fused small path (fused_small_applies, K' <= 64, d <= 256): one kernel, no centring, no SGEMM ----
 * A block of kSfWarps queries (a balanced launch: up to kQbMax, balanced_queries) against every reference: it
 * prepares its queries (fs_prepare_queries: B fragments, float norms, what the finish needs), then its warps
 * compute the values max(‖q'‖² + ‖r'‖² − 2 q'·r', 0) on the tensor cores (fs_distances: TF32 m16n8k8 MMAs, the
 * references as the 16 rows in the view's fragment order, the block's queries as one or two n8 columns) into the
 * queries' rows in shared memory; after a barrier each warp selects and finishes one query from its row (lean_select_finish,
 * W = 1), with the TF32 bound (tc_error_bound, finish_args.tc) on the values. Rows in shared memory matter: read
 * back from L2, the selection's loads of a row waited on each other (clock64 phases on the H100, 2^10, d 32: ~7 k
 * cycles for the first pass over 1,024 values of an SGEMM row). The tensor cores matter too: the FFMA distance
 * phase this replaced (a thread per 4 references × the block's queries, session 9) took ~8.6 k cycles at 2^10
 * d 32 and ~29 k at d 128, latency-bound at ~2.5 warps per scheduler (ncu: L2 12 %, L1 31 %). Clusters sharing
 * the references (4 blocks, each a quarter of them for the cluster's 40 queries, values sent to their owners
 * through distributed shared memory) were slower with either distance phase (session 10 with the MMAs: 2^10 d 32
 * 15 -> 19 us; the cluster barriers and remote stores cost more than the L2 reads they save; docs/knn.md). The
 * filter path takes over beyond fused_small_applies. */
/* rows in shared memory up to this many (padded) references: kSfWarps rows of 2,048 floats, 64 KB a block,
 * two blocks per SM as the registers allow (a balanced block: up to kQbMax rows, 96 KB, one block per SM) */
constexpr int64_t kFsSmemRefs = 2048;
/* a row's stride is npad + kFsRowPad floats: the MMA epilogue's four query rows per store then fall in four
 * different bank octets (npad is a multiple of 128), and rows stay 16-byte aligned */
constexpr int kFsRowPad = 4;
int64_t fs_row_stride(int64_t npad) { return npad + kFsRowPad; }
/* k_fused_small runs the fused path while the rows fit in shared memory, the filter path beyond. H100, 1,200
 * queries, k 25, 2^11 (session 10, tensor-core distance phase without clusters): k_fused_small vs the filter path
 * d 32-256: 19 / 24 / 34 / 52 us vs - / 31 / 42 / 64 (with the FFMA distance phase the filter path won from
 * 2^11 d 64 on). */
bool fused_small_applies(int64_t n) { return n <= kFsSmemRefs; }
static_assert(SS_KNN_FUSED_MAX_DIM % kFdimStep == 0, "the query copies hold dpad coordinates");

struct fs_args {
  const float *q, *mean; /* queries (original coordinates), the reference mean */
  const float *ref_t, *rn; /* the references' view (fragment order: k_fused_refs) and their norms (+inf padding) */
  int64_t npad, rs;        /* padded references; the stride of the rows in shared memory (fs_row_stride) */
  int m, d, dpad;
  int nq; /* queries per block (<= the block's warps) */
  bool stage; /* k_fused_small: the lean finish stages its candidate rows after the block's rows (stage_rows) */
  finish_args f;
};

/* Query slots as MMA columns: n8 tiles of queries, and the shared-memory floats of their B fragments */
constexpr int fs_qtiles(int slots) { return (slots + 7) / 8; }
constexpr int fs_qfrag_floats(int slots) { return SS_KNN_FUSED_MAX_DIM * 8 * fs_qtiles(slots); }

/* The block's query slots i < 8 fs_qtiles(CQ), a warp per slot: query q0 + i (i < nq and q0 + i < a.m; zeros
 * otherwise and beyond d) centred, its float norm ‖q'‖² into qn_s[i] (i < nq: a lane's squares in coordinate order,
 * then a butterfly), and, where given, the MMAs' B fragments into qf (rounded to TF32, as the filter path's queries
 * are: float2 (ks 32 + lane) NT + nt holds coordinates 8 ks + t and + 4 (t = lane % 4) of slot 8 nt + lane / 4) and
 * the centred queries into qst (nq × a.dpad, row-major). The global loads go kFsLoadBatch a lane at a time (one
 * load waited on per store made the centring a chain of L2 latencies). One pass: the caller's barrier makes it all
 * visible (the queries staged in shared memory first cost a pass and a barrier more). With kLean, the same loads
 * give what the lean finish needs of the warp's first slot (lean_prepare's, which re-read the query from L2 after
 * the distance phase): its ‖q'‖² as finish_query_norm computes it, returned (0 for no query, and without kLean),
 * and where qd is given its coordinates as doubles (zeros beyond d, up to a multiple of kWarp, at most
 * kLaneMaxDim); the other slots and callers skip that FP64 work. */
constexpr int kFsLoadBatch = 4;
template <int CQ, bool kLean = false>
__device__ double fs_prepare_queries(const fs_args &a, int64_t q0, int nq, float *qf, float *qn_s, float *qst,
                                     double *qd = nullptr) {
  constexpr int NT = fs_qtiles(CQ), U = kFsLoadBatch;
  int lane = threadIdx.x % kWarp, first = threadIdx.x / kWarp;
  int qd_len = min(kLaneMaxDim, (a.d + kWarp - 1) / kWarp * kWarp);
  double qn_first = 0.0;
  for (int i = first; i < 8 * NT; i += blockDim.x / kWarp) { /* uniform per warp */
    bool live = i < nq && q0 + i < a.m, lean = kLean && i == first && live; /* uniform per warp */
    const float *q = a.q + (q0 + i) * a.d;
    float s = 0.0f;
    double qn = 0.0;
    for (int j0 = 0; j0 < a.dpad; j0 += U * kWarp) {
      float x[U], c[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        int j = j0 + u * kWarp + lane;
        bool in = live && j < a.d;
        x[u] = in ? __ldg(q + j) : 0.0f;
        c[u] = in ? x[u] - __ldg(a.mean + j) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        int j = j0 + u * kWarp + lane;
        if (lean) {
          if (qd && j < qd_len) qd[j] = (double)x[u];
          double cd = (double)c[u];
          qn += cd * cd; /* finish_query_norm's expression, in its order; + 0 beyond d */
        }
        if (j >= a.dpad) continue;
        s = fmaf(c[u], c[u], s); /* + 0 beyond d: the same sum */
        if (qst && i < nq) qst[i * a.dpad + j] = c[u];
        if (qf) /* float2 (ks 32 + lane) NT + nt, its element e: j = 8 ks + lane % 4 + 4 e, i = 8 nt + lane / 4 */
          qf[((j / kFdimStep * kWarp + i % 8 * 4 + j % 4) * NT + i / 8) * 2 + j % kFdimStep / 4] = round_tf32(c[u]);
      }
    }
    for (int o = kWarp / 2; o > 0; o >>= 1) s += __shfl_xor_sync(kFull, s, o);
    if (lane == 0 && i < nq) qn_s[i] = s;
    if (lean) {
      for (int o = kWarp / 2; o > 0; o >>= 1) qn += __shfl_xor_sync(kFull, qn, o);
      qn_first = qn;
    }
  }
  return qn_first;
}

/* The distance phase's shape: m16 tiles of references a warp computes together (kFsGroup: 32 accumulators for two
 * n8 tiles of queries) and the k8 steps of their A fragments loaded together (kFsBatch: the batch's loads and the
 * group's reference norms are one round trip, then its MMAs run). The former ring of steps (the next step's loads
 * issued before a step's MMAs) apparently waited for every load in flight at its first MMA of a ring turn (ncu's
 * stall samples: all on that MMA; a third ring slot had changed nothing), so a batch of 4 halves the waits. H100,
 * 1,200 queries, k 25, session 11 (clock64 per warp): the distance phase at 2^11 d 32 10.8 k -> 10.2 k cycles,
 * 2^10 d 128 11.1 k -> 10.6 k; ratio to the GEMM at 2^11 d 32 1.50-1.52 -> 1.48-1.49. A batch of 8 spilled.
 * No branch lies between a batch's loads and its MMAs: a step beyond the last is loaded from the last (a valid
 * address) and zeroed, because ptxas waited for the loads in flight at such a branch — ncu's samples (session 12,
 * 2^10 d 32) had the norms' round trip waited on at the per-step guard, before the fragments' loads were issued. */
constexpr int kFsGroup = 4, kFsBatch = 4;

/* The values max(‖q'‖² + ‖r'‖² − 2 q'·r', 0) of the block's a.nq queries from q0 (qf, qn_s: fs_prepare_queries)
 * against the npad references of the fragment view, into the rows (row i at rows + i a.rs; queries beyond a.m
 * skipped): warp w takes m16 tiles w, w + NW, ... in groups of kFsGroup, kFsBatch steps of A fragments at a time. A
 * thread's four query slots (8 nt + 2 t + e) keep their norms and row offsets in registers: the epilogue re-read
 * qn_s for every value, each read waited on (session 12's ncu samples). */
template <int NQ>
__device__ void fs_distances(const fs_args &a, int64_t q0, const float *qf, const float *qn_s, float *rows) {
  constexpr int NT = fs_qtiles(NQ), G = kFsGroup, B = kFsBatch;
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nw = blockDim.x / kWarp, g = lane / 4, t = lane % 4;
  int steps = a.dpad / kFdimStep, tiles = (int)(a.npad / kTcM);
  const float2 *qf2 = (const float2 *)qf + lane * NT;
  float qn[NT][2];
  int qrow[NT][2]; /* the slot's row offset in rows (plus g), -1: no query there */
#pragma unroll
  for (int nt = 0; nt < NT; nt++)
#pragma unroll
    for (int e = 0; e < 2; e++) {
      int i = 8 * nt + 2 * t + e;
      bool ok = i < a.nq && q0 + i < a.m;
      qn[nt][e] = ok ? qn_s[i] : 0.0f;
      qrow[nt][e] = ok ? i * (int)a.rs + g : -1;
    }
  for (int mt0 = w; mt0 < tiles; mt0 += G * nw) {
    float acc[G][NT][4] = {};
    /* the group's tiles are nw apart; one beyond the last reads tile mt0 again (computed, not stored) */
    const float4 *p[G];
    const float *rnp[G];
#pragma unroll
    for (int j = 0; j < G; j++) {
      int mt = mt0 + j * nw < tiles ? mt0 + j * nw : mt0;
      p[j] = (const float4 *)a.ref_t + (int64_t)mt * steps * kWarp + lane;
      rnp[j] = a.rn + (int64_t)mt * kTcM + g;
    }
    float rn[G][2];
    for (int ks0 = 0; ks0 < steps; ks0 += B) {
      float4 buf[B][G];
#pragma unroll
      for (int s = 0; s < B; s++) {
        int ks = min(ks0 + s, steps - 1);
#pragma unroll
        for (int j = 0; j < G; j++) buf[s][j] = __ldg(p[j] + ks * kWarp);
      }
#pragma unroll
      for (int j = 0; j < G; j++) rn[j][0] = __ldg(rnp[j]), rn[j][1] = __ldg(rnp[j] + 8); /* L1 hits after the first */
#pragma unroll
      for (int s = 0; s < B; s++) {
        bool live = ks0 + s < steps;
        int ks = min(ks0 + s, steps - 1);
        float2 b[NT];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) b[nt] = qf2[ks * kWarp * NT + nt];
#pragma unroll
        for (int j = 0; j < G; j++) {
          const unsigned af[4] = {live ? __float_as_uint(buf[s][j].x) : 0u, live ? __float_as_uint(buf[s][j].y) : 0u,
                                  live ? __float_as_uint(buf[s][j].z) : 0u, live ? __float_as_uint(buf[s][j].w) : 0u};
#pragma unroll
          for (int nt = 0; nt < NT; nt++)
            mma_tf32(acc[j][nt], af, __float_as_uint(b[nt].x), __float_as_uint(b[nt].y));
        }
      }
    }
#pragma unroll
    for (int j = 0; j < G; j++) {
      if (mt0 + j * nw >= tiles) break; /* uniform */
      int r = (mt0 + j * nw) * kTcM;
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int c = 0; c < 4; c++) { /* c % 2: slot 8 nt + 2 t (+ 1); c / 2: reference r + g (+ 8) */
          int o = qrow[nt][c % 2];
          if (o >= 0) rows[o + r + 8 * (c / 2)] = fmaxf(fmaf(-2.0f, acc[j][nt][c], qn[nt][c % 2] + rn[j][c / 2]), 0.0f);
        }
    }
  }
}

/* A lean kernel's block shape: NQ query slots (warps) at most, kMinBlocks blocks per SM for the registers: the classic
 * launch (kSfWarps queries a block, two blocks per SM) or the balanced one (balanced_queries: up to kQbMax queries
 * a block, one block per SM). */
template <int NQ, int NW = NQ>
struct lean_shape {
  static constexpr int kMinBlocks = NW == kSfWarps ? kSfMinBlocks : 1;
};
/* A wide block (k_fused_small): up to kFsWideWarps warps for the distance phase, so that each warp computes a single
 * group of m16 tiles; only the first nq warps then select (H100, 2^11 d 32 with the FFMA distance phase, 10
 * queries a block: 16 warps instead of 10 took 23-24 -> 21 us) */
constexpr int kFsWideWarps = 16;
template <int NQ, int NW, int PL, int S>
__global__ void __launch_bounds__(NW *kWarp, lean_shape<NQ, NW>::kMinBlocks) k_fused_small(fs_args a) {
  /* first the queries' B fragments, the block's rows and the staged candidate rows (a.stage), then the fallback
   * scan's buffer (all dead before any scan) */
  extern __shared__ __align__(16) unsigned char sm_fs[];
  __shared__ float qn_s[NQ];
  __shared__ lean_shared_t<NQ> ls;
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nq = a.nq;
  int64_t q0 = (int64_t)blockIdx.x * nq, qq = q0 + w;
  bool mine = w < nq, valid = mine && qq < a.m; /* uniform per warp; a wide block's other warps only compute rows */
  float *qf = (float *)sm_fs, *rows = qf + a.dpad * 8 * fs_qtiles(NQ);
  /* lean_prepare's work for the warp's query (slot w), from the preparation's loads */
  double qn = fs_prepare_queries<NQ, true>(a, q0, nq, qf, qn_s, nullptr,
                                           mine && lean_lane_rows(a.f, 1) ? ls.qd[w] : nullptr);
  if (mine && lane == 0) ls.cnt[w] = 0, ls.E[w] = valid ? value_error_bound(a.f, qn) : 0.0;
  __syncthreads(); /* the fragments and norms are built */
  fs_distances<NQ>(a, q0, qf, qn_s, rows);
  __syncthreads(); /* the block's rows are written (global writes too are visible within the block) */
  double E = mine ? ls.E[w] : 0.0;
  bool flagged = false;
  if (mine) { /* W = 1: no barrier inside */
    value_row src = {rows + w * a.rs};
    float *stage = a.stage ? rows + nq * a.rs + w * kWarp * stage_stride(a.d) : nullptr;
    flagged = lean_select_finish<PL, S, kExBlocksLean>(a.f, src, valid ? (int)a.f.n : 0, 1, w, 0, qq, valid, E, ls,
                                                       w, lane, stage);
  }
  finish_block_scans(a.f, q0, ls.need_scan, (int)(a.m - q0 < nq ? a.m - q0 : nq), flagged, sm_fs);
}
using fs_kernel = void (*)(fs_args);
#define SS_FS_ROW(NQ, NW, S) {k_fused_small<NQ, NW, kSfMinPerLane, S>, k_fused_small<NQ, NW, 2 * kSfMinPerLane, S>, \
                              k_fused_small<NQ, NW, kSfMaxPerLane, S>}
/* [shape: classic, balanced, balanced and wide][S class][PL class] */
const fs_kernel kFusedSmall[3][2][3] = {{SS_FS_ROW(kSfWarps, kSfWarps, 2), SS_FS_ROW(kSfWarps, kSfWarps, 4)},
                                        {SS_FS_ROW(kQbMax, kQbMax, 2), SS_FS_ROW(kQbMax, kQbMax, 4)},
                                        {SS_FS_ROW(kQbMax, kFsWideWarps, 2), SS_FS_ROW(kQbMax, kFsWideWarps, 4)}};
#undef SS_FS_ROW

/* ---- filter path (beyond fused_small_applies, K' <= 64, d <= 256): seed, filter, list finish ------------
 * Five launches per batch of queries (three while the sample rows fit in shared memory: steps 1-3 are then
 * k_filter_seed_fused, k_fused_small's distance phase against the sample), no n-wide distance matrix:
 *  1. k_filter_centre: the queries centred and transposed (qt, dpad × mpad, zeros beyond d and m), their float
 *     norms (qn).
 *  2. k_filter<true>: the values max(‖q'‖² + ‖r'‖² − 2 q'·r', 0) against a strided sample of the references
 *     (the sample view, built once per index), written as rows (m × sample, L2-resident).
 *  3. k_filter_seed: per query (a warp) the seed x of its sample row (seed_kth: the k-th of the lanes' S
 *     smallest) and tau = x + 2E rounded down. The k sample references with values <= x have exact distances
 *     <= x + E, so the k-th exact distance is <= x + E too, and every reference of the true k nearest has a
 *     value <= x + 2E (E: tc_error_bound, which holds for the float values of the fused seed and the TF32
 *     ones of k_filter).
 *  4. k_filter<false>: the same values for every (query, reference), those <= tau appended to the query's
 *     candidate list as (value, index) pairs (~k n / sample per query on random rows; one global atomic per
 *     row and four lanes reserves the slots: filter_tile_out).
 *  5. k_list_finish: lean_select_finish over each list (W = 1; its seed-and-band argument holds for any set
 *     that contains the true k nearest); a list that overflowed its capacity goes to the block's exact scan.
 * k_filter computes its dot products on the tensor cores (TF32 MMAs, m16n8k8, float accumulators): kFlQ queries
 * × kFlR references a block tile, 16 queries × kFlR references a warp, shared-memory slices of kFlK coordinates
 * double-buffered by cp.async, the slice loop running on across a block's reference tiles so that the next
 * tile's first slice loads during the last one's arithmetic. TF32 rounds the inputs to 11 significant bits, so
 * the filter path's values carry a wider error bound than the float pipeline's (tc_error_bound: ~2^-9 ‖q'‖
 * ‖r'‖, against (d + 8) 2^-23 (‖q'‖ + ‖r'‖)²), used for tau and by the list finish's band; the exact finish
 * makes the result the same. The FFMA version (8 × 8 values a thread) reached 31-49 % of the FMA pipe and
 * was slower than cuBLAS's SGEMM; it replaced k_fused (the warp queue inside the distance kernel):
 * docs/knn.md has all three measured. */
constexpr int kFlQ = 128, kFlR = kFr; /* block tile: queries × references (ref_t's padding) */
constexpr int kFlK = kFdimStep;       /* coordinates per shared-memory slice (dpad is a multiple): one k8 step */
constexpr int kFlThreads = 256;       /* eight warps of 16 queries */
constexpr int kFlBlocksPerSm = 2;     /* the registers of 64 accumulators a thread allow two */
/* sample references: n / kFlSampleDiv within [kFlMinSample, kFlMaxSample] (all of them when fewer), so that
 * ~kFlSampleDiv k candidates pass per query while the sample costs ~1 / kFlSampleDiv of the filter. H100 sweep
 * with the TF32 filter (session 8, 1,200 queries, k 25): n / 16 beat n / 8 from 2^13 (2^15, d 32: 85 vs 118 us;
 * 2^14, d 128: 105 vs 121) and tied n / 32; at 2^11-2^12, 512 samples beat 256 (2^12, d 64: 45 vs 49 us). */
constexpr int64_t kFlSampleDiv = 16, kFlMinSample = 512, kFlMaxSample = 4096;
/* the one-kernel seed reads the sample (nspad × dpad floats) from L2 in every 8-query block: beyond this many
 * cells the three-kernel seed (its values from k_filter) is faster (2^15, d 256: 324 vs 356 us; 2^14, d 256 and
 * 2^15, d 128, at and below the limit: a tie or the one-kernel seed by 3 %) */
constexpr int64_t kFlFusedSeedCells = 2048 * 128;
/* list capacity: kFlListSlack × the expected k n / sample candidates, a power of two in [kFlMinList, kFlMaxList];
 * queries per batch so that the lists take at most kFlListBytes */
constexpr int64_t kFlListSlack = 4, kFlMinList = 256, kFlMaxList = 4096;
constexpr int64_t kFlListBytes = (int64_t)256 << 20;
static_assert(kFlK * kFlQ / 4 == kFlThreads && kFlK * kFlR / 4 == kFlThreads, "one float4 of each slice per thread");
static_assert(kFlQ % kSfWarps == 0 && kFlQ == kFlR, "centring blocks tile the padded queries; square tiles");

struct flt_seed_args {
  fs_args s; /* the batch's queries (s.q, s.mean, s.m, s.d, s.dpad), s.f for the bound, the sample view (s.ref_t,
              * s.rn, s.npad = nspad) for k_filter_seed_fused */
  float *qt, *qn, *tau;
  const float *vals; /* the sample rows (m × nspad) */
  int *cnt;
  int64_t mpad, nspad;
  int k;
};

/* The block's staged queries (qst: fs_prepare_queries, zeros beyond d and m) written transposed to qt up to mpad
 * (rounded to TF32: k_filter's), and their float norms (qn_s, fs_prepare_queries) to qn; behind a barrier. */
__device__ void filter_write_queries(const flt_seed_args &a, int64_t q0, const float *qst, const float *qn_s) {
  int tid = threadIdx.x, nq = a.s.nq;
  for (int t = tid; t < nq * a.s.dpad; t += blockDim.x) {
    int i = t % nq, j = t / nq;
    if (q0 + i < a.mpad) a.qt[(int64_t)j * a.mpad + q0 + i] = round_tf32(qst[i * a.s.dpad + j]);
  }
  if (tid < nq && q0 + tid < a.mpad) a.qn[q0 + tid] = qn_s[tid];
}

/* Query qq's threshold from its sample row (nspad values, +inf padding) by its warp, and a zero list length. */
template <int S>
__device__ void filter_seed_row(const flt_seed_args &a, const float *row, int64_t qq, int lane) {
  if (qq >= a.mpad) return; /* uniform per warp: a balanced block's slots beyond the padded queries */
  bool valid = qq < a.s.m; /* uniform per warp */
  float m[S];
#pragma unroll
  for (int t = 0; t < S; t++) m[t] = INFINITY;
  if (valid)
    for (int64_t t = lane; t < a.nspad; t += kWarp) seed_insert<S>(m, row[t]);
  float x = seed_kth<S>(m, a.k);
  double qn = valid ? finish_query_norm(a.s.f, qq, lane) : 0.0;
  if (lane) return;
  /* padding queries take nothing */
  float y = valid ? lean_band(x, tc_error_bound(a.s.d, sqrt(qn), a.s.f.ref_norm_max)) : -1.0f;
  a.tau[qq] = y;
  a.cnt[qq] = 0;
}

__global__ void __launch_bounds__(kSfThreads) k_filter_centre(flt_seed_args a) {
  __shared__ float qst[kSfWarps * SS_KNN_FUSED_MAX_DIM], qn_s[kSfWarps];
  int64_t q0 = (int64_t)blockIdx.x * kSfWarps;
  fs_prepare_queries<kSfWarps>(a.s, q0, kSfWarps, nullptr, qn_s, qst);
  __syncthreads();
  filter_write_queries(a, q0, qst, qn_s);
}

/* Steps 1-3 in one kernel while the sample rows fit in shared memory (nspad <= kFsSmemRefs): k_fused_small's
 * distance phase against the sample view (a.s.ref_t in fragment order, a.s.rn, a.s.npad = nspad), a.s.nq queries a
 * block (kSfWarps, or up to kQbMax balanced). */
template <int NQ, int S>
__global__ void __launch_bounds__(NQ *kWarp, lean_shape<NQ>::kMinBlocks) k_filter_seed_fused(flt_seed_args a) {
  extern __shared__ __align__(16) unsigned char sm_fl[]; /* the block's sample rows */
  __shared__ __align__(16) float qf[fs_qfrag_floats(NQ)];
  __shared__ float qn_s[NQ];
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  int64_t q0 = (int64_t)blockIdx.x * (blockDim.x / kWarp);
  float *rows = (float *)sm_fl; /* staging the queries first (sized for both) */
  fs_prepare_queries<NQ>(a.s, q0, a.s.nq, qf, qn_s, rows);
  __syncthreads();
  filter_write_queries(a, q0, rows, qn_s);
  __syncthreads();
  fs_distances<NQ>(a.s, q0, qf, qn_s, rows);
  __syncthreads();
  filter_seed_row<S>(a, rows + w * a.s.rs, q0 + w, lane);
}

template <int S>
__global__ void __launch_bounds__(kSfThreads) k_filter_seed(flt_seed_args a) {
  int64_t qq = (int64_t)blockIdx.x * kSfWarps + threadIdx.x / kWarp;
  if (qq < a.mpad) filter_seed_row<S>(a, a.vals + qq * a.nspad, qq, threadIdx.x % kWarp); /* whole warps */
}

struct flt_args {
  const float *qt, *qn, *tau, *ref_t, *rn;
  int64_t mpad, npad;
  int dpad, ntiles, tiles_per_split, cap;
  int *cnt;
  float *lv;  /* k_filter<true>: the sample rows (mpad × npad) */
  int2 *lp;   /* k_filter<false>: the lists, (value bits, reference index) pairs (mpad × cap) */
};

/* k_filter's warp tile: kFlWarpQ queries (one m16 row of MMA tiles) × the block's kFlR references (kFlNt n8 MMA
 * tiles). MMA column c of n-tile nt is reference c kFlNt + nt of the block tile, so that lane (g, t) — g = lane / 4,
 * t = lane % 4 — holds the values of queries g and g + 8 against the kFlRefsPerLane consecutive references from
 * t kFlRefsPerLane: acc[j % kFlNt][j / kFlNt + 2 h] is query g + 8 h, reference t kFlRefsPerLane + j. */
constexpr int kFlWarpQ = 16, kFlNt = kFlR / 8, kFlRefsPerLane = kFlR / 4;
/* shared-memory row strides (floats): the A fragments' scalar loads (rows t, columns g) and the B fragments'
 * float4 loads (rows t, columns 16 g + 4 v) without bank conflicts */
constexpr int kFlAStride = kFlQ + 8, kFlBStride = kFlR + 4;
static_assert(kFlQ == kSfWarps * kFlWarpQ && kFlThreads == kSfWarps * kWarp, "a warp per 16 queries of the tile");
static_assert(kFlK == 8 && kFlNt == 16 && kFlRefsPerLane == 2 * kFlNt, "one k8 MMA step per slice; pick_run");

/* the value of query half h against reference j of the lane's run (run-time j: selects, since indexing a register
 * array at run time would put it in local memory) */
template <int h>
__device__ __forceinline__ float pick_run(const float (&acc)[kFlNt][4], int j) {
  float x[kFlNt];
#pragma unroll
  for (int nt = 0; nt < kFlNt; nt++) x[nt] = j & kFlNt ? acc[nt][1 + 2 * h] : acc[nt][2 * h];
  /* a select tree with constant trip counts (loops over a level variable were rolled into local memory) */
#pragma unroll
  for (int i = 0; i < 8; i++) x[i] = j & 8 ? x[i + 8] : x[i];
#pragma unroll
  for (int i = 0; i < 4; i++) x[i] = j & 4 ? x[i + 4] : x[i];
#pragma unroll
  for (int i = 0; i < 2; i++) x[i] = j & 2 ? x[i + 2] : x[i];
  return j & 1 ? x[1] : x[0];
}

/* The values of one block tile (acc: the dot products, in the warp tile's layout): written as rows (kValues), or
 * those <= their query's tau appended. Appends are aggregated per (row, the four lanes sharing it): one atomic
 * reserves their slots (one atomic per candidate, each waited on in divergent code, made the FFMA version 2-3
 * times slower). */
template <bool kValues>
__device__ __forceinline__ void filter_tile_out(const flt_args &a, int64_t q0, int64_t r0, int w, int lane,
                                                const float *tau_s, const float *qn_s, float (&acc)[kFlNt][4]) {
  int g = lane / 4, t = lane % 4, rl = w * kFlWarpQ + g; /* rows rl and rl + 8 of the block tile */
  int64_t c0 = r0 + t * kFlRefsPerLane;
  float rn[kFlRefsPerLane];
#pragma unroll
  for (int v = 0; v < kFlRefsPerLane / 4; v++) {
    float4 x = __ldg((const float4 *)(a.rn + c0) + v);
    rn[4 * v] = x.x, rn[4 * v + 1] = x.y, rn[4 * v + 2] = x.z, rn[4 * v + 3] = x.w;
  }
  const float qv[2] = {qn_s[rl], qn_s[rl + 8]};
  /* the tiled path's value before its clamp at 0: the filter decides on it (tau >= 0, so the clamp cannot change
   * a decision) and clamps only what it stores */
#pragma unroll
  for (int nt = 0; nt < kFlNt; nt++)
#pragma unroll
    for (int c = 0; c < 4; c++) /* -2 acc is exact: one rounding */
      acc[nt][c] = fmaf(-2.0f, acc[nt][c], qv[c / 2] + rn[nt + kFlNt * (c % 2)]);
  if constexpr (kValues) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float4 *row = (float4 *)(a.lv + (q0 + rl + 8 * h) * a.npad + c0);
#pragma unroll
      for (int v = 0; v < kFlRefsPerLane / 4; v++) {
        float o[4];
#pragma unroll
        for (int e = 0; e < 4; e++) o[e] = fmaxf(acc[(4 * v + e) % kFlNt][(4 * v + e) / kFlNt + 2 * h], 0.0f);
        row[v] = make_float4(o[0], o[1], o[2], o[3]);
      }
    }
  } else {
    unsigned mk[2], cnt = 0; /* cnt: the two rows' hit counts, a byte each (four lanes: <= 4 kFlRefsPerLane) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
      float tq = tau_s[rl + 8 * h];
      mk[h] = 0;
#pragma unroll
      for (int j = 0; j < kFlRefsPerLane; j++) mk[h] |= (unsigned)(acc[j % kFlNt][j / kFlNt + 2 * h] <= tq) << j;
      cnt |= (unsigned)__popc(mk[h]) << (8 * h);
    }
    unsigned incl = cnt; /* inclusive over the row's four lanes, both rows in one scan */
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
      unsigned z = __shfl_up_sync(kFull, incl, o, 4);
      if (t >= o) incl += z;
    }
    unsigned excl = incl - cnt;
    int base[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int tot = incl >> (8 * h) & 0xff;
      base[h] = t == 3 && tot ? atomicAdd(a.cnt + q0 + rl + 8 * h, tot) : 0;
    }
#pragma unroll
    for (int h = 0; h < 2; h++) {
      int p = __shfl_sync(kFull, base[h], 3, 4) + (int)(excl >> (8 * h) & 0xff);
      int64_t q = q0 + rl + 8 * h;
      /* the lane's hits of the row, one per iteration (hits are rare: a loop, not predicated slots) */
      for (unsigned b = mk[h]; b; b &= b - 1, p++) {
        int j = __ffs(b) - 1;
        if (p < a.cap) /* beyond the capacity: counted, so the list finish scans the query */
          a.lp[q * a.cap + p] = make_int2(__float_as_int(fmaxf(h ? pick_run<1>(acc, j) : pick_run<0>(acc, j), 0.0f)),
                                             (int)(c0 + j));
      }
    }
  }
}

/* One k8 slice of the warp tile: the A fragment (queries w kFlWarpQ + g, + 8; coordinates t, t + 4) and, per
 * n-tile, the B fragment (references 16 g + nt of the block tile); the views hold TF32 values already. */
__device__ __forceinline__ void filter_slice(const float (*As)[kFlAStride], const float (*Bs)[kFlBStride], int w,
                                             int lane, float (&acc)[kFlNt][4]) {
  int g = lane / 4, t = lane % 4, qa = w * kFlWarpQ + g;
  const unsigned af[4] = {__float_as_uint(As[t][qa]), __float_as_uint(As[t][qa + 8]), __float_as_uint(As[t + 4][qa]),
                          __float_as_uint(As[t + 4][qa + 8])};
#pragma unroll
  for (int v = 0; v < kFlNt / 4; v++) {
    float4 x = *(const float4 *)&Bs[t][kFlNt * g + 4 * v], y = *(const float4 *)&Bs[t + 4][kFlNt * g + 4 * v];
    const float b0[4] = {x.x, x.y, x.z, x.w}, b1[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int e = 0; e < 4; e++) mma_tf32(acc[4 * v + e], af, __float_as_uint(b0[e]), __float_as_uint(b1[e]));
  }
}

template <bool kValues>
__global__ void __launch_bounds__(kFlThreads, kFlBlocksPerSm) k_filter(flt_args a) {
  __shared__ __align__(16) float As[2][kFlK][kFlAStride];
  __shared__ __align__(16) float Bs[2][kFlK][kFlBStride];
  __shared__ float tau_s[kFlQ], qn_s[kFlQ];
  int tid = threadIdx.x, w = tid / kWarp, lane = tid % kWarp;
  int64_t q0 = (int64_t)blockIdx.x * kFlQ;
  if (tid < kFlQ) tau_s[tid] = kValues ? 0.0f : a.tau[q0 + tid], qn_s[tid] = a.qn[q0 + tid];
  int lr = tid / (kFlQ / 4), lc = tid % (kFlQ / 4) * 4; /* this thread's float4 of each slice */
  int tile = blockIdx.y * a.tiles_per_split, t_end = min(a.ntiles, tile + a.tiles_per_split);
  /* the slice after the current one is the next tile's first after a tile's last: loaded during its arithmetic */
  const float *ap = a.qt + (int64_t)lr * a.mpad + q0 + lc;
  const float *bp = a.ref_t + (int64_t)lr * a.npad + (int64_t)tile * kFlR + lc;
  cp_async16(&As[0][lr][lc], ap);
  cp_async16(&Bs[0][lr][lc], bp);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
  int buf = 0;
  for (; tile < t_end; tile++) {
    float acc[kFlNt][4] = {};
    for (int k0 = 0; k0 < a.dpad; k0 += kFlK) {
      int nk = k0 + kFlK;
      const float *nb = bp + (int64_t)nk * a.npad; /* the next slice, this tile */
      if (nk == a.dpad) nk = 0, nb = bp + kFlR;     /* the next tile's first */
      if (nk || tile + 1 < t_end) { /* uniform; into the other buffer, last read before the previous barrier */
        cp_async16(&As[buf ^ 1][lr][lc], ap + (int64_t)nk * a.mpad);
        cp_async16(&Bs[buf ^ 1][lr][lc], nb);
        cp_async_commit();
      }
      filter_slice(As[buf], Bs[buf], w, lane, acc);
      if (nk == 0) filter_tile_out<kValues>(a, q0, (int64_t)tile * kFlR, w, lane, tau_s, qn_s, acc);
      cp_async_wait_all();
      __syncthreads();
      buf ^= 1;
    }
    bp += kFlR;
  }
}

struct lf_args {
  const int2 *lp;
  const int *cnt;
  int cap;
  int64_t m;
  finish_args f;
};

template <int NQ, int PL, int S>
__global__ void __launch_bounds__(NQ *kWarp, lean_shape<NQ>::kMinBlocks) k_list_finish(lf_args a) {
  extern __shared__ __align__(16) unsigned char sm_lf[]; /* the fallback scan's buffer */
  __shared__ lean_shared_t<NQ> ls;
  int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, nq = blockDim.x / kWarp;
  int64_t q0 = (int64_t)blockIdx.x * nq, qq = q0 + w;
  bool valid = qq < a.m;
  int c = valid ? a.cnt[qq] : 0;
  double E = lean_prepare(a.f, qq, valid, 1, w, 0, ls, lane);
  list_row src = {a.lp + qq * a.cap};
  /* an overflowed list is passed empty: no seed, so the query is scanned */
  bool flagged = lean_select_finish<PL, S, kExBlocks>(a.f, src, c <= a.cap ? c : 0, 1, w, 0, qq, valid, E, ls, w,
                                                      lane);
  finish_block_scans(a.f, q0, ls.need_scan, (int)(a.m - q0 < nq ? a.m - q0 : nq), flagged, sm_lf);
}
using flt_seed_kernel = void (*)(flt_seed_args);
using lf_kernel = void (*)(lf_args);
const flt_seed_kernel kFilterSeed[2] = {k_filter_seed<2>, k_filter_seed<4>};
/* [balanced][S class] and [balanced][S class][PL class] */
const flt_seed_kernel kFilterSeedFused[2][2] = {{k_filter_seed_fused<kSfWarps, 2>, k_filter_seed_fused<kSfWarps, 4>},
                                                {k_filter_seed_fused<kQbMax, 2>, k_filter_seed_fused<kQbMax, 4>}};
#define SS_LF_ROW(NQ, S) {k_list_finish<NQ, kSfMinPerLane, S>, k_list_finish<NQ, 2 * kSfMinPerLane, S>, \
                          k_list_finish<NQ, kSfMaxPerLane, S>}
const lf_kernel kListFinish[2][2][3] = {{SS_LF_ROW(kSfWarps, 2), SS_LF_ROW(kSfWarps, 4)},
                                        {SS_LF_ROW(kQbMax, 2), SS_LF_ROW(kQbMax, 4)}};
#undef SS_LF_ROW

int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p <<= 1;
  return p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Chunks per reference tile: shared-memory strategies use fixed chunks; the warp queue splits a
 * row only as much as it takes to give the GPU enough warps. */
void plan_chunks(int strategy, int64_t Qt, int64_t Rt, int64_t wchunk, int *nch, int *chunk) {
  if (strategy == SS_KNN_WARP) {
    int64_t want = ceil_div(kTargetWarps, Qt), most = Rt / wchunk > 1 ? Rt / wchunk : 1;
    int64_t c = want < most ? want : most;
    *chunk = (int)ceil_div(Rt, c);
  } else {
    *chunk = kChunk;
  }
  *nch = (int)ceil_div(Rt, *chunk);
}

int64_t max_chunks(int64_t Q, int64_t R, int64_t wchunk) {
  int nk, ck, nw, cw;
  plan_chunks(SS_KNN_KMIN, Q, R, wchunk, &nk, &ck);
  plan_chunks(SS_KNN_WARP, Q, R, wchunk, &nw, &cw);
  /* a shorter last query tile can ask the warp queue for more chunks */
  int64_t warp_most = R / wchunk > 1 ? R / wchunk : 1;
  return nk > warp_most ? nk : (warp_most > nw ? warp_most : nw);
}

int warp_queue_size(int Kc) { return 2 * next_pow2(Kc > kWarpBuf ? Kc : kWarpBuf); }

size_t warp_smem(int Kc, int *warps) {
  size_t per = (size_t)warp_queue_size(Kc) * (sizeof(float) + sizeof(int));
  int wpb = (int)(kSmemDefault / per);
  *warps = wpb < 1 ? 1 : (wpb > kWarpsPerBlock ? kWarpsPerBlock : wpb);
  return per * (size_t)*warps;
}

size_t plan_bytes(const search_plan &p, int64_t m, int64_t d) {
  size_t tiles = 2 * (size_t)p.Q * (size_t)p.R * sizeof(float);
  size_t lists = (size_t)p.Q * (size_t)p.Kc * (1 + (size_t)p.part_chunks) * (sizeof(float) + sizeof(int));
  size_t queries = (size_t)m * (size_t)d * 2 * sizeof(float) + (size_t)m * (sizeof(float) + sizeof(unsigned));
  size_t outs = (size_t)m * (size_t)p.k * (sizeof(int) + sizeof(double)) + (size_t)m;
  return tiles + lists + queries + outs;
}

/* Tiles from the parameters, halved (references first) until the search fits in free memory. */
ss_status plan_search(ss_ctx *ctx, const ss_knn_opts *o, int64_t n, int64_t m, int64_t d, int Kc, search_plan *p,
                      size_t already_held) {
  p->Kc = Kc;
  p->k = (int)o->k;
  p->Q = o->query_tile < m ? o->query_tile : m;
  p->R = o->ref_tile < n ? o->ref_tile : n;
  p->wchunk = o->warp_chunk > 0 ? o->warp_chunk : kWarpMinChunk;
  p->sfchunk = o->warp_chunk > 0 ? std::max(o->warp_chunk, kSfMinChunk) : kSfChunk;
  size_t free_b = 0, total_b = 0;
  SS_CUDA_TRY(ctx, cudaMemGetInfo(&free_b, &total_b));
  size_t budget = (size_t)(kMemFraction * (double)(free_b + already_held));
  for (;;) {
    p->part_chunks = max_chunks(p->Q, p->R, p->wchunk);
    if (plan_bytes(*p, m, d) <= budget) return SS_OK;
    if (p->R > kMinRefTile) p->R = p->R / 2 > kMinRefTile ? p->R / 2 : kMinRefTile;
    else if (p->Q > kMinQueryTile) p->Q = p->Q / 2 > kMinQueryTile ? p->Q / 2 : kMinQueryTile;
    else return SS_OK; /* the smallest tiles; the allocations report what is missing */
  }
}

size_t ws_held(const knn_dev *dv) {
  const ws_buf *b[] = {&dv->q, &dv->qc, &dv->qn, &dv->dist_tile[0], &dv->dist_tile[1], &dv->run_v, &dv->run_i,
                       &dv->part_v, &dv->part_i, &dv->out_i, &dv->out_d, &dv->cert, &dv->tau,
                       &dv->fl_qt, &dv->fl_qn, &dv->fl_tau, &dv->fl_cnt, &dv->fl_lv, &dv->fl_li};
  size_t s = 0;
  for (const ws_buf *x : b) s += x->bytes;
  return s;
}

ss_status alloc_workspace(ss_ctx *ctx, knn_dev *dv, const search_plan &p, int64_t m, int64_t d) {
  size_t qr = (size_t)p.Q * (size_t)p.R * sizeof(float), lists = (size_t)p.Q * (size_t)p.Kc;
  size_t parts = lists * (size_t)p.part_chunks;
  SS_TRY(ws_ensure(ctx, &dv->q, (size_t)(m * d) * sizeof(float), "KNN queries"));
  SS_TRY(ws_ensure(ctx, &dv->qc, (size_t)(m * d) * sizeof(float), "KNN centred queries"));
  SS_TRY(ws_ensure(ctx, &dv->qn, (size_t)m * sizeof(float), "KNN query norms"));
  SS_TRY(ws_ensure(ctx, &dv->dist_tile[0], qr, "KNN distance tile"));
  SS_TRY(ws_ensure(ctx, &dv->dist_tile[1], qr, "KNN distance tile"));
  SS_TRY(ws_ensure(ctx, &dv->run_v, lists * sizeof(float), "KNN candidate lists"));
  SS_TRY(ws_ensure(ctx, &dv->run_i, lists * sizeof(int), "KNN candidate lists"));
  SS_TRY(ws_ensure(ctx, &dv->part_v, parts * sizeof(float), "KNN partial lists"));
  SS_TRY(ws_ensure(ctx, &dv->part_i, parts * sizeof(int), "KNN partial lists"));
  SS_TRY(ws_ensure(ctx, &dv->out_i, (size_t)m * (size_t)p.k * sizeof(int), "KNN neighbour indices"));
  SS_TRY(ws_ensure(ctx, &dv->out_d, (size_t)m * (size_t)p.k * sizeof(double), "KNN neighbour distances"));
  SS_TRY(ws_ensure(ctx, &dv->cert, (size_t)m, "KNN certificates"));
  SS_TRY(ws_ensure(ctx, &dv->tau, (size_t)m * sizeof(unsigned), "KNN shared thresholds"));
  return SS_OK;
}

struct search_run {
  bool direct; /* one reference tile: the chunks' lists go straight to the finish, one stream */
  bool sf;     /* direct, K' <= kRegList and the warp queue: selection and finish in k_select_finish */
  ss_knn_index *ix;
  knn_dev *dv;
  cudaStream_t s0, s1;
  cublasHandle_t blas;
  search_plan p;
  const float *qc, *qn;
};

ss_status gemm_tile(ss_ctx *ctx, const search_run &r, int64_t q0, int64_t Qt, int64_t r0, int64_t Rt, int b) {
  const float alpha = -2.0f, beta = 0.0f;
  int64_t d = r.ix->d;
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s0, r.dv->sel_done[b], 0));
  SS_CUBLAS_TRY(ctx, cublasSgemm(r.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)Rt, (int)Qt, (int)d, &alpha,
                                 r.dv->ref_c + r0 * d, (int)d, r.qc + q0 * d, (int)d, &beta,
                                 (float *)r.dv->dist_tile[b].p, (int)Rt));
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->gemm_done[b], r.s0));
  return SS_OK;
}

/* Selection of one tile on the selection stream, then (unless `direct`: the chunks' lists are the
 * result) the merge into the running lists. `share`: the warp queue uses and publishes the queries'
 * shared thresholds (not while calibrating: those lists are thrown away, so they must not publish). */
ss_status select_tile(ss_ctx *ctx, const search_run &r, int strategy, int64_t q0, int64_t Qt, int64_t r0, int64_t Rt,
                      int b, bool direct, bool share) {
  tile_args a;
  a.dist = (const float *)r.dv->dist_tile[b].p;
  a.ld = Rt;
  a.qnorm = r.qn + q0;
  a.rnorm = r.dv->ref_norm + r0;
  a.r0 = (int)r0, a.Rt = (int)Rt, a.Kc = r.p.Kc;
  a.pv = (float *)r.dv->part_v.p;
  a.pi = (int *)r.dv->part_i.p;
  plan_chunks(strategy, Qt, Rt, r.p.wchunk, &a.nch, &a.chunk);
  int64_t items = Qt * a.nch;
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s1, r.dv->gemm_done[b], 0));
  if (strategy == SS_KNN_KMIN) {
    k_select_kmin<<<(unsigned)items, kThreads, (size_t)a.chunk * sizeof(float), r.s1>>>(a);
  } else if (strategy == SS_KNN_BITONIC) {
    int P = next_pow2(a.chunk > a.Kc ? a.chunk : a.Kc);
    k_select_bitonic<<<(unsigned)items, kThreads, (size_t)P * (sizeof(float) + sizeof(int)), r.s1>>>(a, P);
  } else {
    int wpb;
    size_t smem = warp_smem(a.Kc, &wpb);
    unsigned *tau = share ? (unsigned *)r.dv->tau.p + q0 : nullptr;
    k_select_warp<<<(unsigned)ceil_div(items, wpb), wpb * kWarp, smem, r.s1>>>(
        a, warp_queue_size(a.Kc), (int)items, direct ? nullptr : (const float *)r.dv->run_v.p, tau, (int)r.direct);
  }
  SS_CUDA_TRY_LAUNCH(ctx, "knn selection");
  if (direct) return SS_OK;
  if (r.s1 != r.s0) SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->sel_done[b], r.s1));
  size_t msmem = (size_t)r.p.Kc * 3 * (sizeof(float) + sizeof(int));
  k_merge<<<(unsigned)Qt, kThreads, msmem, r.s1>>>((float *)r.dv->run_v.p, (int *)r.dv->run_i.p, a.pv, a.pi, a.nch,
                                                   r.p.Kc);
  SS_CUDA_TRY_LAUNCH(ctx, "knn merge");
  return SS_OK;
}

ss_status fill_lists(ss_ctx *ctx, const search_run &r, int64_t Qt) {
  int64_t count = Qt * r.p.Kc;
  unsigned blocks = (unsigned)(ceil_div(count, kThreads) < 65535 ? ceil_div(count, kThreads) : 65535);
  k_fill<<<blocks, kThreads, 0, r.s1>>>((float *)r.dv->run_v.p, (int *)r.dv->run_i.p, count);
  SS_CUDA_TRY_LAUNCH(ctx, "knn list init");
  return SS_OK;
}

/* ---- auto: measured choice, cached per (GPU, n class, K' class) ---------------------------------- */

struct calib_slot {
  int device, n_class, kc_class, strategy;
};
std::mutex g_calib_mu;
calib_slot g_calib[kCalibSlots];
int g_ncalib = 0;

int log2_floor(int64_t x) {
  int l = 0;
  while (x > 1) x >>= 1, l++;
  return l;
}

/* One strategy on the first tile, as the search runs it (shared thresholds reset before each run:
 * the lists are thrown away, so nothing they published may survive; the search resets them again). */
ss_status time_strategy(ss_ctx *ctx, const search_run &r, int strategy, int64_t Qt, int64_t Rt, float *ms) {
  *ms = INFINITY;
  for (int rep = 0; rep < kCalibRepeats; rep++) {
    SS_TRY(fill_lists(ctx, r, Qt));
    k_reset_tau<<<(unsigned)ceil_div(Qt, kThreads), kThreads, 0, r.s1>>>((unsigned *)r.dv->tau.p, Qt);
    SS_CUDA_TRY_LAUNCH(ctx, "knn threshold reset");
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->t0, r.s1));
    SS_TRY(select_tile(ctx, r, strategy, 0, Qt, 0, Rt, 0, false, true));
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->t1, r.s1));
    SS_CUDA_TRY(ctx, cudaEventSynchronize(r.dv->t1));
    float t;
    SS_CUDA_TRY(ctx, cudaEventElapsedTime(&t, r.dv->t0, r.dv->t1));
    if (t < *ms) *ms = t;
  }
  return SS_OK;
}

/* The strategy without running anything: the requested one, or auto's remembered choice. False when
 * auto has not calibrated this class yet. */
bool strategy_known(const search_run &r, int requested, int *out) {
  *out = requested;
  if (requested != SS_KNN_AUTO) return true;
  int device = ss_cuda_of(r.ix->be)->device, nc = log2_floor(r.ix->n), kc = log2_floor(next_pow2(r.p.Kc));
  std::lock_guard<std::mutex> lock(g_calib_mu);
  for (int i = 0; i < g_ncalib; i++)
    if (g_calib[i].device == device && g_calib[i].n_class == nc && g_calib[i].kc_class == kc) {
      *out = g_calib[i].strategy;
      return true;
    }
  return false;
}

/* auto: time the three strategies on the first tile (centred queries needed) and remember the fastest. */
ss_status calibrate_strategy(ss_ctx *ctx, const search_run &r, int64_t m, int *out) {
  int device = ss_cuda_of(r.ix->be)->device, nc = log2_floor(r.ix->n), kc = log2_floor(next_pow2(r.p.Kc));
  int64_t Qt = r.p.Q < m ? r.p.Q : m, Rt = r.p.R < r.ix->n ? r.p.R : r.ix->n;
  SS_TRY(gemm_tile(ctx, r, 0, Qt, 0, Rt, 0));
  const int cand[] = {SS_KNN_KMIN, SS_KNN_BITONIC, SS_KNN_WARP};
  float ms[3];
  int best = 0;
  for (int i = 0; i < 3; i++) {
    SS_TRY(time_strategy(ctx, r, cand[i], Qt, Rt, &ms[i]));
    if (ms[i] < ms[best]) best = i;
  }
  *out = cand[best];
  ss_log_info(ctx, "knn: auto k-selection on GPU %d for n ~ 2^%d, %d candidates: %s (kmin %.3f ms, bitonic %.3f ms, "
              "warp %.3f ms on a %lld x %lld tile)", device, nc, r.p.Kc, ss_knn_strategy_name(*out), ms[0], ms[1],
              ms[2], (long long)Qt, (long long)Rt);
  std::lock_guard<std::mutex> lock(g_calib_mu);
  if (g_ncalib < kCalibSlots) g_calib[g_ncalib++] = calib_slot{device, nc, kc, *out};
  return SS_OK;
}

ss_status centre_queries(ss_ctx *ctx, const search_run &r, const float *d_query, int64_t m) {
  unsigned blocks = (unsigned)ceil_div(m, kThreads / kWarp);
  k_center<<<blocks, kThreads, 0, r.s0>>>(d_query, r.dv->mean, m, r.ix->d, (float *)r.dv->qc.p, (float *)r.dv->qn.p,
                                          nullptr, (unsigned *)r.dv->tau.p);
  SS_CUDA_TRY_LAUNCH(ctx, "knn query centring");
  return SS_OK;
}

/* Outputs of the finish kernel. */
struct finish_out {
  int *idx;
  double *dist;
  uint8_t *cert;
};

/* The finish's arguments for m queries with L candidates each (lists of K'). */
finish_args make_finish_args(const ss_knn_index *ix, const knn_dev *dv, const float *d_query, const float *cand_v,
                             const int *cand_i, int L, int Kc, int k, unsigned *reset_tau, const finish_out &out) {
  finish_args a;
  a.q = d_query, a.mean = dv->mean, a.ref = dv->ref, a.cand_v = cand_v, a.cand_i = cand_i;
  a.n = ix->n, a.d = (int)ix->d, a.L = L, a.Kc = Kc, a.k = k;
  a.P1 = next_pow2(L), a.Ps = next_pow2(Kc);
  a.P2 = a.Ps > finish_scan_size(k) ? a.Ps : finish_scan_size(k);
  a.ref_norm_max = ix->ref_norm_max, a.tc = false, a.reset_tau = reset_tau;
  a.out_i = out.idx, a.out_d = out.dist, a.cert = out.cert;
  return a;
}

ss_status launch_finish(ss_ctx *ctx, const ss_knn_index *ix, const knn_dev *dv, const float *d_query, int64_t m,
                        const float *cand_v, const int *cand_i, int L, int Kc, int k, unsigned *reset_tau,
                        const finish_out &out, cudaStream_t s) {
  finish_args a = make_finish_args(ix, dv, d_query, cand_v, cand_i, L, Kc, k, reset_tau, out);
  if (Kc <= kFinList) /* every input list is sorted: a warp per query merges them */
    k_finish_warp<<<(unsigned)ceil_div(m, kFinWarps), kFinWarps * kWarp, finish_warp_smem(a.P2), s>>>(a, m);
  else
    k_finish<<<(unsigned)m, kThreads, finish_smem(a.P1 + 1, a.P2), s>>>(a);
  SS_CUDA_TRY_LAUNCH(ctx, "knn finish (exact re-rank)");
  return SS_OK;
}

/* The one-tile selection and finish (k_select_finish) of query tile q0 (Qt queries, distance buffer b). */
ss_status launch_select_finish(ss_ctx *ctx, const search_run &r, const float *d_query, int64_t q0, int64_t Qt, int b,
                               const finish_out &out) {
  int64_t n = r.ix->n;
  sf_args a;
  a.t.dist = (const float *)r.dv->dist_tile[b].p;
  a.t.ld = n;
  a.t.qnorm = r.qn + q0;
  a.t.rnorm = r.dv->ref_norm;
  a.t.r0 = 0, a.t.Rt = (int)n, a.t.nch = 1, a.t.chunk = (int)n, a.t.Kc = r.p.Kc;
  a.t.pv = nullptr, a.t.pi = nullptr;
  a.f = make_finish_args(r.ix, r.dv, d_query + q0 * r.ix->d, nullptr, nullptr, r.p.Kc, r.p.Kc, r.p.k, nullptr, out);
  a.m = Qt;
  int parts = next_pow2(ceil_div(n, r.p.sfchunk));
  a.W = parts < kSfWarps ? parts : kSfWarps;
  a.chunk = (int)ceil_div(n, a.W);
  unsigned blocks = (unsigned)ceil_div(Qt, kSfWarps / a.W);
  size_t smem = finish_warp_smem(a.f.P2);
  kSelectFinish[lean_s_class(r.p.k)][lean_pl_class(a.chunk)]<<<blocks, kSfThreads, smem, r.s0>>>(a);

  SS_CUDA_TRY_LAUNCH(ctx, "knn selection and finish");
  return SS_OK;
}

ss_status run_tiles(ss_ctx *ctx, const search_run &r, int strategy, const float *d_query, int64_t m, int gemm_only,
                    const finish_out &out) {
  int64_t n = r.ix->n, d = r.ix->d;
  int tile = 0;
  for (int64_t q0 = 0; q0 < m; q0 += r.p.Q) {
    int64_t Qt = m - q0 < r.p.Q ? m - q0 : r.p.Q;
    if (!gemm_only && !r.direct) SS_TRY(fill_lists(ctx, r, Qt));
    for (int64_t r0 = 0; r0 < n; r0 += r.p.R, tile++) {
      int64_t Rt = n - r0 < r.p.R ? n - r0 : r.p.R;
      SS_TRY(gemm_tile(ctx, r, q0, Qt, r0, Rt, tile % 2));
      if (!gemm_only && !r.sf) SS_TRY(select_tile(ctx, r, strategy, q0, Qt, r0, Rt, tile % 2, r.direct, true));
    }
    if (gemm_only) continue;
    finish_out o = {out.idx + q0 * r.p.k, out.dist ? out.dist + q0 * r.p.k : nullptr, out.cert + q0};
    if (r.sf) { /* the single reference tile was buffer (tile - 1) % 2 */
      SS_TRY(launch_select_finish(ctx, r, d_query, q0, Qt, (tile - 1) % 2, o));
    } else if (r.direct) { /* the chunks' lists of the single reference tile */
      int nch, chunk;
      plan_chunks(strategy, Qt, n, r.p.wchunk, &nch, &chunk);
      SS_TRY(launch_finish(ctx, r.ix, r.dv, d_query + q0 * d, Qt, (const float *)r.dv->part_v.p,
                           (const int *)r.dv->part_i.p, nch * r.p.Kc, r.p.Kc, r.p.k, nullptr, o, r.s1));
    } else {
      SS_TRY(launch_finish(ctx, r.ix, r.dv, d_query + q0 * d, Qt, (const float *)r.dv->run_v.p,
                           (const int *)r.dv->run_i.p, r.p.Kc, r.p.Kc, r.p.k, nullptr, o, r.s1));
    }
  }
  return SS_OK;
}

bool same_key(const graph_key &a, const graph_key &b) { return !memcmp(&a, &b, sizeof(a)); }

/* Run `launch` on stream s through the cache's graph (see graph_cache); *graphed: it ran as a graph. */
template <typename F>
ss_status graph_run(ss_ctx *ctx, graph_cache &g, const graph_key &key, cudaStream_t s, F launch,
                    bool *graphed) {
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
  if (!capture) return launch(); /* a caller capturing us gets plain launches in its own graph */
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

/* What a graph of the tiled path bakes in besides the index: the caller's pointers, the workspace
 * (it may be reallocated between calls), the shape and the strategy. */
graph_key tiled_key(const search_run &r, const float *d_query, int64_t m, int strategy, int gemm_only,
                    const finish_out &out) {
  graph_key k;
  memset(&k, 0, sizeof(k));
  const knn_dev *dv = r.dv;
  const void *p[] = {d_query, out.idx, out.dist, out.cert, dv->qc.p, dv->qn.p, dv->dist_tile[0].p,
                     dv->dist_tile[1].p, dv->part_v.p, dv->part_i.p, dv->tau.p, dv->run_v.p};
  static_assert(sizeof(p) / sizeof(p[0]) == sizeof(k.ptr) / sizeof(k.ptr[0]), "graph key pointers");
  memcpy(k.ptr, p, sizeof(p));
  const int64_t v[] = {m, strategy, gemm_only, r.p.Q, r.p.R, (int64_t)r.p.Kc * 65536 + r.p.k, r.p.wchunk, r.p.sfchunk};
  static_assert(sizeof(v) / sizeof(v[0]) == sizeof(k.val) / sizeof(k.val[0]), "graph key values");
  memcpy(k.val, v, sizeof(v));
  return k;
}

/* The tiled path: centring, SGEMM tiles on the backend stream, selections and the finish on the
 * selection stream, joined back to the backend stream at the end. With one reference tile (one
 * stream) the sequence is replayed as a CUDA graph: on small problems the launches cost more than
 * the kernels. */
ss_status tiled_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                       const finish_out &out, ss_knn_stats *stats) {
  search_run r;
  r.ix = ix;
  r.dv = (knn_dev *)ix->cuda;
  r.s0 = ss_cuda_stream(ix->be);
  r.s1 = r.dv->sel;
  r.blas = ss_cuda_cublas(ix->be);
  r.direct = false;
  r.sf = false;
  SS_CUBLAS_TRY(ctx, cublasSetStream(r.blas, r.s0));
  /* the plan of the previous call when nothing changed: no cudaMemGetInfo on the repeated path */
  plan_key key = {m, o->query_tile, o->ref_tile, o->k, o->warp_chunk};
  if (r.dv->plan_valid && !memcmp(&key, &r.dv->plan_key_, sizeof(key))) {
    r.p = r.dv->plan;
  } else {
    SS_TRY(plan_search(ctx, o, ix->n, m, ix->d, Kc, &r.p, ws_held(r.dv)));
    SS_TRY(alloc_workspace(ctx, r.dv, r.p, m, ix->d));
    r.dv->plan = r.p, r.dv->plan_key_ = key, r.dv->plan_valid = true;
  }
  if (o->gemm_only) { /* benchmark hook: the distance GEMM alone, on the queries as given */
    r.qc = d_query;
    r.qn = nullptr;
    r.s1 = r.s0; /* no selection to overlap: no events */
    auto gemms = [&]() { return run_tiles(ctx, r, SS_KNN_AUTO, d_query, m, 1, out); };
    if (o->gemm_only != SS_KNN_GEMM_ONLY_GRAPH) return gemms();
    bool graphed;
    graph_key gkey = tiled_key(r, d_query, m, SS_KNN_AUTO, 1, out);
    SS_TRY(graph_run(ctx, r.dv->gemm_graph, gkey, r.s0, gemms, &graphed));
    if (stats) stats->graph = graphed;
    return SS_OK;
  }
  r.qc = (const float *)r.dv->qc.p;
  r.qn = (const float *)r.dv->qn.p;
  /* One reference tile: nothing to overlap, so one stream, and no running lists (fill, merge):
   * the finish kernel sorts the chunks' lists itself, up to its candidate limit. */
  r.direct = ix->n <= r.p.R && max_chunks(r.p.Q, r.p.R, r.p.wchunk) * Kc <= SS_KNN_GPU_MAX_CANDIDATES;
  if (r.direct) r.s1 = r.s0;
  r.sf = r.direct && ix->n <= kSfMaxRefs && Kc <= kRegList &&
         (o->strategy == SS_KNN_AUTO || o->strategy == SS_KNN_WARP);
  if (r.s1 != r.s0) {
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->start, r.s0));
    SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s1, r.dv->start, 0));
  }
  int strategy = r.sf ? SS_KNN_WARP : SS_KNN_AUTO;
  if (!r.sf && !strategy_known(r, o->strategy, &strategy)) { /* first search of its class: calibrate (synchronises) */
    SS_TRY(centre_queries(ctx, r, d_query, m));
    SS_TRY(calibrate_strategy(ctx, r, m, &strategy));
  }
  auto search = [&]() -> ss_status {
    SS_TRY(centre_queries(ctx, r, d_query, m)); /* also resets the shared thresholds */
    return run_tiles(ctx, r, strategy, d_query, m, 0, out);
  };
  bool graphed = false;
  if (r.direct)
    SS_TRY(graph_run(ctx, r.dv->graph, tiled_key(r, d_query, m, strategy, 0, out), r.s0, search,
                     &graphed));
  else SS_TRY(search());
  if (r.s1 != r.s0) {
    SS_CUDA_TRY(ctx, cudaEventRecord(r.dv->done, r.s1));
    SS_CUDA_TRY(ctx, cudaStreamWaitEvent(r.s0, r.dv->done, 0));
  }
  if (stats) {
    stats->strategy = strategy;
    stats->query_tile = r.p.Q;
    stats->ref_tile = r.p.R;
    stats->graph = graphed;
  }
  return SS_OK;
}

/* A reference view for the fused kernels (k_fused_refs: `count` columns of npad), built once per index. */
/* Dynamic shared memory of the fused kernels: the queries' B fragments and up to kQbMax rows of kFsSmemRefs floats
 * (k_fused_small; the seed's fragments are static), which also holds the scan
 * buffer of any K' the fused path takes. Beyond 48 KB (static + dynamic) a kernel needs the opt-in, set once per
 * index (always the same value, so indices created concurrently do not race) rather than on every search. */
constexpr size_t kFusedSmemMax = (size_t)(fs_qfrag_floats(kQbMax) + kQbMax * (kFsSmemRefs + kFsRowPad)) * sizeof(float);
static_assert(finish_warp_smem(finish_scan_size(SS_KNN_FUSED_MAX_CANDIDATES)) <= kFusedSmemMax, "the scan buffer fits");
/* finish_exact_scan's buffer (finish_scan_size, sized for kThreads) takes a round of a kQbMax-warp block */
static_assert(finish_scan_size(SS_KNN_FUSED_MAX_CANDIDATES) >= SS_KNN_FUSED_MAX_CANDIDATES + 2 * kQbMax * kWarp,
              "a balanced block's exact scan");
/* k_fused_small may take more: what the device's opt-in maximum leaves beyond the kernel's static shared memory (the
 * same value every time on a device), for the balanced blocks' staged candidate rows; *fs_smem receives the least
 * over the kernels. */
ss_status set_fused_smem(ss_ctx *ctx, int device, size_t *fs_smem) {
  int optin = 0;
  SS_CUDA_TRY(ctx, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  *fs_smem = SIZE_MAX;
  for (const auto &shape : kFusedSmall)
    for (const auto &row : shape)
      for (fs_kernel kern : row) {
        cudaFuncAttributes fa;
        SS_CUDA_TRY(ctx, cudaFuncGetAttributes(&fa, kern));
        size_t room = (size_t)optin > fa.sharedSizeBytes ? (size_t)optin - fa.sharedSizeBytes : 0;
        room = std::max(room, kFusedSmemMax); /* the rows need that much: the attribute fails where it is lacking */
        SS_CUDA_TRY(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)room));
        *fs_smem = std::min(*fs_smem, room);
      }
  for (const auto &shape : kFilterSeedFused)
    for (flt_seed_kernel kern : shape)
      SS_CUDA_TRY(ctx, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)kFusedSmemMax));
  return SS_OK;
}

/* The view of `count` references (strided when fewer than n) and their norms, built once per index, its coordinates
 * rounded to TF32: transposed (k_filter) or in fragment order (frag: k_fused_small, k_filter_seed_fused). */
ss_status fused_view(ss_ctx *ctx, const ss_knn_index *ix, const knn_dev *dv, int dpad, int64_t count, int64_t npad,
                     bool frag, float **view, float **norms, cudaStream_t s) {
  if (*view) return SS_OK;
  SS_TRY(SS_CUDA_ALLOC(ctx, *view, (int64_t)dpad * npad, "KNN transposed references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, *norms, npad, "KNN padded reference norms"));
  int64_t cells = (int64_t)dpad * npad, blocks = ceil_div(cells, kThreads);
  unsigned grid = (unsigned)(blocks < 65535 ? blocks : 65535);
  k_fused_refs<<<grid, kThreads, 0, s>>>(dv->ref_c, dv->ref_norm, ix->n, count, (int)ix->d, dpad, npad, frag,
                                         *view, *norms);
  SS_CUDA_TRY_LAUNCH(ctx, "knn fused reference view");
  return SS_OK;
}

/* The fused paths' common tail: their launches run (or replay) as the index's fused graph, keyed by the pointers
 * and values they bake in (each path tags its values: -1 small, -2 filter); the stats report the warp strategy
 * (one warp per query selects) and the path's tiles. */
template <size_t NP, size_t NV, typename F>
ss_status fused_graph_run(ss_ctx *ctx, knn_dev *dv, cudaStream_t s, const void *const (&p)[NP],
                          const int64_t (&v)[NV], F launch, int64_t query_tile, int64_t ref_tile, ss_knn_stats *stats) {
  graph_key key;
  static_assert(NP <= sizeof(key.ptr) / sizeof(key.ptr[0]) && NV <= sizeof(key.val) / sizeof(key.val[0]),
                "graph key size");
  memset(&key, 0, sizeof(key));
  memcpy(key.ptr, p, sizeof(p));
  memcpy(key.val, v, sizeof(v));
  bool graphed = false;
  SS_TRY(graph_run(ctx, dv->fgraph, key, s, launch, &graphed));
  if (stats) {
    stats->strategy = SS_KNN_WARP;
    stats->query_tile = query_tile;
    stats->ref_tile = ref_tile;
    stats->graph = graphed;
  }
  return SS_OK;
}

/* The fused small kernel (fused_small_applies) for m queries: selection and finish in the same launch. */
ss_status fused_small_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m,
                             int Kc, int dpad, int64_t npad, const finish_out &out, ss_knn_stats *stats) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  int nq = balanced_queries(m, dv->sm_count), nw = nq;
  int slots = nq > kSfWarps ? kQbMax : kSfWarps; /* the kernel's query slots, NQ */
  if (nq > kSfWarps) { /* a balanced block: wide while its warps would take more than one group of m16 tiles */
    int64_t want = ceil_div(npad, (int64_t)kFsGroup * kTcM);
    if (want > nq) nw = (int)(want < kFsWideWarps ? want : kFsWideWarps);
  }
  int shape = nq == kSfWarps ? 0 : nw == nq ? 1 : 2;
  fs_kernel kern = kFusedSmall[shape][lean_s_class(o->k)][lean_pl_class(ix->n)];
  size_t scan_bytes = finish_warp_smem(make_finish_args(ix, dv, d_query, nullptr, nullptr, Kc, Kc, (int)o->k,
                                                        nullptr, out).P2);
  int64_t row_floats = nq * fs_row_stride(npad);
  size_t row_bytes = (size_t)(dpad * 8 * fs_qtiles(slots) + row_floats) * sizeof(float);
  /* a balanced block (one per SM) stages its candidate rows where the device has room; a classic one would lose
   * its SM's second block */
  size_t stage_bytes = shape != 0 && stage_applies((int)ix->d)
                           ? (size_t)nq * kWarp * stage_stride((int)ix->d) * sizeof(float) : 0;
  if (row_bytes + stage_bytes > dv->fs_smem) stage_bytes = 0;
  row_bytes += stage_bytes;
  size_t smem = row_bytes > scan_bytes ? row_bytes : scan_bytes; /* within dv->fs_smem (set_fused_smem) */
  auto launch = [&]() -> ss_status {
    fs_args a;
    a.q = d_query, a.mean = dv->mean, a.ref_t = dv->ref_t, a.rn = dv->ref_tn, a.npad = npad;
    a.rs = fs_row_stride(npad), a.m = (int)m, a.d = (int)ix->d, a.dpad = dpad, a.nq = nq;
    a.stage = stage_bytes > 0;
    a.f = make_finish_args(ix, dv, a.q, nullptr, nullptr, Kc, Kc, (int)o->k, nullptr, out);
    a.f.tc = true; /* the rows hold TF32 values */
    kern<<<(unsigned)ceil_div(m, nq), nw * kWarp, smem, s>>>(a);
    SS_CUDA_TRY_LAUNCH(ctx, "knn fused distances, selection and finish");
    return SS_OK;
  };
  const void *p[] = {d_query, out.idx, out.dist, out.cert, dv->ref_t};
  const int64_t v[] = {m, (int64_t)Kc * 65536 + o->k, -1};
  return fused_graph_run(ctx, dv, s, p, v, launch, nq, ix->n, stats);
}

/* Reference tiles per k_filter block: one while the grid is at most kFlOneTileWaves waves (H100, 1,200 queries,
 * k 25, every grid n from 2^11 to 2^15 (up to 2,560 blocks): one tile a block was as fast or faster than the rule
 * below, e.g. 2^12 d 64 42 -> 40 us, d 128 60 -> 54, 2^13 d 128 73 -> 69, 2^15 d 256 327 -> 315; session 9);
 * beyond, the fewest waves × tiles per block over the splits (a block holds its query tile's thresholds and norms
 * across its tiles; the last wave should be full). */
constexpr int64_t kFlOneTileWaves = 16;
int filter_tiles_per_split(int64_t qtiles, int64_t ntiles, int sm_count) {
  int64_t slots = (int64_t)kFlBlocksPerSm * sm_count, best = 1, best_cost = INT64_MAX;
  if (qtiles * ntiles <= kFlOneTileWaves * slots) return 1;
  for (int64_t t = 1; t <= ntiles; t++) {
    int64_t blocks = qtiles * ceil_div(ntiles, t), cost = ceil_div(blocks, slots) * t;
    if (cost <= best_cost) best = t, best_cost = cost;
  }
  return (int)best;
}

/* The filter path (above) for m queries, in batches (whole kFlQ tiles) of at most knn.query_tile queries whose
 * lists fit kFlListBytes. */
ss_status filter_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                        int dpad, int64_t npad, const finish_out &out, ss_knn_stats *stats) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  int64_t n = ix->n, k = o->k;
  int64_t ns = n / kFlSampleDiv;
  ns = ns < kFlMinSample ? kFlMinSample : ns > kFlMaxSample ? kFlMaxSample : ns;
  if (ns > n) ns = n;
  int64_t nspad = ceil_div(ns, kFlR) * kFlR;
  /* steps 1-3 in one kernel while the sample rows fit in shared memory and its L2 reads stay small; the sample
   * view's layout follows (fixed per index) */
  bool fused_seed = nspad <= kFsSmemRefs && nspad * dpad <= kFlFusedSeedCells;
  SS_TRY(fused_view(ctx, ix, dv, dpad, ns, nspad, fused_seed, &dv->samp_t, &dv->samp_tn, s));
  int64_t cap = next_pow2(kFlListSlack * ceil_div(k * n, ns));
  cap = cap < kFlMinList ? kFlMinList : cap > kFlMaxList ? kFlMaxList : cap;
  /* queries per batch: the lists within kFlListBytes, at most knn.query_tile (whole kFlQ tiles, at least one) */
  int64_t Q = kFlListBytes / (cap * (int64_t)sizeof(int2)) / kFlQ * kFlQ;
  int64_t Qo = o->query_tile / kFlQ * kFlQ, mpad = ceil_div(m, kFlQ) * kFlQ;
  if (Q > Qo) Q = Qo > kFlQ ? Qo : kFlQ;
  if (Q > mpad) Q = mpad;
  SS_TRY(ws_ensure(ctx, &dv->fl_qt, (size_t)(Q * dpad) * sizeof(float), "KNN filter queries"));
  SS_TRY(ws_ensure(ctx, &dv->fl_qn, (size_t)Q * sizeof(float), "KNN filter query norms"));
  SS_TRY(ws_ensure(ctx, &dv->fl_tau, (size_t)Q * sizeof(float), "KNN filter thresholds"));
  SS_TRY(ws_ensure(ctx, &dv->fl_cnt, (size_t)Q * sizeof(int), "KNN filter list lengths"));
  SS_TRY(ws_ensure(ctx, &dv->fl_li, (size_t)(Q * cap) * sizeof(int2), "KNN filter lists"));
  flt_seed_kernel seed = kFilterSeed[lean_s_class(k)];
  if (!fused_seed)
    SS_TRY(ws_ensure(ctx, &dv->fl_lv, (size_t)(Q * nspad) * sizeof(float), "KNN filter sample rows"));
  size_t scan_bytes = finish_warp_smem(make_finish_args(ix, dv, d_query, nullptr, nullptr, Kc, Kc, (int)k, nullptr,
                                                        out).P2);
  int64_t qtiles = Q / kFlQ, ntiles = npad / kFlR, stiles = nspad / kFlR;
  int tps = filter_tiles_per_split(qtiles, ntiles, dv->sm_count), stps = filter_tiles_per_split(qtiles, stiles,
                                                                                                 dv->sm_count);
  auto launch = [&]() -> ss_status {
    for (int64_t q0 = 0; q0 < m; q0 += Q) {
      int64_t Qt = m - q0 < Q ? m - q0 : Q, Qtpad = ceil_div(Qt, kFlQ) * kFlQ;
      finish_out o_t = {out.idx + q0 * k, out.dist ? out.dist + q0 * k : nullptr, out.cert + q0};
      finish_args f = make_finish_args(ix, dv, d_query + q0 * ix->d, nullptr, nullptr, Kc, Kc, (int)k, nullptr, o_t);
      f.tc = true; /* the lists hold k_filter's TF32 values */
      flt_seed_args sa;
      memset(&sa, 0, sizeof(sa));
      sa.s.q = f.q, sa.s.mean = dv->mean, sa.s.m = (int)Qt, sa.s.d = (int)ix->d, sa.s.dpad = dpad, sa.s.f = f;
      sa.s.ref_t = dv->samp_t, sa.s.rn = dv->samp_tn, sa.s.npad = nspad, sa.s.rs = fs_row_stride(nspad);
      sa.qt = (float *)dv->fl_qt.p, sa.qn = (float *)dv->fl_qn.p, sa.tau = (float *)dv->fl_tau.p;
      sa.vals = (const float *)dv->fl_lv.p, sa.cnt = (int *)dv->fl_cnt.p;
      sa.mpad = Qtpad, sa.nspad = nspad, sa.k = (int)k;
      unsigned qblocks = (unsigned)(Qtpad / kSfWarps);
      /* balanced blocks (balanced_queries) for the padded batch (seed) and its queries (finish) */
      int nq_seed = balanced_queries(Qtpad, dv->sm_count), nq_fin = balanced_queries(Qt, dv->sm_count);
      flt_args fa;
      fa.qt = sa.qt, fa.qn = sa.qn, fa.tau = sa.tau, fa.ref_t = dv->samp_t, fa.rn = dv->samp_tn;
      fa.mpad = Qtpad, fa.npad = nspad, fa.dpad = dpad, fa.ntiles = (int)stiles, fa.tiles_per_split = stps;
      fa.cap = (int)cap, fa.cnt = sa.cnt, fa.lv = (float *)dv->fl_lv.p, fa.lp = (int2 *)dv->fl_li.p;
      sa.s.nq = fused_seed ? nq_seed : kSfWarps; /* k_filter_centre: blocks of kSfWarps */
      if (fused_seed) {
        /* the rows, or the staged queries; within kFusedSmemMax */
        size_t row_bytes = (size_t)nq_seed * (size_t)std::max(sa.s.rs, (int64_t)dpad) * sizeof(float);
        kFilterSeedFused[nq_seed > kSfWarps][lean_s_class(k)]<<<(unsigned)ceil_div(Qtpad, nq_seed), nq_seed * kWarp,
                                                                 row_bytes, s>>>(sa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter centring, sample and seed");
      } else {
        k_filter_centre<<<qblocks, kSfThreads, 0, s>>>(sa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter query centring");
        k_filter<true><<<dim3((unsigned)(Qtpad / kFlQ), (unsigned)ceil_div(stiles, stps)), kFlThreads, 0, s>>>(fa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter sample values");
        seed<<<qblocks, kSfThreads, 0, s>>>(sa);
        SS_CUDA_TRY_LAUNCH(ctx, "knn filter seed");
      }
      fa.ref_t = dv->ref_t, fa.rn = dv->ref_tn, fa.npad = npad, fa.ntiles = (int)ntiles, fa.tiles_per_split = tps;
      k_filter<false><<<dim3((unsigned)(Qtpad / kFlQ), (unsigned)ceil_div(ntiles, tps)), kFlThreads, 0, s>>>(fa);
      SS_CUDA_TRY_LAUNCH(ctx, "knn filter");
      lf_args la;
      la.lp = fa.lp, la.cnt = fa.cnt, la.cap = (int)cap, la.m = Qt, la.f = f;
      lf_kernel fin = kListFinish[nq_fin > kSfWarps][lean_s_class(k)][lean_pl_class(cap / kFlListSlack * 2)];
      fin<<<(unsigned)ceil_div(Qt, nq_fin), nq_fin * kWarp, scan_bytes, s>>>(la);
      SS_CUDA_TRY_LAUNCH(ctx, "knn filter list finish");
    }
    return SS_OK;
  };
  const void *p[] = {d_query, out.idx, out.dist, out.cert, dv->fl_qt.p, dv->fl_qn.p, dv->fl_tau.p, dv->fl_cnt.p,
                     dv->fl_lv.p, dv->fl_li.p, dv->samp_t, dv->ref_t};
  const int64_t v[] = {m, (int64_t)Kc * 65536 + k, -2, cap};
  return fused_graph_run(ctx, dv, s, p, v, launch, Q, (int64_t)tps * kFlR, stats);
}

/* The fused path: k_fused_small alone where fused_small_applies, beyond it the filter path; both are
 * replayed as a CUDA graph on repeated calls (graph_run). */
ss_status fused_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                       const finish_out &out, ss_knn_stats *stats) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  int dpad = (int)(ceil_div(ix->d, kFdimStep) * kFdimStep);
  int64_t npad = ceil_div(ix->n, kFr) * kFr;
  bool small = fused_small_applies(ix->n); /* fixed per index: so is the view's layout */
  SS_TRY(fused_view(ctx, ix, dv, dpad, ix->n, npad, small, &dv->ref_t, &dv->ref_tn, ss_cuda_stream(ix->be)));
  if (small) return fused_small_search(ctx, ix, o, d_query, m, Kc, dpad, npad, out, stats);
  return filter_search(ctx, ix, o, d_query, m, Kc, dpad, npad, out, stats);
}

/* auto: where the fused path applies (K' <= SS_KNN_FUSED_MAX_CANDIDATES, d <= SS_KNN_FUSED_MAX_DIM, n <=
 * kFusedAutoMaxRefs), the faster of the fused and the tiled path, measured on the first search of each
 * (GPU, n, d, m, K') class (log2 classes) and remembered for the process, like the strategy; the tiled path
 * beyond (the large cases, where the SGEMM's efficiency wins and a fused calibration would cost seconds). */
constexpr int64_t kFusedAutoMaxRefs = 65536;
constexpr int kPathCalibRepeats = 3; /* timed runs per path after the warm-ups; the fastest counts */
constexpr int kPathCalibWarmups = 2;  /* a plain call (buffers, strategy), then the graph capture */
struct path_slot {
  int device, n_class, d_class, m_class, kc_class, path;
};
std::mutex g_path_mu;
path_slot g_path[kCalibSlots];
int g_npath = 0;

path_slot path_class(const ss_knn_index *ix, int64_t m, int64_t Kc) {
  return path_slot{ss_cuda_of(ix->be)->device, log2_floor(ix->n), log2_floor(next_pow2(ix->d)),
                   log2_floor(next_pow2(m)), log2_floor(next_pow2(Kc)), SS_KNN_PATH_AUTO};
}

bool same_class(const path_slot &a, const path_slot &b) {
  return a.device == b.device && a.n_class == b.n_class && a.d_class == b.d_class && a.m_class == b.m_class &&
         a.kc_class == b.kc_class;
}

bool fused_applies(const ss_knn_index *ix, int64_t Kc) {
  return Kc <= SS_KNN_FUSED_MAX_CANDIDATES && ix->d <= SS_KNN_FUSED_MAX_DIM;
}

/* The path before calibration: forced, or what auto knows; SS_KNN_PATH_AUTO when auto must measure. A
 * forced path that does not apply runs the tiled path. */
int choose_path(const ss_knn_index *ix, const ss_knn_opts *o, int64_t m, int64_t Kc) {
  if (o->gemm_only) return SS_KNN_PATH_GEMM;
  if (o->path == SS_KNN_PATH_FUSED && fused_applies(ix, Kc)) return SS_KNN_PATH_FUSED;
  if (o->path != SS_KNN_PATH_AUTO || o->strategy != SS_KNN_AUTO || !fused_applies(ix, Kc) || ix->n > kFusedAutoMaxRefs)
    return SS_KNN_PATH_GEMM;
  path_slot c = path_class(ix, m, Kc);
  std::lock_guard<std::mutex> lock(g_path_mu);
  for (int i = 0; i < g_npath; i++)
    if (same_class(g_path[i], c)) return g_path[i].path;
  return SS_KNN_PATH_AUTO;
}

ss_status check_opts(ss_ctx *ctx, const ss_knn_index *ix, const ss_knn_opts *o, int64_t m, int64_t *Kc) {
  *Kc = ss_knn_candidates(o->k, ix->n);
  if (*Kc > SS_KNN_GPU_MAX_CANDIDATES)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "knn: k = %lld needs %lld candidates per query, more than the GPU limit "
                   "of %d (use --device cpu)", (long long)o->k, (long long)*Kc, SS_KNN_GPU_MAX_CANDIDATES);
  if (o->query_tile < 1 || o->ref_tile < 1)
    return ss_fail(ctx, SS_ERR_INPUT, "knn: query_tile and ref_tile must be >= 1, got %lld and %lld",
                   (long long)o->query_tile, (long long)o->ref_tile);
  if (m >= kNoIndex)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "knn: %lld queries in one call exceed the GPU limit of %d", (long long)m,
                   kNoIndex - 1);
  return SS_OK;
}

ss_status download(ss_ctx *ctx, cudaStream_t s, const knn_dev *dv, int64_t m, int64_t k, int64_t *idx, double *dist,
                   uint8_t *cert) {
  int64_t mk = m * k;
  std::vector<int> tmp;
  try {
    tmp.resize((size_t)mk);
  } catch (...) {
    return ss_fail(ctx, SS_ERR_NOMEM, "knn: out of host memory for %lld neighbour indices", (long long)mk);
  }
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(tmp.data(), dv->out_i.p, (size_t)mk * sizeof(int), cudaMemcpyDeviceToHost, s));
  if (dist) SS_CUDA_TRY(ctx, cudaMemcpyAsync(dist, dv->out_d.p, (size_t)mk * sizeof(double), cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(cert, dv->cert.p, (size_t)m, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  for (int64_t i = 0; i < mk; i++) idx[i] = tmp[(size_t)i];
  return SS_OK;
}

}  // namespace

extern "C" ss_status ss_knn_cuda_index_create(ss_ctx *ctx, ss_knn_index *ix) {
  knn_dev *dv = new (std::nothrow) knn_dev();
  if (!dv) return ss_fail(ctx, SS_ERR_NOMEM, "knn: out of host memory for the device index");
  ix->cuda = dv;
  int64_t n = ix->n, d = ix->d;
  if (n >= kNoIndex)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "knn: %lld reference points exceed the GPU limit of %d", (long long)n,
                   kNoIndex - 1);
  cudaStream_t s0 = ss_cuda_stream(ix->be);
  SS_CUDA_TRY(ctx, cudaStreamCreateWithFlags(&dv->sel, cudaStreamNonBlocking));
  for (int b = 0; b < 2; b++) {
    SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&dv->gemm_done[b], cudaEventDisableTiming));
    SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&dv->sel_done[b], cudaEventDisableTiming));
  }
  SS_CUDA_TRY(ctx, cudaEventCreate(&dv->t0));
  SS_CUDA_TRY(ctx, cudaEventCreate(&dv->t1));
  SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&dv->start, cudaEventDisableTiming));
  SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&dv->done, cudaEventDisableTiming));
  SS_CUDA_TRY(ctx, cudaDeviceGetAttribute(&dv->sm_count, cudaDevAttrMultiProcessorCount, ss_cuda_of(ix->be)->device));
  /* the largest finish buffers: K' = SS_KNN_GPU_MAX_CANDIDATES candidates and the scan buffer */
  int pmax = next_pow2(SS_KNN_GPU_MAX_CANDIDATES), scan = finish_scan_size(SS_KNN_GPU_MAX_CANDIDATES);
  SS_CUDA_TRY(ctx, cudaFuncSetAttribute(k_finish, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)finish_smem(pmax + 1, pmax > scan ? pmax : scan)));
  SS_TRY(set_fused_smem(ctx, ss_cuda_of(ix->be)->device, &dv->fs_smem));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref, n * d, "KNN references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref_c, n * d, "KNN centred references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref_norm, n, "KNN reference norms"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->mean, d, "KNN reference mean"));
  ss_dbuf<unsigned> max_bits;
  SS_TRY(max_bits.alloc(ctx, 1, "KNN norm maximum"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->ref, ix->ref, (size_t)(n * d) * sizeof(float), cudaMemcpyHostToDevice, s0));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->mean, ix->mean, (size_t)d * sizeof(float), cudaMemcpyHostToDevice, s0));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(max_bits.p, 0, sizeof(unsigned), s0));
  k_center<<<(unsigned)ceil_div(n, kThreads / kWarp), kThreads, 0, s0>>>(dv->ref, dv->mean, n, d, dv->ref_c,
                                                                          dv->ref_norm, max_bits.p, nullptr);
  SS_CUDA_TRY_LAUNCH(ctx, "knn reference centring");
  unsigned bits = 0;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(&bits, max_bits.p, sizeof(unsigned), cudaMemcpyDeviceToHost, s0));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s0));
  float mx;
  memcpy(&mx, &bits, sizeof(mx));
  ix->ref_norm_max = sqrt((double)mx);
  return SS_OK;
}

extern "C" void ss_knn_cuda_index_free(ss_knn_index *ix) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  if (!dv) return;
  if (dv->sel) cudaStreamSynchronize(dv->sel);
  cudaFree(dv->ref), cudaFree(dv->ref_c), cudaFree(dv->ref_norm), cudaFree(dv->mean);
  ws_buf *b[] = {&dv->q, &dv->qc, &dv->qn, &dv->dist_tile[0], &dv->dist_tile[1], &dv->run_v, &dv->run_i,
                 &dv->part_v, &dv->part_i, &dv->out_i, &dv->out_d, &dv->cert, &dv->tau,
                 &dv->fl_qt, &dv->fl_qn, &dv->fl_tau, &dv->fl_cnt, &dv->fl_lv, &dv->fl_li};
  for (ws_buf *x : b) cudaFree(x->p);
  cudaFree(dv->ref_t), cudaFree(dv->ref_tn), cudaFree(dv->samp_t), cudaFree(dv->samp_tn);
  if (dv->graph.exec) cudaGraphExecDestroy(dv->graph.exec);
  if (dv->fgraph.exec) cudaGraphExecDestroy(dv->fgraph.exec);
  if (dv->gemm_graph.exec) cudaGraphExecDestroy(dv->gemm_graph.exec);
  for (int i = 0; i < 2; i++) {
    if (dv->gemm_done[i]) cudaEventDestroy(dv->gemm_done[i]);
    if (dv->sel_done[i]) cudaEventDestroy(dv->sel_done[i]);
  }
  if (dv->start) cudaEventDestroy(dv->start);
  if (dv->done) cudaEventDestroy(dv->done);
  if (dv->t0) cudaEventDestroy(dv->t0);
  if (dv->t1) cudaEventDestroy(dv->t1);
  if (dv->sel) cudaStreamDestroy(dv->sel);
  delete dv;
  ix->cuda = nullptr;
}

const char *path_name(int path) {
  return path == SS_KNN_PATH_FUSED ? "fused" : "tiled";
}

/* One search on a given path (never auto). */
ss_status path_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, int path, const float *d_query, int64_t m,
                      int Kc, const finish_out &out, ss_knn_stats *stats) {
  if (path == SS_KNN_PATH_FUSED) return fused_search(ctx, ix, o, d_query, m, Kc, out, stats);
  return tiled_search(ctx, ix, o, d_query, m, Kc, out, stats);
}

/* auto path, first search of its class: every applicable path runs as repeated calls run it — a plain
 * call, a call that captures its CUDA graph, then kPathCalibRepeats timed replays (a path whose key cannot
 * be captured times plain launches) — and the fastest is remembered and logged; the caller's search then
 * runs it (a replay of the graph calibration captured, when its key is unchanged). Timing plain launches
 * instead (device run 1 of brief K4) preferred a one-launch path at 2^10 where the tiled path's graph was
 * faster. Synchronises. */
ss_status calibrate_path(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                         const finish_out &out, int *path) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  constexpr int kPaths = 2;
  const int paths[kPaths] = {SS_KNN_PATH_FUSED, SS_KNN_PATH_GEMM};
  float ms[kPaths] = {INFINITY, INFINITY};
  ss_status st = SS_OK;
  /* the paths' runs interleaved (each keeps its own graph), so that the GPU's clock ramp at the process's first
   * search does not favour the path timed last (2^10, d 32 in session 7's bench: tiled 26.8 over fused 21.2 us) */
  for (int rep = 0; rep < kPathCalibWarmups + kPathCalibRepeats && st == SS_OK; rep++) {
    for (int p = 0; p < kPaths && st == SS_OK; p++) {
      st = cudaEventRecord(dv->t0, s) == cudaSuccess ? SS_OK : ss_fail(ctx, SS_ERR_DEVICE, "knn: event record failed");
      if (st == SS_OK) st = path_search(ctx, ix, o, paths[p], d_query, m, Kc, out, nullptr);
      float t = INFINITY;
      if (st == SS_OK && (cudaEventRecord(dv->t1, s) != cudaSuccess || cudaEventSynchronize(dv->t1) != cudaSuccess ||
                          cudaEventElapsedTime(&t, dv->t0, dv->t1) != cudaSuccess))
        st = ss_fail(ctx, SS_ERR_DEVICE, "knn: path calibration timing failed");
      if (rep >= kPathCalibWarmups && t < ms[p]) ms[p] = t;
    }
  }
  SS_TRY(st);
  int best = 0;
  for (int p = 1; p < kPaths; p++)
    if (ms[p] < ms[best]) best = p;
  if (ms[best] == INFINITY) best = kPaths - 1; /* nothing timed (cannot happen): the tiled path */
  path_slot c = path_class(ix, m, Kc);
  c.path = paths[best];
  *path = c.path;
  ss_log_info(ctx, "knn: auto path on GPU %d for n ~ 2^%d, d <= 2^%d, m <= 2^%d, %d candidates: %s (fused %.3f ms, "
              "tiled %.3f ms)", c.device, c.n_class, c.d_class, c.m_class, Kc, path_name(c.path), ms[0], ms[1]);
  std::lock_guard<std::mutex> lock(g_path_mu);
  if (g_npath < kCalibSlots) g_path[g_npath++] = c;
  return SS_OK;
}

extern "C" ss_status ss_knn_cuda_search_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o,
                                               const float *d_query, int64_t m, int32_t *d_idx, double *d_dist,
                                               uint8_t *d_certified, ss_knn_stats *stats) {
  int64_t Kc;
  SS_TRY(check_opts(ctx, ix, o, m, &Kc));
  if (m == 0) {
    if (stats) stats->candidates = Kc, stats->path = SS_KNN_PATH_GEMM, stats->graph = 0;
    return SS_OK;
  }
  finish_out out = {(int *)d_idx, d_dist, d_certified};
  int path = choose_path(ix, o, m, Kc);
  if (path == SS_KNN_PATH_AUTO) SS_TRY(calibrate_path(ctx, ix, o, d_query, m, (int)Kc, out, &path));
  if (stats) {
    stats->candidates = Kc;
    stats->path = path;
    stats->graph = 0;
  }
  return path_search(ctx, ix, o, path, d_query, m, (int)Kc, out, stats);
}

extern "C" ss_status ss_knn_cuda_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *query,
                                        int64_t m, int64_t *idx, double *dist, uint8_t *certified,
                                        ss_knn_stats *stats) {
  int64_t Kc;
  SS_TRY(check_opts(ctx, ix, o, m, &Kc));
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  int64_t d = ix->d, mk = m * o->k;
  SS_TRY(ws_ensure(ctx, &dv->q, (size_t)(m * d) * sizeof(float), "KNN queries"));
  SS_TRY(ws_ensure(ctx, &dv->out_i, (size_t)mk * sizeof(int), "KNN neighbour indices"));
  SS_TRY(ws_ensure(ctx, &dv->out_d, (size_t)mk * sizeof(double), "KNN neighbour distances"));
  SS_TRY(ws_ensure(ctx, &dv->cert, (size_t)m, "KNN certificates"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->q.p, query, (size_t)(m * d) * sizeof(float), cudaMemcpyHostToDevice, s));
  if (o->gemm_only) { /* the old end-to-end yardstick: upload, centring and the SGEMM tiles */
    search_run r;
    r.ix = ix, r.dv = dv, r.s0 = s;
    SS_TRY(ws_ensure(ctx, &dv->qc, (size_t)(m * d) * sizeof(float), "KNN centred queries"));
    SS_TRY(ws_ensure(ctx, &dv->qn, (size_t)m * sizeof(float), "KNN query norms"));
    SS_TRY(centre_queries(ctx, r, (const float *)dv->q.p, m));
    SS_TRY(ss_knn_cuda_search_device(ctx, ix, o, (const float *)dv->qc.p, m, nullptr, nullptr, nullptr, stats));
    SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
    return SS_OK;
  }
  SS_TRY(ss_knn_cuda_search_device(ctx, ix, o, (const float *)dv->q.p, m, (int32_t *)dv->out_i.p,
                                   dist ? (double *)dv->out_d.p : nullptr, (uint8_t *)dv->cert.p, stats));
  return download(ctx, s, dv, m, o->k, idx, dist, certified);
}

extern "C" ss_status ss_knn_cuda_time_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o,
                                            const float *d_query, int64_t m, int32_t *d_idx, double *d_dist,
                                            uint8_t *d_certified, int repeats, double *median_s, ss_knn_stats *stats) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  std::vector<float> ms;
  SS_TRY(ss_knn_cuda_search_device(ctx, ix, o, d_query, m, d_idx, d_dist, d_certified, stats));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  for (int rep = 0; rep < repeats; rep++) {
    SS_CUDA_TRY(ctx, cudaEventRecord(dv->t0, s));
    SS_TRY(ss_knn_cuda_search_device(ctx, ix, o, d_query, m, d_idx, d_dist, d_certified, stats));
    SS_CUDA_TRY(ctx, cudaEventRecord(dv->t1, s));
    SS_CUDA_TRY(ctx, cudaEventSynchronize(dv->t1));
    float t;
    SS_CUDA_TRY(ctx, cudaEventElapsedTime(&t, dv->t0, dv->t1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  *median_s = ms.empty() ? 0.0 : 1e-3 * (double)ms[ms.size() / 2];
  return SS_OK;
}
