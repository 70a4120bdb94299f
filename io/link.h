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
 * limit). A listener takes one connection; open the same URI again for the next one. docs/live.md.
 *
 * Live wire protocol v1 (docs/live.md, "Frame format"): a TCP listener with an empty host binds loopback
 * only; any other address needs a shared token, which the connecting side sends right after connecting
 * (ss_link_opts.token) and the listener checks, refusing and logging a wrong one. A stream starts with a
 * 32-byte header (channels, rate, dtype) that the frame reader checks unless it is opened raw. */
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
/* Everything an open may take. token: the shared secret (NULL: none); a connecting link sends it, a
 * listening link requires it. idle_timeout_s: a read link fails with SS_ERR_INPUT "no data from URI for
 * T s" when no byte arrives for that long, counted from the open (<= 0: no limit). */
typedef struct {
  double timeout_s;
  const volatile sig_atomic_t *cancel;
  const char *token;
  size_t token_len;
  double idle_timeout_s;
} ss_link_opts;
ss_status ss_link_open_with(ss_ctx *ctx, const char *uri, ss_link_dir dir, const ss_link_opts *o, ss_link **out);
/* Before anything is opened: the URI parses, and a TCP listener on a non-loopback address has a token
 * (SS_ERR_USAGE otherwise). */
ss_status ss_link_check(ss_ctx *ctx, const char *uri, ss_link_dir dir, int has_token);
/* The addresses a tcp-listen:// URI binds, as text ("127.0.0.1:5000 [::1]:5000"). */
ss_status ss_link_listen_addresses(ss_ctx *ctx, const char *uri, char *text, size_t cap);
#define SS_LINK_TOKEN_MIN 16
#define SS_LINK_TOKEN_MAX 1024
/* A token file: its content without leading and trailing white space, SS_LINK_TOKEN_MIN..MAX bytes; a
 * file that others (not owner or group) may read or write is refused. SS_ERR_INPUT naming the file. */
ss_status ss_link_token_load(ss_ctx *ctx, const char *path, char *token, size_t cap, size_t *len);
/* The listener's side of the token exchange on a connected socket: NULL when the peer sent `token`
 * (and was answered), else why it is refused ("missing token", "bad token"). */
const char *ss_link_token_check(int fd, const char *token, size_t len);
ss_status ss_link_read(ss_ctx *ctx, ss_link *l, void *buf, size_t cap,
                       size_t *got); /* blocks for >= 1 byte; *got = 0: end of stream */
/* Idle timeout for readers that poll instead of blocking: SS_ERR_INPUT once no byte came for the link's
 * idle_timeout_s; ss_link_idle_deadline: when that happens (ss_now() seconds; INFINITY: never). */
ss_status ss_link_idle_check(ss_ctx *ctx, const ss_link *l);
double ss_link_idle_deadline(const ss_link *l);
ss_status ss_link_write(ss_ctx *ctx, ss_link *l, const void *buf,
                        size_t n); /* all n bytes; EPIPE → SS_ERR_IO message */
int ss_link_fd(const ss_link *l);
const char *ss_link_uri(const ss_link *l);
void ss_link_close(ss_link *l);
/* The stream header (protocol v1): 32 bytes, little-endian. */
#define SS_STREAM_HEADER_BYTES 32
#define SS_STREAM_MAGIC "SSTREAM" /* 8 bytes with its terminating NUL */
#define SS_STREAM_VERSION 1
#define SS_STREAM_DTYPE_INT16 1
#define SS_STREAM_RATE_TOLERANCE 1e-4 /* relative difference of the header's rate from the expected one */
typedef struct {
  int n_channels;
  double rate_hz;
} ss_stream_header;
void ss_stream_header_encode(const ss_stream_header *h, unsigned char out[SS_STREAM_HEADER_BYTES]);
ss_status ss_stream_header_write(ss_ctx *ctx, ss_link *l, const ss_stream_header *h);

/* Whole int16 frames from a link, partial frames carried between reads. ss_frame_reader_open reads a raw
 * (headerless) stream; with opts, unless opts->raw, the first read takes the header and checks it against
 * n_channels and opts->rate_hz, naming opts->expected_by ("the model") in a refusal:
 * "URI: stream header: channels 16, expected 32 (the model)". A stream that ends before its first byte is a
 * clean end; one that ends inside the header is an SS_ERR_INPUT. */
typedef struct ss_frame_reader ss_frame_reader;
typedef struct {
  int raw;
  double rate_hz;
  const char *expected_by;
} ss_frame_reader_opts;
ss_status ss_frame_reader_open(ss_ctx *ctx, ss_link *l, int n_channels, int64_t max_rows, ss_frame_reader **out);
ss_status ss_frame_reader_open_opts(ss_ctx *ctx, ss_link *l, int n_channels, int64_t max_rows,
                                    const ss_frame_reader_opts *o, ss_frame_reader **out);
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
