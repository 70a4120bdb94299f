/* bench_readers.c — reader throughput from the page cache: the same 32-channel 30 kHz recording as
 * NWB (through the writer) and as flat binary, streamed in one-second chunks with margins through
 * ss_source; the first pass warms the cache, the next passes are timed (median). Reports MB/s,
 * multiple of real time and peak RSS (also as growth over the RSS at start, which is mostly the
 * mapped CUDA libraries); writes bench/results/readers.json with summary keys
 * nwb_realtime_factor and binary_realtime_factor.
 *
 * usage: bench_readers [--minutes M] [--out FILE] [--tmpdir DIR] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "build_config.h"
#include "io/nwb_write.h"
#include "io/source.h"
#include "core/log.h"
#include "core/rng.h"

#define CHANNELS 32
#define RATE 30000
#define CHUNK RATE  /* one second */
#define MARGIN 1000 /* samples each side, as a filter would ask */
#define REPEATS 5
#define DEFAULT_MINUTES 5.0

typedef struct {
  ss_source_spec spec;
  int64_t checksum;
  ss_ctx ctx;
} pass_arg;

static long vm_hwm_kib(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof(line), f))
    if (sscanf(line, "VmHWM: %ld kB", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

/* One full pass: every chunk with its margins; a checksum keeps the reads honest. */
static ss_status one_pass(void *p) {
  pass_arg *a = p;
  ss_source *src;
  SS_TRY(ss_source_open(&a->ctx, &a->spec, &src));
  ss_status st = ss_source_configure(&a->ctx, src, CHUNK, MARGIN, MARGIN);
  for (int64_t i = 0; st == SS_OK && i < ss_source_n_chunks(src); i++) {
    ss_chunk ch;
    st = ss_source_chunk(&a->ctx, src, i, &ch);
    if (st == SS_OK)
      a->checksum += ch.data[(int64_t)ch.left * CHANNELS] + ch.data[(ch.left + ch.n - 1) * CHANNELS + 31];
  }
  ss_source_close(src);
  return st;
}

/* Write the same pseudo-random recording as NWB and as binary, a second at a time. */
static ss_status make_files(ss_ctx *ctx, const char *nwb, const char *bin, int64_t seconds) {
  int16_t *buf = NULL;
  SS_TRY(SS_ALLOC(ctx, buf, (size_t)RATE * CHANNELS, "bench buffer"));
  ss_nwb_meta m = {0};
  m.rate_hz = RATE;
  m.n_channels = CHANNELS;
  m.conversion = 0.195e-6;
  ss_nwb_writer *w = NULL;
  FILE *f = fopen(bin, "wb");
  ss_status st = f ? ss_nwb_writer_open(ctx, nwb, &m, &w) : ss_fail(ctx, SS_ERR_IO, "%s: cannot create", bin);
  uint64_t key = ss_rng_key(1, SS_RNG_TEST, 0);
  for (int64_t s = 0; s < seconds && st == SS_OK; s++) {
    for (int64_t i = 0; i < (int64_t)RATE * CHANNELS; i++)
      buf[i] = (int16_t)((ss_rng_u64(key, (uint64_t)(s * RATE * CHANNELS + i)) & 0x3ff) - 512);
    st = ss_nwb_writer_append(ctx, w, buf, RATE);
    if (st == SS_OK && fwrite(buf, sizeof(int16_t), (size_t)RATE * CHANNELS, f) != (size_t)RATE * CHANNELS)
      st = ss_fail(ctx, SS_ERR_IO, "%s: write failed", bin);
  }
  if (w) st = st == SS_OK ? ss_nwb_writer_close(ctx, w) : (ss_nwb_writer_abort(w), st);
  if (f && fclose(f) != 0 && st == SS_OK) st = ss_fail(ctx, SS_ERR_IO, "%s: write failed", bin);
  free(buf);
  return st;
}

static long rss_start_kib;

static ss_status measure(ss_ctx *ctx, ss_bench_doc *doc, const char *name, const ss_source_spec *spec, double seconds,
                         double *factor) {
  pass_arg a;
  memset(&a, 0, sizeof(a));
  a.spec = *spec;
  ss_ctx_init(&a.ctx);
  ss_status st;
  double t = ss_bench_median_s(one_pass, &a, 1, REPEATS, &st);
  if (st != SS_OK) return ss_fail(ctx, st, "%s", ss_error_message(&a.ctx));
  double mb = seconds * RATE * CHANNELS * 2 / 1e6;
  *factor = seconds / t;
  cJSON *c = ss_bench_case(doc, name);
  cJSON_AddNumberToObject(c, "channels", CHANNELS);
  cJSON_AddNumberToObject(c, "rate_hz", RATE);
  cJSON_AddNumberToObject(c, "recording_s", seconds);
  cJSON_AddNumberToObject(c, "chunk_samples", CHUNK);
  cJSON_AddNumberToObject(c, "margin_samples", MARGIN);
  cJSON_AddNumberToObject(c, "median_s", t);
  cJSON_AddNumberToObject(c, "repeats", REPEATS);
  cJSON_AddNumberToObject(c, "mb_per_s", mb / t);
  cJSON_AddNumberToObject(c, "realtime_factor", *factor);
  cJSON_AddNumberToObject(c, "peak_rss_mib", vm_hwm_kib() / 1024.0);
  cJSON_AddNumberToObject(c, "peak_rss_growth_mib", (vm_hwm_kib() - rss_start_kib) / 1024.0);
  printf("%-7s %.0f s recording, %.1f MB: median %.3f s = %.0f MB/s = %.0fx real time (peak RSS %.1f MiB, +%.1f MiB "
         "over the start)\n",
         name, seconds, mb, t, mb / t, *factor, vm_hwm_kib() / 1024.0, (vm_hwm_kib() - rss_start_kib) / 1024.0);
  return SS_OK;
}

int main(int argc, char **argv) {
  rss_start_kib = vm_hwm_kib();
  double minutes = DEFAULT_MINUTES;
  const char *out = SS_SOURCE_DIR "/bench/results/readers.json";
  const char *tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--minutes")) minutes = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--out")) out = argv[i + 1];
    else if (!strcmp(argv[i], "--tmpdir")) tmp = argv[i + 1];
    else {
      fprintf(stderr, "usage: bench_readers [--minutes M] [--out FILE] [--tmpdir DIR]\n");
      return 2;
    }
  }
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  char nwb[1024], bin[1024], device[256];
  snprintf(nwb, sizeof(nwb), "%s/bench_readers_%d.nwb", tmp, (int)getpid());
  snprintf(bin, sizeof(bin), "%s/bench_readers_%d.bin", tmp, (int)getpid());
  int64_t seconds = (int64_t)(minutes * 60.0 + 0.5);
  ss_bench_doc doc;
  ss_bench_device_string(NULL, device, sizeof(device));
  ss_status st = ss_bench_doc_init(&ctx, &doc, "readers", device);
  double t0 = ss_now(), f_nwb = 0, f_bin = 0;
  if (st == SS_OK) st = make_files(&ctx, nwb, bin, seconds);
  if (st == SS_OK)
    printf("wrote %lld s of %d channels as NWB and binary in %.1f s\n", (long long)seconds, CHANNELS, ss_now() - t0);
  ss_source_spec s_nwb = {.path = nwb}, s_bin = {.path = bin, .n_channels = CHANNELS, .rate_hz = RATE};
  if (st == SS_OK) st = measure(&ctx, &doc, "nwb", &s_nwb, (double)seconds, &f_nwb);
  if (st == SS_OK) st = measure(&ctx, &doc, "binary", &s_bin, (double)seconds, &f_bin);
  remove(nwb);
  remove(bin);
  if (st == SS_OK) {
    ss_bench_summary_number(&doc, "nwb_realtime_factor", f_nwb);
    ss_bench_summary_number(&doc, "binary_realtime_factor", f_bin);
    ss_bench_summary_number(&doc, "peak_rss_mib", vm_hwm_kib() / 1024.0);
    ss_bench_summary_number(&doc, "peak_rss_growth_mib", (vm_hwm_kib() - rss_start_kib) / 1024.0);
    st = ss_bench_doc_write(&ctx, &doc, out);
    if (st == SS_OK) printf("wrote %s\n", out);
  } else {
    ss_bench_doc_free(&doc);
  }
  if (st != SS_OK) fprintf(stderr, "bench_readers: %s\n", ss_error_message(&ctx));
  return st == SS_OK ? 0 : 1;
}
