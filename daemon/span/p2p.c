/*
 * Send/Recv between ranks of different daemons. A send goes out on the comm's connection to
 * the receiver's node as soon as it is queued, and a receive is posted on the connection from
 * the sender's node as soon as it is queued: the transport keeps a message that arrives before
 * its receive (transport.h), so neither side waits for the other to post. All messages of one
 * (sender, receiver) pair carry one tag, so they match in posting order, as HCCL's and MPI's
 * pairs do; collectives, and other comms sharing the connection, use other tags (tag.h).
 * Pairs within this node take the engine's local path (sched/match.c). The engine hands each
 * transfer over as it is queued (span_p2p_post); its end is a P2P_DONE event.
 */
#include <errno.h>
#include <stdlib.h>

#include "desc_check.h"
#include "dtype.h"
#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"
#include "span/xfer_result.h"

_Static_assert(SPAN_RANK_MAX <= TAG_RANK_MAX, "ranks fit the send/recv tags");

/* One posted transfer; its descriptor is out of the member's queue. */
struct p2p_flight {
    desc_t d;
    uint32_t local;        /* the member that posted it */
    uint64_t t_in, t_post; /* taken in, put on the connection (now_ns()) */
    const void *buf;       /* the rank's data (a send's, kept by p2p_log.c when it is done) */
    tp_req_t *req;
    struct p2p_flight *next;
};

/* The connection to node: 1 ready, 0 not yet, or the negative errno it failed with. */
static int node_state(const span_comm_t *mu, uint32_t node)
{
    return mu->conns[node] != NULL ? tp_conn_state(mu->conns[node]) : 0;
}

/* Says that d of local member l failed with err on the connection to its peer's node, which
 * err failed (the transport fails a connection on any error). */
static void p2p_failed(const span_comm_t *mu, uint32_t l, const desc_t *d, int err)
{
    uint32_t node = mu->pl.node[d->root];

    ERR("COLL",
        "comm %u: %s between rank %u and rank %u failed: the data connection to node %u (%s) "
        "failed (%d)",
        mu->id, desc_kind_name(d->kind), mu->global_of[l], d->root, node, mu->node_addrs[node].tcp,
        err);
}

static void flight_done(span_comm_t *mu, const struct p2p_flight *f, HcclResult status,
                        uint64_t t_post);

int span_p2p_post(span_comm_t *mu, uint32_t l, const desc_t *d, uint64_t t_in, void *buf)
{
    uint32_t me = mu->global_of[l], node = mu->pl.node[d->root];
    uint64_t bytes = d->count * dtype_size(d->dtype);
    struct p2p_flight *f;
    int rc;

    /* At rest for a restart (drain.c): it goes on the connections that come after. Nor does a
     * send go before what the other node lacks after a crash (p2p_log.c). */
    if (span_drain_closed(mu, d->kind == DESC_SEND) ||
        (d->kind == DESC_SEND && span_rerun_p2p_holds(mu)))
        return 0;
    /* A failed connection fails the transfer now: nothing would ever complete it. */
    if ((rc = node_state(mu, node)) <= 0) {
        if (rc < 0)
            p2p_failed(mu, l, d, rc);
        return rc;
    }
    /* Records are reused: the per-descriptor path allocates only while the pool grows. */
    if ((f = mu->spare_flights) != NULL)
        mu->spare_flights = f->next;
    else if ((f = calloc(1, sizeof(*f))) == NULL)
        return 0;
    f->d = *d;
    f->local = l;
    f->t_in = t_in;
    f->t_post = now_ns();
    f->buf = buf;
    /* Posted again after a crash, and the other node holds it already: done. */
    if (span_plog_held(mu, l, d)) {
        flight_done(mu, f, HCCL_SUCCESS, f->t_post);
        f->next = mu->spare_flights;
        mu->spare_flights = f;
        return 1;
    }
    if (d->kind == DESC_SEND)
        rc = tp_isend(mu->conns[node], buf, bytes, NULL, tag_p2p(mu->tag, me, d->root), &f->req);
    else
        rc = tp_irecv(mu->conns[node], buf, bytes, NULL, tag_p2p(mu->tag, d->root, me), &f->req);
    if (rc != 0) {
        f->next = mu->spare_flights;
        mu->spare_flights = f;
        if (rc == -EAGAIN)
            return 0;
        p2p_failed(mu, l, d, rc);
        return rc;
    }
    f->next = mu->flights;
    mu->flights = f;
    return 1;
}

/* The end of f with status, as an event; t_post 0: withdrawn (no timing). */
static void flight_done(span_comm_t *mu, const struct p2p_flight *f, HcclResult status,
                        uint64_t t_post)
{
    span_ev_t *ev = span_ev_push(mu, SPAN_EV_P2P_DONE);

    if (status == HCCL_SUCCESS)
        span_plog_done(mu, f->local, &f->d, f->buf);
    ev->status = status;
    ev->local = f->local;
    ev->tag = f->d.tag;
    ev->t_in = f->t_in;
    ev->t_post = t_post;
    ev->bytes = f->d.count * dtype_size(f->d.dtype);
    ev->is_send = f->d.kind == DESC_SEND;
    if (t_post != 0)
        ev->prof = (span_prof_t){.t_start = t_post, .l1_ns = now_ns() - t_post, .algo = -1};
}

int span_p2p_progress(span_comm_t *mu)
{
    uint32_t failed = UINT32_MAX; /* the node of the first transfer that failed */
    int n = 0;

    for (struct p2p_flight **pp = &mu->flights; *pp != NULL;) {
        struct p2p_flight *f = *pp;
        const transport_ops_t *ops = f->req->conn->ops; /* done frees the request */
        int done = 0, rc = tp_test(f->req, &done);
        if (!done) {
            pp = &f->next;
            continue;
        }
        *pp = f->next;
        if (rc != 0) {
            p2p_failed(mu, f->local, &f->d, rc);
            if (failed == UINT32_MAX)
                failed = mu->pl.node[f->d.root];
        }
        /* -EPROTO: the sender's message has another length than this receive wants. */
        flight_done(mu, f,
                    rc == 0         ? HCCL_SUCCESS
                    : rc == -EPROTO ? HCCL_E_PARA
                                    : xfer_result(ops, rc),
                    f->t_post);
        f->next = mu->spare_flights;
        mu->spare_flights = f;
        n++;
    }
    if (failed != UINT32_MAX)
        span_break(mu, HCCL_E_REMOTE, "a transfer with node %u (%s) failed", failed,
                   mu->node_addrs[failed].tcp);
    return n;
}

unsigned span_p2p_cancel(span_comm_t *mu, HcclResult status)
{
    unsigned n = 0;

    /* Their connections may be shared with other comms and stay open: withdraw the requests. */
    while (mu->flights != NULL) {
        struct p2p_flight *f = mu->flights;
        mu->flights = f->next;
        tp_cancel(f->req);
        flight_done(mu, f, status, 0);
        f->next = mu->spare_flights;
        mu->spare_flights = f;
        n++;
    }
    return n;
}

int span_p2p_sending(const span_comm_t *mu)
{
    for (const struct p2p_flight *f = mu->flights; f != NULL; f = f->next)
        if (f->d.kind == DESC_SEND)
            return 1;
    return 0;
}

void span_p2p_again(span_comm_t *mu)
{
    while (mu->flights != NULL) {
        struct p2p_flight *f = mu->flights;
        mu->flights = f->next;
        /* One that ended already (a send written in full) ends as it did: done for its rank. */
        int done = 0, rc = tp_done(f->req) ? tp_test(f->req, &done) : 0;
        if (done && rc == 0) {
            flight_done(mu, f, HCCL_SUCCESS, f->t_post);
            f->next = mu->spare_flights;
            mu->spare_flights = f;
            continue;
        }
        if (!done) /* a request tp_test found done is gone */
            tp_cancel(f->req);
        span_ev_t *ev = span_ev_push(mu, SPAN_EV_P2P_AGAIN);
        ev->local = f->local;
        ev->d = f->d;
        ev->t_in = f->t_in;
        f->next = mu->spare_flights;
        mu->spare_flights = f;
    }
}

void span_p2p_free(span_comm_t *mu)
{
    while (mu->flights != NULL) {
        struct p2p_flight *f = mu->flights;
        mu->flights = f->next;
        tp_cancel(f->req);
        free(f);
    }
    while (mu->spare_flights != NULL) {
        struct p2p_flight *f = mu->spare_flights;
        mu->spare_flights = f->next;
        free(f);
    }
}

int span_p2p_poll_fds(const span_comm_t *mu, struct pollfd *pfd, int max)
{
    int n = 0;

    for (const struct p2p_flight *f = mu->flights; f != NULL && n < max; f = f->next)
        n += tp_poll_fds(mu->conns[mu->pl.node[f->d.root]], pfd + n, max - n);
    return n;
}
