/* test_link.c — io/link.h and `spikestream replay`: a writer thread and a frame reader over every
 * transport (TCP, UNIX sockets, pipes, stdin, files), whole frames whatever the write sizes, a stream
 * ending mid-frame, re-opening a listener, bad URIs, connect/accept timeouts, a vanished receiver, and
 * replay of a simulated recording to a socket read by a test thread (samples, send log, pacing, errors). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/link.h"
#include "core/log.h"
#include "core/rng.h"
#include "ss_test.h"

#define C 3 /* channels: a 6-byte frame, so odd write sizes split frames */
#define ROWS 500
#define FRAME (C * (int)sizeof(int16_t))
#define MAX_ROWS 7 /* smaller than most reads: exercises rows carried to the next call */
#define TIMEOUT_S 5.0
#define SHORT_TIMEOUT_S 0.2

static int16_t data[ROWS * C];
static uint64_t seed;
static int tcp_port;

/* ---- helpers -------------------------------------------------------------------------------- */

typedef struct {
  const char *uri; /* opened by the thread when link is NULL */
  ss_link *link;
  const void *bytes;
  size_t n;
  const size_t *sizes; /* write sizes, cycled */
  int n_sizes;
  ss_status st;
  char msg[1024];
} writer_job;

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static void *writer_main(void *arg) {
  writer_job *w = arg;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  w->st = w->link ? SS_OK : ss_link_open(&ctx, w->uri, SS_LINK_WRITE, TIMEOUT_S, &w->link);
  const unsigned char *p = w->bytes;
  for (size_t off = 0, k = 0; w->st == SS_OK && off < w->n; k++) {
    size_t len = w->sizes[k % (size_t)w->n_sizes];
    if (len > w->n - off) len = w->n - off;
    w->st = ss_link_write(&ctx, w->link, p + off, len);
    off += len;
  }
  snprintf(w->msg, sizeof(w->msg), "%s", ss_error_message(&ctx));
  ss_link_close(w->link);
  w->link = NULL;
  return NULL;
}

/* Everything from an open link through a frame reader: rows into out (cap rows); status and message. */
static ss_status read_frames(ss_ctx *ctx, ss_link *l, int n_channels, int16_t *out, int64_t cap, int64_t *rows) {
  ss_frame_reader *r = NULL;
  *rows = 0;
  SS_TRY(ss_frame_reader_open(ctx, l, n_channels, MAX_ROWS, &r));
  ss_status st;
  for (;;) {
    const int16_t *p;
    int64_t n;
    double t = 0;
    st = ss_frame_reader_next(ctx, r, &p, &n, &t);
    if (st != SS_OK || n == 0) break;
    assert_true(n <= MAX_ROWS);
    assert_true(t > 0);
    assert_true(*rows + n <= cap);
    memcpy(out + *rows * n_channels, p, (size_t)(n * n_channels) * sizeof(int16_t));
    *rows += n;
  }
  assert_int_equal(ss_frame_reader_rows_total(r), *rows);
  ss_frame_reader_close(r);
  return st;
}

/* Open uri for reading (listening or connecting), read all frames, expect exactly `data`. */
static void read_expect_data(const char *uri) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  if (ss_link_open(&ctx, uri, SS_LINK_READ, TIMEOUT_S, &l) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_string_equal(ss_link_uri(l), uri);
  assert_true(ss_link_fd(l) >= 0);
  static int16_t got[ROWS * C];
  int64_t rows = 0;
  if (read_frames(&ctx, l, C, got, ROWS, &rows) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  ss_link_close(l);
  assert_int_equal(rows, ROWS);
  assert_memory_equal(got, data, sizeof(data));
}

static void start_writer(pthread_t *t, writer_job *w, const char *uri, ss_link *link, const size_t *sizes,
                         int n_sizes) {
  memset(w, 0, sizeof(*w));
  w->uri = uri;
  w->link = link;
  w->bytes = data;
  w->n = sizeof(data);
  w->sizes = sizes;
  w->n_sizes = n_sizes;
  assert_int_equal(pthread_create(t, NULL, writer_main, w), 0);
}

static void join_ok(pthread_t t, writer_job *w) {
  pthread_join(t, NULL);
  if (w->st != SS_OK) fail_msg("writer: %s", w->msg);
}

/* Reader listens, writer connects, for each write-size pattern. */
static const size_t one_byte[] = {1};
static const size_t odd_sizes[] = {5, 7, 11, 1, 13};
static const size_t three_and_a_half[] = {FRAME * 7 / 2, sizeof(data)};

static void over_listener(const char *listen_uri, const char *connect_uri) {
  const size_t *patterns[] = {one_byte, odd_sizes, three_and_a_half};
  const int counts[] = {1, 5, 2};
  for (int i = 0; i < 3; i++) {
    pthread_t t;
    writer_job w;
    start_writer(&t, &w, connect_uri, NULL, patterns[i], counts[i]);
    read_expect_data(listen_uri);
    join_ok(t, &w);
  }
}

static void unix_uri(char *buf, size_t len, const char *scheme, const char *name) {
  char path[512];
  ss_test_path(path, sizeof(path), name);
  snprintf(buf, len, "%s://%s", scheme, path);
}

static void tcp_uri(char *buf, size_t len, const char *scheme) {
  snprintf(buf, len, "%s://127.0.0.1:%d", scheme, tcp_port);
}

/* ---- transports ----------------------------------------------------------------------------- */

static void tcp_frames(void **state) {
  (void)state;
  char lu[256], cu[256];
  tcp_uri(lu, sizeof(lu), "tcp-listen");
  tcp_uri(cu, sizeof(cu), "tcp");
  over_listener(lu, cu);
}

static void unix_frames(void **state) {
  (void)state;
  char lu[600], cu[600];
  unix_uri(lu, sizeof(lu), "unix-listen", "frames.sock");
  unix_uri(cu, sizeof(cu), "unix", "frames.sock");
  over_listener(lu, cu);
}

/* The other way round: the writer listens, the reader connects (retrying until the listener is up). */
static void unix_reader_connects(void **state) {
  (void)state;
  char lu[600], cu[600];
  unix_uri(lu, sizeof(lu), "unix-listen", "rev.sock");
  unix_uri(cu, sizeof(cu), "unix", "rev.sock");
  pthread_t t;
  writer_job w;
  start_writer(&t, &w, lu, NULL, odd_sizes, 5); /* the reader below may connect first: it retries */
  read_expect_data(cu);
  join_ok(t, &w);
}

/* The writer starts before anyone listens: its connect is retried. */
static void connect_retried(void **state) {
  (void)state;
  char lu[600], cu[600];
  unix_uri(lu, sizeof(lu), "unix-listen", "late.sock");
  unix_uri(cu, sizeof(cu), "unix", "late.sock");
  pthread_t t;
  writer_job w;
  start_writer(&t, &w, cu, NULL, odd_sizes, 5);
  sleep_s(0.1);
  read_expect_data(lu);
  join_ok(t, &w);
}

static void pipe_frames(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  char ru[64], wu[64];
  snprintf(ru, sizeof(ru), "/dev/fd/%d", fds[0]);
  snprintf(wu, sizeof(wu), "/dev/fd/%d", fds[1]);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *rl = NULL, *wl = NULL;
  assert_int_equal(ss_link_open(&ctx, ru, SS_LINK_READ, TIMEOUT_S, &rl), SS_OK);
  assert_int_equal(ss_link_open(&ctx, wu, SS_LINK_WRITE, TIMEOUT_S, &wl), SS_OK);
  close(fds[0]);
  close(fds[1]); /* the links hold their own descriptors: end of stream when the writer closes */
  pthread_t t;
  writer_job w;
  start_writer(&t, &w, wu, wl, odd_sizes, 5);
  static int16_t got[ROWS * C];
  int64_t rows = 0;
  if (read_frames(&ctx, rl, C, got, ROWS, &rows) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  join_ok(t, &w);
  ss_link_close(rl);
  assert_int_equal(rows, ROWS);
  assert_memory_equal(got, data, sizeof(data));
}

static const char *write_data_file(const char *name, size_t n_bytes) {
  static char path[512];
  ss_test_path(path, sizeof(path), name);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n_bytes, f), n_bytes);
  fclose(f);
  return path;
}

/* "stdin" reads file descriptor 0 (here a file put there with dup2) and does not close it. */
static void stdin_frames(void **state) {
  (void)state;
  const char *path = write_data_file("stdin.raw", sizeof(data));
  int saved = dup(STDIN_FILENO), fd = open(path, O_RDONLY);
  assert_true(saved >= 0 && fd >= 0);
  assert_int_equal(dup2(fd, STDIN_FILENO), STDIN_FILENO);
  close(fd);
  read_expect_data("stdin");
  assert_int_equal(dup2(saved, STDIN_FILENO), STDIN_FILENO);
  close(saved);
}

/* A stream ending mid-frame: the whole rows first, then the exact message; again on the next call. */
static void ended_mid_frame(void **state) {
  (void)state;
  const char *path = write_data_file("partial.raw", FRAME * 7 / 2);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  assert_int_equal(ss_link_open(&ctx, path, SS_LINK_READ, TIMEOUT_S, &l), SS_OK);
  int16_t got[4 * C];
  int64_t rows = 0;
  assert_int_equal(read_frames(&ctx, l, C, got, 4, &rows), SS_ERR_INPUT);
  assert_int_equal(rows, 3);
  assert_memory_equal(got, data, 3 * FRAME);
  char want[1024];
  snprintf(want, sizeof(want), "%s: stream ended mid-frame: 3 of 6 bytes of a frame (3 rows received)", path);
  assert_string_equal(ss_error_message(&ctx), want);
  ss_link_close(l);
}

/* A listener is re-opened after its peer disconnected: each connection gets its own stream. */
static void listener_reopened(void **state) {
  (void)state;
  char uris[4][600];
  unix_uri(uris[0], sizeof(uris[0]), "unix-listen", "again.sock");
  unix_uri(uris[1], sizeof(uris[1]), "unix", "again.sock");
  tcp_uri(uris[2], sizeof(uris[2]), "tcp-listen");
  tcp_uri(uris[3], sizeof(uris[3]), "tcp");
  for (int pair = 0; pair < 2; pair++) {
    for (int round = 0; round < 2; round++) {
      pthread_t t;
      writer_job w;
      start_writer(&t, &w, uris[2 * pair + 1], NULL, three_and_a_half, 2);
      read_expect_data(uris[2 * pair]);
      join_ok(t, &w);
    }
  }
}

/* ---- errors --------------------------------------------------------------------------------- */

static void expect_open_error(const char *uri, ss_link_dir dir, ss_status want_st, const char *want) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = (ss_link *)&ctx; /* must be reset to NULL */
  assert_int_equal(ss_link_open(&ctx, uri, dir, SHORT_TIMEOUT_S, &l), want_st);
  assert_null(l);
  assert_string_equal(ss_error_message(&ctx), want);
}

static void bad_uris(void **state) {
  (void)state;
  expect_open_error("tcp://nohost", SS_LINK_WRITE, SS_ERR_INPUT, "tcp://nohost: expected host:port after the scheme");
  expect_open_error("tcp://host:99999", SS_LINK_WRITE, SS_ERR_INPUT,
                    "tcp://host:99999: port \"99999\": expected an integer in 1..65535");
  expect_open_error("tcp://:80", SS_LINK_WRITE, SS_ERR_INPUT, "tcp://:80: empty host name");
  expect_open_error("ftp://x", SS_LINK_READ, SS_ERR_INPUT,
                    "ftp://x: unknown scheme \"ftp\" (expected stdin, stdout, -, a file path, tcp://, "
                    "tcp-listen://, unix://, unix-listen://)");
  expect_open_error("unix://", SS_LINK_READ, SS_ERR_INPUT, "unix://: empty socket path (expected unix:///path)");
  expect_open_error("unix-listen://", SS_LINK_READ, SS_ERR_INPUT,
                    "unix-listen://: empty socket path (expected unix:///path)");
  expect_open_error("stdin", SS_LINK_WRITE, SS_ERR_INPUT, "stdin: cannot write to it");
  expect_open_error("stdout", SS_LINK_READ, SS_ERR_INPUT, "stdout: cannot read from it");
  char long_uri[300] = "unix:///";
  memset(long_uri + 8, 'a', 200);
  long_uri[208] = '\0';
  char want[600];
  snprintf(want, sizeof(want), "%s: socket path longer than 107 bytes", long_uri);
  expect_open_error(long_uri, SS_LINK_READ, SS_ERR_INPUT, want);
  char missing[512];
  ss_test_path(missing, sizeof(missing), "no/such/file");
  snprintf(want, sizeof(want), "%s: cannot open for reading: No such file or directory", missing);
  expect_open_error(missing, SS_LINK_READ, SS_ERR_IO, want);
}

static void frame_reader_arguments(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  assert_int_equal(ss_link_open(&ctx, write_data_file("args.raw", 0), SS_LINK_READ, 0, &l), SS_OK);
  ss_frame_reader *r = NULL;
  assert_int_equal(ss_frame_reader_open(&ctx, l, 0, 10, &r), SS_ERR_INPUT);
  assert_non_null(strstr(ss_error_message(&ctx), ": channels: expected 1..65536, got 0"));
  assert_int_equal(ss_frame_reader_open(&ctx, l, 4, 0, &r), SS_ERR_INPUT);
  assert_non_null(strstr(ss_error_message(&ctx), ": rows per read: expected >= 1, got 0"));
  assert_null(r);
  /* An empty stream is a clean end. */
  assert_int_equal(ss_frame_reader_open(&ctx, l, 4, 10, &r), SS_OK);
  const int16_t *rows;
  int64_t n = -1;
  double t;
  assert_int_equal(ss_frame_reader_next(&ctx, r, &rows, &n, &t), SS_OK);
  assert_int_equal(n, 0);
  ss_frame_reader_close(r);
  ss_link_close(l);
}

static void timeouts(void **state) {
  (void)state;
  char cu[600], lu[600], want[1024];
  unix_uri(cu, sizeof(cu), "unix", "nobody.sock");
  double t0 = ss_now();
  snprintf(want, sizeof(want), "%s: connect: no listener after 0.2 s: No such file or directory", cu);
  expect_open_error(cu, SS_LINK_WRITE, SS_ERR_IO, want);
  double dt = ss_now() - t0;
  assert_true(dt >= SHORT_TIMEOUT_S && dt < 10 * SHORT_TIMEOUT_S);
  char tu[256];
  snprintf(tu, sizeof(tu), "tcp://127.0.0.1:%d", tcp_port);
  snprintf(want, sizeof(want), "%s: connect: no listener after 0.2 s: Connection refused", tu);
  expect_open_error(tu, SS_LINK_WRITE, SS_ERR_IO, want);
  unix_uri(lu, sizeof(lu), "unix-listen", "lonely.sock");
  t0 = ss_now();
  snprintf(want, sizeof(want), "%s: accept: no connection after 0.2 s: Connection timed out", lu);
  expect_open_error(lu, SS_LINK_READ, SS_ERR_IO, want);
  dt = ss_now() - t0;
  assert_true(dt >= SHORT_TIMEOUT_S && dt < 10 * SHORT_TIMEOUT_S);
}

/* A receiver that goes away: the write fails with a message naming the URI, and no SIGPIPE kills us. */
static void *accept_and_close(void *arg) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  if (ss_link_open(&ctx, arg, SS_LINK_READ, TIMEOUT_S, &l) == SS_OK) ss_link_close(l);
  return NULL;
}

static void write_until_failure(ss_link *l, const char *uri) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_status st = SS_OK;
  for (int i = 0; i < 10000 && st == SS_OK; i++) st = ss_link_write(&ctx, l, data, sizeof(data));
  assert_int_equal(st, SS_ERR_IO);
  char want[700];
  snprintf(want, sizeof(want), "%s: write: the receiver disconnected: ", uri);
  assert_memory_equal(ss_error_message(&ctx), want, strlen(want));
  assert_null(strchr(ss_error_message(&ctx), '\n'));
}

static void receiver_gone(void **state) {
  (void)state;
  char lu[600], cu[600];
  unix_uri(lu, sizeof(lu), "unix-listen", "gone.sock");
  unix_uri(cu, sizeof(cu), "unix", "gone.sock");
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, accept_and_close, lu), 0);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  if (ss_link_open(&ctx, cu, SS_LINK_WRITE, TIMEOUT_S, &l) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  pthread_join(t, NULL);
  write_until_failure(l, cu);
  ss_link_close(l);
  /* A pipe whose reader is gone: write() would raise SIGPIPE. */
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  char wu[64];
  snprintf(wu, sizeof(wu), "/dev/fd/%d", fds[1]);
  assert_int_equal(ss_link_open(&ctx, wu, SS_LINK_WRITE, 0, &l), SS_OK);
  close(fds[0]);
  close(fds[1]);
  write_until_failure(l, wu);
  ss_link_close(l);
}

/* ---- protocol v1: loopback by default, tokens, the header, the idle timeout ---------------------- */

/* Is there a listening TCP socket on `port` bound to `hex_addr` (/proc/net/tcp's notation)? -1: no /proc. */
static int proc_listening(int port, const char *hex_addr) {
  FILE *f = fopen("/proc/net/tcp", "r");
  if (!f) return -1;
  char line[512], want[64];
  snprintf(want, sizeof(want), "%s:%04X 00000000:0000 0A", hex_addr, port);
  int found = 0;
  while (fgets(line, sizeof(line), f)) found |= strstr(line, want) != NULL;
  fclose(f);
  return found;
}

typedef struct {
  char uri[128];
  ss_link_opts o;
  ss_status st;
  char msg[1024];
  size_t got;
  FILE *log; /* NULL: the test context's stream */
} listen_job;

static void *listen_main(void *arg) {
  listen_job *j = arg;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  if (j->log) ctx.log_stream = j->log;
  ss_link *l = NULL;
  j->st = ss_link_open_with(&ctx, j->uri, SS_LINK_READ, &j->o, &l);
  unsigned char buf[256];
  size_t n = 1;
  while (j->st == SS_OK && n > 0) {
    j->st = ss_link_read(&ctx, l, buf, sizeof(buf), &n);
    j->got += n;
  }
  snprintf(j->msg, sizeof(j->msg), "%s", ss_error_message(&ctx));
  ss_link_close(l);
  return NULL;
}

/* tcp-listen://:PORT binds loopback (127.0.0.1, and ::1 where there is IPv6), never the wildcard; a
 * non-loopback address needs a token and is refused before anything listens. */
static void listen_loopback_by_default(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char uri[128], text[512];
  snprintf(uri, sizeof(uri), "tcp-listen://:%d", tcp_port);
  assert_int_equal(ss_link_listen_addresses(&ctx, uri, text, sizeof(text)), SS_OK);
  printf("%s binds: %s\n", uri, text);
  for (char *a = strtok(text, " "); a; a = strtok(NULL, " "))
    assert_true(strncmp(a, "127.", 4) == 0 || strncmp(a, "[::1]:", 6) == 0);
  assert_int_equal(ss_link_check(&ctx, uri, SS_LINK_READ, 0), SS_OK);
  /* while it waits, the kernel shows a listener on 127.0.0.1 and none on 0.0.0.0 */
  listen_job j = {.o = {.timeout_s = TIMEOUT_S}};
  snprintf(j.uri, sizeof(j.uri), "%s", uri);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, listen_main, &j), 0);
  int seen = 0;
  for (int i = 0; i < 250 && seen == 0; i++) {
    sleep_s(0.01);
    seen = proc_listening(tcp_port, "0100007F");
  }
  if (seen >= 0) {
    assert_int_equal(seen, 1);
    assert_int_equal(proc_listening(tcp_port, "00000000"), 0);
  }
  char cu[128];
  snprintf(cu, sizeof(cu), "tcp://127.0.0.1:%d", tcp_port);
  ss_link *l = NULL;
  assert_int_equal(ss_link_open(&ctx, cu, SS_LINK_WRITE, TIMEOUT_S, &l), SS_OK);
  ss_link_close(l);
  pthread_join(t, NULL);
  assert_int_equal(j.st, SS_OK);
  /* every interface: refused without a token (usage), at once */
  char wide[128], want[512];
  snprintf(wide, sizeof(wide), "tcp-listen://0.0.0.0:%d", tcp_port);
  snprintf(want, sizeof(want),
           "%s: listening on a non-loopback address needs a shared token (--token-file); "
           "tcp-listen://:PORT listens on loopback only",
           wide);
  assert_int_equal(ss_link_check(&ctx, wide, SS_LINK_READ, 0), SS_ERR_USAGE);
  assert_string_equal(ss_error_message(&ctx), want);
  assert_int_equal(ss_link_check(&ctx, wide, SS_LINK_READ, 1), SS_OK);
  double t0 = ss_now();
  expect_open_error(wide, SS_LINK_READ, SS_ERR_USAGE, want);
  assert_true(ss_now() - t0 < SHORT_TIMEOUT_S);
}

/* A listener with a token: a wrong token is refused (both sides say so, the listener logs the peer),
 * the right one is let through. */
static void token_exchange(void **state) {
  (void)state;
  static const char good[] = "0123456789abcdef-good", bad[] = "0123456789abcdef-bad!";
  char log_path[512];
  ss_test_path(log_path, sizeof(log_path), "token.log");
  listen_job j = {.o = {.timeout_s = TIMEOUT_S, .token = good, .token_len = strlen(good)}};
  snprintf(j.uri, sizeof(j.uri), "tcp-listen://127.0.0.1:%d", tcp_port);
  j.log = fopen(log_path, "w");
  assert_non_null(j.log);
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, listen_main, &j), 0);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char cu[128], want[512];
  snprintf(cu, sizeof(cu), "tcp://127.0.0.1:%d", tcp_port);
  ss_link_opts o = {.timeout_s = TIMEOUT_S, .token = bad, .token_len = strlen(bad)};
  ss_link *l = NULL;
  assert_int_equal(ss_link_open_with(&ctx, cu, SS_LINK_WRITE, &o, &l), SS_ERR_INPUT);
  snprintf(want, sizeof(want),
           "%s: the listener refused the connection: a wrong token, or a listener without "
           "--token-file",
           cu);
  assert_string_equal(ss_error_message(&ctx), want);
  o.token = good;
  o.token_len = strlen(good);
  if (ss_link_open_with(&ctx, cu, SS_LINK_WRITE, &o, &l) != SS_OK) fail_msg("%s", ss_error_message(&ctx));
  assert_int_equal(ss_link_write(&ctx, l, data, sizeof(data)), SS_OK);
  ss_link_close(l);
  pthread_join(t, NULL);
  fclose(j.log);
  if (j.st != SS_OK) fail_msg("listener: %s", j.msg);
  assert_int_equal(j.got, sizeof(data));
  char *text = ss_test_slurp(log_path);
  snprintf(want, sizeof(want), "warning: tcp-listen://127.0.0.1:%d: refused connection from 127.0.0.1:", tcp_port);
  if (!strstr(text, want) || !strstr(text, ": bad token\n")) fail_msg("log: %s", text);
  free(text);
}

/* Token files: trimmed, 16..1024 bytes, not accessible to others. */
static void token_files(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char path[512], tok[SS_LINK_TOKEN_MAX], want[700];
  size_t len = 0;
  const char *p = ss_test_write_file("tok_ok", "  0123456789abcdef\n");
  snprintf(path, sizeof(path), "%s", p);
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(ss_link_token_load(&ctx, path, tok, sizeof(tok), &len), SS_OK);
  assert_int_equal(len, 16);
  assert_memory_equal(tok, "0123456789abcdef", 16);
  assert_int_equal(chmod(path, 0604), 0);
  assert_int_equal(ss_link_token_load(&ctx, path, tok, sizeof(tok), &len), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: the token file is accessible to others (mode 0604; chmod 600 it)", path);
  assert_string_equal(ss_error_message(&ctx), want);
  p = ss_test_write_file("tok_short", "short\n");
  snprintf(path, sizeof(path), "%s", p);
  assert_int_equal(chmod(path, 0600), 0);
  assert_int_equal(ss_link_token_load(&ctx, path, tok, sizeof(tok), &len), SS_ERR_INPUT);
  snprintf(want, sizeof(want), "%s: token: expected 16..1024 bytes (white space around it ignored), got 5", path);
  assert_string_equal(ss_error_message(&ctx), want);
}

/* The header: checked field by field; a file that ends inside it; an empty stream is a clean end. */
static void stream_header_checked(void **state) {
  (void)state;
  unsigned char head[SS_STREAM_HEADER_BYTES];
  ss_stream_header h = {C, 30000.0};
  ss_stream_header_encode(&h, head);
  static const struct {
    int channels;
    double rate;
    size_t bytes;
    const char *msg; /* NULL: accepted */
  } cases[] = {
      {C, 30000.0, sizeof(head), NULL},
      {C, 30001.0, sizeof(head), NULL}, /* within the rate tolerance */
      {C + 1, 30000.0, sizeof(head), "stream header: channels 3, expected 4 (the test)"},
      {C, 20000.0, sizeof(head), "stream header: rate 30000 Hz, expected 20000 Hz (the test)"},
      {C, 30000.0, 10, "stream ended inside its header: 10 of 32 bytes"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char path[512], want[700];
    ss_test_path(path, sizeof(path), "headed.raw");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(head, 1, cases[i].bytes, f), cases[i].bytes);
    if (cases[i].bytes == sizeof(head)) assert_int_equal(fwrite(data, 1, sizeof(data), f), sizeof(data));
    fclose(f);
    ss_ctx ctx;
    ss_test_ctx(&ctx);
    ss_link *l = NULL;
    assert_int_equal(ss_link_open(&ctx, path, SS_LINK_READ, TIMEOUT_S, &l), SS_OK);
    ss_frame_reader_opts fo = {.rate_hz = cases[i].rate, .expected_by = "the test"};
    ss_frame_reader *r = NULL;
    assert_int_equal(ss_frame_reader_open_opts(&ctx, l, cases[i].channels, MAX_ROWS, &fo, &r), SS_OK);
    const int16_t *rows;
    int64_t n = 0;
    double t;
    ss_status st = ss_frame_reader_next(&ctx, r, &rows, &n, &t);
    if (!cases[i].msg) {
      assert_int_equal(st, SS_OK);
      assert_int_equal(n, MAX_ROWS);
      assert_memory_equal(rows, data, (size_t)MAX_ROWS * FRAME);
    } else {
      assert_int_equal(st, SS_ERR_INPUT);
      snprintf(want, sizeof(want), "%s: %s", path, cases[i].msg);
      assert_string_equal(ss_error_message(&ctx), want);
    }
    ss_frame_reader_close(r);
    ss_link_close(l);
  }
}

/* A pipe that stays open and silent: the read fails after the idle timeout, naming the link. */
static void idle_timeout(void **state) {
  (void)state;
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  char ru[64], want[256];
  snprintf(ru, sizeof(ru), "/dev/fd/%d", fds[0]);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link_opts o = {.timeout_s = TIMEOUT_S, .idle_timeout_s = SHORT_TIMEOUT_S};
  ss_link *l = NULL;
  assert_int_equal(ss_link_open_with(&ctx, ru, SS_LINK_READ, &o, &l), SS_OK);
  unsigned char b[16];
  size_t n = 0;
  assert_int_equal(write(fds[1], "x", 1), 1);
  assert_int_equal(ss_link_read(&ctx, l, b, sizeof(b), &n), SS_OK);
  assert_int_equal(n, 1);
  double t0 = ss_now();
  assert_int_equal(ss_link_read(&ctx, l, b, sizeof(b), &n), SS_ERR_INPUT);
  double dt = ss_now() - t0;
  snprintf(want, sizeof(want), "no data from %s for 0.2 s (--idle-timeout)", ru);
  assert_string_equal(ss_error_message(&ctx), want);
  assert_true(dt >= SHORT_TIMEOUT_S * 0.9 && dt < 10 * SHORT_TIMEOUT_S);
  assert_int_equal(ss_link_idle_check(&ctx, l), SS_ERR_INPUT);
  ss_link_close(l);
  close(fds[0]);
  close(fds[1]);
}

/* ---- spikestream replay --------------------------------------------------------------------- */

#define SIM_DURATION "0.2"
#define SIM_SAMPLES 6000
#define SIM_CHANNELS 32
#define SIM_RATE 30000.0

static char sim_bin[512];

typedef struct {
  const char *uri;
  int64_t stop_after_rows; /* > 0: disconnect early */
  int16_t *got;
  int64_t rows;
  ss_status st;
  char msg[1024];
} reader_job;

static void *reader_main(void *arg) {
  reader_job *r = arg;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  r->st = ss_link_open(&ctx, r->uri, SS_LINK_READ, TIMEOUT_S, &l);
  ss_frame_reader *fr = NULL;
  ss_frame_reader_opts fo = {.rate_hz = SIM_RATE, .expected_by = "the test"}; /* replay writes the header */
  if (r->st == SS_OK) r->st = ss_frame_reader_open_opts(&ctx, l, SIM_CHANNELS, 64, &fo, &fr);
  while (r->st == SS_OK) {
    const int16_t *p;
    int64_t n;
    double t;
    r->st = ss_frame_reader_next(&ctx, fr, &p, &n, &t);
    if (r->st != SS_OK || n == 0 || r->rows + n > SIM_SAMPLES) break;
    memcpy(r->got + r->rows * SIM_CHANNELS, p, (size_t)(n * SIM_CHANNELS) * sizeof(int16_t));
    r->rows += n;
    if (r->stop_after_rows > 0 && r->rows >= r->stop_after_rows) break;
  }
  snprintf(r->msg, sizeof(r->msg), "%s", ss_error_message(&ctx));
  ss_frame_reader_close(fr);
  ss_link_close(l);
  return NULL;
}

static int replay_setup(void **state) {
  (void)state;
  ss_test_path(sim_bin, sizeof(sim_bin), "sim.bin");
  char args[1024];
  snprintf(args, sizeof(args),
           "simulate -q -o '%s' --preset easy --format binary --duration " SIM_DURATION " --units 3 --seed %llu",
           sim_bin, (unsigned long long)(seed % 1000000));
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != 0) fprintf(stderr, "simulate failed: %s\n", err);
  free(out);
  free(err);
  return rc;
}

typedef struct {
  int64_t first, n;
  double t;
} log_record;

static int64_t load_send_log(const char *path, log_record *out, int64_t cap) {
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  int64_t n = 0;
  unsigned char rec[24];
  while (n < cap && fread(rec, sizeof(rec), 1, f) == 1) { /* little-endian on the test machines */
    memcpy(&out[n].first, rec, 8);
    memcpy(&out[n].n, rec + 8, 8);
    memcpy(&out[n].t, rec + 16, 8);
    n++;
  }
  fclose(f);
  return n;
}

static void replay_to_socket(void **state) {
  (void)state;
  char lu[600], cu[600], log_path[512], args[2048];
  unix_uri(lu, sizeof(lu), "unix-listen", "replay.sock");
  unix_uri(cu, sizeof(cu), "unix", "replay.sock");
  ss_test_path(log_path, sizeof(log_path), "send.log");
  static int16_t got[SIM_SAMPLES * SIM_CHANNELS];
  reader_job r = {.uri = lu, .got = got};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
  snprintf(args, sizeof(args), "replay -q '%s' --channels %d --rate %g --to '%s' --send-log '%s'", sim_bin,
           SIM_CHANNELS, SIM_RATE, cu, log_path);
  char *out, *err;
  double t0 = ss_now();
  int rc = ss_test_run_cli(args, &out, &err);
  double secs = ss_now() - t0;
  pthread_join(t, NULL);
  if (rc != 0) fail_msg("replay: rc %d: %s", rc, err);
  if (r.st != SS_OK) fail_msg("reader: %s", r.msg);
  assert_true(secs >= 0.19);
  assert_non_null(strstr(out, "replay: 200 blocks, 6000 rows (0.200 s of 32 channels at 30000 Hz)"));
  assert_string_equal(err, "");
  /* exactly the file's samples */
  assert_int_equal(r.rows, SIM_SAMPLES);
  char *file = malloc(sizeof(got));
  FILE *f = fopen(sim_bin, "rb");
  assert_int_equal(fread(file, 1, sizeof(got), f), sizeof(got));
  fclose(f);
  assert_memory_equal(got, file, sizeof(got));
  free(file);
  /* one record per 1 ms block, contiguous, times non-decreasing */
  static log_record recs[400];
  int64_t n = load_send_log(log_path, recs, 400);
  assert_int_equal(n, 200);
  for (int64_t i = 0; i < n; i++) {
    assert_int_equal(recs[i].first, i * 30);
    assert_int_equal(recs[i].n, 30);
    if (i > 0) assert_true(recs[i].t >= recs[i - 1].t);
  }
  /* paced: the last block is due 199 ms after the first (whose own send may have been a few ms late) */
  assert_true(recs[n - 1].t - recs[0].t >= 0.19);
  free(out);
  free(err);
}

/* --speed 0 to stdout, a window of the file, 2.5 ms blocks (75 rows; the last one short). */
static void replay_window_to_stdout(void **state) {
  (void)state;
  char args[1024];
  snprintf(args, sizeof(args),
           "replay -q '%s' --channels %d --rate %g --to - --speed 0 --start 0.05 --duration 0.101 --block-ms 2.5",
           sim_bin, SIM_CHANNELS, SIM_RATE);
  char *out, *err;
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(err, "replay: 41 blocks, 3030 rows (0.101 s of 32 channels at 30000 Hz)"));
  char out_path[512];
  ss_test_path(out_path, sizeof(out_path), "cli.out");
  FILE *f = fopen(out_path, "rb"), *g = fopen(sim_bin, "rb");
  assert_true(f && g);
  size_t bytes = 3030 * SIM_CHANNELS * sizeof(int16_t);
  char *a = malloc(bytes + 1), *b = malloc(bytes);
  unsigned char head[SS_STREAM_HEADER_BYTES], want_head[SS_STREAM_HEADER_BYTES];
  ss_stream_header h = {SIM_CHANNELS, SIM_RATE};
  ss_stream_header_encode(&h, want_head);
  assert_int_equal(fread(head, 1, sizeof(head), f), sizeof(head));
  assert_memory_equal(head, want_head, sizeof(head));
  assert_int_equal(fread(a, 1, bytes + 1, f), bytes);
  assert_int_equal(fseek(g, 1500 * SIM_CHANNELS * (long)sizeof(int16_t), SEEK_SET), 0);
  assert_int_equal(fread(b, 1, bytes, g), bytes);
  assert_memory_equal(a, b, bytes);
  fclose(f);
  fclose(g);
  free(a);
  free(b);
  free(out);
  free(err);
}

/* The receiver disconnects early: exit 3 with one line naming the URI. */
static void replay_receiver_disconnects(void **state) {
  (void)state;
  char lu[600], cu[600], args[2048];
  unix_uri(lu, sizeof(lu), "unix-listen", "early.sock");
  unix_uri(cu, sizeof(cu), "unix", "early.sock");
  static int16_t got[SIM_SAMPLES * SIM_CHANNELS];
  reader_job r = {.uri = lu, .got = got, .stop_after_rows = 60};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, reader_main, &r), 0);
  snprintf(args, sizeof(args), "replay -q '%s' --channels %d --rate %g --to '%s'", sim_bin, SIM_CHANNELS, SIM_RATE, cu);
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  pthread_join(t, NULL);
  assert_int_equal(rc, 3);
  char want[1024];
  snprintf(want, sizeof(want), "spikestream replay: %s: write: the receiver disconnected: ", cu);
  assert_memory_equal(err, want, strlen(want));
  assert_ptr_equal(strchr(err, '\n'), err + strlen(err) - 1); /* one line */
  free(out);
  free(err);
}

static void expect_cli(const char *args, int want_rc, const char *want_err) {
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != want_rc || !strstr(err, want_err)) fail_msg("%s: rc %d, stderr \"%s\"", args, rc, err);
  free(out);
  free(err);
}

static void replay_bad_arguments(void **state) {
  (void)state;
  char args[1024], want[1024];
  snprintf(args, sizeof(args), "replay '%s' --channels 32 --rate 30000 --to x --block-ms 0", sim_bin);
  expect_cli(args, 2, "spikestream replay: --block-ms: expected a number > 0 and <= 60000, got \"0\"\n");
  snprintf(args, sizeof(args), "replay '%s' --channels 32 --rate 30000 --to x --speed -1", sim_bin);
  expect_cli(args, 2, "spikestream replay: --speed: expected a number >= 0, got \"-1\"\n");
  snprintf(args, sizeof(args), "replay '%s' --channels 32 --rate 30000", sim_bin);
  expect_cli(args, 2, "spikestream replay: --to URI is required\n");
  snprintf(args, sizeof(args), "replay '%s' --channels 32 --rate 30000 --to x --start 0.2", sim_bin);
  snprintf(want, sizeof(want), "spikestream replay: --start 0.2: past the end of %s (0.200 s)\n", sim_bin);
  expect_cli(args, 2, want);
  snprintf(args, sizeof(args), "replay '%s' --channels 32 --rate 30000 --to ftp://x", sim_bin);
  expect_cli(args, 1, "spikestream replay: ftp://x: unknown scheme \"ftp\"");
  char missing[512];
  ss_test_path(missing, sizeof(missing), "missing.bin");
  snprintf(args, sizeof(args), "replay '%s' --channels 32 --rate 30000 --to x", missing);
  snprintf(want, sizeof(want), "spikestream replay: %s", missing);
  expect_cli(args, 1, want);
  expect_cli("replay --help", 0, "");
}

int main(void) {
  seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
  printf("test_link seed %llu\n", (unsigned long long)seed);
  ss_rng rng = ss_rng_make(seed, SS_RNG_TEST, 0);
  for (int i = 0; i < ROWS * C; i++) data[i] = (int16_t)(uint16_t)ss_rng_next_u64(&rng);
  tcp_port = 20000 + (int)ss_rng_next_below(&rng, 30000); /* fresh per run: parallel runs do not collide */
  const struct CMUnitTest link_tests[] = {
      cmocka_unit_test(tcp_frames),
      cmocka_unit_test(unix_frames),
      cmocka_unit_test(unix_reader_connects),
      cmocka_unit_test(connect_retried),
      cmocka_unit_test(pipe_frames),
      cmocka_unit_test(stdin_frames),
      cmocka_unit_test(ended_mid_frame),
      cmocka_unit_test(listener_reopened),
      cmocka_unit_test(bad_uris),
      cmocka_unit_test(frame_reader_arguments),
      cmocka_unit_test(timeouts),
      cmocka_unit_test(receiver_gone),
      cmocka_unit_test(listen_loopback_by_default),
      cmocka_unit_test(token_exchange),
      cmocka_unit_test(token_files),
      cmocka_unit_test(stream_header_checked),
      cmocka_unit_test(idle_timeout),
  };
  const struct CMUnitTest replay_tests[] = {
      cmocka_unit_test(replay_to_socket),
      cmocka_unit_test(replay_window_to_stdout),
      cmocka_unit_test(replay_receiver_disconnects),
      cmocka_unit_test(replay_bad_arguments),
  };
  int failed = cmocka_run_group_tests_name("link", link_tests, NULL, NULL);
  failed += cmocka_run_group_tests_name("replay", replay_tests, replay_setup, NULL);
  return failed ? 1 : 0;
}
