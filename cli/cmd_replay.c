/* cmd_replay.c — `spikestream replay FILE --to URI`: stream a recording's raw int16 rows over a link
 * (io/link.h) in blocks, paced in real time (or faster) against an absolute schedule, and record when
 * each block was sent (the send log) so that live mode's latency can be measured end to end. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/atomic_file.h"
#include "io/link.h"
#include "io/source.h"
#include "cli/cli.h"
#include "core/log.h"

#define REPLAY_DEFAULT_CONNECT_TIMEOUT_S 10.0
#define REPLAY_MAX_BLOCK_MS 60000.0 /* a block longer than a minute is not a live stream */
#define REPLAY_CHUNK_S 0.25         /* source read size: bounded memory, reads overlap sending */
#define REPLAY_EXIT_DISCONNECTED 3  /* the receiver went away: a runtime failure, not bad input */
#define MS_PER_S 1000.0

static const char usage[] =
    "usage: spikestream replay FILE --to URI [--speed X] [--block-ms B] [--start S] [--duration S]\n"
    "                          [--send-log FILE] [--connect-timeout S] [--raw] [--token-file PATH]\n"
    "                          [source options]\n\n"
    "Stream a recording's int16 samples, channel-interleaved little-endian rows after a 32-byte header\n"
    "(channels, rate, dtype; docs/live.md), to a link in\n"
    "blocks of round(B·rate/1000) rows, paced against an absolute schedule (no drift): the block that\n"
    "starts k samples into the replay is sent at t0 + k/(rate·X). Prints one summary line (blocks, rows,\n"
    "seconds, achieved speed, worst lateness of a send vs its schedule). docs/live.md has the details.\n\n"
    "  --to URI             stdout, -, a file path, tcp://host:port, tcp-listen://host:port,\n"
    "                       unix:///path or unix-listen:///path\n"
    "  --speed X            multiple of real time (default 1; 0 = as fast as possible)\n"
    "  --block-ms B         milliseconds per block (default 1)\n"
    "  --start S            first second to send (default 0)\n"
    "  --duration S         seconds to send (default: to the end)\n"
    "  --send-log FILE      binary send log: per block {int64 first_sample, int64 n_rows, double t_send}\n"
    "  --connect-timeout S  how long to wait for the receiver (default 10; 0 = no limit)\n"
    "  --raw                no header: the samples from the first byte\n"
    "  --token-file PATH    shared token (16..1024 bytes, white space trimmed; the file must not be\n"
    "                       accessible to others): sent after connecting, required from the client\n"
    "                       of a listener; needed to listen on a non-loopback address\n" SS_CLI_SOURCE_HELP
    "\noptions:\n" SS_CLI_COMMON_HELP
    "\nexit codes: 0 sent, 1 bad input, 2 usage, 3 the receiver disconnected before the end\n";

enum {
  OPT_TO = 0x3001,
  OPT_SPEED,
  OPT_BLOCK_MS,
  OPT_START,
  OPT_DURATION,
  OPT_SEND_LOG,
  OPT_CONNECT_TIMEOUT,
  OPT_RAW,
  OPT_TOKEN_FILE
};

typedef struct {
  ss_source_spec spec;
  const char *to, *send_log;
  double speed, block_ms, start_s, duration_s, connect_timeout_s;
  int raw;
  const char *token_file;
  char token[SS_LINK_TOKEN_MAX];
  size_t token_len;
  ss_ctx *ctx;
} replay_args;

/* What to send: recording samples [start, end) in blocks of block_rows. */
typedef struct {
  int64_t start, end, block_rows, n_blocks;
  int n_channels;
  double rate_hz;
} replay_plan;

/* One send-log record (written little-endian). */
typedef struct {
  int64_t first_sample, n_rows;
  double t_send;
} send_record;

typedef struct {
  int64_t blocks, rows, last_first; /* last_first: first sample of the last block sent */
  double seconds, max_late_s;
  int disconnected; /* the link refused a write: the receiver is gone */
} replay_stats;

static int positive_number(const char *opt, const char *arg, double max, double *out) {
  char *end = NULL;
  *out = strtod(arg, &end);
  if (!*arg || *end || !(*out > 0) || !(*out <= max) || !isfinite(*out))
    return isfinite(max)
               ? ss_cli_usage_error("replay", "--%s: expected a number > 0 and <= %g, got \"%s\"", opt, max, arg)
               : ss_cli_usage_error("replay", "--%s: expected a finite number > 0, got \"%s\"", opt, arg);
  return 0;
}

static int on_option(int opt, const char *arg, void *user) {
  replay_args *a = user;
  int code = 0;
  switch (opt) {
    case OPT_TO: a->to = arg; break;
    case OPT_SEND_LOG: a->send_log = arg; break;
    case OPT_RAW: a->raw = 1; break;
    case OPT_TOKEN_FILE: a->token_file = arg; break;
    case OPT_SPEED: code = ss_cli_number("replay", "speed", arg, 0, &a->speed); break;
    case OPT_BLOCK_MS: code = positive_number("block-ms", arg, REPLAY_MAX_BLOCK_MS, &a->block_ms); break;
    case OPT_START: code = ss_cli_number("replay", "start", arg, 0, &a->start_s); break;
    case OPT_DURATION: code = positive_number("duration", arg, HUGE_VAL, &a->duration_s); break;
    case OPT_CONNECT_TIMEOUT: code = ss_cli_number("replay", "connect-timeout", arg, 0, &a->connect_timeout_s); break;
    default:
      code = ss_cli_source_option("replay", opt, arg, &a->spec, a->ctx);
      if (code < 0) code = ss_cli_usage_error("replay", "unknown option");
  }
  return code;
}

static ss_status make_plan(ss_ctx *ctx, const replay_args *a, const ss_source_info *info, replay_plan *p) {
  p->rate_hz = info->rate_hz;
  p->n_channels = info->n_channels;
  p->block_rows = (int64_t)llround(a->block_ms * info->rate_hz / MS_PER_S);
  if (p->block_rows < 1)
    return ss_fail(ctx, SS_ERR_USAGE, "--block-ms %g: less than one sample at %g Hz", a->block_ms, info->rate_hz);
  p->start = (int64_t)llround(a->start_s * info->rate_hz);
  if (p->start >= info->n_samples)
    return ss_fail(ctx, SS_ERR_USAGE, "--start %g: past the end of %s (%.3f s)", a->start_s, info->path,
                   info->duration_s);
  p->end = info->n_samples;
  if (a->duration_s > 0 && a->duration_s * info->rate_hz < (double)(p->end - p->start))
    p->end = p->start + (int64_t)llround(a->duration_s * info->rate_hz);
  if (p->end <= p->start)
    return ss_fail(ctx, SS_ERR_USAGE, "--duration %g: less than one sample at %g Hz", a->duration_s, info->rate_hz);
  p->n_blocks = (p->end - p->start + p->block_rows - 1) / p->block_rows;
  return SS_OK;
}

/* Sequential reader of rows [from, from + n) across the source's chunks (a block may span two). */
typedef struct {
  ss_source *src;
  int64_t chunk_len;
  int n_channels;
  ss_chunk cur;
  int have;
} row_reader;

static ss_status read_rows(ss_ctx *ctx, row_reader *rr, int64_t from, int64_t n, int16_t *dst) {
  const int C = rr->n_channels;
  while (n > 0) {
    int64_t ci = from / rr->chunk_len;
    if (!rr->have || rr->cur.index != ci) {
      SS_TRY(ss_source_chunk(ctx, rr->src, ci, &rr->cur));
      rr->have = 1;
    }
    int64_t off = from - rr->cur.start, take = rr->cur.n - off < n ? rr->cur.n - off : n;
    memcpy(dst, rr->cur.data + (size_t)off * C, (size_t)(take * C) * sizeof(int16_t));
    dst += take * C;
    from += take;
    n -= take;
  }
  return SS_OK;
}

/* The wire is little-endian. */
static void to_little_endian(int16_t *v, size_t n) {
  const uint16_t probe = 1;
  if (*(const unsigned char *)&probe == 1) return;
  for (size_t i = 0; i < n; i++) v[i] = (int16_t)(uint16_t)(((uint16_t)v[i] >> 8) | ((uint16_t)v[i] << 8));
}

/* Sleep until `due` (ss_now() seconds) on the absolute monotonic clock, so errors never accumulate. */
static void wait_until(double due) {
  struct timespec ts;
  ts.tv_sec = (time_t)floor(due);
  ts.tv_nsec = (long)((due - floor(due)) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static ss_status send_blocks(ss_ctx *ctx, const replay_args *a, const replay_plan *p, row_reader *rr, ss_link *link,
                             int16_t *buf, send_record *log, replay_stats *s) {
  double t0 = 0;
  for (int64_t b = 0; b < p->n_blocks; b++) {
    int64_t first = p->start + b * p->block_rows;
    int64_t n = p->end - first < p->block_rows ? p->end - first : p->block_rows;
    SS_TRY(read_rows(ctx, rr, first, n, buf));
    to_little_endian(buf, (size_t)(n * p->n_channels));
    if (b == 0) t0 = ss_now(); /* the schedule starts once the first block is in hand */
    double due = a->speed > 0 ? t0 + (double)(first - p->start) / (p->rate_hz * a->speed) : t0;
    if (a->speed > 0) wait_until(due);
    ss_status st = ss_link_write(ctx, link, buf, (size_t)(n * p->n_channels) * sizeof(int16_t));
    double t_send = ss_now();
    if (st != SS_OK) {
      s->disconnected = 1;
      return st;
    }
    log[b] = (send_record){first, n, t_send};
    s->blocks++;
    s->rows += n;
    s->last_first = first;
    s->seconds = t_send - t0;
    if (a->speed > 0 && t_send - due > s->max_late_s) s->max_late_s = t_send - due;
  }
  return SS_OK;
}

static void put_le64(unsigned char *dst, uint64_t v) {
  for (int i = 0; i < 8; i++) dst[i] = (unsigned char)(v >> (8 * i));
}

static ss_status write_send_log(ss_ctx *ctx, const char *path, const send_record *log, int64_t n) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  for (int64_t i = 0; i < n; i++) {
    unsigned char rec[24];
    uint64_t t_bits;
    memcpy(&t_bits, &log[i].t_send, sizeof(t_bits));
    put_le64(rec, (uint64_t)log[i].first_sample);
    put_le64(rec + 8, (uint64_t)log[i].n_rows);
    put_le64(rec + 16, t_bits);
    if (fwrite(rec, sizeof(rec), 1, af.f) != 1) {
      ss_atomic_abort(&af);
      return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
  }
  return ss_atomic_commit(ctx, &af);
}

static void print_summary(const replay_args *a, const replay_plan *p, const replay_stats *s) {
  double sent_s = (double)s->rows / p->rate_hz;
  /* achieved speed: how far the schedule advanced (block 0 to the last block) per second of wall time */
  double span_s = (double)(s->last_first - p->start) / p->rate_hz;
  /* The summary must not mix with the samples when they go to stdout. */
  FILE *f = strcmp(a->to, "-") == 0 || strcmp(a->to, "stdout") == 0 ? stderr : stdout;
  fprintf(f,
          "replay: %lld blocks, %lld rows (%.3f s of %d channels at %g Hz) in %.3f s: speed %.2fx, "
          "max lateness %.3f ms -> %s\n",
          (long long)s->blocks, (long long)s->rows, sent_s, p->n_channels, p->rate_hz, s->seconds,
          s->seconds > 0 ? span_s / s->seconds : 0.0, s->max_late_s * MS_PER_S, a->to);
  fflush(f);
}

/* Open the link, send, write the log (also after a disconnect: what was sent was sent). */
static ss_status stream(ss_ctx *ctx, const replay_args *a, const replay_plan *p, ss_source *src, replay_stats *s) {
  int64_t chunk_len = (int64_t)ceil(REPLAY_CHUNK_S * p->rate_hz);
  if (chunk_len < p->block_rows) chunk_len = p->block_rows;
  SS_TRY(ss_source_configure(ctx, src, chunk_len, 0, 0));
  row_reader rr = {src, chunk_len, p->n_channels, {0}, 0};
  int16_t *buf = NULL;
  send_record *log = NULL;
  SS_TRY(SS_ALLOC(ctx, buf, (size_t)(p->block_rows * p->n_channels), "replay block"));
  ss_status st = SS_CALLOC(ctx, log, (size_t)p->n_blocks, "send log");
  ss_link *link = NULL;
  ss_link_opts lo = {.timeout_s = a->connect_timeout_s,
                     .token = a->token_file ? a->token : NULL,
                     .token_len = a->token_len};
  if (st == SS_OK) st = ss_link_open_with(ctx, a->to, SS_LINK_WRITE, &lo, &link);
  ss_stream_header header = {p->n_channels, p->rate_hz};
  if (st == SS_OK && !a->raw && (st = ss_stream_header_write(ctx, link, &header)) != SS_OK) s->disconnected = 1;
  if (st != SS_OK) ss_link_close(link);
  if (st == SS_OK) {
    ss_log_info(ctx, "replay: %s -> %s: %lld rows of %d channels at %g Hz, %lld blocks of %lld rows, speed %g",
                a->spec.path, a->to, (long long)(p->end - p->start), p->n_channels, p->rate_hz, (long long)p->n_blocks,
                (long long)p->block_rows, a->speed);
    st = send_blocks(ctx, a, p, &rr, link, buf, log, s);
    ss_link_close(link);
    if (a->send_log && (st == SS_OK || s->disconnected)) {
      ss_ctx log_ctx = *ctx; /* keep the disconnect message if the log also fails */
      ss_status lst = write_send_log(&log_ctx, a->send_log, log, s->blocks);
      if (st == SS_OK && lst != SS_OK) *ctx = log_ctx;
      if (st == SS_OK) st = lst;
    }
  }
  free(buf);
  free(log);
  return st;
}

static int run(ss_ctx *ctx, replay_args *a) {
  ss_status st = SS_OK;
  if (a->token_file) st = ss_link_token_load(ctx, a->token_file, a->token, sizeof(a->token), &a->token_len);
  /* a listener reachable from other machines without a token is refused before anything is read */
  if (st == SS_OK) st = ss_link_check(ctx, a->to, SS_LINK_WRITE, a->token_file != NULL);
  if (st != SS_OK) return ss_cli_finish("replay", ctx, st);
  ss_source *src = NULL;
  st = ss_source_open(ctx, &a->spec, &src);
  if (st != SS_OK) return ss_cli_finish("replay", ctx, st);
  replay_plan plan;
  replay_stats stats = {0};
  st = make_plan(ctx, a, ss_source_get_info(src), &plan);
  if (st == SS_OK) st = stream(ctx, a, &plan, src, &stats);
  ss_source_close(src);
  if (st == SS_OK || stats.disconnected) print_summary(a, &plan, &stats);
  int code = ss_cli_finish("replay", ctx, st);
  return stats.disconnected ? REPLAY_EXIT_DISCONNECTED : code;
}

int ss_cmd_replay(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"to", required_argument, NULL, OPT_TO},
                                       {"speed", required_argument, NULL, OPT_SPEED},
                                       {"block-ms", required_argument, NULL, OPT_BLOCK_MS},
                                       {"start", required_argument, NULL, OPT_START},
                                       {"duration", required_argument, NULL, OPT_DURATION},
                                       {"send-log", required_argument, NULL, OPT_SEND_LOG},
                                       {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
                                       {"raw", no_argument, NULL, OPT_RAW},
                                       {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
                                       SS_CLI_SOURCE_LONGOPTS,
                                       {0, 0, 0, 0}};
  replay_args a;
  memset(&a, 0, sizeof(a));
  a.ctx = ctx;
  a.speed = 1;
  a.block_ms = 1;
  a.connect_timeout_s = REPLAY_DEFAULT_CONNECT_TIMEOUT_S;
  int first, code = ss_cli_parse(argc, argv, "replay", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc - 1) return ss_cli_usage_error("replay", "expected one input recording");
  if (!a.to) return ss_cli_usage_error("replay", "--to URI is required");
  a.spec.path = argv[first];
  return run(ctx, &a);
}
