/* nwb_spec.c — writes the cached schema (nwb_spec.h) into an NWB file's /specifications. */
#include "io/nwb_spec.h"

#include <stdio.h>
#include <string.h>

#include "io/h5_util.h"

#define SPEC_PATH_MAX 256

/* Create loc/name unless it exists; the group stays open in *out. */
static ss_status group_at(ss_ctx *ctx, hid_t loc, const char *name, const char *where, hid_t *out) {
  if (H5Lexists(loc, name, H5P_DEFAULT) > 0) *out = H5Gopen2(loc, name, H5P_DEFAULT);
  else {
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
    H5Pset_obj_track_times(gcpl, 0); /* no creation times: same content, same bytes */
    *out = H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    H5Pclose(gcpl);
  }
  if (*out < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot create group %s", where, name);
  return SS_OK;
}

static ss_status write_doc(ss_ctx *ctx, hid_t specs, const ss_nwb_spec_doc *d, const char *where) {
  hid_t ns = -1, ver = -1;
  ss_status st = group_at(ctx, specs, d->ns, where, &ns);
  if (st == SS_OK) st = group_at(ctx, ns, d->version, where, &ver);
  if (st == SS_OK) st = ss_h5_dataset_str(ctx, ver, d->name, d->text, where);
  if (ver >= 0) H5Gclose(ver);
  if (ns >= 0) H5Gclose(ns);
  return st;
}

ss_status ss_nwb_spec_write(ss_ctx *ctx, hid_t file, const char *where) {
  hid_t specs = -1;
  SS_TRY(group_at(ctx, file, "/specifications", where, &specs));
  ss_status st = SS_OK;
  for (int i = 0; i < ss_nwb_spec_n_docs && st == SS_OK; i++) st = write_doc(ctx, specs, &ss_nwb_spec_docs[i], where);
  H5Gclose(specs);
  SS_TRY(st);
  hid_t root = H5Gopen2(file, "/", H5P_DEFAULT);
  st = ss_h5_attr_ref(ctx, root, ".specloc", file, "/specifications", where);
  H5Gclose(root);
  return st;
}
