/* parse.h — checked parsing of integers that size things (header-declared dimensions, counts,
 * option values): overflow is detected, the range is bounded, and a refusal quotes the text as
 * written so that the caller can prefix it with the file and field. */
#ifndef SS_PARSE_H
#define SS_PARSE_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Characters of the offending text quoted in a refusal. */
#define SS_PARSE_SHOWN 40

/* Parse `text` (optional blanks around one decimal integer with an optional sign) into *out when it
 * lies in [min, max]. Otherwise record SS_ERR_INPUT "expected an integer in [min, max], got "TEXT""
 * (no file or field: the caller adds them with ss_ctx_prefix) and leave *out alone. */
ss_status ss_parse_size(ss_ctx *ctx, const char *text, int64_t min, int64_t max, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
