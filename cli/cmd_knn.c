/* cmd_knn.c — `spikestream knn`: classify points by their k nearest neighbours (CSV table or
 * train/labels/queries matrices), cross-validate, or generate a random table. */
#include <errno.h>
#include <hdf5.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/atomic_file.h"
#include "io/h5_util.h"
#include "io/matrix.h"
#include "io/npy.h"
#include "params/params.h"
#include "cli/cli.h"
#include "stages/knn/knn.h"
#include "core/log.h"
#include "core/parse.h"

#define KNN_GENERATE_ARGS 4
#define KNN_PATH_MAX 4096

static const char usage[] =
    "usage: spikestream knn DATA.csv [options]\n"
    "       spikestream knn --train X --labels Y --queries Q [options]\n"
    "       spikestream knn --generate N_TRAIN N_NEW CLASSES DIM [-o FILE.csv] [--seed S]\n\n"
    "Classify points by a majority vote of their k nearest neighbours (squared L2; a tie between\n"
    "classes goes to the class of the nearest neighbour among them). Neighbours are identical on\n"
    "every device and strategy (docs/knn.md).\n\n"
    "inputs:\n"
    "  DATA.csv                 first line numels,newels,classes,dim; then one row per point:\n"
    "                           dim coordinates and a class in [0, classes), or -1 = to classify\n"
    "  --train FILE[:DATASET]   reference points (.npy, .h5/.hdf5, .csv/.txt matrix)\n"
    "  --labels FILE[:DATASET]  their classes (integers)\n"
    "  --queries FILE[:DATASET] points to classify\n\n"
    "options:\n"
    "  -o, --output FILE        .csv: the table with every class filled in (header newels = 0);\n"
    "                           .npy: the labels, plus FILE's stem + .indices.npy (int64) and\n"
    "                           .distances.npy (float32, squared L2); .h5: datasets labels,\n"
    "                           indices, distances. Default: the CSV table (or labels) on stdout\n"
    "  -k, --k K                neighbours per query (default knn.k)\n"
    "      --device D           auto|cpu|cuda (default auto)\n"
    "      --strategy S         GPU k-selection: auto|warp (kmin, bitonic: aliases of warp;\n"
    "                           default knn.strategy)\n"
    "      --incremental        classify in order; each classified point joins the references\n"
    "      --cv FOLDS           print the FOLDS-fold cross-validated accuracy of the labelled points\n"
    "      --generate N_TRAIN N_NEW CLASSES DIM\n"
    "                           write a random table: CLASSES Gaussian blobs in [-100, 100]^DIM\n"
    "      --seed S             seed of --generate and --cv (default: the parameter seed)\n"
    "      --params FILE        parameter file (knn.k, knn.strategy, knn.query_tile, knn.ref_tile)\n"
    "      --threads N          CPU threads, 1 to 1024 (default: all)\n" SS_CLI_COMMON_HELP;

typedef struct {
  const char *data, *train, *labels, *queries, *output, *params, *k, *strategy, *seed;
  const char *generate[KNN_GENERATE_ARGS];
  ss_device_kind device;
  int incremental, threads;
  int64_t cv;
} knn_cli;

typedef struct {
  int64_t n_ref, n_query, d;
  float *ref, *query; /* owned */
  int32_t *ref_labels;
  ss_knn_table table;  /* CSV input: the table the answer is written back into */
  int64_t *query_rows; /* CSV input: table row of each query */
} knn_data;

/* Returns -1 to continue, else an exit code. */
static int parse_args(int argc, char **argv, ss_ctx *ctx, knn_cli *c) {
  static const struct option longopts[] = {SS_CLI_COMMON_LONGOPTS,
                                           {"output", required_argument, NULL, 'o'},
                                           {"k", required_argument, NULL, 'k'},
                                           {"device", required_argument, NULL, 0x2001},
                                           {"strategy", required_argument, NULL, 0x2002},
                                           {"incremental", no_argument, NULL, 0x2003},
                                           {"cv", required_argument, NULL, 0x2004},
                                           {"generate", required_argument, NULL, 0x2005},
                                           {"seed", required_argument, NULL, 0x2006},
                                           {"train", required_argument, NULL, 0x2007},
                                           {"labels", required_argument, NULL, 0x2008},
                                           {"queries", required_argument, NULL, 0x2009},
                                           {"params", required_argument, NULL, 0x200a},
                                           {"threads", required_argument, NULL, 0x200b},
                                           {0, 0, 0, 0}};
  int opt, code;
  memset(c, 0, sizeof(*c));
  while ((opt = getopt_long(argc, argv, SS_CLI_COMMON_SHORTOPTS "o:k:", longopts, NULL)) != -1) {
    if (ss_cli_common_option(opt, usage, ctx, &code)) {
      if (code >= 0) return code;
      continue;
    }
    switch (opt) {
      case 'o': c->output = optarg; break;
      case 'k': c->k = optarg; break;
      case 0x2001:
        if ((code = ss_cli_device("knn", optarg, ctx, &c->device)) != 0) return code;
        break;
      case 0x2002: c->strategy = optarg; break;
      case 0x2003: c->incremental = 1; break;
      case 0x2004:
        if ((code = ss_cli_integer("knn", "cv", optarg, 2, INT64_MAX, &c->cv)) != 0) return code;
        break;
      case 0x2005:
        /* --generate takes four values: the option's own and the next three arguments */
        c->generate[0] = optarg;
        for (int i = 1; i < KNN_GENERATE_ARGS; i++) {
          if (optind >= argc) return ss_cli_usage_error("knn", "--generate: expected N_TRAIN N_NEW CLASSES DIM");
          c->generate[i] = argv[optind++];
        }
        break;
      case 0x2006: c->seed = optarg; break;
      case 0x2007: c->train = optarg; break;
      case 0x2008: c->labels = optarg; break;
      case 0x2009: c->queries = optarg; break;
      case 0x200a: c->params = optarg; break;
      case 0x200b:
        if ((code = ss_cli_threads("knn", optarg, &c->threads)) != 0) return code;
        break;
      default: return ss_cli_usage_error("knn", "unknown option");
    }
  }
  if (optind < argc) c->data = argv[optind++];
  if (optind < argc) return ss_cli_usage_error("knn", "unexpected argument \"%s\"", argv[optind]);
  int matrices = c->train || c->labels || c->queries;
  if (c->generate[0] && (c->data || matrices || c->cv || c->incremental))
    return ss_cli_usage_error("knn", "--generate writes a table: give no input, --cv or --incremental with it");
  if (!c->generate[0] && !c->data && !matrices)
    return ss_cli_usage_error("knn", "give DATA.csv, or --train, --labels and --queries");
  if (c->data && matrices) return ss_cli_usage_error("knn", "give DATA.csv or --train/--labels/--queries, not both");
  if (matrices && (!c->train || !c->labels || (!c->queries && !c->cv)))
    return ss_cli_usage_error("knn", "--train and --labels are needed, and --queries unless --cv");
  return -1;
}

static ss_status load_params(ss_ctx *ctx, const knn_cli *c, ss_params *p) {
  ss_params_defaults(p);
  if (c->params) SS_TRY(ss_params_load_file(ctx, c->params, p));
  if (c->k) SS_TRY(ss_params_set_named(ctx, p, "knn.k", c->k, "--k"));
  if (c->strategy) SS_TRY(ss_params_set_named(ctx, p, "knn.strategy", c->strategy, "--strategy"));
  if (c->seed) SS_TRY(ss_params_set_named(ctx, p, "seed", c->seed, "--seed"));
  return SS_OK;
}

static ss_status generate(ss_ctx *ctx, const knn_cli *c, const ss_params *p) {
  static const char *const names[KNN_GENERATE_ARGS] = {"N_TRAIN", "N_NEW", "CLASSES", "DIM"};
  const int64_t lo[KNN_GENERATE_ARGS] = {1, 0, 1, 1};
  const int64_t hi[KNN_GENERATE_ARGS] = {SS_KNN_MAX_POINTS, SS_KNN_MAX_POINTS, SS_KNN_MAX_CLASSES, SS_KNN_MAX_DIM};
  int64_t a[KNN_GENERATE_ARGS];
  for (int i = 0; i < KNN_GENERATE_ARGS; i++)
    if (ss_parse_size(ctx, c->generate[i], lo[i], hi[i], &a[i]) != SS_OK) {
      ss_ctx_prefix(ctx, "--generate: %s", names[i]);
      ctx->status = SS_ERR_USAGE; /* a command-line value */
      return SS_ERR_USAGE;
    }
  ss_knn_table t;
  SS_TRY(ss_knn_generate(ctx, a[0], a[1], a[2], a[3], (uint64_t)p->seed, &t));
  ss_status st = ss_knn_csv_write(ctx, c->output, &t);
  ss_knn_table_free(&t);
  return st;
}

/* "file.h5:/group/data" → path "file.h5", dataset "/group/data" (only for HDF5 names). */
static void split_dataset(const char *spec, char *path, size_t len, const char **dataset) {
  snprintf(path, len, "%s", spec);
  *dataset = NULL;
  char *colon = strrchr(path, ':');
  if (!colon) return;
  *colon = '\0';
  const char *dot = strrchr(path, '.');
  if (dot && (!strcasecmp(dot, ".h5") || !strcasecmp(dot, ".hdf5"))) *dataset = colon + 1;
  else *colon = ':';
}

static ss_status read_matrix(ss_ctx *ctx, const char *spec, ss_matrix *m) {
  char path[KNN_PATH_MAX];
  const char *ds;
  split_dataset(spec, path, sizeof(path), &ds);
  return ss_matrix_read(ctx, path, ds, m);
}

static ss_status load_matrices(ss_ctx *ctx, const knn_cli *c, knn_data *dd) {
  ss_matrix train = {0}, q = {0};
  int64_t nl = 0;
  char path[KNN_PATH_MAX];
  const char *ds;
  SS_TRY(read_matrix(ctx, c->train, &train));
  dd->ref = train.data, dd->n_ref = train.rows, dd->d = train.cols;
  split_dataset(c->labels, path, sizeof(path), &ds);
  SS_TRY(ss_labels_read(ctx, path, ds, &nl, &dd->ref_labels));
  if (nl != dd->n_ref)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %" PRId64 " labels for the %" PRId64 " points of %s", c->labels, nl,
                   dd->n_ref, c->train);
  if (!c->queries) return SS_OK;
  SS_TRY(read_matrix(ctx, c->queries, &q));
  dd->query = q.data, dd->n_query = q.rows;
  if (q.cols != dd->d)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: %" PRId64 " columns, expected %" PRId64 " like %s", c->queries, q.cols,
                   dd->d, c->train);
  return SS_OK;
}

/* Split a table into references (labelled rows) and queries (class −1), in row order. */
static ss_status load_table(ss_ctx *ctx, const char *path, knn_data *dd) {
  ss_knn_table *t = &dd->table;
  SS_TRY(ss_knn_csv_read(ctx, path, t));
  int64_t d = t->dim;
  dd->d = d;
  SS_TRY(SS_ALLOC(ctx, dd->ref, (size_t)(t->n_labelled * d + 1), "KNN references"));
  SS_TRY(SS_ALLOC(ctx, dd->ref_labels, (size_t)(t->n_labelled + 1), "KNN reference classes"));
  SS_TRY(SS_ALLOC(ctx, dd->query, (size_t)(t->n_new * d + 1), "KNN queries"));
  SS_TRY(SS_ALLOC(ctx, dd->query_rows, (size_t)(t->n_new + 1), "KNN query rows"));
  for (int64_t i = 0; i < t->n_points; i++) {
    if (t->label[i] >= 0) {
      memcpy(dd->ref + dd->n_ref * d, t->x + i * d, sizeof(float) * (size_t)d);
      dd->ref_labels[dd->n_ref++] = t->label[i];
    } else {
      memcpy(dd->query + dd->n_query * d, t->x + i * d, sizeof(float) * (size_t)d);
      dd->query_rows[dd->n_query++] = i;
    }
  }
  if (dd->n_ref == 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: no labelled points (every class is -1)", path);
  return SS_OK;
}

static void data_free(knn_data *dd) {
  free(dd->ref);
  free(dd->query);
  free(dd->ref_labels);
  free(dd->query_rows);
  ss_knn_table_free(&dd->table);
}

static int has_ext(const char *path, const char *ext) {
  const char *dot = path ? strrchr(path, '.') : NULL;
  return dot && !strcasecmp(dot, ext);
}

/* path "out.npy" → "out" + suffix */
static void sibling(char *buf, size_t len, const char *path, const char *suffix) {
  const char *dot = strrchr(path, '.');
  snprintf(buf, len, "%.*s%s", (int)(dot - path), path, suffix);
}

static ss_status write_npy(ss_ctx *ctx, const char *path, int64_t m, int64_t k, const int32_t *labels,
                           const int64_t *idx, const float *dist) {
  char buf[KNN_PATH_MAX];
  SS_TRY(ss_labels_write(ctx, path, NULL, m, labels));
  ss_array a = {.dtype = SS_DT_I64, .ndim = 2, .shape = {m, k}, .data = (void *)idx};
  sibling(buf, sizeof(buf), path, ".indices.npy");
  SS_TRY(ss_npy_write(ctx, buf, &a));
  ss_matrix dm = {.rows = m, .cols = k, .data = (float *)dist};
  sibling(buf, sizeof(buf), path, ".distances.npy");
  return ss_matrix_write(ctx, buf, NULL, &dm);
}

static int h5_put(hid_t file, const char *name, hid_t type, int rank, const hsize_t *dims, const void *data) {
  hid_t space = H5Screate_simple(rank, dims, NULL), ds = -1;
  int ok = space >= 0 && (ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
           H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
  if (ds >= 0) H5Dclose(ds);
  if (space >= 0) H5Sclose(space);
  return ok;
}

/* Built in memory and written out in one go (ss_h5_mem_create): a full disk then fails a plain
 * write, never an H5Fclose that would leave the library to crash at exit. */
static ss_status write_h5(ss_ctx *ctx, const char *path, int64_t m, int64_t k, const int32_t *labels,
                          const int64_t *idx, const float *dist) {
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 0));
  hid_t f = ss_h5_mem_create(ctx, &af, path);
  if (f < 0) return SS_ERR_IO;
  hsize_t dl[1] = {(hsize_t)m}, dm[2] = {(hsize_t)m, (hsize_t)k};
  int ok = h5_put(f, "labels", H5T_NATIVE_INT32, 1, dl, labels) && h5_put(f, "indices", H5T_NATIVE_INT64, 2, dm, idx) &&
           h5_put(f, "distances", H5T_NATIVE_FLOAT, 2, dm, dist);
  if (!ok) {
    ss_h5_mem_abort(f, &af);
    return ss_fail(ctx, SS_ERR_IO, "%s: writing the datasets labels, indices, distances failed", path);
  }
  return ss_h5_mem_commit(ctx, f, &af);
}

static ss_status write_result(ss_ctx *ctx, const knn_cli *c, knn_data *dd, int64_t k, const int32_t *labels,
                              const int64_t *idx, const double *dist) {
  int64_t m = dd->n_query;
  if (has_ext(c->output, ".npy") || has_ext(c->output, ".h5") || has_ext(c->output, ".hdf5")) {
    float *df;
    SS_TRY(SS_ALLOC(ctx, df, (size_t)(m * k + 1), "KNN distances"));
    for (int64_t i = 0; i < m * k; i++) df[i] = (float)dist[i];
    ss_status st = has_ext(c->output, ".npy") ? write_npy(ctx, c->output, m, k, labels, idx, df)
                                              : write_h5(ctx, c->output, m, k, labels, idx, df);
    free(df);
    return st;
  }
  if (c->output && !has_ext(c->output, ".csv") && !has_ext(c->output, ".txt"))
    return ss_fail(ctx, SS_ERR_USAGE, "%s: unknown output type (expected .csv, .npy, .h5 or .hdf5)", c->output);
  if (!c->data) { /* matrix input: one label per line */
    if (c->output) return ss_labels_write(ctx, c->output, NULL, m, labels);
    for (int64_t i = 0; i < m; i++) printf("%d\n", labels[i]);
    return SS_OK;
  }
  ss_knn_table *t = &dd->table;
  for (int64_t i = 0; i < m; i++) t->label[dd->query_rows[i]] = labels[i];
  t->n_labelled = t->n_points, t->n_new = 0;
  return ss_knn_csv_write(ctx, c->output, t);
}

static ss_status classify(ss_ctx *ctx, const knn_cli *c, const ss_params *p, const ss_backend *be, knn_data *dd) {
  ss_knn_opts o;
  ss_knn_opts_from_params(&o, p);
  if (c->cv) {
    int64_t correct;
    SS_TRY(ss_knn_cross_validate(ctx, be, &o, dd->ref, dd->ref_labels, dd->n_ref, dd->d, c->cv, (uint64_t)p->seed,
                                 &correct));
    printf("cross-validated accuracy (%" PRId64 " folds, k = %" PRId64 "): %.4f (%" PRId64 " of %" PRId64 ")\n", c->cv,
           o.k, (double)correct / (double)dd->n_ref, correct, dd->n_ref);
    return SS_OK;
  }
  int64_t m = dd->n_query, k = o.k;
  int32_t *labels = NULL;
  int64_t *idx = NULL;
  double *dist = NULL;
  ss_knn_index *ix = NULL;
  ss_knn_stats stats;
  ss_status st = SS_ALLOC(ctx, labels, (size_t)(m + 1), "KNN labels");
  if (st == SS_OK) st = SS_ALLOC(ctx, idx, (size_t)(m * k + 1), "KNN neighbour indices");
  if (st == SS_OK) st = SS_ALLOC(ctx, dist, (size_t)(m * k + 1), "KNN neighbour distances");
  if (st == SS_OK) st = ss_knn_index_create(ctx, be, dd->ref, dd->n_ref, dd->d, &ix);
  double t0 = ss_now();
  if (st == SS_OK)
    st = ss_knn_classify(ctx, ix, dd->ref_labels, &o, dd->query, m, c->incremental, labels, idx, dist, &stats);
  if (st == SS_OK) {
    ss_log_info(ctx,
                "knn: %" PRId64 " queries, %" PRId64 " references, d = %" PRId64 ", k = %" PRId64 "%s on %s "
                "(%s selection): %.3f s, %" PRId64 " exact fallbacks",
                m, dd->n_ref, dd->d, k, c->incremental ? " (incremental)" : "", ss_device_kind_name(be->kind),
                be->kind == SS_DEVICE_CUDA ? ss_knn_strategy_name(stats.strategy) : "heap", ss_now() - t0,
                stats.fallbacks);
    st = write_result(ctx, c, dd, k, labels, idx, dist);
  }
  ss_knn_index_free(ix);
  free(labels);
  free(idx);
  free(dist);
  return st;
}

int ss_cmd_knn(int argc, char **argv, ss_ctx *ctx) {
  knn_cli c;
  int code = parse_args(argc, argv, ctx, &c);
  if (code >= 0) return code;
  ss_params p;
  ss_status st = load_params(ctx, &c, &p);
  if (st != SS_OK) return ss_cli_finish("knn", ctx, st);
  if (c.generate[0]) return ss_cli_finish("knn", ctx, generate(ctx, &c, &p));
  knn_data dd;
  memset(&dd, 0, sizeof(dd));
  st = c.data ? load_table(ctx, c.data, &dd) : load_matrices(ctx, &c, &dd);
  ss_backend be;
  int opened = 0;
  if (st == SS_OK) st = ss_backend_open(ctx, c.device, 0, c.threads, &be);
  if (st == SS_OK) {
    opened = 1;
    st = classify(ctx, &c, &p, &be, &dd);
  }
  if (opened) ss_backend_close(&be);
  data_free(&dd);
  return ss_cli_finish("knn", ctx, st);
}
