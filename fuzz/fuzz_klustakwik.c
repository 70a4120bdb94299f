/* fuzz_klustakwik.c — libFuzzer target for KlustaKwik's text files (io/klustakwik.c). The input up
 * to its first NUL byte is a .fet file, the rest (when there is a NUL) its .fmask; the whole input
 * is also read as a .clu file. */
#include "fuzz/fuzz_util.h"
#include "io/klustakwik.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char fet[512], fmask[512], clu[512];
  if (!fet[0]) {
    fuzz_path(fet, sizeof(fet), "x.fet.1");
    fuzz_path(fmask, sizeof(fmask), "x.fmask.1");
    fuzz_path(clu, sizeof(clu), "x.clu.1");
  }
  const uint8_t *nul = memchr(data, 0, size);
  size_t n_fet = nul ? (size_t)(nul - data) : size;
  fuzz_write(fet, data, n_fet);
  if (nul) fuzz_write(fmask, nul + 1, size - n_fet - 1);
  fuzz_write(clu, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  ss_matrix f, m;
  memset(&f, 0, sizeof(f));
  memset(&m, 0, sizeof(m));
  if (ss_kk_read_features(&ctx, fet, nul ? fmask : NULL, size % 2, &f, &m) == SS_OK) {
    ss_matrix_free(&f);
    ss_matrix_free(&m);
  }
  ss_ctx_clear(&ctx);
  int64_t n = 0, k = 0;
  int32_t *labels = NULL;
  if (ss_kk_read_clu(&ctx, clu, &n, &labels, &k) == SS_OK) free(labels);
  return 0;
}
