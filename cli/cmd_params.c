/* cmd_params.c — `spikestream params`: print defaults, check a file, or print the reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "cli/cli.h"

static const char usage[] =
    "usage: spikestream params (--defaults | --check FILE | --doc) [options]\n\n"
    "  --defaults      print the complete default parameter file (JSON)\n"
    "  --check FILE    validate FILE: every unknown key, wrong type and out-of-range value is\n"
    "                  reported on its own line with its JSON path; exit 0 when valid, 1 otherwise\n"
    "  --doc           print the parameter reference (Markdown)\n\noptions:\n" SS_CLI_COMMON_HELP;

typedef struct {
  int mode;
  const char *file;
} params_args;

static int on_option(int opt, const char *arg, void *user) {
  params_args *a = user;
  if (a->mode) return ss_cli_usage_error("params", "give one of --defaults, --check, --doc");
  a->mode = opt;
  if (opt == 'c') a->file = arg;
  return 0;
}

int ss_cmd_params(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"defaults", no_argument, NULL, 'd'},
                                       {"check", required_argument, NULL, 'c'},
                                       {"doc", no_argument, NULL, 'm'},
                                       {0, 0, 0, 0}};
  params_args a = {0, NULL};
  int first, code = ss_cli_parse(argc, argv, "params", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first < argc) return ss_cli_usage_error("params", "unexpected argument \"%s\"", argv[first]);
  if (!a.mode) return ss_cli_usage_error("params", "give one of --defaults, --check, --doc");
  int mode = a.mode;
  const char *file = a.file;

  ss_params p;
  ss_params_defaults(&p);
  if (mode == 'c') {
    ss_status st = ss_params_load_file(ctx, file, &p);
    if (st != SS_OK) return ss_cli_finish("params", ctx, st);
    printf("%s: valid\n", file);
    return 0;
  }
  char *text = mode == 'd' ? ss_params_to_json(&p) : ss_params_doc_markdown();
  if (!text) return ss_cli_finish("params", ctx, ss_fail(ctx, SS_ERR_NOMEM, "out of memory"));
  puts(text);
  free(text);
  return 0;
}
