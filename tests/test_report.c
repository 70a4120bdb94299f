/* test_report.c — report.html renders: the demo's recording (60 s, 32 channels, seed 1) is sorted,
 * the page is loaded in headless Chromium, and the DOM its script built must hold one card and one
 * table row per unit, with no script error. Skipped (exit 77) when chromium is not installed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss_test.h"

#define PATH_LEN 4096
#define ARGS_LEN (4 * PATH_LEN)

/* How many times `needle` occurs in `text`. */
static int occurrences(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Units of the sort (clusters after the merge, noise cluster 0 left out), from its summary. */
static int units_of(const char *summary) {
  const char *line = strstr(summary, "clusters: ");
  assert_non_null(line);
  int k = 0;
  assert_int_equal(sscanf(line, "clusters: %*d from masked EM (%*d iterations), %d after", &k), 1);
  return k - 1;
}

static void report_renders(void **state) {
  (void)state;
  char sim[PATH_LEN], dir[PATH_LEN], dom[PATH_LEN], profile[PATH_LEN], args[ARGS_LEN], cmd[ARGS_LEN];
  ss_test_path(sim, sizeof(sim), "sim.nwb");
  ss_test_path(dir, sizeof(dir), "sorted");
  ss_test_path(dom, sizeof(dom), "dom.html");
  ss_test_path(profile, sizeof(profile), "chromium-profile");
  char *out = NULL, *err = NULL;
  snprintf(args, sizeof(args), "simulate -o '%s' --duration 60 --seed 1 -q", sim);
  if (ss_test_run_cli(args, &out, &err) != 0) fail_msg("%s", err);
  free(out), free(err);
  snprintf(args, sizeof(args), "sort '%s' -o '%s' -q --device cpu", sim, dir);
  if (ss_test_run_cli(args, &out, &err) != 0) fail_msg("%s", err);
  int units = units_of(out);
  free(out), free(err);
  assert_true(units > 0);

  snprintf(cmd, sizeof(cmd), "%s/report.html", dir);
  char *page = ss_test_slurp(cmd);
  assert_null(strstr(page, " src=")); /* self-contained: nothing loaded from elsewhere */
  assert_null(strstr(page, "<link"));
  free(page);

  snprintf(cmd, sizeof(cmd),
           "timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir='%s' --dump-dom "
           "'file://%s/report.html' > '%s' 2>/dev/null",
           profile, dir, dom);
  assert_int_equal(system(cmd), 0);
  char *html = ss_test_slurp(dom);
  if (!strstr(html, "data-report=\"ok\"") || strstr(html, "id=\"report-error\""))
    fail_msg("the page's script did not finish:\n%.2000s", html);
  for (int u = 1; u <= units; u++) {
    char card[64], row[64];
    snprintf(card, sizeof(card), "id=\"unit-%d\"", u);
    snprintf(row, sizeof(row), "id=\"row-%d\"", u);
    if (occurrences(html, card) != 1 || occurrences(html, row) != 1) fail_msg("unit %d of %d is missing", u, units);
  }
  char beyond[64];
  snprintf(beyond, sizeof(beyond), "id=\"unit-%d\"", units + 1);
  assert_null(strstr(html, beyond));
  assert_int_equal(occurrences(html, "class=\"unit\""), units);
  printf("report.html: %d units drawn\n", units);
  free(html);
}

int main(void) {
  if (system("command -v chromium >/dev/null 2>&1") != 0) {
    printf("skipped: chromium not installed (scripts/install-deps.sh installs it)\n");
    return 77;
  }
  const struct CMUnitTest tests[] = {cmocka_unit_test(report_renders)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
