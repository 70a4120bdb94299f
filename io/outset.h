/* outset.h — a command's output folder (sort, detect) appears complete or not at all: its files are
 * written into a temporary folder beside the target, a manifest listing every file and its size is
 * written last, and the temporary folder is swapped in for the target with one rename. Readers of a
 * folder check its manifest (ss_outset_check_file). Layout and rules: docs/formats.md. */
#ifndef SS_OUTSET_H
#define SS_OUTSET_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_OUTSET_MANIFEST "manifest.txt"
#define SS_OUTSET_PATH_MAX 4096

typedef struct {
  char final_dir[SS_OUTSET_PATH_MAX]; /* the target folder */
  char tmp_dir[SS_OUTSET_PATH_MAX];   /* where the writers write: .NAME.set.PID.N beside the target */
  /* Test hook (SPIKESTREAM_TEST_KILL_AT in the CLI, docs/formats.md): > 0 sends SIGKILL to this
   * process at the kill_at-th step (each ss_outset_step, then the manifest, then the swap). */
  int kill_at;
  int steps;
} ss_outset;

/* Check, before any work, that `dir` may take an output set: absent (its nearest existing parent a
 * writable folder) or empty; an earlier output set (only output-set names in it) only when
 * `overwrite`; a folder with any other file never. SS_ERR_INPUT / SS_ERR_IO naming `dir` otherwise. */
ss_status ss_outset_check(ss_ctx *ctx, const char *dir, int overwrite);
/* ss_outset_check again, then create the missing parents, remove temporaries of dead writers beside
 * `dir` and create the temporary folder. */
ss_status ss_outset_begin(ss_ctx *ctx, ss_outset *os, const char *dir, int overwrite, int kill_at);
/* Count one written output (the test hook's unit). */
void ss_outset_step(ss_outset *os);
/* Write the manifest (`command` names the writer), swap the folder in, remove the old set. On
 * failure the temporary folder is removed and the target is left as it was. */
ss_status ss_outset_commit(ss_ctx *ctx, ss_outset *os, const char *command);
/* Give up: remove the temporary folder. Never fails. */
void ss_outset_abort(ss_outset *os);
/* Give up after a writer failed: the recorded message names the target folder instead of the
 * temporary one, and the temporary folder is removed. Returns the recorded status. */
ss_status ss_outset_fail(ss_ctx *ctx, ss_outset *os);

/* For readers of `path` (a file or folder inside an output folder): when its folder holds a
 * manifest, every listed file must exist and `path`, when listed, must have its listed size; a
 * folder without a manifest is taken as loose files. SS_ERR_INPUT naming the folder otherwise. */
ss_status ss_outset_check_file(ss_ctx *ctx, const char *path);

#ifdef __cplusplus
}
#endif
#endif
