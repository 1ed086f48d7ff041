#include "algo_id.h"

#include <stddef.h>
#include <strings.h>

#include "shm.h"

static const char *const names[ALGO_COUNT] = {
    [ALGO_RING] = "ring", [ALGO_MESH] = "fullmesh",     [ALGO_HDR] = "H-D_R",
    [ALGO_TREE] = "tree", [ALGO_PAIRWISE] = "pairwise", [ALGO_NB] = "NB",
    [ALGO_NHR] = "NHR",
};

int algo_serves(int algo, int kind)
{
    if (algo < 0 || algo >= ALGO_COUNT || kind < DESC_ALLREDUCE || kind > DESC_BARRIER)
        return 0;
    if (algo == ALGO_PAIRWISE)
        return kind == DESC_ALLTOALL;
    if (algo == ALGO_MESH)
        return 1;
    return kind != DESC_ALLTOALL;
}

const char *algo_name(int algo)
{
    return algo >= 0 && algo < ALGO_COUNT ? names[algo] : "?";
}

/* Case does not matter: HCCL's documents spell the names one way, users type them another. */
int algo_from_name(const char *s)
{
    if (s == NULL)
        return -1;
    for (int a = 0; a < ALGO_COUNT; a++)
        if (strcasecmp(s, names[a]) == 0)
            return a;
    return -1;
}

const char *algo_src_name(int src)
{
    static const char *const srcs[ALGO_SRC_COUNT] = {
        [ALGO_SRC_MODEL] = "model",
        [ALGO_SRC_HCCL_ALGO] = "HCCL_ALGO",
        [ALGO_SRC_CONFIG] = "hcclAlgo",
        [ALGO_SRC_HCCL_ALGORITHM] = "HCCL_ALGORITHM",
        [ALGO_SRC_DETERMINISTIC] = "HCCL_DETERMINISTIC",
        [ALGO_SRC_RETRY] = "HCCL_OP_RETRY_ENABLE",
        [ALGO_SRC_CALL] = "call",
    };

    return src >= 0 && src < ALGO_SRC_COUNT ? srcs[src] : "?";
}
