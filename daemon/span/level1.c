/* What ranks ask of the level-1 algorithms, checked for the layers above (span.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "algo/algo_want.h"
#include "span/span_int.h"

int span_level1_check(const char *algo, const char *algorithm, int algo_by_config,
                      int deterministic, char *err, size_t cap, char *notice, size_t ncap)
{
    algo_want_t w;
    algo_env_t env;
    char said[200];

    notice[0] = '\0';
    if (algo_want_set(&w, algo, algorithm, algo_by_config, deterministic, err, cap) != 0 ||
        algo_want_resolve(&w, &env, err, cap, said, sizeof(said)) != 0)
        return -EINVAL;
    if (said[0] != '\0')
        snprintf(notice, ncap, "HCCL_ALGO and HCCL_ALGORITHM disagree on %s", said);
    if (env.instead[0] != '\0') {
        size_t n = strlen(notice);
        snprintf(notice + n, ncap - n, "%s%s: level1 %s (hcclD has not that algorithm)",
                 n ? "; " : "", algo_by_config ? "hcclAlgo" : "HCCL_ALGO", env.instead);
    }
    return 0;
}
