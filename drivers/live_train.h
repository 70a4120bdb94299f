/* live_train.h — fitting a live model from the first seconds of a stream (`spikestream live
 * --train-seconds S`, drivers/live_run.h): the buffered rows go to a flat binary file in a working directory,
 * `sort`'s library entry point (drivers/sort.h: front end, masked EM, merge, causal twin) fits it in a
 * background thread on the chosen device, and the model's /live group is loaded when it is done.
 * The caller keeps reading the stream meanwhile (what arrives then is its to count). */
#ifndef SS_LIVE_TRAIN_H
#define SS_LIVE_TRAIN_H

#include <stdint.h>

#include "params/params.h"
#include "core/backend.h"
#include "stages/live/live_model.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int n_channels;
  double rate_hz;
  double uv_per_step;     /* µV per int16 step (<= 0: 1, as `sort` reads a flat binary file) */
  const char *probe_path; /* NULL: `sort`'s default (the 32-channel probe for 32 channels, else an error) */
  const char *dir;        /* working directory, kept (train.bin, sort/ with model.h5); NULL: a temporary
                             one under $TMPDIR (or /tmp), removed by ss_live_train_close */
  ss_params params;       /* validated; sort.live_model is forced on (live mode needs the twin) */
  ss_device_kind device;
} ss_live_train_opts;

typedef struct ss_live_trainer ss_live_trainer;

/* Make the working directory and open its train.bin. */
ss_status ss_live_train_begin(ss_ctx *ctx, const ss_live_train_opts *o, ss_live_trainer **out);
/* Append n rows (n_channels int16 each, channel-interleaved) to train.bin. */
ss_status ss_live_train_append(ss_ctx *ctx, ss_live_trainer *t, const int16_t *rows, int64_t n);
/* Close train.bin and start the fit in a background thread. */
ss_status ss_live_train_start(ss_ctx *ctx, ss_live_trainer *t);
/* 1 once the background fit has finished (successfully or not); never blocks. */
int ss_live_train_done(ss_live_trainer *t);
/* Wait for the fit, then load its model (the fit's error, prefixed, when it failed). *fit_s: seconds
 * the fit took; *n_units: units of the sort, noise included. */
ss_status ss_live_train_finish(ss_ctx *ctx, ss_live_trainer *t, ss_live_model *m, double *fit_s, int64_t *n_units);
/* Where the model is (working directory/sort/model.h5). */
const char *ss_live_train_model_path(const ss_live_trainer *t);
/* Joins a running fit, removes a temporary working directory, frees t (NULL: nothing). */
void ss_live_train_close(ss_live_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
