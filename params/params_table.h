/* params_table.h — the parameter table (internal to params/): one row per field of ss_params. */
#ifndef SS_PARAMS_TABLE_H
#define SS_PARAMS_TABLE_H

#include <stddef.h>

typedef enum { SS_PT_NUMBER, SS_PT_INT, SS_PT_BOOL, SS_PT_ENUM } ss_param_type;

typedef struct {
  const char *path; /* dotted JSON path */
  ss_param_type type;
  size_t offset;   /* into ss_params */
  double def;      /* default (enum: option index, bool: 0/1) */
  double min, max; /* inclusive bounds unless *_open */
  int min_open, max_open;
  const char *const *options; /* enum names, NULL-terminated */
  const char *doc;
} ss_param_spec;

extern const ss_param_spec ss_param_table[];
extern const size_t ss_param_table_len;

#endif
