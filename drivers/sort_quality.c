/* sort_quality.c — the sort's quality step (quality.h) on the final clusters, and the per-unit table
 * of the summary. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "core/log.h"
#include "drivers/sort_internal.h"

ss_status ss_sort_quality(ss_ctx *ctx, ss_sort_state *s) {
  const ss_quality_input in = {.n = s->spikes.n,
                               .rate_hz = s->spikes.rate_hz,
                               .duration_s = s->info->duration_s,
                               .n_samples = s->info->n_samples,
                               .time_samples = s->spikes.time_samples,
                               .amplitude = s->spikes.amplitude,
                               .labels = s->labels,
                               .stats = &s->stats,
                               .sigma = s->fe.thresholds.sigma};
  SS_TRY(ss_quality_compute(ctx, &s->o->params, &in, &s->sum->quality));
  const ss_quality *q = &s->sum->quality;
  int64_t n[3] = {0, 0, 0};
  for (int64_t c = 0; c < q->k; c++) n[q->label[c]]++;
  ss_log_info(ctx, "sort: quality: %" PRId64 " good, %" PRId64 " mua, %" PRId64 " noise (noise cluster 0 included)",
              n[SS_QUALITY_GOOD], n[SS_QUALITY_MUA], n[SS_QUALITY_NOISE]);
  return SS_OK;
}

/* A metric in a fixed width, "-" when undefined. */
static void cell(FILE *f, int width, int prec, double v) {
  if (isnan(v)) fprintf(f, " %*s", width, "-");
  else fprintf(f, " %*.*f", width, prec, v);
}

void ss_sort_print_units(FILE *f, const ss_sort_summary *sum) {
  const ss_quality *q = &sum->quality;
  if (q->k == 0) return;
  fprintf(f, "units (quality.* parameters, docs/quality.md):\n");
  fprintf(f, "   unit   spikes  rate_hz     snr  isi_viol  presence  amp_cutoff  label\n");
  int64_t n[3] = {0, 0, 0};
  for (int64_t c = 0; c < q->k; c++) {
    fprintf(f, " %6" PRId64 " %8" PRId64, c, q->n_spikes[c]);
    cell(f, 8, 2, q->firing_rate_hz[c]);
    cell(f, 7, 2, q->snr[c]);
    cell(f, 9, 3, q->isi_violation_ratio[c]);
    cell(f, 9, 3, q->presence_ratio[c]);
    cell(f, 11, 3, q->amplitude_cutoff[c]);
    fprintf(f, "  %s\n", ss_quality_label_name(q->label[c]));
    n[q->label[c]]++;
  }
  fprintf(f, "labels:            %" PRId64 " good, %" PRId64 " mua, %" PRId64 " noise (noise cluster 0 included)\n",
          n[SS_QUALITY_GOOD], n[SS_QUALITY_MUA], n[SS_QUALITY_NOISE]);
}
