/* cmd_live.c — `spikestream live --source URI --model M | --train-seconds S`: label spikes as they
 * arrive. This file parses the options; the runner (drivers/live_run.h) reads the source, runs the
 * engine and writes the records. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/backend.h"
#include "drivers/live_replicas.h"
#include "drivers/live_run.h"
#include "drivers/live_workers.h"
#include "io/link.h"
#include "stages/live/live.h"

#define SS_LIVE_MAX_BLOCK_MS 60000.0
#define SS_MS_PER_S 1000.0
#define SS_LIVE_MAX_CHANNELS 100000 /* --channels (the model loader's limit) */
#define SS_LIVE_MAX_RT_PRIORITY 99  /* Linux's highest SCHED_FIFO priority */

static const char usage[] =
    "usage: spikestream live --source URI (--model M | --train-seconds S --channels N --rate HZ\n"
    "                        [--uv-per-step U] [--probe P] [--params J] [--train-dir DIR])\n"
    "                        [--output URI] [--format json|binary]\n"
    "                        [--assign centroid|knn] [--k K] [--distance D] [--block-ms B] [--reconnect]\n"
    "                        [--stats-every S] [--device cpu|cuda|auto] [--connect-timeout S]\n"
    "                        [--idle-timeout S] [--raw] [--token-file PATH]\n"
    "                        [--realtime P] [--spin [--workers N | --replicas R]] [--pin CPU[,CPU...]]\n\n"
    "Label spikes as they arrive on a stream of little-endian int16 frames (channel-interleaved, any\n"
    "number of samples per read) after a 32-byte header that `spikestream replay` writes (channels,\n"
    "rate, dtype: checked against the model), with the causal twin of a model that `spikestream sort`\n"
    "wrote.\n"
    "Each spike is written as soon as no later sample can change it (docs/live.md):\n"
    "  json:   {\"t\": sample, \"unit\": id, \"amp\": uV, \"channel\": c, \"latency_us\": L} one per line\n"
    "  binary: 24 bytes little-endian {int64 t; int32 unit; int32 channel; float amp; float latency_us}\n"
    "Counters (samples, blocks, spikes, overruns, latency p50/p99/max) go to stderr every --stats-every\n"
    "seconds and at the end. The end of the stream flushes and exits 0; a stream ending mid-frame is\n"
    "processed up to its last whole frame, reported, and exits 1.\n\n"
    "  --source URI         stdin, -, a file, tcp://host:port, tcp-listen://host:port, unix:///path,\n"
    "                       unix-listen:///path\n"
    "  --model M            model.h5 from `spikestream sort` (its /live group)\n"
    "  --train-seconds S    fit the model on the stream's first S seconds (`sort`'s pipeline, in the\n"
    "                       background on --device), then label; samples arriving while it is fitted\n"
    "                       are counted and reported, not labelled; times count from the stream start\n"
    "  --channels N         with --train-seconds: channels per frame\n"
    "  --rate HZ            with --train-seconds: sampling rate\n"
    "  --uv-per-step U      with --train-seconds: microvolts per int16 step (default 1)\n"
    "  --probe P            with --train-seconds: probe JSON (default as `sort`: the 32-channel probe\n"
    "                       for 32 channels)\n"
    "  --params J           with --train-seconds: parameter JSON for the fit (docs/params.md)\n"
    "  --train-dir DIR      with --train-seconds: keep the training data and the fit's outputs\n"
    "                       (DIR/sort/model.h5) there (default: a temporary directory, removed)\n"
    "  -o, --output URI     where the records go (default stdout; same URI forms)\n"
    "  --format F           json (default) or binary\n"
    "  --assign A           centroid (default: nearest unit centroid) or knn (vote of the --k nearest\n"
    "                       reference spikes, ties to the nearest)\n"
    "  --k K                neighbours for --assign knn (default 5)\n"
    "  --distance D         centroid distance: plain (default: Euclidean over all features) or masked\n"
    "                       (only the channels with mask > 0 in the spike or the unit's mean mask)\n"
    "  --block-ms B         the sender's block length: a block is an overrun when its processing starts\n"
    "                       more than B ms after it arrived (default: each read's own duration)\n"
    "  --reconnect          after the source disconnects, wait for the next connection (filter state\n"
    "                       restarts, counters go on); stop with SIGINT or SIGTERM\n"
    "  --stats-every S      seconds between counter lines on stderr (default 10; 0: only at the end)\n"
    "  --device D           cpu (default), cuda or auto\n"
    "  --connect-timeout S  how long to wait for the source (default 10; 0 = no limit)\n"
    "  --idle-timeout S     a source that sends nothing for S seconds (also right after it connects)\n"
    "                       ends the run with exit 1 (default 10; 0 = wait forever)\n"
    "  --raw                the source has no header: frames from the first byte (channels and rate\n"
    "                       are taken on trust from the model or --channels/--rate)\n"
    "  --token-file PATH    shared token (16..1024 bytes, white space trimmed; the file must not be\n"
    "                       accessible to others): sent after connecting, required from every client\n"
    "                       of a listener; needed to listen on a non-loopback address\n"
    "  --realtime P         run the engine thread SCHED_FIFO at priority P (0 = the lowest) so that\n"
    "                       ordinary threads cannot preempt a block; when not permitted, a warning and\n"
    "                       normal scheduling (docs/live.md)\n"
    "  --spin               poll the source without sleeping: a sleeping thread's wake-up is on every\n"
    "                       block's critical path, and on a VM it may be late by milliseconds. --workers\n"
    "                       threads take turns reading and pushing, each on a core of its own, so that\n"
    "                       one the machine stops while idle does not delay the next block (docs/live.md);\n"
    "                       with --train-seconds: a polling reader thread and engine thread instead\n"
    "  --workers N          with --spin: the polling threads (default 2; 1 = no standby)\n"
    "  --replicas R         with --spin, instead of --workers: R engines (each its own thread and, with\n"
    "                       CUDA, stream) push every block; the first to finish a block emits it, so a\n"
    "                       thread the machine stops even inside a block does not delay the stream.\n"
    "                       Counter lines only at the end (docs/live.md)\n"
    "  --pin CPU[,CPU...]   pin the engine thread (--spin: worker i to the i-th CPU) with\n"
    "                       sched_setaffinity; when refused, a warning\n"
    "\noptions:\n" SS_CLI_COMMON_HELP;

enum {
  OPT_SOURCE = 0x3101,
  OPT_MODEL,
  OPT_TRAIN,
  OPT_FORMAT,
  OPT_ASSIGN,
  OPT_K,
  OPT_BLOCK_MS,
  OPT_RECONNECT,
  OPT_STATS_EVERY,
  OPT_DEVICE,
  OPT_CONNECT_TIMEOUT,
  OPT_DISTANCE,
  OPT_CHANNELS,
  OPT_RATE,
  OPT_UV_PER_STEP,
  OPT_PROBE,
  OPT_PARAMS,
  OPT_TRAIN_DIR,
  OPT_REALTIME,
  OPT_SPIN,
  OPT_PIN,
  OPT_WORKERS,
  OPT_REPLICAS,
  OPT_IDLE_TIMEOUT,
  OPT_RAW,
  OPT_TOKEN_FILE
};

typedef struct {
  ss_live_run_opts run;
  int train;                     /* --train-seconds given */
  int train_only_option;         /* an option that goes with --train-seconds was given */
  int64_t realtime;              /* --realtime P: P + 1 (0 = not asked) */
  int64_t workers;               /* --workers N (0: not given) */
  int64_t replicas;              /* --replicas R (0: not given) */
  int64_t channels;              /* --channels */
  int pins[SS_LIVE_MAX_WORKERS]; /* --pin: the CPU of worker i (the engine thread: pins[0]); -1 none */
  int n_pins;
  const char *token_file;
  char token[SS_LINK_TOKEN_MAX];
  ss_ctx *ctx;
} live_args;

static int on_option(int opt, const char *arg, void *user) {
  live_args *a = user;
  double v = 0;
  int code = 0;
  switch (opt) {
    case OPT_SOURCE: a->run.source = arg; break;
    case OPT_MODEL: a->run.model_path = arg; break;
    case 'o': a->run.output = arg; break;
    case OPT_TRAIN:
      code = ss_cli_number("live", "train-seconds", arg, 0, &a->run.train.seconds);
      if (!code && !(a->run.train.seconds > 0))
        return ss_cli_usage_error("live", "--train-seconds: expected a number > 0, got \"%s\"", arg);
      a->train = 1;
      break;
    case OPT_CHANNELS:
      code = ss_cli_integer("live", "channels", arg, 1, SS_LIVE_MAX_CHANNELS, &a->channels);
      a->train_only_option = 1;
      break;
    case OPT_RATE:
      code = ss_cli_number("live", "rate", arg, 0, &a->run.train.rate_hz);
      if (!code && !(a->run.train.rate_hz > 0))
        return ss_cli_usage_error("live", "--rate: expected a number > 0, got \"%s\"", arg);
      a->train_only_option = 1;
      break;
    case OPT_UV_PER_STEP:
      code = ss_cli_number("live", "uv-per-step", arg, 0, &a->run.train.uv_per_step);
      if (!code && !(a->run.train.uv_per_step > 0))
        return ss_cli_usage_error("live", "--uv-per-step: expected a number > 0, got \"%s\"", arg);
      a->train_only_option = 1;
      break;
    case OPT_PROBE:
      a->run.train.probe_path = arg;
      a->train_only_option = 1;
      break;
    case OPT_PARAMS:
      a->run.train.params_path = arg;
      a->train_only_option = 1;
      break;
    case OPT_TRAIN_DIR:
      a->run.train.dir = arg;
      a->train_only_option = 1;
      break;
    case OPT_SPIN: a->run.spin = 1; break;
    case OPT_PIN:
      if (ss_live_cpu_list_parse(a->ctx, "--pin", arg, a->pins, SS_LIVE_MAX_WORKERS, &a->n_pins) != SS_OK)
        return ss_cli_usage_error("live", "%s", ss_error_message(a->ctx));
      break;
    case OPT_WORKERS: code = ss_cli_integer("live", "workers", arg, 1, SS_LIVE_MAX_WORKERS, &a->workers); break;
    case OPT_REPLICAS: code = ss_cli_integer("live", "replicas", arg, 1, SS_LIVE_MAX_REPLICAS, &a->replicas); break;
    case OPT_REALTIME:
      code = ss_cli_integer("live", "realtime", arg, 0, SS_LIVE_MAX_RT_PRIORITY, &a->realtime);
      a->realtime++;
      break;
    case OPT_RECONNECT: a->run.reconnect = 1; break;
    case OPT_FORMAT:
      if (strcmp(arg, "json") && strcmp(arg, "binary"))
        return ss_cli_usage_error("live", "--format: expected json or binary, got \"%s\"", arg);
      a->run.binary = strcmp(arg, "binary") == 0;
      break;
    case OPT_ASSIGN:
      if (strcmp(arg, "centroid") && strcmp(arg, "knn"))
        return ss_cli_usage_error("live", "--assign: expected centroid or knn, got \"%s\"", arg);
      a->run.engine.assign = strcmp(arg, "knn") == 0 ? SS_LIVE_KNN : SS_LIVE_CENTROID;
      break;
    case OPT_DISTANCE:
      if (strcmp(arg, "plain") && strcmp(arg, "masked"))
        return ss_cli_usage_error("live", "--distance: expected plain or masked, got \"%s\"", arg);
      a->run.engine.masked_distance = strcmp(arg, "masked") == 0;
      break;
    case OPT_K: code = ss_cli_integer("live", "k", arg, 1, INT32_MAX, &a->run.engine.k); break;
    case OPT_BLOCK_MS:
      code = ss_cli_number("live", "block-ms", arg, 0, &v);
      if (!code && !(v > 0 && v <= SS_LIVE_MAX_BLOCK_MS))
        return ss_cli_usage_error("live", "--block-ms: expected a number in (0, %g], got \"%s\"", SS_LIVE_MAX_BLOCK_MS,
                                  arg);
      a->run.engine.block_s = v / SS_MS_PER_S;
      break;
    case OPT_STATS_EVERY: code = ss_cli_number("live", "stats-every", arg, 0, &a->run.stats_every_s); break;
    case OPT_CONNECT_TIMEOUT: code = ss_cli_number("live", "connect-timeout", arg, 0, &a->run.connect_timeout_s); break;
    case OPT_IDLE_TIMEOUT: code = ss_cli_number("live", "idle-timeout", arg, 0, &a->run.idle_timeout_s); break;
    case OPT_RAW: a->run.raw = 1; break;
    case OPT_TOKEN_FILE: a->token_file = arg; break;
    case OPT_DEVICE:
      if (ss_device_kind_parse(a->ctx, arg, &a->run.device) != SS_OK)
        return ss_cli_usage_error("live", "--device: %s", ss_error_message(a->ctx));
      break;
    default: return ss_cli_usage_error("live", "unknown option");
  }
  return code;
}

/* SIGINT/SIGTERM: stop after what was received (the runner's loops; the wait for the source) */
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

int ss_cmd_live(int argc, char **argv, ss_ctx *ctx) {
  static const struct option opts[] = {{"source", required_argument, NULL, OPT_SOURCE},
                                       {"model", required_argument, NULL, OPT_MODEL},
                                       {"train-seconds", required_argument, NULL, OPT_TRAIN},
                                       {"output", required_argument, NULL, 'o'},
                                       {"format", required_argument, NULL, OPT_FORMAT},
                                       {"assign", required_argument, NULL, OPT_ASSIGN},
                                       {"k", required_argument, NULL, OPT_K},
                                       {"distance", required_argument, NULL, OPT_DISTANCE},
                                       {"block-ms", required_argument, NULL, OPT_BLOCK_MS},
                                       {"reconnect", no_argument, NULL, OPT_RECONNECT},
                                       {"stats-every", required_argument, NULL, OPT_STATS_EVERY},
                                       {"device", required_argument, NULL, OPT_DEVICE},
                                       {"connect-timeout", required_argument, NULL, OPT_CONNECT_TIMEOUT},
                                       {"channels", required_argument, NULL, OPT_CHANNELS},
                                       {"rate", required_argument, NULL, OPT_RATE},
                                       {"uv-per-step", required_argument, NULL, OPT_UV_PER_STEP},
                                       {"probe", required_argument, NULL, OPT_PROBE},
                                       {"params", required_argument, NULL, OPT_PARAMS},
                                       {"train-dir", required_argument, NULL, OPT_TRAIN_DIR},
                                       {"realtime", required_argument, NULL, OPT_REALTIME},
                                       {"spin", no_argument, NULL, OPT_SPIN},
                                       {"pin", required_argument, NULL, OPT_PIN},
                                       {"workers", required_argument, NULL, OPT_WORKERS},
                                       {"replicas", required_argument, NULL, OPT_REPLICAS},
                                       {"idle-timeout", required_argument, NULL, OPT_IDLE_TIMEOUT},
                                       {"raw", no_argument, NULL, OPT_RAW},
                                       {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
                                       {0, 0, 0, 0}};
  live_args a;
  memset(&a, 0, sizeof(a));
  for (int i = 0; i < SS_LIVE_MAX_WORKERS; i++) a.pins[i] = -1; /* beyond the --pin list: not pinned */
  a.ctx = ctx;
  ss_live_run_opts_defaults(&a.run);
  int first, code = ss_cli_parse(argc, argv, "live", opts, usage, ctx, on_option, &a, &first);
  if (code >= 0) return code;
  if (first != argc) return ss_cli_usage_error("live", "unexpected argument \"%s\"", argv[first]);
  if (!a.run.source) return ss_cli_usage_error("live", "--source URI is required");
  if (!a.run.model_path && !a.train) return ss_cli_usage_error("live", "--model M (or --train-seconds S) is required");
  if (a.run.model_path && a.train) return ss_cli_usage_error("live", "--model and --train-seconds exclude each other");
  if (a.train && (a.channels <= 0 || !(a.run.train.rate_hz > 0)))
    return ss_cli_usage_error(
        "live", "--train-seconds needs --channels N and --rate HZ (the stream header is checked against them)");
  if (a.workers && !a.run.spin) return ss_cli_usage_error("live", "--workers goes with --spin (the polling threads)");
  if (a.replicas && (!a.run.spin || a.workers || a.train))
    return ss_cli_usage_error("live", "--replicas goes with --spin, without --workers and --train-seconds");
  if (a.n_pins > 1 && !(a.run.spin && !a.train))
    return ss_cli_usage_error("live", "--pin: one CPU (the engine thread); a list goes with --spin's workers");
  if (!a.train && a.train_only_option)
    return ss_cli_usage_error("live", "--channels, --rate, --uv-per-step, --probe, --params and --train-dir go with "
                                      "--train-seconds (a model gives them)");
  if (a.token_file) {
    ss_status st = ss_link_token_load(ctx, a.token_file, a.token, sizeof(a.token), &a.run.token_len);
    if (st != SS_OK) return ss_cli_finish("live", ctx, st);
    a.run.token = a.token;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  a.run.train.n_channels = (int)a.channels;
  a.run.workers = (int)a.workers;
  a.run.replicas = (int)a.replicas;
  a.run.pins = a.pins;
  a.run.n_pins = a.n_pins;
  a.run.realtime = a.realtime > 0;
  a.run.realtime_priority = (int)a.realtime - 1;
  a.run.stats_out = stderr;
  a.run.stop = &stop_requested;
  return ss_cli_finish("live", ctx, ss_live_run(ctx, &a.run, NULL));
}
