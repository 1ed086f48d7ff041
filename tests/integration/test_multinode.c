/*
 * Several daemons on loopback: communicators form across them (the root daemon collects the
 * ranks, every daemon learns the membership), a wrong job key or an unreachable root daemon is
 * refused with a clear error, a missing rank times out on every daemon; every collective and
 * Send/Recv run across daemons.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "multinode.h"
#include "rootinfo.h"
#include "shm.h"
#include "suites.h"
#include "uds.h"

START_TEST(test_comm_forms_across_daemons)
{
    for (unsigned nd = 2; nd <= 5; nd++)
        for (unsigned per = 1; per <= 2; per++)
            ck_assert_msg(run_on_cluster(nd, per, rank_formed, NULL) == 0, "%u daemons x %u ranks",
                          nd, per);
}
END_TEST

/* Every collective across 2 and 3 daemons with 1 and 2 ranks each, a quick matrix of dtypes,
 * ops, counts and placements, checked element by element like the one-node suite. */
/* Send/Recv between ranks of different daemons (and of the same one, in one comm), and
 * AlltoAllV, which is built on them; a size mismatch fails the receive with HCCL_E_PARA. */
START_TEST(test_p2p_across_daemons)
{
    uint64_t bases[] = {0, 777, 300000};

    for (unsigned nd = 2; nd <= 3; nd++)
        for (unsigned per = 1; per <= 2; per++) {
            ck_assert_msg(run_on_cluster(nd, per, p2p_ring_case, NULL) == 0,
                          "ring, %u daemons x %u ranks", nd, per);
            ck_assert_msg(run_on_cluster(nd, per, p2p_batch_case, NULL) == 0,
                          "batch, %u daemons x %u ranks", nd, per);
            ck_assert_msg(run_on_cluster(nd, per, v_colls_case, &bases[1]) == 0,
                          "allgatherv and reducescatterv, %u daemons x %u ranks", nd, per);
            for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++)
                ck_assert_msg(run_on_cluster(nd, per, p2p_alltoallv_case, &bases[b]) == 0,
                              "alltoallv base %llu, %u daemons x %u ranks",
                              (unsigned long long)bases[b], nd, per);
        }
    ck_assert_int_eq(run_on_cluster(2, 1, rank_p2p_mismatch, NULL), 0);
}
END_TEST

/* The last rank posts a collective that disagrees with the others' (another kind, count or
 * root): every rank, on every daemon, gets HCCL_E_PARA and the same async error, none hangs.
 * With 3 daemons the middle one agrees with its neighbour and learns it from a notice. With
 * late_ms, rank 0 posts only after the others' daemons may have found the mismatch: its op
 * fails the same way, not as one on a broken comm. */
typedef struct mism {
    int kind1;       /* what the last rank posts: 0 allreduce, 1 allgather, 2 reduce */
    uint64_t count1; /* and with how many elements */
    unsigned late_ms;
    int kind0; /* what the others post (4096 elements), as kind1 */
} mism_t;

static int coll_mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const mism_t *m = arg;
    enum { CNT = 4096 };
    float *a = calloc(CNT * 8, sizeof(float)), *b = calloc(CNT * 8, sizeof(float));
    HcclResult rc, ae = HCCL_SUCCESS;
    int kind = r == n - 1 ? m->kind1 : m->kind0;
    uint64_t cnt = r == n - 1 ? m->count1 : CNT;

    if (r == 0 && m->late_ms > 0)
        usleep(m->late_ms * 1000);
    if (kind == 0)
        rc = HcclAllReduce(a, b, cnt, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
    else if (kind == 1)
        rc = HcclAllGather(a, b, cnt, HCCL_DATA_TYPE_FP32, comm, NULL);
    else
        rc = HcclReduce(a, b, cnt, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, 0, comm, NULL);
    HcclGetCommAsyncError(comm, &ae);
    free(a);
    free(b);
    if (rc == HCCL_E_PARA && ae == HCCL_E_PARA)
        return 0;
    fprintf(stderr, "rank %u: the mismatch gave %d, async error %d; want HCCL_E_PARA\n", r, rc, ae);
    return 1;
}

START_TEST(test_collective_mismatch_across_daemons)
{
    /* The allgathers of 4096 and 100 floats run over lanes on up to 4 ranks. */
    mism_t cases[] = {{0, 4095, 0, 0},   {1, 4096, 0, 0}, {0, 8192, 0, 0}, {2, 4096, 0, 0},
                      {0, 4095, 200, 0}, {1, 100, 0, 1},  {0, 4096, 0, 1}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        for (unsigned nd = 2; nd <= 3; nd++)
            for (unsigned per = 1; per <= 2; per++)
                ck_assert_msg(run_on_cluster(nd, per, coll_mismatch, &cases[i]) == 0,
                              "case %zu, %u daemons x %u ranks", i, nd, per);
}
END_TEST

START_TEST(test_collectives_across_daemons)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                                DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER};

    for (unsigned nd = 2; nd <= 3; nd++)
        for (unsigned per = 1; per <= 2; per++)
            for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
                colls_arg_t a = {.kind = kinds[k], .quick = 1};
                ck_assert_msg(run_on_cluster(nd, per, colls_all_cases, &a) == 0,
                              "kind %d, %u daemons x %u ranks", kinds[k], nd, per);
            }
}
END_TEST

/* Every level-1 algorithm forced with HCCL_ALGO (HCCL's syntax), every collective it serves
 * (the simulator holds them to every node count), on 2, 3, 4 and 5 daemons with 1 and 2 ranks each
 * (HCCLD_TEST_QUICK: 3 daemons with 2 ranks each), quick cases (dtypes, ops, odd counts, counts
 * below the node count); a bad HCCL_ALGO is an error at init, never ignored. */
START_TEST(test_forced_algorithms)
{
    static const char *const algos[] = {"ring", "H-D_R", "fullmesh", "tree", "NB", "NHR"};
    static const int kinds[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                                DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER};
    char env[64];
    HcclRootInfo ri;
    HcclComm comm;

    int quick = harness_quick();

    for (unsigned nd = quick ? 3 : 2; nd <= (quick ? 3 : MAXD); nd++) {
        cluster_t c;
        cluster_start(&c, nd);
        for (unsigned per = quick ? 2 : 1; per <= 2; per++)
            for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
                snprintf(env, sizeof(env), "level0:NA;level1:%s/alltoall=level1:pairwise",
                         algos[a]);
                setenv("HCCL_ALGO", env, 1);
                for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
                    colls_arg_t arg = {.kind = kinds[k], .quick = 1};
                    if (a >= 4 && kinds[k] != DESC_ALLREDUCE && kinds[k] != DESC_ALLGATHER &&
                        kinds[k] != DESC_REDUCE_SCATTER)
                        continue; /* the cost model's, tested above */
                    ck_assert_msg(run_ranks(&c, per, colls_all_cases, &arg) == 0,
                                  "%s kind %d, %u daemons x %u ranks", algos[a], kinds[k], nd, per);
                }
            }
        cluster_stop(&c);
    }
    setenv("HCCL_ALGO", "level0:NA;level1:bogus", 1);
    ck_assert_int_eq(HcclGetRootInfo(&ri), HCCL_SUCCESS);
    ck_assert_int_eq(HcclCommInitRootInfo(1, &ri, 0, &comm), HCCL_E_PARA);
    unsetenv("HCCL_ALGO");
}
END_TEST

/* Fullmesh on 18 daemons of one rank each: a node's block takes 17 contributions in one round,
 * more than one fold of the executor (16). With the input read where the rank left it, the
 * second fold once started again from the input and lost the first 16. */
START_TEST(test_many_daemons_fullmesh)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_REDUCE};
    cluster_t c;

    setenv("HCCL_ALGO", "level0:NA;level1:fullmesh", 1);
    /* colls_all_cases takes two buffers of n x its largest count of doubles from the arena. */
    setenv("HCCL_BUFFSIZE", "400", 1);
    cluster_start(&c, CLUSTER_MAX);
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        colls_arg_t arg = {.kind = kinds[k], .quick = 1};
        ck_assert_msg(run_ranks(&c, 1, colls_all_cases, &arg) == 0, "kind %d", kinds[k]);
    }
    cluster_stop(&c);
    unsetenv("HCCL_ALGO");
    unsetenv("HCCL_BUFFSIZE");
}
END_TEST

/* Ranks may sit on the daemons in any way: unequal numbers, rank ids that alternate between
 * daemons (Open MPI's --map-by node, Slurm's cyclic), rank 0 away from the daemon that issued
 * the root info. Every collective on every algorithm (HCCLD_TEST_QUICK: the automatic choice
 * only), Send/Recv and AlltoAllV, checked element by element. */
START_TEST(test_any_placement)
{
    static const struct {
        uint32_t n;
        uint8_t d[6];
    } places[] = {
        {3, {0, 0, 1}},       {3, {0, 1, 0}},          {4, {0, 1, 0, 1}},
        {5, {1, 0, 0, 2, 1}}, {6, {2, 0, 1, 2, 2, 0}},
    };
    static const char *const algos[] = {NULL, "ring", "H-D_R", "fullmesh", "tree"};
    static const int kinds[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                                DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER};
    uint64_t base = 777;
    char env[64];
    cluster_t c;

    cluster_start(&c, 3);
    for (size_t p = 0; p < sizeof(places) / sizeof(places[0]); p++) {
        for (size_t a = 0; a < (harness_quick() ? 1 : sizeof(algos) / sizeof(algos[0])); a++) {
            if (algos[a] != NULL) {
                snprintf(env, sizeof(env), "level0:NA;level1:%s/alltoall=level1:pairwise",
                         algos[a]);
                setenv("HCCL_ALGO", env, 1);
            }
            for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
                colls_arg_t arg = {.kind = kinds[k], .quick = 1};
                ck_assert_msg(run_placed(&c, places[p].n, places[p].d, colls_all_cases, &arg) == 0,
                              "placement %zu, %s, kind %d", p, algos[a] ? algos[a] : "auto",
                              kinds[k]);
            }
            unsetenv("HCCL_ALGO");
        }
        ck_assert_msg(run_placed(&c, places[p].n, places[p].d, p2p_ring_case, NULL) == 0,
                      "placement %zu, send/recv", p);
        ck_assert_msg(run_placed(&c, places[p].n, places[p].d, p2p_alltoallv_case, &base) == 0,
                      "placement %zu, alltoallv", p);
    }
    cluster_stop(&c);
}
END_TEST

/* A gather as torch's backend runs it: the root receives from every other rank in one batch
 * (arg: the root), each rank's block checked. */
static int batch_gather(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    enum { CNT = 1000 };
    const uint32_t root = *(const uint32_t *)arg;
    int32_t *mine = malloc(CNT * sizeof(*mine)), *all = NULL;
    HcclSendRecvItem *items = NULL;
    uint32_t k = 0;
    HcclResult rc;
    int bad = 0;

    for (int i = 0; i < CNT; i++)
        mine[i] = (int32_t)(r * 100000 + i);
    if (r != root) {
        HcclSendRecvItem it = {HCCL_SEND, mine, CNT, HCCL_DATA_TYPE_INT32, root};
        rc = HcclBatchSendRecv(&it, 1, comm, NULL);
    } else {
        all = malloc((size_t)n * CNT * sizeof(*all));
        items = calloc(n, sizeof(*items));
        memset(all, 0xEE, (size_t)n * CNT * sizeof(*all));
        for (uint32_t q = 0; q < n; q++)
            if (q != root)
                items[k++] = (HcclSendRecvItem){HCCL_RECV, all + (size_t)q * CNT, CNT,
                                                HCCL_DATA_TYPE_INT32, q};
        rc = HcclBatchSendRecv(items, k, comm, NULL);
        for (uint32_t q = 0; q < n && rc == HCCL_SUCCESS && !bad; q++)
            for (int i = 0; i < CNT && q != root && !bad; i++)
                if (all[(size_t)q * CNT + i] != (int32_t)(q * 100000 + i)) {
                    fprintf(stderr, "root %u: rank %u's element %d is %d\n", r, q, i,
                            all[(size_t)q * CNT + i]);
                    bad = 1;
                }
    }
    if (rc != HCCL_SUCCESS)
        fprintf(stderr, "rank %u: gather batch: %s\n", r, HcclGetErrorString(rc));
    free(mine);
    free(all);
    free(items);
    return bad || rc != HCCL_SUCCESS;
}

/* A batch of 69 receives at the root of 70 ranks on 3 daemons, more than the 64 a batch once
 * took: a gather of torch's backend on more than 65 ranks failed with HCCL_E_PARA. */
START_TEST(test_gather_batch_70_ranks)
{
    enum { N = 70 };
    uint8_t place[N];
    uint32_t root = 5;
    cluster_t c;

    for (uint32_t r = 0; r < N; r++)
        place[r] = (uint8_t)(r % 3);
    cluster_start(&c, 3);
    ck_assert_int_eq(run_placed(&c, N, place, batch_gather, &root), 0);
    cluster_stop(&c);
}
END_TEST

/* One op of WIRE_COUNT int32 per rank block, checked: allgather, reduce-scatter, alltoall or
 * scatter from rank 0 (arg: enum wire_op). */
#define WIRE_COUNT 10000u
enum wire_op { WIRE_ALLGATHER, WIRE_REDUCE_SCATTER, WIRE_ALLTOALL, WIRE_SCATTER, WIRE_OPS };

static int32_t wire_val(uint32_t r, uint32_t k)
{
    return (int32_t)(r * 100003 + k);
}

static int one_wire_op(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    int op = *(const int *)arg;
    uint32_t outn = op == WIRE_REDUCE_SCATTER || op == WIRE_SCATTER ? WIRE_COUNT : WIRE_COUNT * n;
    int32_t *in = malloc(WIRE_COUNT * n * sizeof(*in)), *out = malloc(outn * sizeof(*out));
    HcclResult rc = HCCL_E_PARA;
    int bad = 0;

    for (uint32_t k = 0; k < WIRE_COUNT * n; k++)
        in[k] = wire_val(r, k);
    switch (op) {
    case WIRE_ALLGATHER:
        rc = HcclAllGather(in, out, WIRE_COUNT, HCCL_DATA_TYPE_INT32, comm, NULL);
        break;
    case WIRE_REDUCE_SCATTER:
        rc = HcclReduceScatter(in, out, WIRE_COUNT, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm,
                               NULL);
        break;
    case WIRE_ALLTOALL:
        rc = HcclAlltoAll(in, WIRE_COUNT, HCCL_DATA_TYPE_INT32, out, WIRE_COUNT,
                          HCCL_DATA_TYPE_INT32, comm, NULL);
        break;
    case WIRE_SCATTER:
        rc = HcclScatter(in, out, WIRE_COUNT, HCCL_DATA_TYPE_INT32, 0, comm, NULL);
        break;
    }
    for (uint32_t k = 0; rc == HCCL_SUCCESS && k < outn && !bad; k++) {
        uint32_t q = k / WIRE_COUNT, e = k % WIRE_COUNT;
        int32_t want = 0;
        switch (op) {
        case WIRE_ALLGATHER: want = wire_val(q, e); break;
        case WIRE_REDUCE_SCATTER:
            for (uint32_t p = 0; p < n; p++)
                want += wire_val(p, r * WIRE_COUNT + k);
            break;
        case WIRE_ALLTOALL: want = wire_val(q, r * WIRE_COUNT + e); break;
        case WIRE_SCATTER: want = wire_val(0, r * WIRE_COUNT + k); break;
        }
        bad = out[k] != want;
    }
    free(in);
    free(out);
    return rc != HCCL_SUCCESS || bad;
}

/* Daemons holding different numbers of ranks move only the ranks' blocks they have: ranks 0
 * and 2 on daemon 0, rank 1 on daemon 1, ring forced where it serves (on 2 nodes each sends
 * the other what it has). Blocks each daemon sends, and what padding every daemon to 2 ranks
 * sent before:
 *   allgather       2 and 1 (2 and 2)      reduce-scatter  1 and 2 (2 and 2)
 *   alltoall        2 and 2 (4 and 4)      scatter from 0  1 and 0 (2 and 0) */
START_TEST(test_uneven_moves_no_padding)
{
    static const uint8_t place[] = {0, 1, 0};
    static const uint64_t want[WIRE_OPS][2] = {{2, 1}, {1, 2}, {2, 2}, {1, 0}};
    static const char *const names[WIRE_OPS] = {"allgather", "reduce-scatter", "alltoall",
                                                "scatter"};
    const uint64_t blk = WIRE_COUNT * sizeof(int32_t);
    cluster_t c;

    setenv("HCCL_ALGO", "level0:NA;level1:ring", 1);
    cluster_start(&c, 2);
    for (int op = 0; op < WIRE_OPS; op++) {
        uint64_t before[2], after[2];
        for (int d = 0; d < 2; d++)
            before[d] = harness_daemon_tx_bytes(c.socks[d]);
        ck_assert_msg(run_placed(&c, 3, place, one_wire_op, &op) == 0, "%s failed", names[op]);
        for (int d = 0; d < 2; d++)
            after[d] = harness_daemon_tx_bytes(c.socks[d]);
        ck_assert_uint_ne(before[0], UINT64_MAX);
        ck_assert_uint_ne(before[1], UINT64_MAX);
        ck_assert_msg(
            after[0] - before[0] == want[op][0] * blk && after[1] - before[1] == want[op][1] * blk,
            "%s: daemons sent %llu and %llu bytes, want %llu and %llu", names[op],
            (unsigned long long)(after[0] - before[0]), (unsigned long long)(after[1] - before[1]),
            (unsigned long long)(want[op][0] * blk), (unsigned long long)(want[op][1] * blk));
    }
    cluster_stop(&c);
    unsetenv("HCCL_ALGO");
}
END_TEST

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

/* A daemon of another version (its PeerHello says peer protocol 5) is refused by name at the
 * first message, with HCCL_E_PARA and a reason that says what to do; the daemon carries on. */
START_TEST(test_old_peer_protocol_refused)
{
    char addr[128], *colon;
    uint8_t job[16] = {1, 2, 3}, nonce[16] = {4, 5, 6};
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__PeerHello h = HCCLD__PEER_HELLO__INIT;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    uds_conn_t conn;

    ck_assert_int_eq(harness_daemon_addr(harness_socket(), addr, sizeof(addr)), 0);
    ck_assert_ptr_nonnull(colon = strrchr(addr, ':'));
    *colon = '\0';
    sa.sin_port = htons((uint16_t)atoi(colon + 1));
    ck_assert_int_eq(inet_pton(AF_INET, addr, &sa.sin_addr), 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    uds_conn_init(&conn, fd);
    h.version = 5; /* the version before this one */
    h.job_id = (ProtobufCBinaryData){sizeof(job), job};
    h.nonce = (ProtobufCBinaryData){sizeof(nonce), nonce};
    h.addr = "127.0.0.1:1";
    m.body_case = HCCLD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &h;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&conn, &resp, 5000), 0);
    ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_PEER_RESULT);
    ck_assert_int_eq(resp->peer_result->result, HCCL_E_PARA);
    ck_assert_ptr_nonnull(strstr(resp->peer_result->message, "speaks peer protocol 6, not 5"));
    hccld__msg__free_unpacked(resp, NULL);
    uds_conn_close(&conn);
    /* The daemon still serves jobs. */
    ck_assert_int_eq(harness_run_ranks(2, p2p_ring_case, NULL, 120), 0);
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
    char *mine = info->root_addr;
    info->root_addr = "127.0.0.1:1"; /* nobody listens there */
    ck_assert_int_eq(rootinfo_pack(info, &ri), 0);
    info->root_addr = mine; /* protobuf-c frees what it allocated */
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

/* Large allreduces until one fails; the failure must be HCCL_E_TIMEOUT, within one
 * HCCL_EXEC_TIMEOUT (2 s) and some slack of the start of the op that failed. */
static int until_timeout(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    uint64_t count = 16u << 20;
    float *buf = calloc(count, sizeof(float));

    for (int i = 0; i < 1000; i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        HcclResult rc =
            HcclAllReduce(buf, buf, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        if (rc != HCCL_SUCCESS) {
            if (rc != HCCL_E_TIMEOUT || s > 6)
                fprintf(stderr, "rank %u: op %d failed with %d after %.1f s\n", r, i, rc, s);
            free(buf);
            return rc != HCCL_E_TIMEOUT || s > 6;
        }
    }
    free(buf);
    fprintf(stderr, "rank %u: no op failed\n", r);
    return 1;
}

/* A daemon that freezes (SIGSTOP) in the middle of a job: the ranks' current op fails with
 * HCCL_E_TIMEOUT after one HCCL_EXEC_TIMEOUT for the whole op, not one per piece. */
START_TEST(test_frozen_daemon_times_out)
{
    cluster_t c;
    char *socks[2];
    pid_t pids[2];

    cluster_start(&c, 2);
    setenv("HCCL_EXEC_TIMEOUT", "2", 1);
    socks[0] = c.socks[0];
    socks[1] = c.socks[1];
    ck_assert_int_eq(harness_spawn_ranks_on(2, socks, until_timeout, NULL, 60, pids), 0);
    unsetenv("HCCL_EXEC_TIMEOUT");
    sleep(1);
    ck_assert_int_eq(kill(c.pids[1], SIGSTOP), 0);
    int failed = harness_wait(pids, 2, 60);
    kill(c.pids[1], SIGCONT);
    ck_assert_int_eq(failed, 0);
    cluster_stop(&c);
}
END_TEST

Suite *multinode_suite(void)
{
    Suite *s = suite_create("multinode");
    TCase *tc = tcase_create("bootstrap");

    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_comm_forms_across_daemons);
    tcase_add_test(tc, test_collectives_across_daemons);
    tcase_add_test(tc, test_p2p_across_daemons);
    tcase_add_test(tc, test_collective_mismatch_across_daemons);
    tcase_add_test(tc, test_forced_algorithms);
    tcase_add_test(tc, test_many_daemons_fullmesh);
    tcase_add_test(tc, test_any_placement);
    tcase_add_test(tc, test_gather_batch_70_ranks);
    tcase_add_test(tc, test_uneven_moves_no_padding);
    multinode_add_tools(tc);
    tcase_add_test(tc, test_wrong_key_refused);
    tcase_add_test(tc, test_old_peer_protocol_refused);
    tcase_add_test(tc, test_unreachable_root);
    tcase_add_test(tc, test_missing_rank_times_out);
    suite_add_tcase(s, tc);
    multinode_add_share(s);
    multinode_add_lanes(s);
    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 120);
    tcase_add_test(faults, test_frozen_daemon_times_out);
    suite_add_tcase(s, faults);
    return s;
}
