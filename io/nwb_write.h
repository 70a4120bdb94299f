/* nwb_write.h — streaming NWB 2.x writer for int16 extracellular recordings with an optional
 * ground-truth units table (the simulator's output; also test fixtures).
 *
 * Layout written (docs/formats.md): root attributes (nwb_version "2.x", neurodata_type "NWBFile",
 * namespace "core", object_id), identifier, session_description, session_start_time,
 * timestamps_reference_time, file_create_date; /general/extracellular_ephys/<device group> and the
 * electrodes DynamicTable (id, x, y, z, location, group, group_name); /acquisition/<series_name>
 * ElectricalSeries with data [time × channels] int16 (chunked, extendable), conversion/offset/
 * resolution attributes, starting_time + rate (or per-sample timestamps when asked), electrodes
 * region; /units DynamicTable with spike_times + spike_times_index (ragged), peak_channel, snr.
 * The file is written under a temporary name and renamed on close. */
#ifndef SS_NWB_WRITE_H
#define SS_NWB_WRITE_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char *identifier;          /* NULL: derived from the content */
  const char *session_description; /* NULL: "spikestream recording" */
  const char *series_name;         /* NULL: "ElectricalSeries" */
  double rate_hz;
  int n_channels;
  double conversion;       /* volts per int16 step (NWB `conversion`) */
  double offset;           /* volts (NWB `offset`) */
  double starting_time;    /* seconds */
  const double *channel_x; /* µm, n_channels entries, or NULL (0) */
  const double *channel_y;
  int write_timestamps; /* 1: per-sample `timestamps` instead of starting_time + rate */
} ss_nwb_meta;

typedef struct {
  int n_units;
  const int64_t *n_spikes;          /* per unit */
  const double *const *spike_times; /* per unit, seconds, ascending */
  const int32_t *peak_channel;      /* per unit */
  const double *snr;                /* per unit */
} ss_nwb_units;

typedef struct ss_nwb_writer ss_nwb_writer;

ss_status ss_nwb_writer_open(ss_ctx *ctx, const char *path, const ss_nwb_meta *meta, ss_nwb_writer **out);
/* Append n samples of all channels, time-major [n × n_channels]. */
ss_status ss_nwb_writer_append(ss_ctx *ctx, ss_nwb_writer *w, const int16_t *samples, int64_t n);
ss_status ss_nwb_writer_set_units(ss_ctx *ctx, ss_nwb_writer *w, const ss_nwb_units *units);
/* Finish the file and rename it to its final name; frees w whatever happens. */
ss_status ss_nwb_writer_close(ss_ctx *ctx, ss_nwb_writer *w);
/* Drop everything written; frees w. */
void ss_nwb_writer_abort(ss_nwb_writer *w);

#ifdef __cplusplus
}
#endif
#endif
