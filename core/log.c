/* log.c — log lines and progress output; all state lives in the caller's ss_ctx / ss_progress. */
#include "log.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Seconds between plain progress lines when the stream is not a terminal. */
#define SS_PROGRESS_PLAIN_PERIOD_S 5.0
/* Seconds between redraws of the terminal bar. */
#define SS_PROGRESS_TTY_PERIOD_S 0.1
#define SS_PROGRESS_BAR_WIDTH 30

static FILE *stream_of(const ss_ctx *ctx) { return ctx->log_stream ? ctx->log_stream : stderr; }

double ss_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *const level_names[] = {"error", "warning", "info", "debug"};

/* Hand one line to the context's sink; a line too long for the buffer is cut. */
static void to_sink(const ss_ctx *ctx, ss_log_level level, const char *fmt, va_list ap) {
  char line[SS_LOG_LINE_MAX];
  vsnprintf(line, sizeof(line), fmt, ap);
  ctx->log_sink(ctx->log_sink_user, level, line);
}

void ss_log(const ss_ctx *ctx, ss_log_level level, const char *fmt, ...) {
  va_list ap;
  if (ctx->log_sink && (level <= SS_LOG_INFO || level <= ctx->log_level)) {
    va_start(ap, fmt);
    to_sink(ctx, level, fmt, ap);
    va_end(ap);
  }
  if (level > ctx->log_level) return;
  if (ctx->quiet && level >= SS_LOG_INFO) return;
  FILE *f = stream_of(ctx);
  fprintf(f, "spikestream: %s: ", level_names[level]);
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fputc('\n', f);
  fflush(f);
}

void ss_log_memory_init(ss_log_memory *m) {
  memset(m, 0, sizeof(*m));
  pthread_mutex_init(&m->lock, NULL);
  m->t_start = ss_now();
}

void ss_log_memory_free(ss_log_memory *m) {
  pthread_mutex_destroy(&m->lock);
  free(m->text);
  memset(m, 0, sizeof(*m));
}

/* Append under the lock; past SS_LOG_MEMORY_MAX (or when memory runs out) lines are counted, not kept. */
void ss_log_memory_sink(void *user, ss_log_level level, const char *line) {
  ss_log_memory *m = user;
  char head[64];
  int hn = snprintf(head, sizeof(head), "%9.3f s %s: ", ss_now() - m->t_start, level_names[level]);
  size_t add = (size_t)(hn > 0 ? hn : 0) + strlen(line) + 1;
  pthread_mutex_lock(&m->lock);
  if (m->len + add + 1 > m->cap && m->len + add + 1 <= SS_LOG_MEMORY_MAX) {
    size_t cap = m->cap ? m->cap : 4096;
    while (cap < m->len + add + 1) cap *= 2;
    char *t = realloc(m->text, cap);
    if (t) {
      m->text = t;
      m->cap = cap;
    }
  }
  if (m->len + add + 1 <= m->cap) {
    snprintf(m->text + m->len, m->cap - m->len, "%s%s\n", head, line);
    m->len += add;
  } else {
    m->n_dropped++;
  }
  pthread_mutex_unlock(&m->lock);
  if (m->next) m->next(m->next_user, level, line);
}

ss_status ss_log_level_parse(ss_ctx *ctx, const char *text, ss_log_level *out) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++) {
    if (strcasecmp(text, names[i]) == 0) {
      *out = (ss_log_level)i;
      return SS_OK;
    }
  }
  return ss_fail(ctx, SS_ERR_USAGE, "log level: expected error|warn|info|debug, got \"%s\"", text);
}

void ss_progress_start(ss_progress *p, const ss_ctx *ctx, const char *label, double total) {
  memset(p, 0, sizeof(*p));
  p->ctx = ctx;
  snprintf(p->label, sizeof(p->label), "%s", label);
  p->total = total > 0 ? total : 1;
  p->t_start = ss_now();
  p->t_last_draw = p->t_start;
  p->tty = ctx->progress_tty >= 0 ? ctx->progress_tty : isatty(fileno(stream_of(ctx)));
  p->active = !ctx->quiet;
}

void ss_progress_start_open(ss_progress *p, const ss_ctx *ctx, const char *label) {
  ss_progress_start(p, ctx, label, 1);
  p->open = 1;
}

/* An open-ended progress: the note and the elapsed time, redrawn in place on a terminal. */
static void draw_open(ss_progress *p, int final) {
  FILE *f = stream_of(p->ctx);
  double elapsed = ss_now() - p->t_start;
  if (p->tty) fprintf(f, "\r%s: %s %6.1fs\033[K%s", p->label, p->note, elapsed, final ? "\n" : "");
  else fprintf(f, "spikestream: %s: %s (%.1fs)\n", p->label, p->note, elapsed);
  fflush(f);
}

static void draw(ss_progress *p, int final) {
  if (p->open) {
    draw_open(p, final);
    return;
  }
  FILE *f = stream_of(p->ctx);
  double frac = p->done / p->total;
  if (frac > 1) frac = 1;
  double elapsed = ss_now() - p->t_start;
  if (p->tty) {
    int fill = (int)(frac * SS_PROGRESS_BAR_WIDTH);
    char bar[SS_PROGRESS_BAR_WIDTH + 1];
    for (int i = 0; i < SS_PROGRESS_BAR_WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[SS_PROGRESS_BAR_WIDTH] = '\0';
    fprintf(f, "\r%s [%s] %5.1f%% %6.1fs%s", p->label, bar, 100 * frac, elapsed, final ? "\n" : "");
  } else {
    fprintf(f, "spikestream: %s: %.1f%% (%.1fs)\n", p->label, 100 * frac, elapsed);
  }
  fflush(f);
}

void ss_progress_update(ss_progress *p, double done) {
  p->done = done;
  if (!p->active) return;
  double now = ss_now();
  double period = p->tty ? SS_PROGRESS_TTY_PERIOD_S : SS_PROGRESS_PLAIN_PERIOD_S;
  if (now - p->t_last_draw < period) return;
  p->t_last_draw = now;
  draw(p, 0);
}

void ss_progress_note(ss_progress *p, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->note, sizeof(p->note), fmt, ap);
  va_end(ap);
  ss_progress_update(p, p->done);
}

void ss_progress_finish(ss_progress *p) {
  if (!p->active) return;
  p->done = p->total;
  draw(p, 1);
  p->active = 0;
}
