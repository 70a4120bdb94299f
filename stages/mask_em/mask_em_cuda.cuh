/* mask_em_cuda.cuh — what the CUDA files of masked EM share: the device problem (struct prob) with
 * its allocation helper, the layout and launch helpers, and the host steps each file exports. */
#ifndef SS_MASK_EM_CUDA_CUH
#define SS_MASK_EM_CUDA_CUH

#include <cstdint>
#include <vector>

#include "core/cuda_util.cuh"
#include "stages/mask_em/mask_em.h"
#include "stages/mask_em/mask_em_internal.h"

/* The CUDA twin of masked EM (docs/mask_em.md; CPU reference stages/mask_em/mask_em*.c).
 *
 * Preprocessing (normalisation, noise statistics, k_p) and the start run once on the host; then
 * the data live on the device for the whole run as one dense row per point,
 *   X[p] = [ EV | R² | R | M ]   (4·D doubles: η − σ², (y − ν)², y − ν, m; zero where m = 0),
 * computed from the CPU's float32 y, η exactly as the CPU computes its doubles.
 *
 * One full iteration:
 *   group     labels sorted once (CUB radix sort, stable: points of a cluster in index order)
 *   M-step    segmented reduction: fixed chunks of a cluster's sorted points → partial sums
 *             (stats per feature, u×u scatter products over U_c), combined per cluster in chunk
 *             order (deterministic; products without FMA contraction, as on the CPU)
 *   E-step    per-cluster Cholesky, L⁻¹ and B⁻¹ in a kernel (one block per cluster), then per chunk
 *             of points: one DGEMM [EV | R² | R] · [h | w | g]ᵀ for the diagonal, correction and
 *             linear parts, a kernel for the block part rᵀB⁻¹r (one thread per point walking only
 *             its own unmasked entries in U_c, B_c⁻¹'s lower triangle staged in shared memory per
 *             cluster; the warp-union kernel serves dimensions too large for that shared memory),
 *             and a fused best/second pass
 *   C-step, deletion (exact score changes from a (cluster, second) segmented reduction), score:
 *             on the device; per-cluster vectors (K values) and scalars come back.
 * Split sub-problems run one after the other on the same stream, each on a gathered copy of its
 * points. Everything accumulates in double; no TF32 (DGEMM). Every reduction has a fixed order, so
 * runs are deterministic.
 *
 * Files: mask_em.cu (upload, the fit, split rounds, the extern "C" entry points), mask_em_state.cu
 * (problem allocation, grouping, compaction, hash, score, deletion), mask_em_mstep.cu,
 * mask_em_estep.cu (with the C-step). */

namespace ss_em_cuda {

constexpr int64_t MSTEP_CHUNK = 512;   /* points per M-step partial (fixed: deterministic) */
constexpr int PT_THREADS = 256;        /* per-point kernels */
constexpr unsigned FULL = 0xffffffffu; /* every lane of a warp */

/* 32-bit words of a feature bitmask */
__host__ __device__ inline int64_t words(int64_t d) { return (d + 31) / 32; }

/* doubles of a packed lower triangle of a d × d matrix (per-cluster stride of the packed B⁻¹) */
__host__ __device__ inline int64_t tri_size(int64_t d) { return d * (d + 1) / 2; }

__device__ inline void pair_of(int64_t t, int64_t u, int64_t &x, int64_t &y) {
  /* t enumerates the upper triangle row by row: row x has u − x entries */
  x = 0;
  while (t >= u - x) t -= u - x, x++;
  y = x + t;
}

/* blocks of t threads covering n items */
inline unsigned blocks(int64_t n, int t) { return (unsigned)((n + t - 1) / t); }

/* One M-step chunk: cluster c's grouped points g0 .. g1 − 1 (at most MSTEP_CHUNK). */
struct item {
  int64_t c, g0, g1;
};

/* (Re)allocate p as count elements of device memory (at least one); the old contents are dropped. */
template <typename T>
ss_status dalloc(ss_ctx *ctx, T *&p, int64_t count, const char *what) {
  cudaFree(p);
  p = nullptr;
  return ss_cuda_malloc(ctx, (void **)&p, sizeof(T) * (size_t)(count > 0 ? count : 1), what);
}

/* CUDA events recorded between the steps of one iteration (profiling only). */
struct timers {
  bool on = false;
  cudaEvent_t ev[12];
  int n = 0;
};

/* One problem on the device: the main one or a split sub-problem (gathered rows). */
struct prob {
  const ss_backend *be = nullptr;
  const ss_mask_em_opts *o = nullptr;
  cudaStream_t s = nullptr;
  cublasHandle_t blas = nullptr;
  int64_t n = 0, n_cap = 0, d = 0;
  int has_noise = 1;
  double log_n = 0;
  const double *X = nullptr, *kp = nullptr, *nu = nullptr, *s2 = nullptr;
  const uint32_t *pm = nullptr;               /* [n × words(d)] unmasked-feature bitmasks */
  double *X_own = nullptr, *kp_own = nullptr; /* sub-problems: the gathered rows */
  uint32_t *pm_own = nullptr;
  int64_t k = 0, k_cap = 0, chunk = 0;
  /* per point */
  int32_t *labels = nullptr, *best = nullptr, *second = nullptr, *order = nullptr, *iota = nullptr, *prev = nullptr;
  double *cost = nullptr, *cost1 = nullptr, *cost2 = nullptr;
  uint32_t *keys = nullptr, *keys_sorted = nullptr;
  unsigned char *tmp = nullptr;
  size_t tmp_bytes = 0;
  /* per cluster (device) */
  int64_t *group = nullptr, *count_d = nullptr, *item_first = nullptr;
  unsigned long long *hist = nullptr, *scal = nullptr;
  int8_t *alive = nullptr;
  int32_t *n_u = nullptr, *u_feat = nullptr, *map = nullptr;
  uint32_t *u_bits = nullptr;
  double *weight = nullptr, *kp_sum = nullptr, *offset = nullptr, *diag = nullptr, *block = nullptr, *Lw = nullptr,
         *Ww = nullptr, *binv = nullptr, *tri = nullptr, *coef = nullptr, *base = nullptr, *C = nullptr,
         *dsum = nullptr;
  int16_t *posg = nullptr;
  /* sparse block part: threads per block (0: the warp-union kernel), its shared memory, and the
   * largest unmasked count of a point (the data's, also a bound for gathered sub-problems) */
  int64_t q_threads = 0, e_cap = 0;
  size_t q_smem = 0;
  bool q_global = false; /* neither shared-memory kernel fits: k_quad_global */
  item *items = nullptr;
  double *part_stat = nullptr, *part_block = nullptr;
  int64_t item_cap = 0;
  /* deletion */
  int *seg_cnt = nullptr, *seg_off = nullptr, *s_bad = nullptr;
  double *s_kp = nullptr, *s_diff = nullptr, *tot_kp = nullptr, *delta = nullptr;
  long long *tot_n = nullptr;
  int64_t seg_cap = 0;
  /* host mirrors */
  std::vector<int64_t> count_h, group_h;
  std::vector<int8_t> alive_h;
  std::vector<double> weight_h;
  int64_t n_chol_fail = 0;
  timers *tm = nullptr;
};

inline void mark(prob &p) {
  if (p.tm && p.tm->on) cudaEventRecord(p.tm->ev[p.tm->n++], p.s);
}

/* ---- mask_em_state.cu: allocation and bookkeeping, score, deletion ---- */
void prob_free(prob &p);
ss_status set_k(ss_ctx *ctx, prob &p, int64_t k);
ss_status prob_init(ss_ctx *ctx, prob &p, const ss_backend *be, const ss_mask_em_opts *o, int64_t n_cap, int64_t d,
                    int64_t k_cap, bool own_rows);
ss_status counts(ss_ctx *ctx, prob &p);
ss_status group(ss_ctx *ctx, prob &p);
void compact(prob &p, ss_ctx *ctx, ss_status *st);
ss_status diff_hash(ss_ctx *ctx, prob &p, const int32_t *prev, int64_t *changed, uint64_t *hash);
ss_status score(ss_ctx *ctx, prob &p, double *sc, int64_t *live);
ss_status delete_step(ss_ctx *ctx, prob &p, int64_t *n_deleted);

/* ---- mask_em_mstep.cu: group by label, then the M-step ---- */
ss_status mstep(ss_ctx *ctx, prob &p);

/* ---- mask_em_estep.cu: the block-part kernel plan, the E-step, the C-step ---- */
ss_status quad_plan(ss_ctx *ctx, prob &p, int64_t e_cap);
ss_status quad_opt_in(ss_ctx *ctx, const prob &p);
ss_status estep(ss_ctx *ctx, prob &p);
ss_status cstep(ss_ctx *ctx, prob &p, int64_t *changed, int64_t *unassigned);

} // namespace ss_em_cuda

#endif
