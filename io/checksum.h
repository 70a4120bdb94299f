/* checksum.h — the input checksum recorded in sort's outputs: CRC-32 (the zlib / PNG polynomial,
 * reflected 0xEDB88320, initial and final XOR 0xFFFFFFFF; Python: zlib.crc32(data)) of every byte of
 * a file, computed with slicing-by-8 tables so that it keeps up with the reader. */
#ifndef SS_CHECKSUM_H
#define SS_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Continue a CRC-32 over `len` bytes (start from crc = 0). */
uint32_t ss_crc32_update(uint32_t crc, const void *data, size_t len);
/* CRC-32 of the whole file. */
ss_status ss_file_crc32(ss_ctx *ctx, const char *path, uint32_t *crc);

#ifdef __cplusplus
}
#endif
#endif
