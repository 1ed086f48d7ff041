/* common/retry_conf: every accepted form of HCCL's op retry settings, the ranges' edges, and
 * each malformed value with its exact reason. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "retry_conf.h"
#include "test_list.h"

#define EFORM " (the form: \"L0:0, L1:1, L2:0\")"
#define PFORM " (the form: \"MaxCnt:3, HoldTime:5000, IntervalTime:1000\")"

/* enable[] after parsing s over {1, 0, 1}: levels s does not name keep those. */
static void enable_ok(const char *s, int l0, int l1, int l2)
{
    int e[RETRY_LEVELS] = {1, 0, 1};
    char why[256] = "";

    ck_assert_msg(retry_enable_parse("HCCL_OP_RETRY_ENABLE", s, e, why, sizeof(why)) == 0,
                  "\"%s\": %s", s ? s : "(null)", why);
    ck_assert_msg(e[0] == l0 && e[1] == l1 && e[2] == l2, "\"%s\": %d %d %d", s ? s : "(null)",
                  e[0], e[1], e[2]);
}

/* s, an HCCL_OP_RETRY_PARAMS value (params) or an HCCL_OP_RETRY_ENABLE one, is refused with
 * exactly `reason`, and nothing it would set changes. */
static void refused(int params, const char *s, const char *reason)
{
    retry_conf_t c = {.enable = {1, 0, 1}, .max_cnt = 7, .hold_ms = 7, .interval_ms = 7};
    const char *what = params ? "HCCL_OP_RETRY_PARAMS" : "HCCL_OP_RETRY_ENABLE";
    char why[512], want[512];
    int rc = params ? retry_params_parse(what, s, &c, why, sizeof(why))
                    : retry_enable_parse(what, s, c.enable, why, sizeof(why));

    snprintf(want, sizeof(want), "%s=\"%s\" is invalid: %s%s", what, s, reason,
             params ? PFORM : EFORM);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_str_eq(why, want);
    ck_assert(c.enable[0] == 1 && c.enable[1] == 0 && c.enable[2] == 1);
    ck_assert(c.max_cnt == 7 && c.hold_ms == 7 && c.interval_ms == 7);
}

static void enable_bad(const char *s, const char *reason)
{
    refused(0, s, reason);
}

static void params_bad(const char *s, const char *reason)
{
    refused(1, s, reason);
}

/* Each accepted form, and what enable[] holds after it over {1, 0, 1}. */
static const struct {
    const char *s;
    int l0, l1, l2;
} enable_forms[] = {
    {"L0:0, L1:1, L2:0", 0, 1, 0},
    {"L0:0,L1:1,L2:0", 0, 1, 0},
    {"L1:1", 1, 1, 1},
    {"L1:0,L2:0", 1, 0, 0},
    {"L2:0, L0:0", 0, 0, 0},
    {"  \tL1 : 1 ,\tL2:\t0  ", 1, 1, 0},
    {"l0:0, l1:1, L2:0", 0, 1, 0},
    {NULL, 1, 0, 1},
    {"", 1, 0, 1},
    {" \t ", 1, 0, 1},
};

START_TEST(test_enable_forms)
{
    for (size_t i = 0; i < sizeof(enable_forms) / sizeof(enable_forms[0]); i++)
        enable_ok(enable_forms[i].s, enable_forms[i].l0, enable_forms[i].l1, enable_forms[i].l2);
}
END_TEST

START_TEST(test_enable_malformed)
{
    enable_bad("L3:1", "unknown level \"L3\" (L0, L1 or L2)");
    enable_bad("L 1:1", "unknown level \"L\" (L0, L1 or L2)");
    enable_bad(":1", "unknown level \"\" (L0, L1 or L2)");
    enable_bad("L1=1", "unknown level \"L1=1\" (L0, L1 or L2)");
    enable_bad("L1", "no ':' after L1");
    enable_bad("L1 1", "no ':' after L1");
    enable_bad("L1:2", "L1's value \"2\" is not 0 or 1");
    enable_bad("L1:10", "L1's value \"10\" is not 0 or 1");
    enable_bad("L1:on", "L1's value \"on\" is not 0 or 1");
    enable_bad("L1:", "L1's value \"\" is not 0 or 1");
    enable_bad("L2:-1", "L2's value \"-1\" is not 0 or 1");
    enable_bad("L1:1, l1:0", "L1 is given twice");
    enable_bad(",L1:1", "entry 1 is empty");
    enable_bad("L1:1,", "entry 2 is empty");
    enable_bad("L1:1,,L2:0", "entry 2 is empty");
    enable_bad("L1:1 L2:0", "unexpected \"L2:0\" after L1:1");
    enable_bad("L1:1:0", "unexpected \":0\" after L1:1");
    enable_bad("L1:1;L2:0", "L1's value \"1;L2\" is not 0 or 1");
}
END_TEST

/* The three values after parsing s over {7, 7, 7}. */
static void params_ok(const char *s, uint32_t cnt, uint32_t hold, uint32_t interval)
{
    retry_conf_t c = {.max_cnt = 7, .hold_ms = 7, .interval_ms = 7};
    char why[256] = "";

    ck_assert_msg(retry_params_parse("HCCL_OP_RETRY_PARAMS", s, &c, why, sizeof(why)) == 0,
                  "\"%s\": %s", s ? s : "(null)", why);
    ck_assert_uint_eq(c.max_cnt, cnt);
    ck_assert_uint_eq(c.hold_ms, hold);
    ck_assert_uint_eq(c.interval_ms, interval);
}

/* Each accepted form and its values; the ranges' edges: MaxCnt [1, 10], the times [0, 60000]
 * ms. Nothing set: the values before it, 7. */
static const struct {
    const char *s;
    uint32_t cnt, hold, interval;
} params_forms[] = {
    {"MaxCnt:3,HoldTime:5000,IntervalTime:1000", 3, 5000, 1000},
    {"MaxCnt:3, HoldTime:5000, IntervalTime:1000", 3, 5000, 1000},
    {" MaxCnt : 5 ,\tHoldTime:\t5000 , IntervalTime: 5000\t", 5, 5000, 5000},
    {"maxcnt:3, HOLDTIME:0, intervalTime:60000", 3, 0, 60000},
    {"MaxCnt:007, HoldTime:00, IntervalTime:0", 7, 0, 0},
    {"MaxCnt:1, HoldTime:0, IntervalTime:0", 1, 0, 0},
    {"MaxCnt:10, HoldTime:60000, IntervalTime:60000", 10, 60000, 60000},
    {NULL, 7, 7, 7},
    {"", 7, 7, 7},
    {"  ", 7, 7, 7},
};

START_TEST(test_params_forms)
{
    for (size_t i = 0; i < sizeof(params_forms) / sizeof(params_forms[0]); i++)
        params_ok(params_forms[i].s, params_forms[i].cnt, params_forms[i].hold,
                  params_forms[i].interval);
}
END_TEST

START_TEST(test_params_malformed)
{
    params_bad("MaxCnt:0, HoldTime:5000, IntervalTime:1000",
               "MaxCnt's value \"0\" is out of range [1, 10]");
    params_bad("MaxCnt:11, HoldTime:5000, IntervalTime:1000",
               "MaxCnt's value \"11\" is out of range [1, 10]");
    params_bad("MaxCnt:3, HoldTime:60001, IntervalTime:1000",
               "HoldTime's value \"60001\" is out of range [0, 60000] ms");
    params_bad("MaxCnt:3, HoldTime:5000, IntervalTime:60001",
               "IntervalTime's value \"60001\" is out of range [0, 60000] ms");
    params_bad("MaxCnt:3, HoldTime:99999999999999999999999, IntervalTime:1000",
               "HoldTime's value \"99999999999999999999999\" is out of range [0, 60000] ms");
    params_bad("MaxCnt:-1, HoldTime:5000, IntervalTime:1000",
               "MaxCnt's value \"-1\" is not a number");
    params_bad("MaxCnt:+3, HoldTime:5000, IntervalTime:1000",
               "MaxCnt's value \"+3\" is not a number");
    params_bad("MaxCnt:3.5, HoldTime:5000, IntervalTime:1000",
               "MaxCnt's value \"3.5\" is not a number");
    params_bad("MaxCnt:, HoldTime:5000, IntervalTime:1000", "MaxCnt's value \"\" is not a number");
    params_bad("MaxCnt:3, HoldTime:5s, IntervalTime:1000",
               "HoldTime's value \"5s\" is not a number");
    params_bad("MaxCnt:3, HoldTime:5000", "IntervalTime is missing");
    params_bad("MaxCnt:3, HoldTime:5000,", "IntervalTime is missing");
    params_bad("MaxCnt:3", "HoldTime is missing");
    params_bad(",HoldTime:5000, IntervalTime:1000", "MaxCnt is missing");
    params_bad("HoldTime:5000, MaxCnt:3, IntervalTime:1000", "expected MaxCnt, found \"HoldTime\"");
    params_bad("MaxCnt:3, IntervalTime:1000, HoldTime:5000",
               "expected HoldTime, found \"IntervalTime\"");
    params_bad("MaxCount:3, HoldTime:5000, IntervalTime:1000",
               "expected MaxCnt, found \"MaxCount\"");
    params_bad("MaxCnt=3, HoldTime:5000, IntervalTime:1000", "expected MaxCnt, found \"MaxCnt=3\"");
    params_bad("MaxCnt 3, HoldTime:5000, IntervalTime:1000", "no ':' after MaxCnt");
    params_bad("MaxCnt:3 HoldTime:5000, IntervalTime:1000",
               "unexpected \"HoldTime:5000, IntervalTime:1000\" after MaxCnt");
    params_bad("MaxCnt:3, HoldTime:5000, IntervalTime:1000,",
               "unexpected \",\" after IntervalTime");
    params_bad("MaxCnt:3, HoldTime:5000, IntervalTime:1000 x",
               "unexpected \"x\" after IntervalTime");
}
END_TEST

/* Defaults, then the variables, then the config, each winning for what it names. */
START_TEST(test_resolve)
{
    retry_conf_t c;
    char why[512];

    ck_assert_int_eq(retry_conf_resolve(NULL, NULL, NULL, NULL, &c, why, sizeof(why)), 0);
    ck_assert_int_eq(c.set, 0);
    ck_assert(c.enable[0] == RETRY_ENABLE_DEFAULT && c.enable[1] == RETRY_ENABLE_DEFAULT &&
              c.enable[2] == RETRY_ENABLE_DEFAULT);
    ck_assert_uint_eq(c.max_cnt, 1);
    ck_assert_uint_eq(c.hold_ms, 5000);
    ck_assert_uint_eq(c.interval_ms, 1000);
    ck_assert_int_eq(retry_conf_resolve("", " ", "", "", &c, why, sizeof(why)), 0);
    ck_assert_int_eq(c.set, 0);

    /* The variable turns L1 on; the config names only L2, so L1 stays on. */
    ck_assert_int_eq(retry_conf_resolve("L0:0, L1:1", "MaxCnt:3, HoldTime:0, IntervalTime:10",
                                        "L2:1", "", &c, why, sizeof(why)),
                     0);
    ck_assert_int_eq(c.set, 1);
    ck_assert(c.enable[0] == 0 && c.enable[1] == 1 && c.enable[2] == 1);
    ck_assert(c.max_cnt == 3 && c.hold_ms == 0 && c.interval_ms == 10);
    /* The config's L1 and its params win over the variables'. */
    ck_assert_int_eq(retry_conf_resolve("L1:1", "MaxCnt:3, HoldTime:0, IntervalTime:10", "L1:0",
                                        "MaxCnt:10, HoldTime:60000, IntervalTime:0", &c, why,
                                        sizeof(why)),
                     0);
    ck_assert(c.enable[1] == 0 && c.max_cnt == 10 && c.hold_ms == 60000 && c.interval_ms == 0);
    /* Only a config: set. */
    ck_assert_int_eq(retry_conf_resolve(NULL, NULL, "L1:1", NULL, &c, why, sizeof(why)), 0);
    ck_assert(c.set == 1 && c.enable[1] == 1);

    /* Each source is named when it is at fault. */
    ck_assert_int_eq(retry_conf_resolve("L9:1", NULL, NULL, NULL, &c, why, sizeof(why)), -EINVAL);
    ck_assert_str_eq(why, "HCCL_OP_RETRY_ENABLE=\"L9:1\" is invalid: unknown level \"L9\" (L0, "
                          "L1 or L2)" EFORM);
    ck_assert_int_eq(retry_conf_resolve(NULL, "MaxCnt:0", NULL, NULL, &c, why, sizeof(why)),
                     -EINVAL);
    ck_assert_str_eq(why, "HCCL_OP_RETRY_PARAMS=\"MaxCnt:0\" is invalid: MaxCnt's value \"0\" is "
                          "out of range [1, 10]" PFORM);
    ck_assert_int_eq(retry_conf_resolve("L1:1", NULL, "L1:yes", NULL, &c, why, sizeof(why)),
                     -EINVAL);
    ck_assert_str_eq(why, "hcclRetryEnable=\"L1:yes\" is invalid: L1's value \"yes\" is not 0 or "
                          "1" EFORM);
    ck_assert_int_eq(retry_conf_resolve(NULL, NULL, NULL, "MaxCnt:3", &c, why, sizeof(why)),
                     -EINVAL);
    ck_assert_str_eq(why, "hcclRetryParams=\"MaxCnt:3\" is invalid: HoldTime is missing" PFORM);
}
END_TEST

/* A reason longer than its buffer is cut, never written past it. */
START_TEST(test_reason_cut)
{
    int e[RETRY_LEVELS] = {0, 0, 0};
    char why[17];

    memset(why, 'x', sizeof(why));
    ck_assert_int_eq(retry_enable_parse("HCCL_OP_RETRY_ENABLE", "L7:1", e, why, 16), -EINVAL);
    ck_assert_str_eq(why, "HCCL_OP_RETRY_E");
    ck_assert_int_eq(why[16], 'x');
}
END_TEST

Suite *retry_conf_suite(void)
{
    Suite *s = suite_create("retry_conf");
    TCase *tc = tcase_create("retry_conf");

    tcase_add_test(tc, test_enable_forms);
    tcase_add_test(tc, test_enable_malformed);
    tcase_add_test(tc, test_params_forms);
    tcase_add_test(tc, test_params_malformed);
    tcase_add_test(tc, test_resolve);
    tcase_add_test(tc, test_reason_cut);
    suite_add_tcase(s, tc);
    return s;
}
