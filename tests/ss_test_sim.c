/* ss_test_sim.c — the simulated-recording fixture of tests/ss_test_sim.h. */
#include "ss_test_sim.h"

#include <stdio.h>

#include "ss_test.h"

ss_sim_config ss_test_sim_config(double duration_s, double rate_hz, uint64_t seed) {
  ss_sim_config c;
  ss_sim_config_preset(&c, SS_SIM_PRESET_EASY);
  c.duration_s = duration_s;
  c.rate_hz = rate_hz;
  c.seed = seed;
  return c;
}

ss_sim_config ss_test_sim_units(double duration_s, int n_units, double median_snr, uint64_t seed) {
  ss_sim_config c;
  ss_sim_config_preset(&c, SS_SIM_PRESET_EASY);
  c.duration_s = duration_s;
  c.n_units = n_units;
  c.median_snr = median_snr;
  c.snr_spread = SS_TEST_SIM_SNR_SPREAD;
  c.min_rate_hz = SS_TEST_SIM_MIN_HZ;
  c.max_rate_hz = SS_TEST_SIM_MAX_HZ;
  c.seed = seed;
  return c;
}

int ss_test_simulate(const char *probe_path, double radius_um, const ss_sim_config *c, ss_sim_format format,
                     const char *name, char *path, size_t len, ss_probe *probe) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe own;
  ss_probe *p = probe ? probe : &own;
  ss_status st = ss_probe_load_file(&ctx, probe_path, radius_um, p);
  if (st == SS_OK) {
    ss_test_path(path, len, name);
    st = ss_sim_write(&ctx, c, p, path, format, 0, NULL);
    if (!probe || st != SS_OK) ss_probe_free(p);
  }
  if (st != SS_OK) fprintf(stderr, "%s\n", ss_error_message(&ctx));
  return st == SS_OK ? 0 : -1;
}

ss_source_spec ss_test_binary_spec(const char *path, const ss_sim_config *c, int n_channels) {
  ss_source_spec spec = {0};
  spec.path = path;
  spec.format = SS_FORMAT_BINARY;
  spec.n_channels = n_channels;
  spec.rate_hz = c->rate_hz;
  spec.uv_per_step = c->conversion_uv;
  return spec;
}
