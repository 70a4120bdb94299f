/* probe.h — probe geometry and the adjacency graph that detection floods over.
 *
 * Two JSON layouts are read (docs/formats.md, "Probe files"):
 *  - probeinterface: {"probes": [{"contact_positions": [[x,y],...], "device_channel_indices": [...],
 *    "shank_ids": [...]}...]}; a device channel index of -1 marks an unconnected contact;
 *  - simple: {"channels": [...], "positions": [[x,y],...], "adjacency": [[a,b],...],
 *    "shanks": [...], "connected": [...], "name": "..."}; adjacency pairs name channels.
 * Without an adjacency list, contacts of one shank within `radius_um` (inclusive) are adjacent. */
#ifndef SS_PROBE_H
#define SS_PROBE_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char name[128];
  int n;         /* contacts */
  int *channel;  /* recording channel (column) of each contact */
  double *x, *y; /* µm */
  int *shank;
  int *connected; /* 0 = dead or unconnected: excluded from detection */
  int *adj_start; /* CSR over contacts: neighbours of i are adj[adj_start[i] .. adj_start[i+1]) */
  int *adj;       /* sorted ascending, no self loops, symmetric */
} ss_probe;

/* Load from a file; radius_um is used only when the file has no adjacency list. */
ss_status ss_probe_load_file(ss_ctx *ctx, const char *path, double radius_um, ss_probe *out);
ss_status ss_probe_load_json(ss_ctx *ctx, const char *json, const char *origin, double radius_um, ss_probe *out);
/* A probe from positions alone (e.g. an NWB electrodes table): channel i at (x[i], y[i]), one shank. */
ss_status ss_probe_from_positions(ss_ctx *ctx, int n, const double *x, const double *y, double radius_um,
                                  ss_probe *out);
/* The probe must describe exactly the recording's channels, each once. */
ss_status ss_probe_check_recording(ss_ctx *ctx, const ss_probe *probe, int n_recording_channels);
static inline int ss_probe_degree(const ss_probe *p, int i) { return p->adj_start[i + 1] - p->adj_start[i]; }
/* Contact index of recording channel c, or -1. */
int ss_probe_contact_of_channel(const ss_probe *p, int c);
void ss_probe_free(ss_probe *p);

#ifdef __cplusplus
}
#endif
#endif
