/*
 * Connection setup of the RDMA transport through rdma_cm, driven by the CM events of each
 * connection's own event channel:
 *   connecting: connect() resolves the address -> ADDR_RESOLVED: resolve the route ->
 *     ROUTE_RESOLVED: QP and slots, connect with HELLO -> CONNECT_RESPONSE: check ACCEPT
 *     (reject if wrong), QP to RTS, rdma_establish(), CONFIRM on the QP -> ready.
 *   accepting: the listener's CONNECT_REQUEST -> look the job up (reject if unknown), QP and
 *     slots, QP to RTS, accept with ACCEPT -> CONFIRM arrives on the QP (rdma_rx.c) -> ready.
 * Every event is acked once handled. Later events (DISCONNECTED, DEVICE_REMOVAL) fail the
 * connection or end its stream (rdma_msg.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "futex.h"
#include "log.h"
#include "transport/rdma_conn.h"
#include "transport/rdma_env.h"

/* rdma_cm's own time for resolving an address or a route; the handshake deadline is longer. */
#define RDMA_RESOLVE_MS 5000

static rdma_conn_t *conn_alloc(void)
{
    const rdma_env_t *e = rdma_env();
    rdma_conn_t *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->base.ops = &tp_rdma;
    c->tos = e->tos;
    c->depth = e->depth;
    c->slot = e->slot;
    c->hs.peer_node = TP_NODE_UNKNOWN;
    rdma_msg_init(c);
    return c;
}

void rdma_conn_free(rdma_conn_t *c)
{
    rdma_resume_close(c);
    rdma_hs_clear(&c->hs);
    rdma_rx_free(c);
    rdma_qp_shutdown(c);
    rdma_qp_destroy(c);
    rdma_id_release(c->id, c->ch);
    free(c);
}

/* HCCL_RDMA_TC and HCCL_RDMA_TIMEOUT as rdma_cm options: the traffic class goes into the
 * route (and so into the request, whose class the accepting side adopts), the timeout into
 * rdma_cm's QP attributes (rdma_qp.c sets both again on the QP itself). */
static void set_options(rdma_conn_t *c)
{
    static int warned;
    uint8_t tos = c->tos, timeout = rdma_env()->timeout;

    if (c->active &&
        rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)) != 0)
        WARN("NET", RDMA_CONN_FMT "rdma_set_option(TOS, %u) failed: %s", RDMA_CONN_ARGS(c), tos,
             strerror(errno));
    /* Kernels before 5.9 lack the option; the QP still gets the timeout at RTS. */
    if (rdma_set_option(c->id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout,
                        sizeof(timeout)) != 0 &&
        !warned) {
        warned = 1;
        WARN("NET", "rdma_set_option(ACK_TIMEOUT, %u) failed: %s", timeout, strerror(errno));
    }
}

/* Tells the peer why, in a reject; best effort, the connection fails here anyway. */
static void refuse(rdma_conn_t *c, int reason)
{
    uint8_t pd[RDMA_REFUSE_BYTES];

    rdma_refuse_encode((uint32_t)reason, pd);
    (void)rdma_reject(c->id, pd, sizeof(pd));
}

static void conn_param(const rdma_conn_t *c, const void *pd, uint8_t len, struct rdma_conn_param *p)
{
    /* Only SEND/RECV: no RDMA READ resources either way. */
    *p = (struct rdma_conn_param){
        .private_data = pd,
        .private_data_len = len,
        .responder_resources = 0,
        .initiator_depth = 0,
        .retry_count = rdma_env()->retry_cnt,
        .rnr_retry_count = RDMA_RNR_RETRY,
        .qp_num = c->qp->qp_num,
    };
}

/* What a fragment carries: it must fit our send slot and the peer's receive slot. */
static void peer_slots(rdma_conn_t *c, unsigned depth, uint32_t slot)
{
    c->peer_depth = depth;
    c->credits = depth;
    c->frag_max = (slot < c->slot ? slot : c->slot) - RDMA_HDR_BYTES;
}

int rdma_setup_dial(rdma_conn_t *c)
{
    struct sockaddr_storage dst, src;
    const char *src_ip = c->rs.src[0] != '\0' ? c->rs.src : NULL;
    int rc;

    if (net_addr_parse(c->peer, &dst, NULL) != 0 ||
        (src_ip != NULL && net_ip_parse(src_ip, 0, &src, NULL))) {
        ERR("NET", "RDMA connect: \"%s\" (from \"%s\") is not a numeric ip:port (ip)", c->peer,
            src_ip != NULL ? src_ip : "any");
        return -EINVAL;
    }
    rc = rdma_id_open(src_ip != NULL ? src_ip : c->peer, c, &c->ch, &c->id);
    if (rc != 0)
        return rc;
    rdma_hs_init_connect(&c->hs, c->rs.job, c->rs.key, c->rs.my_node);
    c->hs.conn_id = c->rs.conn_id;
    c->hs.again = c->rs.down;
    set_options(c);
    if (rdma_resolve_addr(c->id, src_ip != NULL ? (struct sockaddr *)&src : NULL,
                          (struct sockaddr *)&dst, RDMA_RESOLVE_MS) != 0) {
        /* Dialling again (its link down?), it says so once it gives up (rdma_resume.c). */
        if (c->rs.down) {
            DBG("NET", "rdma_resolve_addr(%s) failed: %s", c->peer, strerror(errno));
            return -errno;
        }
        return rdma_bind_error("rdma_resolve_addr", src_ip != NULL ? src_ip : c->peer, errno);
    }
    c->state = RDMA_ST_ADDR;
    return 0;
}

int rdma_setup_connect(const char *src_ip, const char *addr, const uint8_t job[AUTH_JOB_BYTES],
                       const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, rdma_conn_t **c_p)
{
    rdma_conn_t *c;
    int rc;

    if (my_node == TP_NODE_UNKNOWN)
        return -EINVAL;
    if ((rc = rdma_hs_ready()) != 0)
        return rc;
    if ((c = conn_alloc()) == NULL)
        return -ENOMEM;
    c->active = 1;
    snprintf(c->peer, sizeof(c->peer), "%s", addr);
    rdma_resume_init_connect(c, src_ip, job, key, my_node);
    if ((rc = rdma_setup_dial(c)) != 0) {
        rdma_conn_free(c);
        return rc;
    }
    *c_p = c;
    return 0;
}

static void on_addr(rdma_conn_t *c)
{
    if (rdma_resolve_route(c->id, RDMA_RESOLVE_MS) != 0) {
        rdma_conn_fail(c, -errno, LOG_ERROR, "rdma_resolve_route() failed: %s", strerror(errno));
        return;
    }
    /* The route holds the traffic class that the request carries: set_dscp() is too late from
     * here on. */
    c->av_set = 1;
    c->state = RDMA_ST_ROUTE;
}

static void on_route(rdma_conn_t *c)
{
    uint8_t hello[RDMA_HELLO_BYTES];
    struct rdma_conn_param p;
    int rc;

    if ((rc = rdma_qp_create(c)) != 0) {
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
        return;
    }
    rdma_hs_hello(&c->hs, c->depth, c->slot, hello);
    conn_param(c, hello, sizeof(hello), &p);
    if (rdma_connect(c->id, &p) != 0) {
        rdma_conn_fail(c, -errno, LOG_ERROR, "rdma_connect() failed: %s", strerror(errno));
        return;
    }
    c->state = RDMA_ST_CONNECT;
}

/* The accepting side's reply: its proof of the key is checked before our QP leaves INIT. */
static void on_response(rdma_conn_t *c, const struct rdma_cm_event *ev)
{
    uint8_t mac[AUTH_MAC_BYTES];
    rdma_accept_pd_t a;
    int rc;

    if (rdma_accept_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &a)) {
        refuse(c, EPROTO);
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "malformed reply to the connect request");
        return;
    }
    if (rdma_hs_check_accept(&c->hs, &a, mac) != 0) {
        refuse(c, EACCES);
        rdma_conn_fail(c, -EACCES, LOG_ERROR,
                       "the accepting side does not prove the job key, refused");
        return;
    }
    peer_slots(c, a.depth, a.slot);
    if ((rc = rdma_qp_ready(c)) != 0) {
        refuse(c, EIO);
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
        return;
    }
    if (rdma_establish(c->id) != 0) {
        rdma_conn_fail(c, -errno, LOG_ERROR, "rdma_establish() failed: %s", strerror(errno));
        return;
    }
    c->connected = 1;
    if ((rc = rdma_send_ctrl(c, RDMA_MSG_CONFIRM, 0, mac, sizeof(mac))) != 0) {
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
        return;
    }
    /* The key has served its purpose; it need not stay in this memory (a resumable
     * connection keeps its own copy to dial again, rdma_resume.c). */
    rdma_hs_clear(&c->hs);
    c->rx_last_ns = now_ns();
    if (c->rs.down) {
        if ((rc = rdma_resume_begin(c)) != 0)
            rdma_conn_fail(c, rc, LOG_ERROR, NULL);
        return;
    }
    c->state = RDMA_ST_READY;
    DBG("NET", RDMA_CONN_FMT "ready", RDMA_CONN_ARGS(c));
}

static void on_rejected(rdma_conn_t *c, const struct rdma_cm_event *ev)
{
    /* Only our own rejects carry a REFUSE record; the CM's (no listener, a timeout) do not. */
    uint32_t why = rdma_refuse_decode(ev->param.conn.private_data, ev->param.conn.private_data_len);

    if (why != 0)
        rdma_conn_fail(c, -(int)why, LOG_ERROR, "the peer refused the connection: %s",
                       strerror((int)why));
    else
        rdma_conn_fail(c, -ECONNREFUSED, LOG_ERROR,
                       "rejected (reason %d): nothing listens there, or it gave up", ev->status);
}

/* An error event's status is a negative errno, or a positive IB status. */
static int event_err(const struct rdma_cm_event *ev, int dflt)
{
    return ev->status < 0 ? ev->status : dflt;
}

static void on_event(rdma_conn_t *c, const struct rdma_cm_event *ev)
{
    DBG("NET", RDMA_CONN_FMT "%s (status %d)", RDMA_CONN_ARGS(c), rdma_event_str(ev->event),
        ev->status);
    switch (ev->event) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
        if (c->state == RDMA_ST_ADDR)
            on_addr(c);
        break;
    case RDMA_CM_EVENT_ROUTE_RESOLVED:
        if (c->state == RDMA_ST_ROUTE)
            on_route(c);
        break;
    case RDMA_CM_EVENT_CONNECT_RESPONSE:
        if (c->state == RDMA_ST_CONNECT)
            on_response(c, ev);
        break;
    case RDMA_CM_EVENT_REJECTED: on_rejected(c, ev); break;
    case RDMA_CM_EVENT_ADDR_ERROR:
        rdma_conn_fail(c, event_err(ev, -EHOSTUNREACH), LOG_ERROR,
                       "resolving the address failed: %s (is there an RDMA device on the way?)",
                       strerror(-event_err(ev, -EHOSTUNREACH)));
        break;
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR:
        rdma_conn_fail(c, event_err(ev, -EHOSTUNREACH), LOG_ERROR, "%s: %s",
                       rdma_event_str(ev->event), strerror(-event_err(ev, -EHOSTUNREACH)));
        break;
    case RDMA_CM_EVENT_DISCONNECTED:
        /* Ready, the stream ends once what arrived is taken (rdma_msg.c); before, it fails. */
        if (c->state == RDMA_ST_READY)
            c->peer_gone = 1;
        else
            rdma_conn_fail(c, -ECONNRESET, LOG_ERROR, "the peer disconnected during the handshake");
        break;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
        rdma_conn_fail(c, -EIO, LOG_ERROR, "the RDMA device was removed");
        break;
    default:
        /* ESTABLISHED on the accepting side (CONFIRM, not this, makes it ready: it may come
         * first), TIMEWAIT_EXIT, ADDR_CHANGE. */
        break;
    }
}

void rdma_setup_events(rdma_conn_t *c)
{
    struct rdma_cm_event *ev;
    int rc;

    while (c->state != RDMA_ST_FAILED && (rc = rdma_next_event(c->ch, &ev)) == 1) {
        on_event(c, ev);
        rdma_ack_cm_event(ev);
    }
    if (c->state != RDMA_ST_FAILED && rc < 0)
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
}

/* Checks the request, looks its job up, and answers it: the connection fails on any refusal
 * (the peer learns why from the reject), as on TCP. */
static void answer(rdma_conn_t *c, const struct rdma_cm_event *ev, tp_key_lookup_fn lookup,
                   void *ctx)
{
    uint8_t reply[RDMA_ACCEPT_BYTES];
    struct rdma_conn_param p;
    rdma_hello_t hello;
    int rc;

    if (rdma_hello_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &hello)) {
        refuse(c, EPROTO);
        rdma_conn_fail(c, -EPROTO, LOG_ERROR, "malformed connect request, refused");
        return;
    }
    if (rdma_hs_answer(&c->hs, &hello, lookup, ctx, c->depth, c->slot, reply) != 0) {
        refuse(c, EACCES);
        rdma_conn_fail(c, -EACCES, LOG_ERROR, "node %u names an unknown job, refused", hello.node);
        return;
    }
    if (rdma_resume_check(&hello) != 0) {
        refuse(c, ENOENT);
        rdma_conn_fail(c, -ENOENT, LOG_WARN,
                       "node %u came back for a data connection this daemon does not hold (any "
                       "more); refused",
                       hello.node);
        return;
    }
    DBG("NET", RDMA_CONN_FMT "%s from node %u", RDMA_CONN_ARGS(c),
        hello.again ? "AGAIN (a suspended connection's new QP)" : "HELLO", hello.node);
    set_options(c);
    peer_slots(c, hello.depth, hello.slot);
    if ((rc = rdma_qp_create(c)) != 0 || (rc = rdma_qp_ready(c)) != 0) {
        refuse(c, EIO);
        rdma_conn_fail(c, rc, LOG_ERROR, NULL);
        return;
    }
    conn_param(c, reply, sizeof(reply), &p);
    if (rdma_accept(c->id, &p) != 0) {
        rdma_conn_fail(c, -errno, LOG_ERROR, "rdma_accept() failed: %s", strerror(errno));
        return;
    }
    c->connected = 1;
}

rdma_conn_t *rdma_setup_accept(struct rdma_cm_event *ev, tp_key_lookup_fn lookup, void *ctx)
{
    rdma_conn_t *c = conn_alloc();
    int rc;

    if (c == NULL) {
        ERR("NET", "no memory for an RDMA connection; its request is rejected");
        (void)rdma_reject(ev->id, NULL, 0);
        rdma_destroy_id(ev->id);
        return NULL;
    }
    c->id = ev->id;
    c->id->context = c;
    c->state = RDMA_ST_CONFIRM;
    /* The traffic class is the connecting side's, from its request (rdma_qp.c). */
    c->av_set = 1;
    net_addr_format(rdma_get_peer_addr(c->id), c->peer, sizeof(c->peer));
    /* Its own channel, so that its events reach the engine through its own fd. */
    rc = rdma_chan_open(c->peer, &c->ch);
    if (rc == 0 && rdma_migrate_id(c->id, c->ch) != 0)
        rc = -errno;
    if (rc != 0) {
        (void)rdma_reject(c->id, NULL, 0);
        rdma_conn_fail(c, rc, LOG_ERROR, "cannot give the connection its own event channel: %s",
                       strerror(-rc));
        return c;
    }
    answer(c, ev, lookup, ctx);
    return c;
}
