/* knn_fused.cu — the fused path's one-kernel form for up to 2,048 references (k_fused_small: tensor-core distances
 * into shared memory, then the lean selection and finish, one launch per search), the fused kernels' shared-memory
 * opt-ins and the reference views both fused forms read (k_fused_refs). */
#include <algorithm>

#include "stages/knn/knn_fused.cuh"

namespace knn_cuda {
namespace {

/* ---- the fused path's reference views ------------------------------------------------------------------
 * The fused kernels (k_fused_small, k_filter) read the centred references through ref_t: transposed and
 * zero-padded (dpad = d rounded up to kFdimStep, npad = n rounded up to kFr), so that their loads are
 * coalesced float4s and need no bounds checks (padding references have norm +inf: they never pass).
 * ref_t (dpad × npad cells: centred references, transposed or in fragment order (below), zeros beyond d and count)
 * and rn (npad norms, +inf beyond count): the fused kernels' coalesced, bounds-free view of `count` of the n
 * references, its reference c being reference c n / count (all of them in order when count = n; the filter path's
 * strided sample). */
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

/* ---- k_fused_small (fused_small_applies, K' <= 64, d <= 256): one kernel, no centring, no SGEMM ------------
 * A block of kSfWarps queries (a balanced launch: up to kQbMax, balanced_queries) against every reference: it
 * prepares its queries (fs_prepare_queries: B fragments, float norms, what the finish needs), then its warps
 * compute the values max(‖q'‖² + ‖r'‖² − 2 q'·r', 0) on the tensor cores (fs_distances: TF32 m16n8k8 MMAs, the
 * references as the 16 rows in the view's fragment order, the block's queries as one or two n8 columns) into the
 * queries' rows in shared memory; after a barrier each warp selects and finishes one query from its row
 * (lean_select_finish, W = 1), with the TF32 bound (tc_error_bound, finish_args.tc) on the values. Rows in shared memory matter: read
 * back from L2, the selection's loads of a row waited on each other (clock64 phases on the H100, 2^10, d 32: ~7 k
 * cycles for the first pass over 1,024 values of an SGEMM row). The tensor cores matter too: an FFMA distance
 * phase (a thread per 4 references × the block's queries) took ~8.6 k cycles at 2^10 d 32 and ~29 k at d 128,
 * latency-bound at ~2.5 warps per scheduler (ncu: L2 12 %, L1 31 %). Clusters sharing the references (4 blocks,
 * each a quarter of them for the cluster's 40 queries, values sent to their owners through distributed shared
 * memory) were slower with either distance phase (with the MMAs: 2^10 d 32 15 -> 19 us; the cluster barriers and
 * remote stores cost more than the L2 reads they save). The filter path takes over beyond fused_small_applies. */
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
    flagged = lean_select_finish<PL, S, kExBlocksLean>(a.f, src, valid ? (int)a.f.n : 0, 1, w, 0, qq, valid, E, ls, w,
                                                       lane, stage);
  }
  finish_block_scans(a.f, q0, ls.need_scan, (int)(a.m - q0 < nq ? a.m - q0 : nq), flagged, sm_fs);
}
using fs_kernel = void (*)(fs_args);
#define SS_FS_ROW(NQ, NW, S) \
  { \
    k_fused_small<NQ, NW, kSfMinPerLane, S>, k_fused_small<NQ, NW, 2 * kSfMinPerLane, S>, \
        k_fused_small<NQ, NW, kSfMaxPerLane, S> \
  }
/* [shape: classic, balanced, balanced and wide][S class][PL class] */
const fs_kernel kFusedSmall[3][2][3] = {{SS_FS_ROW(kSfWarps, kSfWarps, 2), SS_FS_ROW(kSfWarps, kSfWarps, 4)},
                                        {SS_FS_ROW(kQbMax, kQbMax, 2), SS_FS_ROW(kQbMax, kQbMax, 4)},
                                        {SS_FS_ROW(kQbMax, kFsWideWarps, 2), SS_FS_ROW(kQbMax, kFsWideWarps, 4)}};
#undef SS_FS_ROW

} // namespace

/* k_fused_small runs the fused path while the rows fit in shared memory, the filter path beyond. H100, 1,200
 * queries, k 25, 2^11: k_fused_small vs the filter path d 32-256: 19 / 24 / 34 / 52 us vs - / 31 / 42 / 64 (with an
 * FFMA distance phase the filter path won from 2^11 d 64 on). */
bool fused_small_applies(int64_t n) { return n <= kFsSmemRefs; }

/* k_fused_small's shared-memory opt-in, once per index: at least kFusedSmemMax, and what the device's opt-in maximum
 * leaves beyond the kernel's static shared memory (the same value every time on a device), for the balanced blocks'
 * staged candidate rows; *fs_smem receives the least over the kernels. */
ss_status fused_setup(ss_ctx *ctx, int device, size_t *fs_smem) {
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
  k_fused_refs<<<grid, kThreads, 0, s>>>(dv->ref_c, dv->ref_norm, ix->n, count, (int)ix->d, dpad, npad, frag, *view,
                                         *norms);
  SS_CUDA_TRY_LAUNCH(ctx, "knn fused reference view");
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
  size_t scan_bytes = finish_warp_smem(
      make_finish_args(ix, dv, d_query, nullptr, nullptr, Kc, Kc, (int)o->k, nullptr, out).P2);
  int64_t row_floats = nq * fs_row_stride(npad);
  size_t row_bytes = (size_t)(dpad * 8 * fs_qtiles(slots) + row_floats) * sizeof(float);
  /* a balanced block (one per SM) stages its candidate rows where the device has room; a classic one would lose
   * its SM's second block */
  size_t stage_bytes = shape != 0 && stage_applies((int)ix->d)
                           ? (size_t)nq * kWarp * stage_stride((int)ix->d) * sizeof(float)
                           : 0;
  if (row_bytes + stage_bytes > dv->fs_smem) stage_bytes = 0;
  row_bytes += stage_bytes;
  size_t smem = row_bytes > scan_bytes ? row_bytes : scan_bytes; /* within dv->fs_smem (fused_setup) */
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

} // namespace knn_cuda
