/*
 * Completions of an RDMA connection. The CQ is armed on a nonblocking completion channel whose
 * fd the engine polls. At any time the CQ is armed or an event waits in the channel: an event
 * is only taken together with arming the CQ again, and the CQ is polled empty after that, so a
 * completion that lands in between still wakes the engine. While completions keep coming the
 * CQ is simply polled (rdma_cq_poll), without the channel's syscalls.
 */
#include <errno.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"

#define RDMA_WC_BATCH 32

/* A failed work completion fails the connection; after that the QP only flushes. */
static void wc_failed(rdma_conn_t *c, const struct ibv_wc *wc)
{
    int err = -EIO;

    if (c->state == RDMA_ST_FAILED || c->eof)
        return;
    /* The peer stopped answering (retries ran out) or its end went away (its QP destroyed
     * under our operation: a remote operation error). */
    if (wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_RNR_RETRY_EXC_ERR ||
        wc->status == IBV_WC_WR_FLUSH_ERR || wc->status == IBV_WC_REM_ABORT_ERR ||
        wc->status == IBV_WC_REM_OP_ERR)
        err = -ECONNRESET;
    /* A device whose link went down fails what it was sending its own way (soft-RoCE: a local
     * QP operation error, which may come before its port reads DOWN): the link's fault, not
     * ours. */
    else if (c->id != NULL && !rdma_id_link_up(c->id))
        err = -ENETUNREACH;
    rdma_conn_fail(c, err, LOG_ERROR, "%s work completion failed: %s (vendor error %#x)%s",
                   (wc->wr_id & RDMA_WR_RECV) ? "receive" : "send", ibv_wc_status_str(wc->status),
                   wc->vendor_err, err == -ENETUNREACH ? "; the link is down" : "");
}

static void wc_handle(rdma_conn_t *c, const struct ibv_wc *wc)
{
    unsigned slot = (unsigned)(wc->wr_id & 0xffffffffu);

    if (wc->status != IBV_WC_SUCCESS) {
        wc_failed(c, wc);
        return;
    }
    if (wc->wr_id & RDMA_WR_PROBE) {
        c->probe_out = 0;
        return;
    }
    if (c->state == RDMA_ST_FAILED || slot >= c->depth)
        return;
    if (wc->wr_id & RDMA_WR_RECV) {
        c->rx_bytes += wc->byte_len;
        (void)rdma_rx_arrived(c, slot, wc->byte_len);
    } else
        rdma_tx_done(c, slot);
}

/* Takes the channel's events and arms the CQ again if any came. */
static int take_events(rdma_conn_t *c)
{
    struct ibv_cq *cq;
    void *ctx;
    unsigned got = 0;
    int rc;

    while (ibv_get_cq_event(c->cc, &cq, &ctx) == 0)
        got++;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        rdma_conn_fail(c, -errno, LOG_ERROR, "ibv_get_cq_event() failed: %s", strerror(errno));
        return c->err;
    }
    if (got == 0)
        return 0;
    ibv_ack_cq_events(c->cq, got);
    if (c->state != RDMA_ST_FAILED && (rc = ibv_req_notify_cq(c->cq, 0)) != 0) {
        rdma_conn_fail(c, -rc, LOG_ERROR, "ibv_req_notify_cq() failed: %s", strerror(rc));
        return c->err;
    }
    return 0;
}

int rdma_cq_poll(rdma_conn_t *c)
{
    struct ibv_wc wc[RDMA_WC_BATCH];
    int n, total = 0, sent = 0;

    if (c->cq == NULL)
        return 0;
    while ((n = ibv_poll_cq(c->cq, RDMA_WC_BATCH, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            sent |= !(wc[i].wr_id & RDMA_WR_RECV);
            wc_handle(c, &wc[i]);
        }
        total += n;
    }
    /* The send queue moved (rdma_msg.c's stall check): one clock read per poll, not per
     * completion. */
    if (sent)
        c->tx_moved_ns = now_ns();
    if (n < 0) {
        rdma_conn_fail(c, -EIO, LOG_ERROR, "ibv_poll_cq() failed");
        return c->err;
    }
    return total;
}

int rdma_cq_drain(rdma_conn_t *c)
{
    int rc;

    if (c->cq == NULL)
        return 0;
    if (take_events(c) != 0)
        return c->err;
    rc = rdma_cq_poll(c);
    return rc < 0 ? rc : 0;
}
