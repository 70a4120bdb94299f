/* cli_util.c — option groups and small helpers shared by several commands: the source options,
 * number and device parsing with usage messages. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

int ss_cli_number(const char *cmd, const char *opt, const char *arg, double min, double *out) {
  char *end = NULL;
  *out = strtod(arg, &end);
  if (!*arg || *end || !isfinite(*out) || !(*out >= min))
    return ss_cli_usage_error(cmd, "--%s: expected a number >= %g, got \"%s\"", opt, min, arg);
  return 0;
}

int ss_cli_integer(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max, int64_t *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(arg, &end, 10);
  if (*arg && !*end && !errno && v >= min && v <= max) {
    *out = (int64_t)v;
    return 0;
  }
  if (max == INT64_MAX)
    return ss_cli_usage_error(cmd, "--%s: expected an integer >= %" PRId64 ", got \"%s\"", opt, min, arg);
  return ss_cli_usage_error(cmd, "--%s: expected an integer in [%" PRId64 ", %" PRId64 "], got \"%s\"", opt, min, max,
                            arg);
}

int ss_cli_int(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max, int *out) {
  int64_t v = 0;
  int code = ss_cli_integer(cmd, opt, arg, min, max < INT_MAX ? max : INT_MAX, &v);
  if (code == 0) *out = (int)v;
  return code;
}

int ss_cli_threads(const char *cmd, const char *arg, int *out) {
  return ss_cli_int(cmd, "threads", arg, 1, SS_CLI_MAX_THREADS, out);
}

int ss_cli_device(const char *cmd, const char *arg, ss_ctx *ctx, ss_device_kind *out) {
  return ss_device_kind_parse(ctx, arg, out) == SS_OK ? 0 : ss_cli_finish(cmd, ctx, SS_ERR_USAGE);
}

/* Parse an enum-like source option value through its parser, reporting as a usage error. */
static int parsed(const char *cmd, ss_ctx *ctx, ss_status st) {
  return st == SS_OK ? 0 : ss_cli_usage_error(cmd, "--%s", ss_error_message(ctx));
}

int ss_cli_source_option(const char *cmd, int opt, const char *arg, ss_source_spec *s, ss_ctx *ctx) {
  int64_t n = 0;
  int code = 0;
  switch (opt) {
    case SS_CLI_OPT_SERIES: s->series = arg; return 0;
    case SS_CLI_OPT_DATASET: s->dataset = arg; return 0;
    case SS_CLI_OPT_RATE: return ss_cli_number(cmd, "rate", arg, 1e-9, &s->rate_hz);
    case SS_CLI_OPT_UV_PER_STEP: return ss_cli_number(cmd, "uv-per-step", arg, 1e-12, &s->uv_per_step);
    case SS_CLI_OPT_CHANNELS:
      code = ss_cli_integer(cmd, "channels", arg, 1, 1000000, &n);
      s->n_channels = (int)n;
      return code;
    case SS_CLI_OPT_OFFSET:
      code = ss_cli_integer(cmd, "offset", arg, 0, (int64_t)1 << 60, &n);
      s->byte_offset = (int64_t)n;
      return code;
    case SS_CLI_OPT_LAYOUT: return parsed(cmd, ctx, ss_source_layout_parse(ctx, arg, &s->layout));
    case SS_CLI_OPT_FORMAT: return parsed(cmd, ctx, ss_source_format_parse(ctx, arg, &s->format));
    default: return -1;
  }
}
