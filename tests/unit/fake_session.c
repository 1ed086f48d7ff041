#include "fake_session.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

void fake_session_add(engine_t *eng, fake_t *f, uint64_t sid)
{
    shm_layout_make(FAKE_ARENA, FAKE_ENTRIES, FAKE_ENTRIES, &f->l);
    ck_assert_int_eq(posix_memalign(&f->base, SHM_PAGE, f->l.seg_bytes), 0);
    ck_assert_int_eq(posix_memalign(&f->arena, SHM_PAGE, f->l.arena_bytes), 0);
    memset(f->base, 0, f->l.seg_bytes);
    memset(f->arena, 0, f->l.arena_bytes);
    ring_format(shm_ring(f->base, f->l.sq_off), FAKE_ENTRIES);
    ring_format(shm_ring(f->base, f->l.cq_off), FAKE_ENTRIES);
    ring_attach(&f->sq, shm_ring(f->base, f->l.sq_off), FAKE_ENTRIES, sizeof(desc_t));
    ring_attach(&f->cq, shm_ring(f->base, f->l.cq_off), FAKE_ENTRIES, sizeof(cqe_t));
    ck_assert_int_eq(engine_session_add(eng, sid, f->base, f->arena, &f->l), 0);
}

void fake_session_free(fake_t *f)
{
    free(f->base);
    free(f->arena);
    memset(f, 0, sizeof(*f));
}
