/* rng.c — the few draws of the counter-based generator that are not one-liners. */
#include "rng.h"

#include <math.h>

#define SS_TWO_PI 6.283185307179586476925286766559

double ss_rng_next_normal(ss_rng *r) {
  double u1 = ss_rng_next_uniform(r);
  double u2 = ss_rng_next_uniform(r);
  /* 1 - u1 lies in (0, 1]: the log never sees 0 */
  return sqrt(-2.0 * log(1.0 - u1)) * cos(SS_TWO_PI * u2);
}

void ss_rng_shuffle(ss_rng *r, int64_t *idx, size_t n) {
  for (size_t i = n; i > 1; i--) {
    size_t j = (size_t)ss_rng_next_below(r, i);
    int64_t t = idx[i - 1];
    idx[i - 1] = idx[j];
    idx[j] = t;
  }
}
