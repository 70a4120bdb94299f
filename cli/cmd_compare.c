/* cmd_compare.c — `spikestream compare SORTED GROUND_TRUTH`: accuracy per ground-truth unit with the
 * SpikeInterface conventions (tools/compare.h, docs/compare.md), as a table and optionally JSON. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tools/compare.h"

#define MAX_EXCLUDE 64

static const char usage[] =
    "usage: spikestream compare SORTED GROUND_TRUTH [options]\n\n"
    "Score a sorting against ground truth (SpikeInterface conventions: 0.4 ms match window,\n"
    "agreement = matches / (n_gt + n_sorted - matches), Hungarian assignment at >= 0.5,\n"
    "well detected at accuracy >= 0.8). Each input is a results file (results.h5), an NWB file\n"
    "with a units table, a phy folder, or a KlustaKwik .clu file with its spike times.\n\n"
    "  --json FILE          also write {\"units\": [...], \"summary\": {...}} to FILE\n"
    "  --window-ms MS       match window, 0 to 1000 (default 0.4)\n"
    "  --rate HZ            sample rate for inputs that carry none (.clu; NWB without an\n"
    "                       ElectricalSeries); default: the ground truth's\n"
    "  --times FILE         spike sample indices of a SORTED .clu file, one per line\n"
    "                       (default: BASE.res.N next to BASE.clu.N)\n"
    "  --exclude IDS        comma-separated sorted unit ids to leave out (e.g. a noise cluster)\n"
    "\noptions:\n" SS_CLI_COMMON_HELP;

static int parse_exclude(const char *text, int64_t *ids, int *n) {
  const char *s = text;
  while (*s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno || (*end && *end != ',') || *n >= MAX_EXCLUDE)
      return ss_cli_usage_error("compare", "--exclude: expected comma-separated integer ids (at most %d), got \"%s\"",
                                MAX_EXCLUDE, text);
    ids[(*n)++] = v;
    s = *end ? end + 1 : end;
  }
  return -1;
}

static int parse_positive(const char *opt, const char *text, double *out, int allow_zero) {
  char *end;
  *out = strtod(text, &end);
  if (!*text || *end || !isfinite(*out) || *out < 0 || (!allow_zero && *out == 0))
    return ss_cli_usage_error("compare", "%s: expected a number %s 0, got \"%s\"", opt, allow_zero ? ">=" : ">", text);
  return -1;
}

/* The match window: finite, within [0, SS_COMPARE_MAX_WINDOW_MS]. */
static int parse_window(const char *text, double *out) {
  char *end;
  *out = strtod(text, &end);
  if (!*text || *end || !isfinite(*out) || *out < 0 || *out > SS_COMPARE_MAX_WINDOW_MS)
    return ss_cli_usage_error("compare", "--window-ms: expected a number in [0, %g] (ms), got \"%s\"",
                              SS_COMPARE_MAX_WINDOW_MS, text);
  return -1;
}

typedef struct {
  ss_compare_opts co;
  const char *json, *times;
  double rate;
  int64_t exclude[MAX_EXCLUDE];
  int n_exclude;
} compare_args;

static int on_option(int opt, const char *arg, void *user) {
  compare_args *a = user;
  switch (opt) {
    case 'j': a->json = arg; return 0;
    case 't': a->times = arg; return 0;
    case 'w': return parse_window(arg, &a->co.window_ms) >= 0 ? 2 : 0;
    case 'r': return parse_positive("--rate", arg, &a->rate, 0) >= 0 ? 2 : 0;
    default: return parse_exclude(arg, a->exclude, &a->n_exclude) >= 0 ? 2 : 0;
  }
}

int ss_cmd_compare(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"json", required_argument, NULL, 'j'},
                                       {"window-ms", required_argument, NULL, 'w'},
                                       {"rate", required_argument, NULL, 'r'},
                                       {"times", required_argument, NULL, 't'},
                                       {"exclude", required_argument, NULL, 'x'},
                                       {0, 0, 0, 0}};
  compare_args a;
  memset(&a, 0, sizeof(a));
  ss_compare_opts_defaults(&a.co);
  int first, code = ss_cli_parse(argc, argv, "compare", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (argc - first != 2) return ss_cli_usage_error("compare", "expected two inputs: SORTED GROUND_TRUTH");
  const char *sorted_path = argv[first], *gt_path = argv[first + 1];
  const char *json = a.json, *times = a.times;
  double rate = a.rate;
  ss_compare_opts co = a.co;
  int64_t *exclude = a.exclude;
  int n_exclude = a.n_exclude;

  ss_spike_trains gt, sorted;
  memset(&sorted, 0, sizeof(sorted));
  ss_trains_load_opts go = {.rate_hz = rate};
  ss_status st = ss_spike_trains_load(ctx, gt_path, &go, &gt);
  if (st != SS_OK) return ss_cli_finish("compare", ctx, st);
  ss_trains_load_opts so = {.times_path = times,
                            .rate_hz = rate > 0 ? rate : (gt.rate_assumed ? 0 : gt.rate_hz),
                            .exclude = exclude,
                            .n_exclude = n_exclude};
  st = ss_spike_trains_load(ctx, sorted_path, &so, &sorted);
  ss_comparison cmp;
  memset(&cmp, 0, sizeof(cmp));
  if (st == SS_OK) st = ss_compare_run(ctx, &gt, &sorted, &co, &cmp);
  if (st == SS_OK) {
    ss_compare_print(stdout, &gt, &sorted, &co, &cmp);
    if (json) st = ss_compare_write_json(ctx, json, &gt, &sorted, &co, &cmp);
  }
  ss_comparison_free(&cmp);
  ss_spike_trains_free(&gt);
  ss_spike_trains_free(&sorted);
  return ss_cli_finish("compare", ctx, st);
}
