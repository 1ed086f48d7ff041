#include "bind.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

int bind_local_rank(unsigned local, unsigned nlocal)
{
    const char *mode = getenv("HCCL_BIND");
    cpu_set_t allowed, one;
    int ncpu, seen = 0;

    if (mode != NULL && strcmp(mode, "none") == 0)
        return -1;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0)
        return -1;
    ncpu = CPU_COUNT(&allowed);
    if (ncpu <= 0 || nlocal > (unsigned)ncpu)
        return -1;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || seen++ != (int)local)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        return sched_setaffinity(0, sizeof(one), &one) == 0 ? cpu : -1;
    }
    return -1;
}
