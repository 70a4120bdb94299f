/* fuzz_probe.c — libFuzzer target for the probe JSON (params/probe.c), both layouts (simple and
 * probeinterface), with the adjacency built by radius when the file gives none. */
#include <stdlib.h>

#include "fuzz/fuzz_util.h"
#include "params/probe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  char *json = fuzz_string(data, size);
  ss_probe probe;
  memset(&probe, 0, sizeof(probe));
  if (ss_probe_load_json(&ctx, json, "fuzz.json", 60.0, &probe) == SS_OK) {
    ss_probe_check_recording(&ctx, &probe, probe.n);
    ss_probe_free(&probe);
  }
  free(json);
  return 0;
}
