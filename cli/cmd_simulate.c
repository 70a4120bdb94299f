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
    "Poisson firing with a refractory period and bursts (attenuated spikes), lognormal rates,\n"
    "correlated coloured noise, optional drift. The same seed gives the same file bit for bit. NWB\n"
    "output holds the ground truth in its units table (spike_times, peak_channel, snr); binary output\n"
    "writes BASE.bin and the sidecar BASE.json.\n\n"
    "  -o, --output FILE      output file (NWB), or BASE / BASE.bin (binary)\n"
    "      --preset P         realistic (default: 30 units per 32 channels, median SNR 20,\n"
    "                         lognormal rates with median 12 Hz in 0.5-30 Hz, bursts) or easy\n"
    "                         (20 units, median SNR 10, log-uniform rates in 0.5-20 Hz, no\n"
    "                         bursts); the options below override it\n"
    "      --duration S       seconds (default 60)\n"
    "      --units N|auto     number of units (default auto: 30 per 32 channels)\n"
    "      --snr X            median unit SNR, peak-to-trough over noise s.d. (default 20; units\n"
    "                         spread over X/sqrt(10) .. X*sqrt(10))\n"
    "      --seed K           seed (default 1)\n"
    "      --probe P          probe JSON (default " DEFAULT_PROBE ")\n"
    "      --rate HZ          sampling rate (default 30000)\n"
    "      --noise-uv U       noise standard deviation in µV (default 10)\n"
    "      --drift UM_PER_S   linear drift of the units along the probe (default 0)\n"
    "      --burst-prob P     each unit's chance that a firing event is a burst is uniform in\n"
    "                         [0, P] (default 0.3; 0: no bursts)\n"
    "      --burst-attenuation A  amplitude factor per spike within a burst (default 0.8; 1: none)\n"
    "      --format F         nwb (default) or binary\n\noptions:\n" SS_CLI_COMMON_HELP;

static int parse_number(const char *opt, const char *text, double *out) {
  char *end = NULL;
  *out = strtod(text, &end);
  if (!*text || *end) return ss_cli_usage_error("simulate", "%s: expected a number, got \"%s\"", opt, text);
  return -1;
}

/* Options given on the command line, applied over the preset once every option is read. */
enum {
  GIVEN_DURATION = 1,
  GIVEN_UNITS = 2,
  GIVEN_SNR = 4,
  GIVEN_SEED = 8,
  GIVEN_RATE = 16,
  GIVEN_NOISE = 32,
  GIVEN_DRIFT = 64,
  GIVEN_BURST_PROB = 128,
  GIVEN_BURST_ATT = 256
};

static void apply_preset(ss_sim_preset preset, unsigned given, ss_sim_config *c) {
  ss_sim_config base;
  ss_sim_config_preset(&base, preset);
  if (given & GIVEN_DURATION) base.duration_s = c->duration_s;
  if (given & GIVEN_UNITS) base.n_units = c->n_units;
  if (given & GIVEN_SNR) base.median_snr = c->median_snr;
  if (given & GIVEN_SEED) base.seed = c->seed;
  if (given & GIVEN_RATE) base.rate_hz = c->rate_hz;
  if (given & GIVEN_NOISE) base.noise_uv = c->noise_uv;
  if (given & GIVEN_DRIFT) base.drift_um_per_s = c->drift_um_per_s;
  if (given & GIVEN_BURST_PROB) base.burst_prob = c->burst_prob;
  if (given & GIVEN_BURST_ATT) base.burst_attenuation = c->burst_attenuation;
  *c = base;
}

static int parse_units(const char *text, int *n) {
  if (strcmp(text, "auto") == 0) {
    *n = SS_SIM_UNITS_AUTO;
    return -1;
  }
  char *end = NULL;
  long lv = strtol(text, &end, 10);
  if (!*text || *end || lv < 0 || lv > INT_MAX)
    return ss_cli_usage_error("simulate", "--units: expected an integer >= 0 or auto, got \"%s\"", text);
  *n = (int)lv;
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
                                           {"burst-prob", required_argument, NULL, 'B'},
                                           {"burst-attenuation", required_argument, NULL, 'A'},
                                           {"format", required_argument, NULL, 'f'},
                                           {"preset", required_argument, NULL, 'P'},
                                           {0, 0, 0, 0}};
  int opt, code;
  char *end;
  unsigned given = 0;
  ss_sim_preset preset = SS_SIM_PRESET_REALISTIC;
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
        given |= GIVEN_DURATION;
        break;
      case 's':
        if ((code = parse_number("--snr", optarg, &c->median_snr)) >= 0) return code;
        given |= GIVEN_SNR;
        break;
      case 'r':
        if ((code = parse_number("--rate", optarg, &c->rate_hz)) >= 0) return code;
        given |= GIVEN_RATE;
        break;
      case 'n':
        if ((code = parse_number("--noise-uv", optarg, &c->noise_uv)) >= 0) return code;
        given |= GIVEN_NOISE;
        break;
      case 'D':
        if ((code = parse_number("--drift", optarg, &c->drift_um_per_s)) >= 0) return code;
        given |= GIVEN_DRIFT;
        break;
      case 'B':
        if ((code = parse_number("--burst-prob", optarg, &c->burst_prob)) >= 0) return code;
        given |= GIVEN_BURST_PROB;
        break;
      case 'A':
        if ((code = parse_number("--burst-attenuation", optarg, &c->burst_attenuation)) >= 0) return code;
        given |= GIVEN_BURST_ATT;
        break;
      case 'u':
        if ((code = parse_units(optarg, &c->n_units)) >= 0) return code;
        given |= GIVEN_UNITS;
        break;
      case 'k':
        end = NULL;
        c->seed = strtoull(optarg, &end, 10);
        if (!*optarg || *end || optarg[0] == '-')
          return ss_cli_usage_error("simulate", "--seed: expected an integer >= 0, got \"%s\"", optarg);
        given |= GIVEN_SEED;
        break;
      case 'P':
        if (strcmp(optarg, "realistic") == 0) preset = SS_SIM_PRESET_REALISTIC;
        else if (strcmp(optarg, "easy") == 0) preset = SS_SIM_PRESET_EASY;
        else return ss_cli_usage_error("simulate", "--preset: expected realistic or easy, got \"%s\"", optarg);
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
  apply_preset(preset, given, c);
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
