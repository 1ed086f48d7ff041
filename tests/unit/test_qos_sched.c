/* The data path's QoS: token buckets hold a class to its cap on average, and a class of higher
 * priority that is sending holds back the lower ones but not its peers or betters. */
#include "sched/qos_sched.h"
#include "test_list.h"

#define MS 1000000ull

START_TEST(test_cap_on_average)
{
    qos_sched_t q = {0};
    uint64_t now = 1000 * MS, sent = 0;

    /* 8 Gbit/s = 1 GB/s: over one simulated second of 100 us steps, 256 KiB rounds. */
    qos_sched_set(&q, 0, 0, 8000000000ull, -1, now);
    for (int step = 0; step < 10000; step++, now += 100000)
        while (qos_admit(&q, 0, 256 << 10, now))
            sent += 256 << 10;
    /* The burst allowance (10 ms) and one round of overdraft on top of 1 GB. */
    ck_assert_uint_ge(sent, 1000000000ull - (256 << 10));
    ck_assert_uint_le(sent, 1000000000ull + 10000000ull + 2 * (256 << 10));
}
END_TEST

START_TEST(test_uncapped)
{
    qos_sched_t q = {0};

    qos_sched_set(&q, 0, 0, 0, -1, 1);
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(qos_admit(&q, 0, 1 << 30, 1), 1);
}
END_TEST

START_TEST(test_strict_priority)
{
    qos_sched_t q = {0};
    enum { HIGH, MEDIUM, LOW };

    qos_sched_set(&q, HIGH, 0, 0, -1, 1);
    qos_sched_set(&q, MEDIUM, 1, 0, -1, 1);
    qos_sched_set(&q, LOW, 2, 0, -1, 1);
    qos_sched_pass(&q, 2);
    qos_active(&q, MEDIUM, 2);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 2), 0);
    ck_assert_int_eq(qos_admit(&q, MEDIUM, 4096, 2), 1);
    ck_assert_int_eq(qos_admit(&q, HIGH, 4096, 2), 1);
    qos_sched_pass(&q, 2);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 3), 1);
    /* A class over its cap waits, and does not hold back the others. */
    qos_sched_set(&q, HIGH, 0, 8000, -1, 3); /* 1000 B/s */
    ck_assert_int_eq(qos_admit(&q, HIGH, 1 << 20, 4), 1);
    ck_assert_int_eq(qos_admit(&q, HIGH, 4096, 5), 0);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 5), 1);
    /* Unknown classes are not held. */
    ck_assert_int_eq(qos_admit(&q, 7, 4096, 5), 1);
    ck_assert_int_eq(qos_admit(&q, -1, 4096, 5), 1);
}
END_TEST

/* A class stays active for its hold after its last op: the next one, a client wake-up away,
 * does not find a lower class's round on the wire. After the hold, the lower class goes. */
START_TEST(test_hold_after_op)
{
    qos_sched_t q = {0};
    enum { HIGH, LOW };

    qos_sched_set(&q, HIGH, 0, 0, -1, 1);
    qos_sched_set(&q, LOW, 2, 0, -1, 1);
    qos_sched_set_hold(&q, HIGH, 50000); /* 50 us */
    qos_sched_pass(&q, 1000000);
    qos_active(&q, HIGH, 1000000);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 1000000), 0);
    /* HIGH's op ended; 30 us later it is still held active, 60 us later no more. */
    qos_sched_pass(&q, 1030000);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 1030000), 0);
    qos_sched_pass(&q, 1060000);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 1060000), 1);
    /* Without a hold, the lower class goes as soon as the op ends. */
    qos_sched_set_hold(&q, HIGH, 0);
    qos_sched_pass(&q, 2000000);
    qos_active(&q, HIGH, 2000000);
    qos_sched_pass(&q, 2000001);
    ck_assert_int_eq(qos_admit(&q, LOW, 4096, 2000001), 1);
}
END_TEST

Suite *qos_sched_suite(void)
{
    Suite *s = suite_create("qos_sched");
    TCase *tc = tcase_create("buckets");

    tcase_add_test(tc, test_cap_on_average);
    tcase_add_test(tc, test_uncapped);
    tcase_add_test(tc, test_strict_priority);
    tcase_add_test(tc, test_hold_after_op);
    suite_add_tcase(s, tc);
    return s;
}
