/*
 * A span comm's event queue (daemon/span/ops.c) when memory runs out: the event that could not
 * be queued must not vanish, or whoever waits for it (a collective, a send, the comm's breakage)
 * waits forever. The events queued before it come out in order, then BROKEN with
 * HCCL_E_MEMORY; the comm's other queues and comms are untouched.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "hccl/hccl.h"
#include "span/span_int.h"
#include "test_list.h"

static void *no_memory(size_t bytes)
{
    (void)bytes;
    return NULL;
}

START_TEST(test_span_ev_lost_breaks)
{
    span_comm_t *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));
    span_ev_t ev;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    a->id = 5;
    b->id = 6;
    for (uint64_t i = 0; i < 8; i++)
        span_ev_push(a, SPAN_EV_P2P_DONE)->tag = i; /* fills the first 8 slots */
    span_ev_alloc = no_memory;
    span_ev_t *lost = span_ev_push(a, SPAN_EV_COLL_DONE);
    lost->status = HCCL_E_TIMEOUT; /* written by its caller, harmlessly */
    span_ev_t *other = span_ev_push(b, SPAN_EV_BROKEN);
    span_ev_alloc = malloc;
    ck_assert_ptr_ne(lost, other);
    for (uint64_t i = 0; i < 8; i++) {
        ck_assert_int_eq(span_ops.event(a, &ev), 1);
        ck_assert_int_eq(ev.kind, SPAN_EV_P2P_DONE);
        ck_assert_uint_eq(ev.tag, i);
    }
    ck_assert_int_eq(span_ops.event(a, &ev), 1);
    ck_assert_int_eq(ev.kind, SPAN_EV_BROKEN);
    ck_assert_int_eq(ev.status, HCCL_E_MEMORY);
    ck_assert_str_eq(ev.why, "out of memory: 1 events of the comm were lost");
    ck_assert_int_eq(span_ops.event(a, &ev), 0);
    /* b lost its first event too: it breaks as well, independently of a. */
    ck_assert_int_eq(span_ops.event(b, &ev), 1);
    ck_assert_int_eq(ev.kind, SPAN_EV_BROKEN);
    ck_assert_int_eq(ev.status, HCCL_E_MEMORY);
    ck_assert_int_eq(span_ops.event(b, &ev), 0);
    free(a->evq);
    free(a);
    free(b);
}
END_TEST

Suite *span_ev_suite(void)
{
    Suite *s = suite_create("span_ev");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_span_ev_lost_breaks);
    suite_add_tcase(s, tc);
    return s;
}
