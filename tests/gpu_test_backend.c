/* gpu_test_backend.c — GPU group: device discovery and the CUDA backend state. */
#include <string.h>

#include "ss_test.h"

static void open_cuda_backend(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 0, &be), SS_OK);
  assert_int_equal(be.kind, SS_DEVICE_CUDA);
  assert_non_null(be.cuda);
  assert_true(strlen(be.gpu.name) > 0);
  assert_true(be.gpu.total_mem > ((size_t)1 << 30));
  assert_true(be.gpu.cc_major >= 7);
  ss_backend_close(&be);
}

static void auto_picks_cuda(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_AUTO, 0, 0, &be), SS_OK);
  assert_int_equal(be.kind, SS_DEVICE_CUDA);
  ss_backend_close(&be);
}

static void bad_gpu_index(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_backend be;
  assert_int_equal(ss_backend_open(&ctx, SS_DEVICE_CUDA, 999, 0, &be), SS_ERR_USAGE);
  assert_non_null(strstr(ss_error_message(&ctx), "out of range"));
}

int main(void) {
  ss_test_require_gpu();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(open_cuda_backend),
      cmocka_unit_test(auto_picks_cuda),
      cmocka_unit_test(bad_gpu_index),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
