/* test_features.c — Jacobi eigen-decomposition, PCA on data with known principal axes, the
 * regulariser for channels without unmasked spikes, deterministic subsets, projection layout. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "stages/features/features_pca.h"
#include "core/rng.h"
#include "ss_test.h"

static void jacobi_known_matrix(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  /* Q diag(5, 2, -1) Qᵀ with a rotation Q in the (0,2) plane */
  double c = cos(0.7), s = sin(0.7);
  double q[9] = {c, 0, -s, 0, 1, 0, s, 0, c}, d[3] = {5, 2, -1}, a[9] = {0};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++)
      for (int k = 0; k < 3; k++) a[i * 3 + j] += q[i * 3 + k] * d[k] * q[j * 3 + k];
  double ev[3], vec[9];
  assert_int_equal(ss_eigen_symmetric(&ctx, 3, a, ev, vec), SS_OK);
  for (int k = 0; k < 3; k++) assert_true(fabs(ev[k] - d[k]) < 1e-12);
  for (int k = 0; k < 3; k++) {
    /* eigenvector k is column k of Q, with its largest-magnitude entry positive */
    double sign = 0, dot = 0;
    int big = 0;
    for (int i = 0; i < 3; i++) {
      if (fabs(vec[k * 3 + i]) > fabs(vec[k * 3 + big])) big = i;
      dot += vec[k * 3 + i] * q[i * 3 + k];
    }
    sign = vec[k * 3 + big];
    assert_true(sign > 0);
    assert_true(fabs(fabs(dot) - 1.0) < 1e-12);
  }
}

/* Waveforms on two channels: channel 0 varies along u (σ 3) and v (σ 1.5), channel 1 along v then u;
 * the fitted bases recover those axes, and the features are the projections. */
static void known_principal_axes(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  enum { N = 4000, CH = 2, W = 8, P = 3 };
  double u[W], v[W];
  for (int j = 0; j < W; j++) {
    u[j] = sin(3.14159265358979 * (j + 0.5) / W);
    v[j] = cos(3.14159265358979 * (j + 0.5) / W);
  }
  double nu = 0, nv = 0;
  for (int j = 0; j < W; j++) nu += u[j] * u[j], nv += v[j] * v[j];
  for (int j = 0; j < W; j++) u[j] /= sqrt(nu), v[j] /= sqrt(nv);
  float *wf = malloc(sizeof(float) * N * CH * W), *mk = malloc(sizeof(float) * N * CH);
  ss_rng r = ss_rng_make(11, SS_RNG_TEST, 0);
  for (int i = 0; i < N; i++) {
    double a = 3.0 * ss_rng_next_normal(&r), b = 1.5 * ss_rng_next_normal(&r);
    for (int j = 0; j < W; j++) {
      wf[(i * CH + 0) * W + j] = (float)(a * u[j] + b * v[j] + 0.01 * ss_rng_next_normal(&r));
      wf[(i * CH + 1) * W + j] = (float)(a * v[j] + b * u[j] + 0.01 * ss_rng_next_normal(&r));
    }
    mk[i * CH] = mk[i * CH + 1] = 1.0f;
  }
  ss_pca pca;
  assert_int_equal(ss_pca_fit(&ctx, NULL, wf, mk, N, CH, W, P, &pca), SS_OK);
  const double *axes[2][2] = {{u, v}, {v, u}};
  for (int c = 0; c < CH; c++) {
    for (int k = 0; k < 2; k++) {
      double dot = 0;
      for (int j = 0; j < W; j++) dot += pca.basis[(c * P + k) * W + j] * axes[c][k][j];
      if (fabs(fabs(dot) - 1) > 1e-3) fail_msg("channel %d component %d: |<basis, axis>| = %g", c, k, fabs(dot));
    }
    assert_true(fabs(pca.eigenvalues[c * P] - 9.0) < 0.6 && fabs(pca.eigenvalues[c * P + 1] - 2.25) < 0.15);
    assert_true(pca.eigenvalues[c * P + 2] < 0.01);
  }
  float *fet = malloc(sizeof(float) * N * CH * P);
  assert_int_equal(ss_pca_project(&ctx, NULL, &pca, wf, N, fet), SS_OK);
  for (int i = 0; i < 5; i++)
    for (int c = 0; c < CH; c++)
      for (int k = 0; k < P; k++) {
        double dot = 0;
        for (int j = 0; j < W; j++) dot += pca.basis[(c * P + k) * W + j] * wf[(i * CH + c) * W + j];
        assert_true(fabs(fet[(i * CH + c) * P + k] - dot) < 1e-4);
      }
  ss_pca_free(&pca);
  /* a channel masked everywhere gets the eigenvectors of the pooled regulariser: here channel 0's
   * axes mixed with channel 1's, still an orthonormal basis */
  for (int i = 0; i < N; i++) mk[i * CH + 1] = 0.0f;
  assert_int_equal(ss_pca_fit(&ctx, NULL, wf, mk, N, CH, W, P, &pca), SS_OK);
  for (int k = 0; k < P; k++) {
    double nn = 0;
    for (int j = 0; j < W; j++) nn += pca.basis[(1 * P + k) * W + j] * pca.basis[(1 * P + k) * W + j];
    assert_true(fabs(nn - 1) < 1e-5);
  }
  ss_pca_free(&pca);
  /* no spike at all: unit vectors */
  assert_int_equal(ss_pca_fit(&ctx, NULL, wf, mk, 0, CH, W, P, &pca), SS_OK);
  assert_true(pca.basis[0] == 1.0f && pca.basis[W + 1] == 1.0f);
  ss_pca_free(&pca);
  assert_int_equal(ss_pca_fit(&ctx, NULL, wf, mk, N, CH, 2, 3, &pca), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "features: n_pcs: 3 components asked of 2-sample waveforms");
  free(wf);
  free(mk);
  free(fet);
}

static void subset_is_deterministic(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t *a, *b, na, nb;
  assert_int_equal(ss_pca_subset(&ctx, 42, 100000, 10000, &a, &na), SS_OK);
  assert_int_equal(ss_pca_subset(&ctx, 42, 100000, 10000, &b, &nb), SS_OK);
  assert_int_equal(na, 10000);
  assert_memory_equal(a, b, sizeof(int64_t) * 10000);
  for (int64_t i = 1; i < na; i++) assert_true(a[i] > a[i - 1]);
  assert_true(a[na - 1] > 90000 && a[0] < 1000); /* spread over the whole range */
  free(b);
  assert_int_equal(ss_pca_subset(&ctx, 43, 100000, 10000, &b, &nb), SS_OK);
  assert_true(memcmp(a, b, sizeof(int64_t) * 10000) != 0);
  free(a);
  free(b);
  assert_int_equal(ss_pca_subset(&ctx, 42, 50, 10000, &a, &na), SS_OK);
  assert_int_equal(na, 50);
  assert_int_equal(a[49], 49);
  free(a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(jacobi_known_matrix),
      cmocka_unit_test(known_principal_axes),
      cmocka_unit_test(subset_is_deterministic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
