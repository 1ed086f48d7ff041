/*
 * The TCP transport: the ops table, listeners and connection setup. The handshake lives in
 * tcp_hs.c, the data stream in tcp_msg.c, the wire format in tcp_wire.c.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "env.h"
#include "log.h"
#include "transport/tcp_conn.h"
#include "transport/tcp_sock.h"

typedef struct tcp_listener {
    tp_listener_t base; /* what the transport's users hold */
    int fd;
} tcp_listener_t;

static tcp_listener_t *tcp_listener_of(tp_listener_t *l)
{
    return (tcp_listener_t *)l;
}

const transport_ops_t tp_tcp;

static int crypto_ready(void)
{
    if (sodium_init() < 0) {
        ERR("NET", "sodium_init() failed");
        return -EIO;
    }
    return 0;
}

/* Listens on ip (at a port chosen) or, with at_port, on "ip:port". */
static int listen_any(const char *ip, int at_port, tp_listener_t **l_p, char *addr_out, size_t cap)
{
    tcp_listener_t *l;
    int rc = crypto_ready();

    if (rc != 0)
        return rc;
    l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    l->base.ops = &tp_tcp;
    rc = at_port ? tcp_sock_listen_at(ip, &l->fd, addr_out, cap)
                 : tcp_sock_listen(ip, &l->fd, addr_out, cap);
    if (rc != 0)
        goto err_free;
    INFO("NET", "listening on %s", addr_out);
    *l_p = &l->base;
    return 0;

err_free:
    free(l);
    return rc;
}

static int tcp_listen(const char *ip, tp_listener_t **l_p, char *addr_out, size_t cap)
{
    return listen_any(ip, 0, l_p, addr_out, cap);
}

int tp_tcp_listen_at(const char *addr, tp_listener_t **l_p, char *addr_out, size_t cap)
{
    return listen_any(addr, 1, l_p, addr_out, cap);
}

static int tcp_listen_fd(tp_listener_t *l)
{
    return tcp_listener_of(l)->fd;
}

static void tcp_listen_close(tp_listener_t *l)
{
    if (l == NULL)
        return;
    close(tcp_listener_of(l)->fd);
    free(tcp_listener_of(l));
}

/* A connection around fd; HCCL_CHECKSUM decides whether its sends carry a CRC32C. */
static int conn_new(int fd, tcp_conn_t **c_p)
{
    tcp_conn_t *c = calloc(1, sizeof(*c));
    uint64_t csum;

    if (c == NULL)
        return -ENOMEM;
    if (env_u64("HCCL_CHECKSUM", 0, 0, 1, &csum) != 0)
        csum = 0;
    c->base.ops = &tp_tcp;
    c->fd = fd;
    c->rs.rfd = -1;
    c->state = TCP_CONN_HANDSHAKE;
    c->checksum = (int)csum;
    tcp_msg_init(c);
    *c_p = c;
    return 0;
}

static int tcp_accept(tp_listener_t *l, tp_key_lookup_fn lookup, void *ctx, tp_conn_t **c_p)
{
    tcp_conn_t *c;
    int fd, rc;

    fd = accept4(tcp_listener_of(l)->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        if (rc == -EAGAIN || rc == -EINTR || rc == -ECONNABORTED)
            return -EAGAIN;
        ERR("NET", "accept4() failed: %s", strerror(-rc));
        return rc;
    }
    rc = tcp_sock_tune(fd);
    if (rc != 0)
        goto err_close;
    rc = conn_new(fd, &c);
    if (rc != 0)
        goto err_close;
    tcp_hs_init_accept(&c->hs, lookup, ctx);
    *c_p = &c->base;
    return 0;

err_close:
    close(fd);
    return rc;
}

static int tcp_connect(const char *addr, const uint8_t job_id[AUTH_JOB_BYTES],
                       const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, tp_conn_t **c_p)
{
    tcp_conn_t *c;
    int fd, rc;

    if (my_node == TP_NODE_UNKNOWN)
        return -EINVAL;
    rc = crypto_ready();
    if (rc != 0)
        return rc;
    rc = tcp_sock_connect(addr, &fd);
    if (rc != 0)
        return rc;
    rc = conn_new(fd, &c);
    if (rc != 0)
        goto err_close;
    tcp_resume_init_connect(c, addr, job_id, key, my_node);
    tcp_hs_init_connect(&c->hs, job_id, key, my_node, c->rs.conn_id, 0);
    *c_p = &c->base;
    return 0;

err_close:
    close(fd);
    return rc;
}

static int tcp_conn_state(tp_conn_t *base)
{
    tcp_conn_t *c = tcp_conn_of(base);
    int rc;

    if (c->state == TCP_CONN_ABSORBED)
        return -EALREADY;
    if (c->state != TCP_CONN_HANDSHAKE)
        return c->state == TCP_CONN_FAILED ? c->err : 1;
    rc = tcp_hs_progress(&c->hs, c->fd);
    if (rc < 0) {
        tcp_hs_clear(&c->hs);
        tcp_conn_fail(c, rc);
        return rc;
    }
    if (rc == 1) {
        /* The key has served its purpose; it need not stay in this memory (the connecting
         * side keeps a copy to dial again, tcp_resume.c). */
        tcp_hs_clear(&c->hs);
        if ((rc = tcp_resume_ready(c)) != 1)
            return rc;
        c->state = TCP_CONN_READY;
        /* Only the accepting side learns the node index (the connecting side knows whom it
         * dialled). */
        if (c->hs.peer_node != TP_NODE_UNKNOWN)
            DBG("NET", "connection from node %u ready", c->hs.peer_node);
        else
            DBG("NET", "connection ready");
    }
    return rc;
}

static uint32_t tcp_conn_peer_node(tp_conn_t *c)
{
    return tcp_conn_of(c)->hs.peer_node;
}

/* TCP reads and writes any memory; the buffer itself serves as the registration. */
static int tcp_reg_mem(tp_conn_t *c, void *base, size_t len, void **mr_p)
{
    *mr_p = base;
    return 0;
}

static void tcp_dereg_mem(tp_conn_t *c, void *mr)
{
}

static int tcp_post(tp_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, tp_req_t **r_p)
{
    tcp_req_t *r;
    int rc = tcp_msg_post(tcp_conn_of(c), dir, buf, len, tag, &r);

    if (rc == 0)
        *r_p = &r->base;
    return rc;
}

static int tcp_isend(tp_conn_t *c, const void *buf, size_t len, void *mr, uint64_t tag,
                     tp_req_t **r_p)
{
    return tcp_post(c, TCP_DIR_SEND, (void *)buf, len, tag, r_p);
}

static int tcp_irecv(tp_conn_t *c, void *buf, size_t len, void *mr, uint64_t tag, tp_req_t **r_p)
{
    return tcp_post(c, TCP_DIR_RECV, buf, len, tag, r_p);
}

static int tcp_test(tp_req_t *base, int *done_p)
{
    tcp_req_t *r = tcp_req_of(base);
    int status;

    if (!r->base.done)
        tcp_msg_progress(r->conn);
    *done_p = r->base.done;
    if (!r->base.done)
        return 0;
    status = r->base.status;
    tcp_req_release(r);
    return status;
}

static int tcp_poll_fds(tp_conn_t *base, struct pollfd *pfd, int max)
{
    tcp_conn_t *c = tcp_conn_of(base);
    short ev;

    if (max < 1 || c->state == TCP_CONN_FAILED || c->state == TCP_CONN_ABSORBED)
        return 0;
    if (c->state == TCP_CONN_SUSPENDED)
        return tcp_resume_poll_fds(c, pfd, max);
    ev = c->state == TCP_CONN_HANDSHAKE ? tcp_hs_events(&c->hs) : tcp_msg_events(c);
    /* An fd with no events would still wake poll() on a hangup, again and again. */
    if (ev == 0)
        return 0;
    pfd[0] = (struct pollfd){.fd = c->fd, .events = ev};
    return 1;
}

static void tcp_describe(tp_conn_t *c, char *buf, size_t cap)
{
    (void)c;
    snprintf(buf, cap, "tcp");
}

static int tcp_set_dscp(tp_conn_t *c, int dscp)
{
    int tos = (dscp & 0x3f) << 2;

    if (tcp_conn_of(c)->fd < 0)
        return -ENOTCONN;
    if (setsockopt(tcp_conn_of(c)->fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) != 0) {
        int err = errno;
        WARN("NET", "setsockopt(IP_TOS, %#x) failed: %s", tos, strerror(err));
        return -err;
    }
    return 0;
}

static void tcp_cancel(tp_req_t *r)
{
    tcp_msg_cancel(tcp_req_of(r));
}

static void tcp_forget(tp_conn_t *c, uint64_t mask, uint64_t value, uint64_t ttl_ns)
{
    tcp_msg_forget(tcp_conn_of(c), mask, value, ttl_ns);
}

static int tcp_set_retry(tp_conn_t *c, const tp_retry_t *r)
{
    return tcp_resume_set(tcp_conn_of(c), r);
}

static void tcp_retry_stats(tp_conn_t *c, tp_retry_stats_t *st)
{
    tcp_resume_stats(tcp_conn_of(c), st);
}

static tp_msg_t *tcp_kept_take(tp_conn_t *c, uint64_t mask, uint64_t value)
{
    return tp_kept_take_all(&tcp_conn_of(c)->kept, mask, value);
}

static void tcp_kept_put(tp_conn_t *c, tp_msg_t *list)
{
    tp_kept_put(&tcp_conn_of(c)->kept, list);
}

static void tcp_close(tp_conn_t *base)
{
    tcp_conn_t *c = tcp_conn_of(base);

    if (c == NULL)
        return;
    tcp_hs_clear(&c->hs);
    tcp_resume_close(c);
    tcp_msg_free(c);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

const transport_ops_t tp_tcp = {
    .name = "tcp",
    .kind = TP_KIND_TCP,
    .listen = tcp_listen,
    .listen_fd = tcp_listen_fd,
    .accept = tcp_accept,
    .connect = tcp_connect,
    .conn_state = tcp_conn_state,
    .conn_peer_node = tcp_conn_peer_node,
    .reg_mem = tcp_reg_mem,
    .dereg_mem = tcp_dereg_mem,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .test = tcp_test,
    .poll_fds = tcp_poll_fds,
    .set_dscp = tcp_set_dscp,
    .describe = tcp_describe,
    .link_info = tcp_link_info,
    .cancel = tcp_cancel,
    .forget = tcp_forget,
    .set_retry = tcp_set_retry,
    .retry_stats = tcp_retry_stats,
    .kept_take = tcp_kept_take,
    .kept_put = tcp_kept_put,
    .close = tcp_close,
    .listen_close = tcp_listen_close,
};
