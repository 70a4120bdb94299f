/* status.h — status codes and the error/logging context every fallible function takes.
 *
 * Every function that can fail returns ss_status and takes an ss_ctx *: on failure it records one
 * or more message lines in the context (file, field and value where there are some), so callers
 * never consult global state. The CLI maps a status to an exit code with ss_status_exit_code(). */
#ifndef SS_STATUS_H
#define SS_STATUS_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SS_OK = 0,
  SS_ERR_INPUT,       /* bad input: file, field or value (exit 1) */
  SS_ERR_USAGE,       /* bad command line (exit 2) */
  SS_ERR_IO,          /* a read or write failed (exit 1) */
  SS_ERR_NOMEM,       /* host allocation failed (exit 3) */
  SS_ERR_DEVICE,      /* CUDA, cuBLAS or cuSOLVER failure, device out of memory (exit 3) */
  SS_ERR_UNSUPPORTED, /* not available in this build or on this machine (exit 3) */
  SS_ERR_INTERNAL     /* a broken invariant: a bug (exit 3) */
} ss_status;

typedef enum { SS_LOG_ERROR = 0, SS_LOG_WARN, SS_LOG_INFO, SS_LOG_DEBUG } ss_log_level;

#define SS_CTX_MSG_MAX 8192

/* Allocation-failure injection, a test hook (SQLite's test_malloc idea): a context that points at
 * one counts every ss_alloc/ss_calloc/ss_realloc made through it and its children, and fails the fail_at-th
 * with SS_ERR_NOMEM. The CLI sets one up from SPIKESTREAM_FAIL_ALLOC (cli/main.c, tests/README.md). */
typedef struct {
  long long fail_at; /* > 0: fail that allocation (counted from 1); 0: count only */
  long long count;   /* allocations so far (updated atomically: children may run on other threads) */
} ss_alloc_fault;

/* A receiver of log lines beside the stream (e.g. a copy kept for a log file): called for every
 * line at INFO and above, and below that down to the context's level, whether or not ctx->quiet
 * hides it from the stream; `line` is the message without the "spikestream: LEVEL: " prefix. It may
 * be called from several threads at once (children of the context share it). */
typedef void (*ss_log_sink)(void *user, ss_log_level level, const char *line);

/* The context: the error message of the last failure, and where and how much to log. */
typedef struct ss_ctx {
  ss_status status;
  char msg[SS_CTX_MSG_MAX]; /* newline-separated lines, no trailing newline */
  size_t msg_len;
  int n_problems;
  ss_log_level log_level;
  int quiet;                   /* no progress output and no INFO lines */
  FILE *log_stream;            /* default stderr */
  int progress_tty;            /* -1: detect from log_stream; 0/1 forced */
  ss_alloc_fault *alloc_fault; /* NULL (the default): no injection */
  ss_log_sink log_sink;        /* NULL (the default): the stream only */
  void *log_sink_user;
} ss_ctx;

void ss_ctx_init(ss_ctx *ctx);
/* A fresh context for work done on behalf of `parent` (another thread, a slot): no failure recorded,
 * the parent's logging settings (level, stream, quiet, sink) and allocation-failure injection. */
void ss_ctx_init_child(ss_ctx *child, const ss_ctx *parent);
/* Forget the recorded failure (the logging settings stay). */
void ss_ctx_clear(ss_ctx *ctx);

const char *ss_strerror(ss_status st);
int ss_status_exit_code(ss_status st);

/* Record a failure: replaces any earlier message; returns st so that `return ss_fail(...)` reads well. */
ss_status ss_fail(ss_ctx *ctx, ss_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Append one more problem line (validators that report every problem before failing). */
void ss_problem(ss_ctx *ctx, ss_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefix the recorded message with "prefix: " (e.g. the file name), for every line. */
void ss_ctx_prefix(ss_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The recorded message ("" when none). */
const char *ss_error_message(const ss_ctx *ctx);

/* Evaluate an ss_status expression and return it from the calling function when it fails. */
#define SS_TRY(expr) \
  do { \
    ss_status ss_try_st_ = (expr); \
    if (ss_try_st_ != SS_OK) return ss_try_st_; \
  } while (0)

/* Checked allocation helpers: record SS_ERR_NOMEM with what was being allocated. */
ss_status ss_alloc(ss_ctx *ctx, void **out, size_t count, size_t size, const char *what);
ss_status ss_calloc(ss_ctx *ctx, void **out, size_t count, size_t size, const char *what);
/* Resize *p to count × size bytes (realloc): on failure *p is left as it was (still the caller's to
 * free); a size of zero leaves *p as it is. Counted and injectable like ss_alloc. */
ss_status ss_realloc(ss_ctx *ctx, void **p, size_t count, size_t size, const char *what);
#define SS_ALLOC(ctx, ptr, count, what) ss_alloc((ctx), (void **)&(ptr), (count), sizeof(*(ptr)), (what))
#define SS_CALLOC(ctx, ptr, count, what) ss_calloc((ctx), (void **)&(ptr), (count), sizeof(*(ptr)), (what))
#define SS_REALLOC(ctx, ptr, count, what) ss_realloc((ctx), (void **)&(ptr), (count), sizeof(*(ptr)), (what))

#ifdef __cplusplus
}
#endif
#endif
