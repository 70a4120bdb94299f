/* cmd_cluster.c — `spikestream cluster BASE SHANK`: masked EM on KlustaKwik files, a drop-in for
 * KlustaKwik. Reads BASE.fet.SHANK and BASE.fmask.SHANK (or --input-npy FET MASK), writes
 * BASE.clu.SHANK (1 = noise, Gaussian clusters 2..K) and the log BASE.klg.SHANK, both atomically.
 * KlustaKwik-style flags (-PenaltyK 0 ...) map onto the mask_em parameters. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "io/atomic_file.h"
#include "io/klustakwik.h"
#include "io/matrix.h"
#include "io/outset.h"
#include "params/params.h"
#include "cli/cli.h"
#include "core/log.h"
#include "stages/mask_em/mask_em.h"

#define CMD "cluster"
#define PATH_LEN 4096
#define MAX_SETTINGS 64

static const char usage[] =
    "usage: spikestream cluster BASE SHANK [options]\n\n"
    "Masked EM clustering (KlustaKwik's algorithm) of BASE.fet.SHANK with the masks of\n"
    "BASE.fmask.SHANK; writes BASE.clu.SHANK (line 1: the number of clusters K; then one label per\n"
    "point: 1 = noise, 2..K Gaussian clusters) and the iteration log BASE.klg.SHANK.\n\n"
    "  --param KEY=VALUE      set a parameter (mask_em.X or any dotted path; repeatable)\n"
    "  --params FILE          parameter file (JSON)\n"
    "  --threads N            CPU threads, 1 to 1024 (default: all; the result does not depend\n"
    "                         on it)\n"
    "  --device D             auto | cpu | cuda (default auto)\n"
    "  --start S              mask_patterns | kmeans | clu:FILE (a .clu file, KlustaKwik numbering)\n"
    "  --seed S               random seed (mask-pattern visiting order, split halves)\n"
    "  --input-npy FET MASK   read features and masks from matrices (.npy, .h5, .csv) instead of the\n"
    "                         text files; MASK has one column per feature, or one per channel (repeated\n"
    "                         over the channel's FET/MASK columns)\n"
    "KlustaKwik flags: -MaskStarts N -MaxPossibleClusters N -PenaltyK X -PenaltyKLogN X -SplitFirst N\n"
    "  -SplitEvery N -UseDistributional 1 -MaxIter N -RandomSeed N -DropLastNFeatures "
    "N\n\noptions:\n" SS_CLI_COMMON_HELP;

#define KEY_LEN 128

typedef struct {
  char path[KEY_LEN];
  const char *value, *option;
} setting;

typedef struct {
  const char *base, *shank, *params, *start, *fet_npy, *mask_npy;
  int64_t seed;
  int threads;
  ss_device_kind device;
  setting set[MAX_SETTINGS];
  int n_set;
  char *kk_argv[256];
} cluster_args;

static const struct {
  const char *flag, *path;
} kk_flags[] = {{"MaskStarts", "mask_em.num_starting_clusters"},
                {"MaxPossibleClusters", "mask_em.max_possible_clusters"},
                {"PenaltyK", "mask_em.penalty_k"},
                {"PenaltyKLogN", "mask_em.penalty_k_log_n"},
                {"SplitFirst", "mask_em.split_first"},
                {"SplitEvery", "mask_em.split_every"},
                {"MaxIter", "mask_em.max_iterations"},
                {"RandomSeed", "seed"},
                {"DropLastNFeatures", "mask_em.drop_last_n_features"},
                {"UseDistributional", NULL}};

/* path_len < 0: the whole string. */
static int add_setting(cluster_args *a, const char *path, int path_len, const char *value, const char *option) {
  if (a->n_set == MAX_SETTINGS)
    return ss_cli_usage_error(CMD, "too many parameter settings (at most %d)", MAX_SETTINGS);
  setting *s = &a->set[a->n_set++];
  snprintf(s->path, sizeof(s->path), "%.*s", path_len < 0 ? KEY_LEN - 1 : path_len, path);
  s->value = value;
  s->option = option;
  return 0;
}

/* `-Name value` flags (a dash and a capital letter); the rest of argv goes to getopt in *out. */
static int take_kk_flags(int argc, char **argv, cluster_args *a, int *out_argc) {
  int n = 0;
  for (int i = 0; i < argc; i++) {
    const char *s = argv[i];
    if (i == 0 || s[0] != '-' || s[1] < 'A' || s[1] > 'Z') {
      if (n < (int)(sizeof(a->kk_argv) / sizeof(a->kk_argv[0])) - 1) a->kk_argv[n++] = argv[i];
      continue;
    }
    size_t f = 0, nf = sizeof(kk_flags) / sizeof(kk_flags[0]);
    while (f < nf && strcmp(kk_flags[f].flag, s + 1) != 0) f++;
    if (f == nf) return ss_cli_usage_error(CMD, "unknown KlustaKwik flag \"%s\"", s);
    if (i + 1 >= argc) return ss_cli_usage_error(CMD, "%s: expected a value", s);
    const char *v = argv[++i];
    if (!kk_flags[f].path) {
      if (strcmp(v, "1") != 0) return ss_cli_usage_error(CMD, "-UseDistributional: only 1 is supported, got \"%s\"", v);
      continue;
    }
    if (add_setting(a, kk_flags[f].path, -1, v, s)) return 2;
    if (f == 0 && add_setting(a, "mask_em.start", -1, "mask_patterns", s)) return 2;
  }
  a->kk_argv[n] = NULL;
  *out_argc = n;
  return 0;
}

static int parse_int(const char *opt, const char *text, int64_t lo, int64_t *out) {
  return ss_cli_integer(CMD, opt + 2, text, lo, INT64_MAX, out) == 0;
}

static int on_option(int opt, const char *arg, cluster_args *a, ss_ctx *ctx, int argc, char **argv) {
  switch (opt) {
    case 'p': {
      const char *eq = strchr(arg, '=');
      if (!eq || eq == arg) return ss_cli_usage_error(CMD, "--param: expected KEY=VALUE, got \"%s\"", arg);
      int len = (int)(eq - arg), dotted = memchr(arg, '.', (size_t)len) != NULL;
      if (dotted || (len == 4 && strncmp(arg, "seed", 4) == 0))
        return add_setting(a, arg, len, eq + 1, SS_PARAMS_OPTION);
      char key[KEY_LEN]; /* a bare name is a mask_em parameter */
      snprintf(key, sizeof(key), "mask_em.%.*s", len, arg);
      return add_setting(a, key, -1, eq + 1, SS_PARAMS_OPTION);
    }
    case 'P': a->params = arg; return 0;
    case 't': return ss_cli_threads(CMD, arg, &a->threads);
    case 'd': return ss_cli_device(CMD, arg, ctx, &a->device);
    case 's': a->start = arg; return 0;
    case 'S': return parse_int("--seed", arg, 0, &a->seed) ? 0 : 2;
    case 'n':
      if (optind >= argc) return ss_cli_usage_error(CMD, "--input-npy: expected two files, FET and MASK");
      a->fet_npy = arg;
      a->mask_npy = argv[optind++];
      return 0;
    default: return ss_cli_usage_error(CMD, "unknown option");
  }
}

/* Returns -1 to go on, else the exit code. */
static int parse_args(int argc, char **argv, ss_ctx *ctx, cluster_args *a) {
  static const struct option longopts[] = {SS_CLI_COMMON_LONGOPTS,
                                           {"param", required_argument, NULL, 'p'},
                                           {"params", required_argument, NULL, 'P'},
                                           {"threads", required_argument, NULL, 't'},
                                           {"device", required_argument, NULL, 'd'},
                                           {"start", required_argument, NULL, 's'},
                                           {"seed", required_argument, NULL, 'S'},
                                           {"input-npy", required_argument, NULL, 'n'},
                                           {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->seed = -1;
  a->device = SS_DEVICE_AUTO;
  int code = take_kk_flags(argc, argv, a, &argc);
  if (code) return code;
  argv = a->kk_argv;
  optind = 1;
  int opt;
  while ((opt = getopt_long(argc, argv, SS_CLI_COMMON_SHORTOPTS, longopts, NULL)) != -1) {
    if (ss_cli_common_option(opt, usage, ctx, &code)) {
      if (code >= 0) return code;
      continue;
    }
    if (opt == '?' || opt == ':') return ss_cli_usage_error(CMD, "bad option \"%s\"", argv[optind - 1]);
    if ((code = on_option(opt, optarg, a, ctx, argc, argv)) != 0) return code;
  }
  if (argc - optind != 2) return ss_cli_usage_error(CMD, "expected BASE and SHANK, got %d argument(s)", argc - optind);
  a->base = argv[optind];
  a->shank = argv[optind + 1];
  return -1;
}

/* Parameters: file, then KlustaKwik flags and --param in order, then --seed and --start. */
static ss_status resolve_params(ss_ctx *ctx, const cluster_args *a, ss_params *p) {
  ss_params_defaults(p);
  if (a->params) SS_TRY(ss_params_load_file(ctx, a->params, p));
  for (int i = 0; i < a->n_set; i++)
    SS_TRY(ss_params_set_named(ctx, p, a->set[i].path, a->set[i].value, a->set[i].option));
  if (a->seed >= 0) p->seed = a->seed;
  if (a->start && strncmp(a->start, "clu:", 4) == 0) p->mask_em.start = SS_EM_START_CLU;
  else if (a->start) SS_TRY(ss_params_set_named(ctx, p, "mask_em.start", a->start, "--start"));
  if (p->mask_em.start == SS_EM_START_CLU && !(a->start && strncmp(a->start, "clu:", 4) == 0))
    return ss_fail(ctx, SS_ERR_USAGE, "mask_em.start = clu: give the file with --start clu:FILE");
  return ss_params_validate(ctx, p);
}

/* Masks with one column per channel are repeated over the channel's features. */
static ss_status expand_masks(ss_ctx *ctx, const char *path, const ss_matrix *fet, ss_matrix *mask) {
  if (mask->rows != fet->rows)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %" PRId64 " rows, but the features have %" PRId64, path, mask->rows,
                   fet->rows);
  if (mask->cols == fet->cols) return SS_OK;
  if (mask->cols == 0 || fet->cols % mask->cols != 0)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: %" PRId64 " columns: expected %" PRId64 " (one per feature) or a divisor of it "
                   "(one per channel)",
                   path, mask->cols, fet->cols);
  int64_t per = fet->cols / mask->cols;
  float *m = NULL;
  SS_TRY(SS_ALLOC(ctx, m, (size_t)(fet->rows * fet->cols), "expanded masks"));
  for (int64_t r = 0; r < fet->rows; r++)
    for (int64_t c = 0; c < fet->cols; c++) m[r * fet->cols + c] = mask->data[r * mask->cols + c / per];
  free(mask->data);
  mask->data = m;
  mask->cols = fet->cols;
  return SS_OK;
}

static void drop_columns(ss_matrix *m, int64_t drop) {
  int64_t keep = m->cols - drop;
  for (int64_t r = 0; r < m->rows; r++)
    memmove(m->data + r * keep, m->data + r * m->cols, sizeof(float) * (size_t)keep);
  m->cols = keep;
}

static ss_status read_input(ss_ctx *ctx, const cluster_args *a, const ss_params *p, ss_matrix *fet, ss_matrix *mask) {
  char fp[PATH_LEN], mp[PATH_LEN];
  int64_t drop = p->mask_em.drop_last_n_features;
  if (!a->fet_npy) {
    snprintf(fp, sizeof(fp), "%s.fet.%s", a->base, a->shank);
    snprintf(mp, sizeof(mp), "%s.fmask.%s", a->base, a->shank);
    SS_TRY(ss_outset_check_file(ctx, fp));
    SS_TRY(ss_outset_check_file(ctx, mp));
    return ss_kk_read_features(ctx, fp, mp, drop, fet, mask);
  }
  memset(mask, 0, sizeof(*mask));
  SS_TRY(ss_outset_check_file(ctx, a->fet_npy));
  SS_TRY(ss_outset_check_file(ctx, a->mask_npy));
  SS_TRY(ss_matrix_read(ctx, a->fet_npy, NULL, fet));
  SS_TRY(ss_matrix_read(ctx, a->mask_npy, NULL, mask));
  SS_TRY(expand_masks(ctx, a->mask_npy, fet, mask));
  if (drop >= fet->cols)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: drop_last_n_features = %" PRId64 " leaves no features (%" PRId64 " columns)",
                   a->fet_npy, drop, fet->cols);
  drop_columns(fet, drop);
  drop_columns(mask, drop);
  return SS_OK;
}

/* KlustaKwik numbering of a .clu start: 0 and 1 are noise, L ≥ 2 is Gaussian cluster L − 1. */
static ss_status read_start(ss_ctx *ctx, const char *path, int64_t n, int32_t **labels) {
  int64_t m;
  SS_TRY(ss_kk_read_clu(ctx, path, &m, labels, NULL));
  if (m != n) {
    free(*labels);
    *labels = NULL;
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %" PRId64 " labels, but the features have %" PRId64 " points", path, m, n);
  }
  for (int64_t i = 0; i < n; i++) (*labels)[i] = (*labels)[i] <= 1 ? 0 : (*labels)[i] - 1;
  return SS_OK;
}

static ss_status write_klg(ss_ctx *ctx, const char *path, const cluster_args *a, const ss_params *p,
                           const ss_mask_em_result *r) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  FILE *f = af.f;
  char *json = ss_params_to_json(p);
  fprintf(f,
          "# spikestream %s (%s) cluster %s %s\n# %" PRId64 " points x %" PRId64 " features; %" PRId64
          " starting clusters; seed %" PRId64 "\n# parameters:\n# ",
          SS_VERSION, SS_GIT_COMMIT, a->base, a->shank, r->n, r->d, r->start_clusters, (int64_t)p->seed);
  for (const char *c = json ? json : "(out of memory)"; *c; c++) {
    if (*c == '\n') fputs("\n# ", f);
    else fputc(*c, f);
  }
  fputc('\n', f);
  free(json);
  fprintf(f,
          "# iteration step score clusters changed deletions cholesky_failures splits_tried splits_accepted seconds\n");
  for (int64_t i = 0; i < r->n_log; i++) {
    const ss_mask_em_iter_log *e = &r->log[i];
    fprintf(f, "%" PRId64 " %s %.9f %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %.6f\n",
            e->iteration, e->step == SS_EM_STEP_FULL ? "full" : "split", e->score, e->n_clusters, e->changed,
            e->deletions, e->chol_failures, e->splits_tried, e->splits_accepted, e->seconds);
  }
  fprintf(f,
          "# stop: %s after %" PRId64 " iterations; %" PRId64 " clusters (noise included); score %.9f; %.3f s "
          "(prepare %.3f, M-step %.3f, E-step %.3f, C-step+deletion %.3f, splits %.3f)\n",
          ss_mask_em_stop_name(r->stop), r->n_iterations, r->n_clusters, r->score, r->t_total_s, r->t_prepare_s,
          r->t_mstep_s, r->t_estep_s, r->t_cstep_s, r->t_split_s);
  return ss_atomic_commit(ctx, &af);
}

static ss_status write_outputs(ss_ctx *ctx, const cluster_args *a, const ss_params *p, ss_mask_em_result *r) {
  char path[PATH_LEN];
  for (int64_t i = 0; i < r->n; i++) r->labels[i] += 1; /* KlustaKwik numbering */
  snprintf(path, sizeof(path), "%s.clu.%s", a->base, a->shank);
  SS_TRY(ss_kk_write_clu(ctx, path, r->n, r->labels));
  snprintf(path, sizeof(path), "%s.klg.%s", a->base, a->shank);
  return write_klg(ctx, path, a, p, r);
}

static ss_status run_cluster(ss_ctx *ctx, const cluster_args *a) {
  ss_params p;
  SS_TRY(resolve_params(ctx, a, &p));
  ss_matrix fet = {0}, mask = {0};
  int32_t *start = NULL;
  ss_backend be = {0};
  ss_mask_em_result r = {0};
  int opened = 0;
  ss_status s = read_input(ctx, a, &p, &fet, &mask);
  if (s == SS_OK && p.mask_em.start == SS_EM_START_CLU) s = read_start(ctx, a->start + 4, fet.rows, &start);
  if (s == SS_OK) s = ss_backend_open(ctx, a->device, 0, a->threads, &be);
  if (s == SS_OK) {
    opened = 1;
    ss_mask_em_opts o;
    ss_mask_em_opts_from_params(&o, &p);
    o.start_labels = start;
    s = ss_mask_em_fit(ctx, &be, fet.data, mask.data, fet.rows, fet.cols, &o, &r);
  }
  if (s == SS_OK) s = write_outputs(ctx, a, &p, &r);
  if (s == SS_OK)
    printf("clusters: %" PRId64 " (noise included)\niterations: %" PRId64 " (%s)\nscore: %.9g\nseconds: %.3f\n",
           r.n_clusters, r.n_iterations, ss_mask_em_stop_name(r.stop), r.score, r.t_total_s);
  ss_mask_em_result_free(&r);
  if (opened) ss_backend_close(&be);
  free(start);
  ss_matrix_free(&fet);
  ss_matrix_free(&mask);
  return s;
}

int ss_cmd_cluster(int argc, char **argv, ss_ctx *ctx) {
  cluster_args a;
  int code = parse_args(argc, argv, ctx, &a);
  if (code >= 0) return code;
  return ss_cli_finish(CMD, ctx, run_cluster(ctx, &a));
}
