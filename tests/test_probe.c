/* test_probe.c — shipped probes, adjacency by radius and by list, and every bad-probe message. */
#include <math.h>
#include <string.h>

#include "build_config.h"
#include "params/probe.h"
#include "ss_test.h"

#define PROBES SS_SOURCE_DIR "/params/probes/"

static void load_ok(const char *path, double radius, ss_probe *p) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_status st = ss_probe_load_file(&ctx, path, radius, p);
  if (st != SS_OK) fail_msg("%s", ss_error_message(&ctx));
}

static void two_column_32(void **state) {
  (void)state;
  ss_probe p;
  load_ok(PROBES "two_column_32.json", 40.0, &p);
  assert_int_equal(p.n, 32);
  /* 20 µm pitch per column, columns 20 µm apart and 10 µm staggered: with a 40 µm radius a contact
   * reaches 2 above and 2 below in its column and the 4 nearest of the other column */
  static const int expected[32] = {4, 5, 6, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8,
                                   8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7, 6, 5, 4};
  for (int i = 0; i < 32; i++) assert_int_equal(ss_probe_degree(&p, i), expected[i]);
  /* symmetric, sorted, no self loops */
  for (int i = 0; i < 32; i++)
    for (int k = p.adj_start[i]; k < p.adj_start[i + 1]; k++) {
      int j = p.adj[k];
      assert_int_not_equal(i, j);
      if (k > p.adj_start[i]) assert_true(p.adj[k - 1] < j);
      int back = 0;
      for (int m = p.adj_start[j]; m < p.adj_start[j + 1]; m++) back |= p.adj[m] == i;
      assert_true(back);
    }
  assert_true(p.y[3] == 30.0 && p.x[3] == 20.0);
  ss_probe_free(&p);
}

static void grid_and_tetrode(void **state) {
  (void)state;
  ss_probe p;
  load_ok(PROBES "grid_4x8.json", 40.0, &p);
  int hist[9] = {0};
  for (int i = 0; i < p.n; i++) hist[ss_probe_degree(&p, i)]++;
  assert_int_equal(hist[3], 4);  /* corners */
  assert_int_equal(hist[5], 16); /* edges */
  assert_int_equal(hist[8], 12); /* interior */
  ss_probe_free(&p);
  load_ok(PROBES "grid_4x8.json", 25.0, &p); /* 4-connectivity */
  assert_int_equal(ss_probe_degree(&p, 0), 2);
  assert_int_equal(ss_probe_degree(&p, 5), 4);
  ss_probe_free(&p);
  load_ok(PROBES "tetrode.json", 1.0, &p); /* explicit adjacency wins over any radius */
  assert_int_equal(p.n, 4);
  for (int i = 0; i < 4; i++) assert_int_equal(ss_probe_degree(&p, i), 3);
  assert_string_equal(p.name, "tetrode");
  ss_probe_free(&p);
}

static void probeinterface_shanks_and_dead_channels(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  const char *json = "{\"probes\": [{\"contact_positions\": [[0,0],[0,20],[0,40],[0,60]],"
                     " \"device_channel_indices\": [3, 2, -1, 0], \"shank_ids\": [\"0\",\"0\",\"1\",\"1\"]}]}";
  assert_int_equal(ss_probe_load_json(&ctx, json, "pi.json", 30.0, &p), SS_OK);
  assert_int_equal(p.connected[2], 0);
  assert_int_equal(ss_probe_degree(&p, 0), 1); /* (0,20) only: (0,40) is on the other shank */
  assert_int_equal(ss_probe_degree(&p, 1), 1);
  assert_int_equal(ss_probe_contact_of_channel(&p, 0), 3);
  ss_probe_free(&p);
}

static void expect_error(const char *json, double radius, const char *message) {
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  assert_int_equal(ss_probe_load_json(&ctx, json, "bad.json", radius, &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), message);
}

static void bad_probes(void **state) {
  (void)state;
  expect_error("{\"channels\": [0, 1, 1], \"positions\": [[0,0],[0,1],[0,2]]}", 40,
               "bad.json: duplicate channel 1 (contacts 1 and 2)");
  expect_error("{\"channels\": [0, -2], \"positions\": [[0,0],[0,1]]}", 40,
               "bad.json: contact 1: channel index -2 is negative");
  expect_error("{\"channels\": [0, 1], \"positions\": [[0,0],[0,null]]}", 40,
               "bad.json: positions[1][1]: expected a finite number, got null");
  expect_error("{\"channels\": [0, 1], \"positions\": [[0,0],[1e999,0]]}", 40,
               "bad.json: positions[1][0]: expected a finite number, got null");
  expect_error("{\"channels\": [0, 1], \"positions\": [[0,0]]}", 40,
               "bad.json: positions: has 1 entries, expected 2 (one per contact)");
  expect_error("{\"channels\": [0, 1], \"positions\": [[0,0],[0,1]], \"adjacency\": [[0, 5]]}", 40,
               "bad.json: adjacency[0]: channel 5 is not on the probe");
  expect_error("{\"channels\": [0, 1], \"positions\": [[0,0],[0,1]], \"adjacency\": [[1, 1]]}", 40,
               "bad.json: adjacency[0]: a channel cannot be adjacent to itself");
  expect_error("{\"channels\": [0, 1.5], \"positions\": [[0,0],[0,1]]}", 40,
               "bad.json: channels[1]: expected an integer, got 1.5");
  expect_error("{\"channels\": []}", 40, "bad.json: channels: 0 entries (expected 1 to 65536)");
  expect_error("{\"probes\": [{\"contact_positions\": [[0,0]], \"device_channel_indices\": [0, 1]}]}", 40,
               "bad.json: device_channel_indices: has 2 entries, expected 1 (one per contact)");
  expect_error("{\"something\": 1}", 40,
               "bad.json: neither a probeinterface file (\"probes\") nor a simple probe (\"channels\")");
  expect_error("{\"channels\": [0", 40, "bad.json: invalid JSON");
}

static void recording_mismatch(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  load_ok(PROBES "tetrode.json", 40, &p);
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 4), SS_OK);
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 3), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "probe tetrode: channel 3 is out of range for a recording of 3 channels");
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 8), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "probe tetrode: has 4 channels, the recording 8");
  ss_probe_free(&p);
}

static void from_positions(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  double x[3] = {0, 0, 0}, y[3] = {0, 30, 100};
  assert_int_equal(ss_probe_from_positions(&ctx, 3, x, y, 40, &p), SS_OK);
  assert_int_equal(ss_probe_degree(&p, 0), 1);
  assert_int_equal(ss_probe_degree(&p, 2), 0);
  ss_probe_free(&p);
  y[1] = NAN;
  assert_int_equal(ss_probe_from_positions(&ctx, 3, x, y, 40, &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "probe from positions: channel 1: position (0, nan) is not finite");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_column_32),
      cmocka_unit_test(grid_and_tetrode),
      cmocka_unit_test(probeinterface_shanks_and_dead_channels),
      cmocka_unit_test(bad_probes),
      cmocka_unit_test(recording_mismatch),
      cmocka_unit_test(from_positions),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
