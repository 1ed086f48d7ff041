#include <stdlib.h>

#include "ring.h"
#include "test_list.h"

typedef struct ring_fixture {
    void *mem;
    ring_t prod, cons;
} ring_fixture_t;

static void fixture(ring_fixture_t *f, uint32_t entries)
{
    f->mem = aligned_alloc(64, sizeof(ring_hdr_t) + entries * sizeof(desc_t));
    ring_format(f->mem, entries);
    ring_attach(&f->prod, f->mem, entries, sizeof(desc_t));
    ring_attach(&f->cons, f->mem, entries, sizeof(desc_t));
}

START_TEST(test_fifo_and_wrap)
{
    ring_fixture_t f;
    desc_t d = {0}, out;
    uint64_t next_in = 0, next_out = 0;

    fixture(&f, 8);
    /* Many laps, with the ring at every fill level, keep order and content. */
    for (int round = 0; round < 1000; round++) {
        int push = round % 9, pop = (round * 5) % 9;
        for (int i = 0; i < push; i++) {
            d.tag = next_in;
            if (ring_push(&f.prod, &d) == 0)
                next_in++;
            else
                ck_assert_int_eq(ring_used(&f.prod, 1), 8);
        }
        for (int i = 0; i < pop; i++) {
            int rc = ring_pop(&f.cons, &out);
            if (rc == -EAGAIN) {
                ck_assert_uint_eq(next_out, next_in);
                break;
            }
            ck_assert_int_eq(rc, 0);
            ck_assert_uint_eq(out.tag, next_out++);
        }
    }
    free(f.mem);
}
END_TEST

START_TEST(test_full_and_empty)
{
    ring_fixture_t f;
    desc_t d = {0};

    fixture(&f, 4);
    ck_assert_int_eq(ring_pop(&f.cons, &d), -EAGAIN);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ring_push(&f.prod, &d), 0);
    ck_assert_int_eq(ring_push(&f.prod, &d), -EAGAIN);
    free(f.mem);
}
END_TEST

START_TEST(test_corrupt_indices)
{
    ring_fixture_t f;
    desc_t d = {0};

    fixture(&f, 4);
    /* A hostile producer claims more entries than the ring holds. */
    f.prod.hdr->tail = 1000;
    ck_assert_int_eq(ring_pop(&f.cons, &d), -EPROTO);
    /* A hostile consumer moves head past the tail. */
    f.prod.hdr->tail = 0;
    f.prod.hdr->head = 77;
    ck_assert_int_eq(ring_push(&f.prod, &d), -EPROTO);
    free(f.mem);
}
END_TEST

START_TEST(test_index_wraps_at_2_32)
{
    ring_fixture_t f;
    desc_t d = {.tag = 42}, out;

    fixture(&f, 4);
    f.prod.mine = f.cons.mine = UINT32_MAX - 1;
    f.prod.hdr->head = f.prod.hdr->tail = UINT32_MAX - 1;
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ring_push(&f.prod, &d), 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(ring_pop(&f.cons, &out), 0);
        ck_assert_uint_eq(out.tag, 42);
    }
    ck_assert_int_eq(ring_pop(&f.cons, &out), -EAGAIN);
    free(f.mem);
}
END_TEST

Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = tcase_create("ring");

    tcase_add_test(tc, test_fifo_and_wrap);
    tcase_add_test(tc, test_full_and_empty);
    tcase_add_test(tc, test_corrupt_indices);
    tcase_add_test(tc, test_index_wraps_at_2_32);
    suite_add_tcase(s, tc);
    return s;
}
