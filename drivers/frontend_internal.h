/* frontend_internal.h — what the front-end driver (drivers/frontend.c) shares with its CUDA chunk
 * pipeline (drivers/frontend.cu): the per-run state fixed before the chunk pass, and the host-side
 * accumulator the chunks' spikes are appended to. Not a public interface. */
#ifndef SS_FRONTEND_INTERNAL_H
#define SS_FRONTEND_INTERNAL_H

#include "drivers/frontend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Filter transients must decay below this fraction of the signal where detection looks. */
#define SS_FE_SETTLE_FACTOR 1e-7

typedef struct {
  const ss_params *p;
  const ss_source_info *info;
  int C;
  int margin, search; /* search: rows past each chunk end where nodes are collected */
  ss_filter filter;
  ss_detect_config cfg;
  ss_detect_graph graph;
  ss_thresholds th;
  const ss_pca *pca;           /* NULL in pass 1 */
  const ss_motion_reg *motion; /* registration after filtering; NULL: none */
} ss_fe_state;

/* The chunk pass's output, in chunk order (sorted by time at the end). */
typedef struct {
  ss_spike_list list; /* no waveforms */
  float *features;
  size_t feat_cap;
} ss_fe_accum;

/* Append n spikes of a chunk (list fields and their features, n_feat per spike). */
ss_status ss_fe_accum_append(ss_ctx *ctx, ss_fe_accum *a, const ss_spike_list *spikes, const float *features,
                             int n_feat);

/* Where a chunk's detection looks and what it owns, in rows of the chunk buffer (row 0 = sample
 * start − left): the same rule for every backend. */
void ss_fe_detect_regions(const ss_fe_state *fs, int64_t left, int64_t n, int64_t right, int64_t left_valid,
                          int64_t right_valid, ss_detect_block *blk);

/* The chunk pass on the GPU (drivers/frontend.cu): a reader thread fills pinned buffers, chunk i's
 * upload and filter overlap chunk i−1's detection, projection and download on a second stream. The
 * chunk length is chosen from device memory (io.gpu_chunk_s at most); the result equals the CPU
 * pass's within the stated tolerances (docs/gpu-frontend.md). */
ss_status ss_frontend_chunks_cuda(ss_ctx *ctx, const ss_backend *be, const ss_fe_state *fs, ss_source *src,
                                  ss_fe_accum *acc, ss_frontend_model *model);

#ifdef __cplusplus
}
#endif
#endif
