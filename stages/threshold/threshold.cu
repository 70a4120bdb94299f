/* stages/threshold/threshold.cu — the CUDA twin of stages/threshold/threshold.c: median(|x|) of every noise group by radix
 * selection over the float bits on the device, inside the backend-independent frame
 * ss_threshold_compute_with (so checks, groups and the σ → threshold step are the CPU's own code).
 *
 * |x| as IEEE bits orders like |x|, so the k-th smallest is found digit by digit: four 8-bit digits,
 * one histogram pass over the samples each, the lower and upper middle ranks selected together (as on
 * the CPU, which uses 12/12/8-bit digits: any digit split yields the same exact order statistic, so σ
 * is bit-identical to the CPU's on the same samples). Histograms are counted in shared memory (warp
 * lanes with the same bin aggregated by __match_any_sync, since noise piles into a few bins) and
 * flushed to a global 64-bit histogram; a small kernel picks each rank's digit on the device, so the
 * four passes run without a host round trip. */
#include <string.h>

#include <new>
#include <vector>

#include "core/cuda_util.cuh"
#include "stages/threshold/threshold.h"

namespace {

constexpr int DIGIT_BITS = 8;
constexpr int LEVELS = 32 / DIGIT_BITS;
constexpr int BINS = 1 << DIGIT_BITS;
constexpr uint32_t ABS_MASK = 0x7fffffffu;
constexpr uint32_t NO_KEY = 0xffffffffu;
constexpr unsigned FULL_MASK = 0xffffffffu;
constexpr int WARP = 32;
constexpr int RANKS = 2; /* lower and upper middle */
constexpr int HIST_THREADS = 256;
constexpr int TILE_ROWS = 512; /* rows of one sample block per histogram block */
/* per-channel mode: channels per histogram block, RANKS × CHUNK × BINS counters = 32 KB of shared memory */
constexpr int CHUNK = 16;
constexpr int SELECT_THREADS = 128;

/* A histogram block's rows: rows [row0, row0 + rows) of sample block `block`. */
struct tile {
  int block;
  int rows;
  int64_t row0;
};

__device__ __forceinline__ void count_key(uint32_t *hist, uint32_t key) {
  const unsigned peers = __match_any_sync(FULL_MASK, key);
  if (key != NO_KEY && (int)(threadIdx.x % WARP) == __ffs(peers) - 1) atomicAdd(&hist[key], (uint32_t)__popc(peers));
}

/* One digit's histograms. Block (tile, chunk) counts channels [c0, c0 + cw) of its tile (all channels
 * in one chunk when pooled) into RANKS × LG local groups; at level 0 every sample counts once (into
 * rank 0's histogram, which both ranks read); later only samples whose higher digits equal a rank's
 * prefix count for that rank. */
__global__ void k_hist(const ss_sample_block *__restrict__ blocks, const tile *__restrict__ tiles, int C, int chunk,
                       const int *__restrict__ group, bool pooled, int G, int level,
                       const uint32_t *__restrict__ prefix, unsigned long long *hist) {
  extern __shared__ uint32_t local[];
  const int c0 = blockIdx.y * chunk, cw = min(chunk, C - c0);
  const int LG = pooled ? 1 : cw, g0 = pooled ? 0 : c0;
  for (int i = threadIdx.x; i < RANKS * LG * BINS; i += blockDim.x) local[i] = 0;
  __syncthreads();
  const tile tl = tiles[blockIdx.x];
  const float *x = blocks[tl.block].x + tl.row0 * C;
  const int shift = 32 - DIGIT_BITS * (level + 1);
  const int total = tl.rows * cw;
  /* every thread runs the same number of rounds so that whole warps meet in __match_any_sync */
  for (int base = 0; base < total; base += blockDim.x) {
    const int e = base + threadIdx.x;
    uint32_t key0 = NO_KEY, key1 = NO_KEY;
    if (e < total) {
      const int c = c0 + e % cw, g = group[c];
      if (g >= 0) {
        const uint32_t u = __float_as_uint(x[(int64_t)(e / cw) * C + c]) & ABS_MASK;
        const uint32_t bin = (uint32_t)(g - g0) * BINS + ((u >> shift) & (BINS - 1));
        if (level == 0) {
          key0 = bin;
        } else {
          const uint32_t high = u >> (shift + DIGIT_BITS);
          if (high == prefix[g]) key0 = bin;
          if (high == prefix[G + g]) key1 = (uint32_t)LG * BINS + bin;
        }
      }
    }
    count_key(local, key0);
    count_key(local, key1);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < RANKS * LG * BINS; i += blockDim.x) {
    if (!local[i]) continue;
    const int r = i / (LG * BINS), lg = i / BINS % LG, d = i % BINS;
    atomicAdd(&hist[((size_t)r * G + g0 + lg) * BINS + d], (unsigned long long)local[i]);
  }
}

/* Each (rank, group) picks its digit: the bin holding its rank, as the CPU's group_medians does. */
__global__ void k_select(const unsigned long long *__restrict__ hist, int G, int level, long long *rank,
                         uint32_t *prefix) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= RANKS * G) return;
  const unsigned long long *h = hist + ((size_t)(level == 0 ? 0 : i / G) * G + i % G) * BINS;
  long long k = rank[i];
  int bin = 0;
  while (bin < BINS - 1 && k >= (long long)h[bin]) k -= (long long)h[bin++];
  rank[i] = k;
  prefix[i] = (prefix[i] << DIGIT_BITS) | (uint32_t)bin;
}

float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

template <typename T>
ss_status upload_vec(ss_ctx *ctx, ss_dbuf<T> &d, const std::vector<T> &h, const char *what, cudaStream_t s) {
  SS_TRY(d.alloc(ctx, h.size(), what));
  SS_CUDA_TRY(ctx, cudaMemcpyAsync(d.p, h.data(), sizeof(T) * h.size(), cudaMemcpyHostToDevice, s));
  return SS_OK;
}

/* The ss_threshold_medians_fn of the CUDA backend; arg: the backend. Synchronises its stream. */
ss_status cuda_medians(ss_ctx *ctx, void *arg, const ss_sample_block *blocks, int n_blocks, int C, const int *group,
                       int G, const int64_t *count, float *median) try {
  const ss_backend *be = (const ss_backend *)arg;
  const cudaStream_t s = ss_cuda_stream(be);
  const bool pooled = G == 1 && C > 1;
  const int chunk = pooled ? C : (C < CHUNK ? C : CHUNK), n_chunks = (C + chunk - 1) / chunk;
  const int lg_max = pooled ? 1 : chunk;
  std::vector<tile> tiles;
  for (int b = 0; b < n_blocks; b++)
    for (int64_t r = 0; r < blocks[b].n_rows; r += TILE_ROWS)
      tiles.push_back({b, (int)(blocks[b].n_rows - r < TILE_ROWS ? blocks[b].n_rows - r : TILE_ROWS), r});
  std::vector<ss_sample_block> blk(blocks, blocks + n_blocks);
  std::vector<int> grp(group, group + C);
  std::vector<long long> rank(RANKS * (size_t)G);
  std::vector<uint32_t> prefix(RANKS * (size_t)G, 0);
  for (int g = 0; g < G; g++) {
    rank[g] = (count[g] - 1) / 2; /* lower middle */
    rank[G + g] = count[g] / 2;   /* upper middle */
  }
  ss_dbuf<tile> d_tiles;
  ss_dbuf<ss_sample_block> d_blocks;
  ss_dbuf<int> d_group;
  ss_dbuf<long long> d_rank;
  ss_dbuf<uint32_t> d_prefix;
  ss_dbuf<unsigned long long> d_hist;
  SS_TRY(upload_vec(ctx, d_tiles, tiles, "noise tiles", s));
  SS_TRY(upload_vec(ctx, d_blocks, blk, "noise blocks", s));
  SS_TRY(upload_vec(ctx, d_group, grp, "noise groups", s));
  SS_TRY(upload_vec(ctx, d_rank, rank, "noise ranks", s));
  SS_TRY(upload_vec(ctx, d_prefix, prefix, "noise prefixes", s));
  const size_t hist_count = (size_t)RANKS * G * BINS;
  SS_TRY(d_hist.alloc(ctx, hist_count, "noise histogram"));
  const dim3 grid((unsigned)tiles.size(), (unsigned)n_chunks);
  const size_t smem = sizeof(uint32_t) * RANKS * lg_max * BINS;
  for (int level = 0; level < LEVELS; level++) {
    SS_CUDA_TRY(ctx, cudaMemsetAsync(d_hist.p, 0, sizeof(unsigned long long) * hist_count, s));
    if (!tiles.empty())
      k_hist<<<grid, HIST_THREADS, smem, s>>>(d_blocks, d_tiles, C, chunk, d_group, pooled, G, level, d_prefix, d_hist);
    SS_CUDA_TRY_LAUNCH(ctx, "noise histogram");
    k_select<<<(RANKS * G + SELECT_THREADS - 1) / SELECT_THREADS, SELECT_THREADS, 0, s>>>(d_hist, G, level, d_rank,
                                                                                          d_prefix);
    SS_CUDA_TRY_LAUNCH(ctx, "noise selection");
  }
  SS_CUDA_TRY(ctx,
              cudaMemcpyAsync(prefix.data(), d_prefix.p, sizeof(uint32_t) * prefix.size(), cudaMemcpyDeviceToHost, s));
  SS_CUDA_TRY(ctx, cudaStreamSynchronize(s));
  /* the CPU's median rule (group_medians in stages/threshold/threshold.c) */
  for (int g = 0; g < G; g++) median[g] = 0.5f * (bits_float(prefix[g]) + bits_float(prefix[G + g]));
  return SS_OK;
} catch (const std::bad_alloc &) {
  return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: noise estimate tiles");
}

} // namespace

extern "C" ss_status ss_threshold_compute_cuda(ss_ctx *ctx, const ss_backend *be, const ss_params *p,
                                               const ss_sample_block *blocks, int n_blocks, int n_channels,
                                               const int *use, ss_thresholds *out) {
  return ss_threshold_compute_with(ctx, p, blocks, n_blocks, n_channels, use, cuda_medians, (void *)be, out);
}

extern "C" ss_status ss_threshold_compute_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_params *p,
                                                    const ss_sample_block *blocks, int n_blocks, int n_channels,
                                                    const int *use, ss_thresholds *out) try {
  const cudaStream_t s = ss_cuda_stream(be);
  int64_t rows = 0;
  for (int b = 0; b < n_blocks; b++) rows += blocks[b].n_rows > 0 ? blocks[b].n_rows : 0;
  const size_t C = n_channels > 0 ? (size_t)n_channels : 0;
  ss_dbuf<float> d_x;
  SS_TRY(d_x.alloc(ctx, (size_t)rows * C, "noise samples"));
  std::vector<ss_sample_block> dev(blocks, blocks + (n_blocks > 0 ? n_blocks : 0));
  int64_t at = 0;
  for (auto &b : dev) {
    if (b.n_rows <= 0) continue;
    SS_CUDA_TRY(ctx,
                cudaMemcpyAsync(d_x.p + at * C, b.x, sizeof(float) * (size_t)b.n_rows * C, cudaMemcpyHostToDevice, s));
    b.x = d_x.p + at * C;
    at += b.n_rows;
  }
  return ss_threshold_compute_cuda(ctx, be, p, dev.data(), n_blocks, n_channels, use, out);
} catch (const std::bad_alloc &) {
  return ss_fail(ctx, SS_ERR_NOMEM, "out of memory: noise estimate block list");
}
