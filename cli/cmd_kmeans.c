/* cmd_kmeans.c — `spikestream kmeans`: cluster a feature matrix (CSV/TXT, HDF5, .npy) or the
 * overlapping patches of an image, on the CPU or the GPU; writes DIR/labels.npy and
 * DIR/centroids.npy (atomically) and prints the final inertia. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/matrix.h"
#include "params/params.h"
#include "cli/cli.h"
#include "stages/kmeans/kmeans.h"
#include "core/log.h"

#define CMD "kmeans"
#define DEFAULT_PATCH 5
#define OUT_PATH_MAX 4096

static const char usage[] =
    "usage: spikestream kmeans (INPUT | --patches IMAGE) --k K -o DIR [options]\n\n"
    "Cluster the rows of INPUT (.csv/.txt, .h5/.hdf5 with --dataset, .npy) into K clusters with\n"
    "Lloyd's algorithm; write DIR/labels.npy (int32) and DIR/centroids.npy (float32 K x D) and\n"
    "print the final `inertia: VALUE` (sum of squared distances to the nearest centroid).\n\n"
    "  --k K              clusters (default: the rows of an --init FILE, else kmeans.k)\n"
    "  --init I           kmeanspp | random | FILE (K x D starting centroids in any matrix format)\n"
    "  --device D         auto | cpu | cuda (default auto)\n"
    "  --threads N        CPU threads, 1 to 1024 (default: all)\n"
    "  --max-iter N       cap on centroid updates (default kmeans.max_iterations)\n"
    "  --tol F            stop when at most this fraction of labels changed (default\n"
    "                     kmeans.tol_change_fraction; 0: only when none changed)\n"
    "  --seed S           random seed of the initialisation (default: the parameters' seed)\n"
    "  --params FILE      parameter file (the kmeans section and seed are used)\n"
    "  --dataset NAME     HDF5 dataset of INPUT\n"
    "  --patches IMAGE    cluster the overlapping P x P x C patches of IMAGE (binary PPM P6, or a\n"
    "                     .npy H x W x C array); PNG/JPEG must be converted first\n"
    "  --patch P          patch side (default 5)\n"
    "  -o, --output DIR   output folder (created when missing)\n\noptions:\n" SS_CLI_COMMON_HELP;

typedef struct {
  const char *input, *image, *init, *out, *params, *dataset;
  int64_t k, max_iter, seed, patch;
  double tol;
  int threads;
  ss_device_kind device;
} kmeans_args;

static int parse_int(const char *opt, const char *text, int64_t lo, int64_t *out) {
  return ss_cli_integer(CMD, opt + 2, text, lo, INT64_MAX, out) == 0;
}

/* Returns -1 when parsing succeeded, else the exit code. */
static int parse_args(int argc, char **argv, ss_ctx *ctx, kmeans_args *a) {
  enum { O_K = 0x2001, O_INIT, O_DEVICE, O_THREADS, O_MAXIT, O_TOL, O_SEED, O_PARAMS, O_DATASET, O_PATCHES, O_PATCH };
  static const struct option longopts[] = {SS_CLI_COMMON_LONGOPTS,
                                           {"k", required_argument, NULL, O_K},
                                           {"init", required_argument, NULL, O_INIT},
                                           {"device", required_argument, NULL, O_DEVICE},
                                           {"threads", required_argument, NULL, O_THREADS},
                                           {"max-iter", required_argument, NULL, O_MAXIT},
                                           {"tol", required_argument, NULL, O_TOL},
                                           {"seed", required_argument, NULL, O_SEED},
                                           {"params", required_argument, NULL, O_PARAMS},
                                           {"dataset", required_argument, NULL, O_DATASET},
                                           {"patches", required_argument, NULL, O_PATCHES},
                                           {"patch", required_argument, NULL, O_PATCH},
                                           {"output", required_argument, NULL, 'o'},
                                           {0, 0, 0, 0}};
  memset(a, 0, sizeof(*a));
  a->k = a->max_iter = a->seed = -1;
  a->tol = -1.0;
  a->patch = DEFAULT_PATCH;
  a->device = SS_DEVICE_AUTO;
  int opt, code;
  while ((opt = getopt_long(argc, argv, SS_CLI_COMMON_SHORTOPTS "o:", longopts, NULL)) != -1) {
    if (ss_cli_common_option(opt, usage, ctx, &code)) {
      if (code >= 0) return code;
      continue;
    }
    switch (opt) {
      case O_K:
        if (!parse_int("--k", optarg, 1, &a->k)) return 2;
        break;
      case O_INIT: a->init = optarg; break;
      case O_DEVICE:
        if ((code = ss_cli_device(CMD, optarg, ctx, &a->device)) != 0) return code;
        break;
      case O_THREADS:
        if ((code = ss_cli_threads(CMD, optarg, &a->threads)) != 0) return code;
        break;
      case O_MAXIT:
        if (!parse_int("--max-iter", optarg, 0, &a->max_iter)) return 2;
        break;
      case O_SEED:
        if (!parse_int("--seed", optarg, 0, &a->seed)) return 2;
        break;
      case O_PATCH:
        if (!parse_int("--patch", optarg, 1, &a->patch)) return 2;
        break;
      case O_TOL: {
        char *end;
        a->tol = strtod(optarg, &end);
        if (end == optarg || *end || !(a->tol >= 0.0 && a->tol <= 1.0))
          return ss_cli_usage_error(CMD, "--tol: expected a number in [0, 1], got \"%s\"", optarg);
        break;
      }
      case O_PARAMS: a->params = optarg; break;
      case O_DATASET: a->dataset = optarg; break;
      case O_PATCHES: a->image = optarg; break;
      case 'o': a->out = optarg; break;
      default: return ss_cli_usage_error(CMD, "unknown option");
    }
  }
  if (optind < argc) a->input = argv[optind++];
  if (optind < argc) return ss_cli_usage_error(CMD, "unexpected argument \"%s\"", argv[optind]);
  if (!a->input == !a->image) return ss_cli_usage_error(CMD, "give either INPUT or --patches IMAGE");
  if (!a->out) return ss_cli_usage_error(CMD, "give the output folder with -o DIR");
  return -1;
}

static ss_status make_dir(ss_ctx *ctx, const char *dir) {
  if (mkdir(dir, 0777) == 0 || errno == EEXIST) {
    struct stat sb;
    if (stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) return SS_OK;
    return ss_fail(ctx, SS_ERR_IO, "%s: exists and is not a folder", dir);
  }
  return ss_fail(ctx, SS_ERR_IO, "%s: cannot create the folder: %s", dir, strerror(errno));
}

/* The points: the input matrix, or the patches of the image. */
static ss_status load_points(ss_ctx *ctx, const kmeans_args *a, ss_matrix *m) {
  memset(m, 0, sizeof(*m));
  if (a->input) return ss_matrix_read(ctx, a->input, a->dataset, m);
  float *img;
  int64_t h, w, c;
  SS_TRY(ss_kmeans_image_read(ctx, a->image, &img, &h, &w, &c));
  ss_status st = ss_kmeans_patches(ctx, img, h, w, c, a->patch, &m->data, &m->rows, &m->cols);
  if (st == SS_OK)
    ss_log_info(ctx,
                "kmeans: %s: %" PRId64 " x %" PRId64 " x %" PRId64 " image, %" PRId64 " patches of %" PRId64 " values",
                a->image, h, w, c, m->rows, m->cols);
  free(img);
  return st;
}

/* Options from the parameters, overridden by the command line; an --init FILE is read into *init. */
static ss_status resolve_opts(ss_ctx *ctx, const kmeans_args *a, const ss_matrix *x, ss_kmeans_opts *o,
                              ss_matrix *init) {
  memset(init, 0, sizeof(*init));
  ss_params p;
  ss_params_defaults(&p);
  if (a->params) SS_TRY(ss_params_load_file(ctx, a->params, &p));
  ss_kmeans_opts_from_params(o, &p);
  if (a->init && strcmp(a->init, "kmeanspp") == 0) o->init = SS_KMEANS_INIT_PP;
  else if (a->init && strcmp(a->init, "random") == 0) o->init = SS_KMEANS_INIT_RANDOM;
  else if (a->init) {
    SS_TRY(ss_matrix_read(ctx, a->init, NULL, init));
    if (init->cols != x->cols || (a->k > 0 && init->rows != a->k))
      return ss_fail(ctx, SS_ERR_INPUT,
                     "%s: initial centroids: expected %" PRId64 " x %" PRId64 ", got %" PRId64 " x %" PRId64, a->init,
                     a->k > 0 ? a->k : init->rows, x->cols, init->rows, init->cols);
    o->init_centroids = init->data;
    o->k = init->rows;
  }
  if (a->k > 0) o->k = a->k;
  if (a->max_iter >= 0) o->max_iterations = a->max_iter;
  if (a->tol >= 0.0) o->tol_change_fraction = a->tol;
  if (a->seed >= 0) o->seed = (uint64_t)a->seed;
  return SS_OK;
}

static ss_status write_outputs(ss_ctx *ctx, const char *dir, const ss_kmeans_result *r) {
  char path[OUT_PATH_MAX];
  SS_TRY(make_dir(ctx, dir));
  snprintf(path, sizeof(path), "%s/labels.npy", dir);
  SS_TRY(ss_labels_write(ctx, path, NULL, r->n, r->labels));
  snprintf(path, sizeof(path), "%s/centroids.npy", dir);
  ss_matrix m = {.rows = r->k, .cols = r->d, .data = r->centroids};
  return ss_matrix_write(ctx, path, NULL, &m);
}

static ss_status run_kmeans(ss_ctx *ctx, const kmeans_args *a) {
  ss_matrix x, init;
  SS_TRY(load_points(ctx, a, &x));
  ss_kmeans_opts o;
  ss_backend be = {0};
  ss_kmeans_result r = {0};
  ss_status st = resolve_opts(ctx, a, &x, &o, &init);
  int opened = 0;
  if (st == SS_OK) st = ss_backend_open(ctx, a->device, 0, a->threads, &be);
  if (st == SS_OK) opened = 1;
  if (st == SS_OK) st = ss_kmeans_fit(ctx, &be, x.data, x.rows, x.cols, &o, &r);
  if (st == SS_OK) st = write_outputs(ctx, a->out, &r);
  if (st == SS_OK) {
    printf("iterations: %" PRId64 " (%s)\n", r.n_iterations, r.converged ? "converged" : "iteration cap");
    printf("inertia: %.9g\n", r.final_inertia);
  }
  ss_kmeans_result_free(&r);
  if (opened) ss_backend_close(&be);
  ss_matrix_free(&init);
  ss_matrix_free(&x);
  return st;
}

int ss_cmd_kmeans(int argc, char **argv, ss_ctx *ctx) {
  kmeans_args a;
  int code = parse_args(argc, argv, ctx, &a);
  if (code >= 0) return code;
  return ss_cli_finish(CMD, ctx, run_kmeans(ctx, &a));
}
