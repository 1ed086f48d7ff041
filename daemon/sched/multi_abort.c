/*
 * Telling the other daemons of a comm that it is over, so that their ranks fail at once
 * instead of waiting for data that will never come. When the comm breaks here (a rank's
 * process died, a transfer failed, the daemon stops), or one of its ranks leaves while
 * others here still wait in collectives, this node sends a 16-byte notice on the comm's data
 * connection to every other node (tag class TAG_ABORT, multi_tag.h): the rank at fault, what
 * happened and, for a rank that left, how many collective pieces it took part in. Every node
 * keeps one receive for it posted per connection once the comm's links are up (an idle comm
 * thus also reads its connections, and a dead one shows at the next op at once). A node that
 * hears "broken" breaks the comm (every op fails with HCCL_E_REMOTE), "mismatch" likewise with
 * HCCL_E_PARA (ranks posted different collectives, multi.c); one that hears "left"
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
#include "sched/engine_int.h"
#include "sched/multi_tag.h"

struct multi_abort {
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

static uint64_t abort_tag(const eng_multi_t *mu)
{
    return tag_make(TAG_ABORT, mu->tag, 0);
}

static struct multi_abort *abort_get(eng_multi_t *mu)
{
    struct multi_abort *a = mu->abort;

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

/* What a notice from node i says, acted on. */
static void heard(engine_t *eng, eng_comm_t *c, uint32_t i)
{
    eng_multi_t *mu = c->multi;
    uint32_t rank = mu->abort->in[i][0], what = mu->abort->in[i][1];
    uint64_t limit = (uint64_t)mu->abort->in[i][3] << 32 | mu->abort->in[i][2];
    char why[160];

    mu->abort->sent = 1; /* the others heard it from that node as well */
    if (what == MULTI_ABORT_LEFT && rank < c->nglobal) {
        INFO("COLL", "comm %u: node %u (%s) says rank %u left after %llu collective pieces", c->id,
             i, mu->addrs[i], rank, (unsigned long long)limit);
        c->culprit = rank;
        eng_comm_rank_left(eng, c, rank, limit);
        return;
    }
    if (what == MULTI_ABORT_MISMATCH) {
        snprintf(why, sizeof(why), "node %u (%s) reports that ranks posted different collectives",
                 i, mu->addrs[i]);
        eng_comm_break_status(eng, c, HCCL_E_PARA, why);
        return;
    }
    if (rank < c->nglobal)
        snprintf(why, sizeof(why), "node %u (%s) reports that rank %u died or failed", i,
                 mu->addrs[i], rank);
    else
        snprintf(why, sizeof(why), "node %u (%s) reports the comm broken there", i, mu->addrs[i]);
    c->culprit = rank;
    eng_comm_break(eng, c, why);
}

int multi_abort_progress(engine_t *eng, eng_comm_t *c)
{
    eng_multi_t *mu = c->multi;
    struct multi_abort *a = mu->abort;
    int n = 0, done, rc;

    if (a == NULL &&
        (c->broken || !mu->probed || mu->nready < mu->nnodes - 1 || (a = abort_get(mu)) == NULL))
        return 0;
    if (!a->posted && !c->broken) {
        for (uint32_t i = 0; i < mu->nnodes; i++)
            if (i != mu->me && mu->conns[i] != NULL &&
                tp_irecv(mu->conns[i], a->in[i], sizeof(a->in[i]), NULL, abort_tag(mu),
                         &a->rx[i]) != 0)
                a->rx[i] = NULL; /* that node's notice is missed; its data still fails us */
        a->posted = 1;
    }
    if (mu->busy && !c->broken) {
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
        if (a->rx[i] == NULL || c->broken)
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
        if (rc == 0)
            heard(eng, c, i);
        else
            DBG("COLL", "comm %u: the data connection to node %u (%s) ended (%d)", c->id, i,
                mu->addrs[i], rc);
    }
    return n;
}

int multi_abort_listen_now(engine_t *eng, eng_comm_t *c)
{
    if (c->multi->abort != NULL)
        c->multi->abort->next_rx_ns = 0;
    return multi_abort_progress(eng, c);
}

void multi_abort_send(engine_t *eng, eng_comm_t *c, uint32_t rank, uint32_t what, uint64_t limit)
{
    eng_multi_t *mu = c->multi;
    struct multi_abort *a = abort_get(mu);
    int done;

    if (a == NULL || a->sent || mu->nready < mu->nnodes - 1)
        return;
    a->sent = 1;
    a->out[0] = rank;
    a->out[1] = what;
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

int multi_abort_pending(const eng_multi_t *mu)
{
    const struct multi_abort *a = mu->abort;

    for (uint32_t i = 0; a != NULL && i < mu->nnodes; i++)
        if (a->tx[i] != NULL)
            return 1;
    return 0;
}

void multi_abort_free(eng_multi_t *mu)
{
    struct multi_abort *a = mu->abort;

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
