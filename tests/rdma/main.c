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
    const char *lvl = getenv("HCCL_DEBUG");
    int failed;

    /* The refusals the tests provoke log errors; HCCL_DEBUG=debug shows the rest too. */
    log_init("rdma_tests",
             lvl != NULL && log_level_parse(lvl) >= 0 ? log_level_parse(lvl) : LOG_WARN);
    srunner_run_all(sr, CK_VERBOSE);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
