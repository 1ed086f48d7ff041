/*
 * A node of a comm across daemons back from a restart, and where the comm goes on from.
 *
 * After a drain (drain.c) every node stopped at the same piece, so the returning node's first
 * collective piece is the next one of every node. After a crash of its daemon (SIGKILL, then
 * started again) nothing was agreed: the returning daemon knows only what its ranks post again
 * (the pieces none of them saw complete), and the other node may be one piece ahead or behind.
 * So the returning node says, with its first collective piece, that piece's sequence number
 * (RESYNC), and every other node holds its collectives until it heard it. With 2 nodes, where
 * a piece needs both, the other node is then:
 *   - at that piece (its run, if under way, stopped when the returning node dialled): it runs
 *     the piece again from its start, from the level-1 input it kept (span_snap_t);
 *   - one piece ahead (it completed the piece before the crash; the returning node's ranks
 *     never saw it complete): it runs that piece again for the returning node only, from the
 *     input it kept, its result dropped; then its own piece from its start;
 *   - behind (the returning node's ranks saw complete a piece this node never did; its data
 *     went with the crashed daemon): the comm fails, naming both pieces.
 * A sum of two node shares is the same in either order (IEEE addition commutes), so the run
 * again gives every rank the bits the first run gave the others, whatever algorithm runs it.
 *
 * The other node takes the returning daemon's fresh dial as the sign of its crash
 * (span_rerun_accept): a daemon that did not restart never dials a node it is connected to.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"

#define RESYNC_MAGIC 0x4e595352u /* "RSYN" */

/* Per other node: the send/recv counts exchanged after a respan (p2p_log.c). */
struct p2p_word {
    uint64_t *out, *in;
    tp_req_t *tx, *rx;
    int sent, heard;
};

struct span_rerun {
    struct p2p_word *p2p; /* [nnodes], or NULL: the comm keeps no send/recv log */
    uint32_t from;        /* a node that waits: the returning node; else UINT32_MAX */
    int due;              /* the returning node: its first piece not announced yet */
    uint32_t rx_msg[4];   /* magic, 0, sequence number */
    tp_req_t *rx;         /* the returning node's word, awaited */
    uint32_t tx_msg[4];   /* what the returning node says */
    tp_req_t **tx;        /* [nnodes] */
    uint64_t since_ns;    /* when the comm began to wait */
};

/* The drain's class and comm, low bits 2 (tag.h). */
static uint64_t rerun_tag(const span_comm_t *sc)
{
    return tag_make(TAG_ABORT, sc->tag, 2);
}

/* The send/recv counts: low bits 3. */
static uint64_t p2p_tag(const span_comm_t *sc)
{
    return tag_make(TAG_ABORT, sc->tag, 3);
}

static void p2p_words_free(span_comm_t *sc, struct span_rerun *r)
{
    for (uint32_t i = 0; r->p2p != NULL && i < sc->nnodes; i++) {
        struct p2p_word *w = &r->p2p[i];
        if (w->tx != NULL)
            tp_cancel(w->tx);
        if (w->rx != NULL)
            tp_cancel(w->rx);
        free(w->out);
        free(w->in);
    }
    free(r->p2p);
    r->p2p = NULL;
}

int span_rerun_p2p_holds(const span_comm_t *sc)
{
    const struct span_rerun *r = sc->rerun;

    for (uint32_t i = 0; r != NULL && r->p2p != NULL && i < sc->nnodes; i++)
        if (i != sc->me && !r->p2p[i].heard)
            return 1;
    return 0;
}

/* Tells every other node what this one holds of its ranks' sends, and takes what it holds of
 * ours: each then sends again what the other lacks (p2p_log.c). 1: all told and heard. */
static int p2p_progress(span_comm_t *sc, struct span_rerun *r, int *n)
{
    int done, all = 1, rc;

    for (uint32_t i = 0; i < sc->nnodes; i++) {
        struct p2p_word *w = &r->p2p[i];
        size_t len = span_plog_counts_len(sc, i);
        if (i == sc->me)
            continue;
        if (!w->sent) {
            w->sent = 1;
            (*n)++;
            if ((w->out = malloc(len + 8)) == NULL || (w->in = malloc(len + 8)) == NULL)
                return span_break(sc, HCCL_E_MEMORY, "no memory to agree on send/recv") * 0;
            span_plog_counts(sc, i, w->out);
            if (tp_irecv(sc->conns[i], w->in, len, NULL, p2p_tag(sc), &w->rx) != 0 ||
                tp_isend(sc->conns[i], w->out, len, NULL, p2p_tag(sc), &w->tx) != 0)
                return span_break(sc, HCCL_E_REMOTE, "cannot agree on send/recv with node %u", i) *
                       0;
        }
        if (w->tx != NULL && (tp_test(w->tx, &done) != 0 || done))
            w->tx = NULL;
        if (!w->heard) {
            done = 0;
            if ((rc = tp_test(w->rx, &done)) == 0 && !done) {
                all = 0;
                continue;
            }
            w->rx = NULL;
            if (rc != 0) /* the connection failed: its own handling says so */
                return 0;
            w->heard = 1;
            (*n)++;
            if (span_plog_apply(sc, i, w->in) != 0)
                return 0;
        }
        all &= w->tx == NULL;
    }
    return all;
}

void span_rerun_free(span_comm_t *sc)
{
    struct span_rerun *r = sc->rerun;

    if (r == NULL)
        return;
    if (r->rx != NULL)
        tp_cancel(r->rx);
    p2p_words_free(sc, r);
    for (uint32_t i = 0; r->tx != NULL && i < sc->nnodes; i++)
        if (r->tx[i] != NULL)
            tp_cancel(r->tx[i]);
    free(r->tx);
    free(r);
    sc->rerun = NULL;
}

void span_rerun_expect(span_comm_t *sc)
{
    struct span_rerun *r;

    span_rerun_free(sc);
    if (sc->returning >= sc->nnodes)
        return;
    if ((r = calloc(1, sizeof(*r))) == NULL ||
        (r->tx = calloc(sc->nnodes, sizeof(*r->tx))) == NULL) {
        free(r);
        span_break(sc, HCCL_E_MEMORY, "no memory to agree where the comm goes on");
        return;
    }
    r->since_ns = now_ns();
    if (sc->plog != NULL && (r->p2p = calloc(sc->nnodes, sizeof(*r->p2p))) == NULL) {
        free(r->tx);
        free(r);
        span_break(sc, HCCL_E_MEMORY, "no memory to agree where the comm goes on");
        return;
    }
    r->from = sc->returning == sc->me ? UINT32_MAX : sc->returning;
    r->due = sc->returning == sc->me;
    sc->rerun = r;
}

int span_rerun_waits(const span_comm_t *sc)
{
    return sc->rerun != NULL && sc->rerun->from != UINT32_MAX;
}

void span_rerun_announce(span_comm_t *sc, uint64_t seq)
{
    struct span_rerun *r = sc->rerun;
    int done;

    if (r == NULL || !r->due)
        return;
    r->due = 0;
    r->tx_msg[0] = RESYNC_MAGIC;
    r->tx_msg[2] = (uint32_t)seq;
    r->tx_msg[3] = (uint32_t)(seq >> 32);
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        if (i == sc->me || sc->conns[i] == NULL ||
            tp_isend(sc->conns[i], r->tx_msg, sizeof(r->tx_msg), NULL, rerun_tag(sc), &r->tx[i]) !=
                0)
            continue;
        if (tp_test(r->tx[i], &done) != 0 || done)
            r->tx[i] = NULL;
    }
}

/* The returning node starts at piece s, this node's next is seq: no way on. */
static int mismatch(span_comm_t *sc, uint64_t s, uint64_t seq)
{
    return span_break(
        sc, HCCL_E_REMOTE,
        "a node back from a crash of its daemon starts again at piece %llu, this node "
        "at piece %llu: %s",
        (unsigned long long)s, (unsigned long long)seq,
        s > seq ? "its ranks saw complete a piece whose data went with its crashed "
                  "daemon"
                : "the pieces between are lost");
}

/* The returning node starts at piece s: run what this node must run again, or fail. Sequence
 * numbers of one comm's collective pieces rise but may skip (pieces that never reach a
 * daemon): only equality tells. */
static int resync(span_comm_t *sc, uint64_t s)
{
    const span_snap_t *done = sc->snap_done;
    uint32_t from = sc->rerun->from;

    INFO("COLL", "comm %u: node %u starts again at piece %llu; here %s %llu", sc->id, from,
         (unsigned long long)s, sc->busy ? "piece under way" : "last piece done",
         (unsigned long long)(sc->busy ? sc->d0.seq : sc->done_seq));
    if (sc->done_any && sc->done_seq == s) {
        int rc = sc->crash_safe && done != NULL && done->valid && done->d.seq == s
                     ? span_coll_shadow(sc)
                     : -ENOENT;
        if (rc != 0)
            return span_break(sc, HCCL_E_REMOTE,
                              "node %u (%s) came back at piece %llu, which this node completed "
                              "and cannot run again for it (%d)",
                              from, sc->node_addrs[from].tcp, (unsigned long long)s, rc);
        WARN("COLL",
             "comm %u: node %u (%s) lost piece %llu in the crash of its daemon, which this node "
             "completed: running it again for that node",
             sc->id, from, sc->node_addrs[from].tcp, (unsigned long long)s);
        return 0;
    }
    if (!sc->busy) {
        sc->expect_seq = s; /* checked when this node's next piece comes (span_rerun_check) */
        sc->expect_set = 1;
        return 0;
    }
    return sc->d0.seq == s ? 0 : mismatch(sc, s, sc->d0.seq);
}

int span_rerun_check(span_comm_t *sc, uint64_t seq)
{
    if (!sc->expect_set)
        return 0;
    sc->expect_set = 0;
    return sc->expect_seq == seq ? 0 : mismatch(sc, sc->expect_seq, seq);
}

int span_rerun_progress(span_comm_t *sc)
{
    struct span_rerun *r = sc->rerun;
    int n = 0, done, pending = 0, rc;

    if (r == NULL)
        return 0;
    if (r->p2p != NULL && sc->probed && p2p_progress(sc, r, &n)) {
        p2p_words_free(sc, r);
        n++;
    }
    if (r->p2p != NULL)
        pending = 1;
    for (uint32_t i = 0; i < sc->nnodes; i++)
        if (r->tx[i] != NULL && (tp_test(r->tx[i], &done) != 0 || done))
            r->tx[i] = NULL;
        else
            pending |= r->tx[i] != NULL;
    if (r->from != UINT32_MAX) {
        tp_conn_t *c = sc->conns[r->from];
        if (r->rx == NULL && c != NULL && sc->probed &&
            tp_irecv(c, r->rx_msg, sizeof(r->rx_msg), NULL, rerun_tag(sc), &r->rx) != 0)
            r->rx = NULL;
        if (r->rx == NULL)
            return n;
        done = 0;
        if ((rc = tp_test(r->rx, &done)) == 0 && !done)
            return n;
        r->rx = NULL;
        if (rc != 0) /* the connection failed: its own handling says so */
            return n;
        uint64_t s = (uint64_t)r->rx_msg[3] << 32 | r->rx_msg[2];
        if (r->rx_msg[0] != RESYNC_MAGIC)
            return span_break(sc, HCCL_E_REMOTE, "node %u sent a restart word out of place",
                              r->from);
        rc = resync(sc, s);
        r->from = UINT32_MAX;
        n = 1;
        if (rc != 0)
            return rc;
    }
    if (!pending && !r->due && r->from == UINT32_MAX)
        span_rerun_free(sc);
    return n;
}

int span_rerun_accept(span_comm_t *sc, uint32_t peer, tp_conn_t *conn)
{
    if (!sc->crash_safe || !sc->probed || peer >= sc->nnodes || peer == sc->me ||
        sc->links[peer] == NULL || span_drain_active(sc))
        return 0;
    if (sc->early == NULL && (sc->early = calloc(sc->nnodes, sizeof(*sc->early))) == NULL)
        return 0;
    WARN("NET",
         "comm %u: node %u (%s) is back after a crash of its daemon; the comm goes on from the "
         "piece both nodes agree on%s",
         sc->id, peer, sc->node_addrs[peer].tcp,
         sc->busy ? ", the piece under way here from its start" : "");
    if (sc->shadow) { /* a crash again: the returning node will say what to run */
        l1_free(sc->run);
        sc->run = NULL;
        sc->shadow = 0;
    }
    span_coll_hold(sc);
    if (sc->early[peer] != NULL)
        tp_close(sc->early[peer]);
    sc->early[peer] = conn;
    span_respan(sc, peer);
    return 1;
}
