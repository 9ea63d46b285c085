/* fuzz_pattern.c - libFuzzer target for permission patterns (src/access/pattern.c) and the
 * checks made with them (src/access/access.c).
 *
 * The input is split at its first NUL: a pattern (at most ACC_PATTERN_MAX bytes, anything
 * PCRE2 may be given) and a resource name / routing key (at most 255 bytes, as on the wire).
 * The pattern is set as a user's configure, write and read permission and as a topic
 * permission with {username} / {vhost} expanded; then every check runs against the name.
 * Compiling may fail; matching must end within the match, depth and heap limits however
 * hostile the pattern (libFuzzer's -timeout catches one that does not), never crash, leak,
 * or allow what a failed match should refuse: a check is allowed only when the pattern
 * really matches (pcre2 without limits is not needed for that: a limit hit refuses).
 *
 * Seeds: tests/fuzz/corpus/pattern/ (RabbitMQ-style patterns, catastrophic ones).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access/access.h"
#include "core/log.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    sl_log_min_level = SL_LOG_ERROR + 1;
    const uint8_t *nul = memchr(data, 0, size);
    size_t plen = nul ? (size_t)(nul - data) : size;
    const char *subject = nul ? (const char *)nul + 1 : "";
    size_t slen = nul ? size - plen - 1 : 0;
    if (plen > ACC_PATTERN_MAX || slen > 255)
        return 0;
    char pattern[ACC_PATTERN_MAX + 1];
    memcpy(pattern, data, plen);
    pattern[plen] = 0;
    char err[512];
    /* the pattern alone */
    acc_re *re = acc_re_compile((const char *)data, plen, err, sizeof err);
    int m = re ? acc_re_match(re, subject, slen) : 0;
    CHECK(m >= -1 && m <= 1);
    acc_re_free(re);
    /* as permissions: a check passes only where the pattern matched */
    acc_db *a = acc_new();
    acc_vhost_put(a, "/", NULL, NULL, NULL, err, sizeof err);
    acc_user_def d = {.name = "u", .password = "p", .password_len = 1, .tags = ""};
    CHECK(acc_user_put(a, &d, NULL, err, sizeof err) == SL_OK);
    if (strlen(pattern) == plen &&
        acc_perm_set(a, "u", "/", pattern, pattern, pattern, err, sizeof err) == SL_OK) {
        char name[256];
        memcpy(name, subject, slen);
        name[slen] = 0;
        for (int p = 0; p < 3; p++) {
            sl_err e =
                acc_check(a, "u", "/", ACC_QUEUE, name, strlen(name), (acc_perm)p, err, sizeof err);
            CHECK(e == SL_OK || e == SL_ERR_ACCESS_REFUSED);
            if (e == SL_OK && plen && !memchr(name, ';', strlen(name))) {
                acc_re *r2 = acc_re_compile(pattern, plen, err, sizeof err);
                CHECK(r2 && acc_re_match(r2, name, strlen(name)) == 1);
                acc_re_free(r2);
            }
        }
        acc_check(a, "u", "/", ACC_EXCHANGE, name, strlen(name), ACC_WRITE, err, sizeof err);
        acc_check_move(a, "u", "/", name, "/", name, err, sizeof err);
    }
    if (strlen(pattern) == plen &&
        acc_topic_perm_set(a, "u", "/", "amq.topic", pattern, pattern, err, sizeof err) == SL_OK) {
        acc_check_topic(a, "u", "/", "amq.topic", subject, slen, ACC_WRITE, err, sizeof err);
        acc_check_topic(a, "u", "/", "amq.topic", subject, slen, ACC_READ, err, sizeof err);
    }
    acc_free(a);
    return 0;
}
