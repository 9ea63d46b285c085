/* mirror.c - see mirror.h. (stub bodies: being filled in on wt-mirror) */
#include "cluster/mirror.h"

#include <errno.h>

mirror *mirror_leader_new(const char *data_dir, uint64_t ring_bytes)
{
    errno = ENOSYS;
    return NULL;
}
