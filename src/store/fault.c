/* fault.c - fault injection for the store's syncs, for tests that run a whole broker (in the
 * spirit of SQLite's test VFS): the SLUICE_FAULT settings (log.h) wrap st_log__fdatasync so a
 * sync can be made slow or fail. Off unless configured; the wrapper runs on the sync thread,
 * so its counter is atomic.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/log.h"

static unsigned fault_delay_ms;
static long long fault_fail_after = -1; /* -1: never */
static int fault_errno = EIO;
static char *fault_fail_if; /* while this file exists, syncs fail */
static atomic_llong fault_syncs;

static int faulty_fdatasync(int fd)
{
    if (fault_delay_ms) {
        struct timespec ts = {fault_delay_ms / 1000, (long)(fault_delay_ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    }
    long long n = atomic_fetch_add(&fault_syncs, 1);
    if ((fault_fail_after >= 0 && n >= fault_fail_after) ||
        (fault_fail_if && access(fault_fail_if, F_OK) == 0)) {
        errno = fault_errno;
        return -1;
    }
    return fdatasync(fd);
}

static int parse_num(const char *v, size_t len, long long *out)
{
    if (len == 0 || len > 18)
        return -1;
    long long x = 0;
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    *out = x;
    return 0;
}

int st_fault_configure(const char *spec, char *err, size_t errlen)
{
    if (!spec || !*spec)
        return 0;
    int any = 0;
    for (const char *p = spec; *p;) {
        size_t n = strcspn(p, ",");
        const char *eq = memchr(p, '=', n);
        if (!eq) {
            snprintf(err, errlen, "SLUICE_FAULT: '%.*s' is not NAME=VALUE", (int)n, p);
            return -1;
        }
        size_t kl = (size_t)(eq - p), vl = n - kl - 1;
        const char *v = eq + 1;
        long long x;
        if (kl == 13 && !memcmp(p, "sync_delay_ms", kl) && parse_num(v, vl, &x) == 0 &&
            x <= 60000) {
            fault_delay_ms = (unsigned)x;
        } else if (kl == 15 && !memcmp(p, "sync_fail_after", kl) && parse_num(v, vl, &x) == 0) {
            fault_fail_after = x;
        } else if (kl == 12 && !memcmp(p, "sync_fail_if", kl) && vl > 0) {
            free(fault_fail_if);
            fault_fail_if = strndup(v, vl);
        } else if (kl == 10 && !memcmp(p, "sync_errno", kl)) {
            if (vl == 3 && !memcmp(v, "EIO", 3))
                fault_errno = EIO;
            else if (vl == 6 && !memcmp(v, "ENOSPC", 6))
                fault_errno = ENOSPC;
            else if (vl == 6 && !memcmp(v, "EDQUOT", 6))
                fault_errno = EDQUOT;
            else {
                snprintf(err, errlen,
                         "SLUICE_FAULT: sync_errno '%.*s' (want EIO, ENOSPC or EDQUOT)", (int)vl,
                         v);
                return -1;
            }
        } else {
            snprintf(err, errlen, "SLUICE_FAULT: '%.*s' not understood", (int)n, p);
            return -1;
        }
        any = 1;
        p += n;
        if (*p == ',')
            p++;
    }
    if (any)
        st_log__fdatasync = faulty_fdatasync;
    return 0;
}
