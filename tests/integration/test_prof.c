/*
 * HCCL_PROF_ENABLE: every op a rank runs leaves one JSON record in HCCL_PROF_FILE (%r: rank),
 * naming the op, its size, sequence, class, algorithm and chunk, and the daemon's queued and
 * executing times; those times are consistent with the op's wall time, and bandwidths follow
 * nccl-tests' factors. Ranks through the daemon, cooperative level 0, and two daemons with a
 * forced level-1 algorithm.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

#define NOPS 5

static char dir[128];

static void prof_env(const char *l0_mode)
{
    char path[256];

    snprintf(dir, sizeof(dir), "/tmp/hccld-prof-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/prof.%%r.json", dir);
    setenv("HCCL_PROF_ENABLE", "1", 1);
    setenv("HCCL_PROF_FILE", path, 1);
    setenv("HCCL_L0_MODE", l0_mode, 1);
}

/* Removes the records of the test that ends. */
static void prof_cleanup(void)
{
    char cmd[192];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* AllReduce, AllGather, Broadcast, then a Send/Recv pair (rank 0 -> last rank), then a
 * Barrier: NOPS records on ranks 0 and n-1, NOPS-1 on the others. */
static int prof_ops(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float a[1000], b[1000 * 4];
    int32_t g[10], h[10 * 4];
    HcclResult rc;

    for (int i = 0; i < 1000; i++)
        a[i] = (float)(r + i);
    for (int i = 0; i < 10; i++)
        g[i] = (int32_t)(r * 10 + i);
    rc = HcclAllReduce(a, b, 1000, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL);
    if (rc == HCCL_SUCCESS)
        rc = HcclAllGather(g, h, 10, HCCL_DATA_TYPE_INT32, comm, NULL);
    if (rc == HCCL_SUCCESS)
        rc = HcclBroadcast(a, 1000, HCCL_DATA_TYPE_FP32, n - 1, comm, NULL);
    if (rc == HCCL_SUCCESS && r == 0)
        rc = HcclSend(g, 10, HCCL_DATA_TYPE_INT32, n - 1, comm, NULL);
    if (rc == HCCL_SUCCESS && r == n - 1)
        rc = HcclRecv(g, 10, HCCL_DATA_TYPE_INT32, 0, comm, NULL);
    if (rc == HCCL_SUCCESS)
        rc = HcclBarrier(comm, NULL);
    if (rc == HCCL_SUCCESS &&
        (b[7] != (float)(n * 7 + n * (n - 1) / 2) || h[10 * (n - 1)] != (int32_t)((n - 1) * 10)))
        rc = HCCL_E_INTERNAL;
    return rc != HCCL_SUCCESS;
}

/* The most significant digits of a number in line (leading zeros not counted). */
static int longest_number(const char *line)
{
    int most = 0;

    for (const char *p = line; *p != '\0';) {
        int sig = 0, lead = 1;
        for (; (*p >= '0' && *p <= '9') || *p == '.'; p++) {
            if (*p == '.' || (lead && *p == '0'))
                continue;
            lead = 0;
            sig++;
        }
        most = sig > most ? sig : most;
        if (*p != '\0')
            p++;
    }
    return most;
}

/* The records of rank r's file, as an array (JSON Lines, one object each). */
static json_t *records(uint32_t r)
{
    char path[256], line[4096];
    json_t *all = json_array();
    json_error_t err;
    FILE *f;

    snprintf(path, sizeof(path), "%s/prof.%u.json", dir, r);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no profile file %s", path);
    while (fgets(line, sizeof(line), f) != NULL) {
        json_t *o = json_loads(line, 0, &err);
        ck_assert_msg(json_is_object(o), "%s: not a JSON object: %s (%s)", path, line, err.text);
        /* No binary tail of a double: "time_us":21076.756000000001 */
        ck_assert_msg(longest_number(line) <= 15, "%s: a number of more than 15 digits: %s", path,
                      line);
        json_array_append_new(all, o);
    }
    fclose(f);
    return all;
}

static const char *str(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    ck_assert_msg(json_is_string(v), "field %s missing or not a string", k);
    return json_string_value(v);
}

static double num(json_t *o, const char *k)
{
    json_t *v = json_object_get(o, k);

    ck_assert_msg(json_is_number(v), "field %s missing or not a number", k);
    return json_number_value(v);
}

/* Checks rank r's records: ops in order with their sizes, sequence numbers and invariants. */
static void check_rank(uint32_t r, uint32_t n, uint32_t nnodes, const char *path, const char *algo)
{
    json_t *all = records(r);
    const char *ops[NOPS] = {"allreduce", "allgather", "broadcast", NULL, "barrier"};
    double bytes[NOPS] = {4000, 40.0 * n, 4000, 40, 0};
    double factor[NOPS] = {2.0 * (n - 1) / n, (double)(n - 1) / n, 1, 1, 1};
    size_t k = 0;

    ops[3] = r == 0 ? "send" : r == n - 1 ? "recv" : NULL;
    for (size_t i = 0; i < NOPS; i++) {
        if (ops[i] == NULL)
            continue;
        json_t *o = json_array_get(all, k++);
        ck_assert_msg(o != NULL, "rank %u: record %zu (%s) missing", r, k - 1, ops[i]);
        ck_assert_str_eq(str(o, "op"), ops[i]);
        ck_assert_double_eq(num(o, "bytes"), bytes[i]);
        ck_assert_int_eq((int)num(o, "rank"), (int)r);
        ck_assert_int_eq((int)num(o, "nranks"), (int)n);
        ck_assert_int_eq((int)num(o, "nnodes"), (int)nnodes);
        ck_assert_int_eq((int)num(o, "result"), HCCL_SUCCESS);
        ck_assert_str_eq(str(o, "path"), path);
        ck_assert_str_eq(str(o, "qos_class"), "MEDIUM");
        /* Across daemons the root daemon's piece size for the class: MEDIUM's 2 MiB. */
        if (nnodes > 1)
            ck_assert_int_eq((int)num(o, "chunk_bytes"), 2 << 20);
        /* Collectives carry the comm's sequence (the same on every rank), transfers the peer. */
        if (i != 3)
            ck_assert_int_eq((int)num(o, "seq"), (int)(i < 3 ? i : i - 1));
        else if (i == 3)
            ck_assert_int_eq((int)num(o, "peer"), r == 0 ? (int)n - 1 : 0);
        double t = num(o, "time_us"), q = num(o, "queued_us"), l0 = num(o, "l0_us"),
               l1 = num(o, "l1_us"), qw = num(o, "qos_wait_us");
        ck_assert_msg(t > 0 && q >= 0 && l0 >= 0 && l1 >= 0 && qw >= 0 && qw <= l1,
                      "rank %u %s: times %f %f %f %f %f", r, ops[i], t, q, l0, l1, qw);
        /* The daemon runs a comm's pieces one after another: they fit in the wall time. */
        ck_assert_msg(l0 + l1 <= t + 1.0, "rank %u %s: l0 %f + l1 %f > time %f", r, ops[i], l0, l1,
                      t);
        if (strcmp(path, "coop") == 0) {
            ck_assert_int_eq((int)num(o, "pieces"), 0);
            ck_assert_double_eq(l0, t);
        } else
            ck_assert_int_ge((int)num(o, "pieces"), 1);
        /* Level 1 runs exactly when the op crosses daemons (a barrier crosses them too). */
        const char *want = nnodes > 1 && i != 3 ? algo : "none";
        ck_assert_str_eq(str(o, "algo"), want);
        if (strcmp(want, "none") != 0)
            ck_assert_msg(l1 > 0, "rank %u %s: no level-1 time", r, ops[i]);
        else if (i != 3 || nnodes == 1)
            ck_assert_double_eq(l1, 0);
        double algbw = num(o, "algbw_GBps"), busbw = num(o, "busbw_GBps");
        ck_assert_msg(fabs(algbw - bytes[i] / (t * 1e3)) <= 1e-6 * algbw + 1e-12,
                      "rank %u %s: algbw %g for %g B in %f us", r, ops[i], algbw, bytes[i], t);
        ck_assert_msg(fabs(busbw - algbw * factor[i]) <= 1e-9 + 1e-6 * busbw,
                      "rank %u %s: busbw %g, algbw %g", r, ops[i], busbw, algbw);
    }
    ck_assert_msg(json_array_size(all) == k, "rank %u: %zu records, want %zu", r,
                  json_array_size(all), k);
    json_decref(all);
}

START_TEST(test_prof_daemon)
{
    prof_env("daemon");
    ck_assert_int_eq(harness_run_ranks(3, prof_ops, NULL, 60), 0);
    for (uint32_t r = 0; r < 3; r++)
        check_rank(r, 3, 1, "daemon", "none");
    prof_cleanup();
}
END_TEST

START_TEST(test_prof_coop)
{
    prof_env("coop");
    ck_assert_int_eq(harness_run_ranks(2, prof_ops, NULL, 60), 0);
    /* Send/Recv always go through the daemon; check_rank knows only one path per rank, so
     * this case checks the collectives' path through the first record only. */
    json_t *all = records(0);
    json_t *o = json_array_get(all, 0);
    ck_assert_str_eq(str(o, "path"), "coop");
    ck_assert_int_eq((int)num(o, "pieces"), 0);
    ck_assert_double_eq(num(o, "l0_us"), num(o, "time_us"));
    ck_assert_int_eq((int)json_array_size(all), NOPS);
    json_decref(all);
    prof_cleanup();
}
END_TEST

/* Two daemons, one rank each, level 1 forced to H-D_R: the records name it and show level-1
 * time. */
/* nd ranks running fn, one on the test's daemon and one on each of nd - 1 daemons of their
 * own. */
static void on_daemons(unsigned nd, rank_fn fn)
{
    char sock[4][256];
    char *socks[4] = {NULL, sock[1], sock[2], sock[3]};
    pid_t d[4], pids[4];

    ck_assert_uint_le(nd, 4);
    for (unsigned i = 1; i < nd; i++) {
        d[i] = harness_daemon_spawn(sock[i], sizeof(sock[i]));
        ck_assert_int_gt(d[i], 0);
    }
    ck_assert_int_eq(harness_spawn_ranks_on(nd, socks, fn, NULL, 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, nd, 60), 0);
    for (unsigned i = 1; i < nd; i++)
        harness_daemon_stop(d[i]);
}

static void on_two_daemons(rank_fn fn)
{
    on_daemons(2, fn);
}

/* Every record of rank r with a level-1 algorithm says what chose it: by, or, for the op named
 * `op`, op_by. */
static void check_algo_by(uint32_t r, const char *by, const char *op, const char *op_by)
{
    json_t *all = records(r);
    size_t n = 0;

    for (size_t i = 0; i < json_array_size(all); i++) {
        json_t *o = json_array_get(all, i);
        if (strcmp(str(o, "algo"), "none") == 0)
            continue;
        n++;
        ck_assert_str_eq(str(o, "algo_by"), op && strcmp(str(o, "op"), op) == 0 ? op_by : by);
    }
    ck_assert_uint_ge(n, 3);
    json_decref(all);
}

START_TEST(test_prof_two_daemons)
{
    prof_env("auto");
    setenv("HCCL_ALGO", "level0:NA;level1:H-D_R", 1);
    on_two_daemons(prof_ops);
    for (uint32_t r = 0; r < 2; r++)
        check_rank(r, 2, 2, "daemon", "H-D_R");
    prof_cleanup();
}
END_TEST

/* HCCL_ALGORITHM, the tuning guides' shorthand, in any case, on 2 and 3 daemons: the records
 * name the algorithm that ran and the variable that chose it. */
START_TEST(test_prof_algorithm_var)
{
    static const struct {
        const char *value, *algo;
        unsigned nd;
    } cases[] = {
        {"RING", "ring", 3}, {"mesh", "fullmesh", 3}, {"RHD", "H-D_R", 2}, {"Tree", "tree", 3}};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        prof_env("auto");
        setenv("HCCL_ALGORITHM", cases[i].value, 1);
        on_daemons(cases[i].nd, prof_ops);
        for (uint32_t r = 0; r < cases[i].nd; r++) {
            check_rank(r, cases[i].nd, cases[i].nd, "daemon", cases[i].algo);
            check_algo_by(r, "HCCL_ALGORITHM", NULL, NULL);
        }
        prof_cleanup();
    }
    unsetenv("HCCL_ALGORITHM");
}
END_TEST

/* An alltoall, then an allreduce, checked. */
static int alltoall_ops(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    int32_t in[4 * 8], out[4 * 8];
    float a = (float)r, b = 0;

    for (uint32_t i = 0; i < 8 * n; i++)
        in[i] = (int32_t)(r * 1000 + i);
    if (HcclAlltoAll(in, 8, HCCL_DATA_TYPE_INT32, out, 8, HCCL_DATA_TYPE_INT32, comm, NULL) != 0 ||
        HcclAllReduce(&a, &b, 1, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) != 0)
        return 1;
    for (uint32_t q = 0; q < n; q++)
        for (uint32_t i = 0; i < 8; i++)
            if (out[q * 8 + i] != (int32_t)(q * 1000 + r * 8 + i))
                return 1;
    (void)arg;
    return b != (float)(n * (n - 1) / 2);
}

/* HCCL_ALGORITHM=PAIRWISE forces alltoall only; allreduce stays the cost model's. */
START_TEST(test_prof_algorithm_pairwise)
{
    prof_env("auto");
    setenv("HCCL_ALGORITHM", "PAIRWISE", 1);
    on_daemons(3, alltoall_ops);
    unsetenv("HCCL_ALGORITHM");
    for (uint32_t r = 0; r < 3; r++) {
        json_t *all = records(r);
        ck_assert_str_eq(str(json_array_get(all, 0), "op"), "alltoall");
        ck_assert_str_eq(str(json_array_get(all, 0), "algo"), "pairwise");
        ck_assert_str_eq(str(json_array_get(all, 0), "algo_by"), "HCCL_ALGORITHM");
        ck_assert_str_eq(str(json_array_get(all, 1), "op"), "allreduce");
        ck_assert_str_eq(str(json_array_get(all, 1), "algo_by"), "model");
        json_decref(all);
    }
    prof_cleanup();
}
END_TEST

/* HCCL_ALGO and HCCL_ALGORITHM disagree on allreduce: HCCL_ALGO's ring runs it, the shorthand's
 * fullmesh the rest, and each rank's log says which won. */
static int disagree_ops(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float a[1000], b[1000];
    int32_t g[10], h[10 * 4];

    for (int i = 0; i < 1000; i++)
        a[i] = (float)(r + i);
    for (int i = 0; i < 10; i++)
        g[i] = (int32_t)i;
    if (HcclAllReduce(a, b, 1000, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) != 0 ||
        HcclAllGather(g, h, 10, HCCL_DATA_TYPE_INT32, comm, NULL) != 0 ||
        HcclBroadcast(a, 1000, HCCL_DATA_TYPE_FP32, 0, comm, NULL) != 0)
        return 1;
    return b[7] != (float)(n * 7 + n * (n - 1) / 2);
}

START_TEST(test_prof_algo_vars_disagree)
{
    char log[64];
    int saved;

    prof_env("auto");
    setenv("HCCL_ALGO", "allreduce=level1:ring", 1);
    setenv("HCCL_ALGORITHM", "MESH", 1);
    saved = harness_stderr_to(log, sizeof(log));
    on_two_daemons(disagree_ops);
    ck_assert(harness_stderr_back_has(
        saved, log,
        "WARN INIT: rank 1: HCCL_ALGO and HCCL_ALGORITHM disagree on allreduce (ring, not "
        "fullmesh): HCCL_ALGO=\"allreduce=level1:ring\" wins over HCCL_ALGORITHM=MESH"));
    unsetenv("HCCL_ALGO");
    unsetenv("HCCL_ALGORITHM");
    for (uint32_t r = 0; r < 2; r++) {
        json_t *all = records(r);
        ck_assert_str_eq(str(json_array_get(all, 0), "algo"), "ring");
        ck_assert_str_eq(str(json_array_get(all, 1), "algo"), "fullmesh");
        ck_assert_str_eq(str(json_array_get(all, 2), "algo"), "fullmesh");
        json_decref(all);
        check_algo_by(r, "HCCL_ALGORITHM", "allreduce", "HCCL_ALGO");
    }
    prof_cleanup();
}
END_TEST

/* A big allreduce after the usual ops: 2^20 floats, checked element by element. */
static int prof_ops_big(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    enum { BIG = 1 << 20 };
    float *a = malloc(BIG * sizeof(float)), *b = malloc(BIG * sizeof(float));
    int bad = prof_ops(comm, r, n, arg);

    for (int i = 0; i < BIG; i++)
        a[i] = (float)((r + 1) * (i % 1000));
    if (!bad && HcclAllReduce(a, b, BIG, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, NULL) != 0)
        bad = 1;
    for (int i = 0; !bad && i < BIG; i++)
        bad = b[i] != (float)(n * (n + 1) / 2 * (i % 1000));
    free(a);
    free(b);
    return bad;
}

/* A LOW comm across two daemons: the root daemon gives it LOW's piece size (256 KiB by
 * default), every node cuts the same way, the result is exact, and the records say so: the
 * 4 MiB allreduce went in 32 pieces (256 KiB / (4 B x 2 blocks) elements each). */
START_TEST(test_low_class_pieces)
{
    prof_env("auto");
    setenv("HCCL_QOS_CLASS", "LOW", 1);
    on_two_daemons(prof_ops_big);
    unsetenv("HCCL_QOS_CLASS");
    for (uint32_t r = 0; r < 2; r++) {
        json_t *all = records(r);
        size_t n = json_array_size(all);
        ck_assert_uint_ge(n, 1);
        json_t *o = json_array_get(all, n - 1);
        ck_assert_str_eq(str(o, "op"), "allreduce");
        ck_assert_double_eq(num(o, "bytes"), 4 << 20);
        ck_assert_str_eq(str(o, "qos_class"), "LOW");
        ck_assert_int_eq((int)num(o, "chunk_bytes"), 256 << 10);
        ck_assert_int_eq((int)num(o, "pieces"), 32);
        json_decref(all);
    }
    prof_cleanup();
}
END_TEST

/* Without HCCL_PROF_ENABLE nothing is written; an unwritable HCCL_PROF_FILE costs no op. */
START_TEST(test_prof_off_and_unwritable)
{
    char path[256];

    prof_env("daemon");
    unsetenv("HCCL_PROF_ENABLE");
    ck_assert_int_eq(harness_run_ranks(2, prof_ops, NULL, 60), 0);
    snprintf(path, sizeof(path), "%s/prof.0.json", dir);
    ck_assert_int_ne(access(path, F_OK), 0);
    setenv("HCCL_PROF_ENABLE", "1", 1);
    setenv("HCCL_PROF_FILE", "/nonexistent-dir/prof.json", 1);
    ck_assert_int_eq(harness_run_ranks(2, prof_ops, NULL, 60), 0);
    prof_cleanup();
}
END_TEST

Suite *prof_suite(void)
{
    Suite *s = suite_create("prof");
    TCase *tc = tcase_create("records");

    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_prof_daemon);
    tcase_add_test(tc, test_prof_coop);
    tcase_add_test(tc, test_prof_two_daemons);
    tcase_add_test(tc, test_prof_algorithm_var);
    tcase_add_test(tc, test_prof_algorithm_pairwise);
    tcase_add_test(tc, test_prof_algo_vars_disagree);
    tcase_add_test(tc, test_low_class_pieces);
    tcase_add_test(tc, test_prof_off_and_unwritable);
    suite_add_tcase(s, tc);
    return s;
}
