/*
 * HCCL_ALGO: read from a rank's environment and sent to the daemon in CommInitReq, so the
 * daemon parses whatever a client wrote. A parse that succeeds must only name algorithms that
 * can run their collective; one that fails must say why and leave everything automatic.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algo.h"
#include "algo/algo_env.h"

static int same(const algo_env_t *a, const algo_env_t *b)
{
    return memcmp(a->level1, b->level1, sizeof(a->level1)) == 0 &&
           memcmp(a->src, b->src, sizeof(a->src)) == 0;
}

static void check_result(int rc, const algo_env_t *env, const char *err)
{
    for (int k = 0; k < DESC_KIND_MAX; k++) {
        int a = env->level1[k];
        if (a == -1)
            continue;
        if (rc != 0 || !algo_serves(a, k) || algo_env_op_name(k) == NULL)
            abort();
    }
    if (rc != 0 && err[0] == '\0')
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1), err[256], tiny[8];
    algo_env_t env, again;
    int rc;

    if (s == NULL)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    rc = algo_env_parse(s, &env, err, sizeof(err));
    check_result(rc, &env, err);
    /* The same text gives the same answer, whatever room the caller leaves for the message. */
    if (algo_env_parse(s, &again, tiny, sizeof(tiny)) != rc || !same(&env, &again) ||
        algo_env_parse(s, &again, NULL, 0) != rc || !same(&env, &again))
        abort();
    free(s);
    return 0;
}
