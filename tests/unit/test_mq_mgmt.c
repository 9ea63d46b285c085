/* test_mq_mgmt.c - unit tests for MSMQ's management rules below the doors (src/mq/info.c,
 * mgmtobj.c): the property tables (numbers, names, aliases, the other table refused), the
 * SEQUENCE_INFO blob's bytes, and the MC-MQAC management object's members, checks and
 * enumerations, which every door shares.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mq/ctxtab.h"
#include "mq/info.h"
#include "mq/mgmtobj.h"

START_TEST(property_tables)
{
    const mq_prop_def *p = mq_info_prop_parse("7", 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p->name, "MESSAGE_COUNT");
    ck_assert_uint_eq(p->vt, MQ_VT_UI4);
    /* full and short names, any case; an alias keeps its own name */
    ck_assert_int_eq(mq_info_prop_parse("propid_mgmt_queue_state", 0)->id, 11);
    ck_assert_str_eq(mq_info_prop_parse("USED_QUOTA", 0)->name, "USED_QUOTA");
    ck_assert_int_eq(mq_info_prop_parse("USED_QUOTA", 0)->id, 8);
    ck_assert_int_eq(mq_info_prop_parse("PROPID_MGMT_MSMQ_PRIVATEQ", 1)->id, 2);
    /* a name of the other table, an unknown one, a number neither has */
    ck_assert_ptr_null(mq_info_prop_parse("PROPID_MGMT_MSMQ_PRIVATEQ", 0));
    ck_assert_ptr_null(mq_info_prop_parse("PROPID_MGMT_QUEUE_STATE", 1));
    ck_assert_ptr_null(mq_info_prop_parse("NOPE", 0));
    ck_assert_ptr_null(mq_info_prop(1, 7));
    ck_assert_uint_eq(mq_info_prop(1, 6)->vt, MQ_VT_I8);
    ck_assert_uint_eq(mq_info_prop(0, MQ_PROP_EOD_SOURCE_INFO)->vt, MQ_VT_VARIANT | MQ_VT_VECTOR);
    ck_assert_str_eq(mq_vt_name(MQ_VT_VARIANT | MQ_VT_VECTOR), "VT_VARIANT|VT_VECTOR");
}
END_TEST

START_TEST(seqinfo_blob)
{
    mq_seqinfo s = {.seq_id = 0x0102030405060708ULL, .seq_no = 0x11223344, .prev_no = 5};
    uint8_t b[16];
    mq_seqinfo_bytes(&s, b);
    static const uint8_t want[16] = {8, 7, 6, 5, 4, 3, 2, 1, 0x44, 0x33, 0x22, 0x11, 5, 0, 0, 0};
    ck_assert_mem_eq(b, want, 16);
}
END_TEST

START_TEST(management_object_members)
{
    const mq_mobj_member *mb = mq_mobj_member_find("message-count");
    ck_assert_ptr_nonnull(mb);
    ck_assert_ptr_eq(mq_mobj_member_find("MESSAGECOUNT"), mb);
    ck_assert_ptr_null(mq_mobj_member_find("init"));
    int ids[MQ_MOBJ_MAX_PROPS];
    ck_assert_int_eq(mq_mobj_member_props(mb, ids), 1);
    ck_assert_int_eq(ids[0], 7);
    ck_assert_int_eq(mq_mobj_member_props(mq_mobj_member_find("EodGetSendInfo"), ids), 11);
    ck_assert_int_eq(ids[0], 13);
    ck_assert_int_eq(ids[10], 23);
    ck_assert_int_eq(mq_mobj_member_props(mq_mobj_member_find("pause"), ids), 0);

    /* uninitialized first, then the interface, then no action through a link */
    char err[300];
    mq_mobj o = {0};
    ck_assert_int_eq(mq_mobj_check(NULL, &o, "M", mb, err, sizeof err),
                     SL_ERR_UNINITIALIZED_OBJECT);
    o.initialized = 1;
    ck_assert_int_eq(mq_mobj_check(NULL, &o, "M", mb, err, sizeof err), SL_OK);
    ck_assert_int_eq(mq_mobj_check(NULL, &o, "M", mq_mobj_member_find("state"), err, sizeof err),
                     SL_ERR_NOINTERFACE);
    o.outgoing = 1;
    ck_assert_int_eq(
        mq_mobj_check(NULL, &o, "M", mq_mobj_member_find("journal-message-count"), err, sizeof err),
        SL_ERR_NOINTERFACE);
    o.rhost = "10.0.0.2";
    o.rport = 1801;
    ck_assert_int_eq(mq_mobj_check(NULL, &o, "M", mq_mobj_member_find("resume"), err, sizeof err),
                     SL_ERR_ACCESS_REFUSED);
    ck_assert_int_eq(mq_mobj_check(NULL, &o, "M", mq_mobj_member_find("state"), err, sizeof err),
                     SL_OK);
}
END_TEST

START_TEST(management_object_enumerations)
{
    char err[300];
    int v;
    const char *name;
    ck_assert_int_eq(
        mq_mobj_enum(mq_mobj_member_find("state"), "connected", &v, &name, err, sizeof err), SL_OK);
    ck_assert_int_eq(v, 6);
    ck_assert_str_eq(name, "MQ_QUEUE_STATE_CONNECTED");
    ck_assert_int_eq(
        mq_mobj_enum(mq_mobj_member_find("queue-type"), "MACHINE", &v, &name, err, sizeof err),
        SL_OK);
    ck_assert_int_eq(v, 2);
    ck_assert_int_eq(
        mq_mobj_enum(mq_mobj_member_find("foreign-status"), "maybe", &v, &name, err, sizeof err),
        SL_ERR_INTERNAL);
    ck_assert_int_eq(mq_mobj_state_value(LINK_WAITING, &name), 2);
    ck_assert_str_eq(name, "MQ_QUEUE_STATE_WAITING");
    ck_assert_int_eq(mq_mobj_foreign_value(LINK_FOREIGN_UNKNOWN, &name), 2);
    ck_assert_str_eq(name, "MQ_STATUS_UNKNOWN");
    ck_assert(mq_mobj_is_local("local"));
    ck_assert(!mq_mobj_is_local(NULL));
    ck_assert(mq_mobj_is_outgoing("REMOTE"));
}
END_TEST

/* Names of an outgoing queue's connection-history statuses; the rundowns' period. */
START_TEST(history_names_and_rundown_period)
{
    ck_assert_str_eq(mq_info_hist_status_name(0), "InProcess");
    ck_assert_str_eq(mq_info_hist_status_name(2), "Established");
    ck_assert_str_eq(mq_info_hist_status_name(0x80000004u), "SocketConnectFailure");
    ck_assert_str_eq(mq_info_hist_status_name(0x8000000Bu), "ConnectionRefused");
    ck_assert_str_eq(mq_info_hist_status_name(0x80000005u), "UnknownFailure");
    node_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.handle_idle_timeout_s = 60; /* a quarter of it */
    ck_assert_uint_eq(mq_ctx_rundown_period_ms(&cfg), 15000);
    cfg.handle_idle_timeout_s = 0; /* never under 200 ms */
    ck_assert_uint_eq(mq_ctx_rundown_period_ms(&cfg), 200);
    cfg.handle_idle_timeout_s = 3600; /* never over 30 s */
    ck_assert_uint_eq(mq_ctx_rundown_period_ms(&cfg), 30000);
}
END_TEST

static Suite *mq_mgmt_suite(void)
{
    Suite *s = suite_create("mq_mgmt");
    TCase *tc = tcase_create("mq_mgmt");
    tcase_add_test(tc, property_tables);
    tcase_add_test(tc, seqinfo_blob);
    tcase_add_test(tc, management_object_members);
    tcase_add_test(tc, management_object_enumerations);
    tcase_add_test(tc, history_names_and_rundown_period);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(mq_mgmt_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
