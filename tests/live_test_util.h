/* live_test_util.h — what test_live.c and gpu_test_live.c share: collecting the engine's spikes and
 * ordering them (header-only: both programs are single files). */
#ifndef SS_LIVE_TEST_UTIL_H
#define SS_LIVE_TEST_UTIL_H

#include <stdlib.h>

#include "src/live.h"
#include "ss_test.h"

typedef struct {
  int64_t n, cap;
  ss_live_spike *s;
} collected;

/* The engine's emit callback: append to the collected list (user). */
static inline ss_status collect(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  (void)ctx;
  collected *c = user;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 1024;
    c->s = realloc(c->s, (size_t)c->cap * sizeof(*c->s));
    assert_non_null(c->s);
  }
  c->s[c->n++] = *s;
  return SS_OK;
}

/* qsort order of spikes: time, then channel. */
static inline int cmp_spike(const void *a, const void *b) {
  const ss_live_spike *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->channel > y->channel) - (x->channel < y->channel);
}

#endif
