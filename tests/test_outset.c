/* test_outset.c — output folders appear complete or not at all: a write failure on a full disk
 * (simulated with RLIMIT_FSIZE) exits cleanly and leaves no set; a sort or detect killed at every
 * output step (SPIKESTREAM_TEST_KILL_AT) leaves the old complete set; readers refuse a folder whose
 * manifest does not match its files; an earlier set is replaced only with --overwrite, and wholly; a
 * folder with other files never; unusable output folders and missing inputs are refused at once. */
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

#include "build_config.h"
#include "io/outset.h"
#include "ss_test.h"
#include "ss_test_sim.h"

#define PROBE SS_SOURCE_DIR "/params/probes/two_column_32.json"
#define PATH_LEN 4096
#define ARGS_LEN (4 * PATH_LEN)

static char sim_path[PATH_LEN], old_path[PATH_LEN];

/* Two recordings: the outputs of the second (other spikes, other KlustaKwik names) are the "old" set. */
static int group_setup(void **state) {
  (void)state;
  const ss_sim_config c = ss_test_sim_units(10.0, 5, 20, 3), o = ss_test_sim_units(10.0, 4, 20, 4);
  if (ss_test_simulate(PROBE, 40.0, &c, SS_SIM_FORMAT_NWB, "sim.nwb", sim_path, sizeof(sim_path), NULL)) return -1;
  return ss_test_simulate(PROBE, 40.0, &o, SS_SIM_FORMAT_NWB, "old.nwb", old_path, sizeof(old_path), NULL);
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
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

static int exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* Regular files under dir, recursively. */
static int count_files(const char *dir) {
  DIR *d = opendir(dir);
  int n = 0;
  for (struct dirent *e = d ? readdir(d) : NULL; e; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char path[2 * PATH_LEN];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    struct stat sb;
    if (lstat(path, &sb) == 0) n += S_ISDIR(sb.st_mode) ? count_files(path) : 1;
  }
  if (d) closedir(d);
  return n;
}

/* The manifest of `dir` as a string; the folder holds exactly the files it lists (and itself), and
 * passes the readers' check for each. */
static char *complete_set(const char *dir) {
  char path[2 * PATH_LEN], line[2 * PATH_LEN];
  snprintf(path, sizeof(path), "%s/%s", dir, SS_OUTSET_MANIFEST);
  char *text = ss_test_slurp(path);
  assert_true(strlen(text) > 0);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  assert_non_null(fgets(line, sizeof(line), f));
  while (fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    char file[3 * PATH_LEN];
    snprintf(file, sizeof(file), "%s/%s", dir, strchr(line, '\t') + 1);
    ss_ctx ctx;
    ss_test_ctx(&ctx);
    if (ss_outset_check_file(&ctx, file) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  }
  fclose(f);
  assert_int_equal(count_files(dir), count_lines(text)); /* the header line counts the manifest */
  return text;
}

/* A write failure at any point of the outputs: exit 1 or 3 with one line, no signal, no output set
 * and no temporary left. */
static void full_disk(void **state) {
  (void)state;
  static const long limits[] = {4096, 20000, 60000, 100000, 150000, 250000, 400000};
  char dir[PATH_LEN], args[ARGS_LEN];
  ss_test_path(dir, sizeof(dir), "full");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --threads 1", sim_path, dir);
  for (size_t i = 0; i < sizeof(limits) / sizeof(limits[0]); i++) {
    char *err = NULL;
    int code = ss_test_run_limited(args, NULL, limits[i], &err);
    if (code != 1 && code != 3) fail_msg("limit %ld bytes: exit %d: %s", limits[i], code, err);
    if (count_lines(err) != 1) fail_msg("limit %ld bytes: expected one line, got: %s", limits[i], err);
    assert_non_null(strstr(err, dir));
    assert_false(exists(dir));
    assert_int_equal(count_prefixed(".full."), 0);
    free(err);
  }
}

/* Killed at every step (after each output, after the manifest, after the swap): the folder holds
 * the old complete set or the new one; the next run leaves no temporary. */
static void killed(const char *cmd, const char *name, int steps) {
  char dir[PATH_LEN], args[ARGS_LEN], prefix[256];
  ss_test_path(dir, sizeof(dir), name);
  snprintf(prefix, sizeof(prefix), ".%s.", name);
  snprintf(args, sizeof(args), "%s '%s' -o '%s' -q --threads 1", cmd, old_path, dir);
  char *err = NULL;
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  char *old = complete_set(dir);
  snprintf(args, sizeof(args), "%s '%s' -o '%s' -q --threads 1 --overwrite", cmd, sim_path, dir);
  for (int k = 1; k <= steps; k++) {
    char env[64];
    snprintf(env, sizeof(env), "SPIKESTREAM_TEST_KILL_AT=%d", k);
    int code = ss_test_run_limited(args, env, 0, &err);
    if (code != 128 + SIGKILL) fail_msg("%s killed at step %d: exit %d: %s", cmd, k, code, err);
    free(err);
    char *now = complete_set(dir);
    if (k < steps) assert_string_equal(now, old); /* before the swap: the old set */
    else assert_string_not_equal(now, old);       /* after it: the new one */
    free(now);
  }
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  free(complete_set(dir));
  assert_int_equal(count_prefixed(prefix), 0);
  free(old);
}

static void sort_killed(void **state) {
  (void)state;
  killed("sort", "ksort", 9); /* 7 outputs (the last sort.log), the manifest, the swap */
}

static void detect_killed(void **state) {
  (void)state;
  killed("detect", "kdetect", 2); /* the manifest, the swap */
}

/* Readers refuse a set with a file missing or changed; a folder without a manifest is loose files. */
static void readers_check(void **state) {
  (void)state;
  char dir[PATH_LEN], args[ARGS_LEN], path[2 * PATH_LEN];
  ss_test_path(dir, sizeof(dir), "rset");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --threads 1", sim_path, dir);
  char *err = NULL;
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  snprintf(path, sizeof(path), "%s/model.h5", dir);
  assert_int_equal(remove(path), 0);
  const char *cmds[] = {"cluster '%s/sim' 1 -q", "compare '%s/results.h5' '%s'", "inspect '%s/results.h5'",
                        "live --model '%s/model.h5' --source - -q"};
  for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
    snprintf(args, sizeof(args), cmds[i], dir, sim_path);
    int code = ss_test_run_limited(args, NULL, 0, &err);
    if (code != 1 || !strstr(err, "incomplete output set: model.h5 is listed in manifest.txt but missing"))
      fail_msg("%s: exit %d: %s", args, code, err);
    free(err);
  }
  snprintf(path, sizeof(path), "%s/results.h5", dir);
  FILE *f = fopen(path, "ab");
  assert_non_null(f);
  fputs("x", f);
  fclose(f);
  snprintf(path, sizeof(path), "%s/%s", dir, SS_OUTSET_MANIFEST);
  char *text = ss_test_slurp(path);
  char *line = strstr(text, "\tmodel.h5\n");
  assert_non_null(line);
  while (line > text && line[-1] != '\n') line--;
  memmove(line, strchr(line, '\n') + 1, strlen(strchr(line, '\n') + 1) + 1); /* drop model.h5's line */
  f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  free(text);
  snprintf(args, sizeof(args), "compare '%s/results.h5' '%s'", dir, sim_path);
  int code = ss_test_run_limited(args, NULL, 0, &err);
  if (code != 1 || !strstr(err, "mixed output set: results.h5 has")) fail_msg("exit %d: %s", code, err);
  free(err);
  assert_int_equal(remove(path), 0); /* no manifest: loose files */
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
}

/* A folder holding other files is not replaced, --overwrite or not. */
static void foreign_folder(void **state) {
  (void)state;
  char dir[PATH_LEN], args[ARGS_LEN], path[2 * PATH_LEN];
  ss_test_path(dir, sizeof(dir), "mine");
  assert_int_equal(mkdir(dir, 0777), 0);
  snprintf(path, sizeof(path), "%s/notes.txt", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  for (int overwrite = 0; overwrite < 2; overwrite++) {
    snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --threads 1%s", sim_path, dir, overwrite ? " --overwrite" : "");
    char *err = NULL;
    int code = ss_test_run_limited(args, NULL, 0, &err);
    if (code != 1 || !strstr(err, "holds \"notes.txt\", which is not an output of sort or detect"))
      fail_msg("exit %d: %s", code, err);
    free(err);
    assert_true(exists(path));
  }
}

/* `args` exits 1 with one line holding `want`, before any work (no log line before it). */
static void refused(const char *args, const char *want) {
  char *err = NULL;
  int code = ss_test_run_limited(args, NULL, 0, &err);
  if (code != 1 || count_lines(err) != 1 || !strstr(err, want))
    fail_msg("%s: exit %d, expected \"%s\" alone in: %s", args, code, want, err);
  free(err);
}

/* An earlier output set is replaced only with --overwrite, and then wholly: no file of it stays
 * (phy's .phy cache included). Missing parents are created. */
static void overwrite_rules(void **state) {
  (void)state;
  char dir[PATH_LEN], args[ARGS_LEN], path[2 * PATH_LEN];
  ss_test_path(dir, sizeof(dir), "new/parents/set");
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --threads 1", old_path, dir);
  char *err = NULL;
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  char *old = complete_set(dir);
  snprintf(path, sizeof(path), "%s/phy/.phy", dir);
  assert_int_equal(mkdir(path, 0777), 0);
  snprintf(path, sizeof(path), "%s/phy/.phy/cache.bin", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fclose(f);
  const char *cmds[] = {"sort", "detect"};
  for (int i = 0; i < 2; i++) {
    snprintf(args, sizeof(args), "%s '%s' -o '%s' --threads 1", cmds[i], sim_path, dir);
    refused(args, "holds the outputs of an earlier run; pass --overwrite to replace them");
  }
  assert_true(exists(path));
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --threads 1 --overwrite", sim_path, dir);
  if (ss_test_run_limited(args, NULL, 0, &err) != 0) fail_msg("%s", err);
  free(err);
  assert_false(exists(path));
  char *now = complete_set(dir); /* exactly the listed files: nothing of the earlier set */
  assert_string_not_equal(now, old);
  assert_non_null(strstr(now, "\treport.html\n"));
  free(now);
  free(old);
}

/* Output folders that cannot be used and inputs that are missing or folders are refused at once. */
static void refused_at_once(void **state) {
  (void)state;
  char file[PATH_LEN], args[ARGS_LEN], want[3 * PATH_LEN], dir[PATH_LEN];
  ss_test_path(file, sizeof(file), "a_file");
  FILE *f = fopen(file, "w");
  assert_non_null(f);
  fclose(f);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --threads 1", sim_path, file);
  snprintf(want, sizeof(want), "spikestream sort: %s: exists and is a file, not a folder", file);
  refused(args, want);
  snprintf(args, sizeof(args), "detect '%s' -o '%s/sub/dir' --threads 1", sim_path, file);
  snprintf(want, sizeof(want), "spikestream detect: %s/sub/dir: %s is a file, not a folder", file, file);
  refused(args, want);
  ss_test_path(dir, sizeof(dir), "never");
  snprintf(args, sizeof(args), "sort '%s.missing' -o '%s' --threads 1 -q", sim_path, dir);
  snprintf(want, sizeof(want), "spikestream sort: %s.missing: no such file", sim_path);
  refused(args, want);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --threads 1 -q", ss_test_tmpdir(), dir);
  snprintf(want, sizeof(want), "spikestream sort: %s: is a directory, not a recording", ss_test_tmpdir());
  refused(args, want);
  assert_false(exists(dir));
  char link[PATH_LEN];
  ss_test_path(link, sizeof(link), "a_link");
  assert_int_equal(symlink(ss_test_tmpdir(), link), 0);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' --threads 1 --overwrite", sim_path, link);
  snprintf(want, sizeof(want), "spikestream sort: %s: is a symbolic link; name the folder it points to", link);
  refused(args, want);
  if (geteuid() == 0) return; /* root writes anywhere */
  ss_test_path(dir, sizeof(dir), "locked");
  assert_int_equal(mkdir(dir, 0555), 0);
  snprintf(args, sizeof(args), "sort '%s' -o '%s/out' --threads 1", sim_path, dir);
  snprintf(want, sizeof(want), "spikestream sort: %s/out: cannot write into %s", dir, dir);
  refused(args, want);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(full_disk),      cmocka_unit_test(sort_killed),
                                     cmocka_unit_test(detect_killed),  cmocka_unit_test(readers_check),
                                     cmocka_unit_test(foreign_folder), cmocka_unit_test(overwrite_rules),
                                     cmocka_unit_test(refused_at_once)};
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
