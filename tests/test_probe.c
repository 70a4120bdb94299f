/* test_probe.c — shipped probes, adjacency by radius and by list, and every bad-probe message. */
#include <math.h>
#include <string.h>

#include "build_config.h"
#include "params/probe.h"
#include "ss_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

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
  load_ok(PROBES "tetrode.json", 40.0, &p);
  assert_int_equal(p.n, 4);
  for (int i = 0; i < 4; i++) assert_int_equal(ss_probe_degree(&p, i), 3);
  assert_string_equal(p.name, "tetrode");
  ss_probe_free(&p);
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  const char *simple = "{\"name\": \"t\", \"channels\": [0, 1, 2, 3], \"positions\": [[0,0],[20,0],[0,20],[20,20]],"
                       " \"adjacency\": [[0,1],[0,2],[0,3],[1,2],[1,3],[2,3]]}";
  assert_int_equal(ss_probe_load_json(&ctx, simple, "t.json", 1.0, &p), SS_OK); /* the list wins over any radius */
  for (int i = 0; i < 4; i++) assert_int_equal(ss_probe_degree(&p, i), 3);
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

static void assert_same_probe(const ss_probe *a, const ss_probe *b) {
  assert_int_equal(a->n, b->n);
  assert_int_equal(a->n_probes, b->n_probes);
  assert_string_equal(a->name, b->name);
  for (int i = 0; i < a->n; i++) {
    assert_int_equal(a->channel[i], b->channel[i]);
    assert_true(a->x[i] == b->x[i] && a->y[i] == b->y[i]);
    assert_int_equal(a->shank[i], b->shank[i]);
    assert_int_equal(a->shape[i], b->shape[i]);
    assert_true(a->shape_a[i] == b->shape_a[i] && a->shape_b[i] == b->shape_b[i]);
    for (int k = 0; k < 4; k++) assert_true(a->axes[4 * i + k] == b->axes[4 * i + k]);
    assert_string_equal(a->contact_id[i], b->contact_id[i]);
    assert_string_equal(a->shank_id[i], b->shank_id[i]);
    assert_int_equal(ss_probe_degree(a, i), ss_probe_degree(b, i));
  }
}

/* Written exactly as probeinterface's write_probeinterface lays a two-probe group out (key order of
 * Probe.to_dict); the second probe has two shanks and permuted wiring. */
static const char pi_group[] =
    "{\n    \"specification\": \"probeinterface\",\n    \"version\": \"0.3.2\",\n    \"probes\": [\n"
    "        {\"ndim\": 2, \"si_units\": \"um\", \"annotations\": {\"name\": \"A\", \"manufacturer\": \"x\"},\n"
    "         \"contact_annotations\": {},\n"
    "         \"contact_positions\": [[0.0, 0.0], [0.0, 20.0]],\n"
    "         \"contact_plane_axes\": [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]],\n"
    "         \"contact_shapes\": [\"circle\", \"circle\"],\n"
    "         \"contact_shape_params\": [{\"radius\": 6.0}, {\"radius\": 6.0}],\n"
    "         \"device_channel_indices\": [5, 4],\n"
    "         \"contact_ids\": [\"a0\", \"a1\"]},\n"
    "        {\"ndim\": 2, \"si_units\": \"mm\", \"annotations\": {\"name\": \"B\"},\n"
    "         \"contact_annotations\": {\"impedance\": [1, 2, 3, 4]},\n"
    "         \"contact_positions\": [[0.0, 0.0], [0.0, 0.02], [0.2, 0.0], [0.2, 0.02]],\n"
    "         \"contact_plane_axes\": [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]],"
    " [[1.0, 0.0], [0.0, 1.0]]],\n"
    "         \"contact_shapes\": [\"square\", \"square\", \"rect\", \"rect\"],\n"
    "         \"contact_shape_params\": [{\"width\": 0.01}, {\"width\": 0.01}, {\"width\": 0.01, \"height\": 0.02},"
    " {\"width\": 0.01, \"height\": 0.02}],\n"
    "         \"probe_planar_contour\": [[-0.05, 0.1], [0.25, 0.1], [0.25, -0.1]],\n"
    "         \"device_channel_indices\": [2, 0, 3, 1],\n"
    "         \"contact_ids\": [\"b0\", \"b1\", \"b2\", \"b3\"],\n"
    "         \"shank_ids\": [\"1\", \"1\", \"0\", \"0\"]}\n    ]\n}\n";

static void probeinterface_multi_shank_permuted(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  assert_int_equal(ss_probe_load_json(&ctx, pi_group, "group.json", 30.0, &p), SS_OK);
  assert_int_equal(p.n, 6);
  assert_int_equal(p.n_probes, 2);
  assert_string_equal(p.name, "A");
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 6), SS_OK);
  /* channel → position through device_channel_indices, mm → µm */
  static const double want_x[6] = {0, 200, 0, 200, 0, 0}, want_y[6] = {20, 20, 0, 0, 20, 0};
  for (int c = 0; c < 6; c++) {
    int i = ss_probe_contact_of_channel(&p, c);
    assert_true(i >= 0);
    assert_true(fabs(p.x[i] - want_x[c]) < 1e-9 && fabs(p.y[i] - want_y[c]) < 1e-9);
  }
  /* probe A is shank 0; probe B's shanks "1" and "0" are 1 and 2: never adjacent across */
  int c0 = ss_probe_contact_of_channel(&p, 0), c1 = ss_probe_contact_of_channel(&p, 1);
  int c2 = ss_probe_contact_of_channel(&p, 2), c3 = ss_probe_contact_of_channel(&p, 3);
  assert_int_equal(p.shank[ss_probe_contact_of_channel(&p, 5)], 0);
  assert_int_equal(p.shank[c2], p.shank[c0]);
  assert_int_not_equal(p.shank[c2], p.shank[c3]);
  assert_int_equal(ss_probe_degree(&p, c0), 1);
  assert_int_equal(p.adj[p.adj_start[c0]], c2);
  assert_int_equal(p.adj[p.adj_start[c1]], c3);
  assert_int_equal(p.shape[c3], SS_PROBE_RECT);
  assert_true(fabs(p.shape_b[c3] - 20.0) < 1e-9);
  /* written and read back: the same probe, and the same text again */
  char *text = NULL, *again = NULL;
  assert_int_equal(ss_probe_to_probeinterface(&ctx, &p, &text), SS_OK);
  ss_probe q;
  assert_int_equal(ss_probe_load_json(&ctx, text, "group.json", 30.0, &q), SS_OK);
  assert_same_probe(&p, &q);
  assert_int_equal(ss_probe_to_probeinterface(&ctx, &q, &again), SS_OK);
  assert_string_equal(text, again);
  assert_non_null(strstr(text, "\"impedance\""));
  assert_non_null(strstr(text, "\"probe_planar_contour\""));
  free(text);
  free(again);
  ss_probe_free(&q);
  ss_probe_free(&p);
}

static void round_trip(void **state) {
  (void)state;
  const char *files[] = {PROBES "two_column_32.json", PROBES "grid_4x8.json", PROBES "tetrode.json"};
  for (int f = 0; f < 3; f++) {
    ss_ctx ctx;
    ss_test_ctx(&ctx);
    ss_probe p, q;
    load_ok(files[f], 40.0, &p);
    char path[] = "/tmp/ss_probe_rtXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ss_probe_write_probeinterface(&ctx, &p, path), SS_OK);
    load_ok(path, 40.0, &q);
    assert_same_probe(&p, &q);
    ss_probe_free(&q);
    ss_probe_free(&p);
    remove(path);
  }
}

static void unwired_contacts(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  const char *json = "{\"probes\": [{\"ndim\": 2, \"contact_positions\": [[0,0],[0,20],[0,40],[0,60]],"
                     " \"device_channel_indices\": [1, -1, 0, 2]}]}";
  assert_int_equal(ss_probe_load_json(&ctx, json, "pi.json", 25.0, &p), SS_OK);
  assert_int_equal(p.n, 4);
  assert_int_equal(ss_probe_n_wired(&p), 3);
  assert_int_equal(p.connected[1], 0);
  assert_int_equal(ss_probe_degree(&p, 1), 0); /* unwired: no neighbours, and nobody's neighbour */
  assert_int_equal(ss_probe_degree(&p, 0), 0);
  assert_int_equal(ss_probe_degree(&p, 2), 1);
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 3), SS_OK);
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 4), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx),
                      "probe pi.json: has 3 wired channels (4 contacts, 1 unwired), the recording 4");
  ss_probe_free(&p);
}

static void three_d_refused(void **state) {
  (void)state;
  expect_error("{\"probes\": [{\"ndim\": 3, \"contact_positions\": [[0,0,0]], \"device_channel_indices\": [0]}]}", 40,
               "bad.json: probes[0].ndim: 3 (a 3-D probe): only planar probes (ndim 2) are supported");
}

static const char prb_text[] = "# two tetrodes\n"
                               "total_nb_channels = 8\n"
                               "channel_groups = {\n"
                               "    0: {'channels': [0, 1, 2, 3],\n"
                               "        'graph': [(0, 1), (1, 2), (2, 3)],\n"
                               "        'geometry': {0: (0, 0), 1: (0, 20), 2: (0, 40), 3: (0, 60.5)}},\n"
                               "    1: {\"channels\": [7, 6, 5, 4],\n"
                               "        \"graph\": [[4, 5], [6, 7],],\n"
                               "        \"geometry\": {4: [100, 0], 5: [100, 20], 6: [100, 40], 7: [100, -6e1]}},\n"
                               "}\n";

static void prb_two_groups(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  assert_int_equal(ss_probe_load_prb(&ctx, prb_text, "two.prb", 1.0, &p), SS_OK);
  assert_int_equal(p.n, 8);
  assert_int_equal(p.n_probes, 2);
  int c7 = ss_probe_contact_of_channel(&p, 7), c1 = ss_probe_contact_of_channel(&p, 1);
  assert_int_equal(c7, 4);
  assert_true(p.x[c7] == 100 && p.y[c7] == -60);
  assert_true(p.y[ss_probe_contact_of_channel(&p, 3)] == 60.5);
  assert_int_equal(p.shank[c7], 1);
  assert_int_equal(p.shank[c1], 0);
  assert_int_equal(ss_probe_degree(&p, c1), 2); /* graph edges, not the 1 µm radius */
  assert_int_equal(ss_probe_degree(&p, ss_probe_contact_of_channel(&p, 4)), 1);
  assert_int_equal(ss_probe_check_recording(&ctx, &p, 8), SS_OK);
  ss_probe_free(&p);
}

static void prb_bad_token(void **state) {
  (void)state;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_probe p;
  const char *bad = "channel_groups = {\n  0: {'channels': list(range(4)),\n";
  assert_int_equal(ss_probe_load_prb(&ctx, bad, "bad.prb", 40, &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "bad.prb: line 2: unexpected token 'list(range(4)),' (a .prb file may "
                                              "hold only dicts, lists, tuples, numbers and strings)");
  assert_int_equal(ss_probe_load_prb(&ctx, "channel_groups = {0: {'channels': [0]", "cut.prb", 40, &p), SS_ERR_INPUT);
  assert_string_equal(ss_error_message(&ctx), "cut.prb: line 1: unexpected end of file");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(two_column_32),
      cmocka_unit_test(grid_and_tetrode),
      cmocka_unit_test(probeinterface_shanks_and_dead_channels),
      cmocka_unit_test(bad_probes),
      cmocka_unit_test(recording_mismatch),
      cmocka_unit_test(from_positions),
      cmocka_unit_test(round_trip),
      cmocka_unit_test(probeinterface_multi_shank_permuted),
      cmocka_unit_test(unwired_contacts),
      cmocka_unit_test(three_d_refused),
      cmocka_unit_test(prb_two_groups),
      cmocka_unit_test(prb_bad_token),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
