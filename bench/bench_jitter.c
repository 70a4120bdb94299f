/* bench_jitter.c — how steady is this machine's CPU? A platform probe for the live benchmark:
 * a thread pinned to one CPU repeats a fixed, dependent chain of integer work (a few µs) for S seconds and
 * times every repetition. On a quiet, dedicated core every repetition takes the same time; a repetition
 * that takes a millisecond is a millisecond in which that CPU did not run this thread (the hypervisor
 * took it, an interrupt, another thread) — exactly what turns into an overrun of the live engine, and
 * something no code in the engine can remove. Optional spinning threads on other CPUs reproduce the live
 * bench's reader and sender (a spinning sibling hyperthread slows the probe without stopping it).
 *
 * usage: bench_jitter OUT.json [--seconds S] [--work-us W] [--case NAME:CPU:SPINNER_CPUS]...
 *   SPINNER_CPUS: a comma list (empty = none, -1 = an unpinned spinner). Default cases: the probe alone
 *   on CPU 3, with its SMT sibling spinning, and with two spinners on other cores.
 * Writes the cases (per-repetition percentiles, counts of repetitions over 0.25/0.5/1/2 ms and over
 * 2x/5x the median, steal time of the probe's CPU and of all CPUs from /proc/stat) to OUT.json. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "core/log.h"

enum { MAX_CASES = 8, MAX_SPINNERS = 8, MAX_CPUS = 1024 };
static const double DEFAULT_SECONDS = 30, DEFAULT_WORK_US = 5;
static const double OVER_MS[] = {0.25, 0.5, 1, 2}; /* absolute thresholds of a slow repetition */
static const double OVER_MEDIAN[] = {2, 5};        /* relative thresholds (slowdown, not stall) */
static const double QUANTILES[] = {0.5, 0.99, 0.9999};
static const int DEFAULT_PROBE_CPU = 3;

typedef struct {
  char name[32];
  int cpu;
  int spinners[MAX_SPINNERS];
  int n_spinners;
} probe_case;

typedef struct {
  int cpu;
  atomic_int *stop;
} spinner_arg;

static int pin_self(int cpu) {
  if (cpu < 0) return 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static void *spin_main(void *p) {
  spinner_arg *a = p;
  pin_self(a->cpu);
  while (!atomic_load_explicit(a->stop, memory_order_relaxed)) {
  }
  return NULL;
}

/* A dependent chain the compiler cannot shorten: `iters` rounds of a 64-bit LCG. */
static uint64_t work(uint64_t x, int64_t iters) {
  for (int64_t i = 0; i < iters; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return x;
}

/* Rounds of work() that take about `us` microseconds here. */
static int64_t calibrate(double us, uint64_t *sink) {
  int64_t iters = 1000;
  for (;;) {
    double t0 = ss_now();
    *sink ^= work(*sink, iters);
    double dt = ss_now() - t0;
    if (dt > 1e-3) return (int64_t)((double)iters * us * 1e-6 / dt) + 1;
    iters *= 4;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void siblings_of(int cpu, char *buf, size_t len) {
  char path[128];
  snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu);
  FILE *f = fopen(path, "r");
  buf[0] = '\0';
  if (!f) return;
  if (fgets(buf, (int)len, f)) buf[strcspn(buf, "\n")] = '\0';
  fclose(f);
}

static ss_status run_case(ss_ctx *ctx, const probe_case *pc, double seconds, double work_us, ss_bench_doc *doc) {
  atomic_int stop = 0;
  pthread_t th[MAX_SPINNERS];
  spinner_arg args[MAX_SPINNERS];
  for (int i = 0; i < pc->n_spinners; i++) {
    args[i] = (spinner_arg){pc->spinners[i], &stop};
    if (pthread_create(&th[i], NULL, spin_main, &args[i]) != 0)
      return ss_fail(ctx, SS_ERR_INTERNAL, "bench_jitter: cannot start spinner %d", i);
  }
  int pinned = pin_self(pc->cpu) == 0;
  uint64_t sink = 1;
  int64_t iters = calibrate(work_us, &sink);
  int64_t cap = (int64_t)(seconds * 1e6 / work_us) + 1024, n = 0;
  double *dt = NULL;
  ss_status st = SS_ALLOC(ctx, dt, (size_t)cap, "jitter samples");
  double *steal0 = NULL, *steal1 = NULL;
  if (st == SS_OK) st = SS_CALLOC(ctx, steal0, 2 * (MAX_CPUS + 1), "steal counters");
  if (st == SS_OK) {
    steal1 = steal0 + MAX_CPUS + 1;
    int ns = ss_bench_read_steal(steal0, MAX_CPUS + 1);
    double start = ss_now(), prev = start;
    while (n < cap && prev - start < seconds) {
      sink ^= work(sink, iters);
      double now = ss_now();
      dt[n++] = now - prev;
      prev = now;
    }
    ss_bench_read_steal(steal1, MAX_CPUS + 1);
    qsort(dt, (size_t)n, sizeof *dt, cmp_double);
    cJSON *c = ss_bench_case(doc, pc->name);
    char sib[64];
    siblings_of(pc->cpu, sib, sizeof sib);
    cJSON_AddNumberToObject(c, "cpu", pc->cpu);
    cJSON_AddBoolToObject(c, "pinned", pinned);
    cJSON_AddStringToObject(c, "cpu_siblings", sib);
    cJSON *sp = cJSON_AddArrayToObject(c, "spinner_cpus");
    for (int i = 0; i < pc->n_spinners; i++) cJSON_AddItemToArray(sp, cJSON_CreateNumber(pc->spinners[i]));
    cJSON_AddNumberToObject(c, "seconds", seconds);
    cJSON_AddNumberToObject(c, "repetitions", (double)n);
    for (size_t q = 0; q < sizeof QUANTILES / sizeof *QUANTILES; q++) {
      char key[32];
      snprintf(key, sizeof key, "p%g_us", 100 * QUANTILES[q]);
      cJSON_AddNumberToObject(c, key, 1e6 * dt[(int64_t)(QUANTILES[q] * (double)(n - 1))]);
    }
    cJSON_AddNumberToObject(c, "max_us", 1e6 * dt[n - 1]);
    double med = dt[(n - 1) / 2];
    for (size_t k = 0; k < sizeof OVER_MS / sizeof *OVER_MS; k++) {
      char key[32];
      int64_t cnt = 0;
      for (int64_t i = n - 1; i >= 0 && dt[i] > OVER_MS[k] * 1e-3; i--) cnt++;
      snprintf(key, sizeof key, "over_%gms", OVER_MS[k]);
      cJSON_AddNumberToObject(c, key, (double)cnt);
    }
    for (size_t k = 0; k < sizeof OVER_MEDIAN / sizeof *OVER_MEDIAN; k++) {
      char key[32];
      int64_t cnt = 0;
      for (int64_t i = n - 1; i >= 0 && dt[i] > OVER_MEDIAN[k] * med; i--) cnt++;
      snprintf(key, sizeof key, "over_%gx_median", OVER_MEDIAN[k]);
      cJSON_AddNumberToObject(c, key, (double)cnt);
    }
    /* the chain's result is printed so that the compiler keeps the work */
    cJSON_AddNumberToObject(c, "checksum", (double)(sink & 0xffffu));
    cJSON_AddNumberToObject(c, "work_us", work_us);
    cJSON_AddNumberToObject(c, "steal_ms_all_cpus", 1e3 * (steal1[0] - steal0[0]));
    if (pc->cpu >= 0 && pc->cpu + 1 < ns)
      cJSON_AddNumberToObject(c, "steal_ms_probe_cpu", 1e3 * (steal1[pc->cpu + 1] - steal0[pc->cpu + 1]));
    printf("%-12s cpu %d (siblings %s) spinners %d: %lld reps, p50 %.2f us, max %.0f us, >1 ms %g, >2x median %g\n",
           pc->name, pc->cpu, sib, pc->n_spinners, (long long)n, 1e6 * med, 1e6 * dt[n - 1],
           cJSON_GetNumberValue(cJSON_GetObjectItem(c, "over_1ms")),
           cJSON_GetNumberValue(cJSON_GetObjectItem(c, "over_2x_median")));
    fflush(stdout);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < pc->n_spinners; i++) pthread_join(th[i], NULL);
  free(dt);
  free(steal0);
  return st;
}

static ss_status parse_case(ss_ctx *ctx, const char *spec, probe_case *pc) {
  memset(pc, 0, sizeof *pc);
  const char *a = strchr(spec, ':');
  const char *b = a ? strchr(a + 1, ':') : NULL;
  if (!a || !b || a == spec || (size_t)(a - spec) >= sizeof pc->name)
    return ss_fail(ctx, SS_ERR_USAGE, "bench_jitter: --case: expected NAME:CPU:SPINNER_CPUS, got '%s'", spec);
  memcpy(pc->name, spec, (size_t)(a - spec));
  pc->cpu = atoi(a + 1);
  for (const char *p = b + 1; *p && pc->n_spinners < MAX_SPINNERS;) {
    pc->spinners[pc->n_spinners++] = atoi(p);
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
  return SS_OK;
}

/* The probe CPU's first SMT sibling other than itself, else -1. */
static int sibling_cpu(int cpu) {
  char sib[64];
  siblings_of(cpu, sib, sizeof sib);
  for (char *p = sib; *p;) {
    int c = atoi(p);
    if (c != cpu) return c;
    p += strcspn(p, ",-");
    if (*p) p++;
  }
  return -1;
}

int main(int argc, char **argv) {
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  if (argc < 2) {
    fprintf(stderr, "usage: bench_jitter OUT.json [--seconds S] [--work-us W] [--case NAME:CPU:SPINNERS]...\n");
    return 2;
  }
  double seconds = DEFAULT_SECONDS, work_us = DEFAULT_WORK_US;
  probe_case cases[MAX_CASES];
  int n_cases = 0;
  ss_status st = SS_OK;
  for (int i = 2; i < argc && st == SS_OK; i++) {
    if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) seconds = atof(argv[++i]);
    else if (strcmp(argv[i], "--work-us") == 0 && i + 1 < argc) work_us = atof(argv[++i]);
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc && n_cases < MAX_CASES)
      st = parse_case(&ctx, argv[++i], &cases[n_cases++]);
    else st = ss_fail(&ctx, SS_ERR_USAGE, "bench_jitter: unknown or incomplete option '%s'", argv[i]);
  }
  if (st == SS_OK && (seconds <= 0 || work_us <= 0))
    st = ss_fail(&ctx, SS_ERR_USAGE, "bench_jitter: --seconds and --work-us must be positive");
  if (st == SS_OK && n_cases == 0) {
    int p = DEFAULT_PROBE_CPU, s = sibling_cpu(p);
    cases[n_cases++] = (probe_case){"alone", p, {0}, 0};
    if (s >= 0) cases[n_cases++] = (probe_case){"sibling_spin", p, {s}, 1};
    cases[n_cases++] = (probe_case){"two_spinners", p, {p + 2, p + 4}, 2};
  }
  ss_bench_doc doc;
  if (st == SS_OK) {
    char dev[128];
    snprintf(dev, sizeof dev, "%ld CPU threads", sysconf(_SC_NPROCESSORS_ONLN));
    st = ss_bench_doc_init(&ctx, &doc, "jitter", dev);
  }
  for (int i = 0; st == SS_OK && i < n_cases; i++) st = run_case(&ctx, &cases[i], seconds, work_us, &doc);
  if (st == SS_OK) st = ss_bench_doc_write(&ctx, &doc, argv[1]);
  if (st != SS_OK) fprintf(stderr, "bench_jitter: %s\n", ss_error_message(&ctx));
  return st == SS_OK ? 0 : 1;
}
