/* features_pca.c — per-channel PCA on the CPU: subset choice, Klusta's regularised covariances, Jacobi
 * eigen-decomposition and projection. */
#include "stages/features/features_pca.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

/* Jacobi stops when the off-diagonal mass falls below this fraction of the total, or after the
 * sweep cap (quadratic convergence makes ~10 sweeps typical). */
#define SS_JACOBI_REL_TOL 1e-30
#define SS_JACOBI_MAX_SWEEPS 100

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

ss_status ss_pca_subset(ss_ctx *ctx, uint64_t seed, int64_t n, int64_t max, int64_t **idx, int64_t *n_idx) {
  *idx = NULL;
  *n_idx = 0;
  int64_t *all = NULL;
  SS_TRY(SS_ALLOC(ctx, all, (size_t)(n > 0 ? n : 1), "PCA subset"));
  for (int64_t i = 0; i < n; i++) all[i] = i;
  int64_t m = n;
  if (n > max) {
    ss_rng r = ss_rng_make(seed, SS_RNG_PCA_SUBSET, 0);
    ss_rng_shuffle(&r, all, (size_t)n);
    m = max;
    qsort(all, (size_t)m, sizeof(int64_t), cmp_i64);
  }
  *idx = all;
  *n_idx = m;
  return SS_OK;
}

static void rotate(double *m, int n, int p, int q, double c, double s, int rows_too) {
  for (int k = 0; k < n; k++) { /* columns p, q: M J */
    double kp = m[k * n + p], kq = m[k * n + q];
    m[k * n + p] = c * kp - s * kq;
    m[k * n + q] = s * kp + c * kq;
  }
  if (!rows_too) return;
  for (int k = 0; k < n; k++) { /* rows p, q: Jᵀ M */
    double pk = m[p * n + k], qk = m[q * n + k];
    m[p * n + k] = c * pk - s * qk;
    m[q * n + k] = s * pk + c * qk;
  }
}

ss_status ss_eigen_symmetric(ss_ctx *ctx, int n, double *a, double *evals, double *evecs) {
  double *v = NULL;
  int *ord = NULL;
  SS_TRY(SS_CALLOC(ctx, v, (size_t)n * n, "eigenvectors"));
  if (SS_ALLOC(ctx, ord, (size_t)n, "eigenvalue order") != SS_OK) {
    free(v);
    return SS_ERR_NOMEM;
  }
  for (int i = 0; i < n; i++) v[i * n + i] = 1.0;
  for (int sweep = 0; sweep < SS_JACOBI_MAX_SWEEPS; sweep++) {
    double off = 0, total = 0;
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++) {
        total += a[i * n + j] * a[i * n + j];
        if (i != j) off += a[i * n + j] * a[i * n + j];
      }
    if (off <= SS_JACOBI_REL_TOL * total) break;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) {
        double apq = a[p * n + q];
        if (apq == 0.0) continue;
        double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        rotate(a, n, p, q, c, s, 1);
        a[p * n + q] = a[q * n + p] = 0.0;
        rotate(v, n, p, q, c, s, 0);
      }
  }
  /* order by descending eigenvalue, ties by index (insertion sort: n is small) */
  for (int i = 0; i < n; i++) {
    int k = i;
    while (k > 0 && a[ord[k - 1] * n + ord[k - 1]] < a[i * n + i]) {
      ord[k] = ord[k - 1];
      k--;
    }
    ord[k] = i;
  }
  for (int k = 0; k < n; k++) {
    int col = ord[k];
    evals[k] = a[col * n + col];
    int big = 0;
    for (int i = 1; i < n; i++)
      if (fabs(v[i * n + col]) > fabs(v[big * n + col])) big = i;
    double sign = v[big * n + col] < 0 ? -1.0 : 1.0;
    for (int i = 0; i < n; i++) evecs[k * n + i] = sign * v[i * n + col];
  }
  free(v);
  free(ord);
  return SS_OK;
}

void ss_pca_free(ss_pca *pca) {
  free(pca->basis);
  free(pca->eigenvalues);
  memset(pca, 0, sizeof(*pca));
}

/* Covariance (n − 1 denominator) from the count, sum and sum of outer products. */
static void covariance(int w, double n, const double *s1, const double *s2, double *cov) {
  for (int i = 0; i < w; i++)
    for (int j = 0; j < w; j++) cov[i * w + j] = (s2[i * w + j] - s1[i] * s1[j] / n) / (n - 1.0);
}

ss_status ss_pca_fit_cpu(ss_ctx *ctx, const float *waveforms, const float *masks, int64_t n, int n_channels, int n_wave,
                         int n_pcs, ss_pca *out) {
  memset(out, 0, sizeof(*out));
  const int C = n_channels, W = n_wave, P = n_pcs;
  if (P > W) return ss_fail(ctx, SS_ERR_INPUT, "features: n_pcs: %d components asked of %d-sample waveforms", P, W);
  double *s1 = NULL, *s2 = NULL, *cnt = NULL, *reg = NULL, *cov = NULL, *evals = NULL, *evecs = NULL;
  ss_status st = SS_ERR_NOMEM;
  if (SS_CALLOC(ctx, s1, (size_t)C * W, "PCA sums") != SS_OK ||
      SS_CALLOC(ctx, s2, (size_t)C * W * W, "PCA sums") != SS_OK ||
      SS_CALLOC(ctx, cnt, (size_t)C, "PCA counts") != SS_OK ||
      SS_CALLOC(ctx, reg, (size_t)W * W, "PCA regulariser") != SS_OK ||
      SS_ALLOC(ctx, cov, (size_t)W * W, "PCA covariance") != SS_OK ||
      SS_ALLOC(ctx, evals, (size_t)W, "eigenvalues") != SS_OK ||
      SS_ALLOC(ctx, evecs, (size_t)W * W, "eigenvectors") != SS_OK ||
      SS_ALLOC(ctx, out->basis, (size_t)C * P * W, "PCA basis") != SS_OK ||
      SS_ALLOC(ctx, out->eigenvalues, (size_t)C * P, "PCA eigenvalues") != SS_OK)
    goto done;
  for (int64_t i = 0; i < n; i++)
    for (int c = 0; c < C; c++) {
      if (!(masks[i * C + c] > 0)) continue;
      const float *x = waveforms + (i * C + c) * W;
      double *a1 = s1 + (size_t)c * W, *a2 = s2 + (size_t)c * W * W;
      cnt[c] += 1;
      for (int j = 0; j < W; j++) {
        a1[j] += x[j];
        for (int k = 0; k < W; k++) a2[j * W + k] += (double)x[j] * x[k];
      }
    }
  /* the regulariser R: pooled covariance of every unmasked (spike, channel) waveform */
  double n_all = 0;
  for (int c = 0; c < C; c++) n_all += cnt[c];
  if (n_all >= 2) {
    double *p1 = evals, *p2 = evecs; /* scratch */
    memset(p1, 0, (size_t)W * sizeof(double));
    memset(p2, 0, (size_t)W * W * sizeof(double));
    for (int c = 0; c < C; c++)
      for (int j = 0; j < W * W; j++) p2[j] += s2[(size_t)c * W * W + j];
    for (int c = 0; c < C; c++)
      for (int j = 0; j < W; j++) p1[j] += s1[(size_t)c * W + j];
    covariance(W, n_all, p1, p2, reg);
  } else {
    for (int j = 0; j < W; j++) reg[j * W + j] = 1.0;
  }
  const double alpha = 1.0 / (double)(n > 0 ? n : 1);
  for (int c = 0; c < C; c++) {
    if (cnt[c] >= 2) covariance(W, cnt[c], s1 + (size_t)c * W, s2 + (size_t)c * W * W, cov);
    else memset(cov, 0, (size_t)W * W * sizeof(double));
    for (int j = 0; j < W * W; j++) cov[j] += alpha * reg[j];
    if ((st = ss_eigen_symmetric(ctx, W, cov, evals, evecs)) != SS_OK) goto done;
    for (int k = 0; k < P; k++) {
      out->eigenvalues[c * P + k] = evals[k];
      for (int j = 0; j < W; j++) out->basis[((size_t)c * P + k) * W + j] = (float)evecs[k * W + j];
    }
  }
  out->n_channels = C;
  out->n_wave = W;
  out->n_pcs = P;
  out->n_fit = n;
  st = SS_OK;
done:
  free(s1);
  free(s2);
  free(cnt);
  free(reg);
  free(cov);
  free(evals);
  free(evecs);
  if (st != SS_OK) ss_pca_free(out);
  return st;
}

ss_status ss_pca_fit(ss_ctx *ctx, const ss_backend *be, const float *waveforms, const float *masks, int64_t n,
                     int n_channels, int n_wave, int n_pcs, ss_pca *out) {
  /* The basis is fitted on the CPU whatever the backend: it sees at most pca_max_spikes excerpt spikes
   * once per recording (C small W × W eigenproblems), so a device twin would gain nothing. */
  (void)be;
  return ss_pca_fit_cpu(ctx, waveforms, masks, n, n_channels, n_wave, n_pcs, out);
}

ss_status ss_pca_project_cpu(ss_ctx *ctx, const ss_pca *pca, const float *waveforms, int64_t n, float *features) {
  (void)ctx;
  const int C = pca->n_channels, W = pca->n_wave, P = pca->n_pcs;
  for (int64_t i = 0; i < n; i++)
    for (int c = 0; c < C; c++) {
      const float *x = waveforms + (i * C + c) * W;
      for (int k = 0; k < P; k++) {
        const float *b = pca->basis + ((size_t)c * P + k) * W;
        double acc = 0;
        for (int j = 0; j < W; j++) acc += (double)b[j] * x[j];
        features[(i * C + c) * P + k] = (float)acc;
      }
    }
  return SS_OK;
}

ss_status ss_pca_project(ss_ctx *ctx, const ss_backend *be, const ss_pca *pca, const float *waveforms, int64_t n,
                         float *features) {
  if (be && be->kind == SS_DEVICE_CUDA) return ss_pca_project_cuda_host(ctx, be, pca, waveforms, n, features);
  return ss_pca_project_cpu(ctx, pca, waveforms, n, features);
}
