/* nwb_write_internal.h — what the NWB writer's files (nwb_write.c: skeleton, electrodes, acquisition;
 * nwb_units.c: the units table) share: the writer's state and the typed-object helpers. Not a public
 * interface. */
#ifndef SS_NWB_WRITE_INTERNAL_H
#define SS_NWB_WRITE_INTERNAL_H

#include <hdf5.h>

#include "io/atomic_file.h"
#include "io/nwb_write.h"

#define SS_NWB_MAX_TYPED 96 /* typed objects in one file (we write about 35) */
#define SS_NWB_PATH_MAX 512
#define SS_NWB_ELECTRODES "/general/extracellular_ephys/electrodes"

struct ss_nwb_writer {
  hid_t file, data, timestamps;
  ss_atomic_file af;
  const char *final_path, *tmp_path; /* into af */
  char series[SS_NWB_PATH_MAX];      /* /acquisition/<name> */
  char identifier[256];
  ss_nwb_meta meta;
  int16_t *buf; /* one chunk of rows */
  int64_t chunk_rows, n_buffered, n_written;
  uint64_t hash;
  int n_typed;
  char typed[SS_NWB_MAX_TYPED][SS_NWB_PATH_MAX];
};

/* Mark obj (at path) as an NWB type: neurodata_type, namespace, description; its object_id is
 * written on close. */
ss_status ss_nwbw_typed(ss_ctx *ctx, ss_nwb_writer *w, hid_t obj, const char *path, const char *type, const char *ns,
                        const char *description);
/* A typed group; left open in *out when out is not NULL. */
ss_status ss_nwbw_group(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *type, const char *ns,
                        const char *description, hid_t *out);
/* A dataset of `rank` dims of `type` written from buf, typed as ntype (namespace chosen from the type)
 * when ntype is not NULL; left open in *out when out is not NULL. */
ss_status ss_nwbw_array(ss_ctx *ctx, ss_nwb_writer *w, const char *path, hid_t type, const void *buf, int rank,
                        const hsize_t *dims, const char *ntype, const char *description, hid_t *out);
/* The 1-D case of ss_nwbw_array. */
ss_status ss_nwbw_vector(ss_ctx *ctx, ss_nwb_writer *w, const char *path, hid_t type, const void *buf, int64_t n,
                         const char *ntype, const char *description, hid_t *out);
/* A table's ElementIdentifiers `id`: 0 .. n-1. */
ss_status ss_nwbw_ids(ss_ctx *ctx, ss_nwb_writer *w, const char *table, int64_t n);
/* A VectorData column of n UTF-8 strings. */
ss_status ss_nwbw_strings(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *const *values, int64_t n,
                          const char *description);
/* A VectorIndex (uint64 ends, as the schema wants an unsigned type) at path for the column target. */
ss_status ss_nwbw_index(ss_ctx *ctx, ss_nwb_writer *w, const char *path, const char *target, const uint64_t *ends,
                        int64_t n, const char *description);

#endif
