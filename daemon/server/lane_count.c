/*
 * Lane ops in the daemon's figures: the collectives that a comm's ranks ran among themselves over
 * lanes (libclient/lane.h), which this daemon never saw, counted by each rank in a slot of its
 * segment (shm_lane_slot_t). For every comm, the slots of its ranks here are read and the most
 * any of them ran goes to formation (form_lane_fold), which keeps the counts once the comm or
 * the client is gone. Done before the figures are read (status), before a rank leaves a comm
 * (its last ops are in), and before a client's segment goes.
 */
#include "form/form.h"
#include "server/server.h"
#include "shm.h"

static session_t *client_of(server_t *srv, uint64_t sid)
{
    for (session_t *s = srv->sessions; s != NULL; s = s->next)
        if (s->kind == SESSION_CLIENT && s->fc.sid == sid && s->seg != NULL)
            return s;
    return NULL;
}

/* The slot of rank `rank` of comm comm_id in s's segment, or NULL. */
static const shm_lane_slot_t *slot_of(const session_t *s, uint32_t comm_id, uint32_t rank)
{
    const shm_lane_slot_t *v = shm_lane_slots(s->seg);

    for (unsigned i = 0; i < SHM_LANE_SLOTS; i++)
        if (__atomic_load_n(&v[i].comm_id, __ATOMIC_ACQUIRE) == comm_id &&
            __atomic_load_n(&v[i].rank, __ATOMIC_RELAXED) == rank)
            return &v[i];
    return NULL;
}

void lane_count_fold(server_t *srv)
{
    for (const form_comm_t *c = form_comms(srv->form); c != NULL; c = c->next) {
        uint32_t lat4[SHM_LAT_BUCKETS] = {0};
        uint64_t most = 0, sum = 0;
        for (uint32_t r = 0; r < c->nranks; r++) {
            session_t *s = c->sids[r] != 0 ? client_of(srv, c->sids[r]) : NULL;
            const shm_lane_slot_t *slot = s != NULL ? slot_of(s, c->id, r) : NULL;
            uint64_t ops = slot != NULL ? __atomic_load_n(&slot->ops, __ATOMIC_ACQUIRE) : 0;
            if (ops <= most)
                continue;
            most = ops;
            sum = __atomic_load_n(&slot->lat_sum_us, __ATOMIC_RELAXED);
            for (unsigned j = 0; j < SHM_LAT_BUCKETS; j++)
                lat4[j] = __atomic_load_n(&slot->lat4[j], __ATOMIC_RELAXED);
        }
        if (most > 0)
            form_lane_fold(srv->form, c->id, most, lat4, sum);
    }
}
