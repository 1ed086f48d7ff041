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
#include "rootinfo.h"
#include "shm.h"
#include "suites.h"
#include "uds.h"

#define MAXD 5
/* Daemons a cluster may have (test_many_daemons_fullmesh). */
#define CLUSTER_MAX 18

typedef struct cluster {
    pid_t pids[CLUSTER_MAX];
    char socks[CLUSTER_MAX][256];
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
    float x = (float)r, y = 0;

    if (HcclGetRankSize(comm, &got_n) != HCCL_SUCCESS || got_n != n ||
        HcclGetRankId(comm, &got_r) != HCCL_SUCCESS || got_r != r)
        return 1;
    if (HcclAllReduce(&x, &y, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) !=
            HCCL_SUCCESS ||
        y != (float)(n * (n - 1) / 2))
        return 2;
    return 0;
}

/* Rank 0 sends 10 elements to the last rank (another daemon), which expects 12. */
static int p2p_mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float buf[12] = {0};
    HcclResult rc = HCCL_SUCCESS, want = HCCL_SUCCESS;

    if (r == 0)
        rc = HcclSend(buf, 10, HCCL_DATA_TYPE_FP32, n - 1, comm, NULL);
    else if (r == n - 1)
        rc = HcclRecv(buf, 12, HCCL_DATA_TYPE_FP32, 0, comm, NULL), want = HCCL_E_PARA;
    if (rc != want)
        fprintf(stderr, "rank %u: got %d, want %d\n", r, rc, want);
    return rc != want;
}

/* n ranks of a running cluster, rank r on daemon place[r], run fn; returns how many failed. */
static int run_placed(cluster_t *c, uint32_t n, const uint8_t *place, rank_fn fn, void *arg)
{
    char *socks[CLUSTER_MAX * 2];
    pid_t pids[CLUSTER_MAX * 2];

    for (uint32_t r = 0; r < n; r++)
        socks[r] = c->socks[place[r]];
    if (harness_spawn_ranks_on(n, socks, fn, arg, 240, pids) != 0)
        return (int)n;
    return harness_wait(pids, n, 240);
}

/* The ranks of a running cluster, `per` on each daemon (in blocks, as hccl-run places them),
 * run fn; returns how many failed. */
static int run_ranks(cluster_t *c, unsigned per, rank_fn fn, void *arg)
{
    uint8_t place[CLUSTER_MAX * 2];

    for (uint32_t r = 0; r < c->n * per; r++)
        place[r] = (uint8_t)(r / per);
    return run_placed(c, c->n * per, place, fn, arg);
}

/* nd fresh daemons with `per` ranks each run fn; returns how many ranks failed. */
static int run_on_cluster(unsigned nd, unsigned per, rank_fn fn, void *arg)
{
    cluster_t c;
    int failed;

    cluster_start(&c, nd);
    failed = run_ranks(&c, per, fn, arg);
    cluster_stop(&c);
    return failed;
}

START_TEST(test_comm_forms_across_daemons)
{
    for (unsigned nd = 2; nd <= 5; nd++)
        for (unsigned per = 1; per <= 2; per++)
            ck_assert_msg(run_on_cluster(nd, per, formed, NULL) == 0, "%u daemons x %u ranks", nd,
                          per);
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
            for (size_t b = 0; b < sizeof(bases) / sizeof(bases[0]); b++)
                ck_assert_msg(run_on_cluster(nd, per, p2p_alltoallv_case, &bases[b]) == 0,
                              "alltoallv base %llu, %u daemons x %u ranks",
                              (unsigned long long)bases[b], nd, per);
        }
    ck_assert_int_eq(run_on_cluster(2, 1, p2p_mismatch, NULL), 0);
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
} mism_t;

static int coll_mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const mism_t *m = arg;
    enum { CNT = 4096 };
    float *a = calloc(CNT * 8, sizeof(float)), *b = calloc(CNT * 8, sizeof(float));
    HcclResult rc, ae = HCCL_SUCCESS;
    int kind = r == n - 1 ? m->kind1 : 0;
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
    mism_t cases[] = {{0, 4095, 0}, {1, 4096, 0}, {0, 8192, 0}, {2, 4096, 0}, {0, 4095, 200}};

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

/* Every level-1 algorithm forced with HCCL_ALGO (HCCL's syntax), every collective it serves,
 * on 2, 3, 4 and 5 daemons with 1 and 2 ranks each (HCCLD_TEST_QUICK: 3 daemons with 2 ranks
 * each), quick cases (dtypes, ops, odd counts, counts below the node count); a bad HCCL_ALGO
 * is an error at init, never ignored. */
START_TEST(test_forced_algorithms)
{
    static const char *const algos[] = {"ring", "H-D_R", "fullmesh", "tree"};
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

/* A tool next to the daemon under test (build/bin/NAME). */
static void tool_path(const char *name, char *out, size_t cap)
{
    const char *bin = getenv("HCCLD_BIN") ? getenv("HCCLD_BIN") : "build/bin/hccld";
    const char *slash = strrchr(bin, '/');

    snprintf(out, cap, "%.*s%s", slash ? (int)(slash - bin + 1) : 0, bin, name);
}

/* hccl-run places rank r on daemon want[r] with the local rank and size that go with it. */
static void check_map_by(const cluster_t *c, const char *map, const uint8_t *want, unsigned n)
{
    char run[512], cmd[2048], line[600];
    unsigned seen = 0;

    tool_path("hccl-run", run, sizeof(run));
    snprintf(cmd, sizeof(cmd),
             "%s -n %u --daemons %s,%s --map-by %s -- sh -c 'echo $HCCL_RANK $HCCL_LOCAL_RANK "
             "$HCCL_LOCAL_SIZE $HCCLD_SOCKET'",
             run, n, c->socks[0], c->socks[1], map);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned r, lr, ls, here = 0, size = 0;
        char sock[256];
        ck_assert_int_eq(sscanf(line, "%u %u %u %255s", &r, &lr, &ls, sock), 4);
        ck_assert_uint_lt(r, n);
        for (unsigned q = 0; q < n; q++) {
            here += q < r && want[q] == want[r];
            size += want[q] == want[r];
        }
        ck_assert_msg(strcmp(sock, c->socks[want[r]]) == 0 && lr == here && ls == size,
                      "--map-by %s: rank %u got %s local %u/%u, want daemon %u local %u/%u", map, r,
                      sock, lr, ls, want[r], here, size);
        seen++;
    }
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_uint_eq(seen, n);
}

/* hccl_perf_test -m: the time column is the median iteration, and -J (here onto stdout, after
 * the table) says so; with -S (one synchronize for the whole batch, no iteration times) it is
 * a usage error. */
static void check_perf_median(const cluster_t *c, const char *run, const char *perf)
{
    char cmd[2048], buf[8192];
    size_t n = 0, k;
    FILE *f;

    snprintf(cmd, sizeof(cmd),
             "%s -n 3 --daemons %s,%s -- %s -t allreduce -b 4K -e 4K -n 5 -w 1 -m -J /dev/stdout",
             run, c->socks[0], c->socks[1], perf);
    ck_assert_ptr_nonnull(f = popen(cmd, "r"));
    while (n < sizeof(buf) - 1 && (k = fread(buf + n, 1, sizeof(buf) - 1 - n, f)) > 0)
        n += k;
    buf[n] = '\0';
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_msg(strstr(buf, "\"oop\": {\"time_us\": ") != NULL &&
                      strstr(buf, "\"time_stat\": \"median\"") != NULL &&
                      strstr(buf, "\"wrong\": 0") != NULL,
                  "hccl_perf_test -m -J wrote: %s", buf);
    snprintf(cmd, sizeof(cmd), "%s -m -S 2>/dev/null", perf);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
}

/* hccl_perf_test -A: a comm per level-1 algorithm, each checked element by element, a median
 * per algorithm and size; an unknown algorithm fails its comm, as HCCL_ALGO does at init. */
static void check_perf_compare(const cluster_t *c, const char *run, const char *perf)
{
    char cmd[2048], line[512];
    unsigned rows = 0, header = 0;
    double t[3];
    char best[32];
    unsigned long long bytes, count, wrong;
    FILE *f;

    snprintf(cmd, sizeof(cmd),
             "%s -n 3 --daemons %s,%s -- %s -t allgather -b 1K -e 64K -f 8 -n 5 -w 1 "
             "-A auto,ring,tree",
             run, c->socks[0], c->socks[1], perf);
    ck_assert_ptr_nonnull(f = popen(cmd, "r"));
    while (fgets(line, sizeof(line), f) != NULL) {
        header += strstr(line, "auto      ring      tree      best  #wrong") != NULL;
        if (sscanf(line, "%llu %llu %lf %lf %lf %31s %llu", &bytes, &count, &t[0], &t[1], &t[2],
                   best, &wrong) == 7) {
            ck_assert_msg(t[0] > 0 && t[1] > 0 && t[2] > 0 && wrong == 0, "row: %s", line);
            ck_assert_msg(strcmp(best, "auto") == 0 || strcmp(best, "ring") == 0 ||
                              strcmp(best, "tree") == 0,
                          "row: %s", line);
            rows++;
        }
    }
    ck_assert_int_eq(pclose(f), 0);
    ck_assert_uint_eq(header, 1);
    ck_assert_uint_eq(rows, 3); /* 1K, 8K, 64K */
    snprintf(cmd, sizeof(cmd),
             "%s -n 2 --daemons %s,%s -- %s -b 1K -e 1K -n 1 -A auto,nosuch >/dev/null 2>&1", run,
             c->socks[0], c->socks[1], perf);
    ck_assert_int_ne(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s -A ring -S 2>/dev/null", perf);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
}

/* hccl-run --map-by slot (blocks, the first daemons one rank more) and node (round robin),
 * and a real job placed round robin, checked by hccl_perf_test. */
START_TEST(test_hccl_run_map_by)
{
    static const uint8_t slot[] = {0, 0, 0, 1, 1}, node[] = {0, 1, 0, 1, 0};
    char run[512], perf[512], cmd[2048];
    cluster_t c;

    cluster_start(&c, 2);
    check_map_by(&c, "slot", slot, 5);
    check_map_by(&c, "node", node, 5);
    tool_path("hccl-run", run, sizeof(run));
    tool_path("hccl_perf_test", perf, sizeof(perf));
    snprintf(cmd, sizeof(cmd),
             "%s -n 5 --daemons %s,%s --map-by node -- %s -t all -b 4 -e 64K -f 16 -n 2 -w 1 "
             ">/dev/null",
             run, c.socks[0], c.socks[1], perf);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s -n 2 --map-by row -- true 2>/dev/null", run);
    ck_assert_int_eq(WEXITSTATUS(system(cmd)), 2);
    check_perf_median(&c, run, perf);
    check_perf_compare(&c, run, perf);
    cluster_stop(&c);
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

/* A daemon of another version (its PeerHello says peer protocol 2) is refused by name at the
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
    h.version = 2;
    h.job_id = (ProtobufCBinaryData){sizeof(job), job};
    h.nonce = (ProtobufCBinaryData){sizeof(nonce), nonce};
    h.addr = "127.0.0.1:1";
    m.body_case = HCCLD__MSG__BODY_PEER_HELLO;
    m.peer_hello = &h;
    ck_assert_int_eq(uds_send(fd, &m, NULL, 0), 0);
    ck_assert_int_eq(uds_recv(&conn, &resp, 5000), 0);
    ck_assert_int_eq(resp->body_case, HCCLD__MSG__BODY_PEER_RESULT);
    ck_assert_int_eq(resp->peer_result->result, HCCL_E_PARA);
    ck_assert_ptr_nonnull(strstr(resp->peer_result->message, "speaks peer protocol 3, not 2"));
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
 * figures the cost model works with (measured before the first collective, which formed()
 * ran); the others wait for it in a barrier, so the comm lives while it looks. */
static int striped_seen(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    char out[8192] = "";
    int bad = formed(comm, r, n, NULL);

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
    ck_assert_int_eq(run_ranks(&c, 1, p2p_mismatch, NULL), 0);
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
    tcase_add_test(tc, test_uneven_moves_no_padding);
    tcase_add_test(tc, test_hccl_run_map_by);
    tcase_add_test(tc, test_wrong_key_refused);
    tcase_add_test(tc, test_old_peer_protocol_refused);
    tcase_add_test(tc, test_unreachable_root);
    tcase_add_test(tc, test_missing_rank_times_out);
    suite_add_tcase(s, tc);
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
    TCase *faults = tcase_create("faults");
    tcase_set_timeout(faults, 120);
    tcase_add_test(faults, test_frozen_daemon_times_out);
    suite_add_tcase(s, faults);
    return s;
}
