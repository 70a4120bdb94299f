/* test_mask_em.c — masked EM on the CPU (docs/mask_em.md): one M-step, one E-step cost, the penalty and
 * a deletion against values computed here independently with plain dense double loops; mask-pattern
 * starts; recovery of Gaussian clusters with structured masks (merged ARI); determinism across runs
 * and thread counts; a constant and a never-masked feature; the ARI helpers; and `spikestream
 * cluster` (malformed inputs with their exact messages, KlustaKwik flags, the round trip). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/klustakwik.h"
#include "io/matrix.h"
#include "stages/metrics/cluster_metrics.h"
#include "stages/mask_em/mask_em.h"
#include "stages/mask_em/mask_em_synth.h"
#include "core/rng.h"
#include "mask_em_test_util.h"
#include "ss_test.h"

#define TOL 1e-9
#define LOG_2PI 1.8378770664093454836

/* ---- the tiny hand case: D = 2, N = 6, clusters {0,1,2} and {3,4,5} ---------------------------- */

enum { TN = 6, TD = 2, TK = 3 };
static const float tiny_x[TN * TD] = {0, 0, 1, 2, 2, 1, 4, 4, 3, 0, 5, 3};
static const float tiny_m[TN * TD] = {1, 1, 1, 0.5f, 0, 1, 1, 1, 0, 0, 0.5f, 0};
static const int32_t tiny_labels[TN] = {1, 1, 1, 2, 2, 2};
#define TINY_T 1.5 /* cluster 1: U = {0, 1}; cluster 2: U = {0} (s = 1.5), M = {1} (s = 1) */

/* Preprocessing, model and one iteration (docs/mask_em.md) for the tiny case, computed densely and
 * directly. */
typedef struct {
  double y[TN][TD], eta[TN][TD], nu[TD], s2[TD], kp[TN];
  double mean[TK][TD], var[TK][TD][TD]; /* var: the block on U, the diagonal δ elsewhere */
  int in_u[TK][TD];
  double w[TK];
} tiny_ref;

static void tiny_reference(tiny_ref *r) {
  memset(r, 0, sizeof(*r));
  double xn[TN][TD];
  for (int i = 0; i < TD; i++) {
    double lo = 1e300, hi = -1e300, cnt = 0, sum = 0, sq = 0;
    for (int p = 0; p < TN; p++) lo = fmin(lo, tiny_x[p * TD + i]), hi = fmax(hi, tiny_x[p * TD + i]);
    for (int p = 0; p < TN; p++) xn[p][i] = (tiny_x[p * TD + i] - lo) / (hi - lo);
    for (int p = 0; p < TN; p++)
      if (tiny_m[p * TD + i] == 0) cnt++, sum += xn[p][i];
    r->nu[i] = sum / cnt;
    for (int p = 0; p < TN; p++)
      if (tiny_m[p * TD + i] == 0) sq += (xn[p][i] - r->nu[i]) * (xn[p][i] - r->nu[i]);
    r->s2[i] = sq / cnt;
  }
  for (int p = 0; p < TN; p++) {
    double np = 0;
    for (int i = 0; i < TD; i++) {
      double m = tiny_m[p * TD + i];
      np += m;
      r->y[p][i] = m * xn[p][i] + (1 - m) * r->nu[i];
      r->eta[p][i] = m * (1 - m) * (xn[p][i] - r->nu[i]) * (xn[p][i] - r->nu[i]) + (1 - m) * r->s2[i];
      if (m > 0) r->y[p][i] = (float)r->y[p][i], r->eta[p][i] = (float)r->eta[p][i]; /* stored as float32 */
    }
    r->kp[p] = np * (np + 1) / 2 + np + 1;
  }
  double P = 1.0, Z = TN + 1.0 + 2.0 * P;
  r->w[0] = 1.0 / Z;
  for (int c = 1; c < TK; c++) {
    double n = 0, s[TD] = {0}, sy[TD] = {0};
    for (int p = 0; p < TN; p++)
      if (tiny_labels[p] == c) {
        n++;
        for (int i = 0; i < TD; i++) s[i] += tiny_m[p * TD + i], sy[i] += r->y[p][i];
      }
    r->w[c] = (n + P) / Z;
    for (int i = 0; i < TD; i++) r->mean[c][i] = (sy[i] + P * r->nu[i]) / (n + P), r->in_u[c][i] = s[i] >= TINY_T;
    for (int i = 0; i < TD; i++)
      for (int j = 0; j < TD; j++) {
        double acc = 0;
        for (int p = 0; p < TN; p++)
          if (tiny_labels[p] == c) {
            acc += (r->y[p][i] - r->mean[c][i]) * (r->y[p][j] - r->mean[c][j]);
            if (i == j) acc += r->eta[p][i];
          }
        if (i == j) acc += P * r->s2[i];
        r->var[c][i][j] = acc / (n + P - 1);
      }
  }
}

/* Dense cost(p, c) of §4: inverse and log det of the U block by Gauss–Jordan. */
static double tiny_cost(const tiny_ref *r, int p, int c) {
  if (c == 0) return -log(r->w[0]);
  int u[TD], nu = 0;
  for (int i = 0; i < TD; i++)
    if (r->in_u[c][i]) u[nu++] = i;
  double a[TD][2 * TD], logdet = 0, cost = 0, h[TD];
  for (int x = 0; x < nu; x++)
    for (int y = 0; y < 2 * nu; y++) a[x][y] = y < nu ? r->var[c][u[x]][u[y]] : (y - nu == x);
  for (int col = 0; col < nu; col++) {
    double piv = a[col][col];
    logdet += log(piv);
    for (int y = 0; y < 2 * nu; y++) a[col][y] /= piv;
    for (int x = 0; x < nu; x++)
      if (x != col) {
        double f = a[x][col];
        for (int y = 0; y < 2 * nu; y++) a[x][y] -= f * a[col][y];
      }
  }
  for (int x = 0; x < nu; x++) {
    h[u[x]] = a[x][nu + x];
    for (int y = 0; y < nu; y++)
      cost += 0.5 * (r->y[p][u[x]] - r->mean[c][u[x]]) * a[x][nu + y] * (r->y[p][u[y]] - r->mean[c][u[y]]);
  }
  for (int i = 0; i < TD; i++)
    if (!r->in_u[c][i]) {
      double dd = r->y[p][i] - r->mean[c][i];
      h[i] = 1.0 / r->var[c][i][i];
      cost += 0.5 * dd * dd / r->var[c][i][i];
      logdet += log(r->var[c][i][i]);
    }
  for (int i = 0; i < TD; i++) cost += 0.5 * r->eta[p][i] * h[i];
  return cost + 0.5 * logdet - log(r->w[c]) + TD / 2.0 * LOG_2PI;
}

/* penalty_k 0, penalty_k_log_n 1 */
static double tiny_penalty(const tiny_ref *r, const int32_t *labels, int c) {
  double k = 0, n = 0;
  for (int p = 0; p < TN; p++)
    if (labels[p] == c) k += r->kp[p], n++;
  return n > 0 ? (k / n) * log((double)TN) / 2.0 : 0.0;
}

typedef struct {
  ss_ctx ctx;
  ss_params p;
  ss_mask_em_opts o;
  ss_mask_em_data data;
  ss_mask_em_state st;
} tiny_run;

/* Preprocess the tiny case and run one M-step (and E-step + C-step when `estep`). */
static void tiny_setup(tiny_run *t, int estep) {
  ss_test_ctx(&t->ctx);
  ss_params_defaults(&t->p);
  t->p.mask_em.points_for_cluster_mask = TINY_T;
  ss_mask_em_opts_from_params(&t->o, &t->p);
  assert_int_equal(ss_mask_em_prepare(&t->ctx, tiny_x, tiny_m, TN, TD, &t->o, 1, &t->data), SS_OK);
  assert_int_equal(ss_mask_em_state_init(&t->ctx, &t->st, &t->data, &t->o, NULL, TN, 1, TK, 1), SS_OK);
  assert_int_equal(ss_mask_em_state_set_k(&t->ctx, &t->st, TK), SS_OK);
  memcpy(t->st.labels, tiny_labels, sizeof(tiny_labels));
  assert_int_equal(ss_mask_em_mstep(&t->ctx, &t->st), SS_OK);
  if (estep) {
    assert_int_equal(ss_mask_em_estep(&t->ctx, &t->st), SS_OK);
    ss_mask_em_cstep(&t->st);
  }
}

static void tiny_teardown(tiny_run *t) {
  ss_mask_em_state_free(&t->st);
  ss_mask_em_data_free(&t->data);
}

static void mstep_by_hand(void **state) {
  (void)state;
  tiny_ref r;
  tiny_reference(&r);
  tiny_run t;
  tiny_setup(&t, 0);
  const ss_mask_em_model *md = &t.st.model;
  for (int i = 0; i < TD; i++) {
    assert_true(fabs(t.data.nu[i] - r.nu[i]) < TOL);
    assert_true(fabs(t.data.sigma2[i] - r.s2[i]) < TOL);
  }
  assert_true(fabs(t.data.nu[0] - 0.5) < TOL && fabs(t.data.sigma2[1] - 0.140625) < TOL); /* by hand */
  for (int c = 0; c < TK; c++) assert_true(fabs(md->weight[c] - r.w[c]) < TOL);
  assert_int_equal(md->n_u[1], 2);
  assert_int_equal(md->n_u[2], 1);
  for (int c = 1; c < TK; c++) {
    for (int i = 0; i < TD; i++) {
      assert_true(fabs(md->mean[c * TD + i] - r.mean[c][i]) < TOL);
      assert_true(fabs(md->diag[c * TD + i] - r.var[c][i][i]) < TOL);
    }
    const double *B = md->block + md->block_off[c];
    int u = md->n_u[c];
    for (int x = 0; x < u; x++)
      for (int y = 0; y < u; y++)
        assert_true(fabs(B[x * u + y] - r.var[c][md->u_feat[c * TD + x]][md->u_feat[c * TD + y]]) < TOL);
  }
  tiny_teardown(&t);
}

static void estep_cost_by_hand(void **state) {
  (void)state;
  tiny_ref r;
  tiny_reference(&r);
  tiny_run t;
  tiny_setup(&t, 1);
  for (int p = 0; p < TN; p++) {
    double best = INFINITY;
    int arg = -1;
    for (int c = 0; c < TK; c++) {
      double want = tiny_cost(&r, p, c), got = ss_mask_em_point_cost(&t.st, p, c);
      assert_true(fabs(got - want) < TOL * fmax(1.0, fabs(want)));
      if (want < best) best = want, arg = c;
    }
    assert_int_equal(t.st.best[p], arg);
    assert_true(fabs(t.st.cost1[p] - best) < TOL * fmax(1.0, fabs(best)));
  }
  tiny_teardown(&t);
}

static void penalty_by_hand(void **state) {
  (void)state;
  tiny_ref r;
  tiny_reference(&r);
  tiny_run t;
  tiny_setup(&t, 1);
  /* point 1: n_p = 1.5 → k_p = 1.5·2.5/2 + 1.5 + 1 = 4.375 */
  assert_true(fabs(t.data.kp[1] - 4.375) < TOL);
  double want = 0.0;
  for (int p = 0; p < TN; p++) want += tiny_cost(&r, p, t.st.labels[p]);
  for (int c = 0; c < TK; c++) want += tiny_penalty(&r, t.st.labels, c);
  double got = ss_mask_em_score(&t.st);
  assert_true(fabs(got - want) < TOL * fmax(1.0, fabs(want)));
  /* penalty_k: 2·k̄ more per cluster */
  t.o.penalty_k = 1.0;
  assert_true(fabs(ss_mask_em_penalty(&t.st, 12.0, 3) - (2.0 * 4.0 + 4.0 * log(6.0) / 2.0)) < TOL);
  tiny_teardown(&t);
}

/* Deletion on one blob fitted with three clusters: each candidate's exact score change, computed
 * here by moving its points to their second best and rescoring (costs under the current parameters,
 * every penalty recomputed from its definition). */
static void deletion_by_hand(void **state) {
  (void)state;
  enum { N = 300, D = 2, K = 4, NOISE = 50 };
  float x[N * D], m[N * D];
  ss_rng g = ss_rng_make(3, SS_RNG_TEST, 0);
  for (int p = 0; p < N * D; p++) x[p] = (float)(0.5 + 0.1 * ss_rng_next_normal(&g)), m[p] = p < (N - NOISE) * D;
  tiny_run t;
  ss_test_ctx(&t.ctx);
  ss_params_defaults(&t.p);
  ss_mask_em_opts_from_params(&t.o, &t.p);
  t.o.points_for_cluster_mask = 10;
  assert_int_equal(ss_mask_em_prepare(&t.ctx, x, m, N, D, &t.o, 1, &t.data), SS_OK);
  assert_int_equal(ss_mask_em_state_init(&t.ctx, &t.st, &t.data, &t.o, NULL, N, 1, K, 2), SS_OK);
  assert_int_equal(ss_mask_em_state_set_k(&t.ctx, &t.st, K), SS_OK);
  for (int p = 0; p < N; p++) t.st.labels[p] = p < N - NOISE ? 1 + (int32_t)ss_rng_next_below(&g, K - 1) : 0;
  assert_int_equal(ss_mask_em_mstep(&t.ctx, &t.st), SS_OK);
  assert_int_equal(ss_mask_em_estep(&t.ctx, &t.st), SS_OK);
  ss_mask_em_cstep(&t.st);
  int32_t before[N], moved[N];
  memcpy(before, t.st.labels, sizeof(before));
  double score = ss_mask_em_score(&t.st), delta[K], want[K];
  int best = -1;
  for (int c = 1; c < K; c++) {
    double s = 0, ksum[K] = {0}, cnt[K] = {0};
    for (int p = 0; p < N; p++) moved[p] = before[p] == c ? t.st.second[p] : before[p];
    for (int p = 0; p < N; p++) {
      s += ss_mask_em_point_cost(&t.st, p, moved[p]);
      double np = t.data.row[p + 1] - t.data.row[p]; /* masks are 0 or 1 here */
      ksum[moved[p]] += np * (np + 1) / 2 + np + 1, cnt[moved[p]]++;
    }
    for (int k = 0; k < K; k++) s += cnt[k] > 0 ? ksum[k] / cnt[k] * log((double)N) / 2 : 0;
    want[c] = s - score;
    if (want[c] < 0 && (best < 0 || want[c] < want[best])) best = c;
  }
  int64_t deleted;
  assert_int_equal(ss_mask_em_delete(&t.ctx, &t.st, delta, &deleted), SS_OK);
  for (int c = 1; c < K; c++) assert_true(fabs(delta[c] - want[c]) < 1e-9 * fabs(score));
  assert_true(best >= 0); /* one blob does not pay for three clusters */
  assert_int_equal(deleted, 1);
  for (int p = 0; p < N; p++) assert_int_equal(t.st.labels[p], before[p] == best ? t.st.second[p] : before[p]);
  assert_true(fabs(ss_mask_em_score(&t.st) - (score + want[best])) < 1e-9 * fabs(score));
  tiny_teardown(&t);
}

/* ---- starts -------------------------------------------------------------------------------------- */

static void mask_pattern_start(void **state) {
  (void)state;
  enum { N = 60, D = 6, K0 = 4 };
  float x[N * D], m[N * D];
  ss_rng g = ss_rng_make(11, SS_RNG_TEST, 0);
  uint64_t pat[N];
  for (int p = 0; p < N; p++) {
    pat[p] = 0;
    for (int i = 0; i < D; i++) {
      x[p * D + i] = (float)ss_rng_next_uniform(&g);
      m[p * D + i] = ss_rng_next_below(&g, 3) == 0 ? 0.7f : 0.0f;
      if (m[p * D + i] > 0) pat[p] |= 1u << i;
    }
  }
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params prm;
  ss_params_defaults(&prm);
  ss_mask_em_opts o;
  ss_mask_em_opts_from_params(&o, &prm);
  ss_mask_em_data dt;
  assert_int_equal(ss_mask_em_prepare(&ctx, x, m, N, D, &o, 1, &dt), SS_OK);
  int32_t labels[N];
  int64_t k;
  assert_int_equal(ss_mask_em_start_masks(&ctx, &dt, K0, 99, labels, &k), SS_OK);
  assert_int_equal(k, K0);
  /* independently: the documented visiting order, first K0 − 1 distinct patterns, nearest by XOR */
  int64_t visit[N];
  for (int p = 0; p < N; p++) visit[p] = p;
  ss_rng r = ss_rng_make(99, SS_RNG_MASK_EM_START, 0);
  ss_rng_shuffle(&r, visit, N);
  uint64_t first[K0 - 1];
  int nf = 0;
  for (int v = 0; v < N && nf < K0 - 1; v++) {
    int seen = 0;
    for (int f = 0; f < nf; f++) seen |= first[f] == pat[visit[v]];
    if (!seen) first[nf++] = pat[visit[v]];
  }
  for (int p = 0; p < N; p++) {
    int best = 0, bd = 99;
    for (int f = 0; f < nf; f++) {
      int dd = __builtin_popcountll(first[f] ^ pat[p]);
      if (dd < bd) bd = dd, best = f;
    }
    assert_int_equal(labels[p], best + 1);
  }
  ss_mask_em_data_free(&dt);
}

/* ---- whole fits ---------------------------------------------------------------------------------- */

static void fit(const synth_set *s, int threads, ss_mask_em_result *r) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_params p;
  ss_params_defaults(&p);
  ss_mask_em_opts o;
  ss_mask_em_opts_from_params(&o, &p);
  ss_status st = ss_mask_em_fit_cpu(&ctx, threads, s->x, s->m, s->n, s->d, &o, r);
  if (st != SS_OK) fail_msg("fit: %s", ss_error_message(&ctx));
}

static void recovers_gaussian_clusters(void **state) {
  (void)state;
  synth_set s = make_synth(4000, 16, 8, 5);
  ss_mask_em_result r;
  fit(&s, 2, &r);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  double ari, merged, purity;
  int32_t *mapped = malloc(sizeof(int32_t) * (size_t)s.n);
  assert_int_equal(ss_cluster_ari(&ctx, r.labels, s.truth, s.n, &ari), SS_OK);
  assert_int_equal(ss_cluster_merged_ari(&ctx, r.labels, s.truth, s.n, &merged), SS_OK);
  assert_int_equal(ss_cluster_majority_map(&ctx, r.labels, s.truth, s.n, mapped, &purity), SS_OK);
  printf("recovery: %lld clusters (8 units), %lld iterations (%s), ARI %.4f, merged ARI %.4f, purity %.4f\n",
         (long long)r.n_clusters, (long long)r.n_iterations, ss_mask_em_stop_name(r.stop), ari, merged, purity);
  assert_true(merged >= 0.95);
  assert_true(r.stop == SS_EM_STOP_CONVERGED);
  free(mapped);
  ss_mask_em_result_free(&r);
  free_synth(&s);
}

static void deterministic_across_threads(void **state) {
  (void)state;
  synth_set s = make_synth(3000, 12, 6, 9);
  ss_mask_em_result ref, r;
  fit(&s, 1, &ref);
  const int threads[] = {1, 2, 4};
  for (size_t i = 0; i < sizeof(threads) / sizeof(threads[0]); i++) {
    fit(&s, threads[i], &r);
    assert_int_equal(r.n_clusters, ref.n_clusters);
    assert_int_equal(r.n_iterations, ref.n_iterations);
    assert_memory_equal(&r.score, &ref.score, sizeof(double)); /* bit-identical */
    assert_memory_equal(r.labels, ref.labels, sizeof(int32_t) * (size_t)s.n);
    ss_mask_em_result_free(&r);
  }
  ss_mask_em_result_free(&ref);
  free_synth(&s);
}

static void constant_and_never_masked_features(void **state) {
  (void)state;
  synth_set s = make_synth(800, 4, 3, 21);
  for (int64_t p = 0; p < s.n; p++) {
    s.x[p * s.d + 0] = 3.0f; /* constant */
    s.m[p * s.d + 1] = 1.0f; /* never masked */
  }
  ss_mask_em_result r;
  fit(&s, 2, &r);
  assert_int_equal(r.n_constant_features, 1);
  assert_true(r.n_floored_features >= 2);
  assert_true(isfinite(r.score));
  for (int64_t i = 0; i < r.n_log; i++) assert_true(isfinite(r.log[i].score));
  for (int64_t p = 0; p < s.n; p++) assert_true(r.labels[p] >= 0 && r.labels[p] < r.n_clusters);
  assert_true(r.n_clusters >= 2);
  ss_mask_em_result_free(&r);
  free_synth(&s);
}

static void ari_helpers(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const int32_t a[] = {0, 0, 1, 1, 2, 2}, b[] = {5, 5, 3, 3, 4, 4}, c[] = {0, 0, 0, 1, 1, 1};
  const int32_t over[] = {0, 1, 2, 2, 3, 3}, truth[] = {0, 0, 1, 1, 2, 2};
  double v;
  assert_int_equal(ss_cluster_ari(&ctx, a, b, 6, &v), SS_OK);
  assert_true(fabs(v - 1.0) < 1e-12);
  /* a vs c: contingency [[2,0],[1,1],[0,2]]: index 2, Σa 3, Σb 6, expected 18/15, max 4.5 */
  assert_int_equal(ss_cluster_ari(&ctx, a, c, 6, &v), SS_OK);
  assert_true(fabs(v - (2.0 - 1.2) / (4.5 - 1.2)) < 1e-12);
  assert_int_equal(ss_cluster_merged_ari(&ctx, over, truth, 6, &v), SS_OK);
  assert_true(fabs(v - 1.0) < 1e-12);
  const int32_t neg[] = {0, -1};
  assert_int_equal(ss_cluster_ari(&ctx, neg, a, 2, &v), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "cluster metrics: point 2: negative label (-1, 0)");
}

/* ---- the command line ------------------------------------------------------------------------------ */

static void expect_cli(const char *args, int code, const char *err_line) {
  char *out, *err;
  int rc = ss_test_run_cli(args, &out, &err);
  if (rc != code || (err_line && !strstr(err, err_line)))
    fail_msg("spikestream %s: exit %d (want %d)\nstderr: %s\nwanted: %s", args, rc, code, err,
             err_line ? err_line : "");
  free(out);
  free(err);
}

static void write_pair(const char *base, const char *fet, const char *fmask) {
  char name[256];
  snprintf(name, sizeof(name), "%s.fet.1", base);
  ss_test_write_file(name, fet);
  snprintf(name, sizeof(name), "%s.fmask.1", base);
  ss_test_write_file(name, fmask);
}

static void cli_rejects_malformed_input(void **state) {
  (void)state;
  const char *good_fet = "2\n1 2\n3 4\n5 6\n", *good_mask = "2\n1 1\n0 1\n1 0.5\n";
  struct {
    const char *base, *fet, *fmask, *msg;
  } cases[] = {
      {"hdr", "3\n1 2\n3 4\n", "3\n1 1 1\n1 1 1\n", "hdr.fet.1: line 2: 2 values, expected 3"},
      {"rag", "2\n1 2\n3\n5 6\n", good_mask, "rag.fet.1: line 3: 1 values, expected 2"},
      {"nan", "2\n1 nan\n3 4\n5 6\n", good_mask, "nan.fet.1: line 2, column 2: not finite: \"nan\""},
      {"rng", good_fet, "2\n1 1\n0 1.5\n1 0.5\n", "rng.fmask.1: line 3, column 2: mask outside [0, 1]: \"1.5\""},
      {"neg", good_fet, "2\n1 1\n0 -0.5\n1 0.5\n", "neg.fmask.1: line 3, column 2: mask outside [0, 1]: \"-0.5\""},
      {"emp", "", good_mask, "emp.fet.1: empty file (expected the number of features on line 1)"},
      {"nor", "2\n", good_mask, "nor.fet.1: no data rows"},
      {"cnt", good_fet, "2\n1 1\n0 1\n", "cnt.fmask.1: 2 rows, but "},
      {"mhd", good_fet, "3\n1 1 1\n0 1 1\n1 1 1\n", "mhd.fmask.1: line 1: 3 masks per row, but "},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    write_pair(cases[i].base, cases[i].fet, cases[i].fmask);
    char args[1024], want[512];
    snprintf(args, sizeof(args), "cluster '%s/%s' 1 -q", ss_test_tmpdir(), cases[i].base);
    snprintf(want, sizeof(want), "spikestream cluster: %s/%s", ss_test_tmpdir(), cases[i].msg);
    expect_cli(args, 1, want);
  }
  char args[1024];
  write_pair("ok", good_fet, good_mask);
  snprintf(args, sizeof(args), "cluster '%s/ok' 1 -UseDistributional 0", ss_test_tmpdir());
  expect_cli(args, 2, "spikestream cluster: -UseDistributional: only 1 is supported, got \"0\"");
  snprintf(args, sizeof(args), "cluster '%s/ok' 1 -Foo 1", ss_test_tmpdir());
  expect_cli(args, 2, "spikestream cluster: unknown KlustaKwik flag \"-Foo\"");
  snprintf(args, sizeof(args), "cluster '%s/ok' 1 --param nope=1", ss_test_tmpdir());
  expect_cli(args, 2, "spikestream cluster: --param mask_em.nope: unknown parameter");
  snprintf(args, sizeof(args), "cluster '%s/ok'", ss_test_tmpdir());
  expect_cli(args, 2, "spikestream cluster: expected BASE and SHANK, got 1 argument(s)");
  snprintf(args, sizeof(args), "cluster '%s/missing' 1", ss_test_tmpdir());
  expect_cli(args, 1, "missing.fet.1: cannot open");
}

static int32_t *read_clu(const char *path, int64_t n) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  int64_t m, k;
  int32_t *labels;
  assert_int_equal(ss_kk_read_clu(&ctx, path, &m, &labels, &k), SS_OK);
  assert_int_equal(m, n);
  return labels;
}

static void cli_round_trip(void **state) {
  (void)state;
  synth_set s = make_synth(1500, 8, 4, 33);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  char base[512], fet[600], fmask[600], clu[600], klg[600], args[4096];
  ss_test_path(base, sizeof(base), "rt");
  snprintf(fet, sizeof(fet), "%s.fet.3", base);
  snprintf(fmask, sizeof(fmask), "%s.fmask.3", base);
  snprintf(clu, sizeof(clu), "%s.clu.3", base);
  snprintf(klg, sizeof(klg), "%s.klg.3", base);
  ss_matrix mx = {s.n, s.d, s.x}, mm = {s.n, s.d, s.m};
  assert_int_equal(ss_kk_write_features(&ctx, fet, fmask, &mx, &mm), SS_OK);
  snprintf(args, sizeof(args), "cluster '%s' 3 --threads 2 --device cpu -q", base);
  expect_cli(args, 0, NULL);
  int32_t *cli = read_clu(clu, s.n);
  /* in process, on what the command read */
  ss_matrix fx, fm;
  assert_int_equal(ss_kk_read_features(&ctx, fet, fmask, 0, &fx, &fm), SS_OK);
  ss_params p;
  ss_params_defaults(&p);
  ss_mask_em_opts o;
  ss_mask_em_opts_from_params(&o, &p);
  ss_mask_em_result r;
  assert_int_equal(ss_mask_em_fit_cpu(&ctx, 1, fx.data, fm.data, fx.rows, fx.cols, &o, &r), SS_OK);
  for (int64_t i = 0; i < s.n; i++) assert_int_equal(cli[i], r.labels[i] + 1);
  FILE *f = fopen(klg, "r");
  assert_non_null(f);
  char line[8192];
  int stop_line = 0;
  while (fgets(line, sizeof(line), f)) stop_line |= strncmp(line, "# stop: converged", 17) == 0;
  fclose(f);
  assert_true(stop_line);
  /* a .clu start from the converged labels keeps them */
  char start[600];
  snprintf(start, sizeof(start), "%s.start", base);
  assert_int_equal(ss_kk_write_clu(&ctx, start, s.n, cli), SS_OK);
  snprintf(args, sizeof(args), "cluster '%s' 3 --start 'clu:%s' --device cpu -q", base, start);
  expect_cli(args, 0, NULL);
  int32_t *again = read_clu(clu, s.n);
  assert_memory_equal(again, cli, sizeof(int32_t) * (size_t)s.n);
  free(again);
  /* matrices with one mask column per channel give the same labels */
  char fnpy[600], mnpy[600];
  snprintf(fnpy, sizeof(fnpy), "%s_fet.npy", base);
  snprintf(mnpy, sizeof(mnpy), "%s_mask.npy", base);
  ss_matrix ch = {s.n, s.d / 3, malloc(sizeof(float) * (size_t)(s.n * s.d / 3))};
  for (int64_t i = 0; i < s.n * s.d / 3; i++) ch.data[i] = fm.data[i * 3];
  assert_int_equal(ss_matrix_write(&ctx, fnpy, NULL, &fx), SS_OK);
  assert_int_equal(ss_matrix_write(&ctx, mnpy, NULL, &ch), SS_OK);
  snprintf(args, sizeof(args), "cluster '%s' 3 --input-npy '%s' '%s' --device cpu -q", base, fnpy, mnpy);
  expect_cli(args, 0, NULL);
  again = read_clu(clu, s.n);
  assert_memory_equal(again, cli, sizeof(int32_t) * (size_t)s.n);
  free(again);
  /* KlustaKwik flags */
  snprintf(args, sizeof(args), "cluster '%s' 3 -MaxIter 1 -UseDistributional 1 -RandomSeed 5 -q", base);
  char *out, *err;
  assert_int_equal(ss_test_run_cli(args, &out, &err), 0);
  assert_non_null(strstr(out, "iterations: 1 (max_iterations)"));
  free(out);
  free(err);
  ss_mask_em_result_free(&r);
  ss_matrix_free(&ch);
  ss_matrix_free(&fx);
  ss_matrix_free(&fm);
  free(cli);
  free_synth(&s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(mstep_by_hand),
      cmocka_unit_test(estep_cost_by_hand),
      cmocka_unit_test(penalty_by_hand),
      cmocka_unit_test(deletion_by_hand),
      cmocka_unit_test(mask_pattern_start),
      cmocka_unit_test(ari_helpers),
      cmocka_unit_test(recovers_gaussian_clusters),
      cmocka_unit_test(deterministic_across_threads),
      cmocka_unit_test(constant_and_never_masked_features),
      cmocka_unit_test(cli_rejects_malformed_input),
      cmocka_unit_test(cli_round_trip),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
