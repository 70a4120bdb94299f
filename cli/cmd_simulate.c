/* cmd_simulate.c — `spikestream simulate`: write a ground-truth recording (NWB or flat binary). */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "tools/simulate.h"
#include "params/params.h"
#include "params/probe.h"
#include "cli/cli.h"

#define DEFAULT_PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"

static const char usage[] =
    "usage: spikestream simulate -o FILE [options]\n\n"
    "Write a simulated recording with known spikes: units near the probe with realistic waveforms,\n"
    "Poisson firing with a refractory period, correlated coloured noise, optional drift. The same\n"
    "seed gives the same file bit for bit. NWB output holds the ground truth in its units table\n"
    "(spike_times, peak_channel, snr); binary output writes BASE.bin and the sidecar BASE.json.\n\n"
    "  -o, --output FILE      output file (NWB), or BASE / BASE.bin (binary)\n"
    "      --duration S       seconds (default 60)\n"
    "      --units N          number of units (default 20)\n"
    "      --snr X            median unit SNR (default 10; units spread over X/sqrt(10) .. X*sqrt(10))\n"
    "      --seed K           seed (default 1)\n"
    "      --probe P          probe JSON (default " DEFAULT_PROBE ")\n"
    "      --rate HZ          sampling rate (default 30000)\n"
    "      --noise-uv U       noise standard deviation in µV (default 10)\n"
    "      --drift UM_PER_S   linear drift of the units along the probe (default 0)\n"
    "      --format F         nwb (default) or binary\n\noptions:\n" SS_CLI_COMMON_HELP;

static int parse_number(const char *opt, const char *text, double *out) {
  char *end = NULL;
  *out = strtod(text, &end);
  if (!*text || *end) return ss_cli_usage_error("simulate", "%s: expected a number, got \"%s\"", opt, text);
  return -1;
}

static int parse_options(int argc, char **argv, ss_ctx *ctx, ss_sim_config *c, const char **out_path,
                         const char **probe_path, ss_sim_format *format) {
  static const struct option longopts[] = {SS_CLI_COMMON_LONGOPTS,
                                           {"output", required_argument, NULL, 'o'},
                                           {"duration", required_argument, NULL, 'd'},
                                           {"units", required_argument, NULL, 'u'},
                                           {"snr", required_argument, NULL, 's'},
                                           {"seed", required_argument, NULL, 'k'},
                                           {"probe", required_argument, NULL, 'p'},
                                           {"rate", required_argument, NULL, 'r'},
                                           {"noise-uv", required_argument, NULL, 'n'},
                                           {"drift", required_argument, NULL, 'D'},
                                           {"format", required_argument, NULL, 'f'},
                                           {0, 0, 0, 0}};
  int opt, code;
  long lv;
  char *end;
  while ((opt = getopt_long(argc, argv, SS_CLI_COMMON_SHORTOPTS "o:", longopts, NULL)) != -1) {
    if (ss_cli_common_option(opt, usage, ctx, &code)) {
      if (code >= 0) return code;
      continue;
    }
    switch (opt) {
      case 'o': *out_path = optarg; break;
      case 'p': *probe_path = optarg; break;
      case 'd':
        if ((code = parse_number("--duration", optarg, &c->duration_s)) >= 0) return code;
        break;
      case 's':
        if ((code = parse_number("--snr", optarg, &c->median_snr)) >= 0) return code;
        break;
      case 'r':
        if ((code = parse_number("--rate", optarg, &c->rate_hz)) >= 0) return code;
        break;
      case 'n':
        if ((code = parse_number("--noise-uv", optarg, &c->noise_uv)) >= 0) return code;
        break;
      case 'D':
        if ((code = parse_number("--drift", optarg, &c->drift_um_per_s)) >= 0) return code;
        break;
      case 'u':
        end = NULL;
        lv = strtol(optarg, &end, 10);
        if (!*optarg || *end || lv < 0 || lv > INT_MAX)
          return ss_cli_usage_error("simulate", "--units: expected an integer >= 0, got \"%s\"", optarg);
        c->n_units = (int)lv;
        break;
      case 'k':
        end = NULL;
        c->seed = strtoull(optarg, &end, 10);
        if (!*optarg || *end || optarg[0] == '-')
          return ss_cli_usage_error("simulate", "--seed: expected an integer >= 0, got \"%s\"", optarg);
        break;
      case 'f':
        if (strcmp(optarg, "nwb") == 0) *format = SS_SIM_FORMAT_NWB;
        else if (strcmp(optarg, "binary") == 0) *format = SS_SIM_FORMAT_BINARY;
        else return ss_cli_usage_error("simulate", "--format: expected nwb or binary, got \"%s\"", optarg);
        break;
      default: return ss_cli_usage_error("simulate", "unknown option");
    }
  }
  if (optind < argc) return ss_cli_usage_error("simulate", "unexpected argument \"%s\"", argv[optind]);
  if (!*out_path) return ss_cli_usage_error("simulate", "give the output file with -o FILE");
  return -1;
}

static void print_summary(const ss_sim *s, const char *path) {
  const ss_sim_config *c = ss_sim_get_config(s);
  const ss_sim_truth *t = ss_sim_get_truth(s);
  int64_t total = 0;
  for (int u = 0; u < t->n_units; u++) total += t->n_spikes[u];
  printf("%s: %d channels, %g s at %g Hz, %d units, %" PRId64 " spikes, seed %" PRIu64 "\n", path, ss_sim_n_channels(s),
         c->duration_s, c->rate_hz, t->n_units, total, c->seed);
  printf("%4s %8s %8s %6s %8s %7s %7s %5s\n", "unit", "x_um", "y_um", "z_um", "rate_hz", "spikes", "snr", "peak");
  for (int u = 0; u < t->n_units; u++)
    printf("%4d %8.1f %8.1f %6.1f %8.2f %7" PRId64 " %7.2f %5d\n", u, t->x_um[u], t->y_um[u], t->z_um[u], t->rate_hz[u],
           t->n_spikes[u], t->snr[u], (int)t->peak_channel[u]);
}

int ss_cmd_simulate(int argc, char **argv, ss_ctx *ctx) {
  ss_sim_config c;
  ss_sim_config_defaults(&c);
  const char *out_path = NULL, *probe_path = DEFAULT_PROBE;
  ss_sim_format format = SS_SIM_FORMAT_NWB;
  int code = parse_options(argc, argv, ctx, &c, &out_path, &probe_path, &format);
  if (code >= 0) return code;

  ss_params p;
  ss_params_defaults(&p);
  ss_probe probe;
  ss_status st = ss_probe_load_file(ctx, probe_path, p.probe.adjacency_radius_um, &probe);
  if (st != SS_OK) return ss_cli_finish("simulate", ctx, st);
  ss_sim *s = NULL;
  st = ss_sim_write(ctx, &c, &probe, out_path, format, 0, &s);
  ss_probe_free(&probe);
  if (st != SS_OK) return ss_cli_finish("simulate", ctx, st);
  print_summary(s, out_path);
  ss_sim_free(s);
  return 0;
}
