/* source_store.c — the one sample reader every source format shares: a 2-D array stored in tiles at
 * known file offsets (pread, thread-safe, no HDF5 call), or an HDF5 dataset read by hyperslab. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/source_internal.h"

void ss_store_init(ss_store *s) {
  memset(s, 0, sizeof(*s));
  s->fd = -1;
  s->h5file = s->h5dset = -1;
}

void ss_store_close(ss_store *s) {
  if (s->fd >= 0) close(s->fd);
  if (s->h5dset >= 0) H5Dclose(s->h5dset);
  if (s->h5file >= 0) H5Fclose(s->h5file);
  free(s->tile_off);
  free(s->cols);
  free(s->scratch);
  ss_store_init(s);
}

static ss_status scratch(ss_ctx *ctx, ss_store *s, size_t bytes) {
  if (bytes <= s->scratch_size) return SS_OK;
  free(s->scratch);
  s->scratch = NULL;
  s->scratch_size = 0;
  SS_TRY(SS_ALLOC(ctx, s->scratch, bytes, "read staging buffer"));
  s->scratch_size = bytes;
  return SS_OK;
}

/* A read that met the end of the file inside the data: the file shrank after it was opened. Names
 * the sample where the data now end when the storage is one time-major tile (flat binary). */
static ss_status cut_short(ss_ctx *ctx, const ss_store *s, const char *file, int64_t off) {
  struct stat sb;
  int64_t now = fstat(s->fd, &sb) == 0 ? (int64_t)sb.st_size : -1;
  int64_t frame = (s->cols ? s->width : s->dims[1]) * (int64_t)s->elem_size;
  if (!s->transposed && s->grid[0] == 1 && s->grid[1] == 1 && s->tile_off[0] >= 0 && now >= 0) {
    int64_t end = now > s->tile_off[0] ? (now - s->tile_off[0]) / frame : 0;
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: truncated while being read: the data end at sample %lld of %lld (file size "
                   "%lld bytes, %lld when opened)",
                   file, (long long)end, (long long)s->dims[0], (long long)now, (long long)s->file_size);
  }
  return ss_fail(ctx, SS_ERR_INPUT,
                 "%s: truncated while being read: no data at byte %lld (file size %lld bytes, %lld "
                 "when opened)",
                 file, (long long)off, (long long)now, (long long)s->file_size);
}

static ss_status pread_all(ss_ctx *ctx, const ss_store *s, const char *file, void *buf, size_t bytes, int64_t off) {
  char *p = buf;
  int fd = s->fd;
  while (bytes > 0) {
    ssize_t got = pread(fd, p, bytes, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0) return cut_short(ctx, s, file, off);
    if (got < 0)
      return ss_fail(ctx, SS_ERR_IO, "%s: read of %zu bytes at offset %lld failed: %s", file, bytes, (long long)off,
                     strerror(errno));
    p += got;
    bytes -= (size_t)got;
    off += got;
  }
  return SS_OK;
}

/* Copy a block of storage rows [r0, r0+nr) × cols [k0, k0+nk) (dense in src) into the time-major
 * output whose first row is sample t0. */
static void scatter(const ss_store *s, const char *src, int64_t r0, int64_t nr, int64_t k0, int64_t nk, int64_t t0,
                    char *out) {
  size_t es = s->elem_size;
  int64_t C = s->transposed ? s->dims[0] : s->dims[1];
  for (int64_t i = 0; i < nr; i++) {
    if (!s->transposed) {
      memcpy(out + (size_t)((r0 + i - t0) * C + k0) * es, src + (size_t)(i * nk) * es, (size_t)nk * es);
    } else {
      for (int64_t j = 0; j < nk; j++) /* storage row = channel, column = time */
        memcpy(out + (size_t)((k0 + j - t0) * C + r0 + i) * es, src + (size_t)(i * nk + j) * es, es);
    }
  }
}

/* One tile's part of the request: storage rows [r0,r1) × cols [k0,k1) in global coordinates. */
static ss_status read_tile(ss_ctx *ctx, ss_store *s, const char *file, int64_t tr, int64_t tk, int64_t r0, int64_t r1,
                           int64_t k0, int64_t k1, int64_t t0, char *out) {
  size_t es = s->elem_size;
  int64_t off = s->tile_off[tr * s->grid[1] + tk], cw = s->cdims[1];
  int64_t nr = r1 - r0, nk = k1 - k0, lr = r0 - tr * s->cdims[0], lk = k0 - tk * cw;
  int full_width = lk == 0 && nk == cw;
  int64_t C = s->transposed ? s->dims[0] : s->dims[1];
  if (!s->transposed && full_width && nk == C) { /* rows are whole frames: straight into the output */
    char *dst = out + (size_t)((r0 - t0) * C) * es;
    if (off < 0) {
      memset(dst, 0, (size_t)(nr * nk) * es);
      return SS_OK;
    }
    return pread_all(ctx, s, file, dst, (size_t)(nr * nk) * es, off + (lr * cw) * (int64_t)es);
  }
  SS_TRY(scratch(ctx, s, (size_t)(nr * nk) * es));
  if (off < 0) {
    memset(s->scratch, 0, (size_t)(nr * nk) * es);
  } else if (full_width) {
    SS_TRY(pread_all(ctx, s, file, s->scratch, (size_t)(nr * nk) * es, off + (lr * cw) * (int64_t)es));
  } else {
    for (int64_t i = 0; i < nr; i++)
      SS_TRY(pread_all(ctx, s, file, s->scratch + (size_t)(i * nk) * es, (size_t)nk * es,
                       off + ((lr + i) * cw + lk) * (int64_t)es));
  }
  scatter(s, s->scratch, r0, nr, k0, nk, t0, out);
  return SS_OK;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static ss_status read_tiles(ss_ctx *ctx, ss_store *s, const char *file, int64_t t0, int64_t n, char *out) {
  /* the request in storage coordinates */
  int64_t lo[2] = {0, 0}, hi[2] = {s->dims[0], s->dims[1]};
  int td = s->transposed ? 1 : 0; /* the time dimension */
  lo[td] = t0;
  hi[td] = t0 + n;
  for (int64_t tr = lo[0] / s->cdims[0]; tr * s->cdims[0] < hi[0]; tr++) {
    int64_t r0 = tr * s->cdims[0] > lo[0] ? tr * s->cdims[0] : lo[0], r1 = min64((tr + 1) * s->cdims[0], hi[0]);
    for (int64_t tk = lo[1] / s->cdims[1]; tk * s->cdims[1] < hi[1]; tk++) {
      int64_t k0 = tk * s->cdims[1] > lo[1] ? tk * s->cdims[1] : lo[1], k1 = min64((tk + 1) * s->cdims[1], hi[1]);
      SS_TRY(read_tile(ctx, s, file, tr, tk, r0, r1, k0, k1, t0, out));
    }
  }
  return SS_OK;
}

static hid_t mem_type(ss_elem e) {
  return e == SS_ELEM_I16 ? H5T_NATIVE_INT16 : e == SS_ELEM_F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
}

static ss_status read_hdf5(ss_ctx *ctx, ss_store *s, const char *file, int64_t t0, int64_t n, char *out) {
  int td = s->transposed ? 1 : 0;
  hsize_t start[2] = {0, 0}, count[2] = {(hsize_t)s->dims[0], (hsize_t)s->dims[1]};
  start[td] = (hsize_t)t0;
  count[td] = (hsize_t)n;
  char *dst = out;
  if (s->transposed) {
    SS_TRY(scratch(ctx, s, (size_t)(count[0] * count[1]) * s->elem_size));
    dst = s->scratch;
  }
  hid_t fs = H5Dget_space(s->h5dset), ms = H5Screate_simple(2, count, NULL);
  herr_t e = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
  if (e >= 0) e = H5Dread(s->h5dset, mem_type(s->elem), ms, fs, H5P_DEFAULT, dst);
  H5Sclose(ms);
  H5Sclose(fs);
  if (e < 0)
    return ss_fail(ctx, SS_ERR_IO, "%s: reading samples %lld..%lld failed", file, (long long)t0, (long long)(t0 + n));
  if (s->transposed) scatter(s, s->scratch, 0, s->dims[0], t0, n, t0, out);
  return SS_OK;
}

#define COLS_BLOCK_ROWS 4096 /* whole frames staged per read when picking columns */

/* One time-major tile of `width`-element frames: read whole frames in blocks and keep s->cols. */
static ss_status read_cols(ss_ctx *ctx, ss_store *s, const char *file, int64_t t0, int64_t n, int16_t *out) {
  int64_t C = s->dims[1], W = s->width;
  SS_TRY(scratch(ctx, s, (size_t)(COLS_BLOCK_ROWS * W) * sizeof(int16_t)));
  const int16_t *src = (const int16_t *)s->scratch;
  for (int64_t t = t0; t < t0 + n; t += COLS_BLOCK_ROWS) {
    int64_t nr = min64(COLS_BLOCK_ROWS, t0 + n - t);
    SS_TRY(pread_all(ctx, s, file, s->scratch, (size_t)(nr * W) * sizeof(int16_t),
                     s->tile_off[0] + t * W * (int64_t)sizeof(int16_t)));
    for (int64_t i = 0; i < nr; i++)
      for (int64_t c = 0; c < C; c++) out[(t - t0 + i) * C + c] = src[i * W + s->cols[c]];
  }
  return SS_OK;
}

ss_status ss_store_read(ss_ctx *ctx, ss_store *s, const char *file, int64_t t0, int64_t n, void *out) {
  if (n <= 0) return SS_OK;
  if (s->cols) SS_TRY(read_cols(ctx, s, file, t0, n, out));
  else SS_TRY(s->fd >= 0 ? read_tiles(ctx, s, file, t0, n, out) : read_hdf5(ctx, s, file, t0, n, out));
  if (s->offset_binary) { /* uint16 around 32768 → int16: value − 32768 flips the top bit */
    uint16_t *u = out;
    for (int64_t i = 0; i < n * s->dims[s->transposed ? 0 : 1]; i++) u[i] ^= 0x8000u;
  }
  return SS_OK;
}
