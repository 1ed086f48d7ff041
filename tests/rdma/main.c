/*
 * Runs the RDMA transport's suite: the rxe cases where RDMA devices exist (tests/rdma/run.sh
 * boots a guest with two), the no-device case elsewhere. Exit 0 only if every test passed.
 */
#include <stdlib.h>

#include "log.h"
#include "rdma_tests.h"

int main(void)
{
    SRunner *sr = srunner_create(rdma_suite());
    const char *lvl = getenv("HCCL_DEBUG"), *only = getenv("HCCLD_RDMA_TEST_CASE");
    int failed;

    /* The guest gets HCCL* variables only: one case of the suite ("rxe", "resume"). */
    if (only != NULL && *only != '\0')
        setenv("CK_RUN_CASE", only, 1);
    /* The refusals the tests provoke log errors; HCCL_DEBUG=debug shows the rest too. */
    log_init("rdma_tests",
             lvl != NULL && log_level_parse(lvl) >= 0 ? log_level_parse(lvl) : LOG_WARN);
    srunner_run_all(sr, CK_VERBOSE);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
