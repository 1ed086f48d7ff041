/* Every integration suite; main.c runs them against one private daemon. */
#ifndef HCCLD_TESTS_SUITES_H
#define HCCLD_TESTS_SUITES_H

#include <check.h>

#define INTEG_SUITES(X)                                                                            \
    X(colls)                                                                                       \
    X(p2p)                                                                                         \
    X(api)                                                                                         \
    X(reg)                                                                                         \
    X(config)                                                                                      \
    X(config_retry)                                                                                \
    X(hostile)                                                                                     \
    X(bootstrap)                                                                                   \
    X(multinode)                                                                                   \
    X(determinism)                                                                                 \
    X(service)                                                                                     \
    X(qos)                                                                                         \
    X(prof)                                                                                        \
    X(faults)                                                                                      \
    X(faultloop)                                                                                   \
    X(soak)

#define X(name) Suite *name##_suite(void);
INTEG_SUITES(X)
#undef X

#endif
