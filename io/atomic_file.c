/* atomic_file.c — write-then-rename: the temporary `.<name>.tmp.<pid>.<counter>` lives in the
 * destination's directory so that rename() is atomic (same file system). */
#include "io/atomic_file.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Distinguishes temporaries of concurrent writers within one process. */
static atomic_uint tmp_counter;

ss_status ss_atomic_begin(ss_ctx *ctx, ss_atomic_file *af, const char *path, int open_stdio) {
  memset(af, 0, sizeof(*af));
  size_t len = strlen(path);
  if (len == 0) return ss_fail(ctx, SS_ERR_USAGE, "output path is empty");
  if (len >= sizeof(af->final_path)) return ss_fail(ctx, SS_ERR_USAGE, "%s: path too long", path);
  if (path[len - 1] == '/') return ss_fail(ctx, SS_ERR_USAGE, "%s: output path names a directory", path);
  memcpy(af->final_path, path, len + 1);
  const char *slash = strrchr(path, '/');
  int dir_len = slash ? (int)(slash - path + 1) : 0;
  const char *base = slash ? slash + 1 : path;
  unsigned count = atomic_fetch_add(&tmp_counter, 1u);
  int n = snprintf(af->tmp_path, sizeof(af->tmp_path), "%.*s.%s.tmp.%ld.%u", dir_len, path, base, (long)getpid(),
                   count);
  if (n < 0 || (size_t)n >= sizeof(af->tmp_path)) {
    af->tmp_path[0] = '\0';
    return ss_fail(ctx, SS_ERR_USAGE, "%s: path too long", path);
  }
  if (open_stdio) {
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) {
      int e = errno;
      af->tmp_path[0] = '\0';
      return ss_fail(ctx, SS_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
  }
  return SS_OK;
}

ss_status ss_atomic_commit(ss_ctx *ctx, ss_atomic_file *af) {
  if (af->f) {
    int bad = ferror(af->f);
    int e = bad ? EIO : 0;
    if (fclose(af->f) != 0 && !bad) {
      bad = 1;
      e = errno;
    }
    af->f = NULL;
    if (bad) {
      ss_atomic_abort(af);
      return ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", af->final_path, strerror(e));
    }
  }
  if (rename(af->tmp_path, af->final_path) != 0) {
    int e = errno;
    ss_atomic_abort(af);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot rename the temporary file into place: %s", af->final_path, strerror(e));
  }
  af->tmp_path[0] = '\0';
  return SS_OK;
}

void ss_atomic_abort(ss_atomic_file *af) {
  if (af->f) fclose(af->f);
  af->f = NULL;
  if (af->tmp_path[0]) remove(af->tmp_path);
  af->tmp_path[0] = '\0';
}

ss_status ss_make_dir(ss_ctx *ctx, const char *dir) {
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot create the directory: %s", dir, strerror(errno));
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return ss_fail(ctx, SS_ERR_IO, "%s: exists and is not a directory", dir);
  return SS_OK;
}

void ss_path_base_name(const char *path, char *buf, size_t len) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  const char *dot = strchr(name + 1, '.');
  size_t n = dot ? (size_t)(dot - name) : strlen(name);
  if (n >= len) n = len - 1;
  memcpy(buf, name, n);
  buf[n] = '\0';
}
