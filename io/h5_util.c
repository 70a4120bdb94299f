/* h5_util.c — HDF5 attribute, path and vector helpers (see h5_util.h). */
#define _GNU_SOURCE /* memfd_create */
#include "io/h5_util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void ss_h5_path(char *buf, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, len, fmt, ap);
  va_end(ap);
}

void ss_h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

void ss_h5_no_exit_teardown(void) { H5dont_atexit(); }

int ss_h5_exists(hid_t loc, const char *path) {
  char buf[1024];
  size_t len = strlen(path);
  if (len >= sizeof(buf)) return 0;
  memcpy(buf, path, len + 1);
  /* check each prefix: H5Lexists fails (rather than answering 0) when an intermediate link is missing */
  for (size_t i = 1; i <= len; i++) {
    if (buf[i] != '/' && buf[i] != '\0') continue;
    char save = buf[i];
    buf[i] = '\0';
    int ok = strcmp(buf, "/") == 0 || H5Lexists(loc, buf, H5P_DEFAULT) > 0;
    buf[i] = save;
    if (!ok) return 0;
  }
  return 1;
}

static int is_type(hid_t loc, const char *path, H5O_type_t want) {
  if (!ss_h5_exists(loc, path)) return 0;
  H5O_info_t info;
  if (H5Oget_info_by_name(loc, path, &info, H5P_DEFAULT) < 0) return 0;
  return info.type == want;
}
int ss_h5_is_group(hid_t loc, const char *path) { return is_type(loc, path, H5O_TYPE_GROUP); }
int ss_h5_is_dataset(hid_t loc, const char *path) { return is_type(loc, path, H5O_TYPE_DATASET); }

static hid_t vlen_str_type(void) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  return t;
}

/* Create (or replace) attribute `name` of type/space and write buf. */
static ss_status write_attr(ss_ctx *ctx, hid_t obj, const char *name, hid_t type, hid_t space, const void *buf,
                            const char *where) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  hid_t a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = a < 0 ? -1 : H5Awrite(a, type, buf);
  if (a >= 0) H5Aclose(a);
  if (e < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot write attribute %s", where, name);
  return SS_OK;
}

ss_status ss_h5_attr_str(ss_ctx *ctx, hid_t obj, const char *name, const char *value, const char *where) {
  hid_t t = vlen_str_type(), s = H5Screate(H5S_SCALAR);
  ss_status st = write_attr(ctx, obj, name, t, s, &value, where);
  H5Sclose(s);
  H5Tclose(t);
  return st;
}

ss_status ss_h5_attr_strs(ss_ctx *ctx, hid_t obj, const char *name, const char *const *values, int n,
                          const char *where) {
  hsize_t dim = (hsize_t)n;
  hid_t t = vlen_str_type(), s = H5Screate_simple(1, &dim, NULL);
  ss_status st = write_attr(ctx, obj, name, t, s, values, where);
  H5Sclose(s);
  H5Tclose(t);
  return st;
}

ss_status ss_h5_attr_f64(ss_ctx *ctx, hid_t obj, const char *name, double value, const char *where) {
  hid_t s = H5Screate(H5S_SCALAR);
  ss_status st = write_attr(ctx, obj, name, H5T_NATIVE_DOUBLE, s, &value, where);
  H5Sclose(s);
  return st;
}

ss_status ss_h5_attr_i32(ss_ctx *ctx, hid_t obj, const char *name, int value, const char *where) {
  hid_t s = H5Screate(H5S_SCALAR);
  ss_status st = write_attr(ctx, obj, name, H5T_NATIVE_INT, s, &value, where);
  H5Sclose(s);
  return st;
}

ss_status ss_h5_attr_ref(ss_ctx *ctx, hid_t obj, const char *name, hid_t file, const char *target_path,
                         const char *where) {
  hobj_ref_t ref;
  if (H5Rcreate(&ref, file, target_path, H5R_OBJECT, -1) < 0)
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot reference %s", where, target_path);
  hid_t s = H5Screate(H5S_SCALAR);
  ss_status st = write_attr(ctx, obj, name, H5T_STD_REF_OBJ, s, &ref, where);
  H5Sclose(s);
  return st;
}

ss_status ss_h5_dataset_str(ss_ctx *ctx, hid_t loc, const char *name, const char *value, const char *where) {
  hid_t t = vlen_str_type(), s = H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(loc, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  herr_t e = d < 0 ? -1 : H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &value);
  if (d >= 0) H5Dclose(d);
  H5Sclose(s);
  H5Tclose(t);
  if (e < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot write dataset %s", where, name);
  return SS_OK;
}

/* Longest string attribute read (bytes): metadata strings are short; a size beyond this one comes
 * from a corrupt file and is not allocated. */
#define SS_H5_ATTR_STR_MAX ((size_t)1 << 16)

/* A string attribute safe to hand to H5Aread: one element (scalar or a 1-element simple space), a
 * fixed-length size within SS_H5_ATTR_STR_MAX whose storage matches, or a variable-length string
 * whose stored descriptor has the size HDF5 gives it. Returns the fixed length, SIZE_MAX for a
 * variable-length string, 0 when the attribute is refused. */
static size_t attr_str_shape(hid_t a, hid_t ft, hid_t sp) {
  if (H5Tget_class(ft) != H5T_STRING) return 0;
  H5S_class_t sc = H5Sget_simple_extent_type(sp);
  if (sc != H5S_SCALAR && !(sc == H5S_SIMPLE && H5Sget_simple_extent_ndims(sp) == 1)) return 0;
  if (H5Sget_simple_extent_npoints(sp) != 1) return 0;
  size_t n = H5Tget_size(ft);
  hsize_t stored = H5Aget_storage_size(a);
  htri_t vlen = H5Tis_variable_str(ft);
  if (vlen < 0 || n == 0) return 0;
  if (vlen) return stored > 0 && stored <= 64 ? SIZE_MAX : 0; /* a heap reference: length, address, index */
  return n <= SS_H5_ATTR_STR_MAX && stored == n ? n : 0;
}

int ss_h5_read_attr_str(hid_t obj, const char *name, char *buf, size_t len) {
  if (len == 0 || H5Aexists(obj, name) <= 0) return 0;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return 0;
  hid_t ft = H5Aget_type(a), sp = H5Aget_space(a);
  size_t n = ft >= 0 && sp >= 0 ? attr_str_shape(a, ft, sp) : 0;
  int ok = 0;
  if (n == SIZE_MAX) {
    char *s = NULL;
    hid_t mt = vlen_str_type();
    if (H5Aread(a, mt, &s) >= 0 && s) {
      snprintf(buf, len, "%s", s);
      H5free_memory(s);
      ok = 1;
    }
    H5Tclose(mt);
  } else if (n > 0) {
    char tmp[SS_H5_ATTR_STR_MAX + 1];
    memset(tmp, 0, n + 1);
    hid_t mt = H5Tcopy(ft);
    if (mt >= 0 && H5Aread(a, mt, tmp) >= 0) {
      snprintf(buf, len, "%s", tmp);
      ok = 1;
    }
    if (mt >= 0) H5Tclose(mt);
  }
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  return ok;
}

int64_t ss_h5_attr_len(hid_t obj, const char *name) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), sp = H5Aget_space(a);
  int64_t n = H5Sget_simple_extent_npoints(sp);
  H5Sclose(sp);
  H5Aclose(a);
  return n;
}

int ss_h5_read_attr_f64s(hid_t obj, const char *name, double *out, int64_t n) {
  if (ss_h5_attr_len(obj, name) != n) return 0;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), ft = H5Aget_type(a);
  H5T_class_t cls = H5Tget_class(ft);
  int ok = (cls == H5T_INTEGER || cls == H5T_FLOAT) && H5Aread(a, H5T_NATIVE_DOUBLE, out) >= 0;
  H5Tclose(ft);
  H5Aclose(a);
  return ok;
}

int ss_h5_read_attr_f64(hid_t obj, const char *name, double *out) { return ss_h5_read_attr_f64s(obj, name, out, 1); }

int ss_h5_shape(hid_t dset, int64_t *dims) {
  hid_t sp = H5Dget_space(dset);
  if (sp < 0) return -1;
  hsize_t d[H5S_MAX_RANK];
  int rank = H5Sget_simple_extent_ndims(sp);
  if (rank > 8) rank = -1;
  if (rank > 0) H5Sget_simple_extent_dims(sp, d, NULL);
  for (int i = 0; i < rank; i++) dims[i] = (int64_t)d[i];
  H5Sclose(sp);
  return rank;
}

void ss_h5_type_name(hid_t type, char *buf, size_t len) {
  size_t size = H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER: snprintf(buf, len, "%s%zu", H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", size * 8); break;
    case H5T_FLOAT: snprintf(buf, len, "float%zu", size * 8); break;
    case H5T_STRING: snprintf(buf, len, "string"); break;
    case H5T_COMPOUND: snprintf(buf, len, "compound"); break;
    case H5T_REFERENCE: snprintf(buf, len, "reference"); break;
    default: snprintf(buf, len, "other"); break;
  }
}

ss_status ss_h5_read_f64_vector(ss_ctx *ctx, hid_t loc, const char *path, const char *file, double **out, int64_t *n) {
  *out = NULL;
  *n = 0;
  if (!ss_h5_is_dataset(loc, path)) return ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: missing", file, path);
  hid_t d = H5Dopen2(loc, path, H5P_DEFAULT), t = H5Dget_type(d);
  int64_t dims[8];
  int rank = ss_h5_shape(d, dims);
  H5T_class_t cls = H5Tget_class(t);
  char tn[32];
  ss_h5_type_name(t, tn, sizeof(tn));
  H5Tclose(t);
  ss_status st = SS_OK;
  if (rank != 1) {
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: expected rank 1, got rank %d", file, path, rank);
  } else if (cls != H5T_INTEGER && cls != H5T_FLOAT) {
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: dataset %s: expected a numeric type, got %s", file, path, tn);
  } else if ((st = SS_ALLOC(ctx, *out, dims[0] > 0 ? (size_t)dims[0] : 1, path)) == SS_OK) {
    if (dims[0] > 0 && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, *out) < 0) {
      free(*out);
      *out = NULL;
      st = ss_fail(ctx, SS_ERR_IO, "%s: dataset %s: read failed", file, path);
    } else {
      *n = dims[0];
    }
  }
  H5Dclose(d);
  return st;
}

/* --- output files built in memory -------------------------------------------------------------- */

/* Growth step of the in-memory image (the core driver reallocates by this much). */
#define SS_H5_MEM_INCREMENT ((size_t)16 << 20)

hid_t ss_h5_mem_create(ss_ctx *ctx, ss_atomic_file *af, const char *path) {
  ss_h5_quiet();
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  hid_t f = -1;
  if (fapl >= 0 && H5Pset_fapl_core(fapl, SS_H5_MEM_INCREMENT, 0) >= 0)
    f = H5Fcreate(af->tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (fapl >= 0) H5Pclose(fapl);
  if (f < 0) {
    ss_atomic_abort(af);
    ss_fail(ctx, SS_ERR_IO, "%s: cannot create the file", path);
  }
  return f;
}

void ss_h5_mem_abort(hid_t file, ss_atomic_file *af) {
  if (file >= 0) H5Fclose(file);
  ss_atomic_abort(af);
}

ss_status ss_h5_mem_commit(ss_ctx *ctx, hid_t file, ss_atomic_file *af) {
  const char *path = af->final_path;
  ssize_t size = H5Fflush(file, H5F_SCOPE_LOCAL) < 0 ? -1 : H5Fget_file_image(file, NULL, 0);
  if (size <= 0) {
    ss_h5_mem_abort(file, af);
    return ss_fail(ctx, SS_ERR_IO, "%s: cannot finish the file", path);
  }
  char *image = NULL;
  ss_status st = SS_ALLOC(ctx, image, (size_t)size, "HDF5 file image");
  if (st == SS_OK && H5Fget_file_image(file, image, (size_t)size) != size)
    st = ss_fail(ctx, SS_ERR_IO, "%s: cannot copy the file image", path);
  herr_t closed = H5Fclose(file);
  if (st == SS_OK && closed < 0) st = ss_fail(ctx, SS_ERR_IO, "%s: cannot close the file", path);
  if (st == SS_OK) {
    af->f = fopen(af->tmp_path, "wb");
    if (!af->f) st = ss_fail(ctx, SS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  }
  if (st == SS_OK && fwrite(image, 1, (size_t)size, af->f) != (size_t)size)
    st = ss_fail(ctx, SS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
  free(image);
  if (st != SS_OK) {
    ss_atomic_abort(af);
    return st;
  }
  return ss_atomic_commit(ctx, af);
}

/* --- closing a file that is being thrown away -------------------------------------------------- */

/* Point the sec2 driver's descriptor of `file` at an anonymous memory file, so that whatever the
 * close still flushes lands there and succeeds; 0 when that cannot be done (another driver). */
static int redirect_to_memory(hid_t file) {
  hid_t fapl = H5Fget_access_plist(file);
  int sec2 = fapl >= 0 && H5Pget_driver(fapl) == H5FD_SEC2;
  int *fd = NULL;
  if (!sec2 || H5Fget_vfd_handle(file, fapl, (void **)&fd) < 0 || !fd || *fd < 0) sec2 = 0;
  if (fapl >= 0) H5Pclose(fapl);
  if (!sec2) return 0;
#ifdef MFD_CLOEXEC
  int mem = memfd_create("spikestream-discard", MFD_CLOEXEC);
#else
  int mem = -1; /* no anonymous memory files here: the close may fail (ss_h5_no_exit_teardown) */
#endif
  int ok = mem >= 0 && dup2(mem, *fd) >= 0;
  if (mem >= 0) close(mem);
  return ok;
}

void ss_h5_close_discard(hid_t file) {
  if (file < 0 || H5Iis_valid(file) <= 0) return;
  H5E_BEGIN_TRY {
    /* before the close: a failed close leaves the file unusable, even for asking its driver */
    redirect_to_memory(file);
    H5Fclose(file);
  }
  H5E_END_TRY;
}

herr_t ss_h5_close_checked(hid_t file) {
  herr_t e = -1;
  H5E_BEGIN_TRY {
    e = H5Fflush(file, H5F_SCOPE_LOCAL);
    if (e >= 0) e = H5Fclose(file);
  }
  H5E_END_TRY;
  if (e < 0) ss_h5_close_discard(file);
  return e;
}
