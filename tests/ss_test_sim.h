/* ss_test_sim.h — simulated recordings for the tests that need one (front end, sort, live): the
 * probe loaded and the simulation written into the test's temporary directory in one call, and the
 * source spec of a simulated flat binary file. Linked by the tests that list it (DEPS simulate). */
#ifndef SS_TEST_SIM_H
#define SS_TEST_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "tools/simulate.h"
#include "io/source.h"
#include "params/probe.h"

/* The easy preset (SS_SIM_PRESET_EASY: the short tests' recordings, unchanged when the defaults
 * move) with the three fields every test sets. */
ss_sim_config ss_test_sim_config(double duration_s, double rate_hz, uint64_t seed);
/* The sort tests' recording: n_units units of similar SNR (spread SS_TEST_SIM_SNR_SPREAD around
 * median_snr) firing at SS_TEST_SIM_MIN_HZ..SS_TEST_SIM_MAX_HZ, at the simulator's default sampling
 * rate, otherwise the easy preset. */
#define SS_TEST_SIM_SNR_SPREAD 2.0
#define SS_TEST_SIM_MIN_HZ 5.0
#define SS_TEST_SIM_MAX_HZ 15.0
ss_sim_config ss_test_sim_units(double duration_s, int n_units, double median_snr, uint64_t seed);

/* Load probe_path (adjacency radius radius_um) into *probe (NULL: loaded for the simulation and
 * freed), write the simulation c as `name` in the temporary directory (ss_sim_write's format and
 * naming), its path in path[len]. 0, or -1 after printing the error, nothing kept: for CMocka group
 * setups. */
int ss_test_simulate(const char *probe_path, double radius_um, const ss_sim_config *c, ss_sim_format format,
                     const char *name, char *path, size_t len, ss_probe *probe);

/* The source spec of a flat binary file written by the simulator with config c and n_channels. */
ss_source_spec ss_test_binary_spec(const char *path, const ss_sim_config *c, int n_channels);

#endif
