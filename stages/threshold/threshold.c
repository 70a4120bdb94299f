/* threshold.c — noise level (median absolute value / 0.6745) from excerpts, and the thresholds. */
#include "stages/threshold/threshold.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#ifdef _OPENMP
#include <omp.h>
#define THR_THREAD() omp_get_thread_num()
#else
#define THR_THREAD() 0
#endif

ss_status ss_threshold_plan(ss_ctx *ctx, const ss_params *p, int64_t n_samples, double rate_hz, int64_t *excerpt_len,
                            int64_t **out_index, int64_t *n_out) {
  *out_index = NULL;
  *n_out = 0;
  if (n_samples <= 0) return ss_fail(ctx, SS_ERR_INPUT, "threshold: the recording has no samples");
  int64_t len = (int64_t)llround(p->detect.excerpt_s * rate_hz);
  if (len < 1) len = 1;
  if (len > n_samples) len = n_samples;
  int64_t pieces = (n_samples + len - 1) / len;
  int64_t n = p->detect.n_excerpts < pieces ? p->detect.n_excerpts : pieces;
  int64_t *idx = NULL;
  SS_TRY(SS_ALLOC(ctx, idx, (size_t)n, "excerpt list"));
  for (int64_t k = 0; k < n; k++)
    /* n < pieces makes the step (pieces − 1)/(n − 1) at least 1, so the indices are distinct */
    idx[k] = n == 1 ? (pieces - 1) / 2 : (n == pieces ? k : k * (pieces - 1) / (n - 1));
  *excerpt_len = len;
  *out_index = idx;
  *n_out = n;
  return SS_OK;
}

ss_status ss_thresholds_from_sigma(ss_ctx *ctx, const ss_params *p, int n_channels, const float *sigma,
                                   ss_thresholds *out) {
  memset(out, 0, sizeof(*out));
  out->n_channels = n_channels;
  out->polarity = p->detect.polarity;
  if (SS_ALLOC(ctx, out->sigma, (size_t)n_channels, "noise levels") != SS_OK ||
      SS_ALLOC(ctx, out->weak, (size_t)n_channels, "weak thresholds") != SS_OK ||
      SS_ALLOC(ctx, out->strong, (size_t)n_channels, "strong thresholds") != SS_OK) {
    ss_thresholds_free(out);
    return SS_ERR_NOMEM;
  }
  for (int c = 0; c < n_channels; c++) {
    float s = sigma[c] > 0 ? sigma[c] : 0.0f;
    out->sigma[c] = s;
    out->weak[c] = s > 0 ? (float)(p->detect.weak_std * s) : INFINITY;
    out->strong[c] = s > 0 ? (float)(p->detect.strong_std * s) : INFINITY;
  }
  return SS_OK;
}

/* --- exact medians of |x| by radix selection ----------------------------------------------------
 * |x| as IEEE bits orders like |x| itself, so the k-th smallest is found digit by digit: 12 bits,
 * 12 bits, then 8 bits, one histogram pass over the data per digit for every channel (group) at
 * once. Exact, O(n), no copy of the samples, and the same on any backend. */
#define SS_RS_LEVELS 3
#define SS_RS_BINS 4096
static const int rs_shift[SS_RS_LEVELS] = {20, 8, 0};
static const int rs_width[SS_RS_LEVELS] = {12, 12, 8};

static inline uint32_t abs_bits(float x) {
  float a = fabsf(x);
  uint32_t u;
  memcpy(&u, &a, sizeof(u));
  return u;
}

/* One histogram pass for the two ranks at once: hist[r][g][digit] counts the samples of group g whose
 * higher digits equal prefix[r][g] (every sample at level 0, where both histograms are the same and
 * only hist[0] is filled). Blocks are shared among threads, each with its own histograms: local holds
 * n_threads × 2G × SS_RS_BINS counts, made by the caller so that no allocation fails in here. */
static void hist_pass(const ss_sample_block *blocks, int n_blocks, int C, const int *group, int G, int level,
                      uint32_t *const prefix[2], int64_t *hist, int64_t *local, int n_threads) {
  const int sh = rs_shift[level], psh = sh + rs_width[level];
  const uint32_t mask = (1u << rs_width[level]) - 1;
  const size_t per = (size_t)2 * G * SS_RS_BINS;
#pragma omp parallel num_threads(n_threads)
  {
    int64_t *h = local + (size_t)THR_THREAD() * per;
    memset(h, 0, per * sizeof(int64_t));
    const uint32_t *restrict p0 = prefix[0], *restrict p1 = prefix[1];
    const int *restrict grp = group;
#pragma omp for schedule(dynamic, 1)
    for (int b = 0; b < n_blocks; b++) {
      const float *restrict x = blocks[b].x;
      const int64_t rows = blocks[b].n_rows;
      for (int64_t t = 0; t < rows; t++)
        for (int c = 0; c < C; c++) {
          int g = grp[c];
          if (g < 0) continue;
          uint32_t u = abs_bits(x[t * C + c]), d = (u >> sh) & mask;
          if (level == 0) {
            h[(size_t)g * SS_RS_BINS + d]++;
          } else {
            uint32_t high = u >> psh;
            if (high == p0[g]) h[(size_t)g * SS_RS_BINS + d]++;
            if (high == p1[g]) h[(size_t)(G + g) * SS_RS_BINS + d]++;
          }
        }
    }
#pragma omp critical
    for (size_t i = 0; i < per; i++) hist[i] += h[i];
  }
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* median(|x|) of each of G groups of count[g] samples (group[c] < 0: channel left out): the lower
 * and upper middle ranks are selected together, digit by digit. */
static ss_status group_medians(ss_ctx *ctx, const ss_sample_block *blocks, int n_blocks, int C, const int *group, int G,
                               const int64_t *count, int n_threads, float *median) {
  int64_t *hist = NULL, *rank = NULL, *local = NULL;
  uint32_t *pre = NULL;
  ss_status st = SS_ERR_NOMEM;
  const int T = n_threads > 0 ? n_threads : 1;
  if (SS_ALLOC(ctx, hist, (size_t)2 * G * SS_RS_BINS, "noise histogram") != SS_OK ||
      SS_ALLOC(ctx, local, (size_t)T * 2 * G * SS_RS_BINS, "noise histograms per thread") != SS_OK ||
      SS_CALLOC(ctx, rank, (size_t)2 * G, "noise ranks") != SS_OK ||
      SS_CALLOC(ctx, pre, (size_t)2 * G, "noise prefixes") != SS_OK)
    goto done;
  uint32_t *prefix[2] = {pre, pre + G};
  for (int g = 0; g < G; g++) {
    rank[g] = (count[g] - 1) / 2; /* lower middle */
    rank[G + g] = count[g] / 2;   /* upper middle */
  }
  for (int level = 0; level < SS_RS_LEVELS; level++) {
    memset(hist, 0, sizeof(int64_t) * (size_t)2 * G * SS_RS_BINS);
    hist_pass(blocks, n_blocks, C, group, G, level, prefix, hist, local, T);
    for (int r = 0; r < 2; r++)
      for (int g = 0; g < G; g++) {
        const int64_t *h = hist + (size_t)((level == 0 ? 0 : r) * G + g) * SS_RS_BINS;
        int64_t *k = &rank[r * G + g];
        int bin = 0;
        while (bin < (1 << rs_width[level]) - 1 && *k >= h[bin]) *k -= h[bin++];
        prefix[r][g] = (prefix[r][g] << rs_width[level]) | (uint32_t)bin;
      }
  }
  for (int g = 0; g < G; g++) median[g] = 0.5f * (bits_float(prefix[0][g]) + bits_float(prefix[1][g]));
  st = SS_OK;
done:
  free(hist);
  free(local);
  free(rank);
  free(pre);
  return st;
}

ss_status ss_threshold_compute_with(ss_ctx *ctx, const ss_params *p, const ss_sample_block *blocks, int n_blocks,
                                    int n_channels, const int *use, ss_threshold_medians_fn medians, void *arg,
                                    ss_thresholds *out) {
  int64_t rows = 0;
  for (int b = 0; b < n_blocks; b++) rows += blocks[b].n_rows;
  if (rows <= 0) return ss_fail(ctx, SS_ERR_INPUT, "threshold: no samples to estimate the noise level from");
  int n_used = 0;
  for (int c = 0; c < n_channels; c++) n_used += !use || use[c];
  if (n_used == 0) return ss_fail(ctx, SS_ERR_INPUT, "threshold: every channel is marked dead");
  const int pooled = p->detect.noise == SS_NOISE_POOLED, G = pooled ? 1 : n_channels;
  int *group = NULL;
  int64_t *count = NULL;
  float *med = NULL, *sigma = NULL;
  ss_status st = SS_ERR_NOMEM;
  if (SS_ALLOC(ctx, group, (size_t)n_channels, "noise groups") != SS_OK ||
      SS_CALLOC(ctx, count, (size_t)G, "noise counts") != SS_OK || SS_CALLOC(ctx, med, (size_t)G, "medians") != SS_OK ||
      SS_CALLOC(ctx, sigma, (size_t)n_channels, "noise levels") != SS_OK)
    goto done;
  for (int c = 0; c < n_channels; c++) {
    group[c] = (use && !use[c]) ? -1 : (pooled ? 0 : c);
    if (group[c] >= 0) count[group[c]] += rows;
  }
  if ((st = medians(ctx, arg, blocks, n_blocks, n_channels, group, G, count, med)) != SS_OK) goto done;
  for (int c = 0; c < n_channels; c++) {
    if (group[c] < 0) continue;
    sigma[c] = (float)(med[group[c]] / SS_MAD_TO_SIGMA);
    /* a flat channel would make every sample a node: exclude it like a dead one */
    if (!(sigma[c] > 0)) ss_log_warn(ctx, "threshold: channel %d is flat (noise level 0): excluded", c);
  }
  st = ss_thresholds_from_sigma(ctx, p, n_channels, sigma, out);
done:
  free(group);
  free(count);
  free(med);
  free(sigma);
  return st;
}

/* group_medians as an ss_threshold_medians_fn; arg: the thread count */
static ss_status cpu_medians(ss_ctx *ctx, void *arg, const ss_sample_block *blocks, int n_blocks, int n_channels,
                             const int *group, int G, const int64_t *count, float *median) {
  return group_medians(ctx, blocks, n_blocks, n_channels, group, G, count, *(const int *)arg, median);
}

ss_status ss_threshold_compute_cpu(ss_ctx *ctx, const ss_params *p, const ss_sample_block *blocks, int n_blocks,
                                   int n_channels, const int *use, int n_threads, ss_thresholds *out) {
  return ss_threshold_compute_with(ctx, p, blocks, n_blocks, n_channels, use, cpu_medians, &n_threads, out);
}

ss_status ss_threshold_compute(ss_ctx *ctx, const ss_backend *be, const ss_params *p, const ss_sample_block *blocks,
                               int n_blocks, int n_channels, const int *use, ss_thresholds *out) {
  if (be && be->kind == SS_DEVICE_CUDA)
    return ss_threshold_compute_cuda_host(ctx, be, p, blocks, n_blocks, n_channels, use, out);
  return ss_threshold_compute_cpu(ctx, p, blocks, n_blocks, n_channels, use, be ? be->n_threads : 1, out);
}

void ss_thresholds_free(ss_thresholds *t) {
  free(t->sigma);
  free(t->weak);
  free(t->strong);
  memset(t, 0, sizeof(*t));
}
