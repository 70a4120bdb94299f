/* fuzz_token.c — libFuzzer target for the token side of the live wire protocol (io/link.c): the
 * input is what a peer sends a listener (the "SSTOKEN\0" message, a length and the secret), checked
 * over a socket pair; it is also read as a token file. */
#include <sys/socket.h>

#include "fuzz/fuzz_util.h"
#include "io/link.h"

#define TOKEN "0123456789abcdef0123"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) fuzz_path(path, sizeof(path), "token");
  if (size > 4096) return 0; /* the message fits the socket buffer: no writer thread needed */
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
  if (size && send(sv[0], data, size, MSG_NOSIGNAL) != (ssize_t)size) abort();
  shutdown(sv[0], SHUT_WR);
  ss_link_token_check(sv[1], TOKEN, sizeof(TOKEN) - 1);
  close(sv[0]);
  close(sv[1]);
  fuzz_write(path, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  char token[SS_LINK_TOKEN_MAX + 1];
  size_t len = 0;
  ss_link_token_load(&ctx, path, token, sizeof(token), &len);
  return 0;
}
