/* mem.c - allocation wrappers that abort with a message on out-of-memory. */
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t n)
{
    fprintf(stderr, "sluiced: out of memory allocating %zu bytes\n", n);
    abort();
}

void *sl_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *sl_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *sl_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *sl_xstrndup(const char *s, size_t n)
{
    char *d = sl_xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

char *sl_xstrdup(const char *s)
{
    return sl_xstrndup(s, strlen(s));
}

void sl_free(void *p)
{
    free(p);
}
