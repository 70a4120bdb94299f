/* cmd_inspect.c — `spikestream inspect INPUT`: open a recording through the chunked source and
 * describe it (format, rate, channels, duration, scale, positions). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/nwb_check.h"
#include "io/outset.h"
#include "io/phy.h"
#include "io/source.h"
#include "cli/cli.h"

static const char usage[] =
    "usage: spikestream inspect INPUT [source options] [--check-nwb] [options]\n\n"
    "Open a recording (NWB 2.x, Kwik .raw.kwd, plain HDF5, flat int16 binary, SpikeGLX .bin/.meta, Open\n"
    "Ephys binary folder or Intan .rhd/.rhs; detected from the file)\n"
    "and print its format, sampling rate, channels, duration, sample count, scale and whether it\n"
    "carries channel positions.\n\n"
    "  --check-nwb       also run the NWB 2.x structural check (paths, attributes, neurodata types,\n"
    "                    tables, references, unsigned index types, cached schema); exit 1 with one\n"
    "                    line per problem. A units-only NWB file (a sort's units.nwb for a non-NWB\n"
    "                    input) is checked without opening a recording\n"
    "  --check-phy       INPUT is a phy folder (as `sort` writes): check that every file phy needs is\n"
    "                    there with consistent dtypes and shapes, that params.py parses and that its\n"
    "                    dat_path exists with offset + whole frames (as many as params.py notes);\n"
    "                    exit 1 with one line per problem\n" SS_CLI_SOURCE_HELP "\noptions:\n" SS_CLI_COMMON_HELP;

typedef struct {
  ss_source_spec spec;
  ss_ctx *ctx;
  int check_nwb;
  int check_phy;
} inspect_args;

static int on_option(int opt, const char *arg, void *user) {
  inspect_args *a = user;
  if (opt == 'K' || opt == 'P') {
    *(opt == 'K' ? &a->check_nwb : &a->check_phy) = 1;
    return 0;
  }
  int code = ss_cli_source_option("inspect", opt, arg, &a->spec, a->ctx);
  return code >= 0 ? code : ss_cli_usage_error("inspect", "unknown option");
}

static void print_scale(const ss_source_info *in) {
  double lo = in->uv_per_step[0], hi = lo;
  for (int c = 1; c < in->n_channels; c++) {
    if (in->uv_per_step[c] < lo) lo = in->uv_per_step[c];
    if (in->uv_per_step[c] > hi) hi = in->uv_per_step[c];
  }
  if (!in->scale_known) printf("scale:        unknown (1 uV per step assumed)\n");
  else if (lo == hi) printf("scale:        %.9g uV per step, offset %.9g uV\n", lo, in->offset_uv);
  else printf("scale:        %.9g .. %.9g uV per step (per channel), offset %.9g uV\n", lo, hi, in->offset_uv);
  if (in->float_step > 0) printf("float data:   mapped to int16 with %.9g file units per step\n", in->float_step);
}

/* Where the samples are: dataset, data file or blocks, by format. */
static void print_data(const ss_source_info *in) {
  if (in->format == SS_FORMAT_INTAN)
    printf("data:         amplifier channels of the data blocks (uint16, delivered as value - 32768)\n");
  else if (in->format == SS_FORMAT_SPIKEGLX || in->format == SS_FORMAT_OPENEPHYS)
    printf("data:         %s (%s, channel-interleaved)\n", in->data_path, in->dtype);
  else if (in->data_path[0]) printf("data file:    %s (followed from the .kwik)\n", in->data_path);
  if (in->format == SS_FORMAT_OPENEPHYS) printf("stream:       %s\n", in->dataset);
  else if (in->format == SS_FORMAT_BINARY) printf("dataset:      flat binary (%s, channel-interleaved)\n", in->dtype);
  else if (in->dataset[0])
    printf("dataset:      %s (%s, %s)\n", in->dataset, in->dtype,
           in->layout == SS_LAYOUT_TIME_MAJOR ? "time-major" : "channel-major");
}

int ss_cmd_inspect(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {SS_CLI_SOURCE_LONGOPTS,
                                       {"check-nwb", no_argument, NULL, 'K'},
                                       {"check-phy", no_argument, NULL, 'P'},
                                       {0, 0, 0, 0}};
  inspect_args a;
  memset(&a, 0, sizeof(a));
  a.ctx = ctx;
  int first, code = ss_cli_parse(argc, argv, "inspect", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc - 1) return ss_cli_usage_error("inspect", "expected one input file");
  a.spec.path = argv[first];
  if (ss_outset_check_file(ctx, a.spec.path) != SS_OK) return ss_cli_finish("inspect", ctx, ctx->status);
  if (a.check_phy) {
    ss_status pst = ss_phy_check(ctx, a.spec.path);
    if (pst == SS_OK) printf("phy check:    ok (%s)\n", a.spec.path);
    return ss_cli_finish("inspect", ctx, pst);
  }
  if (a.check_nwb && ss_nwb_units_only(a.spec.path)) { /* e.g. a sort's units.nwb: nothing to open */
    printf("file:         %s\n", a.spec.path);
    printf("format:       nwb (units table only, no recording)\n");
    ss_status nst = ss_nwb_check(ctx, a.spec.path);
    if (nst == SS_OK) printf("nwb check:    ok\n");
    return ss_cli_finish("inspect", ctx, nst);
  }
  ss_source *src = NULL;
  ss_status st = ss_source_open(ctx, &a.spec, &src);
  if (st != SS_OK) return ss_cli_finish("inspect", ctx, st);
  const ss_source_info *in = ss_source_get_info(src);
  printf("file:         %s\n", in->path);
  printf("format:       %s\n", ss_source_format_name(in->format));
  print_data(in);
  printf("rate:         %.9g Hz%s\n", in->rate_hz, in->from_timestamps ? " (from regular timestamps)" : "");
  printf("channels:     %d\n", in->n_channels);
  printf("samples:      %lld\n", (long long)in->n_samples);
  printf("duration:     %.3f s (starting at %.9g s)\n", in->duration_s, in->start_time_s);
  print_scale(in);
  printf("positions:    %s\n", !in->has_positions                 ? "no"
                               : in->format == SS_FORMAT_SPIKEGLX ? "yes (.meta geometry)"
                                                                  : "yes (electrodes table)");
  if (in->n_left_out)
    printf("left out:     %d channel%s (%s)\n", in->n_left_out, in->n_left_out > 1 ? "s" : "", in->left_out);
  printf("reader:       %s\n", in->threaded ? "direct reads with a prefetch thread" : "HDF5 library, caller's thread");
  ss_source_close(src);
  if (!a.check_nwb) return 0;
  if ((st = ss_nwb_check(ctx, a.spec.path)) != SS_OK) return ss_cli_finish("inspect", ctx, st);
  printf("nwb check:    ok\n");
  return 0;
}
