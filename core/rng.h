/* rng.h — the project's one random-number generator: counter-based, so any draw can be computed
 * from (seed, purpose, stream, index) alone, identically on the CPU and in CUDA kernels, in any
 * execution order.
 *
 * Construction: key = mix(seed, purpose, stream) with SplitMix64's finaliser; draw i of that key is
 * splitmix64(key + (i + 1) * golden-ratio increment). This is SplitMix64 evaluated at an arbitrary
 * position, which passes BigCrush for sequential use and is cheap enough for every thread. */
#ifndef SS_RNG_H
#define SS_RNG_H

#include <stddef.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define SS_HD static inline __host__ __device__
#else
#define SS_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Purposes keep the streams of different uses of one seed independent. Append; never renumber. */
typedef enum {
  SS_RNG_GENERIC = 0,
  SS_RNG_MASK_EM_START = 1,
  SS_RNG_MASK_EM_SPLIT = 2,
  SS_RNG_KMEANS_INIT = 3,
  SS_RNG_KMEANS_RESEED = 4,
  SS_RNG_SIMULATE = 5,
  SS_RNG_KNN_GENERATE = 6,
  SS_RNG_PCA_SUBSET = 7,
  SS_RNG_TEST = 8
} ss_rng_purpose;

#define SS_RNG_GOLDEN 0x9E3779B97F4A7C15ull

SS_HD uint64_t ss_rng_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

SS_HD uint64_t ss_rng_key(uint64_t seed, uint32_t purpose, uint64_t stream) {
  uint64_t k = ss_rng_mix64(seed + SS_RNG_GOLDEN);
  k = ss_rng_mix64(k ^ ((uint64_t)purpose * 0xD1B54A32D192ED03ull));
  return ss_rng_mix64(k ^ (stream * 0x8CB92BA72F3D8DD7ull + SS_RNG_GOLDEN));
}

/* Draw number `index` of the stream `key`. */
SS_HD uint64_t ss_rng_u64(uint64_t key, uint64_t index) { return ss_rng_mix64(key + (index + 1) * SS_RNG_GOLDEN); }

/* Uniform double in [0, 1) with 53 random bits. */
SS_HD double ss_rng_uniform(uint64_t key, uint64_t index) {
  return (double)(ss_rng_u64(key, index) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n) for n > 0 (multiply-shift; bias below 2^-32 for n < 2^32). */
SS_HD uint64_t ss_rng_below(uint64_t key, uint64_t index, uint64_t n) {
  uint64_t hi = ss_rng_u64(key, index) >> 32;
  return (hi * n) >> 32;
}

/* A sequential cursor over one stream, for host code that just wants "the next number". */
typedef struct {
  uint64_t key;
  uint64_t index;
} ss_rng;

SS_HD ss_rng ss_rng_make(uint64_t seed, uint32_t purpose, uint64_t stream) {
  ss_rng r;
  r.key = ss_rng_key(seed, purpose, stream);
  r.index = 0;
  return r;
}
SS_HD uint64_t ss_rng_next_u64(ss_rng *r) { return ss_rng_u64(r->key, r->index++); }
SS_HD double ss_rng_next_uniform(ss_rng *r) { return ss_rng_uniform(r->key, r->index++); }
SS_HD uint64_t ss_rng_next_below(ss_rng *r, uint64_t n) { return ss_rng_below(r->key, r->index++, n); }

/* Standard normal by Box–Muller from two draws (uses 2 indices). */
double ss_rng_next_normal(ss_rng *r);
/* In-place Fisher–Yates shuffle of idx[0..n). */
void ss_rng_shuffle(ss_rng *r, int64_t *idx, size_t n);

#ifdef __cplusplus
}
#endif
#endif
