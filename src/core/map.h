/* map.h - string-keyed hash map (keys are byte strings, copied and NUL-terminated inside).
 *
 * Values are opaque pointers owned by the caller. Iteration order is unspecified; deleting
 * the entry just returned by sl_map_next during iteration is allowed.
 */
#ifndef SL_CORE_MAP_H
#define SL_CORE_MAP_H

#include <stddef.h>

typedef struct sl_map sl_map;

sl_map *sl_map_new(void);
void sl_map_free(sl_map *m); /* frees the map and its keys, not the values */
void *sl_map_get(const sl_map *m, const void *key, size_t klen);
/* Insert or replace; returns the previous value or NULL. */
void *sl_map_put(sl_map *m, const void *key, size_t klen, void *val);
/* Remove; returns the removed value or NULL. */
void *sl_map_del(sl_map *m, const void *key, size_t klen);
size_t sl_map_count(const sl_map *m);
/* Iterate: start with *pos = 0; returns 1 with the entry, 0 at the end. The key stays valid
 * until the entry is removed. */
int sl_map_next(const sl_map *m, size_t *pos, const char **key, size_t *klen, void **val);
/* The values in key order (strcmp), NULL-terminated; *n gets their count. The caller frees the
 * array (sl_free), not the values. m may be NULL (an empty array). */
void **sl_map_sorted(const sl_map *m, size_t *n);

#endif
