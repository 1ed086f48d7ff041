/*
 * The RDMA transport's ops table and the calls that only hand over to its parts: listeners in
 * rdma_listen.c, connection setup in rdma_setup.c, requests and sends in rdma_msg.c, receives
 * in rdma_rx.c. A connection's fds are its own rdma_cm event channel and its completion
 * channel; both are nonblocking and read empty on every pass, so poll() sleeps while idle.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"

const transport_ops_t tp_rdma;

int tp_rdma_connect_from(const char *src_ip, const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                         const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p)
{
    rdma_conn_t *c;
    int rc = rdma_setup_connect(src_ip, addr, job_id, key, my_node, &c);

    if (rc == 0)
        *c_p = &c->base;
    return rc;
}

static int rtp_connect(const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                       const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p)
{
    return tp_rdma_connect_from(NULL, addr, job_id, key, my_node, c_p);
}

static int rtp_conn_state(tp_conn_t *base)
{
    rdma_conn_t *c = rdma_conn_of(base);

    if (c->state == RDMA_ST_ABSORBED)
        return -EALREADY;
    if (c->state == RDMA_ST_FAILED)
        return c->err;
    /* Ready too: CM events (a late ESTABLISHED, a disconnect) must not sit in the channel and
     * keep its fd readable. */
    (void)rdma_msg_progress(c);
    /* A suspended connection is up to its users: its requests wait. */
    if (c->state == RDMA_ST_READY || c->rs.down)
        return 1;
    if (c->state == RDMA_ST_FAILED)
        return c->err;
    if (c->state == RDMA_ST_ABSORBED)
        return -EALREADY;
    if (now_ns() > c->hs.deadline_ns)
        rdma_conn_fail(c, -ETIMEDOUT, LOG_ERROR, "the handshake timed out");
    return c->state == RDMA_ST_FAILED ? c->err : 0;
}

static uint32_t rtp_conn_peer_node(tp_conn_t *c)
{
    return rdma_conn_of(c)->hs.peer_node;
}

/* Data is staged through the connection's own registered slots, so any memory will do and
 * the buffer itself serves as the registration (as on TCP). */
static int rtp_reg_mem(tp_conn_t *c, void *base, size_t len, void **mr_p)
{
    *mr_p = base;
    return 0;
}

static void rtp_dereg_mem(tp_conn_t *c, void *mr)
{
}

static int rtp_post(tp_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, tp_req_t **r_p)
{
    rdma_req_t *r;
    int rc = rdma_msg_post(rdma_conn_of(c), dir, buf, len, tag, &r);

    if (rc == 0)
        *r_p = &r->base;
    return rc;
}

static int rtp_isend(tp_conn_t *c, const void *buf, size_t len, void *mr, uint64_t tag,
                     tp_req_t **r_p)
{
    return rtp_post(c, RDMA_DIR_SEND, (void *)buf, len, tag, r_p);
}

static int rtp_irecv(tp_conn_t *c, void *buf, size_t len, void *mr, uint64_t tag, tp_req_t **r_p)
{
    return rtp_post(c, RDMA_DIR_RECV, buf, len, tag, r_p);
}

static int rtp_test(tp_req_t *base, int *done_p)
{
    rdma_req_t *r = rdma_req_of(base);
    int status;

    if (!r->base.done)
        (void)rdma_msg_progress(r->conn);
    *done_p = r->base.done;
    if (!r->base.done)
        return 0;
    status = r->base.status;
    rdma_req_release(r);
    return status;
}

static int rtp_poll_fds(tp_conn_t *base, struct pollfd *pfd, int max)
{
    rdma_conn_t *c = rdma_conn_of(base);
    /* With room for one only, the fd that the next step waits on: CM events until the reply
     * to a connect request, completions after (CONFIRM, data). */
    int cq_first = c->cc != NULL && c->state != RDMA_ST_CONNECT;
    int n = 0;

    if (c->state == RDMA_ST_FAILED || c->eof || c->ch == NULL || max < 1)
        return 0;
    if (cq_first)
        pfd[n++] = (struct pollfd){.fd = c->cc->fd, .events = POLLIN};
    if (n < max)
        pfd[n++] = (struct pollfd){.fd = c->ch->fd, .events = POLLIN};
    if (c->cc != NULL && !cq_first && n < max)
        pfd[n++] = (struct pollfd){.fd = c->cc->fd, .events = POLLIN};
    return n;
}

/*
 * The traffic class is part of the route, which the request carries to the accepting side
 * (whose QP adopts it), and of each QP's address vector, which a QP keeps from RTR on: an RTS
 * QP cannot change it. So only a connecting side still resolving its address changes class;
 * later, and on the accepting side, -ENOTSUP (that needs a new QP).
 */
static int rtp_set_dscp(tp_conn_t *base, int dscp)
{
    rdma_conn_t *c = rdma_conn_of(base);
    uint8_t tos = (uint8_t)((dscp & 0x3f) << 2);

    if (!c->active || c->av_set || c->state != RDMA_ST_ADDR) {
        DBG("NET", RDMA_CONN_FMT "traffic class %u not set: the QP's is fixed", RDMA_CONN_ARGS(c),
            tos);
        return -ENOTSUP;
    }
    if (rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) != 0) {
        int err = errno;
        WARN("NET", RDMA_CONN_FMT "rdma_set_option(TOS, %u) failed: %s", RDMA_CONN_ARGS(c), tos,
             strerror(err));
        return -err;
    }
    c->tos = tos;
    return 0;
}

static void rtp_describe(tp_conn_t *base, char *buf, size_t cap)
{
    const rdma_conn_t *c = rdma_conn_of(base);

    if (c->id != NULL && c->id->verbs != NULL)
        snprintf(buf, cap, "rdma/%s:%u", ibv_get_device_name(c->id->verbs->device),
                 (unsigned)c->id->port_num);
    else
        snprintf(buf, cap, "rdma");
}

static void rtp_cancel(tp_req_t *r)
{
    rdma_msg_cancel(rdma_req_of(r));
}

static void rtp_forget(tp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    rdma_rx_forget(rdma_conn_of(c), mask, value, ttl_ns);
}

static int rtp_set_retry(tp_conn_t *c, const tp_retry_t *r)
{
    return rdma_resume_set(rdma_conn_of(c), r);
}

static void rtp_retry_stats(tp_conn_t *c, tp_retry_stats_t *st)
{
    rdma_resume_stats(rdma_conn_of(c), st);
}

static tp_msg_t *rtp_kept_take(tp_conn_t *c, uint64_t mask, uint64_t value)
{
    return tp_kept_take_all(&rdma_conn_of(c)->kept, mask, value);
}

static void rtp_kept_put(tp_conn_t *c, tp_msg_t *list)
{
    tp_kept_put(&rdma_conn_of(c)->kept, list);
}

static void rtp_close(tp_conn_t *c)
{
    if (c != NULL)
        rdma_conn_free(rdma_conn_of(c));
}

const transport_ops_t tp_rdma = {
    .name = "rdma",
    .kind = TP_KIND_RDMA,
    .listen = rdma_tp_listen,
    .listen_fd = rdma_tp_listen_fd,
    .accept = rdma_tp_accept,
    .connect = rtp_connect,
    .conn_state = rtp_conn_state,
    .conn_peer_node = rtp_conn_peer_node,
    .reg_mem = rtp_reg_mem,
    .dereg_mem = rtp_dereg_mem,
    .isend = rtp_isend,
    .irecv = rtp_irecv,
    .test = rtp_test,
    .poll_fds = rtp_poll_fds,
    .set_dscp = rtp_set_dscp,
    .describe = rtp_describe,
    .link_info = rdma_link_info,
    .cancel = rtp_cancel,
    .forget = rtp_forget,
    .set_retry = rtp_set_retry,
    .retry_stats = rtp_retry_stats,
    .kept_take = rtp_kept_take,
    .kept_put = rtp_kept_put,
    .close = rtp_close,
    .listen_close = rdma_tp_listen_close,
};
