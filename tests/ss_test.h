/* ss_test.h — what the CMocka tests share: includes, GPU skipping, CLI runs, temp files. */
#ifndef SS_TEST_H
#define SS_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h must follow the includes above */
#include <cmocka.h>

#include "core/backend.h"
#include "core/status.h"

/* Exit code CTest counts as "skipped" (SKIP_RETURN_CODE). */
#define SS_TEST_SKIP 77

/* For GPU test programs: print "skipped: no CUDA device (...)" and exit 77 when there is none. */
void ss_test_require_gpu(void);
/* A CPU and a CUDA backend for the GPU group's CPU-vs-GPU tests: CMocka group setup/teardown, *state
 * points at the pair. */
typedef struct {
  ss_backend cpu, gpu;
} ss_test_backends;
int ss_test_backends_setup(void **state);
int ss_test_backends_teardown(void **state);

/* Run the spikestream binary with `args` (a shell-quoted string); capture stdout and stderr
 * (malloc'd, NUL-terminated) and return the exit code. */
int ss_test_run_cli(const char *args, char **out, char **err);
/* The same with an optional environment assignment ("NAME=value", or NULL) and a file-size limit
 * (bytes, 0: none; SIGXFSZ ignored so that writes fail with EFBIG); stdout discarded, stderr in *err
 * when err is not NULL. Under a limit, leak checking is off in a sanitizer build: libhdf5 1.10 loses
 * the chunk buffer of an H5Dwrite that failed (one chunk, allocated and dropped inside the library). */
int ss_test_run_limited(const char *args, const char *env, long fsize, char **err);

/* A fresh private temporary directory (removed at exit) and a path inside it. */
const char *ss_test_tmpdir(void);
void ss_test_path(char *buf, size_t len, const char *name);
/* Write `text` to a file in the temporary directory and return its path (static buffer per call slot). */
const char *ss_test_write_file(const char *name, const char *text);

/* A whole file as a NUL-terminated string (malloc'd); "" when it cannot be read. */
char *ss_test_slurp(const char *path);
/* A flat int16 file of n_channels interleaved channels, whole (malloc'd), its rows in *n_rows; NULL
 * (and a message) when it cannot be read. */
int16_t *ss_test_read_rows(const char *path, int n_channels, int64_t *n_rows);

/* ctx initialised quietly, for tests */
void ss_test_ctx(ss_ctx *ctx);

#endif
