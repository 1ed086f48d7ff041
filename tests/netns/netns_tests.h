/* The netns suite (netns_tests.c) and what main.c hands it. */
#ifndef HCCLD_TESTS_NETNS_TESTS_H
#define HCCLD_TESTS_NETNS_TESTS_H

#include <check.h>

#include "topo.h"

/* prefix: the run's namespace prefix ("hcns<pid>"); dir: an existing directory for the
 * daemons' sockets and logs. */
void netns_tests_configure(const char *prefix, const char *dir);
Suite *netns_suite(void);
/* lane_faults.c: lanes under faults (a reset before HcclCommDestroy, a lane down past the hold). */
void netns_add_lane_faults(Suite *s);

#endif
