/* nwb_check.h — a structural checker for NWB 2.x files: the subset of the schema our readers and
 * writers rely on, so that tests and the acceptance can verify a written file without pynwb.
 *
 * Checked: root attributes (neurodata_type "NWBFile", namespace "core", nwb_version "2.*",
 * object_id) and required root datasets and groups; every object carrying neurodata_type also
 * carries namespace and a UUID-shaped object_id; DynamicTables (and Units) have colnames,
 * description and an ElementIdentifiers `id`, and every column exists, is typed and has as many rows
 * as `id` (ragged columns through their VectorIndex `<col>_index`, whose `target` references the
 * column); DynamicTableRegions reference a table (`table` object reference) and index rows inside
 * it; ElectrodeGroups link a Device; each ElectricalSeries has a 2-D data with unit/conversion/
 * resolution, either starting_time (rate, unit "seconds") or one timestamp per sample, and an
 * electrodes region with one row per data column; at least one ElectricalSeries under /acquisition
 * (external links there must resolve) unless the file holds a units table; VectorIndex datasets are
 * unsigned integers; the cached namespaces (/specifications with core and hdmf-common, root
 * attribute .specloc) are present, as pynwb's validator needs them.
 * Every problem is reported (one line each, naming file and object) before failing with SS_ERR_INPUT. */
#ifndef SS_NWB_CHECK_H
#define SS_NWB_CHECK_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

ss_status ss_nwb_check(ss_ctx *ctx, const char *path);
/* 1 when path is an NWB file holding a units table and nothing under /acquisition (as `sort` writes
 * units.nwb for a non-NWB input), else 0. */
int ss_nwb_units_only(const char *path);

#ifdef __cplusplus
}
#endif
#endif
