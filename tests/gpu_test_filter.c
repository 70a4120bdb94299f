/* gpu_test_filter.c — GPU group: the CUDA filter and noise level against the CPU reference on fresh
 * random signals (noise, spike-like bumps, DC offsets; the seed is printed): zero-phase (1, 32 and 128
 * channels; lengths shorter than the warm-up and not multiples of the sub-block; in place on the
 * device), causal over a sequence of blocks with carried state (host and device-resident state), the
 * common median reference (ties, dead channels), noise levels and thresholds (identical σ; pooled and
 * per channel; several blocks; a dead and a flat channel), the error messages, and the kernel times
 * for a 10 s × 32 channel chunk (printed, not asserted). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "params/params.h"
#include "stages/filter/filter.h"
#include "core/log.h"
#include "core/rng.h"
#include "stages/threshold/threshold.h"
#if SS_HAVE_CUDA
#include <cuda_runtime.h>
#endif
#include "ss_test.h"

#define RATE_HZ 30000.0
#define FILTER_RTOL 1e-5 /* of max |x|: the bound for the zero-phase and causal filters */
#define MEDIAN_RTOL 1e-6
#define TIMING_ROWS 300000 /* 10 s at 30 kHz */
#define TIMING_CHANNELS 32
#define TIMING_REPEATS 5

static uint64_t seed;

typedef ss_test_backends backends;

/* n × C samples: per-channel DC offset and noise scale, negative bumps spread over a few neighbouring
 * channels every ~600 rows; quantised to integers when `ties` (many equal values). */
static float *make_signal(int64_t n, int C, uint64_t stream, int ties) {
  float *x = malloc(sizeof(float) * (size_t)(n * C));
  double *dc = malloc(sizeof(double) * C), *scale = malloc(sizeof(double) * C);
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, stream);
  for (int c = 0; c < C; c++) {
    dc[c] = 1000.0 * ss_rng_next_uniform(&r) - 500.0;
    scale[c] = 5.0 + 35.0 * ss_rng_next_uniform(&r);
  }
  for (int64_t t = 0; t < n; t++)
    for (int c = 0; c < C; c++) x[t * C + c] = (float)(dc[c] + scale[c] * ss_rng_next_normal(&r));
  for (int64_t t = (int64_t)ss_rng_next_below(&r, 600); t < n; t += 300 + (int64_t)ss_rng_next_below(&r, 600)) {
    int centre = (int)ss_rng_next_below(&r, (uint64_t)C);
    double amp = 100.0 + 200.0 * ss_rng_next_uniform(&r);
    for (int64_t k = -8; k <= 8; k++)
      for (int c = centre - 2; c <= centre + 2; c++)
        if (c >= 0 && c < C && t + k >= 0 && t + k < n)
          x[(t + k) * C + c] -= (float)(amp * exp(-0.5 * (k * k / 9.0 + (c - centre) * (c - centre))));
  }
  if (ties)
    for (int64_t i = 0; i < n * C; i++) x[i] = roundf(x[i] / 8.0f);
  free(dc);
  free(scale);
  return x;
}

static double max_abs(const float *x, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(x[i]));
  return m;
}

/* max |a − b| and the number of elements that differ at all */
static double max_diff(const float *a, const float *b, int64_t n, int64_t *n_diff) {
  double m = 0;
  *n_diff = 0;
  for (int64_t i = 0; i < n; i++) {
    m = fmax(m, fabs((double)a[i] - b[i]));
    *n_diff += a[i] != b[i];
  }
  return m;
}

static void design(ss_filter *f, int order, double rate) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_filter_design(&ctx, order, 500.0, 0.95 * rate / 2, rate, f) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

/* --- zero-phase -------------------------------------------------------------------------------- */

static void zero_phase_case(backends *b, const ss_filter *f, int C, int64_t n, uint64_t stream) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float *x = make_signal(n, C, stream, 0), *cpu = malloc(sizeof(float) * (size_t)(n * C)),
        *gpu = malloc(sizeof(float) * (size_t)(n * C));
  assert_int_equal(ss_filter_zero_phase(&ctx, &b->cpu, f, x, n, C, cpu), SS_OK);
  if (ss_filter_zero_phase(&ctx, &b->gpu, f, x, n, C, gpu) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  int64_t n_diff;
  double worst = max_diff(cpu, gpu, n * C, &n_diff), scale = max_abs(x, n * C);
  print_message(
      "zero-phase order %d, %d ch x %lld rows: max |diff| %.3g = %.3g of max|x|, %lld of %lld values differ\n",
      f->order, C, (long long)n, worst, worst / scale, (long long)n_diff, (long long)(n * C));
  if (worst > FILTER_RTOL * scale) fail_msg("zero-phase: max |diff| %g > %g x %g", worst, FILTER_RTOL, scale);
  free(x);
  free(cpu);
  free(gpu);
}

static void zero_phase_matches_cpu(void **state) {
  backends *b = *state;
  ss_filter f30, f20, f4;
  design(&f30, 3, RATE_HZ);
  design(&f20, 3, 20000.0);
  design(&f4, 4, RATE_HZ);
  /* the warm-up is ~530 rows at 30 kHz: 97 and 300 rows are shorter; the others are no multiple of
   * any sub-block length */
  const struct {
    const ss_filter *f;
    int C;
    int64_t n;
  } cases[] = {{&f30, 1, 97},     {&f30, 1, 100003},  {&f30, 32, 300},   {&f30, 32, 40001},
               {&f30, 128, 5003}, {&f30, 128, 20011}, {&f20, 32, 12345}, {&f4, 7, 33333}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    zero_phase_case(b, cases[i].f, cases[i].C, cases[i].n, 10 + i);
}

/* The device entry point in place (d_in == d_out) on an explicit stream gives the out-of-place
 * result; zero rows are a no-op; a filter with no sections is refused. */
static void zero_phase_device_in_place(void **state) {
  backends *b = *state;
#if SS_HAVE_CUDA
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_filter f;
  design(&f, 3, RATE_HZ);
  const int C = 32;
  const int64_t n = 20000;
  const size_t bytes = sizeof(float) * (size_t)(n * C);
  float *x = make_signal(n, C, 30, 0), *a = malloc(bytes), *g = malloc(bytes);
  float *d_x, *d_y;
  cudaStream_t s;
  assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d_x, bytes), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d_y, bytes), cudaSuccess);
  assert_int_equal(cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  assert_int_equal(ss_filter_zero_phase_cuda(&ctx, &b->gpu, &f, d_x, n, C, d_y, s), SS_OK);
  assert_int_equal(ss_filter_zero_phase_cuda(&ctx, &b->gpu, &f, d_x, n, C, d_x, s), SS_OK);
  assert_int_equal(ss_filter_zero_phase_cuda(&ctx, &b->gpu, &f, d_x, 0, C, d_x, s), SS_OK);
  assert_int_equal(cudaStreamSynchronize(s), cudaSuccess);
  assert_int_equal(cudaMemcpy(a, d_y, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_int_equal(cudaMemcpy(g, d_x, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  assert_memory_equal(a, g, bytes);
  ss_filter bad = f;
  bad.n_sections = 0;
  assert_int_equal(ss_filter_zero_phase_cuda(&ctx, &b->gpu, &bad, d_x, n, C, d_y, s), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "filter: sections: expected 1 to 8, got 0");
  cudaFree(d_x);
  cudaFree(d_y);
  cudaStreamDestroy(s);
  free(x);
  free(a);
  free(g);
#else
  (void)b;
#endif
}

/* --- causal -------------------------------------------------------------------------------------- */

/* Blocks of these sizes in turn, state carried: through the host dispatcher (state on the host) and
 * through the device entry point (state resident on the device), against the CPU. */
static void causal_case(backends *b, int C, uint64_t stream) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_filter f;
  design(&f, 3, RATE_HZ);
  const int64_t sizes[] = {1, 7, 300, 1000, 4001, 2};
  int64_t n = 0;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) n += sizes[i];
  const size_t bytes = sizeof(float) * (size_t)(n * C);
  float *x = make_signal(n, C, stream, 0), *cpu = malloc(bytes), *gpu = malloc(bytes), *dev = malloc(bytes);
  ss_filter_state sc, sg;
  assert_int_equal(ss_filter_state_init(&ctx, &f, C, &sc), SS_OK);
  assert_int_equal(ss_filter_state_init(&ctx, &f, C, &sg), SS_OK);
#if SS_HAVE_CUDA
  const size_t n_state = (size_t)2 * f.n_sections * C;
  double *d_z;
  float *d_x;
  int started = 0;
  assert_int_equal(cudaMalloc((void **)&d_z, sizeof(double) * n_state), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d_x, bytes), cudaSuccess);
  assert_int_equal(cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice), cudaSuccess);
#endif
  int64_t at = 0;
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    const float *in = x + at * C;
    assert_int_equal(ss_filter_causal(&ctx, &b->cpu, &f, &sc, in, sizes[i], cpu + at * C), SS_OK);
    if (ss_filter_causal(&ctx, &b->gpu, &f, &sg, in, sizes[i], gpu + at * C) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
#if SS_HAVE_CUDA /* in place on the device */
    if (ss_filter_causal_cuda(&ctx, &b->gpu, &f, d_z, &started, d_x + at * C, sizes[i], C, d_x + at * C, NULL) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
    assert_int_equal(started, 1);
#endif
    at += sizes[i];
  }
  assert_int_equal(sg.started, 1);
#if SS_HAVE_CUDA
  /* the kernels ran on the backend's non-blocking stream: the legacy default stream's copy does not
   * wait for them */
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(cudaMemcpy(dev, d_x, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(d_z);
  cudaFree(d_x);
#else
  memcpy(dev, gpu, bytes);
#endif
  int64_t n_diff, n_diff_dev;
  double scale = max_abs(x, n * C), worst = max_diff(cpu, gpu, n * C, &n_diff),
         worst_dev = max_diff(cpu, dev, n * C, &n_diff_dev), worst_z = 0;
  for (size_t i = 0; i < (size_t)2 * f.n_sections * C; i++) worst_z = fmax(worst_z, fabs(sc.z[i] - sg.z[i]));
  print_message("causal %d ch x %lld rows in 6 blocks: max |diff| %.3g (host state), %.3g (device state) of max|x| "
                "%.3g; %lld and %lld values differ; state max |diff| %.3g\n",
                C, (long long)n, worst, worst_dev, scale, (long long)n_diff, (long long)n_diff_dev, worst_z);
  if (worst > FILTER_RTOL * scale || worst_dev > FILTER_RTOL * scale)
    fail_msg("causal: max |diff| %g / %g > %g x %g", worst, worst_dev, FILTER_RTOL, scale);
  ss_filter_state_free(&sc);
  ss_filter_state_free(&sg);
  free(x);
  free(cpu);
  free(gpu);
  free(dev);
}

static void causal_matches_cpu(void **state) {
  backends *b = *state;
  const int channels[] = {1, 32, 128};
  for (int i = 0; i < 3; i++) causal_case(b, channels[i], 40 + i);
}

/* --- common median ------------------------------------------------------------------------------- */

static void median_case(backends *b, int C, int64_t n, const int *use, int ties, uint64_t stream) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const size_t bytes = sizeof(float) * (size_t)(n * C);
  float *cpu = make_signal(n, C, stream, ties), *gpu = malloc(bytes);
  memcpy(gpu, cpu, bytes);
  const double scale = max_abs(cpu, n * C);
  assert_int_equal(ss_filter_common_median(&ctx, &b->cpu, cpu, n, C, use), SS_OK);
  if (ss_filter_common_median(&ctx, &b->gpu, gpu, n, C, use) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  int64_t n_diff;
  double worst = max_diff(cpu, gpu, n * C, &n_diff);
  print_message("common median %d ch x %lld rows (%s%s): max |diff| %.3g, %lld values differ\n", C, (long long)n,
                use ? "dead channels" : "all used", ties ? ", ties" : "", worst, (long long)n_diff);
  if (worst > MEDIAN_RTOL * scale) fail_msg("common median: max |diff| %g > %g x %g", worst, MEDIAN_RTOL, scale);
  free(cpu);
  free(gpu);
}

static void common_median_matches_cpu(void **state) {
  backends *b = *state;
  int use[128];
  for (int c = 0; c < 128; c++) use[c] = c % 5 != 3;
  const int channels[] = {1, 2, 31, 32, 128};
  for (int i = 0; i < 5; i++) {
    median_case(b, channels[i], 3001, NULL, 0, 50 + i);
    median_case(b, channels[i], 3001, NULL, 1, 60 + i);
    median_case(b, channels[i], 2000, use, 1, 70 + i);
  }
  int none[4] = {0, 0, 0, 0}; /* no used channel: nothing changes */
  median_case(b, 4, 100, none, 0, 80);
}

/* --- noise levels and thresholds ----------------------------------------------------------------- */

/* n_blocks blocks of different lengths cut from one signal; channel 1 flat (if C > 2), channel 2 dead
 * (if C > 2); σ, weak and strong must be bit-identical to the CPU's, through the host dispatcher and
 * through the device entry point. */
static void thresholds_case(backends *b, int C, int noise_mode, int ties, uint64_t stream) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  p.detect.noise = noise_mode;
  const int64_t lens[] = {3001, 1, 2500, 0, 1777};
  const int n_blocks = (int)(sizeof(lens) / sizeof(lens[0]));
  int64_t n = 0;
  for (int i = 0; i < n_blocks; i++) n += lens[i];
  float *x = make_signal(n, C, stream, ties);
  int *use = malloc(sizeof(int) * C);
  for (int c = 0; c < C; c++) use[c] = !(C > 2 && c == 2);
  if (C > 2)
    for (int64_t t = 0; t < n; t++) x[t * C + 1] = 0.0f;
  ss_sample_block blocks[5];
  int64_t at = 0;
  for (int i = 0; i < n_blocks; i++) {
    blocks[i] = (ss_sample_block){x + at * C, lens[i]};
    at += lens[i];
  }
  ss_thresholds tc, tg, td;
  assert_int_equal(ss_threshold_compute_cpu(&ctx, &p, blocks, n_blocks, C, use, 1, &tc), SS_OK);
  if (ss_threshold_compute(&ctx, &b->gpu, &p, blocks, n_blocks, C, use, &tg) != SS_OK)
    fail_msg("%s", ss_error_message(&ctx));
#if SS_HAVE_CUDA
  float *d_x;
  assert_int_equal(cudaMalloc((void **)&d_x, sizeof(float) * (size_t)(n * C)), cudaSuccess);
  assert_int_equal(cudaMemcpy(d_x, x, sizeof(float) * (size_t)(n * C), cudaMemcpyHostToDevice), cudaSuccess);
  ss_sample_block dblocks[5];
  for (int i = 0; i < n_blocks; i++) dblocks[i] = (ss_sample_block){d_x + (blocks[i].x - x), lens[i]};
  if (ss_threshold_compute_cuda(&ctx, &b->gpu, &p, dblocks, n_blocks, C, use, &td) != SS_OK)
    fail_msg("%s", ss_error_message(&ctx));
  cudaFree(d_x);
#else
  assert_int_equal(ss_threshold_compute_cpu(&ctx, &p, blocks, n_blocks, C, use, 1, &td), SS_OK);
#endif
  int n_diff = 0;
  for (int c = 0; c < C; c++)
    n_diff += memcmp(&tc.sigma[c], &tg.sigma[c], sizeof(float)) || memcmp(&tc.sigma[c], &td.sigma[c], sizeof(float));
  print_message("noise %s, %d ch, %lld rows in %d blocks%s: %d channels with a different sigma (sigma[0] %.9g)\n",
                noise_mode == SS_NOISE_POOLED ? "pooled" : "per channel", C, (long long)n, n_blocks,
                ties ? ", ties" : "", n_diff, tc.sigma[0]);
  assert_int_equal(n_diff, 0);
  assert_memory_equal(tc.weak, tg.weak, sizeof(float) * C);
  assert_memory_equal(tc.strong, tg.strong, sizeof(float) * C);
  assert_memory_equal(tc.weak, td.weak, sizeof(float) * C);
  assert_memory_equal(tc.strong, td.strong, sizeof(float) * C);
  if (C > 2) { /* the dead channel is excluded; the flat one too when it has its own noise level */
    assert_true(isinf(tg.weak[2]) && tg.sigma[2] == 0.0f);
    if (noise_mode == SS_NOISE_PER_CHANNEL) assert_true(isinf(tg.weak[1]) && tg.sigma[1] == 0.0f);
  }
  ss_thresholds_free(&tc);
  ss_thresholds_free(&tg);
  ss_thresholds_free(&td);
  free(x);
  free(use);
}

static void thresholds_match_cpu(void **state) {
  backends *b = *state;
  const int channels[] = {1, 32, 128};
  for (int i = 0; i < 3; i++)
    for (int ties = 0; ties < 2; ties++) {
      thresholds_case(b, channels[i], SS_NOISE_PER_CHANNEL, ties, 90 + 4 * i + ties);
      thresholds_case(b, channels[i], SS_NOISE_POOLED, ties, 92 + 4 * i + ties);
    }
}

/* --- errors -------------------------------------------------------------------------------------- */

/* Bad arguments give the CPU's status and message on the GPU. */
static void errors_match_cpu(void **state) {
  backends *b = *state;
  ss_ctx cc, gc;
  ss_test_ctx(&cc);
  ss_test_ctx(&gc);
  ss_params p;
  ss_params_defaults(&p);
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int dead[2] = {0, 0};
  ss_sample_block some = {x, 4}, empty = {x, 0};
  ss_thresholds th;
  const struct {
    const ss_sample_block *blocks;
    int n_blocks;
    const int *use;
    const char *msg;
  } cases[] = {{&empty, 1, NULL, "threshold: no samples to estimate the noise level from"},
               {&some, 0, NULL, "threshold: no samples to estimate the noise level from"},
               {&some, 1, dead, "threshold: every channel is marked dead"}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    assert_int_equal(ss_threshold_compute(&cc, &b->cpu, &p, cases[i].blocks, cases[i].n_blocks, 2, cases[i].use, &th),
                     SS_ERR_INPUT);
    assert_int_equal(ss_threshold_compute(&gc, &b->gpu, &p, cases[i].blocks, cases[i].n_blocks, 2, cases[i].use, &th),
                     SS_ERR_INPUT);
    assert_string_equal(ss_error_message(&cc), cases[i].msg);
    assert_string_equal(ss_error_message(&gc), cases[i].msg);
  }
  /* nothing to filter: a no-op on both */
  ss_filter f;
  design(&f, 3, RATE_HZ);
  assert_int_equal(ss_filter_zero_phase(&gc, &b->gpu, &f, x, 0, 2, x), SS_OK);
  assert_int_equal(ss_filter_common_median(&gc, &b->gpu, x, 0, 2, NULL), SS_OK);
  /* the GPU's own limit: a common median over more channels than a block's shared memory holds */
  const int wide = 12289;
  float *row = calloc(wide, sizeof(float));
  assert_int_equal(ss_filter_common_median(&gc, &b->gpu, row, 1, wide, NULL), SS_ERR_UNSUPPORTED);
  assert_string_equal(ss_error_message(&gc),
                      "filter: common median over 12289 channels: the GPU version takes at most 12288");
  free(row);
}

/* --- timing -------------------------------------------------------------------------------------- */

/* Kernel times for one 10 s × 32 channel chunk at 30 kHz (median of TIMING_REPEATS, after a warm-up
 * call): zero-phase filter, common median, noise level from the chunk as ten 1 s blocks. */
static void chunk_timing(void **state) {
  backends *b = *state;
#if SS_HAVE_CUDA
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  ss_filter f;
  design(&f, 3, RATE_HZ);
  const int C = TIMING_CHANNELS;
  const int64_t n = TIMING_ROWS;
  const size_t bytes = sizeof(float) * (size_t)(n * C);
  float *x = make_signal(n, C, 99, 0), *d_x, *d_y;
  assert_int_equal(cudaMalloc((void **)&d_x, bytes), cudaSuccess);
  assert_int_equal(cudaMalloc((void **)&d_y, bytes), cudaSuccess);
  assert_int_equal(cudaMemcpy(d_x, x, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  cudaStream_t s;
  cudaEvent_t e0, e1;
  assert_int_equal(cudaStreamCreate(&s), cudaSuccess);
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int blocks_n = 10;
  ss_sample_block blocks[10];
  for (int i = 0; i < blocks_n; i++) blocks[i] = (ss_sample_block){d_y + (int64_t)i * (n / blocks_n) * C, n / blocks_n};
  const char *names[3] = {"zero-phase filter", "common median", "noise level from ten 1 s blocks (wall time)"};
  double ms[3][TIMING_REPEATS];
  for (int rep = -1; rep < TIMING_REPEATS; rep++) {
    for (int k = 0; k < 2; k++) {
      assert_int_equal(cudaEventRecord(e0, s), cudaSuccess);
      ss_status st = k == 0 ? ss_filter_zero_phase_cuda(&ctx, &b->gpu, &f, d_x, n, C, d_y, s)
                            : ss_filter_common_median_cuda(&ctx, &b->gpu, d_y, n, C, NULL, s);
      if (st != SS_OK) fail_msg("%s", ss_error_message(&ctx));
      assert_int_equal(cudaEventRecord(e1, s), cudaSuccess);
      assert_int_equal(cudaEventSynchronize(e1), cudaSuccess);
      float t = 0;
      cudaEventElapsedTime(&t, e0, e1);
      if (rep >= 0) ms[k][rep] = t;
    }
    /* the noise estimate runs on the backend's stream and synchronises it: wall time of the call */
    ss_thresholds th;
    double t0 = ss_now();
    if (ss_threshold_compute_cuda(&ctx, &b->gpu, &p, blocks, blocks_n, C, NULL, &th) != SS_OK)
      fail_msg("%s", ss_error_message(&ctx));
    if (rep >= 0) ms[2][rep] = 1e3 * (ss_now() - t0);
    ss_thresholds_free(&th);
  }
  for (int k = 0; k < 3; k++) {
    for (int i = 1; i < TIMING_REPEATS; i++) /* insertion sort for the median */
      for (int j = i; j > 0 && ms[k][j] < ms[k][j - 1]; j--) {
        double tmp = ms[k][j];
        ms[k][j] = ms[k][j - 1];
        ms[k][j - 1] = tmp;
      }
    print_message("10 s x 32 ch chunk: %s %.3f ms (median of %d)\n", names[k], ms[k][TIMING_REPEATS / 2],
                  TIMING_REPEATS);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  cudaFree(d_x);
  cudaFree(d_y);
  free(x);
#else
  (void)b;
#endif
}

int main(void) {
  ss_test_require_gpu();
  seed = (uint64_t)time(NULL);
  printf("gpu_test_filter: seed %llu\n", (unsigned long long)seed);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(zero_phase_matches_cpu), cmocka_unit_test(zero_phase_device_in_place),
      cmocka_unit_test(causal_matches_cpu),     cmocka_unit_test(common_median_matches_cpu),
      cmocka_unit_test(thresholds_match_cpu),   cmocka_unit_test(errors_match_cpu),
      cmocka_unit_test(chunk_timing),
  };
  return cmocka_run_group_tests(tests, ss_test_backends_setup, ss_test_backends_teardown);
}
