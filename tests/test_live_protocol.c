/* test_live_protocol.c — live wire protocol v1 through `spikestream replay` and `live` (CPU): the stream
 * header checked against the model, raw streams behind --raw, loopback-only listening without a token,
 * the token exchange (refused and logged, then accepted) and the idle-input timeout. Network traffic
 * stays on 127.0.0.1. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/log.h"
#include "io/link.h"
#include "live_test_util.h"
#include "ss_test.h"

#define DURATION 4.0
#define SOURCE "--format binary --channels 32 --rate 30000 --uv-per-step 0.195"
#define TOKEN "correct-horse-battery-staple-42"

static live_fixture fx;
static int port;
static char token_file[LIVE_PATH_LEN], wrong_token_file[LIVE_PATH_LEN];

static const char *write_token(const char *name, const char *text, mode_t mode, char *path) {
  ss_test_path(path, LIVE_PATH_LEN, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  assert_int_equal(chmod(path, mode), 0);
  return path;
}

static int setup(void **state) {
  (void)state;
  port = 20000 + (int)(((unsigned)time(NULL) ^ ((unsigned)getpid() << 7)) % 30000u);
  write_token("token", TOKEN "\n", 0600, token_file);
  write_token("wrong_token", "not-the-right-token-at-all\n", 0600, wrong_token_file);
  return live_fixture_make(&fx, "proto", DURATION, 3, SOURCE);
}

/* `live LIVE_ARGS` while `replay REPLAY_ARGS` sends (NULL: no replay). */
static int run_live(const char *replay, const char *live, char **out, char **err) {
  return live_cli_run("proto", replay, live, out, err);
}

static void expect_in(const char *text, const char *want) {
  if (!strstr(text, want)) fail_msg("expected \"%s\" in: %s", want, text);
}

/* 16 channels sent to a 32-channel model, or 20 kHz to a 30 kHz one: refused (exit 1) before any
 * spike, one line naming the field and both values. */
static void header_mismatch_refused(void **state) {
  (void)state;
  static const struct {
    const char *source, *msg;
  } cases[] = {
      {"--format binary --channels 16 --rate 30000", "stream header: channels 16, expected 32 (the model)"},
      {"--format binary --channels 32 --rate 20000", "stream header: rate 20000 Hz, expected 30000 Hz (the model)"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    char replay[4096], live[4096], want[4096], *out, *err;
    snprintf(replay, sizeof(replay), "'%s' %s --speed 0 --to 'unix-listen://%s'", fx.bin, cases[i].source, fx.sock);
    snprintf(live, sizeof(live), "--source 'unix://%s' --model '%s'", fx.sock, fx.model);
    int code = run_live(replay, live, &out, &err);
    snprintf(want, sizeof(want), "spikestream live: unix://%s: %s\n", fx.sock, cases[i].msg);
    if (code != 1) fail_msg("exit %d (expected 1), %zu bytes of records, stderr: %s", code, strlen(out), err);
    expect_in(err, want);
    assert_string_equal(out, "");
    free(out);
    free(err);
  }
}

/* A headerless file needs --raw; with it, the same spikes as replay's headed stream; replay --raw writes
 * no header. */
static void raw_needs_the_flag(void **state) {
  (void)state;
  char live[4096], want[4096], headed[LIVE_PATH_LEN], bare[LIVE_PATH_LEN], args[4096], *out, *err, *out2, *err2;
  snprintf(live, sizeof(live), "--source '%s' --model '%s'", fx.bin, fx.model);
  assert_int_equal(run_live(NULL, live, &out, &err), 1);
  snprintf(want, sizeof(want),
           "spikestream live: %s: stream header: no \"SSTREAM\" magic at the start (a headerless "
           "stream needs --raw)\n",
           fx.bin);
  expect_in(err, want);
  free(out);
  free(err);
  snprintf(live, sizeof(live), "--source '%s' --model '%s' --raw", fx.bin, fx.model);
  if (run_live(NULL, live, &out, &err) != 0) fail_msg("live --raw: %s", err);
  collected raw_spikes, headed_spikes;
  parse_lines(out, &raw_spikes);
  assert_true(raw_spikes.n > 10);
  /* replay to a file: the header then the samples; --raw: the samples alone */
  ss_test_path(headed, sizeof(headed), "headed.bin");
  ss_test_path(bare, sizeof(bare), "bare.bin");
  snprintf(args, sizeof(args), "replay -q '%s' " SOURCE " --speed 0 --to '%s'", fx.bin, headed);
  assert_int_equal(ss_test_run_cli(args, &out2, &err2), 0);
  free(out2);
  free(err2);
  snprintf(args, sizeof(args), "replay -q '%s' " SOURCE " --speed 0 --raw --to '%s'", fx.bin, bare);
  assert_int_equal(ss_test_run_cli(args, &out2, &err2), 0);
  free(out2);
  free(err2);
  char *a = ss_test_slurp(fx.bin), *b = ss_test_slurp(bare), *h = ss_test_slurp(headed);
  struct stat st_bin, st_head;
  assert_int_equal(stat(fx.bin, &st_bin), 0);
  assert_int_equal(stat(headed, &st_head), 0);
  assert_int_equal(st_head.st_size, st_bin.st_size + SS_STREAM_HEADER_BYTES);
  assert_memory_equal(h, SS_STREAM_MAGIC, 8);
  assert_memory_equal(h + SS_STREAM_HEADER_BYTES, a, 64);
  assert_memory_equal(a, b, 64);
  free(a);
  free(b);
  free(h);
  snprintf(live, sizeof(live), "--source '%s' --model '%s'", headed, fx.model);
  if (run_live(NULL, live, &out2, &err2) != 0) fail_msg("live on replay's file: %s", err2);
  parse_lines(out2, &headed_spikes);
  assert_true(same_spikes(&raw_spikes, &headed_spikes));
  free(raw_spikes.s);
  free(headed_spikes.s);
  free(out);
  free(err);
  free(out2);
  free(err2);
}

/* Listening on every interface without a token: exit 2 at once, before anything listens. */
static void non_loopback_listen_needs_token(void **state) {
  (void)state;
  char args[4096], want[2048], *out, *err;
  snprintf(want, sizeof(want),
           "tcp-listen://0.0.0.0:%d: listening on a non-loopback address needs a shared token "
           "(--token-file)",
           port);
  snprintf(args, sizeof(args), "live --source 'tcp-listen://0.0.0.0:%d' --model '%s' --connect-timeout 3", port,
           fx.model);
  double t0 = ss_now();
  int code = ss_test_run_cli(args, &out, &err);
  double secs = ss_now() - t0;
  if (code != 2 || !strstr(err, want)) fail_msg("live: exit %d after %.1f s, stderr: %s", code, secs, err);
  assert_true(secs < 2.0);
  free(out);
  free(err);
  snprintf(args, sizeof(args), "replay '%s' " SOURCE " --to 'tcp-listen://0.0.0.0:%d' --connect-timeout 3", fx.bin,
           port);
  t0 = ss_now();
  code = ss_test_run_cli(args, &out, &err);
  secs = ss_now() - t0;
  if (code != 2 || !strstr(err, want)) fail_msg("replay: exit %d after %.1f s, stderr: %s", code, secs, err);
  assert_true(secs < 2.0);
  free(out);
  free(err);
  /* a token file others may read is refused (exit 1 naming it) */
  char loose[LIVE_PATH_LEN];
  write_token("loose_token", TOKEN, 0644, loose);
  snprintf(args, sizeof(args), "live --source 'tcp-listen://127.0.0.1:%d' --model '%s' --token-file '%s'", port,
           fx.model, loose);
  assert_int_equal(ss_test_run_cli(args, &out, &err), 1);
  snprintf(want, sizeof(want), "%s: the token file is accessible to others (mode 0644", loose);
  expect_in(err, want);
  free(out);
  free(err);
}

/* A listener with a token: a client without one and a client with a wrong one are refused and logged;
 * the client with the right one is served. */
static void token_refused_then_accepted(void **state) {
  (void)state;
  char cmd[16384], out_path[LIVE_PATH_LEN], err_path[LIVE_PATH_LEN], rc_path[LIVE_PATH_LEN], wrong_path[LIVE_PATH_LEN];
  ss_test_path(out_path, sizeof(out_path), "tok.out");
  ss_test_path(err_path, sizeof(err_path), "tok.err");
  ss_test_path(rc_path, sizeof(rc_path), "tok.rc");
  ss_test_path(wrong_path, sizeof(wrong_path), "tok_wrong.rc");
  snprintf(cmd, sizeof(cmd),
           "'%s' live --source 'tcp-listen://127.0.0.1:%d' --token-file '%s' --model '%s' --connect-timeout 30 "
           ">'%s' 2>'%s' & pid=$!; "
           "'%s' replay -q '%s' " SOURCE " --speed 0 --duration 0.5 --to 'tcp://127.0.0.1:%d' >/dev/null 2>&1; "
           "'%s' replay -q '%s' " SOURCE " --speed 0 --token-file '%s' --to 'tcp://127.0.0.1:%d' >/dev/null 2>&1; "
           "echo $? >'%s'; "
           "'%s' replay -q '%s' " SOURCE " --speed 0 --token-file '%s' --to 'tcp://127.0.0.1:%d' >/dev/null 2>&1; "
           "wait $pid; echo $? >'%s'",
           SS_CLI_PATH, port, token_file, fx.model, out_path, err_path, SS_CLI_PATH, fx.bin, port, SS_CLI_PATH, fx.bin,
           wrong_token_file, port, wrong_path, SS_CLI_PATH, fx.bin, token_file, port, rc_path);
  if (system(cmd) == -1) fail_msg("cannot run %s", cmd);
  char *out = ss_test_slurp(out_path), *err = ss_test_slurp(err_path), *rc = ss_test_slurp(rc_path);
  char *wrong_rc = ss_test_slurp(wrong_path);
  if (atoi(rc) != 0) fail_msg("live: exit %s: %s", rc, err);
  assert_int_equal(atoi(wrong_rc), 1); /* replay with the wrong token: refused, bad input */
  char want[256];
  snprintf(want, sizeof(want), "tcp-listen://127.0.0.1:%d: refused connection from 127.0.0.1:", port);
  expect_in(err, want);
  expect_in(err, ": missing token\n");
  expect_in(err, ": bad token\n");
  collected got;
  parse_lines(out, &got);
  printf("token: %lld spikes from the client with the token; stderr:\n%s", (long long)got.n, err);
  assert_true(got.n > 10);
  free(got.s);
  free(out);
  free(err);
  free(rc);
  free(wrong_rc);
}

/* A client that connects and sends nothing: after --idle-timeout, exit 1 naming the source. */
typedef struct {
  char uri[128];
  double hold_s;
} silent_client;

static void *silent_main(void *arg) {
  silent_client *c = arg;
  ss_ctx ctx;
  ss_test_ctx(&ctx);
  ss_link *l = NULL;
  if (ss_link_open(&ctx, c->uri, SS_LINK_WRITE, 10.0, &l) != SS_OK) return NULL;
  struct timespec ts = {(time_t)c->hold_s, 0};
  nanosleep(&ts, NULL);
  ss_link_close(l);
  return NULL;
}

static void idle_source_reported(void **state) {
  (void)state;
  static const char *modes[] = {"", " --spin", " --spin --replicas 2"};
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    silent_client c = {.hold_s = 6};
    snprintf(c.uri, sizeof(c.uri), "tcp://127.0.0.1:%d", port);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, silent_main, &c), 0);
    char live[4096], want[256], *out, *err;
    snprintf(live, sizeof(live), "--source 'tcp-listen://127.0.0.1:%d' --model '%s' --idle-timeout 1%s", port, fx.model,
             modes[m]);
    double t0 = ss_now();
    int code = run_live(NULL, live, &out, &err);
    double secs = ss_now() - t0;
    pthread_join(th, NULL);
    snprintf(want, sizeof(want), "spikestream live: no data from tcp-listen://127.0.0.1:%d for 1 s", port);
    printf("idle%s: exit %d after %.2f s\n", modes[m], code, secs);
    if (code != 1) fail_msg("live%s: exit %d after %.1f s: %s", modes[m], code, secs, err);
    expect_in(err, want);
    assert_true(secs >= 1.0 && secs < 5.0);
    free(out);
    free(err);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(header_mismatch_refused),
      cmocka_unit_test(raw_needs_the_flag),
      cmocka_unit_test(non_loopback_listen_needs_token),
      cmocka_unit_test(token_refused_then_accepted),
      cmocka_unit_test(idle_source_reported),
  };
  return cmocka_run_group_tests(tests, setup, NULL);
}
