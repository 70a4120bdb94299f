/* source.h — recordings in: one chunked source interface over NWB 2.x, Kwik .raw.kwd, plain HDF5,
 * flat int16 binary, SpikeGLX, Open Ephys binary and Intan files (docs/formats.md, "Recordings read").
 *
 * A source delivers the recording as int16 chunks [rows × channels], time-major. Chunk i covers the
 * core samples [i·chunk, min((i+1)·chunk, n_samples)) plus `left` samples before and `right` after;
 * margin samples outside the recording are zeros, and left_valid/right_valid say how many margin
 * samples are real. Consecutive chunks therefore overlap by the margins and a filter run over chunk
 * + margins sees no seams. Any chunk can be asked for in any order; asking for i+1 after i is served
 * from a reader thread that has prefetched it into a second buffer, so reading overlaps processing.
 * Memory: two chunk buffers plus a staging buffer, whatever the recording length.
 *
 * Scaling to microvolts: µV = (sample − 0)·uv_per_step[c] + offset_uv. For NWB,
 * uv_per_step[c] = conversion × channel_conversion[c] × (unit in µV) and offset_uv = offset × (unit in
 * µV); for Kwik, channel_bit_volts (µV per bit, Open Ephys) when present; SpikeGLX, Open Ephys
 * binary and Intan files carry their own (docs/formats.md). Otherwise the spec's
 * uv_per_step (0: unknown, reported as 1 with scale_known = 0).
 *
 * Float data (float32/float64, any format but binary) are delivered as int16 too: at open the whole
 * dataset is scanned once, chunk by chunk (bounded memory), rejecting NaN/Inf and finding the peak
 * |value|; then int16 = round(value / step) with step = peak / 32767 (file units per step), and
 * uv_per_step includes the step. float_step reports it (0 for integer data).
 *
 * Threading: data are read with pread() from the file offsets of the dataset's storage (contiguous
 * or unfiltered chunked little-endian HDF5 datasets, binary, SpikeGLX, Open Ephys and Intan files),
 * which is thread-safe. Other
 * HDF5 datasets (compressed, big-endian, compact) are read with the HDF5 library, on the caller's
 * thread when the library was not built thread-safe (no prefetch then). All HDF5 metadata is read in
 * ss_source_open on the caller's thread. */
#ifndef SS_SOURCE_H
#define SS_SOURCE_H

#include <stdint.h>

#include "params/probe.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SS_FORMAT_AUTO = 0, /* NWB if /acquisition holds an ElectricalSeries, Kwik if /recordings, plain HDF5
                         when a dataset is named, binary by extension (.bin .dat .raw) or channels given */
  SS_FORMAT_NWB,
  SS_FORMAT_KWIK,
  SS_FORMAT_HDF5,
  SS_FORMAT_BINARY,
  SS_FORMAT_SPIKEGLX,  /* .bin + .meta pair (either named); auto when the sibling .meta exists */
  SS_FORMAT_OPENEPHYS, /* Open Ephys binary: a folder holding structure.oebin, or that file */
  SS_FORMAT_INTAN      /* Intan .rhd / .rhs */
} ss_source_format;

typedef enum { SS_LAYOUT_TIME_MAJOR = 0, SS_LAYOUT_CHANNEL_MAJOR } ss_layout;

/* Accepted recordings: a sampling rate in [SS_SOURCE_MIN_RATE_HZ, SS_SOURCE_MAX_RATE_HZ] and 1 to
 * SS_SOURCE_MAX_CHANNELS channels, whatever the format (docs/formats.md). */
#define SS_SOURCE_MIN_RATE_HZ 1.0
#define SS_SOURCE_MAX_RATE_HZ 1e6
#define SS_SOURCE_MAX_CHANNELS 4096

#define SS_SOURCE_PATH_MAX 4096
#define SS_SOURCE_NAME_MAX 512
/* HDF5 files: seconds the first, isolated read of the metadata may take (io/source_hdf5.c). */
#define SS_SOURCE_HDF5_LIMIT_S 60.0

/* What to open. Zero-initialise, then set what applies. */
typedef struct {
  const char *path;
  ss_source_format format;
  const char *dataset;   /* plain HDF5: path of the data inside the file */
  const char *series;    /* NWB: ElectricalSeries name under /acquisition; Kwik: recording name;
                            Open Ephys: continuous stream */
  double rate_hz;        /* plain HDF5, binary: required; Kwik: used when the file has none */
  ss_layout layout;      /* plain HDF5 */
  int n_channels;        /* binary: required */
  int64_t byte_offset;   /* binary: header bytes to skip */
  double uv_per_step;    /* binary, plain HDF5, Kwik without bit volts: µV per step (0 = unknown) */
  const ss_probe *probe; /* optional: its channel count must match the recording's */
  double hdf5_limit_s;   /* HDF5 files: limit of the isolated metadata read (0: SS_SOURCE_HDF5_LIMIT_S) */
} ss_source_spec;

typedef struct {
  ss_source_format format;
  char path[SS_SOURCE_PATH_MAX];
  char data_path[SS_SOURCE_PATH_MAX]; /* the file holding the samples when not `path` (SpikeGLX .bin,
                                         Open Ephys continuous.dat), else "" */
  char dataset[SS_SOURCE_NAME_MAX];   /* data path inside an HDF5 file ("" for binary) */
  char dtype[16];                     /* "int16", "float32", "float64" */
  ss_layout layout;
  double rate_hz;
  double start_time_s;
  int from_timestamps; /* rate derived from per-sample timestamps (checked regular) */
  int n_channels;
  int64_t n_samples;
  double duration_s;
  double *uv_per_step; /* [n_channels] */
  double offset_uv;
  int scale_known;
  double float_step; /* float data: file units per int16 step; 0 for integer data */
  int has_positions;
  double *x_um, *y_um; /* [n_channels] when has_positions, else NULL */
  int threaded;        /* 1: a reader thread prefetches */
  int n_left_out;      /* channels of the file not delivered (sync, ADC/AUX) */
  char left_out[256];  /* what they were, for the log ("" when none) */
} ss_source_info;

typedef struct {
  int64_t index;               /* chunk number */
  int64_t start;               /* recording index of the first core sample */
  int64_t n;                   /* core samples (the last chunk may be shorter) */
  int left, right;             /* margin rows present in data (as configured) */
  int left_valid, right_valid; /* margin rows inside the recording; the others are zeros */
  int n_channels;
  const int16_t *data; /* [(left + n + right) × n_channels]; row 0 is sample start − left.
                          Valid until the next ss_source_chunk/ss_source_close call. */
} ss_chunk;

typedef struct ss_source ss_source;

ss_status ss_source_open(ss_ctx *ctx, const ss_source_spec *spec, ss_source **out);
const ss_source_info *ss_source_get_info(const ss_source *src);
/* Choose the chunk length and margins (samples) and start the reader thread. Must precede
 * ss_source_chunk; may be called again to change them. */
ss_status ss_source_configure(ss_ctx *ctx, ss_source *src, int64_t chunk_samples, int left, int right);
int64_t ss_source_n_chunks(const ss_source *src);
/* Chunk i (0 <= i < n_chunks), with margins. */
ss_status ss_source_chunk(ss_ctx *ctx, ss_source *src, int64_t i, ss_chunk *out);
/* Show only the first n_samples of the recording (0: all of it again), as if it ended there (margins
 * past the end read as zeros); info.n_samples and duration_s follow. ss_source_configure must follow. */
ss_status ss_source_limit(ss_ctx *ctx, ss_source *src, int64_t n_samples);
void ss_source_close(ss_source *src);

const char *ss_source_format_name(ss_source_format f);
/* "auto|nwb|kwik|hdf5|binary|spikeglx|openephys|intan", "time-major|channel-major" */
ss_status ss_source_format_parse(ss_ctx *ctx, const char *text, ss_source_format *out);
ss_status ss_source_layout_parse(ss_ctx *ctx, const char *text, ss_layout *out);

#ifdef __cplusplus
}
#endif
#endif
