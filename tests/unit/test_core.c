/* test_core.c - unit tests for src/core/ parts that have no other home: the ordered set
 * (oset.c) against a plain sorted array, over a seeded random schedule of inserts and
 * removes (a failure repeats), checking order, ranks, seeks and the treap's invariants; the
 * output holds (holds.c): giving up the soft marks never lets out what a hard one holds; the
 * event loop (net/loop.c): its slow-turn line and its bounded busy poll.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/holds.h"
#include "core/log.h"
#include "core/oset.h"
#include "net/loop.h"

typedef struct elem {
    char name[16];
    int in;
    sl_onode node;
} elem;

enum { NE = 2000 };
static elem E[NE];

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* heap order, sizes, parent links; returns the subtree size */
static unsigned check_tree(const sl_onode *n, const sl_onode *parent)
{
    if (!n)
        return 0;
    ck_assert_ptr_eq(n->parent, parent);
    if (parent)
        ck_assert_uint_le(parent->prio, n->prio);
    unsigned sz = 1 + check_tree(n->left, n) + check_tree(n->right, n);
    ck_assert_uint_eq(n->size, sz);
    return sz;
}

START_TEST(oset_agrees_with_sorted_array)
{
    sl_oset s = {0};
    unsigned seed = 20261201;
    for (int i = 0; i < NE; i++) {
        snprintf(E[i].name, sizeof E[i].name, "q%d", (i * 7919) % NE);
        E[i].in = 0;
    }
    static const char *want[NE];
    for (int step = 0; step < 20000; step++) {
        elem *e = &E[rand_r(&seed) % NE];
        if (e->in)
            sl_oset_remove(&s, &e->node);
        else
            sl_oset_insert(&s, &e->node, e->name, strlen(e->name));
        e->in = !e->in;
        if (step % 997 != 0)
            continue;
        size_t n = 0;
        for (int i = 0; i < NE; i++)
            if (E[i].in)
                want[n++] = E[i].name;
        qsort(want, n, sizeof *want, cmp_names);
        ck_assert_uint_eq(sl_oset_count(&s), n);
        ck_assert_uint_eq(check_tree(s.root, NULL), n);
        size_t i = 0;
        for (sl_onode *o = sl_oset_first(&s); o; o = sl_oset_next(o), i++) {
            ck_assert_str_eq(SL_ONODE_OWNER(o, elem, node)->name, want[i]);
            ck_assert_ptr_eq(sl_oset_select(&s, i), o);
        }
        ck_assert_uint_eq(i, n);
        for (sl_onode *o = sl_oset_last(&s); o; o = sl_oset_prev(o))
            ck_assert_str_eq(SL_ONODE_OWNER(o, elem, node)->name, want[--i]);
        ck_assert_ptr_null(sl_oset_select(&s, n));
        /* seek: every key, present or not, lands on the first name >= (or >) it */
        for (int k = 0; k < 50; k++) {
            char key[16];
            snprintf(key, sizeof key, "q%d", rand_r(&seed) % (NE + 100));
            for (int after = 0; after < 2; after++) {
                sl_onode *o = sl_oset_seek(&s, key, strlen(key), after);
                size_t j = 0;
                while (j < n && (after ? strcmp(want[j], key) <= 0 : strcmp(want[j], key) < 0))
                    j++;
                if (j == n)
                    ck_assert_ptr_null(o);
                else
                    ck_assert_str_eq(SL_ONODE_OWNER(o, elem, node)->name, want[j]);
            }
        }
    }
}
END_TEST

/* ---- the loop's slow-turn line ---- */

static int turns_seen;

static void busy_timer(sl_loop *l, sl_timer *t)
{
    uint64_t until = sl_now_us() + 130 * 1000; /* over SLOW_TURN_MS, on the CPU */
    while (sl_now_us() < until)
        ;
    (void)l;
    (void)t;
}

static void quick_timer(sl_loop *l, sl_timer *t)
{
    (void)l;
    (void)t;
}

static void stop_after_three(sl_loop *l, void *arg)
{
    (void)arg;
    if (++turns_seen > 3)
        sl_loop_stop(l);
    else
        sl_loop_wake(l);
}

/* Run a loop whose second turn runs timer fn; return what it logged. */
static char *log_of_turn(sl_timer_fn fn, int twice)
{
    char path[] = "/tmp/sluice-loop-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    sl_loop *l = sl_loop_new();
    sl_loop_set_cpu_stats(l, 1);
    sl_timer t, t2;
    sl_timer_init(&t, fn, NULL);
    sl_timer_init(&t2, fn, NULL);
    sl_timer_start(l, &t, sl_now_ms());
    if (twice)
        sl_timer_start(l, &t2, sl_now_ms() + 20);
    turns_seen = 0;
    sl_loop_set_before_sleep(l, stop_after_three, NULL);
    sl_loop_run(l);
    if (twice) { /* the second slow turn comes within SLOW_LOG_EVERY_MS: counted, not logged */
        turns_seen = 0;
        sl_loop_run(l);
    }
    sl_loop_free(l);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    static char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return buf;
}

/* ---- the loop's busy poll ---- */

static void stop_timer(sl_loop *l, sl_timer *t)
{
    (void)t;
    sl_loop_stop(l);
}

typedef struct chain {
    int rd, wr;
    int left;         /* bytes still to send */
    sl_timer stop;    /* started by the last byte: the loop idles until it */
    uint64_t last_ms; /* when the last byte came */
} chain;

/* Each read writes the next byte from inside the turn: the next wait finds it at once. */
static void chain_read(sl_loop *l, sl_watch *w, int ev)
{
    chain *c = w->data;
    char b;
    ck_assert_int_eq(read(c->rd, &b, 1), 1);
    if (c->left-- > 0) {
        ck_assert_int_eq(write(c->wr, "x", 1), 1);
    } else {
        c->last_ms = sl_now_ms();
        sl_timer_start(l, &c->stop, c->last_ms + 20);
    }
    (void)ev;
}

/* With busy_poll_us, a wait after a turn with events polls and finds the next one without
 * sleeping (counted); without it, never. And the poll is bounded: once the traffic stops, the
 * loop sleeps until its timer, which stops it. */
START_TEST(busy_poll_finds_events_without_sleeping_and_stays_bounded)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    sl_loop *l = sl_loop_new();
    sl_loop_set_busy_poll(l, _i ? 1000 : 0);
    chain c = {fds[0], fds[1], 100, {0}, 0};
    sl_timer_init(&c.stop, stop_timer, NULL);
    sl_watch w = {.fd = fds[0], .fn = chain_read, .data = &c};
    ck_assert_int_eq(sl_loop_watch(l, &w, SL_EV_READ), 0);
    ck_assert_int_eq(write(fds[1], "x", 1), 1);
    sl_loop_run(l);
    ck_assert_int_eq(c.left, -1);
    ck_assert_uint_ge(sl_now_ms() - c.last_ms, 19);
    if (_i)
        ck_assert_uint_ge(sl_loop_busy_polls(l), 99);
    else
        ck_assert_uint_eq(sl_loop_busy_polls(l), 0);
    sl_loop_unwatch(l, &w);
    sl_loop_free(l);
    close(fds[0]);
    close(fds[1]);
}
END_TEST

START_TEST(a_slow_turn_is_logged_with_where_it_went)
{
    char *out = log_of_turn(busy_timer, 0);
    ck_assert_msg(strstr(out, "loop: a turn took ") != NULL, "no slow-turn line in: %s", out);
    ck_assert_msg(strstr(out, "ms of CPU)") != NULL, "no CPU figure in: %s", out);
    double timers = 0;
    const char *p = strstr(out, "timers ");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, "timers %lf ms", &timers), 1);
    ck_assert_msg(timers >= 120, "the timers' share is %.1f ms: %s", timers, out);
    out = log_of_turn(quick_timer, 0);
    ck_assert_msg(strstr(out, "loop: a turn took") == NULL, "a quick turn logged: %s", out);
}
END_TEST

START_TEST(slow_turns_are_logged_at_most_once_in_ten_seconds)
{
    char *out = log_of_turn(busy_timer, 1);
    const char *first = strstr(out, "loop: a turn took");
    ck_assert_ptr_nonnull(first);
    ck_assert_msg(strstr(first + 1, "loop: a turn took") == NULL, "two lines: %s", out);
}
END_TEST

/* Delivery marks are soft, confirms hard: dropping the soft ones frees the stream up to the
 * first hard mark, and a hard mark covered by a soft one makes that one hard. */
START_TEST(dropping_soft_holds_keeps_the_hard_ones)
{
    sl_holds h = {0};
    sl_holds_mark_soft(&h, 10, 5, 0); /* a delivery at 10 waits for generation 5 */
    sl_holds_mark(&h, 20, 7, 0);      /* a confirm at 20 for 7 */
    sl_holds_mark_soft(&h, 30, 9, 0); /* a delivery at 30 for 9 */
    ck_assert_uint_eq(h.len, 3);
    ck_assert_uint_eq(sl_holds_avail(&h, 0, 100), 10);
    ck_assert_uint_eq(sl_holds_drop_soft(&h), 2);
    ck_assert_uint_eq(sl_holds_avail(&h, 0, 100), 20); /* the confirm still waits */
    sl_holds_release(&h, 7);
    ck_assert_uint_eq(sl_holds_avail(&h, 0, 100), 100);
    sl_holds_clear(&h);

    /* a confirm (hard, generation 4) covered by a delivery's wait for 6: that wait is hard */
    sl_holds_mark_soft(&h, 10, 6, 0);
    sl_holds_mark(&h, 20, 4, 0);
    ck_assert_uint_eq(h.len, 1);
    ck_assert_uint_eq(sl_holds_drop_soft(&h), 0);
    ck_assert_uint_eq(sl_holds_avail(&h, 0, 100), 10);
    /* a soft one covered by a hard one changes nothing */
    sl_holds_mark_soft(&h, 30, 5, 0);
    ck_assert_uint_eq(h.len, 1);
    sl_holds_release(&h, 6);
    ck_assert_uint_eq(sl_holds_avail(&h, 0, 100), 100);

    /* through the ring's wrap: marks released from the head, then soft ones dropped */
    for (uint64_t g = 1; g <= 40; g++) {
        if (g % 3 == 0)
            sl_holds_mark(&h, g * 10, g, 0);
        else
            sl_holds_mark_soft(&h, g * 10, g, 0);
        if (g % 4 == 0)
            sl_holds_release(&h, g - 2);
    }
    sl_holds_drop_soft(&h);
    for (size_t i = 0; i < h.len; i++) {
        const sl_hold *x = &h.v[(h.head + i) % h.cap];
        ck_assert(!x->soft);
        ck_assert_uint_eq(x->gen % 3, 0);
        ck_assert_uint_eq(x->at, x->gen * 10);
        ck_assert_uint_gt(x->gen, 38);
    }
    ck_assert_uint_eq(h.len, 1); /* 39 */
    sl_holds_free(&h);
}
END_TEST

/* A log line is one line whatever its arguments hold: names from the wire (an MS-MQQB
 * destination queue, an HTTP header) are printed in audit lines, and a newline in one would
 * let a peer write a line of its own ("... [warning] audit: ...") or hide the real one. */
START_TEST(a_log_line_is_one_line_whatever_its_arguments_hold)
{
    char path[] = "/tmp/sluice-log-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    sl_warn("audit: refused queue '%s'", "q\n2026-12-07T00:00:00.000Z [info] all fine\r\x1b[2K");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    ck_assert_int_gt(n, 0);
    buf[n] = 0;
    ck_assert_msg(strchr(buf, '\n') == buf + n - 1, "more than one line: %s", buf);
    ck_assert_msg(!strchr(buf, '\r') && !strchr(buf, '\x1b'), "a control byte: %s", buf);
    ck_assert_msg(strstr(buf, "all fine") != NULL, "the argument is still shown: %s", buf);
}
END_TEST

static Suite *core_suite(void)
{
    Suite *s = suite_create("core");
    TCase *tc = tcase_create("oset");
    tcase_add_test(tc, oset_agrees_with_sorted_array);
    tcase_add_test(tc, dropping_soft_holds_keeps_the_hard_ones);
    tcase_add_test(tc, a_log_line_is_one_line_whatever_its_arguments_hold);
    suite_add_tcase(s, tc);
    TCase *loop = tcase_create("loop");
    tcase_add_test(loop, a_slow_turn_is_logged_with_where_it_went);
    tcase_add_test(loop, slow_turns_are_logged_at_most_once_in_ten_seconds);
    tcase_add_loop_test(loop, busy_poll_finds_events_without_sleeping_and_stays_bounded, 0, 2);
    suite_add_tcase(s, loop);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(core_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
