/* detect.c — flood-fill detection on the CPU: nodes above the weak threshold, union–find over
 * (time × adjacency), components with a strong node become spikes with a sub-sample time, masks
 * and (optionally) interpolated waveforms. */
#include "stages/detect/detect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Node arrays grow geometrically from this many entries. */
#define SS_DETECT_MIN_NODES 4096
#define SS_SPIKES_MIN_CAP 256

ss_status ss_detect_graph_from_probe(ss_ctx *ctx, const ss_probe *probe, int n_channels, ss_detect_graph *g) {
  memset(g, 0, sizeof(*g));
  g->n_channels = n_channels;
  int64_t n_adj = probe ? probe->adj_start[probe->n] : 0;
  if (SS_CALLOC(ctx, g->use, (size_t)n_channels, "channel flags") != SS_OK ||
      SS_CALLOC(ctx, g->adj_start, (size_t)n_channels + 1, "adjacency") != SS_OK ||
      SS_CALLOC(ctx, g->adj, (size_t)(n_adj > 0 ? n_adj : 1), "adjacency") != SS_OK) {
    ss_detect_graph_free(g);
    return SS_ERR_NOMEM;
  }
  if (!probe) {
    for (int c = 0; c < n_channels; c++) g->use[c] = 1;
    return SS_OK;
  }
  for (int i = 0; i < probe->n; i++) {
    int c = probe->channel[i];
    if (c < 0) continue; /* unwired: not in the recording */
    if (c >= n_channels) {
      ss_detect_graph_free(g);
      return ss_fail(ctx, SS_ERR_INPUT, "probe %s: channel %d is out of range for a recording of %d channels",
                     probe->name, c, n_channels);
    }
    g->use[c] = probe->connected[i] != 0;
    g->adj_start[c + 1] = ss_probe_degree(probe, i);
  }
  for (int c = 0; c < n_channels; c++) g->adj_start[c + 1] += g->adj_start[c];
  for (int i = 0; i < probe->n; i++) {
    if (probe->channel[i] < 0) continue;
    int c = probe->channel[i], k = g->adj_start[c];
    for (int a = probe->adj_start[i]; a < probe->adj_start[i + 1]; a++) g->adj[k++] = probe->channel[probe->adj[a]];
  }
  return SS_OK;
}

void ss_detect_graph_free(ss_detect_graph *g) {
  free(g->use);
  free(g->adj_start);
  free(g->adj);
  memset(g, 0, sizeof(*g));
}

ss_status ss_detect_config_from_params(ss_ctx *ctx, const ss_params *p, double rate_hz, ss_detect_config *cfg) {
  if (!(rate_hz > 0)) return ss_fail(ctx, SS_ERR_INPUT, "detect: sample rate: expected > 0, got %g", rate_hz);
  cfg->join_size = (int)p->detect.join_size;
  cfg->n_before = (int)lround(p->waveform.before_ms * rate_hz / 1000.0);
  cfg->n_after = (int)lround(p->waveform.after_ms * rate_hz / 1000.0);
  if (cfg->n_before + cfg->n_after < 1)
    return ss_fail(ctx, SS_ERR_INPUT, "waveform: before_ms + after_ms = %g ms is less than one sample at %g Hz",
                   p->waveform.before_ms + p->waveform.after_ms, rate_hz);
  return SS_OK;
}

/* --- spike list ------------------------------------------------------------------------------- */

ss_status ss_spike_list_init(ss_ctx *ctx, ss_spike_list *l, int n_channels, int n_wave, int keep_waveforms) {
  (void)ctx;
  memset(l, 0, sizeof(*l));
  l->n_channels = n_channels;
  l->n_wave = n_wave;
  l->keep_waveforms = keep_waveforms;
  return SS_OK;
}

static ss_status grow(ss_ctx *ctx, void **p, size_t count, size_t size, const char *what) {
  return ss_realloc(ctx, p, count, size, what);
}

static ss_status spike_list_reserve(ss_ctx *ctx, ss_spike_list *l, int64_t need) {
  if (need <= l->cap) return SS_OK;
  int64_t cap = l->cap ? l->cap : SS_SPIKES_MIN_CAP;
  while (cap < need) cap *= 2;
  size_t C = (size_t)l->n_channels, n = (size_t)cap;
  SS_TRY(grow(ctx, (void **)&l->time_samples, n, sizeof(int64_t), "spike times"));
  SS_TRY(grow(ctx, (void **)&l->time_fraction, n, sizeof(float), "spike times"));
  SS_TRY(grow(ctx, (void **)&l->peak_channel, n, sizeof(int32_t), "peak channels"));
  SS_TRY(grow(ctx, (void **)&l->amplitude, n, sizeof(float), "amplitudes"));
  SS_TRY(grow(ctx, (void **)&l->masks, n * C, sizeof(float), "masks"));
  if (l->keep_waveforms)
    SS_TRY(grow(ctx, (void **)&l->waveforms, n * C * (size_t)l->n_wave, sizeof(float), "waveforms"));
  l->cap = cap;
  return SS_OK;
}

ss_status ss_spike_list_append(ss_ctx *ctx, ss_spike_list *dst, const ss_spike_list *src) {
  if (src->n_channels != dst->n_channels || src->n_wave != dst->n_wave || (dst->keep_waveforms && !src->keep_waveforms))
    return ss_fail(ctx, SS_ERR_INTERNAL, "spike list: appending a table of another shape");
  dst->n_truncated += src->n_truncated;
  if (src->n == 0) return SS_OK; /* an empty table's arrays may be NULL: nothing to copy */
  SS_TRY(spike_list_reserve(ctx, dst, dst->n + src->n));
  size_t n = (size_t)src->n, d = (size_t)dst->n, C = (size_t)dst->n_channels;
  memcpy(dst->time_samples + d, src->time_samples, n * sizeof(int64_t));
  memcpy(dst->time_fraction + d, src->time_fraction, n * sizeof(float));
  memcpy(dst->peak_channel + d, src->peak_channel, n * sizeof(int32_t));
  memcpy(dst->amplitude + d, src->amplitude, n * sizeof(float));
  memcpy(dst->masks + d * C, src->masks, n * C * sizeof(float));
  if (dst->keep_waveforms)
    memcpy(dst->waveforms + d * C * (size_t)dst->n_wave, src->waveforms, n * C * (size_t)dst->n_wave * sizeof(float));
  dst->n += src->n;
  return SS_OK;
}

void ss_spike_list_clear(ss_spike_list *l) {
  l->n = 0;
  l->n_truncated = 0;
}

void ss_spike_list_free(ss_spike_list *l) {
  free(l->time_samples);
  free(l->time_fraction);
  free(l->peak_channel);
  free(l->amplitude);
  free(l->masks);
  free(l->waveforms);
  memset(l, 0, sizeof(*l));
}

/* --- flood fill ------------------------------------------------------------------------------- */

void ss_detect_work_free(ss_detect_work *w) {
  free(w->row);
  free(w->chan);
  free(w->value);
  free(w->parent);
  free(w->order);
  free(w->start);
  free(w->ring);
  free(w->peak);
  free(w->comp_first);
  free(w->comp_last);
  free(w->last_row);
  memset(w, 0, sizeof(*w));
}

static ss_status work_reserve(ss_ctx *ctx, ss_detect_work *w, int64_t need) {
  if (need <= w->cap) return SS_OK;
  int64_t cap = w->cap ? w->cap : SS_DETECT_MIN_NODES;
  while (cap < need) cap *= 2;
  if (cap > INT32_MAX)
    return ss_fail(ctx, SS_ERR_INPUT, "detect: more than %d threshold crossings in one chunk", INT32_MAX);
  size_t n = (size_t)cap;
  SS_TRY(grow(ctx, (void **)&w->row, n, sizeof(int32_t), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->chan, n, sizeof(int32_t), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->value, n, sizeof(float), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->parent, n, sizeof(int32_t), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->order, n, sizeof(int32_t), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->start, n + 1, sizeof(int32_t), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->comp_first, n, sizeof(int32_t), "detection nodes")); /* components <= nodes */
  SS_TRY(grow(ctx, (void **)&w->comp_last, n, sizeof(int32_t), "detection nodes"));
  SS_TRY(grow(ctx, (void **)&w->last_row, n, sizeof(int32_t), "detection nodes"));
  w->cap = cap;
  return SS_OK;
}

static int32_t find_root(int32_t *parent, int32_t i) {
  int32_t r = i;
  while (parent[r] != r) r = parent[r];
  while (parent[i] != r) {
    int32_t next = parent[i];
    parent[i] = r;
    i = next;
  }
  return r;
}

/* The smaller id becomes the root, so a component's root is its first node (nodes are numbered in
 * time order). */
static void unite(int32_t *parent, int32_t a, int32_t b) {
  a = find_root(parent, a);
  b = find_root(parent, b);
  if (a < b) parent[b] = a;
  else if (b < a) parent[a] = b;
}

/* Collect nodes row by row and join each with the nodes of the previous join_size rows (and its
 * own row) on the same or adjacent channels. ring[(row % (J+1)) * C + c] holds the node id or −1. */
static ss_status flood(ss_ctx *ctx, const ss_detect_config *cfg, const ss_detect_graph *g, const ss_thresholds *th,
                       const ss_detect_block *blk, ss_detect_work *w, int32_t *n_nodes) {
  const int C = g->n_channels, J = cfg->join_size, slots = J + 1;
  if (w->ring_cap < slots * C) {
    SS_TRY(grow(ctx, (void **)&w->ring, (size_t)slots * C, sizeof(int32_t), "detection ring"));
    SS_TRY(grow(ctx, (void **)&w->peak, (size_t)C, sizeof(float), "detection peaks"));
    w->ring_cap = slots * C;
  }
  for (int i = 0; i < slots * C; i++) w->ring[i] = -1;
  int64_t n = 0;
  for (int64_t t = blk->search_begin; t < blk->search_end; t++) {
    int32_t *ring_row = w->ring + (t % slots) * C;
    for (int c = 0; c < C; c++) ring_row[c] = -1;
    const float *x = blk->x + t * C;
    int64_t row_first = n;
    for (int c = 0; c < C; c++) {
      float s = ss_detect_signal(th->polarity, x[c]);
      if (!(s > th->weak[c]) || !g->use[c]) continue;
      SS_TRY(work_reserve(ctx, w, n + 1));
      w->row[n] = (int32_t)t;
      w->chan[n] = c;
      w->value[n] = s;
      w->parent[n] = (int32_t)n;
      ring_row[c] = (int32_t)n;
      n++;
    }
    for (int64_t id = row_first; id < n; id++) {
      int c = w->chan[id];
      for (int dt = 0; dt <= J && t - dt >= blk->search_begin; dt++) {
        const int32_t *prev = w->ring + ((t - dt) % slots) * C;
        if (dt > 0 && prev[c] >= 0) unite(w->parent, (int32_t)id, prev[c]);
        for (int k = g->adj_start[c]; k < g->adj_start[c + 1]; k++)
          if (prev[g->adj[k]] >= 0) unite(w->parent, (int32_t)id, prev[g->adj[k]]);
      }
    }
  }
  *n_nodes = (int32_t)n;
  return SS_OK;
}

float ss_detect_interp(const float *x, int64_t n_rows, int n_channels, int c, double u) {
  double fl = floor(u);
  int64_t i0 = (int64_t)fl;
  double f = u - fl;
  double p[4];
  for (int k = 0; k < 4; k++) {
    int64_t r = i0 - 1 + k;
    p[k] = (r >= 0 && r < n_rows) ? x[r * n_channels + c] : 0.0;
  }
  /* Catmull–Rom: passes through the samples, continuous first derivative */
  double a = -0.5 * p[0] + 1.5 * p[1] - 1.5 * p[2] + 0.5 * p[3];
  double b = p[0] - 2.5 * p[1] + 2.0 * p[2] - 0.5 * p[3];
  double cc = -0.5 * p[0] + 0.5 * p[2];
  return (float)(((a * f + b) * f + cc) * f + p[1]);
}

/* Turn the component made of nodes order[lo..hi) into a spike appended to out. */
static ss_status emit_spike(ss_ctx *ctx, const ss_detect_config *cfg, const ss_thresholds *th,
                            const ss_detect_block *blk, ss_detect_work *w, int32_t lo, int32_t hi, ss_spike_list *out) {
  const int C = out->n_channels;
  double sw = 0, swt = 0, best = -INFINITY;
  int32_t best_node = w->order[lo];
  for (int32_t k = lo; k < hi; k++) {
    int32_t id = w->order[k];
    int c = w->chan[id];
    double r = w->value[id] / th->strong[c];
    sw += r * r;
    swt += r * r * w->row[id];
    double norm = (w->value[id] - th->weak[c]) / (th->strong[c] - th->weak[c]);
    if (norm > best) {
      best = norm;
      best_node = id;
    }
    if (w->value[id] > w->peak[c]) w->peak[c] = w->value[id];
  }
  SS_TRY(spike_list_reserve(ctx, out, out->n + 1));
  int64_t i = out->n++;
  double tc = swt / sw;
  double rounded = floor(tc + 0.5);
  out->time_samples[i] = blk->row0_sample + (int64_t)rounded;
  out->time_fraction[i] = (float)(tc - rounded);
  out->peak_channel[i] = w->chan[best_node];
  out->amplitude[i] = blk->x[(int64_t)w->row[best_node] * C + w->chan[best_node]];
  float *m = out->masks + i * C;
  for (int c = 0; c < C; c++) {
    float pk = w->peak[c];
    if (pk == -INFINITY) {
      m[c] = 0.0f;
      continue;
    }
    double v = (pk - th->weak[c]) / (th->strong[c] - th->weak[c]);
    m[c] = (float)(v < 0 ? 0 : (v > 1 ? 1 : v));
    w->peak[c] = -INFINITY;
  }
  if (out->keep_waveforms) {
    float *wf = out->waveforms + i * C * out->n_wave;
    for (int c = 0; c < C; c++)
      for (int k = 0; k < out->n_wave; k++)
        wf[c * out->n_wave + k] = ss_detect_interp(blk->x, blk->n_rows, C, c, tc - cfg->n_before + k);
  }
  return SS_OK;
}

ss_status ss_detect_block_check(ss_ctx *ctx, const ss_detect_config *cfg, const ss_detect_graph *g,
                                const ss_thresholds *th, const ss_detect_block *blk, const ss_spike_list *out) {
  if (g && th && out && (th->n_channels != g->n_channels || out->n_channels != g->n_channels))
    return ss_fail(ctx, SS_ERR_INTERNAL, "detect: channel counts differ (graph %d, thresholds %d, table %d)",
                   g->n_channels, th->n_channels, out->n_channels);
  if (out && out->keep_waveforms && out->n_wave != cfg->n_before + cfg->n_after)
    return ss_fail(ctx, SS_ERR_INTERNAL, "detect: waveform length %d, window %d", out->n_wave,
                   cfg->n_before + cfg->n_after);
  if (blk->search_begin < 0 || blk->search_end > blk->n_rows || blk->search_begin > blk->search_end)
    return ss_fail(ctx, SS_ERR_INTERNAL, "detect: search rows [%lld, %lld) outside the block of %lld rows",
                   (long long)blk->search_begin, (long long)blk->search_end, (long long)blk->n_rows);
  return SS_OK;
}

ss_status ss_detect_block_cpu(ss_ctx *ctx, const ss_detect_config *cfg, const ss_detect_graph *g,
                              const ss_thresholds *th, const ss_detect_block *blk, ss_detect_work *w,
                              ss_spike_list *out) {
  const int C = g->n_channels;
  SS_TRY(ss_detect_block_check(ctx, cfg, g, th, blk, out));
  int32_t n = 0;
  w->n_owned = w->n_reported = 0;
  SS_TRY(flood(ctx, cfg, g, th, blk, w, &n));
  if (n == 0) return SS_OK;
  /* group the nodes by root (counting sort; roots ascend, so components come in first-node order) */
  int32_t *count = w->start;
  memset(count, 0, ((size_t)n + 1) * sizeof(int32_t));
  for (int32_t i = 0; i < n; i++) count[find_root(w->parent, i) + 1]++;
  for (int32_t i = 0; i < n; i++) count[i + 1] += count[i];
  for (int32_t i = 0; i < n; i++) w->order[count[w->parent[i]]++] = i; /* parents are roots now */
  /* after the scatter count[r] is the end of root r's run; its start is the previous root's end */
  for (int c = 0; c < C; c++) w->peak[c] = -INFINITY;
  int32_t lo = 0;
  while (lo < n) {
    int32_t root = w->order[lo], hi = count[root], first = w->row[root];
    if (first >= blk->own_begin && first < blk->own_end) {
      int strong = 0;
      int32_t last = first;
      for (int32_t k = lo; k < hi; k++) {
        strong |= w->value[w->order[k]] > th->strong[w->chan[w->order[k]]];
        if (w->row[w->order[k]] > last) last = w->row[w->order[k]];
      }
      w->comp_first[w->n_owned] = first;
      w->comp_last[w->n_owned++] = last;
      if (strong) {
        out->n_truncated += last == blk->search_end - 1 && blk->search_end < blk->n_rows;
        SS_TRY(emit_spike(ctx, cfg, th, blk, w, lo, hi, out));
        w->last_row[w->n_reported++] = last;
      }
    }
    lo = hi;
  }
  return SS_OK;
}

ss_status ss_detect_block_run(ss_ctx *ctx, const ss_backend *be, const ss_detect_config *cfg, const ss_detect_graph *g,
                              const ss_thresholds *th, const ss_detect_block *blk, ss_detect_work *w,
                              ss_spike_list *out) {
  if (be && be->kind == SS_DEVICE_CUDA)
    return ss_detect_block_cuda(ctx, be, cfg, g, th, blk, out); /* the CPU scratch w is not needed */
  return ss_detect_block_cpu(ctx, cfg, g, th, blk, w, out);
}
