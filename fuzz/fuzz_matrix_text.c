/* fuzz_matrix_text.c — libFuzzer target for the text tables of io/matrix.c: the input is read as a
 * CSV/TXT matrix through ss_matrix_read (header line allowed) and as a labels column through
 * ss_labels_read, from a scratch .csv file. */
#include "fuzz/fuzz_util.h"
#include "io/matrix.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) fuzz_path(path, sizeof(path), "matrix.csv");
  fuzz_write(path, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  ss_matrix m;
  memset(&m, 0, sizeof(m));
  if (ss_matrix_read(&ctx, path, NULL, &m) == SS_OK) ss_matrix_free(&m);
  ss_ctx_clear(&ctx);
  int64_t n = 0;
  int32_t *labels = NULL;
  if (ss_labels_read(&ctx, path, NULL, &n, &labels) == SS_OK) free(labels);
  return 0;
}
