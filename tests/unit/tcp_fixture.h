/* The TCP transport's test fixture over 127.0.0.1 (test_tcp.c), for its other suites. */
#ifndef HCCLD_TESTS_UNIT_TCP_FIXTURE_H
#define HCCLD_TESTS_UNIT_TCP_FIXTURE_H

#include "../transport/pair.h"

extern const tp_fixture_t tcp_fixture;
/* Sets fx to it (a checked fixture). */
void use_tcp(void);

#endif
