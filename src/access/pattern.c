/* pattern.c - permission patterns: PCRE2 (Debian's libpcre2-8) with a bounded cost.
 *
 * Why PCRE2: RabbitMQ matches permissions with Erlang's re module, which is PCRE; using the
 * same engine gives the same answers for the same patterns (lookarounds, backreferences and
 * all), so definitions move between the two brokers unchanged. A backtracking engine can be
 * made to take exponential time by a hostile pattern ("(a+)+$" against "aaaa...b"), so every
 * match runs under limits instead of trusting the pattern:
 *   - match limit 100,000 (calls of the internal match function; a normal permission check
 *     takes tens),
 *   - depth limit 2,000 (backtracking depth) and heap limit 1 MiB,
 *   - subjects are at most 255 bytes (AMQP short strings), patterns at most ACC_PATTERN_MAX.
 * So one check costs at most a few milliseconds even for the worst pattern, and one that hits
 * a limit refuses access (fails closed) and is logged, at most once a second. A linear-time
 * engine (RE2) would bound the cost without limits but is C++ and differs from Erlang's re
 * (no backreferences or lookarounds), so patterns written for RabbitMQ would change meaning.
 *
 * Compilation: no flags (byte semantics, no UTF mode, as Erlang's re with a binary subject
 * and no unicode option). The pattern is stored compiled; matching reuses one match-data
 * block (single thread).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/log.h"
#include "core/mem.h"
#include "access/access.h"

#define MATCH_LIMIT 100000u
#define DEPTH_LIMIT 2000u
#define HEAP_LIMIT_KIB 1024u

struct acc_re {
    pcre2_code *code;
};

static pcre2_match_context *match_ctx;
static pcre2_match_data *match_data;

static void init_once(void)
{
    if (match_ctx)
        return;
    match_ctx = pcre2_match_context_create(NULL);
    pcre2_set_match_limit(match_ctx, MATCH_LIMIT);
    pcre2_set_depth_limit(match_ctx, DEPTH_LIMIT);
    pcre2_set_heap_limit(match_ctx, HEAP_LIMIT_KIB);
    match_data = pcre2_match_data_create(1, NULL);
    if (!match_ctx || !match_data) {
        sl_error("pcre2: out of memory");
        abort();
    }
}

acc_re *acc_re_compile(const char *src, size_t len, char *err, size_t errlen)
{
    if (len > ACC_PATTERN_MAX) {
        snprintf(err, errlen, "pattern longer than %d bytes", ACC_PATTERN_MAX);
        return NULL;
    }
    /* RabbitMQ: the empty pattern is "^$" (matches no named resource). */
    if (len == 0) {
        src = "^$";
        len = 2;
    }
    int code;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)src, len, 0, &code, &off, NULL);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errlen, "invalid regular expression at offset %zu: %s", (size_t)off,
                 (const char *)msg);
        return NULL;
    }
    acc_re *re = sl_xmalloc(sizeof *re);
    re->code = c;
    return re;
}

int acc_re_match(const acc_re *re, const char *s, size_t n)
{
    init_once();
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, 0, 0, match_data, match_ctx);
    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    static uint64_t last_log;
    uint64_t now = sl_now_ms();
    if (now - last_log >= 1000) {
        last_log = now;
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        sl_warn("access: a permission pattern could not be matched (%s): access refused",
                (const char *)msg);
    }
    return -1;
}

void acc_re_free(acc_re *re)
{
    if (!re)
        return;
    pcre2_code_free(re->code);
    sl_free(re);
}
