/* figures.c - a node's /api/nodes figures (see figures.h).
 *
 * Invariant: the process figures are at most FIG_CACHE_MS old; one scan at a time (mu), so
 * a burst of /api/nodes requests costs one scan of /proc/self/fd.
 */
#include "cluster/figures.h"

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"

#define FIG_CACHE_MS 1000

const char *const cl_figures_keys[] = {"mem_used",
                                       "mem_limit",
                                       "mem_alarm",
                                       "disk_free",
                                       "disk_free_limit",
                                       "disk_free_alarm",
                                       "uptime",
                                       "os_pid",
                                       "connected",
                                       "fd_used",
                                       "fd_total",
                                       "sockets_used",
                                       "sockets_total",
                                       "proc_used",
                                       "run_queue",
                                       "processors",
                                       NULL};

typedef struct proc_figs {
    uint64_t at; /* sl_now_ms of the scan; 0: none yet */
    long fd_used, fd_total, sockets_used, proc_used, run_queue, processors;
    double start_s; /* the process's start, seconds since boot */
} proc_figs;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static proc_figs cache;

/* Seconds since boot the process started: field 22 of /proc/self/stat (clock ticks). The
 * command name (field 2) may hold spaces and parentheses: parse after its last ')'. */
static double start_seconds(void)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p)
        return 0;
    p++; /* " S ppid ..." : field 3 onwards; starttime is field 22, the 20th from here */
    unsigned long long v = 0;
    for (int field = 3; field <= 22 && p; field++) {
        while (*p == ' ')
            p++;
        if (field == 22)
            v = strtoull(p, NULL, 10);
        p = strchr(p, ' ');
    }
    long tck = sysconf(_SC_CLK_TCK);
    return tck > 0 ? (double)v / (double)tck : 0;
}

static void scan(proc_figs *o)
{
    memset(o, 0, sizeof *o);
    DIR *d = opendir("/proc/self/fd");
    if (d) {
        int own = dirfd(d);
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || atoi(e->d_name) == own)
                continue;
            o->fd_used++;
            char p[300], l[64];
            snprintf(p, sizeof p, "/proc/self/fd/%s", e->d_name);
            ssize_t k = readlink(p, l, sizeof l - 1);
            if (k >= 7 && !memcmp(l, "socket:", 7))
                o->sockets_used++;
        }
        closedir(d);
    }
    struct rlimit rl;
    o->fd_total =
        getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur : 0;
    /* threads, and those runnable now (state R), not counting the one reading */
    long self_tid = syscall(SYS_gettid);
    d = opendir("/proc/self/task");
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.')
                continue;
            o->proc_used++;
            if (atol(e->d_name) == self_tid)
                continue;
            char p[320], b[512];
            snprintf(p, sizeof p, "/proc/self/task/%s/stat", e->d_name);
            FILE *f = fopen(p, "re");
            if (!f)
                continue;
            size_t n = fread(b, 1, sizeof b - 1, f);
            fclose(f);
            b[n] = 0;
            char *q = strrchr(b, ')');
            if (q && q[1] == ' ' && q[2] == 'R')
                o->run_queue++;
        }
        closedir(d);
    }
    o->processors = sysconf(_SC_NPROCESSORS_ONLN);
    o->start_s = start_seconds();
    o->at = sl_now_ms();
}

static uint64_t uptime_ms(double start_s)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_BOOTTIME, &ts) < 0)
        return 0;
    double now = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    return now > start_s ? (uint64_t)((now - start_s) * 1000.0) : 0;
}

json_t *cl_figures_json(const cl_figures_in *in)
{
    pthread_mutex_lock(&mu);
    uint64_t now = sl_now_ms();
    if (!cache.at || now - cache.at >= FIG_CACHE_MS)
        scan(&cache);
    proc_figs p = cache;
    pthread_mutex_unlock(&mu);
    json_t *j = json_pack(
        "{s:s,s:s,s:b,s:I,s:I,s:b,s:I,s:I,s:b,s:I,s:i,s:b}", "name", in->name, "type", "disc",
        "running", 1, "mem_used", (json_int_t)in->mem_used, "mem_limit", (json_int_t)in->mem_limit,
        "mem_alarm", in->mem_alarm != 0, "disk_free", (json_int_t)in->disk_free, "disk_free_limit",
        (json_int_t)in->disk_free_limit, "disk_free_alarm", in->disk_free_alarm != 0, "uptime",
        (json_int_t)uptime_ms(p.start_s), "os_pid", (int)getpid(), "connected", in->connected != 0);
    json_object_set_new(j, "fd_used", json_integer(p.fd_used));
    json_object_set_new(j, "fd_total", json_integer(p.fd_total));
    json_object_set_new(j, "sockets_used", json_integer(p.sockets_used));
    json_object_set_new(j, "sockets_total", json_integer(p.fd_total));
    json_object_set_new(j, "proc_used", json_integer(p.proc_used));
    json_object_set_new(j, "run_queue", json_integer(p.run_queue));
    json_object_set_new(j, "processors", json_integer(p.processors));
    return j;
}
