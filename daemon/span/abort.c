/*
 * Telling the other daemons of a comm that it is over, so that their ranks fail at once
 * instead of waiting for data that will never come. When the comm breaks here (a rank's
 * process died, a transfer failed, the daemon stops), or one of its ranks leaves while
 * others here still wait in collectives, this node sends a 16-byte notice on the comm's data
 * connection to every other node (tag class TAG_ABORT, tag.h): the rank at fault, what
 * happened and, for a rank that left, how many collective pieces it took part in. Every node
 * keeps one receive for it posted per connection once the comm's links are up (an idle comm
 * thus also reads its connections, and a dead one shows at the next op at once). A node that
 * hears "broken" breaks the comm (every op fails with HCCL_E_REMOTE), "mismatch" likewise with
 * HCCL_E_PARA (ranks posted different collectives, coll.c); one that hears "left"
 * fails the collective pieces that rank never took part in (those before it may still
 * complete: a broadcast's root is done before the others). Notices are not forwarded: every
 * node is connected to every other.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "futex.h"
#include "hccl/hccl.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"

struct span_abort {
    tp_req_t **rx, **tx; /* by node */
    uint32_t (*in)[4];   /* received notices, by node: rank, what, limit (low, high) */
    uint32_t out[4];     /* the notice this node sent */
    int posted;          /* the receives are up */
    int sent;            /* a notice went out, or one came in: nothing more to say */
    uint64_t next_rx_ns; /* while the comm is busy: when to look at the receives again */
};

/* While a collective runs, the engine passes again and again; testing the notice receives
 * reads their sockets, so a busy comm looks at most this often (an idle one at every pass:
 * the engine sleeps in poll() on them, so a pass is a wake-up). */
#define ABORT_BUSY_POLL_NS 1000000ull

static uint64_t abort_tag(const span_comm_t *mu)
{
    return tag_make(TAG_ABORT, mu->tag, 0);
}

static struct span_abort *abort_get(span_comm_t *mu)
{
    struct span_abort *a = mu->abort;

    if (a != NULL)
        return a;
    if ((a = calloc(1, sizeof(*a))) == NULL ||
        (a->rx = calloc(mu->nnodes, sizeof(*a->rx))) == NULL ||
        (a->tx = calloc(mu->nnodes, sizeof(*a->tx))) == NULL ||
        (a->in = calloc(mu->nnodes, sizeof(*a->in))) == NULL) {
        if (a != NULL) {
            free(a->rx);
            free(a->tx);
        }
        free(a);
        return NULL;
    }
    return mu->abort = a;
}

/* What a notice from node i says, as an event. */
static void heard(span_comm_t *mu, uint32_t i)
{
    uint32_t rank = mu->abort->in[i][0], what = mu->abort->in[i][1];
    uint64_t limit = (uint64_t)mu->abort->in[i][3] << 32 | mu->abort->in[i][2];
    span_ev_t *ev;

    mu->abort->sent = 1; /* the others heard it from that node as well */
    if (what == SPAN_NOTICE_LEFT && rank < mu->pl.nranks) {
        INFO("COLL", "comm %u: node %u (%s) says rank %u left after %llu collective pieces", mu->id,
             i, mu->node_addrs[i].tcp, rank, (unsigned long long)limit);
        ev = span_ev_push(mu, SPAN_EV_RANK_LEFT);
        ev->culprit = rank;
        ev->limit = limit;
        return;
    }
    if (what == SPAN_NOTICE_MISMATCH) {
        span_break(mu, HCCL_E_PARA, "node %u (%s) reports that ranks posted different collectives",
                   i, mu->node_addrs[i].tcp);
        return;
    }
    ev = span_ev_push(mu, SPAN_EV_BROKEN);
    ev->status = HCCL_E_REMOTE;
    ev->culprit = rank;
    ev->set_culprit = 1;
    if (rank < mu->pl.nranks)
        snprintf(ev->why, sizeof(ev->why), "node %u (%s) reports that rank %u died or failed", i,
                 mu->node_addrs[i].tcp, rank);
    else
        snprintf(ev->why, sizeof(ev->why), "node %u (%s) reports the comm broken there", i,
                 mu->node_addrs[i].tcp);
}

int span_abort_progress(span_comm_t *mu, int broken)
{
    struct span_abort *a = mu->abort;
    int n = 0, done, rc;

    if (a == NULL &&
        (broken || !mu->probed || mu->nready < mu->nnodes - 1 || (a = abort_get(mu)) == NULL))
        return 0;
    if (!a->posted && !broken) {
        for (uint32_t i = 0; i < mu->nnodes; i++)
            if (i != mu->me && mu->conns[i] != NULL &&
                tp_irecv(mu->conns[i], a->in[i], sizeof(a->in[i]), NULL, abort_tag(mu),
                         &a->rx[i]) != 0)
                a->rx[i] = NULL; /* that node's notice is missed; its data still fails us */
        a->posted = 1;
    }
    if (mu->busy && !broken) {
        uint64_t now = now_ns();
        if (now < a->next_rx_ns)
            return 0;
        a->next_rx_ns = now + ABORT_BUSY_POLL_NS;
    }
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        if (a->tx[i] != NULL && ((rc = tp_test(a->tx[i], &done)) != 0 || done)) {
            a->tx[i] = NULL;
            n++;
        }
        if (a->rx[i] == NULL || broken)
            continue;
        rc = tp_test(a->rx[i], &done);
        if (!done)
            continue;
        a->rx[i] = NULL;
        n++;
        /* A connection that ends is no failure by itself: a node whose ranks all left closes
         * its side while the others may still run (the last op with other nodes, transfers).
         * If the node died or the link is gone (heartbeats, TCP keepalive), the next op that
         * needs the connection fails at once. */
        if (rc == 0) {
            heard(mu, i);
            return n; /* the engine acts on it before anything else happens */
        }
        DBG("COLL", "comm %u: the data connection to node %u (%s) ended (%d)", mu->id, i,
            mu->node_addrs[i].tcp, rc);
    }
    return n;
}

int span_abort_listen_now(span_comm_t *mu)
{
    if (mu->abort != NULL)
        mu->abort->next_rx_ns = 0;
    return span_abort_progress(mu, 0);
}

void span_abort_send(span_comm_t *mu, uint32_t rank, int what, uint64_t limit)
{
    struct span_abort *a = abort_get(mu);
    int done;

    if (a == NULL || a->sent || mu->nready < mu->nnodes - 1)
        return;
    a->sent = 1;
    a->out[0] = rank;
    a->out[1] = (uint32_t)what;
    a->out[2] = (uint32_t)limit;
    a->out[3] = (uint32_t)(limit >> 32);
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        if (i == mu->me || mu->conns[i] == NULL ||
            tp_isend(mu->conns[i], a->out, sizeof(a->out), NULL, abort_tag(mu), &a->tx[i]) != 0)
            continue;
        /* Push it now: a broken comm is not progressed again, only its notices are. */
        if (tp_test(a->tx[i], &done) != 0 || done)
            a->tx[i] = NULL;
    }
}

int span_abort_pending(const span_comm_t *mu)
{
    const struct span_abort *a = mu->abort;

    for (uint32_t i = 0; a != NULL && i < mu->nnodes; i++)
        if (a->tx[i] != NULL)
            return 1;
    return 0;
}

void span_abort_free(span_comm_t *mu)
{
    struct span_abort *a = mu->abort;

    if (a == NULL)
        return;
    for (uint32_t i = 0; i < mu->nnodes; i++) {
        if (a->rx[i] != NULL)
            tp_cancel(a->rx[i]);
        if (a->tx[i] != NULL)
            tp_cancel(a->tx[i]);
    }
    free(a->rx);
    free(a->tx);
    free(a->in);
    free(a);
    mu->abort = NULL;
}
