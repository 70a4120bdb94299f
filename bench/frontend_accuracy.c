/* frontend_accuracy.c — acceptance 2 of the front end: detection against simulated ground truth.
 *
 *   frontend_accuracy [-o OUT.json] RESULTS.h5 TRUTH.nwb [RESULTS.h5 TRUTH.nwb ...]
 *
 * For each pair: the detections (/spikes/time_samples + time_fraction of a results file) against the
 * simulator's NWB units table (spike_times, snr). A ground-truth spike is found when a detection lies
 * within 0.4 ms of it; a detection is false when no ground-truth spike of any unit lies within 0.4 ms.
 * Reported: recall over the spikes of units with SNR > 5 (target >= 95 %), the false fraction
 * (target <= 5 %), and the same two with one-to-one matching (each detection pairs with at most one
 * ground-truth spike, closest pairs first) for reference. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "io/h5_util.h"
#include "tools/compare.h"

#define WINDOW_MS 0.4
#define SNR_MIN 5.0

typedef struct {
  double t; /* samples */
  int unit; /* ground truth: unit index; detections: -1 */
} event;

static int cmp_event(const void *a, const void *b) {
  double x = ((const event *)a)->t, y = ((const event *)b)->t;
  return (x > y) - (x < y);
}

static ss_status read_detections(ss_ctx *ctx, const char *path, double **t, int64_t *n, double *rate) {
  ss_h5_quiet();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return ss_fail(ctx, SS_ERR_IO, "%s: cannot open", path);
  double *ts = NULL, *fr = NULL;
  int64_t nf = 0;
  ss_status st = ss_h5_read_f64_vector(ctx, f, "/spikes/time_samples", path, &ts, n);
  if (st == SS_OK) st = ss_h5_read_f64_vector(ctx, f, "/spikes/time_fraction", path, &fr, &nf);
  if (st == SS_OK && !ss_h5_read_attr_f64(f, "sample_rate", rate))
    st = ss_fail(ctx, SS_ERR_INPUT, "%s: attribute sample_rate missing", path);
  H5Fclose(f);
  if (st == SS_OK)
    for (int64_t i = 0; i < *n; i++) ts[i] += fr[i];
  free(fr);
  *t = ts;
  return st;
}

/* The parameter JSON a results file records (/params), parsed; NULL when absent. */
static cJSON *read_params(const char *path) {
  cJSON *json = NULL;
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  hid_t d = f < 0 ? -1 : H5Dopen2(f, "/params", H5P_DEFAULT);
  if (d >= 0) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, H5T_VARIABLE);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char *text = NULL;
    if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0 && text) {
      json = cJSON_Parse(text);
      H5free_memory(text);
    }
    H5Tclose(t);
    H5Dclose(d);
  }
  if (f >= 0) H5Fclose(f);
  return json;
}

/* Index of the event nearest to x in the ascending array, or -1 when empty. */
static int64_t nearest(const event *e, int64_t n, double x) {
  if (n == 0) return -1;
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = (lo + hi) / 2;
    if (e[mid].t < x) lo = mid + 1;
    else hi = mid;
  }
  if (lo == n) return n - 1;
  if (lo > 0 && x - e[lo - 1].t <= e[lo].t - x) return lo - 1;
  return lo;
}

typedef struct {
  double a, b; /* indices into gt and det */
  double d;
} pair;

static int cmp_pair(const void *x, const void *y) {
  double a = ((const pair *)x)->d, b = ((const pair *)y)->d;
  return (a > b) - (a < b);
}

static ss_status evaluate(ss_ctx *ctx, const char *res_path, const char *gt_path, cJSON *cs) {
  double *det_t = NULL, rate = 0;
  int64_t nd = 0;
  SS_TRY(read_detections(ctx, res_path, &det_t, &nd, &rate));
  ss_spike_trains gt;
  ss_trains_load_opts lo = {0};
  lo.rate_hz = rate;
  ss_status st = ss_spike_trains_load(ctx, gt_path, &lo, &gt);
  if (st != SS_OK) {
    free(det_t);
    return st;
  }
  int64_t ng = gt.start[gt.n_units];
  event *g = calloc((size_t)ng + 1, sizeof(event)), *d = calloc((size_t)nd + 1, sizeof(event));
  for (int u = 0; u < gt.n_units; u++)
    for (int64_t k = gt.start[u]; k < gt.start[u + 1]; k++) g[k] = (event){(double)gt.times[k], u};
  for (int64_t i = 0; i < nd; i++) d[i] = (event){det_t[i], -1};
  qsort(g, (size_t)ng, sizeof(event), cmp_event);
  qsort(d, (size_t)nd, sizeof(event), cmp_event);
  const double w = WINDOW_MS * 1e-3 * rate;
  int64_t n_big = 0, found = 0, false_det = 0;
  int units_big = 0;
  for (int u = 0; u < gt.n_units; u++) units_big += gt.snr && gt.snr[u] > SNR_MIN;
  int64_t *unit_found = calloc((size_t)gt.n_units, sizeof(int64_t));
  for (int64_t k = 0; k < ng; k++) {
    int64_t j = nearest(d, nd, g[k].t);
    int hit = j >= 0 && fabs(d[j].t - g[k].t) <= w;
    unit_found[g[k].unit] += hit;
    if (!(gt.snr && gt.snr[g[k].unit] > SNR_MIN)) continue;
    n_big++;
    found += hit;
  }
  printf("  unit   snr  spikes  recall\n");
  for (int u = 0; u < gt.n_units; u++) {
    int64_t nu = gt.start[u + 1] - gt.start[u];
    printf("  %4lld %5.2f %7lld  %.3f\n", (long long)gt.unit_id[u], gt.snr ? gt.snr[u] : NAN, (long long)nu,
           nu ? (double)unit_found[u] / nu : NAN);
  }
  free(unit_found);
  for (int64_t i = 0; i < nd; i++) {
    int64_t j = nearest(g, ng, d[i].t);
    false_det += !(j >= 0 && fabs(g[j].t - d[i].t) <= w);
  }
  /* one-to-one: every (gt, detection) pair within the window, closest first */
  int64_t np = 0, cap = 1024;
  pair *pairs = malloc(sizeof(pair) * (size_t)cap);
  for (int64_t k = 0, j0 = 0; k < ng; k++) {
    while (j0 < nd && d[j0].t < g[k].t - w) j0++;
    for (int64_t j = j0; j < nd && d[j].t <= g[k].t + w; j++) {
      if (np == cap) pairs = realloc(pairs, sizeof(pair) * (size_t)(cap *= 2));
      pairs[np++] = (pair){(double)k, (double)j, fabs(d[j].t - g[k].t)};
    }
  }
  qsort(pairs, (size_t)np, sizeof(pair), cmp_pair);
  char *gu = calloc((size_t)ng + 1, 1), *du = calloc((size_t)nd + 1, 1);
  int64_t found11 = 0, matched_det = 0;
  for (int64_t p = 0; p < np; p++) {
    int64_t k = (int64_t)pairs[p].a, j = (int64_t)pairs[p].b;
    if (gu[k] || du[j]) continue;
    gu[k] = du[j] = 1;
    matched_det++;
    found11 += gt.snr && gt.snr[g[k].unit] > SNR_MIN;
  }
  double recall = n_big ? (double)found / n_big : NAN, fp = nd ? (double)false_det / nd : NAN;
  double recall11 = n_big ? (double)found11 / n_big : NAN, fp11 = nd ? 1.0 - (double)matched_det / nd : NAN;
  printf("%s vs %s: %lld detections, %lld ground-truth spikes (%lld of %d units with SNR > %g)\n", res_path, gt_path,
         (long long)nd, (long long)ng, (long long)n_big, units_big, SNR_MIN);
  printf("  recall (SNR > %g) %.4f, unmatched detections %.4f; one-to-one: recall %.4f, unmatched %.4f\n", SNR_MIN,
         recall, fp, recall11, fp11);
  cJSON_AddStringToObject(cs, "results", res_path);
  cJSON_AddStringToObject(cs, "truth", gt_path);
  cJSON *params = read_params(res_path);
  if (params) {
    cJSON_AddItemToObject(cs, "filter", cJSON_DetachItemFromObject(params, "filter"));
    cJSON_AddItemToObject(cs, "detect", cJSON_DetachItemFromObject(params, "detect"));
    cJSON_Delete(params);
  }
  cJSON_AddNumberToObject(cs, "n_detections", (double)nd);
  cJSON_AddNumberToObject(cs, "n_truth", (double)ng);
  cJSON_AddNumberToObject(cs, "n_truth_snr_above_5", (double)n_big);
  cJSON_AddNumberToObject(cs, "units_snr_above_5", units_big);
  cJSON_AddNumberToObject(cs, "recall_snr_above_5", recall);
  cJSON_AddNumberToObject(cs, "unmatched_fraction", fp);
  cJSON_AddNumberToObject(cs, "recall_snr_above_5_one_to_one", recall11);
  cJSON_AddNumberToObject(cs, "unmatched_fraction_one_to_one", fp11);
  free(pairs);
  free(gu);
  free(du);
  free(g);
  free(d);
  free(det_t);
  ss_spike_trains_free(&gt);
  return SS_OK;
}

int main(int argc, char **argv) {
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  const char *out = NULL;
  int first = 1;
  if (argc > 2 && strcmp(argv[1], "-o") == 0) {
    out = argv[2];
    first = 3;
  }
  if (argc - first < 2 || (argc - first) % 2) {
    fprintf(stderr, "usage: frontend_accuracy [-o OUT.json] RESULTS.h5 TRUTH.nwb [RESULTS.h5 TRUTH.nwb ...]\n");
    return 2;
  }
  ss_bench_doc doc;
  if (ss_bench_doc_init(&ctx, &doc, "frontend_accuracy", "CPU") != SS_OK) return 3;
  double worst_recall = INFINITY, worst_fp = 0;
  for (int i = first; i < argc; i += 2) {
    cJSON *cs = ss_bench_case(&doc, argv[i]);
    ss_status st = evaluate(&ctx, argv[i], argv[i + 1], cs);
    if (st != SS_OK) {
      fprintf(stderr, "frontend_accuracy: %s\n", ss_error_message(&ctx));
      ss_bench_doc_free(&doc);
      return ss_status_exit_code(st);
    }
    worst_recall = fmin(worst_recall, cJSON_GetObjectItem(cs, "recall_snr_above_5")->valuedouble);
    worst_fp = fmax(worst_fp, cJSON_GetObjectItem(cs, "unmatched_fraction")->valuedouble);
  }
  ss_bench_summary_number(&doc, "min_recall_snr_above_5", worst_recall);
  ss_bench_summary_number(&doc, "max_unmatched_fraction", worst_fp);
  printf("worst: recall %.4f (target >= 0.95), unmatched %.4f (target <= 0.05)\n", worst_recall, worst_fp);
  if (out) {
    if (ss_bench_doc_write(&ctx, &doc, out) != SS_OK) {
      fprintf(stderr, "frontend_accuracy: %s\n", ss_error_message(&ctx));
      return 1;
    }
  } else {
    ss_bench_doc_free(&doc);
  }
  return 0;
}
