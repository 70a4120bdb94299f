/* gpu_test_detect.c — GPU group: CUDA detection (stages/detect/detect.cu) and PCA projection
 * (stages/features/features_pca.cu) against the CPU reference on the same filtered blocks: noise with injected
 * multi-channel bumps on several probes (and none), both polarities and join sizes, search and own
 * regions narrower than the block; a filtered 10 s simulated recording (with timing, printed); an
 * empty block, an empty search region and one huge component; the host dispatchers with a CUDA
 * backend; determinism; own-region splits; error messages. Fresh seed each run (printed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "params/params.h"
#include "params/probe.h"
#include "stages/detect/detect.h"
#include "stages/features/features_pca.h"
#include "stages/filter/filter.h"
#include "core/log.h"
#include "core/rng.h"
#include "stages/threshold/threshold.h"
#include "ss_test.h"

#if SS_HAVE_CUDA
#include <cuda_runtime_api.h>

#define PROBE_DIR SS_SOURCE_DIR "/params/probes/"
#define PROBE_RADIUS_UM 40.0
/* agreement asked of the GPU; the implementation aims at bit-identical results */
#define TOL_FRACTION 1e-4
#define TOL_MASK 1e-6
#define TOL_WAVE_REL 1e-5
#define TOL_FEATURE_REL 1e-4
#define SIM_SECONDS 10.0
#define SIM_RATE_HZ 30000.0
#define TIMING_RUNS 10

static ss_backend be;
static uint64_t seed;

/* --- fixtures ----------------------------------------------------------------------------------- */

/* The probe's graph (NULL: no probe, every channel alone) with channel `dead` (or −1) dead. */
static void make_graph(const char *probe_file, int C, int dead, ss_detect_graph *g) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (!probe_file) {
    assert_int_equal(ss_detect_graph_from_probe(&ctx, NULL, C, g), SS_OK);
    if (dead >= 0) g->use[dead] = 0;
    return;
  }
  char path[4096];
  snprintf(path, sizeof(path), "%s%s", PROBE_DIR, probe_file);
  ss_probe p;
  if (ss_probe_load_file(&ctx, path, PROBE_RADIUS_UM, &p) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  if (dead >= 0) p.connected[ss_probe_contact_of_channel(&p, dead)] = 0;
  if (ss_detect_graph_from_probe(&ctx, &p, C, g) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_probe_free(&p);
}

/* σ = 1 (0 on the dead channel): default weak/strong multiples. */
static void make_thresholds(int C, int dead, int polarity, ss_thresholds *th) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  p.detect.polarity = polarity;
  float *sigma = malloc(sizeof(float) * C);
  for (int c = 0; c < C; c++) sigma[c] = 1.0f;
  if (dead >= 0) sigma[dead] = 0.0f;
  assert_int_equal(ss_thresholds_from_sigma(&ctx, &p, C, sigma, th), SS_OK);
  free(sigma);
}

/* Unit Gaussian noise plus bumps: a Gaussian in time (σ 1.5 samples) times a Gaussian over channel
 * index distance (σ 1.2 channels), peak 3–15, sign by polarity (random for "both"); some bumps start
 * before the block or end after it. */
static void fill_bumps(float *x, int64_t rows, int C, int polarity, uint64_t stream) {
  ss_rng r = ss_rng_make(seed, SS_RNG_TEST, stream);
  for (int64_t i = 0; i < rows * C; i++) x[i] = (float)ss_rng_next_normal(&r);
  int64_t n_bumps = rows / 150;
  for (int64_t b = 0; b < n_bumps; b++) {
    int64_t t0 = (int64_t)ss_rng_next_below(&r, (uint64_t)rows + 20) - 10;
    int c0 = (int)ss_rng_next_below(&r, (uint64_t)C);
    double amp = 3.0 + 12.0 * ss_rng_next_uniform(&r);
    double sign = polarity == SS_POLARITY_POSITIVE   ? 1.0
                  : polarity == SS_POLARITY_NEGATIVE ? -1.0
                                                     : (ss_rng_next_below(&r, 2) ? 1.0 : -1.0);
    for (int64_t dt = -6; dt <= 6; dt++) {
      int64_t t = t0 + dt;
      if (t < 0 || t >= rows) continue;
      for (int c = 0; c < C; c++) {
        double dc = c - c0;
        x[t * C + c] += (float)(sign * amp * exp(-0.5 * dt * dt / 2.25 - 0.5 * dc * dc / 1.44));
      }
    }
  }
}

/* --- device runs -------------------------------------------------------------------------------- */

static float *to_device(const float *x, size_t count) {
  float *d = NULL;
  assert_int_equal(cudaMalloc((void **)&d, (count ? count : 1) * sizeof(float)), cudaSuccess);
  if (count) assert_int_equal(cudaMemcpy(d, x, count * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

static void *from_device(const void *d, size_t bytes) {
  void *h = malloc(bytes ? bytes : 1);
  assert_non_null(h);
  if (bytes) assert_int_equal(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

/* The device spikes appended to a host table (keep_waveforms set). */
static void download(const ss_spike_dev *s, int C, int W, ss_spike_list *out) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess); /* the run's last kernels, on its stream */
  size_t n = (size_t)s->n;
  ss_spike_list t;
  memset(&t, 0, sizeof(t));
  t.n = t.cap = s->n;
  t.n_truncated = s->n_truncated;
  t.n_channels = C;
  t.n_wave = W;
  t.keep_waveforms = 1;
  t.time_samples = from_device(s->time_samples, n * sizeof(int64_t));
  t.time_fraction = from_device(s->time_fraction, n * sizeof(float));
  t.peak_channel = from_device(s->peak_channel, n * sizeof(int32_t));
  t.amplitude = from_device(s->amplitude, n * sizeof(float));
  t.masks = from_device(s->masks, n * C * sizeof(float));
  t.waveforms = from_device(s->waveforms, n * C * W * sizeof(float));
  assert_int_equal(ss_spike_list_append(&ctx, out, &t), SS_OK);
  ss_spike_list_free(&t);
}

/* The block through the device-resident API (one handle, runs on the backend's stream). */
static void run_gpu(const ss_detect_config *cfg, const ss_detect_graph *g, const ss_thresholds *th,
                    const ss_detect_block *blk, ss_spike_list *out) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  float *dx = to_device(blk->x, (size_t)blk->n_rows * g->n_channels);
  ss_detect_cuda *d = NULL;
  if (ss_detect_cuda_open(&ctx, &be, cfg, g, th, &d) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_detect_block dblk = *blk;
  dblk.x = dx;
  ss_spike_dev s;
  if (ss_detect_cuda_run(&ctx, d, &dblk, NULL, &s) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  download(&s, g->n_channels, cfg->n_before + cfg->n_after, out);
  ss_detect_cuda_close(d);
  cudaFree(dx);
}

static void run_cpu(const ss_detect_config *cfg, const ss_detect_graph *g, const ss_thresholds *th,
                    const ss_detect_block *blk, ss_spike_list *out) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_detect_work w;
  memset(&w, 0, sizeof(w));
  if (ss_detect_block_cpu(&ctx, cfg, g, th, blk, &w, out) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_detect_work_free(&w);
}

/* GPU == CPU within the tolerances; returns the largest differences seen. */
static void compare(const char *what, const ss_spike_list *cpu, const ss_spike_list *gpu) {
  if (gpu->n != cpu->n || gpu->n_truncated != cpu->n_truncated)
    fail_msg("%s: GPU %lld spikes (%lld truncated), CPU %lld (%lld)", what, (long long)gpu->n,
             (long long)gpu->n_truncated, (long long)cpu->n, (long long)cpu->n_truncated);
  const int C = cpu->n_channels, W = cpu->n_wave;
  double d_frac = 0, d_mask = 0, d_wave = 0;
  for (int64_t i = 0; i < cpu->n; i++) {
    if (gpu->time_samples[i] != cpu->time_samples[i] || gpu->peak_channel[i] != cpu->peak_channel[i] ||
        gpu->amplitude[i] != cpu->amplitude[i])
      fail_msg("%s: spike %lld: GPU t %lld ch %d amp %.9g, CPU t %lld ch %d amp %.9g", what, (long long)i,
               (long long)gpu->time_samples[i], gpu->peak_channel[i], gpu->amplitude[i],
               (long long)cpu->time_samples[i], cpu->peak_channel[i], cpu->amplitude[i]);
    d_frac = fmax(d_frac, fabs((double)gpu->time_fraction[i] - cpu->time_fraction[i]));
    for (int c = 0; c < C; c++) d_mask = fmax(d_mask, fabs((double)gpu->masks[i * C + c] - cpu->masks[i * C + c]));
    for (int64_t k = i * C * W; k < (i + 1) * C * W; k++) {
      double a = cpu->waveforms[k], b = gpu->waveforms[k];
      d_wave = fmax(d_wave, fabs(a - b) / (1.0 + fabs(a)));
    }
  }
  printf("%s: %lld spikes (%lld truncated); max |dfraction| %.3g, |dmask| %.3g, waveforms %.3g relative\n", what,
         (long long)cpu->n, (long long)cpu->n_truncated, d_frac, d_mask, d_wave);
  assert_true(d_frac <= TOL_FRACTION);
  assert_true(d_mask <= TOL_MASK);
  assert_true(d_wave <= TOL_WAVE_REL);
}

/* CPU and GPU (device API and host dispatcher) on the same block. */
static void check_block(const char *what, const ss_detect_config *cfg, const ss_detect_graph *g,
                        const ss_thresholds *th, const ss_detect_block *blk) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int C = g->n_channels, W = cfg->n_before + cfg->n_after;
  ss_spike_list cpu, gpu, disp;
  ss_spike_list_init(&ctx, &cpu, C, W, 1);
  ss_spike_list_init(&ctx, &gpu, C, W, 1);
  ss_spike_list_init(&ctx, &disp, C, W, 1);
  run_cpu(cfg, g, th, blk, &cpu);
  run_gpu(cfg, g, th, blk, &gpu);
  compare(what, &cpu, &gpu);
  ss_detect_work w;
  memset(&w, 0, sizeof(w));
  if (ss_detect_block_run(&ctx, &be, cfg, g, th, blk, &w, &disp) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  compare("  host dispatcher", &cpu, &disp);
  ss_detect_work_free(&w);
  ss_spike_list_free(&cpu);
  ss_spike_list_free(&gpu);
  ss_spike_list_free(&disp);
}

/* --- (a) random noise with bumps ------------------------------------------------------------------ */

typedef struct {
  const char *probe; /* NULL: no probe */
  int C, dead, polarity, join, before, after;
} bump_case;

static void random_bumps_match_cpu(void **state) {
  (void)state;
  const bump_case cases[] = {
      {"two_column_32.json", 32, -1, SS_POLARITY_NEGATIVE, 1, 10, 10},
      {"two_column_32.json", 32, 5, SS_POLARITY_BOTH, 2, 7, 13},
      {"grid_4x8.json", 32, -1, SS_POLARITY_POSITIVE, 0, 10, 10},
      {"grid_4x8.json", 32, 12, SS_POLARITY_NEGATIVE, 3, 15, 15},
      {NULL, 16, -1, SS_POLARITY_BOTH, 1, 10, 10},
      {NULL, 5, 2, SS_POLARITY_NEGATIVE, 2, 4, 6},
  };
  const int64_t rows = 6000;
  float *x = malloc(sizeof(float) * rows * 32);
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    const bump_case *bc = &cases[k];
    ss_detect_graph g;
    ss_thresholds th;
    make_graph(bc->probe, bc->C, bc->dead, &g);
    make_thresholds(bc->C, bc->dead, bc->polarity, &th);
    ss_detect_config cfg = {bc->join, bc->before, bc->after};
    fill_bumps(x, rows, bc->C, bc->polarity, k);
    char what[256];
    snprintf(what, sizeof(what), "bumps %s C=%d dead=%d polarity=%d join=%d", bc->probe ? bc->probe : "(no probe)",
             bc->C, bc->dead, bc->polarity, bc->join);
    /* search and own regions narrower than the block, spikes at every edge */
    ss_detect_block narrow = {x, rows, 1000000007, 37, rows - 41, 500, rows - 700};
    check_block(what, &cfg, &g, &th, &narrow);
    ss_detect_block whole = {x, rows, 0, 0, rows, 0, rows};
    check_block("  whole block", &cfg, &g, &th, &whole);
    ss_detect_graph_free(&g);
    ss_thresholds_free(&th);
  }
  free(x);
}

/* Same handle twice: bit-identical outputs; own regions split in three give the whole's spikes. */
static void deterministic_and_split(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int C = 32, W = 20;
  const int64_t rows = 8000;
  ss_detect_graph g;
  ss_thresholds th;
  make_graph("grid_4x8.json", C, -1, &g);
  make_thresholds(C, -1, SS_POLARITY_BOTH, &th);
  ss_detect_config cfg = {1, 10, 10};
  float *x = malloc(sizeof(float) * rows * C);
  fill_bumps(x, rows, C, SS_POLARITY_BOTH, 100);
  float *dx = to_device(x, (size_t)rows * C);
  ss_detect_cuda *d = NULL;
  assert_int_equal(ss_detect_cuda_open(&ctx, &be, &cfg, &g, &th, &d), SS_OK);
  ss_detect_block blk = {dx, rows, 0, 50, rows - 50, 100, rows - 100};
  ss_spike_list a, b, parts;
  ss_spike_list_init(&ctx, &a, C, W, 1);
  ss_spike_list_init(&ctx, &b, C, W, 1);
  ss_spike_list_init(&ctx, &parts, C, W, 1);
  ss_spike_dev s;
  assert_int_equal(ss_detect_cuda_run(&ctx, d, &blk, NULL, &s), SS_OK);
  download(&s, C, W, &a);
  assert_int_equal(ss_detect_cuda_run(&ctx, d, &blk, NULL, &s), SS_OK);
  download(&s, C, W, &b);
  assert_int_equal(a.n, b.n);
  assert_true(a.n > 0);
  assert_memory_equal(a.time_fraction, b.time_fraction, a.n * sizeof(float));
  assert_memory_equal(a.masks, b.masks, a.n * C * sizeof(float));
  assert_memory_equal(a.waveforms, b.waveforms, a.n * C * W * sizeof(float));
  const int64_t cuts[4] = {100, 2345, 5000, rows - 100};
  for (int k = 0; k < 3; k++) {
    ss_detect_block part = blk;
    part.own_begin = cuts[k];
    part.own_end = cuts[k + 1];
    assert_int_equal(ss_detect_cuda_run(&ctx, d, &part, NULL, &s), SS_OK);
    download(&s, C, W, &parts);
  }
  compare("own region in three parts vs whole", &a, &parts);
  ss_detect_cuda_close(d);
  cudaFree(dx);
  free(x);
  ss_spike_list_free(&a);
  ss_spike_list_free(&b);
  ss_spike_list_free(&parts);
  ss_detect_graph_free(&g);
  ss_thresholds_free(&th);
}

/* --- (c) edge cases ------------------------------------------------------------------------------- */

static void empty_and_huge_blocks(void **state) {
  (void)state;
  const int C = 32;
  const int64_t rows = 6000;
  ss_detect_graph grid, lone;
  ss_thresholds th;
  make_graph("grid_4x8.json", C, -1, &grid);
  make_graph(NULL, C, -1, &lone);
  make_thresholds(C, -1, SS_POLARITY_NEGATIVE, &th);
  ss_detect_config cfg = {1, 10, 10};
  float *x = calloc((size_t)rows * C, sizeof(float));
  ss_detect_block blk = {x, rows, 0, 0, rows, 0, rows};
  check_block("empty block", &cfg, &grid, &th, &blk);
  ss_detect_block none = {x, rows, 0, 300, 300, 0, rows};
  check_block("empty search region", &cfg, &grid, &th, &none);
  /* one component over every channel and 4000 rows (every sample between the weak and twice the
   * strong threshold of the defaults 2σ / 4σ) */
  for (int64_t t = 1000; t < 5000; t++)
    for (int c = 0; c < C; c++) x[t * C + c] = -(float)(4.5 + 2.0 * sin(0.001 * (double)t + 0.2 * c));
  check_block("one huge component", &cfg, &grid, &th, &blk);
  check_block("the same without adjacency", &cfg, &lone, &th, &blk);
  ss_detect_block cut = {x, rows, 0, 0, 3000, 0, 3000}; /* truncated at the search end */
  check_block("huge component cut by the search end", &cfg, &grid, &th, &cut);
  free(x);
  ss_detect_graph_free(&grid);
  ss_detect_graph_free(&lone);
  ss_thresholds_free(&th);
}

static void errors(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int C = 4;
  ss_detect_graph g;
  ss_thresholds th, th3;
  make_graph(NULL, C, -1, &g);
  make_thresholds(C, -1, SS_POLARITY_NEGATIVE, &th);
  make_thresholds(3, -1, SS_POLARITY_NEGATIVE, &th3);
  ss_detect_config cfg = {1, 3, 3};
  ss_detect_cuda *d = NULL;
  assert_int_equal(ss_detect_cuda_open(&ctx, &be, &cfg, &g, &th3, &d), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "detect: channel counts differ (graph 4, thresholds 3)");
  assert_null(d);
  assert_int_equal(ss_detect_cuda_open(&ctx, &be, &cfg, &g, &th, &d), SS_OK);
  float x[100 * C];
  memset(x, 0, sizeof(x));
  float *dx = to_device(x, 100 * C);
  ss_detect_block blk = {dx, 100, 0, 0, 101, 0, 100};
  ss_spike_dev s;
  assert_int_equal(ss_detect_cuda_run(&ctx, d, &blk, NULL, &s), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "detect: search rows [0, 101) outside the block of 100 rows");
  ss_detect_cuda_close(d);
  ss_detect_block hblk = {x, 100, 0, 0, 101, 0, 100};
  ss_spike_list out;
  ss_spike_list_init(&ctx, &out, C, 6, 1);
  ss_detect_work w;
  memset(&w, 0, sizeof(w));
  assert_int_equal(ss_detect_block_run(&ctx, &be, &cfg, &g, &th, &hblk, &w, &out), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "detect: search rows [0, 101) outside the block of 100 rows");
  ss_spike_list_free(&out);
  ss_spike_list_init(&ctx, &out, C, 7, 1);
  hblk.search_end = 100;
  assert_int_equal(ss_detect_block_run(&ctx, &be, &cfg, &g, &th, &hblk, &w, &out), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "detect: waveform length 7, window 6");
  ss_spike_list_free(&out);
  assert_int_equal(ss_pca_project_cuda(&ctx, &be, C, 6, 7, dx, dx, 1, dx, NULL), SS_ERR_INTERNAL);
  assert_string_equal(ss_error_message(&ctx), "features: projection of 4 channels × 6 samples on 7 components");
  cudaFree(dx);
  ss_detect_graph_free(&g);
  ss_thresholds_free(&th);
  ss_thresholds_free(&th3);
}

/* --- (b) a filtered simulated recording, projection and timing ------------------------------------ */

typedef struct {
  int C;
  int64_t rows;
  float *x;
  ss_detect_graph g;
  ss_thresholds th;
  ss_detect_config cfg;
} sim_block;

static void sim_block_make(sim_block *b) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe probe;
  if (ss_probe_load_file(&ctx, PROBE_DIR "two_column_32.json", PROBE_RADIUS_UM, &probe) != SS_OK)
    fail_msg("%s", ss_error_message(&ctx));
  ss_sim_config c;
  ss_sim_config_preset(&c, SS_SIM_PRESET_EASY);
  c.duration_s = SIM_SECONDS;
  c.rate_hz = SIM_RATE_HZ;
  c.seed = seed;
  ss_sim *sim = NULL;
  if (ss_sim_create(&ctx, &c, &probe, &sim) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  b->C = ss_sim_n_channels(sim);
  b->rows = ss_sim_n_samples(sim);
  b->x = malloc(sizeof(float) * b->rows * b->C);
  assert_non_null(b->x);
  if (ss_sim_render(&ctx, sim, 0, b->rows, b->x) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_sim_free(sim);
  ss_params p;
  ss_params_defaults(&p);
  ss_filter f;
  assert_int_equal(ss_filter_design_params(&ctx, &p, SIM_RATE_HZ, &f), SS_OK);
  assert_int_equal(ss_filter_zero_phase_cpu(&ctx, &f, b->x, b->rows, b->C, b->x), SS_OK);
  assert_int_equal(ss_detect_graph_from_probe(&ctx, &probe, b->C, &b->g), SS_OK);
  ss_sample_block sb = {b->x, b->rows};
  int threads = ss_threads_resolve(0);
  assert_int_equal(ss_threshold_compute_cpu(&ctx, &p, &sb, 1, b->C, b->g.use, threads, &b->th), SS_OK);
  assert_int_equal(ss_detect_config_from_params(&ctx, &p, SIM_RATE_HZ, &b->cfg), SS_OK);
  ss_probe_free(&probe);
}

static void sim_block_free(sim_block *b) {
  free(b->x);
  ss_detect_graph_free(&b->g);
  ss_thresholds_free(&b->th);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Median wall time of ss_detect_cuda_run up to the end of its last kernel. */
static double time_gpu_run(ss_detect_cuda *d, const ss_detect_block *dblk, int64_t *n) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double t[TIMING_RUNS];
  ss_spike_dev s;
  for (int r = 0; r < TIMING_RUNS; r++) {
    double t0 = ss_now();
    assert_int_equal(ss_detect_cuda_run(&ctx, d, dblk, NULL, &s), SS_OK);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    t[r] = ss_now() - t0;
  }
  qsort(t, TIMING_RUNS, sizeof(double), cmp_double);
  *n = s.n;
  return t[TIMING_RUNS / 2];
}

/* Features of the device waveforms by ss_pca_project_cuda vs the CPU projection of the CPU's
 * waveforms, |d| <= 1e-4 · max(1, largest |feature| of the spike). */
static void check_projection(const ss_pca *pca, const ss_spike_list *cpu, const float *d_waveforms) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int C = pca->n_channels, P = pca->n_pcs;
  const int64_t n = cpu->n;
  size_t nf = (size_t)n * C * P;
  float *want = malloc(sizeof(float) * (nf ? nf : 1)), *disp = malloc(sizeof(float) * (nf ? nf : 1));
  assert_int_equal(ss_pca_project_cpu(&ctx, pca, cpu->waveforms, n, want), SS_OK);
  float *d_basis = to_device(pca->basis, (size_t)C * P * pca->n_wave), *d_feat = NULL;
  assert_int_equal(cudaMalloc((void **)&d_feat, (nf ? nf : 1) * sizeof(float)), cudaSuccess);
  assert_int_equal(ss_pca_project_cuda(&ctx, &be, C, pca->n_wave, P, d_basis, d_waveforms, n, d_feat, NULL), SS_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  float *got = from_device(d_feat, nf * sizeof(float));
  if (ss_pca_project(&ctx, &be, pca, cpu->waveforms, n, disp) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  double worst = 0, worst_disp = 0;
  for (int64_t i = 0; i < n; i++) {
    double scale = 1.0;
    for (int k = 0; k < C * P; k++) scale = fmax(scale, fabs(want[i * C * P + k]));
    for (int k = 0; k < C * P; k++) {
      size_t e = (size_t)i * C * P + k;
      worst = fmax(worst, fabs((double)got[e] - want[e]) / scale);
      worst_disp = fmax(worst_disp, fabs((double)disp[e] - want[e]) / scale);
    }
  }
  printf("projection of %lld spikes: max relative difference %.3g (device API), %.3g (host dispatcher)\n", (long long)n,
         worst, worst_disp);
  assert_true(worst <= TOL_FEATURE_REL);
  assert_true(worst_disp <= TOL_FEATURE_REL);
  free(want);
  free(disp);
  free(got);
  cudaFree(d_basis);
  cudaFree(d_feat);
}

static void simulated_recording(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  sim_block b;
  double t0 = ss_now();
  sim_block_make(&b);
  printf("simulated and filtered %.0f s x %d channels in %.1f s\n", SIM_SECONDS, b.C, ss_now() - t0);
  const int C = b.C, W = b.cfg.n_before + b.cfg.n_after;
  /* margins as the driver's, narrower than the block: spikes cut at both ends */
  ss_detect_block blk = {b.x, b.rows, 123456, 300, b.rows - 300, 2000, b.rows - 2000};
  ss_spike_list cpu;
  ss_spike_list_init(&ctx, &cpu, C, W, 1);
  t0 = ss_now();
  run_cpu(&b.cfg, &b.g, &b.th, &blk, &cpu);
  double t_cpu = ss_now() - t0;
  check_block("simulated recording", &b.cfg, &b.g, &b.th, &blk);
  /* the device API again for the projection and the timing (whole search region) */
  float *dx = to_device(b.x, (size_t)b.rows * C);
  ss_detect_cuda *d = NULL;
  assert_int_equal(ss_detect_cuda_open(&ctx, &be, &b.cfg, &b.g, &b.th, &d), SS_OK);
  ss_detect_block dblk = blk;
  dblk.x = dx;
  ss_spike_dev s;
  assert_int_equal(ss_detect_cuda_run(&ctx, d, &dblk, NULL, &s), SS_OK);
  assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
  assert_int_equal(s.n, cpu.n);
  ss_pca pca;
  assert_int_equal(ss_pca_fit_cpu(&ctx, cpu.waveforms, cpu.masks, cpu.n, C, W, 3, &pca), SS_OK);
  check_projection(&pca, &cpu, s.waveforms);
  ss_detect_block whole = {dx, b.rows, 0, 0, b.rows, 0, b.rows};
  int64_t n = 0;
  double t_gpu = time_gpu_run(d, &whole, &n);
  printf("ss_detect_cuda_run on %lld rows x %d channels (%.0f s at %.0f Hz): median %.3f ms over %d runs "
         "(%lld spikes, waveforms of %d samples); CPU ss_detect_block_cpu %.1f ms\n",
         (long long)b.rows, C, SIM_SECONDS, SIM_RATE_HZ, 1e3 * t_gpu, TIMING_RUNS, (long long)n, W, 1e3 * t_cpu);
  ss_pca_free(&pca);
  ss_detect_cuda_close(d);
  cudaFree(dx);
  ss_spike_list_free(&cpu);
  sim_block_free(&b);
}

static int group_setup(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  seed = (uint64_t)time(NULL);
  printf("seed %llu\n", (unsigned long long)seed);
  if (ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 0, &be) != SS_OK) {
    fprintf(stderr, "%s\n", ss_error_message(&ctx));
    return -1;
  }
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  ss_backend_close(&be);
  return 0;
}
#endif

int main(void) {
  ss_test_require_gpu();
#if SS_HAVE_CUDA
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(random_bumps_match_cpu), cmocka_unit_test(deterministic_and_split),
      cmocka_unit_test(empty_and_huge_blocks),  cmocka_unit_test(errors),
      cmocka_unit_test(simulated_recording),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
#else
  return SS_TEST_SKIP; /* not reached: without the backend there is no device */
#endif
}
