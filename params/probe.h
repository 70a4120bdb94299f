/* probe.h — probe geometry and the adjacency graph that detection floods over.
 *
 * Three layouts are read (docs/formats.md, "Probe files"):
 *  - probeinterface JSON (a ProbeGroup: {"specification": "probeinterface", "probes": [...]}); every
 *    probe is read, contacts concatenated, shanks kept apart per probe; a device channel index of -1
 *    marks an unwired contact, kept for writing but left out of the graph and the channel count;
 *  - simple JSON: {"channels": [...], "positions": [[x,y],...], "adjacency": [[a,b],...],
 *    "shanks": [...], "connected": [...], "name": "..."}; adjacency pairs name channels;
 *  - .prb (klusta/phy): channel_groups = {g: {'channels': [...], 'graph': [...], 'geometry': {...}}}.
 * Without an adjacency list (or .prb graph), contacts of one shank within `radius_um` (inclusive)
 * are adjacent. */
#ifndef SS_PROBE_H
#define SS_PROBE_H

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SS_PROBE_CIRCLE = 0, SS_PROBE_SQUARE, SS_PROBE_RECT } ss_probe_shape;

#define SS_PROBE_ID_LEN 48

typedef struct {
  char name[128];
  int n;          /* contacts, unwired ones included */
  int *channel;   /* recording channel (column) of each contact; -1 = unwired */
  double *x, *y;  /* µm */
  int *shank;     /* global shank number: shanks of different probes never share one */
  int *connected; /* 0 = dead or unwired: excluded from detection */
  int *adj_start; /* CSR over contacts: neighbours of i are adj[adj_start[i] .. adj_start[i+1]) */
  int *adj;       /* sorted ascending, no self loops, symmetric; unwired contacts have none */
  /* probeinterface details, kept so that a probe is written back as read */
  int n_probes;
  int *probe;                          /* probe of each contact, 0 .. n_probes-1 */
  int *shape;                          /* ss_probe_shape */
  double *shape_a, *shape_b;           /* circle: radius, -; square: width, -; rect: width, height (µm) */
  double *axes;                        /* 4 per contact: plane axes [[a0, a1], [b0, b1]] */
  char (*contact_id)[SS_PROBE_ID_LEN]; /* "" = none */
  char (*shank_id)[SS_PROBE_ID_LEN];   /* the file's shank label, "" = none */
  char **probe_extra; /* per probe: JSON object text of annotations, contact_annotations, contour, sides */
} ss_probe;

/* Load from a file (".prb" by extension, else JSON); radius_um is used only without an adjacency list. */
ss_status ss_probe_load_file(ss_ctx *ctx, const char *path, double radius_um, ss_probe *out);
ss_status ss_probe_load_json(ss_ctx *ctx, const char *json, const char *origin, double radius_um, ss_probe *out);
ss_status ss_probe_load_prb(ss_ctx *ctx, const char *text, const char *origin, double radius_um, ss_probe *out);
/* A probe from positions alone (e.g. an NWB electrodes table): channel i at (x[i], y[i]), one shank. */
ss_status ss_probe_from_positions(ss_ctx *ctx, int n, const double *x, const double *y, double radius_um,
                                  ss_probe *out);
/* The probe's wired contacts must describe exactly the recording's channels, each once. */
ss_status ss_probe_check_recording(ss_ctx *ctx, const ss_probe *probe, int n_recording_channels);
/* Contacts wired to a device channel (channel >= 0). */
int ss_probe_n_wired(const ss_probe *p);
static inline int ss_probe_degree(const ss_probe *p, int i) { return p->adj_start[i + 1] - p->adj_start[i]; }
/* Contact index of recording channel c, or -1. */
int ss_probe_contact_of_channel(const ss_probe *p, int c);
/* The probe as probeinterface JSON text (malloc'd, caller frees) or written to a file. */
ss_status ss_probe_to_probeinterface(ss_ctx *ctx, const ss_probe *p, char **json_out);
ss_status ss_probe_write_probeinterface(ss_ctx *ctx, const ss_probe *p, const char *path);
void ss_probe_free(ss_probe *p);

#ifdef __cplusplus
}
#endif
#endif
