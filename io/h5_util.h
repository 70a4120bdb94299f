/* h5_util.h — small HDF5 helpers shared by the NWB writer, the NWB checker and the HDF5 sources:
 * typed attributes (variable-length UTF-8 strings, doubles, object references), path tests and
 * whole-vector reads. HDF5's own error printing is switched off (ss_h5_quiet) because every caller
 * reports failures through ss_ctx with the file and object named. */
#ifndef SS_H5_UTIL_H
#define SS_H5_UTIL_H

#include <hdf5.h>
#include <stdint.h>

#include "core/status.h"
#include "io/atomic_file.h"

#ifdef __cplusplus
extern "C" {
#endif

/* snprintf that truncates silently (object paths longer than the buffers are not supported). */
void ss_h5_path(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Silence HDF5's automatic error stack printing (idempotent). */
void ss_h5_quiet(void);
/* Keep libhdf5 from tearing itself down at exit (H5dont_atexit; call before any other HDF5 call).
 * Every file is closed explicitly before exit, so the teardown has nothing to do, except after a
 * close that failed on a write error (a full disk: ss_h5_close_checked): HDF5 1.10 leaves that
 * file half torn down and its exit teardown crashes on it. */
void ss_h5_no_exit_teardown(void);

/* 1 when every component of `path` (relative to loc, or absolute) exists as a link, else 0. */
int ss_h5_exists(hid_t loc, const char *path);
/* 1 when loc/path exists and is a group (resp. dataset). */
int ss_h5_is_group(hid_t loc, const char *path);
int ss_h5_is_dataset(hid_t loc, const char *path);

/* Writers: `where` names the object in error messages. */
ss_status ss_h5_attr_str(ss_ctx *ctx, hid_t obj, const char *name, const char *value, const char *where);
ss_status ss_h5_attr_strs(ss_ctx *ctx, hid_t obj, const char *name, const char *const *values, int n,
                          const char *where);
ss_status ss_h5_attr_f64(ss_ctx *ctx, hid_t obj, const char *name, double value, const char *where);
ss_status ss_h5_attr_i32(ss_ctx *ctx, hid_t obj, const char *name, int value, const char *where);
/* An object-reference attribute pointing at loc/target_path. */
ss_status ss_h5_attr_ref(ss_ctx *ctx, hid_t obj, const char *name, hid_t file, const char *target_path,
                         const char *where);
/* Scalar variable-length string dataset. */
ss_status ss_h5_dataset_str(ss_ctx *ctx, hid_t loc, const char *name, const char *value, const char *where);

/* Output files built in memory (HDF5's core driver, no backing store) and written out with stdio
 * only when complete. HDF5 1.10 leaves a file whose H5Fclose failed (a write error while flushing,
 * e.g. a full disk) half torn down and crashes on it at exit; a memory file's close does no I/O, so
 * it cannot fail that way, and the write errors surface in ss_h5_mem_commit as plain stdio errors.
 * Costs the file's size in memory (twice, briefly, while the image is copied out). */
/* Files written in place (too large to build in memory, e.g. a recording): after a failed write
 * HDF5 1.10's H5Fclose fails too (it flushes again) and leaves the file half torn down, to crash at
 * exit. ss_h5_close_checked flushes, then closes; when either fails the file is closed with
 * ss_h5_close_discard and -1 is returned (a close that fails after a good flush is not repaired:
 * it has nothing left to write but the superblock). ss_h5_close_discard closes a file whose
 * contents are thrown away (the caller deletes it): the sec2 driver's descriptor is first pointed
 * at an anonymous memory file (Linux memfd), so that what the close still flushes succeeds. */
herr_t ss_h5_close_checked(hid_t file);
void ss_h5_close_discard(hid_t file);

/* Create the in-memory file for af (from ss_atomic_begin with open_stdio 0); -1 (and a message
 * naming `path`) on failure, af aborted. */
hid_t ss_h5_mem_create(ss_ctx *ctx, ss_atomic_file *af, const char *path);
/* Copy the file's image out, close the file, write the image to af's temporary and rename it into
 * place. The file is closed and af committed or aborted in every case. */
ss_status ss_h5_mem_commit(ss_ctx *ctx, hid_t file, ss_atomic_file *af);
/* Give up: close the file (no I/O) and abort af. Never fails. */
void ss_h5_mem_abort(hid_t file, ss_atomic_file *af);

/* Readers. Return 1 when found and readable, 0 when absent or of another kind. */
int ss_h5_read_attr_str(hid_t obj, const char *name, char *buf, size_t len);
int ss_h5_read_attr_f64(hid_t obj, const char *name, double *out);
/* Number of elements of an attribute, -1 when absent. */
int64_t ss_h5_attr_len(hid_t obj, const char *name);
/* Read a numeric attribute vector of exactly n elements as doubles. */
int ss_h5_read_attr_f64s(hid_t obj, const char *name, double *out, int64_t n);

/* Read a whole 1-D numeric dataset loc/path as doubles (malloc'd into *out, length *n). */
ss_status ss_h5_read_f64_vector(ss_ctx *ctx, hid_t loc, const char *path, const char *file, double **out, int64_t *n);

/* Dataset shape: rank and dims (up to 8); returns rank, -1 on failure. */
int ss_h5_shape(hid_t dset, int64_t *dims);
/* A short name for a dataset's element type ("int16", "float32", "string", "int32", ...). */
void ss_h5_type_name(hid_t type, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
