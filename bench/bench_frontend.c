/* bench_frontend.c — front-end throughput (filter, thresholds, detection, PCA features, masks) on a
 * simulated 32-channel 30 kHz recording (flat binary from the page cache), with one thread and with
 * all threads. The front end makes two passes (frontend.h): the excerpt pass (noise level and PCA
 * basis from detect.n_excerpts × excerpt_s of data: a fixed cost, whatever the recording's length)
 * and the chunk pass (the streaming throughput). Reported per thread count, medians of the repeats:
 *   realtime_factor          duration / chunk pass          (headline: summary realtime_factor_*)
 *   end_to_end_realtime      duration / (excerpt + chunk pass) for this recording
 *   projected_1h_realtime    3600 / (excerpt pass + chunk pass scaled to one hour)
 * Writes bench/results/frontend.json (layout in bench/README.md).
 *
 * usage: bench_frontend [--seconds S] [--repeats R] [--out FILE] [--tmpdir DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "build_config.h"
#include "tools/simulate.h"
#include "io/source.h"
#include "params/params.h"
#include "params/probe.h"
#include "drivers/frontend.h"
#include "core/log.h"

#define CHANNELS 32
#define RATE 30000.0
#define DEFAULT_SECONDS 60.0
#define DEFAULT_REPEATS 3
#define MAX_REPEATS 20
#define HOUR_S 3600.0
#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void cpu_model(char *buf, size_t len) {
  snprintf(buf, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof(line), f))
    if (strncmp(line, "model name", 10) == 0) {
      char *colon = strchr(line, ':');
      if (colon) snprintf(buf, len, "%s", colon + 2);
      buf[strcspn(buf, "\n")] = '\0';
      break;
    }
  if (f) fclose(f);
}

typedef struct {
  double excerpt_s, chunk_s, total_s;
  int64_t n_spikes;
} run_times;

static ss_status run_once(ss_ctx *ctx, const char *bin, const ss_probe *probe, int threads, run_times *rt) {
  ss_params p;
  ss_params_defaults(&p);
  ss_source_spec spec = {0};
  spec.path = bin;
  spec.format = SS_FORMAT_BINARY;
  spec.n_channels = CHANNELS;
  spec.rate_hz = RATE;
  spec.uv_per_step = 0.195;
  ss_backend be;
  SS_TRY(ss_backend_open(ctx, SS_DEVICE_CPU, 0, threads, &be));
  ss_source *src = NULL;
  ss_spikes sp = {0};
  ss_frontend_model model = {0};
  double t0 = ss_now();
  ss_status st = ss_source_open(ctx, &spec, &src);
  if (st == SS_OK) st = ss_frontend_run(ctx, &be, &p, src, probe, NULL, &sp, &model);
  rt->total_s = ss_now() - t0;
  rt->excerpt_s = model.seconds_threshold;
  rt->chunk_s = model.seconds_detect;
  rt->n_spikes = sp.n;
  ss_spikes_free(&sp);
  ss_frontend_model_free(&model);
  if (src) ss_source_close(src);
  ss_backend_close(&be);
  return st;
}

static ss_status bench_threads(ss_ctx *ctx, ss_bench_doc *doc, const char *bin, const ss_probe *probe, int threads,
                               int repeats, double duration, double *rt_factor) {
  double ex[MAX_REPEATS], ch[MAX_REPEATS], tot[MAX_REPEATS];
  run_times r = {0};
  SS_TRY(run_once(ctx, bin, probe, threads, &r)); /* warm-up: page cache, allocations */
  for (int k = 0; k < repeats; k++) {
    SS_TRY(run_once(ctx, bin, probe, threads, &r));
    ex[k] = r.excerpt_s;
    ch[k] = r.chunk_s;
    tot[k] = r.total_s;
  }
  double e = median(ex, repeats), c = median(ch, repeats), t = median(tot, repeats);
  char name[64];
  snprintf(name, sizeof(name), "threads_%d", threads);
  cJSON *cs = ss_bench_case(doc, name);
  cJSON_AddNumberToObject(cs, "threads", threads);
  cJSON_AddNumberToObject(cs, "channels", CHANNELS);
  cJSON_AddNumberToObject(cs, "rate_hz", RATE);
  cJSON_AddNumberToObject(cs, "duration_s", duration);
  cJSON_AddNumberToObject(cs, "repeats", repeats);
  cJSON_AddNumberToObject(cs, "n_spikes", (double)r.n_spikes);
  cJSON_AddNumberToObject(cs, "excerpt_pass_s", e);
  cJSON_AddNumberToObject(cs, "chunk_pass_s", c);
  cJSON_AddNumberToObject(cs, "total_s", t);
  cJSON_AddNumberToObject(cs, "realtime_factor", duration / c);
  cJSON_AddNumberToObject(cs, "end_to_end_realtime", duration / t);
  cJSON_AddNumberToObject(cs, "projected_1h_realtime", HOUR_S / (e + c * HOUR_S / duration));
  printf("%d thread(s): excerpt pass %.3f s, chunk pass %.3f s (%.1f× real time), total %.3f s (%.1f×), 1 h: %.1f×\n",
         threads, e, c, duration / c, t, duration / t, HOUR_S / (e + c * HOUR_S / duration));
  *rt_factor = duration / c;
  return SS_OK;
}

int main(int argc, char **argv) {
  double seconds = DEFAULT_SECONDS;
  int repeats = DEFAULT_REPEATS;
  const char *out = SS_SOURCE_DIR "/bench/results/frontend.json", *tmpdir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--seconds") == 0) seconds = atof(argv[i + 1]);
    else if (strcmp(argv[i], "--repeats") == 0) repeats = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--out") == 0) out = argv[i + 1];
    else if (strcmp(argv[i], "--tmpdir") == 0) tmpdir = argv[i + 1];
    else {
      fprintf(stderr, "usage: bench_frontend [--seconds S] [--repeats R] [--out FILE] [--tmpdir DIR]\n");
      return 2;
    }
  }
  if (!(seconds > 1) || repeats < 1 || repeats > MAX_REPEATS) {
    fprintf(stderr, "bench_frontend: --seconds must be > 1 and --repeats 1..%d\n", MAX_REPEATS);
    return 2;
  }
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ctx.quiet = 1;
  ss_probe probe;
  char bin[4096], device[512], cpu[256];
  snprintf(bin, sizeof(bin), "%s/bench_frontend_%ld.bin", tmpdir, (long)getpid());
  ss_status st = ss_probe_load_file(&ctx, PROBE, 40.0, &probe);
  ss_sim_config c;
  ss_sim_config_preset(&c, SS_SIM_PRESET_EASY); /* the recorded results' workload */
  c.duration_s = seconds;
  c.rate_hz = RATE;
  if (st == SS_OK) st = ss_sim_write(&ctx, &c, &probe, bin, SS_SIM_FORMAT_BINARY, 0, NULL);
  cpu_model(cpu, sizeof(cpu));
  snprintf(device, sizeof(device), "%s, %d threads", cpu, ss_threads_resolve(0));
  ss_bench_doc doc;
  if (st == SS_OK) st = ss_bench_doc_init(&ctx, &doc, "frontend", device);
  double rt1 = 0, rtn = 0;
  if (st == SS_OK) st = bench_threads(&ctx, &doc, bin, &probe, 1, repeats, seconds, &rt1);
  if (st == SS_OK) st = bench_threads(&ctx, &doc, bin, &probe, ss_threads_resolve(0), repeats, seconds, &rtn);
  if (st == SS_OK) {
    ss_bench_summary_number(&doc, "realtime_factor_1thread", rt1);
    ss_bench_summary_number(&doc, "realtime_factor_allthreads", rtn);
    st = ss_bench_doc_write(&ctx, &doc, out);
  }
  remove(bin);
  char sidecar[4200];
  snprintf(sidecar, sizeof(sidecar), "%.*s.json", (int)(strlen(bin) - 4), bin);
  remove(sidecar);
  ss_probe_free(&probe);
  if (st != SS_OK) {
    fprintf(stderr, "bench_frontend: %s\n", ss_error_message(&ctx));
    return ss_status_exit_code(st);
  }
  printf("wrote %s\n", out);
  return 0;
}
