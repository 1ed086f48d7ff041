#include <stdlib.h>

#include "desc_check.h"
#include "dtype.h"
#include "test_list.h"

#define ARENA (1ull << 20)

static uint64_t rnd64(void)
{
    return (uint64_t)rand() << 42 ^ (uint64_t)rand() << 21 ^ (uint64_t)rand();
}

/* An independent oracle in 128-bit arithmetic: does every block fit the arena? */
static int side_ok(const desc_side_t *s)
{
    unsigned __int128 end;

    if (s->nblocks == 0 || s->bytes == 0)
        return 1;
    if (s->nblocks > 1 && s->stride < s->bytes)
        return 0;
    end = (unsigned __int128)s->off + (unsigned __int128)(s->nblocks - 1) * s->stride + s->bytes;
    return end <= ARENA;
}

/* Random values biased toward the edges, where the bugs are. */
static uint64_t pick(void)
{
    switch (rand() % 6) {
    case 0: return rnd64();
    case 1: return UINT64_MAX - (uint64_t)(rand() % 16);
    case 2: return ARENA - (uint64_t)(rand() % 64);
    case 3: return (uint64_t)(rand() % 64);
    default: return (uint64_t)rand() % (ARENA / 4);
    }
}

START_TEST(test_random_descriptors)
{
    srand(1234);
    for (int i = 0; i < 200000; i++) {
        desc_t d = {.kind = (uint8_t)(rand() % (DESC_KIND_MAX + 2)),
                    .dtype = (uint8_t)(rand() % 14),
                    .redop = (uint8_t)(rand() % 5),
                    .count = pick() / (uint64_t)(1 + rand() % 8),
                    .root = (uint32_t)(rand() % 6),
                    .send_off = pick(),
                    .send_stride = pick(),
                    .recv_off = pick(),
                    .recv_stride = pick()};
        uint32_t n = 1 + (uint32_t)(rand() % 5), rank = (uint32_t)rand() % n;
        const char *why = NULL;
        int rc = desc_check(&d, n, rank, ARENA, &why);
        desc_side_t s, r;
        int expect_ok;

        if (d.kind == DESC_BARRIER) {
            ck_assert_int_eq(rc == 0, d.count == 0);
            continue;
        }
        desc_sides(&d, n, rank, &s, &r);
        unsigned __int128 bytes = (unsigned __int128)d.count * dtype_size(d.dtype);
        expect_ok = d.kind > 0 && d.kind < DESC_KIND_MAX && dtype_valid(d.dtype) &&
                    (!desc_is_reduction(d.kind) || redop_valid(d.redop)) && d.root < n &&
                    bytes <= ARENA && side_ok(&s) && side_ok(&r);
        ck_assert_msg((rc == 0) == expect_ok, "kind %d dtype %d count %llu: rc %d", d.kind, d.dtype,
                      (unsigned long long)d.count, rc);
        if (rc != 0)
            ck_assert_ptr_nonnull(why);
    }
}
END_TEST

START_TEST(test_blocks_per_kind)
{
    desc_t d = {
        .kind = DESC_ALLGATHER, .dtype = HCCL_DATA_TYPE_FP32, .count = 10, .recv_stride = 40};
    desc_side_t s, r;

    desc_sides(&d, 4, 1, &s, &r);
    ck_assert_uint_eq(s.nblocks, 1);
    ck_assert_uint_eq(r.nblocks, 4);
    ck_assert_uint_eq(r.bytes, 40);
    d.kind = DESC_SCATTER;
    d.root = 2;
    desc_sides(&d, 4, 1, &s, &r);
    ck_assert_uint_eq(s.nblocks, 0); /* only the root sends */
    desc_sides(&d, 4, 2, &s, &r);
    ck_assert_uint_eq(s.nblocks, 4);
    d.kind = DESC_REDUCE;
    desc_sides(&d, 4, 1, &s, &r);
    ck_assert_uint_eq(r.nblocks, 0); /* only the root receives */
    /* Overlapping receive blocks are refused. */
    d.kind = DESC_ALLGATHER;
    d.recv_stride = 39;
    const char *why;
    ck_assert_int_eq(desc_check(&d, 4, 0, ARENA, &why), HCCL_E_PARA);
}
END_TEST

Suite *desc_suite(void)
{
    Suite *s = suite_create("desc");
    TCase *tc = tcase_create("desc");

    tcase_add_test(tc, test_random_descriptors);
    tcase_add_test(tc, test_blocks_per_kind);
    suite_add_tcase(s, tc);
    return s;
}
