/* cmd_probe.c — `spikestream probe FILE`: load, validate and describe a probe; optionally write it
 * as probeinterface JSON. */
#include <stdio.h>
#include <stdlib.h>

#include "params/params.h"
#include "params/probe.h"
#include "cli/cli.h"

static const char usage[] =
    "usage: spikestream probe FILE [--radius UM] [--channels N] [--write-probeinterface OUT.json] [options]\n\n"
    "Load a probe (probeinterface JSON, simple JSON or .prb), validate it and print each contact with\n"
    "its position, shank and neighbours. Unwired contacts (device channel -1) are listed with\n"
    "channel -1 and take no part in the graph or the channel count.\n\n"
    "  --radius UM     adjacency radius when the file has no adjacency list (default: the\n"
    "                  parameter probe.adjacency_radius_um)\n"
    "  --channels N    also check the probe against a recording of N channels\n"
    "  --write-probeinterface OUT.json\n"
    "                  write the probe as a probeinterface file (every key its reader "
    "needs)\n\noptions:\n" SS_CLI_COMMON_HELP;

typedef struct {
  double radius;
  int n_channels;
  const char *write_path;
} probe_args;

static int on_option(int opt, const char *arg, void *user) {
  probe_args *a = user;
  char *end = NULL;
  if (opt == 'r') {
    a->radius = strtod(arg, &end);
    if (*end || !(a->radius > 0))
      return ss_cli_usage_error("probe", "--radius: expected a number > 0, got \"%s\"", arg);
  } else if (opt == 'w') {
    a->write_path = arg;
  } else {
    return ss_cli_int("probe", "channels", arg, 1, 1000000, &a->n_channels);
  }
  return 0;
}

static void print_probe(const ss_probe *probe) {
  int wired = ss_probe_n_wired(probe);
  printf("probe %s: %d contacts", probe->name, probe->n);
  if (wired != probe->n) printf(" (%d wired, %d unwired)", wired, probe->n - wired);
  printf("\n%7s %7s %9s %9s %5s %9s  neighbours (channels)\n", "contact", "channel", "x_um", "y_um", "shank",
         "connected");
  for (int i = 0; i < probe->n; i++) {
    printf("%7d %7d %9.2f %9.2f %5d %9s ", i, probe->channel[i], probe->x[i], probe->y[i], probe->shank[i],
           probe->connected[i] ? "yes" : "no");
    for (int k = probe->adj_start[i]; k < probe->adj_start[i + 1]; k++) printf(" %d", probe->channel[probe->adj[k]]);
    printf("\n");
  }
}

int ss_cmd_probe(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"radius", required_argument, NULL, 'r'},
                                       {"channels", required_argument, NULL, 'n'},
                                       {"write-probeinterface", required_argument, NULL, 'w'},
                                       {0, 0, 0, 0}};
  ss_params p;
  ss_params_defaults(&p);
  probe_args a = {p.probe.adjacency_radius_um, 0, NULL};
  int first, code = ss_cli_parse(argc, argv, "probe", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc - 1) return ss_cli_usage_error("probe", "expected one probe file");

  ss_probe probe;
  ss_status st = ss_probe_load_file(ctx, argv[first], a.radius, &probe);
  if (st == SS_OK && a.n_channels > 0) st = ss_probe_check_recording(ctx, &probe, a.n_channels);
  if (st == SS_OK && a.write_path) st = ss_probe_write_probeinterface(ctx, &probe, a.write_path);
  if (st != SS_OK) {
    ss_probe_free(&probe);
    return ss_cli_finish("probe", ctx, st);
  }
  print_probe(&probe);
  ss_probe_free(&probe);
  return 0;
}
