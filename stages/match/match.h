/* match.h — template matching over filtered chunks: every spike of every unit found by greedy
 * matching pursuit with the units' waveform templates, overlapping spikes included, each with an
 * amplitude scale (docs/accuracy.md, "Template matching").
 *
 * The bank. Unit u has a template T_u: its mean filtered waveform, W samples × C channels, spike time
 * at sample n_before, in µV. Matching works in noise units: channel c is scaled by 1/σ_c (the noise
 * level of the threshold stage), so a noise sample has variance 1 everywhere. The footprint F_u is the
 * channels where the scaled template reaches match.footprint_sigma; T_u is 0 elsewhere. n_u = ‖T_u‖².
 *
 * Scores. For a time t of a chunk x (scaled), b_u(t) = Σ_{w,c} x(t − n_before + w, c) T_u(w, c). The
 * fit a = clamp(b/n_u, match.amp_min, match.amp_max) removes g_u(t) = 2ab − a²n_u of energy (b²/n_u
 * when a is not clamped).
 *
 * One round. (u, t) is accepted when g_u(t) ≥ match.min_gain, t lies in the search rows, no
 * accepted spike of u lies within match.dead_ms, and g_u(t) is the largest of every g_v(t') with v's
 * footprint sharing a channel with u's and |t − t'| < W (a tie goes to the smaller t, then the smaller
 * u). Two accepted spikes therefore never touch the same (sample, channel), so accepting them together
 * equals accepting them one by one. Each accepted a·T_u is subtracted, which changes b_v(t + d) by
 * −a·K_vu(d), K_vu(d) = Σ_{w,c} T_v(w, c) T_u(w + d, c) (precomputed). Rounds repeat until none accepts
 * or match.max_rounds.
 *
 * Chunks. The spikes of the owned rows are reported; the search rows reach a template length beyond
 * them so that a spike at the border sees its neighbours, as in the neighbouring chunk. Deterministic:
 * no randomness, the result does not depend on threads. The CUDA twin is stages/match/match.cu. */
#ifndef SS_MATCH_H
#define SS_MATCH_H

#include <stdint.h>

#include "core/backend.h"
#include "core/status.h"
#include "params/params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int K, C, W, n_before; /* units, channels, template samples, samples before the spike time */
  float *scale;          /* [C] 1/σ_c, 0 for a channel not used */
  float *tmpl;           /* [K × W × C] scaled templates, 0 off the footprint */
  float *tmpl_uv;        /* [K × W × C] the same in µV (what is subtracted from the data) */
  int32_t *fp_start;     /* CSR over units: footprint channels, ascending */
  int32_t *fp;
  float *tmpl_fp;     /* unit u's scaled template on its footprint, [W × |F_u|] at fp_start[u]·W */
  float *norm;        /* [K] n_u */
  int32_t *nb_start;  /* CSR over units: units whose footprints share a channel (u included) */
  int32_t *nb;        /* ascending */
  float *cross;       /* [K × K × (2W − 1)]: cross[(v·K + u)(2W − 1) + d + W − 1] = K_vu(d) */
  int32_t *peak_chan; /* [K] channel of the largest scaled template peak */
  double amp_min, amp_max, min_gain;
  int dead; /* samples: no second spike of a unit this close to an accepted one */
  int max_rounds;
  int n_unusable; /* units with an empty footprint or n_u below min_gain: never matched */
} ss_match_bank;

/* The bank from templates_uv [K × W × C] (µV, spike time at n_before) and the noise levels sigma [C]
 * (<= 0: channel not used), with the match section's parameters at rate_hz. A unit whose footprint
 * is empty or whose n_u is below match.min_gain can never be matched (counted in n_unusable). */
ss_status ss_match_bank_build(ss_ctx *ctx, const ss_params *p, double rate_hz, const float *templates_uv, int K, int W,
                              int C, int n_before, const float *sigma, ss_match_bank *out);
void ss_match_bank_free(ss_match_bank *b);

/* The matched spikes of one chunk, in order of time (then unit). */
typedef struct {
  int64_t n, cap;
  int64_t *row;  /* chunk row of the spike time */
  int32_t *unit; /* 0 .. K−1 */
  float *amp;    /* fitted amplitude scale a */
  float *gain;   /* g at acceptance, noise-variance units */
} ss_match_list;

void ss_match_list_clear(ss_match_list *l);
/* Room for n spikes (grown geometrically; the entries kept). */
ss_status ss_match_list_reserve(ss_ctx *ctx, ss_match_list *l, int64_t n);
void ss_match_list_free(ss_match_list *l);

/* A filtered chunk (µV, time-major [n_rows × C]) and its rows. On return x holds the residual: the
 * chunk minus every accepted spike's a·T_u, the margins' spikes included. */
typedef struct {
  float *x;
  int64_t n_rows;
  int64_t search_begin, search_end; /* rows where spikes may be accepted */
  int64_t own_begin, own_end;       /* rows whose spikes are reported */
} ss_match_chunk;

/* Scratch reused between calls (one per thread); zero-initialise, free with ss_match_work_free. */
typedef struct {
  float *xs;           /* scaled chunk */
  float *b, *g;        /* [K × n_rows] scores and gains */
  float *gather;       /* one unit's footprint channels of the chunk, [n_rows × |F_u|] */
  uint8_t *dead;       /* [K × n_rows] 1 within match.dead_ms of an accepted spike of the unit */
  ss_match_list round; /* the spikes accepted in one round */
  size_t cap_rows, cap_gather;
  int cap_k;
} ss_match_work;
void ss_match_work_free(ss_match_work *w);

/* Match one chunk (rules above) and append the spikes of the owned rows to out. */
ss_status ss_match_chunk_cpu(ss_ctx *ctx, const ss_match_bank *bank, ss_match_chunk *ch, ss_match_work *w,
                             ss_match_list *out);

/* --- CUDA (stages/match/match.cu; without SS_HAVE_CUDA every entry answers ss_cuda_not_built) -----
 * The same spikes as ss_match_chunk_cpu on the same chunk, bit for bit: every float operation is done
 * in the CPU's order and rounding (no fused multiply-add), so the scores, gains, amplitudes and the
 * residual are the CPU's and the winners the same. */

/* The bank on the device (templates, footprints, neighbours, cross tables, scales), scratch that grows
 * with the chunks, and a stream of its own: several host threads may each drive one handle at once.
 * be must be a CUDA backend; the handle keeps no pointer into bank. */
typedef struct ss_match_cuda ss_match_cuda;
ss_status ss_match_cuda_open(ss_ctx *ctx, const ss_backend *be, const ss_match_bank *bank, ss_match_cuda **out);
/* As ss_match_chunk_cpu with ch->x in HOST memory: uploaded, matched, and the residual copied back. */
ss_status ss_match_chunk_cuda(ss_ctx *ctx, ss_match_cuda *h, ss_match_chunk *ch, ss_match_list *out);
void ss_match_cuda_close(ss_match_cuda *h);

#ifdef __cplusplus
}
#endif
#endif
