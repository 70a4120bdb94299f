/* ss_test.c — shared test helpers (see ss_test.h). */
#define _GNU_SOURCE /* putenv, setenv */
#include "ss_test.h"

#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

void ss_test_require_gpu(void) {
  char why[256] = "";
  if (ss_backend_gpu_count(why, sizeof(why)) > 0) return;
  printf("skipped: no CUDA device (%s)\n", why);
  fflush(stdout);
  exit(SS_TEST_SKIP);
}

int ss_test_backends_setup(void **state) {
  static ss_test_backends b;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 0, &b.cpu) != SS_OK) return -1;
  if (ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 0, &b.gpu) != SS_OK) return -1;
  *state = &b;
  return 0;
}

int ss_test_backends_teardown(void **state) {
  ss_test_backends *b = *state;
  ss_backend_close(&b->cpu);
  ss_backend_close(&b->gpu);
  return 0;
}

static char tmpdir[256];

static void remove_tmpdir(void) {
  if (!tmpdir[0]) return;
  char cmd[512];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

const char *ss_test_tmpdir(void) {
  if (!tmpdir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/sstest-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
      perror("mkdtemp");
      exit(1);
    }
    atexit(remove_tmpdir);
  }
  return tmpdir;
}

void ss_test_path(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", ss_test_tmpdir(), name); }

const char *ss_test_write_file(const char *name, const char *text) {
  static char paths[8][512];
  static int slot;
  char *path = paths[slot++ % 8];
  ss_test_path(path, 512, name);
  FILE *f = fopen(path, "wb");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    perror(path);
    exit(1);
  }
  return path;
}

/* The whole file, plus a NUL byte not counted in *bytes; NULL when it cannot be read. */
static char *read_whole(const char *path, size_t *bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
  size_t got = buf ? fread(buf, 1, (size_t)n, f) : 0;
  fclose(f);
  if (buf) buf[got] = '\0';
  if (buf && got != (size_t)n) free(buf), buf = NULL;
  if (buf) *bytes = got;
  return buf;
}

char *ss_test_slurp(const char *path) {
  size_t n;
  char *buf = read_whole(path, &n);
  return buf ? buf : strdup("");
}

int16_t *ss_test_read_rows(const char *path, int n_channels, int64_t *n_rows) {
  size_t n;
  char *buf = read_whole(path, &n);
  if (buf) *n_rows = (int64_t)(n / (sizeof(int16_t) * (size_t)n_channels));
  else fprintf(stderr, "%s: cannot read\n", path);
  return (int16_t *)buf;
}

int ss_test_run_cli(const char *args, char **out, char **err) {
  char out_path[512], err_path[512], cmd[4096];
  ss_test_path(out_path, sizeof(out_path), "cli.out");
  ss_test_path(err_path, sizeof(err_path), "cli.err");
  snprintf(cmd, sizeof(cmd), "'%s' %s >'%s' 2>'%s' </dev/null", SS_CLI_PATH, args, out_path, err_path);
  int rc = system(cmd);
  if (out) *out = ss_test_slurp(out_path);
  if (err) *err = ss_test_slurp(err_path);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

static void limit_file_size(long fsize) {
  const char *asan = getenv("ASAN_OPTIONS");
  char opts[2048];
  snprintf(opts, sizeof(opts), "%s%sdetect_leaks=0", asan ? asan : "", asan && *asan ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
  signal(SIGXFSZ, SIG_IGN);
  struct rlimit rl = {(rlim_t)fsize, RLIM_INFINITY};
  setrlimit(RLIMIT_FSIZE, &rl);
}

int ss_test_run_limited(const char *args, const char *env, long fsize, char **err) {
  char err_path[512], cmd[24576];
  ss_test_path(err_path, sizeof(err_path), "run.err");
  snprintf(cmd, sizeof(cmd), "exec '%s' %s >/dev/null 2>'%s' </dev/null", SS_CLI_PATH, args, err_path);
  pid_t pid = fork();
  if (pid == 0) {
    if (env) putenv((char *)env);
    if (fsize > 0) limit_file_size(fsize);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (err) *err = ss_test_slurp(err_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void ss_test_ctx(ss_ctx *ctx) {
  ss_ctx_init(ctx);
  ctx->quiet = 1;
  ctx->log_level = SS_LOG_WARN;
}
