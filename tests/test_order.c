/* test_order.c — order statistics (core/order.h) against a full sort on fresh random arrays, ties included. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/order.h"
#include "core/rng.h"
#include "ss_test.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void kth_and_median_match_a_sort(void **state) {
  (void)state;
  ss_rng r = ss_rng_make((uint64_t)time(NULL), SS_RNG_TEST, 3);
  double a[257], sorted[257], work[257];
  for (int round = 0; round < 400; round++) {
    int n = 1 + (int)(ss_rng_next_uniform(&r) * 256);
    int levels = round % 3 ? 1 << 20 : 5; /* every third round: many ties */
    for (int i = 0; i < n; i++) a[i] = (double)(int)(ss_rng_next_uniform(&r) * levels);
    memcpy(sorted, a, sizeof(double) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(double), cmp_double);
    int k = (int)(ss_rng_next_uniform(&r) * n);
    memcpy(work, a, sizeof(double) * (size_t)n);
    assert_true(ss_order_kth(work, n, k) == sorted[k]);
    for (int i = 0; i < k; i++) assert_true(work[i] <= sorted[k]);
    memcpy(work, a, sizeof(double) * (size_t)n);
    double med = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    assert_true(ss_order_median(work, n) == med);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(kth_and_median_match_a_sort)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
