/* log.c - leveled logging to stderr with a UTC timestamp. Invariant: one call is one line (a
 * control byte in the message, from any argument, is written as '?'). */
#include "core/log.h"

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
    int start = n;
    n += m;
    if (n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    /* One line per call whatever the arguments hold: names from the wire (a queue, a node, a
     * header) appear in audit lines, and a newline, carriage return or escape sequence in one
     * would let a peer forge a line of its own or hide the real one. */
    for (int i = start; i < n; i++)
        if ((unsigned char)line[i] < 0x20 ? line[i] != '\t' : line[i] == 0x7f)
            line[i] = '?';
    line[n++] = '\n';
    fwrite(line, 1, (size_t)n, stderr);
}
