/* API behaviour: exact HcclResult for bad input, streams, several jobs, mismatched ranks. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../libclient/client.h" /* the piece planner, tested without a daemon */
#include "harness.h"
#include "ref.h"
#include "suites.h"
#include "uds.h"

#define FP32 HCCL_DATA_TYPE_FP32
#define SUM HCCL_REDUCE_SUM

static int bad_args(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float a[4] = {1, 2, 3, 4}, b[4];
    int fails = 0;
#define EXPECT(call, want)                                                                         \
    do {                                                                                           \
        HcclResult got_ = (call);                                                                  \
        if (got_ != (want)) {                                                                      \
            fprintf(stderr, "%s: got %d, want %d\n", #call, got_, (int)(want));                    \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)
    EXPECT(HcclAllReduce(NULL, b, 4, FP32, SUM, comm, NULL), HCCL_E_PTR);
    EXPECT(HcclAllReduce(a, NULL, 4, FP32, SUM, comm, NULL), HCCL_E_PTR);
    EXPECT(HcclAllReduce(a, b, 4, FP32, SUM, NULL, NULL), HCCL_E_PTR);
    EXPECT(HcclAllReduce(a, b, 4, (HcclDataType)12, SUM, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclAllReduce(a, b, 4, (HcclDataType)-1, SUM, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclAllReduce(a, b, 4, FP32, (HcclReduceOp)4, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclAllReduce(a, b, UINT64_MAX / 2, FP32, SUM, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclAllGather(a, b, UINT64_MAX / 8, HCCL_DATA_TYPE_INT64, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclBroadcast(a, 4, FP32, n, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclReduce(a, b, 4, FP32, SUM, n + 7, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclScatter(a, b, 1, FP32, n, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclSend(a, 4, FP32, n, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclRecv(b, 4, FP32, n, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclSend(NULL, 4, FP32, 0, comm, NULL), HCCL_E_PTR);
    EXPECT(HcclAlltoAll(a, 1, FP32, b, 1, HCCL_DATA_TYPE_INT32, comm, NULL), HCCL_E_PARA);
    EXPECT(HcclAlltoAllV(a, NULL, NULL, FP32, b, NULL, NULL, FP32, comm, NULL), HCCL_E_PTR);
    EXPECT(HcclMemAlloc(NULL, 10), HCCL_E_PTR);
    EXPECT(HcclMemFree(a), HCCL_E_PARA);
    EXPECT(HcclGetRankSize(comm, NULL), HCCL_E_PTR);
    EXPECT(HcclGetRankId(NULL, &r), HCCL_E_PTR);
    /* count 0 is a successful no-op, even with no buffers */
    EXPECT(HcclAllReduce(NULL, NULL, 0, FP32, SUM, comm, NULL), HCCL_SUCCESS);
    EXPECT(HcclAllReduce(a, b, 4, FP32, SUM, comm, NULL), HCCL_SUCCESS);
    for (int i = 0; i < 4; i++)
        if (b[i] != a[i] * (float)n)
            fails++;
    HcclResult ae = HCCL_E_INTERNAL;
    EXPECT(HcclGetCommAsyncError(comm, &ae), HCCL_SUCCESS);
    EXPECT(ae, HCCL_SUCCESS);
    return fails;
}

START_TEST(test_bad_args)
{
    ck_assert_int_eq(harness_run_ranks(2, bad_args, NULL, 60), 0);
}
END_TEST

START_TEST(test_init_args)
{
    HcclRootInfo ri, junk;
    HcclComm comm = NULL;

    ck_assert_int_eq(HcclGetRootInfo(NULL), HCCL_E_PTR);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfo(2, NULL, 0, &comm), HCCL_E_PTR);
    ck_assert_int_eq(HcclCommInitRootInfo(2, &ri, 0, NULL), HCCL_E_PTR);
    ck_assert_int_eq(HcclCommInitRootInfo(0, &ri, 0, &comm), HCCL_E_PARA);
    ck_assert_int_eq(HcclCommInitRootInfo(2, &ri, 2, &comm), HCCL_E_PARA);
    memset(&junk, 0x5a, sizeof(junk));
    ck_assert_int_eq(HcclCommInitRootInfo(1, &junk, 0, &comm), HCCL_E_PARA);
    /* A forged key for a real job id is refused. */
    junk = ri;
    junk.internal[40] ^= 1;
    junk.internal[41] ^= 1;
    ck_assert_int_ne(HcclCommInitRootInfo(1, &junk, 0, &comm), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_SUCCESS);
    /* The root info is used up once its communicator formed. */
    HcclComm again;
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &again), HCCL_E_NOT_FOUND);
    ck_assert_int_eq(HcclCommDestroy(comm), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommDestroy(NULL), HCCL_E_PTR);
    ck_assert_str_eq(HcclGetErrorString(HCCL_E_TIMEOUT), "HCCL_E_TIMEOUT: timed out");
}
END_TEST

START_TEST(test_no_daemon)
{
    HcclRootInfo ri;
    HcclComm comm;

    setenv("HCCLD_SOCKET", "/tmp/hccld-test-no-such-dir/hccld.sock", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_E_UNAVAIL);
    ck_assert_int_eq(HcclMemAlloc((void **)&comm, 16), HCCL_E_UNAVAIL);
}
END_TEST

/* Two threads of one process init comms at once (torch's p2p channels do): each must get the
 * answer and the shared-memory descriptors of its own comm, whichever thread read them. */
typedef struct {
    HcclRootInfo *ri;
    uint32_t rank;
    int ok;
} init_job_t;

static void *init_thread(void *arg)
{
    init_job_t *j = arg;
    HcclComm comm;
    float x = (float)(j->rank + 1);

    j->ok = HcclCommInitRootInfo(2, j->ri, j->rank, &comm) == HCCL_SUCCESS &&
            HcclAllReduce(&x, &x, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) ==
                HCCL_SUCCESS &&
            x == 3.0f && HcclCommDestroy(comm) == HCCL_SUCCESS;
    return NULL;
}

START_TEST(test_concurrent_inits)
{
    HcclRootInfo ri[2][2];
    pid_t pid[2];
    int st;

    for (int round = 0; round < 2; round++)
        for (int k = 0; k < 2; k++)
            ck_assert_int_eq(HcclGetRootInfo(&ri[round][k]), HCCL_SUCCESS);
    for (int p = 0; p < 2; p++) {
        pid[p] = fork();
        ck_assert_int_ge(pid[p], 0);
        if (pid[p] == 0) {
            int bad = 0;
            alarm(60);
            for (int round = 0; round < 2; round++) {
                /* Process p is rank p of comm 0 and rank 1 - p of comm 1. */
                init_job_t j[2] = {{&ri[round][0], (uint32_t)p, 0},
                                   {&ri[round][1], (uint32_t)(1 - p), 0}};
                pthread_t t[2];
                for (int k = 0; k < 2; k++)
                    pthread_create(&t[k], NULL, init_thread, &j[k]);
                for (int k = 0; k < 2; k++) {
                    pthread_join(t[k], NULL);
                    bad |= !j[k].ok;
                }
            }
            _exit(bad);
        }
    }
    for (int p = 0; p < 2; p++) {
        ck_assert_int_eq(waitpid(pid[p], &st, 0), pid[p]);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}
END_TEST

START_TEST(test_join_timeout)
{
    HcclRootInfo ri;
    HcclComm comm;
    time_t t0;

    setenv("HCCL_CONNECT_TIMEOUT", "2", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    t0 = time(NULL);
    /* Rank 1 of 2 never comes. */
    ck_assert_int_eq(HcclCommInitRootInfo(2, &ri, 0, &comm), HCCL_E_TIMEOUT);
    ck_assert_int_le(time(NULL) - t0, 10);
}
END_TEST

/* Chained operations on one stream: the second consumes the first's output. */
static int chained(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    enum { CNT = 300000 };
    float *a = malloc(CNT * 4), *b = malloc(CNT * 4), *c = malloc((size_t)CNT * 4 * n);
    HcclStream st;
    int bad = 0;

    ref_fill(FP32, SUM, r, a, 0, CNT);
    memset(c, 0, (size_t)CNT * 4 * n);
    if (HcclStreamCreate(&st) != HCCL_SUCCESS)
        return 1;
    for (int rep = 0; rep < 3; rep++) {
        if (HcclAllReduce(a, b, CNT, FP32, SUM, comm, st) != HCCL_SUCCESS ||
            HcclAllGather(b, c, CNT, FP32, comm, st) != HCCL_SUCCESS)
            return 2;
        HcclResult q = HcclStreamQuery(st);
        if (q != HCCL_SUCCESS && q != HCCL_E_AGAIN)
            return 3;
        if (HcclStreamSynchronize(st) != HCCL_SUCCESS || HcclStreamQuery(st) != HCCL_SUCCESS)
            return 4;
        for (uint32_t q2 = 0; q2 < n; q2++)
            for (uint64_t i = 0; i < CNT; i++)
                if (!ref_equal(FP32, c + (size_t)q2 * CNT, i, ref_reduced(FP32, SUM, n, i)))
                    bad++;
    }
    HcclStreamDestroy(st);
    free(a);
    free(b);
    free(c);
    return bad ? 5 : 0;
}

START_TEST(test_stream_chain)
{
    for (uint32_t n = 1; n <= 3; n++)
        ck_assert_int_eq(harness_run_ranks(n, chained, NULL, 120), 0);
}
END_TEST

static int loop_allreduce(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    int iters = *(int *)arg;
    enum { CNT = 100003 };
    int32_t *a = malloc(CNT * 4), *b = malloc(CNT * 4);

    for (int it = 0; it < iters; it++) {
        for (int i = 0; i < CNT; i++)
            a[i] = (int32_t)(r * 7 + i + it);
        if (HcclAllReduce(a, b, CNT, HCCL_DATA_TYPE_INT32, SUM, comm, NULL) != HCCL_SUCCESS)
            return 1;
        for (int i = 0; i < CNT; i++)
            if (b[i] != (int32_t)(7 * n * (n - 1) / 2 + n * (uint32_t)(i + it)))
                return 2;
    }
    free(a);
    free(b);
    return 0;
}

START_TEST(test_two_jobs)
{
    pid_t a[3], b[2];
    int iters = 50;

    ck_assert_int_eq(harness_spawn_ranks(3, loop_allreduce, &iters, 120, a), 0);
    ck_assert_int_eq(harness_spawn_ranks(2, loop_allreduce, &iters, 120, b), 0);
    ck_assert_int_eq(harness_wait(a, 3, 120), 0);
    ck_assert_int_eq(harness_wait(b, 2, 120), 0);
}
END_TEST

/* Rank 0 calls AllReduce while rank 1 calls AllGather: both get HCCL_E_PARA, nobody hangs. */
static int mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float a[8] = {0}, b[16];
    HcclResult rc, ae;

    if (r == 0)
        rc = HcclAllReduce(a, b, 8, FP32, SUM, comm, NULL);
    else
        rc = HcclAllGather(a, b, 8, FP32, comm, NULL);
    if (rc != HCCL_E_PARA) {
        fprintf(stderr, "rank %u: mismatch gave %d\n", r, rc);
        return 1;
    }
    HcclGetCommAsyncError(comm, &ae);
    return ae == HCCL_E_PARA ? 0 : 2;
}

START_TEST(test_mismatch)
{
    ck_assert_int_eq(harness_run_ranks(2, mismatch, NULL, 30), 0);
}
END_TEST

/* hccld-ctl's status names a running job's communicator and its ranks. */
static int hold(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    int fd = *(int *)arg;
    char c = 0;
    float x = 1, y;

    /* Barrier, then wait for the test to have looked, then leave together. */
    if (HcclAllReduce(&x, &y, 1, FP32, SUM, comm, NULL) != HCCL_SUCCESS)
        return 1;
    if (r == 0 && read(fd, &c, 1) != 1)
        return 2;
    return HcclAllReduce(&x, &y, 1, FP32, SUM, comm, NULL) == HCCL_SUCCESS && y == (float)n ? 0 : 3;
}

START_TEST(test_status)
{
    pid_t pids[2];
    int p[2];
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__StatusReq req = HCCLD__STATUS_REQ__INIT;
    uds_conn_t conn;
    int found = 0;

    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(harness_spawn_ranks(2, hold, &p[0], 60, pids), 0);
    for (int tries = 0; tries < 500 && !found; tries++) {
        int fd = uds_connect(harness_admin_socket());
        ck_assert_int_ge(fd, 0);
        uds_conn_init(&conn, fd);
        m.body_case = HCCLD__MSG__BODY_STATUS_REQ;
        m.status_req = &req;
        ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
        ck_assert_int_eq(uds_recv(&conn, &resp, 5000), 0);
        ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_STATUS_RESP);
        ck_assert_str_eq(resp->status_resp->version, HCCLD_VERSION);
        for (size_t i = 0; i < resp->status_resp->n_comms; i++)
            if (resp->status_resp->comms[i]->nranks == 2 &&
                resp->status_resp->comms[i]->joined == 2)
                found = 1;
        frame_msg_free(resp);
        uds_conn_close(&conn);
        if (!found)
            usleep(10000);
    }
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    ck_assert(found);
}
END_TEST

/* Row and column groups of a 2 x 3 grid (the groups run side by side, each rank alternating
 * between its row and its column) plus a color only one rank uses and ranks that opt out:
 * sums over each group, child ranks ordered by key then parent rank. */
static int allreduce_sum_check(HcclComm c, int32_t mine, int32_t want, int32_t size)
{
    int32_t *a = malloc(50000 * 4), *b = malloc(50000 * 4);
    int bad = 0;

    for (int i = 0; i < 50000; i++)
        a[i] = mine + i;
    if (HcclAllReduce(a, b, 50000, HCCL_DATA_TYPE_INT32, SUM, c, NULL) != HCCL_SUCCESS)
        bad = 1;
    for (int i = 0; i < 50000 && !bad; i++)
        bad = b[i] != want + size * i;
    free(a);
    free(b);
    return bad;
}

static int split_grid(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    HcclComm row = NULL, col = NULL, none = (HcclComm)1;
    uint32_t rr, rn, cr, cn;

    /* rows: {0,1,2} {3,4,5}, reversed by key; columns: {0,3} {1,4} {2,5} */
    if (HcclCommSplit(comm, r / 3, 10 - r, &row) != HCCL_SUCCESS ||
        HcclCommSplit(comm, r % 3, r, &col) != HCCL_SUCCESS ||
        HcclCommSplit(comm, r == 5 ? 0 : HCCL_SPLIT_NOCOLOR, 0, &none) != HCCL_SUCCESS)
        return 1;
    if (HcclGetRankId(row, &rr) || HcclGetRankSize(row, &rn) || HcclGetRankId(col, &cr) ||
        HcclGetRankSize(col, &cn))
        return 2;
    if (rn != 3 || rr != 2 - r % 3 || cn != 2 || cr != r / 3)
        return 3;
    if ((r == 5) != (none != NULL))
        return 4;
    /* Sum of (rank + i) over the group: rows 0+1+2 or 3+4+5, columns r%3 + r%3+3. */
    int32_t row_sum = (int32_t)(r / 3) * 9 + 3, col_sum = 2 * (int32_t)(r % 3) + 3;
    for (int i = 0; i < 3; i++)
        if (allreduce_sum_check(row, (int32_t)r, row_sum, 3) != 0 ||
            allreduce_sum_check(col, (int32_t)r, col_sum, 2) != 0)
            return 5;
    HcclCommDestroy(row);
    HcclCommDestroy(col);
    if (none != NULL)
        HcclCommDestroy(none);
    /* An unknown level-1 name fails the split as it fails an init, even on one daemon. */
    setenv("HCCL_ALGO", "level0:NA;level1:bogus", 1);
    HcclResult bad = HcclCommSplit(comm, 0, r, &row);
    unsetenv("HCCL_ALGO");
    if (bad != HCCL_E_PARA)
        return 7;
    return HcclCommSplit(NULL, 0, 0, &row) == HCCL_E_PTR ? 0 : 6;
}

START_TEST(test_split)
{
    ck_assert_int_eq(harness_run_ranks(6, split_grid, NULL, 120), 0);
}
END_TEST

/* Every piece of an op but the last tells the daemon that more follow (DESC_F_MORE): its QoS
 * counts the op as under way between pieces. One piece alone says nothing more. */
START_TEST(test_pieces_say_more)
{
    static const uint64_t counts[] = {1, 131072, 131073, 1000000};
    uint8_t *arena = calloc(1, 16u << 20);
    hc_client_t c = {.arena = arena};
    hc_comm_t comm = {.c = &c, .id = 7, .nranks = 2, .rank = 1, .chunk_bytes = 1u << 20};

    ck_assert_ptr_nonnull(arena);
    c.l.arena_bytes = 16u << 20;
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        hc_op_t op = {.kind = DESC_ALLREDUCE,
                      .dtype = FP32,
                      .redop = SUM,
                      .count = counts[k],
                      .send = arena,
                      .send_stride = counts[k] * 4,
                      .recv = arena + (8u << 20),
                      .recv_stride = counts[k] * 4};
        op_plan_t p;
        desc_t d;
        int r_staged;
        ck_assert_int_eq(hc_plan(&comm, &op, 2, 0, &p), HCCL_SUCCESS);
        ck_assert_int_eq(p.npieces, (counts[k] + 131071) / 131072); /* 512 KiB of fp32 each */
        for (uint64_t i = 0; i < p.npieces; i++) {
            hc_piece_prep(&comm, &p, i, 0, &d, &r_staged);
            ck_assert_int_eq(r_staged, 0);
            ck_assert_int_eq(d.flags & DESC_F_MORE, i + 1 < p.npieces ? DESC_F_MORE : 0);
        }
        hc_plan_free(&comm, &p);
    }
    free(arena);
}
END_TEST

Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("api");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_pieces_say_more);
    tcase_add_test(tc, test_init_args);
    tcase_add_test(tc, test_no_daemon);
    tcase_add_test(tc, test_join_timeout);
    tcase_add_test(tc, test_concurrent_inits);
    tcase_add_test(tc, test_stream_chain);
    tcase_add_test(tc, test_two_jobs);
    tcase_add_test(tc, test_mismatch);
    tcase_add_test(tc, test_status);
    tcase_add_test(tc, test_split);
    suite_add_tcase(s, tc);
    return s;
}
