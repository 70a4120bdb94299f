/* kmeans_math.h — the arithmetic both k-means backends must perform identically (private to
 * stages/kmeans/kmeans.c and stages/kmeans/kmeans.cu). Every function here is the single definition of a quantity:
 * the C file calls it on the host, the CUDA file on the device (or reproduces exactly the same
 * sequence of correctly rounded operations in a tiled kernel, as noted there). fmaf and the
 * double operations are correctly rounded on both sides; GCC does not contract in ISO C mode and
 * the explicit fmaf leaves nvcc nothing to contract. */
#ifndef SS_KMEANS_MATH_H
#define SS_KMEANS_MATH_H

#include <math.h>
#include <stdint.h>

#include "stages/kmeans/kmeans.h"

#if defined(__CUDACC__)
#define SS_KM_HD static inline __host__ __device__
#else
#define SS_KM_HD static inline
#endif

/* x' = x − s, the centred coordinate every computation starts from. */
SS_KM_HD float ss_km_centred(float x, float s) { return x - s; }

/* Σ (x' − c)² as an fmaf chain in dimension order: the reported distance (inertia, reseeding, D²). */
SS_KM_HD float ss_km_sqdist(const float *x, const float *s, const float *c, int64_t d) {
  float acc = 0.0f;
  for (int64_t j = 0; j < d; j++) {
    float t = ss_km_centred(x[j], s[j]) - c[j];
    acc = fmaf(t, t, acc);
  }
  return acc;
}

/* ‖c‖² as an fmaf chain. */
SS_KM_HD float ss_km_norm2(const float *c, int64_t d) {
  float acc = 0.0f;
  for (int64_t j = 0; j < d; j++) acc = fmaf(c[j], c[j], acc);
  return acc;
}

/* The assignment score from dot = fmaf chain of x'·c in dimension order: ‖c‖² − 2 x'·c. */
SS_KM_HD float ss_km_score(float dot, float cnorm2) { return fmaf(-2.0f, dot, cnorm2); }

/* Fixed-point value of a centred coordinate: exact integer sums make centroids order-independent. */
SS_KM_HD long long ss_km_fixed(float xc, double scale) { return llrint((double)xc * scale); }

/* Centroid coordinate from its fixed-point sum and count (count > 0). */
SS_KM_HD float ss_km_mean(long long sum, double inv_scale, long long count) {
  return (float)(((double)sum * inv_scale) / (double)count);
}

/* k-means++ pick among n points with D² values d2 and per-block tree sums bsum[nb] (blocks of
 * SS_KMEANS_PP_BLOCK), for the uniform draw u in [0, 1): the first point whose prefix exceeds
 * u · total, where total sums the blocks sequentially and the prefix inside the chosen block
 * continues sequentially from the blocks before it. All D² zero: point floor(u · n). */
SS_KM_HD int64_t ss_km_pp_select(const double *bsum, int64_t nb, const float *d2, int64_t n, double u) {
  double total = 0.0;
  for (int64_t b = 0; b < nb; b++) total += bsum[b];
  if (!(total > 0.0)) {
    int64_t i = (int64_t)(u * (double)n);
    return i < n ? i : n - 1;
  }
  double target = u * total, cum = 0.0;
  int64_t b = 0;
  for (; b < nb; b++) {
    double next = cum + bsum[b];
    if (next > target) break;
    cum = next;
  }
  if (b < nb) {
    int64_t lo = b * SS_KMEANS_PP_BLOCK, hi = lo + SS_KMEANS_PP_BLOCK < n ? lo + SS_KMEANS_PP_BLOCK : n;
    double acc = cum;
    for (int64_t i = lo; i < hi; i++) {
      acc += (double)d2[i];
      if (acc > target) return i;
    }
  }
  /* rounding left the target at the very end: the last point with a positive D² */
  for (int64_t i = n - 1; i > 0; i--)
    if (d2[i] > 0.0f) return i;
  return 0;
}

/* The fixed-point exponent: with |x'| ≤ max_abs, sums of up to n values stay below 2^62. */
SS_KM_HD double ss_km_scale(double max_abs, int64_t n) {
  int e = 0, nbits = 0;
  if (max_abs > 0.0) frexp(max_abs, &e); /* max_abs < 2^e */
  while (nbits < 62 && ((int64_t)1 << nbits) <= n) nbits++;
  return ldexp(1.0, 62 - e - nbits);
}

#endif
