/*
 * A daemon that restarts under a running job (issue 37, part 3). Once a comm of the process has
 * op retry on (L0 or L1), a keeper thread watches the connection to the daemon. When it closes
 * (a crash, `systemctl restart hccld`), the keeper marks the client away and, for up to the
 * longest hold of its comms, connects again to the same socket:
 *   1. it takes the completions the old daemon posted, and formats both rings afresh;
 *   2. Rejoin: the same segment and arena go to the new daemon (their memfds), which sends its
 *      doorbell back;
 *   3. CommRejoinReq for every comm with a resume token (formed on one daemon), with how far its
 *      pieces got; the daemon answers once every rank of the comm asked (all are sent first, so
 *      ranks that share several comms never wait for each other);
 *   4. every piece posted and not completed is posted again, in the order it was first posted:
 *      the daemon completes at once those that another rank's completion proves done, and runs
 *      the others (engine_resume_t).
 * Meanwhile waits go on (cooperative ops need no daemon), and requests wait for the keeper. A
 * comm the new daemon does not take fails its ops with HCCL_E_REMOTE; a daemon that does not
 * come back within the hold leaves the client dead: HCCL_E_UNAVAIL, naming the socket.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "futex.h"
#include "log.h"

#define RECONNECT_PAUSE_US 20000
#define KEEPER_POLL_MS 200

uint32_t hc_restart_hold_ms(const retry_conf_t *rr)
{
    if (!rr->enable[0] && !rr->enable[1])
        return 0;
    uint64_t ms = rr->hold_ms + (uint64_t)(rr->max_cnt - 1) * rr->interval_ms;
    return ms > 0 ? (uint32_t)ms : 1;
}

static void *keeper_main(void *arg);
static __thread int in_keeper; /* this thread is the keeper: it never waits for itself */

void hc_comm_track(hc_comm_t *comm)
{
    hc_client_t *c = comm->c;

    pthread_mutex_lock(&c->comms_lock);
    comm->next_live = c->comms;
    c->comms = comm;
    if (comm->restart_hold_ms > c->restart_hold_ms)
        c->restart_hold_ms = comm->restart_hold_ms;
    if (comm->restart_hold_ms > 0 && !c->keeper_on) {
        if (pthread_create(&c->keeper, NULL, keeper_main, c) == 0)
            __atomic_store_n(&c->keeper_on, 1, __ATOMIC_RELEASE);
        else
            WARN("IPC", "cannot start the thread that waits for a restarted daemon; a restart "
                        "ends this process's comms");
    }
    pthread_mutex_unlock(&c->comms_lock);
}

void hc_comm_untrack(hc_comm_t *comm)
{
    hc_client_t *c = comm->c;

    pthread_mutex_lock(&c->comms_lock);
    for (hc_comm_t **pp = &c->comms; *pp != NULL; pp = &(*pp)->next_live)
        if (*pp == comm) {
            *pp = comm->next_live;
            break;
        }
    pthread_mutex_unlock(&c->comms_lock);
}

void hc_keeper_stop(hc_client_t *c)
{
    if (!__atomic_load_n(&c->keeper_on, __ATOMIC_ACQUIRE))
        return;
    __atomic_store_n(&c->keeper_stop, 1, __ATOMIC_RELEASE);
    /* A child after fork() has the parent's client but not its keeper thread. */
    if (!in_keeper && c->pid == getpid())
        pthread_join(c->keeper, NULL);
    __atomic_store_n(&c->keeper_on, 0, __ATOMIC_RELEASE);
}

int hc_wait_back(hc_client_t *c)
{
    pthread_mutex_lock(&c->ctl_lock);
    while (hc_client_away(c) && !hc_client_dead(c) && !pthread_equal(pthread_self(), c->keeper)) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&c->ctl_cv, &c->ctl_lock, &ts);
    }
    pthread_mutex_unlock(&c->ctl_lock);
    return hc_client_dead(c) ? -EPIPE : 0;
}

/* Ends the away state either way and wakes every waiter. */
static void back(hc_client_t *c, int ok)
{
    pthread_mutex_lock(&c->ctl_lock);
    if (!ok)
        hc_client_set_dead(c);
    __atomic_store_n(&c->away, 0, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&c->ctl_cv);
    pthread_mutex_unlock(&c->ctl_lock);
    hc_wake_waiters(c);
}

/* Replaces the control connection (no reader may be on the old one); stale answers go. */
static void conn_replace(hc_client_t *c, int fd)
{
    pthread_mutex_lock(&c->ctl_lock);
    while (c->reader_active)
        pthread_cond_wait(&c->ctl_cv, &c->ctl_lock);
    uds_conn_close(&c->conn);
    uds_conn_init(&c->conn, fd);
    for (unsigned i = 0; i < sizeof(c->parked) / sizeof(c->parked[0]); i++) {
        if (c->parked[i] == NULL)
            continue;
        frame_msg_free(c->parked[i]);
        c->parked[i] = NULL;
        for (int k = 0; k < c->parked_nfds[i]; k++)
            close(c->parked_fds[i][k]);
        c->parked_nfds[i] = 0;
    }
    pthread_mutex_unlock(&c->ctl_lock);
}

/* Step 1, under sq_lock and cq_lock: what the old daemon completed is taken, and both rings
 * start empty (nothing else touches them: no daemon, and our own threads wait for the locks). */
static void rings_reset(hc_client_t *c)
{
    hc_drain_locked(c);
    ring_format(c->sq.hdr, c->l.sq_entries);
    ring_format(c->cq.hdr, c->l.cq_entries);
    c->sq.mine = 0; /* our own index of each: the producer's of sq, the consumer's of cq */
    c->cq.mine = 0;
}

/* Step 2: 0, or -EAGAIN (try again: the daemon is not up yet), or -EPROTO (it refused). */
static int rejoin_session(hc_client_t *c, uint64_t deadline)
{
    Hccld__Msg m = HCCLD__MSG__INIT, *resp = NULL;
    Hccld__Rejoin r = HCCLD__REJOIN__INIT;
    int fds[UDS_MAX_FDS], nfds = 0, rc = -EAGAIN, mine[2] = {c->seg_fd, c->arena_fd};
    uint64_t id;

    r.version = PROTO_VERSION;
    r.pid = (uint32_t)getpid();
    r.arena_bytes = c->l.arena_bytes;
    r.job_name = getenv("HCCL_JOB_NAME") ? getenv("HCCL_JOB_NAME") : "";
    r.qos_class = getenv("HCCL_QOS_CLASS") ? getenv("HCCL_QOS_CLASS") : "";
    m.body_case = HCCLD__MSG__BODY_REJOIN;
    m.rejoin = &r;
    if (hc_ctl_send(c, &m, mine, 2, &id) != 0 ||
        hc_ctl_wait(c, id, deadline, &resp, fds, &nfds) != HCCL_SUCCESS)
        return -EAGAIN;
    if (resp->body_case != HCCLD__MSG__BODY_WELCOME) {
        rc = -EPROTO;
    } else if (resp->welcome->result != HCCL_SUCCESS) {
        ERR("IPC", "the restarted daemon at %s refused us: %s", c->socket_path,
            resp->welcome->message);
        rc = -EPROTO;
    } else if (nfds >= 1) {
        if (c->doorbell >= 0)
            close(c->doorbell);
        c->doorbell = fds[0];
        fds[0] = -1;
        rc = 0;
    }
    for (int i = 0; i < nfds; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    frame_msg_free(resp);
    return rc;
}

/* How far comm's pieces got, from the slots (the caller holds sq_lock and cq_lock). A daemon
 * that stopped cleanly began none of those not completed: then none counts as posted. */
static void comm_progress(hc_client_t *c, hc_comm_t *comm, int clean, Hccld__CommRejoinReq *q)
{
    uint32_t n = comm->nranks;

    q->coll_next = q->coll_posted = comm->coll_posted;
    for (uint32_t p = 0; p < n; p++) {
        q->send_next[p] = comm->p2p_posted[p];
        q->recv_next[p] = comm->p2p_posted[n + p];
    }
    for (uint32_t i = 0; i < c->nslots; i++) {
        const hc_slot_t *s = &c->slots[i];
        if (s->comm != comm || !s->busy || !s->posted || s->done)
            continue;
        uint64_t *v = desc_is_collective(s->d.kind) ? &q->coll_next
                      : s->d.kind == DESC_SEND      ? &q->send_next[s->d.root % n]
                                                    : &q->recv_next[s->d.root % n];
        if (s->d.seq < *v)
            *v = s->d.seq;
    }
    if (clean)
        q->coll_posted = q->coll_next;
}

typedef struct pending {
    hc_comm_t *comm;
    uint64_t id;
    uint64_t *next; /* send_next, recv_next */
} pending_t;

/* Step 3: every comm with a token is asked for at once, then the answers awaited. Comms the
 * daemon does not take are marked failed. Returns how many it took. */
static unsigned rejoin_comms(hc_client_t *c, int clean, uint64_t deadline)
{
    unsigned np = 0, ok = 0, ncomms = 0;
    pending_t *pv;

    pthread_mutex_lock(&c->comms_lock);
    for (hc_comm_t *k = c->comms; k != NULL; k = k->next_live)
        ncomms++;
    pv = calloc(ncomms ? ncomms : 1, sizeof(*pv));
    for (hc_comm_t *k = c->comms; k != NULL; k = k->next_live) {
        Hccld__Msg m = HCCLD__MSG__INIT;
        Hccld__CommRejoinReq q = HCCLD__COMM_REJOIN_REQ__INIT;
        int fd = hc_coop_ctl_fd(k);
        uint64_t *next = pv != NULL ? calloc(2 * (size_t)k->nranks, sizeof(uint64_t)) : NULL;
        int across = k->nnodes > 1;
        if (!k->has_token || k->restart_hold_ms == 0 || (across && k->span_record == NULL) ||
            next == NULL) {
            if (!__atomic_exchange_n(&k->rejoin_failed, 1, __ATOMIC_ACQ_REL))
                ERR("COLL",
                    "rank %u: comm %u cannot be registered again with the restarted "
                    "daemon (%s); its ops fail",
                    k->rank, k->id,
                    k->restart_hold_ms == 0 ? "op retry is off for it"
                    : next == NULL          ? "out of memory"
                    : across ? "it shares its parent's connections across daemons: not supported "
                               "yet"
                             : "its daemon gave it no token");
            free(next);
            continue;
        }
        q.comm_id = k->id;
        q.nranks = k->nranks;
        q.rank = k->rank;
        q.coop = k->coop != NULL;
        q.token.data = k->resume_token;
        q.token.len = sizeof(k->resume_token);
        q.hold_ms = k->restart_hold_ms;
        q.chunk_bytes = k->chunk_bytes;
        q.n_send_next = q.n_recv_next = k->nranks;
        q.send_next = next;
        q.recv_next = next + k->nranks;
        q.span_record.data = k->span_record;
        q.span_record.len = k->span_record_len;
        comm_progress(c, k, clean, &q);
        m.body_case = HCCLD__MSG__BODY_COMM_REJOIN_REQ;
        m.comm_rejoin_req = &q;
        if (hc_ctl_send(c, &m, q.coop ? &fd : NULL, q.coop ? 1 : 0, &pv[np].id) != 0) {
            free(next);
            continue;
        }
        pv[np].comm = k;
        pv[np++].next = next;
    }
    pthread_mutex_unlock(&c->comms_lock);
    for (unsigned i = 0; i < np; i++) {
        Hccld__Msg *resp = NULL;
        hc_comm_t *k = pv[i].comm;
        HcclResult rc = hc_ctl_wait(c, pv[i].id, deadline, &resp, NULL, NULL);
        if (rc == HCCL_SUCCESS && resp->body_case == HCCLD__MSG__BODY_COMM_INIT_RESP)
            rc = (HcclResult)resp->comm_init_resp->result;
        else if (rc == HCCL_SUCCESS)
            rc = HCCL_E_INTERNAL;
        if (rc == HCCL_SUCCESS) {
            ok++;
            INFO("COLL", "rank %u: comm %u registered again with the restarted daemon", k->rank,
                 k->id);
        } else {
            __atomic_store_n(&k->rejoin_failed, 1, __ATOMIC_RELEASE);
            ERR("COLL", "rank %u: the restarted daemon did not take comm %u back: %s (%s)", k->rank,
                k->id,
                resp != NULL && resp->body_case == HCCLD__MSG__BODY_COMM_INIT_RESP
                    ? resp->comm_init_resp->message
                    : "no answer",
                HcclGetErrorString(rc));
        }
        frame_msg_free(resp);
        free(pv[i].next);
    }
    free(pv);
    return ok;
}

static int post_order(const void *a, const void *b)
{
    const hc_slot_t *x = *(hc_slot_t *const *)a, *y = *(hc_slot_t *const *)b;

    return x->post_no < y->post_no ? -1 : x->post_no > y->post_no;
}

/* Step 4 (sq_lock and cq_lock held): the pieces not completed go to the new daemon again, in
 * their first order; those of comms it did not take fail here. Returns how many went. */
static unsigned repost(hc_client_t *c)
{
    hc_slot_t **v = calloc(c->nslots, sizeof(*v));
    unsigned n = 0, sent = 0;

    for (uint32_t i = 0; i < c->nslots; i++) {
        hc_slot_t *s = &c->slots[i];
        if (!s->busy || !s->posted || s->done)
            continue;
        if (s->abandoned) {
            s->busy = 0; /* its waiter is gone, and no completion will come for it now */
            continue;
        }
        if (v != NULL && !__atomic_load_n(&s->comm->rejoin_failed, __ATOMIC_ACQUIRE)) {
            v[n++] = s;
            continue;
        }
        s->cqe = (cqe_t){.tag = s->d.tag, .status = HCCL_E_REMOTE, .algo = -1};
        __atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
    }
    qsort(v, n, sizeof(*v), post_order);
    for (unsigned i = 0; i < n; i++)
        if (ring_push(&c->sq, &v[i]->d) == 0) {
            v[i]->reposts++;
            sent++;
        }
    free(v);
    return sent;
}

/* Brings the daemon back, or marks the client dead when it did not come back by the deadline. */
static void rejoin(hc_client_t *c)
{
    unsigned comms = 0, pieces = 0;
    int rc = -EAGAIN;

    pthread_mutex_lock(&c->comms_lock);
    uint32_t hold_ms = c->restart_hold_ms;
    pthread_mutex_unlock(&c->comms_lock);
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)hold_ms * 1000000ull;

    WARN("IPC", "the daemon at %s went away (a restart?); waiting up to %u ms for it to come back",
         c->socket_path, hold_ms);
    while (!__atomic_load_n(&c->keeper_stop, __ATOMIC_ACQUIRE) && now_ns() < deadline) {
        int fd = uds_connect(c->socket_path);
        if (fd < 0) {
            usleep(RECONNECT_PAUSE_US);
            continue;
        }
        pthread_mutex_lock(&c->sq_lock);
        pthread_mutex_lock(&c->cq_lock);
        int clean = __atomic_load_n(&c->hdr->halted_cleanly, __ATOMIC_ACQUIRE);
        rings_reset(c);
        pthread_mutex_unlock(&c->cq_lock);
        conn_replace(c, fd);
        rc = rejoin_session(c, deadline);
        if (rc == 0) {
            comms = rejoin_comms(c, clean, deadline);
            pthread_mutex_lock(&c->cq_lock);
            pieces = repost(c);
            pthread_mutex_unlock(&c->cq_lock);
        }
        pthread_mutex_unlock(&c->sq_lock);
        if (rc != -EAGAIN)
            break;
        usleep(RECONNECT_PAUSE_US);
    }
    if (rc != 0) {
        ERR("IPC",
            "the daemon at %s did not come back within %u ms (the comms' op retry hold "
            "time): its ops fail",
            c->socket_path, hold_ms);
        back(c, 0);
        return;
    }
    back(c, 1);
    uint64_t one = 1;
    if (write(c->doorbell, &one, sizeof(one)) < 0)
        WARN("IPC", "write() on the daemon's doorbell failed");
    WARN("IPC",
         "the daemon at %s is back after %.2f s: %u comm(s) registered again, %u piece(s) "
         "posted again",
         c->socket_path, (double)(now_ns() - t0) / 1e9, comms, pieces);
}

static void *keeper_main(void *arg)
{
    hc_client_t *c = arg;

    in_keeper = 1;
    while (!__atomic_load_n(&c->keeper_stop, __ATOMIC_ACQUIRE)) {
        /* Gone for good: it waits to be stopped (a thread that ended unjoined is a leak). */
        if (hc_client_dead(c)) {
            usleep(KEEPER_POLL_MS * 1000);
            continue;
        }
        struct pollfd pfd = {.fd = c->conn.fd, .events = POLLRDHUP};
        int hup = poll(&pfd, 1, KEEPER_POLL_MS) > 0 &&
                  (pfd.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
        if (!hup && !hc_client_away(c))
            continue;
        __atomic_store_n(&c->away, 1, __ATOMIC_RELEASE);
        rejoin(c);
    }
    return NULL;
}
