/* fuzz_params.c — libFuzzer target for the parameters JSON (params/params.c): the input is applied
 * over the defaults as a params file's text, then the result is validated and written back. */
#include <stdlib.h>

#include "fuzz/fuzz_util.h"
#include "params/params.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  char *json = fuzz_string(data, size);
  ss_params p;
  ss_params_defaults(&p);
  if (ss_params_apply_json(&ctx, json, "fuzz.json", &p) == SS_OK && ss_params_validate(&ctx, &p) == SS_OK)
    free(ss_params_to_json(&p));
  free(json);
  return 0;
}
