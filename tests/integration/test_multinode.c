/*
 * Several daemons on loopback: communicators form across them (the root daemon collects the
 * ranks, every daemon learns the membership), a wrong job key or an unreachable root daemon is
 * refused with a clear error, a missing rank times out on every daemon. Collectives across
 * daemons are the next step and report HCCL_E_NOT_SUPPORT until then.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "rootinfo.h"
#include "suites.h"

#define MAXD 5

typedef struct cluster {
    pid_t pids[MAXD];
    char socks[MAXD][256];
    unsigned n;
} cluster_t;

static void cluster_start(cluster_t *c, unsigned n)
{
    c->n = n;
    /* Daemon 0 is the test's own daemon (the root: it issues the root infos). */
    snprintf(c->socks[0], sizeof(c->socks[0]), "%s", harness_socket());
    c->pids[0] = 0;
    for (unsigned i = 1; i < n; i++) {
        c->pids[i] = harness_daemon_spawn(c->socks[i], sizeof(c->socks[i]));
        ck_assert_int_gt(c->pids[i], 0);
    }
}

static void cluster_stop(cluster_t *c)
{
    for (unsigned i = 1; i < c->n; i++) {
        ck_assert_msg(harness_alive(c->pids[i]), "daemon %u died", i);
        harness_daemon_stop(c->pids[i]);
    }
}

static int formed(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    uint32_t got_n = 0, got_r = 99;
    float x = 1, y = 0;

    if (HcclGetRankSize(comm, &got_n) != HCCL_SUCCESS || got_n != n ||
        HcclGetRankId(comm, &got_r) != HCCL_SUCCESS || got_r != r)
        return 1;
    /* Pinned until data moves between daemons. */
    return HcclAllReduce(&x, &y, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) ==
                   HCCL_E_NOT_SUPPORT
               ? 0
               : 2;
}

START_TEST(test_comm_forms_across_daemons)
{
    for (unsigned nd = 2; nd <= 5; nd++)
        for (unsigned per = 1; per <= 2; per++) {
            cluster_t c;
            char *socks[MAXD * 2];
            pid_t pids[MAXD * 2];
            uint32_t n = nd * per;
            cluster_start(&c, nd);
            for (uint32_t r = 0; r < n; r++)
                socks[r] = c.socks[r / per]; /* ranks in blocks, as hccl-run places them */
            ck_assert_int_eq(harness_spawn_ranks_on(n, socks, formed, NULL, 60, pids), 0);
            ck_assert_msg(harness_wait(pids, n, 60) == 0, "%u daemons x %u ranks", nd, per);
            cluster_stop(&c);
        }
}
END_TEST

/* A rank on daemon 1 with a forged key: daemon 1 cannot prove it to the root and gives up. */
START_TEST(test_wrong_key_refused)
{
    cluster_t c;
    HcclRootInfo ri;
    HcclComm comm;
    pid_t pid;
    int st;

    cluster_start(&c, 2);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    Hccld__RootInfo *info = rootinfo_unpack(&ri);
    ck_assert_ptr_nonnull(info);
    info->job_key.data[0] ^= 0x5a;
    ck_assert_int_eq(rootinfo_pack(info, &ri), 0);
    hccld__root_info__free_unpacked(info, NULL);
    pid = fork();
    if (pid == 0) {
        alarm(30);
        setenv("HCCLD_SOCKET", c.socks[1], 1);
        _exit(HcclCommInitRootInfo(1, &ri, 0, &comm) == HCCL_E_TCP_CONNECT ? 0 : 1);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    cluster_stop(&c);
}
END_TEST

START_TEST(test_unreachable_root)
{
    cluster_t c;
    HcclRootInfo ri;
    HcclComm comm;

    cluster_start(&c, 2);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    Hccld__RootInfo *info = rootinfo_unpack(&ri);
    info->root_addr = "127.0.0.1:1"; /* nobody listens there */
    ck_assert_int_eq(rootinfo_pack(info, &ri), 0);
    info->root_addr = NULL;
    hccld__root_info__free_unpacked(info, NULL);
    setenv("HCCLD_SOCKET", c.socks[1], 1);
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_E_TCP_CONNECT);
    cluster_stop(&c);
}
END_TEST

/* Rank 1 of 3 never comes: the ranks on both daemons get HCCL_E_TIMEOUT, in bounded time. */
START_TEST(test_missing_rank_times_out)
{
    cluster_t c;
    HcclRootInfo ri;
    pid_t pids[2];
    time_t t0 = time(NULL);

    cluster_start(&c, 2);
    setenv("HCCL_CONNECT_TIMEOUT", "2", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    for (int i = 0; i < 2; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            HcclComm comm;
            alarm(30);
            setenv("HCCLD_SOCKET", c.socks[i], 1);
            _exit(HcclCommInitRootInfo(3, &ri, i == 0 ? 0 : 2, &comm) == HCCL_E_TIMEOUT ? 0 : 1);
        }
    }
    ck_assert_int_eq(harness_wait(pids, 2, 30), 0);
    ck_assert_int_le(time(NULL) - t0, 15);
    cluster_stop(&c);
}
END_TEST

Suite *multinode_suite(void)
{
    Suite *s = suite_create("multinode");
    TCase *tc = tcase_create("bootstrap");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_comm_forms_across_daemons);
    tcase_add_test(tc, test_wrong_key_refused);
    tcase_add_test(tc, test_unreachable_root);
    tcase_add_test(tc, test_missing_rank_times_out);
    suite_add_tcase(s, tc);
    return s;
}
