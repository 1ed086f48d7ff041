/*
 * RDMA connections that outlive their QP (tp_retry_t, op retry across link faults), as TCP's
 * do their socket (tcp_resume.c), but with nothing copied: a SEND completes only once the
 * peer's device has acknowledged it, by which time its receive completion is in the peer's
 * CQ, ahead of any error. So a send not completed keeps its user's buffer, which can go again,
 * and one completed is the peer's.
 *
 * Each side counts the data messages it has taken in full (rx_count) and its sends completed
 * (tx_count). When the QP fails for the link's sake (its retries ran out, a flush, the peer's
 * disconnect without BYE), the connection suspends instead of failing: its requests wait, its
 * QP and id go at the next safe point (not inside a CQ poll or a CM event), the message coming
 * in is dropped (it comes again from its start), and the connecting side dials again at once
 * and every RDMA_REDIAL_MS with AGAIN, a HELLO that names the connection and proves the key
 * again. The accepting side answers it like any request, and once the key is proven its new
 * QP, slots and id go to the suspended connection of that name (the connection they came on is
 * closed by its user). Both sides then send RESUME (their rx_count) before anything else: the
 * sends the peer counted complete, the rest go again from their start, in order. A connection
 * not back within its hold time fails with the error that suspended it.
 *
 * A close on purpose says BYE first and waits (briefly) for it to be acknowledged, so that the
 * peer tells it from a failure. Everything runs on the engine's thread, the registry included.
 */
#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"

#define RDMA_REDIAL_MS 100
/* A dial whose handshake is not done by then is given up for the next one: rdma_cm would
 * wait seconds on a link that is down. */
#define RDMA_REDIAL_HS_MS 1000
/* How long a close waits for its BYE to be acknowledged. */
#define RDMA_BYE_WAIT_NS (20ull * 1000000ull)

static rdma_conn_t *registry; /* resumable connections' accepting sides, by conn_id */

void rdma_resume_init_connect(rdma_conn_t *c, const char *src_ip, const uint8_t *job,
                              const uint8_t *key, uint32_t my_node)
{
    snprintf(c->rs.src, sizeof(c->rs.src), "%s", src_ip != NULL ? src_ip : "");
    memcpy(c->rs.job, job, AUTH_JOB_BYTES);
    memcpy(c->rs.key, key, AUTH_KEY_BYTES);
    c->rs.my_node = my_node;
    while (c->rs.conn_id == 0)
        randombytes_buf(&c->rs.conn_id, sizeof(c->rs.conn_id));
}

static rdma_conn_t *registry_find(uint64_t conn_id, const uint8_t *job)
{
    for (rdma_conn_t *c = registry; c != NULL; c = c->rs.next)
        if (c->rs.conn_id == conn_id && memcmp(c->rs.job, job, AUTH_JOB_BYTES) == 0)
            return c;
    return NULL;
}

/* Held: resumable, not failed for good. */
static int held(const rdma_conn_t *c)
{
    return c != NULL && c->rs.enabled && c->state != RDMA_ST_FAILED;
}

int rdma_resume_set(rdma_conn_t *c, const tp_retry_t *r)
{
    c->rs.enabled = r->enabled;
    c->rs.hold_ns = r->hold_ms * 1000000ull;
    return 0;
}

static const char *who(const rdma_conn_t *c, char *buf, size_t cap)
{
    if (c->active)
        snprintf(buf, cap, "to %s", c->peer);
    else
        snprintf(buf, cap, "from node %u (%s)", c->hs.peer_node, c->peer);
    return buf;
}

/* " (3 dials)" on the side that dials, "" on the other. */
static const char *dials(const rdma_conn_t *c, char *buf, size_t cap)
{
    if (c->active)
        snprintf(buf, cap, " (%u dial%s)", c->rs.attempts, c->rs.attempts == 1 ? "" : "s");
    else
        buf[0] = '\0';
    return buf;
}

int rdma_resume_suspend(rdma_conn_t *c, int err, const char *why)
{
    char w[TP_ADDR_MAX + 32];

    /* A request withdrawn half done (its buffer gone) cannot go again: that fails for real. */
    if (!c->rs.enabled || err == -ECANCELED)
        return -1;
    /* The stopped QP's flushes are expected; anything else wrong in what it delivered fails
     * the connection. */
    if (c->rs.salvage)
        return tp_peer_gone(err) ? 0 : -1;
    if (c->rs.down) {
        /* A dial that failed, or the rest of a failure already seen: the next dial. */
        if (c->state != RDMA_ST_SUSPENDED) {
            DBG("NET", "RDMA data connection %s: dial %u failed: %s", who(c, w, sizeof(w)),
                c->rs.attempts, why[0] != '\0' ? why : strerror(-err));
            c->rs.drop = 1;
            c->state = RDMA_ST_SUSPENDED;
            c->rs.next_dial_ns = now_ns() + RDMA_REDIAL_MS * 1000000ull;
        }
        return 0;
    }
    if (!tp_peer_gone(err) || c->state != RDMA_ST_READY || c->rs.got_bye)
        return -1;
    c->rs.down = 1;
    c->rs.drop = 1;
    c->rs.failed_ns = now_ns();
    c->rs.next_dial_ns = c->rs.failed_ns;
    c->rs.first_err = err;
    c->rs.attempts = 0;
    c->state = RDMA_ST_SUSPENDED;
    WARN("NET",
         "RDMA data connection %s failed (%s); its messages wait up to %llu ms for it to come "
         "back",
         who(c, w, sizeof(w)), why[0] != '\0' ? why : strerror(-err),
         (unsigned long long)(c->rs.hold_ns / 1000000));
    return 0;
}

static int rewind_sends(rdma_conn_t *c, uint64_t count);

/* What the stopped QP delivered before it failed is the peer's count of what we have (its
 * sends completed): its completions are taken, and its messages in full, before it goes. A
 * RESUME among them (the QP failed while resuming) is the peer's word too. */
static void salvage(rdma_conn_t *c)
{
    if (c->cq == NULL)
        return;
    c->rs.salvage = 1;
    while (rdma_cq_poll(c) > 0)
        ;
    while (c->arr_count > 0) {
        const rdma_arrival_t *a = &c->arrived[c->arr_head];

        if (a->h.type == RDMA_MSG_RESUME ? rewind_sends(c, a->h.len) < 0
                                         : a->h.type != RDMA_MSG_DATA || rdma_rx_take(c, a) <= 0)
            break;
        c->arr_head = (c->arr_head + 1) % c->depth;
        c->arr_count--;
    }
    c->rs.salvage = 0;
}

/* The QP, its slots and its id go; what was coming in comes again from its start. */
static void link_drop(rdma_conn_t *c)
{
    rdma_qp_shutdown(c);
    salvage(c);
    rdma_qp_destroy(c);
    rdma_id_release(c->id, c->ch);
    c->id = NULL;
    c->ch = NULL;
    c->connected = 0;
    c->av_set = 0;
    c->peer_gone = 0;
    c->credits = c->peer_depth = c->to_return = c->nfree_send = 0;
    c->arr_head = c->arr_count = 0;
    c->probe_out = 0;
    if (c->rx_active && c->rx_req != NULL)
        tp_queue_push_front(&c->recvq, &c->rx_req->base);
    if (c->rx_unexp != NULL)
        tp_kept_drop(&c->kept, c->rx_unexp);
    c->rx_req = NULL;
    c->rx_unexp = NULL;
    c->rx_active = 0;
    c->rx_got = 0;
    c->rs.drop = 0;
}

/* Moves n's QP, slots, id and flow control to t (every field rdma_qp.c, rdma_setup.c and the
 * flow control set up for a QP), leaving n without any. */
static void link_move(rdma_conn_t *t, rdma_conn_t *n)
{
    t->id = n->id;
    t->id->context = t;
    t->ch = n->ch;
    t->pd = n->pd;
    t->cc = n->cc;
    t->cq = n->cq;
    t->qp = n->qp;
    t->mr = n->mr;
    t->bufs = n->bufs;
    t->depth = n->depth;
    t->slot = n->slot;
    t->free_send = n->free_send;
    t->nfree_send = n->nfree_send;
    t->send_last = n->send_last;
    t->arrived = n->arrived;
    t->arr_head = n->arr_head;
    t->arr_count = n->arr_count;
    t->credits = n->credits;
    t->peer_depth = n->peer_depth;
    t->frag_max = n->frag_max;
    t->to_return = n->to_return;
    t->connected = n->connected;
    t->av_set = n->av_set;
    t->tos = n->tos;
    t->rx_last_ns = n->rx_last_ns;
    t->probe_last_ns = n->probe_last_ns;
    t->probe_out = n->probe_out;
    t->tx_moved_ns = n->tx_moved_ns;
    n->id = NULL;
    n->ch = NULL;
    n->pd = NULL;
    n->cc = NULL;
    n->cq = NULL;
    n->qp = NULL;
    n->mr = NULL;
    n->bufs = NULL;
    n->free_send = NULL;
    n->send_last = NULL;
    n->arrived = NULL;
    n->nfree_send = n->arr_count = n->credits = 0;
    n->connected = 0;
    n->probe_out = 0;
}

int rdma_resume_check(const rdma_hello_t *hello)
{
    return !hello->again || held(registry_find(hello->conn_id, hello->job)) ? 0 : -ENOENT;
}

void rdma_resume_ready(rdma_conn_t *c)
{
    c->rs.conn_id = c->hs.conn_id;
    memcpy(c->rs.job, c->hs.job, AUTH_JOB_BYTES);
    if (c->hs.again) {
        c->rs.adopt = 1;
        return;
    }
    c->rs.next = registry;
    registry = c;
}

int rdma_resume_begin(rdma_conn_t *c)
{
    c->state = RDMA_ST_RESUMING;
    return rdma_send_ctrl(c, RDMA_MSG_RESUME, c->rs.rx_count, NULL, 0);
}

int rdma_resume_adopt(rdma_conn_t *n)
{
    rdma_conn_t *t = registry_find(n->rs.conn_id, n->rs.job);
    int rc;

    n->rs.adopt = 0;
    if (!held(t)) {
        rdma_conn_fail(n, -ENOENT, LOG_WARN,
                       "node %u came back for a data connection this daemon does not hold (any "
                       "more); refused",
                       n->hs.peer_node);
        return -ENOENT;
    }
    /* Its old QP may still look sound here (the failure was seen by the other side). */
    if (!t->rs.down)
        (void)rdma_resume_suspend(t, -ECONNRESET, "the peer came back on a new QP");
    link_drop(t);
    link_move(t, n);
    n->state = RDMA_ST_ABSORBED;
    if ((rc = rdma_resume_begin(t)) != 0)
        rdma_conn_fail(t, rc, LOG_ERROR, NULL);
    return 0;
}

/* The peer has count of our messages: those complete, the rest go again from their start. */
static int rewind_sends(rdma_conn_t *c, uint64_t count)
{
    uint64_t n = c->rs.tx_count, again = 0;
    tp_req_t *q;

    if (count < n) {
        c->rs.enabled = 0;
        rdma_conn_fail(c, -EPROTO, LOG_ERROR,
                       "the peer has %llu of our messages, fewer than the %llu it acknowledged "
                       "(did its daemon restart?)",
                       (unsigned long long)count, (unsigned long long)n);
        return -EPROTO;
    }
    tp_queue_prepend(&c->sendq, &c->sentq);
    while (n < count && (q = c->sendq.head) != NULL && rdma_req_of(q)->started) {
        tp_req_complete(tp_queue_pop(&c->sendq), 0);
        c->rs.tx_count = ++n;
    }
    if (n < count) {
        c->rs.enabled = 0;
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "the peer has %llu of our messages, we sent %llu",
                       (unsigned long long)count, (unsigned long long)n);
        return -EPROTO;
    }
    for (q = c->sendq.head; q != NULL; q = q->next) {
        rdma_req_t *r = rdma_req_of(q);
        again += r->started;
        r->posted = 0;
        r->started = 0;
    }
    return (int)(again > 0x7fffffff ? 0x7fffffff : again);
}

int rdma_resume_on_resume(rdma_conn_t *c, uint64_t count)
{
    char w[TP_ADDR_MAX + 32], d[32];
    uint64_t now = now_ns();
    int again;

    if (c->state != RDMA_ST_RESUMING) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "a RESUME out of place");
        return -EPROTO;
    }
    if ((again = rewind_sends(c, count)) < 0)
        return again;
    c->state = RDMA_ST_READY;
    c->rs.down = 0;
    c->rs.resumes++;
    c->rs.suspended_total += now - c->rs.failed_ns;
    WARN("NET", "RDMA data connection %s is back after %.0f ms%s; %d send%s again",
         who(c, w, sizeof(w)), (double)(now - c->rs.failed_ns) / 1e6, dials(c, d, sizeof(d)), again,
         again == 1 ? " goes" : "s go");
    return 1;
}

int rdma_resume_progress(rdma_conn_t *c)
{
    char w[TP_ADDR_MAX + 32], d[32];
    uint64_t now;

    if (!c->rs.down)
        return 0;
    if (c->rs.drop)
        link_drop(c);
    now = now_ns();
    if (now - c->rs.failed_ns > c->rs.hold_ns) {
        ERR("NET",
            "RDMA data connection %s: not back within %llu ms%s; it fails with its first error "
            "(%s)",
            who(c, w, sizeof(w)), (unsigned long long)(c->rs.hold_ns / 1000000),
            dials(c, d, sizeof(d)), strerror(-c->rs.first_err));
        link_drop(c);
        c->rs.enabled = 0;
        c->rs.down = 0;
        c->state = RDMA_ST_SUSPENDED;
        rdma_conn_fail(c, c->rs.first_err, LOG_ERROR, NULL);
        return c->err;
    }
    if (!c->active)
        return 0;
    if (c->state == RDMA_ST_SUSPENDED && now >= c->rs.next_dial_ns) {
        c->rs.attempts++;
        c->rs.dial_end_ns = now + RDMA_REDIAL_HS_MS * 1000000ull;
        if (rdma_setup_dial(c) != 0) {
            link_drop(c);
            c->state = RDMA_ST_SUSPENDED;
            c->rs.next_dial_ns = now + RDMA_REDIAL_MS * 1000000ull;
        }
    } else if ((c->state == RDMA_ST_ADDR || c->state == RDMA_ST_ROUTE ||
                c->state == RDMA_ST_CONNECT) &&
               now > c->rs.dial_end_ns) {
        DBG("NET", "RDMA data connection %s: dial %u not answered within %u ms",
            who(c, w, sizeof(w)), c->rs.attempts, RDMA_REDIAL_HS_MS);
        link_drop(c);
        c->state = RDMA_ST_SUSPENDED;
        c->rs.next_dial_ns = now;
    }
    return 0;
}

void rdma_resume_stats(rdma_conn_t *c, tp_retry_stats_t *st)
{
    st->suspended = c->rs.down;
    st->resumes = c->rs.resumes;
    st->suspended_ns = c->rs.suspended_total + (c->rs.down ? now_ns() - c->rs.failed_ns : 0);
    st->ended = c->eof;
    st->held = c->rx_unexp != NULL;
    for (const tp_msg_t *m = c->kept.head; m != NULL; m = m->next)
        st->held++;
}

/* BYE, and its acknowledgement awaited briefly: the QP stops right after, and what is still
 * on it is flushed. Best effort: without it the peer waits out its hold time. */
static void bye(rdma_conn_t *c)
{
    uint64_t end = now_ns() + RDMA_BYE_WAIT_NS;

    if (!c->rs.enabled || c->state != RDMA_ST_READY || c->eof || c->peer_gone || c->credits < 1 ||
        c->nfree_send == 0 || rdma_send_ctrl(c, RDMA_MSG_BYE, 0, NULL, 0) != 0)
        return;
    while (rdma_tx_busy(c) && c->state == RDMA_ST_READY && now_ns() < end)
        if (rdma_cq_poll(c) == 0)
            usleep(50);
}

void rdma_resume_close(rdma_conn_t *c)
{
    bye(c);
    for (rdma_conn_t **pp = &registry; *pp != NULL; pp = &(*pp)->rs.next)
        if (*pp == c) {
            *pp = c->rs.next;
            break;
        }
    sodium_memzero(c->rs.key, sizeof(c->rs.key));
}
