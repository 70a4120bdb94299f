/* status.c — ss_status strings, exit codes and the per-context error message. */
#include "status.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void ss_ctx_init(ss_ctx *ctx) {
  memset(ctx, 0, sizeof(*ctx));
  ctx->log_level = SS_LOG_INFO;
  ctx->log_stream = NULL; /* stderr, resolved at use: stderr is not a constant expression */
  ctx->progress_tty = -1;
}

void ss_ctx_init_child(ss_ctx *child, const ss_ctx *parent) {
  ss_ctx_init(child);
  child->log_level = parent->log_level;
  child->log_stream = parent->log_stream;
  child->quiet = parent->quiet;
  child->alloc_fault = parent->alloc_fault;
  child->log_sink = parent->log_sink;
  child->log_sink_user = parent->log_sink_user;
}

void ss_ctx_clear(ss_ctx *ctx) {
  ctx->status = SS_OK;
  ctx->msg[0] = '\0';
  ctx->msg_len = 0;
  ctx->n_problems = 0;
}

const char *ss_strerror(ss_status st) {
  switch (st) {
    case SS_OK: return "success";
    case SS_ERR_INPUT: return "bad input";
    case SS_ERR_USAGE: return "usage error";
    case SS_ERR_IO: return "input/output error";
    case SS_ERR_NOMEM: return "out of host memory";
    case SS_ERR_DEVICE: return "device error";
    case SS_ERR_UNSUPPORTED: return "not supported";
    case SS_ERR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

int ss_status_exit_code(ss_status st) {
  switch (st) {
    case SS_OK: return 0;
    case SS_ERR_INPUT:
    case SS_ERR_IO: return 1;
    case SS_ERR_USAGE: return 2;
    default: return 3;
  }
}

static void append_line(ss_ctx *ctx, const char *fmt, va_list ap) {
  size_t room = sizeof(ctx->msg) - ctx->msg_len;
  if (room < 2) return;
  if (ctx->msg_len > 0) {
    ctx->msg[ctx->msg_len++] = '\n';
    ctx->msg[ctx->msg_len] = '\0';
    room--;
  }
  int n = vsnprintf(ctx->msg + ctx->msg_len, room, fmt, ap);
  if (n < 0) return;
  ctx->msg_len += (size_t)n < room ? (size_t)n : room - 1;
}

ss_status ss_fail(ss_ctx *ctx, ss_status st, const char *fmt, ...) {
  ss_ctx_clear(ctx);
  va_list ap;
  va_start(ap, fmt);
  append_line(ctx, fmt, ap);
  va_end(ap);
  ctx->status = st;
  ctx->n_problems = 1;
  return st;
}

void ss_problem(ss_ctx *ctx, ss_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  append_line(ctx, fmt, ap);
  va_end(ap);
  if (ctx->status == SS_OK) ctx->status = st;
  ctx->n_problems++;
}

void ss_ctx_prefix(ss_ctx *ctx, const char *fmt, ...) {
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof(prefix), fmt, ap);
  va_end(ap);
  char old[SS_CTX_MSG_MAX];
  memcpy(old, ctx->msg, ctx->msg_len + 1);
  ctx->msg[0] = '\0';
  ctx->msg_len = 0;
  char *save = NULL;
  int first = 1;
  for (char *line = strtok_r(old, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    size_t room = sizeof(ctx->msg) - ctx->msg_len;
    int n = snprintf(ctx->msg + ctx->msg_len, room, "%s%s: %s", first ? "" : "\n", prefix, line);
    if (n < 0 || (size_t)n >= room) break;
    ctx->msg_len += (size_t)n;
    first = 0;
  }
}

const char *ss_error_message(const ss_ctx *ctx) { return ctx->msg; }

/* Count one allocation; 1 when it is the one to fail. */
static int inject_failure(const ss_ctx *ctx) {
  ss_alloc_fault *f = ctx->alloc_fault;
  if (!f) return 0;
  long long n = __atomic_add_fetch(&f->count, 1, __ATOMIC_RELAXED);
  return f->fail_at > 0 && n == f->fail_at;
}

ss_status ss_alloc(ss_ctx *ctx, void **out, size_t count, size_t size, const char *what) {
  *out = NULL;
  if (count == 0 || size == 0) return SS_OK;
  if (inject_failure(ctx))
    return ss_fail(ctx, SS_ERR_NOMEM, "%s: cannot allocate %zu x %zu bytes (injected failure)", what, count, size);
  if (count > SIZE_MAX / size) return ss_fail(ctx, SS_ERR_NOMEM, "%s: %zu x %zu bytes overflows", what, count, size);
  *out = malloc(count * size);
  if (!*out) return ss_fail(ctx, SS_ERR_NOMEM, "%s: cannot allocate %zu bytes", what, count * size);
  return SS_OK;
}

ss_status ss_calloc(ss_ctx *ctx, void **out, size_t count, size_t size, const char *what) {
  *out = NULL;
  if (count == 0 || size == 0) return SS_OK;
  if (inject_failure(ctx))
    return ss_fail(ctx, SS_ERR_NOMEM, "%s: cannot allocate %zu x %zu bytes (injected failure)", what, count, size);
  *out = calloc(count, size);
  if (!*out) return ss_fail(ctx, SS_ERR_NOMEM, "%s: cannot allocate %zu x %zu bytes", what, count, size);
  return SS_OK;
}

ss_status ss_realloc(ss_ctx *ctx, void **p, size_t count, size_t size, const char *what) {
  if (count == 0 || size == 0) return SS_OK;
  if (inject_failure(ctx))
    return ss_fail(ctx, SS_ERR_NOMEM, "%s: cannot allocate %zu x %zu bytes (injected failure)", what, count, size);
  if (count > SIZE_MAX / size) return ss_fail(ctx, SS_ERR_NOMEM, "%s: %zu x %zu bytes overflows", what, count, size);
  void *q = realloc(*p, count * size);
  if (!q) return ss_fail(ctx, SS_ERR_NOMEM, "%s: cannot allocate %zu bytes", what, count * size);
  *p = q;
  return SS_OK;
}
