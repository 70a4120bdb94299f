/* cmd_params.c — `spikestream params`: print defaults, check a file, or print the reference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "src/cli/cli.h"

static const char usage[] =
    "usage: spikestream params (--defaults | --check FILE | --doc) [options]\n\n"
    "  --defaults      print the complete default parameter file (JSON)\n"
    "  --check FILE    validate FILE: every unknown key, wrong type and out-of-range value is\n"
    "                  reported on its own line with its JSON path; exit 0 when valid, 1 otherwise\n"
    "  --doc           print the parameter reference (Markdown)\n\noptions:\n" SS_CLI_COMMON_HELP;

int ss_cmd_params(int argc, char **argv, ss_ctx *ctx) {
  static const struct option longopts[] = {SS_CLI_COMMON_LONGOPTS,
                                           {"defaults", no_argument, NULL, 'd'},
                                           {"check", required_argument, NULL, 'c'},
                                           {"doc", no_argument, NULL, 'm'},
                                           {0, 0, 0, 0}};
  int opt, code, mode = 0;
  const char *file = NULL;
  while ((opt = getopt_long(argc, argv, SS_CLI_COMMON_SHORTOPTS, longopts, NULL)) != -1) {
    if (ss_cli_common_option(opt, usage, ctx, &code)) {
      if (code >= 0) return code;
      continue;
    }
    if (opt != 'd' && opt != 'c' && opt != 'm') return ss_cli_usage_error("params", "unknown option");
    if (mode) return ss_cli_usage_error("params", "give one of --defaults, --check, --doc");
    mode = opt;
    if (opt == 'c') file = optarg;
  }
  if (optind < argc) return ss_cli_usage_error("params", "unexpected argument \"%s\"", argv[optind]);
  if (!mode) return ss_cli_usage_error("params", "give one of --defaults, --check, --doc");

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
