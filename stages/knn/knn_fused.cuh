/* knn_fused.cuh — what the fused path's two forms share (k_fused_small, and the filter path's one-kernel seed and
 * query centring): the fragment-ordered reference view's layout, the query preparation, the tensor-core (TF32)
 * distance phase into rows in shared memory, the kernels' shared-memory bound and the replay of their launches as
 * the index's fused CUDA graph. */
#ifndef SS_KNN_FUSED_CUH
#define SS_KNN_FUSED_CUH

#include "stages/knn/knn_lean.cuh"

namespace knn_cuda {

/* rows in shared memory up to this many (padded) references: kSfWarps rows of 2,048 floats, 64 KB a block,
 * two blocks per SM as the registers allow (a balanced block: up to kQbMax rows, 96 KB, one block per SM) */
constexpr int64_t kFsSmemRefs = 2048;
/* a row's stride is npad + kFsRowPad floats: the MMA epilogue's four query rows per store then fall in four
 * different bank octets (npad is a multiple of 128), and rows stay 16-byte aligned */
constexpr int kFsRowPad = 4;
inline int64_t fs_row_stride(int64_t npad) { return npad + kFsRowPad; }

struct fs_args {
  const float *q, *mean;   /* queries (original coordinates), the reference mean */
  const float *ref_t, *rn; /* the references' view (fragment order: k_fused_refs) and their norms (+inf padding) */
  int64_t npad, rs;        /* padded references; the stride of the rows in shared memory (fs_row_stride) */
  int m, d, dpad;
  int nq;     /* queries per block (<= the block's warps) */
  bool stage; /* k_fused_small: the lean finish stages its candidate rows after the block's rows (stage_rows) */
  finish_args f;
};

/* Query slots as MMA columns: n8 tiles of queries, and the shared-memory floats of their B fragments */
constexpr int fs_qtiles(int slots) { return (slots + 7) / 8; }
constexpr int fs_qfrag_floats(int slots) { return SS_KNN_FUSED_MAX_DIM * 8 * fs_qtiles(slots); }

/* The small kernels' layout (k_fused_small, k_filter_seed_fused): the same values in the order of the TF32 MMA's A
 * fragments (m16n8k8, references as the 16 rows), so that a lane's fragment for one k8 step of one m16 tile is a
 * float4 and a warp's load of it 512 contiguous bytes: float4 (mt dpad / 8 + ks) 32 + lane holds, for g = lane / 4
 * and t = lane % 4, references 16 mt + g (+ 8) at coordinates 8 ks + t (+ 4) in the order (g, t), (g + 8, t),
 * (g, t + 4), (g + 8, t + 4). */
constexpr int kTcM = 16; /* references per m16 tile */

/* Dynamic shared memory of the fused kernels: the queries' B fragments and up to kQbMax rows of kFsSmemRefs floats
 * (k_fused_small; the seed's fragments are static), which also holds the scan buffer of any K' the fused path
 * takes. Beyond 48 KB (static + dynamic) a kernel needs the opt-in, set once per index (always the same value, so
 * indices created concurrently do not race) rather than on every search. */
constexpr size_t kFusedSmemMax = (size_t)(fs_qfrag_floats(kQbMax) + kQbMax * (kFsSmemRefs + kFsRowPad)) * sizeof(float);
static_assert(finish_warp_smem(finish_scan_size(SS_KNN_FUSED_MAX_CANDIDATES)) <= kFusedSmemMax, "the scan buffer fits");
/* finish_exact_scan's buffer (finish_scan_size, sized for kThreads) takes a round of a kQbMax-warp block */
static_assert(finish_scan_size(SS_KNN_FUSED_MAX_CANDIDATES) >= SS_KNN_FUSED_MAX_CANDIDATES + 2 * kQbMax * kWarp,
              "a balanced block's exact scan");

/* The fused paths' common tail: their launches run (or replay) as the index's fused graph, keyed by the pointers
 * and values they bake in (each path tags its values: -1 small, -2 filter); the stats report the warp strategy
 * (one warp per query selects) and the path's tiles. */
template <size_t NP, size_t NV, typename F>
ss_status fused_graph_run(ss_ctx *ctx, knn_dev *dv, cudaStream_t s, const void *const (&p)[NP], const int64_t (&v)[NV],
                          F launch, int64_t query_tile, int64_t ref_tile, ss_knn_stats *stats) {
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

namespace {

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
  for (int i = first; i < 8 * NT; i += blockDim.x / kWarp) {                /* uniform per warp */
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
 * group's reference norms are one round trip, then its MMAs run). A ring of steps (the next step's loads issued
 * before a step's MMAs) apparently waited for every load in flight at its first MMA of a ring turn (ncu's stall
 * samples: all on that MMA; a third ring slot changed nothing), so a batch of 4 halves the waits. H100, 1,200
 * queries, k 25 (clock64 per warp), ring -> batch: the distance phase at 2^11 d 32 10.8 k -> 10.2 k cycles,
 * 2^10 d 128 11.1 k -> 10.6 k; ratio to the GEMM at 2^11 d 32 1.50-1.52 -> 1.48-1.49. A batch of 8 spilled.
 * No branch lies between a batch's loads and its MMAs: a step beyond the last is loaded from the last (a valid
 * address) and zeroed, because ptxas waited for the loads in flight at such a branch — ncu's samples (2^10 d 32)
 * had the norms' round trip waited on at the per-step guard, before the fragments' loads were issued. */
constexpr int kFsGroup = 4, kFsBatch = 4;

/* The values max(‖q'‖² + ‖r'‖² − 2 q'·r', 0) of the block's a.nq queries from q0 (qf, qn_s: fs_prepare_queries)
 * against the npad references of the fragment view, into the rows (row i at rows + i a.rs; queries beyond a.m
 * skipped): warp w takes m16 tiles w, w + NW, ... in groups of kFsGroup, kFsBatch steps of A fragments at a time. A
 * thread's four query slots (8 nt + 2 t + e) keep their norms and row offsets in registers: an epilogue that
 * re-read qn_s for every value waited on each read (ncu's samples). */
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
          for (int nt = 0; nt < NT; nt++) mma_tf32(acc[j][nt], af, __float_as_uint(b[nt].x), __float_as_uint(b[nt].y));
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

} // namespace
} // namespace knn_cuda
#endif
