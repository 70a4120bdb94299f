/* source_intan.c — Intan RHD2000 (.rhd) and RHS2000 (.rhs) recordings: the header is parsed, and
 * the amplifier channels of the data blocks become a tiled, channel-major uint16 store. */
#include <string.h>

#include "io/source_internal.h"

int ss_source_is_intan(const char *path) {
  const char *dot = strrchr(path, '.');
  return dot && (strcmp(dot, ".rhd") == 0 || strcmp(dot, ".rhs") == 0);
}

ss_status ss_source_open_intan(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  (void)info;
  (void)store;
  return ss_fail(ctx, SS_ERR_UNSUPPORTED, "%s: Intan files are not read yet", spec->path);
}
