/* mem.h - allocation wrappers. sl_x* abort on out-of-memory (policy: see buf.h). */
#ifndef SL_CORE_MEM_H
#define SL_CORE_MEM_H

#include <stddef.h>

/* SL_ASAN is 1 in a build under AddressSanitizer, gcc's (__SANITIZE_ADDRESS__) or clang's
 * (__has_feature; clang 14 defines no __SANITIZE_ADDRESS__), else 0: the slab hands out plain
 * mallocs under it, and long simulations run fewer schedules. */
#if defined(__SANITIZE_ADDRESS__)
#define SL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SL_ASAN 1
#endif
#endif
#ifndef SL_ASAN
#define SL_ASAN 0
#endif

void *sl_xmalloc(size_t n);
void *sl_xcalloc(size_t n, size_t size);
void *sl_xrealloc(void *p, size_t n);
char *sl_xstrdup(const char *s);
char *sl_xstrndup(const char *s, size_t n);
void sl_free(void *p);

#endif
