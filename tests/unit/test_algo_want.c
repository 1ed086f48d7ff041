/* HCCL_ALGO, hcclAlgo and HCCL_ALGORITHM merged (daemon/algo/algo_want.c): the shorthand's
 * names, what forced each collective, HCCL_ALGO winning a disagreement and the notice saying
 * so, and the parser's reasons for bad values. */
#include <errno.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/algo_want.h"
#include "shm.h"
#include "test_list.h"

static const int colls[] = {DESC_ALLREDUCE, DESC_BROADCAST, DESC_ALLGATHER, DESC_REDUCE_SCATTER,
                            DESC_ALLTOALL,  DESC_REDUCE,    DESC_SCATTER,   DESC_BARRIER};

static int resolve(const char *algo, const char *algorithm, int by_config, algo_env_t *e, char *err,
                   char *notice)
{
    algo_want_t w;

    ck_assert_int_eq(algo_want_set(&w, algo, algorithm, by_config, 0, err, 256), 0);
    return algo_want_resolve(&w, e, err, 256, notice, 256);
}

START_TEST(test_shorthands)
{
    static const struct {
        const char *name;
        int algo;
    } cases[] = {{"RING", ALGO_RING},    {"mesh", ALGO_MESH},         {"RHD", ALGO_HDR},
                 {"Tree", ALGO_TREE},    {"PAIRWISE", ALGO_PAIRWISE}, {"H-D_R", ALGO_HDR},
                 {"fullmesh", ALGO_MESH}};
    char err[256], notice[256];
    algo_env_t e;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_int_eq(resolve(NULL, cases[i].name, 0, &e, err, notice), 0);
        ck_assert_str_eq(notice, "");
        for (size_t k = 0; k < sizeof(colls) / sizeof(colls[0]); k++) {
            int kind = colls[k], serves = algo_serves(cases[i].algo, kind);
            ck_assert_msg(e.level1[kind] == (serves ? cases[i].algo : -1), "%s kind %d: %d",
                          cases[i].name, kind, e.level1[kind]);
            ck_assert_int_eq(e.src[kind], serves ? ALGO_SRC_HCCL_ALGORITHM : ALGO_SRC_MODEL);
        }
    }
    /* Nothing set: everything is the cost model's. */
    ck_assert_int_eq(resolve("", "", 0, &e, err, notice), 0);
    for (size_t k = 0; k < sizeof(colls) / sizeof(colls[0]); k++) {
        ck_assert_int_eq(e.level1[colls[k]], -1);
        ck_assert_int_eq(e.src[colls[k]], ALGO_SRC_MODEL);
    }
}
END_TEST

START_TEST(test_hccl_algo_wins)
{
    char err[256], notice[256];
    algo_env_t e;

    /* allreduce from HCCL_ALGO, the others from HCCL_ALGORITHM; the disagreement is named. */
    ck_assert_int_eq(resolve("allreduce=level1:ring", "MESH", 0, &e, err, notice), 0);
    ck_assert_int_eq(e.level1[DESC_ALLREDUCE], ALGO_RING);
    ck_assert_int_eq(e.src[DESC_ALLREDUCE], ALGO_SRC_HCCL_ALGO);
    ck_assert_int_eq(e.level1[DESC_ALLGATHER], ALGO_MESH);
    ck_assert_int_eq(e.src[DESC_ALLGATHER], ALGO_SRC_HCCL_ALGORITHM);
    ck_assert_int_eq(e.level1[DESC_ALLTOALL], ALGO_MESH);
    ck_assert_str_eq(notice, "allreduce (ring, not fullmesh): HCCL_ALGO=\"allreduce=level1:ring\" "
                             "wins over HCCL_ALGORITHM=MESH");
    /* Agreeing settings say nothing; the global item leaves alltoall to the shorthand. */
    ck_assert_int_eq(resolve("level0:NA;level1:ring", "ring", 0, &e, err, notice), 0);
    ck_assert_str_eq(notice, "");
    ck_assert_int_eq(e.src[DESC_ALLREDUCE], ALGO_SRC_HCCL_ALGO);
    ck_assert_int_eq(resolve("level0:NA;level1:ring", "MESH", 0, &e, err, notice), 0);
    ck_assert_int_eq(e.level1[DESC_ALLTOALL], ALGO_MESH);
    ck_assert_int_eq(e.src[DESC_ALLTOALL], ALGO_SRC_HCCL_ALGORITHM);
    ck_assert_ptr_nonnull(strstr(notice, "allreduce (ring, not fullmesh), broadcast (ring, not "
                                         "fullmesh)"));
    /* A comm config's hcclAlgo takes HCCL_ALGO's place and says so. */
    ck_assert_int_eq(resolve("level1:tree", "RHD", 1, &e, err, notice), 0);
    ck_assert_int_eq(e.level1[DESC_REDUCE], ALGO_TREE);
    ck_assert_int_eq(e.src[DESC_REDUCE], ALGO_SRC_CONFIG);
    ck_assert_ptr_nonnull(
        strstr(notice, ": hcclAlgo=\"level1:tree\" wins over HCCL_ALGORITHM=RHD"));
}
END_TEST

START_TEST(test_bad_values)
{
    char err[256], notice[256], long_algo[ALGO_WANT_ALGO_MAX + 8];
    algo_want_t w;
    algo_env_t e;

    ck_assert_int_eq(resolve(NULL, "bogus", 0, &e, err, notice), -EINVAL);
    ck_assert_str_eq(err, "HCCL_ALGORITHM: unknown algorithm 'bogus' (RING, MESH, RHD, TREE or "
                          "PAIRWISE)");
    ck_assert_int_eq(resolve(NULL, "AHC", 0, &e, err, notice), -EINVAL);
    ck_assert_int_eq(resolve(NULL, "NHR", 0, &e, err, notice), 0); /* an HCCL_ALGO name */
    /* A bad HCCL_ALGO fails with its own parser's reason, whatever HCCL_ALGORITHM says. */
    ck_assert_int_eq(resolve("level0:NA;level1:bogus", "RING", 0, &e, err, notice), -EINVAL);
    ck_assert_str_eq(err, "HCCL_ALGO: unknown level1 algorithm 'bogus' (ring, H-D_R, fullmesh, "
                          "tree, pairwise, NB, NHR or NA)");
    ck_assert_int_eq(resolve("level1:bogus", "", 1, &e, err, notice), -EINVAL);
    ck_assert_str_eq(err, "hcclAlgo: unknown level1 algorithm 'bogus' (ring, H-D_R, fullmesh, "
                          "tree, pairwise, NB, NHR or NA)");
    memset(long_algo, 'a', sizeof(long_algo) - 1);
    long_algo[sizeof(long_algo) - 1] = '\0';
    ck_assert_int_eq(algo_want_set(&w, long_algo, "", 0, 0, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "HCCL_ALGO is 519 characters long; at most 511 are accepted");
}
END_TEST

Suite *algo_want_suite(void)
{
    Suite *s = suite_create("algo_want");
    TCase *tc = tcase_create("algo_want");

    tcase_add_test(tc, test_shorthands);
    tcase_add_test(tc, test_hccl_algo_wins);
    tcase_add_test(tc, test_bad_values);
    suite_add_tcase(s, tc);
    return s;
}
