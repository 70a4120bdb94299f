/* test_cli.c — the command line: exit codes, --help everywhere, params --check, probe, info,
 * --device. */
#include <stdlib.h>
#include <string.h>

#include "build_config.h"
#include "ss_test.h"

static int run(const char *args, char **out, char **err) { return ss_test_run_cli(args, out, err); }

static void help_and_usage(void **state) {
  (void)state;
  char *out, *err;
  assert_int_equal(run("--help", &out, &err), 0);
  assert_non_null(strstr(out, "info"));
  free(out), free(err);
  assert_int_equal(run("", &out, &err), 2);
  free(out), free(err);
  assert_int_equal(run("frobnicate", &out, &err), 2);
  assert_non_null(strstr(err, "unknown command \"frobnicate\""));
  free(out), free(err);
  const char *cmds[] = {"info", "params", "probe"};
  for (int i = 0; i < 3; i++) {
    char args[64];
    snprintf(args, sizeof(args), "%s --help", cmds[i]);
    assert_int_equal(run(args, &out, &err), 0);
    assert_non_null(strstr(out, "usage: spikestream"));
    free(out), free(err);
    snprintf(args, sizeof(args), "%s --no-such-option", cmds[i]);
    assert_int_equal(run(args, &out, &err), 2);
    free(out), free(err);
  }
}

static void params_check(void **state) {
  (void)state;
  char *out, *err, args[1024];
  const char *bad = ss_test_write_file("bad.json", "{\"detect\": {\"strong_std\": \"x\", \"colour\": 1},"
                                                   " \"filter\": {\"order\": 0}}");
  snprintf(args, sizeof(args), "params --check '%s'", bad);
  assert_int_equal(run(args, &out, &err), 1);
  char expect[2048];
  snprintf(expect, sizeof(expect),
           "spikestream params: %s: detect.strong_std: expected a number > 0, got \"x\"\n"
           "spikestream params: %s: detect.colour: unknown key\n"
           "spikestream params: %s: filter.order: expected an integer in [1, 8], got 0\n",
           bad, bad, bad);
  assert_string_equal(err, expect);
  free(out), free(err);

  const char *good = ss_test_write_file("good.json", "{\"detect\": {\"strong_std\": 5}}");
  snprintf(args, sizeof(args), "params --check '%s'", good);
  assert_int_equal(run(args, &out, &err), 0);
  free(out), free(err);

  /* the printed defaults are themselves a valid file */
  assert_int_equal(run("params --defaults", &out, &err), 0);
  const char *defaults = ss_test_write_file("defaults.json", out);
  free(out), free(err);
  snprintf(args, sizeof(args), "params --check '%s'", defaults);
  assert_int_equal(run(args, &out, &err), 0);
  free(out), free(err);
  assert_int_equal(run("params --check /nonexistent/p.json", &out, &err), 1);
  assert_non_null(strstr(err, "cannot open"));
  free(out), free(err);
}

static void probe_command(void **state) {
  (void)state;
  char *out, *err;
  assert_int_equal(run("probe '" SS_SOURCE_DIR "/params/probes/two_column_32.json' --channels 32", &out, &err), 0);
  assert_non_null(strstr(out, "32 contacts"));
  free(out), free(err);
  assert_int_equal(run("probe '" SS_SOURCE_DIR "/params/probes/tetrode.json' --channels 5", &out, &err), 1);
  assert_string_equal(err, "spikestream probe: probe tetrode: has 4 channels, the recording 5\n");
  free(out), free(err);
}

/* docs/params.md embeds `params --doc`: a changed table without regenerated docs fails here */
static void params_doc_is_current(void **state) {
  (void)state;
  char *out, *err;
  assert_int_equal(run("params --doc", &out, &err), 0);
  FILE *f = fopen(SS_SOURCE_DIR "/docs/params.md", "rb");
  assert_non_null(f);
  static char doc[256 * 1024];
  size_t n = fread(doc, 1, sizeof(doc) - 1, f);
  fclose(f);
  doc[n] = '\0';
  if (!strstr(doc, out)) fail_msg("docs/params.md is stale: regenerate it from `spikestream params --doc`");
  free(out), free(err);
}

static void info_names_backend(void **state) {
  (void)state;
  char *out, *err;
  assert_int_equal(run("info", &out, &err), 0);
  char why[256];
  if (ss_backend_gpu_count(why, sizeof(why)) == 0) assert_non_null(strstr(out, "no CUDA device"));
  else assert_non_null(strstr(out, "compute capability"));
  assert_non_null(strstr(out, "cpu backend:"));
  free(out), free(err);
}

static void backend_selection_without_gpu(void **state) {
  (void)state;
  char why[256];
  if (ss_backend_gpu_count(why, sizeof(why)) > 0) skip(); /* the GPU group covers that machine */
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_AUTO, 0, 1, &be), SS_OK);
  assert_int_equal(be.kind, SS_DEVICE_CPU);
  ss_status st = ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 1, &be);
  assert_true(st == SS_ERR_DEVICE || st == SS_ERR_UNSUPPORTED);
  assert_non_null(strstr(ss_error_message(&ctx), "--device cuda: no CUDA device available"));
}

/* --device: accepted by every command that runs a stage; a bad value is one usage line, exit 2 */
static void device_option(void **state) {
  (void)state;
  char *out, *err, args[256], expect[256];
  const char *cmds[] = {"detect", "sort", "cluster", "kmeans", "knn"};
  for (int i = 0; i < 5; i++) {
    snprintf(args, sizeof(args), "%s --device tpu", cmds[i]);
    assert_int_equal(run(args, &out, &err), 2);
    snprintf(expect, sizeof(expect), "spikestream %s: --device: expected auto|cpu|cuda, got \"tpu\"\n", cmds[i]);
    assert_string_equal(err, expect);
    free(out), free(err);
  }
}

/* sort --param KEY=VALUE: set after --params, each refused with its key and value (before the input
 * is opened) */
static void sort_param_option(void **state) {
  (void)state;
  char *out, *err;
  const char *bad[][2] = {
      {"sort /nonexistent.nwb -o /nonexistent-out --param foo.bar=1",
       "spikestream sort: --param foo.bar: unknown parameter\n"},
      {"sort /nonexistent.nwb -o /nonexistent-out --param match.amp_min=abc",
       "spikestream sort: --param match.amp_min: cannot read \"abc\"\n"},
      {"sort /nonexistent.nwb -o /nonexistent-out --param match.amp_min",
       "spikestream sort: --param: expected KEY=VALUE, got \"match.amp_min\"\n(see `spikestream sort --help`)\n"}};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(run(bad[i][0], &out, &err), 2);
    assert_string_equal(err, bad[i][1]);
    free(out), free(err);
  }
  assert_int_equal(run("sort /nonexistent.nwb -o /nonexistent-out -q --device cpu --param match.amp_min=0.7", &out,
                       &err),
                   1);
  assert_non_null(strstr(err, "/nonexistent.nwb: no such file"));
  free(out), free(err);
}

/* detect --device cpu runs; without a GPU, the default (auto) is the same run, byte for byte, and
 * --device cuda is a runtime error that names the reason */
static void detect_device_cpu(void **state) {
  (void)state;
  char *out, *err, rec[4096], dir[2][4096], fet[2][8400], args[16384];
  ss_test_path(rec, sizeof(rec), "device.nwb");
  snprintf(args, sizeof(args), "simulate -q -o '%s' --preset easy --duration 2 --units 5 --seed 3", rec);
  assert_int_equal(run(args, &out, &err), 0);
  free(out), free(err);
  char why[256];
  int gpus = ss_backend_gpu_count(why, sizeof(why));
  const char *device[2] = {"--device cpu", ""};
  for (int i = 0; i < (gpus ? 1 : 2); i++) {
    ss_test_path(dir[i], sizeof(dir[i]), i ? "detect_default" : "detect_cpu");
    snprintf(args, sizeof(args), "detect '%s' -q --threads 2 %s -o '%s'", rec, device[i], dir[i]);
    int code = run(args, &out, &err);
    if (code != 0) fail_msg("%s: exit %d: %s", args, code, err);
    free(out), free(err);
    snprintf(fet[i], sizeof(fet[i]), "%s/device.fet.1", dir[i]);
  }
  if (gpus) return; /* the GPU group compares the CUDA front end with the CPU one */
  char *a = ss_test_slurp(fet[0]), *b = ss_test_slurp(fet[1]);
  assert_true(strlen(a) > 0);
  assert_string_equal(a, b);
  free(a), free(b);
  snprintf(args, sizeof(args), "detect '%s' -q --device cuda -o '%s' --overwrite", rec, dir[1]);
  assert_int_equal(run(args, &out, &err), 3);
  assert_non_null(strstr(err, "--device cuda: no CUDA device available"));
  free(out), free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(help_and_usage),     cmocka_unit_test(params_check),
      cmocka_unit_test(probe_command),      cmocka_unit_test(params_doc_is_current),
      cmocka_unit_test(info_names_backend), cmocka_unit_test(backend_selection_without_gpu),
      cmocka_unit_test(device_option),      cmocka_unit_test(sort_param_option),
      cmocka_unit_test(detect_device_cpu),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
