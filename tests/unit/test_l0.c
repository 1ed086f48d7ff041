/* The level-0 engine against a direct reference, for every kind, split into 1..3 parts. */
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"
#include "l0.h"
#include "shm.h"
#include "test_list.h"

#define MAXR 5

typedef struct l0_fix {
    int32_t *send[MAXR], *recv[MAXR];
    l0_rank_t rk[MAXR];
} l0_fix_t;

static void fix_init(l0_fix_t *f, uint32_t n, uint64_t count)
{
    for (uint32_t r = 0; r < n; r++) {
        f->send[r] = malloc(n * count * 4 + 4);
        f->recv[r] = malloc(n * count * 4 + 4);
        for (uint64_t i = 0; i < n * count; i++)
            f->send[r][i] = (int32_t)(r * 1000003 + i);
        memset(f->recv[r], 0xAB, n * count * 4 + 4);
        f->rk[r] = (l0_rank_t){.send = (uint8_t *)f->send[r],
                               .recv = (uint8_t *)f->recv[r],
                               .send_stride = count * 4,
                               .recv_stride = count * 4};
    }
}

static void fix_free(l0_fix_t *f, uint32_t n)
{
    for (uint32_t r = 0; r < n; r++) {
        free(f->send[r]);
        free(f->recv[r]);
    }
}

static int32_t expect(int kind, uint32_t n, uint32_t r, uint32_t root, uint64_t count, uint64_t i)
{
    int32_t acc = 0;

    switch (kind) {
    case DESC_ALLREDUCE:
    case DESC_REDUCE:
        for (uint32_t q = 0; q < n; q++)
            acc += (int32_t)(q * 1000003 + i);
        return acc;
    case DESC_REDUCE_SCATTER:
        for (uint32_t q = 0; q < n; q++)
            acc += (int32_t)(q * 1000003 + r * count + i);
        return acc;
    case DESC_BROADCAST: return (int32_t)(root * 1000003 + i);
    case DESC_ALLGATHER: return (int32_t)((i / count) * 1000003 + i % count);
    case DESC_SCATTER: return (int32_t)(root * 1000003 + r * count + i);
    case DESC_ALLTOALL: return (int32_t)((i / count) * 1000003 + r * count + i % count);
    default: return 0;
    }
}

static uint64_t out_len(int kind, uint32_t n, uint64_t count)
{
    return kind == DESC_ALLGATHER || kind == DESC_ALLTOALL ? n * count : count;
}

START_TEST(test_kinds)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_REDUCE,  DESC_REDUCE_SCATTER, DESC_BROADCAST,
                                DESC_ALLGATHER, DESC_SCATTER, DESC_ALLTOALL};
    static const uint64_t counts[] = {1, 7, 16, 1000, 70001};

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        for (uint32_t n = 1; n <= MAXR; n++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
                for (unsigned parts = 1; parts <= 3; parts++) {
                    l0_fix_t f;
                    uint32_t root = n - 1;
                    fix_init(&f, n, counts[c]);
                    l0_op_t op = {.kind = (uint8_t)kinds[k],
                                  .dtype = HCCL_DATA_TYPE_INT32,
                                  .redop = HCCL_REDUCE_SUM,
                                  .root = root,
                                  .nranks = n,
                                  .count = counts[c],
                                  .ranks = f.rk};
                    for (unsigned p = 0; p < parts; p++)
                        l0_run_part(&op, p, parts);
                    for (uint32_t r = 0; r < n; r++) {
                        uint64_t len = out_len(kinds[k], n, counts[c]);
                        if (kinds[k] == DESC_REDUCE && r != root)
                            continue;
                        uint64_t bad = 0, first = 0;
                        /* Count first, assert once: Check records every assertion. */
                        for (uint64_t i = 0; i < len; i++)
                            if (f.recv[r][i] != expect(kinds[k], n, r, root, counts[c], i) &&
                                bad++ == 0)
                                first = i;
                        ck_assert_msg(
                            bad == 0,
                            "kind %d n %u count %llu parts %u rank %u: %llu wrong from %llu",
                            kinds[k], n, (unsigned long long)counts[c], parts, r,
                            (unsigned long long)bad, (unsigned long long)first);
                        /* Nothing past the output is touched. */
                        ck_assert_uint_eq((uint32_t)f.recv[r][len], 0xABABABABu);
                    }
                    fix_free(&f, n);
                }
}
END_TEST

START_TEST(test_inplace_allreduce)
{
    l0_fix_t f;
    uint32_t n = 4;
    uint64_t count = 50000;

    fix_init(&f, n, count);
    for (uint32_t r = 0; r < n; r++)
        f.rk[r].recv = f.rk[r].send;
    l0_op_t op = {.kind = DESC_ALLREDUCE,
                  .dtype = HCCL_DATA_TYPE_INT32,
                  .redop = HCCL_REDUCE_SUM,
                  .nranks = n,
                  .count = count,
                  .ranks = f.rk};
    l0_run_part(&op, 0, 2);
    l0_run_part(&op, 1, 2);
    uint64_t bad = 0;
    for (uint32_t r = 0; r < n; r++)
        for (uint64_t i = 0; i < count; i++)
            bad += f.send[r][i] != expect(DESC_ALLREDUCE, n, r, 0, count, i);
    ck_assert_uint_eq(bad, 0);
    fix_free(&f, n);
}
END_TEST

/* Each rank computing only its own output gives the same outputs as the split run. */
START_TEST(test_only_own_output)
{
    static const int kinds[] = {DESC_ALLREDUCE, DESC_REDUCE,  DESC_REDUCE_SCATTER, DESC_BROADCAST,
                                DESC_ALLGATHER, DESC_SCATTER, DESC_ALLTOALL};

    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        for (uint32_t n = 1; n <= MAXR; n++) {
            l0_fix_t f;
            uint64_t count = 333, bad = 0;
            fix_init(&f, n, count);
            for (uint32_t me = 0; me < n; me++) {
                l0_op_t op = {.kind = (uint8_t)kinds[k],
                              .dtype = HCCL_DATA_TYPE_INT32,
                              .redop = HCCL_REDUCE_SUM,
                              .root = 0,
                              .nranks = n,
                              .count = count,
                              .only_plus1 = me + 1,
                              .ranks = f.rk};
                l0_run_part(&op, 0, 1);
                /* Nobody else's output was written yet. */
                for (uint32_t q = me + 1; q < n; q++)
                    bad += (uint32_t)f.recv[q][0] != 0xABABABABu;
            }
            for (uint32_t r = 0; r < n; r++) {
                if (kinds[k] == DESC_REDUCE && r != 0)
                    continue;
                for (uint64_t i = 0; i < out_len(kinds[k], n, count); i++)
                    bad += f.recv[r][i] != expect(kinds[k], n, r, 0, count, i);
            }
            ck_assert_msg(bad == 0, "kind %d n %u: %llu wrong", kinds[k], n,
                          (unsigned long long)bad);
            fix_free(&f, n);
        }
}
END_TEST

Suite *l0_suite(void)
{
    Suite *s = suite_create("l0");
    TCase *tc = tcase_create("l0");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_kinds);
    tcase_add_test(tc, test_inplace_allreduce);
    tcase_add_test(tc, test_only_own_output);
    suite_add_tcase(s, tc);
    return s;
}
