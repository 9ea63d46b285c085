/* fault.c - fault injection for the store's syncs, for tests that run a whole broker (in the
 * spirit of SQLite's test VFS): the SLUICE_FAULT settings (log.h) wrap st_log__fdatasync so a
 * sync can be made slow or fail. Off unless configured; the wrapper runs on the sync thread,
 * so its counter is atomic. crash_at=NAME[@N] kills the process at a named point of a
 * multi-step operation (st_fault_point, called from the loop thread and, for meta-synced,
 * the sync thread: a mutex keeps the armed point's state whole).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
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
static char *crash_point; /* crash_at=NAME[@N] */
static long long crash_countdown = 1;
static char *crash_file; /* crash_at_file=PATH: the point is read from PATH while it exists */
static char crash_file_seen[128];
static long long crash_file_hits;

static void crash_now(const char *name)
{
    fprintf(stderr, "SLUICE_FAULT: crash_at=%s reached: killing this process\n", name);
    fflush(stderr);
    raise(SIGKILL);
}

/* Parse "NAME" or "NAME@N" (N >= 1) of len bytes: 0 with the name length and N, or -1. */
static int parse_point(const char *v, size_t vl, size_t *nl, long long *n);

static pthread_mutex_t crash_lock = PTHREAD_MUTEX_INITIALIZER;
static void point_locked(const char *name);

void st_fault_point(const char *name)
{
    if (!crash_point && !crash_file)
        return;
    pthread_mutex_lock(&crash_lock);
    point_locked(name);
    pthread_mutex_unlock(&crash_lock);
}

static void point_locked(const char *name)
{
    if (crash_point && !strcmp(name, crash_point) && --crash_countdown == 0)
        crash_now(name);
    if (!crash_file)
        return;
    /* Read at every point (they are few: a handful per TIDY), so a test can arm one
     * point per round without restarting the process. */
    char buf[128];
    FILE *f = fopen(crash_file, "r");
    size_t len = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    while (len && (buf[len - 1] == '\n' || buf[len - 1] == ' '))
        len--;
    buf[len] = 0;
    if (strcmp(buf, crash_file_seen) != 0) { /* armed anew (or disarmed) */
        snprintf(crash_file_seen, sizeof crash_file_seen, "%s", buf);
        crash_file_hits = 0;
    }
    size_t nl;
    long long n;
    if (!len || parse_point(buf, len, &nl, &n) < 0 || nl != strlen(name) ||
        memcmp(buf, name, nl) != 0)
        return;
    if (++crash_file_hits == n)
        crash_now(name);
}

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

static int parse_point(const char *v, size_t vl, size_t *nl, long long *n)
{
    const char *at = memchr(v, '@', vl);
    *nl = at ? (size_t)(at - v) : vl;
    *n = 1;
    if (!*nl || (at && (parse_num(at + 1, vl - *nl - 1, n) < 0 || *n < 1)))
        return -1;
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
        } else if ((kl == 8 && !memcmp(p, "crash_at", kl)) ||
                   (kl == 13 && !memcmp(p, "crash_at_file", kl))) {
            size_t nl;
            if (kl == 8 && parse_point(v, vl, &nl, &x) < 0) {
                snprintf(err, errlen, "SLUICE_FAULT: crash_at '%.*s' (want NAME or NAME@N)",
                         (int)vl, v);
                return -1;
            }
            if (kl == 13 && !vl) {
                snprintf(err, errlen, "SLUICE_FAULT: crash_at_file needs a path");
                return -1;
            }
            if (kl == 8) {
                free(crash_point);
                crash_point = strndup(v, nl);
                crash_countdown = x;
            } else {
                free(crash_file);
                crash_file = strndup(v, vl);
            }
            p += n;
            if (*p == ',')
                p++;
            continue; /* syncs stay as they are */
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
