/*
 * HCCL_DETERMINISTIC: the level-1 algorithm no longer follows link figures measured when a comm
 * forms, so the same job repeated on freshly started daemons gives bit-identical fp32 sums on
 * every rank; one node gives the same bits through the daemon and cooperatively. And why it is
 * needed: on 3 daemons the algorithms add in different orders, so a choice that moved with the
 * measured figures would move the sums' last bits. (On 2 daemons it cannot show: a sum of two
 * node partials is the same whichever node adds it, x + y == y + x in IEEE arithmetic.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "multinode.h"
#include "suites.h"

/* Sizes from one element to several pieces (the daemon cuts 1 MiB pieces). */
static const uint64_t det_counts[] = {1, 1000, 65536 + 3, (1u << 20) + 17};
#define NCOUNTS (sizeof(det_counts) / sizeof(det_counts[0]))

static char det_dir[64];

/* Values of many magnitudes and both signs: their sum's last bits depend on the order. */
static float det_value(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    float m = (float)(*s % 2000001) / 1e6f - 1.0f;
    return m * (float)(1u << (*s >> 40) % 24);
}

static void out_path(char *p, size_t cap, const char *tag, uint32_t r, size_t c)
{
    snprintf(p, cap, "%s/%s.r%u.c%zu", det_dir, tag, r, c);
}

/* Every size's allreduce of this rank's values; each result to a file named by tag (arg). A tag
 * "call-ALGO" runs them by HcclAllReduceAlgo with ALGO. */
static int det_rank(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    const char *tag = arg;
    int bad = 0;

    for (size_t c = 0; c < NCOUNTS && !bad; c++) {
        uint64_t cnt = det_counts[c], seed = 0x9e3779b97f4a7c15ull ^ (r * 1000003ull + c);
        float *in = malloc(cnt * sizeof(float)), *out = malloc(cnt * sizeof(float));
        char path[128];
        FILE *f;

        bad = in == NULL || out == NULL;
        for (uint64_t i = 0; !bad && i < cnt; i++)
            in[i] = det_value(&seed);
        bad = bad || (strncmp(tag, "call-", 5) == 0
                          ? HcclAllReduceAlgo(in, out, cnt, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM,
                                              tag + 5, comm, NULL)
                          : HcclAllReduce(in, out, cnt, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm,
                                          NULL)) != HCCL_SUCCESS;
        out_path(path, sizeof(path), tag, r, c);
        if (!bad && ((f = fopen(path, "w")) == NULL || fwrite(out, sizeof(float), cnt, f) != cnt))
            bad = 1;
        if (!bad)
            fclose(f);
        free(in);
        free(out);
    }
    (void)n;
    return bad;
}

/* nd daemons started for this run alone, per ranks on each (in blocks), run fn(tag); the root
 * info comes from the first of them, so nothing of an earlier run is remembered. */
static void run_fresh(unsigned nd, unsigned per, const char *tag)
{
    char sock[4][256], *socks[8];
    pid_t d[4], pid;
    int st;

    ck_assert_uint_le(nd, 4);
    ck_assert_uint_le(nd * per, 8);
    for (unsigned i = 0; i < nd; i++) {
        d[i] = harness_daemon_spawn(sock[i], sizeof(sock[i]));
        ck_assert_int_gt(d[i], 0);
    }
    for (unsigned r = 0; r < nd * per; r++)
        socks[r] = sock[r / per];
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pid_t pids[8];
        setenv("HCCLD_SOCKET", sock[0], 1);
        if (harness_spawn_ranks_on(nd * per, socks, det_rank, (void *)tag, 120, pids) != 0)
            _exit(1);
        _exit(harness_wait(pids, nd * per, 120) != 0);
    }
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "run %s failed", tag);
    for (unsigned i = 0; i < nd; i++)
        harness_daemon_stop(d[i]);
}

/* Bytes of a result file; its length in *len. */
static char *slurp(const char *tag, uint32_t r, size_t c, size_t *len)
{
    char path[128];
    FILE *f;
    char *buf;

    out_path(path, sizeof(path), tag, r, c);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no result %s", path);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    buf = malloc(*len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

/* Elements of size c in which rank ra of run a and rank rb of run b differ. */
static size_t differ(const char *a, uint32_t ra, const char *b, uint32_t rb, size_t c)
{
    size_t la, lb, n = 0;
    char *x = slurp(a, ra, c, &la), *y = slurp(b, rb, c, &lb);

    ck_assert_uint_eq(la, det_counts[c] * sizeof(float));
    ck_assert_uint_eq(lb, la);
    for (size_t i = 0; i < la; i += sizeof(float))
        n += memcmp(x + i, y + i, sizeof(float)) != 0;
    free(x);
    free(y);
    return n;
}

/* Every rank's result of run b (nranks of them), at every size, is rank 0's of run a, bit for
 * bit. */
static void assert_same(const char *a, const char *b, uint32_t nranks)
{
    for (uint32_t r = 0; r < nranks; r++)
        for (size_t c = 0; c < NCOUNTS; c++)
            ck_assert_msg(differ(a, 0, b, r, c) == 0, "%s against %s: rank %u count %llu", b, a, r,
                          (unsigned long long)det_counts[c]);
}

/* The records of profile file `name` (in det_dir), each of which says algo_by `by`. */
static size_t records_by(const char *name, const char *by)
{
    char path[128], line[4096], want[64];
    size_t n = 0;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", det_dir, name);
    snprintf(want, sizeof(want), "\"algo_by\":\"%s\"", by);
    f = fopen(path, "r");
    ck_assert_msg(f != NULL, "no %s", path);
    while (fgets(line, sizeof(line), f) != NULL) {
        ck_assert_msg(strstr(line, want) != NULL, "%s: %s", path, line);
        n++;
    }
    fclose(f);
    return n;
}

static void det_setup(void)
{
    snprintf(det_dir, sizeof(det_dir), "/tmp/hccld-det-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(det_dir));
}

static void det_cleanup(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", det_dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The case: 5 runs of 2 daemons x 2 ranks, fresh daemons each time, bit for bit. */
START_TEST(test_repeat_runs_identical)
{
    char tag[16], prof[128];

    det_setup();
    setenv("HCCL_DETERMINISTIC", "true", 1);
    snprintf(prof, sizeof(prof), "%s/prof.%%r.json", det_dir);
    setenv("HCCL_PROF_ENABLE", "1", 1);
    setenv("HCCL_PROF_FILE", prof, 1);
    for (int run = 0; run < 5; run++) {
        snprintf(tag, sizeof(tag), "run%d", run);
        run_fresh(2, 2, tag);
    }
    unsetenv("HCCL_PROF_ENABLE");
    unsetenv("HCCL_PROF_FILE");
    unsetenv("HCCL_DETERMINISTIC");
    for (int run = 0; run < 5; run++) {
        snprintf(tag, sizeof(tag), "run%d", run);
        assert_same("run0", tag, 4);
    }
    /* Rank 0's records (every run appends) say what chose each algorithm. */
    ck_assert_uint_eq(records_by("prof.0.json", "HCCL_DETERMINISTIC"), 5 * NCOUNTS);
    det_cleanup();
}
END_TEST

/* On 3 daemons ring, H-D_R and fullmesh sum in different orders: at least two of them give
 * different bits. With HCCL_DETERMINISTIC three fresh runs still agree. */
START_TEST(test_order_matters_on_three)
{
    static const char *const algos[] = {"ring", "H-D_R", "fullmesh"};
    char env[64];
    size_t diffs = 0;

    det_setup();
    for (size_t a = 0; a < 3; a++) {
        snprintf(env, sizeof(env), "level0:NA;level1:%s", algos[a]);
        setenv("HCCL_ALGO", env, 1);
        run_fresh(3, 1, algos[a]);
    }
    unsetenv("HCCL_ALGO");
    for (size_t a = 1; a < 3; a++)
        diffs += differ(algos[0], 0, algos[a], 0, 3);
    ck_assert_msg(diffs > 0, "ring, H-D_R and fullmesh gave the same bits");
    setenv("HCCL_DETERMINISTIC", "1", 1);
    run_fresh(3, 1, "d0");
    run_fresh(3, 1, "d1");
    run_fresh(3, 1, "d2");
    unsetenv("HCCL_DETERMINISTIC");
    assert_same("d0", "d1", 3);
    assert_same("d0", "d2", 3);
    det_cleanup();
}
END_TEST

/* Op retry on 3 daemons chooses as HCCL_DETERMINISTIC does (a piece that runs again after a
 * crash must add in the first run's order, span/rerun.c): the same bits, and the records say
 * why. On 2 daemons it leaves the choice to the model (any order adds 2 shares alike). */
START_TEST(test_retry_on_three_chooses_fixed)
{
    char prof[128];

    det_setup();
    setenv("HCCL_DETERMINISTIC", "1", 1);
    run_fresh(3, 1, "det");
    unsetenv("HCCL_DETERMINISTIC");
    setenv("HCCL_OP_RETRY_ENABLE", "L1:1", 1);
    setenv("HCCLD_DIRECT_MAX", "0", 1); /* small ones through the daemons too, not lanes */
    setenv("HCCL_PROF_ENABLE", "1", 1);
    for (unsigned nd = 2; nd <= 3; nd++) {
        snprintf(prof, sizeof(prof), "%s/prof%u.%%r.json", det_dir, nd);
        setenv("HCCL_PROF_FILE", prof, 1);
        run_fresh(nd, 1, nd == 3 ? "retry" : "retry2");
    }
    unsetenv("HCCL_PROF_ENABLE");
    unsetenv("HCCL_PROF_FILE");
    unsetenv("HCCL_OP_RETRY_ENABLE");
    unsetenv("HCCLD_DIRECT_MAX");
    assert_same("det", "retry", 3);
    ck_assert_uint_eq(records_by("prof3.0.json", "HCCL_OP_RETRY_ENABLE"), NCOUNTS);
    ck_assert_uint_eq(records_by("prof2.0.json", "model"), NCOUNTS);
    det_cleanup();
}
END_TEST

/* Ranks that name different algorithms for one allreduce (rank 0 arg's, the others "H-D_R"):
 * HCCL_E_PARA on every rank, the comm's async error too; a name that is none, or one that does
 * not serve allreduce, fails at once. */
static int algo_mismatch(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float a[4] = {1, 2, 3, 4}, b[4];
    HcclResult ae = HCCL_SUCCESS;

    if (HcclAllReduceAlgo(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, "bubble", comm, NULL) !=
            HCCL_E_PARA ||
        HcclAllReduceAlgo(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, "pairwise", comm, NULL) !=
            HCCL_E_PARA) {
        fprintf(stderr, "rank %u: a bad algorithm name was taken\n", r);
        return 1;
    }
    HcclResult rc = HcclAllReduceAlgo(a, b, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM,
                                      r == 0 ? (const char *)arg : "H-D_R", comm, NULL);
    HcclGetCommAsyncError(comm, &ae);
    if (rc == HCCL_E_PARA && ae == HCCL_E_PARA)
        return 0;
    fprintf(stderr, "rank %u: algorithms that differ gave %d, async error %d\n", r, rc, ae);
    (void)n;
    return 1;
}

/* HcclAllReduceAlgo: each call runs the algorithm it names. On 3 daemons, where the algorithms
 * add in different orders, its sums are those of the same algorithm forced by HCCL_ALGO, bit
 * for bit, and the records say "call" chose it; ranks that name different ones get
 * HCCL_E_PARA, across daemons and on one (where no level-1 algorithm runs, but the ranks must
 * still agree). */
START_TEST(test_per_call_algorithm)
{
    static const char *const algos[] = {"ring", "H-D_R", "fullmesh", "tree", "NB", "NHR"};
    char env[64], tag[32], prof[128];

    det_setup();
    setenv("HCCLD_DIRECT_MAX", "0", 1); /* small ones through the daemons too, not lanes */
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
        snprintf(env, sizeof(env), "level0:NA;level1:%s", algos[a]);
        setenv("HCCL_ALGO", env, 1);
        run_fresh(3, 1, algos[a]);
        unsetenv("HCCL_ALGO");
        snprintf(prof, sizeof(prof), "%s/prof-%s.%%r.json", det_dir, algos[a]);
        setenv("HCCL_PROF_ENABLE", "1", 1);
        setenv("HCCL_PROF_FILE", prof, 1);
        snprintf(tag, sizeof(tag), "call-%s", algos[a]);
        run_fresh(3, 1, tag);
        unsetenv("HCCL_PROF_ENABLE");
        unsetenv("HCCL_PROF_FILE");
        assert_same(algos[a], tag, 3);
        snprintf(prof, sizeof(prof), "prof-%s.0.json", algos[a]);
        ck_assert_uint_eq(records_by(prof, "call"), NCOUNTS);
    }
    /* HCCL's NHR_V1, which hcclD has not, runs as NHR: the same bits. */
    setenv("HCCL_ALGO", "level0:NA;level1:NHR_V1", 1);
    run_fresh(3, 1, "nhr_v1");
    unsetenv("HCCL_ALGO");
    assert_same("NHR", "nhr_v1", 3);
    unsetenv("HCCLD_DIRECT_MAX");
    det_cleanup();
    ck_assert_int_eq(run_on_cluster(3, 1, algo_mismatch, "ring"), 0);
    ck_assert_int_eq(harness_run_ranks(2, algo_mismatch, "fullmesh", 60), 0);
}
END_TEST

/* One node, 4 ranks: the daemon's level 0 and the ranks' own (coop) add alike. */
START_TEST(test_coop_and_daemon_alike)
{
    det_setup();
    setenv("HCCL_DETERMINISTIC", "true", 1);
    setenv("HCCL_L0_MODE", "daemon", 1);
    ck_assert_int_eq(harness_run_ranks(4, det_rank, "daemon", 120), 0);
    setenv("HCCL_L0_MODE", "coop", 1);
    ck_assert_int_eq(harness_run_ranks(4, det_rank, "coop", 120), 0);
    unsetenv("HCCL_L0_MODE");
    unsetenv("HCCL_DETERMINISTIC");
    assert_same("daemon", "coop", 4);
    det_cleanup();
}
END_TEST

/* Ranks of one comm whose settings differ choose different algorithms on their daemons: the
 * op fails as a mismatch (HCCL_E_PARA) on every rank. Nodes that run different schedules
 * disagree on the order of the sum at best (on 2 nodes ring and H-D_R happen to fit together,
 * and the daemon without this check returned success) and wait on each other at worst. The
 * child of a split is formed under each rank's own HCCL_ALGO. */
static int differing_algo(HcclComm comm, uint32_t r, uint32_t n, void *arg)
{
    float in[4096], out[4096];
    HcclComm child;
    HcclResult rc;

    setenv("HCCL_ALGO", r == 0 ? "level0:NA;level1:ring" : "level0:NA;level1:H-D_R", 1);
    if (HcclCommSplit(comm, 0, r, &child) != HCCL_SUCCESS)
        return 1;
    for (int i = 0; i < 4096; i++)
        in[i] = (float)i;
    rc = HcclAllReduce(in, out, 4096, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, child, NULL);
    HcclCommDestroy(child);
    if (rc != HCCL_E_PARA)
        fprintf(stderr, "rank %u: allreduce under differing HCCL_ALGO gave %d\n", r, (int)rc);
    (void)n;
    (void)arg;
    return rc != HCCL_E_PARA;
}

START_TEST(test_settings_differ_across_daemons)
{
    char sock[256], *socks[2] = {NULL, sock};
    pid_t d = harness_daemon_spawn(sock, sizeof(sock)), pids[2];

    ck_assert_int_gt(d, 0);
    ck_assert_int_eq(harness_spawn_ranks_on(2, socks, differing_algo, NULL, 60, pids), 0);
    ck_assert_int_eq(harness_wait(pids, 2, 60), 0);
    ck_assert(harness_alive(d));
    harness_daemon_stop(d);
}
END_TEST

Suite *determinism_suite(void)
{
    Suite *s = suite_create("determinism");
    TCase *tc = tcase_create("determinism");

    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_repeat_runs_identical);
    tcase_add_test(tc, test_order_matters_on_three);
    tcase_add_test(tc, test_retry_on_three_chooses_fixed);
    tcase_add_test(tc, test_coop_and_daemon_alike);
    tcase_add_test(tc, test_per_call_algorithm);
    tcase_add_test(tc, test_settings_differ_across_daemons);
    suite_add_tcase(s, tc);
    return s;
}
