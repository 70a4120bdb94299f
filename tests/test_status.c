/* test_status.c — status strings, exit codes, message accumulation and prefixing. */
#include <string.h>

#include "ss_test.h"

static void exit_codes(void **state) {
  (void)state;
  assert_int_equal(ss_status_exit_code(SS_OK), 0);
  assert_int_equal(ss_status_exit_code(SS_ERR_INPUT), 1);
  assert_int_equal(ss_status_exit_code(SS_ERR_IO), 1);
  assert_int_equal(ss_status_exit_code(SS_ERR_USAGE), 2);
  assert_int_equal(ss_status_exit_code(SS_ERR_DEVICE), 3);
  assert_int_equal(ss_status_exit_code(SS_ERR_NOMEM), 3);
  assert_string_equal(ss_strerror(SS_ERR_DEVICE), "device error");
}

static void fail_replaces_problem_appends(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_fail(&ctx, SS_ERR_INPUT, "first %d", 1), SS_ERR_INPUT);
  assert_int_equal(ss_fail(&ctx, SS_ERR_IO, "second"), SS_ERR_IO);
  assert_string_equal(ss_error_message(&ctx), "second");
  ss_ctx_clear(&ctx);
  ss_problem(&ctx, SS_ERR_INPUT, "a: one");
  ss_problem(&ctx, SS_ERR_IO, "b: two");
  assert_int_equal(ctx.status, SS_ERR_INPUT);
  assert_int_equal(ctx.n_problems, 2);
  assert_string_equal(ss_error_message(&ctx), "a: one\nb: two");
  ss_ctx_prefix(&ctx, "file.json");
  assert_string_equal(ss_error_message(&ctx), "file.json: a: one\nfile.json: b: two");
}

static void message_truncates_safely(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char big[SS_CTX_MSG_MAX * 2];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  for (int i = 0; i < 4; i++) ss_problem(&ctx, SS_ERR_INPUT, "%s", big);
  assert_true(strlen(ss_error_message(&ctx)) < SS_CTX_MSG_MAX);
}

static void alloc_overflow_is_reported(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  void *p = (void *)1;
  assert_int_equal(ss_alloc(&ctx, &p, SIZE_MAX / 2, 16, "huge"), SS_ERR_NOMEM);
  assert_null(p);
  assert_non_null(strstr(ss_error_message(&ctx), "huge"));
  assert_int_equal(ss_alloc(&ctx, &p, 0, 8, "empty"), SS_OK);
  assert_null(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exit_codes),
      cmocka_unit_test(fail_replaces_problem_appends),
      cmocka_unit_test(message_truncates_safely),
      cmocka_unit_test(alloc_overflow_is_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
