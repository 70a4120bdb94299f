/* checksum.c — CRC-32 of files (checksum.h): slicing-by-8 over 1 MiB reads. */
#include "io/checksum.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CRC_POLY 0xEDB88320u
#define CRC_SLICES 8
#define CRC_READ_BYTES (1u << 20)

static uint32_t table[CRC_SLICES][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void make_tables(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ CRC_POLY : c >> 1;
    table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int s = 1; s < CRC_SLICES; s++) table[s][i] = (table[s - 1][i] >> 8) ^ table[0][table[s - 1][i] & 0xFF];
}

uint32_t ss_crc32_update(uint32_t crc, const void *data, size_t len) {
  pthread_once(&table_once, make_tables);
  const unsigned char *p = data;
  uint32_t c = ~crc;
  while (len >= CRC_SLICES) {
    /* bytes combined little-endian by hand: independent of the host's byte order and alignment */
    uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
    uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
    c = table[7][lo & 0xFF] ^ table[6][(lo >> 8) & 0xFF] ^ table[5][(lo >> 16) & 0xFF] ^ table[4][lo >> 24] ^
        table[3][hi & 0xFF] ^ table[2][(hi >> 8) & 0xFF] ^ table[1][(hi >> 16) & 0xFF] ^ table[0][hi >> 24];
    p += CRC_SLICES;
    len -= CRC_SLICES;
  }
  while (len--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF];
  return ~c;
}

ss_status ss_file_crc32(ss_ctx *ctx, const char *path, uint32_t *crc) {
  FILE *f = fopen(path, "rb");
  if (!f) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  unsigned char *buf = NULL;
  ss_status st = SS_ALLOC(ctx, buf, CRC_READ_BYTES, "checksum buffer");
  uint32_t c = 0;
  size_t got;
  while (st == SS_OK && (got = fread(buf, 1, CRC_READ_BYTES, f)) > 0) c = ss_crc32_update(c, buf, got);
  if (st == SS_OK && ferror(f)) st = ss_fail(ctx, SS_ERR_IO, "%s: read error while computing the checksum", path);
  fclose(f);
  free(buf);
  *crc = c;
  return st;
}
