/* Every unit suite, one per module (tests/unit/test_<module>.c defines <module>_suite()). */
#ifndef HCCLD_TEST_LIST_H
#define HCCLD_TEST_LIST_H

#include <check.h>

#define UNIT_SUITES(X)                                                                             \
    X(half)                                                                                        \
    X(reduce)                                                                                      \
    X(ring)                                                                                        \
    X(frame)                                                                                       \
    X(desc)                                                                                        \
    X(l0)                                                                                          \
    X(env)                                                                                         \
    X(algo)                                                                                        \
    X(algo_want)                                                                                   \
    X(tcp)                                                                                         \
    X(tcp_resume)                                                                                  \
    X(stripe)                                                                                      \
    X(tp_cm)                                                                                       \
    X(qos)                                                                                         \
    X(qos_sched)                                                                                   \
    X(probe_hist)                                                                                  \
    X(bootstrap)                                                                                   \
    X(l1)                                                                                          \
    X(engine)                                                                                      \
    X(form)                                                                                        \
    X(span_ev)                                                                                     \
    X(lane_plan)                                                                                   \
    X(text)                                                                                        \
    X(retry_conf)

/*
 * Like ck_assert_msg, for loops over many values: Check records the location of every passing
 * ck_assert (a message to the parent process), which is far too slow for millions of checks.
 */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

#define X(name) Suite *name##_suite(void);
UNIT_SUITES(X)
#undef X

#endif
