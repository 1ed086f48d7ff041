/* The RDMA transport's Check suite (test_rdma.c), run by main.c inside the soft-RoCE guest. */
#ifndef HCCLD_TEST_RDMA_TESTS_H
#define HCCLD_TEST_RDMA_TESTS_H

#include <check.h>

Suite *rdma_suite(void);

#endif
