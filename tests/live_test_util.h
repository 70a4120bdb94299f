/* live_test_util.h — what test_live.c and gpu_test_live.c share: collecting the engine's spikes and
 * ordering them, parsing `live`'s JSON lines and matching them with an offline sort, the command-line
 * fixture (a simulated recording and its sort) and running replay → live (header-only: both programs are
 * single files). */
#ifndef SS_LIVE_TEST_UTIL_H
#define SS_LIVE_TEST_UTIL_H

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stages/live/live.h"
#include "ss_test.h"

typedef struct {
  int64_t n, cap;
  ss_live_spike *s;
} collected;

/* The engine's emit callback: append to the collected list (user). */
static inline ss_status collect(ss_ctx *ctx, void *user, const ss_live_spike *s) {
  (void)ctx;
  collected *c = user;
  if (c->n == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 1024;
    c->s = realloc(c->s, (size_t)c->cap * sizeof(*c->s));
    assert_non_null(c->s);
  }
  c->s[c->n++] = *s;
  return SS_OK;
}

/* qsort order of spikes: time, then channel. */
static inline int cmp_spike(const void *a, const void *b) {
  const ss_live_spike *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (x->channel > y->channel) - (x->channel < y->channel);
}

/* The JSON lines of `live` (its default output format), collected in order. */
static inline void parse_lines(const char *text, collected *c) {
  memset(c, 0, sizeof(*c));
  for (const char *p = text; p && *p;) {
    long long t;
    int unit, channel;
    float amp, lat;
    if (sscanf(p, "{\"t\": %lld, \"unit\": %d, \"amp\": %f, \"channel\": %d, \"latency_us\": %f}", &t, &unit, &amp,
               &channel, &lat) != 5)
      fail_msg("bad line: %.80s", p);
    ss_live_spike s = {.t = t, .unit = unit, .channel = channel, .amp = amp, .latency_us = lat};
    collect(NULL, c, &s);
    p = strchr(p, '\n');
    if (p) p++;
  }
}

/* The same spikes, in the same order: time, unit, channel and amplitude. */
static inline int same_spikes(const collected *a, const collected *b) {
  if (a->n != b->n) return 0;
  for (int64_t i = 0; i < a->n; i++)
    if (a->s[i].t != b->s[i].t || a->s[i].unit != b->s[i].unit || a->s[i].channel != b->s[i].channel ||
        a->s[i].amp != b->s[i].amp)
      return 0;
  return 1;
}

/* The outputs of n command-line runs and their parsed spikes. */
static inline void cli_runs_free(char **out, char **err, collected *got, int n) {
  for (int m = 0; m < n; m++) {
    free(out[m]);
    free(err[m]);
    free(got[m].s);
  }
}

/* A whole dataset of results.h5 / model.h5. */
static inline void *h5_read(hid_t f, const char *path, hid_t type, size_t size, int64_t *n) {
  hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
  assert_true(d >= 0);
  hid_t sp = H5Dget_space(d);
  *n = H5Sget_simple_extent_npoints(sp);
  void *buf = malloc((size_t)(*n > 0 ? *n : 1) * size);
  assert_true(H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  H5Sclose(sp);
  H5Dclose(d);
  return buf;
}

/* An offline sort's spikes (results.h5) and its model's causal − offline time offset (model.h5). */
typedef struct {
  int64_t n;
  int64_t *times;
  int32_t *clu;
  double offset;
} offline_sort;

static inline void offline_sort_read(const char *results, const char *model, offline_sort *o) {
  hid_t f = H5Fopen(results, H5F_ACC_RDONLY, H5P_DEFAULT), mf = H5Fopen(model, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0 && mf >= 0);
  int64_t n2;
  o->times = h5_read(f, "/spikes/time_samples", H5T_NATIVE_INT64, sizeof(int64_t), &o->n);
  o->clu = h5_read(f, "/spikes/cluster", H5T_NATIVE_INT32, sizeof(int32_t), &n2);
  assert_int_equal(o->n, n2);
  o->offset = 0;
  hid_t g = H5Gopen2(mf, "/live", H5P_DEFAULT), at = H5Aopen(g, "time_offset_samples", H5P_DEFAULT);
  assert_true(at >= 0 && H5Aread(at, H5T_NATIVE_DOUBLE, &o->offset) >= 0);
  H5Aclose(at);
  H5Gclose(g);
  H5Fclose(mf);
  H5Fclose(f);
}

static inline void offline_sort_free(offline_sort *o) {
  free(o->times);
  free(o->clu);
}

/* Each offline spike's live twin: the nearest live spike within `tol` samples of its time + the
 * offset. *matched counts the offline spikes that have one, *same those whose twin has their unit. */
static inline void offline_match(const offline_sort *o, const collected *got, double tol, int64_t *matched,
                                 int64_t *same) {
  int64_t m = 0, sm = 0, j = 0;
  for (int64_t i = 0; i < o->n; i++) {
    double t = (double)o->times[i] + o->offset;
    while (j < got->n && (double)got->s[j].t < t - tol) j++;
    int64_t best = -1;
    for (int64_t q = j; q < got->n && (double)got->s[q].t <= t + tol; q++)
      if (best < 0 || fabs((double)got->s[q].t - t) < fabs((double)got->s[best].t - t)) best = q;
    if (best < 0) continue;
    m++;
    sm += got->s[best].unit == o->clu[i];
  }
  *matched = m;
  *same = sm;
}

/* The criterion, over ALL offline spikes: of the offline spikes at samples [t_begin, t_end)
 * (*n_all), *partnered have a live twin (offline_match's rule) and *same a twin with their unit. */
static inline void offline_agreement_all(const offline_sort *o, const collected *got, double tol, int64_t t_begin,
                                         int64_t t_end, int64_t *n_all, int64_t *partnered, int64_t *same) {
  offline_sort part = *o;
  int64_t first = 0;
  while (first < o->n && o->times[first] < t_begin) first++;
  int64_t last = first;
  while (last < o->n && o->times[last] < t_end) last++;
  part.times = o->times + first;
  part.clu = o->clu + first;
  part.n = last - first;
  *n_all = part.n;
  offline_match(&part, got, tol, partnered, same);
}

/* Live spikes with no offline spike within tol samples of their time − the offset (false or extra
 * detections of the causal twin). */
static inline int64_t live_without_partner(const offline_sort *o, const collected *got, double tol) {
  int64_t extra = 0, j = 0;
  for (int64_t i = 0; i < got->n; i++) {
    double t = (double)got->s[i].t - o->offset;
    while (j < o->n && (double)o->times[j] < t - tol) j++;
    extra += !(j < o->n && (double)o->times[j] <= t + tol);
  }
  return extra;
}

/* A CPU backend and an engine on model m with options o (opened, or the test fails). */
static inline void live_open_cpu(ss_ctx *ctx, const ss_live_model *m, const ss_live_opts *o, ss_backend *be,
                                 ss_live_engine **e) {
  assert_int_equal(ss_backend_open(ctx, SS_DEVICE_CPU, 0, 1, be), SS_OK);
  if (ss_live_engine_open(ctx, be, m, o, e) != SS_OK) fail_msg("%s", ss_error_message(ctx));
}

#define LIVE_PATH_LEN 1024

/* The command-line fixture: a simulated flat-binary recording, its offline sort (model.h5 with /live)
 * and a socket path, under the test's directory. */
typedef struct {
  char bin[LIVE_PATH_LEN + 8], dir[LIVE_PATH_LEN], model[LIVE_PATH_LEN + 16], sock[LIVE_PATH_LEN];
} live_fixture;

/* `simulate --duration D --seed S` into NAME_sim.bin, then `sort` it with SOURCE_ARGS into NAME_sort:
 * 0, or -1 after saying why on stderr. */
static inline int live_fixture_make(live_fixture *f, const char *name, double duration, int seed,
                                    const char *source_args) {
  char base[LIVE_PATH_LEN], leaf[256], args[16384], *out = NULL, *err = NULL;
  snprintf(leaf, sizeof(leaf), "%s_sim", name);
  ss_test_path(base, sizeof(base), leaf);
  snprintf(f->bin, sizeof(f->bin), "%s.bin", base);
  snprintf(leaf, sizeof(leaf), "%s_sort", name);
  ss_test_path(f->dir, sizeof(f->dir), leaf);
  snprintf(f->model, sizeof(f->model), "%s/model.h5", f->dir);
  snprintf(leaf, sizeof(leaf), "%s.sock", name);
  ss_test_path(f->sock, sizeof(f->sock), leaf);
  snprintf(args, sizeof(args), "simulate -o '%s' --preset easy --format binary --duration %g --seed %d -q", base,
           duration, seed);
  int code = ss_test_run_cli(args, &out, &err);
  if (code == 0) {
    free(out);
    free(err);
    snprintf(args, sizeof(args), "sort '%s' %s -q -o '%s'", f->bin, source_args, f->dir);
    code = ss_test_run_cli(args, &out, &err);
  }
  if (code != 0) fprintf(stderr, "setup: exit %d: %s\n", code, err);
  free(out);
  free(err);
  return code == 0 ? 0 : -1;
}

/* `live LIVE_ARGS` with its stdout and stderr, while `replay REPLAY_ARGS` (if not NULL) sends; outputs
 * in TAG.out, TAG.err, TAG.rc and TAG_replay.err; returns live's exit code. */
static inline int live_cli_run(const char *tag, const char *replay_args, const char *live_args, char **out,
                               char **err) {
  char out_path[LIVE_PATH_LEN], err_path[LIVE_PATH_LEN], rep_path[LIVE_PATH_LEN], rc_path[LIVE_PATH_LEN], leaf[256];
  char *cmd = malloc(65536);
  assert_non_null(cmd);
  snprintf(leaf, sizeof(leaf), "%s.out", tag);
  ss_test_path(out_path, sizeof(out_path), leaf);
  snprintf(leaf, sizeof(leaf), "%s.err", tag);
  ss_test_path(err_path, sizeof(err_path), leaf);
  snprintf(leaf, sizeof(leaf), "%s_replay.err", tag);
  ss_test_path(rep_path, sizeof(rep_path), leaf);
  snprintf(leaf, sizeof(leaf), "%s.rc", tag);
  ss_test_path(rc_path, sizeof(rc_path), leaf);
  if (replay_args)
    snprintf(cmd, 65536, "'%s' replay %s >/dev/null 2>'%s' & '%s' live %s >'%s' 2>'%s' </dev/null; echo $? >'%s'; wait",
             SS_CLI_PATH, replay_args, rep_path, SS_CLI_PATH, live_args, out_path, err_path, rc_path);
  else
    snprintf(cmd, 65536, "'%s' live %s >'%s' 2>'%s'; echo $? >'%s'", SS_CLI_PATH, live_args, out_path, err_path,
             rc_path);
  if (system(cmd) == -1) fail_msg("cannot run %s", cmd);
  free(cmd);
  *out = ss_test_slurp(out_path);
  *err = ss_test_slurp(err_path);
  char *rc = ss_test_slurp(rc_path);
  int code = atoi(rc);
  free(rc);
  return code;
}

#endif
