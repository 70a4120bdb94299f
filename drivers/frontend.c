/* frontend.c — the offline front-end driver: excerpt pass (noise level, thresholds, PCA basis) and
 * chunk pass (filter, detect, extract, project), chunks in parallel, output sorted by time. It owns
 * the margin rule that makes the result independent of the chunk size (frontend.h). */
#include "drivers/frontend.h"
#include "drivers/frontend_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

/* How far past the chunk end a component may reach and still be seen whole, in ms. */
#define SS_FE_COMPONENT_SLACK_MS 2.0
/* Interpolation reads this many samples beyond the waveform window (Catmull–Rom support). */
#define SS_FE_INTERP_SUPPORT 2

void ss_spikes_free(ss_spikes *s) {
  free(s->time_samples);
  free(s->time_fraction);
  free(s->peak_channel);
  free(s->amplitude);
  free(s->features);
  free(s->masks);
  memset(s, 0, sizeof(*s));
}

void ss_frontend_model_free(ss_frontend_model *m) {
  ss_thresholds_free(&m->thresholds);
  ss_pca_free(&m->pca);
  memset(m, 0, sizeof(*m));
}

static int64_t settle_samples(const ss_filter *f) { return ss_filter_settle_samples(f, SS_FE_SETTLE_FACTOR); }

int ss_frontend_margin(const ss_params *p, const ss_filter *f, const ss_detect_config *cfg, double rate_hz) {
  int64_t asked = llround(p->io.margin_ms * rate_hz / 1000.0);
  int64_t guard = cfg->n_before + cfg->n_after + SS_FE_INTERP_SUPPORT + cfg->join_size;
  int64_t need = settle_samples(f) + guard + llround(SS_FE_COMPONENT_SLACK_MS * rate_hz / 1000.0);
  return (int)(asked > need ? asked : need);
}

/* --- shared state and per-chunk work ------------------------------------------------------------ */

typedef ss_fe_state fe_state;

typedef struct {
  int16_t *raw;
  size_t raw_cap;
  float *x;
  size_t x_cap;
  int64_t start, n;
  int left, right, left_valid, right_valid;
  ss_spike_list spikes;
  float *features;
  size_t feat_cap;
  ss_detect_work work;
  ss_ctx ctx;
  ss_status st;
} fe_slot;

static void slot_free(fe_slot *s) {
  free(s->raw);
  free(s->x);
  free(s->features);
  ss_spike_list_free(&s->spikes);
  ss_detect_work_free(&s->work);
}

static ss_status reserve(ss_ctx *ctx, void **p, size_t *cap, size_t count, size_t size, const char *what) {
  if (count <= *cap) return SS_OK;
  SS_TRY(ss_realloc(ctx, p, count, size, what));
  *cap = count;
  return SS_OK;
}

static int64_t slot_rows(const fe_slot *s) { return s->left + s->n + s->right; }

/* Copy the source's chunk into the slot (its buffer is reused by the next read). */
static ss_status slot_load(ss_ctx *ctx, fe_slot *s, const ss_chunk *ch) {
  s->start = ch->start;
  s->n = ch->n;
  s->left = ch->left;
  s->right = ch->right;
  s->left_valid = ch->left_valid;
  s->right_valid = ch->right_valid;
  size_t count = (size_t)slot_rows(s) * (size_t)ch->n_channels;
  SS_TRY(reserve(ctx, (void **)&s->raw, &s->raw_cap, count, sizeof(int16_t), "chunk copy"));
  memcpy(s->raw, ch->data, count * sizeof(int16_t));
  return SS_OK;
}

/* int16 → µV, zero-phase (filter.causal: causal) filter and common reference over the rows inside
 * the recording; the rows outside it stay 0. Leaves the filtered chunk in s->x. */
static ss_status slot_filter(ss_ctx *ctx, const ss_backend *be, const fe_state *fs, fe_slot *s) {
  const int C = fs->C;
  int64_t rows = slot_rows(s), vb = s->left - s->left_valid, ve = s->left + s->n + s->right_valid;
  SS_TRY(reserve(ctx, (void **)&s->x, &s->x_cap, (size_t)rows * C, sizeof(float), "filtered chunk"));
  memset(s->x, 0, (size_t)vb * C * sizeof(float));
  memset(s->x + ve * C, 0, (size_t)(rows - ve) * C * sizeof(float));
  const double *scale = fs->info->uv_per_step;
  for (int64_t t = vb; t < ve; t++)
    for (int c = 0; c < C; c++) s->x[t * C + c] = (float)(s->raw[t * C + c] * scale[c] + fs->info->offset_uv);
  float *v = s->x + vb * C;
  if (fs->p->filter.causal) {
    /* live mode's filter: forward only, from the steady state of the first valid row; chunks stay
     * independent because the left margin is longer than the settling (the CPU routine: the sections
     * carry state sample to sample) */
    ss_filter_state fst;
    SS_TRY(ss_filter_state_init(ctx, &fs->filter, C, &fst));
    ss_status st = ss_filter_causal_cpu(ctx, &fs->filter, &fst, v, ve - vb, v);
    ss_filter_state_free(&fst);
    SS_TRY(st);
  } else {
    SS_TRY(ss_filter_zero_phase(ctx, be, &fs->filter, v, ve - vb, C, v));
  }
  if (fs->p->filter.common_reference == SS_CMR_MEDIAN)
    SS_TRY(ss_filter_common_median(ctx, be, v, ve - vb, C, fs->graph.use));
  if (fs->motion) SS_TRY(ss_motion_apply(ctx, fs->motion, v, ve - vb, s->start - s->left + vb));
  return SS_OK;
}

/* Detect the spikes owned by the slot's chunk (waveforms kept in s->spikes) and, when a basis is
 * known, project them into s->features. */
static ss_status slot_detect(ss_ctx *ctx, const ss_backend *be, const fe_state *fs, fe_slot *s) {
  ss_spike_list_clear(&s->spikes);
  ss_detect_block blk;
  ss_fe_detect_regions(fs, s->left, s->n, s->right, s->left_valid, s->right_valid, &blk);
  blk.x = s->x;
  blk.row0_sample = s->start - s->left;
  SS_TRY(ss_detect_block_run(ctx, be, &fs->cfg, &fs->graph, &fs->th, &blk, &s->work, &s->spikes));
  if (!fs->pca) return SS_OK;
  size_t count = (size_t)s->spikes.n * fs->C * fs->pca->n_pcs;
  SS_TRY(reserve(ctx, (void **)&s->features, &s->feat_cap, count ? count : 1, sizeof(float), "chunk features"));
  return ss_pca_project(ctx, be, fs->pca, s->spikes.waveforms, s->spikes.n, s->features);
}

static void slot_ctx_init(fe_slot *s, const ss_ctx *parent) {
  ss_ctx_init_child(&s->ctx, parent);
  s->st = SS_OK;
}

/* Report the first failed slot's message in the caller's context. */
static ss_status slots_status(ss_ctx *ctx, fe_slot *slots, int n) {
  for (int j = 0; j < n; j++)
    if (slots[j].st != SS_OK) return ss_fail(ctx, slots[j].st, "%s", ss_error_message(&slots[j].ctx));
  return SS_OK;
}

/* Read chunks first .. first + m − 1 into slots 0 .. m − 1 (the source is read from this thread only). */
static ss_status load_batch(ss_ctx *ctx, ss_source *src, fe_slot *slots, int64_t first, int m) {
  for (int j = 0; j < m; j++) {
    ss_chunk ch;
    SS_TRY(ss_source_chunk(ctx, src, first + j, &ch));
    SS_TRY(slot_load(ctx, &slots[j], &ch));
    slot_ctx_init(&slots[j], ctx);
  }
  return SS_OK;
}

static int n_threads_of(const ss_backend *be) { return be && be->n_threads > 0 ? be->n_threads : 1; }

int ss_frontend_pass_slots(const ss_backend *be) { return n_threads_of(be); }

/* --- pass 1: excerpts -------------------------------------------------------------------------- */

typedef struct {
  int64_t n;
  fe_slot *slots; /* one per excerpt: filtered data kept until thresholds are known */
} excerpts;

static void excerpts_free(excerpts *e) {
  for (int64_t i = 0; i < e->n; i++) slot_free(&e->slots[i]);
  free(e->slots);
  memset(e, 0, sizeof(*e));
}

static ss_status excerpts_read_filter(ss_ctx *ctx, const ss_backend *be, fe_state *fs, ss_source *src, excerpts *e,
                                      int64_t *n_excerpt_out) {
  int64_t len, n, *idx = NULL;
  SS_TRY(ss_threshold_plan(ctx, fs->p, fs->info->n_samples, fs->info->rate_hz, &len, &idx, &n));
  ss_status st = ss_source_configure(ctx, src, len, fs->margin, fs->margin);
  if (st == SS_OK) st = SS_CALLOC(ctx, e->slots, (size_t)n, "excerpts");
  if (st != SS_OK) {
    free(idx);
    return st;
  }
  e->n = n;
  const int T = n_threads_of(be);
  for (int64_t b = 0; b < n && st == SS_OK; b += T) {
    int m = (int)(n - b < T ? n - b : T);
    for (int j = 0; j < m && st == SS_OK; j++) {
      ss_chunk ch;
      st = ss_source_chunk(ctx, src, idx[b + j], &ch);
      if (st == SS_OK) st = slot_load(ctx, &e->slots[b + j], &ch);
      slot_ctx_init(&e->slots[b + j], ctx);
    }
    if (st != SS_OK) break;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
    for (int j = 0; j < m; j++) {
      fe_slot *s = &e->slots[b + j];
      s->st = slot_filter(&s->ctx, be, fs, s);
      free(s->raw); /* only the filtered excerpt is kept */
      s->raw = NULL;
      s->raw_cap = 0;
    }
    st = slots_status(ctx, e->slots + b, m);
  }
  free(idx);
  *n_excerpt_out = n;
  return st;
}

static ss_status excerpts_thresholds(ss_ctx *ctx, const ss_backend *be, fe_state *fs, const excerpts *e) {
  ss_sample_block *blocks = NULL;
  SS_TRY(SS_ALLOC(ctx, blocks, (size_t)e->n, "excerpt blocks"));
  for (int64_t i = 0; i < e->n; i++) {
    blocks[i].x = e->slots[i].x + (size_t)e->slots[i].left * fs->C;
    blocks[i].n_rows = e->slots[i].n;
  }
  ss_status st = ss_threshold_compute(ctx, be, fs->p, blocks, (int)e->n, fs->C, fs->graph.use, &fs->th);
  free(blocks);
  return st;
}

/* Detect in every excerpt, pick the fitting subset from the seed and fit the basis. */
static ss_status excerpts_pca(ss_ctx *ctx, const ss_backend *be, fe_state *fs, excerpts *e, ss_pca *pca,
                              int64_t *n_spikes) {
  const int T = n_threads_of(be), W = fs->cfg.n_before + fs->cfg.n_after;
  ss_status st = SS_OK;
  for (int64_t i = 0; i < e->n; i++) {
    slot_ctx_init(&e->slots[i], ctx);
    ss_spike_list_init(ctx, &e->slots[i].spikes, fs->C, W, 1);
  }
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
  for (int64_t i = 0; i < e->n; i++) {
    fe_slot *s = &e->slots[i];
    s->st = slot_detect(&s->ctx, be, fs, s);
    free(s->x); /* the filtered excerpt is no longer needed */
    s->x = NULL;
    s->x_cap = 0;
  }
  SS_TRY(slots_status(ctx, e->slots, (int)e->n));
  ss_spike_list all;
  ss_spike_list_init(ctx, &all, fs->C, W, 1);
  for (int64_t i = 0; i < e->n && st == SS_OK; i++) st = ss_spike_list_append(ctx, &all, &e->slots[i].spikes);
  int64_t *idx = NULL, m = 0;
  if (st == SS_OK) st = ss_pca_subset(ctx, (uint64_t)fs->p->seed, all.n, fs->p->features.pca_max_spikes, &idx, &m);
  float *wf = NULL, *mk = NULL;
  size_t per_wf = (size_t)fs->C * W;
  if (st == SS_OK) st = SS_ALLOC(ctx, wf, (size_t)(m > 0 ? m : 1) * per_wf, "PCA waveforms");
  if (st == SS_OK) st = SS_ALLOC(ctx, mk, (size_t)(m > 0 ? m : 1) * fs->C, "PCA masks");
  if (st == SS_OK) {
    for (int64_t k = 0; k < m; k++) {
      memcpy(wf + k * per_wf, all.waveforms + idx[k] * per_wf, per_wf * sizeof(float));
      memcpy(mk + k * fs->C, all.masks + idx[k] * fs->C, (size_t)fs->C * sizeof(float));
    }
    st = ss_pca_fit(ctx, be, wf, mk, m, fs->C, W, (int)fs->p->features.n_pcs, pca);
  }
  *n_spikes = all.n;
  free(idx);
  free(wf);
  free(mk);
  ss_spike_list_free(&all);
  return st;
}

/* --- pass 2: chunks ---------------------------------------------------------------------------- */

typedef ss_fe_accum accum;

ss_status ss_fe_accum_append(ss_ctx *ctx, ss_fe_accum *a, const ss_spike_list *spikes, const float *features,
                             int n_feat) {
  size_t need = (size_t)(a->list.n + spikes->n) * n_feat;
  SS_TRY(reserve(ctx, (void **)&a->features, &a->feat_cap, need ? need : 1, sizeof(float), "features"));
  memcpy(a->features + (size_t)a->list.n * n_feat, features, (size_t)spikes->n * n_feat * sizeof(float));
  /* the list append copies everything but waveforms (a->list keeps none) */
  ss_spike_list view = *spikes;
  view.keep_waveforms = 0;
  return ss_spike_list_append(ctx, &a->list, &view);
}

void ss_fe_detect_regions(const ss_fe_state *fs, int64_t left, int64_t n, int64_t right, int64_t left_valid,
                          int64_t right_valid, ss_detect_block *blk) {
  int64_t vb = left - left_valid, ve = left + n + right_valid;
  int64_t sb = left - fs->search, se = left + n + fs->search;
  memset(blk, 0, sizeof(*blk));
  blk->n_rows = left + n + right;
  blk->search_begin = sb > vb ? sb : vb;
  blk->search_end = se < ve ? se : ve;
  blk->own_begin = left;
  blk->own_end = left + n;
}

static ss_status run_chunks(ss_ctx *ctx, const ss_backend *be, fe_state *fs, ss_source *src, int64_t chunk, accum *acc,
                            ss_frontend_model *model) {
  SS_TRY(ss_source_configure(ctx, src, chunk, fs->margin, fs->margin));
  const int T = n_threads_of(be), W = fs->cfg.n_before + fs->cfg.n_after, F = fs->C * fs->pca->n_pcs;
  int64_t n_chunks = ss_source_n_chunks(src);
  fe_slot *slots = NULL;
  SS_TRY(SS_CALLOC(ctx, slots, (size_t)T, "chunk slots"));
  for (int j = 0; j < T; j++) ss_spike_list_init(ctx, &slots[j].spikes, fs->C, W, 1);
  ss_progress prog;
  ss_progress_start(&prog, ctx, "detect", fs->info->duration_s);
  ss_status st = SS_OK;
  for (int64_t b = 0; b < n_chunks && st == SS_OK; b += T) {
    int m = (int)(n_chunks - b < T ? n_chunks - b : T);
    st = load_batch(ctx, src, slots, b, m);
    if (st != SS_OK) break;
#pragma omp parallel for num_threads(T) schedule(dynamic, 1)
    for (int j = 0; j < m; j++) {
      fe_slot *s = &slots[j];
      s->st = slot_filter(&s->ctx, be, fs, s);
      if (s->st == SS_OK) s->st = slot_detect(&s->ctx, be, fs, s);
    }
    st = slots_status(ctx, slots, m);
    for (int j = 0; j < m && st == SS_OK; j++) {
      st = ss_fe_accum_append(ctx, acc, &slots[j].spikes, slots[j].features, F);
      model->n_truncated += slots[j].spikes.n_truncated;
    }
    ss_progress_update(&prog, (double)(slots[m - 1].start + slots[m - 1].n) / fs->info->rate_hz);
  }
  ss_progress_finish(&prog);
  for (int j = 0; j < T; j++) slot_free(&slots[j]);
  free(slots);
  model->n_chunks = n_chunks;
  return st;
}

/* --- later passes over the filtered recording ---------------------------------------------------- */

static ss_status pass_batch(ss_ctx *ctx, const ss_backend *host, const fe_state *fs, fe_slot *slots, int m,
                            const ss_fe_pass *pass) {
#pragma omp parallel for num_threads(n_threads_of(host)) schedule(dynamic, 1)
  for (int j = 0; j < m; j++) {
    fe_slot *s = &slots[j];
    s->st = slot_filter(&s->ctx, host, fs, s);
    ss_fe_view v = {.x = s->x,
                    .n_rows = slot_rows(s),
                    .row0_sample = s->start - s->left,
                    .own_begin = s->left,
                    .own_end = s->left + s->n,
                    .valid_begin = s->left - s->left_valid,
                    .valid_end = s->left + s->n + s->right_valid};
    if (s->st == SS_OK) s->st = pass->chunk(&s->ctx, pass->user, j, &v);
  }
  SS_TRY(slots_status(ctx, slots, m));
  for (int j = 0; j < m; j++) {
    fe_slot *s = &slots[j];
    ss_fe_view v = {.x = s->x,
                    .n_rows = slot_rows(s),
                    .row0_sample = s->start - s->left,
                    .own_begin = s->left,
                    .own_end = s->left + s->n};
    if (pass->collect) SS_TRY(pass->collect(ctx, pass->user, j, &v));
  }
  return SS_OK;
}

ss_status ss_frontend_pass(ss_ctx *ctx, const ss_backend *be, const ss_params *p, ss_source *src, const ss_probe *probe,
                           const ss_frontend_model *model, const ss_fe_pass *pass) {
  fe_state fs;
  memset(&fs, 0, sizeof(fs));
  fs.p = p;
  fs.info = ss_source_get_info(src);
  fs.C = fs.info->n_channels;
  fs.filter = model->filter;
  fs.cfg = model->detect;
  fs.th = model->thresholds;
  fs.motion = model->motion;
  int64_t margin = settle_samples(&fs.filter) + pass->reach;
  fs.margin = (int)(margin > model->margin ? margin : model->margin);
  SS_TRY(ss_detect_graph_from_probe(ctx, probe, fs.C, &fs.graph));
  /* filtering runs on CPU threads whatever the backend: the pass's stage decides where its own work runs */
  const ss_backend host = {.kind = SS_DEVICE_CPU, .n_threads = n_threads_of(be)};
  const int T = n_threads_of(be);
  fe_slot *slots = NULL;
  ss_status st = ss_source_configure(ctx, src, model->chunk_samples, fs.margin, fs.margin);
  if (st == SS_OK) st = SS_CALLOC(ctx, slots, (size_t)T, "pass slots");
  const int64_t n_chunks = st == SS_OK ? ss_source_n_chunks(src) : 0;
  ss_progress prog;
  ss_progress_start(&prog, ctx, pass->name, fs.info->duration_s);
  for (int64_t b = 0; b < n_chunks && st == SS_OK; b += T) {
    int m = (int)(n_chunks - b < T ? n_chunks - b : T);
    st = load_batch(ctx, src, slots, b, m);
    if (st == SS_OK) st = pass_batch(ctx, &host, &fs, slots, m, pass);
    if (st == SS_OK) ss_progress_update(&prog, (double)(slots[m - 1].start + slots[m - 1].n) / fs.info->rate_hz);
  }
  ss_progress_finish(&prog);
  for (int j = 0; slots && j < T; j++) slot_free(&slots[j]);
  free(slots);
  ss_detect_graph_free(&fs.graph);
  return st;
}

/* --- output ------------------------------------------------------------------------------------ */

typedef struct {
  int64_t t;
  float frac;
  int32_t ch;
  int64_t i;
} sort_key;

static int cmp_key(const void *a, const void *b) {
  const sort_key *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  if (x->frac != y->frac) return x->frac < y->frac ? -1 : 1;
  if (x->ch != y->ch) return x->ch < y->ch ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

static ss_status build_output(ss_ctx *ctx, const fe_state *fs, const accum *acc, ss_spikes *out) {
  const int64_t n = acc->list.n;
  const int C = fs->C, P = fs->pca->n_pcs, F = C * P;
  size_t nn = (size_t)(n > 0 ? n : 1);
  sort_key *keys = NULL;
  SS_TRY(SS_ALLOC(ctx, keys, nn, "spike order"));
  for (int64_t i = 0; i < n; i++)
    keys[i] = (sort_key){acc->list.time_samples[i], acc->list.time_fraction[i], acc->list.peak_channel[i], i};
  qsort(keys, (size_t)n, sizeof(sort_key), cmp_key);
  memset(out, 0, sizeof(*out));
  out->n = n;
  out->n_channels = C;
  out->n_pcs = P;
  out->rate_hz = fs->info->rate_hz;
  if (SS_ALLOC(ctx, out->time_samples, nn, "spike times") != SS_OK ||
      SS_ALLOC(ctx, out->time_fraction, nn, "spike times") != SS_OK ||
      SS_ALLOC(ctx, out->peak_channel, nn, "peak channels") != SS_OK ||
      SS_ALLOC(ctx, out->amplitude, nn, "amplitudes") != SS_OK ||
      SS_ALLOC(ctx, out->features, nn * F, "features") != SS_OK ||
      SS_ALLOC(ctx, out->masks, nn * C, "masks") != SS_OK) {
    free(keys);
    ss_spikes_free(out);
    return SS_ERR_NOMEM;
  }
  for (int64_t k = 0; k < n; k++) {
    int64_t i = keys[k].i;
    out->time_samples[k] = acc->list.time_samples[i];
    out->time_fraction[k] = acc->list.time_fraction[i];
    out->peak_channel[k] = acc->list.peak_channel[i];
    out->amplitude[k] = acc->list.amplitude[i];
    memcpy(out->features + k * F, acc->features + i * F, (size_t)F * sizeof(float));
    memcpy(out->masks + k * C, acc->list.masks + i * C, (size_t)C * sizeof(float));
  }
  free(keys);
  return SS_OK;
}

/* --- driver ------------------------------------------------------------------------------------ */

static ss_status setup(ss_ctx *ctx, const ss_params *p, ss_source *src, const ss_probe *probe, fe_state *fs) {
  memset(fs, 0, sizeof(*fs));
  fs->p = p;
  fs->info = ss_source_get_info(src);
  fs->C = fs->info->n_channels;
  SS_TRY(ss_filter_design_params(ctx, p, fs->info->rate_hz, &fs->filter));
  SS_TRY(ss_detect_config_from_params(ctx, p, fs->info->rate_hz, &fs->cfg));
  if (probe) SS_TRY(ss_probe_check_recording(ctx, probe, fs->C));
  SS_TRY(ss_detect_graph_from_probe(ctx, probe, fs->C, &fs->graph));
  fs->margin = ss_frontend_margin(p, &fs->filter, &fs->cfg, fs->info->rate_hz);
  fs->search = fs->margin - (int)settle_samples(&fs->filter);
  int64_t asked = llround(p->io.margin_ms * fs->info->rate_hz / 1000.0);
  if (fs->margin > asked)
    ss_log_info(ctx, "detect: margin raised from %.3g ms to %.3g ms (filter settling + waveform window)",
                p->io.margin_ms, 1000.0 * fs->margin / fs->info->rate_hz);
  return SS_OK;
}

ss_status ss_frontend_run(ss_ctx *ctx, const ss_backend *be, const ss_params *p, ss_source *src, const ss_probe *probe,
                          const ss_motion_reg *motion, ss_spikes *out, ss_frontend_model *model) {
  memset(out, 0, sizeof(*out));
  memset(model, 0, sizeof(*model));
  fe_state fs;
  ss_status st = setup(ctx, p, src, probe, &fs);
  fs.motion = motion;
  if (st == SS_OK && motion && motion->n_channels != fs.C)
    st = ss_fail(ctx, SS_ERR_INTERNAL, "front end: registration for %d channels, recording has %d", motion->n_channels,
                 fs.C);
  excerpts ex = {0};
  accum acc = {0};
  ss_spike_list_init(ctx, &acc.list, fs.C, fs.cfg.n_before + fs.cfg.n_after, 0);
  double t0 = ss_now();
  /* pass 1 (the excerpts: seconds of data, many small pieces) runs on CPU threads on every backend */
  ss_backend host = {.kind = SS_DEVICE_CPU, .n_threads = n_threads_of(be)};
  if (st == SS_OK) st = excerpts_read_filter(ctx, &host, &fs, src, &ex, &model->n_excerpts);
  if (st == SS_OK) st = excerpts_thresholds(ctx, &host, &fs, &ex);
  if (st == SS_OK) st = excerpts_pca(ctx, &host, &fs, &ex, &model->pca, &model->n_excerpt_spikes);
  excerpts_free(&ex);
  double t1 = ss_now();
  fs.pca = &model->pca;
  int64_t chunk = st == SS_OK ? llround(p->io.chunk_s * fs.info->rate_hz) : 0;
  if (chunk < 1) chunk = 1;
  model->chunk_samples = chunk;
  if (st == SS_OK && be && be->kind == SS_DEVICE_CUDA) {
    st = ss_frontend_chunks_cuda(ctx, be, &fs, src, &acc, model);
  } else if (st == SS_OK) {
    st = run_chunks(ctx, be, &fs, src, chunk, &acc, model);
  }
  if (st == SS_OK) st = build_output(ctx, &fs, &acc, out);
  model->seconds_threshold = t1 - t0;
  model->seconds_detect = ss_now() - t1;
  model->filter = fs.filter;
  model->thresholds = fs.th;
  model->detect = fs.cfg;
  model->margin = fs.margin;
  model->motion = motion;
  if (model->n_truncated > 0)
    ss_log_warn(ctx,
                "detect: %lld spikes reached the end of the chunk margin; raise io.margin_ms for exact "
                "chunk-size independence",
                (long long)model->n_truncated);
  ss_detect_graph_free(&fs.graph);
  ss_spike_list_free(&acc.list);
  free(acc.features);
  if (st != SS_OK) {
    ss_frontend_model_free(model);
    ss_spikes_free(out);
  }
  return st;
}
