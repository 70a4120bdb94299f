/* acq_fixtures.h — byte writers for acquisition-format fixtures (SpikeGLX, Open Ephys, Intan) that the
 * acquisition tests share: whole files, little-endian growable buffers and Intan header records. */
#ifndef ACQ_FIXTURES_H
#define ACQ_FIXTURES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ss_test.h"

static inline void write_bytes(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  assert_int_equal(fwrite(data, 1, n, f), n);
  fclose(f);
}

typedef struct {
  unsigned char *b;
  size_t n, cap;
} bytes_t;

/* The low `size` bytes of v, little-endian. */
static inline void put(bytes_t *o, uint32_t v, int size) {
  if (o->n + 4 > o->cap) {
    o->cap = o->cap ? o->cap * 2 : 4096;
    o->b = realloc(o->b, o->cap);
    assert_non_null(o->b);
  }
  for (int i = 0; i < size; i++) o->b[o->n++] = (unsigned char)(v >> (8 * i));
}
static inline void put_f32(bytes_t *o, float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  put(o, u, 4);
}
static inline void put_qstring(bytes_t *o, const char *ascii) { /* UTF-16LE, or null */
  put(o, ascii ? (uint32_t)(2 * strlen(ascii)) : 0xFFFFFFFFu, 4);
  for (; ascii && *ascii; ascii++) put(o, (unsigned char)*ascii, 2);
}
/* One channel record: signal type and enabled flag; rhs has a command_stream field. */
static inline void put_channel(bytes_t *o, int rhs, const char *name, int type) {
  put_qstring(o, name);
  put_qstring(o, name);
  put(o, 0, 2), put(o, 0, 2);
  put(o, (uint32_t)type, 2), put(o, 1, 2);
  for (int i = 0; i < (rhs ? 3 : 2) + 4; i++) put(o, 0, 2);
  put_f32(o, 0), put_f32(o, 0);
}

/* An Intan header (.rhd of major version 1 or 3 with minor 3, or .rhs): n_amp amplifier channels
 * A-000.. in group "Port A"; with `extras`, one aux channel (rhd) in that group and one ADC group. */
static inline void put_intan_header(bytes_t *o, int rhs, int major, float rate, int n_amp, int extras) {
  put(o, rhs ? 0xD69127ACu : 0xC6912702u, 4);
  put(o, (uint32_t)major, 2), put(o, 3, 2);
  put_f32(o, rate);
  put(o, 1, 2);
  for (int i = 0; i < (rhs ? 8 : 6); i++) put_f32(o, 1.0f);
  put(o, 1, 2); /* notch 50 Hz */
  put_f32(o, 1000.0f), put_f32(o, 1000.0f);
  if (rhs) put(o, 0, 2), put(o, 0, 2), put_f32(o, 1), put_f32(o, 1), put_f32(o, 1);
  put_qstring(o, "note"), put_qstring(o, NULL), put_qstring(o, NULL);
  if (rhs) put(o, 0, 2), put(o, 0, 2), put_qstring(o, "hardware");
  else {
    put(o, 0, 2), put(o, 0, 2); /* temp sensors, eval board mode */
    if (major > 1) put_qstring(o, "hardware");
  }
  int aux = extras && !rhs;
  put(o, extras ? 2 : 1, 2); /* groups */
  put_qstring(o, "Port A"), put_qstring(o, "A");
  put(o, 1, 2), put(o, (uint32_t)(n_amp + aux), 2), put(o, (uint32_t)n_amp, 2);
  for (int c = 0; c < n_amp; c++) {
    char name[16];
    snprintf(name, sizeof(name), "A-%03d", c);
    put_channel(o, rhs, name, 0);
  }
  if (aux) put_channel(o, rhs, "A-AUX1", 1);
  if (!extras) return;
  put_qstring(o, "Board ADC"), put_qstring(o, "ADC");
  put(o, 1, 2), put(o, 1, 2), put(o, 0, 2);
  put_channel(o, rhs, "ADC-00", 3);
}

#endif
