/* mask_em.cu — the CUDA twin of masked EM (see mask_em_cuda.cuh): the upload of the preprocessed
 * data, the fit with its split rounds on the device, and the extern "C" entry points. */
#include <cinttypes>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "core/log.h"
#include "core/rng.h"
#include "stages/mask_em/mask_em_cuda.cuh"

namespace ss_em_cuda {
namespace {

constexpr int SUB_CYCLE_WINDOW = 64; /* as the CPU's split sub-problems */
constexpr int64_t MAX_HISTORY = 1000000;

/* ---- data ---------------------------------------------------------------------------------------- */

__global__ void k_expand(const int64_t *row, const int32_t *feat, const float *y, const float *eta, const float *mask,
                         const double *nu, const double *s2, int64_t n, int64_t d, double *X, uint32_t *pm) {
  int64_t p = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (p >= n) return;
  double *x = X + p * 4 * d;
  int64_t nw = words(d);
  for (int64_t e = row[p]; e < row[p + 1]; e++) {
    int32_t i = feat[e];
    pm[p * nw + i / 32] |= 1u << (i % 32);
    double r = (double)y[e] - nu[i];
    x[i] = (double)eta[e] - s2[i];
    x[d + i] = __dmul_rn(r, r);
    x[2 * d + i] = r;
    x[3 * d + i] = (double)mask[e];
  }
}

__global__ void k_gather_bits(const uint32_t *pm, const int32_t *pts, int64_t n, int64_t nw, uint32_t *pmo) {
  int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (t < n * nw) pmo[t] = pm[(int64_t)pts[t / nw] * nw + t % nw];
}

__global__ void k_gather(const double *X, const double *kp, const int32_t *pts, int64_t n, int64_t w, double *Xo,
                         double *kpo) {
  int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (t >= n * w) return;
  int64_t j = t / w, i = t % w, p = pts[j];
  Xo[t] = X[p * w + i];
  if (i == 0) kpo[j] = kp[p];
}

/* ---- split sub-problems: starting labels and halves ---------------------------------------------- */

__global__ void k_fill(int32_t *v, int64_t n, int32_t val) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) v[j] = val;
}

__global__ void k_random_halves(int32_t *labels, int64_t n, uint64_t key) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) labels[j] = (int32_t)(1 + (ss_rng_u64(key, (uint64_t)j) >> 63));
}

__global__ void k_mark_half(const int32_t *sub_labels, int64_t n, int8_t *half) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n) half[j] = sub_labels[j] == 2;
}

__global__ void k_apply_half(const int32_t *pts, const int8_t *half, int64_t n_c, int32_t c, int32_t knew,
                             int32_t *labels) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j < n_c && half[j] && labels[pts[j]] == c) labels[pts[j]] = knew;
}

/* One M, E and C step on the current labels (a split trial; a split round's fresh reference). */
ss_status full_step(ss_ctx *ctx, prob &p, int64_t *changed) {
  SS_TRY(mstep(ctx, p));
  SS_TRY(estep(ctx, p));
  return cstep(ctx, p, changed, nullptr);
}

/* ---- the fit -------------------------------------------------------------------------------------- */

struct dev_data {
  int64_t n = 0, d = 0, max_nnz = 0; /* max_nnz: the largest unmasked count of a point */
  double *X = nullptr, *kp = nullptr, *nu = nullptr, *s2 = nullptr;
  uint32_t *pm = nullptr;
  ~dev_data() {
    cudaFree(pm);
    cudaFree(X);
    cudaFree(kp);
    cudaFree(nu);
    cudaFree(s2);
  }
};

ss_status upload(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *dt, dev_data &dd) {
  cudaStream_t s = ss_cuda_stream(be);
  int64_t n = dt->n, d = dt->d, nnz = dt->nnz;
  dd.n = n, dd.d = d, dd.max_nnz = 0;
  for (int64_t q = 0; q < n; q++)
    if (dt->row[q + 1] - dt->row[q] > dd.max_nnz) dd.max_nnz = dt->row[q + 1] - dt->row[q];
  SS_TRY(dalloc(ctx, dd.X, n * 4 * d, "masked EM dense corrected data (N x 4D doubles)"));
  SS_TRY(dalloc(ctx, dd.kp, n, "masked EM k_p"));
  SS_TRY(dalloc(ctx, dd.pm, n * words(d), "masked EM feature bitmasks"));
  SS_TRY(dalloc(ctx, dd.nu, d, "masked EM noise means"));
  SS_TRY(dalloc(ctx, dd.s2, d, "masked EM noise variances"));
  ss_dbuf<int64_t> row;
  ss_dbuf<int32_t> feat;
  ss_dbuf<float> y, eta, mask;
  SS_TRY(row.alloc(ctx, (size_t)n + 1, "masked EM upload"));
  SS_TRY(feat.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_TRY(y.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_TRY(eta.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_TRY(mask.alloc(ctx, (size_t)(nnz > 0 ? nnz : 1), "masked EM upload"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(row, dt->row, sizeof(int64_t) * (size_t)(n + 1), cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(feat, dt->feat, sizeof(int32_t) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(y, dt->y, sizeof(float) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(eta, dt->eta, sizeof(float) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(mask, dt->mask, sizeof(float) * (size_t)nnz, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dd.kp, dt->kp, sizeof(double) * (size_t)n, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dd.nu, dt->nu, sizeof(double) * (size_t)d, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(dd.s2, dt->sigma2, sizeof(double) * (size_t)d, cudaMemcpyHostToDevice, s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(dd.X, 0, sizeof(double) * (size_t)(n * 4 * d), s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(dd.pm, 0, sizeof(uint32_t) * (size_t)(n * words(d)), s));
  k_expand<<<blocks(n, PT_THREADS), PT_THREADS, 0, s>>>(row, feat, y, eta, mask, dd.nu, dd.s2, n, d, dd.X, dd.pm);
  SS_CUDA_TRY_LAUNCH(ctx, "expand");
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  return SS_OK;
}

/* The main problem (and its split trial) over the resident data, labels from the host. */
ss_status main_init(ss_ctx *ctx, prob &p, const ss_backend *be, const ss_mask_em_opts *o, const dev_data &dd,
                    const int32_t *labels, int64_t k) {
  SS_TRY(prob_init(ctx, p, be, o, dd.n, dd.d, k, false));
  p.X = dd.X, p.kp = dd.kp, p.nu = dd.nu, p.s2 = dd.s2, p.pm = dd.pm;
  p.has_noise = 1;
  p.log_n = log((double)dd.n);
  SS_TRY(quad_plan(ctx, p, dd.max_nnz));
  SS_TRY(quad_opt_in(ctx, p));
  if (labels)
    SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.labels, labels, sizeof(int32_t) * (size_t)dd.n, cudaMemcpyHostToDevice, p.s));
  return SS_OK;
}

struct gpu_run {
  ss_ctx *ctx;
  const ss_mask_em_opts *o;
  dev_data dd;
  prob st, trial, sub;
  std::vector<uint64_t> hashes;
  ss_mask_em_result *res;
  int64_t log_cap = 0, split_rounds = 0;
  ~gpu_run() {
    prob_free(st);
    prob_free(trial);
    prob_free(sub);
  }
};

ss_status log_push(gpu_run &r, const ss_mask_em_iter_log &e) {
  ss_mask_em_result *res = r.res;
  if (res->n_log == r.log_cap) {
    int64_t cap = r.log_cap ? 2 * r.log_cap : 64;
    void *l = realloc(res->log, sizeof(ss_mask_em_iter_log) * (size_t)cap);
    if (!l) return ss_fail(r.ctx, SS_ERR_NOMEM, "masked EM: out of memory for the iteration log");
    res->log = (ss_mask_em_iter_log *)l;
    r.log_cap = cap;
  }
  res->log[res->n_log++] = e;
  if (e.step == SS_EM_STEP_FULL)
    ss_log_info(r.ctx,
                "masked EM (cuda): iteration %" PRId64 ": score %.6f, %" PRId64 " clusters, %" PRId64
                " changed, %" PRId64 " deleted, %" PRId64 " Cholesky failures, %.4f s",
                e.iteration, e.score, e.n_clusters, e.changed, e.deletions, e.chol_failures, e.seconds);
  else
    ss_log_info(r.ctx,
                "masked EM (cuda): iteration %" PRId64 ": split round: %" PRId64 " tried, %" PRId64
                " accepted, score %.6f, %" PRId64 " clusters, %.3f s",
                e.iteration, e.splits_tried, e.splits_accepted, e.score, e.n_clusters, e.seconds);
  return SS_OK;
}

/* One full iteration: compaction, M, E, C, deletion, score (as mask_em.c). */
ss_status full_iteration(ss_ctx *ctx, prob &p, int64_t it, ss_mask_em_iter_log *e, ss_mask_em_result *res) {
  double t0 = ss_now();
  ss_status cs;
  compact(p, ctx, &cs);
  SS_TRY(cs);
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(p.prev, p.labels, sizeof(int32_t) * (size_t)p.n, cudaMemcpyDeviceToDevice, p.s));
  SS_TRY(mstep(ctx, p));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s));
  double t1 = ss_now();
  SS_TRY(estep(ctx, p));
  double t2 = ss_now();
  int64_t changed = 0, deleted = 0, live = 0;
  SS_TRY(cstep(ctx, p, &changed, nullptr));
  SS_TRY(delete_step(ctx, p, &deleted));
  SS_TRY(diff_hash(ctx, p, p.prev, &changed, nullptr));
  double sc;
  SS_TRY(score(ctx, p, &sc, &live));
  double t3 = ss_now();
  if (!std::isfinite(sc))
    return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM (cuda): iteration %" PRId64 ": the score is not finite (%g)", it,
                   sc);
  if (res) {
    res->t_mstep_s += t1 - t0;
    res->t_estep_s += t2 - t1;
    res->t_cstep_s += t3 - t2;
    res->n_deletions += deleted;
    res->n_chol_failures += p.n_chol_fail;
  }
  *e = ss_mask_em_iter_log{};
  e->iteration = it, e->step = SS_EM_STEP_FULL, e->score = sc, e->n_clusters = live, e->changed = changed;
  e->deletions = deleted, e->chol_failures = p.n_chol_fail, e->seconds = t3 - t0;
  return SS_OK;
}

/* ---- split round (as mask_em_split.c; sub-problems one after the other) ---- */

struct sub_res {
  double s1 = INFINITY, s2 = INFINITY;
  bool valid = false;
};

ss_status sub_converge(ss_ctx *ctx, prob &sub, bool *valid) {
  uint64_t seen[SUB_CYCLE_WINDOW];
  int64_t n_seen = 0;
  for (int64_t it = 0; it < sub.o->max_iterations; it++) {
    SS_TRY(mstep(ctx, sub));
    if (sub.count_h[1] == 0 || sub.count_h[2] == 0) return *valid = false, SS_OK;
    SS_TRY(estep(ctx, sub));
    int64_t changed, unassigned;
    SS_TRY(cstep(ctx, sub, &changed, &unassigned));
    if (unassigned) return *valid = false, SS_OK; /* both clusters removed for some point */
    if (changed == 0) break;
    uint64_t h;
    SS_TRY(diff_hash(ctx, sub, nullptr, nullptr, &h));
    bool repeat = false;
    for (int64_t s = 0; s < n_seen && s < SUB_CYCLE_WINDOW; s++) repeat = repeat || seen[s] == h;
    if (repeat) break;
    seen[n_seen++ % SUB_CYCLE_WINDOW] = h;
  }
  SS_TRY(counts(ctx, sub));
  *valid = sub.count_h[2] > 0 && sub.count_h[2] < sub.n;
  return SS_OK;
}

/* S1 and S2 of the cluster whose points are pts[0 .. n_c); half[j] = 1 for the second half. */
ss_status fit_sub(ss_ctx *ctx, gpu_run &r, const int32_t *pts, int64_t n_c, uint64_t key, sub_res *out, int8_t *half) {
  prob &sub = r.sub;
  cudaStream_t s = sub.s;
  int64_t w = 4 * r.dd.d;
  sub.n = n_c;
  sub.log_n = log((double)n_c);
  k_gather<<<blocks(n_c * w, PT_THREADS), PT_THREADS, 0, s>>>(r.dd.X, r.dd.kp, pts, n_c, w, sub.X_own, sub.kp_own);
  k_gather_bits<<<blocks(n_c * words(r.dd.d), PT_THREADS), PT_THREADS, 0, s>>>(r.dd.pm, pts, n_c, words(r.dd.d),
                                                                               sub.pm_own);
  SS_CUDA_TRY_LAUNCH(ctx, "split gather");
  sub.k = 0;
  SS_TRY(set_k(ctx, sub, 2));
  k_fill<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, s>>>(sub.labels, n_c, 1);
  SS_TRY(mstep(ctx, sub));
  SS_TRY(estep(ctx, sub));
  if (sub.alive_h[1]) {
    int64_t ch;
    SS_TRY(cstep(ctx, sub, &ch, nullptr));
    SS_TRY(score(ctx, sub, &out->s1, nullptr));
  }
  SS_TRY(set_k(ctx, sub, 3));
  k_random_halves<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, s>>>(sub.labels, n_c, key);
  SS_CUDA_TRY_LAUNCH(ctx, "split halves");
  SS_TRY(sub_converge(ctx, sub, &out->valid));
  if (out->valid) {
    SS_TRY(score(ctx, sub, &out->s2, nullptr));
    k_mark_half<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, s>>>(sub.labels, n_c, half);
    SS_CUDA_TRY_LAUNCH(ctx, "split halves");
  }
  return SS_OK;
}

ss_status try_split(ss_ctx *ctx, gpu_run &r, int64_t c, const int32_t *pts, int64_t n_c, const int8_t *half,
                    double *sc) {
  prob &st = r.st, &tr = r.trial;
  int64_t k = st.k, changed;
  SS_CUDA_TRY(ctx,
              cudaMemcpyAsync(tr.labels, st.labels, sizeof(int32_t) * (size_t)st.n, cudaMemcpyDeviceToDevice, st.s));
  tr.k = 0;
  SS_TRY(set_k(ctx, tr, k + 1));
  k_apply_half<<<blocks(n_c, PT_THREADS), PT_THREADS, 0, st.s>>>(pts, half, n_c, (int32_t)c, (int32_t)k, tr.labels);
  SS_CUDA_TRY_LAUNCH(ctx, "split trial");
  SS_TRY(full_step(ctx, tr, &changed));
  return score(ctx, tr, sc, nullptr);
}

ss_status split_round(ss_ctx *ctx, gpu_run &r, int64_t round, double *reference, int64_t *tried, int64_t *accepted) {
  prob &st0 = r.st;
  *tried = *accepted = 0;
  int64_t k = st0.k, n = st0.n;
  if (k >= r.o->max_possible_clusters - 1) return SS_OK;
  SS_TRY(group(ctx, st0));
  std::vector<int64_t> grp(st0.group_h.begin(), st0.group_h.begin() + k + 1);
  ss_dbuf<int32_t> pts;
  ss_dbuf<int8_t> half;
  SS_TRY(pts.alloc(ctx, (size_t)n, "split points"));
  SS_TRY(half.alloc(ctx, (size_t)n, "split halves"));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(pts, st0.order, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToDevice, st0.s));
  SS_CUDA_TRY(ctx, cudaMemsetAsync(half, 0, (size_t)n, st0.s));
  std::vector<sub_res> res((size_t)k);
  for (int64_t c = 1; c < k; c++) {
    int64_t n_c = grp[c + 1] - grp[c];
    if (n_c < 2) continue;
    uint64_t key = ss_rng_key(r.o->seed, SS_RNG_MASK_EM_SPLIT, ((uint64_t)round << 32) | (uint64_t)c);
    SS_TRY(fit_sub(ctx, r, pts + grp[c], n_c, key, &res[c], half + grp[c]));
  }
  for (int64_t c = 1; c < k; c++) {
    if (!res[c].valid || !(res[c].s2 < res[c].s1)) continue;
    if (r.st.k >= r.o->max_possible_clusters - 1) break;
    double sc;
    (*tried)++;
    SS_TRY(try_split(ctx, r, c, pts + grp[c], grp[c + 1] - grp[c], half + grp[c], &sc));
    if (sc < *reference) {
      std::swap(r.st, r.trial);
      *reference = sc;
      (*accepted)++;
      ss_log_debug(ctx, "masked EM (cuda): split of cluster %lld accepted (S1 %.6f, S2 %.6f, score %.6f)", (long long)c,
                   res[c].s1, res[c].s2, sc);
    }
  }
  return SS_OK;
}

ss_status split_step(ss_ctx *ctx, gpu_run &r, int64_t it, const ss_mask_em_iter_log &full, int64_t *accepted,
                     double *sc) {
  double t0 = ss_now(), ref = full.score;
  int64_t tried = 0, changed, live;
  *accepted = 0;
  if (r.st.k >= r.o->max_possible_clusters - 1) return SS_OK;
  if (full.changed != 0) {
    SS_TRY(full_step(ctx, r.st, &changed));
    SS_TRY(score(ctx, r.st, &ref, nullptr));
  }
  SS_TRY(split_round(ctx, r, r.split_rounds++, &ref, &tried, accepted));
  *sc = ref;
  SS_TRY(counts(ctx, r.st));
  live = 1;
  for (int64_t c = 1; c < r.st.k; c++) live += r.st.count_h[c] > 0;
  r.res->t_split_s += ss_now() - t0;
  r.res->n_splits_tried += tried;
  r.res->n_splits_accepted += *accepted;
  ss_mask_em_iter_log e{};
  e.iteration = it, e.step = SS_EM_STEP_SPLIT, e.score = ref, e.n_clusters = live, e.splits_tried = tried;
  e.splits_accepted = *accepted, e.seconds = ss_now() - t0;
  return log_push(r, e);
}

ss_status drv_full_iteration(ss_ctx *ctx, void *self, int64_t it, ss_mask_em_iter_log *e) {
  gpu_run &r = *(gpu_run *)self;
  SS_TRY(full_iteration(ctx, r.st, it, e, r.res));
  return log_push(r, *e);
}

ss_status drv_seen_before(ss_ctx *ctx, void *self, int *seen) {
  gpu_run &r = *(gpu_run *)self;
  uint64_t h;
  SS_TRY(diff_hash(ctx, r.st, nullptr, nullptr, &h));
  *seen = 0;
  for (uint64_t q : r.hashes) *seen = *seen || q == h;
  if ((int64_t)r.hashes.size() < MAX_HISTORY) r.hashes.push_back(h);
  return SS_OK;
}

ss_status drv_split_step(ss_ctx *ctx, void *self, int64_t it, const ss_mask_em_iter_log *full, int64_t *accepted,
                         double *score) {
  return split_step(ctx, *(gpu_run *)self, it, *full, accepted, score);
}

ss_status iterate(ss_ctx *ctx, gpu_run &r) {
  ss_em_driver d;
  d.self = &r;
  d.full_iteration = drv_full_iteration;
  d.seen_before = drv_seen_before;
  d.split_step = drv_split_step;
  d.n = r.st.n;
  return ss_em_drive(ctx, r.o, &d, r.res);
}

/* Starting labels on the host (mask patterns, .clu or k-means, as the CPU), compacted. */
ss_status host_start(ss_ctx *ctx, const ss_mask_em_data *dt, const ss_mask_em_opts *o, int n_threads,
                     std::vector<int32_t> &labels, int64_t *k) {
  ss_mask_em_state hs;
  SS_TRY(ss_mask_em_state_init(ctx, &hs, dt, o, NULL, dt->n, 1, o->num_starting_clusters, n_threads));
  ss_status s = ss_em_start_labels(ctx, dt, o, n_threads, &hs);
  if (s == SS_OK) {
    ss_mask_em_compact(&hs);
    labels.assign(hs.labels, hs.labels + dt->n);
    *k = hs.model.k;
  }
  ss_mask_em_state_free(&hs);
  return s;
}

ss_status fit(ss_ctx *ctx, const ss_backend *be, gpu_run &r, const float *x, const float *m, int64_t n, int64_t d) {
  ss_mask_em_result *res = r.res;
  double t0 = ss_now();
  ss_mask_em_data data;
  memset(&data, 0, sizeof(data));
  ss_status s = ss_mask_em_prepare(ctx, x, m, n, d, r.o, be->n_threads, &data);
  std::vector<int32_t> labels;
  int64_t k = 0;
  if (s == SS_OK) s = host_start(ctx, &data, r.o, be->n_threads, labels, &k);
  if (s == SS_OK) {
    if (k < 2) k = 2;
    res->n = n, res->d = d;
    res->n_constant_features = data.n_constant;
    res->n_floored_features = data.n_floored;
    s = upload(ctx, be, &data, r.dd);
  }
  ss_mask_em_data_free(&data);
  SS_TRY(s);
  SS_TRY(main_init(ctx, r.st, be, r.o, r.dd, labels.data(), k));
  SS_TRY(main_init(ctx, r.trial, be, r.o, r.dd, nullptr, k));
  SS_TRY(prob_init(ctx, r.sub, be, r.o, n, d, 4, true));
  SS_TRY(quad_plan(ctx, r.sub, r.dd.max_nnz));
  r.sub.nu = r.dd.nu, r.sub.s2 = r.dd.s2, r.sub.has_noise = 0;
  res->t_prepare_s = ss_now() - t0;
  res->start_clusters = k;
  ss_log_info(ctx, "masked EM (cuda, %s): %" PRId64 " points x %" PRId64 " features, %" PRId64 " starting clusters",
              be->gpu.name, n, d, k);
  ss_log_debug(ctx,
               "masked EM (cuda): block part %s (%" PRId64
               " points per block, %zu bytes of shared memory, at most %" PRId64 " unmasked features per point)",
               r.st.q_threads ? "sparse" : "warp-union", r.st.q_threads, r.st.q_smem, r.dd.max_nnz);
  SS_TRY(iterate(ctx, r));
  ss_status cs;
  compact(r.st, ctx, &cs);
  SS_TRY(cs);
  SS_TRY(SS_ALLOC(ctx, res->labels, (size_t)n, "masked EM result labels"));
  SS_CUDA_TRY(ctx, cudaMemcpy(res->labels, r.st.labels, sizeof(int32_t) * (size_t)n, cudaMemcpyDeviceToHost));
  res->n_clusters = r.st.k;
  res->t_total_s = ss_now() - t0;
  ss_log_info(ctx, "masked EM (cuda): %s after %" PRId64 " iterations: %" PRId64 " clusters, score %.6f, %.2f s",
              ss_mask_em_stop_name(res->stop), res->n_iterations, res->n_clusters, res->score, res->t_total_s);
  return SS_OK;
}

/* Copy the model after an M-step into a host snapshot. */
ss_status snapshot(ss_ctx *ctx, prob &p, const double *nu, ss_mask_em_snapshot *sn) {
  int64_t k = p.k, d = p.d;
  memset(sn, 0, sizeof(*sn));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(p.s)); /* the M-step ran on the backend's (non-blocking) stream */
  sn->k = k, sn->d = d;
  SS_TRY(SS_ALLOC(ctx, sn->count, (size_t)k, "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->weight, (size_t)k, "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->mean, (size_t)(k * d), "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->diag, (size_t)(k * d), "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->n_u, (size_t)k, "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->u_feat, (size_t)(k * d), "snapshot"));
  SS_TRY(SS_ALLOC(ctx, sn->block, (size_t)(k * d * d), "snapshot"));
  memcpy(sn->count, p.count_h.data(), sizeof(int64_t) * (size_t)k);
  memcpy(sn->weight, p.weight_h.data(), sizeof(double) * (size_t)k);
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->mean, p.offset, sizeof(double) * (size_t)(k * d), cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->diag, p.diag, sizeof(double) * (size_t)(k * d), cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->n_u, p.n_u, sizeof(int32_t) * (size_t)k, cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->u_feat, p.u_feat, sizeof(int32_t) * (size_t)(k * d), cudaMemcpyDeviceToHost));
  SS_CUDA_TRY(ctx, cudaMemcpy(sn->block, p.block, sizeof(double) * (size_t)(k * d * d), cudaMemcpyDeviceToHost));
  for (int64_t c = 0; c < k; c++)
    for (int64_t i = 0; i < d; i++) sn->mean[c * d + i] = c == 0 ? nu[i] : nu[i] + sn->mean[c * d + i];
  for (int64_t c = 0; c < k; c++)
    if (c == 0 || !p.alive_h[c]) sn->n_u[c] = 0;
  return SS_OK;
}

double elapsed(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  return ms * 1e-3;
}

} // namespace
} // namespace ss_em_cuda

using namespace ss_em_cuda;

extern "C" ss_status ss_mask_em_fit_cuda(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, int64_t n,
                                         int64_t d, const ss_mask_em_opts *o, ss_mask_em_result *res) {
  memset(res, 0, sizeof(*res));
  if (be->kind != SS_DEVICE_CUDA || !be->cuda)
    return ss_fail(ctx, SS_ERR_INTERNAL, "masked EM on CUDA: the backend is not a CUDA backend");
  if (o->quick_steps)
    return ss_fail(ctx, SS_ERR_UNSUPPORTED, "mask_em.quick_steps: not implemented in this version (leave it off)");
  gpu_run r{};
  r.ctx = ctx, r.o = o, r.res = res;
  ss_status s = fit(ctx, be, r, x, m, n, d);
  if (s != SS_OK) ss_mask_em_result_free(res);
  return s;
}

extern "C" ss_status ss_mask_em_cuda_trace(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                           const ss_mask_em_opts *o, const int32_t *start, int64_t k,
                                           int64_t iterations, ss_mask_em_snapshot *snap, int32_t *labels_out) {
  dev_data dd;
  prob p;
  SS_TRY(upload(ctx, be, data, dd));
  ss_status s = main_init(ctx, p, be, o, dd, start, k);
  for (int64_t it = 0; s == SS_OK && it < iterations; it++) {
    /* full_iteration, with the snapshot taken between the M- and the E-step */
    ss_status cs;
    compact(p, ctx, &cs);
    s = cs;
    if (s == SS_OK)
      s = cudaMemcpy(p.prev, p.labels, sizeof(int32_t) * (size_t)p.n, cudaMemcpyDeviceToDevice) == cudaSuccess
              ? SS_OK
              : ss_fail(ctx, SS_ERR_DEVICE, "CUDA: trace copy failed");
    if (s == SS_OK) s = mstep(ctx, p);
    if (s == SS_OK) s = snapshot(ctx, p, data->nu, &snap[it]);
    if (s == SS_OK) s = estep(ctx, p);
    int64_t changed = 0, deleted = 0;
    if (s == SS_OK) s = cstep(ctx, p, &changed, nullptr);
    if (s == SS_OK) s = delete_step(ctx, p, &deleted);
    if (s == SS_OK) s = diff_hash(ctx, p, p.prev, &changed, nullptr);
    if (s == SS_OK) s = score(ctx, p, &snap[it].score, nullptr);
    snap[it].changed = changed, snap[it].deletions = deleted;
  }
  if (s == SS_OK && labels_out &&
      cudaMemcpy(labels_out, p.labels, sizeof(int32_t) * (size_t)p.n, cudaMemcpyDeviceToHost) != cudaSuccess)
    s = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: trace labels copy failed");
  prob_free(p);
  return s;
}

extern "C" ss_status ss_mask_em_cuda_profile_iteration(ss_ctx *ctx, const ss_backend *be, const ss_mask_em_data *data,
                                                       const ss_mask_em_opts *o, const int32_t *start, int64_t k,
                                                       int reps, ss_mask_em_cuda_profile *prof) {
  dev_data dd;
  prob p;
  memset(prof, 0, sizeof(*prof));
  SS_TRY(upload(ctx, be, data, dd));
  ss_status s = main_init(ctx, p, be, o, dd, start, k);
  timers tm;
  for (auto &e : tm.ev) cudaEventCreate(&e);
  std::vector<ss_mask_em_cuda_profile> runs;
  for (int rep = 0; s == SS_OK && rep < (reps > 0 ? reps : 1); rep++) {
    if (s == SS_OK &&
        cudaMemcpyAsync(p.labels, start, sizeof(int32_t) * (size_t)p.n, cudaMemcpyHostToDevice, p.s) != cudaSuccess)
      s = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: profile upload failed");
    p.k = k;
    if (s != SS_OK || cudaStreamSynchronize(p.s) != cudaSuccess) break;
    ss_mask_em_cuda_profile pr{};
    double t0 = ss_now();
    ss_status cs;
    compact(p, ctx, &cs);
    s = cs;
    /* events: 0 start, 1 after group+M, 2 after factor, then (gemm, quad, select) per chunk, then C, del, score */
    tm.n = 0;
    tm.on = p.n <= p.chunk; /* one chunk: a fixed event layout */
    p.tm = &tm;
    mark(p);
    if (s == SS_OK) s = mstep(ctx, p);
    mark(p);
    if (s == SS_OK) s = estep(ctx, p);
    int64_t ch = 0, del = 0, live = 0;
    if (s == SS_OK) s = cstep(ctx, p, &ch, nullptr);
    mark(p);
    if (s == SS_OK) s = delete_step(ctx, p, &del);
    mark(p);
    double sc = 0;
    if (s == SS_OK) s = score(ctx, p, &sc, &live);
    mark(p);
    if (s == SS_OK && cudaStreamSynchronize(p.s) != cudaSuccess) s = ss_fail(ctx, SS_ERR_DEVICE, "CUDA: profile sync");
    pr.total_s = ss_now() - t0;
    pr.clusters = p.k;
    if (tm.on && tm.n == 9) {
      pr.mstep_s = elapsed(tm.ev[0], tm.ev[1]);
      pr.chol_s = elapsed(tm.ev[1], tm.ev[2]);
      pr.gemm_s = elapsed(tm.ev[2], tm.ev[3]);
      pr.block_s = elapsed(tm.ev[3], tm.ev[4]);
      pr.select_s = elapsed(tm.ev[4], tm.ev[5]);
      pr.cstep_s = elapsed(tm.ev[5], tm.ev[6]);
      pr.delete_s = elapsed(tm.ev[6], tm.ev[7]);
      pr.score_s = elapsed(tm.ev[7], tm.ev[8]);
    }
    p.tm = nullptr;
    runs.push_back(pr);
  }
  for (auto &e : tm.ev) cudaEventDestroy(e);
  if (s == SS_OK && !runs.empty()) { /* the median run by total time */
    std::vector<size_t> idx(runs.size());
    for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
    for (size_t i = 1; i < idx.size(); i++)
      for (size_t j = i; j > 0 && runs[idx[j - 1]].total_s > runs[idx[j]].total_s; j--) std::swap(idx[j - 1], idx[j]);
    *prof = runs[idx[idx.size() / 2]];
  }
  prob_free(p);
  return s;
}
