/*
 * Single-producer single-consumer rings in shared memory (layout in shm.h). Each side keeps its
 * own copy of the index it owns and re-reads only the other side's index, which it validates:
 * the daemon must survive a client that scribbles over its ring header.
 */
#ifndef HCCLD_COMMON_RING_H
#define HCCLD_COMMON_RING_H

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "shm.h"

typedef struct ring {
    ring_hdr_t *hdr;
    char *slots;
    uint32_t entries; /* power of two */
    uint32_t esize;
    uint32_t mine; /* producer: tail; consumer: head */
} ring_t;

static inline void ring_attach(ring_t *r, ring_hdr_t *hdr, uint32_t entries, uint32_t esize)
{
    r->hdr = hdr;
    r->slots = shm_ring_slots(hdr);
    r->entries = entries;
    r->esize = esize;
    r->mine = 0;
}

/* Zeroes the indices: the side that creates the segment, or a client whose daemon restarted
 * (while other threads of it may still look at the indices: atomic stores). */
static inline void ring_format(ring_hdr_t *hdr, uint32_t entries)
{
    __atomic_store_n(&hdr->head, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&hdr->tail, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&hdr->waiting, 0, __ATOMIC_RELEASE);
    hdr->entries = entries;
}

/* Entries the consumer has not taken yet, or -EPROTO when the other side's index is nonsense. */
static inline int ring_used(const ring_t *r, int producer)
{
    uint32_t other, used;

    if (producer) {
        other = __atomic_load_n(&r->hdr->head, __ATOMIC_ACQUIRE);
        used = r->mine - other;
    } else {
        other = __atomic_load_n(&r->hdr->tail, __ATOMIC_ACQUIRE);
        used = other - r->mine;
    }
    return used > r->entries ? -EPROTO : (int)used;
}

/* 0 on success, -EAGAIN when full, -EPROTO when the consumer corrupted the ring. */
static inline int ring_push(ring_t *r, const void *e)
{
    int used = ring_used(r, 1);

    if (used < 0)
        return used;
    if ((uint32_t)used == r->entries)
        return -EAGAIN;
    memcpy(r->slots + (size_t)(r->mine & (r->entries - 1)) * r->esize, e, r->esize);
    r->mine++;
    __atomic_store_n(&r->hdr->tail, r->mine, __ATOMIC_RELEASE);
    return 0;
}

/* Copies the oldest entry out: 0, -EAGAIN when empty, -EPROTO when corrupt. */
static inline int ring_pop(ring_t *r, void *e)
{
    int used = ring_used(r, 0);

    if (used < 0)
        return used;
    if (used == 0)
        return -EAGAIN;
    memcpy(e, r->slots + (size_t)(r->mine & (r->entries - 1)) * r->esize, r->esize);
    r->mine++;
    __atomic_store_n(&r->hdr->head, r->mine, __ATOMIC_RELEASE);
    return 0;
}

#endif /* HCCLD_COMMON_RING_H */
