/* test_full_disk.c — the HDF5 writers outside the output sets on a full disk (simulated with
 * RLIMIT_FSIZE): `simulate` (the NWB writer, written in place) and `knn -o FILE.h5` (built in memory)
 * exit 1 with one line naming the file, never with a signal, and leave neither file nor temporary. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ss_test.h"

#define PATH_LEN 4096
#define ARGS_LEN (4 * PATH_LEN)

static long file_size(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

/* Entries of the temporary directory whose name starts with `prefix`. */
static int count_prefixed(const char *prefix) {
  DIR *d = opendir(ss_test_tmpdir());
  int n = 0;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d))
    n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return n;
}

/* args (with %s for the output path) succeed without a limit; then, for each limit given as bytes
 * short of the full size (or, when below 1, as a fraction of it), the write fails cleanly. */
static void fails_cleanly(const char *fmt, const char *name, const double *short_of, int n_limits) {
  char out[PATH_LEN], args[ARGS_LEN], prefix[256];
  ss_test_path(out, sizeof(out), name);
  snprintf(args, sizeof(args), fmt, out);
  snprintf(prefix, sizeof(prefix), ".%s.", name);
  char *err = NULL;
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  const long full = file_size(out);
  assert_true(full > 0);
  remove(out);
  for (int i = 0; i < n_limits; i++) {
    const long limit = short_of[i] < 1 ? (long)(short_of[i] * (double)full) : full - (long)short_of[i];
    int code = ss_test_run_limited(args, NULL, limit, &err);
    int lines = 0;
    for (const char *c = err; *c; c++) lines += *c == '\n';
    if (code != 1 || lines != 1 || !strstr(err, out))
      fail_msg("%s, limit %ld of %ld bytes: exit %d, %d lines: %s", name, limit, full, code, lines, err);
    free(err);
    if (file_size(out) >= 0) fail_msg("%s, limit %ld bytes: the file was left", name, limit);
    if (count_prefixed(prefix) != 0) fail_msg("%s, limit %ld bytes: a temporary was left", name, limit);
  }
}

/* The NWB writer fails in an append (early limits) or in the final flush and close (the last ones). */
static void simulate_nwb(void **state) {
  (void)state;
  static const double limits[] = {0.001, 0.3, 0.9, 20000, 2000, 200};
  fails_cleanly("simulate -o '%s' --duration 2 --units 5 -q", "full.nwb", limits, 6);
}

static void knn_h5(void **state) {
  (void)state;
  char table[PATH_LEN], args[ARGS_LEN + 64], *err = NULL;
  ss_test_path(table, sizeof(table), "knn.csv");
  snprintf(args, sizeof(args), "knn --generate 500 800 3 6 -o '%s' -q", table);
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  static const double limits[] = {0.01, 0.5, 100};
  snprintf(args, sizeof(args), "knn '%s' -o '%%s' -q", table);
  fails_cleanly(args, "full.h5", limits, 3);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(simulate_nwb), cmocka_unit_test(knn_h5)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
