/* knn.cu — KNN on the GPU, the chooser: the CUDA entry points of knn.h and which path runs a search. The families:
 *  - tiled (knn_tiled.cu): cuBLAS SGEMM tiles of −2 q·r, the warp queue keeps each chunk's K' best, the exact finish;
 *    any K' <= SS_KNN_GPU_MAX_CANDIDATES, any d, any n (several reference tiles, double-buffered on two streams);
 *  - fused (K' <= 64, d <= 256; no distance matrix in memory): up to 2,048 references one kernel (knn_fused.cu),
 *    beyond it the filter path (knn_filter.cu);
 *  - auto: where the fused path applies and n <= 65,536, both are timed as repeated calls run them on an index's
 *    first search of each size class, and the faster is kept by the index; the tiled path everywhere else.
 * The shared parts are in knn_common.cuh (state, finish), knn_lean.cuh (the lean selection and finish) and
 * knn_fused.cuh (the fused kernels' query preparation and tensor-core distances); the index in knn_index.cu. */
#include <algorithm>
#include <vector>

#include "stages/knn/knn_common.cuh"

namespace knn_cuda {
namespace {

/* auto: where the fused path applies (K' <= SS_KNN_FUSED_MAX_CANDIDATES, d <= SS_KNN_FUSED_MAX_DIM, n <=
 * kFusedAutoMaxRefs), the faster of the fused and the tiled path, measured on the index's first search of each
 * (n, d, m, K') class (log2 classes) and remembered by the index; the tiled path beyond (the large cases, where the
 * SGEMM's efficiency wins and a fused calibration would cost seconds). The measurement matters off the benchmark's
 * uniform rows: where neighbour distances are small against the TF32 error bound (tight clusters far from the
 * mean), the fused path's lists overflow into exact scans and the tiled path wins. */
constexpr int64_t kFusedAutoMaxRefs = 65536;
constexpr int kPathCalibRepeats = 3; /* timed runs per path after the warm-ups; the fastest counts */
constexpr int kPathCalibWarmups = 2; /* a plain call (work buffers), then the graph capture */

path_choice path_class(const ss_knn_index *ix, int64_t m, int64_t Kc) {
  return path_choice{log2_floor(ix->n), log2_floor(next_pow2(ix->d)), log2_floor(next_pow2(m)),
                     log2_floor(next_pow2(Kc)), SS_KNN_PATH_AUTO};
}

bool same_class(const path_choice &a, const path_choice &b) {
  return a.n_class == b.n_class && a.d_class == b.d_class && a.m_class == b.m_class && a.kc_class == b.kc_class;
}

bool fused_applies(const ss_knn_index *ix, int64_t Kc) {
  return Kc <= SS_KNN_FUSED_MAX_CANDIDATES && ix->d <= SS_KNN_FUSED_MAX_DIM;
}

/* The path before calibration: forced, or what auto knows; SS_KNN_PATH_AUTO when auto must measure. A forced path
 * that does not apply runs the tiled path; so does any strategy other than auto (a k-selection names the tiled
 * path). */
int choose_path(const ss_knn_index *ix, const ss_knn_opts *o, int64_t m, int64_t Kc) {
  if (o->gemm_only) return SS_KNN_PATH_GEMM;
  if (o->path == SS_KNN_PATH_FUSED && fused_applies(ix, Kc)) return SS_KNN_PATH_FUSED;
  if (o->path != SS_KNN_PATH_AUTO || o->strategy != SS_KNN_AUTO || !fused_applies(ix, Kc) || ix->n > kFusedAutoMaxRefs)
    return SS_KNN_PATH_GEMM;
  const knn_dev *dv = (const knn_dev *)ix->cuda;
  path_choice c = path_class(ix, m, Kc);
  for (int i = 0; i < dv->n_paths; i++)
    if (same_class(dv->paths[i], c)) return dv->paths[i].path;
  return SS_KNN_PATH_AUTO;
}

ss_status check_opts(ss_ctx *ctx, const ss_knn_index *ix, const ss_knn_opts *o, int64_t m, int64_t *Kc) {
  *Kc = ss_knn_candidates(o->k, ix->n);
  if (*Kc > SS_KNN_GPU_MAX_CANDIDATES)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED,
                   "knn: k = %lld needs %lld candidates per query, more than the GPU limit "
                   "of %d (use --device cpu)",
                   (long long)o->k, (long long)*Kc, SS_KNN_GPU_MAX_CANDIDATES);
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
  if (dist)
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(dist, dv->out_d.p, (size_t)mk * sizeof(double), cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(cert, dv->cert.p, (size_t)m, cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  for (int64_t i = 0; i < mk; i++) idx[i] = tmp[(size_t)i];
  return SS_OK;
}

const char *path_name(int path) { return path == SS_KNN_PATH_FUSED ? "fused" : "tiled"; }

/* The fused path: k_fused_small alone where fused_small_applies, beyond it the filter path; both are replayed as a
 * CUDA graph on repeated calls (graph_run). */
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

/* One search on a given path (never auto). */
ss_status path_search(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, int path, const float *d_query, int64_t m,
                      int Kc, const finish_out &out, ss_knn_stats *stats) {
  if (path == SS_KNN_PATH_FUSED) return fused_search(ctx, ix, o, d_query, m, Kc, out, stats);
  return tiled_search(ctx, ix, o, d_query, m, Kc, out, stats);
}

/* auto path, first search of its class: every applicable path runs as repeated calls run it — a plain call, a call
 * that captures its CUDA graph, then kPathCalibRepeats timed replays (a path whose key cannot be captured times
 * plain launches) — and the fastest is remembered by the index and logged; the caller's search then runs it (a
 * replay of the graph calibration captured, when its key is unchanged). Timing plain launches instead preferred a
 * one-launch path at 2^10 where the tiled path's graph was faster. Synchronises. */
ss_status calibrate_path(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query, int64_t m, int Kc,
                         const finish_out &out, int *path) {
  knn_dev *dv = (knn_dev *)ix->cuda;
  cudaStream_t s = ss_cuda_stream(ix->be);
  constexpr int kPaths = 2;
  const int paths[kPaths] = {SS_KNN_PATH_FUSED, SS_KNN_PATH_GEMM};
  float ms[kPaths] = {INFINITY, INFINITY};
  ss_status st = SS_OK;
  /* the paths' runs interleaved (each keeps its own graph), so that the GPU's clock ramp at the process's first
   * search does not favour the path timed last (2^10, d 32: tiled 26.8 over fused 21.2 us, timed one after the
   * other) */
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
  path_choice c = path_class(ix, m, Kc);
  c.path = paths[best];
  *path = c.path;
  ss_log_info(ctx,
              "knn: auto path on GPU %d for n ~ 2^%d, d <= 2^%d, m <= 2^%d, %d candidates: %s (fused %.3f ms, "
              "tiled %.3f ms)",
              ss_cuda_of(ix->be)->device, c.n_class, c.d_class, c.m_class, Kc, path_name(c.path), ms[0], ms[1]);
  if (dv->n_paths < kPathSlots) dv->paths[dv->n_paths++] = c;
  return SS_OK;
}

} // namespace
} // namespace knn_cuda

using namespace knn_cuda;

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
  if (o->gemm_only) { /* the end-to-end yardstick: upload, centring (no thresholds to reset) and the SGEMM tiles */
    SS_TRY(ws_ensure(ctx, &dv->qc, (size_t)(m * d) * sizeof(float), "KNN centred queries"));
    SS_TRY(ws_ensure(ctx, &dv->qn, (size_t)m * sizeof(float), "KNN query norms"));
    SS_TRY(centre_rows(ctx, s, (const float *)dv->q.p, dv->mean, m, d, (float *)dv->qc.p, (float *)dv->qn.p, nullptr,
                       nullptr, "knn query centring"));
    SS_TRY(ss_knn_cuda_search_device(ctx, ix, o, (const float *)dv->qc.p, m, nullptr, nullptr, nullptr, stats));
    SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
    return SS_OK;
  }
  SS_TRY(ss_knn_cuda_search_device(ctx, ix, o, (const float *)dv->q.p, m, (int32_t *)dv->out_i.p,
                                   dist ? (double *)dv->out_d.p : nullptr, (uint8_t *)dv->cert.p, stats));
  return download(ctx, s, dv, m, o->k, idx, dist, certified);
}

extern "C" ss_status ss_knn_cuda_time_device(ss_ctx *ctx, ss_knn_index *ix, const ss_knn_opts *o, const float *d_query,
                                             int64_t m, int32_t *d_idx, double *d_dist, uint8_t *d_certified,
                                             int repeats, double *median_s, ss_knn_stats *stats) {
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
