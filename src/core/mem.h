/* mem.h - allocation wrappers. sl_x* abort on out-of-memory (policy: see buf.h). */
#ifndef SL_CORE_MEM_H
#define SL_CORE_MEM_H

#include <stddef.h>

void *sl_xmalloc(size_t n);
void *sl_xcalloc(size_t n, size_t size);
void *sl_xrealloc(void *p, size_t n);
char *sl_xstrdup(const char *s);
char *sl_xstrndup(const char *s, size_t n);
void sl_free(void *p);

#endif
