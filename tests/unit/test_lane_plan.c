/*
 * The lane allreduce's schedule (common/lane_plan.h) for every rank count up to 300 and a few
 * large ones: partners pair up both ways, virtual ranks are a permutation, the sockets a daemon
 * hands out cover every connection once, and running the schedule on numbers leaves every rank
 * with the sum of all.
 */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>

#include "lane_plan.h"
#include "test_list.h"

static void check_n(uint32_t n)
{
    lane_plan_t *p = calloc(n, sizeof(*p));
    uint32_t *vowner = malloc(n * sizeof(*vowner));
    uint64_t *val = malloc(n * sizeof(*val)), *next = malloc(n * sizeof(*next));
    uint64_t edges = 0, sockets = 0, want = 0;

    ck_assert_ptr_nonnull(p);
    for (uint32_t r = 0; r < n; r++) {
        lane_plan(n, r, &p[r]);
        vowner[r] = UINT32_MAX;
    }
    uint32_t pow2 = p[0].pow2, extras = 0;
    CHECK(pow2 <= n && 2 * pow2 > n, "n %u: pow2 %u", n, pow2);
    for (uint32_t r = 0; r < n; r++) {
        CHECK(p[r].pow2 == pow2 && p[r].levels < LANE_LEVELS_MAX, "n %u rank %u: plan", n, r);
        if (p[r].fold != UINT32_MAX) {
            CHECK(p[r].fold < n && p[p[r].fold].fold == r && p[r].extra != p[p[r].fold].extra,
                  "n %u: rank %u folds with %u, not back", n, r, p[r].fold);
            edges++;
        }
        if (p[r].extra) {
            extras++;
            continue;
        }
        CHECK(p[r].vme < pow2 && vowner[p[r].vme] == UINT32_MAX, "n %u: virtual rank %u twice", n,
              p[r].vme);
        vowner[p[r].vme] = r;
        CHECK(lane_plan_real(&p[r], p[r].vme) == r, "n %u: rank %u's virtual rank maps back", n, r);
        for (uint32_t l = 0; l < p[r].levels; l++) {
            uint32_t q = lane_plan_partner(&p[r], l);
            CHECK(q < n && q != r && !p[q].extra && lane_plan_partner(&p[q], l) == r,
                  "n %u level %u: rank %u's partner %u does not pair back", n, l, r, q);
            edges++;
        }
        sockets += lane_plan_up(n, r);
    }
    for (uint32_t r = 0; r < n; r++)
        if (p[r].extra)
            sockets += lane_plan_up(n, r);
    CHECK(extras == n - pow2, "n %u: %u extras", n, extras);
    /* Each connection was counted from both ends; its lower end connects it. */
    CHECK(edges % 2 == 0 && sockets == edges / 2, "n %u: %llu sockets for %llu connections", n,
          (unsigned long long)sockets, (unsigned long long)(edges / 2));

    /* The schedule on numbers: fold, doubling, results back to the extras. */
    for (uint32_t r = 0; r < n; r++) {
        val[r] = (uint64_t)r * r + 1;
        want += val[r];
    }
    for (uint32_t r = 0; r < n; r++)
        if (p[r].fold != UINT32_MAX && !p[r].extra)
            val[r] += val[p[r].fold];
    for (uint32_t l = 0; l < p[0].levels; l++) {
        for (uint32_t r = 0; r < n; r++)
            next[r] = p[r].extra ? val[r] : val[r] + val[lane_plan_partner(&p[r], l)];
        for (uint32_t r = 0; r < n; r++)
            val[r] = next[r];
    }
    for (uint32_t r = 0; r < n; r++)
        if (p[r].extra)
            val[r] = val[p[r].fold];
    for (uint32_t r = 0; r < n; r++)
        CHECK(val[r] == want, "n %u: rank %u ends with %llu, not %llu", n, r,
              (unsigned long long)val[r], (unsigned long long)want);
    free(p);
    free(vowner);
    free(val);
    free(next);
}

START_TEST(test_every_count)
{
    for (uint32_t n = 1; n <= 300; n++)
        check_n(n);
    check_n(1023);
    check_n(1024);
    check_n(1025);
    check_n(4096);
}
END_TEST

START_TEST(test_small_plans)
{
    lane_plan_t p;

    lane_plan(2, 1, &p); /* two ranks: one level, no fold */
    ck_assert_uint_eq(p.levels, 1);
    ck_assert_uint_eq(p.fold, UINT32_MAX);
    ck_assert_uint_eq(lane_plan_partner(&p, 0), 0);
    ck_assert_uint_eq(lane_plan_up(2, 0), 1);
    ck_assert_uint_eq(lane_plan_up(2, 1), 0);
    lane_plan(3, 0, &p); /* three: rank 0 folds into 1, then 1 and 2 double */
    ck_assert(p.extra);
    ck_assert_uint_eq(p.fold, 1);
    lane_plan(3, 1, &p);
    ck_assert(!p.extra);
    ck_assert_uint_eq(p.vme, 0);
    ck_assert_uint_eq(lane_plan_partner(&p, 0), 2);
    ck_assert_uint_eq(lane_plan_up(3, 0), 1);
    ck_assert_uint_eq(lane_plan_up(3, 1), 1);
    ck_assert_uint_eq(lane_plan_up(3, 2), 0);
}
END_TEST

Suite *lane_plan_suite(void)
{
    Suite *s = suite_create("lane_plan");
    TCase *tc = tcase_create("plan");

    tcase_add_test(tc, test_every_count);
    tcase_add_test(tc, test_small_plans);
    suite_add_tcase(s, tc);
    return s;
}
