/* live_train.c — `live --train-seconds` (live_train.h): the working directory and train.bin, `sort`
 * run in a background thread on the buffered rows, and loading the model it wrote. */
#include "drivers/live_train.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic_file.h"
#include "core/log.h"
#include "drivers/sort.h"

#define SS_LIVE_TRAIN_PATH_MAX 4096
#define SS_LIVE_TRAIN_TEMPLATE "spikestream-live-XXXXXX"
#define SS_LIVE_TRAIN_FILE "train.bin"
#define SS_LIVE_TRAIN_SORT_DIR "sort"

struct ss_live_trainer {
  ss_live_train_opts o;
  char dir[SS_LIVE_TRAIN_PATH_MAX], bin[SS_LIVE_TRAIN_PATH_MAX + 16], out[SS_LIVE_TRAIN_PATH_MAX + 16],
      model[SS_LIVE_TRAIN_PATH_MAX + 32];
  int temporary; /* the directory is ours to remove */
  FILE *f;
  int64_t rows;
  /* the background fit */
  pthread_t thread;
  int started;
  pthread_mutex_t mu;
  int done;
  ss_ctx fit_ctx; /* its own context: the failure is reported by ss_live_train_finish */
  ss_status fit_st;
  double fit_s;
  int64_t n_units;
};

/* Remove a directory tree (the sort's outputs nest two levels: sort/phy/). */
static void remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char child[SS_LIVE_TRAIN_PATH_MAX + 256];
      snprintf(child, sizeof(child), "%s/%s", path, e->d_name);
      struct stat sb;
      if (lstat(child, &sb) == 0 && S_ISDIR(sb.st_mode)) remove_tree(child);
      else unlink(child);
    }
    closedir(d);
  }
  rmdir(path);
}

static ss_status make_dir(ss_ctx *ctx, ss_live_trainer *t) {
  if (t->o.dir) {
    if (strlen(t->o.dir) >= sizeof(t->dir))
      return ss_fail(ctx, SS_ERR_INPUT, "--train-dir: path longer than %zu bytes", sizeof(t->dir) - 1);
    snprintf(t->dir, sizeof(t->dir), "%s", t->o.dir);
    return ss_make_dir(ctx, t->dir);
  }
  const char *tmp = getenv("TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  snprintf(t->dir, sizeof(t->dir), "%s/" SS_LIVE_TRAIN_TEMPLATE, tmp);
  if (!mkdtemp(t->dir))
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot create a temporary directory: %s", t->dir, strerror(errno));
  t->temporary = 1;
  return SS_OK;
}

ss_status ss_live_train_begin(ss_ctx *ctx, const ss_live_train_opts *o, ss_live_trainer **out) {
  *out = NULL;
  ss_live_trainer *t = NULL;
  SS_TRY(SS_CALLOC(ctx, t, 1, "live trainer"));
  t->o = *o;
  t->o.params.sort.live_model = 1;
  pthread_mutex_init(&t->mu, NULL);
  ss_status st = make_dir(ctx, t);
  if (st == SS_OK) {
    snprintf(t->bin, sizeof(t->bin), "%s/" SS_LIVE_TRAIN_FILE, t->dir);
    snprintf(t->out, sizeof(t->out), "%s/" SS_LIVE_TRAIN_SORT_DIR, t->dir);
    snprintf(t->model, sizeof(t->model), "%s/model.h5", t->out);
    t->f = fopen(t->bin, "wb");
    if (!t->f) st = ss_fail(ctx, SS_ERR_IO, "%s: cannot open for writing: %s", t->bin, strerror(errno));
  }
  if (st != SS_OK) {
    ss_live_train_close(t);
    return st;
  }
  *out = t;
  return SS_OK;
}

ss_status ss_live_train_append(ss_ctx *ctx, ss_live_trainer *t, const int16_t *rows, int64_t n) {
  size_t count = (size_t)n * (size_t)t->o.n_channels;
  if (fwrite(rows, sizeof(int16_t), count, t->f) != count)
    return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", t->bin, strerror(errno));
  t->rows += n;
  return SS_OK;
}

static void *fit_main(void *arg) {
  ss_live_trainer *t = arg;
  double t0 = ss_now();
  ss_sort_opts so;
  ss_sort_opts_defaults(&so);
  so.spec.path = t->bin;
  so.spec.format = SS_FORMAT_BINARY;
  so.spec.n_channels = t->o.n_channels;
  so.spec.rate_hz = t->o.rate_hz;
  so.spec.uv_per_step = t->o.uv_per_step > 0 ? t->o.uv_per_step : 0;
  so.probe_path = t->o.probe_path;
  so.out_dir = t->out;
  so.params = t->o.params;
  so.device = t->o.device;
  so.merge = so.params.merge.enabled;
  ss_sort_summary sum;
  ss_status st = ss_sort_run(&t->fit_ctx, &so, &sum);
  pthread_mutex_lock(&t->mu);
  t->fit_st = st;
  t->fit_s = ss_now() - t0;
  if (st == SS_OK) t->n_units = sum.n_clusters;
  t->done = 1;
  pthread_mutex_unlock(&t->mu);
  if (st == SS_OK) ss_sort_summary_free(&sum);
  return NULL;
}

ss_status ss_live_train_start(ss_ctx *ctx, ss_live_trainer *t) {
  FILE *f = t->f;
  t->f = NULL;
  if (fclose(f) != 0) return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", t->bin, strerror(errno));
  t->fit_ctx = *ctx;
  ss_ctx_clear(&t->fit_ctx);
  t->fit_ctx.progress_tty = 0; /* no progress bar between the live counter lines */
  if (pthread_create(&t->thread, NULL, fit_main, t) != 0)
    return ss_fail(ctx, SS_ERR_INTERNAL, "live: cannot start the thread that fits the model");
  t->started = 1;
  return SS_OK;
}

int ss_live_train_done(ss_live_trainer *t) {
  pthread_mutex_lock(&t->mu);
  int done = t->done;
  pthread_mutex_unlock(&t->mu);
  return done;
}

ss_status ss_live_train_finish(ss_ctx *ctx, ss_live_trainer *t, ss_live_model *m, double *fit_s, int64_t *n_units) {
  if (!t->started) return ss_fail(ctx, SS_ERR_INTERNAL, "live: the model fit was not started");
  pthread_join(t->thread, NULL);
  t->started = 0;
  *fit_s = t->fit_s;
  *n_units = t->n_units;
  if (t->fit_st != SS_OK)
    return ss_fail(ctx, t->fit_st, "--train-seconds: fitting the model on %s: %s", t->bin,
                   ss_error_message(&t->fit_ctx));
  return ss_live_model_load(ctx, t->model, m);
}

const char *ss_live_train_model_path(const ss_live_trainer *t) { return t->model; }

void ss_live_train_close(ss_live_trainer *t) {
  if (!t) return;
  if (t->started) pthread_join(t->thread, NULL);
  if (t->f) fclose(t->f);
  if (t->temporary) remove_tree(t->dir);
  pthread_mutex_destroy(&t->mu);
  free(t);
}
