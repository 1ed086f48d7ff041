/*
 * A comm's last lane op, then a reset before every rank has its result (issue 37's last race).
 * 3 ranks: rank 0 on node 1, ranks 1 and 2 on node 2. Rank 0 folds into rank 1 (lane_plan.h),
 * which sends it the op's result last. Node 1 drops every packet to rank 0's lane (iptables), so
 * the result rank 1 sends stays unacknowledged in rank 1's socket while ranks 1 and 2 finish the
 * op and go on to HcclCommDestroy. Then both ends of the lane are reset (ss -K, which throws the
 * unacknowledged result away) and the rule goes. Rank 0's keeper connects again; rank 1 must
 * still be there to send the result again: its HcclCommDestroy waits for the lanes' goodbye.
 * Rank 0's op must succeed with the exact sum, not fail with HCCL_E_REMOTE (rank 1 left).
 * The ranks and the test meet through files: ready<R> (rank R's op before is done; holds its
 * pid), go (the rule is in), done1 (rank 1's op is done).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../integration/harness.h"
#include "netns_tests.h"
#include "nscluster.h"

#define RANKS 3
#define WAIT_S 30
#define BYE_RANK_TIMEOUT 100

static void put(const char *dir, const char *name, int value)
{
    char path[256], tmp[264];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (f != NULL) {
        fprintf(f, "%d\n", value);
        fclose(f);
        rename(tmp, path);
    }
}

/* The number in dir/name once it is there: 0, or -1 after WAIT_S. */
static int await(const char *dir, const char *name, int *value)
{
    char path[256];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    for (int i = 0; i < WAIT_S * 100; i++) {
        FILE *f = fopen(path, "r");
        int ok = f != NULL && fscanf(f, "%d", value) == 1;
        if (f != NULL)
            fclose(f);
        if (ok)
            return 0;
        usleep(10000);
    }
    fprintf(stderr, "netns: no %s after %d s\n", name, WAIT_S);
    return -1;
}

/* An allreduce of 16 floats over the lanes, checked element by element. */
static int sum_checked(HcclComm comm, uint32_t r, uint32_t n)
{
    float x[16], y[16];

    for (uint32_t i = 0; i < 16; i++)
        x[i] = (float)(r * 100 + i);
    HcclResult rc = HcclAllReduce(x, y, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "netns: rank %u: the allreduce failed: %s\n", r, HcclGetErrorString(rc));
        return 1;
    }
    for (uint32_t i = 0; i < 16; i++)
        if (y[i] != (float)(100 * n * (n - 1) / 2 + n * i)) {
            fprintf(stderr, "netns: rank %u: element %u is %g\n", r, i, (double)y[i]);
            return 1;
        }
    return 0;
}

static int bye_rank(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const char *dir = arg;
    char name[16];
    int go;

    if (sum_checked(comm, r, n) != 0) /* the lanes are up */
        return 1;
    snprintf(name, sizeof(name), "ready%u", r);
    put(dir, name, (int)getpid());
    if (await(dir, "go", &go) != 0)
        return 1;
    int bad = sum_checked(comm, r, n);
    if (r == 1)
        put(dir, "done1", 1);
    return bad; /* then HcclCommDestroy */
}

/* The local port of pid's one established TCP socket in namespace ns, or 0. */
static unsigned lane_port(const char *ns, pid_t pid)
{
    char out[8192], want[32], local[64];
    unsigned port = 0;

    if (topo_run(ns, out, sizeof(out), "ss", "-H", "-t", "-n", "-p", "state", "established",
                 NULL) != 0)
        return 0;
    snprintf(want, sizeof(want), "pid=%d,", (int)pid);
    for (char *line = strtok(out, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        const char *colon;
        if (strstr(line, want) != NULL && sscanf(line, "%*s %*s %63s", local) == 1 &&
            (colon = strrchr(local, ':')) != NULL)
            port = (unsigned)atoi(colon + 1);
    }
    return port;
}

static int drop_rule(const cluster_t *c, const char *op, const char *port)
{
    return topo_run(c->topo.node[0], NULL, 0, "iptables", "-w", "5", op, "INPUT", "-i", "eth0",
                    "-p", "tcp", "--dport", port, "-j", "DROP", NULL);
}

START_TEST(test_lane_reset_before_destroy)
{
    char dir[128], port[16], peer[40], out[4096], log[64];
    char *socks[RANKS];
    pid_t pids[RANKS];
    int pid0 = 0, v;
    cluster_t c;

    setenv("HCCL_OP_RETRY_ENABLE", "L1:1", 1);
    setenv("HCCL_OP_RETRY_PARAMS", "MaxCnt:1, HoldTime:20000, IntervalTime:0", 1);
    setenv("HCCL_DEBUG", "INFO", 1);
    cluster_up(&c, 2);
    snprintf(dir, sizeof(dir), "%s/bye", cluster_run_dir());
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    socks[0] = c.socks[0];
    socks[1] = socks[2] = c.socks[1];
    int saved = harness_stderr_to(log, sizeof(log));
    ck_assert_int_eq(harness_spawn_ranks_on(RANKS, socks, bye_rank, dir, BYE_RANK_TIMEOUT, pids),
                     0);
    int ready = await(dir, "ready0", &pid0) == 0 && await(dir, "ready1", &v) == 0 &&
                await(dir, "ready2", &v) == 0;
    unsigned p = ready ? lane_port(c.topo.node[0], pid0) : 0;
    snprintf(port, sizeof(port), "%u", p);
    int dropping = p != 0 && drop_rule(&c, "-I", port) == 0;
    put(dir, "go", 1);
    int done = await(dir, "done1", &v) == 0;
    usleep(300000); /* rank 1 is in HcclCommDestroy (or gone) */
    /* Rank 0's end in node 1; its reset reaches rank 1's end in node 2, which is killed too in
     * case it did not (then it is no longer there). */
    char sport[24];
    snprintf(sport, sizeof(sport), ":%s", port);
    snprintf(peer, sizeof(peer), "%s:%s", c.topo.addr[0], port);
    int killed = dropping &&
                 topo_run(c.topo.node[0], out, sizeof(out), "ss", "-K", "-H", "-t", "-n", "sport",
                          "=", sport, NULL) == 0 &&
                 strstr(out, sport) != NULL;
    if (getenv("HCCLD_TEST_REPORT") != NULL)
        fprintf(stderr, "netns: ss -K in node 1:\n%s", out);
    if (dropping)
        topo_run(c.topo.node[1], out, sizeof(out), "ss", "-K", "-H", "-t", "-n", "dst", peer, NULL);
    if (getenv("HCCLD_TEST_REPORT") != NULL)
        fprintf(stderr, "netns: ss -K in node 2:\n%s", out);
    int undropped = dropping && drop_rule(&c, "-D", port) == 0;
    int failed = harness_wait(pids, RANKS, BYE_RANK_TIMEOUT);
    int back = harness_stderr_back_has(saved, log, "rank 0: the lane to rank 1 is back");
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCL_OP_RETRY_PARAMS");
    unsetenv("HCCL_DEBUG");
    if (failed)
        dump_logs(&c);
    cluster_down(&c);
    ck_assert_msg(ready, "the ranks' first allreduce did not end");
    ck_assert_msg(p != 0, "no lane of rank 0 (pid %d) in node 1", pid0);
    ck_assert_msg(dropping && undropped, "iptables on port %s in node 1", port);
    ck_assert_msg(done, "rank 1's allreduce did not end with rank 0's lane dropped");
    ck_assert_msg(killed, "ss -K found no socket on port %s in node 1", port);
    ck_assert_msg(failed == 0, "%d ranks failed", failed);
    ck_assert_msg(back, "rank 0's lane did not come back");
}
END_TEST

void netns_add_lane_bye(Suite *s)
{
    TCase *tc = tcase_create("lane_bye");

    tcase_set_timeout(tc, 2 * BYE_RANK_TIMEOUT);
    tcase_add_test(tc, test_lane_reset_before_destroy);
    suite_add_tcase(s, tc);
}
