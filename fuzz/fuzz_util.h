/* fuzz_util.h — helpers shared by the libFuzzer targets: a quiet context, and a scratch file per
 * process for parsers that read from a path (the input is written there before each run). */
#ifndef SS_FUZZ_UTIL_H
#define SS_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/status.h"

static inline void fuzz_ctx(ss_ctx *ctx) {
  ss_ctx_init(ctx);
  ctx->quiet = 1;
  ctx->log_level = SS_LOG_ERROR;
}

/* A path "<TMPDIR>/ss-fuzz-<pid>-<name>" (the name carries the extension the reader dispatches on). */
static inline const char *fuzz_path(char *buf, size_t cap, const char *name) {
  const char *dir = getenv("TMPDIR");
  snprintf(buf, cap, "%s/ss-fuzz-%ld-%s", dir && *dir ? dir : "/tmp", (long)getpid(), name);
  return buf;
}

/* Write `size` bytes to `path` (mode 0600); aborts when it cannot, since every run would be void. */
static inline void fuzz_write(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror(path);
    abort();
  }
  chmod(path, 0600);
}

/* A NUL-terminated copy of the input (the string parsers' entry points take C strings). */
static inline char *fuzz_string(const uint8_t *data, size_t size) {
  char *s = malloc(size + 1);
  if (!s) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

#endif
