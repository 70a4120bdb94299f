/* kmeans_image.c — images for `spikestream kmeans --patches`: a minimal binary PPM (P6) reader, .npy
 * images through io/npy.h, and overlapping patch extraction (the published k-means case clusters
 * the 5 × 5 × 3 patches of a 256 × 256 RGB photograph). The C build has no image library, so
 * PNG/JPEG must be converted first (docs/kmeans.md shows a one-line Python conversion). */
#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/npy.h"
#include "stages/kmeans/kmeans.h"

#define PPM_MAX_MAXVAL 255 /* one byte per sample */
#define PPM_MAX_SIDE 65536
#define IMAGE_MAX_CHANNELS 4

ss_status ss_kmeans_patches(ss_ctx *ctx, const float *img, int64_t h, int64_t w, int64_t c, int64_t patch, float **out,
                            int64_t *n_out, int64_t *d_out) {
  *out = NULL;
  if (patch < 1 || patch > h || patch > w)
    return ss_fail(ctx, SS_ERR_INPUT, "kmeans: patch size %" PRId64 " does not fit a %" PRId64 " x %" PRId64 " image",
                   patch, h, w);
  int64_t ny = h - patch + 1, nx = w - patch + 1, d = patch * patch * c;
  float *p;
  SS_TRY(SS_ALLOC(ctx, p, (size_t)(ny * nx * d), "image patches"));
  for (int64_t y = 0; y < ny; y++)
    for (int64_t x = 0; x < nx; x++) {
      float *row = p + (y * nx + x) * d;
      for (int64_t r = 0; r < patch; r++) /* one patch row is patch × c contiguous pixels */
        memcpy(row + r * patch * c, img + ((y + r) * w + x) * c, sizeof(float) * (size_t)(patch * c));
    }
  *out = p;
  *n_out = ny * nx;
  *d_out = d;
  return SS_OK;
}

/* The next header integer of a PPM, skipping whitespace and '#' comments. */
static int ppm_int(FILE *f, long *v) {
  int ch;
  for (;;) {
    ch = fgetc(f);
    if (ch == '#')
      while (ch != '\n' && ch != EOF) ch = fgetc(f);
    else if (!isspace(ch)) break;
  }
  if (ch == EOF || !isdigit(ch)) return 0;
  *v = 0;
  while (ch != EOF && isdigit(ch)) {
    if (*v > PPM_MAX_SIDE) return 0;
    *v = *v * 10 + (ch - '0');
    ch = fgetc(f);
  }
  return isspace(ch); /* exactly one whitespace ends the last header field */
}

static ss_status ppm_read(ss_ctx *ctx, const char *path, float **img, int64_t *h, int64_t *w, int64_t *c) {
  FILE *f = fopen(path, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open", path);
  char magic[2] = {0, 0};
  long wl = 0, hl = 0, maxval = 0;
  ss_status st = SS_OK;
  if (fread(magic, 1, 2, f) != 2 || magic[0] != 'P' || magic[1] != '6')
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: not a binary PPM (magic P6 expected)", path);
  else if (!ppm_int(f, &wl) || !ppm_int(f, &hl) || !ppm_int(f, &maxval) || wl < 1 || hl < 1)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: PPM header: expected width, height and maxval", path);
  else if (maxval < 1 || maxval > PPM_MAX_MAXVAL)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: PPM maxval: expected 1..%d (8-bit), got %ld", path, PPM_MAX_MAXVAL, maxval);
  size_t count = (size_t)wl * (size_t)hl * 3;
  unsigned char *raw = NULL;
  if (st == SS_OK) st = SS_ALLOC(ctx, raw, count, "PPM pixels");
  if (st == SS_OK && fread(raw, 1, count, f) != count)
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: truncated: %ld x %ld RGB pixels expected", path, wl, hl);
  fclose(f);
  float *px = NULL;
  if (st == SS_OK) st = SS_ALLOC(ctx, px, count, "image");
  if (st == SS_OK) {
    for (size_t i = 0; i < count; i++) px[i] = (float)raw[i];
    *img = px;
    *h = hl;
    *w = wl;
    *c = 3;
  }
  free(raw);
  return st;
}

static ss_status npy_image_read(ss_ctx *ctx, const char *path, float **img, int64_t *h, int64_t *w, int64_t *c) {
  ss_array a;
  SS_TRY(ss_npy_read(ctx, path, &a));
  ss_status st = SS_OK;
  if (a.ndim != 2 && !(a.ndim == 3 && a.shape[2] >= 1 && a.shape[2] <= IMAGE_MAX_CHANNELS))
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: image: expected an H x W x C array (C = 1..%d) or H x W, got %d dimensions",
                 path, IMAGE_MAX_CHANNELS, a.ndim);
  if (st == SS_OK) st = ss_array_to_f32(ctx, &a, 1, path, img);
  if (st == SS_OK) {
    *h = a.shape[0];
    *w = a.shape[1];
    *c = a.ndim == 3 ? a.shape[2] : 1;
  }
  ss_array_free(&a);
  return st;
}

ss_status ss_kmeans_image_read(ss_ctx *ctx, const char *path, float **img, int64_t *h, int64_t *w, int64_t *c) {
  *img = NULL;
  size_t len = strlen(path);
  if (len >= 4 && strcmp(path + len - 4, ".npy") == 0) return npy_image_read(ctx, path, img, h, w, c);
  if (len >= 4 && (strcmp(path + len - 4, ".ppm") == 0 || strcmp(path + len - 4, ".pnm") == 0))
    return ppm_read(ctx, path, img, h, w, c);
  return ss_fail(ctx, SS_ERR_INPUT,
                 "%s: unsupported image format: give a binary PPM (.ppm, P6) or a .npy H x W x C array "
                 "(no image library is built in: convert PNG/JPEG first)",
                 path);
}
