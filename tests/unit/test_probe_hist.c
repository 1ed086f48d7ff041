/* Link measurements blended with the recent ones of the same daemons: exact medians, only the
 * same set of daemons, only recent ones, and a full table that evicts the oldest. */
#include <string.h>

#include "span/probe_hist.h"
#include "test_list.h"

#define S 1000000000ull

static void fill(double f[PROBE_HIST_FIGS], double v)
{
    for (int i = 0; i < PROBE_HIST_FIGS; i++)
        f[i] = v * (i + 1);
}

static void assert_figs(const double f[PROBE_HIST_FIGS], double v)
{
    for (int i = 0; i < PROBE_HIST_FIGS; i++)
        ck_assert_double_eq_tol(f[i], v * (i + 1), 1e-12);
}

START_TEST(test_first_is_kept)
{
    probe_hist_t h;
    double f[PROBE_HIST_FIGS];

    memset(&h, 0, sizeof(h));
    fill(f, 7);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, 10 * S, f), 0);
    assert_figs(f, 7);
}
END_TEST

START_TEST(test_medians)
{
    probe_hist_t h;
    double f[PROBE_HIST_FIGS];
    const double v[] = {10, 40, 20};

    memset(&h, 0, sizeof(h));
    for (int i = 0; i < 3; i++) {
        fill(f, v[i]);
        probe_hist_blend(&h, 42, (10 + (uint64_t)i) * S, f);
    }
    /* {10, 40, 20} then 30: the middle two of four, (20 + 30) / 2. */
    fill(f, 30);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, 13 * S, f), 3);
    assert_figs(f, 25);
    /* {10, 40, 20, 30} then 1000: odd count, the middle one. */
    fill(f, 1000);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, 14 * S, f), 4);
    assert_figs(f, 30);
}
END_TEST

START_TEST(test_most_recent_only)
{
    probe_hist_t h;
    double f[PROBE_HIST_FIGS];

    memset(&h, 0, sizeof(h));
    for (int i = 1; i <= 10; i++) {
        fill(f, i);
        probe_hist_blend(&h, 42, (uint64_t)i * S, f);
    }
    /* The six newest (5..10) and 100: 8. */
    fill(f, 100);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, 11 * S, f), PROBE_HIST_USE);
    assert_figs(f, 8);
}
END_TEST

START_TEST(test_other_daemons_and_old_ones_stay_out)
{
    probe_hist_t h;
    double f[PROBE_HIST_FIGS];
    uint64_t t = PROBE_HIST_MAX_AGE_NS + 100 * S;

    memset(&h, 0, sizeof(h));
    fill(f, 1);
    probe_hist_blend(&h, 42, 50 * S, f); /* too old by t */
    fill(f, 2);
    probe_hist_blend(&h, 43, t - S, f); /* other daemons */
    fill(f, 3);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, t, f), 0);
    assert_figs(f, 3);
}
END_TEST

START_TEST(test_full_table_evicts_the_oldest)
{
    probe_hist_t h;
    double f[PROBE_HIST_FIGS];

    memset(&h, 0, sizeof(h));
    fill(f, 10);
    probe_hist_blend(&h, 42, 1 * S, f);
    for (int i = 0; i < PROBE_HIST_SLOTS - 1; i++) {
        fill(f, 99);
        probe_hist_blend(&h, 1000 + (uint64_t)i, (2 + (uint64_t)i) * S, f);
    }
    /* Key 42's only entry is the oldest of a full table: read, then replaced. */
    fill(f, 20);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, 100 * S, f), 1);
    assert_figs(f, 15);
    fill(f, 40);
    ck_assert_uint_eq(probe_hist_blend(&h, 42, 101 * S, f), 1);
    assert_figs(f, 30);
    /* The oldest other key went for that one. */
    fill(f, 5);
    ck_assert_uint_eq(probe_hist_blend(&h, 1000, 102 * S, f), 0);
}
END_TEST

START_TEST(test_median)
{
    double odd[] = {5, 1, 9, 3, 7}, even[] = {4, 1, 3, 2};

    ck_assert_double_eq(probe_median(odd, 5), 5);
    ck_assert_double_eq(probe_median(even, 4), 2.5);
    ck_assert_double_eq(probe_median(odd, 1), 5);
    /* The input keeps its order. */
    ck_assert_double_eq(odd[0], 5);
    ck_assert_double_eq(odd[1], 1);
    ck_assert_double_eq(even[0], 4);
}
END_TEST

/* The exchange less the quickest round trip, not the median one; half the exchange when the
 * round trip is as long as the exchange. */
START_TEST(test_beta)
{
    const double mib = 1 << 20;
    double loaded[] = {432, 40, 450, 431, 433, 45, 500}, slow[] = {900, 800, 1000};

    /* The median round trip (432 us) would leave 8 us: 131 GB/s. */
    ck_assert_double_eq_tol(probe_beta(440, loaded, 7, 1u << 20), 400 / mib, 1e-15);
    ck_assert_double_eq_tol(probe_beta(440, slow, 3, 1u << 20), 220 / mib, 1e-15);
    ck_assert_double_eq_tol(probe_beta(440, slow, 0, 1u << 20), 440 / mib, 1e-15);
}
END_TEST

START_TEST(test_key)
{
    char a[3][16] = {"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1"};
    char b[3][16] = {"10.0.0.2:1", "10.0.0.1:1", "10.0.0.3:1"};
    char c[2][16] = {"ab", "c"}, d[2][16] = {"a", "bc"};

    ck_assert_uint_eq(probe_hist_key(a[0], 3, 16), probe_hist_key(a[0], 3, 16));
    ck_assert_uint_ne(probe_hist_key(a[0], 3, 16), probe_hist_key(b[0], 3, 16));
    ck_assert_uint_ne(probe_hist_key(a[0], 3, 16), probe_hist_key(a[0], 2, 16));
    ck_assert_uint_ne(probe_hist_key(c[0], 2, 16), probe_hist_key(d[0], 2, 16));
    ck_assert_uint_ne(probe_hist_key(a[0], 0, 16), 0);
}
END_TEST

Suite *probe_hist_suite(void)
{
    Suite *s = suite_create("probe_hist");
    TCase *tc = tcase_create("blend");

    tcase_add_test(tc, test_first_is_kept);
    tcase_add_test(tc, test_medians);
    tcase_add_test(tc, test_most_recent_only);
    tcase_add_test(tc, test_other_daemons_and_old_ones_stay_out);
    tcase_add_test(tc, test_full_table_evicts_the_oldest);
    tcase_add_test(tc, test_median);
    tcase_add_test(tc, test_beta);
    tcase_add_test(tc, test_key);
    suite_add_tcase(s, tc);
    return s;
}
