/*
 * Lanes (libclient/lane.h): allreduces and allgathers (whose result is) up to HCCLD_DIRECT_MAX
 * bytes and barriers of a comm that spans daemons run between the ranks directly. Checked
 * element by element against the reference on every dtype and op, out of place, in place and
 * (allreduce) in HcclMemAlloc buffers, on 2 and 3 daemons (a rank count that is no power of two
 * folds ranks in), and the daemons' payload counters say none of it went through them; larger ops,
 * HCCLD_DIRECT_MAX=0 and a forced HCCL_ALGO still go through the daemons.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtype.h"
#include "fault_loop.h"
#include "multinode.h"
#include "ref.h"

#define LANE_MAX_BYTES 65536 /* HC_DIRECT_MAX_DEFAULT */

typedef struct lanes_arg {
    uint64_t big; /* also run one allreduce of this many floats (0: none) */
} lanes_arg_t;

static int check_allreduce(HcclComm comm, uint32_t r, uint32_t n, int dt, int op, uint64_t count,
                           uint8_t *s, uint8_t *o)
{
    uint64_t bad = 0, first = 0;

    ref_fill(dt, op, r, s, 0, count);
    if (o != s)
        memset(o, 0xEE, count * dtype_size(dt));
    HcclResult rc = HcclAllReduce(s, o, count, (HcclDataType)dt, (HcclReduceOp)op, comm, NULL);
    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "rank %u: allreduce dt %d op %d count %llu: %s\n", r, dt, op,
                (unsigned long long)count, HcclGetErrorString(rc));
        return 1;
    }
    for (uint64_t i = 0; i < count; i++)
        if (!ref_equal(dt, o, i, ref_reduced(dt, op, n, i)) && bad++ == 0)
            first = i;
    if (bad)
        fprintf(stderr, "rank %u: allreduce dt %d op %d count %llu: %llu wrong, first at %llu\n", r,
                dt, op, (unsigned long long)count, (unsigned long long)bad,
                (unsigned long long)first);
    return bad != 0;
}

/* Allgather of count elements of type dt per rank from s into o (o may hold s, in place: rank
 * r's block), checked block by block against each rank's reference values. */
static int check_allgather(HcclComm comm, uint32_t r, uint32_t n, int dt, uint64_t count,
                           uint8_t *s, uint8_t *o)
{
    uint64_t bad = 0, first = 0;
    size_t es = dtype_size(dt);

    memset(o, 0xEE, n * count * es);                       /* then s, which may lie in o */
    ref_fill(dt, HCCL_REDUCE_SUM, r, s, r * count, count); /* blocks unlike each other's */
    HcclResult rc = HcclAllGather(s, o, count, (HcclDataType)dt, comm, NULL);
    if (rc != HCCL_SUCCESS) {
        fprintf(stderr, "rank %u: allgather dt %d count %llu: %s\n", r, dt,
                (unsigned long long)count, HcclGetErrorString(rc));
        return 1;
    }
    for (uint32_t q = 0; q < n; q++)
        for (uint64_t i = 0; i < count; i++)
            if (!ref_equal(dt, o + q * count * es, i,
                           ref_val(dt, HCCL_REDUCE_SUM, q, q * count + i)) &&
                bad++ == 0)
                first = q * count + i;
    if (bad)
        fprintf(stderr, "rank %u: allgather dt %d count %llu: %llu wrong, first at %llu\n", r, dt,
                (unsigned long long)count, (unsigned long long)bad, (unsigned long long)first);
    return bad != 0;
}

/* Allgathers of every dtype up to the largest result that fits the lanes, out of place and in
 * place (each rank's block already in the result). */
static int lanes_allgathers(HcclComm comm, uint32_t r, uint32_t n, uint8_t *s, uint8_t *o)
{
    int failed = 0;

    for (int dt = 0; dt < HCCL_DATA_TYPE_RESERVED && failed < 3; dt++) {
        size_t es = dtype_size(dt);
        uint64_t counts[] = {1, 3, 1000 / n, LANE_MAX_BYTES / es / n};
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            failed += check_allgather(comm, r, n, dt, counts[k], s, o);
            failed += check_allgather(comm, r, n, dt, counts[k], o + r * counts[k] * es, o);
        }
    }
    return failed;
}

/* Every dtype and op at counts up to the largest that fits the lanes, in three kinds of
 * buffer, with barriers between, and allgathers; then the big allreduce if asked. */
static int lanes_ops(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const lanes_arg_t *a = arg;
    size_t cap = LANE_MAX_BYTES + (a->big * 4);
    uint8_t *s = malloc(cap), *o = malloc(cap), *zs = NULL, *zo = NULL;
    int failed = 0;

    if (s == NULL || o == NULL || HcclMemAlloc((void **)&zs, LANE_MAX_BYTES) != HCCL_SUCCESS ||
        HcclMemAlloc((void **)&zo, LANE_MAX_BYTES) != HCCL_SUCCESS)
        return 10;
    for (int dt = 0; dt < HCCL_DATA_TYPE_RESERVED && failed < 3; dt++) {
        uint64_t counts[] = {0, 1, 3, 1000, LANE_MAX_BYTES / dtype_size(dt)};
        for (int op = 0; op < HCCL_REDUCE_RESERVED; op++) {
            if (op == HCCL_REDUCE_PROD && n > 4)
                continue;
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                failed += check_allreduce(comm, r, n, dt, op, counts[k], s, o);
                failed += check_allreduce(comm, r, n, dt, op, counts[k], o, o);
                failed += check_allreduce(comm, r, n, dt, op, counts[k], zs, zo);
            }
            failed += HcclBarrier(comm, NULL) != HCCL_SUCCESS;
        }
    }
    failed += lanes_allgathers(comm, r, n, s, o);
    if (a->big > 0)
        failed += check_allreduce(comm, r, n, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, a->big, s, o);
    HcclMemFree(zs);
    HcclMemFree(zo);
    free(s);
    free(o);
    return failed != 0;
}

static uint64_t tx_sum(cluster_t *c)
{
    uint64_t t = 0;

    for (unsigned d = 0; d < c->n; d++) {
        uint64_t v = harness_daemon_tx_bytes(c->socks[d]);
        ck_assert_msg(v != UINT64_MAX, "no status from daemon %u", d);
        t += v;
    }
    return t;
}

/* Runs lanes_ops with `per` ranks on each daemon of c: the payload bytes the daemons sent. */
static uint64_t run_lanes(cluster_t *c, unsigned per, uint64_t big)
{
    lanes_arg_t a = {.big = big};
    uint64_t before = tx_sum(c);

    ck_assert_msg(run_ranks(c, per, lanes_ops, &a) == 0, "%u daemons x %u ranks, big %llu", c->n,
                  per, (unsigned long long)big);
    return tx_sum(c) - before;
}

START_TEST(test_lanes_allreduce)
{
    for (unsigned nd = 2; nd <= 3; nd++) {
        cluster_t c;
        cluster_start(&c, nd);
        for (unsigned per = 1; per <= 2; per++)
            ck_assert_msg(
                run_lanes(&c, per, 0) == 0,
                "%u daemons x %u ranks: small allreduces or allgathers reached the daemons", nd,
                per);
        /* One float over the limit goes through the daemons, checked the same way. */
        ck_assert_uint_gt(run_lanes(&c, 1, LANE_MAX_BYTES / 4 + 1), 0);
        cluster_stop(&c);
    }
}
END_TEST

START_TEST(test_lanes_off)
{
    cluster_t c;

    cluster_start(&c, 2);
    setenv("HCCLD_DIRECT_MAX", "0", 1);
    ck_assert_uint_gt(run_lanes(&c, 1, 0), 0);
    unsetenv("HCCLD_DIRECT_MAX");
    setenv("HCCL_ALGO", "level0:NA;level1:ring", 1);
    ck_assert_uint_gt(run_lanes(&c, 1, 0), 0);
    unsetenv("HCCL_ALGO");
    setenv("HCCLD_DIRECT_MAX", "4096", 1); /* fp64 x 1000 and x 8192 go through the daemons */
    ck_assert_uint_gt(run_lanes(&c, 1, 0), 0);
    unsetenv("HCCLD_DIRECT_MAX");
    cluster_stop(&c);
}
END_TEST

/* Rank 1 never posts: rank 0's allreduce over the lanes fails with HCCL_E_TIMEOUT after
 * HCCL_EXEC_TIMEOUT, and its error names rank 1 as the one it waited for. */
static int lane_waits_for_one(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float x[4] = {1, 2, 3, 4}, y[4];

    (void)n;
    (void)arg;
    if (r == 1) {
        sleep(4);
        return 0;
    }
    HcclResult rc = HcclAllReduce(x, y, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
    if (rc != HCCL_E_TIMEOUT)
        fprintf(stderr, "rank 0: the allreduce gave %d, not HCCL_E_TIMEOUT\n", rc);
    return rc != HCCL_E_TIMEOUT;
}

START_TEST(test_lanes_timeout_names_rank)
{
    cluster_t c;
    char path[64];

    cluster_start(&c, 2);
    setenv("HCCL_EXEC_TIMEOUT", "1", 1);
    int saved = harness_stderr_to(path, sizeof(path));
    int rc = run_ranks(&c, 1, lane_waits_for_one, NULL);
    int named = harness_stderr_back_has(
        saved, path,
        "rank 0: allreduce of 16 bytes over lanes failed: HCCL_E_TIMEOUT: timed out, "
        "waiting for rank 1 (did it post the same op?)");
    unsetenv("HCCL_EXEC_TIMEOUT");
    cluster_stop(&c);
    ck_assert_int_eq(rc, 0);
    ck_assert(named);
}
END_TEST

/* With op retry at L1 (a 60 s hold), rank 1 is SIGKILLed right after the comm's last lane op:
 * rank 0's HcclCommDestroy says goodbye on the lane and must not wait out the hold for an
 * answer that cannot come (the lane closed: its repair is refused). It returns HCCL_SUCCESS
 * well within DESTROY_BOUND_S; the daemons serve on. */
#define DESTROY_BOUND_S 20.0

static int bye_to_the_dead(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float x[4] = {1, 2, 3, 4}, y[4];

    (void)arg;
    for (int i = 0; i < 20; i++)
        if (HcclAllReduce(x, y, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) !=
                HCCL_SUCCESS ||
            y[3] != 4.0f * (float)n)
            return 1;
    if (r == 1)
        kill(getpid(), SIGKILL);
    usleep(300000); /* rank 1 is gone */
    double t0 = fl_now();
    HcclResult rc = HcclCommDestroy(comm);
    double took = fl_now() - t0;
    if (rc != HCCL_SUCCESS || took > DESTROY_BOUND_S) {
        fprintf(stderr, "rank 0: HcclCommDestroy gave %d after %.1f s\n", rc, took);
        _exit(1);
    }
    _exit(0); /* destroyed already */
}

START_TEST(test_lanes_goodbye_to_a_killed_rank)
{
    cluster_t c;
    char *socks[2];
    pid_t pids[2];
    int status[2];

    cluster_start(&c, 2);
    socks[0] = c.socks[0];
    socks[1] = c.socks[1];
    setenv("HCCL_OP_RETRY_ENABLE", "L1:1", 1);
    setenv("HCCL_OP_RETRY_PARAMS", "MaxCnt:1, HoldTime:60000, IntervalTime:0", 1);
    ck_assert_int_eq(harness_spawn_ranks_on(2, socks, bye_to_the_dead, NULL, 120, pids), 0);
    harness_wait_status(pids, 2, 120, status);
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCL_OP_RETRY_PARAMS");
    ck_assert_msg(WIFEXITED(status[0]) && WEXITSTATUS(status[0]) == 0, "rank 0: status %d",
                  status[0]);
    ck_assert_msg(WIFSIGNALED(status[1]) && WTERMSIG(status[1]) == SIGKILL, "rank 1: status %d",
                  status[1]);
    ck_assert_int_eq(run_ranks(&c, 1, rank_formed, NULL), 0); /* the daemons serve on */
    cluster_stop(&c);
}
END_TEST

void multinode_add_lanes(Suite *s)
{
    TCase *tc = tcase_create("lanes");

    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_lanes_allreduce);
    tcase_add_test(tc, test_lanes_off);
    tcase_add_test(tc, test_lanes_timeout_names_rank);
    tcase_add_test(tc, test_lanes_goodbye_to_a_killed_rank);
    suite_add_tcase(s, tc);
}
