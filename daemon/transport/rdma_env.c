/*
 * The RDMA transport's settings. HCCL_RDMA_* keep HCCL's names, meanings and defaults; the
 * staging geometry and the budget for early messages are hcclD's own (HCCLD_RDMA_*).
 */
#include "transport/rdma_env.h"

#include <pthread.h>
#include <stdlib.h>

#include "env.h"
#include "log.h"
#include "transport/rdma_wire.h"

static rdma_env_t the_env;
static pthread_once_t the_env_once = PTHREAD_ONCE_INIT;

/* env_u64 has already said what is wrong with a bad value; this says what is used instead. */
static uint64_t get_u64(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
    uint64_t v;

    if (env_u64(name, def, min, max, &v) == 0)
        return v;
    WARN("NET", "%s: using the default, %llu", name, (unsigned long long)def);
    return def;
}

/* A byte count with an optional K/M/G suffix, within [min, max]. */
static uint64_t get_size(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
    const char *s = getenv(name);
    uint64_t v;

    if (s == NULL || *s == '\0')
        return def;
    if (parse_size(s, &v) == 0 && v >= min && v <= max)
        return v;
    WARN("NET", "%s=\"%s\" is invalid (%llu..%llu bytes), using %llu", name, s,
         (unsigned long long)min, (unsigned long long)max, (unsigned long long)def);
    return def;
}

static void env_read(void)
{
    rdma_env_t *e = &the_env;
    uint64_t tc = get_u64("HCCL_RDMA_TC", 132, 0, 255);

    /* The two low bits of the traffic class are ECN, which the network sets: HCCL asks for a
     * multiple of 4. */
    if (tc % 4 != 0) {
        WARN("NET", "HCCL_RDMA_TC=%llu is not a multiple of 4 (DSCP << 2), using 132",
             (unsigned long long)tc);
        tc = 132;
    }
    e->tos = (uint8_t)tc;
    e->sl = (uint8_t)get_u64("HCCL_RDMA_SL", 4, 0, 7);
    /* 0 would mean "wait forever" for an ACK: a dead peer would hang its requests. */
    e->timeout = (uint8_t)get_u64("HCCL_RDMA_TIMEOUT", 20, 1, 31);
    e->retry_cnt = (uint8_t)get_u64("HCCL_RDMA_RETRY_CNT", 7, 1, 7);
    e->depth = (unsigned)get_u64("HCCLD_RDMA_DEPTH", 16, RDMA_DEPTH_MIN, RDMA_DEPTH_MAX);
    e->slot = (uint32_t)get_size("HCCLD_RDMA_SLOT", 64u << 10, RDMA_SLOT_MIN, RDMA_SLOT_MAX);
    e->unexpected = (size_t)get_size("HCCLD_RDMA_UNEXPECTED", 256ull << 20, 1ull << 20, 1ull << 40);
    e->heartbeat_ns = get_u64("HCCLD_HEARTBEAT_S", 1, 1, 3600) * 1000000000ull;
    /* The QP's own budget: retry_cnt + 1 tries, each waiting 4.096 us << timeout for an ACK.
     * Twice that, and a heartbeat more, before the send queue counts as stalled. */
    e->retry_ns = (4096ull << e->timeout) * (e->retry_cnt + 1u);
    e->stall_ns = 2 * e->retry_ns + e->heartbeat_ns;
}

const rdma_env_t *rdma_env(void)
{
    pthread_once(&the_env_once, env_read);
    return &the_env;
}
