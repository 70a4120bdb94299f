/* knn_index.cu — the device index every path searches: the references (original and centred), their norms and mean
 * on the device, the selection stream, the events and the grow-only work buffers; created and freed with the
 * ss_knn_index (ix->cuda). */
#include <new>

#include "stages/knn/knn_common.cuh"

namespace knn_cuda {

ss_status ws_ensure(ss_ctx *ctx, ws_buf *b, size_t bytes, const char *what) {
  if (bytes <= b->bytes) return SS_OK;
  cudaFree(b->p);
  b->p = nullptr;
  b->bytes = 0;
  SS_TRY(ss_cuda_malloc(ctx, &b->p, bytes, what));
  b->bytes = bytes;
  return SS_OK;
}

size_t ws_held(const knn_dev *dv) {
  const ws_buf *b[] = {&dv->q,      &dv->qc,     &dv->qn,     &dv->dist_tile[0], &dv->dist_tile[1],
                       &dv->run_v,  &dv->run_i,  &dv->part_v, &dv->part_i,       &dv->out_i,
                       &dv->out_d,  &dv->cert,   &dv->tau,    &dv->fl_qt,        &dv->fl_qn,
                       &dv->fl_tau, &dv->fl_cnt, &dv->fl_lv,  &dv->fl_li};
  size_t s = 0;
  for (const ws_buf *x : b) s += x->bytes;
  return s;
}

} // namespace knn_cuda

using namespace knn_cuda;

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
  SS_TRY(tiled_setup(ctx));
  SS_TRY(fused_setup(ctx, ss_cuda_of(ix->be)->device, &dv->fs_smem));
  SS_TRY(filter_setup(ctx));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref, n * d, "KNN references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref_c, n * d, "KNN centred references"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->ref_norm, n, "KNN reference norms"));
  SS_TRY(SS_CUDA_ALLOC(ctx, dv->mean, d, "KNN reference mean"));
  ss_dbuf<unsigned> max_bits;
  SS_TRY(max_bits.alloc(ctx, 1, "KNN norm maximum"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->ref, ix->ref, (size_t)(n * d) * sizeof(float), cudaMemcpyHostToDevice, s0));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dv->mean, ix->mean, (size_t)d * sizeof(float), cudaMemcpyHostToDevice, s0));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(max_bits.p, 0, sizeof(unsigned), s0));
  SS_TRY(centre_rows(ctx, s0, dv->ref, dv->mean, n, d, dv->ref_c, dv->ref_norm, max_bits.p, nullptr,
                     "knn reference centring"));
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
  ws_buf *b[] = {&dv->q,      &dv->qc,     &dv->qn,     &dv->dist_tile[0], &dv->dist_tile[1], &dv->run_v, &dv->run_i,
                 &dv->part_v, &dv->part_i, &dv->out_i,  &dv->out_d,        &dv->cert,         &dv->tau,   &dv->fl_qt,
                 &dv->fl_qn,  &dv->fl_tau, &dv->fl_cnt, &dv->fl_lv,        &dv->fl_li};
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
