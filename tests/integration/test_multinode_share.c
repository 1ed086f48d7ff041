/*
 * Data connections across daemons: the children of HcclCommSplit share their parent's
 * (and connect anew where a daemon offers nothing), connections striped over several
 * sockets, and daemons that go straight to sleep after their work.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "multinode.h"
#include "shm.h"

/*
 * Splits across daemons reuse their parent's data connections. The layout: `per` ranks on
 * each daemon; `child` takes one rank of each daemon (color r % per), `twin` all ranks in the
 * parent's order (the same peers and the same rank numbers: without a per-comm part in the
 * tags, its messages and the parent's would match each other's receives).
 */
#define SHARE_COUNT 1000
#define SHARE_ROUNDS 8

typedef struct share_arg {
    cluster_t *c;
    unsigned per;
    int grow[MAXD];   /* data connections each daemon gains with the children and twin */
    int orphan[MAXD]; /* the same once the parent is gone (its own connections closed) */
} share_arg_t;

/* Allreduce (sum) of x[i] = r * scale + i on stream s (NULL: at once); check with sum_check. */
static int sum_post(HcclComm comm, HcclStream s, int32_t *x, int32_t *y, uint32_t r, int scale)
{
    for (int i = 0; i < SHARE_COUNT; i++)
        x[i] = (int32_t)r * scale + i;
    return HcclAllReduce(x, y, SHARE_COUNT, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, s) !=
           HCCL_SUCCESS;
}

static int sum_check(const int32_t *y, uint32_t n, int scale)
{
    for (int i = 0; i < SHARE_COUNT; i++)
        if (y[i] != (int32_t)(n * (n - 1) / 2) * scale + (int32_t)n * i) {
            fprintf(stderr, "allreduce: element %d is %d\n", i, y[i]);
            return 1;
        }
    return 0;
}

static int sum_now(HcclComm comm, uint32_t r, uint32_t n, int scale)
{
    int32_t x[SHARE_COUNT], y[SHARE_COUNT];

    return sum_post(comm, NULL, x, y, r, scale) || sum_check(y, n, scale);
}

/* One daemon's data connections, or -1. */
static int conns_of(const share_arg_t *a, unsigned d)
{
    return harness_daemon_data_conns(a->c->socks[d]);
}

/* Every daemon has want[d] + add[d] connections (add NULL: none); polls up to 10 s, since the
 * daemons free a comm only when its last local rank left. */
static int conns_are(const share_arg_t *a, const int *want, const int *add, const char *when)
{
    for (int tries = 0; tries < 200; tries++) {
        unsigned d = 0;

        while (d < a->c->n && conns_of(a, d) == want[d] + (add ? add[d] : 0))
            d++;
        if (d == a->c->n)
            return 0;
        usleep(50000);
    }
    for (unsigned d = 0; d < a->c->n; d++)
        fprintf(stderr, "%s: daemon %u has %d data connections, expected %d\n", when, d,
                conns_of(a, d), want[d] + (add ? add[d] : 0));
    return 1;
}

/* Parent and twin at once: send/recv to the next daemon's rank and collectives, each on its
 * own stream and posted in opposite orders, with different values. */
static int interleave(HcclComm parent, HcclComm twin, uint32_t r, uint32_t n, uint32_t per)
{
    static int32_t out[2][SHARE_COUNT], in[2][SHARE_COUNT], x[2][SHARE_COUNT], y[2][SHARE_COUNT];
    uint32_t to = (r + per) % n, from = (r + n - per) % n;
    HcclStream s[6];
    HcclComm comm[2] = {parent, twin};
    int bad = 0;

    for (int k = 0; k < 6; k++)
        if (HcclStreamCreate(&s[k]) != HCCL_SUCCESS)
            return 1;
    for (int round = 0; round < SHARE_ROUNDS && !bad; round++) {
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < SHARE_COUNT; i++)
                out[c][i] = (int32_t)((c + 1) * 10000000 + r * 10000 + i), in[c][i] = -1;
        bad |= HcclRecv(in[1], SHARE_COUNT, HCCL_DATA_TYPE_INT32, from, twin, s[0]) != 0;
        bad |= HcclSend(out[0], SHARE_COUNT, HCCL_DATA_TYPE_INT32, to, parent, s[1]) != 0;
        bad |= HcclRecv(in[0], SHARE_COUNT, HCCL_DATA_TYPE_INT32, from, parent, s[2]) != 0;
        bad |= HcclSend(out[1], SHARE_COUNT, HCCL_DATA_TYPE_INT32, to, twin, s[3]) != 0;
        bad |= sum_post(comm[round % 2], s[4], x[0], y[0], r, 7);
        bad |= sum_post(comm[1 - round % 2], s[5], x[1], y[1], r, 3);
        for (int k = 0; k < 6; k++)
            bad |= HcclStreamSynchronize(s[k]) != HCCL_SUCCESS;
        for (int c = 0; c < 2 && !bad; c++)
            for (int i = 0; i < SHARE_COUNT && !bad; i++)
                if (in[c][i] != (int32_t)((c + 1) * 10000000 + from * 10000 + i)) {
                    fprintf(stderr, "rank %u round %d: %s recv element %d is %d\n", r, round,
                            c ? "twin" : "parent", i, in[c][i]);
                    bad = 1;
                }
        bad = bad || sum_check(y[0], n, 7) || sum_check(y[1], n, 3);
    }
    for (int k = 0; k < 6; k++)
        HcclStreamDestroy(s[k]);
    return bad;
}

static int share_split(HcclComm parent, uint32_t r, uint32_t n, void *arg)
{
    const share_arg_t *a = arg;
    int base[MAXD], zero[MAXD] = {0};
    HcclComm child = NULL, twin = NULL;
    uint32_t cn = n / a->per;

    /* The parent's collective ran on every daemon: all its connections are up. */
    if (sum_now(parent, r, n, 1) != 0)
        return 1;
    for (unsigned d = 0; r == 0 && d < a->c->n; d++)
        if ((base[d] = conns_of(a, d)) != (int)a->c->n - 1) {
            fprintf(stderr, "daemon %u: %d data connections for the parent\n", d, base[d]);
            return 2;
        }
    if (HcclCommSplit(parent, r % a->per, r, &child) != HCCL_SUCCESS ||
        HcclCommSplit(parent, 0, r, &twin) != HCCL_SUCCESS)
        return 3;
    if (sum_now(child, r / a->per, cn, 5) != 0 || interleave(parent, twin, r, n, a->per) != 0)
        return 4;
    /* Every rank is past its splits: the children exist on every daemon. Nobody destroys the
     * parent before rank 0 has counted (the second parent op). */
    if (sum_now(parent, r, n, 2) != 0 || (r == 0 && conns_are(a, base, a->grow, "split")) ||
        sum_now(parent, r, n, 4) != 0)
        return 5;
    if (HcclCommDestroy(parent) != HCCL_SUCCESS)
        return 6;
    /* The parent is gone on every daemon once this twin op completes; the connections it
     * shares stay. */
    if (sum_now(twin, r, n, 9) != 0 || sum_now(child, r / a->per, cn, 11) != 0 ||
        (r == 0 && conns_are(a, base, a->orphan, "parent destroyed")) ||
        sum_now(twin, r, n, 10) != 0)
        return 7;
    if (HcclCommDestroy(twin) != HCCL_SUCCESS || sum_now(child, r / a->per, cn, 13) != 0 ||
        HcclCommDestroy(child) != HCCL_SUCCESS)
        return 8;
    /* The last comm closes them. The harness would destroy the parent again: exit here. */
    _exit(r == 0 && conns_are(a, zero, NULL, "all destroyed") ? 9 : 0);
}

/* nd daemons, 2 ranks on each; daemon `plain` (if below nd) runs with HCCLD_SPLIT_SHARE=0 and
 * offers no connection to the children. */
static int run_share(unsigned nd, unsigned plain, const int *grow, const int *orphan)
{
    share_arg_t a = {.per = 2};
    cluster_t c;
    int failed;

    c.n = nd;
    snprintf(c.socks[0], sizeof(c.socks[0]), "%s", harness_socket());
    c.pids[0] = 0;
    for (unsigned i = 1; i < nd; i++) {
        if (i == plain)
            setenv("HCCLD_SPLIT_SHARE", "0", 1);
        c.pids[i] = harness_daemon_spawn(c.socks[i], sizeof(c.socks[i]));
        unsetenv("HCCLD_SPLIT_SHARE");
        ck_assert_int_gt(c.pids[i], 0);
    }
    a.c = &c;
    memcpy(a.grow, grow, sizeof(a.grow));
    memcpy(a.orphan, orphan, sizeof(a.orphan));
    failed = run_ranks(&c, a.per, share_split, &a);
    cluster_stop(&c);
    return failed;
}

/* The children of a split take their parent's connections: the daemons' count does not grow,
 * destroying the parent first leaves them working, and parent and twin traffic never cross. */
START_TEST(test_split_shares_connections)
{
    static const int none[MAXD] = {0};

    ck_assert_int_eq(run_share(2, MAXD, none, none), 0);
    ck_assert_int_eq(run_share(3, MAXD, none, none), 0);
}
END_TEST

/* Daemon 2 offers nothing: pair (0,1) shares, the pairs with daemon 2 connect anew (one
 * connection per pair for each of the two children and the twin), and everything still works;
 * the parent's own connections to daemon 2 close with it. */
START_TEST(test_split_shares_some_connections)
{
    static const int grow[MAXD] = {3, 3, 6}, orphan[MAXD] = {2, 2, 4};

    ck_assert_int_eq(run_share(3, 2, grow, orphan), 0);
}
END_TEST

/* Rank 0 (on daemon 0) finds its data connections striped in hccld-ctl comms, and the link
 * figures the cost model works with (measured before the first collective, which rank_formed()
 * ran); the others wait for it in a barrier, so the comm lives while it looks. */
static int striped_seen(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    char out[8192] = "";
    int bad = rank_formed(comm, r, n, NULL);

    (void)arg;
    if (r == 0 &&
        (harness_ctl(0, out, sizeof(out), "comms") != 0 || strstr(out, "tcp x3") == NULL ||
         strstr(out, "links measured: latency ") == NULL ||
         strstr(out, " daemons per core") == NULL)) {
        fprintf(stderr, "hccld-ctl comms shows no striped connection or no link figures:\n%s\n",
                out);
        bad = 1;
    }
    if (r == 0 && (harness_ctl(0, out, sizeof(out), "--json comms") != 0 ||
                   strstr(out, "\"msg_overhead_us\"") == NULL)) {
        fprintf(stderr, "hccld-ctl --json comms has no link figures:\n%s\n", out);
        bad = 1;
    }
    return bad | (HcclBarrier(comm, NULL) != HCCL_SUCCESS);
}

/*
 * Data connections striped over 3 sockets (HCCLD_TCP_NSOCKS=3, HCCL_MULTI_QP_THRESHOLD=1 KiB so
 * that most messages split): set for daemons 1 and 2, which connect; daemon 0 (the test's own,
 * started without it) accepts what they announce. Every collective, Send/Recv and AlltoAllV,
 * and a size mismatch still HCCL_E_PARA, across 3 daemons with 2 ranks each.
 */
START_TEST(test_striped_connections)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                                DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER};
    uint64_t base = 300000;
    cluster_t c;

    setenv("HCCLD_TCP_NSOCKS", "3", 1);
    setenv("HCCL_MULTI_QP_THRESHOLD", "1", 1);
    cluster_start(&c, 3);
    ck_assert_int_eq(run_ranks(&c, 2, striped_seen, NULL), 0);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        colls_arg_t a = {.kind = kinds[k], .quick = 1};
        ck_assert_msg(run_ranks(&c, 2, colls_all_cases, &a) == 0, "kind %d", kinds[k]);
    }
    ck_assert_int_eq(run_ranks(&c, 2, p2p_ring_case, NULL), 0);
    ck_assert_int_eq(run_ranks(&c, 2, p2p_alltoallv_case, &base), 0);
    cluster_stop(&c);
    cluster_start(&c, 2);
    unsetenv("HCCLD_TCP_NSOCKS");
    unsetenv("HCCL_MULTI_QP_THRESHOLD");
    ck_assert_int_eq(run_ranks(&c, 1, rank_p2p_mismatch, NULL), 0);
    cluster_stop(&c);
}
END_TEST

/* Daemons that never poll after their work (HCCLD_ENGINE_SPIN_US=0: straight to sleep in
 * poll()) still run every collective to the end, each result checked. */
START_TEST(test_no_engine_spin)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_ALLGATHER, DESC_ALLTOALL};
    cluster_t c;

    setenv("HCCLD_ENGINE_SPIN_US", "0", 1);
    cluster_start(&c, 3);
    unsetenv("HCCLD_ENGINE_SPIN_US");
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        colls_arg_t a = {.kind = kinds[k], .quick = 1};
        ck_assert_msg(run_ranks(&c, 1, colls_all_cases, &a) == 0, "kind %d", kinds[k]);
    }
    cluster_stop(&c);
}
END_TEST

void multinode_add_share(Suite *s)
{
    TCase *tuning = tcase_create("tuning");
    tcase_set_timeout(tuning, 300);
    tcase_add_test(tuning, test_striped_connections);
    tcase_add_test(tuning, test_no_engine_spin);
    suite_add_tcase(s, tuning);
    TCase *share = tcase_create("share");
    tcase_set_timeout(share, 300);
    tcase_add_test(share, test_split_shares_connections);
    tcase_add_test(share, test_split_shares_some_connections);
    suite_add_tcase(s, share);
}
