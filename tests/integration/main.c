/* Integration tests: starts a private hccld, runs the suites (or those named), stops it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "suites.h"

static int wanted(int argc, char **argv, const char *name)
{
    if (argc < 2)
        return 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], name) == 0)
            return 1;
    return 0;
}

int main(int argc, char **argv)
{
    SRunner *sr = NULL;
    pid_t daemon = harness_daemon_start(NULL);

    if (daemon <= 0) {
        fprintf(stderr, "integration_tests: could not start hccld (set HCCLD_BIN)\n");
        return 1;
    }
#define X(name)                                                                                    \
    if (wanted(argc, argv, #name)) {                                                               \
        if (sr == NULL)                                                                            \
            sr = srunner_create(name##_suite());                                                   \
        else                                                                                       \
            srunner_add_suite(sr, name##_suite());                                                 \
    }
    INTEG_SUITES(X)
#undef X
    if (sr == NULL) {
        harness_daemon_stop(daemon);
        fprintf(stderr, "integration_tests: no such suite\n");
        return 2;
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    int alive = harness_alive(daemon);
    harness_daemon_stop(daemon);
    if (!alive) {
        fprintf(stderr, "integration_tests: the daemon died during the tests\n");
        return 1;
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
