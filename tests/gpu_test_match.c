/* gpu_test_match.c — GPU group: CUDA template matching (stages/match/match.cu) against the CPU reference
 * (stages/match/match.c) on the same chunks: fresh random banks (K up to 30, C up to 64, unused
 * channels, clamped amplitudes) and dense random spikes in noise, several seeds (printed); one handle
 * over chunks of growing size; a large chunk (timed, printed); several host threads each driving a
 * handle; determinism; K = 0, an empty search region, max_rounds 0; a CPU backend refused; `sort --device
 * cuda` on a simulation matches on the GPU and finds as many spikes as `--device cpu`.
 *
 * Agreement asked: the (row, unit) lists equal up to 0.1 % of the spikes (near-ties; the
 * implementation aims at bit-identical results), amplitudes and gains within 1e-3 relative, the
 * residual within 1e-3 µV (rows near a differing spike excepted). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "build_config.h"
#include "match_test_util.h"
#include "params/params.h"
#include "ss_test_sim.h"

#define TOL_LIST_FRACTION 1e-3
#define TOL_AMP_REL 1e-3
#define TOL_RESIDUAL_UV 1e-3
#define N_SEEDS 6
#define N_THREADS 4

static uint64_t seed0;
static char sim_path[4096];

typedef struct {
  int K, C, W, n_before;
  double dead_ms, footprint_sigma, min_gain;
  int max_rounds;
  double rate;
} bank_cfg;

typedef struct {
  ss_match_bank bank;
  float *tmpl, *sigma;
} test_bank;

/* A random configuration for seed s: K 1–30, C 4–64, W 16–48. */
static bank_cfg random_cfg(uint64_t s) {
  ss_rng r = ss_rng_make(s, SS_RNG_TEST, 100);
  bank_cfg c;
  c.K = 1 + (int)ss_rng_next_below(&r, 30);
  c.C = 4 + (int)ss_rng_next_below(&r, 61);
  c.W = 16 + (int)ss_rng_next_below(&r, 33);
  c.n_before = c.W / 4 + (int)ss_rng_next_below(&r, (uint64_t)(c.W / 4 + 1));
  c.dead_ms = 1.5 * ss_rng_next_uniform(&r);
  c.footprint_sigma = 1.0;
  c.min_gain = 60.0;
  c.max_rounds = 30;
  c.rate = 30000.0;
  return c;
}

/* Random shapes (some units share a peak channel), noise levels 0.5–3 µV, about one channel in ten
 * unused (σ 0). */
static void make_bank(uint64_t s, const bank_cfg *c, test_bank *tb) {
  ss_rng r = ss_rng_make(s, SS_RNG_TEST, 101);
  tb->tmpl = malloc(sizeof(float) * ((size_t)c->K * c->W * c->C + 1));
  tb->sigma = malloc(sizeof(float) * (size_t)c->C);
  for (int ch = 0; ch < c->C; ch++)
    tb->sigma[ch] = ss_rng_next_below(&r, 10) == 0 ? 0.0f : (float)(0.5 + 2.5 * ss_rng_next_uniform(&r));
  int peaks[32];
  for (int u = 0; u < c->K; u++) {
    unit_shape sh = random_shape(&r, c->C);
    if (u > 0 && ss_rng_next_below(&r, 4) == 0) sh.peak = peaks[ss_rng_next_below(&r, (uint64_t)u)];
    peaks[u < 32 ? u : 31] = sh.peak;
    shape_template(&sh, c->W, c->C, c->n_before, tb->tmpl + (size_t)u * c->W * c->C);
  }
  ss_params p;
  ss_params_defaults(&p);
  p.match.dead_ms = c->dead_ms;
  p.match.max_rounds = c->max_rounds;
  p.match.footprint_sigma = c->footprint_sigma;
  p.match.min_gain = c->min_gain;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_match_bank_build(&ctx, &p, c->rate, tb->tmpl, c->K, c->W, c->C, c->n_before, tb->sigma, &tb->bank) != SS_OK)
    fail_msg("bank (seed %llu): %s", (unsigned long long)s, ss_error_message(&ctx));
}

static void free_bank(test_bank *tb) {
  ss_match_bank_free(&tb->bank);
  free(tb->tmpl);
  free(tb->sigma);
}

/* A chunk of `rows` rows: each channel's noise, one spike per `every` rows on average (random unit,
 * row, amplitude 0.4–2: clamps exercised), search and own rows inside the chunk. */
static float *make_chunk(uint64_t s, uint64_t stream, const bank_cfg *c, const test_bank *tb, int64_t rows, int every,
                         ss_match_chunk *ch) {
  float *x = malloc(sizeof(float) * ((size_t)rows * c->C + 1));
  fill_noise(x, rows, c->C, 1.0, s, 1000 + stream);
  for (int64_t i = 0; i < rows * c->C; i++) x[i] *= tb->sigma[i % c->C] > 0 ? tb->sigma[i % c->C] : 1.0f;
  ss_rng r = ss_rng_make(s, SS_RNG_TEST, 2000 + stream);
  const int64_t n = rows / every;
  for (int64_t i = 0; i < n && c->K > 0; i++) {
    const int u = (int)ss_rng_next_below(&r, (uint64_t)c->K);
    const int64_t t = (int64_t)ss_rng_next_below(&r, (uint64_t)rows);
    plant(x, rows, c->C, tb->tmpl, c->W, c->n_before, u, t, 0.4 + 1.6 * ss_rng_next_uniform(&r));
  }
  const int64_t m = (int64_t)ss_rng_next_below(&r, (uint64_t)(2 * c->W));
  ch->x = x;
  ch->n_rows = rows;
  ch->search_begin = m;
  ch->search_end = rows - (int64_t)ss_rng_next_below(&r, (uint64_t)(2 * c->W));
  ch->own_begin = ch->search_begin + c->W;
  ch->own_end = ch->search_end - c->W > ch->own_begin ? ch->search_end - c->W : ch->own_begin;
  return x;
}

typedef struct {
  int64_t n_cpu, n_gpu, n_differ;
  double worst_amp, worst_residual;
  int64_t residual_bits_equal, residual_n;
  double cpu_s, gpu_s;
} compare_stats;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int find(const ss_match_list *l, int64_t row, int32_t unit) {
  int64_t lo = 0, hi = l->n; /* sorted by (row, unit) */
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (l->row[mid] < row || (l->row[mid] == row && l->unit[mid] < unit)) lo = mid + 1;
    else hi = mid;
  }
  return lo < l->n && l->row[lo] == row && l->unit[lo] == unit ? (int)lo : -1;
}

/* Spikes of a missing from b: counted, the first few printed, their rows marked in `near`. */
static int64_t missing(const char *what, const ss_match_list *a, const ss_match_list *b, int W, uint8_t *near,
                       int64_t rows) {
  int64_t n = 0;
  for (int64_t i = 0; i < a->n; i++) {
    if (find(b, a->row[i], a->unit[i]) >= 0) continue;
    if (n++ < 5)
      printf("  %s: row %lld unit %d amp %.6f gain %.4f\n", what, (long long)a->row[i], a->unit[i], a->amp[i],
             a->gain[i]);
    for (int64_t r = a->row[i] - 2 * W; r <= a->row[i] + 2 * W; r++)
      if (r >= 0 && r < rows) near[r] = 1;
  }
  return n;
}

static void check_lists(const char *label, const ss_match_list *cpu, const ss_match_list *gpu, int W, uint8_t *near,
                        int64_t rows, compare_stats *st) {
  st->n_cpu = cpu->n;
  st->n_gpu = gpu->n;
  st->n_differ = missing("CPU only", cpu, gpu, W, near, rows) + missing("GPU only", gpu, cpu, W, near, rows);
  const int64_t big = cpu->n > gpu->n ? cpu->n : gpu->n;
  if ((double)st->n_differ > TOL_LIST_FRACTION * (double)big)
    fail_msg("%s: %lld of %lld spikes differ between CPU and GPU (allowed %.1f %%)", label, (long long)st->n_differ,
             (long long)big, 100 * TOL_LIST_FRACTION);
  for (int64_t i = 0; i < cpu->n; i++) {
    const int q = find(gpu, cpu->row[i], cpu->unit[i]);
    if (q < 0) continue;
    const double da = fabs(gpu->amp[q] - cpu->amp[i]) / fmax(fabs(cpu->amp[i]), 1e-30);
    const double dg = fabs(gpu->gain[q] - cpu->gain[i]) / fmax(fabs(cpu->gain[i]), 1e-30);
    if (da > st->worst_amp) st->worst_amp = da;
    if (da > TOL_AMP_REL || dg > TOL_AMP_REL)
      fail_msg("%s: row %lld unit %d: amplitude CPU %.7f GPU %.7f, gain CPU %.5f GPU %.5f (tolerance %g relative)",
               label, (long long)cpu->row[i], cpu->unit[i], cpu->amp[i], gpu->amp[q], cpu->gain[i], gpu->gain[q],
               TOL_AMP_REL);
  }
}

static void check_residual(const char *label, const float *xc, const float *xg, int64_t rows, int C,
                           const uint8_t *near, compare_stats *st) {
  for (int64_t r = 0; r < rows; r++)
    for (int c = 0; c < C; c++) {
      const float a = xc[r * C + c], b = xg[r * C + c];
      st->residual_n++;
      st->residual_bits_equal += memcmp(&a, &b, sizeof(float)) == 0;
      if (near[r]) continue;
      const double d = fabs((double)a - b);
      if (d > st->worst_residual) st->worst_residual = d;
      if (!(d <= TOL_RESIDUAL_UV))
        fail_msg("%s: residual at row %lld channel %d: CPU %.6f GPU %.6f µV (tolerance %g µV)", label, (long long)r, c,
                 a, b, TOL_RESIDUAL_UV);
    }
}

/* Match the chunk on both sides (x copied for each) and compare; the GPU's residual in *xg_out when
 * given. */
static compare_stats compare(const char *label, const test_bank *tb, ss_match_cuda *h, const ss_match_chunk *ch0,
                             float **xg_out) {
  compare_stats st = {0};
  const int C = tb->bank.C;
  const size_t bytes = sizeof(float) * ((size_t)ch0->n_rows * C + 1);
  float *xc = malloc(bytes), *xg = malloc(bytes);
  memcpy(xc, ch0->x, bytes);
  memcpy(xg, ch0->x, bytes);
  ss_match_chunk cc = *ch0, cg = *ch0;
  cc.x = xc;
  cg.x = xg;
  ss_match_work w = {0};
  ss_match_list lc = {0}, lg = {0};
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double t = now_s();
  if (ss_match_chunk_cpu(&ctx, &tb->bank, &cc, &w, &lc) != SS_OK)
    fail_msg("%s: CPU: %s", label, ss_error_message(&ctx));
  st.cpu_s = now_s() - t;
  t = now_s();
  if (ss_match_chunk_cuda(&ctx, h, &cg, &lg) != SS_OK) fail_msg("%s: GPU: %s", label, ss_error_message(&ctx));
  st.gpu_s = now_s() - t;
  uint8_t *near = calloc((size_t)ch0->n_rows + 1, 1);
  check_lists(label, &lc, &lg, tb->bank.W, near, ch0->n_rows, &st);
  check_residual(label, xc, xg, ch0->n_rows, C, near, &st);
  printf("%s: K %d C %d W %d rows %lld: %lld spikes (CPU) %lld (GPU), %lld differ; worst amplitude %.2g rel, "
         "residual %.2g µV; residual bit-identical %.4f %%; CPU %.1f ms, GPU %.1f ms\n",
         label, tb->bank.K, C, tb->bank.W, (long long)ch0->n_rows, (long long)st.n_cpu, (long long)st.n_gpu,
         (long long)st.n_differ, st.worst_amp, st.worst_residual,
         100.0 * (double)st.residual_bits_equal / (double)(st.residual_n ? st.residual_n : 1), 1e3 * st.cpu_s,
         1e3 * st.gpu_s);
  free(near);
  free(xc);
  if (xg_out) *xg_out = xg;
  else free(xg);
  ss_match_list_free(&lc);
  ss_match_list_free(&lg);
  ss_match_work_free(&w);
  return st;
}

static ss_match_cuda *open_handle(const ss_backend *gpu, const test_bank *tb) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_match_cuda *h = NULL;
  if (ss_match_cuda_open(&ctx, gpu, &tb->bank, &h) != SS_OK) fail_msg("open: %s", ss_error_message(&ctx));
  return h;
}

/* Fresh random banks and chunks; one handle per bank over three chunks (growing, then smaller). */
static void random_banks_match_cpu(void **state) {
  const ss_test_backends *b = *state;
  int64_t spikes = 0, differ = 0;
  for (int k = 0; k < N_SEEDS; k++) {
    const uint64_t s = seed0 + (uint64_t)k;
    bank_cfg c = random_cfg(s);
    if (k == 0) c.K = 30, c.C = 64; /* the largest asked */
    if (k == 1) c.dead_ms = 0;      /* a unit may fire again right after itself */
    if (k == 2) c.footprint_sigma = 3, c.min_gain = 20;
    test_bank tb;
    make_bank(s, &c, &tb);
    ss_match_cuda *h = open_handle(&b->gpu, &tb);
    const int64_t rows[3] = {2000, 5000, 3000};
    for (int q = 0; q < 3; q++) {
      ss_match_chunk ch;
      float *x = make_chunk(s, (uint64_t)q, &c, &tb, rows[q], 20 + 10 * q, &ch);
      char label[96];
      snprintf(label, sizeof(label), "seed %llu chunk %d (dead %d, %d unusable)", (unsigned long long)s, q,
               tb.bank.dead, tb.bank.n_unusable);
      const compare_stats st = compare(label, &tb, h, &ch, NULL);
      spikes += st.n_cpu;
      differ += st.n_differ;
      free(x);
    }
    ss_match_cuda_close(h);
    free_bank(&tb);
  }
  printf("all seeds: %lld spikes, %lld differ\n", (long long)spikes, (long long)differ);
  assert_true(spikes > 200); /* the fixture does find spikes */
}

/* A large dense chunk (the spike list grows on the device), few rounds in one case, and the same
 * chunk twice: bit-identical output. */
static void large_chunk_and_determinism(void **state) {
  const ss_test_backends *b = *state;
  const uint64_t s = seed0 + 100;
  bank_cfg c = random_cfg(s);
  c.K = 30, c.C = 64, c.W = 40, c.n_before = 12;
  test_bank tb;
  make_bank(s, &c, &tb);
  ss_match_cuda *h = open_handle(&b->gpu, &tb);
  ss_match_chunk ch;
  float *x = make_chunk(s, 7, &c, &tb, 60000, 15, &ch);
  float *x1 = NULL, *x2 = NULL;
  const compare_stats st = compare("large chunk", &tb, h, &ch, &x1);
  assert_true(st.n_cpu > 1024);
  compare("large chunk again", &tb, h, &ch, &x2);
  if (memcmp(x1, x2, sizeof(float) * (size_t)ch.n_rows * c.C) != 0) fail_msg("GPU residual differs run to run");
  free(x1);
  free(x2);
  ss_match_cuda_close(h);
  free_bank(&tb);
  c.max_rounds = 2;
  make_bank(s, &c, &tb);
  h = open_handle(&b->gpu, &tb);
  compare("two rounds", &tb, h, &ch, NULL);
  ss_match_cuda_close(h);
  free_bank(&tb);
  free(x);
}

typedef struct {
  const ss_backend *gpu;
  uint64_t s;
  int fails;
  char msg[256];
} thread_job;

/* One host thread: its own bank, handle and chunks, compared with the CPU (no CMocka calls here). */
static void *thread_main(void *arg) {
  thread_job *j = arg;
  bank_cfg c = random_cfg(j->s);
  test_bank tb;
  make_bank(j->s, &c, &tb);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_match_cuda *h = NULL;
  if (ss_match_cuda_open(&ctx, j->gpu, &tb.bank, &h) != SS_OK) {
    snprintf(j->msg, sizeof(j->msg), "open: %s", ss_error_message(&ctx));
    j->fails++;
  }
  for (int q = 0; h && q < 4 && !j->fails; q++) {
    ss_match_chunk ch;
    float *x = make_chunk(j->s, (uint64_t)q, &c, &tb, 4000, 25, &ch);
    const size_t bytes = sizeof(float) * ((size_t)ch.n_rows * c.C);
    float *xg = malloc(bytes);
    memcpy(xg, x, bytes);
    ss_match_chunk cg = ch;
    cg.x = xg;
    ss_match_work w = {0};
    ss_match_list lc = {0}, lg = {0};
    if (ss_match_chunk_cpu(&ctx, &tb.bank, &ch, &w, &lc) != SS_OK || ss_match_chunk_cuda(&ctx, h, &cg, &lg) != SS_OK) {
      snprintf(j->msg, sizeof(j->msg), "chunk %d: %s", q, ss_error_message(&ctx));
      j->fails++;
    } else if (lc.n != lg.n || memcmp(lc.row, lg.row, sizeof(int64_t) * (size_t)lc.n) != 0 ||
               memcmp(lc.unit, lg.unit, sizeof(int32_t) * (size_t)lc.n) != 0) {
      snprintf(j->msg, sizeof(j->msg), "seed %llu chunk %d: CPU %lld spikes, GPU %lld, lists differ",
               (unsigned long long)j->s, q, (long long)lc.n, (long long)lg.n);
      j->fails++;
    } else {
      for (size_t i = 0; i < bytes / sizeof(float) && !j->fails; i++)
        if (fabsf(x[i] - xg[i]) > TOL_RESIDUAL_UV) {
          snprintf(j->msg, sizeof(j->msg), "seed %llu chunk %d: residual element %zu: CPU %.6f GPU %.6f",
                   (unsigned long long)j->s, q, i, x[i], xg[i]);
          j->fails++;
        }
    }
    ss_match_list_free(&lc);
    ss_match_list_free(&lg);
    ss_match_work_free(&w);
    free(x);
    free(xg);
  }
  ss_match_cuda_close(h);
  free_bank(&tb);
  return NULL;
}

static void threads_each_with_a_handle(void **state) {
  const ss_test_backends *b = *state;
  pthread_t th[N_THREADS];
  thread_job jobs[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    jobs[i] = (thread_job){.gpu = &b->gpu, .s = seed0 + 200 + (uint64_t)i};
    assert_int_equal(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  }
  for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < N_THREADS; i++)
    if (jobs[i].fails) fail_msg("thread %d: %s", i, jobs[i].msg);
}

/* K = 0, a search region too short for a template, max_rounds 0: nothing matched, x untouched on the
 * GPU as on the CPU; a CPU backend is refused with a message. */
static void edges_and_errors(void **state) {
  const ss_test_backends *b = *state;
  const uint64_t s = seed0 + 300;
  bank_cfg c = random_cfg(s);
  test_bank tb;
  make_bank(s, &c, &tb);
  ss_match_chunk ch;
  float *x = make_chunk(s, 0, &c, &tb, 1000, 20, &ch);
  ss_match_cuda *h = open_handle(&b->gpu, &tb);
  ss_match_chunk narrow = ch;
  narrow.search_begin = 500;
  narrow.search_end = 500;
  compare("empty search region", &tb, h, &narrow, NULL);
  narrow.search_end = 400;
  compare("reversed search region", &tb, h, &narrow, NULL);
  ss_match_cuda_close(h);
  free_bank(&tb);
  c.max_rounds = 0;
  make_bank(s, &c, &tb);
  h = open_handle(&b->gpu, &tb);
  float *xg = NULL;
  compare("max_rounds 0", &tb, h, &ch, &xg);
  assert_memory_equal(xg, x, sizeof(float) * (size_t)ch.n_rows * c.C);
  free(xg);
  ss_match_cuda_close(h);
  free_bank(&tb);
  c.K = 0;
  make_bank(s, &c, &tb);
  h = open_handle(&b->gpu, &tb);
  compare("K = 0", &tb, h, &ch, &xg);
  assert_memory_equal(xg, x, sizeof(float) * (size_t)ch.n_rows * c.C);
  free(xg);
  ss_match_cuda_close(h);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_match_cuda_open(&ctx, &b->cpu, &tb.bank, &h), SS_ERR_INTERNAL);
  assert_null(h);
  assert_non_null(strstr(ss_error_message(&ctx), "not a CUDA backend"));
  free_bank(&tb);
  free(x);
}

/* "sort: match: N spikes from M detections" and where matching ran, from a sort's log. */
static void sort_match_lines(const char *dev, int64_t *n_matched, char *where, size_t len) {
  char dir[4096], args[3 * 4096], path[4200];
  ss_test_path(dir, sizeof(dir), dev);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --device %s", sim_path, dir, dev);
  char *out = NULL, *err = NULL;
  const int code = ss_test_run_cli(args, &out, &err);
  if (code != 0) fail_msg("spikestream %s: exit %d\nstderr: %s", args, code, err);
  free(out);
  free(err);
  snprintf(path, sizeof(path), "%s/sort.log", dir);
  char *log = ss_test_slurp(path);
  const char *a = strstr(log, "matching on "), *b = strstr(log, " spikes from ");
  if (!a || !b) fail_msg("%s: no matching lines in sort.log:\n%s", dev, log);
  snprintf(where, len, "%.*s", (int)strcspn(a, "\n"), a);
  while (b > log && b[-1] != ' ') b--;
  *n_matched = strtoll(b, NULL, 10);
  printf("--device %s: %s; %lld matched spikes\n", dev, where, (long long)*n_matched);
  free(log);
}

/* The driver: with a CUDA backend matching runs on the GPU, and the sort finds as many matched
 * spikes as on the CPU (within 2 %: the stages before matching need not be bit-identical). */
static void sort_matches_on_the_gpu(void **state) {
  (void)state;
  const ss_sim_config c = ss_test_sim_units(10.0, 5, 20, 3);
  if (ss_test_simulate(SS_SOURCE_DIR "/params/probes/two_column_32.json", 40.0, &c, SS_SIM_FORMAT_NWB, "sim.nwb",
                       sim_path, sizeof(sim_path), NULL) != 0)
    fail_msg("simulation failed");
  int64_t n_cpu = 0, n_gpu = 0;
  char where_cpu[256], where_gpu[256];
  sort_match_lines("cpu", &n_cpu, where_cpu, sizeof(where_cpu));
  sort_match_lines("cuda", &n_gpu, where_gpu, sizeof(where_gpu));
  assert_non_null(strstr(where_cpu, "CPU threads"));
  if (!strstr(where_gpu, "on the GPU")) fail_msg("--device cuda: \"%s\"", where_gpu);
  assert_true(n_cpu > 100);
  if (fabs((double)(n_gpu - n_cpu)) > 0.02 * (double)n_cpu)
    fail_msg("matched spikes: %lld on the CPU, %lld on the GPU", (long long)n_cpu, (long long)n_gpu);
}

int main(void) {
  ss_test_require_gpu();
  const char *fixed = getenv("SS_TEST_SEED"); /* to rerun a failing seed */
  seed0 = fixed ? strtoull(fixed, NULL, 10) : (uint64_t)time(NULL);
  printf("seed %llu (SS_TEST_SEED=%llu reruns it)\n", (unsigned long long)seed0, (unsigned long long)seed0);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(random_banks_match_cpu),     cmocka_unit_test(large_chunk_and_determinism),
      cmocka_unit_test(threads_each_with_a_handle), cmocka_unit_test(edges_and_errors),
      cmocka_unit_test(sort_matches_on_the_gpu),
  };
  return cmocka_run_group_tests(tests, ss_test_backends_setup, ss_test_backends_teardown);
}
