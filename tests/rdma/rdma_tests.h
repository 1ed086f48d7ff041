/* The RDMA transport's Check suite (test_rdma.c), run by main.c inside the soft-RoCE guest. */
#ifndef HCCLD_TEST_RDMA_TESTS_H
#define HCCLD_TEST_RDMA_TESTS_H

#include <check.h>

Suite *rdma_suite(void);

/* test_rdma.c's fixture and helpers, for the other cases. */
void use_rdma(void);
/* system(cmd): 0, or -1 if it failed. */
int sh(const char *cmd);
/* Waits up to ms until both rxe ports are ACTIVE again: 0 or -1. */
int ports_active(long long ms);
/* Whether the test may change the network (in the guest); says so if not. */
int in_guest(const char *test);
/* HCCL_RDMA_TIMEOUT and HCCL_RDMA_RETRY_CNT short: a lost peer shows within a second. */
void short_retries(void);

/* test_rdma_resume.c: resumable connections (op retry) across a QP in error and a link down;
 * adds its cases to tc (run with the rxe devices, case "resume"). */
void rdma_resume_add(TCase *tc);

#endif
