#include "algo_id.h"

#include <stddef.h>
#include <strings.h>

static const char *const names[ALGO_COUNT] = {
    [ALGO_RING] = "ring", [ALGO_MESH] = "fullmesh",     [ALGO_HDR] = "H-D_R",
    [ALGO_TREE] = "tree", [ALGO_PAIRWISE] = "pairwise",
};

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
