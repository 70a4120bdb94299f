/* test_fail_alloc.c — allocation-failure injection (SPIKESTREAM_FAIL_ALLOC, ss_alloc_fault): `sort`
 * of a 10 s simulation with its Nth allocation failing exits 3 with one line and leaves the folder's
 * previous complete output set as it was, with no temporary beside it.
 * Every N from 1 to EVERY_UP_TO is tried, then a stride through the rest so that about STRIDED more
 * runs (the last allocation included) keep the test near a minute on 2 cores; with
 * SS_TEST_FAIL_ALLOC_ALL=1 in the environment every N is tried (a long run: one sort per allocation). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "io/outset.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define PATH_LEN 4096
#define EVERY_UP_TO 100
#define STRIDED 60

static char sim_path[PATH_LEN];

static int group_setup(void **state) {
  (void)state;
  const ss_sim_config c = ss_test_sim_units(10.0, 5, 20, 3);
  return ss_test_simulate(PROBE, 40.0, &c, SS_SIM_FORMAT_NWB, "sim.nwb", sim_path, sizeof(sim_path), NULL);
}

/* Run the sort with SPIKESTREAM_FAIL_ALLOC=value (NULL: unset); exit code, stderr in *err. */
static int sort_with(const char *value, const char *dir, char **err) {
  char args[3 * PATH_LEN];
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --threads 1 --overwrite", sim_path, dir);
  if (value) setenv("SPIKESTREAM_FAIL_ALLOC", value, 1);
  else unsetenv("SPIKESTREAM_FAIL_ALLOC");
  int code = ss_test_run_cli(args, NULL, err);
  unsetenv("SPIKESTREAM_FAIL_ALLOC");
  return code;
}

static int stray_temporaries(void) {
  DIR *d = opendir(ss_test_tmpdir());
  int n = 0;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) n += strncmp(e->d_name, ".fa.", 4) == 0;
  if (d) closedir(d);
  return n;
}

/* The next N to try: every one up to EVERY_UP_TO, then by `stride`, ending on the last; past it, total + 1. */
static long long next_n(long long n, long long total, long long stride) {
  if (n < EVERY_UP_TO || n >= total) return n + 1;
  return n + stride < total ? n + stride : total;
}

static void every_allocation_fails_cleanly(void **state) {
  (void)state;
  char dir[PATH_LEN], manifest[PATH_LEN + 32], value[32];
  ss_test_path(dir, sizeof(dir), "fa");
  snprintf(manifest, sizeof(manifest), "%s/%s", dir, SS_OUTSET_MANIFEST);
  char *err = NULL;
  if (sort_with(NULL, dir, &err) != 0) fail_msg("%s", err);
  free(err);
  char *old = ss_test_slurp(manifest);
  if (sort_with("count", dir, &err) != 0) fail_msg("%s", err);
  long long total = 0;
  const char *p = strstr(err, "spikestream: allocations: ");
  assert_non_null(p);
  total = atoll(p + strlen("spikestream: allocations: "));
  free(err);
  assert_true(total > 0);
  const char *all = getenv("SS_TEST_FAIL_ALLOC_ALL");
  long long stride = total > EVERY_UP_TO ? (total - EVERY_UP_TO + STRIDED - 1) / STRIDED : 1;
  if (all && strcmp(all, "1") == 0) stride = 1;
  int runs = 0;
  for (long long n = 1; n <= total; n = next_n(n, total, stride)) {
    snprintf(value, sizeof(value), "%lld", n);
    int code = sort_with(value, dir, &err);
    int lines = 0;
    for (const char *c = err; *c; c++) lines += *c == '\n';
    if (code != 3 || lines != 1 || !strstr(err, "(injected failure)"))
      fail_msg("allocation %lld of %lld: exit %d, %d lines: %s", n, total, code, lines, err);
    free(err);
    char *now = ss_test_slurp(manifest);
    if (strcmp(now, old) != 0) fail_msg("allocation %lld: the previous output set changed", n);
    free(now);
    if (stray_temporaries() != 0) fail_msg("allocation %lld: a temporary folder was left", n);
    runs++;
  }
  printf("%d injected failures of %lld allocations: each exit 3, one line, the previous set kept\n", runs, total);
  free(old);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(every_allocation_fails_cleanly)};
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
