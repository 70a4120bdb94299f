/* mask_em_test_util.h — synthetic masked-EM data sets shared by test_mask_em.c and
 * gpu_test_mask_em.c (header-only: both programs are single files). */
#ifndef SS_MASK_EM_TEST_UTIL_H
#define SS_MASK_EM_TEST_UTIL_H

#include <stdlib.h>

#include "stages/mask_em/mask_em_synth.h"
#include "ss_test.h"

typedef struct {
  float *x, *m;
  int32_t *truth;
  int64_t n, d;
} synth_set;

static inline synth_set make_synth(int64_t n, int64_t channels, int64_t units, uint64_t seed) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_synth_opts so;
  ss_synth_defaults(&so, n, seed);
  so.channels = channels;
  so.units = units;
  synth_set s = {.n = n, .d = channels * so.per_channel};
  assert_int_equal(ss_synth_generate(&ctx, &so, &s.x, &s.m, &s.truth), SS_OK);
  return s;
}

static inline void free_synth(synth_set *s) {
  free(s->x);
  free(s->m);
  free(s->truth);
}

#endif
