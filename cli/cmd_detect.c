/* cmd_detect.c — `spikestream detect INPUT -o DIR`: the front end alone (filter, thresholds,
 * flood-fill detection, PCA features, masks) → DIR/results.h5 and DIR/BASE.fet.1 + BASE.fmask.1. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/atomic_file.h"
#include "io/klustakwik.h"
#include "io/outset.h"
#include "io/results_h5.h"
#include "io/source.h"
#include "params/params.h"
#include "params/probe.h"
#include "cli/cli.h"
#include "drivers/frontend.h"
#include "core/log.h"

/* --overwrite: no short form (the value lies outside the letters). */
enum { OPT_OVERWRITE = 0x3001 };

static const char usage[] =
    "usage: spikestream detect INPUT -o DIR [--probe P] [--params J] [--device D] [--threads N]\n"
    "                          [--overwrite] [source options]\n\n"
    "Run the front end on a recording: band-pass filter, noise level from excerpts, flood-fill\n"
    "detection over the probe's adjacency, sub-sample alignment, per-channel PCA features and masks.\n"
    "Writes DIR/results.h5 (docs/formats.md) and DIR/BASE.fet.1 + DIR/BASE.fmask.1 (KlustaKwik;\n"
    "BASE is the input's name without extension).\n\n"
    "  -o, --output DIR       output directory (created with its parents if missing; it must be\n"
    "                         empty, or hold an earlier output set and --overwrite be given)\n"
    "      --overwrite        replace the earlier outputs in DIR (every file of them goes)\n"
    "      --probe P          probe JSON (default: the NWB electrode positions, else every channel\n"
    "                         alone, with a warning)\n"
    "      --params J         parameter JSON (docs/params.md)\n"
    "      --device D         auto | cpu | cuda (default auto): where the chunk pass runs (noise\n"
    "                         excerpts: CPU threads)\n"
    "      --threads N        CPU threads, 1 to 1024 (default: all)\n" SS_CLI_SOURCE_HELP
    "\noptions:\n" SS_CLI_COMMON_HELP;

typedef struct {
  ss_source_spec spec;
  const char *out_dir, *probe_path, *params_path;
  int threads, overwrite;
  ss_device_kind device;
  ss_ctx *ctx;
} detect_args;

static int on_option(int opt, const char *arg, void *user) {
  detect_args *a = user;
  int code = 0;
  switch (opt) {
    case 'o': a->out_dir = arg; break;
    case OPT_OVERWRITE: a->overwrite = 1; break;
    case 'p': a->probe_path = arg; break;
    case 'j': a->params_path = arg; break;
    case 'D': code = ss_cli_device("detect", arg, a->ctx, &a->device); break;
    case 't': code = ss_cli_threads("detect", arg, &a->threads); break;
    default:
      code = ss_cli_source_option("detect", opt, arg, &a->spec, a->ctx);
      if (code < 0) code = ss_cli_usage_error("detect", "unknown option");
  }
  return code;
}

/* The probe: the file given, else the NWB electrode positions, else none (channels alone). */
static ss_status load_probe(ss_ctx *ctx, const detect_args *a, const ss_params *p, const ss_source_info *info,
                            ss_probe *probe, int *have) {
  *have = 0;
  if (a->probe_path) {
    SS_TRY(ss_probe_load_file(ctx, a->probe_path, p->probe.adjacency_radius_um, probe));
  } else if (info->has_positions) {
    SS_TRY(ss_probe_from_positions(ctx, info->n_channels, info->x_um, info->y_um, p->probe.adjacency_radius_um, probe));
  } else {
    ss_log_warn(ctx, "detect: no probe (--probe) and no electrode positions in %s: channels are not adjacent",
                info->path);
    return SS_OK;
  }
  *have = 1;
  return SS_OK;
}

/* .fet: the features; .fmask: each channel's mask repeated over its features. */
static ss_status write_klustakwik(ss_ctx *ctx, const char *dir, const char *base, const ss_spikes *s) {
  const int64_t F = (int64_t)s->n_channels * s->n_pcs;
  ss_matrix fet = {s->n, F, s->features}, mask = {s->n, F, NULL};
  SS_TRY(SS_ALLOC(ctx, mask.data, (size_t)(s->n > 0 ? s->n : 1) * F, "feature masks"));
  for (int64_t i = 0; i < s->n; i++)
    for (int64_t j = 0; j < F; j++) mask.data[i * F + j] = s->masks[i * s->n_channels + j / s->n_pcs];
  char fet_path[8192], fmask_path[8192];
  snprintf(fet_path, sizeof(fet_path), "%s/%s.fet.1", dir, base);
  snprintf(fmask_path, sizeof(fmask_path), "%s/%s.fmask.1", dir, base);
  ss_status st = ss_kk_write_features(ctx, fet_path, fmask_path, &fet, &mask);
  free(mask.data);
  return st;
}

static ss_status write_set(ss_ctx *ctx, const detect_args *a, const ss_params *p, const ss_spikes *s, const char *dir) {
  char *json = ss_params_to_json(p);
  if (!json) return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: parameter JSON");
  ss_results_core core = {.sample_rate = s->rate_hz,
                          .n_channels = s->n_channels,
                          .n_pcs = s->n_pcs,
                          .n = s->n,
                          .time_samples = s->time_samples,
                          .time_fraction = s->time_fraction,
                          .peak_channel = s->peak_channel,
                          .amplitude = s->amplitude,
                          .features = s->features,
                          .masks = s->masks,
                          .params_json = json};
  char path[4096 + 16], base[1024];
  snprintf(path, sizeof(path), "%s/results.h5", dir);
  ss_status st = ss_results_write(ctx, path, &core);
  free(json);
  SS_TRY(st);
  ss_path_base_name(a->spec.path, base, sizeof(base));
  return write_klustakwik(ctx, dir, base, s);
}

/* results.h5 and the KlustaKwik files, swapped in as one output set (io/outset.h). */
static ss_status write_outputs(ss_ctx *ctx, const detect_args *a, const ss_params *p, const ss_spikes *s) {
  ss_outset os;
  SS_TRY(ss_outset_begin(ctx, &os, a->out_dir, a->overwrite, ss_cli_test_kill_at()));
  ss_status st = write_set(ctx, a, p, s, os.tmp_dir);
  if (st != SS_OK) return ss_outset_fail(ctx, &os);
  return ss_outset_commit(ctx, &os, "detect");
}

static ss_status run(ss_ctx *ctx, detect_args *a) {
  ss_params p;
  ss_params_defaults(&p);
  if (a->params_path) SS_TRY(ss_params_load_file(ctx, a->params_path, &p));
  SS_TRY(ss_params_validate(ctx, &p));
  SS_TRY(ss_outset_check(ctx, a->out_dir, a->overwrite)); /* before any work */
  ss_backend be;
  SS_TRY(ss_backend_open(ctx, a->device, 0, a->threads, &be));
  ss_source *src = NULL;
  ss_status st = ss_source_open(ctx, &a->spec, &src);
  if (st != SS_OK) {
    ss_backend_close(&be);
    return st;
  }
  const ss_source_info *info = ss_source_get_info(src);
  ss_probe probe;
  int have_probe = 0;
  st = load_probe(ctx, a, &p, info, &probe, &have_probe);
  ss_spikes spikes = {0};
  ss_frontend_model model = {0};
  double t0 = ss_now();
  if (st == SS_OK) st = ss_frontend_run(ctx, &be, &p, src, have_probe ? &probe : NULL, NULL, &spikes, &model);
  double secs = ss_now() - t0;
  if (st == SS_OK) st = write_outputs(ctx, a, &p, &spikes);
  if (st == SS_OK)
    ss_log_info(ctx,
                "detect: %lld spikes in %.1f s of %d channels at %g Hz; %.2f s (%.0f× real time, %d threads: "
                "excerpt pass %.2f s, chunk pass %.2f s)",
                (long long)spikes.n, info->duration_s, info->n_channels, info->rate_hz, secs,
                info->duration_s / (secs > 0 ? secs : 1e-9), be.n_threads, model.seconds_threshold,
                model.seconds_detect);
  if (st == SS_OK) printf("%lld spikes -> %s/results.h5\n", (long long)spikes.n, a->out_dir);
  ss_spikes_free(&spikes);
  ss_frontend_model_free(&model);
  if (have_probe) ss_probe_free(&probe);
  ss_source_close(src);
  ss_backend_close(&be);
  return st;
}

int ss_cmd_detect(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"output", required_argument, NULL, 'o'},
                                       {"overwrite", no_argument, NULL, OPT_OVERWRITE},
                                       {"probe", required_argument, NULL, 'p'},
                                       {"params", required_argument, NULL, 'j'},
                                       {"device", required_argument, NULL, 'D'},
                                       {"threads", required_argument, NULL, 't'},
                                       SS_CLI_SOURCE_LONGOPTS,
                                       {0, 0, 0, 0}};
  detect_args a;
  memset(&a, 0, sizeof(a));
  a.ctx = ctx;
  a.device = SS_DEVICE_AUTO;
  int first, code = ss_cli_parse(argc, argv, "detect", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc - 1) return ss_cli_usage_error("detect", "expected one input recording");
  if (!a.out_dir) return ss_cli_usage_error("detect", "-o DIR is required");
  a.spec.path = argv[first];
  return ss_cli_finish("detect", ctx, run(ctx, &a));
}
