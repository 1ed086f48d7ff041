/*
 * A node of a comm across daemons back from a restart, and where the comm goes on from.
 *
 * After a drain (drain.c) every node stopped at the same piece, so the returning node's first
 * collective piece is the next one of every node. After a crash of its daemon (SIGKILL, then
 * started again) nothing was agreed: the returning daemon knows only what its ranks post again
 * (the pieces none of them saw complete), and the other node may be one piece ahead or behind.
 * So the returning node says, once connected, below which piece its ranks saw every piece
 * complete (BELOW, from CommRejoinReq.coll_next), and with its first collective piece that
 * piece's sequence number (AT); every other node holds its collectives until it heard AT. A
 * node whose piece under way is below BELOW fails the comm at once: the returning node's
 * ranks saw it complete, and its data went with the crash. A piece needs every node, so no
 * node is more than one piece from the returning node's AT, and each other node, deciding
 * alone against AT, is then:
 *   - at that piece (its run, if under way, stopped when the returning node dialled): it runs
 *     the piece again from its start, from the level-1 input it kept (span_snap_t);
 *   - one piece ahead (it completed the piece before the crash; the returning node's ranks
 *     never saw it complete): it runs that piece again for the returning node only, from the
 *     input it kept, its result dropped; then its own piece from its start;
 *   - behind (the returning node's ranks saw complete a piece this node never did; its data
 *     went with the crashed daemon): the comm fails, naming both pieces.
 * A sum of two node shares is the same in either order (IEEE addition commutes), so the run
 * again gives every rank the bits the first run gave the others, whatever algorithm runs it.
 * A sum of three or more is not: such a comm chooses its algorithms on fixed link figures
 * (link.c), so that the run again, on any node, is the first run's algorithm.
 *
 * The other node takes the returning daemon's fresh dial as the sign of its crash
 * (span_rerun_accept): a daemon that did not restart never dials a node it is connected to,
 * but after a respan. Of 3 nodes or more, the nodes left therefore agree first (drain.c,
 * BACK) and open every connection again, theirs too: the old run's messages between them go
 * with the old connections, and a fresh dial from a node that said BACK is its new one.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"

#define RESYNC_MAGIC 0x4e595352u /* "RSYN" */
enum { WORD_AT = 0, WORD_BELOW = 1 };

/* Per other node: the send/recv counts exchanged after a respan (p2p_log.c). */
struct p2p_word {
    uint64_t *out, *in;
    tp_req_t *tx, *rx;
    int sent, heard;
};

struct span_rerun {
    struct p2p_word *p2p; /* [nnodes], or NULL: the comm keeps no send/recv log */
    uint32_t from;        /* a node that waits: the returning node; else UINT32_MAX */
    int due_at;           /* the returning node: its first piece not said yet */
    int due_below;        /* the returning node: BELOW not said yet */
    uint64_t below;       /* BELOW: said (returning node) or heard (the others), 0: none */
    uint32_t rx_msg[4];   /* magic, word, sequence number */
    tp_req_t *rx;         /* the returning node's word, awaited */
    uint32_t tx_msg[2][4];
    tp_req_t **tx; /* [2 * nnodes]: each word to each node */
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

void span_rerun_free(span_comm_t *sc)
{
    struct span_rerun *r = sc->rerun;

    if (r == NULL)
        return;
    if (r->rx != NULL)
        tp_cancel(r->rx);
    p2p_words_free(sc, r);
    for (uint32_t i = 0; r->tx != NULL && i < 2 * sc->nnodes; i++)
        if (r->tx[i] != NULL)
            tp_cancel(r->tx[i]);
    free(r->tx);
    free(r);
    sc->rerun = NULL;
}

void span_rerun_expect(span_comm_t *sc, uint64_t below)
{
    struct span_rerun *r;

    span_rerun_free(sc);
    if (sc->returning >= sc->nnodes)
        return;
    if ((r = calloc(1, sizeof(*r))) == NULL ||
        (r->tx = calloc(2 * (size_t)sc->nnodes, sizeof(*r->tx))) == NULL ||
        (sc->plog != NULL && (r->p2p = calloc(sc->nnodes, sizeof(*r->p2p))) == NULL)) {
        if (r != NULL)
            free(r->tx);
        free(r);
        span_break(sc, HCCL_E_MEMORY, "no memory to agree where the comm goes on");
        return;
    }
    r->from = sc->returning == sc->me ? UINT32_MAX : sc->returning;
    r->due_at = sc->returning == sc->me;
    r->due_below = sc->returning == sc->me && below > 0;
    r->below = sc->returning == sc->me ? below : 0;
    sc->rerun = r;
}

int span_rerun_waits(const span_comm_t *sc)
{
    return sc->rerun != NULL && sc->rerun->from != UINT32_MAX;
}

int span_rerun_p2p_holds(const span_comm_t *sc)
{
    const struct span_rerun *r = sc->rerun;

    for (uint32_t i = 0; r != NULL && r->p2p != NULL && i < sc->nnodes; i++)
        if (i != sc->me && !r->p2p[i].heard)
            return 1;
    return 0;
}

int span_rerun_active(const span_comm_t *sc)
{
    const struct span_rerun *r = sc->rerun;

    if (r == NULL)
        return 0;
    /* The returning node's words wake this one as data on its connection (ops_poll_fds). */
    if (r->p2p != NULL || r->due_below)
        return 1;
    for (uint32_t i = 0; i < 2 * sc->nnodes; i++)
        if (r->tx[i] != NULL)
            return 1;
    return 0;
}

/* Says word w (WORD_*) with seq to every other node. */
static void say(span_comm_t *sc, int w, uint64_t seq)
{
    struct span_rerun *r = sc->rerun;
    uint32_t *m = r->tx_msg[w];
    int done;

    m[0] = RESYNC_MAGIC;
    m[1] = (uint32_t)w;
    m[2] = (uint32_t)seq;
    m[3] = (uint32_t)(seq >> 32);
    for (uint32_t i = 0; i < sc->nnodes; i++) {
        tp_req_t **t = &r->tx[2 * i + w];
        if (i == sc->me || sc->conns[i] == NULL ||
            tp_isend(sc->conns[i], m, 4 * sizeof(*m), NULL, rerun_tag(sc), t) != 0)
            *t = NULL;
        else if (tp_test(*t, &done) != 0 || done)
            *t = NULL;
    }
}

void span_rerun_announce(span_comm_t *sc, uint64_t seq)
{
    if (sc->rerun == NULL || !sc->rerun->due_at)
        return;
    sc->rerun->due_at = 0;
    say(sc, WORD_AT, seq);
}

/* The returning node and this one cannot go on: this node's piece `seq` against its `s`. */
static int mismatch(span_comm_t *sc, uint64_t s, uint64_t seq)
{
    return span_break(
        sc, HCCL_E_REMOTE,
        "a node back from a crash of its daemon starts again at piece %llu, this node "
        "at piece %llu: %s",
        (unsigned long long)s, (unsigned long long)seq,
        s > seq ? "its ranks saw complete a piece whose data went with its crashed daemon"
                : "the pieces between are lost");
}

/* The returning node starts at piece s: run what this node must run again, or fail. Sequence
 * numbers of one comm's collective pieces rise but may skip (pieces that never reach a
 * daemon): only equality tells. */
static int resync(span_comm_t *sc, uint64_t s)
{
    const span_snap_t *done = sc->snap_done;
    uint32_t from = sc->returning;

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
    const struct span_rerun *r = sc->rerun;

    if (r != NULL && r->from != UINT32_MAX && seq < r->below)
        return mismatch(sc, r->below, seq);
    if (!sc->expect_set)
        return 0;
    sc->expect_set = 0;
    return sc->expect_seq == seq ? 0 : mismatch(sc, sc->expect_seq, seq);
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
            w->heard = 1; /* tested no more, whatever came */
            (*n)++;
            if (rc != 0)
                return span_break(sc, HCCL_E_REMOTE,
                                  "the connection to node %u (%s) failed before the nodes agreed "
                                  "on send/recv after a restart (%d)",
                                  i, sc->node_addrs[i].tcp, rc) *
                       0;
            if (span_plog_apply(sc, i, w->in) != 0)
                return 0;
        }
        all &= w->tx == NULL;
    }
    return all;
}

/* A node that waits: the returning node's words, BELOW then AT. 0: none yet, 1: one taken,
 * -1: the comm broke. */
static int words_progress(span_comm_t *sc, struct span_rerun *r)
{
    tp_conn_t *c = sc->conns[r->from];
    int done = 0, rc;

    if (r->rx == NULL &&
        tp_irecv(c, r->rx_msg, sizeof(r->rx_msg), NULL, rerun_tag(sc), &r->rx) != 0) {
        r->rx = NULL;
        return -span_break(sc, HCCL_E_REMOTE, "cannot wait for node %u's word", r->from);
    }
    if ((rc = tp_test(r->rx, &done)) == 0 && !done)
        return 0;
    r->rx = NULL;
    if (rc != 0)
        return -span_break(sc, HCCL_E_REMOTE,
                           "the connection to node %u (%s) failed before it said where it goes "
                           "on after its restart (%d)",
                           r->from, sc->node_addrs[r->from].tcp, rc);
    uint64_t s = (uint64_t)r->rx_msg[3] << 32 | r->rx_msg[2];
    if (r->rx_msg[0] != RESYNC_MAGIC || r->rx_msg[1] > WORD_BELOW)
        return -span_break(sc, HCCL_E_REMOTE, "node %u sent a restart word out of place", r->from);
    if (r->rx_msg[1] == WORD_BELOW) {
        INFO("COLL", "comm %u: node %u's ranks saw every piece below %llu complete", sc->id,
             r->from, (unsigned long long)s);
        r->below = s;
        return sc->busy && sc->d0.seq < s ? -mismatch(sc, s, sc->d0.seq) : 1;
    }
    r->from = UINT32_MAX;
    return resync(sc, s) != 0 ? -1 : 1;
}

int span_rerun_progress(span_comm_t *sc)
{
    struct span_rerun *r = sc->rerun;
    int n = 0, done;

    if (r == NULL || !sc->probed)
        return 0;
    if (r->p2p != NULL && p2p_progress(sc, r, &n)) {
        p2p_words_free(sc, r);
        n++;
    }
    if (r->due_below) {
        r->due_below = 0;
        say(sc, WORD_BELOW, r->below);
    }
    for (uint32_t i = 0; i < 2 * sc->nnodes; i++)
        if (r->tx[i] != NULL && (tp_test(r->tx[i], &done) != 0 || done))
            r->tx[i] = NULL;
    for (int rc = 1; rc == 1 && r->from != UINT32_MAX;) {
        if ((rc = words_progress(sc, r)) < 0)
            return n + 1; /* broken: progress stops */
        n += rc;
    }
    if (!span_rerun_active(sc) && !r->due_at && r->from == UINT32_MAX)
        span_rerun_free(sc);
    return n;
}

void span_rerun_stop(span_comm_t *sc)
{
    if (sc->shadow) { /* a crash again: the returning node will say what to run */
        l1_free(sc->run);
        sc->run = NULL;
        sc->shadow = 0;
    }
    span_coll_hold(sc);
}

int span_rerun_accept(span_comm_t *sc, uint32_t peer, tp_conn_t *conn)
{
    if (!sc->crash_safe || !sc->probed || peer >= sc->nnodes || peer == sc->me ||
        sc->links[peer] == NULL || span_drain_active(sc))
        return 0;
    /* Of 3 nodes or more, a node that did not crash dials anew after a BACK (drain.c), which
     * it said first on its old connection: read what came there before taking it for a crash
     * (that may end the barrier here, and the dial is then the one the respan waits for). */
    if (sc->nnodes > 2 && (span_drain_listen_now(sc), span_drain_active(sc) || !sc->probed))
        return span_link_take(sc, peer, conn) == 0 || span_link_stash(sc, peer, conn);
    if (sc->early == NULL && (sc->early = calloc(sc->nnodes, sizeof(*sc->early))) == NULL)
        return 0;
    if (sc->early[peer] != NULL)
        tp_close(sc->early[peer]);
    sc->early[peer] = conn;
    if (sc->nnodes > 2) /* the others first agree to open their connections again */
        return span_drain_back(sc, peer), 1;
    WARN("NET",
         "comm %u: node %u (%s) is back after a crash of its daemon; the comm goes on from the "
         "piece both nodes agree on%s",
         sc->id, peer, sc->node_addrs[peer].tcp,
         sc->busy ? ", the piece under way here from its start" : "");
    span_rerun_stop(sc);
    span_respan(sc, peer);
    return 1;
}
