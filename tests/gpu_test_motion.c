/* gpu_test_motion.c — GPU group: the CUDA registration against the CPU reference on fresh random
 * chunks and random shifts (the seed is printed): 32 and 384 channels, chunks starting at any sample,
 * rows before the recording's start; the two agree exactly (the kernel keeps the CPU's unfused
 * arithmetic). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/rng.h"
#include "stages/motion/motion.h"
#if SS_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "ss_test.h"

static uint64_t seed;

static void one_case(int C, int columns, int64_t rows, int64_t row0, uint64_t stream) {
#if SS_HAVE_CUDA
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, stream);
  double *x = malloc(sizeof(double) * C), *y = malloc(sizeof(double) * C);
  for (int c = 0; c < C; c++) {
    x[c] = 16.0 * (c % columns);
    y[c] = 20.0 * (c / columns);
  }
  ss_probe probe;
  if (ss_probe_from_positions(&ctx, C, x, y, 40.0, &probe) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_motion m = {.n_bins = 37, .bin_samples = 997};
  m.shift_um = malloc(sizeof(double) * m.n_bins);
  for (int64_t b = 0; b < m.n_bins; b++) m.shift_um[b] = 60.0 * ss_rng_next_uniform(&r) - 30.0;
  ss_motion_reg reg;
  if (ss_motion_reg_build(&ctx, &m, &probe, C, &reg) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  size_t count = (size_t)rows * C;
  float *h = malloc(sizeof(float) * count), *want = malloc(sizeof(float) * count), *got = malloc(sizeof(float) * count);
  for (size_t i = 0; i < count; i++) h[i] = (float)(50.0 * ss_rng_next_normal(&r));
  memcpy(want, h, sizeof(float) * count);
  if (ss_motion_apply(&ctx, &reg, want, rows, row0) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_motion_cuda *g = NULL;
  if (ss_motion_cuda_open(&ctx, &reg, &g) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  float *d_in = NULL, *d_out = NULL;
  assert_int_equal(cudaMalloc((void **)&d_in, sizeof(float) * count), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d_out, sizeof(float) * count), cudaSuccess);
  assert_int_equal(cudaMemcpy(d_in, h, sizeof(float) * count, cudaMemcpyHostToDevice), cudaSuccess);
  if (ss_motion_apply_cuda(&ctx, g, d_in, d_out, rows, row0, NULL) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(cudaMemcpy(got, d_out, sizeof(float) * count, cudaMemcpyDeviceToHost), cudaSuccess);
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
  print_message("%d channels, %lld rows from %lld: %zu of %zu values differ\n", C, (long long)rows, (long long)row0,
                bad, count);
  assert_int_equal(bad, 0);
  cudaFree(d_in);
  cudaFree(d_out);
  ss_motion_cuda_close(g);
  ss_motion_reg_free(&reg);
  free(m.shift_um);
  ss_probe_free(&probe);
  free(x);
  free(y);
  free(h);
  free(want);
  free(got);
#else
  (void)C, (void)columns, (void)rows, (void)row0, (void)stream;
#endif
}

static void matches_cpu(void **state) {
  (void)state;
  one_case(32, 2, 30011, 0, 1);
  one_case(32, 2, 20000, 12345, 2);
  one_case(384, 4, 9000, 31000, 3);
  one_case(64, 4, 5000, -2000, 4); /* a chunk's left margin before the recording */
}

int main(void) {
  ss_test_require_gpu();
  seed = (uint64_t)time(NULL);
  printf("gpu_test_motion: seed %llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {cmocka_unit_test(matches_cpu)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
