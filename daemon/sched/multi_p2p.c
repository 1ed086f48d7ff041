/*
 * Send/Recv between ranks of different daemons. A send goes out on the comm's connection to
 * the receiver's node as soon as it is queued, and a receive is posted on the connection from
 * the sender's node as soon as it is queued: the transport keeps a message that arrives before
 * its receive (transport.h), so neither side waits for the other to post. All messages of one
 * (sender, receiver) pair carry one tag, so they match in posting order, as HCCL's and MPI's
 * pairs do; collectives, and other comms sharing the connection, use other tags (multi_tag.h).
 * Pairs within this node take the local path (match.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "desc_check.h"
#include "dtype.h"
#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "sched/engine_int.h"
#include "sched/multi_tag.h"
#include "sched/xfer_result.h"

/* One posted transfer; its descriptor is out of the member's queue. */
struct p2p_flight {
    desc_t d;
    uint32_t local;        /* the member that posted it */
    uint64_t t_in, t_post; /* taken in, put on the connection (now_ns()) */
    tp_req_t *req;
    struct p2p_flight *next;
};

static int node_ready(const eng_multi_t *mu, uint32_t node)
{
    return mu->conns[node] != NULL && tp_conn_state(mu->conns[node]) == 1;
}

/* Posts d (of local member l) on the connection to its peer's node: 1 posted, 0 not yet
 * (connection not ready, or too many requests outstanding), <0 the connection failed. */
static int post(eng_comm_t *c, uint32_t l, const desc_t *d, uint64_t t_in)
{
    eng_multi_t *mu = c->multi;
    uint32_t me = c->global_of[l], node = mu->pl.node[d->root];
    uint64_t bytes = d->count * dtype_size(d->dtype);
    struct p2p_flight *f;
    int rc;

    if (!node_ready(mu, node))
        return 0;
    /* Records are reused: the per-descriptor path allocates only while the pool grows. */
    if ((f = mu->spare_flights) != NULL)
        mu->spare_flights = f->next;
    else if ((f = calloc(1, sizeof(*f))) == NULL)
        return 0;
    f->d = *d;
    f->local = l;
    f->t_in = t_in;
    f->t_post = now_ns();
    if (d->kind == DESC_SEND)
        rc = tp_isend(mu->conns[node], c->m[l].s->arena + d->send_off, bytes, NULL,
                      tag_p2p(mu->tag, me, d->root), &f->req);
    else
        rc = tp_irecv(mu->conns[node], c->m[l].s->arena + d->recv_off, bytes, NULL,
                      tag_p2p(mu->tag, d->root, me), &f->req);
    if (rc != 0) {
        f->next = mu->spare_flights;
        mu->spare_flights = f;
        return rc == -EAGAIN ? 0 : rc;
    }
    f->next = mu->flights;
    mu->flights = f;
    return 1;
}

/* Posts every queued transfer whose peer is on another node, in queue order per member. */
static int post_queued(engine_t *eng, eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;
    int n = 0;

    for (uint32_t l = 0; l < c->nranks; l++) {
        dq_t *q = &c->m[l].p2p;
        for (uint32_t i = 0; i < q->n;) {
            const desc_t *d = dq_at(q, i);
            if (mu->pl.node[d->root] == mu->me) {
                i++;
                continue;
            }
            int rc = post(c, l, d, dq_t_in(q, i));
            if (rc < 0) {
                eng_comm_break(eng, c, "a transfer to another daemon failed");
                return 1;
            }
            if (rc == 0) {
                i++;
                continue;
            }
            dq_remove(q, i);
            n++;
        }
    }
    return n;
}

static int test_flights(engine_t *eng, eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;
    int n = 0, failed = 0;

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
            ERR("COLL", "comm %u: %s between rank %u and rank %u failed (%d)", c->id,
                desc_kind_name(f->d.kind), c->global_of[f->local], f->d.root, rc);
            failed = 1;
        } else {
            uint64_t bytes = f->d.count * dtype_size(f->d.dtype);
            if (f->d.kind == DESC_SEND)
                eng->st.net_tx_bytes += bytes;
            else
                eng->st.net_rx_bytes += bytes;
            c->ops_done++;
            eng->st.ops_done++;
        }
        /* -EPROTO: the sender's message has another length than this receive wants. */
        op_prof_t prof = {.t_start = f->t_post, .l1_ns = now_ns() - f->t_post, .algo = -1};
        cqe_t e = {.tag = f->d.tag,
                   .status = rc == 0         ? HCCL_SUCCESS
                             : rc == -EPROTO ? HCCL_E_PARA
                                             : xfer_result(ops, rc)};
        prof_cqe(&e, &prof, f->t_in);
        if (c->m[f->local].s != NULL)
            eng_session_post(eng, c->m[f->local].s, &e);
        f->next = mu->spare_flights;
        mu->spare_flights = f;
        n++;
    }
    if (failed)
        eng_comm_break(eng, c, "a transfer between daemons failed");
    return n;
}

int multi_p2p_progress(engine_t *eng, eng_comm_t *c)
{
    int n = post_queued(eng, c);

    if (!c->broken)
        n += test_flights(eng, c);
    return n;
}

unsigned multi_p2p_fail(engine_t *eng, eng_comm_t *c, HcclResult status)
{
    eng_multi_t *mu = c->multi;
    unsigned n = 0;

    /* Their connections may be shared with other comms and stay open: withdraw the requests. */
    while (mu->flights != NULL) {
        struct p2p_flight *f = mu->flights;
        mu->flights = f->next;
        tp_cancel(f->req);
        if (eng != NULL && c->m[f->local].s != NULL)
            eng_session_complete(eng, c->m[f->local].s, f->d.tag, status);
        free(f);
        n++;
    }
    while (mu->spare_flights != NULL) {
        struct p2p_flight *f = mu->spare_flights;
        mu->spare_flights = f->next;
        free(f);
    }
    return n;
}

int multi_p2p_poll_fds(const eng_multi_t *mu, struct pollfd *pfd, int max)
{
    int n = 0;

    for (const struct p2p_flight *f = mu->flights; f != NULL && n < max; f = f->next)
        n += tp_poll_fds(mu->conns[mu->pl.node[f->d.root]], pfd + n, max - n);
    return n;
}
