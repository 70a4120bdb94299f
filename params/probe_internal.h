/* probe_internal.h — helpers shared by the probe readers and writer (probe.c, probe_pi.c,
 * probe_prb.c); not part of the public interface. */
#ifndef SS_PROBE_INTERNAL_H
#define SS_PROBE_INTERNAL_H

#include <cjson/cJSON.h>

#include "params/probe.h"

#define SS_PROBE_MAX_CONTACTS 65536

ss_status ss_probe_alloc(ss_ctx *ctx, ss_probe *p, int n, int n_probes);
/* Every failure names the origin and the JSON path. */
ss_status ss_probe_get_number(ss_ctx *ctx, const char *origin, const cJSON *item, const char *path, double *out);
ss_status ss_probe_get_int(ss_ctx *ctx, const char *origin, const cJSON *item, const char *path, int *out);
ss_status ss_probe_get_array(ss_ctx *ctx, const char *origin, const cJSON *obj, const char *key, int want, int required,
                             const cJSON **out);
/* positions [[x, y], ...] → p->x, p->y starting at contact `base` (scaled by `scale`) */
ss_status ss_probe_read_positions(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, double scale,
                                  ss_probe *p, int base);
ss_status ss_probe_read_ints(ss_ctx *ctx, const char *origin, const cJSON *arr, const char *key, int *dst);
/* Channels unique, adjacency from the edge list (channel pairs) or by radius. */
ss_status ss_probe_finish(ss_ctx *ctx, const char *origin, const cJSON *adjacency, double radius_um, ss_probe *p);
ss_status ss_probe_load_probeinterface(ss_ctx *ctx, const char *origin, const cJSON *root, ss_probe *p);

#endif
