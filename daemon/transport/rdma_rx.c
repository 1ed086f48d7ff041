/*
 * The receive side of an RDMA connection. Receive completions queue their slots in arrival
 * order; the slots are then taken in that order: the first fragment of a message goes to the
 * oldest posted receive with its tag, else into a buffer of its own while the messages kept
 * this way stay within their budget (HCCLD_RDMA_UNEXPECTED), and the following fragments
 * after it. A message with nowhere to go stays in its slot: the slot is not posted again, so
 * the peer's credits run out and it stops sending, as a TCP sender stops on a full window.
 * A slot is posted again, and its credit owed to the peer, as soon as it has been copied out.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"
#include "transport/rdma_env.h"

/* Gives a receive slot back to the QP; the peer learns of it with our next message. */
static int slot_release(rdma_conn_t *c, unsigned slot)
{
    int rc;

    /* Once the peer has left, the QP is stopped and nothing more comes into slots (a
     * suspended connection's QP goes, and its new one has every slot posted). */
    if (c->eof || c->state == RDMA_ST_FAILED || c->state == RDMA_ST_SUSPENDED || c->qp == NULL)
        return 0;
    if ((rc = rdma_slot_recv(c, slot)) != 0) {
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
        return rc;
    }
    c->to_return++;
    return 0;
}

int rdma_rx_arrived(rdma_conn_t *c, unsigned slot, uint32_t bytes)
{
    rdma_hdr_t h;

    if (bytes > c->slot || rdma_hdr_decode(rdma_recv_slot(c, slot), bytes, &h) != 0) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "malformed message of %u bytes from the peer", bytes);
        return -EPROTO;
    }
    /* Credits count at once, whether or not the message can be taken yet. */
    if (h.credits > c->peer_depth - c->credits) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "the peer returned %u credits, %u are out", h.credits,
                       c->peer_depth - c->credits);
        return -EPROTO;
    }
    c->credits += h.credits;
    c->rx_last_ns = now_ns();
    if (h.type == RDMA_MSG_BYE)
        c->rs.got_bye = 1;
    if (h.type == RDMA_MSG_CREDIT || h.type == RDMA_MSG_BYE)
        return slot_release(c, slot);
    c->arrived[(c->arr_head + c->arr_count) % c->depth] = (rdma_arrival_t){.slot = slot, .h = h};
    c->arr_count++;
    return 0;
}

/* The accepting side's last step: the connecting side's proof, its first message. */
static int on_confirm(rdma_conn_t *c, const rdma_arrival_t *a)
{
    if (c->state != RDMA_ST_CONFIRM) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "a key proof out of place");
        return -EPROTO;
    }
    if (rdma_hs_check_confirm(&c->hs, rdma_recv_slot(c, a->slot) + RDMA_HDR_BYTES) != 0) {
        rdma_conn_fail(c, -EACCES, LOG_ERROR, "node %u does not prove the job key, refused",
                       c->hs.peer_node);
        return -EACCES;
    }
    rdma_hs_clear(&c->hs);
    rdma_resume_ready(c);
    if (c->rs.adopt)
        return 1;
    c->state = RDMA_ST_READY;
    DBG("NET", RDMA_CONN_FMT "node %u ready", RDMA_CONN_ARGS(c), c->hs.peer_node);
    return 1;
}

/* r gets -EPROTO, and the connection fails with it. */
static int len_mismatch(rdma_conn_t *c, rdma_req_t *r, uint64_t tag, uint64_t got)
{
    tp_req_complete(&r->base, -EPROTO);
    rdma_conn_fail(c, -EPROTO, LOG_ERROR, "message tag %#llx has %llu bytes, its receive wants %zu",
                   (unsigned long long)tag, (unsigned long long)got, r->len);
    return -EPROTO;
}

/*
 * Gives a new message a destination: the oldest receive posted with its tag, else (unless
 * its user is gone: then nowhere) a buffer of its own within the budget. 1 routed, 0 not yet
 * (the budget is full), or a negative errno (the connection has failed).
 */
static int rx_route(rdma_conn_t *c, const rdma_hdr_t *h)
{
    rdma_req_t *r;

    if (h->off != 0) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "a message of tag %#llx starts at offset %llu",
                       (unsigned long long)h->tag, (unsigned long long)h->off);
        return -EPROTO;
    }
    if ((r = rdma_req_of(tp_queue_take(&c->recvq, h->tag))) != NULL) {
        if (h->len != r->len)
            return len_mismatch(c, r, h->tag, h->len);
        c->rx_req = r;
    } else if (!tp_kept_forgotten(&c->kept, h->tag)) {
        /* What a failed QP delivered is taken whatever the budget: the peer counts it sent. */
        if (!tp_kept_room(&c->kept, h->len) && !c->rs.salvage)
            return 0;
        c->rx_unexp = tp_kept_new(&c->kept, h->tag, h->len);
        if (c->rx_unexp == NULL) {
            rdma_conn_fail(c, -ENOMEM, LOG_ERROR, "no memory to hold a message of %llu bytes",
                           (unsigned long long)h->len);
            return -ENOMEM;
        }
    }
    c->rx_active = 1;
    c->rx_tag = h->tag;
    c->rx_len = h->len;
    c->rx_got = 0;
    return 1;
}

/* Completes r with the kept message u (by a copy) and frees u. */
static int unexp_deliver(rdma_conn_t *c, tp_msg_t *u, rdma_req_t *r)
{
    int rc = 0;

    if (u->len != r->len)
        rc = len_mismatch(c, r, u->tag, u->len);
    else if (u->len > 0)
        memcpy(r->buf, u->data, u->len);
    tp_kept_drop(&c->kept, u);
    if (rc == 0)
        tp_req_complete(&r->base, 0);
    return rc;
}

/* The message is in: complete its receive, or keep it for a later one (or drop it). */
static int rx_finish(rdma_conn_t *c)
{
    rdma_req_t *r = c->rx_req;
    tp_msg_t *u = c->rx_unexp;

    c->rx_active = 0;
    c->rx_req = NULL;
    c->rx_unexp = NULL;
    c->rs.rx_count++;
    if (r != NULL) {
        tp_req_complete(&r->base, 0);
        return 0;
    }
    if (u == NULL) {
        DBG("NET", RDMA_CONN_FMT "dropped a late message of tag %#llx (its user is gone)",
            RDMA_CONN_ARGS(c), (unsigned long long)c->rx_tag);
        return 0;
    }
    /* Its receive may have been posted while the fragments were still coming in. */
    if ((r = rdma_req_of(tp_queue_take(&c->recvq, u->tag))) != NULL)
        return unexp_deliver(c, u, r);
    tp_kept_push(&c->kept, u);
    return 0;
}

int rdma_rx_take(rdma_conn_t *c, const rdma_arrival_t *a)
{
    const rdma_hdr_t *h = &a->h;
    uint8_t *dst;
    int rc;

    if (c->state != RDMA_ST_READY && !c->rs.salvage) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "data before the job key was proven");
        return -EPROTO;
    }
    if (!c->rx_active) {
        if ((rc = rx_route(c, h)) <= 0)
            return rc;
    } else if (h->tag != c->rx_tag || h->len != c->rx_len || h->off != c->rx_got) {
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "fragment out of sequence (tag %#llx offset %llu)",
                       (unsigned long long)h->tag, (unsigned long long)h->off);
        return -EPROTO;
    }
    dst = c->rx_req != NULL ? c->rx_req->buf : c->rx_unexp != NULL ? c->rx_unexp->data : NULL;
    if (dst != NULL && h->frag_len > 0)
        memcpy(dst + c->rx_got, rdma_recv_slot(c, a->slot) + RDMA_HDR_BYTES, h->frag_len);
    c->rx_got += h->frag_len;
    if (c->rx_got == c->rx_len && (rc = rx_finish(c)) != 0)
        return rc;
    return 1;
}

/* A QP of the connection's own whose messages are for it (not one that failed, nor one that
 * went to a suspended connection). */
static int rx_live(const rdma_conn_t *c)
{
    return c->state == RDMA_ST_READY || c->state == RDMA_ST_CONFIRM || c->state == RDMA_ST_RESUMING;
}

int rdma_rx_progress(rdma_conn_t *c)
{
    while (c->arr_count > 0 && rx_live(c)) {
        rdma_arrival_t a = c->arrived[c->arr_head];
        int rc = a.h.type == RDMA_MSG_CONFIRM  ? on_confirm(c, &a)
                 : a.h.type == RDMA_MSG_RESUME ? rdma_resume_on_resume(c, a.h.len)
                                               : rdma_rx_take(c, &a);

        if (rc <= 0)
            return rc;
        c->arr_head = (c->arr_head + 1) % c->depth;
        c->arr_count--;
        if ((rc = slot_release(c, a.slot)) != 0)
            return rc;
        /* An AGAIN's QP goes, with what else arrived on it, to the connection it names. */
        if (c->rs.adopt)
            return rdma_resume_adopt(c);
    }
    return c->state == RDMA_ST_FAILED ? c->err : 0;
}

/* A receive whose message already arrived completes at once: 0, 1 if none is kept, or a
 * negative errno. */
static int from_unexp(rdma_conn_t *c, rdma_req_t *r)
{
    tp_msg_t *u = tp_kept_take(&c->kept, r->base.tag);

    return u != NULL ? unexp_deliver(c, u, r) : 1;
}

void rdma_rx_post(rdma_conn_t *c, rdma_req_t *r)
{
    if (from_unexp(c, r) <= 0)
        return;
    if (c->eof) {
        /* Nothing more comes: this receive fails, the messages kept stay for others. */
        DBG("NET", RDMA_CONN_FMT "receive of tag %#llx: the peer has disconnected",
            RDMA_CONN_ARGS(c), (unsigned long long)r->base.tag);
        tp_req_complete(&r->base, -ECONNRESET);
        return;
    }
    tp_queue_push(&c->recvq, &r->base);
    /* A message that waited in its slot for want of room may have somewhere to go now; its
     * slot's credit then goes back. */
    if (c->arr_count > 0 && rdma_rx_progress(c) == 0)
        (void)rdma_tx_progress(c);
}

int rdma_rx_busy(const rdma_conn_t *c)
{
    return c->rx_active || c->arr_count > 0;
}

void rdma_rx_forget(rdma_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    unsigned n = tp_kept_forget(&c->kept, mask, value, ttl_ns);

    if (n > 0)
        DBG("NET", RDMA_CONN_FMT "dropped %u kept messages of tag %#llx/%#llx", RDMA_CONN_ARGS(c),
            n, (unsigned long long)value, (unsigned long long)mask);
    /* The one coming in now: the rest of its fragments go nowhere. */
    if (c->rx_unexp != NULL && (c->rx_unexp->tag & mask) == value) {
        tp_kept_drop(&c->kept, c->rx_unexp);
        c->rx_unexp = NULL;
    }
}

void rdma_rx_free(rdma_conn_t *c)
{
    tp_kept_free(&c->kept);
    if (c->rx_unexp != NULL)
        tp_kept_drop(&c->kept, c->rx_unexp);
    c->rx_unexp = NULL;
}
