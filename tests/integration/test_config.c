/*
 * What HCCL users type: HcclCommConfig through HcclCommInitRootInfoConfig (HCCL's layout, older
 * and newer headers, bad magic and bad fields), HcclGetCommName on root comms and split
 * children, hcclExecTimeOut, HCCL_BUFFSIZE written in bytes, and HCCL_ALGORITHM /
 * HCCL_DETERMINISTIC values that are not understood, each with its exact HcclResult and, where the
 * user reads one, its log text.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* A one-rank comm of the test's daemon made with cfg: the HcclResult. */
static HcclResult init_with(const HcclCommConfig *cfg)
{
    HcclRootInfo ri;
    HcclComm comm = NULL;
    HcclResult rc;

    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    rc = HcclCommInitRootInfoConfig(1, &ri, 0, cfg, &comm);
    if (rc == HCCL_SUCCESS)
        ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
    return rc;
}

/* The name of a one-rank comm made with cfg (a config of `size` bytes at cfg). */
static void name_with(const void *cfg, char *name)
{
    HcclRootInfo ri;
    HcclComm comm;

    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfoConfig(1, &ri, 0, cfg, &comm), HCCL_SUCCESS);
    ck_assert_int_eq(HcclGetCommName(comm, name), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
}

static void set_size(void *cfg, size_t size)
{
    HcclCommConfigInfo info;

    memcpy(&info, cfg, sizeof(info));
    info.size = size;
    memcpy(cfg, &info, sizeof(info));
}

START_TEST(test_config_init)
{
    HcclCommConfig cfg;
    HcclCommConfigInfo info;
    char name[COMM_NAME_MAX_LENGTH];

    HcclCommConfigInit(&cfg);
    memcpy(&info, &cfg, sizeof(info));
    ck_assert_uint_eq(info.size, sizeof(HcclCommConfig));
    ck_assert_uint_eq(info.magicWord, HCCL_COMM_CONFIG_MAGIC_WORD);
    ck_assert_uint_eq(info.version, HCCL_COMM_CONFIG_VERSION);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclBufferSize), 24);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclCommName), 32);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclUdi), 160);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclRdmaTrafficClass), 292);
    /* HCCL's version 11 layout, offsets as its compilers lay it out. */
    ck_assert_uint_eq(HCCL_COMM_CONFIG_VERSION, 11);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclExecTimeOut), 316);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclAlgo), 320);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclRetryEnable), 1920);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclRetryParams), 1970);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclBufferName), 2098);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclQos), 2228);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclSymWinMaxMemSizePerRank), 2232);
    ck_assert_uint_eq(offsetof(HcclCommConfig, hcclChannelSqDepth), 2240);
    ck_assert_uint_eq(sizeof(HcclCommConfig), 2248);
    ck_assert_uint_eq(cfg.hcclBufferSize, HCCL_COMM_BUFFSIZE_CONFIG_NOT_SET);
    ck_assert_uint_eq(cfg.hcclDeterministic, HCCL_COMM_DETERMINISTIC_CONFIG_NOT_SET);
    ck_assert_int_eq(cfg.hcclExecTimeOut, HCCL_COMM_EXECTIMEOUT_CONFIG_NOT_SET);
    ck_assert_str_eq(cfg.hcclRetryEnable, "");
    ck_assert_str_eq(cfg.hcclRetryParams, "");
    ck_assert_str_eq(cfg.hcclBufferName, "");
    ck_assert_uint_eq(cfg.hcclQos, HCCL_COMM_QOS_CONFIG_NOT_SET);
    ck_assert_uint_eq(cfg.hcclSymWinMaxMemSizePerRank, 16);
    ck_assert_uint_eq(cfg.hcclChannelSqDepth, HCCL_COMM_SQ_DEPTH_CONFIG_NOT_SET);
    ck_assert_int_eq(init_with(&cfg), HCCL_SUCCESS);
    /* The name a config gives, and the one hcclD gives when it gives none. */
    snprintf(cfg.hcclCommName, sizeof(cfg.hcclCommName), "comm_1");
    name_with(&cfg, name);
    ck_assert_str_eq(name, "comm_1");
    cfg.hcclCommName[0] = '\0';
    name_with(&cfg, name);
    ck_assert_int_eq((int)strlen(name), 5 + 32);
    ck_assert_int_eq(strncmp(name, "hccl-", 5), 0);
    ck_assert_int_eq((int)strspn(name + 5, "0123456789abcdef"), 32);
    ck_assert_int_eq(HcclGetCommName(NULL, name), HCCL_E_PTR);
    ck_assert_int_eq(init_with(NULL), HCCL_E_PTR);
}
END_TEST

/* A config from HCCL's first header (buffer size, deterministic, name, udi: 288 bytes), from
 * headers whose tail padding lies where a later field is, and one from a header larger than ours:
 * the fields both know count, the rest is never read. */
START_TEST(test_config_other_headers)
{
    size_t big = sizeof(HcclCommConfig) + 512;
    HcclCommConfig *cfg = calloc(1, big);
    char name[COMM_NAME_MAX_LENGTH];

    ck_assert_ptr_nonnull(cfg);
    HcclCommConfigInit(cfg);
    snprintf(cfg->hcclCommName, sizeof(cfg->hcclCommName), "old_header");
    /* Past the old header's end: would fail the init if it were read. */
    cfg->hcclRdmaServiceLevel = 99;
    snprintf(cfg->hcclAlgo, sizeof(cfg->hcclAlgo), "level0:NA;level1:bogus");
    set_size(cfg, offsetof(HcclCommConfig, hcclOpExpansionMode));
    name_with(cfg, name);
    ck_assert_str_eq(name, "old_header");
    /* The whole of ours is read once the size covers it. */
    set_size(cfg, sizeof(HcclCommConfig));
    ck_assert_int_eq(init_with(cfg), HCCL_E_PARA);
    cfg->hcclRdmaServiceLevel = HCCL_COMM_SERVICE_LEVEL_CONFIG_NOT_SET;
    cfg->hcclAlgo[0] = '\0';
    /* A newer, larger header: its fields beyond ours are left alone. */
    memset((char *)cfg + sizeof(HcclCommConfig), 0x5a, 512);
    set_size(cfg, big);
    snprintf(cfg->hcclCommName, sizeof(cfg->hcclCommName), "new_header");
    name_with(cfg, name);
    ck_assert_str_eq(name, "new_header");
    /* HCCL's version 7 header (320 bytes) ends in padding where hcclExecTimeOut lies, which
     * came with hcclAlgo: what the padding holds is never read as a timeout. */
    HcclCommConfigInit(cfg);
    cfg->hcclExecTimeOut = -5;
    set_size(cfg, offsetof(HcclCommConfig, hcclAlgo));
    ck_assert_int_eq(init_with(cfg), HCCL_SUCCESS);
    set_size(cfg, sizeof(HcclCommConfig));
    ck_assert_int_eq(init_with(cfg), HCCL_E_PARA);
    /* HCCL's version 9 header (2232 bytes) ends in padding where hcclQos lies, which came with
     * hcclSymWinMaxMemSizePerRank: the padding is never read as a QoS level. */
    HcclCommConfigInit(cfg);
    cfg->hcclQos = 0x5a5a5a5a;
    set_size(cfg, offsetof(HcclCommConfig, hcclSymWinMaxMemSizePerRank));
    ck_assert_int_eq(init_with(cfg), HCCL_SUCCESS);
    set_size(cfg, sizeof(HcclCommConfig));
    ck_assert_int_eq(init_with(cfg), HCCL_E_PARA);
    /* hcclD's header before HCCL's version 11 ended at hcclAlgo (1920 bytes): the retry fields
     * past it are never read. HCCL's version 8 (2104 bytes) has them, and they count. */
    HcclCommConfigInit(cfg);
    snprintf(cfg->hcclRetryParams, sizeof(cfg->hcclRetryParams), "MaxCnt:99");
    set_size(cfg, offsetof(HcclCommConfig, hcclRetryEnable));
    ck_assert_int_eq(init_with(cfg), HCCL_SUCCESS);
    set_size(cfg, 2104);
    ck_assert_int_eq(init_with(cfg), HCCL_E_PARA);
    /* Smaller than its own info header: refused. */
    set_size(cfg, 16);
    ck_assert_int_eq(init_with(cfg), HCCL_E_PARA);
    free(cfg);
}
END_TEST

START_TEST(test_config_bad_fields)
{
    HcclCommConfig cfg;
    HcclCommConfigInfo info;
    char log[64];
    int saved;

    HcclCommConfigInit(&cfg);
    memcpy(&info, &cfg, sizeof(info));
    info.magicWord = 0x12345678;
    memcpy(&cfg, &info, sizeof(info));
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(saved, log, "magic word 0x12345678, not 0xf0f0f0f0"));

    HcclCommConfigInit(&cfg);
    cfg.hcclBufferSize = 209715200;
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(
        saved, log,
        "hcclBufferSize=\"209715200\" is invalid: the unit is MB, an integer "
        "in [1, 16384]; 209715200 looks like a byte count: that is 200 MB"));
    cfg.hcclBufferSize = 0;
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);

    HcclCommConfigInit(&cfg);
    cfg.hcclDeterministic = 2;
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    HcclCommConfigInit(&cfg);
    memset(cfg.hcclCommName, 'x', sizeof(cfg.hcclCommName));
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    HcclCommConfigInit(&cfg);
    cfg.hcclRdmaTrafficClass = 256;
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    cfg.hcclRdmaTrafficClass = 104;
    cfg.hcclRdmaServiceLevel = 3;
    ck_assert_int_eq(init_with(&cfg), HCCL_SUCCESS);
    /* hcclAlgo is HCCL_ALGO for this comm: checked by the daemon as HCCL_ALGO is. */
    HcclCommConfigInit(&cfg);
    snprintf(cfg.hcclAlgo, sizeof(cfg.hcclAlgo), "level0:NA;level1:bogus");
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    snprintf(cfg.hcclAlgo, sizeof(cfg.hcclAlgo), "level0:NA;level1:ring");
    ck_assert_int_eq(init_with(&cfg), HCCL_SUCCESS);
    HcclCommConfigInit(&cfg);
    cfg.hcclExecTimeOut = -2;
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(init_with(&cfg), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(saved, log, "hcclExecTimeOut=-2 is out of range"));
    cfg.hcclExecTimeOut = 0;
    ck_assert_int_eq(init_with(&cfg), HCCL_SUCCESS);
}
END_TEST

/* hcclExecTimeOut of 2 s: rank 1 stays away from the allreduce for 8 s, so rank 0's ends in
 * HCCL_E_TIMEOUT (under HCCL_EXEC_TIMEOUT's 1836 s it would fail only when rank 1 leaves, and
 * as HCCL_E_REMOTE). */
static int exec_timeout_rank(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float x = 1.0f;
    HcclResult rc;

    (void)n;
    (void)arg;
    if (r == 1) {
        sleep(8);
        return 0;
    }
    rc = HcclAllReduce(&x, &x, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
    if (rc != HCCL_E_TIMEOUT)
        fprintf(stderr, "rank 0: allreduce returned %d, not HCCL_E_TIMEOUT\n", (int)rc);
    return rc != HCCL_E_TIMEOUT;
}

START_TEST(test_exec_timeout)
{
    char sock[256], *socks[2] = {NULL, sock};
    HcclCommConfig cfg;
    pid_t pids[2], d;

    HcclCommConfigInit(&cfg);
    cfg.hcclExecTimeOut = 2;
    /* One daemon (the ranks run level 0 among themselves), then two (the daemon runs it). */
    ck_assert_int_eq(harness_spawn_ranks_cfg(2, NULL, &cfg, exec_timeout_rank, NULL, 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    d = harness_daemon_spawn(sock, sizeof(sock));
    ck_assert_int_gt(d, 0);
    ck_assert_int_eq(harness_spawn_ranks_cfg(2, socks, &cfg, exec_timeout_rank, NULL, 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    harness_daemon_stop(d);
}
END_TEST

/* Two ranks: the same generated name on both, and the split children's after it. With
 * hcclBufferSize 8, the ranks' arenas hold 1 MiB but not 16 MiB. */
static int names_rank(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const char *want = arg;
    char name[COMM_NAME_MAX_LENGTH], all[2][COMM_NAME_MAX_LENGTH], child[COMM_NAME_MAX_LENGTH],
        expect[COMM_NAME_MAX_LENGTH + 32];
    HcclComm sub = NULL;
    void *p = NULL;
    int bad = 0;

    if (HcclGetCommName(comm, name) != HCCL_SUCCESS ||
        HcclAllGather(name, all, sizeof(name), HCCL_DATA_TYPE_INT8, comm, NULL) != HCCL_SUCCESS)
        return 1;
    bad |= strcmp(all[0], all[1]) != 0;
    bad |= want[0] ? strcmp(name, want) != 0 : strncmp(name, "hccl-", 5) != 0;
    /* Two splits: the second child's name counts the parent's splits. */
    for (int k = 0; k < 2 && !bad; k++) {
        bad |= HcclCommSplit(comm, r, 0, &sub) != HCCL_SUCCESS;
        bad |= bad || HcclGetCommName(sub, child) != HCCL_SUCCESS;
        snprintf(expect, sizeof(expect), "%s_split%d_c%u", name, k, r);
        if (!bad && strcmp(child, expect) != 0) {
            fprintf(stderr, "rank %u: child named %s, not %s\n", r, child, expect);
            bad = 1;
        }
        if (sub != NULL)
            HcclCommDestroy(sub);
        sub = NULL;
    }
    if (want[0] != '\0') {
        bad |= HcclMemAlloc(&p, 1 << 20) != HCCL_SUCCESS;
        HcclMemFree(p);
        bad |= HcclMemAlloc(&p, 16 << 20) != HCCL_E_MEMORY;
    }
    (void)n;
    return bad;
}

START_TEST(test_comm_names)
{
    pid_t pids[2];
    HcclCommConfig cfg;

    ck_assert_int_eq(harness_spawn_ranks_cfg(2, NULL, NULL, names_rank, "", 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    HcclCommConfigInit(&cfg);
    cfg.hcclBufferSize = 8;
    snprintf(cfg.hcclCommName, sizeof(cfg.hcclCommName), "tp_group");
    ck_assert_int_eq(harness_spawn_ranks_cfg(2, NULL, &cfg, names_rank, "tp_group", 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    /* Across two daemons the ranks split among themselves: the same names. */
    char sock[256], *socks[2] = {NULL, sock};
    pid_t d = harness_daemon_spawn(sock, sizeof(sock));
    ck_assert_int_gt(d, 0);
    ck_assert_int_eq(harness_spawn_ranks_cfg(2, socks, NULL, names_rank, "", 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    ck_assert_int_eq(harness_spawn_ranks_cfg(2, socks, &cfg, names_rank, "tp_group", 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    harness_daemon_stop(d);
}
END_TEST

/* A process that has not met its daemon yet asks for a root info under HCCL_BUFFSIZE=value. */
static HcclResult fresh_root_info(const char *value)
{
    pid_t pid = fork();
    int st;

    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        HcclRootInfo ri;
        setenv("HCCL_BUFFSIZE", value, 1);
        _exit(HcclGetRootInfo(&ri));
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st));
    return (HcclResult)WEXITSTATUS(st);
}

START_TEST(test_buffsize_in_bytes)
{
    char log[64];
    int saved = harness_stderr_to(log, sizeof(log));

    ck_assert_int_eq(fresh_root_info("209715200"), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(
        saved, log,
        "ERROR INIT: HCCL_BUFFSIZE=\"209715200\" is invalid: the unit is MB, "
        "an integer in [1, 16384]; 209715200 looks like a byte count: that "
        "is 200 MB, HCCL_BUFFSIZE=200"));
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(fresh_root_info("200MB"), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(saved, log,
                                      "write the number of MB alone, e.g. HCCL_BUFFSIZE=200"));
    ck_assert_int_eq(fresh_root_info("64"), HCCL_SUCCESS);
}
END_TEST

/* Values of HCCL_ALGORITHM and HCCL_DETERMINISTIC that mean nothing fail the init. */
START_TEST(test_bad_env_values)
{
    HcclRootInfo ri;
    HcclComm comm;
    char log[64];
    int saved;

    setenv("HCCL_ALGORITHM", "BUTTERFLY", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_E_PARA);
    ck_assert(
        harness_stderr_back_has(saved, log,
                                "HCCL_ALGORITHM: unknown algorithm 'BUTTERFLY' (RING, MESH, RHD, "
                                "TREE or PAIRWISE)"));
    setenv("HCCL_ALGORITHM", "ring", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
    unsetenv("HCCL_ALGORITHM");

    setenv("HCCL_DETERMINISTIC", "yes please", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_E_PARA);
    ck_assert(harness_stderr_back_has(
        saved, log, "HCCL_DETERMINISTIC=\"yes please\" is invalid: expected true or false"));
    setenv("HCCL_DETERMINISTIC", "TRUE", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
    unsetenv("HCCL_DETERMINISTIC");
}
END_TEST

Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_config_init);
    tcase_add_test(tc, test_config_other_headers);
    tcase_add_test(tc, test_config_bad_fields);
    tcase_add_test(tc, test_comm_names);
    tcase_add_test(tc, test_exec_timeout);
    tcase_add_test(tc, test_buffsize_in_bytes);
    tcase_add_test(tc, test_bad_env_values);
    suite_add_tcase(s, tc);
    return s;
}
