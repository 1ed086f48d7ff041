/*
 * HcclCommSplit of a communicator across daemons, done by its ranks: they allgather (color, key,
 * their daemon's address) over the parent itself, each computes its own child (ranks of one
 * color, ordered by key then parent rank), and the child forms as an agreed job derived from
 * the parent's job, the split's number and the color; its root daemon is its rank 0's. No
 * daemon has to gather the split. The child names its parent's job, so that its daemons reuse
 * the parent's data connections between them instead of opening new ones.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agreed.h"
#include "log.h"
#include "ranktable.h"

#define ENTRY_BYTES 64 /* color, key (little-endian u32), daemon address (NUL-terminated) */
#define ENTRY_ADDR 8

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int by_key(const void *a, const void *b, void *arg)
{
    const uint8_t *all = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    uint32_t kx = get32(all + (size_t)x * ENTRY_BYTES + 4),
             ky = get32(all + (size_t)y * ENTRY_BYTES + 4);

    if (kx != ky)
        return kx < ky ? -1 : 1;
    return x < y ? -1 : (x > y);
}

static const char *entry_addr(const uint8_t *all, uint32_t r)
{
    return (const char *)all + (size_t)r * ENTRY_BYTES + ENTRY_ADDR;
}

/* The child's ranks (parent ranks, in child rank order); returns how many. */
static uint32_t child_ranks(uint8_t *all, uint32_t n, uint32_t color, uint32_t *order)
{
    uint32_t cn = 0;

    for (uint32_t r = 0; r < n; r++) {
        all[(size_t)r * ENTRY_BYTES + ENTRY_BYTES - 1] = '\0';
        if (get32(all + (size_t)r * ENTRY_BYTES) == color)
            order[cn++] = r;
    }
    qsort_r(order, cn, sizeof(*order), by_key, all);
    return cn;
}

static HcclResult split_join(hc_comm_t *p, uint8_t *all, uint32_t color, uint64_t seq,
                             HcclComm *newComm)
{
    uint32_t *order = malloc(p->nranks * sizeof(*order)), cn, me = 0;
    uint8_t id[HC_JOB_BYTES], key[HC_JOB_BYTES];
    HcclResult rc;

    if (order == NULL)
        return HCCL_E_MEMORY;
    cn = child_ranks(all, p->nranks, color, order);
    while (me < cn && order[me] != p->rank)
        me++;
    rc = me < cn ? HCCL_SUCCESS : HCCL_E_INTERNAL;
    if (rc == HCCL_SUCCESS) {
        hc_comm_cfg_t cfg = p->cfg; /* the child's settings are its parent's, its name its own */
        hc_comm_name_child(p->cfg.name, seq, color, cfg.name);
        hc_split_derive(p->job_id, p->job_key, seq, color, id, key);
        rc = hc_init_agreed(p->c, id, key, entry_addr(all, order[0]), cn, me, p->job_id, &cfg,
                            newComm);
    }
    free(order);
    return rc;
}

HcclResult hc_split_multinode(hc_comm_t *p, uint32_t color, uint32_t key, uint64_t seq,
                              HcclComm *newComm)
{
    uint8_t mine[ENTRY_BYTES] = {0}, *all;
    HcclResult rc;

    if (!p->has_job) {
        ERR("INIT", "split: comm %u spans daemons but its job is unknown here", p->id);
        return HCCL_E_NOT_SUPPORT;
    }
    if ((all = malloc((size_t)p->nranks * ENTRY_BYTES)) == NULL)
        return HCCL_E_MEMORY;
    put32(mine, color);
    put32(mine + 4, key);
    memcpy(mine + ENTRY_ADDR, p->c->advertised,
           strnlen(p->c->advertised, ENTRY_BYTES - ENTRY_ADDR - 1));
    rc = HcclAllGather(mine, all, ENTRY_BYTES, HCCL_DATA_TYPE_UINT8, p, NULL);
    if (rc != HCCL_SUCCESS)
        ERR("INIT", "rank %u: split %llu: exchanging colors over the parent failed (%s)", p->rank,
            (unsigned long long)seq, HcclGetErrorString(rc));
    else if (color == HCCL_SPLIT_NOCOLOR)
        *newComm = NULL;
    else
        rc = split_join(p, all, color, seq, newComm);
    free(all);
    if (rc == HCCL_SUCCESS && *newComm != NULL)
        INFO("INIT", "rank %u split %llu (color %u, key %u): comm %u, rank %u of %u across daemons",
             p->rank, (unsigned long long)seq, color, key, ((hc_comm_t *)*newComm)->id,
             ((hc_comm_t *)*newComm)->rank, ((hc_comm_t *)*newComm)->nranks);
    return rc;
}
