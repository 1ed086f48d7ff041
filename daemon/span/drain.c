/*
 * A daemon that stops (SIGTERM: an upgrade, `systemctl restart hccld`) while comms that span
 * daemons and have op retry run: it brings each of them to a point where no op is under way
 * on any node, goes, comes back and carries on from there with the same ranks, as the other
 * nodes do. The stopping node leads. Every message is 16 bytes on the comm's data connections
 * (tag class TAG_ABORT, low 1: tag.h), and every node keeps a receive posted for them:
 *
 *   leader -> all     ASK s   the collective pieces it started; it starts no more
 *   node   -> leader  AT s    the pieces it started; it starts no more
 *   leader -> all     GO k    run up to k pieces (the most any node started), then hold
 *   node   -> nodes   FLUSH   k pieces done, no send in flight: it starts no send (to the
 *                             other nodes but the leader; a node that has read every other's
 *                             FLUSH has read all they sent: TCP keeps the order)
 *   node   -> leader  DONE    every other node's FLUSH read: it starts no transfer
 *   leader -> all     BYE     it is at the same point, every node said DONE, and all its
 *                             ranks' messages were taken; it starts no send
 *   node   -> leader  ACK     then, once the leader closed, it drops its connections
 *                             (span_respan) and waits for the leader, whose next daemon dials
 *                             every node; the links are measured again and the held ops go on
 *
 * The same channel carries the barrier of the nodes left when a node comes back from a crash
 * of its daemon in a comm of 3 nodes or more (rerun.c). Every connection then drops and opens
 * again (span_respan), and two nodes that did not crash must not take the other's fresh dial
 * for a crash of its own, nor lose what the other sent on their old connection:
 *
 *   node   -> nodes   BACK r  node r is back from a crash: this node holds its piece (to run
 *                             it again) and starts no transfer; once every other node left
 *                             said BACK too (so all it sent before is read), closed or dialled
 *                             anew, it drops its connections and dials as after a drain
 *
 * A node hears of r from r's fresh dial or from another's BACK, whichever comes first. A fresh
 * dial from a node that said BACK is its new connection, kept for the respan.
 *
 * Transfers go on during the drain, so that ranks blocked in one reach the collective where
 * the drain holds them; the leader's sends go on to the end, so that its ranks never wait for a
 * send while a message for them is on its way (it cannot keep what they do not take). What a
 * node's ranks have not taken when its connections drop goes on before the next ones' (carried
 * over, link.c); the receives in flight go back to the engine and are posted again. If the point
 * is not reached before the daemon must go (a message for the leader's ranks that they take only
 * after a held collective), the comm fails as it did before: its ranks here at once, the others'
 * after the op retry hold.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"

enum { DR_ASK = 1, DR_AT, DR_GO, DR_DONE, DR_BYE, DR_ACK, DR_FLUSH, DR_BACK, DR_KINDS };
/* ROLE_BACK: in the barrier after a crash of node `leader` (the node back). */
enum { ROLE_NONE, ROLE_LEAD, ROLE_FOLLOW, ROLE_BACK };
/* Leader: ASKED (waits for every AT), RUN (for its pieces and every DONE), BYE (for every
 * ACK; then the comm drops its connections and this record). Follower: HELD (waits for GO), RUN,
 * DONE (waits for BYE). */
enum { PH_ASKED, PH_RUN, PH_BYE, PH_HELD, PH_DONE, PH_ACKED };

/* A follower that acknowledged BYE drops its connections once the leader closed its own (so
 * that neither tries to resume the other's), or after this long. */
#define ACKED_LINGER_NS 1000000000ull

struct span_drain {
    int role, phase;
    uint32_t leader;
    uint64_t limit; /* collective pieces this node may start */
    tp_req_t **rx;  /* [nnodes]: the posted receive */
    uint32_t (*in)[4];
    tp_req_t *(*tx)[DR_KINDS]; /* [nnodes][kind]: a send in flight */
    uint32_t (*out)[DR_KINDS][4];
    uint8_t *got; /* [nnodes]: the leader heard from node i in this phase */
    uint32_t ngot;
    int flushed;       /* this node sent its FLUSH: it sends no transfer any more */
    uint8_t *flush_in; /* [nnodes]: node i's FLUSH came (before this node's drain, too) */
    uint32_t nflush_in;
    int posted;
    uint64_t next_rx_ns; /* while busy: when to look at the receives again */
    uint64_t acked_ns;   /* a follower: when it acknowledged BYE */
    uint64_t said_ns;    /* when the log may say again what it waits for (debug) */
};

/* Until a drain begins, the receives are looked at at most this often. */
#define DRAIN_BUSY_POLL_NS 1000000ull

static uint64_t drain_tag(const span_comm_t *sc)
{
    return tag_make(TAG_ABORT, sc->tag, 1);
}

static struct span_drain *drain_get(span_comm_t *sc)
{
    struct span_drain *d = sc->drain;
    uint32_t n = sc->nnodes;

    if (d != NULL)
        return d;
    if ((d = calloc(1, sizeof(*d))) == NULL)
        return NULL;
    d->rx = calloc(n, sizeof(*d->rx));
    d->in = calloc(n, sizeof(*d->in));
    d->tx = calloc(n, sizeof(*d->tx));
    d->out = calloc(n, sizeof(*d->out));
    d->got = calloc(n, 1);
    d->flush_in = calloc(n, 1);
    d->limit = UINT64_MAX;
    sc->drain = d;
    if (d->rx == NULL || d->in == NULL || d->tx == NULL || d->out == NULL || d->got == NULL ||
        d->flush_in == NULL) {
        span_drain_free(sc);
        return NULL;
    }
    return d;
}

void span_drain_free(span_comm_t *sc)
{
    struct span_drain *d = sc->drain;

    if (d == NULL)
        return;
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        if (d->rx != NULL && d->rx[i] != NULL)
            tp_cancel(d->rx[i]);
        for (int k = 0; d->tx != NULL && k < DR_KINDS; k++)
            if (d->tx[i][k] != NULL)
                tp_cancel(d->tx[i][k]);
    }
    free(d->rx);
    free(d->in);
    free(d->tx);
    free(d->out);
    free(d->got);
    free(d->flush_in);
    free(d);
    sc->drain = NULL;
}

static void post_rx(span_comm_t *sc, struct span_drain *d, uint32_t i)
{
    if (sc->conns[i] == NULL ||
        tp_irecv(sc->conns[i], d->in[i], sizeof(d->in[i]), NULL, drain_tag(sc), &d->rx[i]) != 0)
        d->rx[i] = NULL;
}

/* Sends message kind with value v to node i, and pushes it out. */
static void say(span_comm_t *sc, struct span_drain *d, uint32_t i, int kind, uint64_t v)
{
    uint32_t *m = d->out[i][kind];
    int done;

    if (sc->conns[i] == NULL)
        return;
    if (d->tx[i][kind] != NULL)
        tp_cancel(d->tx[i][kind]);
    d->tx[i][kind] = NULL;
    m[0] = (uint32_t)kind;
    m[1] = (uint32_t)v;
    m[2] = (uint32_t)(v >> 32);
    m[3] = 0;
    if (tp_isend(sc->conns[i], m, 4 * sizeof(*m), NULL, drain_tag(sc), &d->tx[i][kind]) != 0) {
        d->tx[i][kind] = NULL;
        return;
    }
    if (tp_test(d->tx[i][kind], &done) != 0 || done)
        d->tx[i][kind] = NULL;
}

static void say_all(span_comm_t *sc, struct span_drain *d, int kind, uint64_t v)
{
    for (uint32_t i = 0; i < sc->nnodes; i++)
        if (i != sc->me)
            say(sc, d, i, kind, v);
}

static void heard_reset(span_comm_t *sc, struct span_drain *d)
{
    memset(d->got, 0, sc->nnodes);
    d->ngot = 0;
}

/* Node i answered in this phase: 1 when every node has. */
static int heard_from(span_comm_t *sc, struct span_drain *d, uint32_t i)
{
    if (!d->got[i]) {
        d->got[i] = 1;
        d->ngot++;
    }
    return d->ngot == sc->nnodes - 1;
}

static int unread(span_comm_t *sc);

/* No piece under way, k of them done, no send in flight (a receive waits for the respan, which
 * takes it back to post it again: its send may come only after the held collective). */
static int quiet(const span_comm_t *sc, const struct span_drain *d)
{
    return !sc->busy && sc->run == NULL && sc->started == d->limit && !span_p2p_sending(sc);
}

/* A follower: quiet, its FLUSH sent, every other follower's read (so all they sent is read:
 * what no receive took yet goes on with the next connections, span_respan). The leader: quiet,
 * every follower said DONE, nothing unread (what its ranks do not take would be lost). */
static int at_rest(span_comm_t *sc, struct span_drain *d)
{
    int rest =
        quiet(sc, d) && (d->role == ROLE_LEAD ? d->ngot == sc->nnodes - 1 && !unread(sc)
                                              : d->flushed && d->nflush_in == sc->nnodes - 2);
    uint64_t now;

    if (!rest && log_level_cur >= LOG_DEBUG && (now = now_ns()) >= d->said_ns) {
        d->said_ns = now + 100000000ull; /* what it waits for, every 100 ms */
        DBG("NET",
            "comm %u: not at rest: busy %d, %llu of %llu pieces, sending %d, FLUSH %s, %u "
            "read, DONE %u, unread %d",
            sc->id, sc->busy, (unsigned long long)sc->started, (unsigned long long)d->limit,
            span_p2p_sending(sc), d->flushed ? "sent" : "not sent", d->nflush_in, d->ngot,
            unread(sc));
    }
    return rest;
}

static int unread(span_comm_t *sc)
{
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        tp_retry_stats_t st = {0};
        if (sc->conns[i] != NULL && (tp_retry_stats(sc->conns[i], &st), st.held > 0))
            return 1;
    }
    return 0;
}

int span_drain_lead(span_comm_t *sc)
{
    struct span_drain *d;

    if (!sc->retry.enabled || !sc->probed || sc->nready < sc->nnodes - 1 || sc->nshared > 0)
        return 0;
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        if (sc->links[i] != NULL && sc->links[i]->refs > 1)
            return 0; /* a child shares them: not yet */
        if (sc->conns[i] != NULL && sc->conns[i]->ops->retry_stats == NULL)
            return 0; /* RDMA: cannot tell what is unread, nor resume */
    }
    if ((d = drain_get(sc)) == NULL || d->role != ROLE_NONE)
        return 0;
    d->role = ROLE_LEAD;
    d->phase = PH_ASKED;
    d->leader = sc->me;
    d->limit = sc->started;
    heard_reset(sc, d);
    INFO("NET",
         "comm %u: this daemon stops; bringing the comm to rest on all %u nodes at piece "
         "%llu or later",
         sc->id, sc->nnodes, (unsigned long long)d->limit);
    say_all(sc, d, DR_ASK, d->limit);
    return 1;
}

int span_drain_pending(const span_comm_t *sc)
{
    const struct span_drain *d = sc->drain;

    return d != NULL && d->role == ROLE_LEAD; /* at rest, it dropped its links and d */
}

int span_drain_holds(const span_comm_t *sc)
{
    const struct span_drain *d = sc->drain;

    return d != NULL && d->role != ROLE_NONE && sc->started >= d->limit;
}

int span_drain_active(const span_comm_t *sc)
{
    return sc->drain != NULL && sc->drain->role != ROLE_NONE;
}

int span_drain_closed(const span_comm_t *sc, int send)
{
    const struct span_drain *d = sc->drain;

    return d != NULL && ((send && d->flushed) || d->role == ROLE_BACK || d->phase == PH_DONE ||
                         d->phase == PH_ACKED || d->phase == PH_BYE);
}

int span_drain_back_holds(const span_comm_t *sc)
{
    return sc->drain != NULL && sc->drain->role == ROLE_BACK;
}

int span_drain_back(span_comm_t *sc, uint32_t node)
{
    struct span_drain *d = drain_get(sc);

    if (d == NULL)
        return span_break(sc, HCCL_E_MEMORY, "no memory to agree on a node back from a crash");
    if (d->role == ROLE_BACK && d->leader == node)
        return 0;
    if (d->role != ROLE_NONE || node >= sc->nnodes || node == sc->me)
        return span_break(sc, HCCL_E_REMOTE,
                          "node %u is back from a crash of its daemon while the comm %s", node,
                          d->role == ROLE_BACK ? "agrees on another node back from a crash"
                                               : "comes to rest for a restart");
    d->role = ROLE_BACK;
    d->leader = node;
    heard_reset(sc, d);
    heard_from(sc, d, node); /* its old connection is dead: nothing to hear there */
    WARN("NET",
         "comm %u: node %u (%s) is back after a crash of its daemon; the %u nodes left hold "
         "their ops and open their connections again",
         sc->id, node, sc->node_addrs[node].tcp, sc->nnodes - 1);
    span_rerun_stop(sc);
    for (uint32_t i = 0; i < sc->nnodes; i++)
        if (i != sc->me && i != node)
            say(sc, d, i, DR_BACK, node);
    return 0;
}

/* The barrier: node i (not the one back) has left the old connections, or said BACK over
 * them and this node's BACK to it went out. */
static int back_left(span_comm_t *sc, struct span_drain *d, uint32_t i)
{
    tp_retry_stats_t st = {0};
    tp_conn_t *c = sc->conns[i];

    if ((sc->early != NULL && sc->early[i] != NULL) || c == NULL || tp_conn_state(c) < 0)
        return 1; /* dialled anew, or its connection failed */
    tp_retry_stats(c, &st);
    if (st.suspended || st.ended)
        return 1; /* it closed its side (a close with unread data resets) */
    return d->got[i] && d->tx[i][DR_BACK] == NULL;
}

/* In the barrier, once every other node left the old connections: the respan. 1 if done. */
static int back_progress(span_comm_t *sc, struct span_drain *d)
{
    uint32_t node = d->leader;

    for (uint32_t i = 0; i < sc->nnodes; i++)
        if (i != sc->me && i != node && !back_left(sc, d, i))
            return 0;
    INFO("NET", "comm %u: every node left heard that node %u is back; connecting again", sc->id,
         node);
    span_respan(sc, node);
    return 1;
}

/* What node i said, to the leader. Returns 1 once the comm closed its connections. */
static int lead_heard(span_comm_t *sc, struct span_drain *d, uint32_t i, int kind, uint64_t v)
{
    if (kind == DR_AT && d->phase == PH_ASKED) {
        if (v > d->limit)
            d->limit = v;
        if (heard_from(sc, d, i)) {
            d->phase = PH_RUN;
            heard_reset(sc, d);
            DBG("NET", "comm %u: every node holds; all run to piece %llu", sc->id,
                (unsigned long long)d->limit);
            say_all(sc, d, DR_GO, d->limit);
        }
    } else if (kind == DR_DONE && d->phase == PH_RUN) {
        heard_from(sc, d, i);
    } else if (kind == DR_ACK && d->phase == PH_BYE && heard_from(sc, d, i)) {
        INFO("NET",
             "comm %u: at rest on all %u nodes after piece %llu; its ranks carry on with "
             "the next daemon",
             sc->id, sc->nnodes, (unsigned long long)d->limit);
        /* Closed here first, so that the others do not try to resume them. */
        span_links_drop(sc);
        return 1;
    }
    return 0;
}

/* What node i said, to a follower. Returns 1 once the comm dropped its connections. */
static int follow_heard(span_comm_t *sc, struct span_drain *d, uint32_t i, int kind, uint64_t v)
{
    if (kind == DR_ASK && d->role == ROLE_NONE) {
        d->role = ROLE_FOLLOW;
        d->phase = PH_HELD;
        d->leader = i;
        d->limit = sc->started;
        WARN("NET", "comm %u: node %u (%s) stops; its ops hold until it is back (at most %llu ms)",
             sc->id, i, sc->node_addrs[i].tcp, (unsigned long long)sc->retry.hold_ms);
        say(sc, d, i, DR_AT, sc->started);
        return 0;
    }
    if (d->role != ROLE_FOLLOW || i != d->leader)
        return 0;
    if (kind == DR_GO && d->phase == PH_HELD) {
        d->limit = v;
        d->phase = PH_RUN;
    } else if (kind == DR_BYE && d->phase == PH_DONE) {
        say(sc, d, i, DR_ACK, 0);
        d->phase = PH_ACKED;
        d->acked_ns = now_ns();
    }
    return 0;
}

/* A follower that acknowledged BYE: once the leader closed its connection (or after
 * ACKED_LINGER_NS), it drops its own and waits for the leader to come back. 1 if it did. */
static int follow_gone(span_comm_t *sc, struct span_drain *d)
{
    tp_retry_stats_t st = {0};
    tp_conn_t *conn = sc->conns[d->leader];
    uint32_t leader = d->leader;

    if (conn != NULL && tp_conn_state(conn) > 0 && now_ns() < d->acked_ns + ACKED_LINGER_NS &&
        (tp_retry_stats(conn, &st), !st.suspended && !st.ended))
        return 0;
    WARN("NET",
         "comm %u: at rest after piece %llu; waiting up to %llu ms for node %u (%s) to "
         "come back",
         sc->id, (unsigned long long)d->limit, (unsigned long long)sc->retry.hold_ms, leader,
         sc->node_addrs[leader].tcp);
    span_respan(sc, leader);
    return 1;
}

int span_drain_listen_now(span_comm_t *sc)
{
    if (sc->drain != NULL)
        sc->drain->next_rx_ns = 0;
    return span_drain_progress(sc);
}

int span_drain_progress(span_comm_t *sc)
{
    struct span_drain *d = sc->drain;
    int n = 0, done;

    if (d == NULL) {
        if (!sc->retry.enabled || !sc->probed || sc->nready < sc->nnodes - 1 ||
            (d = drain_get(sc)) == NULL)
            return 0;
    }
    if (!d->posted) {
        for (uint32_t i = 0; i < sc->nnodes; i++)
            if (i != sc->me)
                post_rx(sc, d, i);
        d->posted = 1;
    }
    if (d->role == ROLE_NONE) { /* a drain may wait a millisecond to start */
        uint64_t now = now_ns();
        if (now < d->next_rx_ns)
            return 0;
        d->next_rx_ns = now + DRAIN_BUSY_POLL_NS;
    }
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        for (int k = 0; k < DR_KINDS; k++)
            if (d->tx[i][k] != NULL && (tp_test(d->tx[i][k], &done) != 0 || done))
                d->tx[i][k] = NULL;
        if (d->rx[i] == NULL)
            continue;
        int rc = tp_test(d->rx[i], &done);
        if (rc == 0 && !done)
            continue;
        d->rx[i] = NULL; /* done: freed */
        if (rc != 0)
            continue; /* the connection failed: what it carries fails with it */
        n++;
        int kind = (int)d->in[i][0];
        uint64_t v = (uint64_t)d->in[i][2] << 32 | d->in[i][1];
        post_rx(sc, d, i);
        if (kind == DR_FLUSH) {
            d->nflush_in += !d->flush_in[i];
            d->flush_in[i] = 1;
        } else if (kind == DR_BACK) {
            if (span_drain_back(sc, (uint32_t)v) != 0)
                return n;
            heard_from(sc, d, i);
        } else if (d->role == ROLE_LEAD ? lead_heard(sc, d, i, kind, v)
                                        : follow_heard(sc, d, i, kind, v)) {
            return n; /* d is gone */
        }
    }
    if (d->role == ROLE_BACK)
        return n + back_progress(sc, d);
    if (d->role == ROLE_FOLLOW && d->phase == PH_RUN && !d->flushed && quiet(sc, d)) {
        d->flushed = 1;
        say_all(sc, d, DR_FLUSH, 0);
        n++;
    }
    if (d->role == ROLE_FOLLOW && d->phase == PH_ACKED && follow_gone(sc, d))
        return n + 1;
    if (d->role == ROLE_FOLLOW && d->phase == PH_RUN && at_rest(sc, d)) {
        d->phase = PH_DONE;
        say(sc, d, d->leader, DR_DONE, 0);
        n++;
    }
    if (d->role == ROLE_LEAD && d->phase == PH_RUN && at_rest(sc, d)) {
        d->phase = PH_BYE;
        heard_reset(sc, d);
        say_all(sc, d, DR_BYE, 0);
        n++;
    }
    return n;
}
