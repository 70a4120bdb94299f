/* gpu_test_frontend.c — the whole front end on the GPU (drivers/frontend.cu and the stage twins) against
 * the CPU reference on simulated recordings of three seeds: at least 99.9 % of the CPU's
 * spikes have a GPU spike within 1 sample on the same peak channel whose features agree within 1e-4
 * (relative to the spike's largest feature), and vice versa; and the GPU result does not depend on
 * the chunk length; the same with the causal filter and with a registered recording (stages/motion).
 * GPU group: skipped visibly without a device. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "io/source.h"
#include "params/params.h"
#include "params/probe.h"
#include "drivers/frontend.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define RATE 30000.0
#define DURATION 24.0
#define MIN_MATCHED 0.999
#define FEATURE_TOL 1e-4
#define TIME_TOL 1.0 /* samples */

static ss_probe probe;

static void simulate(int seed, char *path, size_t len) {
  const ss_sim_config c = ss_test_sim_config(DURATION, RATE, (uint64_t)seed);
  char name[64];
  snprintf(name, sizeof(name), "sim%d.bin", seed);
  if (ss_test_simulate(PROBE, 40.0, &c, SS_SIM_FORMAT_BINARY, name, path, len, NULL))
    fail_msg("simulation %d failed", seed);
}

static void run_mode(const char *path, ss_device_kind dev, double gpu_chunk_s, int causal, const ss_motion_reg *reg,
                     ss_spikes *out, double *seconds) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  p.io.gpu_chunk_s = gpu_chunk_s;
  p.filter.causal = causal;
  const ss_sim_config sim = ss_test_sim_config(DURATION, RATE, 0);
  ss_source_spec spec = ss_test_binary_spec(path, &sim, 32);
  ss_source *src;
  ss_backend be;
  ss_frontend_model model;
  if (ss_source_open(&ctx, &spec, &src) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  if (ss_backend_open(&ctx, dev, 0, 4, &be) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  if (ss_frontend_run(&ctx, &be, &p, src, &probe, reg, out, &model) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(model.n_truncated, 0);
  *seconds = model.seconds_detect;
  ss_frontend_model_free(&model);
  ss_backend_close(&be);
  ss_source_close(src);
}

static void run(const char *path, ss_device_kind dev, double gpu_chunk_s, ss_spikes *out, double *seconds) {
  run_mode(path, dev, gpu_chunk_s, 0, NULL, out, seconds);
}

static double spike_feature_diff(const ss_spikes *a, int64_t i, const ss_spikes *b, int64_t j) {
  const int F = a->n_channels * a->n_pcs;
  double scale = 1e-30, diff = 0;
  for (int f = 0; f < F; f++) {
    scale = fmax(scale, fabs(a->features[i * F + f]));
    diff = fmax(diff, fabs((double)a->features[i * F + f] - b->features[j * F + f]));
  }
  return diff / scale;
}

/* Fraction of a's spikes with a partner in b (same peak channel, within TIME_TOL samples, features
 * within FEATURE_TOL); both tables are sorted by time. */
static double matched_fraction(const ss_spikes *a, const ss_spikes *b, double *worst_feature) {
  int64_t hit = 0, lo = 0;
  *worst_feature = 0;
  for (int64_t i = 0; i < a->n; i++) {
    double ta = (double)a->time_samples[i] + a->time_fraction[i];
    while (lo < b->n && (double)b->time_samples[lo] + b->time_fraction[lo] < ta - TIME_TOL) lo++;
    for (int64_t j = lo; j < b->n && (double)b->time_samples[j] + b->time_fraction[j] <= ta + TIME_TOL; j++) {
      if (b->peak_channel[j] != a->peak_channel[i]) continue;
      double d = spike_feature_diff(a, i, b, j);
      if (d <= FEATURE_TOL) {
        *worst_feature = fmax(*worst_feature, d);
        hit++;
        break;
      }
    }
  }
  return a->n ? (double)hit / (double)a->n : 1.0;
}

static void gpu_matches_cpu(void **state) {
  (void)state;
  for (int seed = 1; seed <= 3; seed++) {
    char path[4096];
    simulate(seed, path, sizeof(path));
    ss_spikes cpu, gpu;
    double t_cpu, t_gpu, w1, w2;
    run(path, SS_DEVICE_CPU, 10.0, &cpu, &t_cpu);
    run(path, SS_DEVICE_CUDA, 10.0, &gpu, &t_gpu);
    double f_cpu = matched_fraction(&cpu, &gpu, &w1), f_gpu = matched_fraction(&gpu, &cpu, &w2);
    print_message("seed %d: CPU %lld spikes, GPU %lld; matched %.5f of CPU's, %.5f of GPU's; worst feature diff "
                  "%.2e; chunk pass CPU (4 threads) %.3f s, GPU %.3f s\n",
                  seed, (long long)cpu.n, (long long)gpu.n, f_cpu, f_gpu, fmax(w1, w2), t_cpu, t_gpu);
    assert_true(cpu.n > 100);
    assert_true(f_cpu >= MIN_MATCHED);
    assert_true(f_gpu >= MIN_MATCHED);
    ss_spikes_free(&cpu);
    ss_spikes_free(&gpu);
    remove(path);
  }
}

/* 1 s, 3.7 s and 10 s chunks on the GPU: the same spikes (chunk-size independence). */
static void gpu_chunk_size_independence(void **state) {
  (void)state;
  char path[4096];
  simulate(7, path, sizeof(path));
  ss_spikes ref;
  double t, w;
  run(path, SS_DEVICE_CUDA, 10.0, &ref, &t);
  const double chunks[] = {1.0, 3.7};
  for (size_t k = 0; k < sizeof(chunks) / sizeof(chunks[0]); k++) {
    ss_spikes s;
    run(path, SS_DEVICE_CUDA, chunks[k], &s, &t);
    double f1 = matched_fraction(&ref, &s, &w), f2 = matched_fraction(&s, &ref, &w);
    print_message("GPU chunks of %.1f s vs 10 s: %lld vs %lld spikes, matched %.5f / %.5f\n", chunks[k], (long long)s.n,
                  (long long)ref.n, f1, f2);
    assert_true(f1 >= MIN_MATCHED && f2 >= MIN_MATCHED);
    ss_spikes_free(&s);
  }
  ss_spikes_free(&ref);
  remove(path);
}

/* filter.causal (the model's live twin): the blocked forward pass on the GPU against the CPU's
 * sequential causal filter. */
static void gpu_causal_matches_cpu(void **state) {
  (void)state;
  char path[4096];
  simulate(11, path, sizeof(path));
  ss_spikes cpu, gpu;
  double t, w1, w2;
  run_mode(path, SS_DEVICE_CPU, 10.0, 1, NULL, &cpu, &t);
  run_mode(path, SS_DEVICE_CUDA, 3.0, 1, NULL, &gpu, &t);
  double f1 = matched_fraction(&cpu, &gpu, &w1), f2 = matched_fraction(&gpu, &cpu, &w2);
  print_message("causal: CPU %lld spikes, GPU %lld; matched %.5f / %.5f; worst feature diff %.2e\n", (long long)cpu.n,
                (long long)gpu.n, f1, f2, fmax(w1, w2));
  assert_true(cpu.n > 100);
  assert_true(f1 >= MIN_MATCHED && f2 >= MIN_MATCHED);
  ss_spikes_free(&cpu);
  ss_spikes_free(&gpu);
  remove(path);
}

/* A registered recording (stages/motion: a ±15 µm zigzag of 2 s bins, excerpts included): the GPU chunk
 * pass registers after its filter as the CPU does after its own. */
static void gpu_registered_matches_cpu(void **state) {
  (void)state;
  char path[4096];
  simulate(12, path, sizeof(path));
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_motion m = {.n_bins = (int64_t)(DURATION / 2), .bin_samples = (int64_t)(2 * RATE)};
  m.shift_um = calloc((size_t)m.n_bins, sizeof(double));
  for (int64_t b = 0; b < m.n_bins; b++) m.shift_um[b] = 15.0 * sin(0.7 * (double)b);
  ss_motion_reg reg;
  if (ss_motion_reg_build(&ctx, &m, &probe, 32, &reg) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_spikes cpu, gpu;
  double t, w1, w2;
  run_mode(path, SS_DEVICE_CPU, 10.0, 0, &reg, &cpu, &t);
  run_mode(path, SS_DEVICE_CUDA, 3.0, 0, &reg, &gpu, &t);
  double f1 = matched_fraction(&cpu, &gpu, &w1), f2 = matched_fraction(&gpu, &cpu, &w2);
  print_message("registered: CPU %lld spikes, GPU %lld; matched %.5f / %.5f; worst feature diff %.2e\n",
                (long long)cpu.n, (long long)gpu.n, f1, f2, fmax(w1, w2));
  assert_true(cpu.n > 100);
  assert_true(f1 >= MIN_MATCHED && f2 >= MIN_MATCHED);
  ss_spikes_free(&cpu);
  ss_spikes_free(&gpu);
  ss_motion_reg_free(&reg);
  free(m.shift_um);
  remove(path);
}

int main(void) {
  ss_test_require_gpu();
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_probe_load_file(&ctx, PROBE, 40.0, &probe) != SS_OK) {
    fprintf(stderr, "%s\n", ss_error_message(&ctx));
    return 1;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(gpu_matches_cpu),
      cmocka_unit_test(gpu_chunk_size_independence),
      cmocka_unit_test(gpu_causal_matches_cpu),
      cmocka_unit_test(gpu_registered_matches_cpu),
  };
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  ss_probe_free(&probe);
  return rc;
}
