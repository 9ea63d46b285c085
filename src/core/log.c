/* log.c - leveled logging to stderr with a UTC timestamp. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>

int sl_log_min_level = SL_LOG_INFO;

int sl_log_level_parse(const char *s)
{
    if (!strcasecmp(s, "debug"))
        return SL_LOG_DEBUG;
    if (!strcasecmp(s, "info"))
        return SL_LOG_INFO;
    if (!strcasecmp(s, "warning") || !strcasecmp(s, "warn"))
        return SL_LOG_WARN;
    if (!strcasecmp(s, "error"))
        return SL_LOG_ERROR;
    return -1;
}

void sl_log(int level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "warning", "error"};
    if (level < sl_log_min_level)
        return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char line[2048];
    int n = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    n += snprintf(line + n, sizeof line - (size_t)n, ".%03dZ [%s] ", (int)(tv.tv_usec / 1000),
                  names[level & 3]);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        m = 0;
    n += m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
}
