#include "shm.h"

static uint64_t align_up(uint64_t v, uint64_t a)
{
    return (v + a - 1) / a * a;
}

void shm_layout_make(uint64_t arena_bytes, uint32_t sq_entries, uint32_t cq_entries,
                     shm_layout_t *layout_p)
{
    shm_layout_t l;

    l.sq_entries = sq_entries;
    l.cq_entries = cq_entries;
    l.sq_off = SHM_PAGE;
    l.cq_off =
        align_up(l.sq_off + sizeof(ring_hdr_t) + (uint64_t)sq_entries * sizeof(desc_t), SHM_PAGE);
    l.seg_bytes =
        align_up(l.cq_off + sizeof(ring_hdr_t) + (uint64_t)cq_entries * sizeof(cqe_t), SHM_PAGE);
    l.arena_bytes = align_up(arena_bytes, SHM_PAGE);
    *layout_p = l;
}
