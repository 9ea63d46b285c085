/* prom.c - Prometheus text exposition (see prom.h). */
#include "http/prom.h"

#include <stdarg.h>
#include <stdio.h>

void http_prom_out(sl_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[1024];
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        sl_buf_append(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

void http_prom_metric(sl_buf *b, const char *name, const char *type, const char *help, uint64_t v)
{
    http_prom_out(b, "# HELP %s %s\n# TYPE %s %s\n%s %llu\n", name, help, name, type, name,
                  (unsigned long long)v);
}

/* Label values escape \ " and newline. */
void http_prom_label(sl_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            sl_buf_put_u8(b, '\\');
        if (*s == '\n') {
            sl_buf_append(b, "\\n", 2);
            continue;
        }
        sl_buf_put_u8(b, (uint8_t)*s);
    }
}
