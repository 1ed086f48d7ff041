/*
 * Cooperative level 0: when a communicator's ranks fit on the node's cores and belong to one
 * tenant, they run collectives among themselves instead of through the daemon. The daemon
 * creates this control block (a memfd) and hands it, with every member's arena, to every
 * member. Rank r publishes piece k's descriptor in its slot d[k % 2], writing d.seq = k last
 * (the peer reads the sequence and the descriptor from the same cache lines); once every rank
 * posted k, each validates all descriptors (a peer is trusted no more than a client is), runs
 * its share, and bumps `done`. Small pieces travel inline and need only the first barrier.
 * The daemon sets `abort` when a member dies or leaves; waiters then fail with HCCL_E_REMOTE.
 * Its bits say why: COOP_ABORT_LEFT, a member destroyed its comm; COOP_ABORT_BROKEN, a member
 * died or aborted (HcclGetCommAsyncError reports only the second).
 */
#ifndef HCCLD_COMMON_COOP_H
#define HCCLD_COMMON_COOP_H

#include <stdalign.h>
#include <stddef.h>
#include <stdint.h>

#include "shm.h"

#define COOP_MAGIC 0x636f6f70u /* "coop" */
#define COOP_INLINE 4096u      /* bytes of inline input per rank and parity */
#define COOP_MAX_RANKS 64u     /* beyond, barriers that scan every slot cost too much */
#define COOP_OWN_OUTPUT_MAX 2u /* up to this many ranks, each computes its own output */
#define COOP_ABORT_LEFT 1u
#define COOP_ABORT_BROKEN 2u

typedef struct coop_slot {
    /* By parity of the piece number; d.seq is what this rank posted. Small inputs follow the
     * descriptor directly, so that a peer fetches both in the fewest cache lines. */
    struct coop_pkt {
        alignas(SHM_CACHELINE) desc_t d;
        uint8_t data[COOP_INLINE];
    } pkt[2];
    alignas(SHM_CACHELINE) uint64_t done; /* last piece whose share this rank finished */
} coop_slot_t;

typedef struct coop_ctl {
    uint32_t magic;
    uint32_t nranks;
    /* Rank 0's time of each op, from its call to its share done: a count per power of 4 us
     * (they wrap at 2^32; the daemon folds the differences) and their sum, for the daemon's
     * duration histogram. In the first line's padding: a block of an older daemon or library
     * has zeros there, and the layout stays the same. */
    uint32_t lat4[SHM_LAT_BUCKETS];
    uint64_t lat_sum_us;
    alignas(SHM_CACHELINE) uint32_t bell;     /* bumped after every post/done; futex word */
    alignas(SHM_CACHELINE) uint32_t sleepers; /* ranks asleep on bell */
    alignas(SHM_CACHELINE) uint32_t abort;    /* COOP_ABORT_* bits: the comm is done for */
    /* 1 + the rank whose death or abort set COOP_ABORT_BROKEN (written before abort), 0: none
     * known. In abort's line's padding: an older daemon's block has 0 there. */
    uint32_t culprit;
    alignas(SHM_CACHELINE) coop_slot_t slot[];
} coop_ctl_t;

_Static_assert(offsetof(coop_ctl_t, bell) == SHM_CACHELINE, "the counters fit the first line");

/* The last piece rank q posted. */
static inline uint64_t coop_posted(const coop_slot_t *s)
{
    uint64_t a = __atomic_load_n(&s->pkt[0].d.seq, __ATOMIC_ACQUIRE);
    uint64_t b = __atomic_load_n(&s->pkt[1].d.seq, __ATOMIC_ACQUIRE);

    return a > b ? a : b;
}

/* Pieces every rank has posted: the ranks' own count of the collectives they ran among
 * themselves. */
static inline uint64_t coop_pieces_done(const coop_ctl_t *ctl)
{
    uint64_t low = UINT64_MAX;

    for (uint32_t q = 0; q < ctl->nranks; q++) {
        uint64_t v = coop_posted(&ctl->slot[q]);
        low = v < low ? v : low;
    }
    return low == UINT64_MAX ? 0 : low;
}

static inline uint64_t coop_ctl_bytes(uint32_t nranks)
{
    uint64_t b = sizeof(coop_ctl_t) + (uint64_t)nranks * sizeof(coop_slot_t);

    return (b + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
}

#endif
