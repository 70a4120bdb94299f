/* nwb_write.h — streaming NWB 2.x writer for int16 extracellular recordings with an optional units
 * table (the simulator's recordings with their ground truth, the sort's units.nwb, test fixtures).
 *
 * Layout written (docs/formats.md): root attributes (nwb_version "2.6.0", neurodata_type "NWBFile",
 * namespace "core", object_id, .specloc), identifier, session_description, session_start_time,
 * timestamps_reference_time, file_create_date; /specifications with the cached schema (nwb_spec.h);
 * /general/devices/probe, /general/extracellular_ephys/<group> and the electrodes DynamicTable (id,
 * x, y, z, rel_x, rel_y, location, group, group_name); the acquisition: an ElectricalSeries with data
 * [time × channels] int16 (chunked, extendable), conversion/offset/resolution attributes,
 * starting_time + rate (or per-sample timestamps when asked) and an electrodes region, or an HDF5
 * external link to a series in another file, or nothing; /units (nwb_units.c): spike_times +
 * spike_times_index (ragged, unsigned index), optional electrodes + electrodes_index, waveform_mean,
 * peak_channel, snr and further per-unit columns.
 * The file is written under a temporary name and renamed on close. */
#ifndef SS_NWB_WRITE_H
#define SS_NWB_WRITE_H

#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  SS_NWB_ACQ_SERIES = 0, /* an ElectricalSeries filled by ss_nwb_writer_append */
  SS_NWB_ACQ_NONE,       /* no acquisition (a units-only file) */
  SS_NWB_ACQ_LINK        /* an external link to link_path inside link_file */
} ss_nwb_acquisition;

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
  ss_nwb_acquisition acquisition;
  const char *link_file; /* SS_NWB_ACQ_LINK: the file holding the series (best absolute) */
  const char *link_path; /* SS_NWB_ACQ_LINK: the series group inside it; linked as series_name */
} ss_nwb_meta;

typedef enum { SS_NWB_COL_F64, SS_NWB_COL_I64, SS_NWB_COL_STR } ss_nwb_col_type;

/* A further per-unit column: n_units values of `type` (double, int64_t or const char *). */
typedef struct {
  const char *name, *description;
  ss_nwb_col_type type;
  const void *values;
} ss_nwb_column;

typedef struct {
  int n_units;
  const int64_t *n_spikes;          /* per unit */
  const double *const *spike_times; /* per unit, seconds, ascending */
  const int32_t *peak_channel;      /* per unit, or NULL (no column) */
  const double *snr;                /* per unit, or NULL (no column) */
  const char *description;          /* of the table; NULL: "units" */
  /* Each unit's electrodes: n_unit_channels rows of the electrodes table per unit (0: no column). */
  int n_unit_channels;
  const int32_t *unit_channels; /* [n_units × n_unit_channels] */
  /* Mean waveform on those electrodes, µV (written in volts, as the schema fixes): [n_units × n_wave ×
   * n_unit_channels]; NULL or n_wave 0: no column. Needs n_unit_channels > 0. */
  int n_wave;
  const float *waveform_mean_uv;
  double waveform_rate_hz; /* sampling rate of the waveforms */
  int n_columns;
  const ss_nwb_column *columns;
} ss_nwb_units;

typedef struct ss_nwb_writer ss_nwb_writer;

ss_status ss_nwb_writer_open(ss_ctx *ctx, const char *path, const ss_nwb_meta *meta, ss_nwb_writer **out);
/* Append n samples of all channels, time-major [n × n_channels] (SS_NWB_ACQ_SERIES only). */
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
