/* fuzz_npy.c — libFuzzer target for the .npy reader (io/npy.c): magic, version, header dictionary
 * (descr, fortran_order, shape) and the data size; the input is written to a scratch .npy file. */
#include "fuzz/fuzz_util.h"
#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) fuzz_path(path, sizeof(path), "array.npy");
  fuzz_write(path, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  ss_array a;
  memset(&a, 0, sizeof(a));
  if (ss_npy_read(&ctx, path, &a) == SS_OK) ss_array_free(&a);
  return 0;
}
