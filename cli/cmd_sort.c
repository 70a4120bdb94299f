/* cmd_sort.c — `spikestream sort INPUT -o DIR`: the whole offline pipeline (drivers/sort.h): front end,
 * masked EM, automatic merge, and every output (results.h5, phy folder, KlustaKwik files, model.h5,
 * units.nwb, sort.log). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "cli/cli.h"
#include "drivers/sort.h"

#define CMD "sort"

/* --overwrite: no short form (the value lies outside the letters). */
enum { OPT_OVERWRITE = 0x3001, OPT_PARAM, MAX_PARAM_SETS = 64 };

static const char usage[] =
    "usage: spikestream sort INPUT -o DIR [--probe P] [--params J] [--param KEY=VALUE ...] [--device D]\n"
    "                        [--threads N] [--no-merge] [--check] [--overwrite] [source options]\n\n"
    "Sort a recording end to end: band-pass filter, thresholds, flood-fill detection, PCA features and\n"
    "masks, masked EM (KlustaKwik's algorithm), then an automatic merge of over-split units (mean\n"
    "waveforms correlated above merge.waveform_corr on shared channels, without adding refractory\n"
    "violations; every merge is logged with its evidence). Writes, atomically, under DIR:\n"
    "  results.h5                  spikes, clusters, per-cluster waveforms and statistics, merge log,\n"
    "                              parameters, version, input checksum (docs/formats.md)\n"
    "  phy/                        a phy folder (phy template-gui DIR/phy/params.py)\n"
    "  BASE.fet.1 .fmask.1 .clu.1  KlustaKwik files (BASE: the input's name; .clu: final labels, 1 = noise)\n"
    "  model.h5                    filter, thresholds, PCA, clusters and a labelled set for new spikes\n"
    "  units.nwb                   the units as an NWB units table (spike times, electrodes, mean\n"
    "                              waveforms, quality metrics, labels); an NWB input's series linked\n"
    "  report.html                 a self-contained page: unit table, waveforms on the probe, ISI\n"
    "                              histograms, autocorrelograms, amplitudes, drift raster\n"
    "  sort.log                    the run's log lines\n\n"
    "  -o, --output DIR       output directory (created with its parents if missing; it must be\n"
    "                         empty, or hold an earlier output set and --overwrite be given)\n"
    "      --overwrite        replace the earlier outputs in DIR (every file of them goes, phy/\n"
    "                         with its .phy cache included)\n"
    "      --probe P          probe JSON (default: the file's electrode positions, else\n"
    "                         params/probes/two_column_32.json for 32 channels, else an error)\n"
    "      --params J         parameter JSON (docs/params.md)\n"
    "      --param KEY=VALUE  set one parameter by its dotted name (match.amp_min=0.7), after\n"
    "                         --params; repeatable\n"
    "      --device D         auto | cpu | cuda (default auto): where the front end's chunk pass,\n"
    "                         masked EM and the KNN assignment run (noise excerpts: CPU threads)\n"
    "      --threads N        CPU threads, 1 to 1024 (default: all; the result does not depend\n"
    "                         on it)\n"
    "      --no-merge         keep masked EM's raw clusters\n"
    "      --check            check the written phy folder (files, dtypes, shapes)\n" SS_CLI_SOURCE_HELP
    "\noptions:\n" SS_CLI_COMMON_HELP;

typedef struct {
  ss_sort_opts o;
  const char *params_path;
  const char *param_sets[MAX_PARAM_SETS]; /* "KEY=VALUE", in command-line order */
  int n_param_sets;
  int no_merge;
  ss_ctx *ctx;
} sort_args;

static int on_option(int opt, const char *arg, void *user) {
  sort_args *a = user;
  int code = 0;
  switch (opt) {
    case 'o': a->o.out_dir = arg; break;
    case 'p': a->o.probe_path = arg; break;
    case 'j': a->params_path = arg; break;
    case OPT_PARAM:
      if (!strchr(arg, '=') || arg[0] == '=')
        code = ss_cli_usage_error(CMD, "--param: expected KEY=VALUE, got \"%s\"", arg);
      else if (a->n_param_sets == MAX_PARAM_SETS) code = ss_cli_usage_error(CMD, "--param: at most %d", MAX_PARAM_SETS);
      else a->param_sets[a->n_param_sets++] = arg;
      break;
    case 'D': code = ss_cli_device(CMD, arg, a->ctx, &a->o.device); break;
    case 't': code = ss_cli_threads(CMD, arg, &a->o.n_threads); break;
    case 'M': a->no_merge = 1; break;
    case 'K': a->o.check_phy = 1; break;
    case OPT_OVERWRITE: a->o.overwrite = 1; break;
    default:
      code = ss_cli_source_option(CMD, opt, arg, &a->o.spec, a->ctx);
      if (code < 0) code = ss_cli_usage_error(CMD, "unknown option");
  }
  return code;
}

static ss_status run(ss_ctx *ctx, sort_args *a) {
  if (a->params_path) SS_TRY(ss_params_load_file(ctx, a->params_path, &a->o.params));
  for (int i = 0; i < a->n_param_sets; i++) {
    const char *set = a->param_sets[i], *eq = strchr(set, '=');
    char key[256];
    snprintf(key, sizeof(key), "%.*s", (int)(eq - set), set);
    SS_TRY(ss_params_set(ctx, &a->o.params, key, eq + 1));
  }
  SS_TRY(ss_params_validate(ctx, &a->o.params));
  a->o.merge = a->no_merge ? 0 : a->o.params.merge.enabled;
  ss_sort_summary sum;
  SS_TRY(ss_sort_run(ctx, &a->o, &sum));
  ss_sort_print_summary(stdout, &sum, a->o.out_dir);
  if (a->o.check_phy) printf("phy check:         ok (%s/phy)\n", a->o.out_dir);
  ss_sort_summary_free(&sum);
  return SS_OK;
}

int ss_cmd_sort(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {SS_CLI_SOURCE_LONGOPTS,
                                       {"output", required_argument, NULL, 'o'},
                                       {"probe", required_argument, NULL, 'p'},
                                       {"params", required_argument, NULL, 'j'},
                                       {"param", required_argument, NULL, OPT_PARAM},
                                       {"device", required_argument, NULL, 'D'},
                                       {"threads", required_argument, NULL, 't'},
                                       {"no-merge", no_argument, NULL, 'M'},
                                       {"check", no_argument, NULL, 'K'},
                                       {"overwrite", no_argument, NULL, OPT_OVERWRITE},
                                       {0, 0, 0, 0}};
  sort_args a;
  memset(&a, 0, sizeof(a));
  ss_sort_opts_defaults(&a.o);
  a.ctx = ctx;
  int first, code = ss_cli_parse(argc, argv, CMD, opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc - 1) return ss_cli_usage_error(CMD, "expected one input recording");
  if (!a.o.out_dir) return ss_cli_usage_error(CMD, "-o DIR is required");
  a.o.spec.path = argv[first];
  a.o.test_kill_at = ss_cli_test_kill_at();
  return ss_cli_finish(CMD, ctx, run(ctx, &a));
}
