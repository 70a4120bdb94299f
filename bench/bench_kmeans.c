/* bench_kmeans.c — k-means benchmark: the published case (the 63,504 overlapping 5 × 5 × 3 patches
 * of a 256 × 256 RGB photograph, K = 80, exactly 14 iterations) and a large case
 * (N = 10^6, d = 96, K = 256, 14 iterations), on the GPU (data resident on the device: the timed
 * region is the 14 iterations plus the final assignment, the upload of the starting centroids and
 * the download of labels and centroids) and on the CPU; the peers (bench/kmeans_peers.py: torch on
 * the same GPU, scikit-learn on the CPU cores) run in the same process tree from the same starting
 * centroids, which this program writes as .npy files. Writes the benchmark JSON document. Every
 * number it reports is measured against the GPU run, so a build without CUDA runs nothing and
 * exits 77 (skipped).
 *
 * usage: bench_kmeans --image IMAGE.npy --workdir DIR [--peers CMD] [--large-n N] [-o JSON] */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "io/npy.h"
#include "stages/kmeans/kmeans.h"
#include "core/log.h"
#include "core/rng.h"

#define ITERATIONS 14
#define PUBLISHED_K 80
#define PUBLISHED_PATCH 5
#define LARGE_N 1000000
#define LARGE_D 96
#define LARGE_K 256
#define LARGE_CENTRES 300 /* blobs in the synthetic large case */
#define LARGE_SPREAD 10.0
#define SEED 2024
#define GPU_WARMUP 3
#define GPU_REPEATS_SMALL 21
#define GPU_REPEATS_LARGE 7
#define CPU_LARGE_ITERATIONS 2 /* the CPU reference on the large case: a short run, reported per pass */
#define PATH_MAX_LEN 4096
#define MS 1e3

typedef struct {
  ss_ctx *ctx;
  ss_kmeans_gpu *g;
  const float *init_c;
  ss_kmeans_result *res;
  int32_t *scratch; /* labels of the assignment-only runs */
} gpu_run;

static ss_status gpu_run_fn(void *arg) {
  gpu_run *r = arg;
  return ss_kmeans_gpu_lloyd(r->ctx, r->g, r->init_c, r->res);
}

/* One assignment pass alone (with the centroid upload and the label download): the share of the
 * fused assignment kernel in a pass. */
static ss_status gpu_assign_fn(void *arg) {
  gpu_run *r = arg;
  return ss_kmeans_gpu_assign(r->ctx, r->g, r->init_c, r->scratch, NULL);
}

static ss_status write_npy(ss_ctx *ctx, const char *dir, const char *name, const float *x, int64_t rows, int64_t cols) {
  char path[PATH_MAX_LEN];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  ss_array a = {.dtype = SS_DT_F32, .ndim = 2, .shape = {rows, cols}, .data = (void *)x};
  return ss_npy_write(ctx, path, &a);
}

typedef struct {
  const char *name;
  double gpu_ms, gpu_assign_ms, gpu_fit_ms, cpu_ms_per_pass, inertia_gpu, inertia_cpu;
  ss_kmeans_pass_profile prof; /* per-kernel event times of one run launched kernel by kernel */
  int64_t cpu_passes;
  int labels_identical;
} case_result;

/* One case: k-means++ on the GPU, the timed GPU Lloyd runs, a CPU run from the same start. */
static ss_status run_case(ss_ctx *ctx, const ss_backend *gpu, const ss_backend *cpu, const char *workdir,
                          const char *name, const float *x, int64_t n, int64_t d, int64_t k, int repeats,
                          int64_t cpu_iterations, case_result *cr) {
  memset(cr, 0, sizeof(*cr));
  cr->name = name;
  ss_kmeans_opts o = {.k = k, .init = SS_KMEANS_INIT_PP, .max_iterations = ITERATIONS, .seed = SEED};
  ss_kmeans_problem pb;
  SS_TRY(ss_kmeans_prepare(ctx, cpu, x, n, d, &o, &pb));
  pb.tol_count = -1; /* no convergence test: exactly ITERATIONS updates, as the published case */
  double t0 = ss_now();
  ss_kmeans_gpu *g = NULL;
  float *init_c = malloc(sizeof(float) * (size_t)(k * d)), *init = malloc(sizeof(float) * (size_t)(k * d));
  ss_kmeans_result rg = {0}, rc = {0};
  ss_status st = ss_kmeans_gpu_open(ctx, gpu, &pb, &g);
  if (st == SS_OK) st = ss_kmeans_gpu_pp(ctx, g, SEED, init_c);
  if (st == SS_OK) st = ss_kmeans_result_alloc(ctx, &pb, &rg);
  if (st == SS_OK) st = ss_kmeans_gpu_lloyd(ctx, g, init_c, &rg);
  cr->gpu_fit_ms = (ss_now() - t0) * MS; /* first run: upload, k-means++, graph capture, 14 passes */
  if (st == SS_OK) {
    gpu_run r = {ctx, g, init_c, &rg, malloc(sizeof(int32_t) * (size_t)n)};
    cr->gpu_ms = ss_bench_median_s(gpu_run_fn, &r, GPU_WARMUP, repeats, &st) * MS;
    cr->inertia_gpu = rg.final_inertia;
    if (st == SS_OK) cr->gpu_assign_ms = ss_bench_median_s(gpu_assign_fn, &r, GPU_WARMUP, repeats, &st) * MS;
    if (st == SS_OK) st = ss_kmeans_gpu_profile(ctx, g, init_c, &cr->prof);
    free(r.scratch);
  }
  if (st == SS_OK) { /* the starting centroids in data coordinates, for the peers */
    for (int64_t e = 0; e < k * d; e++) init[e] = init_c[e] + pb.shift[e % d];
    char nm[256];
    snprintf(nm, sizeof(nm), "%s_x.npy", name);
    st = write_npy(ctx, workdir, nm, x, n, d);
    snprintf(nm, sizeof(nm), "%s_init.npy", name);
    if (st == SS_OK) st = write_npy(ctx, workdir, nm, init, k, d);
  }
  if (st == SS_OK) {
    pb.max_iterations = cpu_iterations;
    st = ss_kmeans_result_alloc(ctx, &pb, &rc);
    double t1 = ss_now();
    if (st == SS_OK) st = ss_kmeans_cpu_lloyd(ctx, cpu, &pb, init_c, &rc);
    cr->cpu_passes = cpu_iterations + 1;
    cr->cpu_ms_per_pass = (ss_now() - t1) * MS / (double)cr->cpu_passes;
    cr->inertia_cpu = rc.final_inertia;
    if (st == SS_OK && cpu_iterations == ITERATIONS)
      cr->labels_identical = memcmp(rc.labels, rg.labels, sizeof(int32_t) * (size_t)n) == 0;
    else if (st == SS_OK) /* a shorter CPU run: compare its inertia history with the GPU's */ cr->labels_identical = -1;
  }
  ss_kmeans_result_free(&rg);
  ss_kmeans_result_free(&rc);
  ss_kmeans_gpu_close(g);
  ss_kmeans_problem_free(&pb);
  free(init_c);
  free(init);
  return st;
}

static ss_status published_points(ss_ctx *ctx, const char *image, float **x, int64_t *n, int64_t *d) {
  float *img;
  int64_t h, w, c;
  SS_TRY(ss_kmeans_image_read(ctx, image, &img, &h, &w, &c));
  ss_status st = ss_kmeans_patches(ctx, img, h, w, c, PUBLISHED_PATCH, x, n, d);
  free(img);
  return st;
}

static float *large_points(int64_t n) {
  ss_rng r = ss_rng_make(SEED, SS_RNG_TEST, 0);
  float *c = malloc(sizeof(float) * LARGE_CENTRES * LARGE_D), *x = malloc(sizeof(float) * (size_t)(n * LARGE_D));
  if (!c || !x) return free(c), free(x), NULL;
  for (int64_t e = 0; e < LARGE_CENTRES * LARGE_D; e++) c[e] = (float)(LARGE_SPREAD * ss_rng_next_normal(&r));
  for (int64_t i = 0; i < n; i++) {
    int64_t b = (int64_t)ss_rng_next_below(&r, LARGE_CENTRES);
    for (int64_t j = 0; j < LARGE_D; j++) x[i * LARGE_D + j] = c[b * LARGE_D + j] + (float)ss_rng_next_normal(&r);
  }
  free(c);
  return x;
}

static cJSON *read_json(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)len + 1);
  size_t got = fread(buf, 1, (size_t)len, f);
  buf[got] = 0;
  fclose(f);
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  return j;
}

static double peer_number(const cJSON *peers, const char *c, const char *key) {
  const cJSON *o = cJSON_GetObjectItemCaseSensitive(peers, c);
  const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
  return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void add_case(ss_bench_doc *doc, const case_result *cr, int64_t n, int64_t d, int64_t k, const cJSON *peers) {
  cJSON *c = ss_bench_case(doc, cr->name);
  cJSON_AddNumberToObject(c, "n", (double)n);
  cJSON_AddNumberToObject(c, "d", (double)d);
  cJSON_AddNumberToObject(c, "k", (double)k);
  cJSON_AddNumberToObject(c, "iterations", ITERATIONS);
  cJSON_AddNumberToObject(c, "gpu_ms", cr->gpu_ms);
  cJSON_AddNumberToObject(c, "gpu_first_fit_ms", cr->gpu_fit_ms);
  cJSON_AddNumberToObject(c, "gpu_one_assignment_call_ms", cr->gpu_assign_ms);
  cJSON *pp = cJSON_AddObjectToObject(c, "gpu_pass_breakdown_ms");
  cJSON_AddStringToObject(pp, "method", "one run launched kernel by kernel between CUDA events; mean per pass");
  cJSON_AddNumberToObject(pp, "passes", (double)cr->prof.passes);
  cJSON_AddBoolToObject(pp, "fused_assign_and_sums", cr->prof.fused);
  cJSON_AddNumberToObject(pp, "assign_blocks", (double)cr->prof.assign_blocks);
  cJSON_AddNumberToObject(pp, "partial_rows", (double)cr->prof.partial_rows);
  cJSON_AddNumberToObject(pp, "assign", cr->prof.assign_ms);
  cJSON_AddNumberToObject(pp, "partial_sums", cr->prof.partial_ms);
  cJSON_AddNumberToObject(pp, "update", cr->prof.update_ms);
  cJSON_AddNumberToObject(pp, "sum", cr->prof.assign_ms + cr->prof.partial_ms + cr->prof.update_ms);
  cJSON_AddNumberToObject(c, "gpu_inertia", cr->inertia_gpu);
  cJSON_AddNumberToObject(c, "cpu_passes_run", (double)cr->cpu_passes);
  cJSON_AddNumberToObject(c, "cpu_ms_per_pass", cr->cpu_ms_per_pass);
  cJSON_AddNumberToObject(c, "cpu_ms_14_iterations_est", cr->cpu_ms_per_pass * (ITERATIONS + 1));
  cJSON_AddNumberToObject(c, "cpu_inertia", cr->inertia_cpu);
  if (cr->labels_identical >= 0) cJSON_AddBoolToObject(c, "cpu_gpu_labels_identical", cr->labels_identical);
  double torch = peer_number(peers, cr->name, "torch_ms"), sk = peer_number(peers, cr->name, "sklearn_ms");
  double tin = peer_number(peers, cr->name, "torch_inertia"), skin = peer_number(peers, cr->name, "sklearn_inertia");
  cJSON_AddNumberToObject(c, "torch_ms", torch);
  cJSON_AddNumberToObject(c, "torch_inertia", tin);
  cJSON_AddNumberToObject(c, "sklearn_ms", sk);
  cJSON_AddNumberToObject(c, "sklearn_inertia", skin);
  cJSON_AddNumberToObject(c, "sklearn_n_iter", peer_number(peers, cr->name, "sklearn_n_iter"));
  cJSON_AddNumberToObject(c, "speedup_vs_torch", torch / cr->gpu_ms);
  cJSON_AddNumberToObject(c, "speedup_vs_sklearn", sk / cr->gpu_ms);
  cJSON_AddNumberToObject(c, "inertia_rel_diff_vs_sklearn", fabs(cr->inertia_gpu - skin) / skin);
  cJSON_AddNumberToObject(c, "inertia_rel_diff_vs_torch", fabs(cr->inertia_gpu - tin) / tin);
}

int main(int argc, char **argv) {
  const char *image = NULL, *workdir = NULL, *peers_cmd = NULL, *out = "bench/results/kmeans.json";
  int64_t large_n = LARGE_N;
  static const struct option longopts[] = {{"image", required_argument, NULL, 'i'},
                                           {"workdir", required_argument, NULL, 'w'},
                                           {"peers", required_argument, NULL, 'p'},
                                           {"large-n", required_argument, NULL, 'n'},
                                           {"output", required_argument, NULL, 'o'},
                                           {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "o:", longopts, NULL)) != -1) {
    if (opt == 'i') image = optarg;
    else if (opt == 'w') workdir = optarg;
    else if (opt == 'p') peers_cmd = optarg;
    else if (opt == 'n') large_n = atoll(optarg);
    else if (opt == 'o') out = optarg;
    else return 2;
  }
  if (!image || !workdir || large_n < LARGE_K) {
    fprintf(stderr, "usage: bench_kmeans --image IMAGE.npy --workdir DIR [--peers CMD] [--large-n N] [-o JSON]\n");
    return 2;
  }
  if (!ss_backend_cuda_built()) {
    fprintf(stderr, "bench_kmeans: skipped: built without the CUDA backend\n");
    return 77;
  }
  ss_ctx ctx;
  ss_ctx_init(&ctx);
  ss_backend gpu, cpu;
  ss_status st = ss_backend_open(&ctx, SS_DEVICE_CUDA, 0, 0, &gpu);
  if (st == SS_OK) st = ss_backend_open(&ctx, SS_DEVICE_CPU, 0, 0, &cpu);
  if (st != SS_OK) {
    fprintf(stderr, "bench_kmeans: %s\n", ss_error_message(&ctx));
    return 3;
  }
  float *px = NULL, *lx = NULL;
  int64_t pn = 0, pd = 0;
  case_result pub, large;
  st = published_points(&ctx, image, &px, &pn, &pd);
  if (st == SS_OK)
    st = run_case(&ctx, &gpu, &cpu, workdir, "published", px, pn, pd, PUBLISHED_K, GPU_REPEATS_SMALL, ITERATIONS, &pub);
  if (st == SS_OK && !(lx = large_points(large_n))) st = ss_fail(&ctx, SS_ERR_NOMEM, "large case: out of memory");
  if (st == SS_OK)
    st = run_case(&ctx, &gpu, &cpu, workdir, "large", lx, large_n, LARGE_D, LARGE_K, GPU_REPEATS_LARGE,
                  CPU_LARGE_ITERATIONS, &large);
  free(px);
  free(lx);
  if (st != SS_OK) {
    fprintf(stderr, "bench_kmeans: %s\n", ss_error_message(&ctx));
    return 3;
  }
  cJSON *peers = NULL;
  if (peers_cmd) {
    char cmd[2 * PATH_MAX_LEN], path[PATH_MAX_LEN];
    snprintf(path, sizeof(path), "%s/peers.json", workdir);
    snprintf(cmd, sizeof(cmd), "%s --workdir '%s' --iterations %d -o '%s'", peers_cmd, workdir, ITERATIONS, path);
    if (system(cmd) != 0) fprintf(stderr, "bench_kmeans: the peers failed: %s\n", cmd);
    peers = read_json(path);
  }
  char device[512];
  ss_bench_device_string(&gpu, device, sizeof(device));
  ss_bench_doc doc;
  st = ss_bench_doc_init(&ctx, &doc, "kmeans", device);
  if (st == SS_OK) {
    add_case(&doc, &pub, pn, pd, PUBLISHED_K, peers);
    add_case(&doc, &large, large_n, LARGE_D, LARGE_K, peers);
    const cJSON *img = peers ? cJSON_GetObjectItemCaseSensitive(peers, "image") : NULL;
    cJSON_AddStringToObject(doc.root, "published_image",
                            cJSON_IsString(img) ? img->valuestring : "see bench/run_kmeans.sh");
    const cJSON *ver = peers ? cJSON_GetObjectItemCaseSensitive(peers, "versions") : NULL;
    if (ver) cJSON_AddItemToObject(doc.root, "peer_versions", cJSON_Duplicate(ver, 1));
    ss_bench_summary_number(&doc, "published_case_ms", pub.gpu_ms);
    ss_bench_summary_number(&doc, "speedup_vs_torch_large", peer_number(peers, "large", "torch_ms") / large.gpu_ms);
    double rel_p = fabs(pub.inertia_gpu - peer_number(peers, "published", "sklearn_inertia")) /
                   peer_number(peers, "published", "sklearn_inertia");
    double rel_l = fabs(large.inertia_gpu - peer_number(peers, "large", "sklearn_inertia")) /
                   peer_number(peers, "large", "sklearn_inertia");
    ss_bench_summary_number(&doc, "inertia_rel_diff_vs_sklearn", fmax(rel_p, rel_l));
    ss_bench_summary_number(&doc, "published_case_torch_ms", peer_number(peers, "published", "torch_ms"));
    ss_bench_summary_number(&doc, "published_case_sklearn_ms", peer_number(peers, "published", "sklearn_ms"));
    ss_bench_summary_number(&doc, "large_case_ms", large.gpu_ms);
    st = ss_bench_doc_write(&ctx, &doc, out);
  }
  printf("published case: gpu %.3f ms (torch %.3f ms, sklearn %.1f ms), cpu %.1f ms, labels cpu == gpu: %d\n",
         pub.gpu_ms, peer_number(peers, "published", "torch_ms"), peer_number(peers, "published", "sklearn_ms"),
         pub.cpu_ms_per_pass * (double)pub.cpu_passes, pub.labels_identical);
  printf("published pass: assign %.4f, partial %.4f, update %.4f ms (fused %d); large pass: %.4f, %.4f, %.4f ms (fused "
         "%d)\n",
         pub.prof.assign_ms, pub.prof.partial_ms, pub.prof.update_ms, pub.prof.fused, large.prof.assign_ms,
         large.prof.partial_ms, large.prof.update_ms, large.prof.fused);
  printf("large case: gpu %.3f ms (torch %.3f ms, sklearn %.1f ms)\n", large.gpu_ms,
         peer_number(peers, "large", "torch_ms"), peer_number(peers, "large", "sklearn_ms"));
  cJSON_Delete(peers);
  ss_backend_close(&gpu);
  ss_backend_close(&cpu);
  if (st != SS_OK) {
    fprintf(stderr, "bench_kmeans: %s\n", ss_error_message(&ctx));
    return 3;
  }
  printf("wrote %s\n", out);
  return 0;
}
