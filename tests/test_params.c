/* test_params.c — parameter defaults, JSON overlay, every rejection path with its exact message. */
#include <stdlib.h>
#include <string.h>

#include "params/params.h"
#include "ss_test.h"

static ss_status apply(ss_ctx *ctx, const char *json, ss_params *p) {
  ss_params_defaults(p);
  return ss_params_apply_json(ctx, json, "p.json", p);
}

static void defaults_follow_klusta(void **state) {
  (void)state;
  ss_params p;
  ss_params_defaults(&p);
  assert_true(p.detect.weak_std == 2.0);
  assert_true(p.detect.strong_std == 4.0);
  assert_int_equal(p.filter.order, 3);
  assert_true(p.filter.low_hz == 300.0);
  assert_int_equal(p.detect.polarity, SS_POLARITY_NEGATIVE);
  assert_int_equal(p.features.n_pcs, 3);
  assert_int_equal(p.mask_em.num_starting_clusters, 500);
  assert_int_equal(p.mask_em.split_first, 20);
  assert_int_equal(p.mask_em.split_every, 40);
  assert_true(p.mask_em.points_for_cluster_mask == 100);
  assert_true(p.mask_em.penalty_k_log_n == 1.0 && p.mask_em.penalty_k == 0.0);
  assert_true(p.sort.penalty_k_log_n == 0.2); /* `sort` only: docs/architecture.md, "Decisions" */
  assert_int_equal(p.mask_em.max_iterations, 1000);
  assert_int_equal(p.merge.enabled, 1);
}

static void overlay_sets_only_given_fields(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  assert_int_equal(apply(&ctx,
                         "{\"detect\": {\"strong_std\": 5, \"polarity\": \"both\"}, \"seed\": 9,"
                         " \"mask_em\": {\"quick_steps\": true}}",
                         &p),
                   SS_OK);
  assert_true(p.detect.strong_std == 5.0);
  assert_int_equal(p.detect.polarity, SS_POLARITY_BOTH);
  assert_int_equal(p.seed, 9);
  assert_int_equal(p.mask_em.quick_steps, 1);
  assert_true(p.detect.weak_std == 2.0);
  assert_int_equal(apply(&ctx, "{}", &p), SS_OK);
}

static void every_problem_reported_with_path(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  assert_int_equal(apply(&ctx,
                         "{\"detect\": {\"strong_std\": \"x\", \"bogus\": 1}, \"filter\": {\"order\": 12},"
                         " \"nope\": {}, \"io\": 3}",
                         &p),
                   SS_ERR_INPUT);
  assert_int_equal(ctx.n_problems, 5);
  assert_string_equal(ss_error_message(&ctx), "p.json: detect.strong_std: expected a number > 0, got \"x\"\n"
                                              "p.json: detect.bogus: unknown key\n"
                                              "p.json: filter.order: expected an integer in [1, 8], got 12\n"
                                              "p.json: nope: unknown key\n"
                                              "p.json: io: expected an object (a parameter section)");
}

static void wrong_types(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  assert_int_equal(apply(&ctx, "{\"merge\": {\"enabled\": 1}}", &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "p.json: merge.enabled: expected true or false, got 1");
  assert_int_equal(apply(&ctx, "{\"detect\": {\"polarity\": \"up\"}}", &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "p.json: detect.polarity: expected one of \"negative\", \"positive\", \"both\", got \"up\"");
  assert_int_equal(apply(&ctx, "{\"filter\": {\"order\": 2.5}}", &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "p.json: filter.order: expected an integer in [1, 8], got 2.5");
  assert_int_equal(apply(&ctx, "{\"filter\": {\"high_nyquist_fraction\": 1}}", &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "p.json: filter.high_nyquist_fraction: expected a number in (0, 1), got 1");
}

static void syntax_and_top_level(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  assert_int_equal(apply(&ctx, "{\n  \"seed\": 1,\n  oops\n}", &p), SS_ERR_INPUT);
  assert_non_null(strstr(ss_error_message(&ctx), "p.json: invalid JSON at line 3, column "));
  assert_int_equal(apply(&ctx, "[1, 2]", &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "p.json: expected a JSON object at the top level");
  assert_int_equal(apply(&ctx, "{} trailing", &p), SS_ERR_INPUT);
}

static void cross_field_validation(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  assert_int_equal(apply(&ctx, "{\"detect\": {\"weak_std\": 5}}", &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "detect.weak_std: must be below detect.strong_std (5 >= 4)");
}

static void set_by_path(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  assert_int_equal(ss_params_set(&ctx, &p, "mask_em.num_starting_clusters", "50"), SS_OK);
  assert_int_equal(p.mask_em.num_starting_clusters, 50);
  assert_int_equal(ss_params_set(&ctx, &p, "detect.polarity", "positive"), SS_OK);
  assert_int_equal(p.detect.polarity, SS_POLARITY_POSITIVE);
  assert_int_equal(ss_params_set(&ctx, &p, "no.such", "1"), SS_ERR_USAGE);
  assert_string_equal(ss_error_message(&ctx), "--param no.such: unknown parameter");
  assert_int_equal(ss_params_set(&ctx, &p, "seed", "-1"), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "--param: seed: expected an integer >= 0, got -1");
}

static void defaults_round_trip(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params def, back;
  ss_params_defaults(&def);
  def.detect.strong_std = 6.25;
  def.detect.polarity = SS_POLARITY_BOTH;
  char *json = ss_params_to_json(&def);
  assert_non_null(json);
  assert_int_equal(apply(&ctx, json, &back), SS_OK);
  assert_memory_equal(&def, &back, sizeof(def));
  free(json);
  char *doc = ss_params_doc_markdown();
  assert_non_null(strstr(doc, "| `detect.strong_std` | 4 | a number > 0 |"));
  free(doc);
}

static void load_file_errors(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  char missing[512];
  ss_test_path(missing, sizeof(missing), "missing.json");
  assert_int_equal(ss_params_load_file(&ctx, missing, &p), SS_ERR_IO);
  assert_non_null(strstr(ss_error_message(&ctx), "cannot open"));
  const char *ok = ss_test_write_file("ok.json", "{\"seed\": 4}");
  assert_int_equal(ss_params_load_file(&ctx, ok, &p), SS_OK);
  assert_int_equal(p.seed, 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(defaults_follow_klusta),
      cmocka_unit_test(overlay_sets_only_given_fields),
      cmocka_unit_test(every_problem_reported_with_path),
      cmocka_unit_test(wrong_types),
      cmocka_unit_test(syntax_and_top_level),
      cmocka_unit_test(cross_field_validation),
      cmocka_unit_test(set_by_path),
      cmocka_unit_test(defaults_round_trip),
      cmocka_unit_test(load_file_errors),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
