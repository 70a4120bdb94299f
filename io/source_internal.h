/* source_internal.h — what the source front (source.c) shares with its back-ends
 * (source_hdf5.c, source_binary.c) and the storage reader (source_store.c).
 *
 * A back-end's job is metadata only: it fills ss_source_info and describes where the samples lie
 * as an ss_store — a 2-D array in tiles (HDF5 chunks; one tile for contiguous data and binary
 * files) at known byte offsets, read with pread(); or, when that is impossible, an HDF5 dataset
 * read through the library with hyperslabs. Every format shares that one reader. */
#ifndef SS_SOURCE_INTERNAL_H
#define SS_SOURCE_INTERNAL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "io/source.h"

typedef enum { SS_ELEM_I16 = 0, SS_ELEM_F32, SS_ELEM_F64 } ss_elem;

typedef struct {
  ss_elem elem;
  size_t elem_size;
  int transposed;  /* storage is [channels × time] (channel-major) */
  int64_t dims[2]; /* storage dims */
  /* pread path */
  int fd;            /* -1: read through HDF5 */
  int64_t cdims[2];  /* tile dims (= dims when contiguous) */
  int64_t grid[2];   /* tiles along each dim */
  int64_t *tile_off; /* byte offset of each tile, row-major over grid; -1: never written (zeros) */
  int64_t file_size; /* bytes, as stat'ed at open: a shorter file later was cut while being read */
  /* column selection (one time-major tile only): storage column of each delivered channel; the
     storage row is `width` elements. NULL: every column, width = dims[1]. */
  int *cols;
  int64_t width;
  int offset_binary; /* uint16 samples centred on 32768 (Intan): delivered as value − 32768 */
  /* HDF5 path */
  hid_t h5file, h5dset;
  /* staging for tiles that cannot be read straight into the output */
  char *scratch;
  size_t scratch_size;
} ss_store;

void ss_store_init(ss_store *s);
/* Read samples [t0, t0 + n) of every channel into out: n × channels elements of the store's element
 * type, time-major. The range must lie inside the recording. Not reentrant (one reader at a time). */
ss_status ss_store_read(ss_ctx *ctx, ss_store *s, const char *file, int64_t t0, int64_t n, void *out);
void ss_store_close(ss_store *s);

/* Back-ends: fill info (format, dataset, dtype, layout, rate, start, channels, samples, scale,
 * positions; the scale arrays are allocated here) and the store. */
ss_status ss_source_open_hdf5(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store);
ss_status ss_source_open_binary(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store);
ss_status ss_source_open_spikeglx(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store);
ss_status ss_source_open_openephys(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store);
ss_status ss_source_open_intan(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store);
/* Open `path` read-only as a regular file for the pread store: fd and size, or exit 1 naming it. */
ss_status ss_source_open_fd(ss_ctx *ctx, const char *path, int *fd, int64_t *size);
/* A one-tile time-major int16 store over `fd`: `width` int16 per frame from byte `offset`, `n` frames. */
ss_status ss_source_flat_store(ss_ctx *ctx, ss_store *store, int fd, int64_t size, int64_t offset, int64_t width,
                               int64_t n);
/* 1 when the path is a .bin or .meta whose sibling .meta exists. */
int ss_source_is_spikeglx(const char *path);
/* 1 when the path is a folder holding structure.oebin, or that file. */
int ss_source_is_openephys(const char *path);
/* 1 when the path ends .rhd or .rhs. */
int ss_source_is_intan(const char *path);
/* 1 when the path names an HDF5 file. */
int ss_source_is_hdf5(const char *path);

/* Range checks shared by the back-ends; `field` names what was read ("--rate", a dataset or an
 * attribute path) and the refusal quotes the value as it is (nan, inf included). */
ss_status ss_source_check_rate(ss_ctx *ctx, const char *file, const char *field, double rate_hz);
ss_status ss_source_check_channels(ss_ctx *ctx, const char *file, const char *field, int64_t n, const char *detail);
/* Every channel's scale finite and non-zero. */
ss_status ss_source_check_scales(ss_ctx *ctx, const char *file, const char *field, const double *scale, int n);

/* Allocate info->uv_per_step with every channel at `value`. */
ss_status ss_source_info_scale(ss_ctx *ctx, ss_source_info *info, double value);

#endif
