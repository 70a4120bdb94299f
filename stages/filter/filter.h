/* filter.h — the band-pass filter stage: a Butterworth band-pass designed here (analog prototype
 * poles, low-pass to band-pass transform, bilinear transform with prewarped band edges, second-order
 * sections), applied zero-phase (forward–backward) over a chunk plus its margins offline, or causally
 * with state carried from chunk to chunk in live mode; and the optional common median reference.
 *
 * Data are float32, time-major: x[t * n_channels + c]. Arithmetic inside the sections is double.
 * The CUDA twins (stages/filter/filter.cu) are declared at the end; the dispatching entry points take the
 * backend (with a CUDA backend they upload, run the device-resident twin and download). */
#ifndef SS_FILTER_H
#define SS_FILTER_H

#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_FILTER_MAX_ORDER 8 /* params: filter.order <= 8 */

/* One second-order section: y = (b0 + b1 z^-1 + b2 z^-2) / (1 + a1 z^-1 + a2 z^-2) x. */
typedef struct {
  double b0, b1, b2, a1, a2;
} ss_biquad;

typedef struct {
  int order;      /* Butterworth order of each band edge */
  int n_sections; /* = order */
  ss_biquad sos[SS_FILTER_MAX_ORDER];
  double rate_hz, low_hz, high_hz;
} ss_filter;

/* Design the band-pass [low_hz, high_hz] of the given order at rate_hz. */
ss_status ss_filter_design(ss_ctx *ctx, int order, double low_hz, double high_hz, double rate_hz, ss_filter *out);
/* The band-pass the parameters ask for: filter.low_hz to filter.high_nyquist_fraction × rate/2. */
ss_status ss_filter_design_params(ss_ctx *ctx, const ss_params *p, double rate_hz, ss_filter *out);

/* |H(e^{jω})| of the designed sections at freq_hz (evaluated from the coefficients). */
double ss_filter_magnitude(const ss_filter *f, double freq_hz);
/* The analytic magnitude of the digital Butterworth band-pass of this design:
 * 1 / sqrt(1 + ((Ω² − Ω0²) / (Ω B))^(2·order)) with Ω = 2·rate·tan(π f / rate) (prewarped). */
double ss_filter_butterworth_magnitude(int order, double low_hz, double high_hz, double rate_hz, double freq_hz);

/* Samples for a filter transient to decay by `factor` (e.g. 1e-9): from the slowest pole radius. */
int64_t ss_filter_settle_samples(const ss_filter *f, double factor);

/* Zero-phase filtering of n_rows × n_channels samples (in may equal out). Each pass starts from the
 * steady state of its first input sample, so a DC offset causes no transient. */
ss_status ss_filter_zero_phase(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *in, int64_t n_rows,
                               int n_channels, float *out);
ss_status ss_filter_zero_phase_cpu(ss_ctx *ctx, const ss_filter *f, const float *in, int64_t n_rows, int n_channels,
                                   float *out);

/* Causal filtering with state carried between calls (live mode). */
typedef struct {
  int n_channels;
  int started; /* 0 until the first sample: the state is then set to its steady state */
  double *z;   /* [n_sections][2][n_channels] */
} ss_filter_state;

ss_status ss_filter_state_init(ss_ctx *ctx, const ss_filter *f, int n_channels, ss_filter_state *st);
void ss_filter_state_free(ss_filter_state *st);
ss_status ss_filter_causal(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, ss_filter_state *st, const float *in,
                           int64_t n_rows, float *out);
ss_status ss_filter_causal_cpu(ss_ctx *ctx, const ss_filter *f, ss_filter_state *st, const float *in, int64_t n_rows,
                               float *out);

/* Common median reference: subtract from every channel, at each sample, the median over the
 * channels with use[c] != 0 (NULL: all). Channels not used are left unchanged. */
ss_status ss_filter_common_median(ss_ctx *ctx, const ss_backend *be, float *x, int64_t n_rows, int n_channels,
                                  const int *use);
ss_status ss_filter_common_median_cpu(ss_ctx *ctx, float *x, int64_t n_rows, int n_channels, const int *use);

/* --- CUDA, device-resident (stages/filter/filter.cu; only in builds with CUDA) ---------------------------
 * Device arrays of n_rows × n_channels floats, time-major; stream NULL = the backend's stream. All
 * asynchronous on the stream (temporaries are stream-ordered allocations). The results equal the CPU
 * functions' to float rounding: the same double operations in the same order (no FMA contraction). */

/* Zero-phase filter (d_in may equal d_out: the forward pass goes to a device temporary). */
ss_status ss_filter_zero_phase_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in,
                                    int64_t n_rows, int n_channels, float *d_out, ss_stream stream);
/* Causal filtering of a whole block from the steady state of its first row (the chunk pass with
 * filter.causal), blocked in time like the zero-phase passes; d_in != d_out. */
ss_status ss_filter_forward_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *d_in,
                                 int64_t n_rows, int n_channels, float *d_out, ss_stream stream);
/* Common median reference in place; use is a HOST array (NULL = all channels). */
ss_status ss_filter_common_median_cuda(ss_ctx *ctx, const ss_backend *be, float *d_x, int64_t n_rows, int n_channels,
                                       const int *use, ss_stream stream);
/* Causal filter (live mode): the state lives on the device, d_state: [n_sections][2][n_channels]
 * doubles (the layout of ss_filter_state.z); *started as in ss_filter_state (host). */
ss_status ss_filter_causal_cuda(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, double *d_state, int *started,
                                const float *d_in, int64_t n_rows, int n_channels, float *d_out, ss_stream stream);
/* The same three with HOST arrays (upload, run, download, synchronise): what the dispatchers above do
 * with a CUDA backend. */
ss_status ss_filter_zero_phase_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, const float *in,
                                         int64_t n_rows, int n_channels, float *out);
ss_status ss_filter_causal_cuda_host(ss_ctx *ctx, const ss_backend *be, const ss_filter *f, ss_filter_state *st,
                                     const float *in, int64_t n_rows, float *out);
ss_status ss_filter_common_median_cuda_host(ss_ctx *ctx, const ss_backend *be, float *x, int64_t n_rows, int n_channels,
                                            const int *use);

#ifdef __cplusplus
}
#endif
#endif
