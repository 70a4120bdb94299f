/* link.h — byte-stream links named by URI (live mode) and the int16 frame reader on top.
 *
 * Byte streams named by URI: "stdin"/"-" (read) or "stdout"/"-" (write), a plain file path (write: created
 * atomically? no — plain create/truncate, it is a stream), tcp://host:port (connect, retried until timeout_s),
 * tcp-listen://host:port (listen, accept one connection), unix:///path (connect, retried), unix-listen:///path.
 *
 * A read link may also be a plain file path (read to its end). Reads and writes are EINTR-safe; writes never
 * raise SIGPIPE (a vanished receiver is an SS_ERR_IO naming the URI). TCP links set TCP_NODELAY (latency),
 * listeners SO_REUSEADDR. Every error is one line naming the URI and the errno text. Times: ss_now().
 * timeout_s: how long a connecting link retries and a listening link waits for its connection (<= 0: no
 * limit). A listener takes one connection; open the same URI again for the next one. docs/live.md. */
#ifndef SS_LINK_H
#define SS_LINK_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ss_link ss_link;
typedef enum { SS_LINK_READ = 0, SS_LINK_WRITE = 1 } ss_link_dir;
ss_status ss_link_open(ss_ctx *ctx, const char *uri, ss_link_dir dir, double timeout_s, ss_link **out);
/* The same, giving up with SS_ERR_IO "URI: cancelled while waiting for the peer" once *cancel is set (a
 * signal handler's flag), looked at every SS_LINK_RETRY_S while connecting or listening. */
ss_status ss_link_open_cancellable(ss_ctx *ctx, const char *uri, ss_link_dir dir, double timeout_s,
                                   const volatile sig_atomic_t *cancel, ss_link **out);
ss_status ss_link_read(ss_ctx *ctx, ss_link *l, void *buf, size_t cap, size_t *got); /* blocks for >= 1 byte; *got = 0: end of stream */
ss_status ss_link_write(ss_ctx *ctx, ss_link *l, const void *buf, size_t n);        /* all n bytes; EPIPE → SS_ERR_IO message */
int ss_link_fd(const ss_link *l);
const char *ss_link_uri(const ss_link *l);
void ss_link_close(ss_link *l);
/* Whole int16 frames from a link, partial frames carried between reads. */
typedef struct ss_frame_reader ss_frame_reader;
ss_status ss_frame_reader_open(ss_ctx *ctx, ss_link *l, int n_channels, int64_t max_rows, ss_frame_reader **out);
/* Next whole rows as they arrive (at most max_rows): *rows valid until the next call; *n = 0 at a clean end.
 * A stream ending mid-frame: all whole rows are delivered first, then SS_ERR_INPUT
 * "URI: stream ended mid-frame: B of F bytes of a frame (R rows received)". *t_arrival = ss_now() after the read. */
ss_status ss_frame_reader_next(ss_ctx *ctx, ss_frame_reader *r, const int16_t **rows, int64_t *n, double *t_arrival);
int64_t ss_frame_reader_rows_total(const ss_frame_reader *r);
/* 1 when a whole frame is already buffered: the next ss_frame_reader_next returns without reading. */
int ss_frame_reader_buffered(const ss_frame_reader *r);
void ss_frame_reader_close(ss_frame_reader *r);

#ifdef __cplusplus
}
#endif
#endif
