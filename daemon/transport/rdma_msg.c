/*
 * Requests and the send side of an RDMA connection. A message goes out in fragments, each
 * copied into a registered send slot behind a header and posted as one SEND; sends leave in
 * posting order and complete in it (RC completes in order), a send when its last fragment's
 * SEND has completed.
 *
 * Credits: a SEND consumes one of the receives the peer has posted, so the sender keeps a
 * count of them (the peer's depth at first) and posts nothing beyond it. The receiver posts a
 * slot again once it has taken the fragment out and returns these credits in the header of
 * its next message, or, with nothing to send, in a CREDIT message once a quarter of its slots
 * (at least 2) are due. The last credit is kept for such a CREDIT message: with data allowed
 * to use it, both sides could run out at once, each holding credits for the other. A CREDIT
 * message returns at least 2 for the 1 it uses, so two idle sides never trade them forever.
 *
 * Heartbeat: a peer that dies without a word (its machine, its link) is noticed only by a SEND
 * that gets no ACK: RC retries HCCL_RDMA_RETRY_CNT times, HCCL_RDMA_TIMEOUT apart, then the
 * QP fails. A side that waits for a message, or for credits to send one, and has nothing on
 * the wire probes a peer silent for HCCLD_HEARTBEAT_S with an RDMA WRITE of nothing (which
 * needs no credit), so the wait ends in an error instead of a hang.
 * A peer whose daemon is stuck while its machine lives still ACKs: HCCL_EXEC_TIMEOUT is for
 * that, as on TCP.
 *
 * Stall: a send queue whose work requests see no completion, good or bad, for twice the QP's
 * whole retry budget (and a heartbeat) fails the connection as a peer gone (-ETIMEDOUT). A
 * device is supposed to end them itself, but soft-RoCE whose own link is down retries such a
 * send forever without ever starting its ACK timer, and the wait would hang.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"
#include "transport/rdma_env.h"

void rdma_msg_init(rdma_conn_t *c)
{
    tp_kept_init(&c->kept, rdma_env()->unexpected);
    c->free_reqs = NULL;
    for (int i = RDMA_MAX_REQS - 1; i >= 0; i--) {
        tp_free_push(&c->free_reqs, &c->reqs[i].base);
    }
}

void rdma_req_release(rdma_req_t *r)
{
    rdma_conn_t *c = r->conn;

    tp_free_push(&c->free_reqs, &r->base);
}

void rdma_conn_fail(rdma_conn_t *c, int err, int level, const char *fmt, ...)
{
    char why[256];
    va_list ap;

    if (c->state == RDMA_ST_FAILED)
        return;
    why[0] = '\0';
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
    }
    /* A resumable connection whose link failed waits for a new QP instead. */
    if (rdma_resume_suspend(c, err, why) == 0)
        return;
    c->rs.down = 0;
    if (fmt != NULL && log_level_cur >= level)
        log_msg(level, "NET", RDMA_CONN_FMT "%s", RDMA_CONN_ARGS(c), why);
    c->state = RDMA_ST_FAILED;
    c->err = err;
    tp_queue_fail(&c->sendq, err);
    tp_queue_fail(&c->sentq, err);
    tp_queue_fail(&c->recvq, err);
    if (c->rx_req != NULL && !c->rx_req->base.done)
        tp_req_complete(&c->rx_req->base, err);
    c->rx_req = NULL;
    c->rx_active = 0;
    rdma_rx_free(c);
    rdma_hs_clear(&c->hs);
    rdma_qp_shutdown(c);
}

void rdma_conn_eof(rdma_conn_t *c)
{
    /* A resumable connection's peer says BYE before it closes: an end without it is a
     * failure (its side of the link failed, or its daemon is gone), and suspends. */
    if (c->rs.enabled && !c->rs.got_bye) {
        rdma_conn_fail(c, -ECONNRESET, LOG_ERROR, "the peer disconnected without a BYE");
        return;
    }
    /* A peer that closes between messages has finished sending: what arrived stays readable
     * and only the receives still posted, which nothing can fill any more, fail (as on TCP).
     * In the middle of a message, or with our sends unanswered, the connection fails. */
    if (rdma_rx_busy(c)) {
        rdma_conn_fail(c, -ECONNRESET, LOG_ERROR,
                       "the peer disconnected in the middle of a message");
        return;
    }
    if (c->sendq.head != NULL || c->sentq.head != NULL) {
        rdma_conn_fail(c, -ECONNRESET, LOG_ERROR, "the peer disconnected; sends were pending");
        return;
    }
    DBG("NET", RDMA_CONN_FMT "the peer disconnected%s", RDMA_CONN_ARGS(c),
        c->recvq.head != NULL ? "; the receives still posted fail" : "");
    c->eof = 1;
    tp_queue_fail(&c->recvq, -ECONNRESET);
    rdma_qp_shutdown(c);
}

/* Our receive slots posted again since we last said so, as many as a header carries. */
static uint16_t credits_take(rdma_conn_t *c)
{
    unsigned n = c->to_return < 0xffff ? c->to_return : 0xffff;

    c->to_return -= n;
    return (uint16_t)n;
}

static unsigned credit_threshold(const rdma_conn_t *c)
{
    return c->depth / 4 > 2 ? c->depth / 4 : 2;
}

/* Writes a header (and payload) into a free send slot and posts it; uses one credit. */
static int post_msg(rdma_conn_t *c, rdma_hdr_t *h, const void *payload, rdma_req_t *last)
{
    unsigned slot = c->free_send[c->nfree_send - 1];
    uint8_t *p = rdma_send_slot(c, slot);
    int rc;

    h->credits = credits_take(c);
    rdma_hdr_encode(h, p);
    if (h->frag_len > 0)
        memcpy(p + RDMA_HDR_BYTES, payload, h->frag_len);
    c->send_last[slot] = last;
    c->credits--;
    /* The slot counts as taken once posted: post_send() must see whether the send queue was
     * empty before, to start the stall clock (an idle connection's clock is stale). */
    rc = rdma_slot_send(c, slot, RDMA_HDR_BYTES + h->frag_len);
    c->nfree_send--;
    if (rc != 0)
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
    return rc;
}

int rdma_send_ctrl(rdma_conn_t *c, int type, uint64_t count, const void *payload, uint32_t len)
{
    rdma_hdr_t h = {.type = (uint8_t)type, .frag_len = len, .len = count};

    if (c->credits < 1 || c->nfree_send == 0)
        return -EAGAIN;
    return post_msg(c, &h, payload, NULL);
}

/* The next fragment of the oldest send with bytes left. */
static int send_fragment(rdma_conn_t *c)
{
    rdma_req_t *r = rdma_req_of(c->sendq.head);
    size_t left = r->len - r->posted;
    uint32_t n = left < c->frag_max ? (uint32_t)left : c->frag_max;
    rdma_hdr_t h = {
        .type = RDMA_MSG_DATA, .frag_len = n, .tag = r->base.tag, .len = r->len, .off = r->posted};
    const uint8_t *payload = n > 0 ? r->buf + r->posted : NULL;

    r->posted += n;
    r->started = 1;
    if (r->posted < r->len)
        return post_msg(c, &h, payload, NULL);
    tp_queue_push(&c->sentq, tp_queue_pop(&c->sendq));
    return post_msg(c, &h, payload, r);
}

/* Waiting for the peer (for a message, or for credits to send one) with nothing of ours on
 * the wire, and the peer silent for a while. */
static int probe_due(rdma_conn_t *c)
{
    uint64_t now, hb = rdma_env()->heartbeat_ns;
    int waiting =
        c->recvq.head != NULL || c->rx_active || (c->sendq.head != NULL && c->credits < 2);

    if (!waiting || c->nfree_send < c->depth || c->probe_out)
        return 0;
    now = now_ns();
    if (now - c->rx_last_ns < hb || now - c->probe_last_ns < hb)
        return 0;
    c->probe_last_ns = now;
    return 1;
}

int rdma_tx_progress(rdma_conn_t *c)
{
    int rc;

    if (c->state != RDMA_ST_READY || c->eof)
        return 0;
    while (c->sendq.head != NULL && c->credits >= 2 && c->nfree_send > 0)
        if ((rc = send_fragment(c)) != 0)
            return rc;
    if (c->to_return >= credit_threshold(c) && c->credits >= 1 && c->nfree_send > 0)
        return rdma_send_ctrl(c, RDMA_MSG_CREDIT, 0, NULL, 0);
    if (probe_due(c))
        return rdma_post_probe(c);
    return 0;
}

void rdma_tx_done(rdma_conn_t *c, unsigned slot)
{
    rdma_req_t *r = c->send_last[slot];

    c->send_last[slot] = NULL;
    c->free_send[c->nfree_send++] = slot;
    if (r == NULL)
        return;
    /* RC completes in posting order, and sends are posted in order. */
    if (c->sentq.head != &r->base) {
        rdma_conn_fail(c, -EIO, LOG_ERROR, "send completions out of order");
        return;
    }
    tp_req_complete(tp_queue_pop(&c->sentq), 0);
    c->rs.tx_count++;
}

/* After the CQ was polled: a completion that came while the daemon was descheduled counts. */
static void stall_check(rdma_conn_t *c)
{
    const rdma_env_t *e = rdma_env();
    uint64_t quiet;

    if (c->state != RDMA_ST_READY || c->eof || !rdma_tx_busy(c))
        return;
    quiet = now_ns() - c->tx_moved_ns;
    if (quiet > e->stall_ns)
        rdma_conn_fail(c, -ETIMEDOUT, LOG_ERROR,
                       "no send work completion for %.1f s, though the QP's retries "
                       "(HCCL_RDMA_TIMEOUT=%u, HCCL_RDMA_RETRY_CNT=%u) end within %.1f s: the "
                       "device no longer sends (its link down?)",
                       (double)quiet / 1e9, e->timeout, e->retry_cnt, (double)e->retry_ns / 1e9);
}

int rdma_msg_progress(rdma_conn_t *c)
{
    int n;

    if (c->state == RDMA_ST_FAILED)
        return c->err;
    /* Suspended: the failed QP goes, a dial starts, the hold time runs out. */
    rdma_id_sweep();
    if (c->rs.down && rdma_resume_progress(c) != 0)
        return c->err;
    /* Busy, the CQ is all there is to look at; the channels' syscalls wait for a pass that
     * finds it empty (a peer that is gone leaves it empty soon enough). */
    n = c->cq != NULL && !c->eof ? rdma_cq_poll(c) : 0;
    if (n == 0 && c->ch != NULL) {
        rdma_setup_events(c);
        if (c->state != RDMA_ST_FAILED && !c->eof)
            (void)rdma_cq_drain(c);
    }
    if (c->state == RDMA_ST_CONFIRM || c->state == RDMA_ST_READY || c->state == RDMA_ST_RESUMING)
        (void)rdma_rx_progress(c);
    /* After the CQ: what the peer sent before it left has been taken by now. */
    if (c->peer_gone && !c->eof && c->state == RDMA_ST_READY)
        rdma_conn_eof(c);
    stall_check(c);
    (void)rdma_tx_progress(c);
    /* A failure seen in this pass: its QP goes now, outside any poll or event. */
    if (c->rs.drop)
        (void)rdma_resume_progress(c);
    return c->state == RDMA_ST_FAILED ? c->err : 0;
}

int rdma_msg_post(rdma_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, rdma_req_t **r_p)
{
    rdma_req_t *r;

    /* A suspended connection takes requests: they wait for its new QP. */
    if (c->state != RDMA_ST_READY && !c->rs.down)
        return c->state == RDMA_ST_FAILED ? c->err : -ENOTCONN;
    if (dir == RDMA_DIR_SEND && c->eof)
        return -ECONNRESET;
    if (c->free_reqs == NULL || (buf == NULL && len != 0))
        return c->free_reqs == NULL ? -EAGAIN : -EINVAL;
    r = rdma_req_of(tp_free_pop(&c->free_reqs));
    *r = (rdma_req_t){
        .base = {.conn = &c->base, .tag = tag}, .conn = c, .buf = buf, .len = len, .dir = dir};
    *r_p = r;
    if (dir == RDMA_DIR_RECV) {
        rdma_rx_post(c, r);
        return 0;
    }
    tp_queue_push(&c->sendq, &r->base);
    (void)rdma_tx_progress(c);
    return 0;
}

void rdma_msg_cancel(rdma_req_t *r)
{
    rdma_conn_t *c = r->conn;
    int clean;

    if (!r->base.done) {
        /* A send with a fragment on the QP, or the receive being filled, cannot leave the
         * stream without corrupting it. */
        clean = r->dir == RDMA_DIR_SEND
                    ? !r->started && tp_queue_unlink(&c->sendq, &r->base) == 0
                    : c->rx_req != r && tp_queue_unlink(&c->recvq, &r->base) == 0;
        if (!clean)
            rdma_conn_fail(c, -ECANCELED, LOG_WARN,
                           "a %s of tag %#llx was withdrawn half done; failing the connection",
                           r->dir == RDMA_DIR_SEND ? "send" : "receive",
                           (unsigned long long)r->base.tag);
    }
    rdma_req_release(r);
}
