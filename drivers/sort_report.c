/* sort_report.c — report.html in a sort's output folder: one self-contained page (inline CSS, JS and
 * SVG, no network) whose script draws the per-unit table, mean waveforms on the probe layout, ISI
 * histograms, autocorrelograms, amplitudes over time and a drift raster from data embedded as JSON. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drivers/sort_internal.h"

/* --- the page ---------------------------------------------------------------------------------- */

/* The page up to the embedded data (one line per string; the JSON follows the last). */
static const char *const page_head[] = {
    "<!DOCTYPE html>",
    "<html lang=\"en\"><head><meta charset=\"utf-8\"><title>spikestream sort report</title>",
    "<style>",
    "body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#222;background:#fafafa}",
    "h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:18px 0 6px}",
    "table{border-collapse:collapse;background:#fff}td,th{padding:2px 8px;border-bottom:1px solid "
    "#ddd;text-align:right}",
    "th{cursor:pointer;background:#eee;user-select:none}tbody tr{cursor:pointer}tbody tr:hover td{background:#eef3fb}",
    ".good{color:#1a7f37}.mua{color:#9a6700}.noise{color:#cf222e}",
    "#units{display:flex;flex-wrap:wrap;gap:10px}",
    ".unit{background:#fff;border:1px solid #ddd;border-radius:4px;padding:6px}",
    ".unit h3{font-size:13px;margin:0 0 4px}.plots{display:flex;gap:6px;flex-wrap:wrap}",
    "svg{display:block}svg text{font-size:9px;fill:#555}",
    "#report-error{color:#cf222e;background:#fff0f0;padding:6px}",
    "</style></head>",
    "<body data-report=\"loading\">",
    "<h1>spikestream sort report: <span id=\"name\"></span></h1>",
    "<div id=\"summary\"></div>",
    "<noscript>This report draws its table and plots with JavaScript.</noscript>",
    "<h2>Units</h2>",
    "<p>Cluster 0 (masked EM's noise cluster) is left out. Click a row to go to the unit, a heading to sort.</p>",
    "<table id=\"table\"><thead></thead><tbody></tbody></table>",
    "<h2>Drift raster</h2>",
    "<p>Each spike at its time and the depth (y) of its peak channel, coloured by unit.</p>",
    "<div id=\"drift\"></div>",
    "<h2>Per unit</h2>",
    "<p>Mean waveforms on the probe layout (the strongest channels; the peak channel in red), ISI histogram,",
    "autocorrelogram and amplitude over time.</p>",
    "<div id=\"units\"></div>",
    "<script>",
    "window.onerror = function (m) {",
    "  document.body.setAttribute('data-report', 'error');",
    "  var p = document.createElement('pre');",
    "  p.id = 'report-error';",
    "  p.textContent = 'report error: ' + m;",
    "  document.body.insertBefore(p, document.body.firstChild);",
    "};",
    "</script>",
    "<script type=\"application/json\" id=\"data\">",
};

/* The page after the data: the script that draws everything from it. A script error sets
 * data-report="error" on <body> and shows the message; a complete run sets data-report="ok". */
static const char *const page_tail[] = {
    "</script>",
    "<script>",
    "(function () {",
    "  var D = JSON.parse(document.getElementById('data').textContent);",
    "  var NS = 'http://www.w3.org/2000/svg';",
    "  function el(tag, attrs, parent, text) {",
    "    var e = document.createElement(tag);",
    "    for (var k in attrs) e.setAttribute(k, attrs[k]);",
    "    if (text !== undefined) e.textContent = text;",
    "    if (parent) parent.appendChild(e);",
    "    return e;",
    "  }",
    "  function sv(tag, attrs, parent, text) {",
    "    var e = document.createElementNS(NS, tag);",
    "    for (var k in attrs) e.setAttribute(k, attrs[k]);",
    "    if (text !== undefined) e.textContent = text;",
    "    if (parent) parent.appendChild(e);",
    "    return e;",
    "  }",
    "  function fmt(v, d) { return v === null || v === undefined ? '-' : typeof v === 'number' ? v.toFixed(d) : "
    "String(v); }",
    "  function color(i) { return 'hsl(' + Math.round(i * 137.508) % 360 + ',70%,42%)'; }",
    "  function range(a) {",
    "    var lo = Infinity, hi = -Infinity;",
    "    a.forEach(function (v) { if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });",
    "    if (lo > hi) { lo = 0; hi = 1; }",
    "    if (lo === hi) { lo -= 1; hi += 1; }",
    "    return [lo, hi];",
    "  }",
    "  function box(parent, w, h, title) {",
    "    var s = sv('svg', {width: w, height: h, viewBox: '0 0 ' + w + ' ' + h}, parent);",
    "    sv('rect', {x: 0.5, y: 0.5, width: w - 1, height: h - 1, fill: '#fff', stroke: '#ddd'}, s);",
    "    if (title) sv('text', {x: 4, y: 11}, s, title);",
    "    return s;",
    "  }",
    "  /* A point cloud as one path of small squares (cheaper than one element per point). */",
    "  function dots(s, xs, ys, fx, fy, col) {",
    "    var d = '';",
    "    for (var i = 0; i < xs.length; i++) {",
    "      if (xs[i] === null || ys[i] === null) continue;",
    "      d += 'M' + fx(xs[i]).toFixed(1) + ' ' + fy(ys[i]).toFixed(1) + 'h1.6v1.6h-1.6z';",
    "    }",
    "    sv('path', {d: d, fill: col}, s);",
    "  }",
    "  function bars(parent, counts, title) {",
    "    var w = 160, h = 100, s = box(parent, w, h, title), m = Math.max.apply(null, counts.concat([1]));",
    "    var bw = (w - 8) / counts.length, d = '';",
    "    counts.forEach(function (c, i) {",
    "      var bh = (h - 26) * c / m;",
    "      d += 'M' + (4 + i * bw).toFixed(1) + ' ' + (h - 12) + 'h' + (bw * 0.9).toFixed(1) + 'v' + (-bh).toFixed(1) "
    "+",
    "           'h' + (-bw * 0.9).toFixed(1) + 'z';",
    "    });",
    "    sv('path', {d: d, fill: '#4a6fa5'}, s);",
    "    sv('text', {x: 4, y: h - 2}, s, '0');",
    "    sv('text', {x: w - 4, y: h - 2, 'text-anchor': 'end'}, s, counts.length * D.bin_ms + ' ms');",
    "    sv('text', {x: w - 4, y: 11, 'text-anchor': 'end'}, s, 'max ' + m);",
    "  }",
    "  function waves(parent, u) {",
    "    var w = 200, h = 230, s = box(parent, w, h, 'mean waveforms (uV)');",
    "    var px = u.chans.map(function (c) { return D.probe.x[c]; }), py = u.chans.map(function (c) { return "
    "D.probe.y[c]; });",
    "    var xr = range(px), yr = range(py), tw = 48, amp = 0;",
    "    u.wave.forEach(function (tr) { tr.forEach(function (v) { if (v !== null) amp = Math.max(amp, Math.abs(v)); "
    "}); });",
    "    amp = amp || 1;",
    "    var sx = (w - tw - 34) / (xr[1] - xr[0]), sy = (h - 60) / (yr[1] - yr[0]);",
    "    u.chans.forEach(function (c, j) {",
    "      var x0 = 10 + ((px[j] === null ? xr[0] : px[j]) - xr[0]) * sx;",
    "      var y0 = h - 24 - ((py[j] === null ? yr[0] : py[j]) - yr[0]) * sy;",
    "      var tr = u.wave[j], n = tr.length, d = '';",
    "      tr.forEach(function (v, t) {",
    "        d += (t ? 'L' : 'M') + (x0 + tw * t / Math.max(n - 1, 1)).toFixed(1) + ' ' + (y0 - 18 * (v || 0) / "
    "amp).toFixed(1);",
    "      });",
    "      sv('path', {d: d, fill: 'none', stroke: c === u.peak ? '#cf222e' : '#333', 'stroke-width': 1}, s);",
    "      sv('text', {x: x0 + tw + 2, y: y0 + 3}, s, String(c));",
    "    });",
    "    sv('text', {x: w - 4, y: h - 2, 'text-anchor': 'end'}, s, 'peak ' + amp.toFixed(0) + ' uV');",
    "  }",
    "  function amplitudes(parent, u) {",
    "    var w = 220, h = 100, s = box(parent, w, h, 'amplitude (uV) over time'), ar = range(u.a);",
    "    dots(s, u.t, u.a, function (t) { return 4 + (w - 10) * t / (D.duration_s || 1); },",
    "         function (a) { return h - 14 - (h - 28) * (a - ar[0]) / (ar[1] - ar[0]); }, color(u.id));",
    "    sv('text', {x: 4, y: h - 2}, s, fmt(ar[0], 0) + ' .. ' + fmt(ar[1], 0) + ' uV');",
    "    sv('text', {x: w - 4, y: h - 2, 'text-anchor': 'end'}, s, fmt(D.duration_s, 0) + ' s');",
    "  }",
    "  var cols = [['id', 'unit', 0], ['label', 'label'], ['n', 'spikes', 0], ['rate', 'rate Hz', 2], ['snr', 'SNR', "
    "1],",
    "              ['isi_ratio', 'ISI viol.', 3], ['presence', 'presence', 2], ['cutoff', 'amp. cutoff', 3],",
    "              ['amp', 'amplitude uV', 0], ['peak', 'peak ch', 0]];",
    "  function table(units) {",
    "    var head = el('tr', {}, document.querySelector('#table thead')), body = document.querySelector('#table "
    "tbody');",
    "    var order = 1, key = 'id';",
    "    function fill() {",
    "      body.textContent = '';",
    "      units.slice().sort(function (a, b) {",
    "        var x = a[key], y = b[key];",
    "        return (x === y ? a.id - b.id : x === null ? 1 : y === null ? -1 : x < y ? -1 : 1) * order;",
    "      }).forEach(function (u) {",
    "        var tr = el('tr', {id: 'row-' + u.id}, body);",
    "        cols.forEach(function (c) { el('td', c[0] === 'label' ? {class: u.label} : {}, tr, fmt(u[c[0]], c[2])); "
    "});",
    "        tr.onclick = function () { location.hash = 'unit-' + u.id; };",
    "      });",
    "    }",
    "    cols.forEach(function (c) {",
    "      el('th', {}, head, c[1]).onclick = function () { order = key === c[0] ? -order : 1; key = c[0]; fill(); };",
    "    });",
    "    fill();",
    "  }",
    "  function drift(units) {",
    "    var w = 900, h = 320, s = box(document.getElementById('drift'), w, h, 'depth (um) over time (s)');",
    "    var yr = range(D.probe.y);",
    "    var fx = function (t) { return 40 + (w - 50) * t / (D.duration_s || 1); };",
    "    var fy = function (y) { return h - 20 - (h - 36) * (y - yr[0]) / (yr[1] - yr[0]); };",
    "    units.forEach(function (u) {",
    "      var jit = u.y.map(function (y, i) { return y === null ? null : y + ((i * 7919) % 17 - 8) * 0.6; });",
    "      dots(s, u.t, jit, fx, fy, color(u.id));",
    "    });",
    "    sv('text', {x: 4, y: fy(yr[0])}, s, fmt(yr[0], 0));",
    "    sv('text', {x: 4, y: fy(yr[1]) + 8}, s, fmt(yr[1], 0));",
    "    sv('text', {x: w - 4, y: h - 4, 'text-anchor': 'end'}, s, fmt(D.duration_s, 0) + ' s');",
    "  }",
    "  function cards(units) {",
    "    var root = document.getElementById('units');",
    "    units.forEach(function (u) {",
    "      var sec = el('section', {class: 'unit', id: 'unit-' + u.id}, root);",
    "      var h = el('h3', {}, sec, 'unit ' + u.id + ' ');",
    "      el('span', {class: u.label}, h, u.label);",
    "      h.appendChild(document.createTextNode(' - ' + u.n + ' spikes, ' + fmt(u.rate, 2) + ' Hz, SNR ' + fmt(u.snr, "
    "1)));",
    "      var p = el('div', {class: 'plots'}, sec);",
    "      waves(p, u);",
    "      bars(p, u.isi, 'ISI histogram');",
    "      bars(p, u.acg, 'autocorrelogram');",
    "      amplitudes(p, u);",
    "    });",
    "  }",
    "  document.getElementById('name').textContent = D.name;",
    "  var counts = {};",
    "  D.units.forEach(function (u) { counts[u.label] = (counts[u.label] || 0) + 1; });",
    "  document.getElementById('summary').textContent = fmt(D.duration_s, 1) + ' s, ' + D.n_channels + ' channels, ' +",
    "      D.n_spikes + ' spikes, ' + D.units.length + ' units (' +",
    "      Object.keys(counts).sort().map(function (k) { return counts[k] + ' ' + k; }).join(', ') + ')';",
    "  table(D.units);",
    "  drift(D.units);",
    "  cards(D.units);",
    "  if (document.body.getAttribute('data-report') === 'loading') document.body.setAttribute('data-report', 'ok');",
    "})();",
    "</script>",
    "</body></html>",
};

/* Histograms of ISIs and autocorrelograms: REPORT_BINS bins of REPORT_BIN_MS each. */
#define REPORT_BINS 50
#define REPORT_BIN_MS 1.0
/* Spikes per unit drawn in the amplitude and drift plots (evenly spaced in time beyond). */
#define REPORT_POINTS_PER_UNIT 1500
/* Channels per unit whose mean waveform is drawn: the largest peak-to-peak ones. */
#define REPORT_CHANNELS 12

/* Spikes grouped by unit: unit c's spike indices are idx[start[c] .. start[c + 1]), in time order. */
typedef struct {
  int64_t *start, *idx;
} unit_spikes;

static ss_status group_spikes(ss_ctx *ctx, const ss_sort_state *s, unit_spikes *g) {
  const int64_t n = s->spikes.n, k = s->k;
  int64_t *fill = NULL;
  SS_TRY(SS_CALLOC(ctx, g->start, (size_t)k + 1, "report: unit starts"));
  ss_status st = SS_ALLOC(ctx, g->idx, (size_t)(n > 0 ? n : 1), "report: spikes by unit");
  if (st == SS_OK) st = SS_ALLOC(ctx, fill, (size_t)k, "report: unit fill");
  if (st != SS_OK) return st;
  for (int64_t i = 0; i < n; i++) g->start[s->labels[i] + 1]++;
  for (int64_t c = 0; c < k; c++) g->start[c + 1] += g->start[c];
  memcpy(fill, g->start, (size_t)k * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++) g->idx[fill[s->labels[i]]++] = i;
  free(fill);
  return SS_OK;
}

/* --- JSON ------------------------------------------------------------------------------------- */

/* A number, or null when it is not finite (JSON has no NaN). */
static void num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.5g", v);
  else fputs("null", f);
}

static void num_array(FILE *f, const char *key, const double *v, int64_t n) {
  fprintf(f, "\"%s\":[", key);
  for (int64_t i = 0; i < n; i++) {
    if (i) fputc(',', f);
    num(f, v[i]);
  }
  fputc(']', f);
}

/* A JSON string with the characters HTML and JSON treat specially escaped, so that it may sit inside
 * a <script> element. */
static void str(FILE *f, const char *t) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p == '<' || *p == '>' || *p == '&') fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

/* The unit's REPORT_CHANNELS channels of largest mean-waveform peak-to-peak, and their waveforms. */
static void write_waves(FILE *f, const ss_cluster_stats *c, int64_t u) {
  const int C = c->C, W = c->W, m = C < REPORT_CHANNELS ? C : REPORT_CHANNELS;
  const float *wu = c->wave + (size_t)u * C * W;
  double ptp[REPORT_CHANNELS];
  int pick[REPORT_CHANNELS], n = 0;
  for (int ch = 0; ch < C; ch++) {
    float lo = wu[ch * W], hi = lo;
    for (int t = 1; t < W; t++) {
      lo = fminf(lo, wu[ch * W + t]);
      hi = fmaxf(hi, wu[ch * W + t]);
    }
    double v = (double)hi - lo;
    int j;
    if (n < m) j = n++;
    else if (v > ptp[m - 1]) j = m - 1;
    else continue;
    for (; j > 0 && ptp[j - 1] < v; j--) {
      ptp[j] = ptp[j - 1];
      pick[j] = pick[j - 1];
    }
    ptp[j] = v;
    pick[j] = ch;
  }
  fputs("\"chans\":[", f);
  for (int j = 0; j < n; j++) fprintf(f, "%s%d", j ? "," : "", pick[j]);
  fputs("],\"wave\":[", f);
  for (int j = 0; j < n; j++) {
    fputs(j ? ",[" : "[", f);
    for (int t = 0; t < W; t++) {
      if (t) fputc(',', f);
      num(f, wu[pick[j] * W + t]);
    }
    fputc(']', f);
  }
  fputc(']', f);
}

/* ISI histogram and one-sided autocorrelogram (lags in [0, REPORT_BINS · REPORT_BIN_MS) ms) of one unit. */
static void write_intervals(FILE *f, const ss_sort_state *s, const int64_t *idx, int64_t n) {
  const double ms = 1000.0 / s->spikes.rate_hz;
  double isi[REPORT_BINS] = {0}, acg[REPORT_BINS] = {0};
  const int64_t *t = s->spikes.time_samples;
  for (int64_t i = 0; i < n; i++) {
    for (int64_t j = i + 1; j < n; j++) {
      double lag = (double)(t[idx[j]] - t[idx[i]]) * ms;
      int b = (int)(lag / REPORT_BIN_MS);
      if (b >= REPORT_BINS) break;
      acg[b]++;
      if (j == i + 1) isi[b]++;
    }
  }
  num_array(f, "isi", isi, REPORT_BINS);
  fputc(',', f);
  num_array(f, "acg", acg, REPORT_BINS);
}

/* Times (s), amplitudes (µV) and depths (peak channel y, µm) of at most REPORT_POINTS_PER_UNIT spikes. */
static void write_points(FILE *f, const ss_sort_state *s, const double *chy, const int64_t *idx, int64_t n) {
  const int64_t m = n < REPORT_POINTS_PER_UNIT ? n : REPORT_POINTS_PER_UNIT;
  static const char *const keys[] = {"t", "a", "y"};
  for (int k = 0; k < 3; k++) {
    fprintf(f, "%s\"%s\":[", k ? "," : "", keys[k]);
    for (int64_t j = 0; j < m; j++) {
      const int64_t i = idx[m < n ? j * n / m : j];
      double v = k == 0   ? (double)s->spikes.time_samples[i] / s->spikes.rate_hz
                 : k == 1 ? (double)s->spikes.amplitude[i]
                          : chy[s->spikes.peak_channel[i]];
      if (j) fputc(',', f);
      num(f, v);
    }
    fputc(']', f);
  }
}

static void write_unit(FILE *f, const ss_sort_state *s, const double *chy, const unit_spikes *g, int64_t u) {
  const ss_quality *q = &s->sum->quality;
  const ss_cluster_stats *c = &s->stats;
  const int has_q = u < q->k;
  fprintf(f, "{\"id\":%lld,\"n\":%lld,\"peak\":%d,\"label\":", (long long)u, (long long)c->count[u],
          c->peak_channel[u]);
  str(f, has_q ? ss_quality_label_name(q->label[u]) : "");
  const double m[] = {has_q ? q->firing_rate_hz[u] : NAN,      has_q ? q->snr[u] : NAN,
                      has_q ? q->isi_violation_ratio[u] : NAN, has_q ? q->presence_ratio[u] : NAN,
                      has_q ? q->amplitude_cutoff[u] : NAN,    c->amp_mean[u]};
  static const char *const keys[] = {"rate", "snr", "isi_ratio", "presence", "cutoff", "amp"};
  for (int i = 0; i < 6; i++) {
    fprintf(f, ",\"%s\":", keys[i]);
    num(f, m[i]);
  }
  fputc(',', f);
  write_waves(f, c, u);
  fputc(',', f);
  const int64_t *idx = g->idx + g->start[u], n = g->start[u + 1] - g->start[u];
  write_intervals(f, s, idx, n);
  fputc(',', f);
  write_points(f, s, chy, idx, n);
  fputc('}', f);
}

static void write_lines(FILE *f, const char *const *lines, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(f, "%s\n", lines[i]);
}

/* The page's data: the recording, the channel positions (chx, chy: µm, NaN without a contact), the
 * waveform time axis and every unit but noise (0). */
static void write_data(FILE *f, const ss_sort_state *s, const double *chx, const double *chy, const unit_spikes *g) {
  const int C = s->stats.C, W = s->stats.W;
  fputs("{\"name\":", f);
  str(f, s->sum->base);
  fprintf(f, ",\"duration_s\":");
  num(f, s->info->duration_s);
  fprintf(f, ",\"n_spikes\":%lld,\"n_channels\":%d,\"bin_ms\":%g,\"wave_ms\":[", (long long)s->spikes.n, C,
          REPORT_BIN_MS);
  for (int t = 0; t < W; t++) {
    if (t) fputc(',', f);
    num(f, (t - s->fe.detect.n_before) * 1000.0 / s->spikes.rate_hz);
  }
  fputs("],\"probe\":{", f);
  num_array(f, "x", chx, C);
  fputc(',', f);
  num_array(f, "y", chy, C);
  fputs("},\"units\":[", f);
  for (int64_t u = 1; u < s->k; u++) {
    if (u > 1) fputs(",\n", f);
    write_unit(f, s, chy, g, u);
  }
  fputs("]}", f);
}

ss_status ss_sort_write_report(ss_ctx *ctx, const ss_sort_state *s) {
  char path[SS_SORT_PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/report.html", s->write_dir);
  const int C = s->spikes.n_channels;
  unit_spikes g = {0};
  double *chx = NULL; /* x of each recording channel, then y */
  ss_status st = SS_ALLOC(ctx, chx, (size_t)(C > 0 ? 2 * C : 1), "report: channel positions");
  double *chy = st == SS_OK ? chx + C : NULL;
  for (int c = 0; st == SS_OK && c < 2 * C; c++) chx[c] = NAN;
  for (int i = 0; st == SS_OK && i < s->probe->n; i++)
    if (s->probe->channel[i] >= 0 && s->probe->channel[i] < C) {
      chx[s->probe->channel[i]] = s->probe->x[i];
      chy[s->probe->channel[i]] = s->probe->y[i];
    }
  if (st == SS_OK) st = group_spikes(ctx, s, &g);
  FILE *f = st == SS_OK ? fopen(path, "w") : NULL;
  if (st == SS_OK && !f) st = ss_fail(ctx, SS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
  if (f) {
    write_lines(f, page_head, sizeof(page_head) / sizeof(page_head[0]));
    write_data(f, s, chx, chy, &g);
    fputc('\n', f);
    write_lines(f, page_tail, sizeof(page_tail) / sizeof(page_tail[0]));
    int bad = ferror(f);
    bad |= fclose(f) != 0;
    if (bad) st = ss_fail(ctx, SS_ERR_IO, "%s: write failed", path);
  }
  free(chx);
  free(g.start);
  free(g.idx);
  return st;
}
