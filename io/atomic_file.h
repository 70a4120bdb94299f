/* atomic_file.h — outputs appear complete or not at all: every writer writes to a temporary name
 * in the destination's directory and renames it over the final name only after a successful
 * close. A failed or interrupted write leaves no file under the final name. */
#ifndef SS_ATOMIC_FILE_H
#define SS_ATOMIC_FILE_H

#include <stdio.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char final_path[4096];
  char tmp_path[4096];
  FILE *f; /* NULL for writers that open tmp_path themselves (HDF5) */
} ss_atomic_file;

/* Choose a temporary name next to `path`; open it with stdio when `open_stdio` is set. */
ss_status ss_atomic_begin(ss_ctx *ctx, ss_atomic_file *af, const char *path, int open_stdio);
/* Close (if stdio), fsync-free rename over the final name. On failure the temporary is removed. */
ss_status ss_atomic_commit(ss_ctx *ctx, ss_atomic_file *af);
/* Give up: close and remove the temporary. Never fails. */
void ss_atomic_abort(ss_atomic_file *af);

/* Create a directory if it does not exist yet (its parent must exist); fail if the path is a file. */
ss_status ss_make_dir(ss_ctx *ctx, const char *dir);
/* A file's name up to its first dot, without the folder ("a/session.raw.kwd" → "session"). */
void ss_path_base_name(const char *path, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
