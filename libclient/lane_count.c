/*
 * What a rank tells its daemon of its lane ops: a slot of the client's segment (shm_lane_slot_t)
 * per comm with lanes, counting the collectives done over them and their durations. The daemon
 * reads the slots for its figures (daemon/server/lane_count.c); no message, so a daemon of an
 * earlier release simply never looks.
 */
#include <pthread.h>
#include <string.h>

#include "lane.h"
#include "shm.h"

static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;

void lane_count_claim(hc_comm_t *comm)
{
    shm_lane_slot_t *v = shm_lane_slots(comm->c->seg);

    comm->lanes->slot = NULL;
    pthread_mutex_lock(&slots_lock);
    for (unsigned i = 0; i < SHM_LANE_SLOTS; i++) {
        if (__atomic_load_n(&v[i].comm_id, __ATOMIC_ACQUIRE) != 0)
            continue;
        memset(&v[i], 0, sizeof(v[i]));
        v[i].rank = comm->rank;
        __atomic_store_n(&v[i].comm_id, comm->id, __ATOMIC_RELEASE);
        comm->lanes->slot = &v[i];
        break;
    }
    pthread_mutex_unlock(&slots_lock);
}

void lane_count_op(hc_lanes_t *ln, uint64_t took_ns)
{
    shm_lane_slot_t *s = ln->slot;
    uint64_t us = took_ns / 1000;

    if (s == NULL)
        return; /* more comms with lanes in this process than slots: not counted */
    __atomic_fetch_add(&s->lat4[shm_lat_bucket(us)], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&s->lat_sum_us, us, __ATOMIC_RELAXED);
    __atomic_fetch_add(&s->ops, 1, __ATOMIC_RELEASE);
}

void lane_count_release(hc_lanes_t *ln)
{
    if (ln->slot == NULL)
        return;
    pthread_mutex_lock(&slots_lock);
    __atomic_store_n(&ln->slot->comm_id, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&slots_lock);
    ln->slot = NULL;
}
