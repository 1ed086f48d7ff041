/*
 * Posting descriptors and waiting for their completions. Each descriptor in flight owns a slot;
 * its tag is (generation << 32 | slot). Any waiting thread drains the completion ring and marks
 * slots done. Waiting spins for HCCLD_SPIN_US, then sleeps on a futex on the ring's tail, with
 * a bounded timeout so that a dead daemon or HCCL_EXEC_TIMEOUT is noticed.
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "client.h"
#include "futex.h"
#include "log.h"
#include "prof.h"

#define SLEEP_SLICE_NS 100000000ll /* wake at least this often to check the daemon */

int hc_slots_init(hc_client_t *c)
{
    c->nslots = c->l.sq_entries;
    c->slots = calloc(c->nslots, sizeof(*c->slots));
    return c->slots == NULL ? -ENOMEM : 0;
}

/* Takes every completion available; the caller holds cq_lock. */
void hc_drain_locked(hc_client_t *c)
{
    cqe_t e;
    int rc;

    while ((rc = ring_pop(&c->cq, &e)) == 0) {
        uint32_t i = (uint32_t)e.tag;
        if (i >= c->nslots || c->slots[i].gen != (uint32_t)(e.tag >> 32) || !c->slots[i].busy)
            continue;
        if (c->slots[i].abandoned) {
            c->slots[i].busy = 0;
            continue;
        }
        c->slots[i].cqe = e;
        __atomic_store_n(&c->slots[i].done, 1, __ATOMIC_RELEASE);
    }
    if (rc == -EPROTO && !hc_client_set_dead(c))
        ERR("IPC", "the completion ring is corrupt");
}

/* Sleeps until the completion ring moves, at most one slice. */
static void sleep_on_cq(hc_client_t *c)
{
    uint32_t tail = __atomic_load_n(&c->cq.hdr->tail, __ATOMIC_ACQUIRE);

    __atomic_store_n(&c->cq.hdr->waiting, 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* Our consumer index as published (cq.mine belongs to whoever holds cq_lock). */
    if (tail != __atomic_load_n(&c->cq.hdr->head, __ATOMIC_ACQUIRE))
        return; /* something arrived already */
    futex_wait(&c->cq.hdr->tail, tail, SLEEP_SLICE_NS);
}

/* Wakes every thread of this process that sleeps on the completion ring (HcclCommAbort). */
void hc_wake_waiters(hc_client_t *c)
{
    futex_wake(&c->cq.hdr->tail, INT_MAX);
}

/*
 * Adaptive spinning: a wait that ends while spinning scores +2, one that has to sleep -1 (the
 * score stays within 0..SPIN_SCORE_MAX). Waits spin only while the score is above 0, and
 * every SPIN_PROBE-th wait spins anyway, to notice when short waits come back. A rank whose
 * completions take longer than the spin (big pieces, a class held to its cap) then sleeps at
 * once instead of burning a core the daemons and the other jobs need.
 */
#define SPIN_SCORE_MAX 8
#define SPIN_PROBE 16

static uint64_t spin_budget(hc_client_t *c)
{
    static __thread unsigned waits;

    if (__atomic_load_n(&c->spin_score, __ATOMIC_RELAXED) > 0 || ++waits % SPIN_PROBE == 0)
        return c->spin_ns;
    return 0;
}

static void spin_learn(hc_client_t *c, int slept)
{
    int s = __atomic_load_n(&c->spin_score, __ATOMIC_RELAXED);

    s = slept ? (s > 0 ? s - 1 : 0) : (s + 2 < SPIN_SCORE_MAX ? s + 2 : SPIN_SCORE_MAX);
    __atomic_store_n(&c->spin_score, s, __ATOMIC_RELAXED);
}

/* Whether pred(c, arg) holds, after taking in what the daemon completed if nobody else is. */
static int ready(hc_client_t *c, int (*pred)(hc_client_t *, uint32_t), uint32_t arg)
{
    if (pred(c, arg))
        return 1;
    if (pthread_mutex_trylock(&c->cq_lock) != 0)
        return 0;
    hc_drain_locked(c);
    pthread_mutex_unlock(&c->cq_lock);
    return pred(c, arg);
}

/* Waits until pred(c, arg) holds or now_ns() passes deadline. Returns 0, -ETIMEDOUT or
 * -EPIPE (daemon gone). */
static int wait_until(hc_client_t *c, int (*pred)(hc_client_t *, uint32_t), uint32_t arg,
                      uint64_t deadline)
{
    uint64_t spin = spin_budget(c), spin_until = now_ns() + spin;
    int slept = 0;

    for (unsigned i = 0;; i++) {
        if (ready(c, pred, arg)) {
            if (spin != 0 || slept)
                spin_learn(c, slept);
            return 0;
        }
        /* Spin, yielding now and then to whoever shares the core (the daemon, a peer). */
        if ((i & 15) != 15) {
            cpu_relax();
            continue;
        }
        uint64_t now = now_ns();
        if (now < spin_until) {
            sched_yield();
            continue;
        }
        if (hc_daemon_gone(c))
            return -EPIPE;
        if (now > deadline)
            return -ETIMEDOUT;
        /* While the daemon is away its completion ring is being formatted again: wait for the
         * keeper (our pieces are posted again to the next daemon). */
        if (hc_client_away(c) && hc_wait_back(c) != 0)
            return -EPIPE;
        sleep_on_cq(c);
        slept = 1;
    }
}

static int slot_free_exists(hc_client_t *c, uint32_t unused)
{
    int found = 0;

    /* Other threads take and free slots under cq_lock. */
    pthread_mutex_lock(&c->cq_lock);
    for (uint32_t i = 0; i < c->nslots && !found; i++)
        found = !c->slots[i].busy;
    pthread_mutex_unlock(&c->cq_lock);
    return found;
}

static int slot_aborted(const hc_slot_t *s)
{
    return s->abort != NULL && __atomic_load_n(s->abort, __ATOMIC_ACQUIRE);
}

/* Done, or no longer awaited (its comm is being aborted). */
static int slot_done(hc_client_t *c, uint32_t i)
{
    return __atomic_load_n(&c->slots[i].done, __ATOMIC_ACQUIRE) || slot_aborted(&c->slots[i]);
}

static int slot_take(hc_client_t *c, hc_comm_t *comm, uint32_t *slot_p)
{
    int rc = -EAGAIN;

    pthread_mutex_lock(&c->cq_lock);
    for (uint32_t i = 0; i < c->nslots; i++) {
        if (c->slots[i].busy)
            continue;
        c->slots[i] = (hc_slot_t){
            .gen = c->slots[i].gen + 1, .busy = 1, .abort = &comm->aborted, .comm = comm};
        *slot_p = i;
        rc = 0;
        break;
    }
    pthread_mutex_unlock(&c->cq_lock);
    return rc;
}

static void doorbell_ring(hc_client_t *c)
{
    uint64_t one = 1;

    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&c->hdr->daemon_sleeping, __ATOMIC_RELAXED) &&
        write(c->doorbell, &one, sizeof(one)) < 0 && errno != EAGAIN)
        WARN("IPC", "write() on the daemon's doorbell failed");
}

/* What a restarted daemon must know of a posted piece (rejoin.c); under sq_lock. */
static void note_posted(hc_comm_t *comm, const desc_t *d)
{
    if (desc_is_collective(d->kind)) {
        if (d->seq + 1 > comm->coll_posted)
            comm->coll_posted = d->seq + 1;
    } else if (comm->p2p_posted != NULL && d->root < comm->nranks) {
        uint64_t *v = &comm->p2p_posted[(d->kind == DESC_SEND ? 0 : comm->nranks) + d->root];
        if (d->seq + 1 > *v)
            *v = d->seq + 1;
    }
}

HcclResult hc_submit(hc_comm_t *comm, desc_t *d, uint32_t *slot_p)
{
    hc_client_t *c = comm->c;
    uint32_t slot;
    int rc;

    while (slot_take(c, comm, &slot) != 0) {
        if (__atomic_load_n(&comm->aborted, __ATOMIC_ACQUIRE))
            return HCCL_E_SUSPENDING;
        if (wait_until(c, slot_free_exists, 0, hc_deadline(c)) != 0)
            return hc_client_dead(c) ? HCCL_E_UNAVAIL : HCCL_E_TIMEOUT;
    }
    d->tag = (uint64_t)c->slots[slot].gen << 32 | slot;
    pthread_mutex_lock(&c->sq_lock);
    if (__atomic_load_n(&comm->rejoin_failed, __ATOMIC_ACQUIRE)) {
        pthread_mutex_unlock(&c->sq_lock);
        pthread_mutex_lock(&c->cq_lock);
        c->slots[slot].busy = 0;
        pthread_mutex_unlock(&c->cq_lock);
        return HCCL_E_REMOTE;
    }
    /* The ring has as many entries as there are slots, so it cannot be full here. */
    rc = ring_push(&c->sq, d);
    if (rc == 0) {
        c->slots[slot].d = *d;
        c->slots[slot].post_no = ++c->post_no;
        c->slots[slot].posted = 1;
        note_posted(comm, d);
        /* Under the lock: a restarted daemon's keeper replaces the doorbell under it. */
        doorbell_ring(c);
    }
    pthread_mutex_unlock(&c->sq_lock);
    if (rc != 0) {
        ERR("IPC", "the submission ring is corrupt");
        hc_client_set_dead(c);
        return HCCL_E_INTERNAL;
    }
    *slot_p = slot;
    return HCCL_SUCCESS;
}

uint64_t hc_deadline(const hc_client_t *c)
{
    return now_ns() + c->exec_timeout_ns;
}

uint64_t hc_comm_deadline(const hc_comm_t *comm)
{
    uint64_t t = comm->cfg.exec_timeout_ns;

    return t != 0 ? now_ns() + t : hc_deadline(comm->c);
}

HcclResult hc_wait_by(hc_client_t *c, uint32_t slot, uint64_t deadline, uint32_t *culprit_p)
{
    int rc = wait_until(c, slot_done, slot, deadline);
    HcclResult st;

    pthread_mutex_lock(&c->cq_lock);
    if (rc == 0 && !c->slots[slot].done) {
        /* HcclCommAbort: stop waiting; the daemon fails or finishes it, the slot comes back
         * then. */
        c->slots[slot].abandoned = 1;
        st = HCCL_E_SUSPENDING;
    } else if (rc == 0) {
        st = (HcclResult)c->slots[slot].cqe.status;
        if (culprit_p != NULL)
            *culprit_p = c->slots[slot].cqe.culprit;
        hc_prof_piece(&c->slots[slot].cqe, c->slots[slot].reposts);
        c->slots[slot].busy = 0;
    } else {
        /* The daemon may still complete it later; the slot is reclaimed then. */
        c->slots[slot].abandoned = 1;
        st = rc == -ETIMEDOUT ? HCCL_E_TIMEOUT : HCCL_E_REMOTE;
        if (rc == -ETIMEDOUT)
            ERR("COLL", "an operation did not complete within its execution timeout "
                        "(HCCL_EXEC_TIMEOUT, or the comm's hcclExecTimeOut)");
    }
    pthread_mutex_unlock(&c->cq_lock);
    return st;
}
