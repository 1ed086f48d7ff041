/* Level-1 algorithms: names, the serves table, schedules through the simulator (and the
 * simulator against schedules that are wrong on purpose), the cost model and HCCL_ALGO. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../sim/sim.h"
#include "algo/algo.h"
#include "algo/algo_env.h"
#include "algo/cost.h"
#include "shm.h"
#include "test_list.h"

static int has_root(int kind)
{
    return kind == DESC_BROADCAST || kind == DESC_REDUCE || kind == DESC_SCATTER;
}

START_TEST(test_names)
{
    for (int a = 0; a < ALGO_COUNT; a++)
        ck_assert_int_eq(algo_from_name(algo_name(a)), a);
    ck_assert_int_eq(algo_from_name("H-D_R"), ALGO_HDR);
    ck_assert_int_eq(algo_from_name("h-d_r"), ALGO_HDR);
    ck_assert_int_eq(algo_from_name("ring"), ALGO_RING);
    ck_assert_int_eq(algo_from_name("fullmesh"), ALGO_MESH);
    ck_assert_int_eq(algo_from_name("tree"), ALGO_TREE);
    ck_assert_int_eq(algo_from_name("pairwise"), ALGO_PAIRWISE);
    ck_assert_int_eq(algo_from_name("nb"), ALGO_NB);
    ck_assert_int_eq(algo_from_name("NHR"), ALGO_NHR);
    ck_assert_int_eq(algo_from_name("NHR_V1"), -1);
    ck_assert_int_eq(algo_from_name("mesh"), -1);
    ck_assert_int_eq(algo_from_name(""), -1);
    ck_assert_int_eq(algo_from_name(NULL), -1);
    ck_assert_str_eq(algo_name(ALGO_HDR), "H-D_R");
}
END_TEST

START_TEST(test_serves)
{
    /* Rows: algorithms; columns: DESC_ALLREDUCE .. DESC_BARRIER. */
    static const int want[ALGO_COUNT][8] = {
        [ALGO_RING] = {1, 1, 1, 1, 0, 1, 1, 1},     [ALGO_MESH] = {1, 1, 1, 1, 1, 1, 1, 1},
        [ALGO_HDR] = {1, 1, 1, 1, 0, 1, 1, 1},      [ALGO_TREE] = {1, 1, 1, 1, 0, 1, 1, 1},
        [ALGO_PAIRWISE] = {0, 0, 0, 0, 1, 0, 0, 0}, [ALGO_NB] = {1, 1, 1, 1, 0, 1, 1, 1},
        [ALGO_NHR] = {1, 1, 1, 1, 0, 1, 1, 1},
    };

    for (int a = 0; a < ALGO_COUNT; a++) {
        for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER; k++)
            ck_assert_int_eq(algo_serves(a, k), want[a][k - DESC_ALLREDUCE]);
        ck_assert_int_eq(algo_serves(a, DESC_SEND), 0);
        ck_assert_int_eq(algo_serves(a, DESC_RECV), 0);
        ck_assert_int_eq(algo_serves(a, 0), 0);
    }
    ck_assert_int_eq(algo_serves(-1, DESC_ALLREDUCE), 0);
    ck_assert_int_eq(algo_serves(ALGO_COUNT, DESC_ALLREDUCE), 0);
    /* Every collective has ring or fullmesh and at least one more. */
    for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER; k++) {
        int n = 0;
        for (int a = 0; a < ALGO_COUNT; a++)
            n += algo_serves(a, k);
        ck_assert_int_ge(n, 2);
    }
}
END_TEST

START_TEST(test_bad_args)
{
    sched_t s;

    ck_assert_int_eq(algo_build(ALGO_COUNT, DESC_ALLREDUCE, 4, 0, 0, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_PAIRWISE, DESC_ALLREDUCE, 4, 0, 0, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLTOALL, 4, 0, 0, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_SEND, 4, 0, 0, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 0, 0, 0, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 4, 4, 0, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_TREE, DESC_BROADCAST, 4, 0, 4, 8, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLGATHER, 4, 0, 0, UINT64_MAX / 2, &s), -EINVAL);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 4, 0, 0, 8, NULL), -EINVAL);
    /* A root is ignored where the collective has none. */
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 4, 0, 99, 8, &s), 0);
    sched_free(&s);
}
END_TEST

/* Nodes holding different numbers of ranks: only the kinds with a block per rank take them; a
 * node with more ranks sends more (ring allgather sends its own block and forwards the others
 * but the next node's), and alltoall moves ranks[i] * ranks[j] units between nodes i and j. */
START_TEST(test_blocks)
{
    static const uint32_t ranks[] = {2, 1, 0, 1};
    static const uint64_t blk[] = {0, 20, 30, 30, 40};
    uint64_t sent, got;
    sched_t s;

    ck_assert_int_eq(algo_build_ranks(ALGO_RING, DESC_ALLREDUCE, 4, 0, 0, 10, ranks, &s), -EINVAL);
    ck_assert_int_eq(algo_build_ranks(ALGO_RING, DESC_BROADCAST, 4, 0, 0, 10, ranks, &s), -EINVAL);
    ck_assert_int_eq(algo_build_ranks(ALGO_RING, DESC_ALLGATHER, 4, 4, 0, 10, ranks, &s), -EINVAL);
    ck_assert_int_eq(
        algo_build_ranks(ALGO_RING, DESC_ALLGATHER, 4, 0, 0, UINT64_MAX / 8, ranks, &s), -EINVAL);
    for (uint32_t me = 0; me < 4; me++) {
        ck_assert_int_eq(algo_build_ranks(ALGO_RING, DESC_ALLGATHER, 4, me, 0, 10, ranks, &s), 0);
        sched_traffic(&s, &sent, &got);
        ck_assert_uint_eq(s.out_elems, 40);
        uint32_t next = (me + 1) % 4;
        ck_assert_uint_eq(sent, 40 - (blk[next + 1] - blk[next]));
        ck_assert_uint_eq(got, 40 - (blk[me + 1] - blk[me]));
        sched_free(&s);
        ck_assert_int_eq(algo_build_ranks(ALGO_PAIRWISE, DESC_ALLTOALL, 4, me, 0, 10, ranks, &s),
                         0);
        sched_traffic(&s, &sent, &got);
        ck_assert_uint_eq(s.out_elems, ranks[me] * 40);
        ck_assert_uint_eq(sent, ranks[me] * (40 - ranks[me] * 10));
        ck_assert_uint_eq(got, sent);
        sched_free(&s);
        /* Scatter from node 0: every node ends with its own ranks' blocks at OUT[0]. */
        ck_assert_int_eq(algo_build_ranks(ALGO_MESH, DESC_SCATTER, 4, me, 0, 10, ranks, &s), 0);
        sched_traffic(&s, &sent, &got);
        ck_assert_uint_eq(s.out_elems, ranks[me] * 10);
        ck_assert_uint_eq(sent, me == 0 ? 20 : 0);
        ck_assert_uint_eq(got, me == 0 ? 0 : ranks[me] * 10);
        sched_free(&s);
    }
}
END_TEST

/* Every pair each algorithm serves, small node counts, edge counts, two roots. */
START_TEST(test_sim_small)
{
    static const uint32_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17};
    char err[512] = "";
    int bad = 0, runs = 0;

    for (int a = 0; a < ALGO_COUNT && !bad; a++)
        for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER && !bad; k++)
            for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]) && !bad && algo_serves(a, k); i++) {
                uint32_t n = ns[i];
                uint64_t counts[] = {0, 1, n - 1, 7ull * n + 3};
                uint32_t step = has_root(k) && n > 1 ? n - 1 : n;
                for (int c = 0; c < 4 && !bad; c++)
                    for (uint32_t root = 0; root < n && !bad; root += step) {
                        bad = sim_run(a, k, n, root, counts[c], err, sizeof(err)) != 0;
                        runs++;
                    }
            }
    ck_assert_msg(!bad, "%s", err);
    ck_assert_int_gt(runs, 1000);
}
END_TEST

/* Pipelines cut large data into pieces; the pieces still add up. */
START_TEST(test_sim_pipelined)
{
    static const int cases[][2] = {{ALGO_RING, DESC_BROADCAST},
                                   {ALGO_RING, DESC_REDUCE},
                                   {ALGO_TREE, DESC_BROADCAST},
                                   {ALGO_TREE, DESC_REDUCE},
                                   {ALGO_TREE, DESC_ALLREDUCE}};
    char err[512] = "";
    int bad = 0;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && !bad; i++)
        bad = sim_run(cases[i][0], cases[i][1], 6, 4, 300007, err, sizeof(err)) != 0;
    ck_assert_msg(!bad, "%s", err);
}
END_TEST

START_TEST(test_sim_large)
{
    char err[512] = "";

    ck_assert_msg(sim_run(ALGO_HDR, DESC_ALLREDUCE, 4096, 0, 5, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(sim_run(ALGO_TREE, DESC_REDUCE, 1000, 999, 1001, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_msg(sim_run(ALGO_RING, DESC_BROADCAST, 777, 300, 1, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_msg(sim_run(ALGO_HDR, DESC_BARRIER, 3000, 0, 0, err, sizeof(err)) == 0, "%s", err);
}
END_TEST

START_TEST(test_round_counts)
{
    sched_t s;

    /* Ring allreduce: n - 1 rounds of reduce-scatter and n - 1 of allgather. */
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 6, 2, 0, 600, &s), 0);
    ck_assert_uint_eq(s.nrounds, 10);
    ck_assert_uint_eq(s.nsteps, 20);
    ck_assert_uint_eq(s.scratch_elems, 100);
    sched_free(&s);
    /* H-D_R, power of two: log2 n rounds each way. */
    ck_assert_int_eq(algo_build(ALGO_HDR, DESC_ALLREDUCE, 8, 3, 0, 800, &s), 0);
    ck_assert_uint_eq(s.nrounds, 6);
    ck_assert_uint_eq(s.scratch_elems, 400);
    sched_free(&s);
    /* Six nodes: node 1 folds into node 0 and waits for the result: two rounds in all. */
    ck_assert_int_eq(algo_build(ALGO_HDR, DESC_ALLREDUCE, 6, 1, 0, 600, &s), 0);
    ck_assert_uint_eq(s.nrounds, 2);
    sched_free(&s);
    ck_assert_int_eq(algo_build(ALGO_HDR, DESC_ALLREDUCE, 6, 0, 0, 600, &s), 0);
    ck_assert_uint_eq(s.nrounds, 6);
    sched_free(&s);
    /* Fullmesh all-to-all: one round, the own block copied. */
    ck_assert_int_eq(algo_build(ALGO_MESH, DESC_ALLTOALL, 5, 1, 0, 3, &s), 0);
    ck_assert_uint_eq(s.nrounds, 1);
    ck_assert_uint_eq(s.nsteps, 9);
    sched_free(&s);
    /* Empty blocks leave no steps, except in a barrier. */
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 5, 0, 0, 1, &s), 0);
    ck_assert_uint_lt(s.nsteps, 8);
    sched_free(&s);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_ALLREDUCE, 5, 0, 0, 0, &s), 0);
    ck_assert_uint_eq(s.nsteps, 0);
    ck_assert_uint_eq(s.nrounds, 0);
    sched_free(&s);
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_BARRIER, 5, 0, 0, 0, &s), 0);
    ck_assert_uint_eq(s.nsteps, 8);
    sched_free(&s);
    /* A long chain broadcast is cut into pieces: more rounds than hops. */
    ck_assert_int_eq(algo_build(ALGO_RING, DESC_BROADCAST, 8, 3, 0, 1 << 22, &s), 0);
    ck_assert_uint_gt(s.nrounds, 10);
    sched_free(&s);
}
END_TEST

/* ---- The simulator against hand-made schedules that break one rule each ---- */

typedef struct hand {
    const step_t (*steps)[4]; /* [node * rounds + round][step]; len 0 and op 0 end a round */
    uint32_t rounds;
    uint64_t out_elems;
} hand_t;

static int build_hand(void *arg, uint32_t me, sched_t *out)
{
    const hand_t *h = arg;
    uint32_t n = 0;

    memset(out, 0, sizeof(*out));
    out->steps = calloc(4 * h->rounds + 1, sizeof(step_t));
    out->round_start = calloc(h->rounds + 1, sizeof(uint32_t));
    for (uint32_t r = 0; r < h->rounds; r++) {
        out->round_start[r] = n;
        for (int k = 0; k < 4 && h->steps[me * h->rounds + r][k].op != 0; k++)
            out->steps[n++] = h->steps[me * h->rounds + r][k];
    }
    out->round_start[h->rounds] = n;
    out->nsteps = n;
    out->nrounds = h->rounds;
    out->out_elems = h->out_elems;
    out->scratch_elems = 4 * h->out_elems;
    return 0;
}

#define S(p, o, l)                                                                                 \
    {                                                                                              \
        .op = STEP_SEND, .peer = (p), .off = (o), .len = (l)                                       \
    }
#define R(p, o, l)                                                                                 \
    {                                                                                              \
        .op = STEP_RECV, .peer = (p), .off = (o), .len = (l)                                       \
    }
#define RR(p, o, l)                                                                                \
    {                                                                                              \
        .op = STEP_RECV_REDUCE, .peer = (p), .off = (o), .len = (l)                                \
    }

static const char *hand_run(int kind, uint32_t n, const step_t (*steps)[4], uint32_t rounds,
                            uint64_t count, uint64_t out_elems)
{
    static char err[512];
    hand_t h = {steps, rounds, out_elems};

    if (sim_run_fn(kind, n, 0, count, build_hand, &h, err, sizeof(err)) == 0)
        return NULL;
    return err;
}

/* A hand-made one-node schedule of `n` rounds of one step each, for sched_fresh_reads. */
static int fresh_of(const step_t *steps, uint32_t n, uint64_t len, uint8_t *fresh, int *all)
{
    uint32_t starts[9];
    sched_t sc = {.steps = (step_t *)steps, .nsteps = n, .nrounds = n, .round_start = starts};

    for (uint32_t i = 0; i <= n; i++)
        starts[i] = i;
    return sched_fresh_reads(&sc, len, fresh, all);
}

/* Reads of the input range before a write go to the input, after it to OUT; a read across
 * a write's edge, or the range's, cannot be served from either alone. */
START_TEST(test_fresh_reads)
{
    static const step_t ok[] = {S(1, 0, 4), RR(1, 4, 4), S(1, 4, 4), R(1, 0, 4), S(1, 0, 8)};
    static const step_t straddle[] = {R(1, 2, 4), S(1, 0, 4)};
    static const step_t edge[] = {S(1, 6, 4)};
    static const step_t gap[] = {R(1, 0, 2), RR(1, 4, 4)};
    uint8_t fresh[8];
    int all = -1;

    ck_assert_int_eq(fresh_of(ok, 5, 8, fresh, &all), 0);
    ck_assert_int_eq(fresh[0], SCHED_FRESH_SRC);
    ck_assert_int_eq(fresh[1], SCHED_FRESH_DST);
    ck_assert_int_eq(fresh[2], 0); /* reduced in the round before */
    ck_assert_int_eq(fresh[3], 0);
    ck_assert_int_eq(fresh[4], 0);
    ck_assert_int_eq(all, 1);
    ck_assert_int_eq(fresh_of(straddle, 2, 8, fresh, &all), -EINVAL);
    ck_assert_int_eq(fresh_of(edge, 1, 8, fresh, &all), -EINVAL);
    ck_assert_int_eq(fresh_of(gap, 2, 8, fresh, &all), 0);
    ck_assert_int_eq(fresh[1], SCHED_FRESH_DST);
    ck_assert_int_eq(all, 0); /* OUT[2, 4) is never written */
}
END_TEST

/* Fullmesh on 20 nodes: 19 reductions into the node's block in one round, applied in step
 * order in folds of at most 16. Only the first reads the input; the others read what the
 * ones before wrote. */
START_TEST(test_fresh_reads_many_reductions)
{
    sched_t s;
    uint8_t *fresh;
    uint32_t nred = 0;
    int all;

    ck_assert_int_eq(algo_build(ALGO_MESH, DESC_ALLREDUCE, 20, 3, 0, 2000, &s), 0);
    fresh = malloc(s.nsteps);
    ck_assert_int_eq(sched_fresh_reads(&s, 2000, fresh, &all), 0);
    for (uint32_t i = 0; i < s.nsteps; i++)
        if (s.steps[i].op == STEP_RECV_REDUCE)
            ck_assert_msg((fresh[i] & SCHED_FRESH_DST) == (nred++ == 0 ? SCHED_FRESH_DST : 0),
                          "reduction %u", nred);
    ck_assert_uint_eq(nred, 19);
    ck_assert_int_eq(all, 1);
    free(fresh);
    sched_free(&s);
}
END_TEST

START_TEST(test_sim_catches)
{
    /* A correct two-node allreduce, to show the harness itself works: each reduces one half
     * and sends it back. */
    static const step_t good[][4] = {{S(1, 2, 2), RR(1, 0, 2)},
                                     {S(1, 0, 2), R(1, 2, 2)},
                                     {S(0, 0, 2), RR(0, 2, 2)},
                                     {S(0, 2, 2), R(0, 0, 2)}};
    /* The same, and then node 1 adds node 0's half once more. */
    static const step_t twice[][4] = {
        {S(1, 2, 2), RR(1, 0, 2)}, {S(1, 0, 2), R(1, 2, 2)}, {S(1, 0, 2)},
        {S(0, 0, 2), RR(0, 2, 2)}, {S(0, 2, 2), R(0, 0, 2)}, {RR(0, 0, 2)}};
    static const step_t badlen[][4] = {{S(1, 2, 2), RR(1, 0, 2)},
                                       {S(1, 0, 2), R(1, 2, 2)},
                                       {S(0, 0, 1), RR(0, 2, 2)},
                                       {S(0, 2, 2), R(0, 0, 2)}};
    static const step_t outside[][4] = {{S(1, 2, 3), RR(1, 0, 2)},
                                        {S(1, 0, 2), R(1, 2, 2)},
                                        {S(0, 0, 2), RR(0, 2, 3)},
                                        {S(0, 2, 2), R(0, 0, 2)}};
    /* Both wait to receive before they send. */
    static const step_t dead[][4] = {{RR(1, 0, 4)}, {S(1, 0, 4)}, {RR(0, 0, 4)}, {S(0, 0, 4)}};
    /* Node 0 sends block 1 of an allgather before it arrived. */
    static const step_t early[][4] = {{S(1, 4, 4)}, {R(1, 4, 4)}, {R(0, 0, 4)}, {S(0, 4, 4)}};
    /* Two reductions into one range in one round (three nodes). */
    static const step_t clash[][4] = {{S(1, 0, 2), S(2, 0, 2), RR(1, 0, 2), RR(2, 0, 2)},
                                      {S(0, 0, 2), S(2, 0, 2), RR(0, 0, 2), RR(2, 0, 2)},
                                      {S(0, 0, 2), S(1, 0, 2), RR(0, 0, 2), RR(1, 0, 2)}};
    /* A "barrier" in which node 0 hears only from node 2. */
    static const step_t nobar[][4] = {
        {S(1, 0, 0), R(2, 0, 0)}, {S(2, 0, 0), R(0, 0, 0)}, {S(0, 0, 0), R(1, 0, 0)}};
    const char *e;

    e = hand_run(DESC_ALLREDUCE, 2, good, 2, 4, 4);
    ck_assert_msg(e == NULL, "%s", e);
    e = hand_run(DESC_ALLREDUCE, 2, twice, 3, 4, 4);
    ck_assert_msg(e != NULL && strstr(e, "expected") != NULL, "%s", e ? e : "passed");
    e = hand_run(DESC_ALLREDUCE, 2, badlen, 2, 4, 4);
    ck_assert_msg(e != NULL && strstr(e, "receives") != NULL, "%s", e ? e : "passed");
    e = hand_run(DESC_ALLREDUCE, 2, dead, 2, 4, 4);
    ck_assert_msg(e != NULL && strstr(e, "deadlock") != NULL, "%s", e ? e : "passed");
    e = hand_run(DESC_ALLGATHER, 2, early, 2, 4, 8);
    ck_assert_msg(e != NULL && strstr(e, "uninitialised") != NULL, "%s", e ? e : "passed");
    e = hand_run(DESC_ALLREDUCE, 3, clash, 1, 2, 2);
    ck_assert_msg(e != NULL && strstr(e, "overlaps") != NULL, "%s", e ? e : "passed");
    e = hand_run(DESC_ALLREDUCE, 2, outside, 2, 4, 4);
    ck_assert_msg(e != NULL && strstr(e, "beyond") != NULL, "%s", e ? e : "passed");
    e = hand_run(DESC_BARRIER, 3, nobar, 1, 0, 0);
    ck_assert_msg(e != NULL && strstr(e, "barrier") != NULL, "%s", e ? e : "passed");
}
END_TEST

/* ---- Cost model ---- */

/* Roughly 10 Gb/s TCP: 25 us latency, 5 us of processor time per message, one link. */
static const link_cost_t tcp10g = {.alpha_us = 25,
                                   .beta_us_per_byte = 0.0008,
                                   .gamma_us_per_byte = 0.0001,
                                   .overhead_us = 5,
                                   .shared_nic = 1};

START_TEST(test_cost_basics)
{
    double c, prev = 0;
    int a;

    ck_assert(algo_cost(ALGO_PAIRWISE, DESC_ALLREDUCE, 8, 1024, &tcp10g) < 0);
    ck_assert(algo_cost(ALGO_RING, DESC_ALLREDUCE, 1, 1024, &tcp10g) == 0);
    /* More data never costs less. */
    for (uint64_t b = 4; b <= (64u << 20); b *= 8) {
        c = algo_cost(ALGO_RING, DESC_ALLREDUCE, 8, b, &tcp10g);
        ck_assert(c >= prev);
        prev = c;
    }
    /* The ring allreduce is 2(n-1) rounds of a block each: a send and a receive (5 us each
     * for the processor), latency, the block on the wire, and half the rounds reduce it. */
    c = algo_cost(ALGO_RING, DESC_ALLREDUCE, 8, 8 * 4096, &tcp10g);
    ck_assert_double_eq_tol(c, 14 * (25 + 10 + 0.0008 * 4096) + 7 * 0.0001 * 4096, 1e-6);
    /* Small messages among many nodes: latency wins, the ring does not. */
    a = algo_select(DESC_ALLREDUCE, 64, 64, &tcp10g, &c);
    ck_assert_int_ne(a, ALGO_RING);
    ck_assert(c < algo_cost(ALGO_RING, DESC_ALLREDUCE, 64, 64, &tcp10g));
    a = algo_select(DESC_ALLTOALL, 16, 4096, &tcp10g, NULL);
    ck_assert(a == ALGO_PAIRWISE || a == ALGO_MESH);
    ck_assert_int_eq(algo_select(DESC_SEND, 16, 4096, &tcp10g, NULL), -EINVAL);
    /* The selection is the cheapest of those that serve. */
    for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER; k++) {
        a = algo_select(k, 1000, 1 << 20, &tcp10g, &c);
        ck_assert(algo_serves(a, k));
        for (int o = 0; o < ALGO_COUNT; o++)
            if (algo_serves(o, k))
                ck_assert(c <= algo_cost(o, k, 1000, 1 << 20, &tcp10g));
    }
    /* What the daemon chooses with (algo_select_costs): the same choice, every algorithm's
     * cost beside it (-1 where it does not serve), ties to the lower algo_id. */
    for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER; k++)
        for (uint32_t n = 2; n <= 16; n *= 2) {
            double costs[ALGO_COUNT];
            a = algo_select_costs(k, n, 4096, &tcp10g, costs);
            ck_assert_int_eq(a, algo_select(k, n, 4096, &tcp10g, &c));
            ck_assert_double_eq(costs[a], c);
            for (int o = 0; o < ALGO_COUNT; o++) {
                ck_assert_double_eq(costs[o],
                                    algo_serves(o, k) ? algo_cost(o, k, n, 4096, &tcp10g) : -1);
                ck_assert(costs[o] < 0 || costs[o] > c || (costs[o] == c && o >= a));
            }
        }
}
END_TEST

/* Daemons that outnumber their host's cores: a collective costs at least host_load times a
 * node's mean processor work, and the choice moves to schedules with fewer messages. */
START_TEST(test_cost_host_load)
{
    link_cost_t own = tcp10g, shared = tcp10g;
    double c;

    own.overhead_us = shared.overhead_us = 15;
    own.host_load = 0.5;
    shared.host_load = 2;
    /* A 4-node fullmesh allreduce of 64 bytes: two rounds of 3 sends and 3 receives per
     * node, 12 messages of 15 us and 16 B each (copied at beta), a few bytes of reductions:
     * twice that on 2 cores a node. */
    c = algo_cost(ALGO_MESH, DESC_ALLREDUCE, 4, 64, &shared);
    ck_assert_double_eq_tol(c, 2 * 12 * (15 + 16 * 0.0008), 0.01);
    ck_assert(algo_cost(ALGO_MESH, DESC_ALLREDUCE, 4, 64, &own) < c);
    /* H-D_R moves 8 messages a node, the ring 12 in 6 rounds: with the cores shared, the
     * fewer messages win. */
    ck_assert(algo_cost(ALGO_HDR, DESC_ALLREDUCE, 4, 64, &shared) < c);
    int a = algo_select(DESC_ALLREDUCE, 4, 64, &shared, NULL);
    ck_assert(a != ALGO_MESH && a != ALGO_RING);
    /* No bound at or below one daemon per core. */
    for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER; k++)
        for (int al = 0; al < ALGO_COUNT; al++) {
            link_cost_t none = own;
            none.host_load = 0;
            ck_assert(algo_cost(al, k, 6, 4096, &own) == algo_cost(al, k, 6, 4096, &none));
        }
}
END_TEST

/* The closed forms (used above 64 nodes) follow the replay of the real schedules. */
START_TEST(test_cost_formulas)
{
    static const uint32_t ns[] = {16, 24, 33, 64};
    static const uint64_t bytes[] = {4096, 1 << 20, 64 << 20};
    char worst[160] = "";
    double lo = 1, hi = 1;

    for (int v = 0; v < 4; v++) {
        link_cost_t lc = tcp10g;
        lc.shared_nic = v & 1;
        lc.overhead_us = v & 2 ? 5 : 0;
        for (int a = 0; a < ALGO_COUNT; a++)
            for (int k = DESC_ALLREDUCE; k <= DESC_BARRIER; k++)
                for (size_t i = 0; i < 4 && algo_serves(a, k); i++)
                    for (size_t j = 0; j < 3; j++) {
                        uint64_t b = bytes[j];
                        double r, f, q;
                        /* Kinds with n blocks stay at a megabyte per block. */
                        if (b > (1 << 20) && (k == DESC_ALLGATHER || k == DESC_ALLTOALL ||
                                              k == DESC_REDUCE_SCATTER || k == DESC_SCATTER))
                            continue;
                        r = algo_cost_replay(a, k, ns[i], b, &lc);
                        f = algo_cost_formula(a, k, ns[i], b, &lc);
                        q = f / r;
                        if (q < lo || q > hi) {
                            lo = q < lo ? q : lo;
                            hi = q > hi ? q : hi;
                            snprintf(worst, sizeof(worst),
                                     "%s kind %d n=%u bytes=%llu: "
                                     "replay %.1f formula %.1f",
                                     algo_name(a), k, ns[i], (unsigned long long)b, r, f);
                        }
                    }
    }
    ck_assert_msg(lo > 0.7 && hi < 1.4, "formula/replay in [%.2f, %.2f]; worst %s", lo, hi, worst);
}
END_TEST

/* ---- HCCL_ALGO ---- */

START_TEST(test_env_valid)
{
    algo_env_t e;
    char err[256];

    ck_assert_int_eq(algo_env_parse(NULL, &e, err, sizeof(err)), 0);
    ck_assert_int_eq(e.level1[DESC_ALLREDUCE], -1);
    ck_assert_int_eq(algo_env_parse("  ", &e, err, sizeof(err)), 0);
    ck_assert_int_eq(algo_env_parse("level0:NA;level1:ring", &e, err, sizeof(err)), 0);
    ck_assert_int_eq(e.level1[DESC_ALLREDUCE], ALGO_RING);
    ck_assert_int_eq(e.level1[DESC_BARRIER], ALGO_RING);
    ck_assert_int_eq(e.level1[DESC_ALLTOALL], -1); /* the ring cannot: stays automatic */
    ck_assert_int_eq(e.level1[DESC_SEND], -1);
    ck_assert_int_eq(algo_env_parse("level0:NA;level1:H-D_R", &e, err, sizeof(err)), 0);
    ck_assert_int_eq(e.level1[DESC_REDUCE_SCATTER], ALGO_HDR);
    ck_assert_int_eq(algo_env_parse("allreduce=level0:NA;level1:H-D_R/allgather=level0:NA;"
                                    "level1:ring",
                                    &e, err, sizeof(err)),
                     0);
    ck_assert_int_eq(e.level1[DESC_ALLREDUCE], ALGO_HDR);
    ck_assert_int_eq(e.level1[DESC_ALLGATHER], ALGO_RING);
    ck_assert_int_eq(e.level1[DESC_BROADCAST], -1);
    ck_assert_int_eq(algo_env_parse(" AllToAll = level0 : ESS ; level1 : pairwise / "
                                    "reducescatter=level1:fullmesh;/ barrier=level1:tree ;",
                                    &e, err, sizeof(err)),
                     0);
    ck_assert_int_eq(e.level1[DESC_ALLTOALL], ALGO_PAIRWISE);
    ck_assert_int_eq(e.level1[DESC_REDUCE_SCATTER], ALGO_MESH);
    ck_assert_int_eq(e.level1[DESC_BARRIER], ALGO_TREE);
    /* Per collective over global, in any order. */
    ck_assert_int_eq(
        algo_env_parse("broadcast=level1:tree/level0:fullmesh;level1:ring", &e, err, sizeof(err)),
        0);
    ck_assert_int_eq(e.level1[DESC_BROADCAST], ALGO_TREE);
    ck_assert_int_eq(e.level1[DESC_REDUCE], ALGO_RING);
    ck_assert_int_eq(algo_env_parse("level0:NA;level1:NA/scatter=level0:NA", &e, err, sizeof(err)),
                     0);
    ck_assert_int_eq(e.level1[DESC_SCATTER], -1);
    ck_assert_str_eq(e.instead, "");
}
END_TEST

/* HCCL's level-1 algorithms that hcclD has not yet run as the nearest it has, and say so. */
START_TEST(test_env_hccl_only)
{
    algo_env_t e;
    char err[256];

    ck_assert_int_eq(algo_env_parse("level0:NA;level1:NHR_V1", &e, err, sizeof(err)), 0);
    ck_assert_int_eq(e.level1[DESC_ALLREDUCE], ALGO_NHR);
    ck_assert_int_eq(e.src[DESC_ALLREDUCE], ALGO_SRC_HCCL_ALGO);
    ck_assert_str_eq(e.instead, "NHR_V1 as NHR");
    /* Every collective NHR runs; alltoall keeps the cost model's choice. */
    ck_assert_int_eq(e.level1[DESC_BROADCAST], ALGO_NHR);
    ck_assert_int_eq(e.level1[DESC_ALLTOALL], -1);
    ck_assert_int_eq(algo_env_parse("level1:pipeline", &e, err, sizeof(err)), 0);
    ck_assert_int_eq(e.level1[DESC_ALLGATHER], ALGO_RING);
    ck_assert_str_eq(e.instead, "pipeline as ring");
    ck_assert_int_eq(algo_env_parse("allreduce=level1:nb/allgather=level1:AHC/"
                                    "broadcast=level1:NB;level0:NA",
                                    &e, err, sizeof(err)),
                     0);
    ck_assert_int_eq(e.level1[DESC_ALLREDUCE], ALGO_NB);
    ck_assert_int_eq(e.level1[DESC_ALLGATHER], ALGO_HDR);
    ck_assert_int_eq(e.level1[DESC_BROADCAST], ALGO_NB);
    /* HCCL's spelling, once each */
    ck_assert_str_eq(e.instead, "AHC as H-D_R");
    ck_assert_int_eq(algo_env_parse("level1:NHR", &e, err, sizeof(err)), 0);
    ck_assert_int_eq(e.level1[DESC_ALLGATHER], ALGO_NHR);
    ck_assert_str_eq(e.instead, "");
}
END_TEST

START_TEST(test_env_invalid)
{
    static const struct {
        const char *s, *token;
    } bad[] = {
        {"level0:NA;level1:rings", "rings"},
        {"level0:XYZ;level1:ring", "XYZ"},
        {"level2:NA", "level2"},
        {"level1", "level1"},
        {"level1:", "level1"},
        {"level1:ring;level1:tree", "level1"},
        {"allreduce=level1:pairwise", "pairwise"},
        {"alltoall=level1:ring", "ring"},
        {"allreduced=level1:ring", "allreduced"},
        {"allreduce=level1:ring/allreduce=level1:tree", "allreduce"},
        {"level1:ring/level1:tree", "more than one"},
        {"allreduce=", "no level"},
        {"ring", "ring"},
        {"send=level1:ring", "send"},
    };
    algo_env_t e;
    char err[256];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rc = algo_env_parse(bad[i].s, &e, err, sizeof(err));
        ck_assert_msg(rc == -EINVAL && strstr(err, bad[i].token) != NULL, "'%s' gave %d '%s'",
                      bad[i].s, rc, err);
        ck_assert_int_eq(e.level1[DESC_ALLREDUCE], -1);
    }
}
END_TEST

Suite *algo_suite(void)
{
    Suite *s = suite_create("algo");
    TCase *tc = tcase_create("algo");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_serves);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_blocks);
    tcase_add_test(tc, test_sim_small);
    tcase_add_test(tc, test_sim_pipelined);
    tcase_add_test(tc, test_sim_large);
    tcase_add_test(tc, test_round_counts);
    tcase_add_test(tc, test_sim_catches);
    tcase_add_test(tc, test_fresh_reads);
    tcase_add_test(tc, test_fresh_reads_many_reductions);
    tcase_add_test(tc, test_cost_basics);
    tcase_add_test(tc, test_cost_formulas);
    tcase_add_test(tc, test_cost_host_load);
    tcase_add_test(tc, test_env_valid);
    tcase_add_test(tc, test_env_invalid);
    tcase_add_test(tc, test_env_hccl_only);
    suite_add_tcase(s, tc);
    return s;
}
