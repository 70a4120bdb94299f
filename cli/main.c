/* main.c — `spikestream <command> [options]`: the command table and dispatch. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "cli/cli.h"
#include "core/log.h"
#include "io/h5_util.h"

static const ss_command commands[] = {
    {"info", "version, build options, backends and GPUs", ss_cmd_info},
    {"params", "print the default parameters, check a parameter file, or document them", ss_cmd_params},
    {"probe", "load a probe file, validate it and show its adjacency", ss_cmd_probe},
    {"kmeans", "k-means clustering of a feature matrix or of image patches", ss_cmd_kmeans},
    {"inspect", "describe a recording: format, rate, channels, duration, scale", ss_cmd_inspect},
    {"simulate", "write a simulated recording with ground truth (NWB or binary)", ss_cmd_simulate},
    {"compare", "score a sorting against ground truth (SpikeInterface conventions)", ss_cmd_compare},
    {"knn", "classify points by k nearest neighbours (CSV, HDF5, .npy), CPU or GPU", ss_cmd_knn},
    {"detect", "front end alone: filter, detect, align, PCA features and masks", ss_cmd_detect},
    {"cluster", "masked EM on KlustaKwik .fet/.fmask files (a drop-in for KlustaKwik)", ss_cmd_cluster},
    {"sort", "sort a recording end to end: front end, masked EM, merge, results + phy + model", ss_cmd_sort},
    {"replay", "stream a recording over a link (TCP, UNIX socket, pipe) in real time, for live mode", ss_cmd_replay},
    {"live", "label spikes as they arrive on a stream, with the causal twin of a sorted model", ss_cmd_live},
};
#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *f) {
  fprintf(f, "usage: spikestream <command> [options]\n\nGPU-accelerated multichannel spike sorting.\n\ncommands:\n");
  for (size_t i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(f, "\n`spikestream <command> --help` describes each command.\n"
             "exit codes: 0 ok, 1 bad input, 2 usage, 3 runtime (device, memory)\n");
}

int ss_cli_common_option(int opt, const char *usage_text, ss_ctx *ctx, int *exit_code) {
  *exit_code = -1;
  switch (opt) {
    case 'h':
      fputs(usage_text, stdout);
      *exit_code = 0;
      return 1;
    case 'q': ctx->quiet = 1; return 1;
    case 0x1001: {
      ss_log_level lv;
      if (ss_log_level_parse(ctx, optarg, &lv) != SS_OK) {
        fprintf(stderr, "spikestream: %s\n", ss_error_message(ctx));
        *exit_code = 2;
      } else {
        ctx->log_level = lv;
      }
      return 1;
    }
    default: return 0;
  }
}

#define SS_CLI_MAX_OPTIONS 64

int ss_cli_parse(int argc, char **argv, const char *cmd, const struct option *opts, const char *usage_text, ss_ctx *ctx,
                 ss_cli_option_fn fn, void *user, int *first_arg) {
  static const struct option common[] = {SS_CLI_COMMON_LONGOPTS};
  struct option all[SS_CLI_MAX_OPTIONS + 4];
  size_t n = 0;
  for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++) all[n++] = common[i];
  for (size_t i = 0; opts && opts[i].name && n < SS_CLI_MAX_OPTIONS; i++) all[n++] = opts[i];
  memset(&all[n], 0, sizeof(all[n]));
  /* A command option whose value is a letter also answers to that letter (-o FILE). */
  char shortopts[3 * SS_CLI_MAX_OPTIONS + 8] = SS_CLI_COMMON_SHORTOPTS;
  size_t len = strlen(shortopts);
  for (size_t i = 0; opts && opts[i].name && i < SS_CLI_MAX_OPTIONS; i++) {
    if (opts[i].flag || opts[i].val > 127 || !isalnum(opts[i].val)) continue;
    shortopts[len++] = (char)opts[i].val;
    if (opts[i].has_arg == required_argument) shortopts[len++] = ':';
  }
  shortopts[len] = '\0';
  optind = 1;
  int opt, code;
  while ((opt = getopt_long(argc, argv, shortopts, all, NULL)) != -1) {
    if (ss_cli_common_option(opt, usage_text, ctx, &code)) {
      if (code >= 0) return code;
      continue;
    }
    if (opt == '?' || opt == ':' || !fn) return ss_cli_usage_error(cmd, "bad option \"%s\"", argv[optind - 1]);
    if ((code = fn(opt, optarg, user)) != 0) return code;
  }
  *first_arg = optind;
  return -1;
}

int ss_cli_usage_error(const char *cmd, const char *fmt, ...) {
  fprintf(stderr, "spikestream %s: ", cmd);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\n(see `spikestream %s --help`)\n", cmd);
  return 2;
}

int ss_cli_finish(const char *cmd, ss_ctx *ctx, ss_status st) {
  if (st == SS_OK) return 0;
  const char *msg = ss_error_message(ctx);
  if (!*msg) msg = ss_strerror(st);
  /* one line per problem, each naming the command */
  const char *line = msg;
  while (*line) {
    const char *nl = strchr(line, '\n');
    int len = nl ? (int)(nl - line) : (int)strlen(line);
    fprintf(stderr, "spikestream %s: %.*s\n", cmd, len, line);
    line += len + (nl ? 1 : 0);
  }
  return ss_status_exit_code(st);
}

/* Test hooks: SPIKESTREAM_FAIL_ALLOC=N fails the Nth allocation made through the command's context
 * (ss_alloc_fault); =count counts them and prints "spikestream: allocations: N" at exit. */
int ss_cli_test_kill_at(void) {
  const char *v = getenv("SPIKESTREAM_TEST_KILL_AT");
  return v ? atoi(v) : 0;
}

int main(int argc, char **argv) {
  ss_h5_no_exit_teardown(); /* a failed HDF5 close must not turn exit 1 into a crash (io/h5_util.h) */
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("spikestream %s (%s)\n", SS_VERSION, SS_GIT_COMMIT);
    return 0;
  }
  for (size_t i = 0; i < N_COMMANDS; i++) {
    if (strcmp(argv[1], commands[i].name) == 0) {
      ss_ctx ctx;
      ss_ctx_init(&ctx);
      ss_alloc_fault fault = {0, 0};
      const char *inject = getenv("SPIKESTREAM_FAIL_ALLOC");
      if (inject) {
        fault.fail_at = strcmp(inject, "count") == 0 ? 0 : atoll(inject);
        ctx.alloc_fault = &fault;
      }
      int code = commands[i].run(argc - 1, argv + 1, &ctx);
      if (inject && fault.fail_at == 0) fprintf(stderr, "spikestream: allocations: %lld\n", fault.count);
      return code;
    }
  }
  fprintf(stderr, "spikestream: unknown command \"%s\"\n", argv[1]);
  usage(stderr);
  return 2;
}
