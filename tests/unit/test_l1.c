/*
 * Level 1 end to end inside one process: N nodes on 127.0.0.1, a full mesh of TCP transport
 * connections that proved the job key, every algorithm's schedule for every collective it
 * serves run by the level-1 executor, results compared element by element.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/l1.h"
#include "hccl/hccl.h"
#include "shm.h"
#include "span/xfer_result.h"
#include "test_list.h"

#define MAXN 18
#define EVERY_MAXN 5

static const uint8_t job[AUTH_JOB_BYTES] = {1, 2, 3};
static const uint8_t key[AUTH_KEY_BYTES] = {9, 8, 7};

typedef struct mesh {
    uint32_t n;
    tp_listener_t *l[MAXN];
    tp_conn_t *c[MAXN][MAXN]; /* c[i][j]: node i's connection to node j */
} mesh_t;

static int lookup(void *ctx, const uint8_t id[AUTH_JOB_BYTES], uint8_t out[AUTH_KEY_BYTES])
{
    if (memcmp(id, job, AUTH_JOB_BYTES) != 0)
        return -ENOENT;
    memcpy(out, key, AUTH_KEY_BYTES);
    return 0;
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct accepted {
    uint32_t node; /* the listener's node */
    tp_conn_t *c;
} accepted_t;

/* Node j connects to every i < j; i's listener accepts and learns j from the handshake. */
static int mesh_open(mesh_t *m, uint32_t n)
{
    char addr[MAXN][TP_ADDR_MAX];
    accepted_t acc[MAXN * MAXN];
    int nacc = 0, placed = 0, want = (int)(n * (n - 1) / 2);
    double deadline = now_s() + 10;

    memset(m, 0, sizeof(*m));
    m->n = n;
    for (uint32_t i = 0; i < n; i++)
        if (tp_tcp.listen("127.0.0.1", &m->l[i], addr[i], sizeof(addr[i])) != 0)
            return -1;
    for (uint32_t j = 0; j < n; j++)
        for (uint32_t i = 0; i < j; i++)
            if (tp_tcp.connect(addr[i], job, key, j, &m->c[j][i]) != 0)
                return -2;
    while (placed < want && now_s() < deadline) {
        tp_conn_t *c;
        for (uint32_t i = 0; i < n; i++)
            while (nacc < MAXN * MAXN && tp_accept(m->l[i], lookup, NULL, &c) == 0)
                acc[nacc++] = (accepted_t){.node = i, .c = c};
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t i = 0; i < j; i++)
                if (tp_conn_state(m->c[j][i]) < 0)
                    return -4;
        for (int k = 0; k < nacc; k++) {
            if (acc[k].c == NULL || tp_conn_state(acc[k].c) != 1)
                continue;
            uint32_t peer = tp_conn_peer_node(acc[k].c);
            if (peer >= n || m->c[acc[k].node][peer] != NULL)
                return -5;
            m->c[acc[k].node][peer] = acc[k].c;
            acc[k].c = NULL;
            placed++;
        }
    }
    for (uint32_t j = 0; j < n; j++)
        for (uint32_t i = 0; i < j; i++)
            while (tp_conn_state(m->c[j][i]) == 0 && now_s() < deadline)
                ;
    return placed == want ? 0 : -3;
}

static void mesh_close(mesh_t *m)
{
    for (uint32_t i = 0; i < m->n; i++) {
        for (uint32_t j = 0; j < m->n; j++)
            if (m->c[i][j] != NULL)
                tp_close(m->c[i][j]);
        tp_listen_close(m->l[i]);
    }
}

static int32_t v(uint32_t node, uint64_t k)
{
    return (int32_t)(node * 1000 + k % 997);
}

/* Lays out node `me`'s input as algo.h says. */
static void fill(int kind, uint32_t n, uint32_t me, uint32_t root, uint64_t cnt, int32_t *out,
                 int32_t *in)
{
    switch (kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE:
        for (uint64_t i = 0; i < cnt; i++)
            out[i] = v(me, i);
        break;
    case DESC_BROADCAST:
        for (uint64_t i = 0; me == root && i < cnt; i++)
            out[i] = v(me, i);
        break;
    case DESC_ALLGATHER:
        for (uint64_t i = 0; i < cnt; i++)
            out[me * cnt + i] = v(me, i);
        break;
    case DESC_REDUCE_SCATTER:
        for (uint64_t k = 0; k < n * cnt; k++)
            out[k] = v(me, k);
        break;
    case DESC_ALLTOALL:
    case DESC_SCATTER:
        for (uint64_t k = 0; k < n * cnt; k++)
            in[k] = v(me, k);
        break;
    default: break;
    }
}

static int32_t sum(uint32_t n, uint64_t k)
{
    int32_t s = 0;

    for (uint32_t q = 0; q < n; q++)
        s += v(q, k);
    return s;
}

/* Number of wrong elements in node me's result. */
static uint64_t check(int kind, uint32_t n, uint32_t me, uint32_t root, uint64_t cnt,
                      const int32_t *out)
{
    uint64_t bad = 0;

    switch (kind) {
    case DESC_ALLREDUCE:
        for (uint64_t i = 0; i < cnt; i++)
            bad += out[i] != sum(n, i);
        break;
    case DESC_REDUCE:
        for (uint64_t i = 0; me == root && i < cnt; i++)
            bad += out[i] != sum(n, i);
        break;
    case DESC_BROADCAST:
        for (uint64_t i = 0; i < cnt; i++)
            bad += out[i] != v(root, i);
        break;
    case DESC_ALLGATHER:
        for (uint64_t k = 0; k < n * cnt; k++)
            bad += out[k] != v((uint32_t)(k / cnt), k % cnt);
        break;
    case DESC_REDUCE_SCATTER:
        for (uint64_t i = 0; i < cnt; i++)
            bad += out[me * cnt + i] != sum(n, me * cnt + i);
        break;
    case DESC_ALLTOALL:
        for (uint64_t k = 0; k < n * cnt; k++)
            bad += out[k] != v((uint32_t)(k / cnt), me * cnt + k % cnt);
        break;
    case DESC_SCATTER:
        for (uint64_t i = 0; i < cnt; i++)
            bad += out[i] != v(root, me * cnt + i);
        break;
    default: break;
    }
    return bad;
}

/*
 * Runs one collective on every node at once, each with an op check: the same on every node
 * but `odd` (UINT32_MAX: none), whose check differs. Returns the number of wrong elements, or
 * -1; rc_out (if not NULL) gets each node's last l1_progress result.
 */
/* direct: the input stays in a buffer of its own (l1_args_t.src), OUT starts as garbage,
 * and the input must be as it was afterwards (ALLREDUCE and REDUCE). */
static long run_case_odd(mesh_t *m, int algo, int kind, uint32_t root, uint64_t cnt, uint64_t tag,
                         uint32_t odd, int *rc_out, int direct)
{
    uint32_t n = m->n;
    sched_t sc[MAXN];
    int32_t *out[MAXN], *in[MAXN], *scratch[MAXN], *src[MAXN] = {NULL};
    uint8_t *fresh[MAXN] = {NULL};
    l1_run_t *run[MAXN];
    int done[MAXN] = {0}, ndone = 0, failed = 0, rcs[MAXN] = {0};
    uint64_t checks[MAXN][2], check_in[MAXN][2];
    long bad = 0;
    double deadline = now_s() + (odd < n ? 2 : 30);

    for (uint32_t me = 0; me < n; me++) {
        if (algo_build(algo, kind, n, me, root, cnt, &sc[me]) != 0)
            return -1;
        out[me] = calloc(sc[me].out_elems + 1, sizeof(int32_t));
        in[me] = calloc(n * cnt + 1, sizeof(int32_t));
        scratch[me] = calloc(sc[me].scratch_elems + 1, sizeof(int32_t));
        fill(kind, n, me, root, cnt, out[me], in[me]);
        if (direct) {
            int all;
            src[me] = malloc((cnt + 1) * sizeof(int32_t));
            fresh[me] = malloc(sc[me].nsteps + 1);
            memcpy(src[me], out[me], cnt * sizeof(int32_t));
            memset(out[me], 0x5a, sc[me].out_elems * sizeof(int32_t));
            ck_assert_int_eq(sched_fresh_reads(&sc[me], cnt, fresh[me], &all), 0);
            ck_assert_msg(all || (kind == DESC_REDUCE && me != root),
                          "%s kind %d n %u node %u: the schedule leaves input in OUT",
                          algo_name(algo), kind, n, me);
        }
        l1_args_t a = {.sched = &sc[me],
                       .conns = m->c[me],
                       .me = me,
                       .out = (uint8_t *)out[me],
                       .in = (uint8_t *)in[me],
                       .scratch = (uint8_t *)scratch[me],
                       .src = (uint8_t *)src[me],
                       .fresh = fresh[me],
                       .dtype = HCCL_DATA_TYPE_INT32,
                       .redop = HCCL_REDUCE_SUM,
                       .tag = me == odd ? tag | 1ull << 47 : tag, /* as span/tag.h */
                       .check_tag = tag | 1ull << 48,
                       .nnodes = n,
                       .check = checks[me],
                       .check_in = check_in[me],
                       .check_len = sizeof(checks[me])};
        checks[me][0] = (uint64_t)kind << 32 | algo;
        checks[me][1] = me == odd ? cnt + 1 : cnt;
        if (l1_start(&a, &run[me]) != 0)
            return -1;
    }
    /* With an odd node, the nodes that find out stop; the others may wait until the deadline. */
    while (ndone < (int)n && (odd < n || !failed) && now_s() < deadline)
        for (uint32_t me = 0; me < n; me++) {
            if (done[me])
                continue;
            int rc = rcs[me] = l1_progress(run[me]);
            if (rc < 0)
                failed = 1;
            if (rc != 0)
                done[me] = 1, ndone += rc == 1;
        }
    if (rc_out != NULL)
        memcpy(rc_out, rcs, n * sizeof(int));
    for (uint32_t me = 0; me < n; me++) {
        if (!failed && ndone == (int)n)
            bad += (long)check(kind, n, me, root, cnt, out[me]);
        for (uint64_t i = 0; src[me] != NULL && i < cnt; i++)
            bad += src[me][i] != v(me, i); /* the input is read, never written */
        free(src[me]);
        free(fresh[me]);
        l1_free(run[me]);
        sched_free(&sc[me]);
        free(out[me]);
        free(in[me]);
        free(scratch[me]);
    }
    return failed || ndone < (int)n ? -1 : bad;
}

/* Every algorithm x kinds[] x counts[] on 2..MAXN nodes (roots vary with the count), checked
 * element by element; direct as in run_case_odd. */
static void every_case(const int *kinds, size_t nk, const uint64_t *counts, size_t nc, int direct,
                       uint64_t tag)
{
    for (uint32_t n = 2; n <= EVERY_MAXN; n++) {
        mesh_t m;
        ck_assert_int_eq(mesh_open(&m, n), 0);
        for (int algo = 0; algo < ALGO_COUNT; algo++)
            for (size_t k = 0; k < nk; k++)
                for (size_t c = 0; c < nc; c++) {
                    if (!algo_serves(algo, kinds[k]))
                        continue;
                    uint64_t cnt = kinds[k] == DESC_BARRIER ? 0 : counts[c];
                    long bad = run_case_odd(&m, algo, kinds[k], n - 1 - (uint32_t)c % n, cnt, tag++,
                                            UINT32_MAX, NULL, direct);
                    ck_assert_msg(bad == 0, "%s kind %d n %u count %llu%s: %ld", algo_name(algo),
                                  kinds[k], n, (unsigned long long)cnt,
                                  direct ? " (input in place)" : "", bad);
                }
        mesh_close(&m);
    }
}

START_TEST(test_every_algorithm_over_tcp)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                                DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER,   DESC_BARRIER};
    static const uint64_t counts[] = {1, 7, 1000, 262147};

    every_case(kinds, sizeof(kinds) / sizeof(kinds[0]), counts, sizeof(counts) / sizeof(counts[0]),
               0, 1);
}
END_TEST

/* With one rank per node the engine leaves the input where the rank put it: every schedule of
 * ALLREDUCE and REDUCE must then read it there and write all of OUT, and never the input. */
START_TEST(test_input_left_in_place)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_REDUCE};
    static const uint64_t counts[] = {1, 3, 1000, 262147};

    every_case(kinds, 2, counts, sizeof(counts) / sizeof(counts[0]), 1, 5000);
}
END_TEST

/* Fullmesh on 18 nodes reduces 17 contributions into a node's block in one round: a fold
 * of L1_FOLD_MAX, then one more that must add to it, not start again from the input. */
START_TEST(test_many_folds_in_place)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_REDUCE};
    mesh_t m;

    ck_assert_int_eq(mesh_open(&m, 18), 0);
    for (int k = 0; k < 2; k++) {
        long bad =
            run_case_odd(&m, ALGO_MESH, kinds[k], 5, 1000, 7000 + (uint64_t)k, UINT32_MAX, NULL, 1);
        ck_assert_msg(bad == 0, "kind %d: %ld wrong", kinds[k], bad);
    }
    mesh_close(&m);
}
END_TEST

/* Node 1 of 3 runs another operation under the same tag (its op check differs): node 1 and
 * node 2, which hear from a node of another mind, fail with -EBADE instead of exchanging
 * mislabeled data, whatever the algorithm's pattern; node 0 hears node 2, which agrees. */
START_TEST(test_check_disagrees)
{
    mesh_t m;
    int rc[3];
    uint64_t tag = 1000;

    ck_assert_int_eq(mesh_open(&m, 3), 0);
    for (int algo = 0; algo < ALGO_COUNT; algo++) {
        if (!algo_serves(algo, DESC_ALLREDUCE))
            continue;
        ck_assert_int_eq(run_case_odd(&m, algo, DESC_ALLREDUCE, 0, 1000, tag++, 1, rc, 0), -1);
        ck_assert_msg(rc[1] == -EBADE && rc[2] == -EBADE, "%s: nodes gave %d %d %d",
                      algo_name(algo), rc[0], rc[1], rc[2]);
        ck_assert_int_ne(rc[0], -EBADE);
        /* The connections carried a failed op: fresh ones for the next. */
        mesh_close(&m);
        ck_assert_int_eq(mesh_open(&m, 3), 0);
    }
    mesh_close(&m);
}
END_TEST

/* A peer that goes away mid-collective: the run fails, names the transport of the failed
 * transfer, and the op's result is HCCL_E_REMOTE; corrupt or malformed data on a link gives
 * the transport's own error instead. */
START_TEST(test_failed_transfer_result)
{
    enum { CNT = 1 << 16 };
    mesh_t m;
    sched_t sc;
    l1_run_t *run;
    int32_t *out = calloc(CNT, sizeof(int32_t)), *scratch;
    int rc = 0;
    double deadline = now_s() + 10;

    ck_assert_int_eq(mesh_open(&m, 2), 0);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 2, 0, 0, CNT, &sc), 0);
    scratch = calloc(sc.scratch_elems + 1, sizeof(int32_t));
    l1_args_t a = {.sched = &sc,
                   .conns = m.c[0],
                   .me = 0,
                   .out = (uint8_t *)out,
                   .scratch = (uint8_t *)scratch,
                   .dtype = HCCL_DATA_TYPE_INT32,
                   .redop = HCCL_REDUCE_SUM,
                   .tag = 7};
    ck_assert_int_eq(l1_start(&a, &run), 0);
    ck_assert_ptr_null(l1_failed_transport(run));
    tp_close(m.c[1][0]);
    m.c[1][0] = NULL;
    while (rc == 0 && now_s() < deadline)
        rc = l1_progress(run);
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_eq(l1_failed_transport(run), &tp_tcp);
    ck_assert_int_eq(xfer_result(l1_failed_transport(run), rc), HCCL_E_REMOTE);
    l1_free(run);
    sched_free(&sc);
    free(scratch);
    free(out);
    mesh_close(&m);

    ck_assert_int_eq(xfer_result(&tp_tcp, -EBADMSG), HCCL_E_TCP_TRANSFER);
    ck_assert_int_eq(xfer_result(&tp_tcp, -EPROTO), HCCL_E_TCP_TRANSFER);
    ck_assert_int_eq(xfer_result(&tp_tcp, -ETIMEDOUT), HCCL_E_REMOTE);
    ck_assert_int_eq(xfer_result(NULL, -EIO), HCCL_E_REMOTE);
}
END_TEST

/* Node 2 of 3 has not started a ring allreduce: node 0 waits on it and knows that it has not
 * started (its operation check has not come); node 1 waits on node 0 in a later round. Once node
 * 2 starts, all three finish with the right sums. */
START_TEST(test_waiting_on)
{
    enum { N = 3, CNT = 3000 };
    mesh_t m;
    sched_t sc[N];
    l1_run_t *run[N];
    int32_t *out[N], *in[N], *scratch[N];
    uint64_t checks[N][2], check_in[N][2];
    uint32_t nodes[4];
    int unstarted = -1, done[N] = {0};
    double deadline;

    ck_assert_int_eq(mesh_open(&m, N), 0);
    for (uint32_t me = 0; me < N; me++) {
        ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, N, me, 0, CNT, &sc[me]), 0);
        out[me] = calloc(sc[me].out_elems + 1, sizeof(int32_t));
        in[me] = calloc(N * CNT + 1, sizeof(int32_t));
        scratch[me] = calloc(sc[me].scratch_elems + 1, sizeof(int32_t));
        fill(DESC_ALLREDUCE, N, me, 0, CNT, out[me], in[me]);
        checks[me][0] = checks[me][1] = 42;
        l1_args_t a = {.sched = &sc[me],
                       .conns = m.c[me],
                       .me = me,
                       .nnodes = N,
                       .out = (uint8_t *)out[me],
                       .in = (uint8_t *)in[me],
                       .scratch = (uint8_t *)scratch[me],
                       .dtype = HCCL_DATA_TYPE_INT32,
                       .redop = HCCL_REDUCE_SUM,
                       .tag = 5000,
                       .check_tag = 5000 | 1ull << 48,
                       .check = checks[me],
                       .check_in = check_in[me],
                       .check_len = sizeof(checks[me])};
        ck_assert_int_eq(l1_start(&a, &run[me]), 0);
    }
    /* Until node 1 is in round 1 (where it stays: node 0 cannot send more), at most 10 s. */
    deadline = now_s() + 10;
    while (l1_round(run[1]) < 1 && now_s() < deadline)
        for (uint32_t me = 0; me < 2; me++)
            ck_assert_int_eq(l1_progress(run[me]), 0);
    for (uint32_t me = 0; me < 2; me++)
        ck_assert_int_eq(l1_progress(run[me]), 0);
    ck_assert_uint_eq(l1_waiting_on(run[0], nodes, 4, &unstarted), 1);
    ck_assert_uint_eq(nodes[0], 2);
    ck_assert_int_eq(unstarted, 1);
    ck_assert_uint_eq(l1_round(run[0]), 0);
    ck_assert_uint_eq(l1_waiting_on(run[1], nodes, 4, &unstarted), 1);
    ck_assert_uint_eq(nodes[0], 0);
    ck_assert_int_eq(unstarted, 0);
    ck_assert_uint_eq(l1_round(run[1]), 1);
    deadline = now_s() + 30;
    while (!(done[0] && done[1] && done[2]) && now_s() < deadline)
        for (uint32_t me = 0; me < N; me++) {
            int rc = done[me] ? 1 : l1_progress(run[me]);
            ck_assert_int_ge(rc, 0);
            done[me] = rc == 1;
        }
    for (uint32_t me = 0; me < N; me++) {
        ck_assert_msg(done[me], "node %u did not finish", me);
        ck_assert_uint_eq(l1_waiting_on(run[me], nodes, 4, &unstarted), 0);
        ck_assert_uint_eq(check(DESC_ALLREDUCE, N, me, 0, CNT, out[me]), 0);
        l1_free(run[me]);
        sched_free(&sc[me]);
        free(out[me]);
        free(in[me]);
        free(scratch[me]);
    }
    mesh_close(&m);
}
END_TEST

Suite *l1_suite(void)
{
    Suite *s = suite_create("l1");
    TCase *tc = tcase_create("l1");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_every_algorithm_over_tcp);
    tcase_add_test(tc, test_failed_transfer_result);
    tcase_add_test(tc, test_check_disagrees);
    tcase_add_test(tc, test_input_left_in_place);
    tcase_add_test(tc, test_many_folds_in_place);
    tcase_add_test(tc, test_waiting_on);
    suite_add_tcase(s, tc);
    return s;
}
