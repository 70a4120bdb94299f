/* gpu_test_mask_em.c — GPU group: the CUDA masked EM (stages/mask_em/mask_em.cu) against the CPU reference.
 * Over the first 5 full iterations from the same mask-pattern start, cluster counts, weights,
 * means, diagonals, cluster masks and covariance blocks agree to a relative error ≤ 5e-5 and the
 * scores to 1e-9; complete fits on two synthetic datasets and on a simulated recording's features
 * (`simulate` + `detect`) give the CPU's clustering (ARI ≥ 0.99, same number of clusters); two GPU runs give identical labels and scores; `cluster --device cuda` works. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/klustakwik.h"
#include "io/matrix.h"
#include "stages/metrics/cluster_metrics.h"
#include "stages/mask_em/mask_em.h"
#include "stages/mask_em/mask_em_synth.h"
#include "mask_em_test_util.h"
#include "ss_test.h"

#define PARAM_RTOL 5e-5
#define SCORE_RTOL 1e-9
#define TRACE_ITERATIONS 5
#define ARI_MIN 0.99
#define SIM_SECONDS 20 /* simulated recording for the third dataset (~1,500 spikes) */

static ss_backend gpu;

static void default_opts(ss_mask_em_opts *o) {
  ss_params p;
  ss_params_defaults(&p);
  ss_mask_em_opts_from_params(o, &p);
}

/* |a − b| ≤ tol · max(|b|, scale) */
static void expect_close(double a, double b, double scale, double tol, const char *what, int64_t it, int64_t c,
                         int64_t i) {
  double err = fabs(a - b), ref = fmax(fabs(b), scale);
  if (!(err <= tol * ref))
    fail_msg("iteration %lld, cluster %lld, %s[%lld]: GPU %.17g, CPU %.17g (relative error %.3g)", (long long)it,
             (long long)c, what, (long long)i, a, b, err / ref);
}

/* The CPU model after its M-step against the GPU snapshot of the same iteration. */
static void compare_model(const ss_mask_em_state *st, const ss_mask_em_snapshot *g, int64_t it, double *worst) {
  const ss_mask_em_model *m = &st->model;
  int64_t d = m->d;
  assert_int_equal(g->k, m->k);
  for (int64_t c = 0; c < m->k; c++) {
    assert_int_equal(g->count[c], m->count[c]);
    expect_close(g->weight[c], m->weight[c], 0.0, PARAM_RTOL, "weight", it, c, 0);
    if (c == 0 || !m->alive[c]) continue;
    double dscale = 0.0;
    for (int64_t i = 0; i < d; i++) dscale = fmax(dscale, fabs(m->diag[c * d + i]));
    for (int64_t i = 0; i < d; i++) {
      expect_close(g->mean[c * d + i], m->mean[c * d + i], 0.0, PARAM_RTOL, "mean", it, c, i);
      expect_close(g->diag[c * d + i], m->diag[c * d + i], 0.0, PARAM_RTOL, "diag", it, c, i);
      *worst = fmax(*worst, fabs(g->mean[c * d + i] - m->mean[c * d + i]) / fabs(m->mean[c * d + i]));
    }
    int64_t u = m->n_u[c];
    assert_int_equal(g->n_u[c], u);
    assert_memory_equal(g->u_feat + c * d, m->u_feat + c * d, sizeof(int32_t) * (size_t)u);
    const double *B = m->block + m->block_off[c], *G = g->block + c * d * d;
    for (int64_t x = 0; x < u * u; x++) {
      expect_close(G[x], B[x], dscale, PARAM_RTOL, "block", it, c, x);
      *worst = fmax(*worst, fabs(G[x] - B[x]) / fmax(fabs(B[x]), dscale));
    }
  }
}

static void trace_on(const synth_set *s) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_mask_em_opts o;
  default_opts(&o);
  ss_mask_em_data data;
  memset(&data, 0, sizeof(data));
  assert_int_equal(ss_mask_em_prepare(&ctx, s->x, s->m, s->n, s->d, &o, 0, &data), SS_OK);
  ss_mask_em_state st;
  assert_int_equal(ss_mask_em_state_init(&ctx, &st, &data, &o, NULL, s->n, 1, o.num_starting_clusters, 0), SS_OK);
  int64_t k = 0;
  assert_int_equal(ss_mask_em_start_masks(&ctx, &data, o.num_starting_clusters, o.seed, st.labels, &k), SS_OK);
  assert_int_equal(ss_mask_em_state_set_k(&ctx, &st, k), SS_OK);
  ss_mask_em_compact(&st);
  ss_mask_em_snapshot snap[TRACE_ITERATIONS];
  memset(snap, 0, sizeof(snap));
  int32_t *glabels = malloc(sizeof(int32_t) * (size_t)s->n);
  ss_status rc = ss_mask_em_cuda_trace(&ctx, &gpu, &data, &o, st.labels, st.model.k, TRACE_ITERATIONS, snap, glabels);
  if (rc != SS_OK) fail_msg("trace: %s", ss_error_message(&ctx));
  double worst = 0.0;
  for (int64_t it = 0; it < TRACE_ITERATIONS; it++) {
    ss_mask_em_compact(&st);
    assert_int_equal(ss_mask_em_mstep(&ctx, &st), SS_OK);
    compare_model(&st, &snap[it], it + 1, &worst);
    assert_int_equal(ss_mask_em_estep(&ctx, &st), SS_OK);
    int64_t changed = ss_mask_em_cstep(&st), deleted = 0;
    assert_int_equal(ss_mask_em_delete(&ctx, &st, NULL, &deleted), SS_OK);
    double score = ss_mask_em_score(&st);
    printf("iteration %lld: k %lld, CPU score %.10f GPU %.10f, C-step changed %lld, deleted %lld/%lld\n",
           (long long)(it + 1), (long long)st.model.k, score, snap[it].score, (long long)changed, (long long)deleted,
           (long long)snap[it].deletions);
    assert_int_equal(snap[it].deletions, deleted);
    expect_close(snap[it].score, score, 0.0, SCORE_RTOL, "score", it + 1, 0, 0);
  }
  int64_t diff = 0;
  for (int64_t j = 0; j < s->n; j++) diff += glabels[j] != st.labels[j];
  printf("trace: worst relative parameter error %.3g; labels differing after %d iterations: %lld of %lld\n", worst,
         TRACE_ITERATIONS, (long long)diff, (long long)s->n);
  assert_int_equal(diff, 0);
  for (int i = 0; i < TRACE_ITERATIONS; i++) ss_mask_em_snapshot_free(&snap[i]);
  free(glabels);
  ss_mask_em_state_free(&st);
  ss_mask_em_data_free(&data);
}

static void first_iterations_agree(void **state) {
  (void)state;
  synth_set s = make_synth(6000, 16, 8, 11);
  trace_on(&s);
  free_synth(&s);
  synth_set t = make_synth(20000, 32, 20, 2025);
  trace_on(&t);
  free_synth(&t);
}

/* Complete fits on both backends: same number of clusters, ARI ≥ 0.99. */
static void compare_fits_with(const float *x, const float *m, int64_t n, int64_t d, const char *name, int kernel) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_mask_em_opts o;
  default_opts(&o);
  o.gpu_block_kernel = kernel;
  ss_mask_em_result rc, rg;
  ss_status st = ss_mask_em_fit_cpu(&ctx, 0, x, m, n, d, &o, &rc);
  if (st != SS_OK) fail_msg("%s: CPU fit: %s", name, ss_error_message(&ctx));
  st = ss_mask_em_fit(&ctx, &gpu, x, m, n, d, &o, &rg);
  if (st != SS_OK) fail_msg("%s: GPU fit: %s", name, ss_error_message(&ctx));
  double ari = 0;
  assert_int_equal(ss_cluster_ari(&ctx, rg.labels, rc.labels, n, &ari), SS_OK);
  printf("%s: N %lld D %lld: CPU %lld clusters, %lld iterations, %.2f s (score %.6f); GPU %lld clusters, %lld "
         "iterations, %.2f s (score %.6f); ARI GPU vs CPU %.5f\n",
         name, (long long)n, (long long)d, (long long)rc.n_clusters, (long long)rc.n_iterations, rc.t_total_s, rc.score,
         (long long)rg.n_clusters, (long long)rg.n_iterations, rg.t_total_s, rg.score, ari);
  assert_int_equal(rg.n_clusters, rc.n_clusters);
  assert_true(ari >= ARI_MIN);
  ss_mask_em_result_free(&rc);
  ss_mask_em_result_free(&rg);
}

static void compare_fits(const float *x, const float *m, int64_t n, int64_t d, const char *name) {
  compare_fits_with(x, m, n, d, name, SS_EM_BLOCK_AUTO);
}

/* The warp-union and global-memory block-part kernels (what very large D falls back to: 384
 * channels × 3 PCs do not fit either shared-memory kernel) give the CPU's fit too. */
static void block_kernels_agree(void **state) {
  (void)state;
  synth_set a = make_synth(6000, 16, 8, 4242);
  compare_fits_with(a.x, a.m, a.n, a.d, "block part: warp-union kernel", SS_EM_BLOCK_UNION);
  compare_fits_with(a.x, a.m, a.n, a.d, "block part: global-memory kernel", SS_EM_BLOCK_GLOBAL);
  free_synth(&a);
}

static void fits_agree_synthetic(void **state) {
  (void)state;
  synth_set a = make_synth(20000, 32, 20, 2025);
  compare_fits(a.x, a.m, a.n, a.d, "synthetic 32ch/20 units");
  free_synth(&a);
  synth_set b = make_synth(8000, 16, 8, 77);
  compare_fits(b.x, b.m, b.n, b.d, "synthetic 16ch/8 units");
  free_synth(&b);
}

/* The third dataset: features of a simulated recording (`simulate` + `detect`, 32 channels). */
static void fits_agree_simulated(void **state) {
  (void)state;
  char base[512], fet[700], fmask[700], args[2048];
  ss_test_path(base, sizeof(base), "simrec");
  snprintf(args, sizeof(args), "simulate -o '%s.nwb' --preset easy --duration %d -q", base, SIM_SECONDS);
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != 0) fail_msg("%s: exit %d: %s", args, rc, err);
  free(out);
  free(err);
  snprintf(args, sizeof(args), "detect '%s.nwb' -o '%s_det' -q", base, base);
  rc = ss_test_run_cli(args, &out, &err);
  if (rc != 0) fail_msg("%s: exit %d: %s", args, rc, err);
  free(out);
  free(err);
  snprintf(fet, sizeof(fet), "%s_det/simrec.fet.1", base);
  snprintf(fmask, sizeof(fmask), "%s_det/simrec.fmask.1", base);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_matrix fx, fm;
  if (ss_kk_read_features(&ctx, fet, fmask, 0, &fx, &fm) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  compare_fits(fx.data, fm.data, fx.rows, fx.cols, "simulated recording");
  ss_matrix_free(&fx);
  ss_matrix_free(&fm);
}

/* Two GPU runs: identical labels, score and iteration count. */
static void deterministic(void **state) {
  (void)state;
  synth_set s = make_synth(8000, 16, 8, 77);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_mask_em_opts o;
  default_opts(&o);
  ss_mask_em_result a, b;
  assert_int_equal(ss_mask_em_fit(&ctx, &gpu, s.x, s.m, s.n, s.d, &o, &a), SS_OK);
  assert_int_equal(ss_mask_em_fit(&ctx, &gpu, s.x, s.m, s.n, s.d, &o, &b), SS_OK);
  assert_int_equal(a.n_iterations, b.n_iterations);
  assert_memory_equal(&a.score, &b.score, sizeof(double));
  assert_memory_equal(a.labels, b.labels, sizeof(int32_t) * (size_t)s.n);
  ss_mask_em_result_free(&a);
  ss_mask_em_result_free(&b);
  free_synth(&s);
}

/* quick_steps is refused on the device too (never ignored). */
static void quick_steps_refused(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_mask_em_opts o;
  default_opts(&o);
  o.quick_steps = 1;
  float x[2] = {0, 1}, m[2] = {1, 1};
  ss_mask_em_result r;
  assert_int_equal(ss_mask_em_fit(&ctx, &gpu, x, m, 2, 1, &o, &r), SS_ERR_UNSUPPORTED);
  assert_string_equal(ss_error_message(&ctx), "mask_em.quick_steps: not implemented in this version (leave it off)");
}

/* `cluster --device cuda` gives the in-process GPU labels; `--device auto` picks the GPU and says so. */
static void cli_device_cuda(void **state) {
  (void)state;
  synth_set s = make_synth(3000, 8, 4, 33);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char base[512], fet[600], fmask[600], clu[600], args[4096];
  ss_test_path(base, sizeof(base), "gpu");
  snprintf(fet, sizeof(fet), "%s.fet.1", base);
  snprintf(fmask, sizeof(fmask), "%s.fmask.1", base);
  snprintf(clu, sizeof(clu), "%s.clu.1", base);
  ss_matrix mx = {s.n, s.d, s.x}, mm = {s.n, s.d, s.m};
  assert_int_equal(ss_kk_write_features(&ctx, fet, fmask, &mx, &mm), SS_OK);
  snprintf(args, sizeof(args), "cluster '%s' 1 --device cuda -q", base);
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != 0) fail_msg("%s: exit %d: %s", args, rc, err);
  free(out);
  free(err);
  ss_matrix fx, fm;
  assert_int_equal(ss_kk_read_features(&ctx, fet, fmask, 0, &fx, &fm), SS_OK);
  ss_mask_em_opts o;
  default_opts(&o);
  ss_mask_em_result r;
  assert_int_equal(ss_mask_em_fit(&ctx, &gpu, fx.data, fm.data, fx.rows, fx.cols, &o, &r), SS_OK);
  int64_t n, k;
  int32_t *labels;
  assert_int_equal(ss_kk_read_clu(&ctx, clu, &n, &labels, &k), SS_OK);
  assert_int_equal(n, s.n);
  for (int64_t i = 0; i < n; i++) assert_int_equal(labels[i], r.labels[i] + 1);
  snprintf(args, sizeof(args), "cluster '%s' 1 --device auto", base);
  rc = ss_test_run_cli(args, &out, &err);
  assert_int_equal(rc, 0);
  printf("auto: %s", err);
  assert_non_null(strstr(err, "device auto: using CUDA device"));
  free(out);
  free(err);
  free(labels);
  ss_mask_em_result_free(&r);
  ss_matrix_free(&fx);
  ss_matrix_free(&fm);
  free_synth(&s);
}

/* `sort --device cuda` runs masked EM on the GPU (and says so) and reaches the CPU sort's clusters
 * (ARI >= 0.99 on the final labels, same number of clusters). */
static void sort_device_cuda(void **state) {
  (void)state;
  char base[512], args[2048], clu[2][800];
  ss_test_path(base, sizeof(base), "sortrec");
  snprintf(args, sizeof(args), "simulate -o '%s.nwb' --preset easy --duration %d --seed 4 -q", base, SIM_SECONDS);
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != 0) fail_msg("%s: exit %d: %s", args, rc, err);
  free(out);
  free(err);
  static const char *const devices[2] = {"cpu", "cuda"};
  for (int d = 0; d < 2; d++) {
    snprintf(args, sizeof(args), "sort '%s.nwb' -o '%s_%s' --device %s", base, base, devices[d], devices[d]);
    rc = ss_test_run_cli(args, &out, &err);
    if (rc != 0) fail_msg("%s: exit %d: %s", args, rc, err);
    if (d == 1 && !strstr(err, "masked EM on cuda"))
      fail_msg("sort --device cuda did not run masked EM on cuda:\n%s", err);
    free(out);
    free(err);
    snprintf(clu[d], sizeof(clu[d]), "%s_%s/sortrec.clu.1", base, devices[d]);
  }
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t n[2], k[2];
  int32_t *labels[2];
  for (int d = 0; d < 2; d++)
    if (ss_kk_read_clu(&ctx, clu[d], &n[d], &labels[d], &k[d]) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(n[0], n[1]);
  assert_int_equal(k[0], k[1]);
  double ari = 0;
  assert_int_equal(ss_cluster_ari(&ctx, labels[0], labels[1], n[0], &ari), SS_OK);
  printf("sort cpu vs cuda: %lld spikes, %lld clusters, ARI %.5f\n", (long long)n[0], (long long)k[0], ari);
  assert_true(ari >= 0.99);
  free(labels[0]);
  free(labels[1]);
}

int main(void) {
  ss_test_require_gpu();
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 0, &gpu) != SS_OK) {
    fprintf(stderr, "cannot open the CUDA backend: %s\n", ss_error_message(&ctx));
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(quick_steps_refused),  cmocka_unit_test(first_iterations_agree),
      cmocka_unit_test(fits_agree_synthetic), cmocka_unit_test(block_kernels_agree),
      cmocka_unit_test(fits_agree_simulated), cmocka_unit_test(deterministic),
      cmocka_unit_test(cli_device_cuda),      cmocka_unit_test(sort_device_cuda),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  ss_backend_close(&gpu);
  return rc;
}
