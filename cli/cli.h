/* cli.h — the command table and helpers shared by the `spikestream <command>` implementations.
 *
 * Each command lives in cli/cmd_<name>.c as `int ss_cmd_<name>(int argc, char **argv, ss_ctx *ctx)`
 * returning the process exit code (0 ok, 1 bad input, 2 usage, 3 runtime). */
#ifndef SS_CLI_H
#define SS_CLI_H

#include <getopt.h>

#include "core/backend.h"
#include "core/status.h"
#include "io/source.h"

typedef struct {
  const char *name;
  const char *summary;
  int (*run)(int argc, char **argv, ss_ctx *ctx);
} ss_command;

int ss_cmd_info(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_params(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_probe(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_kmeans(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_inspect(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_simulate(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_compare(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_knn(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_detect(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_cluster(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_sort(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_replay(int argc, char **argv, ss_ctx *ctx);
int ss_cmd_live(int argc, char **argv, ss_ctx *ctx);

/* Options every command accepts; handle with ss_cli_common_option() in the getopt loop. The option
 * tables are laid out one option a line, by hand. */
/* clang-format off */
#define SS_CLI_COMMON_LONGOPTS                         \
  {"help", no_argument, NULL, 'h'},                    \
  {"quiet", no_argument, NULL, 'q'},                   \
  {"log-level", required_argument, NULL, 0x1001}
/* clang-format on */
#define SS_CLI_COMMON_SHORTOPTS "hq"
#define SS_CLI_COMMON_HELP \
  "  -h, --help             this help\n" \
  "  -q, --quiet            no progress and no informational lines\n" \
  "      --log-level L      error|warn|info|debug (default info)\n"

/* Returns 1 when `opt` was a common option and was handled; sets *exit_code to a code >= 0 when
 * the command must stop now (help printed: 0, bad value: 2). */
int ss_cli_common_option(int opt, const char *usage, ss_ctx *ctx, int *exit_code);

/* Called for each command-specific option: return 0 to go on, or an exit code (2 for a bad value,
 * via ss_cli_usage_error) to stop. */
typedef int (*ss_cli_option_fn)(int opt, const char *arg, void *user);

/* Parse argv: the common options are handled here, `opts` (terminated by a zero row; may be NULL)
 * go to fn; an option whose `val` is a letter or digit also has that short form (-o FILE). Returns -1 when the command should go on, with positional arguments at
 * argv[*first_arg .. argc), or the exit code to return (help: 0, usage error: 2). */
int ss_cli_parse(int argc, char **argv, const char *cmd, const struct option *opts, const char *usage, ss_ctx *ctx,
                 ss_cli_option_fn fn, void *user, int *first_arg);

/* --- shared option groups and helpers (cli/cli_util.c) ---------------------------------------- */

/* Options that describe how to open a recording (io/source.h), shared by every command that reads
 * one. Their values lie outside the letters, so they have no short forms. */
enum {
  SS_CLI_OPT_SERIES = 0x2001,
  SS_CLI_OPT_DATASET,
  SS_CLI_OPT_RATE,
  SS_CLI_OPT_LAYOUT,
  SS_CLI_OPT_CHANNELS,
  SS_CLI_OPT_OFFSET,
  SS_CLI_OPT_UV_PER_STEP,
  SS_CLI_OPT_FORMAT
};
/* clang-format off */
#define SS_CLI_SOURCE_LONGOPTS                                       \
  {"series", required_argument, NULL, SS_CLI_OPT_SERIES},            \
  {"dataset", required_argument, NULL, SS_CLI_OPT_DATASET},          \
  {"rate", required_argument, NULL, SS_CLI_OPT_RATE},                \
  {"layout", required_argument, NULL, SS_CLI_OPT_LAYOUT},            \
  {"channels", required_argument, NULL, SS_CLI_OPT_CHANNELS},        \
  {"offset", required_argument, NULL, SS_CLI_OPT_OFFSET},            \
  {"uv-per-step", required_argument, NULL, SS_CLI_OPT_UV_PER_STEP},  \
  {"format", required_argument, NULL, SS_CLI_OPT_FORMAT}
/* clang-format on */
#define SS_CLI_SOURCE_HELP \
  "source options:\n" \
  "  --series NAME     NWB: the ElectricalSeries under /acquisition (needed when there are several);\n" \
  "                    Kwik: the recording (default: 0); Open Ephys: the continuous stream\n" \
  "  --dataset PATH    plain HDF5: the dataset holding the samples\n" \
  "  --rate HZ         sampling rate (plain HDF5 and binary; Kwik files without sample_rate)\n" \
  "  --layout L        plain HDF5: time-major (default) or channel-major\n" \
  "  --channels N      flat binary: channels per frame\n" \
  "  --offset BYTES    flat binary: header bytes to skip (default 0)\n" \
  "  --uv-per-step X   microvolts per step for formats without a scale\n" \
  "  --format F        auto (default), nwb, kwik, hdf5, binary, spikeglx, openephys or intan\n" \
  "                    (SpikeGLX .bin/.meta, Open Ephys folders and Intan .rhd/.rhs give their own\n" \
  "                    rate, channels and scale; options a format does not read are refused)\n"

/* Handle one source option into *spec: returns -1 when `opt` is not a source option, else 0 or an
 * exit code (2) after printing the problem. */
int ss_cli_source_option(const char *cmd, int opt, const char *arg, ss_source_spec *spec, ss_ctx *ctx);

/* Parse a number >= min / an integer in [min, max] (max INT64_MAX: no upper bound) given to --opt
 * (named without its dashes); 0, or exit code 2 after printing the problem. */
int ss_cli_number(const char *cmd, const char *opt, const char *arg, double min, double *out);
int ss_cli_integer(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max, int64_t *out);
/* The same into an int, with max clamped to INT_MAX. */
int ss_cli_int(const char *cmd, const char *opt, const char *arg, int64_t min, int64_t max, int *out);

/* --threads N takes 1..SS_CLI_MAX_THREADS: OpenMP starts that many threads per region, each with its
 * own stack, so an unbounded count exhausts memory or libgomp's own stack. 0 is refused: leaving
 * the option out already means all the CPU's threads. */
#define SS_CLI_MAX_THREADS 1024
/* Parse --threads into *out: 0, or exit code 2 after printing one line. */
int ss_cli_threads(const char *cmd, const char *arg, int *out);
/* Parse --device (auto|cpu|cuda) into *out: 0, or exit code 2 after printing one line. */
int ss_cli_device(const char *cmd, const char *arg, ss_ctx *ctx, ss_device_kind *out);

/* Print a usage problem ("spikestream CMD: ..." plus a hint) and return 2. */
int ss_cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Print the context's message lines for a failed status and return its exit code (0 for SS_OK). */
int ss_cli_finish(const char *cmd, ss_ctx *ctx, ss_status st);

/* Test hooks read from the environment (docs/formats.md, tests/README.md): the output-set step at
 * which to SIGKILL this process (SPIKESTREAM_TEST_KILL_AT; 0 when unset). */
int ss_cli_test_kill_at(void);

#endif
