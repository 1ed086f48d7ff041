/*
 * The data stream of a TCP connection: each message is a header (tag, length, optional
 * CRC32C) and its payload, which moves straight between the socket and the caller's buffer.
 * Sends are gathered into one sendmsg(); receives match incoming messages in order.
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "log.h"
#include "transport/crc32c.h"
#include "transport/tcp_conn.h"

/* Enough iovecs to send many small messages in one call. */
#define TCP_IOV_MAX 64

void tcp_msg_init(tp_conn_t *c)
{
    c->free_reqs = NULL;
    for (int i = TCP_MAX_REQS - 1; i >= 0; i--) {
        c->reqs[i].next = c->free_reqs;
        c->free_reqs = &c->reqs[i];
    }
}

static void queue_push(tcp_queue_t *q, tp_req_t *r)
{
    r->next = NULL;
    if (q->tail != NULL)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static tp_req_t *queue_pop(tcp_queue_t *q)
{
    tp_req_t *r = q->head;

    q->head = r->next;
    if (q->head == NULL)
        q->tail = NULL;
    return r;
}

static void req_complete(tp_req_t *r, int status)
{
    r->done = 1;
    r->status = status;
}

void tcp_req_release(tp_req_t *r)
{
    tp_conn_t *c = r->conn;

    r->next = c->free_reqs;
    c->free_reqs = r;
}

void tcp_conn_fail(tp_conn_t *c, int err)
{
    if (c->state == TCP_CONN_FAILED)
        return;
    c->state = TCP_CONN_FAILED;
    c->err = err;
    while (c->sendq.head != NULL)
        req_complete(queue_pop(&c->sendq), err);
    while (c->recvq.head != NULL)
        req_complete(queue_pop(&c->recvq), err);
    /* The peer sees EOF at once instead of waiting for us to close. */
    shutdown(c->fd, SHUT_RDWR);
}

int tcp_msg_post(tp_conn_t *c, int dir, void *buf, size_t len, uint64_t tag, tp_req_t **r_p)
{
    tcp_hdr_t h = {.tag = tag, .len = len};
    tp_req_t *r;

    if (c->state != TCP_CONN_READY)
        return c->state == TCP_CONN_FAILED ? c->err : -ENOTCONN;
    if (c->free_reqs == NULL || (buf == NULL && len != 0))
        return c->free_reqs == NULL ? -EAGAIN : -EINVAL;
    r = c->free_reqs;
    c->free_reqs = r->next;
    *r = (tp_req_t){.conn = c, .buf = buf, .len = len, .tag = tag, .dir = dir};
    if (dir == TCP_DIR_SEND) {
        /* The checksum is taken now: the caller must not change the buffer until done. */
        if (c->checksum) {
            h.flags = TCP_HDR_F_CRC;
            h.crc = crc32c(0, buf, len);
        }
        tcp_hdr_encode(&h, r->hdr);
        queue_push(&c->sendq, r);
    } else {
        queue_push(&c->recvq, r);
    }
    *r_p = r;
    return 0;
}

/* Describes the unsent bytes of the queued sends, headers and payloads in order. */
static int send_gather(const tp_conn_t *c, struct iovec *iov)
{
    int n = 0;

    for (tp_req_t *r = c->sendq.head; r != NULL && n + 2 <= TCP_IOV_MAX; r = r->next) {
        size_t off = r->moved;
        if (off < TCP_HDR_BYTES) {
            iov[n++] = (struct iovec){r->hdr + off, TCP_HDR_BYTES - off};
            off = TCP_HDR_BYTES;
        }
        if (off - TCP_HDR_BYTES < r->len)
            iov[n++] =
                (struct iovec){r->buf + (off - TCP_HDR_BYTES), r->len - (off - TCP_HDR_BYTES)};
    }
    return n;
}

static void send_advance(tp_conn_t *c, size_t n)
{
    while (n > 0) {
        tp_req_t *r = c->sendq.head;
        size_t left = TCP_HDR_BYTES + r->len - r->moved;
        size_t take = n < left ? n : left;

        r->moved += take;
        n -= take;
        if (take == left)
            req_complete(queue_pop(&c->sendq), 0);
    }
}

static int send_progress(tp_conn_t *c)
{
    struct iovec iov[TCP_IOV_MAX];

    while (c->sendq.head != NULL) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)send_gather(c, iov)};
        ssize_t n = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n < 0) {
            int err = errno;
            ERR("NET", "sendmsg() failed: %s", strerror(err));
            return -err;
        }
        send_advance(c, (size_t)n);
    }
    return 0;
}

/* recvmsg() into iov: bytes read, 0 if it would block, or a negative errno (logged). */
static ssize_t recv_iov(tp_conn_t *c, struct iovec *iov, size_t niov)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = niov};

    for (;;) {
        ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT);
        if (n > 0)
            return n;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n == 0) {
            /* A peer closing with nothing pending here is an ordinary end, not an error. */
            if (c->sendq.head == NULL && c->recvq.head == NULL && c->rx_raw_off == 0)
                DBG("NET", "peer closed the connection");
            else
                ERR("NET", "recv() failed: peer closed the connection");
            return -ECONNRESET;
        }
        int err = errno;
        ERR("NET", "recv() failed: %s", strerror(err));
        return -err;
    }
}

static ssize_t recv_some(tp_conn_t *c, void *buf, size_t len)
{
    struct iovec iov = {buf, len};

    return recv_iov(c, &iov, 1);
}

/* 1 once a valid header is in c->rx, 0 if more bytes are needed, or a negative errno. */
static int recv_header(tp_conn_t *c)
{
    while (c->rx_raw_off < TCP_HDR_BYTES) {
        ssize_t n = recv_some(c, c->rx_raw + c->rx_raw_off, TCP_HDR_BYTES - c->rx_raw_off);
        if (n <= 0)
            return (int)n;
        c->rx_raw_off += (size_t)n;
    }
    if (tcp_hdr_decode(c->rx_raw, &c->rx) != 0) {
        ERR("NET", "malformed message header from the peer");
        return -EPROTO;
    }
    c->rx_raw_off = 0;
    c->rx_ready = 1;
    c->rx_matched = 0;
    return 1;
}

static int recv_match(tp_conn_t *c, const tp_req_t *r)
{
    if (c->rx.tag != r->tag || c->rx.len != r->len) {
        ERR("NET", "message tag %#llx len %llu does not match the receive (tag %#llx len %zu)",
            (unsigned long long)c->rx.tag, (unsigned long long)c->rx.len,
            (unsigned long long)r->tag, r->len);
        return -EPROTO;
    }
    c->rx_matched = 1;
    return 0;
}

static int recv_finish(tp_conn_t *c)
{
    tp_req_t *r = queue_pop(&c->recvq);

    c->rx_ready = 0;
    if ((c->rx.flags & TCP_HDR_F_CRC) && crc32c(0, r->buf, r->len) != c->rx.crc) {
        ERR("NET", "checksum mismatch on message tag %#llx len %zu", (unsigned long long)r->tag,
            r->len);
        req_complete(r, -EBADMSG);
        return -EBADMSG;
    }
    req_complete(r, 0);
    return 0;
}

static int recv_progress(tp_conn_t *c)
{
    for (;;) {
        tp_req_t *r;
        int rc;

        if (!c->rx_ready && (rc = recv_header(c)) <= 0)
            return rc;
        r = c->recvq.head;
        if (r == NULL)
            return 0;
        if (!c->rx_matched && (rc = recv_match(c, r)) != 0)
            return rc;
        /* The payload's end and the next header come in one call where they can. */
        while (r->moved < r->len) {
            struct iovec iov[2] = {{r->buf + r->moved, r->len - r->moved},
                                   {c->rx_raw, TCP_HDR_BYTES}};
            ssize_t n = recv_iov(c, iov, 2);
            if (n <= 0)
                return (int)n;
            if ((size_t)n > iov[0].iov_len) {
                c->rx_raw_off = (size_t)n - iov[0].iov_len;
                n = (ssize_t)iov[0].iov_len;
            }
            r->moved += (size_t)n;
        }
        rc = recv_finish(c);
        if (rc != 0)
            return rc;
    }
}

int tcp_msg_progress(tp_conn_t *c)
{
    int rc;

    if (c->state != TCP_CONN_READY)
        return c->state == TCP_CONN_FAILED ? c->err : 0;
    rc = send_progress(c);
    if (rc == 0)
        rc = recv_progress(c);
    if (rc != 0)
        tcp_conn_fail(c, rc);
    return rc;
}

short tcp_msg_events(const tp_conn_t *c)
{
    short ev = 0;

    /* Without a receive to fill, only the next header is read: a stalled peer costs nothing. */
    if (!c->rx_ready || c->recvq.head != NULL)
        ev |= POLLIN;
    if (c->sendq.head != NULL)
        ev |= POLLOUT;
    return ev;
}
