/* drivers/frontend.cu — the front end's chunk pass on the GPU (frontend_internal.h): a reader thread
 * copies the source's chunks into pinned buffers; the main thread runs each chunk on one of two
 * lanes (a stream with its own device buffers), so that chunk i's upload, conversion and filter
 * overlap chunk i−1's detection, projection and download. Spikes come back per chunk and are
 * appended in chunk order, as on the CPU; the stages are the CUDA twins in stages/filter/filter.cu,
 * stages/detect/detect.cu and stages/features/features_pca.cu. */
#include <pthread.h>
#include <string.h>

#include <algorithm>

#include "core/cuda_util.cuh"
#include "drivers/frontend_internal.h"
#include "core/log.h"

namespace {

constexpr int kSlots = 3;             /* pinned input buffers: reading, uploading, spare */
constexpr int kLanes = 2;             /* chunk i on lane i % 2 */
constexpr double kMemFraction = 0.25; /* of free device memory for the lanes' chunk buffers */
/* device bytes per sample and channel in one lane: raw int16, µV, filtered, the filter's
 * intermediate pass and detection's node image (4 bytes each), with room for the scratch */
constexpr double kLaneBytesPerValue = 2 + 4 * 4 + 6;
constexpr double kMinChunkS = 1.0; /* below this the margins dominate: refuse instead */
constexpr int kThreads = 256;

/* --- the reader thread -------------------------------------------------------------------------- */

struct in_slot {
  int16_t *host = nullptr; /* pinned */
  size_t cap = 0;          /* values */
  ss_chunk meta{};
  cudaEvent_t uploaded = nullptr; /* the slot may be refilled once this has completed */
  bool full = false;
  bool pending_upload = false;
};

struct reader {
  int device = 0; /* the backend's: a new thread starts on device 0 */
  ss_source *src = nullptr;
  int64_t n_chunks = 0;
  in_slot slot[kSlots];
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
  bool stop = false;
  ss_ctx ctx{};
  ss_status st = SS_OK;
  int64_t failed_at = -1; /* chunk whose read failed */
  double busy_s = 0;
};

static void *reader_main(void *arg) {
  reader *r = (reader *)arg;
  cudaSetDevice(r->device);
  for (int64_t i = 0; i < r->n_chunks; i++) {
    in_slot &s = r->slot[i % kSlots];
    pthread_mutex_lock(&r->mu);
    while (s.full && !r->stop) pthread_cond_wait(&r->cv, &r->mu);
    bool stop = r->stop;
    pthread_mutex_unlock(&r->mu);
    if (stop) break;
    if (s.pending_upload) cudaEventSynchronize(s.uploaded); /* the previous chunk in it is on the device */
    double t0 = ss_now();
    ss_chunk ch;
    ss_status st = ss_source_chunk(&r->ctx, r->src, i, &ch);
    size_t count = 0;
    if (st == SS_OK) {
      count = (size_t)(ch.left + ch.n + ch.right) * (size_t)ch.n_channels;
      if (count > s.cap)
        st = ss_fail(&r->ctx, SS_ERR_INTERNAL, "front end: chunk %lld larger than its buffer", (long long)i);
    }
    if (st == SS_OK) {
      memcpy(s.host, ch.data, count * sizeof(int16_t));
      s.meta = ch;
      s.meta.data = s.host;
    }
    r->busy_s += ss_now() - t0;
    pthread_mutex_lock(&r->mu);
    if (st != SS_OK) {
      r->st = st;
      r->failed_at = i;
    }
    s.full = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (st != SS_OK) break;
  }
  return nullptr;
}

/* Wait for chunk i; SS_OK with *out set, or the reader's error in ctx. */
static ss_status reader_take(ss_ctx *ctx, reader *r, int64_t i, in_slot **out, double *wait_s) {
  in_slot &s = r->slot[i % kSlots];
  double t0 = ss_now();
  pthread_mutex_lock(&r->mu);
  while (!s.full) pthread_cond_wait(&r->cv, &r->mu);
  bool failed = r->failed_at == i;
  pthread_mutex_unlock(&r->mu);
  *wait_s += ss_now() - t0;
  if (failed) return ss_fail(ctx, r->st, "%s", ss_error_message(&r->ctx));
  *out = &s;
  return SS_OK;
}

/* The slot's data are queued for upload behind `uploaded`: the reader may refill it after that. */
static void reader_release(reader *r, in_slot *s) {
  pthread_mutex_lock(&r->mu);
  s->full = false;
  s->pending_upload = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

static void reader_stop(reader *r) {
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
}

/* --- lanes -------------------------------------------------------------------------------------- */

enum { EV_START, EV_UPLOADED, EV_FILTERED, EV_DETECTED, EV_PROJECTED, EV_DOWNLOADED, EV_COUNT };

/* Pinned host copies of one chunk's spike table. */
struct host_spikes {
  int64_t cap = 0;
  int64_t *time_samples = nullptr;
  float *time_fraction = nullptr;
  int32_t *peak_channel = nullptr;
  float *amplitude = nullptr;
  float *masks = nullptr;
  float *features = nullptr;
};

struct lane {
  cudaStream_t stream = nullptr;
  cudaEvent_t ev[EV_COUNT] = {};
  int16_t *d_raw = nullptr;
  float *d_x = nullptr;
  float *d_f = nullptr;
  float *d_feat = nullptr;
  int64_t feat_cap = 0; /* spikes */
  ss_detect_cuda *det = nullptr;
  host_spikes h;
  ss_chunk meta{}; /* the chunk on this lane (data not used) */
  bool busy = false;
};

static void host_spikes_free(host_spikes *h) {
  cudaFreeHost(h->time_samples);
  cudaFreeHost(h->time_fraction);
  cudaFreeHost(h->peak_channel);
  cudaFreeHost(h->amplitude);
  cudaFreeHost(h->masks);
  cudaFreeHost(h->features);
  *h = host_spikes();
}

static ss_status pinned(ss_ctx *ctx, void **p, size_t bytes, const char *what) {
  cudaError_t e = cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocDefault);
  if (e != cudaSuccess)
    return ss_fail(ctx, SS_ERR_NOMEM, "front end: cannot pin %zu bytes of host memory for %s: %s", bytes, what,
                   cudaGetErrorString(e));
  return SS_OK;
}

static ss_status host_spikes_reserve(ss_ctx *ctx, host_spikes *h, int64_t n, int C, int F) {
  if (n <= h->cap) return SS_OK;
  host_spikes_free(h);
  int64_t cap = std::max<int64_t>(n, 1024) * 3 / 2;
  size_t m = (size_t)cap;
  SS_TRY(pinned(ctx, (void **)&h->time_samples, m * sizeof(int64_t), "spike times"));
  SS_TRY(pinned(ctx, (void **)&h->time_fraction, m * sizeof(float), "spike times"));
  SS_TRY(pinned(ctx, (void **)&h->peak_channel, m * sizeof(int32_t), "peak channels"));
  SS_TRY(pinned(ctx, (void **)&h->amplitude, m * sizeof(float), "amplitudes"));
  SS_TRY(pinned(ctx, (void **)&h->masks, m * C * sizeof(float), "masks"));
  SS_TRY(pinned(ctx, (void **)&h->features, m * F * sizeof(float), "features"));
  h->cap = cap;
  return SS_OK;
}

static void lane_free(lane *l) {
  if (l->stream) cudaStreamSynchronize(l->stream);
  for (int k = 0; k < EV_COUNT; k++)
    if (l->ev[k]) cudaEventDestroy(l->ev[k]);
  cudaFree(l->d_raw);
  cudaFree(l->d_x);
  cudaFree(l->d_f);
  cudaFree(l->d_feat);
  if (l->det) ss_detect_cuda_close(l->det);
  host_spikes_free(&l->h);
  if (l->stream) cudaStreamDestroy(l->stream);
  *l = lane();
}

static ss_status lane_init(ss_ctx *ctx, const ss_backend *be, const ss_fe_state *fs, size_t max_values, lane *l) {
  SS_CUDA_TRY(ctx, cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
  for (int k = 0; k < EV_COUNT; k++) SS_CUDA_TRY(ctx, cudaEventCreate(&l->ev[k]));
  SS_TRY(SS_CUDA_ALLOC(ctx, l->d_raw, max_values, "raw chunk"));
  SS_TRY(SS_CUDA_ALLOC(ctx, l->d_x, max_values, "chunk in µV"));
  SS_TRY(SS_CUDA_ALLOC(ctx, l->d_f, max_values, "filtered chunk"));
  return ss_detect_cuda_open(ctx, be, &fs->cfg, &fs->graph, &fs->th, &l->det);
}

/* int16 → µV with the source's per-channel scale (double, as the CPU), 0 outside the recording. */
__global__ void k_convert(const int16_t *raw, int64_t rows, int C, const double *scale, double offset, int64_t vb,
                          int64_t ve, float *x) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * C) return;
  int64_t t = i / C;
  int c = (int)(i - t * C);
  x[i] = (t >= vb && t < ve) ? (float)(raw[i] * scale[c] + offset) : 0.0f;
}

struct pass {
  const ss_backend *be;
  const ss_fe_state *fs;
  const double *d_scale;
  const float *d_basis;
  const ss_motion_cuda *motion; /* NULL: not registered */
  ss_frontend_model *model;
};

static int64_t grid_of(int64_t n) { return (n + kThreads - 1) / kThreads; }

/* Upload, convert, filter and reference chunk `in` on lane l (asynchronous). */
static ss_status lane_front(ss_ctx *ctx, const pass *ps, lane *l, in_slot *in) {
  const ss_fe_state *fs = ps->fs;
  const int C = fs->C;
  const ss_chunk &ch = in->meta;
  int64_t rows = ch.left + ch.n + ch.right;
  int64_t vb = ch.left - ch.left_valid, ve = ch.left + ch.n + ch.right_valid;
  size_t count = (size_t)rows * C;
  l->meta = ch;
  l->busy = true;
  SS_CUDA_TRY(ctx, cudaEventRecord(l->ev[EV_START], l->stream));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(l->d_raw, in->host, count * sizeof(int16_t), cudaMemcpyHostToDevice, l->stream));
  SS_CUDA_TRY(ctx, cudaEventRecord(l->ev[EV_UPLOADED], l->stream));
  SS_CUDA_TRY(ctx, cudaEventRecord(in->uploaded, l->stream));
  k_convert<<<(unsigned)grid_of((int64_t)count), kThreads, 0, l->stream>>>(l->d_raw, rows, C, ps->d_scale,
                                                                           fs->info->offset_uv, vb, ve, l->d_x);
  SS_CUDA_TRY_LAUNCH(ctx, "convert");
  /* rows outside the recording stay 0 after filtering, as on the CPU */
  SS_CUDA_TRY(ctx, cudaMemsetAsync(l->d_f, 0, (size_t)vb * C * sizeof(float), l->stream));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(l->d_f + ve * C, 0, (size_t)(rows - ve) * C * sizeof(float), l->stream));
  if (ve > vb) {
    /* filter.causal (the model's live twin): forward only, from the steady state of the first valid row */
    SS_TRY((fs->p->filter.causal ? ss_filter_forward_cuda : ss_filter_zero_phase_cuda)(ctx, ps->be, &fs->filter,
                                                                                       l->d_x + vb * C, ve - vb, C,
                                                                                       l->d_f + vb * C, l->stream));
    if (fs->p->filter.common_reference == SS_CMR_MEDIAN)
      SS_TRY(ss_filter_common_median_cuda(ctx, ps->be, l->d_f + vb * C, ve - vb, C, fs->graph.use, l->stream));
    if (ps->motion) { /* registered into the µV buffer, which is free now; the two then trade places. Every
                       * row: those outside the recording are 0 and stay 0 (a row is mixed only with itself) */
      SS_TRY(ss_motion_apply_cuda(ctx, ps->motion, l->d_f, l->d_x, rows, ch.start - ch.left, l->stream));
      std::swap(l->d_x, l->d_f);
    }
  }
  SS_CUDA_TRY(ctx, cudaEventRecord(l->ev[EV_FILTERED], l->stream));
  return SS_OK;
}

static double elapsed_s(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? 1e-3 * ms : 0.0;
}

static ss_status download(ss_ctx *ctx, const ss_spike_dev *sd, const float *d_feat, int64_t n, int C, int F,
                          host_spikes *h, cudaStream_t s) {
  const cudaMemcpyKind d2h = cudaMemcpyDeviceToHost;
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->time_samples, sd->time_samples, n * sizeof(int64_t), d2h, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->time_fraction, sd->time_fraction, n * sizeof(float), d2h, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->peak_channel, sd->peak_channel, n * sizeof(int32_t), d2h, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->amplitude, sd->amplitude, n * sizeof(float), d2h, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->masks, sd->masks, (size_t)n * C * sizeof(float), d2h, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(h->features, d_feat, (size_t)n * F * sizeof(float), d2h, s));
  return SS_OK;
}

/* Detect, project and download lane l's chunk, then append it to acc (synchronises the lane). */
static ss_status lane_back(ss_ctx *ctx, const pass *ps, lane *l, ss_fe_accum *acc) {
  const ss_fe_state *fs = ps->fs;
  const int C = fs->C, P = fs->pca->n_pcs, W = fs->cfg.n_before + fs->cfg.n_after, F = C * P;
  const ss_chunk &ch = l->meta;
  ss_detect_block blk;
  ss_fe_detect_regions(fs, ch.left, ch.n, ch.right, ch.left_valid, ch.right_valid, &blk);
  blk.x = l->d_f;
  blk.row0_sample = ch.start - ch.left;
  ss_spike_dev sd;
  SS_TRY(ss_detect_cuda_run(ctx, l->det, &blk, l->stream, &sd));
  SS_CUDA_TRY(ctx, cudaEventRecord(l->ev[EV_DETECTED], l->stream));
  const int64_t n = sd.n;
  if (n > l->feat_cap) {
    SS_CUDA_TRY(ctx, cudaFreeAsync(l->d_feat, l->stream));
    l->d_feat = nullptr;
    l->feat_cap = n * 3 / 2 + 1024;
    SS_CUDA_TRY(ctx, cudaMallocAsync((void **)&l->d_feat, (size_t)l->feat_cap * F * sizeof(float), l->stream));
  }
  if (n > 0) SS_TRY(ss_pca_project_cuda(ctx, ps->be, C, W, P, ps->d_basis, sd.waveforms, n, l->d_feat, l->stream));
  SS_CUDA_TRY(ctx, cudaEventRecord(l->ev[EV_PROJECTED], l->stream));
  SS_TRY(host_spikes_reserve(ctx, &l->h, n > 0 ? n : 1, C, F));
  host_spikes &h = l->h;
  cudaStream_t s = l->stream;
  if (n > 0) SS_TRY(download(ctx, &sd, l->d_feat, n, C, F, &h, s));
  SS_CUDA_TRY(ctx, cudaEventRecord(l->ev[EV_DOWNLOADED], s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  ss_spike_list view;
  memset(&view, 0, sizeof(view));
  view.n = view.cap = n;
  view.n_channels = C;
  view.n_wave = W;
  view.time_samples = h.time_samples;
  view.time_fraction = h.time_fraction;
  view.peak_channel = h.peak_channel;
  view.amplitude = h.amplitude;
  view.masks = h.masks;
  SS_TRY(ss_fe_accum_append(ctx, acc, &view, h.features, F));
  ss_frontend_model *m = ps->model;
  m->n_truncated += sd.n_truncated;
  m->gpu.upload_s += elapsed_s(l->ev[EV_START], l->ev[EV_UPLOADED]);
  m->gpu.filter_s += elapsed_s(l->ev[EV_UPLOADED], l->ev[EV_FILTERED]);
  m->gpu.detect_s += elapsed_s(l->ev[EV_FILTERED], l->ev[EV_DETECTED]);
  m->gpu.project_s += elapsed_s(l->ev[EV_DETECTED], l->ev[EV_PROJECTED]);
  m->gpu.download_s += elapsed_s(l->ev[EV_PROJECTED], l->ev[EV_DOWNLOADED]);
  l->busy = false;
  return SS_OK;
}

/* Chunk length: io.gpu_chunk_s, shortened so that the lanes fit in a fraction of free memory. */
static ss_status choose_chunk(ss_ctx *ctx, const ss_fe_state *fs, int64_t *chunk) {
  size_t free_b = 0, total_b = 0;
  SS_CUDA_TRY(ctx, cudaMemGetInfo(&free_b, &total_b));
  const double rate = fs->info->rate_hz;
  double per_row = kLanes * kLaneBytesPerValue * fs->C;
  int64_t fit = (int64_t)(kMemFraction * (double)free_b / per_row) - 2 * fs->margin;
  int64_t want = llround(fs->p->io.gpu_chunk_s * rate);
  if (want < 1) want = 1;
  *chunk = std::min(want, fit);
  if (*chunk < llround(kMinChunkS * rate) && *chunk < fs->info->n_samples)
    return ss_fail(ctx, SS_ERR_NOMEM,
                   "front end: %.1f MiB of free device memory hold chunks of only %.2f s at %d channels (at least "
                   "%.0f s needed)",
                   free_b / 1048576.0, *chunk / rate, fs->C, kMinChunkS);
  if (*chunk < want)
    ss_log_info(ctx, "front end: GPU chunks of %.2f s (io.gpu_chunk_s = %g s does not fit in %.0f%% of free memory)",
                *chunk / rate, fs->p->io.gpu_chunk_s, 100 * kMemFraction);
  return SS_OK;
}

struct resources {
  reader rd;
  pthread_t thread{};
  bool started = false;
  lane lanes[kLanes];
  double *d_scale = nullptr;
  float *d_basis = nullptr;
  ss_motion_cuda *motion = nullptr;
  ~resources() {
    if (started) {
      reader_stop(&rd);
      pthread_join(thread, nullptr);
    }
    for (lane &l : lanes) lane_free(&l);
    for (in_slot &s : rd.slot) {
      cudaFreeHost(s.host);
      if (s.uploaded) cudaEventDestroy(s.uploaded);
    }
    cudaFree(d_scale);
    cudaFree(d_basis);
    ss_motion_cuda_close(motion);
  }
};

static ss_status upload_constants(ss_ctx *ctx, const ss_fe_state *fs, resources *r) {
  if (fs->motion) SS_TRY(ss_motion_cuda_open(ctx, fs->motion, &r->motion));
  const ss_pca *pca = fs->pca;
  size_t nb = (size_t)pca->n_channels * pca->n_pcs * pca->n_wave;
  SS_TRY(SS_CUDA_ALLOC(ctx, r->d_scale, fs->C, "channel scale"));
  SS_TRY(SS_CUDA_ALLOC(ctx, r->d_basis, nb, "PCA basis"));
  SS_CUDA_TRY(ctx, cudaMemcpy(r->d_scale, fs->info->uv_per_step, fs->C * sizeof(double), cudaMemcpyHostToDevice));
  SS_CUDA_TRY(ctx, cudaMemcpy(r->d_basis, pca->basis, nb * sizeof(float), cudaMemcpyHostToDevice));
  return SS_OK;
}

static ss_status run_lanes(ss_ctx *ctx, const pass *ps, resources *r, ss_fe_accum *acc, ss_progress *prog) {
  const int64_t n_chunks = r->rd.n_chunks;
  for (int64_t i = 0; i < n_chunks; i++) {
    in_slot *in = nullptr;
    SS_TRY(reader_take(ctx, &r->rd, i, &in, &ps->model->gpu.wait_s));
    lane *l = &r->lanes[i % kLanes];
    SS_TRY(lane_front(ctx, ps, l, in));
    reader_release(&r->rd, in);
    lane *prev = &r->lanes[(i + kLanes - 1) % kLanes];
    if (i > 0 && prev->busy) {
      SS_TRY(lane_back(ctx, ps, prev, acc));
      ss_progress_update(prog, (double)(prev->meta.start + prev->meta.n) / ps->fs->info->rate_hz);
    }
  }
  lane *last = &r->lanes[(n_chunks + kLanes - 1) % kLanes];
  if (n_chunks > 0 && last->busy) SS_TRY(lane_back(ctx, ps, last, acc));
  return SS_OK;
}

} /* namespace */

ss_status ss_frontend_chunks_cuda(ss_ctx *ctx, const ss_backend *be, const ss_fe_state *fs, ss_source *src,
                                  ss_fe_accum *acc, ss_frontend_model *model) {
  int64_t chunk = 0;
  SS_TRY(choose_chunk(ctx, fs, &chunk));
  SS_TRY(ss_source_configure(ctx, src, chunk, fs->margin, fs->margin));
  model->chunk_samples = chunk;
  model->n_chunks = ss_source_n_chunks(src);
  resources r;
  r.rd.src = src;
  r.rd.device = ss_cuda_of(be)->device;
  r.rd.n_chunks = model->n_chunks;
  ss_ctx_init(&r.rd.ctx);
  size_t values = (size_t)(chunk + 2 * fs->margin) * fs->C;
  for (in_slot &s : r.rd.slot) {
    SS_TRY(pinned(ctx, (void **)&s.host, values * sizeof(int16_t), "chunk buffers"));
    s.cap = values;
    SS_CUDA_TRY(ctx, cudaEventCreateWithFlags(&s.uploaded, cudaEventDisableTiming));
  }
  for (lane &l : r.lanes) SS_TRY(lane_init(ctx, be, fs, values, &l));
  SS_TRY(upload_constants(ctx, fs, &r));
  if (pthread_create(&r.thread, nullptr, reader_main, &r.rd) != 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "front end: cannot start the reader thread");
  r.started = true;
  ss_log_info(ctx, "front end: GPU chunk pass, %lld chunks of %.2f s, %d lanes", (long long)model->n_chunks,
              chunk / fs->info->rate_hz, kLanes);
  ss_progress prog;
  ss_progress_start(&prog, ctx, "detect (GPU)", fs->info->duration_s);
  pass ps = {be, fs, r.d_scale, r.d_basis, r.motion, model};
  ss_status st = run_lanes(ctx, &ps, &r, acc, &prog);
  ss_progress_finish(&prog);
  if (st != SS_OK) reader_stop(&r.rd);
  pthread_join(r.thread, nullptr);
  r.started = false;
  model->gpu.read_s = r.rd.busy_s;
  const auto &g = model->gpu;
  if (st == SS_OK)
    ss_log_info(ctx,
                "front end (GPU): %.2f s read, %.2f s upload, %.2f s filter, %.2f s detect, %.2f s project, %.2f s "
                "download, %.2f s wait (busy time of each stage summed over chunks; the stages overlap)",
                g.read_s, g.upload_s, g.filter_s, g.detect_s, g.project_s, g.download_s, g.wait_s);
  return st;
}
