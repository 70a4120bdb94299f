/* log.h — leveled log lines and a progress indicator on the context's stream (stderr by default).
 *
 * Progress is a redrawn bar when the stream is a TTY, a plain line every few seconds otherwise,
 * and nothing with ctx->quiet. */
#ifndef SS_LOG_H
#define SS_LOG_H

#include <pthread.h>
#include <stdint.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

void ss_log(const ss_ctx *ctx, ss_log_level level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define ss_log_error(ctx, ...) ss_log((ctx), SS_LOG_ERROR, __VA_ARGS__)
#define ss_log_warn(ctx, ...) ss_log((ctx), SS_LOG_WARN, __VA_ARGS__)
#define ss_log_info(ctx, ...) ss_log((ctx), SS_LOG_INFO, __VA_ARGS__)
#define ss_log_debug(ctx, ...) ss_log((ctx), SS_LOG_DEBUG, __VA_ARGS__)

/* ss_log's lines are cut at this many bytes for a sink (the stream gets them whole). */
#define SS_LOG_LINE_MAX 4096
/* An ss_log_memory keeps at most this many bytes of lines. */
#define SS_LOG_MEMORY_MAX ((size_t)16 << 20)

/* Log lines kept in memory, e.g. for a log file written with a command's outputs: install with
 * ctx->log_sink = ss_log_memory_sink, ctx->log_sink_user = &m. Each line is "SECONDS s LEVEL: message"
 * (seconds since ss_log_memory_init). Safe for several threads at once. */
typedef struct {
  pthread_mutex_t lock;
  char *text; /* len bytes of '\n'-terminated lines (NUL-terminated when len > 0) */
  size_t len, cap;
  int64_t n_dropped; /* lines not kept (over SS_LOG_MEMORY_MAX or out of memory) */
  double t_start;
  ss_log_sink next; /* a sink the context had before, still handed every line (NULL: none) */
  void *next_user;
} ss_log_memory;

void ss_log_memory_init(ss_log_memory *m);
void ss_log_memory_free(ss_log_memory *m);
void ss_log_memory_sink(void *user, ss_log_level level, const char *line);

/* Parse "error|warn|info|debug". */
ss_status ss_log_level_parse(ss_ctx *ctx, const char *text, ss_log_level *out);

typedef struct {
  const ss_ctx *ctx;
  char label[64];
  double total; /* units of work, e.g. seconds of recording */
  double done;
  double t_start; /* monotonic seconds */
  double t_last_draw;
  int tty;
  int active;
  int open;      /* no known total: the note and the elapsed time instead of a percentage */
  char note[96]; /* what an open-ended progress shows, e.g. "iteration 12, 40 clusters" */
} ss_progress;

void ss_progress_start(ss_progress *p, const ss_ctx *ctx, const char *label, double total);
/* Progress of work whose amount is not known in advance (e.g. iterations until convergence). */
void ss_progress_start_open(ss_progress *p, const ss_ctx *ctx, const char *label);
void ss_progress_update(ss_progress *p, double done);
/* Set an open-ended progress's note and draw it (as often as ss_progress_update draws). */
void ss_progress_note(ss_progress *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ss_progress_finish(ss_progress *p);

/* Monotonic wall clock in seconds. */
double ss_now(void);

#ifdef __cplusplus
}
#endif
#endif
