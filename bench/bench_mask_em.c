/* bench_mask_em.c — masked EM, CPU reference vs the CUDA twin, on synthetic spike features
 * with realistic masks (stages/mask_em/mask_em_synth.h: 32 channels × 3 = 96 features, 20 units, ~6 unmasked
 * channels per spike):
 *   complete runs  (-s sizes, default 10⁴ and 10⁵): CPU 1 thread, CPU all threads, GPU — total time,
 *                  iterations, time per full iteration, clusters, ARI GPU vs CPU, merged ARI vs truth;
 *   one iteration  (-b N, default 10⁶) from the same mask-pattern state with K0 = 100: CPU 1 thread
 *                  (one iteration), CPU all threads, GPU (event-timed phases, median of 3);
 *   complete GPU run at N = -b (with -f).
 * Writes bench/results/mask_em.json (summary keys of the issue). Reports only; asserts nothing.
 *
 * usage: bench_mask_em [-s N1,N2] [-b N] [-f] [-F] [-t THREADS] [-o JSON]
 *   -f: also the complete GPU run at N = -b;  -F: only that run (its own JSON);  -b 0: no big case */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "stages/metrics/cluster_metrics.h"
#include "core/log.h"
#include "stages/mask_em/mask_em.h"
#include "stages/mask_em/mask_em_synth.h"

#define SEED 2025
#define MAX_SIZES 8
#define DEFAULT_OUT "bench/results/mask_em.json"
#define N_1E5 100000
#define BIG_K0 100 /* clusters (noise included) of the per-iteration state */
#define GPU_REPS 3 /* GPU per-iteration repeats (median) */

typedef struct {
  double seconds, per_iteration_s, merged_ari;
  int64_t iterations, clusters;
  int32_t *labels;
} run_stats;

static void default_opts(ss_mask_em_opts *o) {
  ss_params p;
  ss_params_defaults(&p);
  ss_mask_em_opts_from_params(o, &p);
}

static ss_status run_case(ss_ctx *ctx, const ss_backend *be, const float *x, const float *m, const int32_t *truth,
                          int64_t n, int64_t d, cJSON *c, run_stats *rs) {
  ss_mask_em_opts o;
  default_opts(&o);
  ss_mask_em_result r;
  ss_bench_gpu_mem mem;
  SS_TRY(ss_bench_gpu_mem_start(ctx, be, &mem));
  ss_status fit = ss_mask_em_fit(ctx, be, x, m, n, d, &o, &r);
  double peak_mib = ss_bench_gpu_mem_stop_mib(&mem);
  SS_TRY(fit);
  if (be->kind == SS_DEVICE_CUDA) cJSON_AddNumberToObject(c, "gpu_peak_mib", peak_mib);
  double steps = r.t_mstep_s + r.t_estep_s + r.t_cstep_s;
  rs->seconds = r.t_total_s;
  rs->iterations = r.n_iterations;
  rs->clusters = r.n_clusters;
  rs->per_iteration_s = steps / (double)r.n_iterations;
  ss_status s = ss_cluster_merged_ari(ctx, r.labels, truth, n, &rs->merged_ari);
  cJSON_AddStringToObject(c, "backend", be->kind == SS_DEVICE_CUDA ? "cuda" : "cpu");
  cJSON_AddNumberToObject(c, "threads", be->n_threads);
  cJSON_AddNumberToObject(c, "n", (double)n);
  cJSON_AddNumberToObject(c, "d", (double)d);
  cJSON_AddNumberToObject(c, "seconds", r.t_total_s);
  cJSON_AddNumberToObject(c, "prepare_s", r.t_prepare_s);
  cJSON_AddNumberToObject(c, "iterations", (double)r.n_iterations);
  cJSON_AddStringToObject(c, "stop", ss_mask_em_stop_name(r.stop));
  cJSON_AddNumberToObject(c, "full_iteration_s", rs->per_iteration_s);
  cJSON_AddNumberToObject(c, "mstep_s", r.t_mstep_s);
  cJSON_AddNumberToObject(c, "estep_s", r.t_estep_s);
  cJSON_AddNumberToObject(c, "cstep_deletion_score_s", r.t_cstep_s);
  cJSON_AddNumberToObject(c, "splits_s", r.t_split_s);
  cJSON_AddNumberToObject(c, "starting_clusters", (double)r.start_clusters);
  cJSON_AddNumberToObject(c, "clusters", (double)r.n_clusters);
  cJSON_AddNumberToObject(c, "deletions", (double)r.n_deletions);
  cJSON_AddNumberToObject(c, "splits_tried", (double)r.n_splits_tried);
  cJSON_AddNumberToObject(c, "splits_accepted", (double)r.n_splits_accepted);
  cJSON_AddNumberToObject(c, "score", r.score);
  cJSON_AddNumberToObject(c, "merged_ari_vs_truth", rs->merged_ari);
  ss_log_info(ctx, "bench: N %lld %s %d thread(s): %.2f s, %lld iterations (%.4f s per full iteration), %lld clusters",
              (long long)n, be->kind == SS_DEVICE_CUDA ? "cuda" : "cpu", be->n_threads, r.t_total_s,
              (long long)r.n_iterations, rs->per_iteration_s, (long long)r.n_clusters);
  rs->labels = r.labels;
  r.labels = NULL;
  ss_mask_em_result_free(&r);
  return s;
}

static ss_status bench_size(ss_ctx *ctx, ss_bench_doc *doc, const ss_backend *cpu1, const ss_backend *cpua,
                            const ss_backend *gpu, int64_t n) {
  ss_synth_opts so;
  ss_synth_defaults(&so, n, SEED);
  float *x, *m;
  int32_t *truth;
  SS_TRY(ss_synth_generate(ctx, &so, &x, &m, &truth));
  int64_t d = so.channels * so.per_channel;
  const ss_backend *bes[3] = {cpu1, cpua, gpu};
  const char *tags[3] = {"cpu1", "cpuall", "gpu"};
  run_stats rs[3];
  memset(rs, 0, sizeof(rs));
  ss_status s = SS_OK;
  cJSON *cases[3];
  for (int b = 0; s == SS_OK && b < 3; b++) {
    char name[64];
    snprintf(name, sizeof(name), "n%lld_%s", (long long)n, tags[b]);
    cases[b] = ss_bench_case(doc, name);
    s = run_case(ctx, bes[b], x, m, truth, n, d, cases[b], &rs[b]);
  }
  double ari = 0;
  if (s == SS_OK) s = ss_cluster_ari(ctx, rs[2].labels, rs[1].labels, n, &ari);
  if (s == SS_OK) {
    cJSON_AddNumberToObject(cases[2], "ari_vs_cpu", ari);
    cJSON_AddBoolToObject(cases[2], "same_clusters_as_cpu", rs[2].clusters == rs[1].clusters);
    cJSON_AddNumberToObject(cases[2], "speedup_vs_cpu1", rs[0].seconds / rs[2].seconds);
    cJSON_AddNumberToObject(cases[2], "speedup_vs_cpuall", rs[1].seconds / rs[2].seconds);
    cJSON_AddNumberToObject(cases[2], "per_iteration_speedup_vs_cpu1", rs[0].per_iteration_s / rs[2].per_iteration_s);
    ss_log_info(ctx, "bench: N %lld: ARI GPU vs CPU %.5f, clusters %lld vs %lld", (long long)n, ari,
                (long long)rs[2].clusters, (long long)rs[1].clusters);
    if (n == N_1E5) ss_bench_summary_number(doc, "ari_gpu_vs_cpu_n1e5", ari);
  }
  for (int b = 0; b < 3; b++) free(rs[b].labels);
  free(x);
  free(m);
  free(truth);
  return s;
}

/* One CPU full iteration (compaction, M, E, C, deletion, score) from `start`. */
static ss_status cpu_iteration(ss_ctx *ctx, const ss_mask_em_data *dt, const ss_mask_em_opts *o, const int32_t *start,
                               int64_t k, int threads, double *seconds) {
  ss_mask_em_state st;
  SS_TRY(ss_mask_em_state_init(ctx, &st, dt, o, NULL, dt->n, 1, k, threads));
  memcpy(st.labels, start, sizeof(int32_t) * (size_t)dt->n);
  ss_status s = ss_mask_em_state_set_k(ctx, &st, k);
  double t0 = ss_now();
  int64_t del = 0;
  ss_mask_em_compact(&st);
  if (s == SS_OK) s = ss_mask_em_mstep(ctx, &st);
  if (s == SS_OK) s = ss_mask_em_estep(ctx, &st);
  if (s == SS_OK) ss_mask_em_cstep(&st);
  if (s == SS_OK) s = ss_mask_em_delete(ctx, &st, NULL, &del);
  if (s == SS_OK) (void)ss_mask_em_score(&st);
  *seconds = ss_now() - t0;
  ss_mask_em_state_free(&st);
  return s;
}

static ss_status bench_iteration(ss_ctx *ctx, ss_bench_doc *doc, const ss_backend *gpu, int all, int64_t n) {
  ss_synth_opts so;
  ss_synth_defaults(&so, n, SEED);
  float *x, *m;
  int32_t *truth, *start = NULL;
  SS_TRY(ss_synth_generate(ctx, &so, &x, &m, &truth));
  int64_t d = so.channels * so.per_channel, k = 0;
  ss_mask_em_opts o;
  default_opts(&o);
  ss_mask_em_data dt;
  memset(&dt, 0, sizeof(dt));
  ss_status s = ss_mask_em_prepare(ctx, x, m, n, d, &o, all, &dt);
  if (s == SS_OK) s = SS_ALLOC(ctx, start, (size_t)n, "start labels");
  if (s == SS_OK) s = ss_mask_em_start_masks(ctx, &dt, BIG_K0, o.seed, start, &k);
  double t1 = 0, ta = 0;
  ss_mask_em_cuda_profile pr;
  memset(&pr, 0, sizeof(pr));
  if (s == SS_OK) s = ss_mask_em_cuda_profile_iteration(ctx, gpu, &dt, &o, start, k, GPU_REPS, &pr);
  if (s == SS_OK) s = cpu_iteration(ctx, &dt, &o, start, k, all, &ta);
  if (s == SS_OK) s = cpu_iteration(ctx, &dt, &o, start, k, 1, &t1);
  if (s == SS_OK) {
    char name[64];
    snprintf(name, sizeof(name), "iteration_n%lld_k%d", (long long)n, BIG_K0);
    cJSON *c = ss_bench_case(doc, name);
    cJSON_AddNumberToObject(c, "n", (double)n);
    cJSON_AddNumberToObject(c, "d", (double)d);
    cJSON_AddNumberToObject(c, "clusters", (double)k);
    cJSON_AddNumberToObject(c, "cpu1_s", t1);
    cJSON_AddNumberToObject(c, "cpu1_iterations_timed", 1);
    cJSON_AddNumberToObject(c, "cpuall_s", ta);
    cJSON_AddNumberToObject(c, "cpu_threads", all);
    cJSON_AddNumberToObject(c, "gpu_s", pr.total_s);
    cJSON_AddNumberToObject(c, "gpu_repeats_median_of", GPU_REPS);
    cJSON_AddNumberToObject(c, "gpu_mstep_incl_group_s", pr.mstep_s);
    cJSON_AddNumberToObject(c, "gpu_factor_s", pr.chol_s);
    cJSON_AddNumberToObject(c, "gpu_gemm_s", pr.gemm_s);
    cJSON_AddNumberToObject(c, "gpu_block_part_s", pr.block_s);
    cJSON_AddNumberToObject(c, "gpu_select_s", pr.select_s);
    cJSON_AddNumberToObject(c, "gpu_cstep_s", pr.cstep_s);
    cJSON_AddNumberToObject(c, "gpu_deletion_s", pr.delete_s);
    cJSON_AddNumberToObject(c, "gpu_score_s", pr.score_s);
    cJSON_AddNumberToObject(c, "speedup_vs_cpu1", t1 / pr.total_s);
    cJSON_AddNumberToObject(c, "speedup_vs_cpuall", ta / pr.total_s);
    ss_bench_summary_number(doc, "gpu_vs_cpu1_speedup_n1e6", t1 / pr.total_s);
    ss_bench_summary_number(doc, "gpu_vs_cpuall_speedup_n1e6", ta / pr.total_s);
    ss_log_info(ctx,
                "bench: iteration N %lld K %lld: CPU 1 thread %.3f s, %d threads %.3f s, GPU %.4f s (M %.4f, "
                "factor %.4f, GEMM %.4f, block %.4f, select %.4f, C %.4f, deletion %.4f, score %.4f)",
                (long long)n, (long long)k, t1, all, ta, pr.total_s, pr.mstep_s, pr.chol_s, pr.gemm_s, pr.block_s,
                pr.select_s, pr.cstep_s, pr.delete_s, pr.score_s);
  }
  ss_mask_em_data_free(&dt);
  free(start);
  free(x);
  free(m);
  free(truth);
  return s;
}

static ss_status bench_full(ss_ctx *ctx, ss_bench_doc *doc, const ss_backend *gpu, int64_t n) {
  ss_synth_opts so;
  ss_synth_defaults(&so, n, SEED);
  float *x, *m;
  int32_t *truth;
  SS_TRY(ss_synth_generate(ctx, &so, &x, &m, &truth));
  char name[64];
  snprintf(name, sizeof(name), "n%lld_gpu_complete", (long long)n);
  run_stats rs;
  memset(&rs, 0, sizeof(rs));
  ctx->log_level = SS_LOG_DEBUG; /* the run's plan lines (block-part kernel, shared memory) in the log */
  ss_status s = run_case(ctx, gpu, x, m, truth, n, so.channels * so.per_channel, ss_bench_case(doc, name), &rs);
  ctx->log_level = SS_LOG_INFO;
  if (s == SS_OK && n == 1000000) ss_bench_summary_number(doc, "gpu_total_s_n1e6", rs.seconds);
  free(rs.labels);
  free(x);
  free(m);
  free(truth);
  return s;
}

int main(int argc, char **argv) {
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  int64_t sizes[MAX_SIZES] = {10000, N_1E5}, big = 1000000;
  int n_sizes = 2, threads = 0, full = 0, only_full = 0;
  const char *out = DEFAULT_OUT;
  int opt;
  while ((opt = getopt(argc, argv, "s:b:fFt:o:")) != -1) {
    if (opt == 's') {
      n_sizes = ss_bench_parse_sizes(optarg, sizes, MAX_SIZES);
    } else if (opt == 'b') {
      big = atoll(optarg);
    } else if (opt == 'f') {
      full = 1;
    } else if (opt == 'F') {
      only_full = 1;
    } else if (opt == 't') {
      threads = atoi(optarg);
    } else if (opt == 'o') {
      out = optarg;
    } else {
      fprintf(stderr, "usage: bench_mask_em [-s N1,N2] [-b N] [-f] [-F] [-t THREADS] [-o JSON]\n");
      return 2;
    }
  }
  ss_backend cpu1, cpua, gpu;
  ss_status s = ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 1, &cpu1);
  if (s == SS_OK) s = ss_backend_open(&ctx, SS_DEVICE_CPU, 0, threads, &cpua);
  if (s == SS_OK) s = ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, threads, &gpu);
  if (s != SS_OK) {
    fprintf(stderr, "bench_mask_em: %s\n", ss_error_message(&ctx));
    return 1;
  }
  char device[512];
  ss_bench_device_string(&gpu, device, sizeof(device));
  ss_bench_doc doc;
  s = ss_bench_doc_init(&ctx, &doc, "mask_em", device);
  for (int i = 0; s == SS_OK && !only_full && i < n_sizes; i++)
    s = bench_size(&ctx, &doc, &cpu1, &cpua, &gpu, sizes[i]);
  if (s == SS_OK && !only_full && big > 0) s = bench_iteration(&ctx, &doc, &gpu, cpua.n_threads, big);
  if (s == SS_OK && (full || only_full) && big > 0) s = bench_full(&ctx, &doc, &gpu, big);
  if (s == SS_OK) s = ss_bench_doc_write(&ctx, &doc, out);
  else ss_bench_doc_free(&doc);
  ss_backend_close(&cpu1);
  ss_backend_close(&cpua);
  ss_backend_close(&gpu);
  if (s != SS_OK) {
    fprintf(stderr, "bench_mask_em: %s\n", ss_error_message(&ctx));
    return 1;
  }
  printf("wrote %s\n", out);
  return 0;
}
