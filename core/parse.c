/* parse.c — checked integer parsing for sizes and counts (see parse.h). */
#include "core/parse.h"

#include <inttypes.h>
#include <string.h>

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Accumulate the digits of s as a negative number (the range of int64 is wider below zero);
 * returns 0 on overflow or when no digit or a stray character is found. */
static int parse_digits(const char *s, int negative, int64_t *out) {
  int64_t v = 0;
  const char *start = s;
  for (; *s >= '0' && *s <= '9'; s++) {
    int digit = *s - '0';
    if (v < (INT64_MIN + digit) / 10) return 0;
    v = v * 10 - digit;
  }
  if (s == start) return 0;
  while (is_blank(*s)) s++;
  if (*s) return 0;
  if (!negative && v == INT64_MIN) return 0;
  *out = negative ? v : -v;
  return 1;
}

ss_status ss_parse_size(ss_ctx *ctx, const char *text, int64_t min, int64_t max, int64_t *out) {
  const char *s = text;
  while (is_blank(*s)) s++;
  int negative = *s == '-';
  if (*s == '-' || *s == '+') s++;
  int64_t v = 0;
  if (parse_digits(s, negative, &v) && v >= min && v <= max) {
    *out = v;
    return SS_OK;
  }
  const char *shown = text;
  while (is_blank(*shown)) shown++;
  size_t n = strlen(shown);
  while (n > 0 && is_blank(shown[n - 1])) n--;
  return ss_fail(ctx, SS_ERR_INPUT, "expected an integer in [%" PRId64 ", %" PRId64 "], got \"%.*s%s\"", min, max,
                 n > SS_PARSE_SHOWN ? SS_PARSE_SHOWN : (int)n, shown, n > SS_PARSE_SHOWN ? "..." : "");
}
