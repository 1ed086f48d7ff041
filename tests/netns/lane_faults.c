/*
 * Lanes (libclient/lane.h) under faults between namespaced nodes, with op retry at L1. The ranks
 * and the test meet through files in a directory of the test's: ready<R> (rank R's first op is
 * done; holds its pid), go (the fault is in), done1 (rank 1's ops after it are done).
 *
 * lane_bye: a comm's last lane op, then a reset before every rank has its result (issue 37's last
 * race). 3 ranks: rank 0 on node 1, ranks 1 and 2 on node 2. Rank 0 folds into rank 1
 * (lane_plan.h), which sends it the op's result last. Node 1 drops every packet to rank 0's lane
 * (iptables), so the result rank 1 sends stays unacknowledged in rank 1's socket while ranks 1 and
 * 2 finish the op and go on to HcclCommDestroy. Then both ends of the lane are reset (ss -K, which
 * throws the unacknowledged result away) and the rule goes. Rank 0's keeper connects again; rank
 * 1 must still be there to send the result again: its HcclCommDestroy waits for the lanes'
 * goodbye. Rank 0's op must succeed with the exact sum, not fail with HCCL_E_REMOTE (rank 1 left).
 *
 * lane_past_hold: a lane that does not come back within the hold. 2 ranks, one per node; the lane
 * is reset and node 2 drops every packet to rank 1's lane listener, so no connection comes back.
 * The next op waits out the hold, falls back to the daemons and succeeds there, exact; so does
 * the one after (the lanes are retired). No op fails for it.
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

#define WAIT_S 30
#define LANE_RANK_TIMEOUT 100

typedef struct lane_arg {
    char dir[128];
    int ops; /* allreduces after go */
} lane_arg_t;

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

static int lane_rank(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const lane_arg_t *a = arg;
    char name[16];
    int go, bad = 0;

    if (sum_checked(comm, r, n) != 0) /* the lanes are up */
        return 1;
    snprintf(name, sizeof(name), "ready%u", r);
    put(a->dir, name, (int)getpid());
    if (await(a->dir, "go", &go) != 0)
        return 1;
    for (int i = 0; i < a->ops; i++)
        bad |= sum_checked(comm, r, n);
    if (r == 1)
        put(a->dir, "done1", 1);
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

/* How many lines of the file at path hold needle; the first of them (up to cap bytes) go to out,
 * if not NULL. */
static int lines_with(const char *path, const char *needle, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    size_t at = 0;
    int n = 0;

    if (out != NULL)
        out[0] = '\0';
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, needle) == NULL)
            continue;
        n++;
        if (out != NULL && at + strlen(line) < cap)
            at += (size_t)snprintf(out + at, cap - at, "%s", line);
    }
    if (f != NULL)
        fclose(f);
    return n;
}

/* Adds (-I) or deletes (-D) the rule of node k that drops TCP input to port. */
static int drop_rule(const cluster_t *c, unsigned k, const char *op, const char *port)
{
    return topo_run(c->topo.node[k], NULL, 0, "iptables", "-w", "5", op, "INPUT", "-i", "eth0",
                    "-p", "tcp", "--dport", port, "-j", "DROP", NULL);
}

/* Resets (ss -K) the TCP sockets of node k whose `end` ("sport" or "dport") is port: whether
 * there was one. */
static int reset_port(const cluster_t *c, unsigned k, const char *end, const char *port)
{
    char out[4096], colon[24];

    snprintf(colon, sizeof(colon), ":%s", port);
    return topo_run(c->topo.node[k], out, sizeof(out), "ss", "-K", "-H", "-t", "-n", end, "=",
                    colon, NULL) == 0 &&
           strstr(out, colon) != NULL;
}

/* Starts the ranks (rank r on node place[r]) with op retry at L1 (hold_ms) and HCCL_DEBUG=INFO,
 * their stderr into a file (log, for harness_stderr_back_has; its descriptor is returned), and
 * waits until each is ready: 1 (pid_of[r]: rank r's pid), or 0. */
static int lanes_start(cluster_t *c, lane_arg_t *a, const char *name, uint32_t n,
                       const unsigned *place, unsigned hold_ms, pid_t *pids, int *saved, char *log,
                       size_t cap, int *pid_of)
{
    char *socks[4], params[96], file[16];

    snprintf(params, sizeof(params), "MaxCnt:1, HoldTime:%u, IntervalTime:0", hold_ms);
    setenv("HCCL_OP_RETRY_ENABLE", "L1:1", 1);
    setenv("HCCL_OP_RETRY_PARAMS", params, 1);
    setenv("HCCL_DEBUG", "INFO", 1);
    cluster_up(c, 2);
    snprintf(a->dir, sizeof(a->dir), "%s/%s", cluster_run_dir(), name);
    ck_assert_int_eq(mkdir(a->dir, 0755), 0);
    for (uint32_t r = 0; r < n; r++)
        socks[r] = c->socks[place[r]];
    *saved = harness_stderr_to(log, cap);
    ck_assert_int_eq(harness_spawn_ranks_on(n, socks, lane_rank, a, LANE_RANK_TIMEOUT, pids), 0);
    for (uint32_t r = 0; r < n; r++) {
        snprintf(file, sizeof(file), "ready%u", r);
        if (await(a->dir, file, &pid_of[r]) != 0)
            return 0;
    }
    return 1;
}

/* After the ranks ended (failed of them): stderr back (whether the ranks' log held needle), the
 * ranks' own error lines shown, the variables unset, the daemons' logs shown if a rank failed,
 * the cluster stopped. */
static int lanes_finish(cluster_t *c, int failed, int saved, const char *log, const char *needle)
{
    char errs[2048];

    lines_with(log, "netns: rank", errs, sizeof(errs));
    int had = harness_stderr_back_has(saved, log, needle);
    fputs(errs, stderr);
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCL_OP_RETRY_PARAMS");
    unsetenv("HCCL_DEBUG");
    if (failed)
        dump_logs(c);
    cluster_down(c);
    return had;
}

START_TEST(test_lane_reset_before_destroy)
{
    static const unsigned place[3] = {0, 1, 1};
    lane_arg_t a = {.ops = 1};
    char port[16], log[64];
    pid_t pids[3];
    int pid_of[3] = {0}, saved, v;
    cluster_t c;

    int ready = lanes_start(&c, &a, "bye", 3, place, 20000, pids, &saved, log, sizeof(log), pid_of);
    unsigned p = ready ? lane_port(c.topo.node[0], pid_of[0]) : 0;
    snprintf(port, sizeof(port), "%u", p);
    int dropping = p != 0 && drop_rule(&c, 0, "-I", port) == 0;
    put(a.dir, "go", 1);
    int done = await(a.dir, "done1", &v) == 0;
    usleep(300000); /* rank 1 is in HcclCommDestroy (or gone) */
    /* Rank 0's end in node 1; its reset reaches rank 1's end in node 2, which is reset too in
     * case it did not (then it is no longer there). */
    int killed = dropping && reset_port(&c, 0, "sport", port);
    if (dropping)
        reset_port(&c, 1, "dport", port);
    int undropped = dropping && drop_rule(&c, 0, "-D", port) == 0;
    int failed = harness_wait(pids, 3, LANE_RANK_TIMEOUT);
    int back = lanes_finish(&c, failed, saved, log, "rank 0: the lane to rank 1 is back");
    ck_assert_msg(ready, "the ranks' first allreduce did not end");
    ck_assert_msg(p != 0, "no lane of rank 0 (pid %d) in node 1", pid_of[0]);
    ck_assert_msg(dropping && undropped, "iptables on port %s in node 1", port);
    ck_assert_msg(done, "rank 1's allreduce did not end with rank 0's lane dropped");
    ck_assert_msg(killed, "ss -K found no socket on port %s in node 1", port);
    ck_assert_msg(failed == 0, "%d ranks failed", failed);
    ck_assert_msg(back, "rank 0's lane did not come back");
}
END_TEST

START_TEST(test_lane_past_hold)
{
    static const unsigned place[2] = {0, 1};
    lane_arg_t a = {.ops = 2};
    char port[16], log[64];
    pid_t pids[2];
    int pid_of[2] = {0}, saved;
    cluster_t c;

    int ready = lanes_start(&c, &a, "hold", 2, place, 2000, pids, &saved, log, sizeof(log), pid_of);
    /* Rank 1 accepted the lane on its listener's port: every packet to it is dropped (the lane's
     * and a new connection's), then both ends are reset. */
    unsigned p = ready ? lane_port(c.topo.node[1], pid_of[1]) : 0;
    snprintf(port, sizeof(port), "%u", p);
    int dropping = p != 0 && drop_rule(&c, 1, "-I", port) == 0;
    int killed = dropping && reset_port(&c, 1, "sport", port);
    if (dropping)
        reset_port(&c, 0, "dport", port);
    put(a.dir, "go", 1);
    int failed = harness_wait(pids, 2, LANE_RANK_TIMEOUT);
    int undropped = dropping && drop_rule(&c, 1, "-D", port) == 0;
    int down =
        lines_with(log, "stays down (it did not come back within the op retry hold)", NULL, 0);
    int fell = lines_with(log, "a partner's lane failed; it goes through the daemon", NULL, 0);
    int said = lanes_finish(&c, failed, saved, log, "stays down");
    ck_assert_msg(ready, "the ranks' first allreduce did not end");
    ck_assert_msg(dropping && undropped, "iptables on port %s in node 2", port);
    ck_assert_msg(killed, "ss -K found no socket on port %s in node 2", port);
    ck_assert_msg(failed == 0, "%d ranks failed", failed);
    ck_assert_msg(said && down == 2, "%d ranks said their lane stays down after the hold", down);
    ck_assert_msg(fell == 2, "%d ranks took the op to the daemons", fell);
}
END_TEST

void netns_add_lane_faults(Suite *s)
{
    TCase *tc = tcase_create("lane_bye");

    tcase_set_timeout(tc, 2 * LANE_RANK_TIMEOUT);
    tcase_add_test(tc, test_lane_reset_before_destroy);
    suite_add_tcase(s, tc);
    tc = tcase_create("lane_past_hold");
    tcase_set_timeout(tc, 2 * LANE_RANK_TIMEOUT);
    tcase_add_test(tc, test_lane_past_hold);
    suite_add_tcase(s, tc);
}
