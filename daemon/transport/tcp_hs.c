#include "transport/tcp_hs.h"

#include <errno.h>
#include <poll.h>
#include <sodium.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "log.h"
#include "transport/tcp_sock.h"

/* A peer that stalls its handshake this long is dropped, so that no half-open socket lingers. */
#define TCP_HS_TIMEOUT_NS (30ull * 1000000000ull)

enum tcp_hs_step { HS_CONNECTING, HS_WAIT_HELLO, HS_WAIT_ACCEPT, HS_WAIT_CONFIRM, HS_DONE };

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void tcp_hs_init_connect(tcp_hs_t *hs, const uint8_t job[AUTH_JOB_BYTES],
                         const uint8_t key[AUTH_KEY_BYTES], uint32_t my_node, uint64_t conn_id,
                         uint32_t flags)
{
    memset(hs, 0, sizeof(*hs));
    hs->step = HS_CONNECTING;
    hs->my_node = my_node;
    hs->conn_id = conn_id;
    hs->flags = flags;
    hs->peer_node = TP_NODE_UNKNOWN;
    memcpy(hs->job, job, AUTH_JOB_BYTES);
    memcpy(hs->key, key, AUTH_KEY_BYTES);
    auth_nonce(hs->nonce_c);
    hs->deadline_ns = now_ns() + TCP_HS_TIMEOUT_NS;
}

void tcp_hs_init_accept(tcp_hs_t *hs, tp_key_lookup_fn lookup, void *ctx)
{
    memset(hs, 0, sizeof(*hs));
    hs->step = HS_WAIT_HELLO;
    hs->my_node = TP_NODE_UNKNOWN;
    hs->peer_node = TP_NODE_UNKNOWN;
    hs->lookup = lookup;
    hs->lookup_ctx = ctx;
    auth_nonce(hs->nonce_a);
    hs->deadline_ns = now_ns() + TCP_HS_TIMEOUT_NS;
}

void tcp_hs_clear(tcp_hs_t *hs)
{
    sodium_memzero(hs->key, sizeof(hs->key));
}

static void queue_msg(tcp_hs_t *hs, const tcp_hs_msg_t *m)
{
    tcp_hs_encode(m, hs->out);
    hs->out_len = TCP_HS_BYTES;
    hs->out_off = 0;
}

/* Best effort: the socket is failing anyway, and the peer also fails if this is lost. */
static int refuse(int fd, int reason)
{
    tcp_hs_msg_t m = {.type = TCP_HS_REFUSE, .reason = (uint32_t)reason};
    uint8_t buf[TCP_HS_BYTES];

    tcp_hs_encode(&m, buf);
    (void)send(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_NOSIGNAL);
    return -reason;
}

/* 1 flushed, 0 partly written (wait for POLLOUT), or a negative errno. */
static int flush_out(tcp_hs_t *hs, int fd)
{
    while (hs->out_off < hs->out_len) {
        struct iovec iov = {hs->out + hs->out_off, hs->out_len - hs->out_off};
        ssize_t n = tcp_sock_send(fd, &iov, 1, "handshake send()");
        if (n <= 0)
            return (int)n;
        hs->out_off += (size_t)n;
    }
    return 1;
}

/* Reads exactly one record, never a byte of the data that may follow: 1 read, 0 partial. */
static int read_msg(tcp_hs_t *hs, int fd, tcp_hs_msg_t *m)
{
    while (hs->in_off < TCP_HS_BYTES) {
        ssize_t n = recv(fd, hs->in + hs->in_off, TCP_HS_BYTES - hs->in_off, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0) {
            int err = n == 0 ? ECONNRESET : errno;
            ERR("NET", "handshake recv() failed: %s", n == 0 ? "peer closed" : strerror(err));
            return -err;
        }
        hs->in_off += (size_t)n;
    }
    hs->in_off = 0;
    if (tcp_hs_decode(hs->in, m) != 0) {
        int v = tcp_hs_version(hs->in);
        if (v >= 0 && v != TCP_WIRE_VERSION)
            ERR("NET",
                "handshake: the peer daemon speaks data wire version %d, this one %d: refused "
                "(run one hccld version on every node)",
                v, TCP_WIRE_VERSION);
        else
            ERR("NET", "handshake: malformed record from the peer");
        return -EPROTO;
    }
    return 1;
}

static int on_hello(tcp_hs_t *hs, int fd, const tcp_hs_msg_t *m)
{
    tcp_hs_msg_t reply = {.type = TCP_HS_ACCEPT};

    memcpy(hs->job, m->job, AUTH_JOB_BYTES);
    memcpy(hs->nonce_c, m->nonce, AUTH_NONCE_BYTES);
    if (hs->lookup == NULL || hs->lookup(hs->lookup_ctx, hs->job, hs->key) != 0) {
        ERR("NET", "handshake: node %u names an unknown job, refused", m->node);
        return refuse(fd, EACCES);
    }
    hs->peer_node = m->node;
    hs->conn_id = m->conn_id;
    hs->flags = m->flags;
    memcpy(reply.nonce, hs->nonce_a, AUTH_NONCE_BYTES);
    auth_mac(hs->key, AUTH_KEY_BYTES, "tp-accept", hs->nonce_c, hs->nonce_a, reply.mac);
    queue_msg(hs, &reply);
    hs->step = HS_WAIT_CONFIRM;
    return 0;
}

static int on_accept(tcp_hs_t *hs, int fd, const tcp_hs_msg_t *m)
{
    tcp_hs_msg_t reply = {.type = TCP_HS_CONFIRM};

    memcpy(hs->nonce_a, m->nonce, AUTH_NONCE_BYTES);
    if (!auth_check(hs->key, AUTH_KEY_BYTES, "tp-accept", hs->nonce_c, hs->nonce_a, m->mac,
                    AUTH_MAC_BYTES)) {
        ERR("NET", "handshake: the accepting side does not prove the job key, refused");
        return refuse(fd, EACCES);
    }
    auth_mac(hs->key, AUTH_KEY_BYTES, "tp-connect", hs->nonce_a, hs->nonce_c, reply.mac);
    queue_msg(hs, &reply);
    hs->step = HS_DONE;
    return 0;
}

static int on_confirm(tcp_hs_t *hs, int fd, const tcp_hs_msg_t *m)
{
    if (!auth_check(hs->key, AUTH_KEY_BYTES, "tp-connect", hs->nonce_a, hs->nonce_c, m->mac,
                    AUTH_MAC_BYTES)) {
        ERR("NET", "handshake: node %u does not prove the job key, refused", hs->peer_node);
        return refuse(fd, EACCES);
    }
    hs->step = HS_DONE;
    return 0;
}

static int on_msg(tcp_hs_t *hs, int fd, const tcp_hs_msg_t *m)
{
    static const uint16_t expected[] = {
        [HS_WAIT_HELLO] = TCP_HS_HELLO,
        [HS_WAIT_ACCEPT] = TCP_HS_ACCEPT,
        [HS_WAIT_CONFIRM] = TCP_HS_CONFIRM,
    };

    if (m->type == TCP_HS_REFUSE) {
        ERR("NET", "handshake: the peer refused the connection: %s", strerror((int)m->reason));
        return -EACCES;
    }
    if (m->type != expected[hs->step]) {
        ERR("NET", "handshake: record of type %u out of order", m->type);
        return -EPROTO;
    }
    switch (hs->step) {
    case HS_WAIT_HELLO: return on_hello(hs, fd, m);
    case HS_WAIT_ACCEPT: return on_accept(hs, fd, m);
    default: return on_confirm(hs, fd, m);
    }
}

static int start_hello(tcp_hs_t *hs, int fd)
{
    tcp_hs_msg_t hello = {
        .type = TCP_HS_HELLO, .node = hs->my_node, .conn_id = hs->conn_id, .flags = hs->flags};
    int rc = tcp_sock_connect_done(fd);

    if (rc <= 0)
        return rc;
    memcpy(hello.job, hs->job, AUTH_JOB_BYTES);
    memcpy(hello.nonce, hs->nonce_c, AUTH_NONCE_BYTES);
    queue_msg(hs, &hello);
    hs->step = HS_WAIT_ACCEPT;
    return 1;
}

int tcp_hs_progress(tcp_hs_t *hs, int fd)
{
    tcp_hs_msg_t m;
    int rc;

    if (now_ns() > hs->deadline_ns && hs->step != HS_DONE) {
        ERR("NET", "handshake timed out");
        return -ETIMEDOUT;
    }
    if (hs->step == HS_CONNECTING && (rc = start_hello(hs, fd)) <= 0)
        return rc;
    for (;;) {
        rc = flush_out(hs, fd);
        if (rc <= 0)
            return rc;
        if (hs->step == HS_DONE)
            return 1;
        rc = read_msg(hs, fd, &m);
        if (rc <= 0)
            return rc;
        rc = on_msg(hs, fd, &m);
        if (rc < 0)
            return rc;
    }
}

short tcp_hs_events(const tcp_hs_t *hs)
{
    if (hs->step == HS_CONNECTING || hs->out_off < hs->out_len)
        return POLLOUT;
    return hs->step == HS_DONE ? 0 : POLLIN;
}
