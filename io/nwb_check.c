/* nwb_check.c — the NWB 2.x structural checker (what is checked: nwb_check.h). */
#include "io/nwb_check.h"

#include <ctype.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "io/h5_util.h"

#define CHECK_STR_MAX 256
#define UUID_LEN 36
#define CHECK_PATH_MAX 1024
#define CHECK_WHERE_MAX (CHECK_PATH_MAX + CHECK_STR_MAX + 32)

typedef struct {
  ss_ctx *ctx;
  const char *file;
  hid_t fid;
  int n_series; /* ElectricalSeries found under /acquisition */
} checker;

static void problem(checker *c, const char *obj, const char *what) {
  ss_problem(c->ctx, SS_ERR_INPUT, "%s: %s: %s", c->file, obj, what);
}

static int uuid_shaped(const char *s) {
  if (strlen(s) != UUID_LEN) return 0;
  for (int i = 0; i < UUID_LEN; i++) {
    int dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !isxdigit((unsigned char)s[i])) return 0;
  }
  return 1;
}

/* Attribute `name` must be a string (equal to `want` when given). */
static void want_attr(checker *c, hid_t obj, const char *where, const char *name, const char *want) {
  char v[CHECK_STR_MAX], msg[CHECK_STR_MAX * 2 + 64];
  if (!ss_h5_read_attr_str(obj, name, v, sizeof(v))) {
    snprintf(msg, sizeof(msg), "missing string attribute %s", name);
    problem(c, where, msg);
  } else if (want && strcmp(v, want) != 0) {
    snprintf(msg, sizeof(msg), "attribute %s: expected \"%s\", got \"%s\"", name, want, v);
    problem(c, where, msg);
  }
}

static void want_number(checker *c, hid_t obj, const char *where, const char *name) {
  double v;
  char msg[CHECK_STR_MAX];
  if (!ss_h5_read_attr_f64(obj, name, &v)) {
    snprintf(msg, sizeof(msg), "missing numeric attribute %s", name);
    problem(c, where, msg);
  }
}

static int64_t rows_of(hid_t loc, const char *path) {
  if (!ss_h5_is_dataset(loc, path)) return -1;
  hid_t d = H5Dopen2(loc, path, H5P_DEFAULT);
  int64_t dims[8];
  int rank = ss_h5_shape(d, dims);
  H5Dclose(d);
  return rank >= 1 ? dims[0] : rank == 0 ? 1 : -1;
}

/* The object an object-reference attribute points at (or -1). */
static hid_t deref_attr(hid_t obj, const char *name) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = H5Aget_type(a);
  hobj_ref_t ref;
  hid_t target = -1;
  if (H5Tget_class(t) == H5T_REFERENCE && H5Aread(a, H5T_STD_REF_OBJ, &ref) >= 0)
    target = H5Rdereference2(obj, H5P_DEFAULT, H5R_OBJECT, &ref);
  H5Tclose(t);
  H5Aclose(a);
  return target;
}

static void type_of(hid_t obj, char *buf, size_t len) {
  if (!ss_h5_read_attr_str(obj, "neurodata_type", buf, len)) buf[0] = '\0';
}

static void check_column(checker *c, hid_t table, const char *tpath, const char *col, int64_t n_rows) {
  char where[CHECK_WHERE_MAX], idx[CHECK_STR_MAX + 8], type[CHECK_STR_MAX], msg[CHECK_STR_MAX * 2];
  snprintf(where, sizeof(where), "%s/%s", tpath, col);
  if (!ss_h5_is_dataset(table, col)) {
    problem(c, where, "column named in colnames is missing");
    return;
  }
  hid_t d = H5Dopen2(table, col, H5P_DEFAULT);
  type_of(d, type, sizeof(type));
  H5Dclose(d);
  if (strcmp(type, "VectorData") != 0 && strcmp(type, "DynamicTableRegion") != 0) {
    snprintf(msg, sizeof(msg), "neurodata_type: expected VectorData or DynamicTableRegion, got \"%s\"", type);
    problem(c, where, msg);
  }
  snprintf(idx, sizeof(idx), "%s_index", col);
  int64_t have = ss_h5_is_dataset(table, idx) ? rows_of(table, idx) : rows_of(table, col);
  if (have != n_rows) {
    snprintf(msg, sizeof(msg), "expected %lld rows (as id), got %lld", (long long)n_rows, (long long)have);
    problem(c, where, msg);
  }
}

static void check_table(checker *c, hid_t g, const char *path) {
  want_attr(c, g, path, "description", NULL);
  int64_t n_cols = ss_h5_attr_len(g, "colnames");
  int64_t n_rows = rows_of(g, "id");
  char type[CHECK_STR_MAX];
  if (n_rows < 0) {
    problem(c, path, "missing dataset id");
  } else {
    hid_t d = H5Dopen2(g, "id", H5P_DEFAULT);
    type_of(d, type, sizeof(type));
    H5Dclose(d);
    if (strcmp(type, "ElementIdentifiers") != 0) problem(c, path, "id: neurodata_type is not ElementIdentifiers");
  }
  if (n_cols < 0) {
    problem(c, path, "missing attribute colnames");
    return;
  }
  hid_t a = H5Aopen(g, "colnames", H5P_DEFAULT), t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  char **names = calloc((size_t)(n_cols > 0 ? n_cols : 1), sizeof(char *));
  if (names && H5Aread(a, t, names) >= 0) {
    for (int64_t i = 0; i < n_cols; i++)
      if (names[i]) check_column(c, g, path, names[i], n_rows);
    for (int64_t i = 0; i < n_cols; i++) H5free_memory(names[i]);
  } else {
    problem(c, path, "colnames: expected an array of variable-length strings");
  }
  free(names);
  H5Tclose(t);
  H5Aclose(a);
}

static void check_region(checker *c, hid_t d, const char *path) {
  want_attr(c, d, path, "description", NULL);
  hid_t t = deref_attr(d, "table");
  if (t < 0) {
    problem(c, path, "attribute table: missing or not an object reference");
    return;
  }
  char type[CHECK_STR_MAX];
  type_of(t, type, sizeof(type));
  if (strcmp(type, "DynamicTable") != 0 && strcmp(type, "Units") != 0)
    problem(c, path, "attribute table: does not reference a DynamicTable");
  int64_t n_table = rows_of(t, "id");
  H5Oclose(t);
  int64_t dims[8];
  int64_t n = ss_h5_shape(d, dims) == 1 ? dims[0] : -1;
  double *v = n >= 0 ? malloc((size_t)(n > 0 ? n : 1) * sizeof(double)) : NULL;
  if (!v || (n > 0 && H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)) {
    free(v);
    problem(c, path, "expected a 1-D integer dataset");
    return;
  }
  for (int64_t i = 0; i < n; i++)
    if (v[i] < 0 || v[i] >= (double)n_table) {
      char msg[CHECK_STR_MAX];
      snprintf(msg, sizeof(msg), "row %lld: index %g is outside the table's %lld rows", (long long)i, v[i],
               (long long)n_table);
      problem(c, path, msg);
      break;
    }
  free(v);
}

static void check_series(checker *c, hid_t g, const char *path) {
  char where[CHECK_WHERE_MAX], msg[CHECK_STR_MAX];
  if (strncmp(path, "/acquisition/", 13) == 0) c->n_series++;
  snprintf(where, sizeof(where), "%s/data", path);
  if (!ss_h5_is_dataset(g, "data")) {
    problem(c, where, "missing dataset");
    return;
  }
  hid_t d = H5Dopen2(g, "data", H5P_DEFAULT);
  int64_t dims[8];
  int rank = ss_h5_shape(d, dims);
  want_attr(c, d, where, "unit", NULL);
  want_number(c, d, where, "conversion");
  want_number(c, d, where, "resolution");
  H5Dclose(d);
  if (rank != 2) {
    snprintf(msg, sizeof(msg), "expected rank 2 (time x channels), got rank %d", rank);
    problem(c, where, msg);
    return;
  }
  if (ss_h5_is_dataset(g, "starting_time")) {
    snprintf(where, sizeof(where), "%s/starting_time", path);
    d = H5Dopen2(g, "starting_time", H5P_DEFAULT);
    want_number(c, d, where, "rate");
    want_attr(c, d, where, "unit", "seconds");
    H5Dclose(d);
  } else if (ss_h5_is_dataset(g, "timestamps")) {
    if (rows_of(g, "timestamps") != dims[0]) {
      snprintf(msg, sizeof(msg), "expected %lld timestamps (one per sample), got %lld", (long long)dims[0],
               (long long)rows_of(g, "timestamps"));
      problem(c, path, msg);
    }
  } else {
    problem(c, path, "neither starting_time nor timestamps");
  }
  if (rows_of(g, "electrodes") != dims[1]) {
    snprintf(msg, sizeof(msg), "electrodes: expected %lld rows (one per data column), got %lld", (long long)dims[1],
             (long long)rows_of(g, "electrodes"));
    problem(c, path, msg);
  }
}

static void check_electrode_group(checker *c, hid_t g, const char *path) {
  want_attr(c, g, path, "description", NULL);
  want_attr(c, g, path, "location", NULL);
  char type[CHECK_STR_MAX];
  hid_t dev = H5Lexists(g, "device", H5P_DEFAULT) > 0 ? H5Oopen(g, "device", H5P_DEFAULT) : -1;
  if (dev < 0) {
    problem(c, path, "device: missing or dangling link");
    return;
  }
  type_of(dev, type, sizeof(type));
  H5Oclose(dev);
  if (strcmp(type, "Device") != 0) problem(c, path, "device: does not lead to a Device");
}

/* The schema types VectorIndex as uint8 (any unsigned integer will do); pynwb's validator refuses
 * signed ones. */
static void check_index_type(checker *c, hid_t d, const char *path) {
  if (H5Iget_type(d) != H5I_DATASET) {
    problem(c, path, "VectorIndex: expected a dataset");
    return;
  }
  hid_t t = H5Dget_type(d);
  char tn[32], msg[CHECK_STR_MAX];
  ss_h5_type_name(t, tn, sizeof(tn));
  int ok = H5Tget_class(t) == H5T_INTEGER && H5Tget_sign(t) == H5T_SGN_NONE;
  H5Tclose(t);
  if (!ok) {
    snprintf(msg, sizeof(msg), "VectorIndex: expected an unsigned integer type, got %s", tn);
    problem(c, path, msg);
  }
}

static void check_typed(checker *c, hid_t obj, const char *path, const char *type) {
  char ns[CHECK_STR_MAX], id[CHECK_STR_MAX];
  if (!ss_h5_read_attr_str(obj, "namespace", ns, sizeof(ns))) problem(c, path, "missing string attribute namespace");
  else if (strcmp(ns, "core") != 0 && strcmp(ns, "hdmf-common") != 0)
    problem(c, path, "namespace: expected \"core\" or \"hdmf-common\"");
  if (!ss_h5_read_attr_str(obj, "object_id", id, sizeof(id)) || !uuid_shaped(id))
    problem(c, path, "object_id: missing or not a UUID");
  if (strcmp(type, "DynamicTable") == 0 || strcmp(type, "Units") == 0) check_table(c, obj, path);
  else if (strcmp(type, "DynamicTableRegion") == 0) check_region(c, obj, path);
  else if (strcmp(type, "ElectricalSeries") == 0) check_series(c, obj, path);
  else if (strcmp(type, "ElectrodeGroup") == 0) check_electrode_group(c, obj, path);
  else if (strcmp(type, "VectorIndex") == 0) {
    hid_t t = deref_attr(obj, "target");
    if (t < 0) problem(c, path, "attribute target: missing or not an object reference");
    else H5Oclose(t);
    check_index_type(c, obj, path);
  }
  if (strcmp(type, "VectorData") == 0 || strcmp(type, "VectorIndex") == 0) want_attr(c, obj, path, "description", NULL);
}

static herr_t visit(hid_t root, const char *name, const H5O_info_t *info, void *arg) {
  checker *c = arg;
  (void)info;
  char path[CHECK_PATH_MAX], type[CHECK_STR_MAX];
  snprintf(path, sizeof(path), "/%s", strcmp(name, ".") == 0 ? "" : name);
  hid_t o = H5Oopen(root, name, H5P_DEFAULT);
  if (o < 0) return 0;
  type_of(o, type, sizeof(type));
  if (type[0] && strcmp(path, "/") != 0) check_typed(c, o, path, type);
  H5Oclose(o);
  return 0;
}

/* The cached namespaces pynwb and hdmf read the file with: /specifications/<ns>/<version>/namespace
 * for core and hdmf-common, found through the root's `.specloc` reference. */
static void check_specs(checker *c, hid_t root) {
  if (!ss_h5_is_group(c->fid, "specifications")) {
    problem(c, "/specifications", "missing: no cached namespace (the schema the file was written with)");
    return;
  }
  hid_t loc = deref_attr(root, ".specloc");
  if (loc < 0) problem(c, "/", "attribute .specloc: missing or not an object reference");
  else H5Oclose(loc);
  static const char *need[] = {"core", "hdmf-common"};
  for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
    char path[CHECK_PATH_MAX];
    snprintf(path, sizeof(path), "/specifications/%s", need[i]);
    hid_t g = ss_h5_is_group(c->fid, path) ? H5Gopen2(c->fid, path, H5P_DEFAULT) : -1;
    H5G_info_t gi;
    int ok = g >= 0 && H5Gget_info(g, &gi) >= 0 && gi.nlinks > 0;
    if (ok) { /* the first version's namespace document */
      char ver[CHECK_STR_MAX], doc[CHECK_PATH_MAX + CHECK_STR_MAX];
      ssize_t n = H5Lget_name_by_idx(g, ".", H5_INDEX_NAME, H5_ITER_INC, 0, ver, sizeof(ver), H5P_DEFAULT);
      snprintf(doc, sizeof(doc), "%s/namespace", n > 0 && (size_t)n < sizeof(ver) ? ver : "");
      ok = n > 0 && ss_h5_is_dataset(g, doc);
    }
    if (g >= 0) H5Gclose(g);
    if (!ok) problem(c, path, "missing a cached namespace (<version>/namespace)");
  }
}

/* External links under /acquisition (a series kept in another file) are not visited by H5Ovisit:
 * each must resolve, and a linked ElectricalSeries is checked like a local one. */
static herr_t visit_link(hid_t g, const char *name, const H5L_info_t *info, void *arg) {
  checker *c = arg;
  if (info->type != H5L_TYPE_EXTERNAL) return 0;
  char path[CHECK_PATH_MAX], type[CHECK_STR_MAX];
  snprintf(path, sizeof(path), "/acquisition/%s", name);
  hid_t o = H5Oopen(g, name, H5P_DEFAULT);
  if (o < 0) {
    problem(c, path, "external link does not resolve (the linked file or object is missing)");
    return 0;
  }
  type_of(o, type, sizeof(type));
  if (strcmp(type, "ElectricalSeries") == 0) check_series(c, o, path);
  H5Oclose(o);
  return 0;
}

static void check_root(checker *c) {
  hid_t root = H5Gopen2(c->fid, "/", H5P_DEFAULT);
  char v[CHECK_STR_MAX];
  want_attr(c, root, "/", "neurodata_type", "NWBFile");
  want_attr(c, root, "/", "namespace", "core");
  if (!ss_h5_read_attr_str(root, "nwb_version", v, sizeof(v)) || strncmp(v, "2.", 2) != 0)
    problem(c, "/", "nwb_version: missing or not 2.x");
  if (!ss_h5_read_attr_str(root, "object_id", v, sizeof(v)) || !uuid_shaped(v))
    problem(c, "/", "object_id: missing or not a UUID");
  check_specs(c, root);
  H5Gclose(root);
  static const char *datasets[] = {"identifier", "session_description", "session_start_time",
                                   "timestamps_reference_time", "file_create_date"};
  static const char *groups[] = {"acquisition",           "analysis",           "processing", "stimulus",
                                 "stimulus/presentation", "stimulus/templates", "general"};
  for (size_t i = 0; i < sizeof(datasets) / sizeof(datasets[0]); i++)
    if (!ss_h5_is_dataset(c->fid, datasets[i])) problem(c, datasets[i], "required dataset is missing");
  for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
    if (!ss_h5_is_group(c->fid, groups[i])) problem(c, groups[i], "required group is missing");
}

ss_status ss_nwb_check(ss_ctx *ctx, const char *path) {
  ss_h5_quiet();
  ss_ctx_clear(ctx);
  if (H5Fis_hdf5(path) <= 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: not an HDF5 file", path);
  checker c = {ctx, path, H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT), 0};
  if (c.fid < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open", path);
  check_root(&c);
  H5Ovisit(c.fid, H5_INDEX_NAME, H5_ITER_INC, visit, &c);
  if (ss_h5_is_group(c.fid, "acquisition"))
    H5Literate_by_name(c.fid, "acquisition", H5_INDEX_NAME, H5_ITER_INC, NULL, visit_link, &c, H5P_DEFAULT);
  if (c.n_series == 0 && !ss_h5_is_group(c.fid, "units"))
    problem(&c, "/acquisition", "no ElectricalSeries (and no units table)");
  else if (!ss_h5_is_group(c.fid, "general/extracellular_ephys/electrodes"))
    problem(&c, "/general/extracellular_ephys/electrodes", "missing electrodes table");
  H5Fclose(c.fid);
  return ctx->status;
}

int ss_nwb_units_only(const char *path) {
  ss_h5_quiet();
  if (H5Fis_hdf5(path) <= 0) return 0;
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return 0;
  H5G_info_t gi;
  hid_t g = ss_h5_is_group(f, "acquisition") ? H5Gopen2(f, "acquisition", H5P_DEFAULT) : -1;
  int empty = g >= 0 && H5Gget_info(g, &gi) >= 0 && gi.nlinks == 0;
  if (g >= 0) H5Gclose(g);
  int yes = empty && ss_h5_is_group(f, "units");
  H5Fclose(f);
  return yes;
}
