/* outset.c — output folders swapped in whole (outset.h): the temporary folder, the manifest, the
 * swap (renameat2 RENAME_EXCHANGE, or two renames where the file system lacks it) and the check. */
#define _GNU_SOURCE
#include "io/outset.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic_file.h"

#define MANIFEST_HEADER "spikestream output set 1"

/* Distinguishes temporary folders of concurrent writers within one process. */
static atomic_uint set_counter;

/* --- names ------------------------------------------------------------------------------------- */

/* Split `dir` into its parent folder and name (trailing slashes dropped; "." and ".." resolved). */
static ss_status split_dir(ss_ctx *ctx, const char *dir, char *parent, char *name, char *full) {
  size_t len = strlen(dir);
  if (len == 0) return ss_fail(ctx, SS_ERR_USAGE, "output folder is empty");
  if (len >= SS_OUTSET_PATH_MAX) return ss_fail(ctx, SS_ERR_USAGE, "%s: path too long", dir);
  memcpy(full, dir, len + 1);
  while (len > 1 && full[len - 1] == '/') full[--len] = '\0';
  const char *slash = strrchr(full, '/');
  const char *base = slash ? slash + 1 : full;
  if (strcmp(base, ".") == 0 || strcmp(base, "..") == 0 || strcmp(full, "/") == 0) {
    char real[PATH_MAX];
    if (!realpath(full, real) || strlen(real) >= SS_OUTSET_PATH_MAX || strcmp(real, "/") == 0)
      return ss_fail(ctx, SS_ERR_USAGE, "%s: cannot use this folder for outputs; name a folder to create", dir);
    strcpy(full, real);
    slash = strrchr(full, '/');
    base = slash + 1;
  }
  snprintf(name, SS_OUTSET_PATH_MAX, "%s", base);
  if (!slash) snprintf(parent, SS_OUTSET_PATH_MAX, ".");
  else if (slash == full) snprintf(parent, SS_OUTSET_PATH_MAX, "/");
  else snprintf(parent, SS_OUTSET_PATH_MAX, "%.*s", (int)(slash - full), full);
  return SS_OK;
}

/* Names an output set may hold: the sort's and detect's files, the .clu/.klg that `cluster` writes
 * beside them, and the temporaries of the per-file atomic writers. */
static int member_name(const char *n) {
  static const char *const fixed[] = {"results.h5",  "model.h5", "units.nwb",       "phy",
                                      "report.html", "sort.log", SS_OUTSET_MANIFEST};
  for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
    if (strcmp(n, fixed[i]) == 0) return 1;
  if (strstr(n, ".fet.") || strstr(n, ".fmask.") || strstr(n, ".clu.") || strstr(n, ".klg.")) return 1;
  return n[0] == '.' && strstr(n, ".tmp.") != NULL;
}

/* --- folders ----------------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The nearest existing folder at or above `path` (a copy cut at a '/'), which must be writable. */
static ss_status check_ancestor(ss_ctx *ctx, const char *dir, const char *path) {
  char cur[SS_OUTSET_PATH_MAX];
  snprintf(cur, sizeof(cur), "%s", path);
  for (;;) {
    struct stat sb;
    if (stat(cur, &sb) == 0) {
      if (!S_ISDIR(sb.st_mode)) return ss_fail(ctx, SS_ERR_INPUT, "%s: %s is a file, not a folder", dir, cur);
      if (access(cur, W_OK | X_OK) != 0)
        return ss_fail(ctx, SS_ERR_IO, "%s: cannot write into %s: %s", dir, cur, strerror(errno));
      return SS_OK;
    }
    if (errno != ENOENT && errno != ENOTDIR) return ss_fail(ctx, SS_ERR_IO, "%s: %s: %s", dir, cur, strerror(errno));
    char *slash = strrchr(cur, '/');
    if (!slash) snprintf(cur, sizeof(cur), ".");
    else if (slash == cur) snprintf(cur, sizeof(cur), "/");
    else *slash = '\0';
  }
}

/* Classify the entries of the existing folder `dir`: the first foreign one (not an output-set
 * member) into `foreign`, and whether any member (an earlier output) is there. */
static ss_status scan_target(ss_ctx *ctx, const char *dir, char *foreign, size_t len, int *earlier) {
  DIR *d = opendir(dir);
  if (!d) return ss_fail(ctx, SS_ERR_IO, "%s: cannot list the folder: %s", dir, strerror(errno));
  foreign[0] = '\0';
  *earlier = 0;
  for (struct dirent *e = readdir(d); e && !foreign[0]; e = readdir(d)) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    if (member_name(e->d_name)) *earlier = 1;
    else snprintf(foreign, len, "%s", e->d_name);
  }
  closedir(d);
  return SS_OK;
}

/* The rules for the target (docs/formats.md): absent or empty: fine; an earlier output set: only
 * with overwrite; anything else in it: never, since the folder is replaced as a whole. */
static ss_status check_target(ss_ctx *ctx, const char *dir, const char *parent, int overwrite) {
  struct stat sb;
  if (lstat(dir, &sb) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) return check_ancestor(ctx, dir, parent);
    return ss_fail(ctx, SS_ERR_IO, "%s: %s", dir, strerror(errno));
  }
  /* the swap renames the folder itself, so a link to one would be replaced, not followed */
  if (S_ISLNK(sb.st_mode))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: is a symbolic link; name the folder it points to", dir);
  if (!S_ISDIR(sb.st_mode)) return ss_fail(ctx, SS_ERR_INPUT, "%s: exists and is a file, not a folder", dir);
  SS_TRY(check_ancestor(ctx, dir, parent));
  char foreign[256];
  int earlier = 0;
  SS_TRY(scan_target(ctx, dir, foreign, sizeof(foreign), &earlier));
  if (foreign[0])
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: holds \"%s\", which is not an output of sort or detect; the folder is replaced as a whole, "
                   "so name a new or empty folder (--overwrite replaces only an earlier output set)",
                   dir, foreign);
  if (earlier && !overwrite)
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: holds the outputs of an earlier run; pass --overwrite to replace them (every file of the "
                   "earlier run goes), or name a new folder",
                   dir);
  return SS_OK;
}

/* Create `path` and its missing parents. */
static ss_status make_parents(ss_ctx *ctx, const char *dir, const char *path) {
  char cur[SS_OUTSET_PATH_MAX];
  snprintf(cur, sizeof(cur), "%s", path);
  for (char *p = cur + 1;; p++) {
    if (*p != '/' && *p != '\0') continue;
    char c = *p;
    *p = '\0';
    if (mkdir(cur, 0777) != 0 && errno != EEXIST)
      return ss_fail(ctx, SS_ERR_IO, "%s: cannot create the folder %s: %s", dir, cur, strerror(errno));
    *p = c;
    if (c == '\0') return SS_OK;
  }
}

ss_status ss_outset_check(ss_ctx *ctx, const char *dir, int overwrite) {
  char parent[SS_OUTSET_PATH_MAX], name[SS_OUTSET_PATH_MAX], full[SS_OUTSET_PATH_MAX];
  SS_TRY(split_dir(ctx, dir, parent, name, full));
  return check_target(ctx, full, parent, overwrite);
}

/* Remove the temporary folders (.NAME.set.PID.N) that writers which are no longer running left. */
static void remove_stale(const char *parent, const char *name) {
  DIR *d = opendir(parent);
  if (!d) return;
  char prefix[SS_OUTSET_PATH_MAX + 8], path[2 * SS_OUTSET_PATH_MAX + 8];
  snprintf(prefix, sizeof(prefix), ".%s.set.", name);
  size_t plen = strlen(prefix);
  for (struct dirent *e = readdir(d); e; e = readdir(d)) {
    if (strncmp(e->d_name, prefix, plen) != 0) continue;
    long pid = strtol(e->d_name + plen, NULL, 10);
    if (pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    snprintf(path, sizeof(path), "%s/%s", parent, e->d_name);
    remove_tree(path);
  }
  closedir(d);
}

ss_status ss_outset_begin(ss_ctx *ctx, ss_outset *os, const char *dir, int overwrite, int kill_at) {
  memset(os, 0, sizeof(*os));
  os->kill_at = kill_at;
  char parent[SS_OUTSET_PATH_MAX], name[SS_OUTSET_PATH_MAX];
  SS_TRY(split_dir(ctx, dir, parent, name, os->final_dir));
  SS_TRY(check_target(ctx, os->final_dir, parent, overwrite));
  SS_TRY(make_parents(ctx, os->final_dir, parent));
  remove_stale(parent, name);
  unsigned count = atomic_fetch_add(&set_counter, 1u);
  int n = snprintf(os->tmp_dir, sizeof(os->tmp_dir), "%s/.%s.set.%ld.%u", parent, name, (long)getpid(), count);
  if (n < 0 || (size_t)n >= sizeof(os->tmp_dir)) {
    os->tmp_dir[0] = '\0';
    return ss_fail(ctx, SS_ERR_USAGE, "%s: path too long", dir);
  }
  if (mkdir(os->tmp_dir, 0777) != 0) {
    int e = errno;
    os->tmp_dir[0] = '\0';
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot create a folder beside it: %s", os->final_dir, strerror(e));
  }
  return SS_OK;
}

void ss_outset_step(ss_outset *os) {
  if (os->kill_at > 0 && ++os->steps == os->kill_at) raise(SIGKILL);
}

void ss_outset_abort(ss_outset *os) {
  if (os->tmp_dir[0]) remove_tree(os->tmp_dir);
  os->tmp_dir[0] = '\0';
}

ss_status ss_outset_fail(ss_ctx *ctx, ss_outset *os) {
  char old[SS_CTX_MSG_MAX];
  size_t tlen = strlen(os->tmp_dir), n = 0;
  memcpy(old, ctx->msg, ctx->msg_len + 1);
  for (const char *p = old; *p && n + 1 < sizeof(ctx->msg);) {
    if (tlen > 0 && strncmp(p, os->tmp_dir, tlen) == 0) {
      n += (size_t)snprintf(ctx->msg + n, sizeof(ctx->msg) - n, "%s", os->final_dir);
      if (n >= sizeof(ctx->msg)) n = sizeof(ctx->msg) - 1;
      p += tlen;
    } else {
      ctx->msg[n++] = *p++;
    }
  }
  ctx->msg[n] = '\0';
  ctx->msg_len = n;
  ss_outset_abort(os);
  return ctx->status != SS_OK ? ctx->status : SS_ERR_INTERNAL;
}

/* --- the manifest ------------------------------------------------------------------------------ */

/* One line per regular file under root/rel: "SIZE<TAB>REL". Writers' temporaries are skipped. */
static int list_files(FILE *f, const char *root, const char *rel) {
  char dir[2 * SS_OUTSET_PATH_MAX + 2], path[3 * SS_OUTSET_PATH_MAX + 4], sub[2 * SS_OUTSET_PATH_MAX];
  snprintf(dir, sizeof(dir), "%s%s%s", root, rel[0] ? "/" : "", rel);
  DIR *d = opendir(dir);
  if (!d) return -1;
  int bad = 0;
  for (struct dirent *e = readdir(d); e && !bad; e = readdir(d)) {
    const char *n = e->d_name;
    if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || (n[0] == '.' && strstr(n, ".tmp."))) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, n);
    snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", n);
    struct stat sb;
    if (lstat(path, &sb) != 0) bad = 1;
    else if (S_ISDIR(sb.st_mode)) bad = list_files(f, root, sub);
    else if (S_ISREG(sb.st_mode)) fprintf(f, "%" PRIdMAX "\t%s\n", (intmax_t)sb.st_size, sub);
  }
  closedir(d);
  return bad;
}

static ss_status write_manifest(ss_ctx *ctx, const ss_outset *os, const char *command) {
  char path[SS_OUTSET_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/%s", os->tmp_dir, SS_OUTSET_MANIFEST);
  ss_atomic_file af;
  SS_TRY(ss_atomic_begin(ctx, &af, path, 1));
  fprintf(af.f, "%s %s\n", MANIFEST_HEADER, command);
  if (list_files(af.f, os->tmp_dir, "") != 0) {
    ss_atomic_abort(&af);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot list the written files", os->final_dir);
  }
  return ss_atomic_commit(ctx, &af);
}

/* --- the swap ---------------------------------------------------------------------------------- */

/* Put tmp_dir in place of final_dir; afterwards tmp_dir holds the old set (or nothing). */
static ss_status swap_in(ss_ctx *ctx, ss_outset *os) {
  if (rename(os->tmp_dir, os->final_dir) == 0) return SS_OK; /* no target, or an empty one */
  if (errno != EEXIST && errno != ENOTEMPTY)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot move the outputs into place: %s", os->final_dir, strerror(errno));
  if (renameat2(AT_FDCWD, os->tmp_dir, AT_FDCWD, os->final_dir, RENAME_EXCHANGE) == 0) return SS_OK;
  if (errno != EINVAL && errno != ENOSYS)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot swap the outputs into place: %s", os->final_dir, strerror(errno));
  /* No atomic exchange here: move the old set aside (under a temporary name), then the new one in. */
  char aside[SS_OUTSET_PATH_MAX + 8];
  snprintf(aside, sizeof(aside), "%s.old", os->tmp_dir);
  if (rename(os->final_dir, aside) != 0)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot move the old outputs aside: %s", os->final_dir, strerror(errno));
  if (rename(os->tmp_dir, os->final_dir) != 0) {
    int e = errno;
    rename(aside, os->final_dir);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot move the outputs into place: %s", os->final_dir, strerror(e));
  }
  remove_tree(aside);
  return SS_OK;
}

ss_status ss_outset_commit(ss_ctx *ctx, ss_outset *os, const char *command) {
  ss_status st = write_manifest(ctx, os, command);
  if (st == SS_OK) {
    ss_outset_step(os);
    st = swap_in(ctx, os);
  }
  if (st == SS_OK) ss_outset_step(os);
  ss_outset_abort(os); /* the old set after a swap, the new one after a failure */
  return st;
}

/* --- the check --------------------------------------------------------------------------------- */

/* Check one manifest line; `rel` the reader's path relative to the folder ("" when outside). */
static ss_status check_line(ss_ctx *ctx, const char *dir, const char *line, const char *rel) {
  char *end = NULL;
  errno = 0;
  long long size = strtoll(line, &end, 10);
  if (errno || end == line || *end != '\t' || size < 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s/%s: bad line \"%.80s\"", dir, SS_OUTSET_MANIFEST, line);
  const char *name = end + 1;
  char path[2 * SS_OUTSET_PATH_MAX + 2];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  struct stat sb;
  if (stat(path, &sb) != 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: incomplete output set: %s is listed in %s but missing", dir, name,
                   SS_OUTSET_MANIFEST);
  if (strcmp(name, rel) == 0 && (long long)sb.st_size != size)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: mixed output set: %s has %lld bytes, %s lists %lld", dir, name,
                   (long long)sb.st_size, SS_OUTSET_MANIFEST, size);
  return SS_OK;
}

ss_status ss_outset_check_file(ss_ctx *ctx, const char *path) {
  char dir[SS_OUTSET_PATH_MAX], manifest[SS_OUTSET_PATH_MAX + 32], line[2 * SS_OUTSET_PATH_MAX];
  size_t len = strlen(path);
  if (len >= sizeof(dir)) return SS_OK;
  memcpy(dir, path, len + 1);
  while (len > 1 && dir[len - 1] == '/') dir[--len] = '\0';
  char *slash = strrchr(dir, '/');
  const char *rel = slash ? slash + 1 : dir;
  char relbuf[SS_OUTSET_PATH_MAX];
  snprintf(relbuf, sizeof(relbuf), "%s", rel);
  if (slash) *slash = '\0';
  else snprintf(dir, sizeof(dir), ".");
  if (slash == dir) snprintf(dir, sizeof(dir), "/");
  snprintf(manifest, sizeof(manifest), "%s/%s", dir, SS_OUTSET_MANIFEST);
  FILE *f = fopen(manifest, "r");
  if (!f) return SS_OK; /* loose files */
  ss_status st = SS_OK;
  if (!fgets(line, sizeof(line), f) || strncmp(line, MANIFEST_HEADER, strlen(MANIFEST_HEADER)) != 0)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: not a spikestream manifest (first line)", manifest);
  while (st == SS_OK && fgets(line, sizeof(line), f)) {
    line[strcspn(line, "\n")] = '\0';
    if (line[0]) st = check_line(ctx, dir, line, relbuf);
  }
  fclose(f);
  return st;
}
