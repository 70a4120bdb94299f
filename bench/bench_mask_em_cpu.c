/* bench_mask_em_cpu.c — the CPU masked EM reference: complete runs to convergence on
 * synthetic spike features with realistic masks (stages/mask_em/mask_em_synth.h: 32 channels × 3 features,
 * 20 units, ~6 unmasked channels per spike), N = 2·10⁴ and 10⁵, with one thread and with all
 * threads. Each case reports wall time, iterations, time per full iteration, the share of time in
 * E-step, M-step, C-step + deletion and split rounds, the clusters found, ARI and merged ARI against
 * the truth, and whether the labels of the two thread counts are identical. One run per case (a
 * run is long and deterministic); the machine is described in "device".
 *
 * usage: bench_mask_em_cpu [--sizes N1,N2,...] [--threads T] [-o JSON] */
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
#define DEFAULT_OUT "bench/results/mask_em_cpu.json"
#define N_1E5 100000

typedef struct {
  double seconds, per_iteration_s, ari, merged_ari;
  int64_t iterations, clusters;
} run_stats;

static ss_status run_case(ss_ctx *ctx, const float *x, const float *m, const int32_t *truth, int64_t n, int64_t d,
                          int threads, cJSON *c, run_stats *rs, int32_t **labels) {
  ss_params p;
  ss_params_defaults(&p);
  ss_mask_em_opts o;
  ss_mask_em_opts_from_params(&o, &p);
  ss_mask_em_result r;
  SS_TRY(ss_mask_em_fit_cpu(ctx, threads, x, m, n, d, &o, &r));
  double steps = r.t_mstep_s + r.t_estep_s + r.t_cstep_s, total = r.t_total_s;
  rs->seconds = total;
  rs->iterations = r.n_iterations;
  rs->clusters = r.n_clusters;
  rs->per_iteration_s = steps / (double)r.n_iterations;
  ss_status s = ss_cluster_ari(ctx, r.labels, truth, n, &rs->ari);
  if (s == SS_OK) s = ss_cluster_merged_ari(ctx, r.labels, truth, n, &rs->merged_ari);
  cJSON_AddNumberToObject(c, "threads", threads);
  cJSON_AddNumberToObject(c, "seconds", total);
  cJSON_AddNumberToObject(c, "iterations", (double)r.n_iterations);
  cJSON_AddStringToObject(c, "stop", ss_mask_em_stop_name(r.stop));
  cJSON_AddNumberToObject(c, "full_iteration_s", rs->per_iteration_s);
  cJSON_AddNumberToObject(c, "seconds_per_iteration_incl_splits", total / (double)r.n_iterations);
  cJSON_AddNumberToObject(c, "fraction_estep", r.t_estep_s / total);
  cJSON_AddNumberToObject(c, "fraction_mstep", r.t_mstep_s / total);
  cJSON_AddNumberToObject(c, "fraction_cstep_deletion", r.t_cstep_s / total);
  cJSON_AddNumberToObject(c, "fraction_splits", r.t_split_s / total);
  cJSON_AddNumberToObject(c, "fraction_prepare", r.t_prepare_s / total);
  cJSON_AddNumberToObject(c, "starting_clusters", (double)r.start_clusters);
  cJSON_AddNumberToObject(c, "clusters", (double)r.n_clusters);
  cJSON_AddNumberToObject(c, "deletions", (double)r.n_deletions);
  cJSON_AddNumberToObject(c, "splits_tried", (double)r.n_splits_tried);
  cJSON_AddNumberToObject(c, "splits_accepted", (double)r.n_splits_accepted);
  cJSON_AddNumberToObject(c, "score", r.score);
  cJSON_AddNumberToObject(c, "ari", rs->ari);
  cJSON_AddNumberToObject(c, "merged_ari", rs->merged_ari);
  ss_log_info(ctx,
              "bench: N %lld, %d thread(s): %.2f s, %lld iterations (%.4f s per full iteration), %lld clusters, "
              "E %.0f%% M %.0f%% splits %.0f%%, ARI %.4f, merged ARI %.4f",
              (long long)n, threads, total, (long long)r.n_iterations, rs->per_iteration_s, (long long)r.n_clusters,
              100 * r.t_estep_s / total, 100 * r.t_mstep_s / total, 100 * r.t_split_s / total, rs->ari, rs->merged_ari);
  *labels = r.labels;
  r.labels = NULL;
  ss_mask_em_result_free(&r);
  return s;
}

static ss_status bench_size(ss_ctx *ctx, ss_bench_doc *doc, int64_t n, int all) {
  ss_synth_opts so;
  ss_synth_defaults(&so, n, SEED);
  float *x, *m;
  int32_t *truth, *l1 = NULL, *la = NULL;
  SS_TRY(ss_synth_generate(ctx, &so, &x, &m, &truth));
  int64_t d = so.channels * so.per_channel;
  char name[64];
  run_stats one, many;
  snprintf(name, sizeof(name), "n%lld_threads1", (long long)n);
  cJSON *c1 = ss_bench_case(doc, name);
  cJSON_AddNumberToObject(c1, "n", (double)n);
  cJSON_AddNumberToObject(c1, "d", (double)d);
  cJSON_AddNumberToObject(c1, "units", (double)so.units);
  ss_status s = run_case(ctx, x, m, truth, n, d, 1, c1, &one, &l1);
  if (s == SS_OK) {
    snprintf(name, sizeof(name), "n%lld_threads%d", (long long)n, all);
    cJSON *ca = ss_bench_case(doc, name);
    cJSON_AddNumberToObject(ca, "n", (double)n);
    cJSON_AddNumberToObject(ca, "d", (double)d);
    cJSON_AddNumberToObject(ca, "units", (double)so.units);
    s = run_case(ctx, x, m, truth, n, d, all, ca, &many, &la);
    if (s == SS_OK) {
      cJSON_AddBoolToObject(ca, "labels_identical_to_1_thread", memcmp(l1, la, sizeof(int32_t) * (size_t)n) == 0);
      cJSON_AddNumberToObject(ca, "speedup_vs_1_thread", one.seconds / many.seconds);
    }
  }
  if (s == SS_OK && n == N_1E5) {
    ss_bench_summary_number(doc, "cpu1_s_n1e5", one.seconds);
    ss_bench_summary_number(doc, "cpuall_s_n1e5", many.seconds);
    ss_bench_summary_number(doc, "iterations_n1e5", (double)one.iterations);
  }
  free(x);
  free(m);
  free(truth);
  free(l1);
  free(la);
  return s;
}

int main(int argc, char **argv) {
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  int64_t sizes[MAX_SIZES] = {20000, N_1E5};
  int n_sizes = 2, threads = 0;
  const char *out = DEFAULT_OUT;
  int opt;
  while ((opt = getopt(argc, argv, "s:t:o:")) != -1) {
    if (opt == 's') {
      n_sizes = ss_bench_parse_sizes(optarg, sizes, MAX_SIZES);
    } else if (opt == 't') {
      threads = atoi(optarg);
    } else if (opt == 'o') {
      out = optarg;
    } else {
      fprintf(stderr, "usage: bench_mask_em_cpu [-s N1,N2] [-t THREADS] [-o JSON]\n");
      return 2;
    }
  }
  int all = ss_threads_resolve(threads);
  char device[256];
  snprintf(device, sizeof(device), "CPU, %d threads", all);
  ss_bench_doc doc;
  ss_status s = ss_bench_doc_init(&ctx, &doc, "mask_em_cpu", device);
  for (int i = 0; s == SS_OK && i < n_sizes; i++) s = bench_size(&ctx, &doc, sizes[i], all);
  if (s == SS_OK) s = ss_bench_doc_write(&ctx, &doc, out);
  else ss_bench_doc_free(&doc);
  if (s != SS_OK) {
    fprintf(stderr, "bench_mask_em_cpu: %s\n", ss_error_message(&ctx));
    return 1;
  }
  printf("wrote %s\n", out);
  return 0;
}
