/* order.c — Hoare quickselect with a median-of-three pivot, and the median built on it. */
#include "order.h"

double ss_order_kth(double *a, int64_t n, int64_t k) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    double x = a[lo], y = a[mid], z = a[hi];
    double piv = (x < y) ? (y < z ? y : (x < z ? z : x)) : (x < z ? x : (y < z ? z : y));
    int64_t i = lo, j = hi;
    while (i <= j) {
      while (a[i] < piv) i++;
      while (a[j] > piv) j--;
      if (i <= j) {
        double t = a[i];
        a[i++] = a[j];
        a[j--] = t;
      }
    }
    if (k <= j) hi = j;
    else if (k >= i) lo = i;
    else return a[k];
  }
  return a[k];
}

double ss_order_median(double *a, int64_t n) {
  double hi = ss_order_kth(a, n, n / 2);
  if (n % 2) return hi;
  double lo = a[0]; /* after the selection, a[0..n/2) holds the n/2 smallest values */
  for (int64_t i = 1; i < n / 2; i++) lo = a[i] > lo ? a[i] : lo;
  return 0.5 * (lo + hi);
}
