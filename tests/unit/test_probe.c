/* test_probe.c - the probe of a dead leader's replication port (cluster/probe.h, issue 46):
 * the verdict on a run of probes (two refusals in a row: dead; silence or a port that keeps
 * answering: not proven), and the probes against a real loopback socket, listening and then
 * closed as the kernel closes a dead process's. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/probe.h"

/* ---- the probe of a dead leader's port (probe.h, issue 46) ---- */

START_TEST(probe_two_refusals_in_a_row_say_dead)
{
    cl_probe_run r = {.need = 2, .max_answers = 4};
    ck_assert_int_eq(cl_probe_step(&r, CL_PROBE_REFUSED), 0);
    ck_assert_int_eq(cl_probe_step(&r, CL_PROBE_REFUSED), 1);
    /* an answer between refusals starts the count again (a listener that came back, or the
     * dying process's listener still there a moment after the stream closed) */
    cl_probe_run a = {.need = 2, .max_answers = 4};
    ck_assert_int_eq(cl_probe_step(&a, CL_PROBE_REFUSED), 0);
    ck_assert_int_eq(cl_probe_step(&a, CL_PROBE_ANSWERED), 0);
    ck_assert_int_eq(cl_probe_step(&a, CL_PROBE_REFUSED), 0);
    ck_assert_int_eq(cl_probe_step(&a, CL_PROBE_REFUSED), 1);
    /* something keeps listening: give up */
    cl_probe_run b = {.need = 2, .max_answers = 4};
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(cl_probe_step(&b, CL_PROBE_ANSWERED), 0);
    ck_assert_int_eq(cl_probe_step(&b, CL_PROBE_ANSWERED), -1);
    /* silence (a dropped SYN: a partition, a host down) proves nothing: give up at once */
    cl_probe_run c = {.need = 2, .max_answers = 4};
    ck_assert_int_eq(cl_probe_step(&c, CL_PROBE_REFUSED), 0);
    ck_assert_int_eq(cl_probe_step(&c, CL_PROBE_SILENT), -1);
}
END_TEST

START_TEST(probe_a_listening_port_answers_a_closed_one_refuses)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 16), 0);
    socklen_t sl = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &sl);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", ntohs(sa.sin_port));
    ck_assert_int_eq(cl_probe_once(addr, 1000), CL_PROBE_ANSWERED);
    ck_assert_int_eq(cl_probe_dead(addr, 20, 1, 1000), 0);
    close(fd); /* as the kernel does for a process that dies */
    ck_assert_int_eq(cl_probe_once(addr, 1000), CL_PROBE_REFUSED);
    ck_assert_int_eq(cl_probe_dead(addr, 20, 1, 1000), 1);
    ck_assert_int_eq(cl_probe_once("not an address", 1000), CL_PROBE_SILENT);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("probe");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, probe_two_refusals_in_a_row_say_dead);
    tcase_add_test(tc, probe_a_listening_port_answers_a_closed_one_refuses);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
