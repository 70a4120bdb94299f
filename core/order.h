/* order.h — order statistics on double arrays: the k-th smallest and the median, in place. */
#ifndef SS_ORDER_H
#define SS_ORDER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The k-th smallest of a[0..n) (0-based, 0 <= k < n); reorders a so that a[0..k) holds values <= it. */
double ss_order_kth(double *a, int64_t n, int64_t k);
/* The median of a[0..n), n >= 1 (the mean of the two middle values when n is even); reorders a. */
double ss_order_median(double *a, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
