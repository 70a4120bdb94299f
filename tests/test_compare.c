/* test_compare.c — ground-truth comparison: spike matching at the window edges, the Hungarian
 * assignment against brute force, a hand-built sorting with exact expected scores and unit
 * categories (jitter inside/outside the window, missing and extra spikes, a split unit, a merged
 * unit, false positives), every loader (results.h5, NWB, phy, .clu + .res) and its rejections, and
 * the `compare` command line (gt.nwb against itself scores 1.0 everywhere). */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "io/klustakwik.h"
#include "io/npy.h"
#include "io/nwb_write.h"
#include "params/params.h"
#include "tools/compare.h"
#include "core/rng.h"
#include "ss_test.h"

#define RATE 30000.0
#define EPS 1e-12

static int64_t matches(const int64_t *a, int64_t na, const int64_t *b, int64_t nb, int64_t w) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t m = -1;
  assert_int_equal(ss_compare_count_matches(&ctx, a, na, b, nb, w, &m), SS_OK);
  return m;
}

static void matching_window_and_uniqueness(void **state) {
  (void)state;
  /* |dt| = 12 is inside a 12-sample window, 13 is not */
  int64_t a[] = {100, 200, 300}, b[] = {112, 213, 290};
  assert_int_equal(matches(a, 3, b, 3, 12), 2);
  assert_int_equal(matches(a, 3, b, 3, 13), 3);
  assert_int_equal(matches(a, 3, b, 3, 11), 1);
  /* one GT spike, two sorted spikes around it: one match */
  int64_t c[] = {100}, d[] = {95, 105};
  assert_int_equal(matches(c, 1, d, 2, 12), 1);
  assert_int_equal(matches(d, 2, c, 1, 12), 1);
  /* greedy by distance: (100,105) and (110,118) rather than (110,105) leaving 100 alone */
  int64_t e[] = {100, 110}, f[] = {105, 118};
  assert_int_equal(matches(e, 2, f, 2, 12), 2);
  assert_int_equal(matches(e, 0, f, 2, 12), 0);
  assert_int_equal(matches(e, 2, f, 0, 12), 0);
}

static double assignment_value(int rows, int cols, const double *w, const int *r2c) {
  double v = 0;
  for (int r = 0; r < rows; r++)
    if (r2c[r] >= 0) v += w[r * cols + r2c[r]];
  return v;
}

/* Best value over all injective maps of rows into columns (rows <= cols), by recursion. */
static double brute(int r, int rows, int cols, const double *w, int *used) {
  if (r == rows) return 0;
  double best = -1e300;
  for (int c = 0; c < cols; c++) {
    if (used[c]) continue;
    used[c] = 1;
    double v = w[r * cols + c] + brute(r + 1, rows, cols, w, used);
    used[c] = 0;
    if (v > best) best = v;
  }
  return best;
}

static void hungarian_is_optimal(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  /* greedy would take 0.9 and then lose 0.85 */
  double w[] = {0.9, 0.8, 0, 0.85, 0, 0, 0, 0, 0.7};
  int r2c[4];
  assert_int_equal(ss_hungarian_max(&ctx, 3, 3, w, r2c), SS_OK);
  assert_int_equal(r2c[0], 1);
  assert_int_equal(r2c[1], 0);
  assert_int_equal(r2c[2], 2);
  /* random rectangular matrices both ways against brute force */
  ss_rng rng = ss_rng_make(11, SS_RNG_TEST, 0);
  for (int trial = 0; trial < 200; trial++) {
    int rows = 1 + (int)ss_rng_next_below(&rng, 6), cols = 1 + (int)ss_rng_next_below(&rng, 6);
    double m[36], mt[36];
    for (int i = 0; i < rows * cols; i++) m[i] = floor(ss_rng_next_uniform(&rng) * 10) / 10;
    for (int r = 0; r < rows; r++)
      for (int c = 0; c < cols; c++) mt[c * rows + r] = m[r * cols + c];
    int assign[6], used[6] = {0};
    assert_int_equal(ss_hungarian_max(&ctx, rows, cols, m, assign), SS_OK);
    int seen[6] = {0}, assigned = 0;
    for (int r = 0; r < rows; r++)
      if (assign[r] >= 0) {
        assert_true(assign[r] < cols);
        assert_int_equal(seen[assign[r]]++, 0);
        assigned++;
      }
    assert_int_equal(assigned, rows < cols ? rows : cols);
    double best = rows <= cols ? brute(0, rows, cols, m, used) : brute(0, cols, rows, mt, used);
    assert_true(fabs(assignment_value(rows, cols, m, assign) - best) < 1e-9);
  }
}

/* --- the hand-built sorting ------------------------------------------------------------------ */

typedef struct {
  int64_t t[4000], l[4000];
  int64_t n;
} spikes;

static void add(spikes *s, int64_t t, int64_t label) {
  s->t[s->n] = t;
  s->l[s->n] = label;
  s->n++;
}

static void build_trains(const spikes *s, ss_spike_trains *out) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  assert_int_equal(ss_spike_trains_from_labels(&ctx, s->n, s->t, s->l, RATE, "test", out), SS_OK);
}

/* GT (times on a 500-sample grid, all below 300000):
 *   10: 100 spikes at 1000 + 3000k      20: 100 at 2000 + 3000k
 *   30:  50 spikes at 1500 + 6000k      40:  40 at 2500 + 6000k      50: 20 at 250 + 10000k
 * Sorted:
 *   1: GT10 at +5 samples, except 10 spikes at +13 (outside the 0.4 ms = 12-sample window),
 *      plus 10 extra spikes far from any GT spike      -> 90 matches of 110: accuracy 0.75
 *   2: the first 60 spikes of GT20, 3: the last 40     -> a split: 2 matched (0.6), 3 redundant (0.4)
 *   4: GT30 and GT40 merged                             -> matched to GT30 (50/90), over-merged
 *   5: 30 spikes nowhere near GT                        -> false positive (no best match)
 *   6: 25 spikes of GT10 and 75 elsewhere               -> best match GT10 at 25/175 < 0.2: false positive
 *   7: GT50 at -12 samples (on the window's edge)       -> accuracy 1 */
static void hand_built(ss_spike_trains *gt, ss_spike_trains *sorted) {
  static spikes g, s;
  g.n = s.n = 0;
  for (int k = 0; k < 100; k++) add(&g, 1000 + 3000 * k, 10), add(&g, 2000 + 3000 * k, 20);
  for (int k = 0; k < 50; k++) add(&g, 1500 + 6000 * k, 30);
  for (int k = 0; k < 40; k++) add(&g, 2500 + 6000 * k, 40);
  for (int k = 0; k < 20; k++) add(&g, 250 + 10000 * k, 50);
  for (int k = 0; k < 100; k++) add(&s, 1000 + 3000 * k + (k % 10 == 3 ? 13 : 5), 1);
  for (int k = 0; k < 10; k++) add(&s, 400250 + 1000 * k, 1);
  for (int k = 0; k < 100; k++) add(&s, 2000 + 3000 * k, k < 60 ? 2 : 3);
  for (int k = 0; k < 50; k++) add(&s, 1500 + 6000 * k, 4);
  for (int k = 0; k < 40; k++) add(&s, 2500 + 6000 * k, 4);
  for (int k = 0; k < 30; k++) add(&s, 500250 + 1000 * k, 5);
  for (int k = 0; k < 25; k++) add(&s, 1000 + 3000 * k, 6);
  for (int k = 0; k < 75; k++) add(&s, 600250 + 1000 * k, 6);
  for (int k = 0; k < 20; k++) add(&s, 250 + 10000 * k - 12, 7);
  build_trains(&g, gt);
  build_trains(&s, sorted);
  gt->snr = malloc(5 * sizeof(double));
  double snr[] = {12, 5, 9, 20, NAN};
  memcpy(gt->snr, snr, sizeof(snr));
}

static void hand_built_case_exact(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_spike_trains gt, sorted;
  hand_built(&gt, &sorted);
  ss_compare_opts o;
  ss_compare_opts_defaults(&o);
  ss_comparison c;
  assert_int_equal(ss_compare_run(&ctx, &gt, &sorted, &o, &c), SS_OK);
  assert_int_equal(c.window_samples, 12);
  assert_int_equal(c.n_gt, 5);
  assert_int_equal(c.n_sorted, 7);
  /* GT units 10 20 30 40 50 (index 0..4); sorted 1..7 (index 0..6) */
  int expect_match[] = {0, 1, 3, -1, 6};
  double acc[] = {90.0 / 120, 0.6, 50.0 / 90, 0, 1}, prec[] = {90.0 / 110, 1, 50.0 / 90, 0, 1},
         rec[] = {0.9, 0.6, 1, 0, 1};
  for (int i = 0; i < 5; i++) {
    assert_int_equal(c.match_gt[i], expect_match[i]);
    assert_true(fabs(c.accuracy[i] - acc[i]) < EPS);
    assert_true(fabs(c.precision[i] - prec[i]) < EPS);
    assert_true(fabs(c.recall[i] - rec[i]) < EPS);
  }
  assert_int_equal(c.n_match[0 * 7 + 0], 90);
  assert_int_equal(c.n_match[0 * 7 + 5], 25);
  assert_true(fabs(c.agreement[1 * 7 + 2] - 0.4) < EPS);
  assert_true(fabs(c.agreement[3 * 7 + 3] - 40.0 / 90) < EPS);
  assert_int_equal(c.well_detected, 1);
  assert_int_equal(c.n_false_positive, 2);
  assert_true(c.false_positive[4] && c.false_positive[5]);
  assert_int_equal(c.n_redundant, 1);
  assert_true(c.redundant[2]);
  assert_int_equal(c.n_overmerged, 1);
  assert_true(c.overmerged[3]);
  /* SNR > 8: GT 10 (0.75), 30 (50/90), 40 (0) */
  assert_int_equal(c.n_snr_above, 3);
  assert_true(fabs(c.mean_accuracy_snr_above - (0.75 + 50.0 / 90) / 3) < EPS);
  assert_true(fabs(c.mean_accuracy - (0.75 + 0.6 + 50.0 / 90 + 1) / 5) < EPS);

  /* the JSON document */
  char path[512];
  ss_test_path(path, sizeof(path), "cmp.json");
  assert_int_equal(ss_compare_write_json(&ctx, path, &gt, &sorted, &o, &c), SS_OK);
  char *text;
  size_t len;
  assert_int_equal(ss_read_text_file(&ctx, path, 1 << 20, &text, &len), SS_OK);
  assert_non_null(strstr(text, "{\"gt_unit\": 10, \"sorted_unit\": 1, \"accuracy\": 0.75, \"precision\": 0.8181818182, "
                               "\"recall\": 0.9, \"snr\": 12, \"n_gt\": 100, \"n_sorted\": 110}"));
  assert_non_null(strstr(text, "{\"gt_unit\": 40, \"sorted_unit\": null, \"accuracy\": 0, \"precision\": 0, "
                               "\"recall\": 0, \"snr\": 20, \"n_gt\": 40, \"n_sorted\": 0}"));
  assert_non_null(strstr(text, "\"snr\": null"));
  assert_non_null(strstr(text, "\"n_gt_units\": 5,"));
  assert_non_null(strstr(text, "\"well_detected\": 1,\n    \"false_positive\": 2,\n    \"redundant\": 1,\n"
                               "    \"overmerged\": 1,\n    \"mean_accuracy_snr_gt_8\": 0.4351851852,"));
  assert_non_null(strstr(text, "\"false_positive_units\": [5, 6]"));
  assert_non_null(strstr(text, "\"redundant_units\": [3]"));
  assert_non_null(strstr(text, "\"overmerged_units\": [4]"));
  free(text);
  ss_comparison_free(&c);
  ss_spike_trains_free(&gt);
  ss_spike_trains_free(&sorted);
}

static void rates_are_reconciled(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  /* GT at 30 kHz; the sorting at 20 kHz with the same spikes (times * 2/3) */
  int64_t gt_t[] = {3000, 6000, 9000, 12000}, gt_l[] = {1, 1, 1, 1};
  int64_t so_t[] = {2000, 4000, 6000, 8001}, so_l[] = {7, 7, 7, 7};
  ss_spike_trains gt, so;
  assert_int_equal(ss_spike_trains_from_labels(&ctx, 4, gt_t, gt_l, 30000, "gt", &gt), SS_OK);
  assert_int_equal(ss_spike_trains_from_labels(&ctx, 4, so_t, so_l, 20000, "sorted", &so), SS_OK);
  ss_compare_opts o;
  ss_compare_opts_defaults(&o);
  ss_comparison c;
  assert_int_equal(ss_compare_run(&ctx, &gt, &so, &o, &c), SS_OK);
  assert_true(c.accuracy[0] == 1.0);
  ss_comparison_free(&c);
  so.rate_hz = 0;
  assert_int_equal(ss_compare_run(&ctx, &gt, &so, &o, &c), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "sorted: no sample rate known (give --rate HZ)");
  /* negative times are refused when building trains */
  int64_t bad_t[] = {5, -1}, bad_l[] = {0, 0};
  ss_spike_trains b;
  assert_int_equal(ss_spike_trains_from_labels(&ctx, 2, bad_t, bad_l, 30000, "x.npy", &b), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "x.npy: spike 1: expected a sample index >= 0, got -1");
  ss_spike_trains_free(&gt);
  ss_spike_trains_free(&so);
}

/* --- loaders --------------------------------------------------------------------------------- */

static void write_results(const char *path, const int64_t *t, int64_t n, const int32_t *cl, int64_t ncl, double rate,
                          int with_rate) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g = H5Gcreate2(f, "spikes", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dn = (hsize_t)n, dc = (hsize_t)ncl;
  hid_t sp = H5Screate_simple(1, &dn, NULL), sc = H5Screate_simple(1, &dc, NULL);
  hid_t d = H5Dcreate2(g, "time_samples", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, t);
  H5Dclose(d);
  if (cl) {
    d = H5Dcreate2(g, "cluster", H5T_STD_I32LE, sc, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, cl);
    H5Dclose(d);
  }
  if (with_rate) {
    hid_t as = H5Screate(H5S_SCALAR), a = H5Acreate2(f, "sample_rate", H5T_IEEE_F64LE, as, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_DOUBLE, &rate);
    H5Aclose(a), H5Sclose(as);
  }
  H5Sclose(sp), H5Sclose(sc), H5Gclose(g), H5Fclose(f);
}

static void load_results_file(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char path[512];
  ss_test_path(path, sizeof(path), "results.h5");
  int64_t t[] = {500, 100, 300, 200};
  int32_t cl[] = {3, 3, 1, 3};
  write_results(path, t, 4, cl, 4, 25000, 1);
  ss_spike_trains s;
  ss_trains_load_opts o = {0};
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_OK);
  assert_int_equal(s.n_units, 2);
  assert_true(s.rate_hz == 25000);
  assert_int_equal(s.unit_id[0], 1);
  assert_int_equal(s.unit_id[1], 3);
  assert_int_equal(s.start[1], 1);
  int64_t expect[] = {300, 100, 200, 500};
  assert_memory_equal(s.times, expect, sizeof(expect));
  ss_spike_trains_free(&s);
  /* excluded clusters leave */
  int64_t ex[] = {1};
  o.exclude = ex, o.n_exclude = 1;
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_OK);
  assert_int_equal(s.n_units, 1);
  ss_spike_trains_free(&s);
  o.n_exclude = 0;

  char expect_msg[1024];
  write_results(path, t, 4, cl, 3, 25000, 1);
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_ERR_INPUT);
  snprintf(expect_msg, sizeof(expect_msg), "%s: /spikes/cluster: expected 4 values (as /spikes/time_samples), got 3",
           path);
  assert_string_equal(ss_error_message(&ctx), expect_msg);
  write_results(path, t, 4, NULL, 0, 25000, 1);
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_ERR_INPUT);
  snprintf(expect_msg, sizeof(expect_msg), "%s: /spikes/cluster: missing (the file holds no clustering yet)", path);
  assert_string_equal(ss_error_message(&ctx), expect_msg);
  write_results(path, t, 4, cl, 4, 25000, 0);
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_ERR_INPUT);
  snprintf(expect_msg, sizeof(expect_msg), "%s: attribute sample_rate: missing", path);
  assert_string_equal(ss_error_message(&ctx), expect_msg);
  write_results(path, t, 4, cl, 4, -5, 1);
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_ERR_INPUT);
  snprintf(expect_msg, sizeof(expect_msg), "%s: attribute sample_rate: expected a rate > 0 Hz, got -5", path);
  assert_string_equal(ss_error_message(&ctx), expect_msg);
  /* an HDF5 file with neither layout, a text file, a missing file */
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(f);
  assert_int_equal(ss_spike_trains_load(&ctx, path, &o, &s), SS_ERR_INPUT);
  snprintf(expect_msg, sizeof(expect_msg),
           "%s: neither an NWB units table (/units) nor a spikestream results file (/spikes)", path);
  assert_string_equal(ss_error_message(&ctx), expect_msg);
  const char *txt = ss_test_write_file("sorting.txt", "1 2 3\n");
  assert_int_equal(ss_spike_trains_load(&ctx, txt, &o, &s), SS_ERR_INPUT);
  snprintf(expect_msg, sizeof(expect_msg),
           "%s: unknown sorting format (expected results .h5, NWB, a phy folder or a .clu file)", txt);
  assert_string_equal(ss_error_message(&ctx), expect_msg);
  assert_int_equal(ss_spike_trains_load(&ctx, "/nonexistent/x.h5", &o, &s), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "/nonexistent/x.h5: no such file or directory");
}

static void write_nwb(const char *path, const double *const *times, const int64_t *counts, int n_units,
                      const double *snr) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_nwb_meta meta = {.rate_hz = RATE, .n_channels = 2, .conversion = 1e-6};
  ss_nwb_writer *w;
  assert_int_equal(ss_nwb_writer_open(&ctx, path, &meta, &w), SS_OK);
  int16_t data[200] = {0};
  assert_int_equal(ss_nwb_writer_append(&ctx, w, data, 100), SS_OK);
  int32_t peak[8] = {0};
  ss_nwb_units u = {.n_units = n_units, .n_spikes = counts, .spike_times = times, .peak_channel = peak, .snr = snr};
  assert_int_equal(ss_nwb_writer_set_units(&ctx, w, &u), SS_OK);
  assert_int_equal(ss_nwb_writer_close(&ctx, w), SS_OK);
}

static void load_nwb_units(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char path[512];
  ss_test_path(path, sizeof(path), "units.nwb");
  double u0[] = {0.1, 0.5}, u1[] = {0}, u2[] = {1.0 / 3, 2.0 / 3, 1.0};
  const double *times[] = {u0, u1, u2};
  int64_t counts[] = {2, 0, 3};
  double snr[] = {4.5, 6, 11};
  write_nwb(path, times, counts, 3, snr);
  ss_spike_trains s;
  assert_int_equal(ss_spike_trains_load(&ctx, path, NULL, &s), SS_OK);
  assert_int_equal(s.n_units, 3); /* the unit without spikes is kept */
  assert_true(s.rate_hz == RATE && !s.rate_assumed);
  int64_t expect[] = {3000, 15000, 10000, 20000, 30000};
  assert_memory_equal(s.times, expect, sizeof(expect));
  assert_int_equal(s.start[1], 2);
  assert_int_equal(s.start[2], 2);
  assert_true(s.snr[2] == 11);
  ss_spike_trains_free(&s);
  /* a corrupt index */
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  hid_t d = H5Dopen2(f, "/units/spike_times_index", H5P_DEFAULT);
  int64_t bad[] = {2, 1, 5};
  H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, bad);
  H5Dclose(d), H5Fclose(f);
  assert_int_equal(ss_spike_trains_load(&ctx, path, NULL, &s), SS_ERR_INPUT);
  char msg[1024];
  snprintf(msg, sizeof(msg), "%s: /units/spike_times_index[1]: expected a non-decreasing end in [2, 5], got 1", path);
  assert_string_equal(ss_error_message(&ctx), msg);
  /* a NaN spike time */
  write_nwb(path, times, counts, 3, snr);
  f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  d = H5Dopen2(f, "/units/spike_times", H5P_DEFAULT);
  double with_nan[] = {0.1, NAN, 1.0 / 3, 2.0 / 3, 1.0};
  H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, with_nan);
  H5Dclose(d), H5Fclose(f);
  assert_int_equal(ss_spike_trains_load(&ctx, path, NULL, &s), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: /units/spike_times[1]: expected a finite time, got nan", path);
  assert_string_equal(ss_error_message(&ctx), msg);
}

static void write_npy_i64(const char *dir, const char *name, ss_dtype t, const int64_t *v, int64_t n) {
  char p[600];
  snprintf(p, sizeof(p), "%s/%s", dir, name);
  ss_array a;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t shape[1] = {n};
  assert_int_equal(ss_array_alloc(&ctx, &a, t, 1, shape), SS_OK);
  for (int64_t i = 0; i < n; i++) {
    if (t == SS_DT_U64) ((uint64_t *)a.data)[i] = (uint64_t)v[i];
    else ((int32_t *)a.data)[i] = (int32_t)v[i];
  }
  assert_int_equal(ss_npy_write(&ctx, p, &a), SS_OK);
  ss_array_free(&a);
}

static void load_phy_folder(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char dir[512], p[600];
  ss_test_path(dir, sizeof(dir), "phy");
  mkdir(dir, 0755);
  int64_t t[] = {10, 20, 30, 40, 50}, cl[] = {2, 0, 2, 0, 5};
  write_npy_i64(dir, "spike_times.npy", SS_DT_U64, t, 5);
  write_npy_i64(dir, "spike_clusters.npy", SS_DT_I32, cl, 5);
  ss_spike_trains s;
  ss_trains_load_opts o = {0};
  assert_int_equal(ss_spike_trains_load(&ctx, dir, &o, &s), SS_ERR_INPUT);
  snprintf(p, sizeof(p), "%s/params.py: cannot open (a phy folder needs params.py with sample_rate)", dir);
  assert_string_equal(ss_error_message(&ctx), p);
  snprintf(p, sizeof(p), "phy/params.py");
  ss_test_write_file(p, "dat_path = 'x.bin'\nn_channels_dat = 32\nsample_rate = 20000.  # Hz\n");
  assert_int_equal(ss_spike_trains_load(&ctx, dir, &o, &s), SS_OK);
  assert_int_equal(s.n_units, 3);
  assert_true(s.rate_hz == 20000);
  assert_int_equal(s.unit_id[2], 5);
  ss_spike_trains_free(&s);
  ss_test_write_file(p, "sample_rate = fast\n");
  assert_int_equal(ss_spike_trains_load(&ctx, dir, &o, &s), SS_ERR_INPUT);
  char msg[1024];
  snprintf(msg, sizeof(msg), "%s/params.py: sample_rate: expected a rate > 0 Hz, got \"sample_rate = fast\"", dir);
  assert_string_equal(ss_error_message(&ctx), msg);
  ss_test_write_file(p, "sample_rate = 30000\n");
  write_npy_i64(dir, "spike_clusters.npy", SS_DT_I32, cl, 4);
  assert_int_equal(ss_spike_trains_load(&ctx, dir, &o, &s), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s/spike_clusters.npy: expected 5 values (as spike_times.npy), got 4", dir);
  assert_string_equal(ss_error_message(&ctx), msg);
}

static void load_klustakwik(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char clu[512], res[512], msg[2048];
  ss_test_path(clu, sizeof(clu), "s.clu.1");
  ss_test_path(res, sizeof(res), "s.res.1");
  int32_t labels[] = {1, 2, 2, 3};
  assert_int_equal(ss_kk_write_clu(&ctx, clu, 4, labels), SS_OK);
  ss_test_write_file("s.res.1", "100\n250\n400\n\n900\n");
  ss_spike_trains s;
  ss_trains_load_opts o = {.rate_hz = 20000};
  assert_int_equal(ss_spike_trains_load(&ctx, clu, &o, &s), SS_OK);
  assert_int_equal(s.n_units, 3);
  int64_t expect[] = {100, 250, 400, 900};
  assert_memory_equal(s.times, expect, sizeof(expect));
  ss_spike_trains_free(&s);
  /* KlustaKwik's noise cluster (1) left out */
  int64_t noise[] = {1};
  o.exclude = noise, o.n_exclude = 1;
  assert_int_equal(ss_spike_trains_load(&ctx, clu, &o, &s), SS_OK);
  assert_int_equal(s.n_units, 2);
  ss_spike_trains_free(&s);
  o.n_exclude = 0;
  ss_test_write_file("s.res.1", "100\n250\n");
  assert_int_equal(ss_spike_trains_load(&ctx, clu, &o, &s), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: expected 4 spike times (one per label in %s), got 2", res, clu);
  assert_string_equal(ss_error_message(&ctx), msg);
  ss_test_write_file("s.res.1", "100\n2x50\n");
  assert_int_equal(ss_spike_trains_load(&ctx, clu, &o, &s), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: line 2: expected a sample index >= 0, got \"2x50\"", res);
  assert_string_equal(ss_error_message(&ctx), msg);
  o.rate_hz = 0;
  assert_int_equal(ss_spike_trains_load(&ctx, clu, &o, &s), SS_ERR_INPUT);
  snprintf(msg, sizeof(msg), "%s: a .clu file carries no sample rate (give --rate HZ)", clu);
  assert_string_equal(ss_error_message(&ctx), msg);
}

/* --- command line ---------------------------------------------------------------------------- */

static int count(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

static void command_line(void **state) {
  (void)state;
  char *out, *err, args[4096], gt[512], json[512];
  ss_test_path(gt, sizeof(gt), "gt.nwb");
  ss_test_path(json, sizeof(json), "self.json");
  snprintf(args, sizeof(args), "simulate -o '%s' --preset easy --duration 4 --units 6 --seed 9 --quiet", gt);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  free(out), free(err);
  snprintf(args, sizeof(args), "compare '%s' '%s' --json '%s'", gt, gt, json);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "well detected (accuracy >= 0.8): 6 of 6"));
  assert_int_equal(count(out, "   1.0000    1.0000    1.0000"), 6);
  free(out), free(err);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char *text;
  size_t len;
  assert_int_equal(ss_read_text_file(&ctx, json, 1 << 20, &text, &len), SS_OK);
  assert_int_equal(count(text, "\"accuracy\": 1,"), 6);
  assert_non_null(strstr(text, "\"false_positive\": 0,"));
  free(text);

  /* a phy-style sorting with the second unit missing, against the NWB ground truth */
  ss_spike_trains g;
  assert_int_equal(ss_spike_trains_load(&ctx, gt, NULL, &g), SS_OK);
  char dir[512];
  ss_test_path(dir, sizeof(dir), "phy_cli");
  mkdir(dir, 0755);
  int64_t n = g.start[g.n_units], k = 0;
  int64_t *t = malloc((size_t)n * sizeof(int64_t)), *l = malloc((size_t)n * sizeof(int64_t));
  for (int u = 0; u < g.n_units; u++)
    for (int64_t i = g.start[u]; i < g.start[u + 1]; i++)
      if (u != 1) t[k] = g.times[i], l[k] = 100 + u, k++;
  write_npy_i64(dir, "spike_times.npy", SS_DT_U64, t, k);
  write_npy_i64(dir, "spike_clusters.npy", SS_DT_I32, l, k);
  ss_test_write_file("phy_cli/params.py", "sample_rate = 30000.0\n");
  snprintf(args, sizeof(args), "compare '%s' '%s'", dir, gt);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "well detected (accuracy >= 0.8): 5 of 6"));
  free(out), free(err);
  free(t), free(l);
  ss_spike_trains_free(&g);

  assert_int_equal(ss_test_run_cli("compare only_one.h5", &out, &err), 2);
  assert_non_null(strstr(err, "spikestream compare: expected two inputs: SORTED GROUND_TRUTH"));
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("compare a b --window-ms -1", &out, &err), 2);
  assert_non_null(strstr(err, "spikestream compare: --window-ms: expected a number in [0, 1000] (ms), got \"-1\""));
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("compare a b --exclude 1,x", &out, &err), 2);
  free(out), free(err);
  snprintf(args, sizeof(args), "compare /nonexistent/sorted.h5 '%s'", gt);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  assert_string_equal(err, "spikestream compare: /nonexistent/sorted.h5: no such file or directory\n");
  free(out), free(err);
  assert_int_equal(ss_test_run_cli("compare --help", &out, &err), 0);
  assert_non_null(strstr(out, "usage: spikestream compare"));
  free(out), free(err);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(matching_window_and_uniqueness),
      cmocka_unit_test(hungarian_is_optimal),
      cmocka_unit_test(hand_built_case_exact),
      cmocka_unit_test(rates_are_reconciled),
      cmocka_unit_test(load_results_file),
      cmocka_unit_test(load_nwb_units),
      cmocka_unit_test(load_phy_folder),
      cmocka_unit_test(load_klustakwik),
      cmocka_unit_test(command_line),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
