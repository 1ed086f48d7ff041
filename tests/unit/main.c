/* Runs every unit suite of test_list.h; `unit_tests SUITE...` runs only those named. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_list.h"

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

#define X(name)                                                                                    \
    if (wanted(argc, argv, #name)) {                                                               \
        if (sr == NULL)                                                                            \
            sr = srunner_create(name##_suite());                                                   \
        else                                                                                       \
            srunner_add_suite(sr, name##_suite());                                                 \
    }
    UNIT_SUITES(X)
#undef X
    if (sr == NULL) {
        fprintf(stderr, "unit_tests: no such suite\n");
        return 2;
    }
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
