/* link.c — byte-stream links named by URI (io/link.h): one URI parser, one connect path and one listen
 * path parameterised by address family (TCP over IPv4/IPv6, UNIX domain), stdin/stdout and plain files;
 * and the int16 frame reader that carries partial frames between reads.
 *
 * Why the care: live mode reads a stream whose writer may start before or after it (connects
 * are retried), may vanish at any time (writes never raise SIGPIPE; a vanished peer is an error naming
 * the URI) and any signal may interrupt a system call (every loop retries EINTR). */
#include "io/link.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"

#define SS_LINK_URI_MAX 1024
#define SS_LINK_MAX_ADDRS 8      /* addresses tried per host name */
#define SS_LINK_RETRY_S 0.02     /* pause between connect attempts while the peer is not there yet */
#define SS_LINK_LISTEN_BACKLOG 1 /* a listener accepts one connection */
#define SS_LINK_PORT_MAX 65535
#define SS_LINK_FILE_MODE 0644
#define SS_FRAME_MAX_CHANNELS 65536
#define SS_LINK_AUTH_MAGIC "SSTOKEN" /* 8 bytes with its NUL: the token message that opens a connection */
#define SS_LINK_AUTH_ACK 0x06        /* the listener's one-byte answer to a good token */
#define SS_LINK_AUTH_TIMEOUT_S 5.0   /* how long either side waits for the other's part of the exchange */
#define SS_LINK_ADDR_TEXT 64

typedef enum { KIND_STDIO, KIND_FILE, KIND_CONNECT, KIND_LISTEN } link_kind;

struct ss_link {
  int fd;
  int owns_fd;           /* stdin/stdout are not closed */
  int is_socket;         /* send(MSG_NOSIGNAL); otherwise SIGPIPE is blocked around write() */
  double idle_timeout_s; /* reads: <= 0 no limit */
  double t_last_data;    /* ss_now() at the open and after every read that returned */
  char uri[SS_LINK_URI_MAX];
};

/* A parsed URI: what to open and, for sockets, the family and address text. */
typedef struct {
  link_kind kind;
  int family;     /* AF_UNIX, or AF_UNSPEC for TCP (resolved) */
  char host[256]; /* TCP ("" = any, listeners only) */
  char port[8];
  const char *path; /* file path or UNIX socket path (points into the URI) */
} link_addr;

/* Resolved socket addresses to try in order. */
typedef struct {
  int n;
  struct sockaddr_storage addr[SS_LINK_MAX_ADDRS];
  socklen_t len[SS_LINK_MAX_ADDRS];
  int family[SS_LINK_MAX_ADDRS];
} addr_list;

static const struct {
  const char *prefix;
  link_kind kind;
  int family;
} schemes[] = {{"tcp://", KIND_CONNECT, AF_UNSPEC},
               {"tcp-listen://", KIND_LISTEN, AF_UNSPEC},
               {"unix://", KIND_CONNECT, AF_UNIX},
               {"unix-listen://", KIND_LISTEN, AF_UNIX}};
#define N_SCHEMES (sizeof(schemes) / sizeof(schemes[0]))

static const char scheme_list[] = "stdin, stdout, -, a file path, tcp://, tcp-listen://, unix://, unix-listen://";

/* ---- URI parsing ---------------------------------------------------------------------------- */

/* "host:port" or "[v6]:port"; the port an integer in 1..65535. */
static ss_status parse_host_port(ss_ctx *ctx, const char *uri, const char *rest, link_addr *a) {
  const char *colon = strrchr(rest, ':');
  const char *host = rest, *host_end = colon;
  if (!colon || !colon[1]) return ss_fail(ctx, SS_ERR_INPUT, "%s: expected host:port after the scheme", uri);
  if (*rest == '[') { /* IPv6 literal */
    const char *close = strchr(rest, ']');
    if (!close || close + 1 != colon) return ss_fail(ctx, SS_ERR_INPUT, "%s: expected [address]:port", uri);
    host = rest + 1;
    host_end = close;
  }
  if ((size_t)(host_end - host) >= sizeof(a->host)) return ss_fail(ctx, SS_ERR_INPUT, "%s: host name too long", uri);
  char *end = NULL;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (errno || *end || end == colon + 1 || port < 1 || port > SS_LINK_PORT_MAX)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: port \"%s\": expected an integer in 1..%d", uri, colon + 1,
                   SS_LINK_PORT_MAX);
  memcpy(a->host, host, (size_t)(host_end - host));
  a->host[host_end - host] = '\0';
  if (!a->host[0] && a->kind == KIND_CONNECT) return ss_fail(ctx, SS_ERR_INPUT, "%s: empty host name", uri);
  snprintf(a->port, sizeof(a->port), "%ld", port);
  return SS_OK;
}

static ss_status parse_socket_uri(ss_ctx *ctx, const char *uri, const char *rest, link_addr *a) {
  if (a->family != AF_UNIX) return parse_host_port(ctx, uri, rest, a);
  struct sockaddr_un sun;
  if (!*rest) return ss_fail(ctx, SS_ERR_INPUT, "%s: empty socket path (expected unix:///path)", uri);
  if (strlen(rest) >= sizeof(sun.sun_path))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: socket path longer than %zu bytes", uri, sizeof(sun.sun_path) - 1);
  a->path = rest;
  return SS_OK;
}

static ss_status parse_uri(ss_ctx *ctx, const char *uri, ss_link_dir dir, link_addr *a) {
  memset(a, 0, sizeof(*a));
  if (!uri || !*uri) return ss_fail(ctx, SS_ERR_INPUT, "empty link URI (expected %s)", scheme_list);
  if (strlen(uri) >= SS_LINK_URI_MAX) return ss_fail(ctx, SS_ERR_INPUT, "%.64s...: link URI too long", uri);
  if (!strcmp(uri, "-") || !strcmp(uri, "stdin") || !strcmp(uri, "stdout")) {
    if ((!strcmp(uri, "stdin") && dir != SS_LINK_READ) || (!strcmp(uri, "stdout") && dir != SS_LINK_WRITE))
      return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot %s it", uri, dir == SS_LINK_READ ? "read from" : "write to");
    a->kind = KIND_STDIO;
    return SS_OK;
  }
  for (size_t i = 0; i < N_SCHEMES; i++) {
    size_t len = strlen(schemes[i].prefix);
    if (strncmp(uri, schemes[i].prefix, len) != 0) continue;
    a->kind = schemes[i].kind;
    a->family = schemes[i].family;
    return parse_socket_uri(ctx, uri, uri + len, a);
  }
  const char *sep = strstr(uri, "://");
  if (sep)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: unknown scheme \"%.*s\" (expected %s)", uri, (int)(sep - uri), uri,
                   scheme_list);
  a->kind = KIND_FILE;
  a->path = uri;
  return SS_OK;
}

/* ---- addresses ------------------------------------------------------------------------------ */

static ss_status resolve(ss_ctx *ctx, const char *uri, const link_addr *a, addr_list *out) {
  memset(out, 0, sizeof(*out));
  if (a->family == AF_UNIX) {
    struct sockaddr_un *sun = (struct sockaddr_un *)&out->addr[0];
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, a->path, strlen(a->path) + 1); /* length checked by the parser */
    out->len[0] = (socklen_t)sizeof(*sun);
    out->family[0] = AF_UNIX;
    out->n = 1;
    return SS_OK;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  /* No AI_PASSIVE: a listener with an empty host gets the loopback addresses, not the wildcard. */
  hints.ai_flags = AI_NUMERICSERV;
  int rc = getaddrinfo(a->host[0] ? a->host : NULL, a->port, &hints, &res);
  if (rc != 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot resolve host \"%s\": %s", uri, a->host, gai_strerror(rc));
  for (struct addrinfo *p = res; p && out->n < SS_LINK_MAX_ADDRS; p = p->ai_next) {
    memcpy(&out->addr[out->n], p->ai_addr, p->ai_addrlen);
    out->len[out->n] = p->ai_addrlen;
    out->family[out->n++] = p->ai_family;
  }
  freeaddrinfo(res);
  if (out->n == 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: host \"%s\" has no address", uri, a->host);
  return SS_OK;
}

static int is_loopback(const struct sockaddr_storage *ss) {
  if (ss->ss_family == AF_INET) return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
  if (ss->ss_family != AF_INET6) return ss->ss_family == AF_UNIX;
  const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ss)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(a6) || (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

/* "127.0.0.1:5000", "[::1]:5000", or "a local process" for a UNIX socket. */
static void addr_text(const struct sockaddr_storage *ss, socklen_t len, char *out, size_t cap) {
  char host[INET6_ADDRSTRLEN + 16], port[16];
  if (ss->ss_family == AF_UNIX || getnameinfo((const struct sockaddr *)ss, len, host, sizeof(host), port, sizeof(port),
                                              NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    snprintf(out, cap, "%s", ss->ss_family == AF_UNIX ? "a local process" : "an unknown address");
    return;
  }
  snprintf(out, cap, ss->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

/* A listener on any address that is not loopback is reachable from other machines: it needs a token. */
static ss_status check_exposure(ss_ctx *ctx, const char *uri, const link_addr *a, const addr_list *al, int has_token) {
  if (a->kind != KIND_LISTEN || a->family == AF_UNIX || has_token) return SS_OK;
  for (int i = 0; i < al->n; i++)
    if (!is_loopback(&al->addr[i]))
      return ss_fail(ctx, SS_ERR_USAGE,
                     "%s: listening on a non-loopback address needs a shared token (--token-file); "
                     "tcp-listen://:PORT listens on loopback only",
                     uri);
  return SS_OK;
}

/* TCP carries small latency-critical blocks: never wait to coalesce them (Nagle). */
static void tune_socket(int fd, int family) {
  int one = 1;
  if (family != AF_UNIX) (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static void close_quietly(int fd) {
  if (fd >= 0) (void)close(fd);
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* The peer is not there yet: worth trying again until the timeout. */
static int connect_retryable(int err) {
  return err == ECONNREFUSED || err == ENOENT || err == ETIMEDOUT || err == EAGAIN || err == ENETUNREACH ||
         err == EHOSTUNREACH || err == ECONNABORTED || err == ECONNRESET;
}

/* One connect attempt over every address: the connected socket or -1 with *err set. */
static int try_connect(const addr_list *al, int *err) {
  for (int i = 0; i < al->n; i++) {
    int fd = socket(al->family[i], SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *err = errno;
      continue;
    }
    int rc;
    do rc = connect(fd, (const struct sockaddr *)&al->addr[i], al->len[i]);
    while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      tune_socket(fd, al->family[i]);
      return fd;
    }
    *err = errno;
    close(fd);
  }
  return -1;
}

/* timeout_s <= 0: no limit. */
static int past_deadline(double t0, double timeout_s) { return timeout_s > 0 && ss_now() - t0 >= timeout_s; }

static int cancelled(const volatile sig_atomic_t *cancel) { return cancel && *cancel; }

static ss_status cancel_failure(ss_ctx *ctx, const char *uri) {
  return ss_fail(ctx, SS_ERR_IO, "%s: cancelled while waiting for the peer", uri);
}

/* ---- the token exchange --------------------------------------------------------------------- */

/* Wait up to `wait_s` for fd to become readable: 1 readable, 0 not in time, -1 poll failed. */
static int wait_readable(int fd, double wait_s) {
  double t0 = ss_now();
  for (;;) {
    double left = wait_s - (ss_now() - t0);
    if (left <= 0) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    int rc = poll(&p, 1, (int)(left * 1e3) + 1);
    if (rc > 0) return 1;
    if (rc < 0 && errno != EINTR) return -1;
  }
}

/* Exactly n bytes within `wait_s`: 0, or -1 (the peer closed, went quiet or failed). */
static int read_exact(int fd, unsigned char *buf, size_t n, double wait_s) {
  double t0 = ss_now();
  for (size_t have = 0; have < n;) {
    if (wait_readable(fd, wait_s - (ss_now() - t0)) != 1) return -1;
    ssize_t r = recv(fd, buf + have, n - have, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    have += (size_t)r;
  }
  return 0;
}

static int send_all(int fd, const void *buf, size_t n) {
  const unsigned char *p = buf;
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Token message: magic (8 bytes), u32 little-endian length, the token's bytes. */
static int send_token(int fd, const char *token, size_t len) {
  unsigned char head[12];
  memcpy(head, SS_LINK_AUTH_MAGIC, 8);
  for (int i = 0; i < 4; i++) head[8 + i] = (unsigned char)(len >> (8 * i));
  return send_all(fd, head, sizeof(head)) || send_all(fd, token, len) ? -1 : 0;
}

/* Comparison whose time does not depend on where the first difference is. */
static int same_secret(const unsigned char *a, const unsigned char *b, size_t n) {
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
  return d == 0;
}

const char *ss_link_token_check(int fd, const char *token, size_t len) {
  unsigned char head[12], got[SS_LINK_TOKEN_MAX];
  if (read_exact(fd, head, sizeof(head), SS_LINK_AUTH_TIMEOUT_S) != 0) return "missing token";
  if (memcmp(head, SS_LINK_AUTH_MAGIC, 8) != 0) return "missing token";
  uint32_t n = (uint32_t)head[8] | (uint32_t)head[9] << 8 | (uint32_t)head[10] << 16 | (uint32_t)head[11] << 24;
  if (n != len) return "bad token";
  if (read_exact(fd, got, n, SS_LINK_AUTH_TIMEOUT_S) != 0) return "missing token";
  if (!same_secret(got, (const unsigned char *)token, len)) return "bad token";
  unsigned char ack = SS_LINK_AUTH_ACK;
  return send_all(fd, &ack, 1) == 0 ? NULL : "disconnected before the answer";
}

/* The connecting side: send the token, wait for the listener's answer. */
static ss_status present_token(ss_ctx *ctx, const char *uri, int fd, const char *token, size_t len) {
  unsigned char ack = 0;
  if (send_token(fd, token, len) != 0 || read_exact(fd, &ack, 1, SS_LINK_AUTH_TIMEOUT_S) != 0 ||
      ack != SS_LINK_AUTH_ACK)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: the listener refused the connection: a wrong token, or a listener "
                   "without --token-file",
                   uri);
  return SS_OK;
}

/* ---- opening ------------------------------------------------------------------------------- */

static ss_status open_connect(ss_ctx *ctx, const char *uri, const addr_list *al, const ss_link_opts *o, int *fd) {
  double t0 = ss_now();
  int err = 0;
  for (;;) {
    if ((*fd = try_connect(al, &err)) >= 0) break;
    if (!connect_retryable(err)) return ss_fail(ctx, SS_ERR_IO, "%s: connect: %s", uri, strerror(err));
    if (past_deadline(t0, o->timeout_s))
      return ss_fail(ctx, SS_ERR_IO, "%s: connect: no listener after %g s: %s", uri, o->timeout_s, strerror(err));
    if (cancelled(o->cancel)) return cancel_failure(ctx, uri);
    sleep_s(SS_LINK_RETRY_S);
  }
  if (!o->token) return SS_OK;
  ss_status st = present_token(ctx, uri, *fd, o->token, o->token_len);
  if (st != SS_OK) {
    close(*fd);
    *fd = -1;
  }
  return st;
}

/* A UNIX socket file left by an earlier listener is replaced; anything else at the path is not. */
static ss_status clear_unix_path(ss_ctx *ctx, const char *uri, const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return SS_OK;
  if (!S_ISSOCK(st.st_mode)) return ss_fail(ctx, SS_ERR_IO, "%s: %s exists and is not a socket", uri, path);
  if (unlink(path) != 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot remove the old socket: %s", uri, strerror(errno));
  return SS_OK;
}

/* Listening sockets on every resolved address that can be bound (loopback: 127.0.0.1 and ::1 when the
 * machine has IPv6); at least one, else the last error. */
typedef struct {
  int n;
  int fd[SS_LINK_MAX_ADDRS];
  int family[SS_LINK_MAX_ADDRS];
} listeners;

static void listeners_close(listeners *ls) {
  for (int i = 0; i < ls->n; i++) close(ls->fd[i]);
  ls->n = 0;
}

static ss_status bind_listeners(ss_ctx *ctx, const char *uri, const addr_list *al, listeners *ls) {
  int err = 0;
  ls->n = 0;
  for (int i = 0; i < al->n; i++) {
    int fd = socket(al->family[i], SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (al->family[i] != AF_UNIX) (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* each IPv6 socket takes only IPv6: an IPv4 address of the list gets its own socket */
    if (al->family[i] == AF_INET6) (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&al->addr[i], al->len[i]) == 0 && listen(fd, SS_LINK_LISTEN_BACKLOG) == 0) {
      ls->fd[ls->n] = fd;
      ls->family[ls->n++] = al->family[i];
      continue;
    }
    err = errno;
    close(fd);
  }
  return ls->n > 0 ? SS_OK : ss_fail(ctx, SS_ERR_IO, "%s: listen: %s", uri, strerror(err));
}

/* Wait for a connection on any listener: its index, -1 timed out (or cancelled), -2 poll failed. */
static int wait_connection(const listeners *ls, double wait_ms) {
  struct pollfd p[SS_LINK_MAX_ADDRS];
  for (int i = 0; i < ls->n; i++) p[i] = (struct pollfd){ls->fd[i], POLLIN, 0};
  int rc = poll(p, (nfds_t)ls->n, (int)wait_ms);
  if (rc < 0) return errno == EINTR ? -1 : -2;
  for (int i = 0; i < ls->n; i++)
    if (p[i].revents) return i;
  return -1;
}

/* Wait (EINTR-safe) for one connection, with the token when one is set: a connection without it is
 * closed, logged, and the wait goes on. With a cancel flag the wait looks at it every SS_LINK_RETRY_S. */
static ss_status accept_one(ss_ctx *ctx, const char *uri, const listeners *ls, const ss_link_opts *o, int *fd) {
  double t0 = ss_now(), timeout_s = o->timeout_s;
  int family = 0;
  for (;;) {
    double left = timeout_s - (ss_now() - t0);
    if (timeout_s > 0 && left <= 0)
      return ss_fail(ctx, SS_ERR_IO, "%s: accept: no connection after %g s: %s", uri, timeout_s, strerror(ETIMEDOUT));
    if (cancelled(o->cancel)) return cancel_failure(ctx, uri);
    double wait_ms = timeout_s > 0 ? left * 1e3 + 1 : -1;
    if (o->cancel && (wait_ms < 0 || wait_ms > SS_LINK_RETRY_S * 1e3)) wait_ms = SS_LINK_RETRY_S * 1e3 + 1;
    int i = wait_connection(ls, wait_ms);
    if (i == -2) return ss_fail(ctx, SS_ERR_IO, "%s: poll: %s", uri, strerror(errno));
    if (i < 0) continue;
    struct sockaddr_storage peer;
    socklen_t peer_len = sizeof(peer);
    *fd = accept(ls->fd[i], (struct sockaddr *)&peer, &peer_len);
    if (*fd < 0) {
      if (errno != EINTR && errno != ECONNABORTED && errno != EAGAIN)
        return ss_fail(ctx, SS_ERR_IO, "%s: accept: %s", uri, strerror(errno));
      continue;
    }
    family = ls->family[i];
    const char *why = o->token ? ss_link_token_check(*fd, o->token, o->token_len) : NULL;
    if (!why) break;
    char who[SS_LINK_ADDR_TEXT];
    addr_text(&peer, peer_len, who, sizeof(who));
    ss_log_warn(ctx, "%s: refused connection from %s: %s", uri, who, why);
    close(*fd);
    *fd = -1;
  }
  (void)fcntl(*fd, F_SETFD, FD_CLOEXEC);
  tune_socket(*fd, family);
  return SS_OK;
}

static ss_status open_listen(ss_ctx *ctx, const char *uri, const link_addr *a, const addr_list *al,
                             const ss_link_opts *o, int *fd) {
  SS_TRY(check_exposure(ctx, uri, a, al, o->token != NULL));
  if (a->family == AF_UNIX) SS_TRY(clear_unix_path(ctx, uri, a->path));
  listeners ls;
  SS_TRY(bind_listeners(ctx, uri, al, &ls));
  ss_status st = accept_one(ctx, uri, &ls, o, fd);
  listeners_close(&ls);
  /* The socket file only served to rendezvous: remove it so no stale file is left behind. */
  if (a->family == AF_UNIX) (void)unlink(a->path);
  return st;
}

static ss_status open_file(ss_ctx *ctx, const char *uri, const link_addr *a, ss_link_dir dir, int *fd, int *owns) {
  *owns = a->kind != KIND_STDIO;
  if (a->kind == KIND_STDIO) {
    *fd = dir == SS_LINK_READ ? STDIN_FILENO : STDOUT_FILENO;
    return SS_OK;
  }
  int flags = dir == SS_LINK_READ ? O_RDONLY : (O_WRONLY | O_CREAT | O_TRUNC);
  do *fd = open(a->path, flags | O_CLOEXEC, SS_LINK_FILE_MODE);
  while (*fd < 0 && errno == EINTR);
  if (*fd < 0)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot open for %s: %s", uri, dir == SS_LINK_READ ? "reading" : "writing",
                   strerror(errno));
  return SS_OK;
}

/* ---- public link API ------------------------------------------------------------------------ */

ss_status ss_link_open(ss_ctx *ctx, const char *uri, ss_link_dir dir, double timeout_s, ss_link **out) {
  return ss_link_open_cancellable(ctx, uri, dir, timeout_s, NULL, out);
}

ss_status ss_link_open_cancellable(ss_ctx *ctx, const char *uri, ss_link_dir dir, double timeout_s,
                                   const volatile sig_atomic_t *cancel, ss_link **out) {
  ss_link_opts o = {.timeout_s = timeout_s, .cancel = cancel};
  return ss_link_open_with(ctx, uri, dir, &o, out);
}

ss_status ss_link_check(ss_ctx *ctx, const char *uri, ss_link_dir dir, int has_token) {
  link_addr a;
  SS_TRY(parse_uri(ctx, uri, dir, &a));
  if (a.kind != KIND_LISTEN || a.family == AF_UNIX) return SS_OK;
  addr_list al;
  SS_TRY(resolve(ctx, uri, &a, &al));
  return check_exposure(ctx, uri, &a, &al, has_token);
}

ss_status ss_link_listen_addresses(ss_ctx *ctx, const char *uri, char *text, size_t cap) {
  link_addr a;
  SS_TRY(parse_uri(ctx, uri, SS_LINK_READ, &a));
  if (a.kind != KIND_LISTEN || a.family == AF_UNIX)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: not a tcp-listen:// URI", uri);
  addr_list al;
  SS_TRY(resolve(ctx, uri, &a, &al));
  size_t used = 0;
  text[0] = '\0';
  for (int i = 0; i < al.n && used < cap; i++) {
    char one[SS_LINK_ADDR_TEXT];
    addr_text(&al.addr[i], al.len[i], one, sizeof(one));
    int w = snprintf(text + used, cap - used, "%s%s", i ? " " : "", one);
    used += w > 0 ? (size_t)w : 0;
  }
  return SS_OK;
}

ss_status ss_link_token_load(ss_ctx *ctx, const char *path, char *token, size_t cap, size_t *len) {
  *len = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open the token file: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: the token file is not a regular file", path);
  }
  if (st.st_mode & S_IRWXO) {
    close(fd);
    return ss_fail(ctx, SS_ERR_INPUT, "%s: the token file is accessible to others (mode %04o; chmod 600 it)", path,
                   (unsigned)(st.st_mode & 07777));
  }
  char buf[SS_LINK_TOKEN_MAX + 256];
  size_t n = 0;
  for (;;) {
    ssize_t r = read(fd, buf + n, sizeof(buf) - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += (size_t)r;
    if (n == sizeof(buf)) break;
  }
  close(fd);
  size_t b = 0, e = n;
  while (b < e && isspace((unsigned char)buf[b])) b++;
  while (e > b && isspace((unsigned char)buf[e - 1])) e--;
  size_t max = cap < SS_LINK_TOKEN_MAX ? cap : SS_LINK_TOKEN_MAX;
  if (e - b < SS_LINK_TOKEN_MIN || e - b > max || n == sizeof(buf))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: token: expected %d..%zu bytes (white space around it ignored), got %zu%s",
                   path, SS_LINK_TOKEN_MIN, max, e - b, n == sizeof(buf) ? " or more" : "");
  memcpy(token, buf + b, e - b);
  *len = e - b;
  return SS_OK;
}

ss_status ss_link_open_with(ss_ctx *ctx, const char *uri, ss_link_dir dir, const ss_link_opts *o, ss_link **out) {
  *out = NULL;
  link_addr a;
  SS_TRY(parse_uri(ctx, uri, dir, &a));
  int fd = -1, owns = 1;
  if (a.kind == KIND_STDIO || a.kind == KIND_FILE) {
    SS_TRY(open_file(ctx, uri, &a, dir, &fd, &owns));
  } else {
    addr_list al;
    SS_TRY(resolve(ctx, uri, &a, &al));
    if (a.kind == KIND_CONNECT) SS_TRY(open_connect(ctx, uri, &al, o, &fd));
    else SS_TRY(open_listen(ctx, uri, &a, &al, o, &fd));
  }
  ss_link *l = calloc(1, sizeof(*l));
  if (!l) {
    if (owns) close_quietly(fd);
    return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: link %s", uri);
  }
  struct stat st;
  l->fd = fd;
  l->owns_fd = owns;
  l->is_socket = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
  l->idle_timeout_s = o->idle_timeout_s;
  l->t_last_data = ss_now();
  snprintf(l->uri, sizeof(l->uri), "%s", uri);
  *out = l;
  return SS_OK;
}

static ss_status idle_failure(ss_ctx *ctx, const ss_link *l) {
  return ss_fail(ctx, SS_ERR_INPUT, "no data from %s for %g s (--idle-timeout)", l->uri, l->idle_timeout_s);
}

double ss_link_idle_deadline(const ss_link *l) {
  return l && l->idle_timeout_s > 0 ? l->t_last_data + l->idle_timeout_s : INFINITY;
}

ss_status ss_link_idle_check(ss_ctx *ctx, const ss_link *l) {
  return ss_now() >= ss_link_idle_deadline(l) ? idle_failure(ctx, l) : SS_OK;
}

ss_status ss_link_read(ss_ctx *ctx, ss_link *l, void *buf, size_t cap, size_t *got) {
  *got = 0;
  if (l->idle_timeout_s > 0) {
    int ready = wait_readable(l->fd, ss_link_idle_deadline(l) - ss_now());
    if (ready < 0) return ss_fail(ctx, SS_ERR_IO, "%s: poll: %s", l->uri, strerror(errno));
    if (ready == 0) return idle_failure(ctx, l);
  }
  ssize_t n;
  do n = read(l->fd, buf, cap);
  while (n < 0 && errno == EINTR);
  if (n < 0) return ss_fail(ctx, SS_ERR_IO, "%s: read: %s", l->uri, strerror(errno));
  l->t_last_data = ss_now();
  *got = (size_t)n;
  return SS_OK;
}

/* write() on a pipe or terminal whose reader is gone raises SIGPIPE: block it for this call and
 * swallow the pending signal, so the failure is an EPIPE return in this thread only. */
static ssize_t write_no_sigpipe(int fd, const void *buf, size_t n) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  int was_pending = 0;
  sigset_t pending;
  if (sigpending(&pending) == 0) was_pending = sigismember(&pending, SIGPIPE);
  ssize_t w = write(fd, buf, n);
  int err = errno;
  if (w < 0 && err == EPIPE && !was_pending) {
    struct timespec zero = {0, 0};
    while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  errno = err;
  return w;
}

ss_status ss_link_write(ss_ctx *ctx, ss_link *l, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = l->is_socket ? send(l->fd, p, n, MSG_NOSIGNAL) : write_no_sigpipe(l->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const char *why = errno == EPIPE || errno == ECONNRESET ? "the receiver disconnected: " : "";
      return ss_fail(ctx, SS_ERR_IO, "%s: write: %s%s", l->uri, why, strerror(errno));
    }
    p += w;
    n -= (size_t)w;
  }
  return SS_OK;
}

int ss_link_fd(const ss_link *l) { return l ? l->fd : -1; }
const char *ss_link_uri(const ss_link *l) { return l ? l->uri : ""; }

void ss_link_close(ss_link *l) {
  if (!l) return;
  if (l->owns_fd) close_quietly(l->fd);
  free(l);
}

/* ---- frame reader --------------------------------------------------------------------------- */

struct ss_frame_reader {
  ss_link *link;
  int n_channels;
  size_t frame_bytes;
  int64_t max_rows;
  unsigned char *buf; /* max_rows whole frames plus one partial frame */
  size_t cap, have, consumed;
  int eof;
  int64_t rows_total;
  double t_last_read;
  int need_header; /* protocol v1: the header is read and checked before the first row */
  double rate_hz;
  char expected_by[64];
};

ss_status ss_frame_reader_open(ss_ctx *ctx, ss_link *l, int n_channels, int64_t max_rows, ss_frame_reader **out) {
  ss_frame_reader_opts raw = {.raw = 1};
  return ss_frame_reader_open_opts(ctx, l, n_channels, max_rows, &raw, out);
}

ss_status ss_frame_reader_open_opts(ss_ctx *ctx, ss_link *l, int n_channels, int64_t max_rows,
                                    const ss_frame_reader_opts *o, ss_frame_reader **out) {
  *out = NULL;
  if (n_channels < 1 || n_channels > SS_FRAME_MAX_CHANNELS)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: channels: expected 1..%d, got %d", ss_link_uri(l), SS_FRAME_MAX_CHANNELS,
                   n_channels);
  if (max_rows < 1 || max_rows > INT64_MAX / 2 / ((int64_t)n_channels * (int64_t)sizeof(int16_t)))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: rows per read: expected >= 1, got %lld", ss_link_uri(l),
                   (long long)max_rows);
  ss_frame_reader *r = NULL;
  SS_TRY(SS_CALLOC(ctx, r, 1, "frame reader"));
  r->link = l;
  r->n_channels = n_channels;
  r->frame_bytes = (size_t)n_channels * sizeof(int16_t);
  r->max_rows = max_rows;
  r->cap = (size_t)(max_rows + 1) * r->frame_bytes;
  r->need_header = !o->raw;
  r->rate_hz = o->rate_hz;
  snprintf(r->expected_by, sizeof(r->expected_by), "%s", o->expected_by ? o->expected_by : "the reader");
  ss_status st = SS_ALLOC(ctx, r->buf, r->cap, "frame reader buffer");
  if (st != SS_OK) {
    free(r);
    return st;
  }
  *out = r;
  return SS_OK;
}

/* Frames are little-endian on the wire. */
static void to_host_order(int16_t *v, size_t n) {
  const uint16_t probe = 1;
  if (*(const unsigned char *)&probe == 1) return;
  for (size_t i = 0; i < n; i++) {
    uint16_t u = (uint16_t)v[i];
    v[i] = (int16_t)(uint16_t)((u >> 8) | (u << 8));
  }
}

/* ---- the stream header ---------------------------------------------------------------------- */

static void put_u(unsigned char *p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_u(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* Layout (docs/live.md): magic[8], u16 version, u16 dtype, u32 channels, f64 rate, u32 flags, u32 reserved. */
void ss_stream_header_encode(const ss_stream_header *h, unsigned char out[SS_STREAM_HEADER_BYTES]) {
  uint64_t rate_bits;
  memcpy(&rate_bits, &h->rate_hz, sizeof(rate_bits));
  memset(out, 0, SS_STREAM_HEADER_BYTES);
  memcpy(out, SS_STREAM_MAGIC, 8);
  put_u(out + 8, SS_STREAM_VERSION, 2);
  put_u(out + 10, SS_STREAM_DTYPE_INT16, 2);
  put_u(out + 12, (uint32_t)h->n_channels, 4);
  put_u(out + 16, rate_bits, 8);
}

ss_status ss_stream_header_write(ss_ctx *ctx, ss_link *l, const ss_stream_header *h) {
  unsigned char buf[SS_STREAM_HEADER_BYTES];
  ss_stream_header_encode(h, buf);
  return ss_link_write(ctx, l, buf, sizeof(buf));
}

/* The header's fields against what the reader expects: one line naming the field and both values. */
static ss_status check_header(ss_ctx *ctx, const ss_frame_reader *r, const unsigned char *b) {
  const char *uri = ss_link_uri(r->link);
  if (memcmp(b, SS_LINK_AUTH_MAGIC, 8) == 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: the peer sent a token, but no --token-file was given here", uri);
  if (memcmp(b, SS_STREAM_MAGIC, 8) != 0)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: stream header: no \"SSTREAM\" magic at the start (a headerless stream "
                   "needs --raw)",
                   uri);
  unsigned version = (unsigned)get_u(b + 8, 2), dtype = (unsigned)get_u(b + 10, 2);
  uint64_t ch = get_u(b + 12, 4), bits = get_u(b + 16, 8), flags = get_u(b + 24, 4), reserved = get_u(b + 28, 4);
  double rate;
  memcpy(&rate, &bits, sizeof(rate));
  if (version != SS_STREAM_VERSION)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream header: version %u, this reader reads %d", uri, version,
                   SS_STREAM_VERSION);
  if (dtype != SS_STREAM_DTYPE_INT16)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream header: dtype %u, only %d (int16) is read", uri, dtype,
                   SS_STREAM_DTYPE_INT16);
  if (flags != 0 || reserved != 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream header: flags %llu, reserved %llu: expected 0 and 0", uri,
                   (unsigned long long)flags, (unsigned long long)reserved);
  if (ch != (uint64_t)r->n_channels)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream header: channels %llu, expected %d (%s)", uri, (unsigned long long)ch,
                   r->n_channels, r->expected_by);
  if (!isfinite(rate) || !(rate > 0) || fabs(rate - r->rate_hz) > SS_STREAM_RATE_TOLERANCE * r->rate_hz)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream header: rate %.10g Hz, expected %.10g Hz (%s)", uri, rate, r->rate_hz,
                   r->expected_by);
  return SS_OK;
}

/* Read exactly the header (no byte beyond it) and check it; *empty: the stream ended before any byte. */
static ss_status read_header(ss_ctx *ctx, ss_frame_reader *r, int *empty) {
  unsigned char b[SS_STREAM_HEADER_BYTES];
  size_t have = 0;
  *empty = 0;
  while (have < sizeof(b)) {
    size_t got = 0;
    SS_TRY(ss_link_read(ctx, r->link, b + have, sizeof(b) - have, &got));
    r->t_last_read = ss_now();
    if (got == 0) break;
    have += got;
  }
  if (have == 0) {
    *empty = r->eof = 1;
    return SS_OK;
  }
  if (have < sizeof(b))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream ended inside its header: %zu of %d bytes", ss_link_uri(r->link), have,
                   SS_STREAM_HEADER_BYTES);
  r->need_header = 0;
  return check_header(ctx, r, b);
}

/* Read until at least one whole frame is buffered or the stream ends. */
static ss_status fill_one_frame(ss_ctx *ctx, ss_frame_reader *r) {
  while (r->have < r->frame_bytes && !r->eof) {
    size_t got = 0;
    SS_TRY(ss_link_read(ctx, r->link, r->buf + r->have, r->cap - r->have, &got));
    r->t_last_read = ss_now();
    r->eof = got == 0;
    r->have += got;
  }
  return SS_OK;
}

ss_status ss_frame_reader_next(ss_ctx *ctx, ss_frame_reader *r, const int16_t **rows, int64_t *n, double *t_arrival) {
  *rows = NULL;
  *n = 0;
  /* Whatever was not delivered last time (rows beyond max_rows, a partial frame) moves to the front. */
  if (r->consumed) {
    memmove(r->buf, r->buf + r->consumed, r->have - r->consumed);
    r->have -= r->consumed;
    r->consumed = 0;
  }
  if (r->need_header && !r->eof) {
    int empty = 0;
    SS_TRY(read_header(ctx, r, &empty));
  }
  SS_TRY(fill_one_frame(ctx, r));
  *t_arrival = r->t_last_read;
  if (r->have < r->frame_bytes) {
    if (r->have == 0) return SS_OK; /* clean end */
    return ss_fail(ctx, SS_ERR_INPUT, "%s: stream ended mid-frame: %zu of %zu bytes of a frame (%lld rows received)",
                   ss_link_uri(r->link), r->have, r->frame_bytes, (long long)r->rows_total);
  }
  int64_t whole = (int64_t)(r->have / r->frame_bytes);
  *n = whole < r->max_rows ? whole : r->max_rows;
  r->consumed = (size_t)*n * r->frame_bytes;
  to_host_order((int16_t *)r->buf, (size_t)*n * (size_t)r->n_channels);
  *rows = (const int16_t *)r->buf;
  r->rows_total += *n;
  return SS_OK;
}

int64_t ss_frame_reader_rows_total(const ss_frame_reader *r) { return r ? r->rows_total : 0; }

int ss_frame_reader_buffered(const ss_frame_reader *r) { return r && r->have - r->consumed >= r->frame_bytes; }

void ss_frame_reader_close(ss_frame_reader *r) {
  if (!r) return;
  free(r->buf);
  free(r);
}
