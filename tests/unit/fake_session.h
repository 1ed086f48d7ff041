/* A client's session without a client: its segment in plain memory, its rings formatted as the
 * daemon formats them, added to an engine (the engine and formation suites). */
#ifndef HCCLD_TESTS_UNIT_FAKE_SESSION_H
#define HCCLD_TESTS_UNIT_FAKE_SESSION_H

#include <stdint.h>

#include "ring.h"
#include "sched/engine.h"
#include "shm.h"

#define FAKE_ARENA (1u << 20)
#define FAKE_ENTRIES 64u

typedef struct fake {
    void *base, *arena;
    shm_layout_t l;
    ring_t sq, cq;
} fake_t;

/* Session sid with f's segment, in eng (a failure fails the test). */
void fake_session_add(engine_t *eng, fake_t *f, uint64_t sid);
/* Frees f's memory, after the engine let go of it. */
void fake_session_free(fake_t *f);

#endif
