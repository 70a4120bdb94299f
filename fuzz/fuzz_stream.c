/* fuzz_stream.c — libFuzzer target for the live stream (io/link.c, wire protocol v1): the input is
 * a byte stream read through a file link by the frame reader, which takes and checks the 32-byte
 * header ("SSTREAM\0", version, dtype, channels, rate) and then delivers whole int16 frames. */
#include "fuzz/fuzz_util.h"
#include "io/link.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char path[512];
  if (!path[0]) fuzz_path(path, sizeof(path), "stream.bin");
  fuzz_write(path, data, size);
  ss_ctx ctx;
  fuzz_ctx(&ctx);
  ss_link *l = NULL;
  if (ss_link_open(&ctx, path, SS_LINK_READ, 1.0, &l) != SS_OK) return 0;
  ss_frame_reader_opts o = {.raw = 0, .rate_hz = 30000.0, .expected_by = "the fuzzer"};
  ss_frame_reader *r = NULL;
  if (ss_frame_reader_open_opts(&ctx, l, 4, 64, &o, &r) == SS_OK) {
    const int16_t *rows;
    int64_t n = 0;
    double t;
    while (ss_frame_reader_next(&ctx, r, &rows, &n, &t) == SS_OK && n > 0) {
    }
    ss_frame_reader_close(r);
  }
  ss_link_close(l);
  return 0;
}
