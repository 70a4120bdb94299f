/* results_h5.h — the results file (layout in docs/formats.md): the stable core that
 * other scripts rely on, written atomically (temporary name, renamed when complete).
 *   attributes  sample_rate (float64), n_channels (int32), n_pcs (int32), version, software
 *               ("spikestream"), commit (strings)
 *   /spikes/time_samples  int64 [N]   nearest sample of each spike's sub-sample time
 *   /spikes/time_fraction float32 [N] offset in [−0.5, 0.5): time = time_samples + time_fraction
 *   /spikes/time_s        float64 [N] (time_samples + time_fraction) / sample_rate
 *   /spikes/peak_channel  int32 [N]
 *   /spikes/amplitude     float32 [N] filtered value at the peak (µV, signed)
 *   /spikes/cluster       int32 [N]   only once clustered
 *   /features             float32 [N × C·P]   channel-major: column c·P + k
 *   /masks                float32 [N × C]
 *   /params               string    the parameter JSON used
 * Later stages (sort) open the file with ss_results_begin, add their datasets to `file`, and
 * commit (sort's additions — /clusters, /merges, attributes input_crc32 and friends — are listed in
 * docs/formats.md). io/ knows nothing of the stages: the caller fills ss_results_core with its arrays. */
#ifndef SS_RESULTS_H5_H
#define SS_RESULTS_H5_H

#include <hdf5.h>
#include <stdint.h>

#include "io/atomic_file.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  double sample_rate;
  int n_channels;
  int n_pcs;
  int64_t n;
  const int64_t *time_samples;
  const float *time_fraction;
  const int32_t *peak_channel;
  const float *amplitude;
  const float *features;  /* [n × n_channels·n_pcs] */
  const float *masks;     /* [n × n_channels] */
  const int32_t *cluster; /* NULL: not clustered (no /spikes/cluster) */
  const char *params_json;
} ss_results_core;

typedef struct {
  ss_atomic_file af;
  hid_t file; /* the open temporary file; add datasets here before committing */
} ss_results_file;

/* Create the temporary file and write the core. On failure nothing is left behind. */
ss_status ss_results_begin(ss_ctx *ctx, const char *path, const ss_results_core *core, ss_results_file *rf);
/* Close and rename into place. */
ss_status ss_results_commit(ss_ctx *ctx, ss_results_file *rf);
/* Close and remove the temporary. */
void ss_results_abort(ss_results_file *rf);
/* begin + commit */
ss_status ss_results_write(ss_ctx *ctx, const char *path, const ss_results_core *core);

/* A dataset of rank 1 or 2 (dims[1] = 0 for rank 1) of a native type, written whole; `name` may hold
 * a group path whose groups exist. */
ss_status ss_results_dataset(ss_ctx *ctx, hid_t loc, const char *name, hid_t type, int64_t rows, int64_t cols,
                             const void *data, const char *file);
/* The same for any rank from 1 to SS_RESULTS_MAX_RANK (sort's per-cluster waveforms are 3-D). */
#define SS_RESULTS_MAX_RANK 4
ss_status ss_results_dataset_nd(ss_ctx *ctx, hid_t loc, const char *name, hid_t type, int rank, const int64_t *dims,
                                const void *data, const char *file);
/* A rank-1 dataset of n fixed-length ASCII strings (as long as the longest, NUL-padded). */
ss_status ss_results_dataset_strs(ss_ctx *ctx, hid_t loc, const char *name, const char *const *values, int64_t n,
                                  const char *file);
/* Create group loc/name (closed with H5Gclose by the caller). */
ss_status ss_results_group(ss_ctx *ctx, hid_t loc, const char *name, const char *file, hid_t *group);

#ifdef __cplusplus
}
#endif
#endif
