/* fuzz_nwb.c — libFuzzer target for the HDF5 recording readers (io/source_hdf5.c): the input is
 * written to a scratch .nwb file and opened with format detection (NWB, Kwik), then the first and
 * last chunks are read. Most mutations are refused by the HDF5 library itself; the seeds are small
 * valid files so that the metadata checks behind it are reached. The watchdog limit is short
 * (0.1 s, a valid seed takes ~20 ms under ASan): inputs on which libhdf5 spins end there. */
#include <hdf5.h>

#include "fuzz/fuzz_util.h"
#include "io/source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) {
    fuzz_path(path, sizeof(path), "rec.nwb");
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL); /* the library's own error stack printing */
  }
  fuzz_write(path, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  ss_source_spec spec = {.path = path, .format = SS_FORMAT_AUTO, .hdf5_limit_s = 0.1};
  ss_source *src = NULL;
  if (ss_source_open(&ctx, &spec, &src) != SS_OK) return 0;
  if (ss_source_configure(&ctx, src, 256, 8, 8) == SS_OK) {
    ss_chunk c;
    int64_t last = ss_source_n_chunks(src) - 1;
    if (ss_source_chunk(&ctx, src, 0, &c) == SS_OK && last > 0) ss_source_chunk(&ctx, src, last, &c);
  }
  ss_source_close(src);
  return 0;
}
