/*
 * What a comm across two daemons keeps of its Send/Recv with the other node, so that a crash
 * of that node's daemon loses no message (rerun.c says the rest of such a crash).
 *
 * Messages of one (sender, receiver) pair match in posting order, and the ranks number them
 * (desc_t.seq: per comm, peer and direction). Each node counts, per pair, the messages sent and
 * received here. A send written in full completes for its rank at once, and the old daemon
 * of the receiver may have read it without any receive to take it yet: that message dies with
 * that daemon. So the sender keeps a copy of each send to the other node, the newest
 * SPAN_P2P_KEEP_BYTES (and SPAN_P2P_KEEP_COPIES) of them per comm, in a ring. After every respan
 * the two nodes tell each other how many messages of each pair towards them they hold (received, or
 * read and not taken yet); a daemon back from a crash knows it from its ranks
 * (CommRejoinReq.recv_next). Each then sends again, from its copies, what the other lacks, before
 * any other send to it; and a send its rank posts again that the other already holds completes at
 * once. A message the other lacks and no copy holds any more fails the comm, naming the pair.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "log.h"
#include "span/span_int.h"
#include "span/tag.h"
#include "transport/tp_kept.h"

/* Copies of sends kept per comm, in a ring made at the first copy (nothing is allocated per
 * send): at most this many bytes and this many copies. */
#define SPAN_P2P_KEEP_BYTES (32ull << 20)
#define SPAN_P2P_KEEP_COPIES 4096u

struct kept_send {
    uint32_t local, peer; /* sender (local member), receiver (global rank) */
    uint64_t seq, len;
    uint64_t off;   /* its bytes: ring + off */
    uint64_t waste; /* the ring's end it skipped to start at 0, freed with it */
    tp_req_t *req;  /* sent again, in flight */
};

struct span_plog {
    uint32_t n;             /* global ranks */
    uint64_t *tx, *rx;      /* [nlocal * n]: per pair the next seq sent / received here */
    uint64_t *has;          /* [nlocal * n]: held here from rank g at the last respan */
    uint64_t *peer_has;     /* [nlocal * n]: what the other node holds from us, or NULL */
    uint8_t *ring;          /* SPAN_P2P_KEEP_BYTES of copies, in the order they came */
    struct kept_send *recs; /* SPAN_P2P_KEEP_COPIES records, count of them from first */
    uint32_t first, count;
    uint64_t tail, used; /* where the next copy goes; bytes held (skipped ends included) */
};

/* The i-th copy kept, oldest first. */
static struct kept_send *rec(const span_plog_t *p, uint32_t i)
{
    return &p->recs[(p->first + i) % SPAN_P2P_KEEP_COPIES];
}

static size_t at(const span_plog_t *p, uint32_t l, uint32_t g)
{
    return (size_t)l * p->n + g;
}

void span_plog_free(span_comm_t *sc)
{
    span_plog_t *p = sc->plog;

    if (p == NULL)
        return;
    span_plog_drop_again(sc);
    free(p->ring);
    free(p->recs);
    free(p->tx);
    free(p->rx);
    free(p->has);
    free(p->peer_has);
    free(p);
    sc->plog = NULL;
}

int span_plog_init(span_comm_t *sc, const uint64_t *next)
{
    uint32_t n = sc->pl.nranks;
    size_t cells = (size_t)sc->nlocal * n + 1;
    span_plog_t *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return -ENOMEM;
    sc->plog = p;
    p->n = n;
    p->tx = calloc(cells, sizeof(*p->tx));
    p->rx = calloc(cells, sizeof(*p->rx));
    p->has = calloc(cells, sizeof(*p->has));
    if (p->tx == NULL || p->rx == NULL || p->has == NULL)
        return -ENOMEM;
    /* Back after a restart: how far each local rank's pairs got, from the ranks. */
    for (uint32_t l = 0; next != NULL && l < sc->nlocal; l++) {
        for (uint32_t g = 0; g < n; g++) {
            p->tx[at(p, l, g)] = next[(size_t)l * n + g];
            p->rx[at(p, l, g)] = next[((size_t)sc->nlocal + l) * n + g];
            p->has[at(p, l, g)] = p->rx[at(p, l, g)];
        }
    }
    return 0;
}

/* Keeps a copy of a send; the oldest go to make room, unless one of them is being sent again. */
static void keep(span_plog_t *p, uint32_t l, const desc_t *d, const void *buf, uint64_t len)
{
    uint64_t off, waste;

    if (len > SPAN_P2P_KEEP_BYTES)
        return; /* a crash that needs it fails the comm, naming the pair */
    if (p->ring == NULL) {
        p->ring = malloc(SPAN_P2P_KEEP_BYTES);
        p->recs = malloc(SPAN_P2P_KEEP_COPIES * sizeof(*p->recs));
        if (p->ring == NULL || p->recs == NULL) {
            free(p->ring);
            free(p->recs);
            p->ring = NULL;
            p->recs = NULL;
            return;
        }
    }
    for (;;) {
        if (p->count == 0)
            p->tail = p->used = 0;
        /* A copy that does not fit before the ring's end starts at 0, the end skipped. */
        int wrap = p->tail + len > SPAN_P2P_KEEP_BYTES;
        off = wrap ? 0 : p->tail;
        waste = wrap ? SPAN_P2P_KEEP_BYTES - p->tail : 0;
        if (p->count < SPAN_P2P_KEEP_COPIES && p->used + waste + len <= SPAN_P2P_KEEP_BYTES)
            break;
        struct kept_send *old = rec(p, 0);
        if (old->req != NULL)
            return;
        p->used -= old->len + old->waste;
        p->first = (p->first + 1) % SPAN_P2P_KEEP_COPIES;
        p->count--;
    }
    struct kept_send *k = rec(p, p->count);
    *k = (struct kept_send){
        .local = l, .peer = d->root, .seq = d->seq, .len = len, .off = off, .waste = waste};
    memcpy(p->ring + off, buf, len);
    p->tail = off + len;
    p->used += len + waste;
    p->count++;
}

void span_plog_done(span_comm_t *sc, uint32_t l, const desc_t *d, const void *buf)
{
    span_plog_t *p = sc->plog;

    if (p == NULL || d->root >= p->n)
        return;
    /* Two of one pair may end in one look, the newer first (span_p2p_progress). */
    uint64_t *next = d->kind == DESC_SEND ? &p->tx[at(p, l, d->root)] : &p->rx[at(p, l, d->root)];
    if (d->seq + 1 > *next)
        *next = d->seq + 1;
    if (d->kind == DESC_SEND)
        keep(p, l, d, buf, d->count * dtype_size(d->dtype));
}

int span_plog_held(const span_comm_t *sc, uint32_t l, const desc_t *d)
{
    const span_plog_t *p = sc->plog;

    return p != NULL && p->peer_has != NULL && d->kind == DESC_SEND && d->root < p->n &&
           d->seq < p->peer_has[at(p, l, d->root)];
}

void span_plog_respan(span_comm_t *sc, const tp_msg_t *const *carried)
{
    span_plog_t *p = sc->plog;

    if (p == NULL)
        return;
    free(p->peer_has);
    p->peer_has = NULL;
    memcpy(p->has, p->rx, (size_t)sc->nlocal * p->n * sizeof(*p->has));
    /* Read off the old connections and not taken yet: held here too. */
    for (uint32_t i = 0; carried != NULL && i < sc->nnodes; i++)
        for (const tp_msg_t *m = carried[i]; m != NULL; m = m->next) {
            uint32_t src = (uint32_t)(m->tag >> 16 & 0xffff), dst = (uint32_t)(m->tag & 0xffff);
            uint32_t l = span_local(sc, dst);
            if (l != UINT32_MAX && src < p->n)
                p->has[at(p, l, src)]++;
        }
}

/* Node i's ranks, ascending: the k-th of them, or UINT32_MAX. */
static uint32_t nth_of(const span_comm_t *sc, uint32_t i, uint32_t k)
{
    for (uint32_t g = 0; g < sc->pl.nranks; g++)
        if (sc->pl.node[g] == i && k-- == 0)
            return g;
    return UINT32_MAX;
}

size_t span_plog_counts_len(const span_comm_t *sc, uint32_t i)
{
    return (size_t)sc->nlocal * sc->pl.count[i] * sizeof(uint64_t);
}

void span_plog_counts(const span_comm_t *sc, uint32_t i, uint64_t *out)
{
    const span_plog_t *p = sc->plog;
    uint32_t ni = sc->pl.count[i];

    /* Rows: node i's ranks (the senders), columns: ours (the receivers), both ascending. */
    for (uint32_t k = 0; k < ni; k++)
        for (uint32_t l = 0; l < sc->nlocal; l++)
            out[(size_t)k * sc->nlocal + l] = p->has[at(p, l, nth_of(sc, i, k))];
}

/* The copy of the seq-th send of local member l to rank g, or NULL. */
static struct kept_send *copy_of(const span_plog_t *p, uint32_t l, uint32_t g, uint64_t seq)
{
    for (uint32_t i = 0; i < p->count; i++) {
        struct kept_send *k = rec(p, i);
        if (k->local == l && k->peer == g && k->seq == seq)
            return k;
    }
    return NULL;
}

int span_plog_apply(span_comm_t *sc, uint32_t i, const uint64_t *in)
{
    span_plog_t *p = sc->plog;
    uint32_t ni = sc->pl.count[i];
    unsigned again = 0;
    int done;

    if (p->peer_has == NULL &&
        (p->peer_has = calloc((size_t)sc->nlocal * p->n + 1, sizeof(*p->peer_has))) == NULL)
        return span_break(sc, HCCL_E_MEMORY, "no memory to agree on send/recv after a restart");
    for (uint32_t l = 0; l < sc->nlocal; l++)
        for (uint32_t k = 0; k < ni; k++)
            p->peer_has[at(p, l, nth_of(sc, i, k))] = in[(size_t)l * ni + k];
    /* What node i lacks of each pair, in its order, from the copies. */
    for (uint32_t l = 0; l < sc->nlocal; l++)
        for (uint32_t g = 0; g < p->n; g++) {
            size_t c = at(p, l, g);
            for (uint64_t seq = p->peer_has[c]; sc->pl.node[g] == i && seq < p->tx[c]; seq++) {
                struct kept_send *k = copy_of(p, l, g, seq);
                tp_req_t *r = NULL;
                if (k == NULL || k->req != NULL ||
                    tp_isend(sc->conns[i], p->ring + k->off, k->len, NULL,
                             tag_p2p(sc->tag, sc->global_of[l], g), &r) != 0)
                    return span_break(
                        sc, HCCL_E_REMOTE,
                        "node %u (%s) lacks message %llu of %llu that rank %u sent rank %u, "
                        "which went with the crash of its daemon; this node keeps no copy of "
                        "it (it keeps the last %llu MiB of sends, and none still under way)",
                        i, sc->node_addrs[i].tcp, (unsigned long long)seq,
                        (unsigned long long)p->tx[c], sc->global_of[l], g,
                        SPAN_P2P_KEEP_BYTES >> 20);
                k->req = tp_test(r, &done) != 0 || done ? NULL : r;
                again++;
            }
        }
    if (again > 0)
        WARN("COLL", "comm %u: sending node %u (%s) again %u message(s) of send/recv it lost",
             sc->id, i, sc->node_addrs[i].tcp, again);
    return 0;
}

int span_plog_progress(span_comm_t *sc)
{
    span_plog_t *p = sc->plog;
    int done, n = 0;

    for (uint32_t i = 0; p != NULL && i < p->count; i++) {
        struct kept_send *k = rec(p, i);
        if (k->req != NULL && (tp_test(k->req, &done) != 0 || done)) {
            k->req = NULL;
            n++;
        }
    }
    return n;
}

void span_plog_drop_again(span_comm_t *sc)
{
    span_plog_t *p = sc->plog;

    for (uint32_t i = 0; p != NULL && i < p->count; i++) {
        struct kept_send *k = rec(p, i);
        if (k->req != NULL) {
            tp_cancel(k->req);
            k->req = NULL;
        }
    }
}
