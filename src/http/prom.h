/* prom.h - Prometheus's text exposition format (0.0.4) written into a buffer: sample lines,
 * a family's HELP and TYPE lines with one value, and label values escaped. Formatting only:
 * which figures a node exposes, and under which names, is its callers' (mgmt/metrics.c,
 * node/totals.h). */
#ifndef SL_HTTP_PROM_H
#define SL_HTTP_PROM_H

#include <stdint.h>

#include "core/buf.h"

/* printf into b (a line of at most 1 KiB; longer is cut). */
void http_prom_out(sl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "# HELP name help", "# TYPE name type" and "name v". */
void http_prom_metric(sl_buf *b, const char *name, const char *type, const char *help, uint64_t v);
/* s as a label value: \ " and newline escaped (the quotes are the caller's). */
void http_prom_label(sl_buf *b, const char *s);

#endif
