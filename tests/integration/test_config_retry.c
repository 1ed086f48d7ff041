/*
 * Op retry settings (HCCL_OP_RETRY_ENABLE, HCCL_OP_RETRY_PARAMS, hcclRetryEnable,
 * hcclRetryParams) and hcclQos at comm init and split: a malformed or out-of-range one fails
 * with HCCL_E_PARA and a log line naming it; a valid one forms the comm (the daemon does not act
 * on them yet).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

/* A one-rank comm of the test's daemon, made with cfg (NULL: HcclCommInitRootInfo); the
 * HcclResult. With `needle`, the init's log must hold it. */
static HcclResult init_logged(const HcclCommConfig *cfg, const char *needle)
{
    HcclRootInfo ri;
    HcclComm comm = NULL;
    HcclResult rc;
    char log[64];
    int saved;

    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    saved = harness_stderr_to(log, sizeof(log));
    rc = cfg != NULL ? HcclCommInitRootInfoConfig(1, &ri, 0, cfg, &comm)
                     : HcclCommInitRootInfo(1, &ri, 0, &comm);
    ck_assert_msg(harness_stderr_back_has(saved, log, needle != NULL ? needle : ""),
                  "the log lacks: %s", needle);
    if (rc == HCCL_SUCCESS)
        ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
    return rc;
}

START_TEST(test_retry_env)
{
    ck_assert_int_eq(init_logged(NULL, NULL), HCCL_SUCCESS);
    setenv("HCCL_OP_RETRY_PARAMS", "MaxCnt:11, HoldTime:5000, IntervalTime:1000", 1);
    ck_assert_int_eq(init_logged(NULL, "ERROR INIT: HCCL_OP_RETRY_PARAMS=\"MaxCnt:11, "
                                       "HoldTime:5000, IntervalTime:1000\" is invalid: MaxCnt's "
                                       "value \"11\" is out of range [1, 10]"),
                     HCCL_E_PARA);
    setenv("HCCL_OP_RETRY_PARAMS", "HoldTime:5000", 1);
    ck_assert_int_eq(init_logged(NULL, "expected MaxCnt, found \"HoldTime\""), HCCL_E_PARA);
    setenv("HCCL_OP_RETRY_PARAMS", "MaxCnt:10, HoldTime:60000, IntervalTime:0", 1);
    ck_assert_int_eq(init_logged(NULL, NULL), HCCL_SUCCESS);
    setenv("HCCL_OP_RETRY_ENABLE", "L1:1, L3:0", 1);
    ck_assert_int_eq(init_logged(NULL, "HCCL_OP_RETRY_ENABLE=\"L1:1, L3:0\" is invalid: unknown "
                                       "level \"L3\" (L0, L1 or L2)"),
                     HCCL_E_PARA);
    setenv("HCCL_OP_RETRY_ENABLE", "L0:0, L1:1, L2:0", 1);
    ck_assert_int_eq(init_logged(NULL, NULL), HCCL_SUCCESS);
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCL_OP_RETRY_PARAMS");
}
END_TEST

START_TEST(test_retry_config)
{
    HcclCommConfig cfg;

    HcclCommConfigInit(&cfg);
    snprintf(cfg.hcclRetryParams, sizeof(cfg.hcclRetryParams), "MaxCnt:3, HoldTime:-1");
    ck_assert_int_eq(init_logged(&cfg, "hcclRetryParams=\"MaxCnt:3, HoldTime:-1\" is invalid: "
                                       "HoldTime's value \"-1\" is not a number"),
                     HCCL_E_PARA);
    snprintf(cfg.hcclRetryParams, sizeof(cfg.hcclRetryParams),
             "MaxCnt:3, HoldTime:5000, IntervalTime:60001");
    ck_assert_int_eq(init_logged(&cfg, "IntervalTime's value \"60001\" is out of range [0, "
                                       "60000] ms"),
                     HCCL_E_PARA);
    snprintf(cfg.hcclRetryParams, sizeof(cfg.hcclRetryParams),
             "MaxCnt:3, HoldTime:5000, IntervalTime:1000");
    ck_assert_int_eq(init_logged(&cfg, NULL), HCCL_SUCCESS);
    snprintf(cfg.hcclRetryEnable, sizeof(cfg.hcclRetryEnable), "L1:on");
    ck_assert_int_eq(init_logged(&cfg, "hcclRetryEnable=\"L1:on\" is invalid: L1's value \"on\" "
                                       "is not 0 or 1"),
                     HCCL_E_PARA);
    /* The config's L1 wins over the variable's. */
    setenv("HCCL_OP_RETRY_ENABLE", "L1:1", 1);
    snprintf(cfg.hcclRetryEnable, sizeof(cfg.hcclRetryEnable), "L1:0, L2:1");
    ck_assert_int_eq(init_logged(&cfg, NULL), HCCL_SUCCESS);
    unsetenv("HCCL_OP_RETRY_ENABLE");
    /* Not a string within its field: refused before it is parsed. */
    memset(cfg.hcclRetryEnable, 'L', sizeof(cfg.hcclRetryEnable));
    ck_assert_int_eq(init_logged(&cfg, "hcclRetryEnable is not a string"), HCCL_E_PARA);
}
END_TEST

START_TEST(test_qos_level)
{
    HcclCommConfig cfg;

    HcclCommConfigInit(&cfg);
    cfg.hcclQos = 8;
    ck_assert_int_eq(init_logged(&cfg, "HcclCommConfig: hcclQos=8 is out of range [0, 7]"),
                     HCCL_E_PARA);
    cfg.hcclQos = 0;
    ck_assert_int_eq(init_logged(&cfg, NULL), HCCL_SUCCESS);
    cfg.hcclQos = 7;
    ck_assert_int_eq(init_logged(&cfg, NULL), HCCL_SUCCESS);
}
END_TEST

/* A split reads the variables again: a bad one fails it, as at init. */
START_TEST(test_retry_split)
{
    HcclRootInfo ri;
    HcclComm comm, child = NULL;
    HcclCommConfig cfg;
    char log[64];
    int saved;

    HcclCommConfigInit(&cfg);
    cfg.hcclQos = 5;
    snprintf(cfg.hcclRetryEnable, sizeof(cfg.hcclRetryEnable), "L1:1");
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfoConfig(1, &ri, 0, &cfg, &comm), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommSplit(comm, 0, 0, &child), HCCL_SUCCESS);
    ck_assert_ptr_nonnull(child);
    ck_assert_int_eq(HcclCommDestroy(child), HCCL_SUCCESS);
    setenv("HCCL_OP_RETRY_PARAMS", "MaxCnt:0, HoldTime:0, IntervalTime:0", 1);
    saved = harness_stderr_to(log, sizeof(log));
    child = NULL;
    ck_assert_int_eq(HcclCommSplit(comm, 0, 0, &child), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(saved, log, "MaxCnt's value \"0\" is out of range [1, 10]"));
    ck_assert_ptr_null(child);
    unsetenv("HCCL_OP_RETRY_PARAMS");
    ck_assert_int_eq(HcclCommSplit(comm, 0, 0, &child), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommDestroy(child), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
}
END_TEST

Suite *config_retry_suite(void)
{
    Suite *s = suite_create("config_retry");
    TCase *tc = tcase_create("config_retry");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_retry_env);
    tcase_add_test(tc, test_retry_config);
    tcase_add_test(tc, test_qos_level);
    tcase_add_test(tc, test_retry_split);
    suite_add_tcase(s, tc);
    return s;
}
