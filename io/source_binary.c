/* source_binary.c — flat int16 little-endian channel-interleaved files: validation (channels, rate,
 * whole frames after the header) and the one-tile store over the file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/source_internal.h"

#define BINARY_SAMPLE_BYTES 2 /* int16 */

static ss_status check_spec(ss_ctx *ctx, const ss_source_spec *spec) {
  if (spec->n_channels <= 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: flat binary needs the channel count (--channels N), got %d", spec->path,
                   spec->n_channels);
  SS_TRY(ss_source_check_channels(ctx, spec->path, "--channels", spec->n_channels, NULL));
  if (!(spec->rate_hz > 0))
    return ss_fail(ctx, SS_ERR_INPUT, "%s: flat binary needs the sampling rate (--rate HZ), got %g", spec->path,
                   spec->rate_hz);
  SS_TRY(ss_source_check_rate(ctx, spec->path, "--rate", spec->rate_hz));
  if (spec->byte_offset < 0)
    return ss_fail(ctx, SS_ERR_INPUT, "%s: byte offset: expected >= 0, got %lld", spec->path,
                   (long long)spec->byte_offset);
  return SS_OK;
}

ss_status ss_source_open_fd(ss_ctx *ctx, const char *path, int *fd, int64_t *size) {
  *fd = open(path, O_RDONLY);
  if (*fd < 0) return ss_fail(ctx, SS_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(*fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    close(*fd);
    *fd = -1;
    return ss_fail(ctx, SS_ERR_INPUT, "%s: not a regular file", path);
  }
#ifdef POSIX_FADV_SEQUENTIAL
  posix_fadvise(*fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  *size = (int64_t)sb.st_size;
  return SS_OK;
}

ss_status ss_source_flat_store(ss_ctx *ctx, ss_store *store, int fd, int64_t size, int64_t offset, int64_t width,
                               int64_t n) {
  store->fd = fd;
  store->file_size = size;
  store->elem = SS_ELEM_I16;
  store->elem_size = BINARY_SAMPLE_BYTES;
  store->dims[0] = store->cdims[0] = n;
  store->dims[1] = store->cdims[1] = width;
  store->width = width;
  store->grid[0] = store->grid[1] = 1;
  SS_TRY(SS_ALLOC(ctx, store->tile_off, 1, "tile offsets"));
  store->tile_off[0] = offset;
  return SS_OK;
}

ss_status ss_source_open_binary(ss_ctx *ctx, const ss_source_spec *spec, ss_source_info *info, ss_store *store) {
  SS_TRY(check_spec(ctx, spec));
  int fd;
  int64_t size;
  SS_TRY(ss_source_open_fd(ctx, spec->path, &fd, &size));
  int64_t frame = (int64_t)spec->n_channels * BINARY_SAMPLE_BYTES, body = size - spec->byte_offset;
  if (body <= 0 || body % frame != 0) {
    close(fd);
    if (body <= 0)
      return ss_fail(ctx, SS_ERR_INPUT, "%s: no samples after the %lld-byte header (file size %lld bytes)", spec->path,
                     (long long)spec->byte_offset, (long long)size);
    return ss_fail(ctx, SS_ERR_INPUT,
                   "%s: truncated: %lld bytes after the %lld-byte header is not a whole number of %d-channel int16 "
                   "frames (%lld bytes left over)",
                   spec->path, (long long)body, (long long)spec->byte_offset, spec->n_channels,
                   (long long)(body % frame));
  }
  info->format = SS_FORMAT_BINARY;
  snprintf(info->dtype, sizeof(info->dtype), "int16");
  info->rate_hz = spec->rate_hz;
  info->n_channels = spec->n_channels;
  info->n_samples = body / frame;
  SS_TRY(ss_source_flat_store(ctx, store, fd, size, spec->byte_offset, spec->n_channels, info->n_samples));
  info->scale_known = spec->uv_per_step > 0;
  return ss_source_info_scale(ctx, info, spec->uv_per_step > 0 ? spec->uv_per_step : 1.0);
}
