/*
 * Verbs resources of one RDMA connection: a PD, a CQ on a nonblocking completion channel, an
 * RC QP of our own (not rdma_cm's: that lets the connecting side check the accepting side's
 * proof of the key before its QP accepts anything, and lets us set SL, timeout and retry
 * count when the QP goes to RTR and RTS), and the staging slots, registered once and reused:
 * depth send slots, then depth receive slots.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"
#include "transport/rdma_env.h"

/* The rdma_ucm workaround librdmacm applies on InfiniBand ports (bits 21-23 of the mask). */
#define RDMA_IB_MASK_BUG 0xe00000

static int verbs_err(const rdma_conn_t *c, const char *call, int err)
{
    if (err == 0)
        err = EIO;
    ERR("NET", RDMA_CONN_FMT "%s failed: %s", RDMA_CONN_ARGS(c), call, strerror(err));
    return -err;
}

static int nonblocking(const rdma_conn_t *c, int fd)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0 ||
        fcntl(fd, F_SETFD, FD_CLOEXEC) != 0)
        return verbs_err(c, "fcntl(O_NONBLOCK) on the completion channel", errno);
    return 0;
}

static int cq_create(rdma_conn_t *c)
{
    struct ibv_context *ctx = c->id->verbs;
    int rc;

    c->cc = ibv_create_comp_channel(ctx);
    if (c->cc == NULL)
        return verbs_err(c, "ibv_create_comp_channel()", errno);
    if ((rc = nonblocking(c, c->cc->fd)) != 0)
        return rc;
    c->cq = ibv_create_cq(ctx, (int)(2 * c->depth), c, c->cc, 0);
    if (c->cq == NULL)
        return verbs_err(c, "ibv_create_cq()", errno);
    /* Armed from the start: the first completion wakes the engine. */
    if ((rc = ibv_req_notify_cq(c->cq, 0)) != 0)
        return verbs_err(c, "ibv_req_notify_cq()", rc);
    return 0;
}

/* Moves the QP to state with rdma_cm's attributes for it, changed by adjust if given. */
static int qp_move(rdma_conn_t *c, enum ibv_qp_state state,
                   void (*adjust)(rdma_conn_t *, struct ibv_qp_attr *, int *))
{
    struct ibv_qp_attr a;
    struct ibv_port_attr port;
    int mask, rc;

    memset(&a, 0, sizeof(a));
    a.qp_state = state;
    if (rdma_init_qp_attr(c->id, &a, &mask) != 0)
        return verbs_err(c, "rdma_init_qp_attr()", errno);
    if (state == IBV_QPS_RTR && ibv_query_port(c->id->verbs, c->id->port_num, &port) == 0 &&
        port.link_layer == IBV_LINK_LAYER_INFINIBAND)
        mask &= ~RDMA_IB_MASK_BUG;
    if (adjust != NULL)
        adjust(c, &a, &mask);
    if ((rc = ibv_modify_qp(c->qp, &a, mask)) != 0)
        return verbs_err(c,
                         state == IBV_QPS_INIT  ? "ibv_modify_qp(INIT)"
                         : state == IBV_QPS_RTR ? "ibv_modify_qp(RTR)"
                                                : "ibv_modify_qp(RTS)",
                         rc);
    return 0;
}

/* The probe is an RDMA WRITE of nothing: the QP must accept WRITEs. No memory region allows
 * remote access, so nothing can be written for real. */
static void adjust_init(rdma_conn_t *c, struct ibv_qp_attr *a, int *mask)
{
    (void)c;
    a->qp_access_flags |= IBV_ACCESS_REMOTE_WRITE;
    *mask |= IBV_QP_ACCESS_FLAGS;
}

static int qp_init(rdma_conn_t *c)
{
    struct ibv_qp_init_attr ia = {
        .send_cq = c->cq,
        .recv_cq = c->cq,
        .cap = {.max_send_wr = c->depth + 1, /* the slots' SENDs and a probe */
                .max_recv_wr = c->depth,
                .max_send_sge = 1,
                .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1,
    };

    c->qp = ibv_create_qp(c->pd, &ia);
    if (c->qp == NULL)
        return verbs_err(c, "ibv_create_qp()", errno);
    return qp_move(c, IBV_QPS_INIT, adjust_init);
}

/* The slots and their bookkeeping; the pages are touched now, not on the first message. */
static int slots_create(rdma_conn_t *c)
{
    size_t bytes = 2 * (size_t)c->depth * c->slot;
    void *p;

    if (posix_memalign(&p, 4096, bytes) != 0)
        return verbs_err(c, "posix_memalign() for the staging slots", ENOMEM);
    c->bufs = p;
    memset(c->bufs, 0, bytes);
    c->mr = ibv_reg_mr(c->pd, c->bufs, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (c->mr == NULL)
        return verbs_err(c, "ibv_reg_mr() of the staging slots", errno);
    c->free_send = calloc(c->depth, sizeof(*c->free_send));
    c->send_last = calloc(c->depth, sizeof(*c->send_last));
    c->arrived = calloc(c->depth, sizeof(*c->arrived));
    if (c->free_send == NULL || c->send_last == NULL || c->arrived == NULL)
        return verbs_err(c, "calloc() of the slot tables", ENOMEM);
    for (unsigned i = 0; i < c->depth; i++)
        c->free_send[i] = c->depth - 1 - i;
    c->nfree_send = c->depth;
    return 0;
}

int rdma_qp_create(rdma_conn_t *c)
{
    int rc;

    c->pd = ibv_alloc_pd(c->id->verbs);
    if (c->pd == NULL)
        return verbs_err(c, "ibv_alloc_pd()", errno);
    if ((rc = cq_create(c)) != 0 || (rc = qp_init(c)) != 0 || (rc = slots_create(c)) != 0)
        return rc;
    /* The peer may send as soon as it is connected: every receive is there before. */
    for (unsigned i = 0; i < c->depth; i++)
        if ((rc = rdma_slot_recv(c, i)) != 0)
            return rc;
    return 0;
}

static void adjust_rtr(rdma_conn_t *c, struct ibv_qp_attr *a, int *mask)
{
    a->ah_attr.sl = rdma_env()->sl;
    /* The accepting side keeps the class that came with the request: the connecting side's,
     * which set_dscp() may have chosen for this connection. */
    if (c->active && a->ah_attr.is_global)
        a->ah_attr.grh.traffic_class = c->tos;
}

static void adjust_rts(rdma_conn_t *c, struct ibv_qp_attr *a, int *mask)
{
    const rdma_env_t *e = rdma_env();

    a->timeout = e->timeout;
    a->retry_cnt = e->retry_cnt;
    a->rnr_retry = RDMA_RNR_RETRY;
    *mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY;
}

int rdma_qp_ready(rdma_conn_t *c)
{
    int rc = qp_move(c, IBV_QPS_RTR, adjust_rtr);

    if (rc != 0)
        return rc;
    c->av_set = 1;
    return qp_move(c, IBV_QPS_RTS, adjust_rts);
}

void rdma_qp_shutdown(rdma_conn_t *c)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};

    if (c->qp != NULL)
        (void)ibv_modify_qp(c->qp, &a, IBV_QP_STATE);
    /* The peer learns at once instead of when its retries run out (not through a port that
     * is down: see rdma_id_release). */
    if (c->connected) {
        c->connected = 0;
        if (rdma_id_link_up(c->id))
            (void)rdma_disconnect(c->id);
    }
}

void rdma_qp_destroy(rdma_conn_t *c)
{
    if (c->qp != NULL)
        ibv_destroy_qp(c->qp);
    if (c->mr != NULL)
        ibv_dereg_mr(c->mr);
    free(c->bufs);
    /* Every CQ event is acked as it is taken (rdma_cq.c): ibv_destroy_cq() does not wait. */
    if (c->cq != NULL)
        ibv_destroy_cq(c->cq);
    if (c->cc != NULL)
        ibv_destroy_comp_channel(c->cc);
    if (c->pd != NULL)
        ibv_dealloc_pd(c->pd);
    free(c->free_send);
    free(c->send_last);
    free(c->arrived);
    c->qp = NULL;
    c->mr = NULL;
    c->bufs = NULL;
    c->cq = NULL;
    c->cc = NULL;
    c->pd = NULL;
    c->free_send = NULL;
    c->send_last = NULL;
    c->arrived = NULL;
}

uint8_t *rdma_send_slot(rdma_conn_t *c, unsigned slot)
{
    return c->bufs + (size_t)slot * c->slot;
}

uint8_t *rdma_recv_slot(rdma_conn_t *c, unsigned slot)
{
    return c->bufs + (size_t)(c->depth + slot) * c->slot;
}

int rdma_slot_recv(rdma_conn_t *c, unsigned slot)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)rdma_recv_slot(c, slot), .length = c->slot, .lkey = c->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = RDMA_WR_RECV | slot, .sg_list = &sge, .num_sge = 1}, *bad;
    int rc = ibv_post_recv(c->qp, &wr, &bad);

    return rc == 0 ? 0 : verbs_err(c, "ibv_post_recv()", rc);
}

/* Every send-queue request goes out here: the first on an empty queue starts the stall
 * clock (rdma_msg.c), which completions then move on (rdma_cq.c). */
static int post_send(rdma_conn_t *c, struct ibv_send_wr *wr, const char *what)
{
    struct ibv_send_wr *bad;
    int rc;

    if (!rdma_tx_busy(c))
        c->tx_moved_ns = now_ns();
    rc = ibv_post_send(c->qp, wr, &bad);
    return rc == 0 ? 0 : verbs_err(c, what, rc);
}

int rdma_post_probe(rdma_conn_t *c)
{
    struct ibv_send_wr wr = {.wr_id = RDMA_WR_PROBE, .num_sge = 0, .opcode = IBV_WR_RDMA_WRITE};
    int rc = post_send(c, &wr, "ibv_post_send() of a probe");

    if (rc == 0)
        c->probe_out = 1;
    return rc;
}

int rdma_slot_send(rdma_conn_t *c, unsigned slot, uint32_t bytes)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)rdma_send_slot(c, slot), .length = bytes, .lkey = c->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND};

    c->tx_bytes += bytes;
    return post_send(c, &wr, "ibv_post_send()");
}
