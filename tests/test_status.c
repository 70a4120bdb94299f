/* test_status.c — status strings, exit codes, message accumulation and prefixing, checked size parsing. */
#include <stdlib.h>
#include <string.h>

#include "core/parse.h"
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

/* ss_realloc keeps the old block on failure (injected or overflow) and counts like ss_alloc. */
static void realloc_keeps_block_on_failure(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_alloc_fault fault = {2, 0};
  ctx.alloc_fault = &fault;
  int *p = NULL;
  assert_int_equal(SS_REALLOC(&ctx, p, 4, "grown"), SS_OK);
  p[3] = 42;
  int *old = p;
  assert_int_equal(SS_REALLOC(&ctx, p, 64, "grown"), SS_ERR_NOMEM);
  assert_ptr_equal(p, old);
  assert_non_null(strstr(ss_error_message(&ctx), "grown: cannot allocate 64 x 4 bytes (injected failure)"));
  assert_int_equal(ss_realloc(&ctx, (void **)&p, SIZE_MAX / 2, 16, "huge"), SS_ERR_NOMEM);
  assert_ptr_equal(p, old);
  assert_int_equal(SS_REALLOC(&ctx, p, 0, "empty"), SS_OK);
  assert_int_equal(SS_REALLOC(&ctx, p, 64, "grown"), SS_OK);
  assert_int_equal(p[3], 42);
  assert_int_equal(fault.count, 4);
  free(p);
}

static void parse_size_checks_overflow_and_range(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t v = 7;
  assert_int_equal(ss_parse_size(&ctx, " 42 ", 0, 100, &v), SS_OK);
  assert_int_equal(v, 42);
  assert_int_equal(ss_parse_size(&ctx, "-9223372036854775808", INT64_MIN, 0, &v), SS_OK);
  assert_true(v == INT64_MIN);
  assert_int_equal(ss_parse_size(&ctx, "9223372036854775807", 0, INT64_MAX, &v), SS_OK);
  assert_true(v == INT64_MAX);
  v = 7;
  assert_int_equal(ss_parse_size(&ctx, "9223372036854775808", 0, INT64_MAX, &v), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "expected an integer in [0, 9223372036854775807], got \"9223372036854775808\"");
  assert_int_equal(ss_parse_size(&ctx, "12345678901234567890123", 1, 10, &v), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "expected an integer in [1, 10], got \"12345678901234567890123\"");
  assert_int_equal(ss_parse_size(&ctx, "11", 1, 10, &v), SS_ERR_INPUT);
  assert_int_equal(ss_parse_size(&ctx, "", 1, 10, &v), SS_ERR_INPUT);
  assert_int_equal(ss_parse_size(&ctx, "3x", 1, 10, &v), SS_ERR_INPUT);
  assert_int_equal(ss_parse_size(&ctx, "1e3", 1, 10000, &v), SS_ERR_INPUT);
  assert_int_equal(v, 7);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(exit_codes),
      cmocka_unit_test(fail_replaces_problem_appends),
      cmocka_unit_test(message_truncates_safely),
      cmocka_unit_test(alloc_overflow_is_reported),
      cmocka_unit_test(realloc_keeps_block_on_failure),
      cmocka_unit_test(parse_size_checks_overflow_and_range),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
