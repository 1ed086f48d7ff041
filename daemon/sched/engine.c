#include "sched/engine_int.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "env.h"
#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "thread.h"

/* HCCLD_ENGINE_SPIN_US: keep polling (yielding) this long after the last work, then sleep. */
#define ENGINE_SPIN_US_DEFAULT 50

static eng_session_t *eng_session_find(engine_t *eng, uint64_t sid)
{
    for (eng_session_t *s = eng->sessions; s != NULL; s = s->next)
        if (s->sid == sid)
            return s;
    return NULL;
}

static void eng_session_kill(engine_t *eng, eng_session_t *s, const char *why)
{
    if (s->dead)
        return;
    ERR("IPC", "client %llu broke the ring protocol (%s); ignoring it from now on",
        (unsigned long long)s->sid, why);
    s->dead = 1;
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        for (uint32_t r = 0; r < c->nranks; r++)
            if (c->m[r].s == s)
                eng_comm_break(eng, c, "a rank's client broke the ring protocol");
}

void eng_session_complete(engine_t *eng, eng_session_t *s, uint64_t tag, HcclResult status)
{
    cqe_t e = {.tag = tag, .status = status, .algo = -1};

    eng_session_post(eng, s, &e);
}

void prof_cqe(cqe_t *e, const op_prof_t *p, uint64_t t_in)
{
    e->algo = -1;
    if (p == NULL || p->t_start == 0)
        return;
    e->algo = (int8_t)p->algo;
    e->algo_src = p->src;
    e->queued_ns = p->t_start > t_in ? p->t_start - t_in : 0;
    e->qos_wait_ns = p->qos_wait_ns;
    e->l0_ns = p->l0_ns;
    e->l1_ns = p->l1_ns;
}

void eng_session_post(engine_t *eng, eng_session_t *s, const cqe_t *e)
{
    if (s->outstanding > 0)
        s->outstanding--;
    if (s->dead)
        return;
    if (ring_push(&s->cq, e) != 0) {
        eng_session_kill(eng, s, "completion ring full or corrupt");
        return;
    }
    s->completed++;
    s->wake = 1;
}

/* Wakes a client that sleeps on its completion ring. */
static void eng_session_wake(eng_session_t *s)
{
    if (!s->wake)
        return;
    s->wake = 0;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&s->cq.hdr->waiting, __ATOMIC_RELAXED)) {
        __atomic_store_n(&s->cq.hdr->waiting, 0, __ATOMIC_RELAXED);
        futex_wake(&s->cq.hdr->tail, INT_MAX);
    }
}

/* Takes what the client posted, as far as its completion ring has room for the answers. */
static int eng_session_intake(engine_t *eng, eng_session_t *s)
{
    int n = 0;

    while (!s->dead) {
        int used = ring_used(&s->cq, 1);
        desc_t d;
        if (used < 0) {
            eng_session_kill(eng, s, "completion ring indices corrupt");
            break;
        }
        if ((uint32_t)used + s->outstanding >= s->cq.entries)
            break;
        int rc = ring_pop(&s->sq, &d);
        if (rc == -EAGAIN)
            break;
        if (rc < 0) {
            eng_session_kill(eng, s, "submission ring indices corrupt");
            break;
        }
        s->outstanding++;
        s->submitted++;
        n++;
        eng_comm_route(eng, s, &d);
    }
    return n;
}

/* Comms spanning daemons by class priority (so the first class to ask for the wire gets it),
 * then the rest. Which classes have a collective in flight is counted first: a class of lower
 * priority posts no round while one of higher priority has an op under way, from its first
 * piece to its last (it finishes the round it has on the wire). */
static int comms_progress(engine_t *eng)
{
    int work = 0, order[QOS_SCHED_CLASSES], n = eng->qos.ncls;

    uint64_t now = now_ns();

    qos_sched_pass(&eng->qos, now);
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->span != NULL && c->sops->qos_active(c->span, now))
            qos_active(&eng->qos, c->qos_class, now);
    for (int i = 0; i < n; i++)
        order[i] = i;
    for (int i = 1; i < n; i++) /* a handful of classes: insertion sort */
        for (int k = i;
             k > 0 && eng->qos.cls[order[k]].priority < eng->qos.cls[order[k - 1]].priority; k--) {
            int t = order[k];
            order[k] = order[k - 1];
            order[k - 1] = t;
        }
    for (int i = 0; i < n; i++)
        for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
            if (c->span != NULL && c->qos_class == order[i])
                work += eng_comm_progress(eng, c);
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        if (c->span == NULL || c->qos_class < 0 || c->qos_class >= n)
            work += eng_comm_progress(eng, c);
    return work;
}

static int engine_pass(engine_t *eng)
{
    int work = 0;

    work += span_env_progress(eng->senv);
    for (eng_session_t *s = eng->sessions; s != NULL; s = s->next)
        work += eng_session_intake(eng, s);
    work += comms_progress(eng);
    for (eng_session_t *s = eng->sessions; s != NULL; s = s->next)
        eng_session_wake(s);
    return work;
}

/* Announces sleep in every segment, then looks once more (clients check the flag after they
 * publish, so either they see it and ring, or this scan sees their work). */
static int engine_may_sleep(engine_t *eng, uint32_t flag)
{
    int busy = 0;

    for (eng_session_t *s = eng->sessions; s != NULL; s = s->next)
        __atomic_store_n(&s->hdr->daemon_sleeping, flag, __ATOMIC_RELAXED);
    if (!flag)
        return 1;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (eng_session_t *s = eng->sessions; s != NULL && !busy; s = s->next)
        busy = !s->dead && ring_used(&s->sq, 0) != 0;
    if (busy)
        engine_may_sleep(eng, 0);
    return !busy;
}

#define ENGINE_MAX_POLL 256

/* Sleeps until a client rings, a peer daemon's data arrives or the timeout passes. */
static void engine_sleep(engine_t *eng, int timeout_ms)
{
    struct pollfd pfd[ENGINE_MAX_POLL];
    int n = 1, ncm;
    uint64_t v;

    pfd[0] = (struct pollfd){.fd = eng->doorbell, .events = POLLIN};
    n += eng_span_poll_fds(eng, pfd + 1, ENGINE_MAX_POLL - 1, &ncm);
    pthread_mutex_unlock(&eng->lock);
    int ready = poll(pfd, (nfds_t)n, timeout_ms);
    if (ready > 0 && (pfd[0].revents & POLLIN) && read(eng->doorbell, &v, sizeof(v)) < 0 &&
        errno != EAGAIN)
        WARN("IPC", "read() on the doorbell failed: %s", strerror(errno));
    pthread_mutex_lock(&eng->lock);
    if (ready > 0)
        span_env_polled(eng->senv, pfd + 1, ncm);
    engine_may_sleep(eng, 0);
}

static void *engine_main(void *arg)
{
    engine_t *eng = arg;
    uint64_t idle_since = now_ns();

    pthread_mutex_lock(&eng->lock);
    while (!eng->stop) {
        __atomic_store_n(&eng->beat_ns, now_ns(), __ATOMIC_RELAXED);
        if (engine_pass(eng) > 0) {
            idle_since = now_ns();
            continue;
        }
        if (now_ns() - idle_since < eng->spin_ns) {
            pthread_mutex_unlock(&eng->lock);
            sched_yield();
            pthread_mutex_lock(&eng->lock);
            continue;
        }
        /* With transfers between daemons in flight, wake on their sockets too, and look
         * again at least every few milliseconds (a handshake may need a retry). */
        if (engine_may_sleep(eng, 1))
            engine_sleep(eng, eng_span_waiting(eng) ? 5 : 1000);
        idle_since = now_ns();
    }
    pthread_mutex_unlock(&eng->lock);
    return NULL;
}

void engine_kick(engine_t *eng)
{
    uint64_t one = 1;

    if (write(eng->doorbell, &one, sizeof(one)) < 0 && errno != EAGAIN)
        WARN("IPC", "write() on the doorbell failed: %s", strerror(errno));
}

engine_t *engine_create(unsigned workers)
{
    engine_t *eng = calloc(1, sizeof(*eng));
    uint64_t spin_us;

    if (eng == NULL)
        return NULL;
    pthread_mutex_init(&eng->lock, NULL);
    if (env_u64("HCCLD_ENGINE_SPIN_US", ENGINE_SPIN_US_DEFAULT, 0, 1000000, &spin_us) != 0)
        spin_us = ENGINE_SPIN_US_DEFAULT;
    eng->spin_ns = spin_us * 1000;
    eng->doorbell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (eng->doorbell < 0) {
        ERR("INIT", "eventfd() failed: %s", strerror(errno));
        goto err_free;
    }
    eng->exec = exec_create(workers);
    if (eng->exec == NULL)
        goto err_close;
    if ((eng->senv = span_env_new()) == NULL)
        goto err_exec;
    if (thread_start(&eng->thread, NULL, engine_main, eng) != 0) {
        ERR("INIT", "pthread_create() for the engine failed");
        goto err_exec;
    }
    return eng;

err_exec:
    span_env_free(eng->senv);
    exec_destroy(eng->exec);
err_close:
    close(eng->doorbell);
err_free:
    free(eng);
    return NULL;
}

void engine_halt(engine_t *eng)
{
    if (eng->halted)
        return;
    pthread_mutex_lock(&eng->lock);
    eng->stop = 1;
    pthread_mutex_unlock(&eng->lock);
    engine_kick(eng);
    pthread_join(eng->thread, NULL);
    eng->halted = 1;
}

void engine_destroy(engine_t *eng)
{
    if (eng == NULL)
        return;
    engine_halt(eng);
    while (eng->comms != NULL) {
        eng_comm_t *c = eng->comms;
        eng->comms = c->next;
        eng_comm_free(c);
    }
    while (eng->sessions != NULL) {
        eng_session_t *s = eng->sessions;
        eng->sessions = s->next;
        free(s);
    }
    span_env_free(eng->senv);
    exec_destroy(eng->exec);
    close(eng->doorbell);
    pthread_mutex_destroy(&eng->lock);
    free(eng);
}

int engine_doorbell_fd(const engine_t *eng)
{
    return eng->doorbell;
}

unsigned engine_workers(const engine_t *eng)
{
    return exec_workers(eng->exec);
}

int engine_session_add(engine_t *eng, uint64_t sid, void *base, void *arena,
                       const shm_layout_t *layout)
{
    eng_session_t *s = calloc(1, sizeof(*s));

    if (s == NULL)
        return -ENOMEM;
    s->sid = sid;
    s->base = base;
    s->l = *layout;
    s->hdr = base;
    s->arena = arena;
    ring_attach(&s->sq, shm_ring(base, layout->sq_off), layout->sq_entries, sizeof(desc_t));
    ring_attach(&s->cq, shm_ring(base, layout->cq_off), layout->cq_entries, sizeof(cqe_t));
    pthread_mutex_lock(&eng->lock);
    s->next = eng->sessions;
    eng->sessions = s;
    /* The engine may be asleep, having marked only the sessions it had: tell this one to ring.
     * Without this a new client's first ops waited out the engine's 1 s poll (measured: the
     * first allreduce of a daemon-path comm took 0.88 s on every rank). When the engine is
     * awake the ring is one spare wake-up; its next sleep or wake sets the flag right. */
    __atomic_store_n(&s->hdr->daemon_sleeping, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&eng->lock);
    return 0;
}

void engine_session_remove(engine_t *eng, uint64_t sid)
{
    pthread_mutex_lock(&eng->lock);
    for (eng_session_t **pp = &eng->sessions; *pp != NULL; pp = &(*pp)->next) {
        eng_session_t *s = *pp;
        if (s->sid != sid)
            continue;
        s->dead = 1;
        for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
            for (uint32_t r = 0; r < c->nranks; r++)
                if (c->m[r].s == s) {
                    c->m[r].s = NULL;
                    c->left++;
                    c->culprit = c->global_of[r];
                    /* Halted: its ranks' ops wait for the next daemon, untouched. */
                    if (!eng->halted)
                        eng_comm_break(eng, c, "a rank's process disconnected");
                }
        *pp = s->next;
        free(s);
        break;
    }
    for (eng_comm_t **pp = &eng->comms; *pp != NULL;) {
        eng_comm_t *c = *pp;
        if (c->left == c->nranks) {
            *pp = c->next;
            eng_comm_free(c);
        } else {
            pp = &c->next;
        }
    }
    for (eng_session_t *s = eng->sessions; s != NULL && !eng->halted; s = s->next)
        eng_session_wake(s);
    pthread_mutex_unlock(&eng->lock);
}

int engine_comm_resume(engine_t *eng, uint32_t comm_id, const engine_resume_t *r)
{
    int rc = -ENOENT;

    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, comm_id);
    if (c != NULL) {
        c->done_below = r->done_below;
        c->maybe_started = r->maybe_started;
        c->next_seq = r->done_below;
        rc = 0;
        if (r->p2p_done != NULL) {
            size_t n = (size_t)c->nranks * c->nranks;
            c->p2p_done = malloc(n * sizeof(*c->p2p_done));
            if (c->p2p_done != NULL)
                memcpy(c->p2p_done, r->p2p_done, n * sizeof(*c->p2p_done));
            else
                rc = -ENOMEM;
        }
    }
    pthread_mutex_unlock(&eng->lock);
    return rc;
}

int engine_comm_create(engine_t *eng, uint32_t comm_id, uint32_t nranks, const uint64_t *members)
{
    eng_comm_t *c = calloc(1, sizeof(*c));

    if (c != NULL) {
        c->culprit = UINT32_MAX;
        c->coll_limit = UINT64_MAX;
    }
    int rc = 0;

    if (c == NULL)
        return -ENOMEM;
    c->id = comm_id;
    c->nranks = nranks;
    c->m = calloc(nranks, sizeof(*c->m));
    /* A send/recv runs as a 2-rank level-0 op (p2p_run), also on a comm of one rank that sends
     * to itself. */
    c->l0r = calloc(nranks < 2 ? 2 : nranks, sizeof(*c->l0r));
    if (c->m == NULL || c->l0r == NULL || eng_comm_set_ranks(c, nranks, NULL) != 0) {
        eng_comm_free(c);
        return -ENOMEM;
    }
    pthread_mutex_lock(&eng->lock);
    if (eng_comm_find(eng, comm_id) != NULL)
        rc = -EEXIST;
    for (uint32_t r = 0; r < nranks && rc == 0; r++) {
        c->m[r].s = eng_session_find(eng, members[r]);
        if (c->m[r].s == NULL)
            rc = -ENOENT;
    }
    if (rc == 0) {
        c->next = eng->comms;
        eng->comms = c;
    }
    pthread_mutex_unlock(&eng->lock);
    if (rc != 0)
        eng_comm_free(c);
    return rc;
}

void engine_comm_leave(engine_t *eng, uint32_t comm_id, uint32_t rank)
{
    pthread_mutex_lock(&eng->lock);
    for (eng_comm_t **pp = &eng->comms; *pp != NULL; pp = &(*pp)->next) {
        eng_comm_t *c = *pp;
        uint32_t local = eng_comm_local(c, rank); /* rank is global; members are this node's */
        if (c->id != comm_id || local == UINT32_MAX || c->m[local].s == NULL)
            continue;
        c->m[local].s = NULL;
        c->left++;
        eng_comm_rank_left(eng, c, rank, UINT64_MAX);
        if (c->left == c->nranks) {
            *pp = c->next;
            eng_comm_free(c);
        }
        break;
    }
    for (eng_session_t *s = eng->sessions; s != NULL; s = s->next)
        eng_session_wake(s);
    pthread_mutex_unlock(&eng->lock);
}

void engine_get_stats(engine_t *eng, engine_stats_t *st_p)
{
    pthread_mutex_lock(&eng->lock);
    *st_p = eng->st;
    st_p->data_conns = span_env_data_conns(eng->senv);
    st_p->ops_queued = 0;
    for (eng_comm_t *c = eng->comms; c != NULL; c = c->next)
        for (uint32_t r = 0; r < c->nranks; r++)
            st_p->ops_queued += c->m[r].coll.n + c->m[r].p2p.n;
    pthread_mutex_unlock(&eng->lock);
}

void engine_links(engine_t *eng, link_view_fn fn, void *ctx)
{
    pthread_mutex_lock(&eng->lock);
    span_env_links(eng->senv, fn, ctx);
    pthread_mutex_unlock(&eng->lock);
}

int engine_get_comm_stats(engine_t *eng, uint32_t comm_id, engine_comm_stats_t *st_p)
{
    int rc = -ENOENT;

    pthread_mutex_lock(&eng->lock);
    eng_comm_t *c = eng_comm_find(eng, comm_id);
    if (c != NULL) {
        st_p->ops_done = c->ops_done;
        st_p->broken = c->broken;
        st_p->broken_status = c->broken_status;
        memcpy(st_p->broken_why, c->why, sizeof(c->why));
        st_p->ready = eng_comm_state(c) == ENG_COMM_READY;
        st_p->queued = 0;
        for (uint32_t r = 0; r < c->nranks; r++)
            st_p->queued += c->m[r].coll.n + c->m[r].p2p.n;
        st_p->nlocal = c->nranks < ENGINE_STATS_RANKS ? c->nranks : ENGINE_STATS_RANKS;
        for (uint32_t r = 0; r < st_p->nlocal; r++) {
            st_p->ranks[r] = c->global_of[r];
            dq_t *q = &c->m[r].coll;
            st_p->posted[r] = q->n > 0 ? dq_at(q, q->n - 1)->seq + 1 : c->next_seq;
        }
        span_stats_t ss = {.algo = -1};
        st_p->nnodes = 0;
        if (c->span != NULL)
            c->sops->stats(c->span, &ss, st_p->link, ENGINE_STATS_RANKS, &st_p->nnodes);
        st_p->algo = ss.algo;
        st_p->on_wire = ss.on_wire;
        st_p->round = ss.round;
        st_p->nrounds = ss.nrounds;
        st_p->nwaiting = ss.nwaiting;
        memcpy(st_p->waiting, ss.waiting, sizeof(ss.waiting));
        st_p->measured = ss.measured;
        st_p->alpha_us = ss.alpha_us;
        st_p->gbps = ss.gbps;
        st_p->reduce_gbps = ss.reduce_gbps;
        st_p->overhead_us = ss.overhead_us;
        st_p->host_load = ss.host_load;
        st_p->nsuspended = ss.nsuspended;
        st_p->suspended_ns = ss.suspended_ns;
        rc = 0;
    }
    pthread_mutex_unlock(&eng->lock);
    return rc;
}

int engine_get_session_stats(engine_t *eng, uint64_t sid, engine_session_stats_t *st_p)
{
    int rc = -ENOENT;

    pthread_mutex_lock(&eng->lock);
    eng_session_t *s = eng_session_find(eng, sid);
    if (s != NULL) {
        st_p->submitted = s->submitted;
        st_p->completed = s->completed;
        rc = 0;
    }
    pthread_mutex_unlock(&eng->lock);
    return rc;
}

uint64_t engine_last_beat_ns(engine_t *eng)
{
    uint64_t b = __atomic_load_n(&eng->beat_ns, __ATOMIC_RELAXED);

    /* Before the thread's first turn, count from now. */
    return b ? b : now_ns();
}

void engine_set_host(engine_t *eng, uint64_t host)
{
    pthread_mutex_lock(&eng->lock);
    span_env_set_host(eng->senv, host);
    pthread_mutex_unlock(&eng->lock);
}

void engine_set_class(engine_t *eng, int i, uint32_t priority, uint64_t max_bw_bps, int dscp,
                      uint32_t hold_us)
{
    pthread_mutex_lock(&eng->lock);
    qos_sched_set(&eng->qos, i, priority, max_bw_bps, dscp, now_ns());
    qos_sched_set_hold(&eng->qos, i, (uint64_t)hold_us * 1000);
    pthread_mutex_unlock(&eng->lock);
    engine_kick(eng);
}

void engine_class_stats(engine_t *eng, int i, engine_class_stats_t *st_p)
{
    *st_p = (engine_class_stats_t){0};
    pthread_mutex_lock(&eng->lock);
    if (i >= 0 && i < QOS_SCHED_CLASSES) {
        const qos_bucket_t *b = &eng->qos.cls[i];
        st_p->sent_bytes = b->sent_bytes;
        st_p->rate_Bps = qos_recent_rate(b, now_ns());
        st_p->waiting = b->waiting;
    }
    pthread_mutex_unlock(&eng->lock);
}
