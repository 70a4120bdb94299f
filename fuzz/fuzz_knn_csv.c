/* fuzz_knn_csv.c — libFuzzer target for the KNN table CSV (stages/knn/knn_csv.c): header
 * "numels,newels,classes,dim" then the rows; the input is written to a scratch .csv file. */
#include "fuzz/fuzz_util.h"
#include "stages/knn/knn.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) fuzz_path(path, sizeof(path), "table.csv");
  fuzz_write(path, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  ss_knn_table t;
  memset(&t, 0, sizeof(t));
  if (ss_knn_csv_read(&ctx, path, &t) == SS_OK) ss_knn_table_free(&t);
  return 0;
}
