/* test_figures.c - a node's /api/nodes figures (src/cluster/figures.h): the caller's figures
 * as given, the process's own read from /proc (descriptors, sockets, threads, pid, limits,
 * processors), every key the leader copies from a member's published object present.
 */
#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster/figures.h"

static long count_dir(const char *path)
{
    DIR *d = opendir(path);
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n - (strcmp(path, "/proc/self/fd") ? 0 : 1); /* opendir's own descriptor */
}

START_TEST(figures_are_the_process_own)
{
    int sv[2];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    long fds = count_dir("/proc/self/fd");
    cl_figures_in in = {.name = "n",
                        .mem_used = 11,
                        .mem_limit = 22,
                        .mem_alarm = 0,
                        .disk_free = 33,
                        .disk_free_limit = 44,
                        .disk_free_alarm = 1,
                        .connected = 0};
    json_t *j = cl_figures_json(&in); /* the first call in this process: a fresh scan */
    ck_assert_str_eq(json_string_value(json_object_get(j, "name")), "n");
    ck_assert(json_is_true(json_object_get(j, "running")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "mem_used")), 11);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "mem_limit")), 22);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "disk_free")), 33);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "disk_free_limit")), 44);
    ck_assert(json_is_false(json_object_get(j, "mem_alarm")));
    ck_assert(json_is_true(json_object_get(j, "disk_free_alarm")));
    ck_assert(json_is_false(json_object_get(j, "connected")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "os_pid")), getpid());
    ck_assert_int_eq(json_integer_value(json_object_get(j, "fd_used")), fds);
    ck_assert_int_ge(json_integer_value(json_object_get(j, "sockets_used")), 2);
    ck_assert_int_le(json_integer_value(json_object_get(j, "sockets_used")), fds);
    struct rlimit lim;
    getrlimit(RLIMIT_NOFILE, &lim);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "fd_total")), (long)lim.rlim_cur);
    ck_assert_int_eq(json_integer_value(json_object_get(j, "proc_used")),
                     count_dir("/proc/self/task"));
    ck_assert_int_ge(json_integer_value(json_object_get(j, "run_queue")), 0);
    ck_assert_int_lt(json_integer_value(json_object_get(j, "run_queue")),
                     json_integer_value(json_object_get(j, "proc_used")));
    ck_assert_int_eq(json_integer_value(json_object_get(j, "processors")),
                     sysconf(_SC_NPROCESSORS_ONLN));
    ck_assert_int_ge(json_integer_value(json_object_get(j, "uptime")), 0);
    for (size_t i = 0; cl_figures_keys[i]; i++)
        ck_assert_msg(json_object_get(j, cl_figures_keys[i]) != NULL, "%s", cl_figures_keys[i]);
    json_decref(j);
    close(sv[0]);
    close(sv[1]);
}
END_TEST

Suite *figures_suite(void)
{
    Suite *s = suite_create("figures");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, figures_are_the_process_own);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(figures_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
