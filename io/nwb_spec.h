/* nwb_spec.h — the NWB schema the writer caches in every file it writes: the JSON documents of
 * io/nwb_schema (nwb-schema 2.6.0 "core", hdmf-common 1.5.1, hdmf-experimental 0.2.0, as pynwb 2.3.1
 * caches them), embedded at build time, and the writer of /specifications. */
#ifndef SS_NWB_SPEC_H
#define SS_NWB_SPEC_H

#include <hdf5.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The NWB version written into nwb_version; the core namespace's cached version may carry a suffix. */
#define SS_NWB_VERSION "2.6.0"

typedef struct {
  const char *ns, *version, *name; /* /specifications/<ns>/<version>/<name> */
  const char *text;                /* the JSON document */
} ss_nwb_spec_doc;

extern const ss_nwb_spec_doc ss_nwb_spec_docs[]; /* generated from io/nwb_schema */
extern const int ss_nwb_spec_n_docs;

/* Write every document as a scalar UTF-8 string dataset under /specifications and point the root's
 * `.specloc` attribute at it (how pynwb and hdmf find a file's cached namespaces). `where` names the
 * file in messages. */
ss_status ss_nwb_spec_write(ss_ctx *ctx, hid_t file, const char *where);

#ifdef __cplusplus
}
#endif
#endif
